//! `bib-app` — the application layer between the front ends (CLI, MCP/HTTP servers) and the
//! library crates.
//!
//! - [`settings`]: the typed [`Settings`] of `bib.toml`, merged with the environment and the
//!   command-line flags in one place ([`Settings::resolve`]; precedence flags > environment >
//!   file > defaults), every key documented once ([`settings::KEYS`]).
//! - [`store`]: [`StoreSpec`], the knowledge base a setting names (a SQLite file or a
//!   PostgreSQL URL), and opening it.

pub mod settings;
pub mod store;

pub use settings::{
    AskSettings, ConfigError, IngestSettings, LlmSettings, ModelFallback, Settings,
};
pub use store::{OpenError, StoreSpec};
