//! The embedded default: one SQLite file per knowledge base (bundled SQLite, WAL mode).
//!
//! Layout: `documents` (one row per file, keyed by path), `chunks` (unique per
//! `(node_id, chunk_index)`, vector as a little-endian `f32` blob, `lex_len` = BM25 length),
//! `postings` (`term`, `chunk_id`, `node_id`, `tf`, `dl`; clustered by term so one term's
//! postings are one range read), `lex_stats` (chunk count and total length, kept exact by
//! triggers inside the same transactions), `embed_cache`, `runs`, `query_log`, and `meta`
//! (`schema_version`; `terms`, the term function of the postings — absent in files from before
//! issue 15, which were built with `TermConfig::V1`).
//!
//! BM25 reads the postings of the query's terms only; vector search keeps every vector in
//! memory after the first query and reloads when the database changed (own writes or another
//! connection's commits, seen through `PRAGMA data_version`).

use crate::lexical::{top_bm25, PostingSource};
use crate::memo::{ChunkMemo, Version, Versioned};
use crate::rows::{now_ms, parse_json, to_u32};
use crate::vector_index::{IndexBuilder, VectorIndex, VectorRow, DEFAULT_EXACT_BUDGET};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use bib_text::terms::{term_counts_with, terms_with, TermConfig};
use rusqlite::types::ToSqlOutput;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Transaction};
use serde_json::Value;

use crate::{
    qualified_name, ApplyOutcome, AuditReport, ChunkId, ChunkRecord, ChunkState, ChunkWrite,
    DocRecord, DocumentChange, Filter, Hit, LexicalStats, NodeId, QueryLogEntry, QueryLogRetention,
    RunLog, RunRow, RunStatus, Store, StoreError, VectorsByHash,
};

/// Default location of a knowledge base, relative to the working directory.
pub const DEFAULT_STORE_PATH: &str = ".bib/kb.sqlite";

/// Version 2 added `documents.collection` and `chunks.line_start`/`line_end` (see
/// [`migrate_v1`]); version 3 the `doc_sources` table (a version-2 file gets it when opened
/// for writing; read-only it is read without sources).
const SCHEMA_VERSION: i64 = 3;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    node_id        INTEGER PRIMARY KEY,
    qualified_name TEXT NOT NULL UNIQUE,
    path           TEXT NOT NULL UNIQUE,
    collection     TEXT NOT NULL DEFAULT 'default',
    title          TEXT NOT NULL,
    metadata       TEXT NOT NULL,
    content_hash   TEXT NOT NULL,
    chunk_count    INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS doc_sources (
    node_id      INTEGER PRIMARY KEY REFERENCES documents(node_id) ON DELETE CASCADE,
    content_hash TEXT NOT NULL,
    source       TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id              INTEGER PRIMARY KEY,
    node_id         INTEGER NOT NULL REFERENCES documents(node_id) ON DELETE CASCADE,
    chunk_index     INTEGER NOT NULL,
    prefix          TEXT NOT NULL,
    heading_path    TEXT NOT NULL,
    content         TEXT NOT NULL,
    content_hash    TEXT NOT NULL,
    tokens_estimate INTEGER NOT NULL,
    tokens_model    INTEGER NOT NULL,
    span_start      INTEGER NOT NULL,
    span_end        INTEGER NOT NULL,
    line_start      INTEGER NOT NULL DEFAULT 0,
    line_end        INTEGER NOT NULL DEFAULT 0,
    model_id        TEXT NOT NULL,
    dims            INTEGER NOT NULL,
    embedding       BLOB NOT NULL,
    lex_len         INTEGER NOT NULL,
    UNIQUE (node_id, chunk_index)
);
CREATE INDEX IF NOT EXISTS chunks_by_hash ON chunks (model_id, content_hash);
CREATE TABLE IF NOT EXISTS postings (
    term     TEXT NOT NULL,
    chunk_id INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    node_id  INTEGER NOT NULL,
    tf       INTEGER NOT NULL,
    dl       INTEGER NOT NULL,
    PRIMARY KEY (term, chunk_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS postings_by_chunk ON postings (chunk_id);
CREATE TABLE IF NOT EXISTS lex_stats (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    n_chunks  INTEGER NOT NULL,
    total_len INTEGER NOT NULL
);
INSERT OR IGNORE INTO lex_stats (id, n_chunks, total_len) VALUES (1, 0, 0);
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    UPDATE lex_stats SET n_chunks = n_chunks + 1, total_len = total_len + new.lex_len WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    UPDATE lex_stats SET n_chunks = n_chunks - 1, total_len = total_len - old.lex_len WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS chunks_au AFTER UPDATE OF lex_len ON chunks BEGIN
    UPDATE lex_stats SET total_len = total_len - old.lex_len + new.lex_len WHERE id = 1;
END;
CREATE TABLE IF NOT EXISTS embed_cache (
    id           INTEGER PRIMARY KEY,
    model_id     TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    vector       BLOB NOT NULL,
    UNIQUE (model_id, content_hash)
);
CREATE TABLE IF NOT EXISTS runs (
    id             INTEGER PRIMARY KEY,
    started_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER,
    status         TEXT NOT NULL,
    record         TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS query_log (
    id     INTEGER PRIMARY KEY,
    at_ms  INTEGER NOT NULL,
    query  TEXT NOT NULL,
    mode   TEXT NOT NULL,
    record TEXT NOT NULL
);
"#;

/// Indexes on columns a version-1 file lacks until [`migrate_v1`] adds them.
const SCHEMA_V2_INDEXES: &str =
    "CREATE INDEX IF NOT EXISTS documents_by_collection ON documents (collection);";

/// Rebuild a `WITHOUT ROWID` `embed_cache` (files written before 2026-12-02) as a rowid table
/// with a unique key, in one transaction. Same columns and constraint, so older binaries read
/// and write the new layout unchanged. Why: a 2 KB vector is larger than a `WITHOUT ROWID`
/// page keeps locally, so each lookup read an overflow page too, scattered by hash; a rowid
/// row fits in its page, and rows written together (one chunk's sentences) sit together.
fn migrate_embed_cache(conn: &Connection) -> rusqlite::Result<()> {
    let old_layout = || -> rusqlite::Result<bool> {
        let sql: Option<String> = conn
            .query_row(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'embed_cache'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        Ok(sql.is_some_and(|s| s.to_ascii_uppercase().contains("WITHOUT ROWID")))
    };
    if !old_layout()? {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE;")?;
    // Checked again under the write lock: another process may have rebuilt it meanwhile. The
    // new table comes from `SCHEMA` itself (every statement there is `IF NOT EXISTS`), so the
    // layout is written down once.
    let result = old_layout().and_then(|old| {
        if old {
            conn.execute_batch("ALTER TABLE embed_cache RENAME TO embed_cache_old;")?;
            conn.execute_batch(SCHEMA)?;
            conn.execute_batch(
                "INSERT INTO embed_cache (model_id, content_hash, vector) \
                     SELECT model_id, content_hash, vector FROM embed_cache_old; \
                 DROP TABLE embed_cache_old;",
            )?;
        }
        conn.execute_batch("COMMIT;")
    });
    if result.is_err() {
        let _ = conn.execute_batch("ROLLBACK;");
    }
    result
}

/// Bring a version-1 file (no collections, no line numbers) to version 2 in one transaction:
/// every existing document joins [`crate::legacy_collection`] of the newest run that recorded
/// its directory; line numbers stay 0 ("unknown") until the next ingest rewrites the chunks.
fn migrate_v1(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE;")?;
    let result = (|| {
        conn.execute_batch(
            "ALTER TABLE documents ADD COLUMN collection TEXT NOT NULL DEFAULT 'default'; \
             ALTER TABLE chunks ADD COLUMN line_start INTEGER NOT NULL DEFAULT 0; \
             ALTER TABLE chunks ADD COLUMN line_end INTEGER NOT NULL DEFAULT 0;",
        )?;
        let last: Option<String> = conn
            .query_row(
                "SELECT record FROM runs WHERE record LIKE '%\"root\"%' ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()?;
        let record = last.and_then(|r| serde_json::from_str::<Value>(&r).ok());
        let name = crate::legacy_collection(record.as_ref());
        conn.execute("UPDATE documents SET collection = ?1", params![name])?;
        conn.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
            params![SCHEMA_VERSION.to_string()],
        )?;
        conn.execute_batch("COMMIT;")
    })();
    if result.is_err() {
        let _ = conn.execute_batch("ROLLBACK;");
    }
    result
}

/// The vector index held in memory, with the database version it was read at.
struct VectorCache {
    version: (i64, u64),
    index: VectorIndex,
}

/// What BM25 already read, valid for one database version: document frequencies (counting a
/// term's postings reads its whole list, and an ask needs the counts twice: BM25, then the
/// ranking signals) and decoded posting lists (reading a list row by row through SQLite's
/// B-tree and VM costs ~20 % of an ask's CPU, and later questions share the common words).
#[derive(Default)]
struct LexicalMemo {
    counts: HashMap<String, u64>,
    lists: HashMap<String, Arc<[Posting]>>,
    /// Postings held in `lists`.
    held: usize,
}

/// One row of the postings table, decoded.
#[derive(Debug, Clone, Copy)]
struct Posting {
    chunk: ChunkId,
    node: NodeId,
    tf: u32,
    dl: u32,
}

/// WAL pages before an automatic checkpoint: normally, and during bulk writes
/// ([`Store::set_bulk_writes`]: an ingest run). Every page read searches the WAL's index, so a
/// long WAL slows reads: a server logging each ask ran 487 asks/s over 60 s with 10,000 pages
/// and 566 with 1,000 (SQLite's default). An ingest writes thousands of pages, though, and
/// checkpointing every 4 MiB made a SciFact ingest 6–8 % slower (61.9–64.0 → 66.9–68.2 s).
const WAL_CHECKPOINT_PAGES: (i64, i64) = (1_000, 10_000);

/// Terms remembered at most; the memo starts over beyond (bounded memory whatever the queries).
const DOC_FREQ_MEMO_TERMS: usize = 65_536;

/// Postings held in memory at most (24 bytes each: 48 MiB); the lists start over beyond.
const POSTINGS_MEMO_MAX: usize = 2 << 20;

/// A longer list is read from the table every time rather than crowd out the others.
const POSTINGS_MEMO_LIST_MAX: usize = POSTINGS_MEMO_MAX / 8;

/// The SQLite store. Cheap to share behind an `Arc`; one connection, serialised by a mutex.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    location: String,
    own_writes: AtomicU64,
    vectors: Mutex<Option<Arc<VectorCache>>>,
    lexical_memo: Mutex<Versioned<LexicalMemo>>,
    chunk_memo: Mutex<Versioned<ChunkMemo>>,
    retention: Mutex<QueryLogRetention>,
    /// Whether the file has `doc_sources` (a version-2 file opened read-only has not).
    sources: bool,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.location)
            .finish()
    }
}

/// A `file:` URI for `path` (percent-encoding what URIs reserve), read-only, optionally
/// immutable.
fn sqlite_uri(path: &Path, immutable: bool) -> String {
    let mut uri = String::from("file:");
    for c in path.to_string_lossy().chars() {
        match c {
            '%' | '?' | '#' => uri.push_str(&format!("%{:02X}", c as u32)),
            _ => uri.push(c),
        }
    }
    uri.push_str("?mode=ro");
    if immutable {
        uri.push_str("&immutable=1");
    }
    uri
}

/// The error of a failed SQLite call while opening the store at `location`.
pub(crate) fn sqlite_open_failed(
    location: &str,
) -> impl Fn(rusqlite::Error) -> StoreError + Copy + '_ {
    move |e| StoreError::open_failed(location, "SQLite failed", e)
}

/// Open the SQLite file at `path`, creating it and its parent directories if needed; errors
/// name the file.
pub(crate) fn open_creating(path: &Path) -> Result<Connection, StoreError> {
    let shown = path.display().to_string();
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| {
            let reason = format!("cannot create directory {}", parent.display());
            StoreError::open_failed(shown.clone(), reason, e)
        })?;
    }
    Connection::open(path).map_err(|e| StoreError::open_failed(shown, "SQLite cannot open it", e))
}

pub(crate) fn vec_to_blob(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

pub(crate) fn blob_to_vec(b: &[u8]) -> Result<Vec<f32>, StoreError> {
    if !b.len().is_multiple_of(4) {
        return Err(StoreError::Corrupt {
            what: "embedding".into(),
            reason: format!("blob of {} bytes is not a multiple of 4", b.len()),
            source: None,
        });
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

impl SqliteStore {
    /// Open (creating if needed, with parent directories) the store at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let conn = open_creating(path)?;
        Self::init(conn, path.display().to_string(), true)
    }

    /// Open an existing store for reading only: no schema creation, no journal-mode switch,
    /// no write lock taken — so it works on a read-only file, directory or mount, and many
    /// readers never contend with each other. Every write through the returned store fails.
    ///
    /// A WAL database needs its `-shm` index; where that cannot be created (a read-only
    /// directory without one), the file is opened as immutable (no other writer can exist
    /// there anyway).
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        use rusqlite::OpenFlags;
        let path = path.as_ref();
        let shown = path.display().to_string();
        if !path.is_file() {
            return Err(StoreError::open(shown, "no such file"));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut last = None;
        for immutable in [false, true] {
            let uri = sqlite_uri(path, immutable);
            let attempt = Connection::open_with_flags(&uri, flags)
                .map_err(|e| StoreError::open_failed(shown.clone(), "SQLite cannot open it", e))
                .and_then(|conn| Self::init_with(conn, shown.clone(), false, false));
            match attempt {
                Ok(s) => return Ok(s),
                // A schema mismatch is an answer, not a failure to open.
                Err(e @ StoreError::Schema { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| StoreError::open(shown, "cannot open read-only")))
    }

    /// A private in-memory store (tests, benchmarks).
    pub fn open_in_memory() -> Result<Self, StoreError> {
        let conn = Connection::open_in_memory()
            .map_err(|e| StoreError::open_failed(":memory:", "SQLite cannot open it", e))?;
        Self::init(conn, ":memory:".into(), false)
    }

    fn init(conn: Connection, location: String, wal: bool) -> Result<Self, StoreError> {
        Self::init_with(conn, location, wal, true)
    }

    fn init_with(
        conn: Connection,
        location: String,
        wal: bool,
        writable: bool,
    ) -> Result<Self, StoreError> {
        Self::configure_connection(&conn, &location, wal)?;
        if writable {
            conn.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA} COMMIT;"))
                .map_err(sqlite_open_failed(&location))?;
        }
        let sources = Self::check_or_upgrade_schema_version(&conn, &location, writable)?;
        Self::finish_schema_after_version_check(&conn, &location, writable)?;
        Ok(Self {
            conn: Mutex::new(conn),
            location,
            own_writes: AtomicU64::new(0),
            vectors: Mutex::new(None),
            lexical_memo: Mutex::new(Versioned::default()),
            chunk_memo: Mutex::new(Versioned::default()),
            retention: Mutex::new(QueryLogRetention::default()),
            sources,
        })
    }

    /// Set the busy timeout, switch to WAL mode when `wal` (failing when SQLite will not),
    /// and set the cache, memory-map and checkpoint pragmas.
    fn configure_connection(
        conn: &Connection,
        location: &str,
        wal: bool,
    ) -> Result<(), StoreError> {
        let open_err = sqlite_open_failed(location);
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(open_err)?;
        if wal {
            let mode: String = conn
                .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
                .map_err(open_err)?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(StoreError::open(
                    location,
                    format!("could not switch to WAL mode (got {mode})"),
                ));
            }
        }
        // A page cache of up to 256 MiB and 256 MiB of memory-mapped reads: the postings
        // B-tree of a 100k-chunk base is hundreds of MiB (of a million-chunk one, gigabytes),
        // and a bulk write touches the last leaf of every term it holds — tens of thousands
        // of pages — so SQLite's 2 MiB default turns every insert into a disk read. The cache
        // only grows to what a connection touches, so small bases never use it. WAL
        // checkpoints: see `WAL_CHECKPOINT_PAGES`.
        conn.execute_batch(&format!(
            "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA cache_size=-262144; \
             PRAGMA mmap_size=268435456; PRAGMA temp_store=MEMORY; \
             PRAGMA wal_autocheckpoint={};",
            WAL_CHECKPOINT_PAGES.0
        ))
        .map_err(open_err)?;
        Ok(())
    }

    /// Read the recorded schema version and act on it: record the current one in a new
    /// writable file (with the default term function), upgrade an older file when
    /// `writable`, or fail on a file that is not a knowledge base or has a version this
    /// build cannot read. Returns whether the file has `doc_sources`.
    fn check_or_upgrade_schema_version(
        conn: &Connection,
        location: &str,
        writable: bool,
    ) -> Result<bool, StoreError> {
        let open_err = sqlite_open_failed(location);
        let found: Option<String> = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(open_err)?;
        match found {
            None if !writable => Err(StoreError::open(
                location,
                "not a bib knowledge base (no schema version)",
            )),
            None => {
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?1), ('terms', ?2)",
                    params![SCHEMA_VERSION.to_string(), TermConfig::default().id()],
                )
                .map_err(open_err)?;
                Ok(true)
            }
            Some(v) => {
                let found = v.parse::<i64>().unwrap_or(-1);
                Self::upgrade_or_check_recorded_schema_version(conn, location, found, writable)
            }
        }
    }

    /// Act on the recorded schema version `found` of an existing file: migrate a version-1
    /// file and bump a version-2 file when `writable`, read a version-2 file without sources
    /// otherwise, and fail on a version-1 file opened read-only or any unknown version.
    /// Returns whether the file has `doc_sources`.
    fn upgrade_or_check_recorded_schema_version(
        conn: &Connection,
        location: &str,
        found: i64,
        writable: bool,
    ) -> Result<bool, StoreError> {
        let mut sources = true;
        if found == 1 && !writable {
            // The upgrade writes; a read-only open can only say it is needed.
            return Err(StoreError::Schema {
                path: location.to_string(),
                found,
                expected: SCHEMA_VERSION,
            });
        } else if found == 1 {
            migrate_v1(conn).map_err(|e| {
                let reason = "migrating the schema from version 1";
                StoreError::open_failed(location, reason, e)
            })?;
        } else if found == 2 && writable {
            // `SCHEMA` (run by `init_with` before this) created `doc_sources`; nothing else
            // changed.
            conn.execute(
                "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
                params![SCHEMA_VERSION.to_string()],
            )
            .map_err(sqlite_open_failed(location))?;
        } else if found == 2 {
            sources = false;
        } else if found != SCHEMA_VERSION {
            return Err(StoreError::Schema {
                path: location.to_string(),
                found,
                expected: SCHEMA_VERSION,
            });
        }
        Ok(sources)
    }

    /// Create the indexes on columns only version 2 has, and (when `writable`) rebuild an
    /// old-layout vector cache table.
    fn finish_schema_after_version_check(
        conn: &Connection,
        location: &str,
        writable: bool,
    ) -> Result<(), StoreError> {
        conn.execute_batch(SCHEMA_V2_INDEXES)
            .map_err(sqlite_open_failed(location))?;
        if writable {
            migrate_embed_cache(conn).map_err(|e| {
                let reason = "rebuilding the vector cache table";
                StoreError::open_failed(location, reason, e)
            })?;
        }
        Ok(())
    }

    /// The file (or `:memory:`) this store lives in.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(&self.location)
    }

    /// Forget the postings, document frequencies and chunk records remembered so far, as a
    /// freshly opened store would hold them (the page cache and the vector index stay). For
    /// benchmarks that time a query whose terms are read from the file, not from memory.
    pub fn forget_remembered(&self) {
        *self.lexical_memo() = Versioned::default();
        *self.chunk_memo() = Versioned::default();
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A poisoned lock only means another thread panicked mid-call; SQLite rolled back any
        // open transaction when its guard dropped, so the connection is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wrote(&self) {
        self.own_writes.fetch_add(1, Ordering::SeqCst);
    }

    fn version(&self, conn: &Connection) -> Result<(i64, u64), StoreError> {
        let dv: i64 = conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(StoreError::sqlite("data_version"))?;
        Ok((dv, self.own_writes.load(Ordering::SeqCst)))
    }

    fn remembered_doc_freq(&self, version: (i64, u64), term: &str) -> Option<u64> {
        let memo = self.lexical_memo();
        let memo = memo.of(version)?;
        memo.counts
            .get(term)
            .copied()
            .or_else(|| memo.lists.get(term).map(|l| l.len() as u64))
    }

    fn count_doc_freq(conn: &Connection, term: &str) -> Result<u64, StoreError> {
        let n: i64 = conn
            .prepare_cached("SELECT count(*) FROM postings WHERE term = ?1")
            .and_then(|mut st| st.query_row(params![term], |r| r.get(0)))
            .map_err(StoreError::sqlite("document frequency"))?;
        Ok(n.max(0) as u64)
    }

    fn remember_doc_freq(&self, version: (i64, u64), term: &str, n: u64) {
        let mut memo = self.lexical_memo();
        let Some(memo) = memo.fill_at(version) else {
            return;
        };
        if memo.counts.len() >= DOC_FREQ_MEMO_TERMS {
            memo.counts.clear();
        }
        memo.counts.insert(term.to_string(), n);
    }

    fn chunk_memo(&self) -> MutexGuard<'_, Versioned<ChunkMemo>> {
        self.chunk_memo.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lexical_memo(&self) -> MutexGuard<'_, Versioned<LexicalMemo>> {
        self.lexical_memo.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remembered_postings(&self, version: (i64, u64), term: &str) -> Option<Arc<[Posting]>> {
        self.lexical_memo().of(version)?.lists.get(term).cloned()
    }

    /// Every posting of `term`, in chunk order, read from the table.
    fn each_posting(
        conn: &Connection,
        term: &str,
        each: &mut dyn FnMut(Posting),
    ) -> Result<(), StoreError> {
        let mut stmt = conn
            .prepare_cached(
                "SELECT chunk_id, node_id, tf, dl FROM postings WHERE term = ?1 ORDER BY chunk_id",
            )
            .map_err(StoreError::sqlite("bm25"))?;
        let mut rows = stmt
            .query(params![term])
            .map_err(StoreError::sqlite("bm25"))?;
        while let Some(r) = rows.next().map_err(StoreError::sqlite("bm25"))? {
            let get = |i| r.get::<_, i64>(i).map_err(StoreError::sqlite("bm25"));
            each(Posting {
                chunk: get(0)?,
                node: get(1)?,
                tf: to_u32(get(2)?),
                dl: to_u32(get(3)?),
            });
        }
        Ok(())
    }

    /// Remember `list` as `term`'s postings at `version` (a list no longer than
    /// `POSTINGS_MEMO_LIST_MAX`).
    fn remember_postings(&self, version: (i64, u64), term: &str, list: &Arc<[Posting]>) {
        let mut memo = self.lexical_memo();
        let Some(memo) = memo.fill_at(version) else {
            return;
        };
        if memo.held + list.len() > POSTINGS_MEMO_MAX {
            memo.lists.clear();
            memo.held = 0;
        }
        memo.held += list.len();
        if let Some(old) = memo.lists.insert(term.to_string(), list.clone()) {
            memo.held -= old.len();
        }
    }

    /// The distinct terms of the postings of the document at `path` (none when it has none).
    fn terms_of_document(conn: &Connection, path: &str) -> Result<Vec<String>, StoreError> {
        let mut stmt = conn
            .prepare_cached(
                "SELECT DISTINCT term FROM postings WHERE chunk_id IN \
                 (SELECT c.id FROM chunks c JOIN documents d ON c.node_id = d.node_id \
                  WHERE d.path = ?1)",
            )
            .map_err(StoreError::sqlite("terms of a document"))?;
        let rows = stmt
            .query_map(params![path], |r| r.get(0))
            .map_err(StoreError::sqlite("terms of a document"))?;
        rows.collect::<Result<_, _>>()
            .map_err(StoreError::sqlite("terms of a document"))
    }

    /// After this store's own write, which changed only the postings of `touched`: the memo
    /// of the version `before` the write stays valid for every other term, and moves to the
    /// version `after` it. (A memo of another version is left alone: the next read starts it
    /// over.)
    fn forget_terms(&self, before: Version, after: Version, touched: &HashSet<String>) {
        let mut memo = self.lexical_memo();
        let Some(memo) = memo.carry_over(before, after) else {
            return;
        };
        for t in touched {
            memo.counts.remove(t);
            if let Some(list) = memo.lists.remove(t) {
                memo.held -= list.len();
            }
        }
    }

    /// Node ids passing `filter`, or `None` when the filter is empty.
    fn allowed_nodes(
        conn: &Connection,
        filter: &Filter,
    ) -> Result<Option<std::collections::HashSet<NodeId>>, StoreError> {
        if filter.is_empty() {
            return Ok(None);
        }
        let prefix = filter.path_prefix.clone().unwrap_or_default();
        let mut stmt = conn
            .prepare_cached(
                "SELECT node_id, path, metadata, collection FROM documents \
                 WHERE substr(path, 1, ?1) = ?2",
            )
            .map_err(StoreError::sqlite("filter"))?;
        let rows = stmt
            .query_map(params![prefix.chars().count() as i64, prefix], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(StoreError::sqlite("filter"))?;
        let mut out = std::collections::HashSet::new();
        for row in rows {
            let (id, path, meta, collection) = row.map_err(StoreError::sqlite("filter"))?;
            if !filter.matches_collection(&collection) {
                continue;
            }
            let meta = if filter.fields.is_empty() {
                Value::Null
            } else {
                parse_json("document metadata", &meta)?
            };
            if filter.matches(&path, &meta) {
                out.insert(id);
            }
        }
        Ok(Some(out))
    }

    /// Scored ids as hits (the postings and the versioned vector cache only hold stored
    /// chunks, read under the same connection lock).
    fn hits_from(scored: Vec<(ChunkId, f64)>) -> Vec<Hit> {
        scored
            .into_iter()
            .map(|(id, score)| Hit { id, score })
            .collect()
    }

    /// The stored vectors of `ids` (in the order asked; unknown ids skipped).
    fn stored_vectors(
        conn: &Connection,
        ids: &[ChunkId],
    ) -> Result<Vec<(ChunkId, Vec<f32>)>, StoreError> {
        let mut stmt = conn
            .prepare_cached("SELECT embedding FROM chunks WHERE id = ?1")
            .map_err(StoreError::sqlite("get vectors"))?;
        let mut out = Vec::new();
        for id in ids {
            let blob: Option<Vec<u8>> = stmt
                .query_row(params![id], |r| r.get(0))
                .optional()
                .map_err(StoreError::sqlite("get vectors"))?;
            if let Some(b) = blob {
                out.push((*id, blob_to_vec(&b)?));
            }
        }
        Ok(out)
    }

    /// The vector rows of `nodes` as a write leaves them (read inside its transaction), when
    /// the vector index in memory is of the version `before` the write and so can take them
    /// as a patch; `None` otherwise, or when they cannot be read (the index is then read
    /// again by the next search: a cache never fails a write).
    fn rows_for_vector_patch(
        &self,
        tx: &Transaction<'_>,
        before: Version,
        nodes: &HashSet<NodeId>,
    ) -> Option<Vec<VectorRow>> {
        let current = self
            .vectors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|c| c.version == before);
        if !current {
            return None;
        }
        let read = || -> Result<Vec<VectorRow>, StoreError> {
            let what = "read written vectors";
            let mut stmt = tx
                .prepare_cached(
                    "SELECT id, node_id, embedding FROM chunks WHERE node_id = ?1 ORDER BY id",
                )
                .map_err(StoreError::sqlite(what))?;
            let mut rows = Vec::new();
            for &node in nodes {
                let mut q = stmt
                    .query(params![node])
                    .map_err(StoreError::sqlite(what))?;
                while let Some(r) = q.next().map_err(StoreError::sqlite(what))? {
                    rows.push(vector_row(r, what)?);
                }
            }
            Ok(rows)
        };
        read().ok()
    }

    /// After this store's own write, which replaced every vector row of `nodes` by `rows`:
    /// the vector index of the version `before` the write, patched, becomes the index of the
    /// new version, so the next search does not read every vector again (a whole reload per
    /// write took a quarter of `bib serve`'s CPU with four writers on the SciFact KB). Without
    /// `rows`, or when the patch would grow too large, the index is dropped and read again
    /// by the next search.
    fn patch_vectors(
        &self,
        before: Version,
        after: Version,
        nodes: &HashSet<NodeId>,
        rows: Option<Vec<VectorRow>>,
    ) {
        let mut cache = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
        let Some(c) = cache.as_ref().filter(|c| c.version == before) else {
            return;
        };
        *cache = rows
            .and_then(|rows| c.index.patched(nodes, rows))
            .map(|index| {
                Arc::new(VectorCache {
                    version: after,
                    index,
                })
            });
    }

    /// After this store's own write, which rewrote or removed the documents of `nodes`: the
    /// chunk records remembered at the version `before` stay valid for every other document,
    /// and move to the version `after` it.
    fn forget_chunks(&self, before: Version, after: Version, nodes: &HashSet<NodeId>) {
        if let Some(memo) = self.chunk_memo().carry_over(before, after) {
            memo.forget_nodes(nodes);
        }
    }

    /// What this store remembers, after its own committed write that moved the database from
    /// version `before`, touched the postings of `terms` and rewrote or removed the documents
    /// of `nodes` (their vector rows now `rows`): count the write, then carry each memo and
    /// the vector index over to the new version. Called with the connection still held, so no
    /// read sees the new version first.
    fn after_own_write(
        &self,
        before: Version,
        terms: &HashSet<String>,
        nodes: &HashSet<NodeId>,
        rows: Option<Vec<VectorRow>>,
    ) {
        self.wrote();
        let after = (before.0, self.own_writes.load(Ordering::SeqCst));
        self.forget_terms(before, after, terms);
        self.forget_chunks(before, after, nodes);
        self.patch_vectors(before, after, nodes, rows);
    }

    fn load_vectors(&self, conn: &Connection) -> Result<Arc<VectorCache>, StoreError> {
        let version = self.version(conn)?;
        {
            let guard = self.vectors.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = guard.as_ref() {
                if c.version == version {
                    return Ok(c.clone());
                }
            }
        }
        let mut stmt = conn
            .prepare_cached("SELECT id, node_id, embedding FROM chunks ORDER BY id")
            .map_err(StoreError::sqlite("load vectors"))?;
        let mut rows = stmt.query([]).map_err(StoreError::sqlite("load vectors"))?;
        let mut index = IndexBuilder::new(DEFAULT_EXACT_BUDGET);
        while let Some(r) = rows.next().map_err(StoreError::sqlite("load vectors"))? {
            let (id, node, vector) = vector_row(r, "load vectors")?;
            index.push(id, node, &vector);
        }
        let cache = Arc::new(VectorCache {
            version,
            index: index.finish(),
        });
        *self.vectors.lock().unwrap_or_else(|p| p.into_inner()) = Some(cache.clone());
        Ok(cache)
    }

    /// The term function recorded in `meta` ([`TermConfig::V1`] when none is).
    fn read_terms(conn: &Connection, location: &str) -> Result<TermConfig, StoreError> {
        let v: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'terms'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(StoreError::sqlite("term function"))?;
        match v {
            None => Ok(TermConfig::V1),
            Some(s) => TermConfig::parse(&s).map_err(|source| StoreError::TermFunction {
                path: location.to_string(),
                source,
            }),
        }
    }

    /// Write `change` inside `tx`: the document row, its source, the upserted chunks with
    /// their postings, then the pruning of chunks at `chunk_count` and above. Adds to
    /// `touched` every term whose postings the write may change: the document's terms before
    /// it, and the upserted chunks' terms.
    fn apply_in(
        tx: &Transaction<'_>,
        change: &DocumentChange,
        terms: &TermConfig,
        touched: &mut HashSet<String>,
    ) -> Result<ApplyOutcome, StoreError> {
        touched.extend(Self::terms_of_document(tx, &change.path)?);
        let meta = serde_json::to_string(&change.metadata)
            .map_err(|err| StoreError::Invalid(format!("metadata of {}: {err}", change.path)))?;
        let (node_id, document_created) = Self::update_or_insert_document_row(tx, change, &meta)?;
        let mut out = ApplyOutcome {
            node_id,
            document_created,
            ..ApplyOutcome::default()
        };
        Self::store_document_source_if_given(tx, node_id, change)?;
        Self::upsert_chunks_with_their_postings(tx, node_id, change, terms, &mut out, touched)?;
        out.pruned = Self::prune_chunks_past_chunk_count(tx, node_id, change.chunk_count)?;
        Ok(out)
    }

    /// Update the document row at `change.path`, or insert it when there is none. Returns
    /// its node id and whether it was inserted.
    fn update_or_insert_document_row(
        tx: &Transaction<'_>,
        change: &DocumentChange,
        meta: &str,
    ) -> Result<(NodeId, bool), StoreError> {
        let e = StoreError::sqlite;
        let existing: Option<i64> = tx
            .query_row(
                "SELECT node_id FROM documents WHERE path = ?1",
                params![change.path],
                |r| r.get(0),
            )
            .optional()
            .map_err(e("find document"))?;
        match existing {
            Some(id) => {
                tx.execute(
                    "UPDATE documents SET title = ?2, metadata = ?3, content_hash = ?4, \
                     chunk_count = ?5, updated_at_ms = ?6, collection = ?7 WHERE node_id = ?1",
                    params![
                        id,
                        change.title,
                        meta,
                        change.content_hash,
                        change.chunk_count,
                        now_ms(),
                        change.collection_or_default()
                    ],
                )
                .map_err(e("update document"))?;
                Ok((id, false))
            }
            None => {
                tx.execute(
                    "INSERT INTO documents (qualified_name, path, title, metadata, content_hash, \
                     chunk_count, updated_at_ms, collection) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        qualified_name(&change.path),
                        change.path,
                        change.title,
                        meta,
                        change.content_hash,
                        change.chunk_count,
                        now_ms(),
                        change.collection_or_default()
                    ],
                )
                .map_err(e("insert document"))?;
                Ok((tx.last_insert_rowid(), true))
            }
        }
    }

    /// Store `change.source` under `change.content_hash` when the change carries a source.
    fn store_document_source_if_given(
        tx: &Transaction<'_>,
        node_id: NodeId,
        change: &DocumentChange,
    ) -> Result<(), StoreError> {
        if let Some(source) = &change.source {
            tx.execute(
                "INSERT INTO doc_sources (node_id, content_hash, source) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (node_id) DO UPDATE SET content_hash = excluded.content_hash, \
                 source = excluded.source",
                params![node_id, change.content_hash, source],
            )
            .map_err(StoreError::sqlite("store document source"))?;
        }
        Ok(())
    }

    /// Overwrite or create each chunk of `change.upserts` at its (document, chunk index) and
    /// replace its postings, counting created and updated chunks in `out` and adding their
    /// terms to `touched`.
    fn upsert_chunks_with_their_postings(
        tx: &Transaction<'_>,
        node_id: NodeId,
        change: &DocumentChange,
        terms: &TermConfig,
        out: &mut ApplyOutcome,
        touched: &mut HashSet<String>,
    ) -> Result<(), StoreError> {
        let e = StoreError::sqlite;
        let mut statements = ChunkUpsertStatements::prepare(tx)?;
        for c in &change.upserts {
            let counts = term_counts_with(&c.text(), terms);
            let row = ChunkRowValues::of_chunk(c, &counts);
            let old: Option<i64> = statements
                .find_chunk
                .query_row(params![node_id, c.chunk_index], |r| r.get(0))
                .optional()
                .map_err(e("find chunk"))?;
            let id = match old {
                Some(id) => {
                    Self::update_chunk_row(tx, id, &row)?;
                    statements
                        .delete_postings_of_chunk
                        .execute(params![id])
                        .map_err(e("delete postings"))?;
                    out.updated += 1;
                    id
                }
                None => {
                    let id = Self::insert_chunk_row(tx, node_id, &row)?;
                    out.created += 1;
                    id
                }
            };
            for (term, tf) in &counts {
                statements
                    .insert_posting
                    .execute(params![term, id, node_id, tf, row.lex_len as i64])
                    .map_err(e("insert postings"))?;
                touched.insert(term.clone());
            }
        }
        Ok(())
    }

    /// Overwrite chunk `id` (same document and index) with `row`.
    fn update_chunk_row(
        tx: &Transaction<'_>,
        id: ChunkId,
        row: &ChunkRowValues<'_>,
    ) -> Result<(), StoreError> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            let set: Vec<String> = CHUNK_VALUE_COLUMNS
                .iter()
                .enumerate()
                .map(|(i, col)| format!("{col} = ?{}", i + 2))
                .collect();
            format!("UPDATE chunks SET {} WHERE id = ?1", set.join(", "))
        });
        let values = std::iter::once(ToSqlOutput::from(id)).chain(row.values());
        tx.execute(&SQL, params_from_iter(values))
            .map_err(StoreError::sqlite("update chunk"))?;
        Ok(())
    }

    /// Insert `row` as a new chunk of document `node_id`. Returns its id.
    fn insert_chunk_row(
        tx: &Transaction<'_>,
        node_id: NodeId,
        row: &ChunkRowValues<'_>,
    ) -> Result<ChunkId, StoreError> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            let holders: Vec<String> = (1..=CHUNK_VALUE_COLUMNS.len() + 2)
                .map(|i| format!("?{i}"))
                .collect();
            format!(
                "INSERT INTO chunks (node_id, chunk_index, {}) VALUES ({})",
                CHUNK_VALUE_COLUMNS.join(", "),
                holders.join(", ")
            )
        });
        let keys = [
            ToSqlOutput::from(node_id),
            ToSqlOutput::from(row.chunk.chunk_index),
        ];
        tx.execute(&SQL, params_from_iter(keys.into_iter().chain(row.values())))
            .map_err(StoreError::sqlite("insert chunk"))?;
        Ok(tx.last_insert_rowid())
    }

    /// Delete the chunks of document `node_id` at `chunk_count` and above, postings first.
    /// Returns how many chunks were deleted.
    fn prune_chunks_past_chunk_count(
        tx: &Transaction<'_>,
        node_id: NodeId,
        chunk_count: u32,
    ) -> Result<u32, StoreError> {
        let e = StoreError::sqlite;
        tx.execute(
            "DELETE FROM postings WHERE chunk_id IN \
             (SELECT id FROM chunks WHERE node_id = ?1 AND chunk_index >= ?2)",
            params![node_id, chunk_count],
        )
        .map_err(e("prune postings"))?;
        let pruned = tx
            .execute(
                "DELETE FROM chunks WHERE node_id = ?1 AND chunk_index >= ?2",
                params![node_id, chunk_count],
            )
            .map_err(e("prune chunks"))?;
        Ok(pruned as u32)
    }
}

/// The statements [`SqliteStore::apply_in`] runs once per upserted chunk, prepared (from the
/// connection's statement cache) once per change.
struct ChunkUpsertStatements<'tx> {
    find_chunk: rusqlite::CachedStatement<'tx>,
    delete_postings_of_chunk: rusqlite::CachedStatement<'tx>,
    insert_posting: rusqlite::CachedStatement<'tx>,
}

impl<'tx> ChunkUpsertStatements<'tx> {
    fn prepare(tx: &'tx Transaction<'_>) -> Result<Self, StoreError> {
        let e = StoreError::sqlite;
        let find_chunk = tx
            .prepare_cached("SELECT id FROM chunks WHERE node_id = ?1 AND chunk_index = ?2")
            .map_err(e("find chunk"))?;
        let delete_postings_of_chunk = tx
            .prepare_cached("DELETE FROM postings WHERE chunk_id = ?1")
            .map_err(e("delete postings"))?;
        let insert_posting = tx
            .prepare_cached(
                "INSERT INTO postings (term, chunk_id, node_id, tf, dl) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(e("insert postings"))?;
        Ok(Self {
            find_chunk,
            delete_postings_of_chunk,
            insert_posting,
        })
    }
}

/// The `chunks` columns a write sets besides the row's keys (`id`, or `node_id` and
/// `chunk_index`), in the order of [`ChunkRowValues::values`]: the one list the insert and the
/// overwrite of a chunk share.
const CHUNK_VALUE_COLUMNS: [&str; 14] = [
    "prefix",
    "heading_path",
    "content",
    "content_hash",
    "tokens_estimate",
    "tokens_model",
    "span_start",
    "span_end",
    "model_id",
    "dims",
    "embedding",
    "lex_len",
    "line_start",
    "line_end",
];

/// One upserted chunk with the values its `chunks` row stores beyond the chunk's own fields.
struct ChunkRowValues<'c> {
    chunk: &'c ChunkWrite,
    /// BM25 length: the number of term occurrences of the indexed text.
    lex_len: u64,
    /// The heading path as a JSON array (`[]` if it cannot be written).
    heading_path_json: String,
    /// The embedding as little-endian `f32`s.
    embedding_blob: Vec<u8>,
}

impl<'c> ChunkRowValues<'c> {
    /// The row values of `chunk`, whose indexed text has the term `counts`.
    fn of_chunk(chunk: &'c ChunkWrite, counts: &[(String, u32)]) -> Self {
        let lex_len: u64 = counts.iter().map(|(_, n)| u64::from(*n)).sum();
        let heading_path_json =
            serde_json::to_string(&chunk.heading_path).unwrap_or_else(|_| "[]".into());
        let embedding_blob = vec_to_blob(&chunk.embedding);
        Self {
            chunk,
            lex_len,
            heading_path_json,
            embedding_blob,
        }
    }

    /// The values of [`CHUNK_VALUE_COLUMNS`], in its order.
    fn values(&self) -> [ToSqlOutput<'_>; 14] {
        let c = self.chunk;
        [
            ToSqlOutput::from(c.prefix.as_str()),
            ToSqlOutput::from(self.heading_path_json.as_str()),
            ToSqlOutput::from(c.content.as_str()),
            ToSqlOutput::from(c.content_hash.as_str()),
            ToSqlOutput::from(c.tokens_estimate),
            ToSqlOutput::from(c.tokens_model),
            ToSqlOutput::from(c.span_start as i64),
            ToSqlOutput::from(c.span_end as i64),
            ToSqlOutput::from(c.model_id.as_str()),
            ToSqlOutput::from(c.embedding.len() as i64),
            ToSqlOutput::from(self.embedding_blob.as_slice()),
            ToSqlOutput::from(self.lex_len as i64),
            ToSqlOutput::from(c.line_start),
            ToSqlOutput::from(c.line_end),
        ]
    }
}

const CHUNK_SELECT: &str = "SELECT c.id, c.node_id, d.path, d.title, d.metadata, c.chunk_index, \
     c.prefix, c.heading_path, c.content, c.content_hash, c.tokens_estimate, c.tokens_model, \
     c.span_start, c.span_end, c.model_id, d.collection, c.line_start, c.line_end \
     FROM chunks c JOIN documents d ON d.node_id = c.node_id";

type RawChunk = (
    i64,
    i64,
    String,
    String,
    String,
    i64,
    String,
    String,
    String,
    String,
    i64,
    i64,
    i64,
    i64,
    String,
    String,
    i64,
    i64,
);

fn chunk_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawChunk> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
        r.get(11)?,
        r.get(12)?,
        r.get(13)?,
        r.get(14)?,
        r.get(15)?,
        r.get(16)?,
        r.get(17)?,
    ))
}

/// A row of `SELECT id, node_id, embedding FROM chunks …`, decoded; `what` names the read in
/// errors.
fn vector_row(r: &rusqlite::Row<'_>, what: &'static str) -> Result<VectorRow, StoreError> {
    let id: i64 = r.get(0).map_err(StoreError::sqlite(what))?;
    let node: i64 = r.get(1).map_err(StoreError::sqlite(what))?;
    let blob = r
        .get_ref(2)
        .and_then(|v| v.as_blob().map_err(Into::into))
        .map_err(StoreError::sqlite(what))?;
    Ok((id, node, blob_to_vec(blob)?))
}

fn chunk_record(r: RawChunk) -> Result<ChunkRecord, StoreError> {
    let heading: Vec<String> = serde_json::from_str(&r.7).map_err(|err| StoreError::Corrupt {
        what: "heading path".into(),
        reason: "not valid JSON".into(),
        source: Some(Box::new(err)),
    })?;
    Ok(ChunkRecord {
        id: r.0,
        node_id: r.1,
        path: r.2,
        title: r.3,
        metadata: parse_json("document metadata", &r.4)?,
        chunk_index: to_u32(r.5),
        prefix: r.6,
        heading_path: heading,
        content: r.8,
        content_hash: r.9,
        tokens_estimate: to_u32(r.10),
        tokens_model: to_u32(r.11),
        span_start: r.12.max(0) as u64,
        span_end: r.13.max(0) as u64,
        model_id: r.14,
        collection: r.15,
        line_start: to_u32(r.16),
        line_end: to_u32(r.17),
    })
}

impl SqliteStore {
    /// Documents whose row matches `filter` (an SQL condition on `documents d`, `?1` bound
    /// to `path`), ordered by path.
    fn select_documents(
        &self,
        filter: &str,
        path: Option<&str>,
    ) -> Result<Vec<DocRecord>, StoreError> {
        let conn = self.conn();
        let has_source = if self.sources {
            "EXISTS (SELECT 1 FROM doc_sources s WHERE s.node_id = d.node_id \
             AND s.content_hash = d.content_hash)"
        } else {
            "0"
        };
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT node_id, qualified_name, path, title, metadata, content_hash, \
                 chunk_count, collection, {has_source} FROM documents d WHERE {filter} ORDER BY path"
            ))
            .map_err(StoreError::sqlite("documents"))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(path), |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, i64>(6)?,
                    r.get::<_, String>(7)?,
                    r.get::<_, bool>(8)?,
                ))
            })
            .map_err(StoreError::sqlite("documents"))?;
        let mut out = Vec::new();
        for row in rows {
            let (node_id, qn, path, title, meta, hash, n, collection, has_source) =
                row.map_err(StoreError::sqlite("documents"))?;
            out.push(DocRecord {
                node_id,
                qualified_name: qn,
                path,
                collection,
                title,
                metadata: parse_json("document metadata", &meta)?,
                content_hash: hash,
                chunk_count: to_u32(n),
                has_source,
            });
        }
        Ok(out)
    }

    /// Chunk states of the documents matching `filter` (an SQL condition on `documents d`,
    /// `?1` bound to `path`), ordered by (path, chunk_index).
    fn select_chunk_states(
        &self,
        filter: &str,
        path: Option<&str>,
    ) -> Result<Vec<ChunkState>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT d.path, c.node_id, c.chunk_index, c.content_hash, c.model_id, \
                 c.line_start, c.line_end FROM chunks c \
                 JOIN documents d ON d.node_id = c.node_id WHERE {filter} \
                 ORDER BY d.path, c.chunk_index"
            ))
            .map_err(StoreError::sqlite("chunk states"))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(path), |r| {
                Ok(ChunkState {
                    path: r.get(0)?,
                    node_id: r.get(1)?,
                    chunk_index: to_u32(r.get(2)?),
                    content_hash: r.get(3)?,
                    model_id: r.get(4)?,
                    line_start: to_u32(r.get(5)?),
                    line_end: to_u32(r.get(6)?),
                })
            })
            .map_err(StoreError::sqlite("chunk states"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(StoreError::sqlite("chunk states"))
    }
}

/// The postings table read by [`top_bm25`] through the store's memo. The connection is taken
/// only when the memo lacks a list or count, so asks whose words are all remembered score
/// without holding it (other requests' statements run meanwhile).
struct SqlitePostings<'c> {
    store: &'c SqliteStore,
    /// The database version the query started at: what the memo is read and filled at.
    version: (i64, u64),
    /// The connection, once taken; kept for the rest of the query.
    conn: Option<MutexGuard<'c, Connection>>,
    /// Whether the database had moved past `version` when the connection was taken: what is
    /// read then is used but not remembered under `version`.
    moved: bool,
}

impl<'c> SqlitePostings<'c> {
    fn new(store: &'c SqliteStore, version: (i64, u64)) -> Self {
        Self {
            store,
            version,
            conn: None,
            moved: false,
        }
    }

    /// Reading through `conn`, already held, at the `version` read on it.
    fn holding(
        store: &'c SqliteStore,
        conn: MutexGuard<'c, Connection>,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            store,
            version: store.version(&conn)?,
            conn: Some(conn),
            moved: false,
        })
    }

    fn conn(&mut self) -> Result<&Connection, StoreError> {
        if self.conn.is_none() {
            let conn = self.store.conn();
            self.moved = self.store.version(&conn)? != self.version;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_deref().expect("taken above"))
    }
}

impl PostingSource for SqlitePostings<'_> {
    type Error = StoreError;

    fn doc_freq(&mut self, term: &str) -> Result<u64, StoreError> {
        let (store, version) = (self.store, self.version);
        if let Some(n) = store.remembered_doc_freq(version, term) {
            return Ok(n);
        }
        let n = SqliteStore::count_doc_freq(self.conn()?, term)?;
        if !self.moved {
            store.remember_doc_freq(version, term, n);
        }
        Ok(n)
    }

    fn scan(
        &mut self,
        term: &str,
        each: &mut dyn FnMut(ChunkId, NodeId, u32, u32),
    ) -> Result<(), StoreError> {
        let (store, version) = (self.store, self.version);
        let list = match store.remembered_postings(version, term) {
            Some(list) => list,
            None => {
                // A list too long to remember (its count, asked first by BM25, says so) goes
                // straight from the table to `each`, without a copy.
                let too_long = store
                    .remembered_doc_freq(version, term)
                    .is_some_and(|n| n > POSTINGS_MEMO_LIST_MAX as u64);
                let conn = self.conn()?;
                if too_long {
                    return SqliteStore::each_posting(conn, term, &mut |p| {
                        each(p.chunk, p.node, p.tf, p.dl)
                    });
                }
                let mut list = Vec::new();
                SqliteStore::each_posting(conn, term, &mut |p| list.push(p))?;
                let list: Arc<[Posting]> = list.into();
                if !self.moved && list.len() <= POSTINGS_MEMO_LIST_MAX {
                    store.remember_postings(version, term, &list);
                }
                list
            }
        };
        for p in list.iter() {
            each(p.chunk, p.node, p.tf, p.dl);
        }
        Ok(())
    }

    fn lookup(
        &mut self,
        term: &str,
        chunks: &[ChunkId],
        each: &mut dyn FnMut(ChunkId, u32, u32),
    ) -> Result<(), StoreError> {
        if let Some(list) = self.store.remembered_postings(self.version, term) {
            for &c in chunks {
                if let Ok(i) = list.binary_search_by_key(&c, |p| p.chunk) {
                    each(c, list[i].tf, list[i].dl);
                }
            }
            return Ok(());
        }
        let mut stmt = self
            .conn()?
            .prepare_cached("SELECT tf, dl FROM postings WHERE term = ?1 AND chunk_id = ?2")
            .map_err(StoreError::sqlite("bm25 lookup"))?;
        for &c in chunks {
            let row: Option<(i64, i64)> = stmt
                .query_row(params![term, c], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .map_err(StoreError::sqlite("bm25 lookup"))?;
            if let Some((tf, dl)) = row {
                each(c, to_u32(tf), to_u32(dl));
            }
        }
        Ok(())
    }
}

impl VectorsByHash for SqliteStore {
    fn cached_vectors(
        &self,
        model_id: &str,
        hashes: &[String],
    ) -> Result<Vec<(String, Vec<f32>)>, StoreError> {
        // Batched lookups (an ask's ranking signals and trimmer ask for hundreds of sentence
        // vectors at once): the chunks first, then the cache for what they lack.
        const BATCH: usize = 256;
        let conn = self.conn();
        let mut found: HashMap<String, Vec<f32>> = HashMap::with_capacity(hashes.len());
        for (table, column) in [("chunks", "embedding"), ("embed_cache", "vector")] {
            let rest: Vec<&String> = hashes
                .iter()
                .filter(|h| !found.contains_key(*h))
                .filter(|h| table != "chunks" || crate::could_be_chunk_hash(h))
                .collect();
            for part in rest.chunks(BATCH) {
                let marks = vec!["?"; part.len()].join(",");
                let sql = format!(
                    "SELECT content_hash, {column} FROM {table} \
                     WHERE model_id = ? AND content_hash IN ({marks})"
                );
                let mut stmt = conn
                    .prepare_cached(&sql)
                    .map_err(StoreError::sqlite("cached vectors"))?;
                let args = std::iter::once(model_id).chain(part.iter().map(|h| h.as_str()));
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(args), |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
                    })
                    .map_err(StoreError::sqlite("cached vectors"))?;
                for row in rows {
                    let (h, b) = row.map_err(StoreError::sqlite("cached vectors"))?;
                    if let std::collections::hash_map::Entry::Vacant(v) = found.entry(h) {
                        v.insert(blob_to_vec(&b)?);
                    }
                }
            }
        }
        Ok(hashes
            .iter()
            .filter_map(|h| found.get(h).map(|v| (h.clone(), v.clone())))
            .collect())
    }

    fn cache_vectors(
        &self,
        model_id: &str,
        items: &[(String, Vec<f32>)],
    ) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(StoreError::sqlite("begin"))?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO embed_cache (model_id, content_hash, vector) \
                     VALUES (?1, ?2, ?3)",
                )
                .map_err(StoreError::sqlite("cache vectors"))?;
            for (h, v) in items {
                stmt.execute(params![model_id, h, vec_to_blob(v)])
                    .map_err(StoreError::sqlite("cache vectors"))?;
            }
        }
        tx.commit().map_err(StoreError::sqlite("commit"))?;
        Ok(())
    }
}

impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn documents(&self) -> Result<Vec<DocRecord>, StoreError> {
        self.select_documents("1", None)
    }

    fn document(&self, path: &str) -> Result<Option<DocRecord>, StoreError> {
        Ok(self.select_documents("d.path = ?1", Some(path))?.pop())
    }

    fn embedding_model(&self) -> Result<Option<String>, StoreError> {
        self.conn()
            .query_row(
                "SELECT model_id FROM chunks WHERE model_id <> '' LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(StoreError::sqlite("embedding model"))
    }

    fn chunk_states(&self) -> Result<Vec<ChunkState>, StoreError> {
        self.select_chunk_states("1", None)
    }

    fn chunk_states_of(&self, path: &str) -> Result<Vec<ChunkState>, StoreError> {
        self.select_chunk_states("d.path = ?1", Some(path))
    }

    fn set_bulk_writes(&self, on: bool) {
        let pages = if on {
            WAL_CHECKPOINT_PAGES.1
        } else {
            WAL_CHECKPOINT_PAGES.0
        };
        // Tuning only: a connection that refuses keeps the interval it has.
        let _ = self.conn().pragma_update(None, "wal_autocheckpoint", pages);
    }

    fn apply_document(&self, change: &DocumentChange) -> Result<ApplyOutcome, StoreError> {
        let mut outs = self.apply_documents(std::slice::from_ref(change))?;
        Ok(outs.pop().expect("one outcome per change"))
    }

    fn apply_documents(&self, changes: &[DocumentChange]) -> Result<Vec<ApplyOutcome>, StoreError> {
        for c in changes {
            c.validate()?;
        }
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(StoreError::sqlite("begin"))?;
        let terms = Self::read_terms(&tx, &self.location)?;
        let before = self.version(&tx)?;
        let mut touched = HashSet::new();
        let out = changes
            .iter()
            .map(|c| Self::apply_in(&tx, c, &terms, &mut touched))
            .collect::<Result<Vec<_>, _>>()?;
        let nodes: HashSet<NodeId> = out.iter().map(|o| o.node_id).collect();
        let rows = self.rows_for_vector_patch(&tx, before, &nodes);
        tx.commit().map_err(StoreError::sqlite("commit"))?;
        self.after_own_write(before, &touched, &nodes, rows);
        Ok(out)
    }

    fn remove_documents(&self, paths: &[String]) -> Result<u64, StoreError> {
        if paths.is_empty() {
            return Ok(0);
        }
        let e = StoreError::sqlite;
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(e("begin"))?;
        let before = self.version(&tx)?;
        let mut touched = HashSet::new();
        let mut nodes = HashSet::new();
        let mut removed = 0u64;
        for p in paths {
            touched.extend(Self::terms_of_document(&tx, p)?);
            let id: Option<i64> = tx
                .query_row(
                    "SELECT node_id FROM documents WHERE path = ?1",
                    params![p],
                    |r| r.get(0),
                )
                .optional()
                .map_err(e("find document"))?;
            let Some(id) = id else { continue };
            nodes.insert(id);
            tx.execute("DELETE FROM postings WHERE node_id = ?1", params![id])
                .map_err(e("delete postings"))?;
            removed += tx
                .execute("DELETE FROM chunks WHERE node_id = ?1", params![id])
                .map_err(e("delete chunks"))? as u64;
            tx.execute("DELETE FROM doc_sources WHERE node_id = ?1", params![id])
                .map_err(e("delete document source"))?;
            tx.execute("DELETE FROM documents WHERE node_id = ?1", params![id])
                .map_err(e("delete document"))?;
        }
        tx.commit().map_err(e("commit"))?;
        self.after_own_write(before, &touched, &nodes, Some(Vec::new()));
        Ok(removed)
    }

    fn document_source(&self, path: &str) -> Result<Option<String>, StoreError> {
        if !self.sources {
            return Ok(None);
        }
        self.conn()
            .query_row(
                "SELECT s.source FROM doc_sources s JOIN documents d ON d.node_id = s.node_id \
                 WHERE d.path = ?1 AND s.content_hash = d.content_hash",
                params![path],
                |r| r.get(0),
            )
            .optional()
            .map_err(StoreError::sqlite("document source"))
    }

    fn get_chunks(&self, ids: &[ChunkId]) -> Result<Vec<ChunkRecord>, StoreError> {
        let conn = self.conn();
        let version = self.version(&conn)?;
        let mut out: Vec<Option<ChunkRecord>> = {
            let memo = self.chunk_memo();
            let memo = memo.of(version);
            ids.iter()
                .map(|&id| memo.and_then(|m| m.get(id)).cloned())
                .collect()
        };
        if out.iter().any(Option::is_none) {
            let mut stmt = conn
                .prepare_cached(&format!("{CHUNK_SELECT} WHERE c.id = ?1"))
                .map_err(StoreError::sqlite("get chunks"))?;
            let mut read = Vec::new();
            for (slot, id) in out.iter_mut().zip(ids) {
                if slot.is_some() {
                    continue;
                }
                let row = stmt
                    .query_row(params![id], chunk_row)
                    .optional()
                    .map_err(StoreError::sqlite("get chunks"))?;
                if let Some(r) = row {
                    let record = chunk_record(r)?;
                    read.push(record.clone());
                    *slot = Some(record);
                }
            }
            if let Some(memo) = self.chunk_memo().fill_at(version) {
                read.iter().for_each(|r| memo.remember(r));
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    fn chunk_ids(&self) -> Result<Vec<ChunkId>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT id FROM chunks ORDER BY id")
            .map_err(StoreError::sqlite("chunk ids"))?;
        let rows = stmt
            .query_map([], |r| r.get::<_, i64>(0))
            .map_err(StoreError::sqlite("chunk ids"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(StoreError::sqlite("chunk ids"))
    }

    fn document_chunks(&self, path: &str) -> Result<Vec<ChunkRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(&format!(
                "{CHUNK_SELECT} WHERE d.path = ?1 ORDER BY c.chunk_index"
            ))
            .map_err(StoreError::sqlite("document chunks"))?;
        let rows = stmt
            .query_map(params![path], chunk_row)
            .map_err(StoreError::sqlite("document chunks"))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(chunk_record(
                r.map_err(StoreError::sqlite("document chunks"))?,
            )?);
        }
        Ok(out)
    }

    fn get_vectors(&self, ids: &[ChunkId]) -> Result<Vec<(ChunkId, Vec<f32>)>, StoreError> {
        Self::stored_vectors(&self.conn(), ids)
    }

    fn vector_scores(
        &self,
        query: &[f32],
        ids: &[ChunkId],
    ) -> Result<Vec<(ChunkId, f64)>, StoreError> {
        let cache = self.load_vectors(&self.conn())?;
        cache
            .index
            .scores_of(query, ids, |ids| Self::stored_vectors(&self.conn(), ids))
    }

    fn bm25_search(
        &self,
        query: &str,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let conn = self.conn();
        let q = terms_with(query, &Self::read_terms(&conn, &self.location)?);
        if q.is_empty() {
            return Ok(Vec::new());
        }
        let allowed = Self::allowed_nodes(&conn, filter)?;
        let (n, total): (i64, i64) = conn
            .query_row(
                "SELECT n_chunks, total_len FROM lex_stats WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(StoreError::sqlite("lexical stats"))?;
        let stats = LexicalStats {
            chunks: n.max(0) as u64,
            total_len: total.max(0) as u64,
            terms: 0,
        };
        let mut postings = SqlitePostings::new(self, self.version(&conn)?);
        drop(conn);
        let scored = top_bm25(&mut postings, &q, stats, limit, allowed.as_ref())?;
        Ok(Self::hits_from(scored))
    }

    fn vector_search(
        &self,
        query: &[f32],
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, StoreError> {
        if limit == 0 || query.is_empty() {
            return Ok(Vec::new());
        }
        let (allowed, cache) = {
            let conn = self.conn();
            (
                Self::allowed_nodes(&conn, filter)?,
                self.load_vectors(&conn)?,
            )
        };
        // The scan holds no connection: other requests' reads and writes proceed meanwhile.
        // Its snapshot is the cache's version; the rescoring lookup below skips ids a
        // concurrent write removed since.
        let scored = cache.index.search(query, limit, allowed.as_ref(), |ids| {
            Self::stored_vectors(&self.conn(), ids)
        })?;
        Ok(Self::hits_from(scored))
    }

    fn lexical_stats(&self) -> Result<LexicalStats, StoreError> {
        let conn = self.conn();
        let (n, total): (i64, i64) = conn
            .query_row(
                "SELECT n_chunks, total_len FROM lex_stats WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(StoreError::sqlite("lexical stats"))?;
        let terms: i64 = conn
            .query_row("SELECT count(DISTINCT term) FROM postings", [], |r| {
                r.get(0)
            })
            .map_err(StoreError::sqlite("lexical stats"))?;
        Ok(LexicalStats {
            chunks: n.max(0) as u64,
            total_len: total.max(0) as u64,
            terms: terms.max(0) as u64,
        })
    }

    fn doc_freqs(&self, terms: &[String]) -> Result<(u64, Vec<u64>), StoreError> {
        let conn = self.conn();
        let n: i64 = conn
            .query_row("SELECT n_chunks FROM lex_stats WHERE id = 1", [], |r| {
                r.get(0)
            })
            .map_err(StoreError::sqlite("doc freqs"))?;
        // Counted once per database version, then remembered (the memo BM25 reads).
        let mut postings = SqlitePostings::holding(self, conn)?;
        let dfs = terms
            .iter()
            .map(|t| postings.doc_freq(t))
            .collect::<Result<Vec<u64>, _>>()?;
        Ok((n.max(0) as u64, dfs))
    }

    fn term_config(&self) -> Result<TermConfig, StoreError> {
        Self::read_terms(&self.conn(), &self.location)
    }

    fn set_term_config(&self, terms: &TermConfig) -> Result<u64, StoreError> {
        let e = StoreError::sqlite;
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(e("begin"))?;
        // An unreadable recorded function is exactly what a reindex repairs.
        if Self::read_terms(&tx, &self.location).ok().as_ref() == Some(terms) {
            return Ok(0);
        }
        let rows: Vec<(i64, i64, String, String)> = {
            let mut stmt = tx
                .prepare("SELECT id, node_id, prefix, content FROM chunks ORDER BY id")
                .map_err(e("reindex"))?;
            let it = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .map_err(e("reindex"))?;
            it.collect::<Result<_, _>>().map_err(e("reindex"))?
        };
        tx.execute("DELETE FROM postings", [])
            .map_err(e("reindex"))?;
        {
            let mut ins = tx
                .prepare_cached(
                    "INSERT INTO postings (term, chunk_id, node_id, tf, dl) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(e("reindex"))?;
            let mut len = tx
                .prepare_cached("UPDATE chunks SET lex_len = ?2 WHERE id = ?1")
                .map_err(e("reindex"))?;
            for (id, node, prefix, content) in &rows {
                let counts = term_counts_with(&crate::indexed_text(prefix, content), terms);
                let lex_len: i64 = counts.iter().map(|(_, n)| i64::from(*n)).sum();
                len.execute(params![id, lex_len]).map_err(e("reindex"))?;
                for (term, tf) in &counts {
                    ins.execute(params![term, id, node, tf, lex_len])
                        .map_err(e("reindex"))?;
                }
            }
        }
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('terms', ?1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![terms.id()],
        )
        .map_err(e("reindex"))?;
        tx.commit().map_err(e("commit"))?;
        self.wrote();
        Ok(rows.len() as u64)
    }

    fn audit(&self) -> Result<AuditReport, StoreError> {
        let conn = self.conn();
        let e = StoreError::sqlite("audit");
        let one = |sql: &str| -> Result<i64, StoreError> {
            conn.query_row(sql, [], |r| r.get::<_, i64>(0))
                .map_err(StoreError::sqlite("audit"))
        };
        let documents = one("SELECT count(*) FROM documents")?;
        let chunks = one("SELECT count(*) FROM chunks")?;
        let vectors =
            one("SELECT count(*) FROM chunks WHERE dims > 0 AND length(embedding) = dims * 4")?;
        let lexical = one("SELECT count(*) FROM chunks c WHERE c.lex_len = \
             (SELECT coalesce(sum(p.tf), 0) FROM postings p WHERE p.chunk_id = c.id) \
             AND NOT EXISTS (SELECT 1 FROM postings p WHERE p.chunk_id = c.id AND \
             (p.dl != c.lex_len OR p.node_id != c.node_id))")?;
        let orphan_chunks = one("SELECT count(*) FROM chunks c WHERE NOT EXISTS \
             (SELECT 1 FROM documents d WHERE d.node_id = c.node_id)")?;
        let orphan_postings = one("SELECT count(*) FROM postings p WHERE NOT EXISTS \
             (SELECT 1 FROM chunks c WHERE c.id = p.chunk_id)")?;
        let (sn, st): (i64, i64) = conn
            .query_row(
                "SELECT n_chunks, total_len FROM lex_stats WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(StoreError::sqlite("audit"))?;
        let total_len = one("SELECT coalesce(sum(lex_len), 0) FROM chunks")?;
        let stats_consistent = sn == chunks && st == total_len;
        let mut stmt = conn
            .prepare(
                "SELECT d.path FROM documents d LEFT JOIN \
                 (SELECT node_id, count(*) AS n, min(chunk_index) AS lo, max(chunk_index) AS hi \
                  FROM chunks GROUP BY node_id) c ON c.node_id = d.node_id \
                 WHERE coalesce(c.n, 0) != d.chunk_count \
                    OR (d.chunk_count > 0 AND (c.lo != 0 OR c.hi != d.chunk_count - 1)) \
                 ORDER BY d.path",
            )
            .map_err(StoreError::sqlite("audit"))?;
        let incomplete = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(StoreError::sqlite("audit"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(e)?;
        Ok(AuditReport {
            documents: documents as u64,
            chunks: chunks as u64,
            vectors: vectors as u64,
            lexical_entries: lexical as u64,
            orphan_chunks: orphan_chunks as u64,
            incomplete_documents: incomplete,
            orphan_postings: orphan_postings as u64,
            stats_consistent,
            coherent: false,
        }
        .judged())
    }
}

impl RunLog for SqliteStore {
    fn begin_run(&self, record: &Value) -> Result<i64, StoreError> {
        let conn = self.conn();
        let e = StoreError::sqlite;
        conn.execute(
            "UPDATE runs SET status = 'interrupted' WHERE status = 'running'",
            [],
        )
        .map_err(e("begin run"))?;
        conn.execute(
            "INSERT INTO runs (started_at_ms, status, record) VALUES (?1, 'running', ?2)",
            params![now_ms(), record.to_string()],
        )
        .map_err(e("begin run"))?;
        Ok(conn.last_insert_rowid())
    }

    fn finish_run(&self, id: i64, status: RunStatus, record: &Value) -> Result<(), StoreError> {
        let conn = self.conn();
        let n = conn
            .execute(
                "UPDATE runs SET status = ?2, finished_at_ms = ?3, record = ?4 WHERE id = ?1",
                params![id, status.as_str(), now_ms(), record.to_string()],
            )
            .map_err(StoreError::sqlite("finish run"))?;
        if n == 0 {
            return Err(StoreError::Invalid(format!("no run with id {id}")));
        }
        Ok(())
    }

    fn runs(&self, limit: usize) -> Result<Vec<RunRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, started_at_ms, finished_at_ms, status, record FROM runs \
                 ORDER BY id DESC LIMIT ?1",
            )
            .map_err(StoreError::sqlite("runs"))?;
        let rows = stmt
            .query_map(params![limit as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })
            .map_err(StoreError::sqlite("runs"))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, s, f, status, rec) = row.map_err(StoreError::sqlite("runs"))?;
            out.push(RunRow {
                id,
                started_at_ms: s,
                finished_at_ms: f,
                status: status.parse()?,
                record: parse_json("run record", &rec)?,
            });
        }
        Ok(out)
    }

    fn log_query(&self, entry: &QueryLogEntry) -> Result<i64, StoreError> {
        let r = self.query_log_retention();
        let (query, rec) = r.prepare(entry)?;
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(StoreError::sqlite("begin"))?;
        tx.execute(
            "INSERT INTO query_log (at_ms, query, mode, record) VALUES (?1, ?2, ?3, ?4)",
            params![entry.at_ms, query, entry.mode, rec],
        )
        .map_err(StoreError::sqlite("log query"))?;
        let id = tx.last_insert_rowid();
        let keep_rows = i64::try_from(r.max_rows.max(1)).unwrap_or(i64::MAX);
        // Ids grow by one and only the oldest are deleted, so the newest `keep_rows` are the
        // ids above `id - keep_rows` (with gaps, fewer are kept, never more).
        tx.execute(
            "DELETE FROM query_log WHERE id <= ?1",
            params![id.saturating_sub(keep_rows)],
        )
        .map_err(StoreError::sqlite("query log retention (rows)"))?;
        if r.check_bytes(id, query.len() + rec.len()) {
            // octet_length reads the length from the record header, not the text itself.
            tx.execute(
                "DELETE FROM query_log WHERE id < COALESCE((SELECT MIN(id) FROM \
                 (SELECT id, SUM(octet_length(query) + octet_length(record)) \
                  OVER (ORDER BY id DESC) AS total FROM query_log) WHERE total <= ?1), ?2)",
                params![i64::try_from(r.max_bytes).unwrap_or(i64::MAX), id],
            )
            .map_err(StoreError::sqlite("query log retention (bytes)"))?;
        }
        tx.commit().map_err(StoreError::sqlite("commit"))?;
        Ok(id)
    }

    fn set_query_log_retention(&self, retention: QueryLogRetention) {
        *self.retention.lock().unwrap_or_else(|p| p.into_inner()) = retention;
    }

    fn query_log_retention(&self) -> QueryLogRetention {
        *self.retention.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recent_queries(&self, limit: usize) -> Result<Vec<QueryLogEntry>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT id, record FROM query_log ORDER BY id DESC LIMIT ?1")
            .map_err(StoreError::sqlite("recent queries"))?;
        let rows = stmt
            .query_map(params![limit as i64], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(StoreError::sqlite("recent queries"))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, rec) = row.map_err(StoreError::sqlite("recent queries"))?;
            let mut entry: QueryLogEntry =
                serde_json::from_str(&rec).map_err(|err| StoreError::Corrupt {
                    what: format!("query log entry {id}"),
                    reason: "not valid JSON".into(),
                    source: Some(Box::new(err)),
                })?;
            entry.id = id;
            out.push(entry);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The query log at its default bound (10,000 rows) on disk: the oldest go, and what one
    /// insert with retention costs (`cargo test -p bib-store --release query_log_at_bound --
    /// --ignored --nocapture`).
    #[test]
    #[ignore]
    fn query_log_at_bound() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(dir.path().join("kb.sqlite")).unwrap();
        let entry = |i: i64| QueryLogEntry {
            id: 0,
            at_ms: i,
            query: format!("how are packages restored from the local cache {i}"),
            mode: "hybrid".into(),
            chunk_ids: (0..5).collect(),
            scores: vec![0.5; 5],
            tokens_before: 900,
            tokens_in_context: 300,
            extra: serde_json::json!({"top_k": 5, "timings": {"total_ms": 12.5}}),
        };
        for i in 0..10_000 {
            s.log_query(&entry(i)).unwrap();
        }
        let t = std::time::Instant::now();
        for i in 10_000..11_000 {
            s.log_query(&entry(i)).unwrap();
        }
        let per = t.elapsed().as_secs_f64() * 1000.0 / 1000.0;
        eprintln!("log_query at 10,000 rows: {per:.3} ms per insert");
        let n: i64 = s
            .conn()
            .query_row("SELECT COUNT(*) FROM query_log", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 10_000);
        assert_eq!(s.recent_queries(1).unwrap()[0].at_ms, 10_999);
    }

    #[test]
    fn conformance_in_memory() {
        crate::conformance::run_all(&|| Box::new(SqliteStore::open_in_memory().unwrap()));
    }

    #[test]
    fn conformance_on_disk_wal() {
        let dir = tempfile::tempdir().unwrap();
        let n = std::sync::atomic::AtomicUsize::new(0);
        crate::conformance::run_all(&|| {
            let i = n.fetch_add(1, Ordering::SeqCst);
            Box::new(SqliteStore::open(dir.path().join(format!("kb{i}.sqlite"))).unwrap())
        });
    }

    #[test]
    fn reopen_keeps_data_and_checks_schema() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/kb.sqlite");
        {
            let s = SqliteStore::open(&p).unwrap();
            s.apply_document(&crate::conformance::sample_change("a.md", &["hello world"]))
                .unwrap();
        }
        let s = SqliteStore::open(&p).unwrap();
        assert_eq!(s.documents().unwrap().len(), 1);
        s.conn()
            .execute(
                "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
                [],
            )
            .unwrap();
        drop(s);
        match SqliteStore::open(&p) {
            Err(StoreError::Schema { found: 99, .. }) => {}
            other => panic!("expected schema error, got {other:?}"),
        }
    }

    /// A file from before issue 15 records no term function: it is read as v1 (the function
    /// its postings were built with), not as this build's; one recording a function this build
    /// cannot reproduce is refused by name until a reindex rewrites it.
    #[test]
    fn term_function_of_old_and_unknown_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kb.sqlite");
        let s = SqliteStore::open(&p).unwrap();
        s.apply_document(&crate::conformance::sample_change(
            "a.md",
            &["Installing the packages"],
        ))
        .unwrap();
        let v1_reindexed = s.set_term_config(&TermConfig::V1).unwrap();
        assert_eq!(v1_reindexed, 1);
        s.conn()
            .execute("DELETE FROM meta WHERE key = 'terms'", [])
            .unwrap();
        drop(s);
        let s = SqliteStore::open_read_only(&p).unwrap();
        assert_eq!(s.term_config().unwrap(), TermConfig::V1);
        // v1 has prefix stems: "install" meets "installing" through `instal`.
        assert_eq!(
            s.bm25_search("installer", 5, &Filter::none())
                .unwrap()
                .len(),
            1
        );
        drop(s);
        let s = SqliteStore::open(&p).unwrap();
        s.conn()
            .execute(
                "INSERT INTO meta (key, value) VALUES ('terms', 'stem=lemma')",
                [],
            )
            .unwrap();
        for e in [
            s.term_config().unwrap_err(),
            s.bm25_search("packages", 5, &Filter::none()).unwrap_err(),
        ] {
            assert!(
                matches!(e, StoreError::TermFunction { .. }) && e.to_string().contains("ingest"),
                "{e}"
            );
        }
        assert_eq!(s.set_term_config(&TermConfig::default()).unwrap(), 1);
        assert_eq!(s.term_config().unwrap(), TermConfig::default());
        assert_eq!(
            s.bm25_search("packages", 5, &Filter::none()).unwrap().len(),
            1
        );
    }

    #[test]
    fn version_1_files_migrate_into_the_last_runs_collection() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kb.sqlite");
        {
            let s = SqliteStore::open(&p).unwrap();
            s.apply_document(&crate::conformance::sample_change("a.md", &["hello world"]))
                .unwrap();
            s.begin_run(&serde_json::json!({"root": "/somewhere/kb-en"}))
                .unwrap();
            // Turn the file back into a version-1 file (no collection, no line columns).
            s.conn()
                .execute_batch(
                    "DROP INDEX documents_by_collection; \
                     ALTER TABLE documents DROP COLUMN collection; \
                     ALTER TABLE chunks DROP COLUMN line_start; \
                     ALTER TABLE chunks DROP COLUMN line_end; \
                     UPDATE meta SET value = '1' WHERE key = 'schema_version';",
                )
                .unwrap();
        }
        // A read-only open cannot upgrade: it says what it found instead of failing to write.
        match SqliteStore::open_read_only(&p) {
            Err(StoreError::Schema {
                found: 1, expected, ..
            }) => assert_eq!(expected, SCHEMA_VERSION),
            other => panic!("expected a schema error, got {other:?}"),
        }
        let s = SqliteStore::open(&p).unwrap();
        let docs = s.documents().unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].collection, "kb-en");
        let c = s.document_chunks("a.md").unwrap();
        assert_eq!((c[0].line_start, c[0].line_end), (0, 0));
        let v: String = s
            .conn()
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION.to_string());
        drop(s);
        // Opening again is a no-op.
        assert_eq!(
            SqliteStore::open(&p).unwrap().documents().unwrap()[0].collection,
            "kb-en"
        );
    }

    #[test]
    fn other_connections_commits_invalidate_vector_cache() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kb.sqlite");
        let a = SqliteStore::open(&p).unwrap();
        let b = SqliteStore::open(&p).unwrap();
        a.apply_document(&crate::conformance::sample_change("a.md", &["x"]))
            .unwrap();
        let q = crate::conformance::fake_vector("x");
        assert_eq!(b.vector_search(&q, 10, &Filter::none()).unwrap().len(), 1);
        a.apply_document(&crate::conformance::sample_change("b.md", &["y"]))
            .unwrap();
        assert_eq!(b.vector_search(&q, 10, &Filter::none()).unwrap().len(), 2);
    }

    /// Bulk writes lengthen the WAL between checkpoints; the end of the run restores reads'.
    #[test]
    fn bulk_writes_switch_the_checkpoint_interval() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("kb.sqlite")).unwrap();
        let pages = |s: &SqliteStore| -> i64 {
            s.conn()
                .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(pages(&store), WAL_CHECKPOINT_PAGES.0);
        store.set_bulk_writes(true);
        assert_eq!(pages(&store), WAL_CHECKPOINT_PAGES.1);
        store.set_bulk_writes(false);
        assert_eq!(pages(&store), WAL_CHECKPOINT_PAGES.0);
    }

    /// Remembered chunk records follow every write: this store's own and another
    /// connection's (a rewritten chunk keeps its id, so only the version tells).
    #[test]
    fn remembered_chunks_follow_writes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kb.sqlite");
        let a = SqliteStore::open(&p).unwrap();
        let b = SqliteStore::open(&p).unwrap();
        let change = crate::conformance::sample_change;
        a.apply_document(&change("a.md", &["one", "two"])).unwrap();
        let ids = a.chunk_ids().unwrap();
        let read = |s: &SqliteStore| -> Vec<String> {
            s.get_chunks(&ids)
                .unwrap()
                .into_iter()
                .map(|c| c.content)
                .collect()
        };
        assert_eq!(
            (read(&a), read(&b)),
            (
                vec!["one".into(), "two".into()],
                vec!["one".into(), "two".into()]
            )
        );
        b.apply_document(&change("a.md", &["one", "deux"])).unwrap();
        assert_eq!(read(&a), ["one", "deux"], "another connection's write");
        a.apply_document(&change("a.md", &["uno", "deux"])).unwrap();
        assert_eq!(read(&a), ["uno", "deux"], "this store's own write");
        assert_eq!(read(&b), ["uno", "deux"]);
        b.remove_documents(&["a.md".to_string()]).unwrap();
        assert!(read(&a).is_empty());
    }

    /// Forgetting what was remembered changes no answer: the next reads fill the memos again
    /// from the file, and a write after it is seen.
    #[test]
    fn forgetting_the_memos_changes_no_answer() {
        let s = SqliteStore::open_in_memory().unwrap();
        let change = crate::conformance::sample_change;
        s.apply_document(&change("a.md", &["alpha beta", "beta gamma"]))
            .unwrap();
        s.apply_document(&change("b.md", &["gamma delta"])).unwrap();
        let f = Filter::default();
        let ask = |q: &str| -> Vec<(ChunkId, u64)> {
            s.bm25_search(q, 10, &f)
                .unwrap()
                .into_iter()
                .map(|h| (h.id, h.score.to_bits()))
                .collect()
        };
        let ids = s.chunk_ids().unwrap();
        let before = (ask("beta gamma"), s.get_chunks(&ids).unwrap());
        assert_eq!(before.0.len(), 3);
        s.forget_remembered();
        assert_eq!((ask("beta gamma"), s.get_chunks(&ids).unwrap()), before);
        s.forget_remembered();
        s.apply_document(&change("b.md", &["epsilon"])).unwrap();
        assert_eq!(
            ask("gamma").len(),
            1,
            "the rewritten document no longer holds gamma"
        );
    }

    /// The vector index in memory follows this store's own writes by patching itself: every
    /// search and score equals a freshly opened store's.
    #[test]
    fn the_vector_index_follows_own_writes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kb.sqlite");
        let a = SqliteStore::open(&p).unwrap();
        let change = crate::conformance::sample_change;
        let q = crate::conformance::fake_vector("a question");
        let same_as_fresh = |when: &str| {
            let fresh = SqliteStore::open(&p).unwrap();
            let want = fresh.vector_search(&q, 100, &Filter::none()).unwrap();
            assert_eq!(
                a.vector_search(&q, 100, &Filter::none()).unwrap(),
                want,
                "{when}"
            );
            let ids: Vec<ChunkId> = (0..40).collect();
            assert_eq!(
                a.vector_scores(&q, &ids).unwrap(),
                fresh.vector_scores(&q, &ids).unwrap(),
                "{when}"
            );
        };
        a.apply_document(&change("a.md", &["one", "two", "three"]))
            .unwrap();
        a.apply_document(&change("b.md", &["four"])).unwrap();
        same_as_fresh("first read");
        a.apply_document(&change("a.md", &["one", "deux"])).unwrap();
        same_as_fresh("a document rewritten and shortened");
        a.apply_documents(&[
            change("c.md", &["five", "six"]),
            change("b.md", &["quatre"]),
        ])
        .unwrap();
        same_as_fresh("a batch");
        a.remove_documents(&["a.md".to_string()]).unwrap();
        same_as_fresh("a document removed");
        let patched = a.vectors.lock().unwrap().is_some();
        assert!(patched, "the index was patched, not dropped");
    }

    /// Remembered document frequencies follow every write: this store's own and another
    /// connection's.
    #[test]
    fn document_frequencies_follow_writes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kb.sqlite");
        let a = SqliteStore::open(&p).unwrap();
        let b = SqliteStore::open(&p).unwrap();
        let term = terms_with("zebra", &a.term_config().unwrap()).remove(0);
        let df = |s: &SqliteStore| s.doc_freqs(std::slice::from_ref(&term)).unwrap();
        let bm25 = |s: &SqliteStore| s.bm25_search("zebra", 10, &Filter::none()).unwrap().len();
        a.apply_document(&crate::conformance::sample_change("a.md", &["zebra one"]))
            .unwrap();
        assert_eq!((df(&a), df(&b)), ((1, vec![1]), (1, vec![1])));
        assert_eq!((bm25(&a), bm25(&b)), (1, 1));
        a.apply_document(&crate::conformance::sample_change("b.md", &["zebra two"]))
            .unwrap();
        assert_eq!((df(&a), df(&b)), ((2, vec![2]), (2, vec![2])));
        assert_eq!((bm25(&a), bm25(&b)), (2, 2));
        b.remove_documents(&["a.md".to_string()]).unwrap();
        assert_eq!((df(&a), df(&b)), ((1, vec![1]), (1, vec![1])));
        assert_eq!((bm25(&a), bm25(&b)), (1, 1));
        // Remembered posting lists follow a rewrite too: both stores score as a fresh one.
        let hits = |s: &SqliteStore| s.bm25_search("zebra", 10, &Filter::none()).unwrap();
        let before = hits(&a);
        b.apply_document(&crate::conformance::sample_change(
            "b.md",
            &["zebra zebra zebra two, longer now"],
        ))
        .unwrap();
        let fresh = hits(&SqliteStore::open(&p).unwrap());
        assert_ne!(fresh, before);
        assert_eq!((hits(&a), hits(&b)), (fresh.clone(), fresh));
        // An own write forgets only the terms it touched; every list still scores as a fresh
        // store's (the untouched `two` keeps its list, the collection's size still changes).
        for q in ["zebra", "two", "longer"] {
            b.bm25_search(q, 10, &Filter::none()).unwrap();
        }
        let same_as_fresh = |s: &SqliteStore, want_found: usize| {
            let fresh = SqliteStore::open(&p).unwrap();
            let mut found = 0;
            for q in ["zebra", "two", "longer", "three"] {
                let got = s.bm25_search(q, 10, &Filter::none()).unwrap();
                assert_eq!(
                    got,
                    fresh.bm25_search(q, 10, &Filter::none()).unwrap(),
                    "{q}"
                );
                found += usize::from(!got.is_empty());
            }
            assert_eq!(found, want_found);
        };
        b.apply_document(&crate::conformance::sample_change("c.md", &["zebra three"]))
            .unwrap();
        same_as_fresh(&b, 4);
        b.remove_documents(&["b.md".to_string()]).unwrap();
        same_as_fresh(&b, 2);
    }

    /// A version-2 file (before document sources) still answers read-only, without sources,
    /// and becomes version 3 when opened for writing.
    #[test]
    fn version_2_files_read_without_sources_and_upgrade_on_write() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kb.sqlite");
        {
            let s = SqliteStore::open(&p).unwrap();
            let mut c = crate::conformance::sample_change("a.md", &["hello world"]);
            c.source = Some("hello world\n".into());
            s.apply_document(&c).unwrap();
        }
        Connection::open(&p)
            .unwrap()
            .execute_batch(
                "DROP TABLE doc_sources; UPDATE meta SET value = '2' WHERE key = 'schema_version';",
            )
            .unwrap();
        let ro = SqliteStore::open_read_only(&p).unwrap();
        assert!(!ro.documents().unwrap()[0].has_source);
        assert_eq!(ro.document_source("a.md").unwrap(), None);
        drop(ro);
        let rw = SqliteStore::open(&p).unwrap();
        assert_eq!(rw.document_source("a.md").unwrap(), None);
        let mut c = crate::conformance::sample_change("a.md", &["hello world"]);
        c.source = Some("hello world\n".into());
        rw.apply_document(&c).unwrap();
        assert_eq!(
            rw.document_source("a.md").unwrap().as_deref(),
            Some("hello world\n")
        );
        drop(rw);
        let v: String = Connection::open(&p)
            .unwrap()
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION.to_string());
    }

    #[test]
    fn old_vector_cache_layout_is_read_then_rebuilt_with_its_vectors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kb.sqlite");
        drop(SqliteStore::open(&p).unwrap());
        let layout = |p: &Path| -> String {
            Connection::open(p)
                .unwrap()
                .query_row(
                    "SELECT sql FROM sqlite_master WHERE name = 'embed_cache'",
                    [],
                    |r| r.get(0),
                )
                .unwrap()
        };
        assert!(!layout(&p).contains("WITHOUT ROWID"));
        // Give the file the layout of files written before the change, keeping its rows.
        let to_old_layout = |p: &Path| {
            Connection::open(p)
                .unwrap()
                .execute_batch(
                    "CREATE TABLE old (model_id TEXT NOT NULL, content_hash TEXT NOT NULL, \
                     vector BLOB NOT NULL, PRIMARY KEY (model_id, content_hash)) WITHOUT ROWID; \
                     INSERT INTO old SELECT model_id, content_hash, vector FROM embed_cache; \
                     DROP TABLE embed_cache; ALTER TABLE old RENAME TO embed_cache;",
                )
                .unwrap()
        };
        to_old_layout(&p);
        assert!(layout(&p).contains("WITHOUT ROWID"));
        let items = vec![
            ("text:a".to_string(), vec![1.0, 0.0]),
            ("text:b".to_string(), vec![0.0, 2.0]),
        ];
        SqliteStore::open(&p)
            .unwrap()
            .cache_vectors("m", &items)
            .unwrap();
        // The writable open above rebuilt the table before writing to it.
        assert!(!layout(&p).contains("WITHOUT ROWID"));
        let keys: Vec<String> = items.iter().map(|(k, _)| k.clone()).collect();
        let ro = SqliteStore::open_read_only(&p).unwrap();
        assert_eq!(ro.cached_vectors("m", &keys).unwrap(), items);
        drop(ro);
        // An old file read read-only is read as it is, never rewritten.
        to_old_layout(&p);
        let ro = SqliteStore::open_read_only(&p).unwrap();
        assert_eq!(ro.cached_vectors("m", &keys).unwrap(), items);
        drop(ro);
        assert!(layout(&p).contains("WITHOUT ROWID"));
        // Replacing a vector keeps one row per key in the new layout.
        let rw = SqliteStore::open(&p).unwrap();
        rw.cache_vectors("m", &[("text:a".to_string(), vec![3.0, 0.0])])
            .unwrap();
        assert_eq!(
            rw.cached_vectors("m", &keys).unwrap()[0],
            ("text:a".to_string(), vec![3.0, 0.0])
        );
        let rows: i64 = rw
            .conn()
            .query_row("SELECT count(*) FROM embed_cache", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 2);
    }

    #[test]
    fn read_only_open_reads_never_writes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("we ird?#%.sqlite");
        {
            let s = SqliteStore::open(&p).unwrap();
            s.apply_document(&crate::conformance::sample_change("a.md", &["hello world"]))
                .unwrap();
        }
        let ro = SqliteStore::open_read_only(&p).unwrap();
        assert_eq!(ro.documents().unwrap().len(), 1);
        assert_eq!(
            ro.bm25_search("hello", 5, &Filter::none()).unwrap().len(),
            1
        );
        assert!(
            ro.begin_run(&serde_json::json!({"probe": true})).is_err(),
            "writes fail"
        );
        drop(ro);
        assert!(SqliteStore::open(&p).unwrap().runs(5).unwrap().is_empty());
        assert!(SqliteStore::open(&p)
            .unwrap()
            .recent_queries(5)
            .unwrap()
            .is_empty());
        // Missing files are not created; foreign files are refused.
        let missing = dir.path().join("missing.sqlite");
        assert!(SqliteStore::open_read_only(&missing).is_err());
        assert!(!missing.exists());
        let foreign = dir.path().join("foreign.sqlite");
        Connection::open(&foreign)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let e = SqliteStore::open_read_only(&foreign).unwrap_err();
        assert!(e.to_string().contains("foreign.sqlite"), "{e}");
    }
}
