//! # bib-store — the knowledge base on disk
//!
//! One [`Store`] holds a knowledge base: documents (one per Markdown file), their chunks with
//! embeddings, a BM25 lexical index over the chunks, the ingest-run audit record, the query log
//! and a content-keyed embedding cache. [`SqliteStore`] is the embedded default (one SQLite file
//! per knowledge base, WAL mode); a PostgreSQL implementation can follow behind the same trait
//! and must pass the same [`conformance`] suite.
//!
//! ## Guarantees every implementation keeps
//! - **A document changes atomically.** [`Store::apply_document`] writes a document's row, its
//!   new and changed chunks (vector + postings) and removes its tail chunks
//!   (`chunk_index >= chunk_count`) in one transaction, so a query never sees half a document.
//! - **Lexical scores are real BM25** (k1 = 1.2, b = 0.75) over the shared term function
//!   (`bib_text::terms::term_counts_with`, with the [`TermConfig`] the store records), computed
//!   with `bib_text::bm25::{idf, tf_factor}`: the score of a chunk equals
//!   `bib_text::bm25::Bm25Index` built over the same chunks with the same term function.
//! - **Queries are analysed with the store's own term function** ([`Store::term_config`]);
//!   changing it ([`Store::set_term_config`]) rewrites every posting in one transaction.
//! - **Filters apply before the top-k cut** in both searches.

pub mod conformance;
mod error;
pub mod filter;
pub mod lexical;
mod memo;
pub use bib_text::vectors::quantized;
pub mod read;
pub mod rows;
mod sqlite;
mod types;
mod vector_file;
mod vector_index;

pub use bib_text::terms::TermConfig;
pub use error::{error_chain, BoxError, StoreError};
pub use filter::{Filter, InvalidFilter};
pub use sqlite::{SqliteStore, DEFAULT_STORE_PATH};
pub use types::*;
pub use vector_file::VectorFile;

/// The content-keyed embedding cache of a store: vectors by `(model id, content hash)`, for
/// chunks (a stored chunk's vector answers for its hash) and for the sentences trimming and the
/// ranking signals look up. What embedding steps and retrieval's sentence cache need of a
/// store, and all they need.
pub trait VectorsByHash: Send + Sync {
    /// Vectors already known for `(model_id, content_hash)`: from stored chunks or the cache.
    /// Only a [`could_be_chunk_hash`] key is looked up among the chunks.
    fn cached_vectors(
        &self,
        model_id: &str,
        hashes: &[String],
    ) -> Result<Vec<(String, Vec<f32>)>, StoreError>;
    /// Remember vectors by `(model_id, content_hash)`.
    fn cache_vectors(&self, model_id: &str, items: &[(String, Vec<f32>)])
        -> Result<(), StoreError>;
}

/// The history a store keeps beside the knowledge base: ingest runs and the query log. What
/// `bib runs`, the A/B harness's replay of logged questions and a migration's copy need of a
/// store, and all they need.
pub trait RunLog: Send + Sync {
    /// Record the start of an ingest run; returns its id. Earlier runs still `running` are
    /// marked `interrupted`.
    fn begin_run(&self, record: &serde_json::Value) -> Result<i64, StoreError>;
    /// Store the final record and status of a run.
    fn finish_run(
        &self,
        id: i64,
        status: RunStatus,
        record: &serde_json::Value,
    ) -> Result<(), StoreError>;
    /// The last `limit` runs, newest first.
    fn runs(&self, limit: usize) -> Result<Vec<RunRow>, StoreError>;
    /// Append one query to the query log and apply the store's [`QueryLogRetention`] in the
    /// same transaction (oldest entries dropped); returns its id.
    fn log_query(&self, entry: &QueryLogEntry) -> Result<i64, StoreError>;
    /// Change how much of the query log this store keeps (applied from the next insert).
    fn set_query_log_retention(&self, retention: QueryLogRetention);
    /// The query-log retention in force (default [`QueryLogRetention::default`]).
    fn query_log_retention(&self) -> QueryLogRetention;
    /// The last `limit` logged queries, newest first.
    fn recent_queries(&self, limit: usize) -> Result<Vec<QueryLogEntry>, StoreError>;
}

/// The storage seam of bibliotecario. Object safe; every method takes `&self` so one store can
/// be shared between threads (implementations serialise internally). Two concerns are traits
/// of their own, which every store implements: the embedding cache ([`VectorsByHash`]) and
/// the run and query history ([`RunLog`]), so a caller that needs only one of them asks for
/// only that. Documents and the search indexes stay here: every caller of one needs the
/// other (retrieval searches and reads chunks; ingest writes documents and reads the term
/// function), so splitting them would only move declarations.
pub trait Store: VectorsByHash + RunLog + Send + Sync {
    /// Short backend name (`sqlite`, `postgres`).
    fn backend(&self) -> &'static str;
    /// Where the store lives (file path or connection URL without secrets).
    fn location(&self) -> String;

    // ── documents and chunks ────────────────────────────────────────────────────────────
    /// All documents, ordered by path.
    fn documents(&self) -> Result<Vec<DocRecord>, StoreError>;
    /// The document at `path`, `None` when there is none. Writing one document (an MCP or
    /// HTTP registration) reads only its own row, not [`Store::documents`].
    fn document(&self, path: &str) -> Result<Option<DocRecord>, StoreError>;
    /// The state of every stored chunk (no text, no vector), ordered by (path, chunk_index).
    /// Ingest diffs against it to decide what to skip.
    fn chunk_states(&self) -> Result<Vec<ChunkState>, StoreError>;
    /// The state of the stored chunks of the document at `path`, ordered by chunk_index
    /// (empty when there is no such document): what [`Store::chunk_states`] holds for it.
    fn chunk_states_of(&self, path: &str) -> Result<Vec<ChunkState>, StoreError>;
    /// The embedding model the stored chunks were embedded with (the first non-empty model id
    /// found), `None` for a store without embedded chunks. An ask needs only this before it
    /// can load the model, so backends answer it without reading every chunk row.
    fn embedding_model(&self) -> Result<Option<String>, StoreError> {
        Ok(self
            .chunk_states()?
            .into_iter()
            .map(|s| s.model_id)
            .find(|m| !m.is_empty()))
    }
    /// Atomically create or replace one document: upsert its row (keyed by path), upsert the
    /// given chunks by (document, chunk_index), and delete its chunks with
    /// `chunk_index >= change.chunk_count`. Chunks not in `upserts` but below `chunk_count`
    /// are left as they are (they were unchanged).
    fn apply_document(&self, change: &DocumentChange) -> Result<ApplyOutcome, StoreError>;
    /// Apply several document changes, each with the guarantees of
    /// [`Store::apply_document`]; outcomes in the order given. A backend may commit them
    /// together, which writes each touched index page once per batch instead of once per
    /// document — SQLite does, in one transaction (all or none), which makes a bulk load
    /// several times faster. The default applies them one by one.
    fn apply_documents(&self, changes: &[DocumentChange]) -> Result<Vec<ApplyOutcome>, StoreError> {
        changes.iter().map(|c| self.apply_document(c)).collect()
    }
    /// Housekeeping after a batch of writes (the end of an ingest run that changed
    /// something), so that reads stay as fast as the backend can make them. PostgreSQL
    /// builds the vector indexes a bulk load left for the end, and vacuums the postings, which
    /// marks their pages all-visible so BM25 reads them from the covering index alone. It never changes what is stored; a failure loses nothing and
    /// may be reported as a warning. Backends with nothing to do keep this default.
    fn optimize(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Whether a run of many writes (an ingest) is under way: a backend may then trade read
    /// speed for write speed (SQLite checkpoints its write-ahead log less often; PostgreSQL
    /// commits without waiting for the WAL flush and leaves new vector indexes to
    /// [`Store::optimize`]). What is read and written means the same either way. Backends with nothing to tune keep this default.
    fn set_bulk_writes(&self, _on: bool) {}
    /// Atomically delete documents (by path) with all their chunks. Returns chunks deleted.
    fn remove_documents(&self, paths: &[String]) -> Result<u64, StoreError>;
    /// Atomically delete every document of `collection` with its chunks. Returns
    /// `(documents, chunks)` deleted.
    fn remove_collection(&self, collection: &str) -> Result<(u64, u64), StoreError> {
        let paths: Vec<String> = self
            .documents()?
            .into_iter()
            .filter(|d| d.collection == collection)
            .map(|d| d.path)
            .collect();
        let chunks = self.remove_documents(&paths)?;
        Ok((paths.len() as u64, chunks))
    }
    /// Every collection with its number of documents and chunks, ordered by name.
    fn collections(&self) -> Result<Vec<CollectionInfo>, StoreError> {
        let mut by: std::collections::BTreeMap<String, CollectionInfo> = Default::default();
        for d in self.documents()? {
            let e = by
                .entry(d.collection.clone())
                .or_insert_with(|| CollectionInfo {
                    name: d.collection.clone(),
                    documents: 0,
                    chunks: 0,
                });
            e.documents += 1;
            e.chunks += u64::from(d.chunk_count);
        }
        Ok(by.into_values().collect())
    }
    /// The source text of the document at `path` as it was written to the store (front-matter
    /// included; the text `line_start`/`line_end` of its chunks count in). `None` when there is
    /// no such document or no text is stored for its current content (documents stored before
    /// schema version 3 until their next ingest, or written without a source).
    fn document_source(&self, path: &str) -> Result<Option<String>, StoreError>;
    /// Fetch chunks by id, in the order asked; unknown ids are skipped.
    fn get_chunks(&self, ids: &[ChunkId]) -> Result<Vec<ChunkRecord>, StoreError>;
    /// Ids of every stored chunk, ascending (for exports, migrations and corpus-wide scans).
    fn chunk_ids(&self) -> Result<Vec<ChunkId>, StoreError>;
    /// All chunks of one document (by path), ordered by chunk_index.
    fn document_chunks(&self, path: &str) -> Result<Vec<ChunkRecord>, StoreError>;
    /// Stored vectors of the given chunks (same order as asked; unknown ids skipped).
    fn get_vectors(&self, ids: &[ChunkId]) -> Result<Vec<(ChunkId, Vec<f32>)>, StoreError>;
    /// The cosine of each given chunk's stored vector to `query`, in the order asked (unknown
    /// ids, and vectors of another length, skipped): convex fusion scores the BM25-only
    /// candidates with it. The embedded store answers from the vectors its index holds.
    fn vector_scores(
        &self,
        query: &[f32],
        ids: &[ChunkId],
    ) -> Result<Vec<(ChunkId, f64)>, StoreError> {
        Ok(vector_index::exact_scores(query, self.get_vectors(ids)?))
    }

    // ── search ─────────────────────────────────────────────────────────────────────────
    /// The `limit` best chunks by BM25 for `query` among those passing `filter`, best first
    /// (ties by chunk id). Chunks sharing no term with the query are not returned.
    fn bm25_search(
        &self,
        query: &str,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, StoreError>;
    /// The `limit` chunks with the highest cosine to `query` among those passing `filter`,
    /// best first (exact search; ties by chunk id). Chunks whose vector has another length
    /// are ignored.
    fn vector_search(
        &self,
        query: &[f32],
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, StoreError>;
    /// Corpus statistics of the lexical index.
    fn lexical_stats(&self) -> Result<LexicalStats, StoreError>;
    /// The number of chunks and, per term (in order), how many chunks hold it.
    fn doc_freqs(&self, terms: &[String]) -> Result<(u64, Vec<u64>), StoreError>;
    /// The term function the postings were built with (queries are analysed with it). A store
    /// that records none predates issue 15 and was built with [`TermConfig::V1`]; one that
    /// records a function this build cannot reproduce is an error
    /// ([`StoreError::TermFunction`]), never a silent mismatch.
    fn term_config(&self) -> Result<TermConfig, StoreError>;
    /// Rebuild every chunk's postings and length with `terms` and record it, in one
    /// transaction (no re-embedding); returns the chunks reindexed (0 when the store already
    /// uses `terms`).
    fn set_term_config(&self, terms: &TermConfig) -> Result<u64, StoreError>;

    // ── audit ──────────────────────────────────────────────────────────────────────────
    /// Check the store's internal coherence.
    fn audit(&self) -> Result<AuditReport, StoreError>;
}

/// Whether `key` could be a stored chunk's `content_hash` (bare hex SHA-256 of its text). The
/// embedding cache's own keys carry a kind prefix (`text:…`, see `bib_embed::store_key`), so a
/// lookup of sentence vectors — hundreds per ask — never probes the chunks table.
pub fn could_be_chunk_hash(key: &str) -> bool {
    !key.contains(':')
}
