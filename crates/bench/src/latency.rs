//! `bib bench latency` — p50/p99 of one ask at SciFact scale (5,183 chunks), query embedding
//! included, trimming off and on, over the in-memory index and over the SQLite store (the real
//! `bib ask` path, minus process start).
//!
//! Trimming is timed three ways: *cold* (a fresh sentence cache per question and no stored
//! sentence vectors, so every sentence of the five chunks is embedded), *warm* (the sentences
//! were embedded by an earlier ask in the same process) and, on the store, *ingested* (the
//! sentence vectors `bib ingest` writes, read through a fresh cache per question: what a new
//! `bib ask` process sees).
//!
//! Every ask runs with the ranking signals (`--signals`, default: the product's). When they use
//! sentence vectors, the rows that stand for a real `bib ask` read them from the store as
//! ingest wrote them (trim *off* included); *cold* still means none stored anywhere.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use bib_eval::stats::{mean, percentile};
use bib_retrieve::trim::{calibrated_threshold, TrimOptions, ASK_PROFILE};
use bib_retrieve::{
    ChunkIndex, EmbeddingCache, Filter, MemoryIndex, RetrieveOptions, Retriever, Signals,
    StoreIndex, StoreVectors, VectorBacking,
};
use bib_store::{SqliteStore, Store};
use serde_json::{json, Value};

use super::ask_common::{
    add_one_chunk_per_document, scifact_embedded, EmbeddedSciFact, OneChunkDocument, SciDoc,
    SciQuery,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark data folder (holds scifact/) [default: ../shared/bench/data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Where corpus embeddings and the SciFact store are cached between runs.
    #[arg(long, default_value = ".bib/bench-cache")]
    cache_dir: PathBuf,
    /// Questions timed (from the SciFact test queries).
    #[arg(long, default_value_t = 300)]
    queries: usize,
    /// Ranking signals of every ask (`off`, `default`, or weights as `bib ask --signals`).
    #[arg(long, value_name = "SPEC", default_value = "default")]
    signals: String,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// (name, trimming, shared cache, persistent backing) of one timed configuration.
type Variant<'a> = (
    &'static str,
    Option<TrimOptions>,
    Option<&'a EmbeddingCache>,
    Option<Arc<dyn VectorBacking>>,
);

fn time_asks(
    index: &dyn ChunkIndex,
    e: &dyn bib_embed::Embedder,
    queries: &[SciQuery],
    (trim, signals): (Option<TrimOptions>, Signals),
    shared: Option<&EmbeddingCache>,
    backing: Option<Arc<dyn VectorBacking>>,
) -> anyhow::Result<Vec<f64>> {
    let opts = RetrieveOptions {
        trim,
        signals,
        ..RetrieveOptions::default()
    };
    let mut out = Vec::with_capacity(queries.len());
    for q in queries {
        let fresh = match &backing {
            Some(b) => EmbeddingCache::default().with_backing(b.clone()),
            None => EmbeddingCache::default(),
        };
        let cache = shared.unwrap_or(&fresh);
        let t = std::time::Instant::now();
        let r =
            Retriever::new(index, Some(e), cache).retrieve(&q.text, &opts, &Filter::default())?;
        out.push(t.elapsed().as_secs_f64() * 1000.0);
        std::hint::black_box(r);
    }
    Ok(out)
}

/// What timing one index reads: the model, the questions, the trimming and signals of every
/// ask, and the stored sentence vectors.
struct LatencyRun<'a> {
    e: &'a dyn bib_embed::Embedder,
    queries: &'a [SciQuery],
    trim: Option<TrimOptions>,
    signals: Signals,
    /// The backing of the rows that stand for a real `bib ask` (trim off): the store's
    /// vectors when the signals use sentence vectors.
    asked: Option<Arc<dyn VectorBacking>>,
    /// The store's vectors, as `bib ingest` wrote them.
    persisted: Arc<dyn VectorBacking>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let EmbeddedSciFact {
        docs,
        queries,
        embedder,
        vecs,
    } = scifact_embedded(a.data.clone(), a.queries, &a.cache_dir)?;
    let e = embedder.as_ref();

    let mem = build_scifact_memory_index(&docs, &vecs)?;

    let store = open_or_build_scifact_store(&a, &docs, &vecs, e)?;
    let six = StoreIndex::new(store.as_ref());
    let persisted: Arc<dyn VectorBacking> = Arc::new(StoreVectors(store.clone()));
    let signals: Signals = a.signals.parse()?;
    let trim = Some(TrimOptions {
        threshold: calibrated_threshold(e.model_id()),
        ..ASK_PROFILE
    });
    write_sentence_vectors_as_ingest_does(&store, e)?;
    // The signals' sentence vectors come from the store, as in `bib ask`.
    let asked = (signals.sentence > 0.0).then(|| persisted.clone());
    // Warm-up (page cache, allocator, model weights).
    let warm_up = &queries[..queries.len().min(10)];
    time_asks(&mem, e, warm_up, (None, signals), None, asked.clone())?;

    println!(
        "ask latency at SciFact scale ({} chunks, {} questions, top-5 hybrid, {} model, signals {})",
        docs.len(),
        queries.len(),
        e.model_id(),
        signals.spec()
    );
    println!(
        "{:<10} {:<16} {:>9} {:>9} {:>9}",
        "index", "trim", "p50 ms", "p99 ms", "mean ms"
    );
    let timing = LatencyRun {
        e,
        queries: &queries,
        trim,
        signals,
        asked,
        persisted,
    };
    let mut rows = Vec::new();
    for (iname, index) in [
        ("memory", &mem as &dyn ChunkIndex),
        ("sqlite", &six as &dyn ChunkIndex),
    ] {
        rows.extend(timing.time_and_print_every_variant(iname, index)?);
    }
    if let Some(p) = &a.json {
        std::fs::write(
            p,
            serde_json::to_string_pretty(
                &json!({"bench": "latency", "signals": signals.spec(), "rows": rows}),
            )?,
        )?;
    }
    Ok(())
}

/// Every abstract as one chunk (`[Doc: title]`, newline, text) in a `MemoryIndex`.
fn build_scifact_memory_index(docs: &[SciDoc], vecs: &[Vec<f32>]) -> anyhow::Result<MemoryIndex> {
    let mut mem = MemoryIndex::new();
    add_one_chunk_per_document(
        &mut mem,
        docs.iter().zip(vecs).map(|(d, v)| OneChunkDocument {
            path: format!("{}.md", d.id),
            title: d.title.clone(),
            content: format!("[Doc: {}]\n{}", d.title, d.text),
            embedding: v.clone(),
        }),
    )?;
    Ok(mem)
}

/// The SciFact store under `--cache-dir`, built when it does not hold every document, with
/// the default term function.
fn open_or_build_scifact_store(
    a: &Args,
    docs: &[SciDoc],
    vecs: &[Vec<f32>],
    e: &dyn bib_embed::Embedder,
) -> anyhow::Result<Arc<SqliteStore>> {
    let store_path = a.cache_dir.join("latency-scifact.sqlite");
    std::fs::create_dir_all(&a.cache_dir).ok();
    let store = Arc::new(
        SqliteStore::open(&store_path)
            .with_context(|| format!("opening {}", store_path.display()))?,
    );
    if store.documents()?.len() != docs.len() {
        eprintln!(
            "latency: building the SciFact store at {} …",
            store_path.display()
        );
        for (d, v) in docs.iter().zip(vecs) {
            store.apply_document(&d.change(e.model_id(), v.clone()))?;
        }
    }
    // A store built by an earlier build keeps its term function; ask what `bib ingest` would.
    store.set_term_config(&bib_store::TermConfig::default())?;
    Ok(store)
}

/// Put every sentence of every stored chunk into the store's vector cache.
fn write_sentence_vectors_as_ingest_does(
    store: &Arc<SqliteStore>,
    e: &dyn bib_embed::Embedder,
) -> anyhow::Result<()> {
    // What `bib ingest` leaves behind: every sentence of every chunk in the store's vector
    // cache (the same function ingest calls).
    let texts: Vec<String> = store
        .get_chunks(&store.chunk_ids()?)?
        .iter()
        .map(|c| c.text())
        .collect();
    let t = std::time::Instant::now();
    let sv = bib_ingest::embed_sentence_vectors(
        store.as_ref(),
        e,
        &texts,
        &bib_ingest::IngestOptions::default(),
    );
    eprintln!(
        "latency: sentence vectors as ingest writes them: {} embedded, {} already there ({:.1} s)",
        sv.embedded,
        sv.reused,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

impl LatencyRun<'_> {
    /// Time every trimming variant over `index` (named `iname`), print a line per variant and
    /// return their JSON rows.
    fn time_and_print_every_variant(
        &self,
        iname: &str,
        index: &dyn ChunkIndex,
    ) -> anyhow::Result<Vec<Value>> {
        let (e, queries, trim, signals) = (self.e, self.queries, self.trim, self.signals);
        let mut rows = Vec::new();
        let warm = EmbeddingCache::default();
        // Prime the warm cache with one pass.
        time_asks(index, e, queries, (trim, signals), Some(&warm), None)?;
        let mut variants: Vec<Variant<'_>> = vec![
            ("off", None, None, self.asked.clone()),
            ("on (cold)", trim, None, None),
            ("on (warm)", trim, Some(&warm), None),
        ];
        if iname == "sqlite" {
            // A fresh per-process cache per question over the stored sentence vectors: what a
            // new `bib ask` process sees; no ask ever embeds a sentence.
            variants.push(("on (ingested)", trim, None, Some(self.persisted.clone())));
        }
        for (tname, t, cache, backing) in variants {
            // A short untimed pass first, so no variant pays for the previous one's cache
            // state (page cache, allocator, statement cache).
            let warmup = &queries[..queries.len().min(20)];
            time_asks(index, e, warmup, (t, signals), cache, backing.clone())?;
            let ms = time_asks(index, e, queries, (t, signals), cache, backing)?;
            let mean = mean(ms.iter().copied()).unwrap_or(0.0);
            let p50 = percentile(&ms, 50.0);
            let p99 = percentile(&ms, 99.0);
            println!("{iname:<10} {tname:<16} {p50:>9.2} {p99:>9.2} {mean:>9.2}");
            rows.push(json!({"index": iname, "trim": tname, "p50_ms": p50, "p99_ms": p99, "mean_ms": mean}));
        }
        Ok(rows)
    }
}
