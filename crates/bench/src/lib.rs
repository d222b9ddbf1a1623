//! `bib-bench` — the benchmarks behind `bib bench <name>`: each writes a report. Slow ones
//! live here, never in tests. Each benchmark is one module with `Args` (clap) and `run`; the
//! `bib` binary only dispatches to [`run`].
//!
//! The crate sits above the application layer (`bib-app`) and the library crates and uses
//! them as any front end does; nothing in the product depends on it.

use clap::Subcommand;

mod ask_common;
mod embed;
pub mod ingest;
mod latency;
mod locomo;
mod pack_common;
pub mod probes;
mod relevance;
mod sbd;
mod scale;
mod scifact;
mod serve;
pub mod split;
mod stores;
mod synthetic;
mod wiki;
mod xquad;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib bench scifact
  bib bench xquad
  bib bench wiki

Each benchmark prints a report; BENCHMARKS.md has the results and the commands that made them.")]
pub struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Embedding throughput next to the original Python package (same vectors), SciFact vector nDCG@10.
    #[command(
        after_help = "Examples:\n  bib bench embed\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Embed(embed::Args),
    /// Ingest the NuGet wikis with the default model: wall time, chunks/s, embedding share,
    /// second-run ratio, search latency.
    #[command(
        after_help = "Examples:\n  bib bench ingest\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Ingest(ingest::Args),
    /// Ask latency p50/p99 at SciFact scale, trim off/on, memory and SQLite index.
    #[command(
        after_help = "Examples:\n  bib bench latency\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Latency(latency::Args),
    /// History packer evidence recall on LoCoMo, side by side with the JavaScript packer.
    #[command(
        after_help = "Examples:\n  bib bench locomo\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Locomo(locomo::Args),
    /// History packer recall on the project's seeded multilingual paraphrase probe set: 14
    /// sessions (7 languages × dialogue/agent), by language, kind, style and superseded facts.
    #[command(
        after_help = "Examples:\n  bib bench probes\n  bib bench probes --hybrid --budgets 1500\n  bib bench probes --seed 3 --write target/probes --failures\n\nThe set is generated from bench/probes/*.json; nothing is read from disk. See bench/probes/README.md."
    )]
    Probes(probes::Args),
    /// Calibrate the relevance floor: "no good match" on off-topic vs answerable NuGet wiki
    /// questions, over a sweep of floors.
    #[command(
        after_help = "Examples:\n  bib bench relevance\n  bib bench relevance --sweep 0.16:0.30:0.01 --json target/relevance.json\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Relevance(relevance::Args),
    /// Sentence-boundary accuracy on the SBD golden sets (exact match per case).
    #[command(
        after_help = "Examples:\n  bib bench sbd\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Sbd(sbd::Args),
    /// Ask retrieval quality on SciFact: nDCG@10 / Recall@100 for bm25, vector, hybrid.
    #[command(
        after_help = "Examples:\n  bib bench scifact\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Scifact(scifact::Args),
    /// Load test of `bib serve` on loopback: concurrent asks + registrations, req/s, p50/p99,
    /// errors, lost writes.
    #[command(
        after_help = "Examples:\n  bib bench serve\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Serve(serve::Args),
    /// SQLite vs PostgreSQL stores side by side: ingest time and query p50/p99 on SciFact and
    /// on synthetic chunks (needs a PostgreSQL server).
    #[command(
        after_help = "Examples:\n  BIB_TEST_PG_URL=postgres://bib:bib@127.0.0.1:55432/bib bib bench stores\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Stores(stores::Args),
    /// The embedded store at 100k and 1M synthetic chunks: ingest rate, disk size, index load,
    /// BM25/vector/hybrid p50/p99, recall@10 against exact, peak RSS of `bib ask`/`bib serve`.
    #[command(
        after_help = "Examples:\n  bib bench scale\n  bib bench scale --chunks 100000 --no-processes\n\nStores are built once under .bib/bench-cache/scale and reused (the 1M one: ~80 min and 11 GB of disk on 2 cores); see BENCHMARKS.md."
    )]
    Scale(scale::Args),
    /// Sentence-splitter throughput (MB/s) on the NuGet wikis, next to UAX #29.
    #[command(
        after_help = "Examples:\n  bib bench split\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Split(split::Args),
    /// Ask on the NuGet wiki golden sets: evidence in top-k before/after trimming.
    #[command(
        after_help = "Examples:\n  bib bench wiki\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Wiki(wiki::Args),
    /// Ask trimming on XQuAD es/en: answers kept vs token reduction over a threshold sweep.
    #[command(
        after_help = "Examples:\n  bib bench xquad\n\nData is read from ../shared/bench/data; see BENCHMARKS.md for the full commands."
    )]
    Xquad(xquad::Args),
}

/// The embedding model `id` as the product loads it (`bib_app::model::load_embedder`): an
/// installed model, or `openai:<name>` of the `[embed]` endpoint, with the settings read as
/// every command reads them (environment, BIB_CONFIG or ./bib.toml).
pub(crate) fn load_embedder(id: &str) -> anyhow::Result<Box<dyn bib_embed::Embedder>> {
    let settings = bib_app::Settings::resolve(None, &|k| std::env::var(k).ok(), |_| ())?;
    Ok(bib_app::model::load_embedder(id, &settings.embed)?)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.bench {
        Bench::Embed(a) => embed::run(a),
        Bench::Ingest(a) => ingest::run(a),
        Bench::Latency(a) => latency::run(a),
        Bench::Locomo(a) => locomo::run(a),
        Bench::Probes(a) => probes::run(a),
        Bench::Relevance(a) => relevance::run(a),
        Bench::Sbd(a) => sbd::run(a),
        Bench::Scifact(a) => scifact::run(a),
        Bench::Serve(a) => serve::run(a),
        Bench::Split(a) => split::run(a),
        Bench::Stores(a) => stores::run(a),
        Bench::Scale(a) => scale::run(a),
        Bench::Wiki(a) => wiki::run(a),
        Bench::Xquad(a) => xquad::run(a),
    }
}
