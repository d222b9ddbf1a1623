//! The conformance suite every [`Store`] implementation must pass.
//!
//! Call [`run_all`] from a test with a factory that returns a fresh, empty store for each case
//! (the SQLite store runs it in memory and on disk; a PostgreSQL store would hand out fresh
//! schemas). Each case panics with a message naming what disagreed. The BM25 case checks the
//! store's scores against `bib_text::bm25::Bm25Index` built over the same chunks, so every
//! backend scores exactly like the in-memory index and like each other.

use bib_text::bm25::{Bm25Index, Bm25Params};
use bib_text::terms::{term_counts_with, term_sequence_with, terms_with, TermConfig};
use serde_json::{json, Value};

use crate::{
    ChunkWrite, DocumentChange, Filter, QueryLogEntry, QueryLogRetention, RunStatus, Store,
};

/// Builds a fresh, empty store.
pub type Factory<'a> = &'a dyn Fn() -> Box<dyn Store>;

/// Run every case against stores from `make`.
pub fn run_all(make: Factory<'_>) {
    type Case = (&'static str, fn(&dyn Store));
    let cases: &[Case] = &[
        ("empty_store", empty_store),
        ("apply_and_read_back", apply_and_read_back),
        ("update_and_prune_tail", update_and_prune_tail),
        (
            "invalid_change_changes_nothing",
            invalid_change_changes_nothing,
        ),
        ("remove_documents", remove_documents),
        ("bm25_equals_in_memory_index", bm25_equals_in_memory_index),
        ("batched_changes", batched_changes),
        (
            "term_function_recorded_and_switched",
            term_function_recorded_and_switched,
        ),
        ("filters_apply_before_the_cut", filters_apply_before_the_cut),
        ("vector_search_is_exact", vector_search_is_exact),
        ("vector_cache_by_hash", vector_cache_by_hash),
        ("runs_and_query_log", runs_and_query_log),
        ("collections", collections),
        ("document_sources", document_sources),
        ("query_log_retention", query_log_retention),
        ("lookup_by_path", lookup_by_path),
    ];
    for (name, case) in cases {
        let store = make();
        eprintln!("conformance[{}]: {name}", store.backend());
        case(store.as_ref());
    }
}

/// Deterministic 16-dimensional unit vector of a text (FNV-seeded), for tests without a model.
pub fn fake_vector(text: &str) -> Vec<f32> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut v = Vec::with_capacity(16);
    for _ in 0..16 {
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        v.push(((h % 2000) as f32 / 1000.0) - 1.0);
    }
    bib_text::vectors::unit(&v)
}

/// Hex FNV-1a hash (test helper; ingest uses SHA-256).
pub fn fake_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A chunk write for `content` at `index` of document `path`.
pub fn sample_chunk(path: &str, index: u32, content: &str) -> ChunkWrite {
    let prefix = format!("[Doc: {path}]");
    let text = format!("{prefix}\n{content}");
    ChunkWrite {
        chunk_index: index,
        prefix,
        heading_path: vec![format!("h{index}")],
        content: content.to_string(),
        content_hash: fake_hash(&text),
        tokens_estimate: bib_text::tokens::estimate_tokens(&text) as u32,
        tokens_model: text.split_whitespace().count() as u32,
        span_start: u64::from(index) * 10,
        span_end: u64::from(index) * 10 + 9,
        line_start: index * 3 + 1,
        line_end: index * 3 + 2,
        model_id: "fake-16".into(),
        embedding: fake_vector(&text),
    }
}

/// A document change writing all of `contents` as chunks 0.. of `path`.
pub fn sample_change(path: &str, contents: &[&str]) -> DocumentChange {
    sample_change_meta(path, contents, json!({"title": path}))
}

/// Like [`sample_change`] with explicit front-matter.
pub fn sample_change_meta(path: &str, contents: &[&str], metadata: Value) -> DocumentChange {
    DocumentChange {
        path: path.to_string(),
        collection: "kb".to_string(),
        title: path.to_string(),
        metadata,
        content_hash: fake_hash(&contents.join("\u{0}")),
        chunk_count: contents.len() as u32,
        upserts: contents
            .iter()
            .enumerate()
            .map(|(i, c)| sample_chunk(path, i as u32, c))
            .collect(),
        source: None,
    }
}

fn assert_coherent(s: &dyn Store, when: &str) {
    let a = s.audit().expect("audit");
    assert!(a.coherent, "store incoherent {when}: {a:?}");
}

fn empty_store(s: &dyn Store) {
    assert!(s.documents().unwrap().is_empty());
    assert!(s.chunk_states().unwrap().is_empty());
    assert_eq!(s.embedding_model().unwrap(), None);
    assert!(s
        .bm25_search("anything", 10, &Filter::none())
        .unwrap()
        .is_empty());
    assert!(s
        .vector_search(&fake_vector("x"), 10, &Filter::none())
        .unwrap()
        .is_empty());
    assert!(s.get_chunks(&[1, 2, 3]).unwrap().is_empty());
    let a = s.audit().unwrap();
    assert!(a.coherent && a.documents == 0 && a.chunks == 0, "{a:?}");
    assert_eq!(s.lexical_stats().unwrap().chunks, 0);
    assert!(s.runs(10).unwrap().is_empty());
    assert!(s.recent_queries(10).unwrap().is_empty());
}

/// `document(path)` and `chunk_states_of(path)` answer what `documents()` and
/// `chunk_states()` hold for that path, nothing of other paths (prefixes included).
fn lookup_by_path(s: &dyn Store) {
    assert_eq!(s.document("a.md").unwrap(), None);
    assert!(s.chunk_states_of("a.md").unwrap().is_empty());
    s.apply_document(&sample_change("a.md", &["one", "two", "three"]))
        .unwrap();
    s.apply_document(&sample_change("a.md.bak", &["other"]))
        .unwrap();
    s.apply_document(&sample_change("b/a.md", &["x", "y"]))
        .unwrap();
    s.apply_document(&sample_change("empty.md", &[])).unwrap();
    let docs = s.documents().unwrap();
    let states = s.chunk_states().unwrap();
    for d in &docs {
        assert_eq!(s.document(&d.path).unwrap().as_ref(), Some(d), "{}", d.path);
        let want: Vec<_> = states
            .iter()
            .filter(|c| c.path == d.path)
            .cloned()
            .collect();
        assert_eq!(s.chunk_states_of(&d.path).unwrap(), want, "{}", d.path);
    }
    assert_eq!(s.chunk_states_of("a.md").unwrap().len(), 3);
    assert!(s.chunk_states_of("empty.md").unwrap().is_empty());
    assert_eq!(s.document("A.md").unwrap(), None);
    assert_eq!(s.document("a").unwrap(), None);
    assert!(s.chunk_states_of("a").unwrap().is_empty());
    // After a prune and a removal, the lookups follow.
    s.apply_document(&sample_change("a.md", &["one"])).unwrap();
    assert_eq!(s.chunk_states_of("a.md").unwrap().len(), 1);
    assert_eq!(s.document("a.md").unwrap().unwrap().chunk_count, 1);
    s.remove_documents(&["a.md".to_string()]).unwrap();
    assert_eq!(s.document("a.md").unwrap(), None);
    assert!(s.chunk_states_of("a.md").unwrap().is_empty());
    assert!(s.document("a.md.bak").unwrap().is_some());
}

fn apply_and_read_back(s: &dyn Store) {
    let ch = sample_change_meta(
        "guides/intro.md",
        &["first chunk about packages", "second chunk", "third"],
        json!({"title": "Intro", "tags": ["a", "b"]}),
    );
    let out = s.apply_document(&ch).unwrap();
    assert!(out.document_created);
    assert_eq!((out.created, out.updated, out.pruned), (3, 0, 0));
    let docs = s.documents().unwrap();
    assert_eq!(docs.len(), 1);
    let d = &docs[0];
    assert_eq!(d.qualified_name, "doc:guides/intro.md");
    assert_eq!(d.path, "guides/intro.md");
    assert_eq!(d.chunk_count, 3);
    assert_eq!(d.metadata, json!({"title": "Intro", "tags": ["a", "b"]}));
    assert_eq!(d.node_id, out.node_id);
    let states = s.chunk_states().unwrap();
    assert_eq!(states.len(), 3);
    for (i, st) in states.iter().enumerate() {
        assert_eq!(st.chunk_index as usize, i);
        assert_eq!(st.node_id, d.node_id);
        assert_eq!(st.content_hash, ch.upserts[i].content_hash);
        assert_eq!(st.model_id, "fake-16");
    }
    assert_eq!(s.embedding_model().unwrap().as_deref(), Some("fake-16"));
    let hits = s.bm25_search("packages", 10, &Filter::none()).unwrap();
    assert_eq!(hits.len(), 1);
    let got = s.get_chunks(&[hits[0].id, 999_999]).unwrap();
    assert_eq!(
        (got[0].chunk_index, got[0].path.as_str()),
        (0, "guides/intro.md")
    );
    assert_eq!(got.len(), 1);
    let c = &got[0];
    assert_eq!(c.content, "first chunk about packages");
    assert_eq!(c.prefix, "[Doc: guides/intro.md]");
    assert_eq!(c.text(), ch.upserts[0].text());
    assert_eq!(c.heading_path, vec!["h0".to_string()]);
    assert_eq!(c.title, "guides/intro.md");
    assert_eq!(c.metadata["tags"], json!(["a", "b"]));
    assert_eq!(c.tokens_estimate, ch.upserts[0].tokens_estimate);
    assert_eq!((c.span_start, c.span_end), (0, 9));
    assert_eq!((c.line_start, c.line_end), (1, 2));
    assert_eq!(c.collection, "kb");
    assert_eq!(d.collection, "kb");
    assert_eq!((states[1].line_start, states[1].line_end), (4, 5));
    let all = s.document_chunks("guides/intro.md").unwrap();
    assert_eq!(
        all.iter().map(|c| c.chunk_index).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert_eq!(all[0], *c);
    assert_eq!(all[2].content, "third");
    assert!(s.document_chunks("nope.md").unwrap().is_empty());
    let ids = s.chunk_ids().unwrap();
    assert_eq!(ids, all.iter().map(|c| c.id).collect::<Vec<_>>());
    let v = s.get_vectors(&[c.id]).unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].1, ch.upserts[0].embedding);
    assert_coherent(s, "after first apply");
}

fn update_and_prune_tail(s: &dyn Store) {
    s.apply_document(&sample_change(
        "a.md",
        &["alpha one", "beta two", "gamma three"],
    ))
    .unwrap();
    let before = s.chunk_states().unwrap();
    let id0 = s.bm25_search("alpha", 1, &Filter::none()).unwrap()[0].id;
    let ids = s.chunk_ids().unwrap();
    // Read (and so remembered, where a store remembers) before the change.
    assert_eq!(s.get_chunks(&ids).unwrap()[1].content, "beta two");
    // Shrink to two chunks, chunk 1 changed, chunk 0 untouched.
    let mut ch = sample_change("a.md", &["alpha one", "beta changed"]);
    ch.upserts.remove(0);
    let out = s.apply_document(&ch).unwrap();
    let read = s.get_chunks(&ids).unwrap();
    assert_eq!(
        read.iter().map(|c| c.content.as_str()).collect::<Vec<_>>(),
        ["alpha one", "beta changed"],
        "a chunk read after a write is the written one"
    );
    assert!(!out.document_created);
    assert_eq!((out.created, out.updated, out.pruned), (0, 1, 1));
    let after = s.chunk_states().unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(after[0], before[0], "untouched chunk changed");
    assert_ne!(after[1].content_hash, before[1].content_hash);
    assert_eq!(
        s.bm25_search("alpha", 1, &Filter::none()).unwrap()[0].id,
        id0,
        "chunk id of an untouched (doc, index) must be stable"
    );
    assert!(s
        .bm25_search("gamma", 10, &Filter::none())
        .unwrap()
        .is_empty());
    assert!(s
        .bm25_search("two", 10, &Filter::none())
        .unwrap()
        .is_empty());
    assert_eq!(
        s.bm25_search("changed", 10, &Filter::none()).unwrap().len(),
        1
    );
    assert_eq!(
        s.vector_search(&fake_vector("x"), 10, &Filter::none())
            .unwrap()
            .len(),
        2
    );
    assert_eq!(s.lexical_stats().unwrap().chunks, 2);
    // Grow again.
    let out = s
        .apply_document(&sample_change(
            "a.md",
            &["alpha one", "beta changed", "delta", "eps"],
        ))
        .unwrap();
    assert_eq!((out.created, out.updated, out.pruned), (2, 2, 0));
    // Empty document keeps its row and no chunks.
    let out = s.apply_document(&sample_change("a.md", &[])).unwrap();
    assert_eq!(out.pruned, 4);
    assert_eq!(s.documents().unwrap()[0].chunk_count, 0);
    assert!(s.chunk_states().unwrap().is_empty());
    assert_coherent(s, "after update/prune");
}

fn invalid_change_changes_nothing(s: &dyn Store) {
    s.apply_document(&sample_change("a.md", &["one", "two"]))
        .unwrap();
    let before = s.chunk_states().unwrap();
    let mut bad = sample_change("a.md", &["uno"]);
    bad.upserts.push(sample_chunk("a.md", 5, "out of range"));
    assert!(s.apply_document(&bad).is_err());
    let mut nan = sample_change("b.md", &["x"]);
    nan.upserts[0].embedding[0] = f32::NAN;
    assert!(s.apply_document(&nan).is_err());
    assert_eq!(s.chunk_states().unwrap(), before);
    assert_eq!(s.documents().unwrap().len(), 1);
    assert_coherent(s, "after rejected changes");
}

/// `apply_documents` writes what the same changes one by one would (BM25 included), and a
/// batch holding an invalid change is refused without losing what was stored before.
fn batched_changes(s: &dyn Store) {
    let changes: Vec<DocumentChange> = corpus()
        .into_iter()
        .map(|(p, chunks, meta)| sample_change_meta(p, &chunks, meta))
        .collect();
    let outs = s.apply_documents(&changes).unwrap();
    assert_eq!(outs.len(), changes.len());
    assert!(outs.iter().all(|o| o.document_created));
    assert_eq!(s.documents().unwrap().len(), changes.len());
    for q in QUERIES {
        check_bm25(s, q);
    }
    let before = s.chunk_states().unwrap();
    let mut bad = sample_change("zz.md", &["x"]);
    bad.upserts[0].embedding[0] = f32::NAN;
    let err = s.apply_documents(&[bad]).unwrap_err();
    assert!(err.to_string().contains("zz.md"), "{err}");
    assert_eq!(s.chunk_states().unwrap(), before);
    assert!(s.apply_documents(&[]).unwrap().is_empty());
    assert_coherent(s, "after batched changes");
}

fn remove_documents(s: &dyn Store) {
    s.apply_document(&sample_change("a.md", &["apple", "apricot"]))
        .unwrap();
    s.apply_document(&sample_change("b.md", &["banana"]))
        .unwrap();
    let n = s
        .remove_documents(&["a.md".to_string(), "missing.md".to_string()])
        .unwrap();
    assert_eq!(n, 2);
    let docs = s.documents().unwrap();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].path, "b.md");
    assert!(s
        .bm25_search("apple", 10, &Filter::none())
        .unwrap()
        .is_empty());
    assert_eq!(
        s.vector_search(&fake_vector("q"), 10, &Filter::none())
            .unwrap()
            .len(),
        1
    );
    assert_eq!(s.lexical_stats().unwrap().chunks, 1);
    assert_eq!(s.remove_documents(&[]).unwrap(), 0);
    assert_coherent(s, "after remove");
}

fn corpus() -> Vec<(&'static str, Vec<&'static str>, Value)> {
    vec![
        (
            "guides/install.md",
            vec![
                "Install the NuGet CLI with `dotnet tool install`. The CLI installs packages.",
                "Packages are installed into the global packages folder, packages packages.",
            ],
            json!({"tags": ["cli", "install"], "app": "core"}),
        ),
        (
            "guides/publish.md",
            vec!["Publish a package with nuget push; the API key authenticates the push."],
            json!({"tags": ["publish"], "app": "core"}),
        ),
        (
            "api/overview.md",
            vec![
                "The NuGet API: service index, package content, search and autocomplete.",
                "Search queries return package metadata; src/utils.js is unrelated.",
                "Rate limits apply to the search API.",
            ],
            json!({"tags": ["api"], "app": "server", "n": 3}),
        ),
        (
            "es/instalar.md",
            vec![
                "Instale la CLI de NuGet. La instalación de paquetes es rápida; mañana también.",
                "Configuración: el archivo nuget.config controla los orígenes de paquetes.",
            ],
            json!({"tags": "es", "app": "core"}),
        ),
        (
            "public-notes.md",
            vec!["Notes about packages and about the push command, push push."],
            json!(null),
        ),
    ]
}

/// The paths of the chunks of `hits`, in order.
fn hit_paths(s: &dyn Store, hits: &[crate::Hit]) -> Vec<String> {
    let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
    s.get_chunks(&ids)
        .unwrap()
        .into_iter()
        .map(|c| c.path)
        .collect()
}

fn load_corpus(s: &dyn Store) {
    for (p, chunks, meta) in corpus() {
        s.apply_document(&sample_change_meta(p, &chunks, meta))
            .unwrap();
    }
}

/// Reference scores: the in-memory index over every stored chunk, by chunk id.
fn reference(s: &dyn Store, query: &str) -> Vec<(i64, f64)> {
    let hits = s
        .vector_search(&fake_vector("all"), 10_000, &Filter::none())
        .unwrap();
    let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
    let chunks = s.get_chunks(&ids).unwrap();
    let cfg = s.term_config().unwrap();
    let ix = Bm25Index::new(
        chunks.iter().map(|c| term_sequence_with(&c.text(), &cfg)),
        Bm25Params::default(),
    );
    let q = terms_with(query, &cfg);
    let mut out: Vec<(i64, f64)> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id, ix.score(i, &q)))
        .filter(|(_, sc)| *sc > 0.0)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

fn check_bm25(s: &dyn Store, query: &str) {
    let want = reference(s, query);
    let got = s.bm25_search(query, 100, &Filter::none()).unwrap();
    assert_eq!(
        got.len(),
        want.len(),
        "bm25 {query:?}: hit count differs: {got:?} vs {want:?}"
    );
    for (i, (h, (id, sc))) in got.iter().zip(&want).enumerate() {
        assert!(
            (h.score - sc).abs() <= 1e-9 * sc.abs().max(1.0),
            "bm25 {query:?} rank {}: score {} vs reference {} (chunk {} vs {})",
            i + 1,
            h.score,
            sc,
            h.id,
            id
        );
    }
    // Same scores up to ties: compare the id sets of equal-score groups by checking each
    // returned id has the reference score.
    for h in &got {
        let r = want.iter().find(|(id, _)| *id == h.id);
        assert!(
            r.is_some_and(|(_, sc)| (sc - h.score).abs() <= 1e-9 * sc.abs().max(1.0)),
            "bm25 {query:?}: chunk {} scored {} but reference says {r:?}",
            h.id,
            h.score
        );
    }
}

const QUERIES: &[&str] = &[
    "packages",
    "install the CLI",
    "push",
    "utils",
    "src/utils.js",
    "instalación de paquetes mañana",
    "configuración nuget.config",
    "search API rate limits",
    "publishing",
    "nothingmatcheshere",
];

fn bm25_equals_in_memory_index(s: &dyn Store) {
    load_corpus(s);
    for q in QUERIES {
        check_bm25(s, q);
    }
    // Still equal after updates, prunes and removals change the corpus statistics.
    s.apply_document(&sample_change("guides/install.md", &["Install packages."]))
        .unwrap();
    s.remove_documents(&["api/overview.md".to_string()])
        .unwrap();
    for q in QUERIES {
        check_bm25(s, q);
    }
    let top = s.bm25_search("packages", 2, &Filter::none()).unwrap();
    assert_eq!(top.len(), 2);
    assert!(top[0].score >= top[1].score);
    assert!(s.bm25_search("", 10, &Filter::none()).unwrap().is_empty());
    assert!(s
        .bm25_search("packages", 0, &Filter::none())
        .unwrap()
        .is_empty());
    let st = s.lexical_stats().unwrap();
    assert!(
        st.chunks > 0 && st.total_len > st.chunks && st.terms > 0,
        "{st:?}"
    );
    assert_coherent(s, "after bm25 corpus");
}

/// A new store records this build's term function; switching it rewrites every posting (BM25
/// still equals the in-memory index under the new function, writes use it, document
/// frequencies agree), and switching to the recorded one does nothing.
fn term_function_recorded_and_switched(s: &dyn Store) {
    assert_eq!(
        s.term_config().unwrap(),
        TermConfig::default(),
        "a new store records this build's term function"
    );
    load_corpus(s);
    let n = s.lexical_stats().unwrap().chunks;
    let q = "instalación de paquetes mañana";
    let before = s.bm25_search(q, 100, &Filter::none()).unwrap();
    // Whichever of the two is not the default.
    let v1 = if TermConfig::default() == TermConfig::V1 {
        TermConfig::V2
    } else {
        TermConfig::V1
    };
    assert_eq!(s.set_term_config(&v1).unwrap(), n, "every chunk reindexed");
    assert_eq!(s.term_config().unwrap(), v1);
    assert_eq!(s.set_term_config(&v1).unwrap(), 0, "already recorded");
    let after = s.bm25_search(q, 100, &Filter::none()).unwrap();
    assert_ne!(
        before.iter().map(|h| h.score).collect::<Vec<_>>(),
        after.iter().map(|h| h.score).collect::<Vec<_>>(),
        "the two term functions score {q:?} differently"
    );
    for q in QUERIES {
        check_bm25(s, q);
    }
    s.apply_document(&sample_change(
        "guides/install.md",
        &["Installing packages."],
    ))
    .unwrap();
    for q in QUERIES {
        check_bm25(s, q);
    }
    assert_coherent(s, "after a reindex");
    let probe: Vec<String> = ["packages", "push", "nothingmatcheshere"]
        .map(String::from)
        .to_vec();
    let (chunks, dfs) = s.doc_freqs(&probe).unwrap();
    assert_eq!(chunks, s.lexical_stats().unwrap().chunks);
    let ids: Vec<i64> = s
        .vector_search(&fake_vector("all"), 10_000, &Filter::none())
        .unwrap()
        .iter()
        .map(|h| h.id)
        .collect();
    let texts: Vec<String> = s
        .get_chunks(&ids)
        .unwrap()
        .iter()
        .map(|c| c.text())
        .collect();
    let want: Vec<u64> = probe
        .iter()
        .map(|t| {
            texts
                .iter()
                .filter(|x| term_counts_with(x, &v1).iter().any(|(u, _)| u == t))
                .count() as u64
        })
        .collect();
    assert_eq!(dfs, want, "document frequencies of {probe:?}");
    assert!(s.set_term_config(&TermConfig::default()).unwrap() > 0);
    for q in QUERIES {
        check_bm25(s, q);
    }
    assert_coherent(s, "back on the default term function");
}

fn filters_apply_before_the_cut(s: &dyn Store) {
    load_corpus(s);
    let all = s.bm25_search("packages", 100, &Filter::none()).unwrap();
    // The best "packages" chunks are in guides/; asking for es/ with limit 1 must still find one.
    let f = Filter::path_prefix("es/");
    let got = s.bm25_search("packages paquetes", 1, &f).unwrap();
    assert_eq!(got.len(), 1, "filter applied after the cut");
    assert!(hit_paths(s, &got)[0].starts_with("es/"));
    // Filtering restricts candidates, not corpus statistics: scores equal the unfiltered ones.
    let g = Filter::path_prefix("guides/");
    let filtered = s.bm25_search("packages", 100, &g).unwrap();
    assert!(!filtered.is_empty());
    assert!(hit_paths(s, &filtered)
        .iter()
        .all(|p| p.starts_with("guides/")));
    for h in &filtered {
        let u = all.iter().find(|x| x.id == h.id).unwrap();
        assert!((u.score - h.score).abs() < 1e-12);
    }
    assert!(filtered.windows(2).all(|w| w[0].score >= w[1].score));
    // Front-matter: list membership, string equality, numbers by JSON text, conjunction.
    let tag = Filter::none().with_field("tags", "publish");
    let got = s.bm25_search("push", 10, &tag).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(hit_paths(s, &got), ["guides/publish.md"]);
    let es = Filter::none().with_field("tags", "es");
    let got = s.bm25_search("paquetes", 10, &es).unwrap();
    assert!(hit_paths(s, &got).iter().all(|p| p == "es/instalar.md"));
    let n = Filter::none().with_field("n", "3");
    assert_eq!(s.bm25_search("search", 10, &n).unwrap().len(), 3);
    let both = Filter::path_prefix("guides/").with_field("app", "server");
    assert!(s.bm25_search("packages", 10, &both).unwrap().is_empty());
    let missing = Filter::none().with_field("nokey", "x");
    assert!(s.bm25_search("packages", 10, &missing).unwrap().is_empty());
    // Same for vectors: the filter is honoured and the limit filled from matching chunks.
    let core = Filter::none().with_field("app", "core");
    let v = s.vector_search(&fake_vector("q"), 3, &core).unwrap();
    assert_eq!(v.len(), 3);
    let docs = s.documents().unwrap();
    for c in s
        .get_chunks(&v.iter().map(|h| h.id).collect::<Vec<_>>())
        .unwrap()
    {
        let d = docs.iter().find(|d| d.node_id == c.node_id).unwrap();
        assert_eq!(d.metadata["app"], "core");
    }
    let none = Filter::path_prefix("zzz/");
    assert!(s
        .vector_search(&fake_vector("q"), 3, &none)
        .unwrap()
        .is_empty());
}

fn vector_search_is_exact(s: &dyn Store) {
    load_corpus(s);
    let q = fake_vector("a query");
    let got = s.vector_search(&q, 4, &Filter::none()).unwrap();
    let all = s.vector_search(&q, 1000, &Filter::none()).unwrap();
    let ids: Vec<i64> = all.iter().map(|h| h.id).collect();
    let vecs = s.get_vectors(&ids).unwrap();
    let mut want: Vec<(i64, f64)> = vecs
        .iter()
        .map(|(id, v)| {
            let dot: f64 = v
                .iter()
                .zip(&q)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            let na: f64 = v.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
            let nb: f64 = q.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
            (*id, dot / (na * nb))
        })
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1));
    assert_eq!(got.len(), 4);
    for (i, h) in got.iter().enumerate() {
        assert_eq!(h.id, want[i].0, "vector rank {}", i + 1);
        assert!((h.score - want[i].1).abs() < 1e-5);
    }
    // The cosines of given chunks are the ones a search gives them, in the order asked.
    let mut asked: Vec<i64> = all.iter().map(|h| h.id).rev().collect();
    asked.insert(1, 999_999);
    let scores = s.vector_scores(&q, &asked).unwrap();
    assert_eq!(scores.len(), all.len(), "unknown ids are skipped");
    for ((id, score), h) in scores.iter().zip(all.iter().rev()) {
        assert_eq!(*id, h.id);
        // To single precision: PostgreSQL's search computes its cosine in the database.
        assert!(
            (score - h.score).abs() < 1e-6,
            "chunk {id}: {score} vs {}",
            h.score
        );
    }
    assert!(s.vector_scores(&[1.0, 0.0], &ids).unwrap().is_empty());
    // A chunk's own vector finds it first with cosine ≈ 1.
    let target = s.get_vectors(&[ids[3]]).unwrap().remove(0);
    let top = s.vector_search(&target.1, 1, &Filter::none()).unwrap();
    assert_eq!(top[0].id, ids[3]);
    assert!((top[0].score - 1.0).abs() < 1e-5);
    // Vectors of another length are ignored, not an error.
    assert!(s
        .vector_search(&[1.0, 0.0], 5, &Filter::none())
        .unwrap()
        .is_empty());
    // Changes are visible to the next search.
    s.remove_documents(&["api/overview.md".to_string()])
        .unwrap();
    let after = s.vector_search(&q, 1000, &Filter::none()).unwrap();
    assert_eq!(after.len(), all.len() - 3);
}

fn vector_cache_by_hash(s: &dyn Store) {
    let ch = sample_change("a.md", &["cached text"]);
    s.apply_document(&ch).unwrap();
    let h = ch.upserts[0].content_hash.clone();
    let got = s
        .cached_vectors("fake-16", &[h.clone(), "nope".to_string()])
        .unwrap();
    assert_eq!(got, vec![(h.clone(), ch.upserts[0].embedding.clone())]);
    assert!(s.cached_vectors("other-model", &[h]).unwrap().is_empty());
    s.cache_vectors("m", &[("k1".to_string(), vec![0.5, 0.25])])
        .unwrap();
    assert_eq!(
        s.cached_vectors("m", &["k1".to_string()]).unwrap(),
        vec![("k1".to_string(), vec![0.5, 0.25])]
    );
}

fn log_entry(i: i64, query: String) -> QueryLogEntry {
    QueryLogEntry {
        id: 0,
        at_ms: 1000 + i,
        query,
        mode: "bm25".into(),
        chunk_ids: vec![i],
        scores: vec![0.5],
        tokens_before: 10,
        tokens_in_context: 5,
        extra: json!({"i": i}),
    }
}

/// Issue 14: 25 queries of 3.9 MB grew the store by 227 MB. The log keeps at most
/// `max_rows` entries and `max_bytes` bytes, oldest dropped, and cuts over-long query text.
fn query_log_retention(s: &dyn Store) {
    assert_eq!(s.query_log_retention(), QueryLogRetention::default());
    // Over-long text is cut to max_query_bytes on a char boundary, with its length kept.
    let huge = "é".repeat(2_000_000); // 4 MB of two-byte characters
    s.log_query(&log_entry(0, huge)).unwrap();
    let e = &s.recent_queries(1).unwrap()[0];
    let max_q = QueryLogRetention::default().max_query_bytes;
    assert!(
        e.query.len() <= max_q && e.query.len() >= max_q - 1,
        "{}",
        e.query.len()
    );
    assert!(e.query.chars().all(|c| c == 'é'));
    assert_eq!(e.extra["query_truncated_from"], 4_000_000);
    assert_eq!(e.extra["i"], 0);

    // Rows: keep the newest 5.
    s.set_query_log_retention(QueryLogRetention {
        max_rows: 5,
        ..QueryLogRetention::default()
    });
    for i in 1..=12 {
        s.log_query(&log_entry(i, format!("rows {i}"))).unwrap();
    }
    let kept = s.recent_queries(100).unwrap();
    assert_eq!(
        kept.iter().map(|e| e.query.as_str()).collect::<Vec<_>>(),
        ["rows 12", "rows 11", "rows 10", "rows 9", "rows 8"]
    );

    // Bytes: entries of ~1.2 KB under a 5 KB cap keep the newest three or four, never the
    // old ones, and the newest entry stays even when alone it is over the cap.
    s.set_query_log_retention(QueryLogRetention {
        max_rows: 1000,
        max_bytes: 5_000,
        max_query_bytes: 600,
    });
    for i in 20..40 {
        s.log_query(&log_entry(i, format!("{i} {}", "x".repeat(1000))))
            .unwrap();
    }
    let kept = s.recent_queries(100).unwrap();
    assert!((2..=4).contains(&kept.len()), "{} entries kept", kept.len());
    assert_eq!(kept[0].at_ms, 1039);
    assert!(kept.iter().all(|e| e.at_ms >= 1035), "old entries kept");
    s.set_query_log_retention(QueryLogRetention {
        max_rows: 1000,
        max_bytes: 10,
        max_query_bytes: 600,
    });
    s.log_query(&log_entry(50, "y".repeat(500))).unwrap();
    let kept = s.recent_queries(100).unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].at_ms, 1050);
}

fn runs_and_query_log(s: &dyn Store) {
    let a = s.begin_run(&json!({"root": "w"})).unwrap();
    let b = s.begin_run(&json!({"root": "w"})).unwrap();
    s.finish_run(b, RunStatus::Completed, &json!({"root": "w", "ok": true}))
        .unwrap();
    assert!(s.finish_run(9_999, RunStatus::Failed, &json!({})).is_err());
    let runs = s.runs(10).unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].id, b);
    assert_eq!(runs[0].status, RunStatus::Completed);
    assert_eq!(runs[0].record["ok"], true);
    assert!(runs[0].finished_at_ms.is_some());
    assert_eq!(runs[1].id, a);
    assert_eq!(runs[1].status, RunStatus::Interrupted);
    assert_eq!(s.runs(1).unwrap().len(), 1);
    for i in 0..5 {
        let e = QueryLogEntry {
            id: 0,
            at_ms: 1000 + i,
            query: format!("q{i}"),
            mode: "hybrid".into(),
            chunk_ids: vec![i, i + 1],
            scores: vec![0.5, 0.25],
            tokens_before: 100,
            tokens_in_context: 40,
            extra: json!({"k": i}),
        };
        assert!(s.log_query(&e).unwrap() > 0);
    }
    let last = s.recent_queries(3).unwrap();
    assert_eq!(
        last.iter().map(|e| e.query.as_str()).collect::<Vec<_>>(),
        vec!["q4", "q3", "q2"]
    );
    assert_eq!(last[0].chunk_ids, vec![4, 5]);
    assert_eq!(last[0].extra, json!({"k": 4}));
    assert!(last[0].id > last[1].id);
}

/// Documents carry their collection; a change can move a document to another collection; the
/// collection filter applies before the cut in both searches; a collection is removed whole.
fn collections(s: &dyn Store) {
    let mut a = sample_change("a.md", &["packages in kb", "more"]);
    a.collection = "kb".into();
    let mut b = sample_change("b.md", &["packages in notes"]);
    b.collection = "notes".into();
    let mut c = sample_change("c.md", &["packages via the api"]);
    c.collection = String::new();
    for ch in [&a, &b, &c] {
        s.apply_document(ch).unwrap();
    }
    let docs = s.documents().unwrap();
    let coll: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| (d.path.as_str(), d.collection.as_str()))
        .collect();
    assert_eq!(
        coll,
        vec![
            ("a.md", "kb"),
            ("b.md", "notes"),
            ("c.md", crate::DEFAULT_COLLECTION)
        ]
    );
    let infos = s.collections().unwrap();
    assert_eq!(
        infos,
        vec![
            crate::CollectionInfo {
                name: "default".into(),
                documents: 1,
                chunks: 1
            },
            crate::CollectionInfo {
                name: "kb".into(),
                documents: 1,
                chunks: 2
            },
            crate::CollectionInfo {
                name: "notes".into(),
                documents: 1,
                chunks: 1
            },
        ]
    );
    let notes = Filter::none().with_collections(["notes"]);
    let got = s.bm25_search("packages", 1, &notes).unwrap();
    assert_eq!(got.len(), 1, "collection filter applied after the cut");
    assert_eq!(hit_paths(s, &got), ["b.md"]);
    let two = Filter::none().with_collections(["notes", "kb"]);
    let mut paths = hit_paths(s, &s.bm25_search("packages", 10, &two).unwrap());
    paths.sort();
    assert_eq!(paths, vec!["a.md", "b.md"]);
    let v = s.vector_search(&fake_vector("q"), 10, &notes).unwrap();
    assert_eq!(hit_paths(s, &v), ["b.md"]);
    let hit = s.get_chunks(&[got[0].id]).unwrap();
    assert_eq!(hit[0].collection, "notes");
    // Moving a document to another collection keeps one row.
    b.collection = "kb".into();
    s.apply_document(&b).unwrap();
    assert!(s.bm25_search("packages", 10, &notes).unwrap().is_empty());
    assert_eq!(s.documents().unwrap().len(), 3);
    // Removing a collection removes exactly its documents.
    assert_eq!(s.remove_collection("kb").unwrap(), (2, 3));
    assert_eq!(s.remove_collection("nope").unwrap(), (0, 0));
    let left: Vec<String> = s.documents().unwrap().into_iter().map(|d| d.path).collect();
    assert_eq!(left, vec!["c.md"]);
    assert_coherent(s, "after removing a collection");
}

/// A document's source text is kept for its content hash: replaced with the content, kept when
/// a change brings none, forgotten when the content changes without one, removed with it.
fn document_sources(s: &dyn Store) {
    let has_source = |path: &str| {
        s.documents()
            .unwrap()
            .into_iter()
            .find(|d| d.path == path)
            .map(|d| d.has_source)
    };
    let mut a = sample_change("a.md", &["first", "second"]);
    let text = "---\ntitle: A\n---\n# A\n\nfirst\n\nsecond, with ünïcode\r\n";
    a.source = Some(text.to_string());
    s.apply_document(&a).unwrap();
    assert_eq!(s.document_source("a.md").unwrap().as_deref(), Some(text));
    assert_eq!(has_source("a.md"), Some(true));
    assert_eq!(s.document_source("missing.md").unwrap(), None);
    // The same content without a source keeps the stored text.
    a.source = None;
    a.upserts.clear();
    s.apply_document(&a).unwrap();
    assert_eq!(s.document_source("a.md").unwrap().as_deref(), Some(text));
    // New content without a source: the old text no longer answers.
    a.content_hash = fake_hash("changed");
    s.apply_document(&a).unwrap();
    assert_eq!(s.document_source("a.md").unwrap(), None);
    assert_eq!(has_source("a.md"), Some(false));
    a.source = Some("changed\n".into());
    s.apply_document(&a).unwrap();
    assert_eq!(
        s.document_source("a.md").unwrap().as_deref(),
        Some("changed\n")
    );
    // A document written without any source has none.
    s.apply_document(&sample_change("b.md", &["b"])).unwrap();
    assert_eq!(has_source("b.md"), Some(false));
    assert_eq!(s.document_source("b.md").unwrap(), None);
    s.remove_documents(&["a.md".to_string()]).unwrap();
    assert_eq!(s.document_source("a.md").unwrap(), None);
    // A new document at the same path does not inherit the removed one's text.
    let mut again = sample_change("a.md", &["x"]);
    again.content_hash = fake_hash("changed");
    s.apply_document(&again).unwrap();
    assert_eq!(s.document_source("a.md").unwrap(), None);
    assert_coherent(s, "after document sources");
}
