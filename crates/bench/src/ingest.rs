//! `bib bench ingest` (and the `bench_ingest` example) — ingest real wikis (the NuGet wikis by
//! default) with the default model, twice, into fresh stores: wall time, chunks/s, the
//! embedding share, audit coherence, the unchanged second run's ratio, and store search
//! latency at that scale.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use bib_embed::{EmbedKind, Embedder};
use bib_eval::stats::percentile;
use bib_ingest::{IngestOptions, NoProgress};
use bib_store::{Filter, SqliteStore, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Wiki directories [default: the NuGet es and en wikis under ../shared/bench/data/wiki].
    #[arg(long = "wiki")]
    pub wikis: Vec<PathBuf>,
    /// Where to put the temporary stores (removed afterwards).
    #[arg(long)]
    pub tmp: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let wikis = if args.wikis.is_empty() {
        let base = PathBuf::from("../shared/bench/data/wiki");
        vec![base.join("nuget-es"), base.join("nuget-en")]
    } else {
        args.wikis
    };
    let tmp = args.tmp.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("bib-bench-ingest-{}", std::process::id()))
    });
    let t = Instant::now();
    let embedder = bib_embed::UseM3::load_default().context("loading the default model")?;
    println!(
        "model {} loaded in {:.2} s (not counted below)\n",
        embedder.model_id(),
        t.elapsed().as_secs_f64()
    );
    let report = report(&wikis, &embedder, &tmp)?;
    let _ = std::fs::remove_dir_all(&tmp);
    println!("{report}");
    Ok(())
}

/// The benchmark over `wikis` with `embedder`, stores under `tmp`: a Markdown report.
pub fn report(wikis: &[PathBuf], embedder: &dyn Embedder, tmp: &Path) -> anyhow::Result<String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| wiki | registered | chunks | run 1 wall s | chunks/s | embedding % of run | tokens embedded | audit | run 2 wall s | run 2 embedded | run 2 / run 1 |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    let mut latency_rows = Vec::new();
    for wiki in wikis {
        let name = wiki.file_name().map_or_else(
            || wiki.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        let dir = tmp.join(&name);
        let _ = std::fs::remove_dir_all(&dir);
        let store = SqliteStore::open(dir.join("kb.sqlite"))?;
        let opts = IngestOptions::default();
        let t1 = Instant::now();
        let r1 = bib_ingest::ingest(wiki, &store, embedder, &opts, &NoProgress)
            .with_context(|| format!("ingesting {}", wiki.display()))?;
        let s1 = t1.elapsed().as_secs_f64();
        let t2 = Instant::now();
        let r2 = bib_ingest::ingest(wiki, &store, embedder, &opts, &NoProgress)
            .with_context(|| format!("ingesting {}", wiki.display()))?;
        let s2 = t2.elapsed().as_secs_f64();
        let b1 = r1.phase_b.clone().unwrap_or_default();
        let b2 = r2.phase_b.clone().unwrap_or_default();
        let coherent = r1.phase_c.as_ref().is_some_and(|c| c.coherent)
            && r2.phase_c.as_ref().is_some_and(|c| c.coherent);
        let _ = writeln!(
            out,
            "| {name} | {}/{} ({:.1}%) | {} | {:.2} | {:.1} | {:.1}% | {} | {} | {:.3} | {} | {:.4} |",
            r1.phase_a.registered,
            r1.phase_a.files,
            r1.coverage.documents * 100.0,
            b1.chunks_total,
            s1,
            (b1.chunks_created + b1.chunks_updated) as f64 / s1,
            b1.embed_ms as f64 / 1000.0 / s1 * 100.0,
            b1.tokens_embedded,
            if coherent { "coherent" } else { "INCOHERENT" },
            s2,
            b2.chunks_embedded,
            s2 / s1
        );
        for e in &r1.errors {
            let _ = writeln!(out, "|  problem: [{}] {}: {} |", e.phase, e.path, e.reason);
        }
        let titles: Vec<String> = store.documents()?.into_iter().map(|d| d.title).collect();
        let refs: Vec<&str> = titles.iter().map(String::as_str).collect();
        let mut qv = Vec::new();
        for chunk in refs.chunks(25) {
            qv.extend(embedder.embed(chunk, EmbedKind::Query)?);
        }
        let (mut bm, mut vs) = (Vec::new(), Vec::new());
        for (q, v) in titles.iter().zip(&qv) {
            let t = Instant::now();
            store.bm25_search(q, 10, &Filter::none())?;
            bm.push(t.elapsed().as_secs_f64() * 1000.0);
            let t = Instant::now();
            store.vector_search(v, 10, &Filter::none())?;
            vs.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let warm = &vs[1.min(vs.len())..];
        latency_rows.push(format!(
            "| {name} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            b1.chunks_total,
            titles.len(),
            percentile(&bm, 50.0),
            percentile(&bm, 99.0),
            vs.first().copied().unwrap_or(0.0),
            percentile(warm, 50.0),
            percentile(warm, 99.0)
        ));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = writeln!(
        out,
        "\nSearch latency, top-10, ms (queries = document titles; query embedding excluded):\n"
    );
    let _ = writeln!(
        out,
        "| wiki | chunks | queries | BM25 p50 | BM25 p99 | vector first (loads cache) | vector p50 | vector p99 |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for r in latency_rows {
        let _ = writeln!(out, "{r}");
    }
    Ok(out)
}
