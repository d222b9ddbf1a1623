//! `bib migrate --from kb.sqlite --to postgres://…` on the real binary: everything arrives
//! (documents, chunks, vectors, runs, query log with translated chunk ids), the copy ranks
//! like the original, and a non-empty target is refused.
//!
//! Needs `BIB_TEST_PG_URL`; fails without it unless `BIB_SKIP_PG_TESTS=1`.

use bib_store::RunLog;
use std::process::Command;

use bib_store::conformance::sample_change_meta;
use bib_store::{Filter, QueryLogEntry, RunStatus, SqliteStore, Store};
use bib_store_pg::testing::{admin_exec, fresh_schema, test_url, with_param};
use bib_store_pg::PgStore;
use serde_json::json;

/// Drops the test schema even when an assertion fails.
struct DropSchema(String, String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        let _ = admin_exec(
            &self.0,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.1),
        );
    }
}

fn bib(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bib"))
        .args(args)
        .env_remove("BIB_STORE")
        .output()
        .expect("run bib")
}

fn build_sqlite_kb(path: &std::path::Path) -> SqliteStore {
    let s = SqliteStore::open(path).unwrap();
    s.apply_document(&sample_change_meta(
        "guides/install.md",
        &[
            "Install the NuGet CLI. The CLI installs packages.",
            "Packages go to the global packages folder.",
        ],
        json!({"app": "core", "tags": ["cli"]}),
    ))
    .unwrap();
    s.apply_document(&sample_change_meta(
        "api/search.md",
        &[
            "The search API returns package metadata.",
            "Rate limits apply.",
        ],
        json!({"app": "server"}),
    ))
    .unwrap();
    s.apply_document(&sample_change_meta("empty.md", &[], json!(null)))
        .unwrap();
    let r = s.begin_run(&json!({"root": "wiki"})).unwrap();
    s.finish_run(
        r,
        RunStatus::Completed,
        &json!({"root": "wiki", "ok": true}),
    )
    .unwrap();
    let hits = s.bm25_search("packages", 3, &Filter::none()).unwrap();
    s.log_query(&QueryLogEntry {
        id: 0,
        at_ms: 1_700_000_000_000,
        query: "packages".into(),
        mode: "bm25".into(),
        chunk_ids: hits.iter().map(|h| h.id).collect(),
        scores: hits.iter().map(|h| h.score).collect(),
        tokens_before: 10,
        tokens_in_context: 5,
        extra: json!({"k": 1}),
    })
    .unwrap();
    s
}

#[test]
fn migrate_sqlite_to_postgres() {
    let Some(url) = test_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let kb = dir.path().join("kb.sqlite");
    let lite = build_sqlite_kb(&kb);
    let schema = fresh_schema("migrate");
    let _cleanup = DropSchema(url.clone(), schema.clone());
    let to = with_param(&url, "schema", &schema);

    let out = bib(&[
        "migrate",
        "--from",
        kb.to_str().unwrap(),
        "--to",
        &to,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "bib migrate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["documents"], 3);
    assert_eq!(summary["chunks"], 4);
    assert_eq!(summary["runs"], 1);
    assert_eq!(summary["queries"], 1);
    assert!(
        !summary["to"].as_str().unwrap().contains(":bib@"),
        "password shown: {summary}"
    );

    let pg = PgStore::connect(&to).unwrap();
    let strip = |v: Vec<bib_store::DocRecord>| {
        v.into_iter()
            .map(|mut d| {
                d.node_id = 0;
                d
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        strip(lite.documents().unwrap()),
        strip(pg.documents().unwrap())
    );
    for d in lite.documents().unwrap() {
        let a = lite.document_chunks(&d.path).unwrap();
        let b = pg.document_chunks(&d.path).unwrap();
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(
                (&x.content, &x.content_hash, &x.heading_path),
                (&y.content, &y.content_hash, &y.heading_path)
            );
            assert_eq!(
                lite.get_vectors(&[x.id]).unwrap()[0].1,
                pg.get_vectors(&[y.id]).unwrap()[0].1
            );
        }
    }
    let key = |s: &dyn Store, q: &str| {
        let hits = s.bm25_search(q, 10, &Filter::none()).unwrap();
        let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
        s.get_chunks(&ids)
            .unwrap()
            .into_iter()
            .zip(&hits)
            .map(|(c, h)| (c.path, c.chunk_index, (h.score * 1e9).round() as i64))
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&lite, "packages CLI"), key(&pg, "packages CLI"));
    let runs = pg.runs(10).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Completed);
    assert_eq!(
        runs[0].started_at_ms,
        lite.runs(1).unwrap()[0].started_at_ms
    );
    // The logged chunk ids point at the same (path, chunk_index) in the copy.
    let (ql, qp) = (
        lite.recent_queries(1).unwrap().remove(0),
        pg.recent_queries(1).unwrap().remove(0),
    );
    assert_eq!(ql.chunk_ids.len(), qp.chunk_ids.len());
    let pos = |s: &dyn Store, ids: &[i64]| {
        s.get_chunks(ids)
            .unwrap()
            .into_iter()
            .map(|c| (c.path, c.chunk_index))
            .collect::<Vec<_>>()
    };
    assert_eq!(pos(&lite, &ql.chunk_ids), pos(&pg, &qp.chunk_ids));
    assert_eq!((ql.at_ms, ql.extra), (qp.at_ms, qp.extra));
    drop(pg);

    // `store = "postgres://…"` at the top of bib.toml selects the copy for ask and runs.
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("bib.toml"), format!("store = {to:?}\n")).unwrap();
    let in_cwd = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_bib"))
            .args(args)
            .current_dir(cwd.path())
            .env_remove("BIB_STORE")
            .env_remove("BIB_CONFIG")
            .output()
            .expect("run bib")
    };
    let out = in_cwd(&["runs", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    let out = in_cwd(&["ask", "packages CLI", "--mode", "bm25", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<String> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = key(&lite, "packages CLI")
        .into_iter()
        .take(got.len())
        .map(|k| k.0)
        .collect();
    assert_eq!(got, want, "same BM25 ranking through bib.toml: {v:#}");

    // A second migration into the same (now full) target is refused.
    let again = bib(&["migrate", "--from", kb.to_str().unwrap(), "--to", &to]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("already holds 3 documents"), "{err}");
}

#[test]
fn migrate_reports_a_missing_source() {
    let out = bib(&[
        "migrate",
        "--from",
        "/nonexistent/kb.sqlite",
        "--to",
        "postgres://bib@127.0.0.1:1/bib",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no knowledge base at /nonexistent/kb.sqlite"),
        "{err}"
    );
}
