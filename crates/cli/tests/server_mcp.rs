//! The official Python MCP SDK (PyPI `mcp`) as a real client of `bib mcp` (stdio) and of
//! `bib serve`'s streamable HTTP endpoint, on a wiki ingested with the real binary and model.
//! The client script is `tests/python/mcp_client_test.py`; the virtualenv comes from
//! `scripts/python-test-env.sh` (missing → this test fails with that hint, unless
//! `BIB_SKIP_PY_TESTS=1`).

mod server_support;

use std::path::Path;
use std::process::Command;

use bib_store::{SqliteStore, Store};
use serde_json::Value;
use server_support::*;

fn run_client(py: &Path, args: &[&str]) -> Value {
    let script = workspace_root().join("tests/python/mcp_client_test.py");
    let out = Command::new(py)
        .arg(&script)
        .args(args)
        .args([
            "--token",
            TOKEN,
            "--question",
            QUESTION,
            "--expect-path",
            EXPECT_PATH,
        ])
        .output()
        .expect("run the Python MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "Python MCP client failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("bad summary {last:?}: {e}"))
}

fn check_store(store: &Path, summary: &Value) {
    let paths: Vec<String> = SqliteStore::open(store)
        .unwrap()
        .documents()
        .unwrap()
        .into_iter()
        .map(|d| d.path)
        .collect();
    let added = summary["registered_path"].as_str().unwrap();
    let refused = summary["refused_path"].as_str().unwrap();
    assert!(
        paths.iter().any(|p| p == added),
        "{added} missing from {paths:?}"
    );
    assert!(
        !paths.iter().any(|p| p == refused),
        "refused {refused} was written"
    );
    let s = SqliteStore::open(store).unwrap();
    let chunks = s.document_chunks(added).unwrap();
    assert_eq!(chunks.len(), 2, "prune did not leave 2 chunks");
    assert!(s.audit().unwrap().orphan_chunks == 0);
}

#[test]
fn python_mcp_client_over_stdio_and_streamable_http() {
    let Some(py) = venv_python() else { return };
    if !model_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let wiki = dir.path().join("wiki");
    tiny_wiki(&wiki);
    let store = dir.path().join("kb.sqlite");
    ingest(&wiki, &store);

    let summary = run_client(
        &py,
        &[
            "stdio",
            "--bib",
            env!("CARGO_BIN_EXE_bib"),
            "--store",
            store.to_str().unwrap(),
        ],
    );
    assert_eq!(
        summary["server"].as_str().unwrap().split(' ').next(),
        Some("bibliotecario")
    );
    check_store(&store, &summary);

    let served = serve(&store, Some(TOKEN), &[]);
    let url = format!("http://{}/mcp", served.addr);
    let summary = run_client(&py, &["http", "--url", &url]);
    check_store(&store, &summary);
    drop(served);
}
