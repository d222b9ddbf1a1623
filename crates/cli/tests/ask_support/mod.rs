//! Shared harness of the `bib ask` end-to-end tests: the real binary run in a directory with
//! the configuration variables that would change its answers cleared.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Variables that would change an ask's behaviour; every test starts without them: every
/// settings variable (from the one list of keys) and a few more.
pub fn env_cleared() -> Vec<&'static str> {
    let mut vars: Vec<&'static str> = bib_app::settings::KEYS
        .iter()
        .flat_map(|k| k.env.map(|(var, _)| var).into_iter().chain(k.env_fallback))
        .collect();
    vars.extend(["BIB_CONFIG", "NO_COLOR", "RUST_BACKTRACE"]);
    vars
}

pub fn cmd(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bib"));
    c.current_dir(cwd).args(args);
    for k in env_cleared() {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

pub fn bib(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    cmd(cwd, args, env).output().expect("bib runs")
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `bib ingest <wiki> --store <store> [extra…]` from `cwd`, which must succeed.
pub fn ingest(cwd: &Path, wiki: &Path, store: &Path, extra: &[&str]) {
    let mut args = vec![
        "ingest",
        wiki.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = bib(cwd, &args, &[]);
    assert!(o.status.success(), "ingest failed: {}", text(&o));
}

pub fn model_available(cwd: &Path) -> bool {
    let o = bib(cwd, &["model", "list"], &[]);
    if String::from_utf8_lossy(&o.stdout).contains("use-m3") {
        return true;
    }
    if std::env::var("BIB_SKIP_MODEL_TESTS").as_deref() == Ok("1") {
        eprintln!("skipping: default model not installed and BIB_SKIP_MODEL_TESTS=1");
        return false;
    }
    panic!("the default embedding model is not installed: run `bib model install` (or set BIB_SKIP_MODEL_TESTS=1)");
}

pub fn write(root: &Path, rel: &str, body: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

/// A one-shot fake OpenAI-compatible chat endpoint on 127.0.0.1: `respond` gets the request
/// body and returns the whole HTTP response to send. Returns the base URL (`…/v1`) and a
/// handle that yields the request (head and body) once served.
pub fn fake_chat(
    respond: impl FnOnce(&str) -> String + Send + 'static,
) -> (String, std::thread::JoinHandle<String>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = Vec::new();
        let mut tmp = [0u8; 8192];
        let mut body_at = 0;
        loop {
            let n = s.read(&mut tmp).unwrap();
            buf.extend_from_slice(&tmp[..n]);
            let t = String::from_utf8_lossy(&buf).to_string();
            if let Some(end) = t.find("\r\n\r\n") {
                body_at = end + 4;
                let len = t[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    break;
                }
            }
            if n == 0 {
                break;
            }
        }
        let req = String::from_utf8_lossy(&buf).to_string();
        let resp = respond(&String::from_utf8_lossy(&buf[body_at.min(buf.len())..]));
        s.write_all(resp.as_bytes()).unwrap();
        req
    });
    (url, h)
}

/// An HTTP response of `status` (`200 OK`) with a body of `content_type`.
pub fn http_response(status: &str, content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
