//! `bib mcp` — the MCP server over stdio (for Claude Desktop, editors, agents).
//!
//! stdout carries the protocol only; logs go to stderr. The writing tools
//! (`bib_register_doc`, `bib_index_chunks`) need `BIB_TOKEN` set in this process's
//! environment *and* the same value in the call's `token` argument, so a model driving the
//! client cannot write unless it was handed the secret.

use super::serve::{build_service, token, CommonArgs};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib mcp                                      for a client that starts it (stdio)
  claude mcp add bib -- bib mcp --store ~/kb/.bib/kb.sqlite
  bib mcp --no-model                           keyword search only, no model loaded")]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    bib_server::init_logging();
    let tokens = bib_server::TokenCheck::new(token(&a.common)?.as_deref(), false)?;
    let service = build_service(&a.common, tokens)?;
    bib_server::mcp::serve_stdio_blocking(service)?;
    Ok(())
}
