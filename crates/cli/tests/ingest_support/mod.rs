//! Shared helpers for the ingest end-to-end tests (real binary, real default model).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bib_store::{SqliteStore, Store};
use serde_json::Value;

pub fn bib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bib"))
}

/// Whether the default model is installed. When it is not: skip (return false) if
/// `BIB_SKIP_MODEL_TESTS=1`, else fail with the fix.
pub fn model_available() -> bool {
    let out = bib()
        .args(["model", "list"])
        .output()
        .expect("run bib model list");
    let listed = String::from_utf8_lossy(&out.stdout).contains("use-m3");
    if listed {
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

pub fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A Markdown page with `sections` H2 sections of distinct prose.
pub fn page(title: &str, sections: usize) -> String {
    let mut s = format!("---\ntitle: {title}\ntags: [wiki, {title}]\n---\n# {title}\n\n");
    for i in 0..sections {
        s.push_str(&format!("## {title} part {i}\n\n"));
        for j in 0..45 {
            s.push_str(&format!(
                "In {title}, step {j} of part {i} explains how packages are restored and cached. "
            ));
        }
        s.push_str("\n\n");
    }
    s
}

pub fn ingest(dir: &Path, store: &Path) -> Output {
    bib()
        .arg("ingest")
        .arg(dir)
        .arg("--store")
        .arg(store)
        .arg("--json")
        .output()
        .expect("run bib ingest")
}

/// Run `bib ingest --json`, assert success, return the run record.
pub fn ingest_ok(dir: &Path, store: &Path) -> Value {
    let out = ingest(dir, store);
    assert!(
        out.status.success(),
        "bib ingest failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("run record is JSON")
}

pub fn store_path(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name).join("kb.sqlite")
}

/// Per document: (path, title, metadata, content hash, [(chunk_index, chunk hash, text)]).
pub type DocSnap = (String, String, String, String, Vec<(u32, String, String)>);

pub fn snapshot(store: &Path) -> Vec<DocSnap> {
    let s = SqliteStore::open(store).unwrap();
    s.documents()
        .unwrap()
        .into_iter()
        .map(|d| {
            let chunks = s
                .document_chunks(&d.path)
                .unwrap()
                .into_iter()
                .map(|c| (c.chunk_index, c.content_hash.clone(), c.text()))
                .collect();
            (
                d.path,
                d.title,
                d.metadata.to_string(),
                d.content_hash,
                chunks,
            )
        })
        .collect()
}

/// Chunk hashes of one document, by chunk_index.
pub fn chunk_hashes(store: &Path, path: &str) -> Vec<String> {
    let s = SqliteStore::open(store).unwrap();
    s.chunk_states()
        .unwrap()
        .into_iter()
        .filter(|c| c.path == path)
        .map(|c| c.content_hash)
        .collect()
}
