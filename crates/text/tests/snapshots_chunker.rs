//! Snapshot tests: each document in `tests/data/*.md` is parsed (front-matter, title) and
//! chunked with a small limit so the structural rules show; the chunks and the sentences are
//! rendered as text and compared with the reviewed snapshots in `tests/snapshots/`.
//! Update after an intended change with `INSTA_UPDATE=always cargo test -p bib-text --test
//! snapshots_chunker` and review the diff.

use std::fmt::Write as _;
use std::path::Path;

use bib_text::chunk::{chunk_markdown, ChunkOptions};
use bib_text::frontmatter::parse_document;
use bib_text::sentences::split_sentences;

fn render(name: &str, source: &str) -> String {
    let doc = match parse_document(source, name) {
        Ok(d) => d,
        Err(e) => return format!("error: {e}"),
    };
    let mut out = String::new();
    let _ = writeln!(out, "title: {}", doc.title);
    let _ = writeln!(
        out,
        "metadata: {}",
        serde_json::Value::Object(doc.metadata.clone())
    );
    let _ = writeln!(out, "body_offset: {}", doc.body_offset);
    let opts = ChunkOptions {
        max_words: 60,
        min_words: 12,
    };
    for c in chunk_markdown(&doc.title, doc.body, doc.body_offset, &opts) {
        let _ = writeln!(
            out,
            "\n=== chunk {} [{}..{}] {} words {}",
            c.chunk_index,
            c.start,
            c.end,
            c.words,
            &c.hash[..16]
        );
        let _ = writeln!(out, "{}", c.prefix);
        let _ = writeln!(out, "{}", c.content);
    }
    let _ = writeln!(out, "\n=== sentences");
    for s in split_sentences(doc.body) {
        let _ = writeln!(out, "- {:?}", s.text(doc.body));
    }
    out
}

#[test]
fn chunk_snapshots() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/data")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "expected the sample documents in {}",
        dir.display()
    );
    for f in files {
        let name = f.file_stem().unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(&f).unwrap();
        insta::with_settings!({ snapshot_suffix => name.clone(), prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!("chunks", render(&name, &source));
        });
    }
}
