//! The service layer: every operation of the servers as a plain synchronous method over one
//! [`Service`] (store + embedding model + settings). MCP tools and HTTP endpoints are thin
//! adapters over these methods, so both transports behave identically; they run them on
//! tokio's blocking pool.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use bib_app::{AskSettings, Settings};
use bib_embed::{CachedEmbedder, Embedder};
use bib_retrieve::synth::SynthConfig;
use bib_retrieve::{
    log_entry, EmbeddingCache, Filter, Mode, RetrieveOptions, Retriever, StoreIndex,
};
use bib_store::read::{Excerpt, KbStatus, LineRange};
use bib_store::{ChunkWrite, DocRecord, DocumentChange, Store};
use bib_text::chunk::{chunk_hash, doc_prefix};
use bib_text::tokens::estimate_tokens;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::args::{
    AskArgs, EvalRetrievalArgs, GetArgs, IndexChunksArgs, PackArgs, RegisterDocArgs,
};
use crate::auth::TokenCheck;
use crate::error::ServiceError;
use crate::work::{CancelEmbedder, Work};

/// Largest document accepted by `register_doc` (the HTTP body limit is usually lower).
pub const MAX_DOC_BYTES: usize = 10 * 1024 * 1024;
/// Largest `top_k` accepted.
pub const MAX_TOP_K: usize = 100;
/// Chunks embedded per model call when indexing.
/// Longest question accepted by ask and eval, in bytes (a question, not a document; the query
/// log keeps it).
pub const MAX_QUERY_BYTES: usize = 4096;
/// Longest document path accepted by `register_doc`, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;

/// The shared state of a server process.
pub struct Service {
    store: Arc<dyn Store>,
    embedder: Option<Arc<dyn Embedder>>,
    /// Why there is no embedder (shown by `health` and in `not_available` errors).
    model_error: Option<String>,
    cache: EmbeddingCache,
    /// The vectors of the history packs of hybrid `pack` requests: an agent packing its
    /// session again each turn embeds only what is new (bounded; apart from the asks' cache
    /// so a long history does not push out the questions).
    pack_cache: EmbeddingCache,
    /// The model of hybrid packs, chosen on the first one (see [`Service::pack_embedder`]).
    pack_embedder: OnceLock<Option<Arc<dyn Embedder>>>,
    /// Ask defaults: environment over `bib.toml` over the defaults; a request's own
    /// arguments go over them.
    settings: Settings,
    tokens: TokenCheck,
    /// Serialises the read-diff-write of registrations and indexing (each write is already
    /// atomic in the store; this keeps two writers from diffing against the same old state).
    write_lock: Mutex<()>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("store", &self.store.location())
            .field(
                "model",
                &self.embedder.as_ref().map(|e| e.model_id().to_string()),
            )
            .finish_non_exhaustive()
    }
}

/// One retrieved chunk of an ask.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AskHit {
    pub rank: usize,
    pub chunk_id: i64,
    /// The document's node id.
    pub node_id: i64,
    pub path: String,
    /// The document's collection.
    pub collection: String,
    /// 1-based first and last line of the file at `path` the chunk cites (0 when unknown).
    pub line_start: u32,
    pub line_end: u32,
    pub chunk_index: u32,
    pub title: String,
    pub heading_path: Vec<String>,
    /// The chunk's Markdown (trimmed to the relevant sentences when trimming ran).
    pub content: String,
    /// Ranking score (RRF in hybrid mode, else the list's own score).
    pub score: f64,
    pub bm25_rank: Option<usize>,
    pub bm25_score: Option<f64>,
    pub vector_rank: Option<usize>,
    pub vector_score: Option<f64>,
    pub sentences_total: Option<usize>,
    pub sentences_kept: Option<usize>,
    /// The whole chunk sentence by sentence, with what trimming kept (only with
    /// `passages: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passage: Option<PassageOut>,
}

/// A result's whole text, cut into the pieces trimming judged (`passages: true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PassageOut {
    /// The chunk's `[Doc: title › heading]` prefix.
    pub prefix: String,
    /// The body in order (each piece carries the whitespace before it); concatenated they
    /// are the chunk's body as stored.
    pub pieces: Vec<PieceOut>,
    /// Token estimate of the whole chunk and of what the answer kept of it.
    pub tokens_whole: usize,
    pub tokens_kept: usize,
}

/// One sentence (or Markdown unit) of a passage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PieceOut {
    pub text: String,
    /// Kept in the answer (always true when trimming did not run).
    pub kept: bool,
}

/// How [`Service::answer`] ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AnswerEnd {
    /// The synthesized answer (empty when it was skipped).
    pub answer: String,
    /// Why no answer was synthesized: `no_good_match` or `no_results`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The result of `bib_ask` / `POST /ask`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AskOutput {
    pub query: String,
    /// The mode actually used (`hybrid`, `bm25`, `vector`).
    pub mode: String,
    pub top_k: usize,
    pub trim: bool,
    pub trim_threshold: Option<f32>,
    pub trim_window: Option<usize>,
    pub filters: Vec<String>,
    /// Spec estimate (words × 1.3) of the chunks as retrieved, and after trimming.
    pub tokens_before: usize,
    pub tokens_in_context: usize,
    /// Exact counts with the model's tokenizer, when the model is loaded.
    pub exact_tokens_before: Option<usize>,
    pub exact_tokens_in_context: Option<usize>,
    pub took_ms: f64,
    /// Nothing in the knowledge base is close to the question: `best_cosine` is below the
    /// model's `relevance_floor` (or there is no result). The results are still listed.
    pub no_good_match: bool,
    /// The model's cosine between the question and the closest chunk (none in bm25 mode).
    pub best_cosine: Option<f64>,
    /// The model's calibrated floor for `best_cosine` (none when the model has no floor).
    pub relevance_floor: Option<f64>,
    /// Results dropped because trimming kept none of their sentences (their slots went to
    /// the next results).
    pub trim_dropped: usize,
    /// What went wrong without failing the ask (a reranker that could not judge, …); empty
    /// when nothing did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Words of the question searched as another word (typo tolerance, `typo=1` in the
    /// signals); empty when none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub corrections: Vec<AskCorrection>,
    /// Phrases the keyword search looked for besides the question's words, by the synonym
    /// rules of `ask.synonyms`; empty when none applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synonyms: Vec<AskSynonyms>,
    pub results: Vec<AskHit>,
}

/// A question word searched as another word: the knowledge base does not know `from`, and
/// `to` is one edit from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AskCorrection {
    pub from: String,
    pub to: String,
}

/// Phrases a synonym rule added to the keyword search: the question holds `matched`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AskSynonyms {
    pub matched: String,
    pub added: Vec<String>,
}

/// The result of `bib_register_doc` / `POST /docs`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RegisterOutput {
    pub node_id: i64,
    /// Whether the document is new.
    pub created: bool,
    /// The normalized path it is stored under.
    pub path: String,
    pub title: String,
    /// With `index: true`: what indexing did.
    pub indexed: Option<IndexOutput>,
    /// Without `index`: chunks of the previous content removed because the content changed
    /// (index the new content with `bib_index_chunks`).
    #[serde(default)]
    pub stale_chunks_pruned: u64,
}

/// One problem of an index call.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct IndexIssue {
    pub node_id: i64,
    pub reason: String,
}

/// The result of `bib_index_chunks` / `POST /chunks` (spec 004 metrics).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct IndexOutput {
    pub chunks_created: u64,
    pub chunks_updated: u64,
    /// Unchanged chunks (same content hash and model): not re-embedded.
    pub chunks_skipped: u64,
    pub chunks_pruned: u64,
    pub errors: u64,
    pub error_details: Vec<IndexIssue>,
}

/// One packed message.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PackedMessageOut {
    pub role: String,
    pub content: String,
    /// The input message's time (epoch milliseconds), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<i64>,
}

/// The result of `bib_pack` / `POST /pack`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PackOutput {
    pub messages: Vec<PackedMessageOut>,
    /// The packer's statistics (mode, budget, history_tokens, output_tokens …).
    pub stats: Value,
}

/// A registered text must fit in [`MAX_DOC_BYTES`].
fn check_size(field: &str, text: &str) -> Result<(), ServiceError> {
    if text.len() > MAX_DOC_BYTES {
        return Err(ServiceError::invalid(
            field,
            format!("{} bytes, over the limit of {MAX_DOC_BYTES}", text.len()),
        ));
    }
    Ok(())
}

/// A question: not blank, at most [`MAX_QUERY_BYTES`].
fn check_query(field: &str, q: &str) -> Result<(), ServiceError> {
    if q.trim().is_empty() {
        return Err(ServiceError::invalid(field, "is empty"));
    }
    if q.len() > MAX_QUERY_BYTES {
        return Err(ServiceError::invalid(
            field,
            format!(
                "{} bytes, over the limit of {MAX_QUERY_BYTES} bytes for a question",
                q.len()
            ),
        ));
    }
    Ok(())
}

/// Text fields of a registration must not carry NUL bytes (file ingest refuses them too).
fn check_no_nul(field: &str, text: &str) -> Result<(), ServiceError> {
    match text.find('\0') {
        Some(at) => Err(ServiceError::invalid(
            field,
            format!("contains a NUL byte at byte {at}; Markdown is text"),
        )),
        None => Ok(()),
    }
}

fn value_has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(value_has_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || value_has_nul(v)),
        _ => false,
    }
}

/// Normalize a wiki-relative path: `/` separators, no `.` parts, no leading `public/`.
pub fn normalize_path(raw: &str) -> Result<String, ServiceError> {
    if raw.len() > MAX_PATH_BYTES {
        return Err(ServiceError::invalid(
            "path",
            format!("{} bytes, over the limit of {MAX_PATH_BYTES}", raw.len()),
        ));
    }
    if raw.contains('\0') {
        return Err(ServiceError::invalid("path", "contains a NUL byte"));
    }
    let p = raw.trim().replace('\\', "/");
    if p.is_empty() {
        return Err(ServiceError::invalid("path", "is empty"));
    }
    if p.starts_with('/') || p.contains(':') {
        return Err(ServiceError::invalid(
            "path",
            format!("`{raw}` must be relative to the wiki root"),
        ));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(ServiceError::invalid(
                    "path",
                    format!("`{raw}` escapes the wiki root"),
                ))
            }
            s if s.chars().any(char::is_control) => {
                return Err(ServiceError::invalid("path", "contains control characters"))
            }
            s => parts.push(s),
        }
    }
    if parts.len() > 1 && parts[0] == "public" {
        parts.remove(0);
    }
    if parts.is_empty() {
        return Err(ServiceError::invalid(
            "path",
            format!("`{raw}` names no file"),
        ));
    }
    let path = parts.join("/");
    let is_md = path.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.ends_with('/') && !stem.is_empty() && ext.eq_ignore_ascii_case("md")
    });
    if !is_md {
        return Err(ServiceError::invalid(
            "path",
            format!("`{path}` is not a Markdown file name (it must end in `.md`)"),
        ));
    }
    Ok(path)
}

/// A chunk ready to be written once its vector is known.
struct Pending {
    index: u32,
    prefix: String,
    heading_path: Vec<String>,
    content: String,
    hash: String,
    span: (u64, u64),
    /// 1-based lines of the document source the chunk cites (0 when unknown).
    lines: (u32, u32),
}

/// An ingest error as a service error (the store's own errors keep their code).
fn ingest_error(e: bib_ingest::IngestError) -> ServiceError {
    match e {
        bib_ingest::IngestError::Store(s) => s.into(),
        other => ServiceError::internal(bib_store::error_chain(&other)),
    }
}

/// Check `bib_index_chunks` arguments before anything is read or embedded (non-empty chunks of
/// at most 10 MiB, each `(node, chunk_index)` once, each prune's node once and above every
/// chunk written to it), and return the prunes as `keep_count` by node.
fn index_chunks_prune(a: &IndexChunksArgs) -> Result<BTreeMap<i64, u32>, ServiceError> {
    let prune = a.prune.as_deref().unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    for (i, c) in a.chunks.iter().enumerate() {
        if c.content.trim().is_empty() {
            return Err(ServiceError::invalid(
                format!("chunks[{i}].content"),
                "is empty",
            ));
        }
        if c.content.len() > MAX_DOC_BYTES {
            return Err(ServiceError::invalid(
                format!("chunks[{i}].content"),
                "is over 10 MiB",
            ));
        }
        if !seen.insert((c.node_id, c.chunk_index)) {
            return Err(ServiceError::invalid(
                format!("chunks[{i}].chunk_index"),
                format!(
                    "chunk {} of node {} appears twice",
                    c.chunk_index, c.node_id
                ),
            ));
        }
    }
    let mut keep: BTreeMap<i64, u32> = BTreeMap::new();
    for (j, p) in prune.iter().enumerate() {
        if keep.insert(p.node_id, p.keep_count).is_some() {
            return Err(ServiceError::invalid(
                format!("prune[{j}].node_id"),
                format!("node {} appears twice", p.node_id),
            ));
        }
        if let Some(c) = a
            .chunks
            .iter()
            .find(|c| c.node_id == p.node_id && c.chunk_index >= p.keep_count)
        {
            return Err(ServiceError::invalid(
                format!("prune[{j}].keep_count"),
                format!(
                    "keeps {} chunks of node {} but chunk {} is being written",
                    p.keep_count, p.node_id, c.chunk_index
                ),
            ));
        }
    }
    Ok(keep)
}

/// What every node of one `index_chunks` call shares: the registered documents by node id
/// as read under the write lock, the prunes (`keep_count` by node), the model (none when the
/// call writes no chunks) and the request's deadline.
struct IndexChunksCall<'a> {
    docs: &'a HashMap<i64, DocRecord>,
    keep: &'a BTreeMap<i64, u32>,
    embedder: Option<&'a CancelEmbedder<'a>>,
    work: &'a Work,
}

/// The chunk arguments of an `index_chunks` call grouped by node, in request order within
/// each node.
fn chunk_arguments_by_node(
    chunks: &[crate::args::ChunkArg],
) -> BTreeMap<i64, Vec<&crate::args::ChunkArg>> {
    let mut by_node: BTreeMap<i64, Vec<&crate::args::ChunkArg>> = BTreeMap::new();
    for c in chunks {
        by_node.entry(c.node_id).or_default().push(c);
    }
    by_node
}

/// The nodes an `index_chunks` call visits, in order: the nodes with chunks by node id, then
/// the nodes that are only pruned, by node id.
fn nodes_of_index_chunks(
    by_node: &BTreeMap<i64, Vec<&crate::args::ChunkArg>>,
    keep: &BTreeMap<i64, u32>,
) -> Vec<i64> {
    let mut nodes: Vec<i64> = by_node.keys().copied().collect();
    nodes.extend(keep.keys().filter(|k| !by_node.contains_key(*k)));
    nodes
}

/// A document's chunk count once `chunks` are written (it grows to cover the highest index
/// written) and its prune applied (`keep` caps it).
fn chunk_count_after_index_and_prune(
    doc: &DocRecord,
    chunks: &[&crate::args::ChunkArg],
    keep: Option<&u32>,
) -> u32 {
    let highest = chunks.iter().map(|c| c.chunk_index + 1).max().unwrap_or(0);
    let span = doc.chunk_count.max(highest);
    keep.map_or(span, |&k| k.min(span))
}

/// The store change that writes `upserts` into a registered document and sets its chunk
/// count, leaving the document itself (title, metadata, hash, source) as stored.
fn chunk_change_of_document(
    doc: &DocRecord,
    chunk_count: u32,
    upserts: Vec<ChunkWrite>,
) -> DocumentChange {
    DocumentChange {
        path: doc.path.clone(),
        collection: doc.collection.clone(),
        title: doc.title.clone(),
        metadata: doc.metadata.clone(),
        content_hash: doc.content_hash.clone(),
        chunk_count,
        upserts,
        // Same content hash: the stored source, if any, stays true.
        source: None,
    }
}

/// Check an ask's own arguments before anything is read (the query's size, `top_k`, the
/// trimming threshold and window, the filter keys), naming the field at fault.
fn check_ask_arguments(a: &AskArgs) -> Result<(), ServiceError> {
    check_query("query", &a.query)?;
    if let Some(k) = a.top_k {
        if k == 0 || k > MAX_TOP_K {
            return Err(ServiceError::invalid(
                "top_k",
                format!("{k} is not in 1..={MAX_TOP_K}"),
            ));
        }
    }
    if let Some(t) = a.trim_threshold {
        if !t.is_finite() || !(-1.0..=1.0).contains(&t) {
            return Err(ServiceError::invalid(
                "trim_threshold",
                format!("{t} is not a cosine in [-1, 1]"),
            ));
        }
    }
    if let Some(w) = a.trim_window {
        if w > 50 {
            return Err(ServiceError::invalid(
                "trim_window",
                format!("{w} is over 50"),
            ));
        }
    }
    if let Some(m) = &a.filters {
        if let Some(k) = m.keys().find(|k| k.trim().is_empty() || k.contains('=')) {
            return Err(ServiceError::invalid("filters", format!("bad key `{k}`")));
        }
    }
    Ok(())
}

/// The ranked results of a retrieval as an ask lists them (1-based ranks, citations, the
/// scores of each list), each with its passage when `passages` holds one for its chunk.
fn ask_hits_of_retrieval(
    r: &bib_retrieve::RetrievalResult,
    passages: &mut HashMap<i64, PassageOut>,
) -> Vec<AskHit> {
    r.chunks
        .iter()
        .enumerate()
        .map(|(i, c)| AskHit {
            rank: i + 1,
            chunk_id: c.chunk.id,
            node_id: c.chunk.node_id,
            path: c.chunk.path.clone(),
            collection: c.chunk.collection.clone(),
            line_start: c.chunk.line_start,
            line_end: c.chunk.line_end,
            chunk_index: c.chunk.chunk_index,
            title: c.chunk.title.clone(),
            heading_path: c.chunk.heading_path.clone(),
            content: c.text.clone(),
            score: c.score,
            bm25_rank: c.bm25.map(|h| h.rank),
            bm25_score: c.bm25.map(|h| h.score),
            vector_rank: c.vector.map(|h| h.rank),
            vector_score: c.vector.map(|h| h.score),
            sentences_total: c.trim.as_ref().map(|t| t.sentences_total),
            sentences_kept: c.trim.as_ref().map(|t| t.sentences_kept.len()),
            passage: passages.remove(&c.chunk.id),
        })
        .collect()
}

/// The output of an ask: the options it ran with, the retrieval's token counts, timing and
/// relevance verdict, and its `results`.
fn ask_output_of_retrieval(
    r: &bib_retrieve::RetrievalResult,
    opts: &RetrieveOptions,
    filters: Vec<String>,
    results: Vec<AskHit>,
) -> AskOutput {
    AskOutput {
        query: r.query.clone(),
        mode: r.mode.as_str().to_string(),
        top_k: opts.top_k,
        trim: opts.trim.is_some(),
        trim_threshold: opts.trim.map(|t| t.threshold),
        trim_window: opts.trim.map(|t| t.window),
        filters,
        tokens_before: r.tokens_before,
        tokens_in_context: r.tokens_in_context,
        exact_tokens_before: r.exact_tokens_before,
        exact_tokens_in_context: r.exact_tokens_in_context,
        took_ms: r.timings.total_ms,
        no_good_match: r.relevance.no_good_match,
        best_cosine: r.relevance.best_cosine,
        relevance_floor: r.relevance.floor,
        trim_dropped: r.trim_dropped,
        warnings: r.warnings.clone(),
        corrections: r
            .corrections
            .iter()
            .map(|c| AskCorrection {
                from: c.from.clone(),
                to: c.to.clone(),
            })
            .collect(),
        synonyms: r
            .synonyms
            .iter()
            .map(|x| AskSynonyms {
                matched: x.matched.clone(),
                added: x.added.clone(),
            })
            .collect(),
        results,
    }
}

/// Vectors the service keeps for hybrid packs (a session's units and blocks): room for several
/// long sessions, at most ~120 MB even were every entry a 4,000-character block.
const PACK_CACHE_VECTORS: usize = 20_000;

impl Service {
    /// A service over `store`. `embedder` is `Err(reason)` when no model could be loaded: BM25
    /// asks still work, everything needing vectors answers `not_available` with the reason.
    pub fn new(
        store: Arc<dyn Store>,
        embedder: Result<Arc<dyn Embedder>, String>,
        settings: Settings,
        tokens: TokenCheck,
    ) -> Self {
        let (embedder, model_error) = match embedder {
            Ok(e) => (Some(e), None),
            Err(reason) => (None, Some(reason)),
        };
        Self {
            store,
            embedder,
            model_error,
            cache: EmbeddingCache::default(),
            pack_cache: EmbeddingCache::with_capacity(PACK_CACHE_VECTORS),
            pack_embedder: OnceLock::new(),
            settings,
            tokens,
            write_lock: Mutex::new(()),
        }
    }

    /// A service over `store` with the model its chunks were embedded with, or BM25 only:
    /// when `load_model` is off, or when the model cannot load — then `warn` is told why.
    pub fn with_store_model(
        store: Arc<dyn Store>,
        settings: Settings,
        tokens: TokenCheck,
        load_model: bool,
        warn: impl FnOnce(&str),
    ) -> Result<Self, bib_store::StoreError> {
        let model_id = bib_app::model::store_model(store.as_ref())?;
        let embedder: Result<Arc<dyn Embedder>, String> = if !load_model {
            Err("started with --no-model".to_string())
        } else {
            bib_app::model::load_embedder(&model_id, &settings.embed)
                .map(Arc::from)
                .map_err(|e| {
                    let reason = bib_store::error_chain(&e);
                    warn(&reason);
                    reason
                })
        };
        let svc = Self::new(store, embedder, settings, tokens);
        // --no-model means no model at all: hybrid packs fall back to lexical too.
        Ok(if load_model {
            svc
        } else {
            svc.with_pack_embedder(None)
        })
    }

    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    pub fn tokens(&self) -> &TokenCheck {
        &self.tokens
    }

    /// The model whose cosines trimming compares: the loaded one (without one nothing is
    /// trimmed, so the default's id serves).
    fn model_id(&self) -> &str {
        self.embedder
            .as_deref()
            .map_or(bib_embed::DEFAULT_MODEL, |e| e.model_id())
    }

    fn need_embedder(&self, what: &str) -> Result<&dyn Embedder, ServiceError> {
        self.embedder.as_deref().ok_or_else(|| {
            ServiceError::not_available(format!(
                "{what} needs the embedding model, which is not loaded: {}",
                self.model_error
                    .as_deref()
                    .unwrap_or("run `bib model install`")
            ))
        })
    }

    // ── ask ──────────────────────────────────────────────────────────────────────────

    /// Hybrid retrieval with optional trimming; the query is logged.
    pub fn ask(&self, a: AskArgs, work: &Work) -> Result<AskOutput, ServiceError> {
        self.run_ask(a, work).map(|(out, _)| out)
    }

    /// Whether an `[llm]` chat endpoint is configured (so [`Service::answer`] can synthesize).
    pub fn synthesis_configured(&self) -> bool {
        self.synth_config().is_ok()
    }

    fn synth_config(&self) -> Result<SynthConfig, ServiceError> {
        let llm = self.settings.llm.clone();
        Ok(SynthConfig::from_parts(
            llm.base_url,
            llm.model,
            llm.api_key,
        )?)
    }

    /// An ask, then an answer synthesized from its results by the configured chat endpoint:
    /// `on_results` gets the ask's output first (a page shows the sources while the answer is
    /// written), then the answer streams into `out` as the endpoint sends it. Nothing is
    /// synthesized when nothing is close to the question (`no_good_match`): an answer written
    /// from unrelated passages would read as one.
    pub fn answer(
        &self,
        a: AskArgs,
        work: &Work,
        on_results: &mut dyn FnMut(&AskOutput) -> Result<(), ServiceError>,
        out: &mut dyn std::io::Write,
    ) -> Result<AnswerEnd, ServiceError> {
        let cfg = self.synth_config()?;
        let (output, r) = self.run_ask(a, work)?;
        on_results(&output)?;
        let skipped = if output.results.is_empty() {
            Some("no_results")
        } else if output.no_good_match {
            Some("no_good_match")
        } else {
            None
        };
        if let Some(why) = skipped {
            return Ok(AnswerEnd {
                answer: String::new(),
                skipped: Some(why.to_string()),
            });
        }
        work.check()?;
        let answer = bib_retrieve::synth::synthesize(&cfg, &r.query, &r.chunks, out)?;
        Ok(AnswerEnd {
            answer,
            skipped: None,
        })
    }

    /// An ask from its request to its output: check the arguments, lay them over the
    /// process's settings, retrieve (the query is logged), and turn the retrieval into the
    /// output. The retrieval itself is returned too ([`Service::answer`] synthesizes from it).
    fn run_ask(
        &self,
        a: AskArgs,
        work: &Work,
    ) -> Result<(AskOutput, bib_retrieve::RetrievalResult), ServiceError> {
        check_ask_arguments(&a)?;
        let ask = self.ask_settings_of_request(&a)?;
        let mut filter = ask.filter()?;
        filter.collections = a.collections.clone().unwrap_or_default();
        let opts = &ask.retrieve_options(self.model_id());
        self.check_embedder_for_retrieve_options(opts)?;
        let index = StoreIndex::new(self.store.as_ref());
        let r = self.retrieve_and_log_query(&index, &a.query, opts, &filter, work)?;
        let mut passages = if a.passages.unwrap_or(false) {
            Self::passages(&r)
        } else {
            HashMap::new()
        };
        let results = ask_hits_of_retrieval(&r, &mut passages);
        let output = ask_output_of_retrieval(&r, opts, ask.filters.clone(), results);
        Ok((output, r))
    }

    /// The process's ask settings with the request's own arguments laid over them, checked
    /// as a whole (`validate`), so a request cannot reach a combination the settings refuse.
    fn ask_settings_of_request(&self, a: &AskArgs) -> Result<AskSettings, ServiceError> {
        let filters = a.filters.as_ref().map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        });
        // The request's arguments over the process's settings.
        let mut ask = self.settings.ask.clone();
        ask.top_k = a.top_k.unwrap_or(ask.top_k);
        ask.mode = a.mode.map_or(ask.mode, Mode::from);
        ask.trim = a.trim.unwrap_or(ask.trim);
        ask.trim_threshold = a.trim_threshold.or(ask.trim_threshold);
        ask.trim_window = a.trim_window.unwrap_or(ask.trim_window);
        ask.rerank = a.rerank.unwrap_or(ask.rerank);
        if let Some(f) = filters {
            ask.filters = f;
        }
        ask.validate()?;
        Ok(ask)
    }

    /// Refuse, before anything is retrieved, a retrieval that needs the embedding model
    /// (vector mode, trimming) when none is loaded: `not_available` with the reason.
    fn check_embedder_for_retrieve_options(
        &self,
        opts: &RetrieveOptions,
    ) -> Result<(), ServiceError> {
        if opts.mode == Mode::Vector {
            self.need_embedder("mode `vector`")?;
        }
        if opts.trim.is_some() {
            self.need_embedder("trimming")?;
        }
        Ok(())
    }

    /// Run the retrieval over `index` with the model wrapped so a cancelled request stops
    /// embedding, answer a cancellation before the retrieval's own result, and log the query
    /// (a log that cannot be written is only a warning: the answer does not depend on it).
    fn retrieve_and_log_query(
        &self,
        index: &StoreIndex<'_>,
        query: &str,
        opts: &RetrieveOptions,
        filter: &Filter,
        work: &Work,
    ) -> Result<bib_retrieve::RetrievalResult, ServiceError> {
        let embedder = self
            .embedder
            .as_deref()
            .map(|inner| CancelEmbedder { inner, work });
        // The LLM reranker ([ask] rerank) calls the same [llm] endpoint as synthesis.
        let llm = opts
            .rerank
            .is_some()
            .then(|| self.synth_config().ok())
            .flatten();
        let retriever = Retriever::new(
            index,
            embedder.as_ref().map(|e| e as &dyn Embedder),
            &self.cache,
        )
        .with_llm(llm.as_ref());
        let r = retriever.retrieve(query, opts, filter);
        work.check()?;
        let r = r?;
        for w in &r.warnings {
            tracing::warn!("{w}");
        }
        if let Err(e) = self.store.log_query(&log_entry(&r, opts, filter)) {
            tracing::warn!("could not write the query log: {e}");
        }
        Ok(r)
    }

    /// Each result's whole text cut into sentences, marked kept or removed, by chunk id.
    /// Trimming changes only what a result shows ([`bib_retrieve::ScoredChunk::text`]); its
    /// record is the whole chunk as stored.
    fn passages(r: &bib_retrieve::RetrievalResult) -> HashMap<i64, PassageOut> {
        let mut out = HashMap::new();
        for c in &r.chunks {
            let whole = &c.chunk;
            let kept = c.trim.as_ref().map(|t| t.sentences_kept.as_slice());
            let p = bib_eval::passage::split(whole, kept);
            out.insert(
                c.chunk.id,
                PassageOut {
                    prefix: p.prefix,
                    pieces: p
                        .pieces
                        .into_iter()
                        .map(|piece| PieceOut {
                            text: piece.text,
                            kept: piece.kept,
                        })
                        .collect(),
                    tokens_whole: estimate_tokens(&whole.text()),
                    tokens_kept: estimate_tokens(&c.text),
                },
            );
        }
        out
    }

    // ── eval ─────────────────────────────────────────────────────────────────────────

    /// The A/B harness (baseline vs trimming …) over the given or the logged questions.
    pub fn eval(&self, a: EvalRetrievalArgs, work: &Work) -> Result<Value, ServiceError> {
        let mut e = bib_eval::EvalArgs {
            // The process's threshold, else the one calibrated for the loaded model.
            trim_threshold: self.settings.ask.trim_options(self.model_id()).threshold,
            ..bib_eval::EvalArgs::default()
        };
        if let Some(q) = a.questions {
            for (i, q) in q.iter().enumerate() {
                check_query(&format!("questions[{i}]"), q)?;
            }
            if q.len() > 200 {
                return Err(ServiceError::invalid(
                    "questions",
                    format!("{} questions, at most 200", q.len()),
                ));
            }
            e.questions = q;
        }
        if let Some(k) = a.top_k {
            if k == 0 || k > MAX_TOP_K {
                return Err(ServiceError::invalid(
                    "top_k",
                    format!("{k} is not in 1..={MAX_TOP_K}"),
                ));
            }
            e.top_k = k;
        }
        if let Some(t) = a.trim_threshold {
            e.trim_threshold = t;
        }
        if let Some(w) = a.trim_window {
            if w > 50 {
                return Err(ServiceError::invalid(
                    "trim_window",
                    format!("{w} is over 50"),
                ));
            }
            e.trim_window = w;
        }
        let synth = if a.synthesize.unwrap_or(false) {
            e.synthesize = true;
            Some(self.synth_config()?)
        } else {
            None
        };
        // Trimming variants need vectors; say so instead of failing deep inside.
        let inner = self.need_embedder("bib_eval_retrieval")?;
        // Every question embeds: once the deadline passes, the next one fails and eval stops.
        let embedder = CancelEmbedder { inner, work };
        let report = bib_eval::evaluate_store(
            self.store.as_ref(),
            Some(&embedder),
            &self.cache,
            synth.as_ref(),
            &e,
            &bib_eval::NoProgress,
        );
        work.check()?;
        let report = report.map_err(|err| match err {
            bib_eval::EvalError::InvalidArg { name, reason } => ServiceError::invalid(name, reason),
            bib_eval::EvalError::NoQuestions(m) => ServiceError::invalid(
                "questions",
                format!("no questions to evaluate ({m}): pass `questions` or ask some first"),
            ),
            bib_eval::EvalError::Retrieve(r) => r.into(),
            other => ServiceError::internal(bib_store::error_chain(&other)),
        })?;
        serde_json::to_value(report).map_err(|e| ServiceError::internal(e.to_string()))
    }

    // ── register ─────────────────────────────────────────────────────────────────────

    /// Create or update one document. `presented` is the token the caller showed.
    pub fn register_doc(
        &self,
        a: RegisterDocArgs,
        presented: Option<&str>,
        work: &Work,
    ) -> Result<RegisterOutput, ServiceError> {
        self.tokens
            .check_mutation(presented.or(a.token.as_deref()))?;
        let path = normalize_path(&a.path)?;
        let collection = match a.collection.as_deref().map(str::trim) {
            None => bib_store::API_COLLECTION.to_string(),
            Some("") => return Err(ServiceError::invalid("collection", "is empty")),
            Some(c) => c.to_string(),
        };
        // The text as the file it stands for, and the field a parse error is about.
        let (text, field) = match (a.content, a.front_matter, a.body) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(ServiceError::invalid(
                    "content",
                    "give either `content`, or `front_matter` + `body`, not both",
                ))
            }
            (Some(content), None, None) => {
                check_no_nul("content", &content)?;
                check_size("content", &content)?;
                (content, "content")
            }
            (None, fm, body) => {
                if fm.is_none() && body.is_none() {
                    return Err(ServiceError::invalid(
                        "content",
                        "missing: give `content`, or `front_matter` + `body`",
                    ));
                }
                let body = body.unwrap_or_default();
                check_no_nul("body", &body)?;
                check_size("body", &body)?;
                match fm {
                    None => (body, "body"),
                    Some(m) => {
                        let meta = Value::Object(m.into_iter().collect());
                        if value_has_nul(&meta) {
                            return Err(ServiceError::invalid(
                                "front_matter",
                                "contains a NUL byte; Markdown is text",
                            ));
                        }
                        // The metadata as front-matter (JSON is YAML), so the document parses,
                        // hashes and cites lines as that file ingested from disk would.
                        (format!("---\n{meta}\n---\n{body}"), "front_matter")
                    }
                }
            }
        };
        let doc = bib_ingest::parse_text(&path, text)
            .map_err(|reason| ServiceError::invalid(field, reason))?;
        let index = a.index.unwrap_or(false);
        let embedder = if index {
            Some(self.need_embedder("`index: true`")?)
        } else {
            None
        };

        let _guard = self
            .write_lock
            .lock()
            .map_err(|_| ServiceError::internal("write lock poisoned"))?;
        work.check()?;
        match embedder {
            Some(e) => self.register_indexed(doc, &collection, e, work),
            None => self.register_unindexed(doc, &collection, work),
        }
    }

    /// Register and index one document through the one write path ingest uses
    /// ([`bib_ingest::DocumentWriter`]): same chunks, hashes, prefixes, line citations and
    /// sentence vectors as the file ingested from disk.
    fn register_indexed(
        &self,
        doc: bib_ingest::ParsedDoc,
        collection: &str,
        embedder: &dyn Embedder,
        work: &Work,
    ) -> Result<RegisterOutput, ServiceError> {
        let (path, title) = (doc.path.clone(), doc.title.clone());
        let e = CancelEmbedder {
            inner: embedder,
            work,
        };
        let opts = bib_ingest::IngestOptions::default();
        // The point of no return: past the gate a timeout waits for the write instead of
        // answering 504 (see `crate::work`).
        let gate = || work.begin_commit().is_ok();
        let progress = bib_ingest::NoProgress;
        let mut writer =
            bib_ingest::DocumentWriter::new(self.store.as_ref(), &e, &opts, &progress, collection)
                .map_err(ingest_error)?
                .with_gate(&gate);
        writer.add(doc).map_err(ingest_error)?;
        let report = writer.finish().map_err(ingest_error)?;
        if let Some(issue) = report.issues.first() {
            work.check()?;
            return Err(ServiceError::internal(format!(
                "{}: {}",
                issue.path, issue.reason
            )));
        }
        let written = report
            .written
            .get(&path)
            .ok_or_else(|| ServiceError::internal(format!("{path}: not written")))?;
        let out = written.outcome.unwrap_or_default();
        let b = &report.phase_b;
        tracing::info!(path = %path, node_id = written.node_id, created = out.document_created, "registered document");
        Ok(RegisterOutput {
            node_id: written.node_id,
            created: out.document_created,
            path,
            title,
            indexed: Some(IndexOutput {
                chunks_created: b.chunks_created,
                chunks_updated: b.chunks_updated,
                chunks_skipped: b.chunks_skipped,
                chunks_pruned: b.chunks_pruned,
                ..IndexOutput::default()
            }),
            stale_chunks_pruned: 0,
        })
    }

    /// Register one document without chunks. Its chunks stay only when the content is the
    /// same: chunks of an older text under the new hash would never be re-chunked (ingest
    /// trusts the hash) and would answer questions with text the document no longer has.
    /// Changed content drops them; `bib_index_chunks` (or ingest) brings new ones.
    fn register_unindexed(
        &self,
        doc: bib_ingest::ParsedDoc,
        collection: &str,
        work: &Work,
    ) -> Result<RegisterOutput, ServiceError> {
        let existing = self.store.document(&doc.path)?;
        let (chunk_count, stale_chunks_pruned) = match &existing {
            Some(d) if d.content_hash == doc.content_hash => (d.chunk_count, 0),
            Some(d) => (0, u64::from(d.chunk_count)),
            None => (0, 0),
        };
        let change = DocumentChange {
            path: doc.path.clone(),
            collection: collection.to_string(),
            title: doc.title.clone(),
            metadata: doc.metadata,
            content_hash: doc.content_hash,
            chunk_count,
            upserts: Vec::new(),
            source: Some(doc.source),
        };
        work.begin_commit()?;
        let out = self.store.apply_document(&change)?;
        tracing::info!(path = %doc.path, node_id = out.node_id, created = out.document_created, "registered document");
        Ok(RegisterOutput {
            node_id: out.node_id,
            created: out.document_created,
            path: doc.path,
            title: doc.title,
            indexed: None,
            stale_chunks_pruned,
        })
    }

    /// Embed pending chunks through the writer's step ([`bib_ingest::embed_by_hash`]: vectors
    /// the store already knows by content hash are reused, the rest embedded in padded-token
    /// batches), and remember the new vectors in the store's cache.
    fn embed_pending(
        &self,
        e: &dyn Embedder,
        todo: Vec<Pending>,
    ) -> Result<Vec<ChunkWrite>, ServiceError> {
        let model = e.model_id().to_string();
        let texts: Vec<String> = todo
            .iter()
            .map(|p| format!("{}\n{}", p.prefix, p.content))
            .collect();
        let items: Vec<bib_ingest::EmbedItem<'_>> = todo
            .iter()
            .zip(&texts)
            .map(|(p, text)| bib_ingest::EmbedItem {
                group: 0,
                hash: &p.hash,
                text,
            })
            .collect();
        let opts = bib_ingest::IngestOptions::default();
        let mut got =
            bib_ingest::embed_by_hash(self.store.as_ref(), e, &opts, &items, &mut |_, _, _| {})?;
        if let Some(reason) = got.failed.remove(&0) {
            return Err(ServiceError::internal(reason));
        }
        let fresh: Vec<(String, Vec<f32>)> = (0..todo.len())
            .filter(|&i| got.fresh[i])
            .filter_map(|i| Some((todo[i].hash.clone(), got.vectors[i].clone()?)))
            .collect();
        if !fresh.is_empty() {
            if let Err(err) = self.store.cache_vectors(&model, &fresh) {
                tracing::warn!("could not cache vectors: {err}");
            }
        }
        let tk = e.tokenizer();
        Ok(todo
            .into_iter()
            .enumerate()
            .map(|(i, p)| ChunkWrite {
                chunk_index: p.index,
                tokens_estimate: estimate_tokens(&texts[i]) as u32,
                tokens_model: tk.count_tokens(&texts[i]) as u32,
                prefix: p.prefix,
                heading_path: p.heading_path,
                content: p.content,
                content_hash: p.hash,
                span_start: p.span.0,
                span_end: p.span.1,
                line_start: p.lines.0,
                line_end: p.lines.1,
                model_id: model.clone(),
                embedding: got.vectors[i].take().unwrap_or_default(),
            })
            .collect())
    }

    // ── index chunks ─────────────────────────────────────────────────────────────────

    /// Upsert chunks of registered documents by `(node_id, chunk_index)`, then prune.
    pub fn index_chunks(
        &self,
        a: IndexChunksArgs,
        presented: Option<&str>,
        work: &Work,
    ) -> Result<IndexOutput, ServiceError> {
        self.tokens
            .check_mutation(presented.or(a.token.as_deref()))?;
        let keep = index_chunks_prune(&a)?;
        let embedder = if a.chunks.is_empty() {
            None
        } else {
            Some(CancelEmbedder {
                inner: self.need_embedder("bib_index_chunks")?,
                work,
            })
        };
        let embedder = embedder.as_ref();

        let _guard = self
            .write_lock
            .lock()
            .map_err(|_| ServiceError::internal("write lock poisoned"))?;
        let docs: HashMap<i64, DocRecord> = self
            .store
            .documents()?
            .into_iter()
            .map(|d| (d.node_id, d))
            .collect();
        let by_node = chunk_arguments_by_node(&a.chunks);
        let mut out = IndexOutput::default();
        let call = IndexChunksCall {
            docs: &docs,
            keep: &keep,
            embedder,
            work,
        };
        for node in nodes_of_index_chunks(&by_node, &keep) {
            let chunks = by_node.get(&node).map(Vec::as_slice).unwrap_or(&[]);
            self.index_chunks_of_node(&call, node, chunks, &mut out)?;
        }
        tracing::info!(
            created = out.chunks_created,
            updated = out.chunks_updated,
            skipped = out.chunks_skipped,
            pruned = out.chunks_pruned,
            errors = out.errors,
            "indexed chunks"
        );
        Ok(out)
    }

    /// Index one node's chunks and apply its prune, under the caller's write lock. A node
    /// that is not a registered document, a failed embedding and a failed write are counted
    /// in `out` and the call goes on with the next node; a cancellation or a failed store
    /// read ends the whole call.
    fn index_chunks_of_node(
        &self,
        call: &IndexChunksCall<'_>,
        node: i64,
        chunks: &[&crate::args::ChunkArg],
        out: &mut IndexOutput,
    ) -> Result<(), ServiceError> {
        let Some(doc) = call.docs.get(&node) else {
            out.errors += chunks.len().max(1) as u64;
            out.error_details.push(IndexIssue {
                node_id: node,
                reason: "no such document: register it first".into(),
            });
            return Ok(());
        };
        let todo = self.pending_chunks_of_document(doc, chunks, call.embedder, out)?;
        let n_todo = todo.len() as u64;
        call.work.check()?;
        let upserts = match call.embedder {
            Some(e) if !todo.is_empty() => match self.embed_pending(e, todo) {
                Ok(w) => w,
                Err(err) => {
                    out.errors += n_todo;
                    out.error_details.push(IndexIssue {
                        node_id: node,
                        reason: err.message,
                    });
                    return Ok(());
                }
            },
            _ => Vec::new(),
        };
        let chunk_count = chunk_count_after_index_and_prune(doc, chunks, call.keep.get(&node));
        if upserts.is_empty() && chunk_count == doc.chunk_count {
            return Ok(());
        }
        let change = chunk_change_of_document(doc, chunk_count, upserts);
        self.apply_indexed_chunks(&change, node, n_todo, call.work, out)
    }

    /// The chunks of `doc` that need embedding and writing: those whose hash (of prefix and
    /// content) or model differs from the stored chunk at the same index. The others are
    /// counted as skipped in `out` and not re-embedded.
    fn pending_chunks_of_document(
        &self,
        doc: &DocRecord,
        chunks: &[&crate::args::ChunkArg],
        embedder: Option<&CancelEmbedder<'_>>,
        out: &mut IndexOutput,
    ) -> Result<Vec<Pending>, ServiceError> {
        // The stored states of this document only (`(hash, model)` by chunk index).
        let old: HashMap<u32, (String, String)> = if chunks.is_empty() {
            HashMap::new()
        } else {
            self.store
                .chunk_states_of(&doc.path)?
                .into_iter()
                .map(|s| (s.chunk_index, (s.content_hash, s.model_id)))
                .collect()
        };
        let mut todo = Vec::new();
        for c in chunks {
            let heading_path = c.heading_path.clone().unwrap_or_default();
            let prefix = doc_prefix(&doc.title, &heading_path);
            let hash = chunk_hash(&prefix, &c.content);
            let same = old.get(&c.chunk_index).is_some_and(|(h, m)| {
                *h == hash && embedder.is_some_and(|e| e.model_id() == m.as_str())
            });
            if same {
                out.chunks_skipped += 1;
                continue;
            }
            todo.push(Pending {
                index: c.chunk_index,
                prefix,
                heading_path,
                content: c.content.clone(),
                hash,
                span: (0, 0),
                lines: (0, 0),
            });
        }
        Ok(todo)
    }

    /// Write one document's chunk change past the commit gate, and count what the store did,
    /// or its failure (against the chunks that were to be written, at least one).
    fn apply_indexed_chunks(
        &self,
        change: &DocumentChange,
        node: i64,
        n_todo: u64,
        work: &Work,
        out: &mut IndexOutput,
    ) -> Result<(), ServiceError> {
        // A deadline that passes before the first write stops everything; once a write
        // started, the rest of the call runs to its end (see `crate::work`).
        work.begin_commit()?;
        match self.store.apply_document(change) {
            Ok(o) => {
                out.chunks_created += o.created as u64;
                out.chunks_updated += o.updated as u64;
                out.chunks_pruned += o.pruned as u64;
            }
            Err(err) => {
                out.errors += n_todo.max(1);
                out.error_details.push(IndexIssue {
                    node_id: node,
                    reason: format!("store: {}", bib_store::error_chain(&err)),
                });
            }
        }
        Ok(())
    }

    // ── pack ─────────────────────────────────────────────────────────────────────────

    /// Hybrid packs embed with the model `bib pack` takes by default
    /// ([`bib_app::pack::pack_model`] of `auto`: e5-small when installed): the knowledge
    /// base's own model when it is that one, else that model loaded on the first hybrid pack,
    /// else — when it cannot be loaded — the knowledge base's model.
    fn pack_embedder(&self) -> Option<&dyn Embedder> {
        self.pack_embedder
            .get_or_init(|| {
                let want = bib_app::pack::pack_model(bib_app::pack::AUTO_MODEL);
                if self.embedder.as_ref().is_some_and(|e| e.model_id() == want) {
                    return self.embedder.clone();
                }
                match bib_app::model::load_embedder(&want, &self.settings.embed) {
                    Ok(e) => Some(Arc::from(e)),
                    Err(_) => self.embedder.clone(),
                }
            })
            .as_deref()
    }

    /// Hybrid packs embed with `embedder` instead of the model [`Service::pack_embedder`]
    /// would choose (tests; a deployment that fixes its model).
    pub fn with_pack_embedder(self, embedder: Option<Arc<dyn Embedder>>) -> Self {
        let _ = self.pack_embedder.set(embedder);
        self
    }

    /// Fit a history into a token budget (spec 003 packer).
    pub fn pack(&self, a: PackArgs, work: &Work) -> Result<PackOutput, ServiceError> {
        if a.budget == 0 {
            return Err(ServiceError::invalid("budget", "must be at least 1"));
        }
        let history = bib_pack::input::history_from_value(&Value::Array(a.messages)).map_err(
            |e| match e {
                bib_pack::InputError::Message { index, reason } => {
                    ServiceError::invalid(format!("messages[{index}]"), reason)
                }
                other => ServiceError::invalid("messages", other),
            },
        )?;
        let opts = bib_pack::PackOptions::default();
        let packed = if a.hybrid.unwrap_or(false) {
            let cached = self
                .pack_embedder()
                .map(|inner| CachedEmbedder::new(CancelEmbedder { inner, work }, &self.pack_cache));
            let embedder = cached.as_ref().map(|e| e as &dyn Embedder).ok_or_else(|| {
                format!(
                    "no embedding model: {}",
                    self.model_error.as_deref().unwrap_or("not loaded")
                )
            });
            bib_pack::pack_hybrid_or_lexical(&history, a.budget, &opts, embedder)
        } else {
            bib_pack::pack(&history, a.budget, &opts)
        };
        work.check()?;
        Ok(PackOutput {
            messages: packed
                .messages
                .into_iter()
                .map(|m| PackedMessageOut {
                    role: m.role,
                    content: m.content,
                    ts: m.ts,
                })
                .collect(),
            stats: serde_json::to_value(&packed.stats)
                .map_err(|e| ServiceError::internal(e.to_string()))?,
        })
    }

    // ── reads ────────────────────────────────────────────────────────────────────────

    /// One document with its chunks.
    pub fn get_doc(&self, node_id: i64) -> Result<Value, ServiceError> {
        let doc = self
            .store
            .documents()?
            .into_iter()
            .find(|d| d.node_id == node_id)
            .ok_or_else(|| {
                ServiceError::not_found(format!("no document with node_id {node_id}"))
            })?;
        let chunks: Vec<Value> = self
            .store
            .document_chunks(&doc.path)?
            .into_iter()
            .map(|c| {
                json!({
                    "chunk_id": c.id,
                    "chunk_index": c.chunk_index,
                    "heading_path": c.heading_path,
                    "content": c.content,
                    "tokens_estimate": c.tokens_estimate,
                    "model_id": c.model_id,
                })
            })
            .collect();
        let mut v =
            serde_json::to_value(&doc).map_err(|e| ServiceError::internal(e.to_string()))?;
        v["chunks"] = Value::Array(chunks);
        Ok(v)
    }

    /// A document's text, or lines `from..=to` of it, as ingested (`bib_get`,
    /// `GET /docs/{path}`; the same lookup as `bib get`).
    pub fn get_lines(&self, a: GetArgs) -> Result<Excerpt, ServiceError> {
        if a.path.len() > MAX_PATH_BYTES {
            return Err(ServiceError::invalid(
                "path",
                format!("{} bytes, over the limit of {MAX_PATH_BYTES}", a.path.len()),
            ));
        }
        if a.path.trim().is_empty() {
            return Err(ServiceError::invalid("path", "is empty"));
        }
        let collection = match a.collection.as_deref().map(str::trim) {
            Some("") => return Err(ServiceError::invalid("collection", "is empty")),
            c => c,
        };
        let range = LineRange {
            from: a.from,
            to: a.to,
        };
        Ok(bib_store::read::get_lines(
            self.store.as_ref(),
            &a.path,
            collection,
            range,
        )?)
    }

    /// Where the knowledge base is, its collections, model and last run (`bib_status`; the
    /// same report as `bib status --json`).
    pub fn status(&self) -> Result<KbStatus, ServiceError> {
        Ok(bib_store::read::status(self.store.as_ref())?)
    }

    /// The last `limit` ingest runs, newest first.
    pub fn runs(&self, limit: usize) -> Result<Value, ServiceError> {
        if limit == 0 || limit > 1000 {
            return Err(ServiceError::invalid(
                "limit",
                format!("{limit} is not in 1..=1000"),
            ));
        }
        let runs = self.store.runs(limit)?;
        Ok(json!({ "runs": runs }))
    }

    /// Liveness and what the server serves.
    pub fn health(&self) -> Result<Value, ServiceError> {
        let stats = self.store.lexical_stats()?;
        Ok(json!({
            "status": "ok",
            "name": crate::SERVER_NAME,
            "version": crate::SERVER_VERSION,
            "store": self.store.location(),
            "chunks": stats.chunks,
            "model": self.embedder.as_ref().map(|e| e.model_id().to_string()),
            "model_error": self.model_error,
            "mutations": self.tokens.mutations_enabled(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{fake_embedder, service, TOKEN};
    use std::time::Duration;

    fn reg(path: &str, content: &str, index: bool) -> RegisterDocArgs {
        RegisterDocArgs {
            path: path.into(),
            content: Some(content.into()),
            index: Some(index),
            ..RegisterDocArgs::default()
        }
    }

    /// A request may ask for the LLM reranker; with no `[llm]` endpoint the ask still answers,
    /// in the plain order, and says why in `warnings` (empty, and left out, otherwise).
    #[test]
    fn a_request_may_ask_for_reranking_and_hears_why_it_did_not_run() {
        let (svc, _store) = service(Some(fake_embedder(Duration::ZERO)));
        let w = Work::unbounded();
        let ask = |rerank| AskArgs {
            query: "how do I clear the cache".into(),
            rerank,
            ..AskArgs::default()
        };
        let plain = svc.ask(ask(None), &w).unwrap();
        let asked = svc.ask(ask(Some(true)), &w).unwrap();
        assert!(plain.warnings.is_empty());
        assert!(
            asked.warnings.iter().any(|m| m.contains("rerank")),
            "{:?}",
            asked.warnings
        );
        let ids = |o: &AskOutput| o.results.iter().map(|h| h.chunk_id).collect::<Vec<_>>();
        assert!(!plain.results.is_empty());
        assert_eq!(ids(&plain), ids(&asked));
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get("warnings").is_none(), "{json}");
    }

    /// A session packed again (hybrid) embeds only what it has not seen: the service keeps
    /// the packs' vectors between requests.
    #[test]
    fn a_hybrid_pack_again_embeds_only_what_is_new() {
        let fake = fake_embedder(Duration::ZERO);
        let (svc, _) = service(Some(fake.clone()));
        let w = Work::unbounded();
        let mut messages: Vec<Value> = (0..40)
            .map(|i| json!({"role": "user", "content": format!("note {i}: the vault code is {i}{i}")}))
            .collect();
        messages.push(json!({"role": "user", "content": "what is the vault code?"}));
        let args = |messages: &Vec<Value>| PackArgs {
            messages: messages.clone(),
            budget: 60,
            hybrid: Some(true),
        };
        let first = svc.pack(args(&messages), &w).unwrap();
        let embedded = fake.texts_embedded();
        assert!(embedded > 40, "units, blocks and the question: {embedded}");
        let again = svc.pack(args(&messages), &w).unwrap();
        assert_eq!(fake.texts_embedded(), embedded, "nothing new to embed");
        assert_eq!(json!(again.messages), json!(first.messages));
        // One more message and another question: only those (and the blocks they shift) are new.
        messages.insert(
            40,
            json!({"role": "assistant", "content": "it is in the blue folder"}),
        );
        messages.push(json!({"role": "user", "content": "and where is it kept?"}));
        svc.pack(args(&messages), &w).unwrap();
        let new = fake.texts_embedded() - embedded;
        assert!(new > 0 && new < embedded, "{new} new of {embedded}");
    }

    /// Issue 14: `POST /docs` accepted a 100k-character path, a path without `.md` and NUL.
    #[test]
    fn hostile_paths_and_nul_bytes_are_refused_by_field() {
        let (svc, store) = service(None);
        let w = Work::unbounded();
        let long = format!("{}.md", "a".repeat(100_000));
        for (args, field) in [
            (reg(&long, "# x\n", false), "path"),
            (reg("notes.txt", "# x\n", false), "path"),
            (reg("notes", "# x\n", false), "path"),
            (reg("dir/.md", "# x\n", false), "path"),
            (reg("a\0b.md", "# x\n", false), "path"),
            (reg("ok.md", "# x\n\0binary\n", false), "content"),
            (
                RegisterDocArgs {
                    path: "ok.md".into(),
                    body: Some("a\0b".into()),
                    ..RegisterDocArgs::default()
                },
                "body",
            ),
            (
                RegisterDocArgs {
                    path: "ok.md".into(),
                    front_matter: Some(BTreeMap::from([("t".into(), json!(["x\0"]))])),
                    body: Some("b".into()),
                    ..RegisterDocArgs::default()
                },
                "front_matter",
            ),
        ] {
            let e = svc.register_doc(args, Some(TOKEN), &w).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{e:?}");
        }
        assert_eq!(store.documents().unwrap().len(), 2, "nothing written");
        let ok = svc
            .register_doc(reg("Guides/New.MD", "# New\n", false), Some(TOKEN), &w)
            .unwrap();
        assert_eq!(ok.path, "Guides/New.MD");
    }

    /// Issue 18: `bib_get` serves the registered text with the line numbers its chunks cite;
    /// `bib_status` is `bib_store::read::status`.
    #[test]
    fn get_lines_serves_the_registered_text_and_status_the_store() {
        let (svc, store) = service(Some(fake_embedder(Duration::ZERO)));
        let w = Work::unbounded();
        let text = "---\ntitle: Cache\n---\n# Cache\n\nThe cache lives in the profile.\n";
        svc.register_doc(reg("c.md", text, true), Some(TOKEN), &w)
            .unwrap();
        let chunk = store.document_chunks("c.md").unwrap().remove(0);
        let got = svc
            .get_lines(GetArgs {
                path: "c.md".into(),
                from: Some(chunk.line_start),
                to: Some(chunk.line_end),
                collection: Some("api".into()),
            })
            .unwrap();
        let expect: String = text
            .split_inclusive('\n')
            .skip(chunk.line_start as usize - 1)
            .take((chunk.line_end - chunk.line_start + 1) as usize)
            .collect();
        assert_eq!(got.content, expect);
        assert!(got.content.contains("The cache lives"), "{got:?}");
        let e = svc
            .get_lines(GetArgs {
                path: "c.md".into(),
                to: Some(99),
                ..GetArgs::default()
            })
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("to"));
        let e = svc
            .get_lines(GetArgs {
                path: "cc.md".into(),
                ..GetArgs::default()
            })
            .unwrap_err();
        assert_eq!(e.code, crate::error::ErrorCode::NotFound);
        assert!(e.message.contains("c.md"), "{e:?}");
        let st = svc.status().unwrap();
        assert_eq!(st, bib_store::read::status(store.as_ref()).unwrap());
        assert!(st.collections.iter().any(|c| c.name == "api"));
    }

    /// Issue 14: registering without `index` left the old chunks under the new hash, so the
    /// document answered with text it no longer had and ingest (which trusts the hash)
    /// never re-chunked it.
    #[test]
    fn registering_changed_content_without_index_drops_the_old_chunks() {
        let (svc, store) = service(Some(fake_embedder(Duration::ZERO)));
        let w = Work::unbounded();
        let v1 = "# Cache\n\nThe cache lives in the user profile.\n\n## Clearing\n\nRun clear.\n";
        let out = svc
            .register_doc(reg("c.md", v1, true), Some(TOKEN), &w)
            .unwrap();
        let n = out.indexed.unwrap().chunks_created;
        assert!(n > 0);
        // Same content, no index: the chunks stay.
        let same = svc
            .register_doc(reg("c.md", v1, false), Some(TOKEN), &w)
            .unwrap();
        assert_eq!(same.stale_chunks_pruned, 0);
        assert_eq!(store.document_chunks("c.md").unwrap().len() as u64, n);
        // New content, no index: no chunk of the old text survives under the new hash.
        let v2 = "# Cache\n\nThe cache moved to a shared folder.\n";
        let changed = svc
            .register_doc(reg("c.md", v2, false), Some(TOKEN), &w)
            .unwrap();
        assert_eq!(changed.stale_chunks_pruned, n);
        assert!(store.document_chunks("c.md").unwrap().is_empty());
        let d = store
            .documents()
            .unwrap()
            .into_iter()
            .find(|d| d.path == "c.md")
            .unwrap();
        assert_eq!(d.chunk_count, 0);
        assert_eq!(
            d.content_hash,
            bib_ingest::parse_text("a.md", v2.to_string())
                .unwrap()
                .content_hash
        );
        assert!(store.audit().unwrap().coherent);
    }
}
