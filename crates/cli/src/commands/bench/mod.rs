//! `bib bench <name>` — benchmarks that write a report. Slow ones live here, never in tests.
//! Each benchmark is one module with `Args` and `run`.

use clap::Subcommand;

mod ask_common;
mod embed;
mod ingest;
mod latency;
mod locomo;
mod relevance;
mod sbd;
mod scifact;
mod serve;
mod split;
mod stores;
mod wiki;
mod xquad;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Embedding throughput vs the reference Python package (same vectors), SciFact vector nDCG@10.
    Embed(embed::Args),
    /// Ingest the NuGet wikis with the default model: wall time, chunks/s, embedding share,
    /// second-run ratio, search latency.
    Ingest(ingest::Args),
    /// Ask latency p50/p99 at SciFact scale, trim off/on, memory and SQLite index.
    Latency(latency::Args),
    /// History packer evidence recall on LoCoMo, side by side with the JS reference.
    Locomo(locomo::Args),
    /// Calibrate the relevance floor: "no good match" on off-topic vs answerable NuGet wiki
    /// questions, over a sweep of floors.
    Relevance(relevance::Args),
    /// Sentence-boundary accuracy on the SBD golden sets (exact match per case).
    Sbd(sbd::Args),
    /// Ask retrieval quality on SciFact: nDCG@10 / Recall@100 for bm25, vector, hybrid.
    Scifact(scifact::Args),
    /// Load test of `bib serve` on loopback: concurrent asks + registrations, req/s, p50/p99,
    /// errors, lost writes.
    Serve(serve::Args),
    /// SQLite vs PostgreSQL stores side by side: ingest time and query p50/p99 on SciFact and
    /// on synthetic chunks (needs a PostgreSQL server).
    Stores(stores::Args),
    /// Sentence-splitter throughput (MB/s) on the NuGet wikis, next to UAX #29.
    Split(split::Args),
    /// Ask on the NuGet wiki golden sets: evidence in top-k before/after trimming.
    Wiki(wiki::Args),
    /// Ask trimming on XQuAD es/en: answers kept vs token reduction over a threshold sweep.
    Xquad(xquad::Args),
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.bench {
        Bench::Embed(a) => embed::run(a),
        Bench::Ingest(a) => ingest::run(a),
        Bench::Latency(a) => latency::run(a),
        Bench::Locomo(a) => locomo::run(a),
        Bench::Relevance(a) => relevance::run(a),
        Bench::Sbd(a) => sbd::run(a),
        Bench::Scifact(a) => scifact::run(a),
        Bench::Serve(a) => serve::run(a),
        Bench::Split(a) => split::run(a),
        Bench::Stores(a) => stores::run(a),
        Bench::Wiki(a) => wiki::run(a),
        Bench::Xquad(a) => xquad::run(a),
    }
}
