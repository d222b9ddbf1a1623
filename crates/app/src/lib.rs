//! `bib-app` — the application layer between the front ends (CLI, MCP/HTTP servers) and the
//! library crates.
//!
//! - [`settings`]: the typed [`Settings`] of `bib.toml`, merged with the environment and the
//!   command-line flags in one place ([`Settings::resolve`]; precedence flags > environment >
//!   file > defaults), every key documented once ([`settings::KEYS`]).
//! - [`model`]: the embedding model a knowledge base was built with, and loading it.
//! - [`store`]: [`StoreSpec`], the knowledge base a setting names (a SQLite file or a
//!   PostgreSQL URL), and opening it.

pub mod model;
pub mod pack;
pub mod settings;
pub mod store;

pub use settings::{
    AskSettings, ConfigError, EmbedSettings, IngestSettings, LlmSettings, ModelFallback,
    ServeSettings, Settings,
};
pub use store::{OpenError, StoreSpec};
