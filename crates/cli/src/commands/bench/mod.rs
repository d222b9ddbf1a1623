//! `bib bench <name>` — benchmarks that write a report. Slow ones live here, never in tests.
//! Each benchmark is one module with `Args` and `run`.

use clap::Subcommand;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.bench {}
}
