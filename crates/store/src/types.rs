//! Plain data exchanged with a [`crate::Store`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Identifier of a chunk within one store (stable while its (document, chunk_index) exists).
pub type ChunkId = i64;
/// Identifier of a document node within one store.
pub type NodeId = i64;

/// The collection of documents registered through the API (MCP, HTTP) when they name none.
pub const API_COLLECTION: &str = "api";
/// The collection of documents stored before collections existed, when no earlier ingest run
/// names their directory (see [`legacy_collection`]).
pub const DEFAULT_COLLECTION: &str = "default";

/// The collection a directory ingests into unless told otherwise: the directory's own name
/// (the last component of `root` after resolving `.`/`..` lexically; [`DEFAULT_COLLECTION`]
/// when there is none, e.g. `/`).
pub fn collection_for_root(root: &str) -> String {
    let path = std::path::Path::new(root);
    let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    resolved
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_COLLECTION.to_string())
}

/// Migration rule for documents stored before collections existed: they join the collection
/// named after the directory of the most recent ingest run that recorded one (the `root` of
/// its run record), so the next `bib ingest` of that same directory finds them in its own
/// collection; without any such run they join [`DEFAULT_COLLECTION`].
pub fn legacy_collection(last_run_record: Option<&Value>) -> String {
    last_run_record
        .and_then(|r| r.get("root"))
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .map(collection_for_root)
        .unwrap_or_else(|| DEFAULT_COLLECTION.to_string())
}

/// The line starts of one text, so that the lines of many spans of it (every chunk of a
/// document) are found by binary search instead of recounting the newlines before each span,
/// which made a large document's chunks quadratic in its size.
#[derive(Debug, Clone)]
pub struct LineIndex {
    /// Byte offset of every `\n`, ascending.
    newlines: Vec<usize>,
    len: usize,
}

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let newlines = text
            .bytes()
            .enumerate()
            .filter_map(|(i, b)| (b == b'\n').then_some(i))
            .collect();
        Self {
            newlines,
            len: text.len(),
        }
    }

    /// 1-based line of byte `pos`: one more than the newlines before it.
    fn line_at(&self, pos: usize) -> u32 {
        1 + self.newlines.partition_point(|&n| n < pos) as u32
    }

    /// 1-based line numbers `(first, last)` of the byte span `start..end`. A span that ends
    /// with a newline ends on that newline's line; offsets past the end are clamped, so this
    /// never panics.
    pub fn span(&self, start: usize, end: usize) -> (u32, u32) {
        let start = start.min(self.len);
        let end = end.clamp(start, self.len);
        let first = self.line_at(start);
        // The last byte of the span decides its last line (a trailing newline stays on its line).
        let last = if end > start {
            self.line_at(end - 1)
        } else {
            first
        };
        (first, last)
    }
}

/// The `qualified_name` of a document: `doc:<normalized path>`.
pub fn qualified_name(path: &str) -> String {
    format!("doc:{path}")
}

/// A stored document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocRecord {
    pub node_id: NodeId,
    /// `doc:<path>`.
    pub qualified_name: String,
    /// Normalized path relative to the wiki root (`/` separators, NFC, no leading `public/`).
    pub path: String,
    /// The collection the document belongs to (the ingested directory's name, `api`, …).
    #[serde(default)]
    pub collection: String,
    pub title: String,
    /// Front-matter as JSON (an object, or `null` when the file has none).
    pub metadata: Value,
    /// Hash of the document's source text.
    pub content_hash: String,
    /// Number of chunks the document has (its chunks are `0..chunk_count`).
    pub chunk_count: u32,
    /// Whether the store holds the document's source text for its current `content_hash`
    /// ([`crate::Store::document_source`]).
    #[serde(default)]
    pub has_source: bool,
}

/// One collection as listed by [`crate::Store::collections`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionInfo {
    pub name: String,
    pub documents: u64,
    pub chunks: u64,
}

/// What ingest needs to know about a stored chunk to decide whether to skip it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkState {
    pub path: String,
    pub node_id: NodeId,
    pub chunk_index: u32,
    pub content_hash: String,
    pub model_id: String,
    /// 1-based lines of the source file the chunk cites (0 when unknown).
    #[serde(default)]
    pub line_start: u32,
    #[serde(default)]
    pub line_end: u32,
}

/// One chunk to create or overwrite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkWrite {
    pub chunk_index: u32,
    /// `[Doc: title › heading path]`.
    pub prefix: String,
    pub heading_path: Vec<String>,
    /// The chunk's Markdown (without the prefix).
    pub content: String,
    /// Hash of `prefix + "\n" + content`.
    pub content_hash: String,
    /// Spec token estimate of the indexed text.
    pub tokens_estimate: u32,
    /// Exact count with the embedding model's tokenizer.
    pub tokens_model: u32,
    /// Byte span in the source file.
    pub span_start: u64,
    pub span_end: u64,
    /// 1-based first and last line of the source file this chunk cites (0 when unknown).
    #[serde(default)]
    pub line_start: u32,
    #[serde(default)]
    pub line_end: u32,
    pub model_id: String,
    /// Embedding of `prefix + "\n" + content`.
    pub embedding: Vec<f32>,
}

/// How every front end cites lines of a file: `path:12-30`, `path:12` for one line, `path`
/// alone when the lines are unknown (0).
pub fn cite(path: &str, line_start: u32, line_end: u32) -> String {
    match (line_start, line_end) {
        (0, _) => path.to_string(),
        (a, b) if b <= a => format!("{path}:{a}"),
        (a, b) => format!("{path}:{a}-{b}"),
    }
}

/// The indexed and embedded text of a chunk: the chunker's rule, one for every crate.
pub use bib_text::chunk::indexed_text;

impl ChunkWrite {
    /// The indexed and embedded text: [`indexed_text`].
    pub fn text(&self) -> String {
        indexed_text(&self.prefix, &self.content)
    }
}

/// One document's new state, applied atomically by [`crate::Store::apply_document`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentChange {
    pub path: String,
    /// The collection the document belongs to after the change (empty: [`DEFAULT_COLLECTION`]).
    #[serde(default)]
    pub collection: String,
    pub title: String,
    pub metadata: Value,
    pub content_hash: String,
    /// The document's chunks after the change are `0..chunk_count`; higher ones are pruned.
    pub chunk_count: u32,
    /// New or changed chunks (each `chunk_index < chunk_count`).
    pub upserts: Vec<ChunkWrite>,
    /// The document's source text, front-matter included: the text its chunks' line numbers
    /// count in, whose SHA-256 is `content_hash` for ingested files. `Some` stores it under
    /// `content_hash`; `None` leaves the stored one, which then only answers
    /// [`crate::Store::document_source`] while `content_hash` stays the same.
    #[serde(default)]
    pub source: Option<String>,
}

impl DocumentChange {
    /// The collection to store: the one given, or [`DEFAULT_COLLECTION`] when it is empty.
    pub fn collection_or_default(&self) -> &str {
        if self.collection.is_empty() {
            DEFAULT_COLLECTION
        } else {
            &self.collection
        }
    }

    /// The checks every store applies before writing a change, so all stores reject the same
    /// changes: a path, chunk indices below `chunk_count` and given once, finite non-empty
    /// embeddings.
    pub fn validate(&self) -> Result<(), crate::StoreError> {
        use crate::StoreError;
        if self.path.is_empty() {
            return Err(StoreError::Invalid("document path is empty".into()));
        }
        let mut seen = std::collections::HashSet::new();
        for c in &self.upserts {
            if c.chunk_index >= self.chunk_count {
                return Err(StoreError::Invalid(format!(
                    "{}: chunk_index {} is not below chunk_count {}",
                    self.path, c.chunk_index, self.chunk_count
                )));
            }
            if !seen.insert(c.chunk_index) {
                return Err(StoreError::Invalid(format!(
                    "{}: chunk_index {} given twice",
                    self.path, c.chunk_index
                )));
            }
            if c.embedding.is_empty() || c.embedding.iter().any(|x| !x.is_finite()) {
                return Err(StoreError::Invalid(format!(
                    "{}: chunk {} has an empty or non-finite embedding",
                    self.path, c.chunk_index
                )));
            }
        }
        Ok(())
    }
}

/// What [`crate::Store::apply_document`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyOutcome {
    pub node_id: NodeId,
    /// Whether the document row was new.
    pub document_created: bool,
    /// Chunks that did not exist at their (document, chunk_index).
    pub created: u32,
    /// Chunks that existed and were overwritten.
    pub updated: u32,
    /// Tail chunks deleted.
    pub pruned: u32,
}

/// A chunk with its document's identity: what a store returns, what the in-memory index holds,
/// and what retrieval ranks, trims and cites — one type from the store to the answer. A
/// record built outside a store (a benchmark corpus) leaves the fields it has no value for
/// at their defaults (`..Default::default()`): no prefix, no lines, no hash.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChunkRecord {
    pub id: ChunkId,
    pub node_id: NodeId,
    pub path: String,
    /// The document's collection.
    #[serde(default)]
    pub collection: String,
    pub title: String,
    pub metadata: Value,
    pub chunk_index: u32,
    pub prefix: String,
    pub heading_path: Vec<String>,
    pub content: String,
    pub content_hash: String,
    pub tokens_estimate: u32,
    pub tokens_model: u32,
    pub span_start: u64,
    pub span_end: u64,
    /// 1-based first and last line of the source file this chunk cites (0 when unknown).
    #[serde(default)]
    pub line_start: u32,
    #[serde(default)]
    pub line_end: u32,
    pub model_id: String,
}

impl ChunkRecord {
    /// The indexed and embedded text: [`indexed_text`]; a record without a prefix is its
    /// content alone (the corpus of a benchmark, a test).
    pub fn text(&self) -> String {
        if self.prefix.is_empty() {
            self.content.clone()
        } else {
            indexed_text(&self.prefix, &self.content)
        }
    }

    /// Where a user opens this chunk: [`cite`].
    pub fn cite(&self) -> String {
        cite(&self.path, self.line_start, self.line_end)
    }
}

/// One entry of a ranked list — a store's BM25 or vector search, retrieval's fused lists: a
/// chunk and its score in that list (BM25 score, cosine, fused score). Lists are best first,
/// so a hit's rank is its position; the chunk's path and document come with
/// [`crate::Store::get_chunks`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    pub id: ChunkId,
    pub score: f64,
}

/// Corpus statistics of the lexical index.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LexicalStats {
    /// Number of indexed chunks.
    pub chunks: u64,
    /// Sum of chunk lengths in term occurrences.
    pub total_len: u64,
    /// Number of distinct terms.
    pub terms: u64,
}

impl LexicalStats {
    /// Average chunk length in term occurrences (1 for an empty corpus).
    pub fn avg_len(&self) -> f64 {
        if self.chunks == 0 || self.total_len == 0 {
            1.0
        } else {
            self.total_len as f64 / self.chunks as f64
        }
    }
}

/// The result of [`crate::Store::audit`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    pub documents: u64,
    pub chunks: u64,
    /// Chunks with a non-empty vector.
    pub vectors: u64,
    /// Chunks whose postings agree with their stored lexical length.
    pub lexical_entries: u64,
    /// Chunks whose document does not exist.
    pub orphan_chunks: u64,
    /// Documents whose stored chunks are not exactly `0..chunk_count`.
    pub incomplete_documents: Vec<String>,
    /// Postings pointing at no chunk.
    pub orphan_postings: u64,
    /// Whether the lexical corpus statistics agree with the chunks.
    pub stats_consistent: bool,
    /// Everything above agrees ([`AuditReport::judged`]).
    pub coherent: bool,
}

impl AuditReport {
    /// The report with its verdict: coherent when no chunk or posting is an orphan, every
    /// document holds exactly its chunks, every chunk has its vector and its postings, and the
    /// corpus statistics agree. Every store judges its counts by this one rule.
    pub fn judged(mut self) -> Self {
        self.coherent = self.orphan_chunks == 0
            && self.orphan_postings == 0
            && self.incomplete_documents.is_empty()
            && self.vectors == self.chunks
            && self.lexical_entries == self.chunks
            && self.stats_consistent;
        self
    }
}

/// Where an ingest run is: stored in the `runs` table and shown by `bib runs` / `bib status`
/// under these lowercase names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Begun and not finished (yet).
    #[default]
    Running,
    /// Finished with every guard holding.
    Completed,
    /// Finished with a failure (the record says why).
    Failed,
    /// Still `running` when a later run began: the process died or was stopped.
    Interrupted,
}

impl RunStatus {
    /// The stored and shown name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = crate::StoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "running" => Ok(RunStatus::Running),
            "completed" => Ok(RunStatus::Completed),
            "failed" => Ok(RunStatus::Failed),
            "interrupted" => Ok(RunStatus::Interrupted),
            other => Err(crate::StoreError::Invalid(format!(
                "unknown run status `{other}`"
            ))),
        }
    }
}

/// One ingest run as listed by [`crate::Store::runs`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    pub id: i64,
    /// Unix milliseconds.
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub status: RunStatus,
    /// The full run record written by ingest.
    pub record: Value,
}

/// How much of the query log a store keeps. Every [`crate::Store::log_query`] applies it in
/// the insert's own transaction: the query text is cut to `max_query_bytes`, the oldest
/// entries beyond `max_rows` are deleted, and — on every [`QueryLogRetention::BYTES_EVERY`]th
/// insert, or when the entry itself is large — the oldest entries beyond `max_bytes` (query
/// text + record, newest first; the newest entry always stays). The byte bound therefore holds
/// within `BYTES_EVERY` small entries, and the log never grows without bound, whatever callers
/// send; the row bound costs one index range per insert, not a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLogRetention {
    /// Entries kept (at least 1).
    pub max_rows: u64,
    /// Bytes of query text plus record kept.
    pub max_bytes: u64,
    /// Longest query text stored; a longer one is cut at a character boundary and the
    /// entry's `extra.query_truncated_from` holds its original length in bytes.
    pub max_query_bytes: usize,
}

impl Default for QueryLogRetention {
    fn default() -> Self {
        Self {
            max_rows: 10_000,
            max_bytes: 64 * 1024 * 1024,
            max_query_bytes: 4096,
        }
    }
}

impl QueryLogRetention {
    /// The byte bound (a scan of the log) is enforced on every this-many-th insert.
    pub const BYTES_EVERY: i64 = 64;

    /// Whether the insert `id` of an entry of `entry_bytes` enforces the byte bound.
    pub fn check_bytes(&self, id: i64, entry_bytes: usize) -> bool {
        id % Self::BYTES_EVERY == 0
            || entry_bytes as u64 >= self.max_bytes / (2 * Self::BYTES_EVERY as u64)
    }

    /// The stored query text and the JSON record of `entry` under this retention.
    pub fn prepare(&self, entry: &QueryLogEntry) -> Result<(String, String), crate::StoreError> {
        let mut e = entry.clone();
        if e.query.len() > self.max_query_bytes {
            let mut cut = self.max_query_bytes;
            while !e.query.is_char_boundary(cut) {
                cut -= 1;
            }
            let original = e.query.len();
            e.query.truncate(cut);
            match &mut e.extra {
                Value::Object(m) => {
                    m.insert("query_truncated_from".into(), Value::from(original));
                }
                other => {
                    let old = std::mem::take(other);
                    let mut m = serde_json::Map::new();
                    if !old.is_null() {
                        m.insert("extra".into(), old);
                    }
                    m.insert("query_truncated_from".into(), Value::from(original));
                    *other = Value::Object(m);
                }
            }
        }
        let rec = serde_json::to_string(&e)
            .map_err(|err| crate::StoreError::Invalid(format!("query log entry: {err}")))?;
        Ok((e.query, rec))
    }
}

/// One logged query (what `bib ask` records and the harness replays).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryLogEntry {
    /// Assigned by the store; ignored on insert.
    #[serde(default)]
    pub id: i64,
    /// Unix milliseconds.
    pub at_ms: i64,
    pub query: String,
    /// Retrieval mode (`hybrid`, `bm25`, `vector`).
    pub mode: String,
    pub chunk_ids: Vec<ChunkId>,
    pub scores: Vec<f64>,
    pub tokens_before: u64,
    pub tokens_in_context: u64,
    /// Anything else the caller wants to keep (options, timings …).
    #[serde(default)]
    pub extra: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn line_spans_count_from_one_and_keep_trailing_newline_on_its_line() {
        let t = "a\nbb\nccc\n";
        let line_span = |t: &str, s, e| LineIndex::new(t).span(s, e);
        assert_eq!(line_span(t, 0, 1), (1, 1));
        assert_eq!(line_span(t, 0, 2), (1, 1));
        assert_eq!(line_span(t, 2, 9), (2, 3));
        assert_eq!(line_span(t, 5, 10), (3, 3));
        assert_eq!(line_span(t, 5, 5), (3, 3));
        assert_eq!(line_span(t, 100, 200), (4, 4));
        assert_eq!(line_span("", 0, 0), (1, 1));
    }

    proptest::proptest! {
        /// The index answers what counting the newlines before each offset answers.
        #[test]
        fn line_index_agrees_with_counting(
            text in "[a\n\u{e9}]{0,60}",
            start in 0usize..70,
            end in 0usize..70,
        ) {
            let count = |pos: usize| 1 + text.as_bytes()[..pos].iter().filter(|&&b| b == b'\n').count() as u32;
            let s = start.min(text.len());
            let e = end.clamp(s, text.len());
            let want = (count(s), if e > s { count(e - 1) } else { count(s) });
            proptest::prop_assert_eq!(LineIndex::new(&text).span(start, end), want);
        }
    }

    #[test]
    fn collections_default_to_the_directory_name() {
        assert_eq!(collection_for_root("/no/such/dir/kb-en"), "kb-en");
        assert_eq!(collection_for_root("/"), DEFAULT_COLLECTION);
        assert_eq!(
            legacy_collection(Some(&json!({"root": "/x/notes"}))),
            "notes"
        );
        assert_eq!(legacy_collection(Some(&json!({}))), DEFAULT_COLLECTION);
        assert_eq!(legacy_collection(None), DEFAULT_COLLECTION);
    }
}
