//! `bib bench wiki` — NuGet wiki dev golden sets: is the evidence in the top-k chunks, before
//! and after sentence trimming?
//!
//! Each golden set is ingested (real pipeline, default model) into a cached store under
//! `--cache-dir` (re-runs skip unchanged chunks), then every question goes through the real ask
//! path (`bib_retrieve::Retriever` over the store). A quote counts as found when it appears in
//! the retrieved text after collapsing whitespace. Reported per set: questions whose gold file
//! is in the top k, evidence quotes found before trimming, after trimming (per trim setting),
//! and the token reduction.

use std::path::PathBuf;

use anyhow::Context;
use bib_retrieve::trim::{TrimOptions, USE_M3_THRESHOLD};
use bib_retrieve::{EmbeddingCache, Filter, Fusion, Mode, RetrieveOptions, Retriever, StoreIndex};
use bib_store::SqliteStore;
use serde::Deserialize;
use serde_json::json;

use super::ask_common::{data_dir, read_jsonl};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark data folder (holds wiki/). Default: ../shared/bench/data.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Where the ingested wiki stores are kept between runs.
    #[arg(long, default_value = ".bib/bench-cache")]
    cache_dir: PathBuf,
    /// Chunks retrieved per question.
    #[arg(long, default_value_t = 5)]
    top_k: usize,
    /// Trim thresholds to report (window 0 and 1 each).
    #[arg(long, value_delimiter = ',')]
    thresholds: Vec<f32>,
    /// More trim settings, each `threshold:window:lexical_top:min_sentences`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.28:1:5:1,0.21:0:5:0,0.21:1:5:0"
    )]
    trims: Vec<String>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct Golden {
    id: String,
    question: String,
    #[serde(default)]
    files: Vec<String>,
    #[serde(default)]
    evidence: Vec<String>,
}

fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let data = data_dir(a.data.clone()).join("wiki");
    let embedder = super::super::ask::load_embedder(bib_embed::DEFAULT_MODEL)?;
    let thresholds = if a.thresholds.is_empty() {
        vec![0.2, 0.3, USE_M3_THRESHOLD]
    } else {
        a.thresholds.clone()
    };
    let mut report = Vec::new();
    for (golden, wiki) in [
        ("golden_en.jsonl", "nuget-en"),
        ("golden_es_dev.jsonl", "nuget-es"),
    ] {
        let qs: Vec<Golden> = read_jsonl(&data.join(golden))?;
        let root = data.join(wiki);
        let store_path = a.cache_dir.join(format!("wiki-{wiki}.sqlite"));
        std::fs::create_dir_all(&a.cache_dir).ok();
        let store = SqliteStore::open(&store_path)
            .with_context(|| format!("opening {}", store_path.display()))?;
        let run = bib_ingest::ingest(
            &root,
            &store,
            embedder.as_ref(),
            &bib_ingest::IngestOptions::default(),
            &bib_ingest::NoProgress,
        )?;
        eprintln!("{wiki}: ingest {} in {} ms", run.status, run.duration_ms);
        let index = StoreIndex::new(&store);
        let cache = EmbeddingCache::default();
        let retriever = Retriever::new(&index, Some(embedder.as_ref()), &cache);
        // (name, mode, fusion, trim): the retrieval modes untrimmed, then trimming over the
        // default (hybrid, convex) retrieval.
        let d = RetrieveOptions::default();
        let mut settings: Vec<(String, Mode, Fusion, Option<TrimOptions>)> = vec![
            ("no trim".into(), Mode::Hybrid, d.fusion, None),
            ("bm25".into(), Mode::Bm25, d.fusion, None),
            ("vector".into(), Mode::Vector, d.fusion, None),
            ("hybrid rrf".into(), Mode::Hybrid, Fusion::Rrf, None),
            ("hybrid convex".into(), Mode::Hybrid, Fusion::Convex, None),
        ];
        for spec in &a.trims {
            let p: Vec<&str> = spec.split(':').collect();
            anyhow::ensure!(
                p.len() == 4,
                "--trims: `{spec}` is not threshold:window:lexical_top:min_sentences"
            );
            let bad = || anyhow::anyhow!("--trims: `{spec}` has a value that is not a number");
            let t = TrimOptions {
                threshold: p[0].parse().map_err(|_| bad())?,
                window: p[1].parse().map_err(|_| bad())?,
                lexical_top: p[2].parse().map_err(|_| bad())?,
                min_sentences: p[3].parse().map_err(|_| bad())?,
                ..TrimOptions::default()
            };
            settings.push((
                format!(
                    "trim {:.2} w{} lx{} m{}",
                    t.threshold, t.window, t.lexical_top, t.min_sentences
                ),
                Mode::Hybrid,
                d.fusion,
                Some(t),
            ));
        }
        for &t in &thresholds {
            for w in [0usize, 1] {
                settings.push((
                    format!("trim {t:.2} w{w}"),
                    Mode::Hybrid,
                    d.fusion,
                    Some(TrimOptions {
                        threshold: t,
                        window: w,
                        ..TrimOptions::default()
                    }),
                ));
            }
        }
        println!(
            "\n{golden} over {wiki}: {} questions, top-{} (trim rows: hybrid, default fusion)",
            qs.len(),
            a.top_k
        );
        println!(
            "{:<22} {:>10} {:>12} {:>14} {:>10}",
            "setting", "file hit", "evidence", "all evidence", "tokens"
        );
        let mut base_tokens = 0usize;
        for (name, mode, fusion, trim) in &settings {
            let opts = RetrieveOptions {
                top_k: a.top_k,
                mode: *mode,
                fusion: *fusion,
                trim: *trim,
                ..RetrieveOptions::default()
            };
            let (mut file_hit, mut ev_found, mut ev_total, mut all_found, mut tokens) =
                (0, 0, 0, 0, 0);
            let mut misses = Vec::new();
            for q in &qs {
                let r = retriever.retrieve(&q.question, &opts, &Filter::default())?;
                tokens += r.tokens_in_context;
                if r.chunks.iter().any(|c| q.files.contains(&c.chunk.path)) {
                    file_hit += 1;
                }
                let ctx = norm(
                    &r.chunks
                        .iter()
                        .map(|c| c.chunk.content.as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
                let found = q.evidence.iter().filter(|e| ctx.contains(&norm(e))).count();
                ev_found += found;
                ev_total += q.evidence.len();
                if found == q.evidence.len() {
                    all_found += 1;
                } else {
                    misses.push(q.id.clone());
                }
            }
            if name == "no trim" {
                base_tokens = tokens;
            }
            let red = if base_tokens == 0 {
                0.0
            } else {
                1.0 - tokens as f64 / base_tokens as f64
            };
            println!(
                "{name:<22} {:>4}/{:<5} {:>5}/{:<6} {:>6}/{:<7} {:>6} ({:+.0}%)",
                file_hit,
                qs.len(),
                ev_found,
                ev_total,
                all_found,
                qs.len(),
                tokens,
                -100.0 * red
            );
            report.push(
                json!({"set": golden, "setting": name, "file_hit": file_hit, "questions": qs.len(),
                "evidence_found": ev_found, "evidence_total": ev_total, "all_evidence": all_found,
                "tokens": tokens, "reduction": red, "missed": misses}),
            );
        }
    }
    if let Some(p) = &a.json {
        std::fs::write(
            p,
            serde_json::to_string_pretty(&json!({"bench": "wiki", "rows": report}))?,
        )?;
    }
    Ok(())
}
