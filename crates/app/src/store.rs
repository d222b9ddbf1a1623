//! [`StoreSpec`]: which knowledge base a setting names, and opening it.
//!
//! One string selects the store: a `postgres://` / `postgresql://` URL is the PostgreSQL +
//! pgvector store (`bib-store-pg`, URL parameters in its `url` module), anything else is the
//! path of the embedded SQLite file. Shown to people, a URL has its password redacted.

use std::fmt;
use std::path::{Path, PathBuf};

use bib_store::{SqliteStore, Store, StoreError, DEFAULT_STORE_PATH};
use bib_store_pg::{is_postgres_url, PgStore};
use serde::{Deserialize, Serialize};

/// A knowledge base: the SQLite file or the PostgreSQL database it lives in.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// The embedded store: one SQLite file.
    Sqlite(PathBuf),
    /// PostgreSQL + pgvector, by URL (`postgres://user:pw@host:port/db?schema=kb`).
    Postgres(String),
}

/// Why a knowledge base could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A command that reads a knowledge base found none (it never creates an empty one).
    #[error("no knowledge base at {store} (run `bib ingest <dir>` first, or pass --store)")]
    NotFound { store: String },
    /// The store exists (or is a URL) but opening it failed.
    #[error("opening the knowledge base {store}")]
    Open {
        store: String,
        #[source]
        source: StoreError,
    },
}

impl StoreSpec {
    /// The store a string names: a PostgreSQL URL, else a SQLite file path.
    pub fn parse(spec: &str) -> StoreSpec {
        if is_postgres_url(spec) {
            StoreSpec::Postgres(spec.trim().to_string())
        } else {
            StoreSpec::Sqlite(PathBuf::from(spec))
        }
    }

    /// The SQLite file, when this is one.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            StoreSpec::Sqlite(p) => Some(p),
            StoreSpec::Postgres(_) => None,
        }
    }

    /// The string as written (with the password, for connecting).
    pub fn as_spec(&self) -> String {
        match self {
            StoreSpec::Sqlite(p) => p.to_string_lossy().into_owned(),
            StoreSpec::Postgres(url) => url.clone(),
        }
    }

    /// Whether there is a knowledge base to read: a URL always counts (the server says), a
    /// path must be an existing file.
    pub fn exists(&self) -> bool {
        match self {
            StoreSpec::Sqlite(p) => p.is_file(),
            StoreSpec::Postgres(_) => true,
        }
    }

    fn open_error(&self) -> impl FnOnce(StoreError) -> OpenError + '_ {
        move |source| OpenError::Open {
            store: self.to_string(),
            source,
        }
    }

    /// Open the store, creating it when needed (ingest, migrate's target).
    pub fn open(&self) -> Result<Box<dyn Store>, OpenError> {
        let store: Box<dyn Store> = match self {
            StoreSpec::Sqlite(p) => Box::new(SqliteStore::open(p).map_err(self.open_error())?),
            StoreSpec::Postgres(_) => Box::new(self.open_postgres()?),
        };
        Ok(store)
    }

    /// Open a store that must already exist: commands that only read a knowledge base say how
    /// to make one instead of leaving an empty file behind.
    pub fn open_existing(&self) -> Result<Box<dyn Store>, OpenError> {
        if !self.exists() {
            return Err(OpenError::NotFound {
                store: self.to_string(),
            });
        }
        self.open()
    }

    /// Open an existing SQLite store read-only (`None` for PostgreSQL, which has no such mode).
    pub fn open_read_only(&self) -> Option<Result<Box<dyn Store>, OpenError>> {
        let path = self.sqlite_path()?;
        Some(match SqliteStore::open_read_only(path) {
            Ok(s) => Ok(Box::new(s) as Box<dyn Store>),
            Err(e) => Err(self.open_error()(e)),
        })
    }

    /// Connect to PostgreSQL (for operations beyond the `Store` trait, such as `bib migrate`'s
    /// import of runs with their original times). A SQLite spec is an error.
    pub fn open_postgres(&self) -> Result<PgStore, OpenError> {
        match self {
            StoreSpec::Postgres(url) => PgStore::connect(url).map_err(self.open_error()),
            StoreSpec::Sqlite(p) => Err(self.open_error()(StoreError::Invalid(format!(
                "{} is a file path, not a postgres:// URL",
                p.display()
            )))),
        }
    }
}

impl Default for StoreSpec {
    fn default() -> Self {
        StoreSpec::Sqlite(PathBuf::from(DEFAULT_STORE_PATH))
    }
}

/// The path, or the URL with its password redacted.
impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Sqlite(p) => write!(f, "{}", p.display()),
            StoreSpec::Postgres(url) => f.write_str(&bib_store_pg::url::redact(url)),
        }
    }
}

/// Like `Display`: a URL's password never reaches a log.
impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            StoreSpec::Postgres(_) => f.debug_tuple("Postgres").field(&self.to_string()).finish(),
        }
    }
}

impl Serialize for StoreSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_spec())
    }
}

/// `store = "…"` (a path or a URL); the older `[store]` table with `path = "…"` (or
/// `url = "…"`) is still read.
impl<'de> Deserialize<'de> for StoreSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            path: Option<String>,
            url: Option<String>,
        }
        #[derive(Deserialize)]
        #[serde(untagged, expecting = "a file path or a postgres:// URL")]
        enum Form {
            Spec(String),
            Table(Table),
        }
        match Form::deserialize(d)? {
            Form::Spec(s) => Ok(StoreSpec::parse(&s)),
            Form::Table(Table {
                path: Some(s),
                url: None,
            })
            | Form::Table(Table {
                path: None,
                url: Some(s),
            }) => Ok(StoreSpec::parse(&s)),
            Form::Table(_) => Err(serde::de::Error::custom(
                "[store] needs exactly one of `path` or `url` (or write `store = \"…\"`)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_show() {
        let pg = StoreSpec::parse("postgres://bib:secret@127.0.0.1:5432/bib?schema=kb");
        assert!(matches!(pg, StoreSpec::Postgres(_)));
        assert!(!pg.to_string().contains("secret"), "{pg}");
        assert!(!format!("{pg:?}").contains("secret"), "{pg:?}");
        assert!(pg.as_spec().contains("secret"));
        assert!(pg.exists());
        let file = StoreSpec::parse("kb/x.sqlite");
        assert_eq!(file, StoreSpec::Sqlite(PathBuf::from("kb/x.sqlite")));
        assert_eq!(file.to_string(), "kb/x.sqlite");
        assert!(StoreSpec::parse("postgresql://h/db")
            .sqlite_path()
            .is_none());
        assert_eq!(
            StoreSpec::default().sqlite_path(),
            Some(Path::new(DEFAULT_STORE_PATH))
        );
    }

    #[test]
    fn open_existing_refuses_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let spec = StoreSpec::Sqlite(dir.path().join("none.sqlite"));
        let err = spec.open_existing().err().unwrap();
        assert!(matches!(err, OpenError::NotFound { .. }), "{err}");
        assert!(err.to_string().contains("none.sqlite"), "{err}");
        assert!(!dir.path().join("none.sqlite").exists(), "nothing created");
        spec.open().unwrap();
        assert!(spec.open_existing().is_ok());
        assert!(spec.open_read_only().unwrap().is_ok());
        assert!(spec.open_postgres().is_err());
    }
}
