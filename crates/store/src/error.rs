//! Errors of every store backend.

/// Any backend's own error, kept as the source of a [`StoreError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A store failure. Backend errors keep the operation that failed, and the database's own
/// error as their source ([`error_chain`] writes both on one line).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be opened or created.
    #[error("cannot open store {path}: {reason}")]
    Open {
        path: String,
        reason: String,
        /// The database's or the file system's own error, where one caused it.
        #[source]
        source: Option<BoxError>,
    },
    /// The store was written by an incompatible version.
    #[error("store {path} has schema version {found}; this bib understands version {expected}")]
    Schema {
        path: String,
        found: i64,
        expected: i64,
    },
    /// The database reported an error.
    #[error("{backend} error during {op}")]
    Backend {
        backend: &'static str,
        op: &'static str,
        #[source]
        source: BoxError,
    },
    /// A stored value could not be decoded.
    #[error("corrupt value in store ({what}): {reason}")]
    Corrupt {
        what: String,
        reason: String,
        /// The decoder's error, where one caused it.
        #[source]
        source: Option<BoxError>,
    },
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
    /// The store at `path` cannot be opened, for a reason this crate states.
    pub fn open(path: impl Into<String>, reason: impl Into<String>) -> StoreError {
        StoreError::Open {
            path: path.into(),
            reason: reason.into(),
            source: None,
        }
    }

    /// The store at `path` cannot be opened because `source` failed while doing `reason`.
    pub fn open_failed(
        path: impl Into<String>,
        reason: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> StoreError {
        StoreError::Open {
            path: path.into(),
            reason: reason.into(),
            source: Some(source.into()),
        }
    }

    pub(crate) fn sqlite(op: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
        move |e| StoreError::Backend {
            backend: "sqlite",
            op,
            source: Box::new(e),
        }
    }
}

/// An error and every source under it, `outer: inner: innermost`: for the places that must
/// turn an error into one line of text (a JSON error message, a file issue). Each level is
/// written once, as long as no error also prints its source in its own message.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_error_keeps_the_database_error_as_its_source() {
        let db = rusqlite::Error::InvalidColumnName("nope".into());
        let e = StoreError::sqlite("read chunks")(db);
        assert_eq!(e.to_string(), "sqlite error during read chunks");
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.to_string().contains("nope"), "{source}");
        assert_eq!(
            error_chain(&e),
            format!("sqlite error during read chunks: {source}")
        );
    }
}
