//! Errors of the evaluation harness.

use bib_retrieve::RetrieveError;

/// Anything that can stop an evaluation. Messages name the file, line or option at fault.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A golden file could not be read.
    #[error("cannot read golden file {path}")]
    GoldenRead {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A golden line is not valid.
    #[error("{path}:{line}: {reason}")]
    GoldenLine {
        path: String,
        line: usize,
        reason: String,
    },
    /// A bad argument (names it).
    #[error("invalid argument `{name}`: {reason}")]
    InvalidArg { name: String, reason: String },
    /// No questions to evaluate.
    #[error("no questions to evaluate: {0}")]
    NoQuestions(String),
    /// Retrieval, trimming or synthesis failed.
    #[error(transparent)]
    Retrieve(#[from] RetrieveError),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] bib_store::StoreError),
}

pub(crate) fn invalid(name: &str, reason: impl Into<String>) -> EvalError {
    EvalError::InvalidArg {
        name: name.to_string(),
        reason: reason.into(),
    }
}
