//! The query-log record: what every ask leaves behind (time, query, mode, chunk ids, scores,
//! tokens, plus the options and timings) so the evaluation harness can replay the last N real
//! questions. The record type is the store's, so any [`bib_store::Store`] can keep it.

use serde_json::json;

pub use bib_store::QueryLogEntry;

use crate::filter::Filter;
use crate::retrieve::{RetrievalResult, RetrieveOptions};

/// The log record of one retrieval, stamped with the current time.
pub fn log_entry(r: &RetrievalResult, opts: &RetrieveOptions, filter: &Filter) -> QueryLogEntry {
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    QueryLogEntry {
        id: 0,
        at_ms,
        query: r.query.clone(),
        mode: r.mode.as_str().to_string(),
        chunk_ids: r.chunks.iter().map(|c| c.chunk.id).collect(),
        scores: r.chunks.iter().map(|c| c.score).collect(),
        tokens_before: r.tokens_before as u64,
        tokens_in_context: r.tokens_in_context as u64,
        extra: json!({
            "top_k": opts.top_k,
            "trim": opts.trim,
            "filter": filter,
            "paths": r.chunks.iter().map(|c| format!("{}#{}", c.chunk.path, c.chunk.chunk_index)).collect::<Vec<_>>(),
            "exact_tokens_before": r.exact_tokens_before,
            "exact_tokens_in_context": r.exact_tokens_in_context,
            "timings": r.timings,
            "relevance": r.relevance,
            "trim_dropped": r.trim_dropped,
            "corrections": r.corrections,
            "synonyms": r.synonyms,
        }),
    }
}
