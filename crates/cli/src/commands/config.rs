//! `bib config` — the settings in effect (flags > environment > bib.toml > defaults) as
//! `bib.toml` text with secrets hidden; `--defaults` prints every key at its default, each
//! with what it does, its environment variable and its flags.

use std::io::Write;

use crate::settings::SettingsArgs;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib config --defaults > bib.toml     start a config file with every key documented
  bib config                           the settings in effect here
  BIB_STORE=kb.sqlite bib config --config team.toml")]
pub struct Args {
    /// Print every key at its default, commented, instead of the settings in effect.
    #[arg(long)]
    pub defaults: bool,
    #[command(flatten)]
    pub settings: SettingsArgs,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let text = if a.defaults {
        bib_app::settings::defaults_toml()
    } else {
        a.settings.resolve(|_| ())?.to_toml_redacted()
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    Ok(())
}
