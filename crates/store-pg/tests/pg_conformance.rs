//! The shared conformance suite on PostgreSQL, and the same workload run against SQLite and
//! PostgreSQL side by side: same documents, chunks and hashes; same BM25 ranking; with exact
//! vector search the same top-10; with HNSW, recall@10 >= 0.98 against exact.
//!
//! Needs `BIB_TEST_PG_URL` (see `bib_store_pg::testing`); fails without it unless
//! `BIB_SKIP_PG_TESTS=1`.

use bib_store::conformance::{self, sample_chunk};
use bib_store::RunLog;
use bib_store::{DocumentChange, Filter, Hit, SqliteStore, Store};
use bib_store_pg::testing::{admin_exec, fresh_store, test_url, with_param};
use bib_store_pg::{PgStore, VectorSearch, DEFAULT_EF_SEARCH};
use serde_json::json;

const HNSW: VectorSearch = VectorSearch::Hnsw {
    ef_search: DEFAULT_EF_SEARCH,
};

#[test]
fn conformance_exact() {
    let Some(url) = test_url() else { return };
    conformance::run_all(&|| Box::new(fresh_store(&url, "cx", VectorSearch::Exact)));
}

#[test]
fn conformance_hnsw() {
    let Some(url) = test_url() else { return };
    conformance::run_all(&|| Box::new(fresh_store(&url, "ch", HNSW)));
}

/// splitmix64: deterministic test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unit_vector(&mut self, dims: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dims)
            .map(|_| (self.next() >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0)
            .collect();
        bib_text::vectors::unit(&v)
    }
}

const VOCAB: &[&str] = &[
    "package",
    "packages",
    "install",
    "nuget",
    "restore",
    "feed",
    "source",
    "push",
    "api",
    "key",
    "version",
    "semver",
    "dependency",
    "graph",
    "lock",
    "file",
    "cli",
    "dotnet",
    "msbuild",
    "target",
    "framework",
    "symbols",
    "signing",
    "certificate",
    "trust",
    "mañana",
    "instalación",
    "paquete",
    "configuración",
    "src/utils.js",
    "nuget.config",
    "the",
    "a",
    "of",
    "and",
    "to",
    "is",
    "cache",
    "global",
    "folder",
    "http",
    "retry",
    "timeout",
    "mirror",
];

fn sentence(rng: &mut Rng, words: usize) -> String {
    let mut s: Vec<&str> = (0..words).map(|_| VOCAB[rng.below(VOCAB.len())]).collect();
    s.push(".");
    s.join(" ")
}

/// A document change with random text and random `dims`-dimensional vectors.
fn random_change(rng: &mut Rng, path: &str, chunks: usize, dims: usize) -> DocumentChange {
    let contents: Vec<String> = (0..chunks)
        .map(|_| {
            let w = 3 + rng.below(40);
            sentence(rng, w)
        })
        .collect();
    let refs: Vec<&str> = contents.iter().map(String::as_str).collect();
    let app = ["core", "server"][rng.below(2)];
    let tag = VOCAB[rng.below(5)];
    let mut ch =
        conformance::sample_change_meta(path, &refs, json!({"app": app, "tags": ["t", tag]}));
    for c in &mut ch.upserts {
        c.embedding = rng.unit_vector(dims);
        c.model_id = format!("rand-{dims}");
    }
    ch
}

/// The same history of writes on both stores: creates, updates, shrinks, growths, removals.
fn same_history(stores: &[&dyn Store], docs: usize, dims: usize, seed: u64) {
    let mut rng = Rng(seed);
    let mut changes = Vec::new();
    for i in 0..docs {
        let n = 1 + rng.below(6);
        changes.push(random_change(
            &mut rng,
            &format!("d{:03}/doc{i}.md", i % 7),
            n,
            dims,
        ));
    }
    // Rewrite some documents: chunk 0 changed and the tail pruned (the chunks kept in
    // between untouched), or grown with new chunks.
    for i in (0..docs).step_by(5) {
        let old = changes[i].chunk_count as usize;
        let n = 1 + rng.below(8);
        let mut ch = random_change(&mut rng, &format!("d{:03}/doc{i}.md", i % 7), n, dims);
        if n <= old {
            ch.upserts.truncate(1);
        } else {
            ch.upserts.drain(1..old);
        }
        changes.push(ch);
    }
    let removed: Vec<String> = (0..docs)
        .step_by(11)
        .map(|i| format!("d{:03}/doc{i}.md", i % 7))
        .collect();
    for s in stores {
        for ch in &changes {
            s.apply_document(ch).unwrap();
        }
        s.remove_documents(&removed).unwrap();
    }
}

/// (path, chunk_index) of each hit, in order: ids are store-local, positions are not.
fn keys(s: &dyn Store, hits: &[Hit]) -> Vec<(String, u32)> {
    let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
    s.get_chunks(&ids)
        .unwrap()
        .into_iter()
        .map(|c| (c.path, c.chunk_index))
        .collect()
}

/// Hits ordered by score, ties by position, so stores that number chunks differently compare.
fn normalised(s: &dyn Store, hits: &[Hit]) -> Vec<((String, u32), f64)> {
    let mut v: Vec<((String, u32), f64)> = keys(s, hits)
        .into_iter()
        .zip(hits)
        .map(|(k, h)| (k, h.score))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

fn sqlite_and_pg(url: &str, tag: &str, v: VectorSearch) -> (SqliteStore, PgStore) {
    (
        SqliteStore::open_in_memory().unwrap(),
        fresh_store(url, tag, v),
    )
}

#[test]
fn same_ingest_same_documents_chunks_and_hashes() {
    let Some(url) = test_url() else { return };
    let (lite, pg) = sqlite_and_pg(&url, "same", VectorSearch::Exact);
    same_history(&[&lite, &pg], 60, 24, 7);
    let strip = |mut d: bib_store::DocRecord| {
        d.node_id = 0;
        d
    };
    let a: Vec<_> = lite.documents().unwrap().into_iter().map(strip).collect();
    let b: Vec<_> = pg.documents().unwrap().into_iter().map(strip).collect();
    assert!(!a.is_empty());
    assert_eq!(a, b, "documents differ");
    let states = |s: &dyn Store| {
        s.chunk_states()
            .unwrap()
            .into_iter()
            .map(|mut c| {
                c.node_id = 0;
                c
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(states(&lite), states(&pg), "chunk states (hashes) differ");
    for d in &a {
        let ca = lite.document_chunks(&d.path).unwrap();
        let cb = pg.document_chunks(&d.path).unwrap();
        assert_eq!(ca.len(), cb.len(), "{}", d.path);
        for (x, y) in ca.iter().zip(&cb) {
            let (mut x2, mut y2) = (x.clone(), y.clone());
            (x2.id, x2.node_id, y2.id, y2.node_id) = (0, 0, 0, 0);
            assert_eq!(x2, y2, "chunk {} of {} differs", x.chunk_index, d.path);
            let vx = lite.get_vectors(&[x.id]).unwrap();
            let vy = pg.get_vectors(&[y.id]).unwrap();
            assert_eq!(
                vx[0].1, vy[0].1,
                "vector of chunk {} of {}",
                x.chunk_index, d.path
            );
        }
    }
    assert_eq!(lite.lexical_stats().unwrap(), pg.lexical_stats().unwrap());
    // PostgreSQL keeps each term's document frequency in `term_df` by triggers; after the
    // creates, rewrites, prunes and removals it is still what SQLite counts in its postings.
    let terms: Vec<String> = VOCAB
        .iter()
        .flat_map(|w| bib_text::terms::terms_with(w, &lite.term_config().unwrap()))
        .chain(["nosuchterm".to_string()])
        .collect();
    let (n, dfs) = pg.doc_freqs(&terms).unwrap();
    assert_eq!((n, dfs.clone()), lite.doc_freqs(&terms).unwrap());
    assert!(dfs.iter().filter(|&&d| d > 0).count() > 10, "{dfs:?}");
    let (aa, ab) = (lite.audit().unwrap(), pg.audit().unwrap());
    assert!(aa.coherent && ab.coherent, "{aa:?} {ab:?}");
    assert_eq!(aa, ab);
}

#[test]
fn same_bm25_ranking() {
    let Some(url) = test_url() else { return };
    let (lite, pg) = sqlite_and_pg(&url, "bm25", HNSW);
    same_history(&[&lite, &pg], 80, 8, 11);
    // Freshly written postings are read through the heap; after `optimize` (what an ingest
    // run ends with) they are read from the covering index alone. Both must score the same.
    let compared = same_bm25_scores_and_top10(&lite, &pg);
    assert!(compared > 1000, "queries matched too little: {compared}");
    pg.optimize().unwrap();
    assert_eq!(same_bm25_scores_and_top10(&lite, &pg), compared);
}

/// Compare BM25 over a fixed set of queries and filters; returns the hits compared.
fn same_bm25_scores_and_top10(lite: &SqliteStore, pg: &PgStore) -> usize {
    let mut rng = Rng(99);
    let mut queries: Vec<String> = VOCAB.iter().map(|w| w.to_string()).collect();
    for _ in 0..40 {
        let n = 2 + rng.below(5);
        queries.push(sentence(&mut rng, n));
    }
    let filters = [
        Filter::none(),
        Filter::path_prefix("d003/"),
        Filter::none().with_field("app", "server"),
    ];
    let mut compared = 0;
    for q in &queries {
        for f in &filters {
            let a = lite.bm25_search(q, 10_000, f).unwrap();
            let b = pg.bm25_search(q, 10_000, f).unwrap();
            assert_eq!(a.len(), b.len(), "{q:?}: hit counts differ");
            // Every chunk gets the same score to 1e-12, and PostgreSQL's order is SQLite's up
            // to ties (its sums run in the database's order, so equal scores may differ in
            // their last bits and swap).
            let lite_scores: std::collections::HashMap<(String, u32), f64> =
                normalised(lite, &a).into_iter().collect();
            let mut last = f64::INFINITY;
            for (k, score) in keys(pg, &b).into_iter().zip(b.iter().map(|h| h.score)) {
                let want = lite_scores[&k];
                assert!(
                    (want - score).abs() <= 1e-12 * want.abs().max(1.0),
                    "{q:?} {f:?}: {k:?} scored {score} vs {want}"
                );
                assert!(
                    want <= last + 1e-12,
                    "{q:?} {f:?}: ranking differs at {k:?}"
                );
                last = want;
            }
            // The top-k cut picks the same chunks (up to a tie straddling the cut).
            for k in [1, 3, 10] {
                let ta = lite.bm25_search(q, k, f).unwrap();
                let tb = pg.bm25_search(q, k, f).unwrap();
                assert_eq!(ta.len(), tb.len());
                // PostgreSQL sums in the database, in its own order: equal to the last bits
                // is not promised, equal to 1e-12 is (checked above).
                if a.len() <= k || a[k - 1].score > a[k].score + 1e-9 {
                    let (mut ka, mut kb) = (keys(lite, &ta), keys(pg, &tb));
                    ka.sort();
                    kb.sort();
                    assert_eq!(ka, kb, "{q:?} {f:?}: top-{k} differs");
                    for (x, y) in ta.iter().zip(&tb) {
                        assert!((x.score - y.score).abs() <= 1e-12 * x.score.abs().max(1.0));
                    }
                }
            }
            compared += a.len();
        }
    }
    compared
}

#[test]
fn exact_vector_search_same_top10() {
    let Some(url) = test_url() else { return };
    let (lite, pg) = sqlite_and_pg(&url, "vx", VectorSearch::Exact);
    same_history(&[&lite, &pg], 150, 48, 5);
    let mut rng = Rng(1234);
    for i in 0..50 {
        let q = rng.unit_vector(48);
        let f = if i % 5 == 0 {
            Filter::none().with_field("app", "core")
        } else {
            Filter::none()
        };
        let a = lite.vector_search(&q, 10, &f).unwrap();
        let b = pg.vector_search(&q, 10, &f).unwrap();
        assert_eq!(a.len(), 10);
        let (ka, kb) = (keys(&lite, &a), keys(&pg, &b));
        assert_eq!(ka, kb, "query {i}: top-10 differs");
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x.score - y.score).abs() < 1e-5,
                "{} vs {}",
                x.score,
                y.score
            );
        }
    }
}

#[test]
fn hnsw_recall_at_10_against_exact() {
    let Some(url) = test_url() else { return };
    let pg = fresh_store(&url, "recall", HNSW);
    let dims = 64;
    let mut rng = Rng(42);
    for d in 0..400 {
        let path = format!("r/doc{d}.md");
        let contents: Vec<String> = (0..10).map(|i| format!("chunk {i} of {d}")).collect();
        let refs: Vec<&str> = contents.iter().map(String::as_str).collect();
        let mut ch = conformance::sample_change(&path, &refs);
        for c in &mut ch.upserts {
            c.embedding = rng.unit_vector(dims);
        }
        pg.apply_document(&ch).unwrap();
    }
    let plan = pg.vector_plan(dims as i32).unwrap();
    assert!(
        plan.contains("chunks_hnsw_64"),
        "HNSW mode does not use the HNSW index:\n{plan}"
    );
    let exact = pg.reopen_with(VectorSearch::Exact).unwrap();
    let (mut found, mut total) = (0usize, 0usize);
    for _ in 0..100 {
        let q = rng.unit_vector(dims);
        let truth: Vec<i64> = exact
            .vector_search(&q, 10, &Filter::none())
            .unwrap()
            .iter()
            .map(|h| h.id)
            .collect();
        let approx = pg.vector_search(&q, 10, &Filter::none()).unwrap();
        assert_eq!(approx.len(), 10);
        total += truth.len();
        found += approx.iter().filter(|h| truth.contains(&h.id)).count();
    }
    let recall = found as f64 / total as f64;
    eprintln!("HNSW recall@10 over 4000 random 64-d vectors: {recall:.4}");
    assert!(recall >= 0.98, "recall@10 {recall:.4} < 0.98");
    // Filtered HNSW queries still fill the limit from matching documents.
    let f = Filter::path_prefix("r/doc1");
    let hits = pg.vector_search(&rng.unit_vector(dims), 10, &f).unwrap();
    assert_eq!(hits.len(), 10);
    assert!(keys(&pg, &hits).iter().all(|k| k.0.starts_with("r/doc1")));
}

/// A bulk load (an ingest run, `bib migrate`) leaves the HNSW index of new dimensions to
/// `optimize`, which builds it once; meanwhile vector search answers exactly.
#[test]
fn a_bulk_load_builds_its_vector_index_at_the_end() {
    let Some(url) = test_url() else { return };
    let pg = fresh_store(&url, "bulk", HNSW);
    let dims = 16;
    let mut rng = Rng(5);
    pg.set_bulk_writes(true);
    for d in 0..60 {
        pg.apply_document(&random_change(&mut rng, &format!("b/doc{d}.md"), 3, dims))
            .unwrap();
    }
    pg.set_bulk_writes(false);
    let index = format!("chunks_hnsw_{dims}");
    let plan = pg.vector_plan(dims as i32).unwrap();
    assert!(!plan.contains(&index), "built during the load:\n{plan}");
    let exact = pg.reopen_with(VectorSearch::Exact).unwrap();
    let q = rng.unit_vector(dims);
    let ids = |hits: Vec<Hit>| hits.iter().map(|h| h.id).collect::<Vec<_>>();
    let want = ids(exact.vector_search(&q, 10, &Filter::none()).unwrap());
    assert_eq!(
        ids(pg.vector_search(&q, 10, &Filter::none()).unwrap()),
        want
    );

    pg.optimize().unwrap();
    let plan = pg.vector_plan(dims as i32).unwrap();
    assert!(plan.contains(&index), "no index after optimize:\n{plan}");
    // Ordinary writes keep it up to date from now on.
    pg.apply_document(&random_change(&mut rng, "b/late.md", 2, dims))
        .unwrap();
    assert_eq!(pg.lexical_stats().unwrap().chunks, 60 * 3 + 2);
}

/// BM25 remembers the term function it analysed the last query with and sends it along; when
/// another connection reindexes with a different one, the next search follows at once.
#[test]
fn bm25_follows_a_term_function_switched_by_another_connection() {
    use bib_text::terms::TermConfig;
    let Some(url) = test_url() else { return };
    let a = fresh_store(&url, "terms", HNSW);
    a.apply_document(&conformance::sample_change(
        "guides/install.md",
        &[
            "Installing packages from the feed.",
            "El paquete se instala con la instalación de nuget.",
        ],
    ))
    .unwrap();
    let q = "installing paquetes instalación";
    let before = a.bm25_search(q, 10, &Filter::none()).unwrap();
    assert!(!before.is_empty());
    let other = if TermConfig::default() == TermConfig::V1 {
        TermConfig::V2
    } else {
        TermConfig::V1
    };
    let b = a.reopen_with(HNSW).unwrap();
    assert!(b.set_term_config(&other).unwrap() > 0);
    let scores = |hits: &[Hit]| hits.iter().map(|h| (h.id, h.score)).collect::<Vec<_>>();
    let after_b = b.bm25_search(q, 10, &Filter::none()).unwrap();
    let after_a = a.bm25_search(q, 10, &Filter::none()).unwrap();
    assert_ne!(
        scores(&before),
        scores(&after_b),
        "the switch changes the scores"
    );
    assert_eq!(scores(&after_a), scores(&after_b));
    assert_eq!(a.term_config().unwrap(), other);
}

/// A process answers a question it answered before from memory only while no connection has
/// written since: a document added or removed by another connection shows in the next answer.
#[test]
fn remembered_bm25_answers_follow_writes_by_another_connection() {
    let Some(url) = test_url() else { return };
    let a = fresh_store(&url, "memo", HNSW);
    a.apply_document(&conformance::sample_change(
        "one.md",
        &["The feed holds every package."],
    ))
    .unwrap();
    let q = "feed package";
    let search = |s: &PgStore, k: usize| s.bm25_search(q, k, &Filter::none()).unwrap();
    let first = search(&a, 10);
    assert_eq!(first.len(), 1);
    assert_eq!(search(&a, 10), first, "the same answer from memory");
    let b = a.reopen_with(HNSW).unwrap();
    b.apply_document(&conformance::sample_change(
        "two.md",
        &["A second feed, and a package in it."],
    ))
    .unwrap();
    let after_add = search(&a, 10);
    assert_eq!(after_add.len(), 2, "the document another connection added");
    assert_eq!(after_add, search(&b, 10));
    assert_eq!(
        search(&a, 1),
        after_add[..1],
        "another limit is another answer"
    );
    b.remove_documents(&["two.md".to_string()]).unwrap();
    assert_eq!(
        search(&a, 10),
        first,
        "the document another connection removed"
    );
}

/// Two processes writing at once (documents sharing their terms) while a third asks: no
/// deadlock, no error, and the asker's answers end equal to a fresh connection's.
#[test]
fn concurrent_writers_and_a_remembering_reader_agree() {
    let Some(url) = test_url() else { return };
    let a = fresh_store(&url, "memo_writers", HNSW);
    let b = a.reopen_with(HNSW).unwrap();
    let reader = a.reopen_with(HNSW).unwrap();
    let q = "feed package restore";
    std::thread::scope(|s| {
        for (name, store) in [("a", &a), ("b", &b)] {
            s.spawn(move || {
                for i in 0..15 {
                    let text = format!("Restore package {i} from the feed of writer {name}.");
                    let change = conformance::sample_change(&format!("{name}/{i}.md"), &[&text]);
                    store.apply_document(&change).unwrap();
                }
            });
        }
        s.spawn(|| {
            for _ in 0..30 {
                reader.bm25_search(q, 50, &Filter::none()).unwrap();
            }
        });
    });
    let fresh = a.reopen_with(HNSW).unwrap();
    let answer = reader.bm25_search(q, 50, &Filter::none()).unwrap();
    assert_eq!(answer.len(), 30);
    assert_eq!(answer, fresh.bm25_search(q, 50, &Filter::none()).unwrap());
}

#[test]
fn reopen_keeps_data_and_refuses_newer_schema() {
    let Some(url) = test_url() else { return };
    let a = fresh_store(&url, "reopen", HNSW);
    a.apply_document(&conformance::sample_change("a.md", &["hello world"]))
        .unwrap();
    let b = a.reopen_with(HNSW).unwrap();
    assert_eq!(b.documents().unwrap().len(), 1);
    // Writes through one connection are visible to the other at once.
    a.apply_document(&DocumentChange {
        upserts: vec![sample_chunk("b.md", 0, "second doc")],
        ..conformance::sample_change("b.md", &["second doc"])
    })
    .unwrap();
    assert_eq!(
        b.bm25_search("second", 5, &Filter::none()).unwrap().len(),
        1
    );
    drop(b);
    let url_schema = with_param(&url, "schema", &a.options().schema);
    let c = PgStore::connect(&url_schema).unwrap();
    assert_eq!(c.documents().unwrap().len(), 2);
    // Pretend a newer bib wrote the schema.
    c.log_query(&bib_store::QueryLogEntry {
        id: 0,
        at_ms: 1,
        query: "q".into(),
        mode: "bm25".into(),
        chunk_ids: vec![],
        scores: vec![],
        tokens_before: 0,
        tokens_in_context: 0,
        extra: json!(null),
    })
    .unwrap();
    drop(c);
    let raw = admin_exec(
        &url,
        &format!(
            "UPDATE {}.meta SET value = '99' WHERE key = 'schema_version'",
            a.options().schema
        ),
    );
    raw.unwrap();
    match PgStore::connect(&url_schema) {
        Err(bib_store::StoreError::Schema { found: 99, .. }) => {}
        other => panic!("expected a schema error, got {other:?}"),
    }
}

#[test]
fn version_1_schemas_migrate_into_the_last_runs_collection() {
    let Some(url) = test_url() else { return };
    let a = fresh_store(&url, "migrate_v1", HNSW);
    a.apply_document(&conformance::sample_change("a.md", &["hello world"]))
        .unwrap();
    a.begin_run(&json!({"root": "/somewhere/kb-en"})).unwrap();
    let schema = a.options().schema.clone();
    // Turn the schema back into version 1 (no collection, no line columns, no sources, no
    // document frequencies, no BM25 functions).
    admin_exec(
        &url,
        &format!(
            "DROP FUNCTION {schema}.bib_bm25_since; \
             DROP FUNCTION {schema}.bib_bm25; \
             DROP TRIGGER postings_term_df_add ON {schema}.postings; \
             DROP TRIGGER postings_term_df_remove ON {schema}.postings; \
             DROP FUNCTION {schema}.bib_term_df_add(); \
             DROP FUNCTION {schema}.bib_term_df_remove(); \
             DROP TABLE {schema}.term_df; \
             DROP TABLE {schema}.doc_sources; \
             DROP INDEX {schema}.documents_by_collection; \
             ALTER TABLE {schema}.documents DROP COLUMN collection; \
             ALTER TABLE {schema}.chunks DROP COLUMN line_start, DROP COLUMN line_end; \
             UPDATE {schema}.meta SET value = '1' WHERE key = 'schema_version'"
        ),
    )
    .unwrap();
    let url_schema = with_param(&url, "schema", &schema);
    let b = PgStore::connect(&url_schema).unwrap();
    let docs = b.documents().unwrap();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].collection, "kb-en");
    let c = b.document_chunks("a.md").unwrap();
    assert_eq!((c[0].line_start, c[0].line_end), (0, 0));
    // Version 3: a source table, empty until the next ingest writes the text.
    assert!(!docs[0].has_source);
    assert_eq!(b.document_source("a.md").unwrap(), None);
    drop(b);
    // Connecting again is a no-op.
    let again = PgStore::connect(&url_schema).unwrap();
    assert_eq!(again.documents().unwrap()[0].collection, "kb-en");
}

#[test]
fn bad_urls_fail_clearly() {
    let Some(url) = test_url() else { return };
    let e = PgStore::connect("postgres://bib:wrong@127.0.0.1:1/bib").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("cannot connect"), "{msg}");
    // The driver's own error is kept as the source, and leaks no password either.
    let chain = bib_store::error_chain(&e);
    assert!(chain.len() > msg.len(), "{chain}");
    assert!(!chain.contains("wrong"), "password leaked: {chain}");
    let e = PgStore::connect(&with_param(&url, "schema", "Bad")).unwrap_err();
    assert!(e.to_string().contains("schema"), "{e}");
}
