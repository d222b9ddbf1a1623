//! `bib ask` — placeholder until its owner lands it.

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`bib ask` is not available yet")
}
