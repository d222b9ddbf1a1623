//! Errors of the retrieval path.

use bib_embed::EmbedError;

/// Anything that can go wrong while retrieving, trimming or synthesising.
#[derive(Debug, thiserror::Error)]
pub enum RetrieveError {
    /// The index (store) failed.
    #[error("index error: {0}")]
    Index(String),
    /// The embedding model failed.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// A bad option value (names the option).
    #[error("invalid option `{name}`: {reason}")]
    InvalidOption { name: String, reason: String },
    /// A bad filter expression.
    #[error("invalid filter `{0}`: expected key=value")]
    InvalidFilter(String),
    /// The synthesis endpoint failed or is not configured.
    #[error("synthesis: {0}")]
    Synthesis(String),
}

impl From<bib_store::InvalidFilter> for RetrieveError {
    fn from(e: bib_store::InvalidFilter) -> Self {
        RetrieveError::InvalidFilter(e.0)
    }
}
