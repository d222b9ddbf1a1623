//! One write path (issue 13): a document registered over MCP (`bib_register_doc` with `index:
//! true`) and the same file ingested from disk become the same document — node id, title,
//! metadata, content hash, chunk prefixes, heading paths, chunk hashes, cited lines — and
//! leave the same sentence vectors for trimming. Real binary, real model, real MCP transport.

mod server_support;

use bib_embed::{store_key, EmbedKind};
use bib_store::{SqliteStore, Store, VectorsByHash};
use bib_text::sentences::chunk_sentences;
use serde_json::json;
use server_support::*;

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

#[test]
fn a_document_registered_over_mcp_is_the_file_ingested_from_disk() {
    if !model_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let wiki = dir.path().join("wiki");
    tiny_wiki(&wiki);
    // A document with an H1 title, no front-matter, a list and a table.
    write(
        &wiki,
        "guides/sign.md",
        "# Signing packages\n\nSign a package with a certificate. Signed packages can be \
         verified.\n\n- get a certificate\n- run the sign command\n\n| option | meaning |\n|---|---|\n\
         | -Timestamper | the timestamp server |\n",
    );
    let on_disk = dir.path().join("disk.sqlite");
    ingest(&wiki, &on_disk);

    let over_mcp = dir.path().join("mcp.sqlite");
    SqliteStore::open(&over_mcp).unwrap();
    let disk = SqliteStore::open(&on_disk).unwrap();
    let mut paths: Vec<String> = disk
        .documents()
        .unwrap()
        .into_iter()
        .map(|d| d.path)
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 4);
    {
        let s = serve(&over_mcp, Some(TOKEN), &[]);
        let sid = mcp_session(s.addr);
        // Registered in node-id order of the ingest, so the ids line up too.
        let mut by_id = disk.documents().unwrap();
        by_id.sort_by_key(|d| d.node_id);
        for (i, d) in by_id.iter().enumerate() {
            let content = std::fs::read_to_string(wiki.join(&d.path)).unwrap();
            let (r, _) = mcp_http_tool(
                s.addr,
                &sid,
                10 + i as u64,
                "bib_register_doc",
                json!({"path": d.path, "content": content, "collection": "wiki", "index": true}),
            );
            assert_ne!(r["isError"], true, "{}: {r}", d.path);
        }
    }
    let api = SqliteStore::open(&over_mcp).unwrap();
    let mut a = disk.documents().unwrap();
    let mut b = api.documents().unwrap();
    a.sort_by(|x, y| x.path.cmp(&y.path));
    b.sort_by(|x, y| x.path.cmp(&y.path));
    assert_eq!(a, b, "documents differ");
    let model = disk.embedding_model().unwrap().expect("a model");
    let mut sentences = 0;
    for p in &paths {
        let ca = disk.document_chunks(p).unwrap();
        let cb = api.document_chunks(p).unwrap();
        assert_eq!(ca.len(), cb.len(), "{p}");
        assert!(!ca.is_empty(), "{p}");
        for (x, y) in ca.iter().zip(&cb) {
            let what = format!("{p} chunk {}", x.chunk_index);
            assert_eq!(x.node_id, y.node_id, "{what}");
            assert_eq!(x.title, y.title, "{what}");
            assert_eq!(x.prefix, y.prefix, "{what}");
            assert_eq!(x.heading_path, y.heading_path, "{what}");
            assert_eq!(x.content, y.content, "{what}");
            assert_eq!(x.content_hash, y.content_hash, "{what}");
            assert_eq!(
                (x.line_start, x.line_end),
                (y.line_start, y.line_end),
                "{what}"
            );
            assert_eq!(x.model_id, y.model_id, "{what}");
            // The sentence vectors trimming looks up, under the same keys in both.
            let text = x.text();
            let (offset, spans) = chunk_sentences(&text);
            let body = &text[offset..];
            let keys: Vec<String> = spans
                .iter()
                .map(|s| store_key(s.text(body), EmbedKind::Passage))
                .collect();
            let va = disk.cached_vectors(&model, &keys).unwrap();
            let vb = api.cached_vectors(&model, &keys).unwrap();
            assert_eq!(va.len(), keys.len(), "{what}: sentence vectors from disk");
            assert_eq!(vb.len(), keys.len(), "{what}: sentence vectors over MCP");
            for ((ka, a), (kb, b)) in va.iter().zip(&vb) {
                assert_eq!(ka, kb);
                assert!(cosine(a, b) > 0.9999, "{what}: sentence vectors differ");
            }
            sentences += keys.len();
        }
    }
    eprintln!(
        "{} documents, {sentences} sentence vectors compared",
        paths.len()
    );
    assert!(sentences > 5, "only {sentences} sentences compared");
}
