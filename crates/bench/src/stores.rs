//! `bib bench stores` — the two [`Store`] implementations side by side: ingest time and query
//! latency (p50/p99) of SQLite and PostgreSQL + pgvector on the same data, in one run.
//!
//! Two datasets:
//! - **SciFact** (5,183 abstracts, one chunk each, real `use-m3` vectors from the bench cache,
//!   the 300 test claims as queries);
//! - **synthetic** (`--synthetic N` chunks, default 100,000): [`SyntheticCorpus`], the corpus
//!   `bib bench scale` grows to a million chunks.
//!
//! Per store and dataset: ingest wall time (one `apply_document` per document, as `bib ingest`
//! does), then per query `bm25_search` (top 100), `vector_search` (top 100) and a *hybrid*
//! ask without the model (`Retriever::retrieve` with the query's given vector: both lists,
//! convex fusion, the ranking signals, the top 5 chunks read) — p50 and p99. PostgreSQL is
//! timed with exact vector search and with its HNSW index; HNSW recall@10 against exact is
//! printed beside it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use bib_embed::{EmbedError, EmbedKind, Embedder};
use bib_eval::stats::percentile;
use bib_retrieve::{EmbeddingCache, RetrieveOptions, Retriever, StoreIndex};
use bib_store::{ChunkId, DocumentChange, Filter, Hit, SqliteStore, Store};
use bib_store_pg::{PgOptions, PgStore, VectorSearch};
use bib_text::tokens::{EstimateCounter, TokenCounter};
use serde_json::json;

use super::ask_common::{scifact_embedded, EmbeddedSciFact};
use super::synthetic::SyntheticCorpus;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark data folder (holds scifact/) [default: ../shared/bench/data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Where SciFact corpus embeddings are cached between runs.
    #[arg(long, default_value = ".bib/bench-cache")]
    cache_dir: PathBuf,
    /// PostgreSQL server (a `postgres://` URL); each run works in fresh schemas it drops at
    /// the end [default: `BIB_TEST_PG_URL`, then a `postgres://` `BIB_STORE`]
    #[arg(long)]
    pg: Option<String>,
    /// Chunks in the synthetic dataset (0 skips it).
    #[arg(long, default_value_t = 100_000)]
    synthetic: usize,
    /// Vector dimensions of the synthetic dataset (use-m3's 512 by default).
    #[arg(long, default_value_t = 512)]
    dims: usize,
    /// Queries timed per dataset.
    #[arg(long, default_value_t = 300)]
    queries: usize,
    /// Skip the SciFact dataset.
    #[arg(long)]
    no_scifact: bool,
    /// `hnsw.ef_search` values timed on PostgreSQL (each with its recall@10 against exact).
    #[arg(long, value_delimiter = ',', default_value = "200")]
    ef_search: Vec<u32>,
    /// PostgreSQL only (recall against its own exact search): for HNSW experiments.
    #[arg(long, conflicts_with = "sqlite_only")]
    postgres_only: bool,
    /// SQLite only (no PostgreSQL server needed): for quick store experiments.
    #[arg(long)]
    sqlite_only: bool,
    /// Keep the loaded stores (a SQLite file under `--cache-dir`, a PostgreSQL schema
    /// `bib_bench_<dataset>_kept`) and reuse them on the next run with `--keep` when they hold
    /// the dataset's chunks: query-side experiments without reloading (ingest shows as kept).
    #[arg(long)]
    keep: bool,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// A dataset ready to load into any store.
struct Dataset {
    name: String,
    docs: Vec<DocumentChange>,
    queries: Vec<(String, Vec<f32>)>,
}

impl Dataset {
    fn chunks(&self) -> usize {
        self.docs.iter().map(|d| d.upserts.len()).sum()
    }
}

/// Timings of one store on one dataset.
struct Row {
    dataset: String,
    store: String,
    /// Seconds the load took; `None` for a store kept from an earlier run (`--keep`).
    ingest_s: Option<f64>,
    chunks: usize,
    times: PathTimes,
    recall10: Option<f64>,
}

fn scifact(a: &Args) -> anyhow::Result<Dataset> {
    let EmbeddedSciFact {
        docs,
        queries,
        embedder,
        vecs,
    } = scifact_embedded(a.data.clone(), a.queries, &a.cache_dir)?;
    let e = embedder.as_ref();
    let qtexts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
    let qvecs = e.embed(&qtexts, bib_embed::EmbedKind::Query)?;
    let changes = docs
        .iter()
        .zip(vecs)
        .map(|(d, v)| d.change(e.model_id(), v))
        .collect();
    Ok(Dataset {
        name: "scifact".into(),
        docs: changes,
        queries: queries.into_iter().map(|q| q.text).zip(qvecs).collect(),
    })
}

fn synthetic(n: usize, dims: usize, nq: usize) -> Dataset {
    let corpus = SyntheticCorpus::new(dims, "synthetic");
    Dataset {
        name: format!("synthetic {}k", n / 1000),
        docs: corpus.documents(n).collect(),
        queries: corpus.queries(nq),
    }
}

pub(crate) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// [`ingest`] unless `keep` and the store already holds the dataset's chunks (loaded by an
/// earlier `--keep` run): the load's seconds, or `None` when it was reused.
fn load(store: &dyn Store, data: &Dataset, keep: bool) -> anyhow::Result<Option<f64>> {
    if keep {
        let held = store.lexical_stats()?.chunks;
        if held == data.chunks() as u64 {
            eprintln!("{} {}: reusing the kept store", data.name, store.backend());
            return Ok(None);
        }
        if held > 0 {
            anyhow::bail!(
                "{}: the kept store {} holds {held} chunks, not the dataset's {}; remove it",
                store.backend(),
                store.location(),
                data.chunks()
            );
        }
    }
    ingest(store, data).map(Some)
}

fn ingest(store: &dyn Store, data: &Dataset) -> anyhow::Result<f64> {
    // A bulk load, as `bib ingest` runs one.
    store.set_bulk_writes(true);
    let t = Instant::now();
    for (i, d) in data.docs.iter().enumerate() {
        store
            .apply_document(d)
            .with_context(|| format!("{}: writing {}", store.backend(), d.path))?;
        if i % 500 == 0 {
            eprint!(
                "\r{} {}: {}/{} documents",
                data.name,
                store.backend(),
                i,
                data.docs.len()
            );
        }
    }
    store.set_bulk_writes(false);
    // What `bib ingest` does at the end of a run (PostgreSQL: vacuum for index-only BM25).
    store
        .optimize()
        .with_context(|| format!("{}: housekeeping after the ingest", store.backend()))?;
    eprintln!();
    Ok(t.elapsed().as_secs_f64())
}

/// A chunk's identity across stores (chunk ids are local to one store).
pub(crate) type ChunkKey = (String, u32);

/// Latencies in milliseconds of the three store paths, one per query.
#[derive(Debug, Default)]
pub(crate) struct PathTimes {
    pub bm25: Vec<f64>,
    pub vector: Vec<f64>,
    pub hybrid: Vec<f64>,
}

/// An embedder that knows the benchmark's query vectors, so a hybrid `Retriever::retrieve`
/// runs the product's whole path (both lists, fusion, ranking signals, the chunks read, token
/// counts) on a synthetic store without a model. Any other text is an error.
struct KnownQueries {
    model: String,
    dims: usize,
    vectors: HashMap<String, Vec<f32>>,
}

impl Embedder for KnownQueries {
    fn model_id(&self) -> &str {
        &self.model
    }
    fn dimensions(&self) -> usize {
        self.dims
    }
    fn max_input_tokens(&self) -> usize {
        usize::MAX
    }
    fn tokenizer(&self) -> &dyn TokenCounter {
        &EstimateCounter
    }
    fn embed(&self, texts: &[&str], _kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts
            .iter()
            .map(|t| {
                self.vectors.get(*t).cloned().ok_or_else(|| {
                    EmbedError::Other(format!("benchmark embedder: no vector for {t:?}"))
                })
            })
            .collect()
    }
}

/// After a warm-up on the first five queries (caches, prepared statements, the SQLite store's
/// in-memory vector index), time per query `bm25_search` (top 100), `vector_search` (top 100)
/// and a hybrid ask without the model: `Retriever::retrieve` with the default options (top 5,
/// 50 candidates per list, convex fusion, the default signals) and the query's given vector.
/// Returns each query's vector hits.
pub(crate) fn time_store_paths(
    store: &dyn Store,
    queries: &[(String, Vec<f32>)],
    times: &mut PathTimes,
) -> anyhow::Result<Vec<Vec<Hit>>> {
    let f = Filter::default();
    let embedder = KnownQueries {
        model: store.embedding_model()?.unwrap_or_default(),
        dims: queries.first().map_or(0, |(_, v)| v.len()),
        vectors: queries.iter().cloned().collect(),
    };
    let index = StoreIndex::new(store);
    let cache = EmbeddingCache::with_capacity(queries.len() + 1);
    let retriever = Retriever::new(&index, Some(&embedder), &cache);
    let opts = RetrieveOptions::default();
    for (q, v) in queries.iter().take(5) {
        store.bm25_search(q, 100, &f)?;
        store.vector_search(v, 100, &f)?;
        retriever.retrieve(q, &opts, &f)?;
    }
    let mut hits = Vec::with_capacity(queries.len());
    for (q, v) in queries {
        let t = Instant::now();
        std::hint::black_box(store.bm25_search(q, 100, &f)?);
        times.bm25.push(ms(t));
        let t = Instant::now();
        let vs = store.vector_search(v, 100, &f)?;
        times.vector.push(ms(t));
        hits.push(vs);
        let t = Instant::now();
        std::hint::black_box(retriever.retrieve(q, &opts, &f)?);
        times.hybrid.push(ms(t));
    }
    Ok(hits)
}

/// Time every query; also return each query's vector top-10 (for HNSW recall).
fn query(store: &dyn Store, data: &Dataset, row: &mut Row) -> anyhow::Result<Vec<Vec<ChunkKey>>> {
    let hits = time_store_paths(store, &data.queries, &mut row.times)?;
    top10_keys(store, &hits)
}

/// `(path, chunk_index)` of each id, in order (ids are local to one store; unknown ones are
/// skipped, as `Store::get_chunks` skips them).
pub(crate) fn chunk_keys(store: &dyn Store, ids: &[ChunkId]) -> anyhow::Result<Vec<ChunkKey>> {
    Ok(store
        .get_chunks(ids)?
        .into_iter()
        .map(|c| (c.path, c.chunk_index))
        .collect())
}

/// The first ten of each hit list as chunk keys: recall compared across stores.
pub(crate) fn top10_keys(
    store: &dyn Store,
    hits: &[Vec<Hit>],
) -> anyhow::Result<Vec<Vec<ChunkKey>>> {
    hits.iter()
        .map(|vs| {
            let top: Vec<ChunkId> = vs.iter().take(10).map(|h| h.id).collect();
            chunk_keys(store, &top)
        })
        .collect()
}

/// The share of each exact top-10 that the approximate top-10 holds, over all queries.
pub(crate) fn recall_at_10<T: PartialEq>(exact: &[Vec<T>], approx: &[Vec<T>]) -> f64 {
    let (mut hit, mut total) = (0usize, 0usize);
    for (e, a) in exact.iter().zip(approx) {
        total += e.len();
        hit += e.iter().filter(|id| a.contains(id)).count();
    }
    hit as f64 / total.max(1) as f64
}

fn pg_url(a: &Args) -> anyhow::Result<String> {
    if let Some(u) = &a.pg {
        return Ok(u.clone());
    }
    for var in ["BIB_TEST_PG_URL", "BIB_STORE"] {
        if let Ok(u) = std::env::var(var) {
            if bib_store_pg::is_postgres_url(&u) {
                return Ok(u);
            }
        }
    }
    anyhow::bail!(
        "bib bench stores needs a PostgreSQL server: pass --pg postgres://… or set \
         BIB_TEST_PG_URL (scripts/postgres-dev.sh start; scripts/postgres-dev.sh url)"
    )
}

fn pg_store(url: &str, dataset: &str, v: VectorSearch, keep: bool) -> anyhow::Result<PgStore> {
    let tag: String = dataset
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    let schema = if keep {
        format!("bib_bench_{tag}_kept")
    } else {
        format!("bib_bench_{tag}_{}", std::process::id())
    };
    let mut o = PgOptions::parse(url)?
        .with_schema(&schema)?
        .with_vector_search(v);
    o.drop_schema_on_drop = !keep;
    Ok(PgStore::connect_with(o)?)
}

fn bench_dataset(a: &Args, url: &str, data: &Dataset) -> anyhow::Result<Vec<Row>> {
    let new_row = |store: &str, ingest_s: Option<f64>| Row {
        dataset: data.name.clone(),
        store: store.into(),
        ingest_s,
        chunks: data.chunks(),
        times: PathTimes::default(),
        recall10: None,
    };
    let mut rows = Vec::new();

    // SQLite's exact top-10 is the recall reference (PostgreSQL's exact one with --postgres-only).
    let mut exact_tops = None;
    if !a.postgres_only {
        let dir = tempfile_dir(a)?;
        let path = dir.join(format!("{}.sqlite", data.name.replace(' ', "-")));
        if !a.keep {
            let _ = std::fs::remove_file(&path);
        }
        let sqlite =
            SqliteStore::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let s = load(&sqlite, data, a.keep)?;
        let mut row = new_row("sqlite", s);
        exact_tops = Some(query(&sqlite, data, &mut row)?);
        rows.push(row);
        drop(sqlite);
        if !a.keep {
            for ext in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
            }
        }
    }

    if a.sqlite_only {
        return Ok(rows);
    }
    let pg = pg_store(url, &data.name, VectorSearch::Exact, a.keep)?;
    let s = load(&pg, data, a.keep)?;
    let mut row = new_row("postgres exact", s);
    let pg_exact = query(&pg, data, &mut row)?;
    let exact_tops = exact_tops.unwrap_or_else(|| pg_exact.clone());
    row.recall10 = Some(recall_at_10(&exact_tops, &pg_exact));
    rows.push(row);
    // The same schema searched through HNSW (the index was built during ingest).
    for &ef in &a.ef_search {
        let hnsw = pg.reopen_with(VectorSearch::Hnsw { ef_search: ef })?;
        let name = if ef == bib_store_pg::DEFAULT_EF_SEARCH {
            "postgres hnsw".to_string()
        } else {
            format!("postgres hnsw ef={ef}")
        };
        let mut row = new_row(&name, s);
        let tops = query(&hnsw, data, &mut row)?;
        row.recall10 = Some(recall_at_10(&exact_tops, &tops));
        rows.push(row);
    }
    drop(pg);
    Ok(rows)
}

fn tempfile_dir(a: &Args) -> anyhow::Result<PathBuf> {
    let d = a.cache_dir.join("stores-bench");
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let url = if a.sqlite_only {
        String::new()
    } else {
        pg_url(&a)?
    };
    let mut datasets = Vec::new();
    if !a.no_scifact {
        datasets.push(scifact(&a)?);
    }
    if a.synthetic > 0 {
        datasets.push(synthetic(a.synthetic, a.dims, a.queries));
    }
    let mut rows = Vec::new();
    for d in &datasets {
        eprintln!(
            "{}: {} documents, {} chunks, {} queries",
            d.name,
            d.docs.len(),
            d.chunks(),
            d.queries.len()
        );
        rows.extend(bench_dataset(&a, &url, d)?);
    }
    let report = print_table(&rows);
    print_ratios(&datasets, &rows);
    if let Some(p) = &a.json {
        std::fs::write(
            p,
            serde_json::to_string_pretty(&json!({"bench": "stores", "rows": report}))?,
        )
        .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// The table of every row; returns the rows as JSON.
fn print_table(rows: &[Row]) -> Vec<serde_json::Value> {
    println!(
        "\n{:<15} {:<20} {:>9} {:>9}  {:>17}  {:>17}  {:>17}  {:>9}",
        "dataset",
        "store",
        "ingest s",
        "chunks/s",
        "bm25 p50/p99 ms",
        "vector p50/p99",
        "hybrid p50/p99",
        "recall@10"
    );
    let mut report = Vec::new();
    for r in rows {
        let p = |v: &[f64]| (percentile(v, 50.0), percentile(v, 99.0));
        let (b50, b99) = p(&r.times.bm25);
        let (v50, v99) = p(&r.times.vector);
        let (h50, h99) = p(&r.times.hybrid);
        let rate = r.ingest_s.map(|s| r.chunks as f64 / s.max(1e-9));
        let shown = |x: Option<f64>, digits: usize| {
            x.map_or_else(|| "kept".to_string(), |x| format!("{x:.digits$}"))
        };
        println!(
            "{:<15} {:<20} {:>9} {:>9}  {:>8.2} /{:>7.2}  {:>8.2} /{:>7.2}  {:>8.2} /{:>7.2}  {:>9}",
            r.dataset,
            r.store,
            shown(r.ingest_s, 1),
            shown(rate, 0),
            b50,
            b99,
            v50,
            v99,
            h50,
            h99,
            r.recall10.map_or("—".into(), |x| format!("{x:.4}"))
        );
        report.push(json!({
            "dataset": r.dataset, "store": r.store, "chunks": r.chunks,
            "ingest_s": r.ingest_s, "chunks_per_s": rate,
            "bm25_p50_ms": b50, "bm25_p99_ms": b99,
            "vector_p50_ms": v50, "vector_p99_ms": v99,
            "hybrid_p50_ms": h50, "hybrid_p99_ms": h99,
            "recall10_vs_sqlite_exact": r.recall10,
        }));
    }
    report
}

/// Each PostgreSQL row against SQLite's, per dataset.
fn print_ratios(datasets: &[Dataset], rows: &[Row]) {
    println!("\nratios (postgres / sqlite; > 1 = postgres slower):");
    for d in datasets {
        let of = |s: &str| rows.iter().find(|r| r.dataset == d.name && r.store == s);
        let Some(base) = of("sqlite") else { continue };
        let names: Vec<&str> = rows
            .iter()
            .filter(|r| r.dataset == d.name && r.store != "sqlite")
            .map(|r| r.store.as_str())
            .collect();
        for name in names {
            let Some(r) = of(name) else { continue };
            let h = |v: &[f64]| percentile(v, 50.0);
            let ingest = match (r.ingest_s, base.ingest_s) {
                (Some(x), Some(b)) => format!("{:.2}×", x / b.max(1e-9)),
                _ => "kept".to_string(),
            };
            println!(
                "  {:<15} {:<20} ingest {ingest}  bm25 p50 {:.2}×  vector p50 {:.2}×  hybrid p50 {:.2}×",
                d.name,
                name,
                h(&r.times.bm25) / h(&base.times.bm25).max(1e-9),
                h(&r.times.vector) / h(&base.times.vector).max(1e-9),
                h(&r.times.hybrid) / h(&base.times.hybrid).max(1e-9),
            );
        }
    }
}
