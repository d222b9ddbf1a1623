//! # bib-server — MCP and HTTP over one service layer
//!
//! - [`service::Service`] holds the knowledge base (a [`bib_store::Store`]), the embedding
//!   model and the settings, and implements every operation as a synchronous method: ask,
//!   eval, register a document, index chunks, pack a history, read documents (lines of one,
//!   through `bib_store::read`), the status, and runs.
//! - [`mcp`] exposes seven tools on the official MCP Rust SDK (`rmcp`): `bib_ask`, `bib_get`,
//!   `bib_status`, `bib_eval_retrieval`, `bib_register_doc`, `bib_index_chunks`, `bib_pack` —
//!   over stdio
//!   ([`mcp::serve_stdio`], `bib mcp`) or streamable HTTP at `/mcp`.
//! - [`http`] is the axum app of `bib serve`: the JSON API, `/mcp`, `/openapi.json`
//!   ([`openapi`]), with body-size, timeout and in-flight limits.
//! - [`ui`]: the ask page (`GET /`), the help widget (`GET /widget.js`) and the HTML view of
//!   a document's lines, hand-written assets compiled in; [`cors`]: the configured origins
//!   that may read across origins (the widget on another site), on the read routes only.
//! - [`auth`]: who may write (bearer token), [`error`]: stable error codes, [`args`]: the typed
//!   arguments shared by both transports (unknown fields rejected; errors name the field).
//!
//! Logging goes to stderr through `tracing` ([`init_logging`]): over stdio, stdout is the
//! protocol.

pub mod args;
pub mod auth;
pub mod cors;
pub mod error;
pub mod http;
pub mod mcp;
pub mod openapi;
pub mod service;
pub mod stdio;
#[cfg(test)]
mod testing;
pub mod ui;
pub mod work;

pub use auth::TokenCheck;
pub use error::{ErrorCode, ServiceError};
pub use http::HttpOptions;
pub use service::Service;
pub use work::Work;

/// The MCP `serverInfo.name`.
pub const SERVER_NAME: &str = "bibliotecario";
/// The MCP `serverInfo.version` (the crate version).
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Failures that stop a server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("MCP: {0}")]
    Mcp(String),
    /// The MCP session failed (`context` says where); the protocol library's error is kept.
    #[error("MCP: {context}")]
    McpFailed {
        context: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// Send `tracing` output to stderr (filter from `BIB_LOG`, default `info` for this crate and
/// `warn` elsewhere). Safe to call twice.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BIB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,bib_server=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
