//! # bib-retrieve — hybrid retrieval, sentence trimming and token accounting
//!
//! The ask path of bibliotecario, as a library:
//!
//! 1. [`index::ChunkIndex`] is everything retrieval needs from an index: a BM25 top-N, a vector
//!    top-N (both with [`filter::Filter`]s applied *before* the cut) and chunk fetch.
//!    [`index::MemoryIndex`] is the in-memory implementation used by benchmarks and tests; the
//!    SQLite store plugs in through [`store_index::StoreIndex`].
//! 2. [`fusion`] merges the two lists by reciprocal rank fusion (ranks only, never raw scores:
//!    a BM25 score is unbounded and a cosine lives in [-1, 1], so mixing them needs calibration
//!    that rank fusion avoids — spec 003 measured rank fusion above a weighted sum and above
//!    either list alone).
//! 3. [`trim`] cuts each chunk down to the sentences relevant to the question (spec 000
//!    `trimChunksBySentence`), embedding all sentences of all chunks in one batch through a
//!    content-keyed [`cache::EmbeddingCache`].
//! 4. [`signals`] re-scores the fused list's best candidates with ranking signals (title /
//!    heading / file name fields, exact strings, best sentence, document aggregation), each
//!    weighted and switchable, and explains every part of a score ([`signals::Explain`]).
//! 5. [`retrieve::Retriever`] chains them and accounts for tokens before and after trimming
//!    (the spec's estimate and the model tokenizer's exact count).
//!    Trimmed results that keep no sentence give their slot to the next result, and
//!    [`relevance`] says whether anything is close to the question at all (the floor).
//! 6. [`rerank`] optionally asks the `[llm]` chat model to judge the best candidates after the
//!    signals (one request, off by default); any failure leaves the signals' ranking, warned.
//! 7. [`synth`] optionally sends the context to an OpenAI-compatible chat endpoint and streams
//!    the answer; [`log::log_entry`] is what every ask records.

pub mod cache;
mod chunk_text;
pub mod error;
pub mod filter;
pub mod fusion;
pub mod index;
pub mod log;
pub mod prf;
pub mod relevance;
pub mod rerank;
mod rescore;
pub mod retrieve;
pub mod signals;
pub mod store_index;
pub mod synonyms;
pub mod synth;
pub mod trim;
pub mod typo;

pub use cache::{EmbeddingCache, StoreVectors, VectorBacking};
pub use error::RetrieveError;
pub use filter::Filter;
pub use fusion::{rrf_fuse, rrf_fuse_weighted, FusedHit, ListHit, DEFAULT_RRF_K};
pub use index::{ChunkId, ChunkIndex, ChunkRecord, Hit, MemoryIndex};
pub use log::{log_entry, QueryLogEntry};
pub use relevance::Relevance;
pub use rerank::RerankOptions;
pub use retrieve::{Fusion, Mode, RetrievalResult, RetrieveOptions, Retriever, ScoredChunk};
pub use signals::{Explain, Signals};
pub use store_index::StoreIndex;
pub use synonyms::Expansion;
pub use trim::{TrimOptions, TrimScorer};
pub use typo::Correction;
