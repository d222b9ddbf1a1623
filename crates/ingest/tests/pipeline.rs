//! Ingest pipeline tests with a deterministic fake embedder (no model needed).

use bib_store::RunLog;
use std::path::Path;

use bib_embed::fake::FakeEmbedder;
use bib_embed::{store_key, EmbedKind};
use bib_ingest::{ingest, IngestOptions, NoProgress, RunReport};
use bib_store::{conformance::fake_vector, Filter, RunStatus, SqliteStore, Store, VectorsByHash};
use bib_text::chunk::chunk_markdown;
use bib_text::sentences::chunk_sentences;

/// The conformance suite's 16-d vectors; records every text embedded.
fn fake_embedder() -> FakeEmbedder {
    FakeEmbedder::new("fake-16", 16, |t, _| fake_vector(t))
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn long_doc(title: &str, sections: usize) -> String {
    let mut s = format!("---\ntitle: {title}\ntags: [t1, {title}]\n---\n# {title}\n\n");
    for i in 0..sections {
        s.push_str(&format!("## Section {i}\n\n"));
        for j in 0..60 {
            s.push_str(&format!(
                "Sentence {j} of section {i} in {title} talks about packages. "
            ));
        }
        s.push_str("\n\n");
    }
    s
}

fn wiki(root: &Path) {
    write(root, "a.md", &long_doc("alpha", 6));
    write(root, "b.md", &long_doc("beta", 3));
    write(root, "guides/c.md", &long_doc("gamma", 2));
    write(
        root,
        "guides/d.md",
        "# Delta\n\nShort page about nuget push.\n",
    );
    write(root, "e.md", "---\ntitle: Echo\n---\nEcho body text.\n");
}

/// One ingest with sentence vectors off, so embedder counts are chunk counts (the sentence
/// vectors have their own test).
fn run(root: &Path, store: &dyn Store, emb: &FakeEmbedder) -> RunReport {
    let opts = IngestOptions {
        sentence_vectors: false,
        ..IngestOptions::default()
    };
    ingest(root, store, emb, &opts, &NoProgress).unwrap()
}

fn chunks_of(text: &str) -> Vec<String> {
    let doc = bib_text::frontmatter::parse_document(text, "x").unwrap();
    chunk_markdown(&doc.title, doc.body, doc.body_offset, &Default::default())
        .iter()
        .map(|c| c.text())
        .collect()
}

#[test]
fn incremental_ingest_skips_unchanged_and_prunes() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("wiki");
    wiki(&root);
    let store = SqliteStore::open(t.path().join("kb.sqlite")).unwrap();
    let emb = fake_embedder();

    let r1 = run(&root, &store, &emb);
    assert_eq!(r1.status, RunStatus::Completed, "{r1:?}");
    assert_eq!(r1.phase_a.registered, 5);
    let b1 = r1.phase_b.clone().unwrap();
    assert!(b1.chunks_total >= 5);
    assert_eq!(b1.chunks_created, b1.chunks_total);
    assert_eq!(emb.texts_embedded() as u64, b1.chunks_embedded);
    assert!(r1.phase_c.as_ref().unwrap().coherent);
    assert_eq!(store.documents().unwrap()[0].qualified_name, "doc:a.md");

    // Second run: nothing embedded, everything skipped.
    emb.reset();
    let r2 = run(&root, &store, &emb);
    let b2 = r2.phase_b.clone().unwrap();
    assert_eq!(emb.texts_embedded(), 0);
    assert_eq!(b2.chunks_skipped, b1.chunks_total);
    assert_eq!(b2.documents_written, 0);
    assert_eq!(
        (b2.chunks_created, b2.chunks_updated, b2.chunks_pruned),
        (0, 0, 0)
    );

    // Edit one file: only its changed chunks are embedded.
    let old = std::fs::read_to_string(root.join("a.md")).unwrap();
    let new = old.replacen(
        "Sentence 3 of section 4",
        "A changed sentence of section 4",
        1,
    );
    assert_ne!(old, new);
    write(&root, "a.md", &new);
    let (oc, nc) = (chunks_of(&old), chunks_of(&new));
    let changed = nc
        .iter()
        .enumerate()
        .filter(|(i, c)| oc.get(*i) != Some(c))
        .count();
    assert!(changed >= 1);
    emb.reset();
    let r3 = run(&root, &store, &emb);
    let b3 = r3.phase_b.clone().unwrap();
    assert_eq!(
        emb.texts_embedded(),
        changed,
        "embedded {:?}",
        emb.embedded_texts()
    );
    assert!(emb.embedded_texts().iter().all(|t| t.contains("alpha")));
    assert_eq!(b3.chunks_updated as usize, changed);
    assert_eq!(b3.documents_written, 1);

    // Shrink a file: its tail chunks are pruned.
    let before = nc.len();
    write(&root, "a.md", &long_doc("alpha", 1));
    let after = chunks_of(&long_doc("alpha", 1)).len();
    emb.reset();
    let r4 = run(&root, &store, &emb);
    let b4 = r4.phase_b.clone().unwrap();
    assert_eq!(b4.chunks_pruned as usize, before.saturating_sub(after));
    let states = store.chunk_states().unwrap();
    assert_eq!(states.iter().filter(|s| s.path == "a.md").count(), after);

    // Delete a file: the document and its chunks go.
    std::fs::remove_file(root.join("b.md")).unwrap();
    let b_chunks = states.iter().filter(|s| s.path == "b.md").count() as u64;
    let r5 = run(&root, &store, &emb);
    let b5 = r5.phase_b.clone().unwrap();
    assert_eq!(b5.documents_removed, 1);
    assert_eq!(b5.chunks_pruned, b_chunks);
    assert!(store.documents().unwrap().iter().all(|d| d.path != "b.md"));
    let hits = store.bm25_search("beta", 10, &Filter::none()).unwrap();
    let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
    assert!(store
        .get_chunks(&ids)
        .unwrap()
        .iter()
        .all(|c| c.path != "b.md"));
    assert!(r5.phase_c.unwrap().coherent);
    // Runs are recorded, newest first.
    let runs = store.runs(10).unwrap();
    assert_eq!(runs.len(), 5);
    assert_eq!(runs[0].id, r5.id);
    assert_eq!(runs[0].status, RunStatus::Completed);
    assert_eq!(runs[0].record["phase_b"]["documents_removed"], 1);
}

/// The trimming key of every sentence of every stored chunk, deduplicated.
fn sentence_keys(store: &dyn Store) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for c in store.get_chunks(&store.chunk_ids().unwrap()).unwrap() {
        let text = c.text();
        let (offset, spans) = chunk_sentences(&text);
        for s in spans {
            let sentence = s.text(&text[offset..]).to_string();
            out.push((store_key(&sentence, EmbedKind::Passage), sentence));
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn sentence_vectors_are_embedded_once_under_the_trimming_key() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("wiki");
    wiki(&root);
    let store = SqliteStore::open(t.path().join("kb.sqlite")).unwrap();
    let emb = fake_embedder();
    let ingest_default =
        || ingest(&root, &store, &emb, &IngestOptions::default(), &NoProgress).unwrap();

    let r1 = ingest_default();
    let b1 = r1.phase_b.clone().unwrap();
    assert_eq!(r1.status, RunStatus::Completed, "{r1:?}");
    assert_eq!(b1.sentence_warning, None);
    let keys = sentence_keys(&store);
    assert!(keys.len() > 50, "{} sentences", keys.len());
    assert_eq!(b1.sentences_embedded as usize, keys.len());
    assert_eq!(
        emb.texts_embedded() as u64,
        b1.chunks_embedded + b1.sentences_embedded
    );
    // Every sentence is in the store's cache, with the model's vector of exactly that text.
    let wanted: Vec<String> = keys.iter().map(|(k, _)| k.clone()).collect();
    let got: std::collections::HashMap<String, Vec<f32>> = store
        .cached_vectors("fake-16", &wanted)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(got.len(), keys.len());
    for (k, sentence) in &keys {
        assert_eq!(got[k], fake_vector(sentence), "{sentence}");
    }

    // A re-ingest embeds nothing: chunks skipped, sentences known.
    emb.reset();
    let b2 = ingest_default().phase_b.unwrap();
    assert_eq!(emb.texts_embedded(), 0, "{:?}", emb.embedded_texts());
    assert_eq!(b2.sentences_reused as usize, keys.len());

    // Editing one sentence embeds that sentence (and its chunk) only.
    let old = std::fs::read_to_string(root.join("b.md")).unwrap();
    write(
        &root,
        "b.md",
        &old.replacen(
            "Sentence 7 of section 1",
            "A rewritten sentence 7 of section 1",
            1,
        ),
    );
    emb.reset();
    let b3 = ingest_default().phase_b.unwrap();
    assert_eq!(b3.sentences_embedded, 1, "{:?}", emb.embedded_texts());
    assert!(emb
        .embedded_texts()
        .iter()
        .any(|t| t.starts_with("A rewritten sentence 7 of section 1")));

    // Switched off, a fresh store gets no sentence vectors.
    let store2 = SqliteStore::open(t.path().join("kb2.sqlite")).unwrap();
    let opts = IngestOptions {
        sentence_vectors: false,
        ..IngestOptions::default()
    };
    let b4 = ingest(&root, &store2, &emb, &opts, &NoProgress)
        .unwrap()
        .phase_b
        .unwrap();
    assert_eq!((b4.sentences_embedded, b4.sentences_reused), (0, 0));
    let keys2: Vec<String> = sentence_keys(&store2).into_iter().map(|(k, _)| k).collect();
    assert!(store2.cached_vectors("fake-16", &keys2).unwrap().is_empty());
}

#[test]
fn final_state_equals_a_clean_ingest() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("wiki");
    wiki(&root);
    let inc = SqliteStore::open(t.path().join("inc.sqlite")).unwrap();
    let emb = fake_embedder();
    run(&root, &inc, &emb);
    write(&root, "b.md", &long_doc("beta", 5));
    write(&root, "f.md", "# Foxtrot\n\nNew page.\n");
    std::fs::remove_file(root.join("e.md")).unwrap();
    run(&root, &inc, &emb);
    let clean = SqliteStore::open(t.path().join("clean.sqlite")).unwrap();
    run(&root, &clean, &emb);
    assert_eq!(snapshot(&inc), snapshot(&clean));
}

type Snap = Vec<(
    String,
    String,
    String,
    String,
    u32,
    Vec<(u32, String, String)>,
)>;

fn snapshot(s: &dyn Store) -> Snap {
    let states = s.chunk_states().unwrap();
    s.documents()
        .unwrap()
        .into_iter()
        .map(|d| {
            let ch = states
                .iter()
                .filter(|c| c.path == d.path)
                .map(|c| (c.chunk_index, c.content_hash.clone(), c.model_id.clone()))
                .collect();
            (
                d.path,
                d.qualified_name,
                d.title,
                d.metadata.to_string() + &d.content_hash,
                d.chunk_count,
                ch,
            )
        })
        .collect()
}

#[test]
fn register_guard_stops_before_touching_the_index() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("wiki");
    wiki(&root);
    let store = SqliteStore::open(t.path().join("kb.sqlite")).unwrap();
    let emb = fake_embedder();
    run(&root, &store, &emb);
    let before = snapshot(&store);
    // Break 3 of 5 files and delete nothing: 40% registered < 80%.
    for f in ["a.md", "b.md", "e.md"] {
        std::fs::write(root.join(f), b"\xff\xfe broken").unwrap();
    }
    std::fs::remove_file(root.join("guides/d.md")).unwrap();
    emb.reset();
    let r = run(&root, &store, &emb);
    assert_eq!(r.status, RunStatus::Failed);
    assert!(r.failure.unwrap().contains("registered"));
    assert!(r.phase_b.is_none());
    assert_eq!(emb.texts_embedded(), 0);
    assert_eq!(snapshot(&store), before, "index changed despite the guard");
    assert_eq!(store.runs(1).unwrap()[0].status, RunStatus::Failed);
}

#[test]
fn index_guard_failure_does_not_prune() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("wiki");
    wiki(&root);
    let store = SqliteStore::open(t.path().join("kb.sqlite")).unwrap();
    let emb = fake_embedder();
    run(&root, &store, &emb);
    // Change every document, delete one, and make the model fail.
    for (f, title) in [
        ("a.md", "alpha2"),
        ("b.md", "beta2"),
        ("guides/c.md", "gamma2"),
    ] {
        write(&root, f, &long_doc(title, 2));
    }
    std::fs::remove_file(root.join("e.md")).unwrap();
    emb.set_failing(true);
    let r = run(&root, &store, &emb);
    assert_eq!(r.status, RunStatus::Failed, "{r:?}");
    let b = r.phase_b.unwrap();
    assert!(!b.guard_passed);
    assert!(b.errors > 0);
    assert_eq!(b.documents_removed, 0);
    assert!(store.documents().unwrap().iter().any(|d| d.path == "e.md"));
    assert!(r
        .errors
        .iter()
        .any(|e| e.phase == bib_ingest::Phase::B && e.reason.contains("injected")));
    assert!(store.audit().unwrap().coherent);
    // Once the model works again the next run converges.
    emb.set_failing(false);
    let r = run(&root, &store, &emb);
    assert_eq!(r.status, RunStatus::Completed);
    assert!(store.documents().unwrap().iter().all(|d| d.path != "e.md"));
}

#[cfg(unix)]
#[test]
fn bad_inputs_are_reported_and_the_rest_ingests() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("wiki");
    // 20 good files so the 5 bad ones stay under the 20% guard.
    for i in 0..20 {
        write(
            &root,
            &format!("good/{i:02}.md"),
            &format!("# Good {i}\n\nBody {i}.\n"),
        );
    }
    std::fs::write(root.join("latin1.md"), b"# Caf\xe9\n").unwrap();
    std::fs::write(root.join("binary.md"), [0x89, b'P', b'N', b'G', 0, 0, 1, 2]).unwrap();
    write(&root, "big.md", &"x ".repeat(600_000));
    write(
        &root,
        "broken.md",
        "---\ntitle: x\nnot yaml at all\n---\nbody\n",
    );
    std::fs::create_dir_all(root.join("loop")).unwrap();
    std::os::unix::fs::symlink(root.join("loop"), root.join("loop/again")).unwrap();
    let store = SqliteStore::open(t.path().join("kb.sqlite")).unwrap();
    let emb = fake_embedder();
    let opts = IngestOptions {
        max_file_bytes: 1_000_000,
        ..IngestOptions::default()
    };
    let r = ingest(&root, &store, &emb, &opts, &NoProgress).unwrap();
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    assert_eq!(r.phase_a.registered, 20);
    assert_eq!(r.phase_a.errors, 5);
    let find = |p: &str| {
        r.errors
            .iter()
            .find(|e| e.path == p)
            .map(|e| e.reason.clone())
            .unwrap_or_else(|| panic!("no error reported for {p}: {:?}", r.errors))
    };
    assert!(find("latin1.md").contains("UTF-8"));
    assert!(find("binary.md").contains("binary"));
    assert!(find("big.md").contains("over the limit"));
    let broken = find("broken.md");
    assert!(
        broken.contains("front-matter") && broken.contains("line 3"),
        "{broken}"
    );
    assert!(find("loop/again").contains("loop"));
    assert_eq!(store.documents().unwrap().len(), 20);
}

#[test]
fn public_prefix_never_registers_twice_and_empty_root_refuses_to_prune() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("wiki");
    for i in 0..9 {
        write(&root, &format!("p{i}.md"), &format!("# P{i}\n\ntext {i}\n"));
    }
    write(&root, "public/p0.md", "# P0 twin\n");
    write(&root, "public/only.md", "# Only\n");
    let store = SqliteStore::open(t.path().join("kb.sqlite")).unwrap();
    let emb = fake_embedder();
    let r = run(&root, &store, &emb);
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    let paths: Vec<String> = store
        .documents()
        .unwrap()
        .into_iter()
        .map(|d| d.path)
        .collect();
    assert!(paths.contains(&"only.md".to_string()));
    assert_eq!(paths.iter().filter(|p| *p == "p0.md").count(), 1);
    assert!(r.errors.iter().any(|e| e.reason.contains("normalization")));
    // An empty directory is almost always a wrong path: the run fails saying so, and
    // removes nothing.
    let empty = t.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let r = run(&empty, &store, &emb);
    assert_eq!(
        (r.status.as_str(), r.collection.as_str()),
        ("failed", "empty")
    );
    let f = r.failure.as_deref().unwrap();
    assert!(
        f.contains("no Markdown files") && f.contains("nothing was changed"),
        "{f}"
    );
    assert_eq!(store.documents().unwrap().len(), 10);
    // The wiki's own root emptied must not wipe its collection.
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    let r = run(&root, &store, &emb);
    assert_eq!(r.status, RunStatus::Failed);
    let f = r.failure.as_deref().unwrap();
    assert!(
        f.contains("no Markdown files") && f.contains("10 stored documents"),
        "{r:?}"
    );
    assert_eq!(store.documents().unwrap().len(), 10);
}

#[test]
fn includes_are_expanded_and_may_not_leave_the_root() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("wiki");
    for i in 0..8 {
        write(
            &root,
            &format!("p{i}.md"),
            &format!("# Page {i}\n\nFiller text {i}.\n"),
        );
    }
    write(
        &root,
        "includes/warning.md",
        "---\ntitle: fragment\n---\n> [!Warning]\n> Never restore over production zebrafinch.\n",
    );
    write(
        &root,
        "ops/restore.md",
        "# Restore\n\nSteps first.\n\n[!INCLUDE [w](../includes/warning.md)]\n",
    );
    std::fs::write(t.path().join("secret.md"), "outside text").unwrap();
    write(&root, "leak.md", "# Leak\n\n[!INCLUDE [s](../secret.md)]\n");
    let store = SqliteStore::open(t.path().join("kb.sqlite")).unwrap();
    let r = run(&root, &store, &fake_embedder());
    assert_eq!(r.status, RunStatus::Completed, "{r:?}");
    let hits = store
        .bm25_search("zebrafinch", 10, &Filter::none())
        .unwrap();
    let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
    let chunks = store.get_chunks(&ids).unwrap();
    let paths: Vec<&str> = chunks.iter().map(|c| c.path.as_str()).collect();
    assert!(paths.contains(&"ops/restore.md"), "{paths:?}");
    let leak = r.errors.iter().find(|e| e.path == "leak.md");
    assert!(
        leak.is_some_and(|e| e.reason.contains("outside")),
        "{:?}",
        r.errors
    );
    assert!(store
        .bm25_search("outside", 10, &Filter::none())
        .unwrap()
        .is_empty());
}
