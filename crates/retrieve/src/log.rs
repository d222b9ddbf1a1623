//! The query-log record: what every ask leaves behind (time, query, mode, chunk ids, scores,
//! tokens) so the evaluation harness can replay the last N real questions.

use serde::{Deserialize, Serialize};

use crate::index::ChunkId;
use crate::retrieve::RetrievalResult;

/// One logged ask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryLogEntry {
    /// Seconds since the Unix epoch.
    pub ts: u64,
    pub query: String,
    pub mode: String,
    pub top_k: usize,
    pub trim: bool,
    pub chunk_ids: Vec<ChunkId>,
    pub scores: Vec<f64>,
    pub tokens_before: usize,
    pub tokens_in_context: usize,
    pub latency_ms: f64,
}

impl QueryLogEntry {
    /// The record of one retrieval, stamped with the current time.
    pub fn from_result(r: &RetrievalResult, top_k: usize, trim: bool) -> Self {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            ts,
            query: r.query.clone(),
            mode: r.mode.as_str().to_string(),
            top_k,
            trim,
            chunk_ids: r.chunks.iter().map(|c| c.chunk.id).collect(),
            scores: r.chunks.iter().map(|c| c.score).collect(),
            tokens_before: r.tokens_before,
            tokens_in_context: r.tokens_in_context,
            latency_ms: r.timings.total_ms,
        }
    }
}
