//! Shared helpers of the server end-to-end tests: the real `bib` binary, a tiny wiki, a
//! `bib serve` child process, and a minimal HTTP/1.1 client over `std::net::TcpStream`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const TOKEN: &str = "e2e-token-0123456789abcdef";

pub fn bib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bib"))
}

/// Whether the default model is installed; when not: skip if `BIB_SKIP_MODEL_TESTS=1`, else
/// fail with the fix.
pub fn model_available() -> bool {
    let out = bib()
        .args(["model", "list"])
        .output()
        .expect("run bib model list");
    if String::from_utf8_lossy(&out.stdout).contains("use-m3") {
        return true;
    }
    if std::env::var("BIB_SKIP_MODEL_TESTS").as_deref() == Ok("1") {
        eprintln!("skipping: default model not installed and BIB_SKIP_MODEL_TESTS=1");
        return false;
    }
    panic!(
        "the default embedding model is not installed: run `bib model install` \
         (or set BIB_SKIP_MODEL_TESTS=1 to skip the tests that need it)"
    );
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The Python of the test virtualenv (`BIB_TEST_VENV`, else `<root>/.venv-test`) with the
/// `mcp` package. Missing: skip when `BIB_SKIP_PY_TESTS=1`, else fail with the fix.
pub fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("BIB_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv-test"));
    let py = venv.join("bin").join("python");
    let ok = py.is_file()
        && Command::new(&py)
            .args(["-c", "import mcp.client.stdio, mcp.client.streamable_http"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if ok {
        return Some(py);
    }
    if std::env::var("BIB_SKIP_PY_TESTS").as_deref() == Ok("1") {
        eprintln!(
            "skipping: no Python MCP client venv at {} and BIB_SKIP_PY_TESTS=1",
            venv.display()
        );
        return None;
    }
    panic!(
        "the Python MCP client is not installed at {}: run `scripts/python-test-env.sh` \
         (or set BIB_SKIP_PY_TESTS=1 to skip the Python client tests)",
        venv.display()
    );
}

pub fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A tiny bilingual wiki: the question "how are packages restored from the local cache"
/// belongs to `guides/restore.md`.
pub fn tiny_wiki(root: &Path) {
    write(
        root,
        "guides/restore.md",
        "---\ntitle: Restoring packages\ntags: [nuget, restore]\n---\n# Restoring packages\n\n\
         ## How restore works\n\nPackages are restored from the local cache first. When a package \
         is missing from the cache, the client downloads it from the configured feed. The cache \
         lives in the user profile.\n\n## Clearing the cache\n\nRun the clear command to empty the \
         local cache. The next restore downloads every package again.\n",
    );
    write(
        root,
        "guides/publish.md",
        "---\ntitle: Publishing packages\ntags: [nuget, publish]\n---\n# Publishing packages\n\n\
         To publish a package you need an API key from the gallery. Push the package file with \
         the key. Symbols can be pushed to the symbol server.\n",
    );
    write(
        root,
        "es/instalacion.md",
        "---\ntitle: Instalación\ntags: [es]\n---\n# Instalación\n\nDescarga el instalador y \
         ejecútalo. La configuración se guarda en el directorio del usuario.\n",
    );
}

pub const QUESTION: &str = "how are packages restored from the local cache";
pub const EXPECT_PATH: &str = "guides/restore.md";

/// Ingest `wiki` into `store` with the real binary (needs the model).
pub fn ingest(wiki: &Path, store: &Path) {
    let out = bib()
        .arg("ingest")
        .arg(wiki)
        .arg("--store")
        .arg(store)
        .output()
        .expect("run bib ingest");
    assert!(
        out.status.success(),
        "bib ingest failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running `bib serve`, killed on drop.
pub struct Served {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `bib serve --addr 127.0.0.1:0 --store <store> <extra>` with `BIB_TOKEN` set when
/// `token` is given; wait for its `listening on` line.
pub fn serve(store: &Path, token: Option<&str>, extra: &[&str]) -> Served {
    let mut cmd = bib();
    cmd.arg("serve").arg("--store").arg(store);
    if !extra.contains(&"--addr") {
        cmd.args(["--addr", "127.0.0.1:0"]);
    }
    cmd.args(extra);
    cmd.env_remove("BIB_TOKEN").env("BIB_LOG", "warn");
    if let Some(t) = token {
        cmd.env("BIB_TOKEN", t);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn bib serve");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let Some(addr) = line.trim().strip_prefix("listening on http://") else {
        let status = child.wait().unwrap();
        panic!("bib serve did not start ({status}): {line:?}");
    };
    let addr: SocketAddr = addr.parse().unwrap();
    Served { child, addr }
}

/// One HTTP/1.1 request (`Connection: close`); returns status and body parsed as JSON
/// (`Value::Null` when the body is not JSON).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> (u16, Value) {
    let (status, _, body) = http_raw(addr, method, path, headers, body);
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

pub fn http_raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let body = body.unwrap_or(b"");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // A server may answer (413) before reading the whole body; ignore a reset on write.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest.as_bytes())
    } else {
        rest.as_bytes().to_vec()
    };
    (status, head.to_string(), body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(pos) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&b[..pos]).unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = pos + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
    out
}

pub fn post(addr: SocketAddr, path: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
    http(
        addr,
        "POST",
        path,
        headers,
        Some(body.to_string().as_bytes()),
    )
}

pub fn get(addr: SocketAddr, path: &str) -> (u16, Value) {
    http(addr, "GET", path, &[], None)
}

/// One JSON-RPC message POSTed to `/mcp` (with the token, in `session` when given): status,
/// the session id the server gave, and the messages of its SSE answer.
pub fn mcp_http(
    addr: SocketAddr,
    session: Option<&str>,
    msg: &Value,
) -> (u16, Option<String>, Vec<Value>) {
    let auth = format!("Bearer {TOKEN}");
    let mut h = vec![
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", auth.as_str()),
    ];
    if let Some(id) = session {
        h.push(("Mcp-Session-Id", id));
    }
    let (st, head, body) = http_raw(addr, "POST", "/mcp", &h, Some(msg.to_string().as_bytes()));
    let sid = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("mcp-session-id")
            .then(|| v.trim().to_string())
    });
    let msgs = String::from_utf8_lossy(&body)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    (st, sid, msgs)
}

/// `tools/call` of `name` with `id` in session `sid`: its JSON-RPC result and how long the
/// answer took.
pub fn mcp_http_tool(
    addr: SocketAddr,
    sid: &str,
    id: u64,
    name: &str,
    args: Value,
) -> (Value, Duration) {
    let call = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": args}
    });
    let t = Instant::now();
    let (st, _, msgs) = mcp_http(addr, Some(sid), &call);
    let took = t.elapsed();
    assert_eq!(st, 200, "{name}: {msgs:?}");
    let answer = msgs
        .into_iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("{name}: no answer"));
    (answer["result"].clone(), took)
}

/// An initialized MCP session over streamable HTTP: its id.
pub fn mcp_session(addr: SocketAddr) -> String {
    let init = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bib-e2e", "version": "0"}
        }
    });
    let (st, sid, msgs) = mcp_http(addr, None, &init);
    assert_eq!(st, 200, "{msgs:?}");
    let sid = sid.expect("a session id");
    let (st, _, _) = mcp_http(
        addr,
        Some(&sid),
        &serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(st, 202);
    sid
}
