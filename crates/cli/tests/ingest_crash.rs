//! Crash safety, for real: SIGKILL the `bib ingest` binary at several moments of a real run
//! (real model, real SQLite file) and check that
//! 1. after every kill each document is entirely its old version or entirely its new one
//!    (never half), and the store's audit is coherent;
//! 2. after a final uninterrupted run the store equals a clean ingest of the new wiki.

mod ingest_support;

use bib_store::RunLog;
use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use bib_store::{RunStatus, SqliteStore, Store};
use ingest_support::*;

/// Version 1 of the wiki.
fn v1(root: &Path) {
    for i in 0..8 {
        write(
            root,
            &format!("p{i}.md"),
            &page(&format!("page{i}"), 2 + i % 3),
        );
    }
    write(root, "gone.md", &page("gone", 2));
    write(root, "shrinks.md", &page("shrinks", 5));
}

/// Version 2: edits, growth, a shrink, a deletion and additions.
fn v2(root: &Path) {
    for i in 0..8 {
        let mut t = page(&format!("page{i}"), 2 + (i + 1) % 4);
        if i % 2 == 0 {
            t = t.replace("explains how", "now describes how");
        }
        write(root, &format!("p{i}.md"), &t);
    }
    std::fs::remove_file(root.join("gone.md")).unwrap();
    write(root, "shrinks.md", &page("shrinks", 1));
    for i in 0..4 {
        write(
            root,
            &format!("new/n{i}.md"),
            &page(&format!("fresh{i}"), 2),
        );
    }
}

type Versions = HashMap<String, DocSnap>;

fn by_path(s: Vec<DocSnap>) -> Versions {
    s.into_iter().map(|d| (d.0.clone(), d)).collect()
}

/// Every stored document is exactly its v1 or its v2 state; nothing half-written.
fn check_all_or_nothing(store: &Path, old: &Versions, new: &Versions, when: &str) {
    let s = SqliteStore::open(store).unwrap();
    let audit = s.audit().unwrap();
    assert!(audit.coherent, "{when}: audit incoherent: {audit:?}");
    drop(s);
    for doc in snapshot(store) {
        let is_old = old.get(&doc.0) == Some(&doc);
        let is_new = new.get(&doc.0) == Some(&doc);
        assert!(
            is_old || is_new,
            "{when}: document {} is neither its old nor its new version (half-written?)",
            doc.0
        );
    }
}

#[test]
fn sigkill_at_any_moment_then_rerun_converges() {
    if !model_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let wiki = t.path().join("wiki");
    // References: clean ingests of v1 and of v2.
    v1(&wiki);
    let clean_v1 = store_path(&t, "clean1");
    ingest_ok(&wiki, &clean_v1);
    let old = by_path(snapshot(&clean_v1));
    let wiki2 = t.path().join("wiki2");
    v1(&wiki2);
    v2(&wiki2);
    let clean_v2 = store_path(&t, "clean2");
    ingest_ok(&wiki2, &clean_v2);
    // How long an uninterrupted v1 → v2 run takes: the kills are spread over that time.
    let probe = store_path(&t, "probe");
    std::fs::create_dir_all(probe.parent().unwrap()).unwrap();
    std::fs::copy(&clean_v1, &probe).unwrap();
    let started = Instant::now();
    let out = bib()
        .arg("ingest")
        .arg(&wiki2)
        .arg("--store")
        .arg(&probe)
        .args(["--json", "--window-chunks", "3"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let full = started.elapsed();
    let new = by_path(snapshot(&clean_v2));
    assert_ne!(old, new);

    // The store under test starts as v1; the wiki becomes v2; runs get killed.
    let store = store_path(&t, "crash");
    std::fs::create_dir_all(store.parent().unwrap()).unwrap();
    std::fs::copy(&clean_v1, &store).unwrap();
    v2(&wiki);
    let mut killed_mid_run = 0;
    let mut mixed_states = 0;
    for frac in [0.3, 0.45, 0.6, 0.7, 0.8, 0.9, 0.95] {
        // Each kill starts from v1 again: a run resumed from a half-advanced store has less to
        // embed and would finish before the later fractions of `full`, so no kill would land.
        for suffix in ["", "-wal", "-shm"] {
            let mut p = store.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
        std::fs::copy(&clean_v1, &store).unwrap();
        let mut child = bib()
            .arg("ingest")
            .arg(&wiki)
            .arg("--store")
            .arg(&store)
            .args(["--json", "--window-chunks", "3"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(full.mul_f64(frac));
        let running = child.try_wait().unwrap().is_none();
        child.kill().ok(); // SIGKILL on Unix
        child.wait().unwrap();
        if running {
            killed_mid_run += 1;
        }
        check_all_or_nothing(&store, &old, &new, &format!("after SIGKILL at {frac:.2}"));
        let now = by_path(snapshot(&store));
        if now != old && now != new {
            mixed_states += 1;
        }
    }
    eprintln!("kills during a run: {killed_mid_run}; kills that left a mix of old and new documents: {mixed_states}");
    assert!(
        killed_mid_run >= 3,
        "only {killed_mid_run} kills landed during a run; the test did not exercise crashes"
    );
    assert!(
        mixed_states >= 1,
        "no kill landed between two document commits; the test did not exercise Phase B crashes"
    );
    // A final uninterrupted run converges to exactly the clean v2 state.
    let rec = ingest_ok(&wiki, &store);
    assert_eq!(rec["status"], "completed");
    let got = by_path(snapshot(&store));
    assert_eq!(
        got.keys().collect::<std::collections::BTreeSet<_>>(),
        new.keys().collect::<std::collections::BTreeSet<_>>()
    );
    for (p, d) in &new {
        assert_eq!(got.get(p), Some(d), "{p} differs from a clean ingest");
    }
    // Vectors agree with the clean store's (same model, same text).
    let a = SqliteStore::open(&store).unwrap();
    let b = SqliteStore::open(&clean_v2).unwrap();
    for p in new.keys() {
        let ca = a.document_chunks(p).unwrap();
        let cb = b.document_chunks(p).unwrap();
        for (x, y) in ca.iter().zip(&cb) {
            let vx = a.get_vectors(&[x.id]).unwrap().remove(0).1;
            let vy = b.get_vectors(&[y.id]).unwrap().remove(0).1;
            let cos = bib_embed::cosine(&vx, &vy);
            assert!(
                cos > 0.9999,
                "{p}#{}: vector differs (cos {cos})",
                x.chunk_index
            );
        }
    }
    assert!(a.audit().unwrap().coherent);
    let runs = a.runs(100).unwrap();
    assert!(runs.iter().any(|r| r.status == RunStatus::Interrupted));
    assert_eq!(runs[0].status, RunStatus::Completed);
}
