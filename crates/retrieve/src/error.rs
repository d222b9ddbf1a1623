//! Errors of the retrieval path.

use bib_embed::EmbedError;
use bib_store::ChunkId;

/// Anything that can go wrong while retrieving, trimming or synthesising.
#[derive(Debug, thiserror::Error)]
pub enum RetrieveError {
    /// The knowledge base (store) failed; its error is kept whole.
    #[error(transparent)]
    Store(#[from] bib_store::StoreError),
    /// A chunk id added twice to an in-memory index.
    #[error("index error: duplicate chunk id {0}")]
    DuplicateChunk(ChunkId),
    /// The embedding model failed.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// A bad option value (names the option).
    #[error("invalid option `{name}`: {reason}")]
    InvalidOption { name: String, reason: String },
    /// A bad filter expression.
    #[error("invalid filter `{0}`: expected key=value")]
    InvalidFilter(String),
    /// Synthesis is not configured, or its endpoint answered something unusable.
    #[error("synthesis: {0}")]
    Synthesis(String),
    /// The synthesis endpoint could not be reached or read (`reason` says which step).
    #[error("synthesis: {reason}")]
    SynthesisFailed {
        reason: String,
        #[source]
        source: bib_store::BoxError,
    },
}

impl From<bib_store::InvalidFilter> for RetrieveError {
    fn from(e: bib_store::InvalidFilter) -> Self {
        RetrieveError::InvalidFilter(e.0)
    }
}
