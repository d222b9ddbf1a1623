//! # bib-ingest — the three-phase ingest of a Markdown wiki into a [`bib_store::Store`]
//!
//! - **Phase A** ([`scan`], parsing): find every `.md` file under the root (hidden entries
//!   skipped, symlinks followed only inside the root, loops reported), read it (size cap,
//!   binary and UTF-8 checks), split its front-matter and register it under a normalized path.
//!   Guard: when fewer than 80% of the files register, the run stops before touching the index.
//! - **Phase B**: chunk every document; `chunk_index` is the chunk's position in its document.
//!   A chunk whose content hash (and model) is unchanged is skipped; vectors already known for a
//!   hash are reused; the rest are embedded in padded-token [`batch`]es. Each document is then
//!   written in **one transaction** (its row, new/changed chunks, its own tail beyond the new
//!   chunk count), so a query never sees half a document and a crash leaves every document
//!   either old or new. Documents whose file vanished are removed in a final transaction, only
//!   when every write succeeded and the success guard (created + updated + skipped ≥ 70% of the
//!   chunks) holds.
//! - **Phase C**: audit the store's coherence and the run's own expectations, and record the
//!   run ([`RunReport`]) in the store's audit table.
//!
//! [`watch`] re-runs the (incremental, idempotent) ingest whenever files change.

pub mod lines;
mod pipeline;
pub mod scan;
mod watch;
mod writer;

use bib_store::RunStatus;
use serde::{Deserialize, Serialize};

pub use pipeline::{
    embed_sentence_vectors, ingest, parse_text, read_document, ParsedDoc, SentenceVectors,
};
pub use watch::{watch, WatchOptions};
pub use writer::{embed_by_hash, DocumentWriter, EmbedItem, Embedded, WriteReport, Written};

/// The phase of a run a file-level problem happened in (shown and stored as `A` / `B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// Registering: scan and parse.
    A,
    /// Indexing: chunk, embed and write.
    B,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Phase::A => "A",
            Phase::B => "B",
        })
    }
}

/// A file-level problem: reported with its path, counted in `errors`, never fatal to the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileIssue {
    /// Path relative to the wiki root.
    pub path: String,
    pub phase: Phase,
    pub reason: String,
}

/// Knobs of an ingest run.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Files larger than this are reported and skipped (default 10 MiB).
    pub max_file_bytes: u64,
    /// Chunker options.
    pub chunk: bib_text::chunk::ChunkOptions,
    /// At most this many chunks per embedding call (spec: 25).
    pub batch_max_chunks: usize,
    /// Padded-token budget per embedding call (spec: 40,000).
    pub batch_token_budget: usize,
    /// Chunks embedded before their documents are committed (bounds memory and lost work).
    pub window_chunks: usize,
    /// Phase A guard: minimum fraction of files that must register (spec: 0.80).
    pub register_guard: f64,
    /// Phase B guard: minimum (created + updated + skipped) / total (spec: 0.70).
    pub index_guard: f64,
    /// Also embed every sentence of every chunk into the store's content-keyed vector cache,
    /// so trimming at ask time looks sentence vectors up instead of embedding them (default
    /// on; `bib ingest --no-sentence-vectors` turns it off).
    pub sentence_vectors: bool,
    /// At most this many sentences per embedding call (they are short; the padded-token
    /// budget still bounds every call).
    pub sentence_batch_max: usize,
    /// The collection this run ingests into (`None`: the directory's name,
    /// [`bib_store::collection_for_root`]). A run only ever prunes documents of its collection.
    pub collection: Option<String>,
    /// Allow a run to remove more than half of its collection's documents (when more than
    /// [`PRUNE_GUARD_MIN`]); without it such a run refuses before writing anything.
    pub allow_prune: bool,
    /// Extra scan rules (`--exclude`); `.gitignore`/`.bibignore` always apply.
    pub scan: scan::ScanOptions,
    /// The term function of the lexical index. A store built with another one is reindexed
    /// first (every posting rewritten in one transaction; nothing is re-embedded).
    pub terms: bib_text::terms::TermConfig,
}

/// A run may always remove up to this many documents without `allow_prune`.
pub const PRUNE_GUARD_MIN: usize = 5;

impl Default for IngestOptions {
    fn default() -> Self {
        Self {
            max_file_bytes: 10 * 1024 * 1024,
            chunk: bib_text::chunk::ChunkOptions::default(),
            batch_max_chunks: 25,
            batch_token_budget: 40_000,
            window_chunks: 256,
            register_guard: 0.80,
            index_guard: 0.70,
            sentence_vectors: true,
            sentence_batch_max: 64,
            collection: None,
            allow_prune: false,
            scan: scan::ScanOptions::default(),
            terms: bib_text::terms::TermConfig::default(),
        }
    }
}

/// Phase A metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseA {
    /// Candidate files (found `.md` files plus unscannable entries).
    pub files: u64,
    pub registered: u64,
    pub errors: u64,
    pub duration_ms: u64,
    pub guard_passed: bool,
}

/// Phase B metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseB {
    pub documents_written: u64,
    pub documents_unchanged: u64,
    pub documents_removed: u64,
    pub chunks_total: u64,
    pub chunks_created: u64,
    pub chunks_updated: u64,
    pub chunks_skipped: u64,
    pub chunks_pruned: u64,
    pub errors: u64,
    /// Chunks whose vector came from the store instead of the model.
    pub vectors_reused: u64,
    pub chunks_embedded: u64,
    /// Model tokens of the embedded texts.
    pub tokens_embedded: u64,
    /// Spec token estimate of the embedded texts.
    pub tokens_embedded_estimate: u64,
    pub batches: u64,
    pub embed_ms: u64,
    /// Sentences embedded into the vector cache for trimming (see
    /// [`IngestOptions::sentence_vectors`]), and those already there.
    #[serde(default)]
    pub sentences_embedded: u64,
    #[serde(default)]
    pub sentences_reused: u64,
    /// Time spent embedding sentences (included in `embed_ms`).
    #[serde(default)]
    pub sentence_embed_ms: u64,
    /// Why some sentence vectors could not be computed or stored (best effort: chunks are
    /// written regardless; trimming embeds what is missing at ask time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentence_warning: Option<String>,
    pub duration_ms: u64,
    pub guard_passed: bool,
    /// Whether vanished documents were pruned, or why not.
    pub prune: String,
}

/// Phase C results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseC {
    pub audit: bib_store::AuditReport,
    /// Registered documents whose stored state is not what this run wrote.
    pub mismatches: Vec<String>,
    pub coherent: bool,
    pub duration_ms: u64,
}

/// Coverage of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Coverage {
    /// Registered / candidate files.
    pub documents: f64,
    /// (created + updated + skipped) / chunks.
    pub chunks: f64,
}

/// The audit record of one run (what `bib ingest --json` prints and `bib runs` lists).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub id: i64,
    /// `running` until the run finishes, then `completed` or `failed`.
    pub status: RunStatus,
    pub root: String,
    /// The collection the run ingested into.
    #[serde(default)]
    pub collection: String,
    pub store: String,
    pub model_id: String,
    pub git_commit: Option<String>,
    pub started_at_ms: i64,
    pub duration_ms: u64,
    pub phase_a: PhaseA,
    pub phase_b: Option<PhaseB>,
    pub phase_c: Option<PhaseC>,
    pub coverage: Coverage,
    /// Fraction of the run's wall time spent inside the embedding model.
    pub embed_fraction: f64,
    /// Chunks written (created + updated) per second of wall time.
    pub chunks_per_sec: f64,
    pub errors: Vec<FileIssue>,
    /// What the run did but a reader should know, per file (e.g. a chunk longer than the
    /// model reads, embedded from its first tokens only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<FileIssue>,
    /// Why the run failed, when it did.
    pub failure: Option<String>,
    /// The term function of the lexical index after the run ([`bib_text::terms::TermConfig::id`]).
    #[serde(default)]
    pub terms: String,
    /// Chunks whose postings were rebuilt because the store had another term function.
    #[serde(default)]
    pub reindexed: u64,
}

/// Errors that stop a run (file-level problems are [`FileIssue`]s instead).
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("cannot ingest {path}: {reason}")]
    Root {
        path: String,
        reason: String,
        /// The file system's error, where one caused it.
        #[source]
        source: Option<std::io::Error>,
    },
    #[error(transparent)]
    Store(#[from] bib_store::StoreError),
    /// The file watcher failed (its error kept as the source).
    #[error("the file watcher failed")]
    Watch(#[source] notify::Error),
    /// The file watcher's channel closed.
    #[error("the file watcher stopped")]
    WatchStopped,
    /// The run's model differs from the one the knowledge base's other collections hold.
    #[error(
        "{store} is embedded with `{stored}`, and {} would keep those vectors while this run \
         writes `{model}` ones: ingest with `--model {stored}`, or into a new knowledge base \
         (`--store other.sqlite`)",
        collections_phrase(others)
    )]
    ModelMismatch {
        store: String,
        stored: String,
        model: String,
        others: Vec<String>,
    },
}

fn collections_phrase(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.len() {
        1 => format!("collection {}", quoted[0]),
        _ => format!("collections {}", quoted.join(", ")),
    }
}

/// What a phase's units of work count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Files (registering).
    Files,
    /// Bytes of Markdown (indexing: chunking, embedding and writing take time in proportion
    /// to the text, not to the number of documents).
    Bytes,
}

/// Progress reporting seam (the CLI draws bars on a terminal; the default is silent).
pub trait Progress: Send + Sync {
    /// A phase starts with `total` units of work.
    fn start(&self, _phase: &str, _total: u64, _unit: Unit) {}
    /// `n` units done.
    fn advance(&self, _n: u64) {}
    /// The current phase is over.
    fn finish(&self) {}
    /// A warning about one file, as it happens (it is in the run record's `warnings` too).
    fn warn(&self, _issue: &FileIssue) {}
}

/// Silent progress.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}
