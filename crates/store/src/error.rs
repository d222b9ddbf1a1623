//! Errors of every store backend.

/// A store failure. Backend errors keep their message and the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be opened or created.
    #[error("cannot open store {path}: {reason}")]
    Open { path: String, reason: String },
    /// The store was written by an incompatible version.
    #[error("store {path} has schema version {found}; this bib understands version {expected}")]
    Schema {
        path: String,
        found: i64,
        expected: i64,
    },
    /// The database reported an error.
    #[error("{backend} error during {op}: {message}")]
    Backend {
        backend: &'static str,
        op: &'static str,
        message: String,
    },
    /// A stored value could not be decoded.
    #[error("corrupt value in store ({what}): {reason}")]
    Corrupt { what: String, reason: String },
    /// The caller passed something the store cannot hold.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The postings were built with a term function this build cannot reproduce.
    #[error(
        "store {path} was indexed with a term function this bib cannot reproduce; run `bib \
         ingest` on it again to reindex (no re-embedding)"
    )]
    TermFunction {
        path: String,
        #[source]
        source: bib_text::terms::TermConfigError,
    },
}

impl StoreError {
    pub(crate) fn sqlite(op: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
        move |e| StoreError::Backend {
            backend: "sqlite",
            op,
            message: e.to_string(),
        }
    }
}
