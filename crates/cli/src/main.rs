//! `bib` — the command-line front of bibliotecario. Thin: parsing, config and printing only;
//! every subcommand delegates to a library crate.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod commands;
mod pipe;
mod progress;
mod settings;

#[derive(Debug, Parser)]
#[command(
    name = "bib",
    version,
    about = "A local-first librarian for Markdown knowledge bases",
    after_help = "\
Examples:
  bib model install                    once: the default embedding models
  bib ingest ~/wikis/kb-en             build .bib/kb.sqlite from a folder of Markdown
  bib ask how do I sign a package --trim
  bib config --defaults > bib.toml     every setting, documented

`bib help <command>` or `bib <command> --help` for more."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Split Markdown from stdin into sentences.
    Split(commands::split::Args),
    /// Print the chunks of one Markdown file.
    Chunk(commands::chunk::Args),
    /// Install and list embedding models.
    Model(commands::model::Args),
    /// Embed texts (one per line, or JSONL) with an installed model: JSONL vectors out.
    Embed(commands::embed::Args),
    /// Pack a chat/agent history into a token budget.
    Pack(commands::pack::Args),
    /// Ingest a directory of Markdown files into the knowledge base.
    Ingest(commands::ingest::Args),
    /// List past ingest runs (the audit record).
    Runs(commands::runs::Args),
    /// Remove a collection (every document of one ingested directory, or `api`).
    Rm(commands::rm::Args),
    /// Show the knowledge base: location, collections, model, last run.
    Status(commands::status::Args),
    /// Print a document, or a line range of it (`path:12-30`, as results cite it).
    Get(commands::get::Args),
    /// Ask the knowledge base a question.
    Ask(commands::ask::Args),
    /// Run a benchmark and print a report.
    Bench(bib_bench::Args),
    /// Compare retrieval variants (A/B harness) over a golden set or the query log.
    Eval(commands::eval::Args),
    /// Copy a knowledge base to another store (e.g. SQLite to postgres://).
    Migrate(commands::migrate::Args),
    /// Serve MCP over stdio (tools bib_ask, bib_get, bib_status, bib_pack, bib_eval_retrieval, bib_register_doc, bib_index_chunks).
    Mcp(commands::mcp::Args),
    /// Serve the HTTP API and MCP over streamable HTTP (/mcp).
    Serve(commands::serve::Args),
    /// Show the settings in effect, or every bib.toml key with its default.
    Config(commands::config::Args),
}

/// The subcommands that read settings (`--config`, and help notes on their settings flags).
const SETTINGS_COMMANDS: &[&str] = &[
    "ask", "get", "eval", "ingest", "runs", "rm", "status", "serve", "mcp", "migrate", "config",
];

/// Parse the command line, with each settings flag's default, variable and key in `--help`.
fn parse() -> Cli {
    let cmd = settings::annotate(Cli::command(), SETTINGS_COMMANDS);
    Cli::from_arg_matches(&cmd.get_matches()).unwrap_or_else(|e| e.exit())
}

fn main() -> std::process::ExitCode {
    // Parsing runs inside too: `--help | head -1` is a closed pipe like any other.
    pipe::run(|| dispatch(parse()))
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Split(a) => commands::split::run(a),
        Command::Chunk(a) => commands::chunk::run(a),
        Command::Model(a) => commands::model::run(a),
        Command::Embed(a) => commands::embed::run(a),
        Command::Pack(a) => commands::pack::run(a),
        Command::Ingest(a) => commands::ingest::run(a),
        Command::Runs(a) => commands::runs::run(a),
        Command::Rm(a) => commands::rm::run(a),
        Command::Status(a) => commands::status::run(a),
        Command::Get(a) => commands::get::run(a),
        Command::Ask(a) => commands::ask::run(a),
        Command::Bench(a) => bib_bench::run(a),
        Command::Eval(a) => commands::eval::run(a),
        Command::Migrate(a) => commands::migrate::run(a),
        Command::Mcp(a) => commands::mcp::run(a),
        Command::Serve(a) => commands::serve::run(a),
        Command::Config(a) => commands::config::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command and subcommand, with its path (`bib model install`).
    fn all(cmd: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands() {
            let p = format!("{path} {}", sub.get_name());
            all(sub, p.clone(), out);
            out.push((p, sub.clone()));
        }
    }

    #[test]
    fn every_help_has_examples_in_user_words_and_one_style_of_default() {
        let root = settings::annotate(Cli::command(), SETTINGS_COMMANDS);
        root.clone().debug_assert();
        let mut cmds = vec![("bib".to_string(), root.clone())];
        all(&root, "bib".into(), &mut cmds);
        assert!(cmds.len() > 20, "{} commands", cmds.len());
        for (path, cmd) in &cmds {
            let after = cmd
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                after.contains("Examples:\n  "),
                "`{path} --help` has examples"
            );
            let mut texts = vec![cmd.get_about().map(|a| a.to_string()).unwrap_or_default()];
            texts.extend(
                cmd.get_arguments()
                    .filter_map(|a| a.get_help().map(|h| h.to_string())),
            );
            for t in &texts {
                let lower = t.to_lowercase();
                for word in ["the spec", "spec's", "reference's", "bookkeeping"] {
                    assert!(!lower.contains(word), "`{path}`: {t:?} speaks of {word:?}");
                }
                for style in ["(default ", "(default:", "default: ", "Default:"] {
                    let bracketed =
                        t.matches(style).count() == t.matches(&format!("[{style}")).count();
                    assert!(
                        bracketed,
                        "`{path}`: {t:?} writes a default as {style:?}, not [default: …]"
                    );
                }
            }
        }
    }

    #[test]
    fn every_settings_command_takes_config() {
        let root = Cli::command();
        for name in SETTINGS_COMMANDS {
            let cmd = root.find_subcommand(name).unwrap();
            assert!(
                cmd.get_arguments().any(|a| a.get_long() == Some("config")),
                "bib {name} --config"
            );
        }
    }
}
