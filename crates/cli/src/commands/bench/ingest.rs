//! `bib bench ingest` — ingest the NuGet wikis with the default model, twice, into fresh
//! stores (see `bib_ingest::bench`): wall time, chunks/s, embedding share, audit, second-run
//! ratio and store search latency.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use bib_embed::Embedder;

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
    let report = bib_ingest::bench::run(&wikis, &embedder, &tmp).map_err(anyhow::Error::msg)?;
    let _ = std::fs::remove_dir_all(&tmp);
    println!("{report}");
    Ok(())
}
