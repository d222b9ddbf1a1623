//! `bib` — the command-line front of bibliotecario. Thin: parsing, config and printing only;
//! every subcommand delegates to a library crate.

use clap::{Parser, Subcommand};

mod commands;
mod pipe;
mod store_url;

#[derive(Debug, Parser)]
#[command(
    name = "bib",
    version,
    about = "A local-first librarian for Markdown knowledge bases"
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
    Bench(commands::bench::Args),
    /// Compare retrieval variants (A/B harness) over a golden set or the query log.
    Eval(commands::eval::Args),
    /// Copy a knowledge base to another store (e.g. SQLite to postgres://).
    Migrate(commands::migrate::Args),
    /// Serve MCP over stdio (tools bib_ask, bib_get, bib_status, bib_pack, bib_eval_retrieval, bib_register_doc, bib_index_chunks).
    Mcp(commands::mcp::Args),
    /// Serve the HTTP API and MCP over streamable HTTP (/mcp).
    Serve(commands::serve::Args),
}

fn main() -> std::process::ExitCode {
    // Parsing runs inside too: `--help | head -1` is a closed pipe like any other.
    pipe::run(|| dispatch(Cli::parse()))
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Split(a) => commands::split::run(a),
        Command::Chunk(a) => commands::chunk::run(a),
        Command::Model(a) => commands::model::run(a),
        Command::Pack(a) => commands::pack::run(a),
        Command::Ingest(a) => commands::ingest::run(a),
        Command::Runs(a) => commands::runs::run(a),
        Command::Rm(a) => commands::rm::run(a),
        Command::Status(a) => commands::status::run(a),
        Command::Get(a) => commands::get::run(a),
        Command::Ask(a) => commands::ask::run(a),
        Command::Bench(a) => commands::bench::run(a),
        Command::Eval(a) => commands::eval::run(a),
        Command::Migrate(a) => commands::migrate::run(a),
        Command::Mcp(a) => commands::mcp::run(a),
        Command::Serve(a) => commands::serve::run(a),
    }
}
