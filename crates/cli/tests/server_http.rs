//! End-to-end tests of `bib serve`'s HTTP API on the real binary, with a plain TCP client.
//! The knowledge base is written directly with fake 16-d vectors and the server runs with
//! `--no-model`, so these tests need neither the model nor Python.

mod server_support;

use bib_store::conformance::{sample_change, sample_change_meta};
use bib_store::{SqliteStore, Store};
use serde_json::{json, Value};
use server_support::*;

fn kb(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kb.sqlite");
    let store = SqliteStore::open(&path).unwrap();
    store
        .apply_document(&sample_change_meta(
            "guides/restore.md",
            &[
                "Packages are restored from the local cache first, then from the feed.",
                "Clear the cache with the clear command.",
            ],
            json!({"title": "Restore", "tags": ["nuget"]}),
        ))
        .unwrap();
    store
        .apply_document(&sample_change(
            "guides/publish.md",
            &["Publish a package with an API key."],
        ))
        .unwrap();
    path
}

fn doc_paths(store: &std::path::Path) -> Vec<String> {
    SqliteStore::open(store)
        .unwrap()
        .documents()
        .unwrap()
        .into_iter()
        .map(|d| d.path)
        .collect()
}

fn err_code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[test]
fn reads_answer_json_and_bad_arguments_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let store = kb(dir.path());
    let s = serve(&store, None, &["--no-model", "--body-limit", "4000"]);

    let (st, h) = get(s.addr, "/healthz");
    assert_eq!(st, 200, "{h}");
    assert_eq!(h["status"], "ok");
    assert_eq!(h["chunks"], 3);
    assert_eq!(h["mutations"], false);

    let (st, api) = get(s.addr, "/openapi.json");
    assert_eq!(st, 200);
    assert_eq!(api["openapi"], "3.1.0");
    for p in [
        "/ask",
        "/pack",
        "/eval",
        "/docs",
        "/docs/{doc}",
        "/runs",
        "/healthz",
        "/chunks",
    ] {
        assert!(api["paths"].get(p).is_some(), "openapi lacks {p}");
    }

    // BM25 ask (no model): the restore page first, with token counts.
    let (st, r) = post(
        s.addr,
        "/ask",
        &json!({"query": "restored from the local cache", "top_k": 2}),
        &[],
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["mode"], "bm25");
    assert_eq!(r["results"][0]["path"], "guides/restore.md");
    assert!(r["tokens_before"].as_u64().unwrap() > 0);
    // Filters apply before the cut.
    let (st, r) = post(
        s.addr,
        "/ask",
        &json!({"query": "package", "filters": {"tags": "nuget"}}),
        &[],
    );
    assert_eq!(st, 200, "{r}");
    assert!(
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["path"] == "guides/restore.md"),
        "{r}"
    );

    // Wrong type, unknown field, missing field, bad JSON, out of range.
    let (st, e) = post(s.addr, "/ask", &json!({"query": "x", "top_k": "five"}), &[]);
    assert_eq!((st, err_code(&e)), (400, "invalid_argument"), "{e}");
    assert_eq!(e["error"]["field"], "top_k");
    assert!(e["error"]["message"].as_str().unwrap().contains("top_k"));
    let (st, e) = post(s.addr, "/ask", &json!({"query": "x", "colour": 1}), &[]);
    assert_eq!(
        (st, e["error"]["field"].as_str()),
        (400, Some("colour")),
        "{e}"
    );
    let (st, e) = post(s.addr, "/ask", &json!({"top_k": 1}), &[]);
    assert_eq!(
        (st, e["error"]["field"].as_str()),
        (400, Some("query")),
        "{e}"
    );
    let (st, e) = http(s.addr, "POST", "/ask", &[], Some(b"{not json"));
    assert_eq!((st, err_code(&e)), (400, "invalid_argument"), "{e}");
    let (st, e) = post(s.addr, "/ask", &json!({"query": "x", "top_k": 0}), &[]);
    assert_eq!(
        (st, e["error"]["field"].as_str()),
        (400, Some("top_k")),
        "{e}"
    );
    let (st, e) = post(s.addr, "/ask", &json!({"query": "x", "mode": "fuzzy"}), &[]);
    assert_eq!(
        (st, e["error"]["field"].as_str()),
        (400, Some("mode")),
        "{e}"
    );

    // Vector search and trimming need the model: a clear 501.
    let (st, e) = post(
        s.addr,
        "/ask",
        &json!({"query": "x", "mode": "vector"}),
        &[],
    );
    assert_eq!((st, err_code(&e)), (501, "not_available"), "{e}");
    let (st, e) = post(s.addr, "/eval", &json!({"questions": ["x"]}), &[]);
    assert_eq!((st, err_code(&e)), (501, "not_available"), "{e}");

    // Documents and runs.
    let node = SqliteStore::open(&store)
        .unwrap()
        .documents()
        .unwrap()
        .into_iter()
        .find(|d| d.path == "guides/restore.md")
        .unwrap()
        .node_id;
    let (st, d) = get(s.addr, &format!("/docs/{node}"));
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["path"], "guides/restore.md");
    assert_eq!(d["chunks"].as_array().unwrap().len(), 2);
    let (st, e) = get(s.addr, "/docs/987654");
    assert_eq!((st, err_code(&e)), (404, "not_found"));
    // Not a number: a path (`bib get`'s lookup). These documents were written without their
    // text, which the answer says; an unknown one names the closest paths.
    let (st, e) = get(s.addr, "/docs/abc");
    assert_eq!((st, err_code(&e)), (404, "not_found"), "{e}");
    let (st, e) = get(s.addr, "/docs/guides/restor.md?from=1");
    assert_eq!((st, err_code(&e)), (404, "not_found"), "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("guides/restore.md"),
        "{e}"
    );
    let (st, e) = get(s.addr, "/docs/guides/restore.md?from=1&to=2");
    assert_eq!((st, err_code(&e)), (501, "not_available"), "{e}");
    let (st, e) = get(s.addr, "/docs/guides/restore.md?from=one");
    assert_eq!(
        (st, e["error"]["field"].as_str()),
        (400, Some("from")),
        "{e}"
    );
    let (st, runs) = get(s.addr, "/runs?limit=5");
    assert_eq!(st, 200);
    assert!(runs["runs"].is_array());
    let (st, e) = get(s.addr, "/runs?limit=zero");
    assert_eq!((st, e["error"]["field"].as_str()), (400, Some("limit")));
    let (st, e) = get(s.addr, "/no/such/route");
    assert_eq!((st, err_code(&e)), (404, "not_found"));

    // Pack stays within its budget.
    let msgs: Vec<Value> = (0..30)
        .map(|i| json!({"role": "user", "content": format!("line {i} about the staging database and its password rotation")}))
        .chain([json!({"role": "user", "content": "what about line 4?"})])
        .collect();
    let (st, p) = post(
        s.addr,
        "/pack",
        &json!({"messages": msgs, "budget": 80}),
        &[],
    );
    assert_eq!(st, 200, "{p}");
    assert!(p["stats"]["output_tokens"].as_u64().unwrap() <= 80, "{p}");

    // Body over the limit: 413 with the JSON error shape.
    let big = json!({"query": "x".repeat(5000)});
    let (st, e) = post(s.addr, "/ask", &big, &[]);
    assert_eq!((st, err_code(&e)), (413, "payload_too_large"), "{e}");
}

#[test]
fn writes_need_the_token_and_refusals_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = kb(dir.path());
    let before = doc_paths(&store);
    let s = serve(&store, Some(TOKEN), &["--no-model"]);
    let doc = json!({"path": "public/notes/new.md", "content": "---\ntitle: New\n---\n# New\n\nFresh text.\n"});

    let (st, e) = post(s.addr, "/docs", &doc, &[]);
    assert_eq!((st, err_code(&e)), (401, "unauthorized"), "{e}");
    let (st, e) = post(
        s.addr,
        "/docs",
        &doc,
        &[("Authorization", "Bearer wrong-token-wrong-token")],
    );
    assert_eq!((st, err_code(&e)), (401, "unauthorized"), "{e}");
    // A token in the body does not replace the header over HTTP's register endpoint.
    let mut with_arg = doc.clone();
    with_arg["token"] = json!("wrong");
    let (st, _) = post(s.addr, "/docs", &with_arg, &[]);
    assert_eq!(st, 401);
    let (st, e) = post(s.addr, "/chunks", &json!({"chunks": []}), &[]);
    assert_eq!((st, err_code(&e)), (401, "unauthorized"), "{e}");
    assert_eq!(
        doc_paths(&store),
        before,
        "a refused write changed the store"
    );

    let auth = format!("Bearer {TOKEN}");
    let hdr = [("Authorization", auth.as_str())];
    let (st, r) = post(s.addr, "/docs", &doc, &hdr);
    assert_eq!(st, 201, "{r}");
    assert_eq!(r["created"], true);
    assert_eq!(r["path"], "notes/new.md", "public/ prefix not stripped");
    assert_eq!(r["title"], "New");
    let node = r["node_id"].as_i64().unwrap();
    let (st, r2) = post(s.addr, "/docs", &doc, &hdr);
    assert_eq!(
        (st, r2["created"].as_bool(), r2["node_id"].as_i64()),
        (200, Some(false), Some(node))
    );
    assert!(doc_paths(&store).contains(&"notes/new.md".to_string()));

    // front_matter + body form; both forms at once is a named error.
    let (st, r) = post(
        s.addr,
        "/docs",
        &json!({"path": "notes/fm.md", "front_matter": {"title": "FM", "tags": ["a"]}, "body": "text"}),
        &hdr,
    );
    assert_eq!((st, r["title"].as_str()), (201, Some("FM")), "{r}");
    let (st, e) = post(
        s.addr,
        "/docs",
        &json!({"path": "x.md", "content": "a", "body": "b"}),
        &hdr,
    );
    assert_eq!(
        (st, e["error"]["field"].as_str()),
        (400, Some("content")),
        "{e}"
    );
    let (st, e) = post(
        s.addr,
        "/docs",
        &json!({"path": "../etc/passwd", "content": "a"}),
        &hdr,
    );
    assert_eq!(
        (st, e["error"]["field"].as_str()),
        (400, Some("path")),
        "{e}"
    );
    let (st, e) = post(s.addr, "/docs", &json!({"path": 5, "content": "a"}), &hdr);
    assert_eq!(
        (st, e["error"]["field"].as_str()),
        (400, Some("path")),
        "{e}"
    );

    // Indexing needs the model (not loaded here) — but a prune-only call does not.
    let (st, e) = post(
        s.addr,
        "/chunks",
        &json!({"chunks": [{"node_id": node, "chunk_index": 0, "content": "c"}]}),
        &hdr,
    );
    assert_eq!((st, err_code(&e)), (501, "not_available"), "{e}");
    let restore_node = SqliteStore::open(&store)
        .unwrap()
        .documents()
        .unwrap()
        .into_iter()
        .find(|d| d.path == "guides/restore.md")
        .unwrap()
        .node_id;
    let (st, m) = post(
        s.addr,
        "/chunks",
        &json!({"prune": [{"node_id": restore_node, "keep_count": 1}]}),
        &hdr,
    );
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["chunks_pruned"], 1, "{m}");
    let (_, d) = get(s.addr, &format!("/docs/{restore_node}"));
    assert_eq!(d["chunks"].as_array().unwrap().len(), 1);
}

#[test]
fn a_server_without_token_refuses_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = kb(dir.path());
    let s = serve(&store, None, &["--no-model"]);
    let (st, e) = post(
        s.addr,
        "/docs",
        &json!({"path": "a.md", "content": "# A\n"}),
        &[("Authorization", "Bearer anything-anything-anything")],
    );
    assert_eq!((st, err_code(&e)), (401, "unauthorized"));
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("BIB_TOKEN"),
        "{e}"
    );
}

#[test]
fn a_public_bind_needs_a_token_for_everything() {
    let dir = tempfile::tempdir().unwrap();
    let store = kb(dir.path());
    let out = bib()
        .args(["serve", "--no-model", "--addr", "0.0.0.0:0", "--store"])
        .arg(&store)
        .env_remove("BIB_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("non-loopback") && err.contains("BIB_TOKEN"),
        "{err}"
    );

    let s = serve(&store, Some(TOKEN), &["--no-model", "--addr", "0.0.0.0:0"]);
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], s.addr.port()));
    let (st, e) = post(local, "/ask", &json!({"query": "cache"}), &[]);
    assert_eq!((st, err_code(&e)), (401, "unauthorized"), "{e}");
    let (st, _) = get(local, "/openapi.json");
    assert_eq!(st, 401);
    let auth = format!("Bearer {TOKEN}");
    let (st, r) = post(
        local,
        "/ask",
        &json!({"query": "cache"}),
        &[("Authorization", auth.as_str())],
    );
    assert_eq!(st, 200, "{r}");
    let (st, _) = get(local, "/healthz");
    assert_eq!(st, 200, "liveness stays open");
}
