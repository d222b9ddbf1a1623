//! The flags every settings-reading command shares (`--config`, `--store`), and the `--help`
//! notes that say, for each flag that sets a `bib.toml` key, its default, its environment
//! variable and its key — all read from `bib_app::settings::KEYS`, so help, README and
//! `bib config --defaults` cannot drift apart.

use std::path::PathBuf;

use bib_app::settings::{key_of_flag, KEYS};
use bib_app::{Settings, StoreSpec};

/// The process environment, as `Settings::resolve` reads it.
pub fn env_var(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

/// `--config FILE`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArg {
    /// Config file [default: ./bib.toml when it exists] [env: BIB_CONFIG]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl ConfigArg {
    /// The settings: `flags` > environment > config file > defaults.
    pub fn resolve(&self, flags: impl FnOnce(&mut Settings)) -> anyhow::Result<Settings> {
        Ok(Settings::resolve(self.config.as_deref(), &env_var, flags)?)
    }
}

/// `--config FILE` and `--store PATH|URL`.
#[derive(Debug, Clone, clap::Args)]
pub struct SettingsArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Knowledge base: a SQLite file or a postgres:// URL
    #[arg(long, value_name = "PATH|URL")]
    pub store: Option<String>,
}

impl SettingsArgs {
    /// The settings, with `--store` and then `flags` applied over environment and file.
    pub fn resolve(&self, flags: impl FnOnce(&mut Settings)) -> anyhow::Result<Settings> {
        self.config.resolve(|s| {
            if let Some(spec) = self.store.as_deref().filter(|s| !s.is_empty()) {
                s.store = StoreSpec::parse(spec);
            }
            flags(s);
        })
    }
}

/// `[default: …] [env: …] [config: …]` for a flag that sets a key, in clap's own style.
fn note(flag: &str, takes_value: bool, defaults: &toml::Table) -> Option<String> {
    let key = key_of_flag(flag)?;
    let mut parts = Vec::new();
    if takes_value {
        let value = match key.table() {
            Some(t) => defaults.get(t).and_then(|v| v.get(key.leaf())),
            None => defaults.get(key.name),
        };
        if let Some(v) = value.filter(|v| v.as_array().is_none_or(|a| !a.is_empty())) {
            let shown = match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            parts.push(format!("[default: {shown}]"));
        } else if let Some(meaning) = key.unset_means {
            parts.push(format!("[default: {meaning}]"));
        }
    }
    if let Some((var, _)) = key.env {
        parts.push(format!("[env: {var}]"));
    }
    parts.push(format!("[config: {}]", key.name));
    Some(parts.join(" "))
}

/// Append each settings flag's note to its help, on the subcommands named (those that read
/// settings; `bench` has flags of the same names that set nothing).
pub fn annotate(mut cmd: clap::Command, subcommands: &[&str]) -> clap::Command {
    debug_assert!(!KEYS.is_empty());
    let defaults = toml::Table::try_from(Settings::default()).unwrap_or_default();
    for name in subcommands {
        cmd = cmd.mut_subcommand(*name, |s| annotate_with(s, &defaults));
    }
    cmd
}

fn annotate_with(mut cmd: clap::Command, defaults: &toml::Table) -> clap::Command {
    let notes: Vec<(clap::Id, String)> = cmd
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            let takes_value = a.get_action().takes_values();
            let note = note(long, takes_value, defaults)?;
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            Some((a.get_id().clone(), format!("{help} {note}")))
        })
        .collect();
    for (id, help) in notes {
        cmd = cmd.mut_arg(id, |a| a.help(help));
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in subs {
        cmd = cmd.mut_subcommand(name, |s| annotate_with(s, defaults));
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_name_default_variable_and_key() {
        let d = toml::Table::try_from(Settings::default()).unwrap();
        assert_eq!(
            note("trim-threshold", true, &d).unwrap(),
            "[default: calibrated per model: use-m3 0.214, e5-small 0.82, others 0.214] \
             [env: RETRIEVAL_TRIM_THRESHOLD] [config: ask.trim_threshold]"
        );
        assert_eq!(
            note("store", true, &d).unwrap(),
            format!(
                "[default: {}] [env: BIB_STORE] [config: store]",
                bib_store::DEFAULT_STORE_PATH
            )
        );
        assert_eq!(
            note("no-log", false, &d).unwrap(),
            "[env: BIB_QUERY_LOG] [config: ask.log]"
        );
        assert_eq!(
            note("filter", true, &d).unwrap(),
            "[config: ask.filters]",
            "no default for an empty list"
        );
        assert!(note("budget", true, &d).is_none());
    }
}
