//! `retrieve()`: hybrid search → optional trimming → token accounting (spec 000 `retrieve`).

use std::time::Instant;

use bib_embed::{EmbedKind, Embedder};
use bib_text::terms::TermConfig;
use bib_text::tokens::{estimate_tokens, TokenCounter};
use serde::{Deserialize, Serialize};

use crate::cache::EmbeddingCache;
use crate::error::RetrieveError;
use crate::filter::Filter;
use crate::fusion::{rrf_fuse, ListHit, DEFAULT_RRF_K};
use crate::index::{ChunkId, ChunkIndex, ChunkRecord, Hit};
use crate::relevance::{floor_for, term_coverage, Relevance};
use crate::rerank::RerankOptions;
use crate::signals::{exact_items, Explain, Signals};
use crate::synonyms::{Expanded, Expansion};
use crate::synth::SynthConfig;
use crate::trim::{trim_texts, TrimOptions};
use crate::typo::Correction;

/// Which lists feed the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Keywords (BM25) and vectors, combined (see `Fusion`).
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "keywords (BM25) and vectors, combined")
    )]
    Hybrid,
    /// Keywords (BM25) only; needs no embedding model.
    #[cfg_attr(
        feature = "clap",
        value(help = "keywords only; loads no embedding model")
    )]
    Bm25,
    /// Vectors (cosine similarity) only.
    #[cfg_attr(feature = "clap", value(help = "vectors (similarity) only"))]
    Vector,
}

impl Mode {
    /// The name used on the command line and in logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Hybrid => "hybrid",
            Mode::Bm25 => "bm25",
            Mode::Vector => "vector",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = RetrieveError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "hybrid" => Ok(Mode::Hybrid),
            "bm25" => Ok(Mode::Bm25),
            "vector" => Ok(Mode::Vector),
            other => Err(RetrieveError::InvalidOption {
                name: "mode".into(),
                reason: format!("`{other}` is not one of hybrid, bm25, vector"),
            }),
        }
    }
}

/// How hybrid mode combines the BM25 and vector lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// Reciprocal rank fusion (`Σ w / (k + rank)`): ranks only, robust when both lists are
    /// of comparable quality.
    #[cfg_attr(feature = "clap", value(help = "reciprocal rank fusion: ranks only"))]
    Rrf,
    /// Convex combination of normalised scores: `α · bm25 / max bm25 + (1 − α) · cosine`
    /// min-max scaled over the candidates. Keeps *how much* better a hit is, not only its
    /// place, so a weaker list nudges instead of reshuffling; on SciFact with the default
    /// model it is the only fusion above BM25 alone (BENCHMARKS.md, "Ask").
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "weighted sum of normalised scores (best measured with the default model)")
    )]
    Convex,
}

impl Fusion {
    /// The name used on the command line and in config.
    pub fn as_str(&self) -> &'static str {
        match self {
            Fusion::Rrf => "rrf",
            Fusion::Convex => "convex",
        }
    }
}

impl std::str::FromStr for Fusion {
    type Err = RetrieveError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "rrf" => Ok(Fusion::Rrf),
            "convex" => Ok(Fusion::Convex),
            other => Err(RetrieveError::InvalidOption {
                name: "fusion".into(),
                reason: format!("`{other}` is not one of rrf, convex"),
            }),
        }
    }
}

/// Default BM25 weight α of [`Fusion::Convex`], calibrated for the default model `use-m3`
/// with `bib bench scifact` (its cosines are a weak list there, so BM25 leads).
pub const DEFAULT_CONVEX_ALPHA: f64 = 0.7;

/// The same calibration for `e5-small`, whose vector list is as good as BM25 on SciFact
/// (nDCG@10 0.655 against 0.645): with the default signals α 0.5 gives 0.719 against 0.713 at
/// 0.7, and the wiki dev sets answer 79 / 83 at top-5 against 76 / 80 (BENCHMARKS.md).
pub const E5_SMALL_CONVEX_ALPHA: f64 = 0.5;

/// The convex fusion weight calibrated for the embedding model `model_id`, the one a knowledge
/// base was built with. A model not calibrated here (an OpenAI-compatible endpoint's) gets the
/// default model's; `ask.fusion_alpha` sets one explicitly.
pub fn calibrated_alpha(model_id: &str) -> f64 {
    match model_id {
        bib_embed::e5::MODEL_ID => E5_SMALL_CONVEX_ALPHA,
        _ => DEFAULT_CONVEX_ALPHA,
    }
}

/// Options of one retrieval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrieveOptions {
    /// Chunks returned.
    pub top_k: usize,
    /// Lists used.
    pub mode: Mode,
    /// Length of each list before fusion (at least `top_k`).
    pub candidates: usize,
    /// RRF constant.
    pub rrf_k: f64,
    /// How hybrid mode combines its two lists.
    #[serde(default)]
    pub fusion: Fusion,
    /// BM25 weight α in [0, 1] of convex fusion.
    #[serde(default = "default_alpha")]
    pub convex_alpha: f64,
    /// Sentence trimming; `None` returns whole chunks.
    pub trim: Option<TrimOptions>,
    /// Ranking signals added to convex fusion (and to BM25 alone): field, phrase, sentence,
    /// document ([`Signals`]).
    #[serde(default)]
    pub signals: Signals,
    /// The LLM reranker after the signals ([`crate::rerank`]); `None` (the default): off. Its
    /// endpoint is the retriever's ([`Retriever::with_llm`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank: Option<RerankOptions>,
    /// The knowledge base owner's synonym rules ([`crate::synonyms`]): what the keyword list
    /// searches besides the question's words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synonyms: Vec<String>,
}

fn default_alpha() -> f64 {
    DEFAULT_CONVEX_ALPHA
}

impl Default for RetrieveOptions {
    fn default() -> Self {
        Self {
            top_k: 5,
            mode: Mode::Hybrid,
            candidates: 50,
            rrf_k: DEFAULT_RRF_K,
            fusion: Fusion::default(),
            convex_alpha: DEFAULT_CONVEX_ALPHA,
            trim: None,
            signals: Signals::default(),
            rerank: None,
            synonyms: Vec::new(),
        }
    }
}

/// What trimming did to one chunk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrimInfo {
    /// Sentences in the chunk body.
    pub sentences_total: usize,
    /// Indices of the sentences kept.
    pub sentences_kept: Vec<usize>,
}

/// One retrieved chunk with its scores.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredChunk {
    /// The chunk as stored.
    pub chunk: ChunkRecord,
    /// What the answer shows of it: its indexed text ([`ChunkRecord::text`]: the `[Doc: …]`
    /// prefix, a newline, the Markdown), or the sentences trimming kept of it.
    pub text: String,
    /// The ranking score: the fused score plus the ranking signals (convex hybrid, and BM25
    /// with signals on, where BM25 is divided by the list's best), the RRF score with
    /// `--fusion rrf`, the list's raw score otherwise.
    pub score: f64,
    /// Raw BM25 score and rank, when the chunk was in the BM25 list.
    pub bm25: Option<ListHit>,
    /// Raw cosine and rank, when the chunk was in the vector list.
    pub vector: Option<ListHit>,
    /// Set when trimming ran.
    pub trim: Option<TrimInfo>,
    /// Every part of `score`: the lists, the fusion and each ranking signal.
    pub explain: Explain,
}

/// Milliseconds spent per stage.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Timings {
    pub embed_query_ms: f64,
    pub search_ms: f64,
    pub trim_ms: f64,
    pub total_ms: f64,
    /// The LLM reranker's request (part of `search_ms`); 0 when it did not run.
    pub rerank_ms: f64,
}

/// The outcome of [`Retriever::retrieve`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetrievalResult {
    pub query: String,
    /// The mode actually used (hybrid falls back to bm25 when no embedder is available).
    pub mode: Mode,
    /// Best first.
    pub chunks: Vec<ScoredChunk>,
    /// Spec estimate (words × 1.3) of the top-k chunks as retrieved, untrimmed: what the
    /// answer would be without trimming (results trimming dropped included).
    pub tokens_before: usize,
    /// Spec estimate of the chunks after trimming (equal to `tokens_before` without trimming).
    pub tokens_in_context: usize,
    /// Exact count with the embedding model's tokenizer, when a model is present.
    pub exact_tokens_before: Option<usize>,
    pub exact_tokens_in_context: Option<usize>,
    pub timings: Timings,
    /// Whether anything is close to the question at all ([`crate::relevance`]).
    pub relevance: Relevance,
    /// Results dropped because trimming kept none of their sentences; each slot went to the
    /// next result.
    pub trim_dropped: usize,
    /// What went wrong without failing the retrieval (the LLM reranker's failures), for people.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Words of the question searched as another word, the knowledge base not knowing them
    /// ([`crate::typo`], `typo` in the signals).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub corrections: Vec<Correction>,
    /// Phrases the keyword list searched besides the question's words, by the synonym rules
    /// ([`crate::synonyms`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub synonyms: Vec<Expansion>,
}

/// What one ask carries from step to step besides the hits: the knowledge base's term function
/// (read once, so every step analyses text alike and a store is asked once), the reranker's
/// time and warnings, and what the synonym rules added.
#[derive(Debug, Default)]
pub(crate) struct SearchNotes {
    term_config: Option<TermConfig>,
    pub(crate) rerank_ms: f64,
    pub(crate) warnings: Vec<String>,
    /// What the synonym rules added to the keyword search.
    pub(crate) synonyms: Vec<Expansion>,
}

impl SearchNotes {
    /// The term function of `index`, read on the ask's first need of it.
    pub(crate) fn term_config(
        &mut self,
        index: &dyn ChunkIndex,
    ) -> Result<TermConfig, RetrieveError> {
        match self.term_config {
            Some(cfg) => Ok(cfg),
            None => {
                let cfg = index.term_config()?;
                self.term_config = Some(cfg);
                Ok(cfg)
            }
        }
    }
}

/// The model sentences are compared with and the question's vector in its space (borrowed
/// when it is the chunks' model's vector).
pub(crate) type SentenceSpace<'a, 'q> = (&'a dyn Embedder, std::borrow::Cow<'q, [f32]>);

/// Hybrid retrieval over a [`ChunkIndex`].
pub struct Retriever<'a> {
    pub(crate) index: &'a dyn ChunkIndex,
    pub(crate) embedder: Option<&'a dyn Embedder>,
    /// The model of the sentence vectors (trimming, the sentence signal) when it is not the
    /// chunks' model: a knowledge base built with e5-small chunks and use-m3 sentences.
    pub(crate) sentence_embedder: Option<&'a dyn Embedder>,
    pub(crate) cache: &'a EmbeddingCache,
    /// The chat endpoint of the LLM reranker, when one is configured.
    pub(crate) llm: Option<&'a SynthConfig>,
}

impl std::fmt::Debug for Retriever<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retriever")
            .field("embedder", &self.embedder.map(|e| e.model_id().to_string()))
            .finish_non_exhaustive()
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

impl<'a> Retriever<'a> {
    /// A retriever over `index`. Without an embedder only BM25 works (hybrid degrades to it).
    pub fn new(
        index: &'a dyn ChunkIndex,
        embedder: Option<&'a dyn Embedder>,
        cache: &'a EmbeddingCache,
    ) -> Self {
        Self {
            index,
            embedder,
            cache,
            llm: None,
            sentence_embedder: None,
        }
    }

    /// Sentences (trimming, the sentence signal) compared in the space of `model` instead of
    /// the chunks' model: the question is embedded by it too. `None`: the chunks' model.
    pub fn with_sentence_model(mut self, model: Option<&'a dyn Embedder>) -> Self {
        self.sentence_embedder = model;
        self
    }

    /// The model sentences are embedded with and the question's vector in its space: the
    /// chunks' model and `qv`, or the sentence model and the question embedded by it (through
    /// the cache, so trimming and the sentence signal embed it once). `None` without a model
    /// or, for the chunks' model, without `qv`.
    pub(crate) fn sentence_space<'q>(
        &self,
        query: &str,
        qv: Option<&'q [f32]>,
    ) -> Result<Option<SentenceSpace<'a, 'q>>, RetrieveError> {
        match (self.sentence_embedder, self.embedder, qv) {
            (Some(s), _, _) => {
                let v = self.cache.embed(s, &[query], EmbedKind::Query)?;
                Ok(v.first().map(|v| (s, v.to_vec().into())))
            }
            (None, Some(e), Some(qv)) => Ok(Some((e, qv.into()))),
            _ => Ok(None),
        }
    }

    /// The chat endpoint the LLM reranker calls ([`RetrieveOptions::rerank`]); without one a
    /// reranked retrieval runs unreranked, with a warning.
    pub fn with_llm(mut self, llm: Option<&'a SynthConfig>) -> Self {
        self.llm = llm;
        self
    }

    /// Embed a query through the cache.
    pub fn embed_query(&self, query: &str) -> Result<Vec<f32>, RetrieveError> {
        let e = self.embedder.ok_or_else(|| RetrieveError::InvalidOption {
            name: "mode".into(),
            reason: "vector search and trimming need an embedding model".into(),
        })?;
        let v = self.cache.embed(e, &[query], EmbedKind::Query)?;
        Ok(v.first().map(|v| v.to_vec()).unwrap_or_default())
    }

    /// Ranked hits without fetching or trimming: the fused lists, re-scored by the ranking
    /// signals (and the LLM reranker, when asked; its warnings are dropped here). The query
    /// vector is computed when needed (pass it when known).
    pub fn search(
        &self,
        query: &str,
        opts: &RetrieveOptions,
        filter: &Filter,
        query_vec: Option<&[f32]>,
    ) -> Result<Vec<ScoredHit>, RetrieveError> {
        let mut notes = SearchNotes::default();
        let corrected = self.correct_typos(query, opts, &mut notes)?;
        Ok(self
            .search_lists(&corrected.query, opts, filter, query_vec, &mut notes)?
            .0)
    }

    /// [`Retriever::search`] plus the cosine of the vector list's first hit (the chunk closest
    /// to the question; `None` when no vector list ran): the relevance signal.
    fn search_lists(
        &self,
        query: &str,
        opts: &RetrieveOptions,
        filter: &Filter,
        query_vec: Option<&[f32]>,
        notes: &mut SearchNotes,
    ) -> Result<(Vec<ScoredHit>, Option<f64>), RetrieveError> {
        let mode = self.effective_mode(opts.mode);
        let n = opts.candidates.max(opts.top_k);
        let sig = opts.signals;
        let bm25 = if mode != Mode::Vector {
            let keywords = if opts.synonyms.is_empty() {
                Expanded::unchanged(query)
            } else {
                let cfg = notes.term_config(self.index)?;
                crate::synonyms::expand(query, &opts.synonyms, &cfg)?
            };
            notes.synonyms = keywords.expansions;
            self.index.bm25_top(&keywords.query, n, filter)?
        } else {
            Vec::new()
        };
        let items = if sig.phrase > 0.0 {
            exact_items(query)
        } else {
            Vec::new()
        };
        let pulled = if mode != Mode::Vector {
            self.pulled_by_exact_items(&items, &bm25, sig.exact_candidates, filter)?
        } else {
            Vec::new()
        };
        let mut qv = None;
        let vector = if mode != Mode::Bm25 {
            let v = match query_vec {
                Some(v) => v.to_vec(),
                None => self.embed_query(query)?,
            };
            let hits = self.index.vector_top(&v, n, filter)?;
            qv = Some(v);
            hits
        } else {
            Vec::new()
        };
        let best_cosine = qv.as_ref().and_then(|_| vector.first()).map(|h| h.score);
        // The signals add to scores on the [0, 1] scale: convex fusion's, or BM25 over its best.
        let signals_apply = sig.any()
            && match mode {
                Mode::Hybrid => opts.fusion == Fusion::Convex && qv.is_some(),
                Mode::Bm25 => true,
                Mode::Vector => false,
            };
        let mut fused = match (mode, opts.fusion, &qv) {
            (Mode::Hybrid, Fusion::Convex, Some(qv)) => {
                // Candidates outside the vector list need their cosine too.
                let in_vec: std::collections::HashSet<_> = vector.iter().map(|h| h.id).collect();
                let missing: Vec<_> = bm25
                    .iter()
                    .map(|h| h.id)
                    .chain(pulled.iter().copied())
                    .filter(|id| !in_vec.contains(id))
                    .collect();
                let extra: Vec<Hit> = self.index.cosines(qv, &missing)?;
                convex_scores(&bm25, &vector, &extra, &pulled, opts.convex_alpha)
            }
            (Mode::Bm25, _, _) if signals_apply => bm25_scaled(&bm25, &pulled),
            _ => rank(mode, &bm25, &vector, opts.rrf_k, usize::MAX),
        };
        if signals_apply {
            let cfg = notes.term_config(self.index)?;
            fused = self.rescore(query, opts, &cfg, fused, &items, qv.as_deref())?;
        }
        if let Some(ro) = &opts.rerank {
            let t = Instant::now();
            notes.warnings.extend(self.rerank(query, ro, &mut fused)?);
            notes.rerank_ms = ms(t);
        }
        fused.truncate(opts.top_k);
        Ok((fused, best_cosine))
    }

    /// The BM25 candidates of the question's strong exact items (quoted or identifier-like)
    /// that its own BM25 list lacks: a pasted error message shares few words with the whole
    /// question, so it brings its own page.
    fn pulled_by_exact_items(
        &self,
        items: &[crate::signals::ExactItem],
        bm25: &[Hit],
        per_item: usize,
        filter: &Filter,
    ) -> Result<Vec<ChunkId>, RetrieveError> {
        let mut pulled: Vec<ChunkId> = Vec::new();
        if per_item == 0 {
            return Ok(pulled);
        }
        let seen: std::collections::HashSet<ChunkId> = bm25.iter().map(|h| h.id).collect();
        for it in items.iter().filter(|i| i.strong) {
            for h in self.index.bm25_top(&it.text, per_item, filter)? {
                if !seen.contains(&h.id) && !pulled.contains(&h.id) {
                    pulled.push(h.id);
                }
            }
        }
        Ok(pulled)
    }

    /// The chunks of `hits`, in order (hits whose chunk vanished are skipped).
    fn fetch(&self, hits: &[ScoredHit]) -> Result<Vec<ScoredChunk>, RetrieveError> {
        let ids: Vec<_> = hits.iter().map(|h| h.id).collect();
        let records = self.index.chunks(&ids)?;
        Ok(hits
            .iter()
            .filter_map(|h| {
                let rec = records.iter().find(|r| r.id == h.id)?.clone();
                Some(ScoredChunk {
                    text: rec.text(),
                    chunk: rec,
                    score: h.score,
                    bm25: h.bm25,
                    vector: h.vector,
                    trim: None,
                    explain: h.explain.clone(),
                })
            })
            .collect())
    }

    /// Trim the ranked `hits` into at most `top_k` results. A result whose trimming keeps no
    /// sentence is dropped and its slot goes to the next hit, which is trimmed in the pool of
    /// the answer it joins (trimming's lexical top is over the whole answer), so the first
    /// round is exactly the untouched top-k trim. `trimming` is what trims: the options, the
    /// question's vector and the model, both in the sentence vectors' space.
    fn trim_filling(
        &self,
        (topts, query_vec, embedder): (&TrimOptions, &[f32], &dyn Embedder),
        query: &str,
        cfg: &TermConfig,
        hits: &[ScoredHit],
        top_k: usize,
    ) -> Result<Filled, RetrieveError> {
        let mut answer: Vec<ScoredChunk> = Vec::new();
        let mut originals: Vec<String> = Vec::new();
        let mut baseline: Vec<Untrimmed> = Vec::new();
        let (mut dropped, mut next) = (0, 0);
        while answer.len() < top_k && next < hits.len() {
            let end = (next + top_k - answer.len()).min(hits.len());
            let batch = self.fetch(&hits[next..end])?;
            if next == 0 {
                // The chunks' model: its tokenizer counts the answer's tokens.
                let model = self.embedder.map(|e| e.model_id());
                baseline = batch.iter().map(|c| Untrimmed::of(c, model)).collect();
            }
            next = end;
            let texts: Vec<&str> = originals
                .iter()
                .map(String::as_str)
                .chain(batch.iter().map(|c| c.text.as_str()))
                .collect();
            let trimmed = trim_texts(embedder, self.cache, query, query_vec, &texts, topts, cfg)?;
            let skip = answer.len();
            for (mut c, tr) in batch.into_iter().zip(trimmed.into_iter().skip(skip)) {
                if tr.kept.is_empty() && tr.total > 0 {
                    dropped += 1;
                    continue;
                }
                originals.push(std::mem::replace(&mut c.text, tr.content));
                c.trim = Some(TrimInfo {
                    sentences_total: tr.total,
                    sentences_kept: tr.kept,
                });
                answer.push(c);
            }
        }
        Ok(Filled {
            answer,
            originals,
            baseline,
            dropped,
            trimmed: true,
        })
    }

    fn effective_mode(&self, asked: Mode) -> Mode {
        if self.embedder.is_none() && asked == Mode::Hybrid {
            Mode::Bm25
        } else {
            asked
        }
    }

    /// Retrieve the `top_k` chunks for `query` under `filter`, trimming them when asked.
    /// With typo tolerance on, everything after it — both lists, the signals, the query
    /// vector, trimming — sees the corrected question; the result keeps the question as asked.
    pub fn retrieve(
        &self,
        asked: &str,
        opts: &RetrieveOptions,
        filter: &Filter,
    ) -> Result<RetrievalResult, RetrieveError> {
        let t0 = Instant::now();
        validate_retrieve_options(opts)?;
        let mut notes = SearchNotes::default();
        let corrected = self.correct_typos(asked, opts, &mut notes)?;
        let query = corrected.query.as_str();
        let mode = self.effective_mode(opts.mode);
        let mut timings = Timings::default();
        let needs_vec = mode != Mode::Bm25 || opts.trim.is_some();
        let qv = if needs_vec {
            let t = Instant::now();
            let v = self.embed_query(query)?;
            timings.embed_query_ms = ms(t);
            Some(v)
        } else {
            None
        };
        let (filled, best_cosine) =
            self.rank_and_fill(query, opts, filter, qv.as_deref(), &mut timings, &mut notes)?;
        timings.rerank_ms = notes.rerank_ms;
        let accounting = self.account_tokens(query, &filled, best_cosine, &mut notes)?;
        timings.total_ms = ms(t0);
        Ok(RetrievalResult {
            query: asked.to_string(),
            mode,
            chunks: filled.answer,
            tokens_before: accounting.tokens_before,
            tokens_in_context: accounting.tokens_in_context,
            exact_tokens_before: accounting.exact_tokens_before,
            exact_tokens_in_context: accounting.exact_tokens_in_context,
            timings,
            relevance: accounting.relevance,
            trim_dropped: filled.dropped,
            warnings: notes.warnings,
            synonyms: notes.synonyms,
            corrections: corrected.corrections,
        })
    }

    /// The question with its typos corrected against the knowledge base's words, when the
    /// signals ask for it ([`crate::typo`]).
    fn correct_typos(
        &self,
        query: &str,
        opts: &RetrieveOptions,
        notes: &mut SearchNotes,
    ) -> Result<crate::typo::Corrected, RetrieveError> {
        // Without a model there is no vocabulary to tell a typo from a rare word: no change.
        let embedder = match self.embedder {
            Some(e) if opts.signals.typo > 0 => e,
            _ => return Ok(crate::typo::Corrected::unchanged(query)),
        };
        let cfg = notes.term_config(self.index)?;
        correct_typos_in(self.index, embedder, &cfg, query)
    }

    /// Rank the lists and fill the answer: the top-k as they are, or — when trimming runs —
    /// trimmed, ranking some more results in case trimming drops some (their chunks are
    /// fetched only if needed). Also the best cosine of the vector list (the relevance
    /// floor's input). Records the search and trimming times.
    fn rank_and_fill(
        &self,
        query: &str,
        opts: &RetrieveOptions,
        filter: &Filter,
        qv: Option<&[f32]>,
        timings: &mut Timings,
        notes: &mut SearchNotes,
    ) -> Result<(Filled, Option<f64>), RetrieveError> {
        let t = Instant::now();
        let sentence_space = match &opts.trim {
            Some(_) => self.sentence_space(query, qv)?,
            None => None,
        };
        let trimming = match (&opts.trim, &sentence_space) {
            (Some(topts), Some((e, sqv))) => Some((topts, sqv.as_ref(), *e)),
            _ => None,
        };
        let ranked = RetrieveOptions {
            top_k: if trimming.is_some() {
                (opts.top_k * 3).min(opts.candidates.max(opts.top_k))
            } else {
                opts.top_k
            },
            ..opts.clone()
        };
        let (hits, best_cosine) = self.search_lists(query, &ranked, filter, qv, notes)?;
        let filled = match trimming {
            None => {
                let answer = self.fetch(&hits)?;
                let originals: Vec<String> = answer.iter().map(|c| c.text.clone()).collect();
                let model = self.embedder.map(|e| e.model_id());
                let baseline = answer.iter().map(|c| Untrimmed::of(c, model)).collect();
                timings.search_ms = ms(t);
                Filled {
                    answer,
                    baseline,
                    originals,
                    dropped: 0,
                    trimmed: false,
                }
            }
            Some(trimming) => {
                timings.search_ms = ms(t);
                let t = Instant::now();
                let cfg = notes.term_config(self.index)?;
                let filled = self.trim_filling(trimming, query, &cfg, &hits, opts.top_k)?;
                timings.trim_ms = ms(t);
                filled
            }
        };
        Ok((filled, best_cosine))
    }

    /// The answer's token counts (estimated, and exact with the model's tokenizer) before and
    /// after trimming, and whether it is relevant at all.
    fn account_tokens(
        &self,
        query: &str,
        filled: &Filled,
        best_cosine: Option<f64>,
        notes: &mut SearchNotes,
    ) -> Result<TokenAccounting, RetrieveError> {
        let Filled {
            answer: chunks,
            originals,
            baseline,
            trimmed,
            ..
        } = filled;
        let tokenizer = self.embedder.map(|e| e.tokenizer());
        // Before = the untrimmed top-k, what the answer would be without trimming.
        let tokens_before = baseline.iter().map(|c| c.estimate).sum();
        let exact_tokens_before =
            tokenizer.map(|tk| baseline.iter().map(|c| c.exact_tokens(tk)).sum());
        let floor = self.embedder.and_then(|e| floor_for(e.model_id()));
        let texts: Vec<&str> = originals.iter().map(String::as_str).collect();
        let coverage = if Relevance::needs_words(best_cosine, floor) {
            Some(term_coverage(
                query,
                &texts,
                &notes.term_config(self.index)?,
            ))
        } else {
            None
        };
        let relevance = Relevance::judge(best_cosine, floor, coverage, chunks.len());
        let tokens_in_context = chunks.iter().map(|c| estimate_tokens(&c.text)).sum();
        // Untrimmed, the context is the baseline: its tokens are counted once.
        let exact_tokens_in_context = if *trimmed {
            tokenizer.map(|tk| chunks.iter().map(|c| tk.count_tokens(&c.text)).sum())
        } else {
            exact_tokens_before
        };
        Ok(TokenAccounting {
            tokens_before,
            tokens_in_context,
            exact_tokens_before,
            exact_tokens_in_context,
            relevance,
        })
    }
}

/// The options [`Retriever::retrieve`] refuses, each error naming its option.
fn validate_retrieve_options(opts: &RetrieveOptions) -> Result<(), RetrieveError> {
    if opts.top_k == 0 {
        return Err(RetrieveError::InvalidOption {
            name: "top_k".into(),
            reason: "must be at least 1".into(),
        });
    }
    if !opts.rrf_k.is_finite() || opts.rrf_k < 0.0 {
        return Err(RetrieveError::InvalidOption {
            name: "rrf_k".into(),
            reason: format!("{} must be a non-negative number", opts.rrf_k),
        });
    }
    if !opts.convex_alpha.is_finite() || !(0.0..=1.0).contains(&opts.convex_alpha) {
        return Err(RetrieveError::InvalidOption {
            name: "fusion_alpha".into(),
            reason: format!("{} is not a weight in [0, 1]", opts.convex_alpha),
        });
    }
    if let Some(t) = &opts.trim {
        t.validate()?;
    }
    if let Some(r) = &opts.rerank {
        r.validate()?;
    }
    crate::synonyms::validate(&opts.synonyms)
}

/// What [`Retriever::account_tokens`] counts of an answer.
struct TokenAccounting {
    tokens_before: usize,
    tokens_in_context: usize,
    exact_tokens_before: Option<usize>,
    exact_tokens_in_context: Option<usize>,
    relevance: Relevance,
}

/// One result as the store holds it: its text, its token estimate and, when the store's count
/// is of this text with this model's tokenizer, that count.
struct Untrimmed {
    text: String,
    estimate: usize,
    model_tokens: Option<usize>,
}

impl Untrimmed {
    /// `c` before trimming. Ingest stores each chunk's exact token count of its indexed text
    /// (`tokens_model`, next to `tokens_estimate` of the same text); reusing it saves a
    /// tokenizer pass over every result of every ask — a sixth of a server's CPU.
    fn of(c: &ScoredChunk, model_id: Option<&str>) -> Self {
        let estimate = estimate_tokens(&c.text);
        let counted_here = c.chunk.tokens_model > 0
            && model_id == Some(c.chunk.model_id.as_str())
            && c.chunk.tokens_estimate as usize == estimate;
        Untrimmed {
            text: c.text.clone(),
            estimate,
            model_tokens: counted_here.then_some(c.chunk.tokens_model as usize),
        }
    }

    fn exact_tokens(&self, tokenizer: &dyn TokenCounter) -> usize {
        self.model_tokens
            .unwrap_or_else(|| tokenizer.count_tokens(&self.text))
    }
}

/// What [`Retriever::retrieve`] answers before token accounting.
struct Filled {
    /// The results, trimmed when trimming ran.
    answer: Vec<ScoredChunk>,
    /// The untrimmed text of each result.
    originals: Vec<String>,
    /// The plain top-k, untrimmed (what the answer would be without trimming):
    /// `tokens_before` counts it.
    baseline: Vec<Untrimmed>,
    /// Results dropped because trimming kept nothing of them.
    dropped: usize,
    /// Whether trimming ran (the results' texts are then what it kept).
    trimmed: bool,
}

/// A ranked hit before fetching: id, ranking score, its place in each list, and every part
/// of its score.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredHit {
    pub id: crate::index::ChunkId,
    pub score: f64,
    pub bm25: Option<ListHit>,
    pub vector: Option<ListHit>,
    pub explain: Explain,
}

impl ScoredHit {
    /// A hit whose explanation is only its lists and fused score.
    pub fn new(
        id: ChunkId,
        score: f64,
        bm25: Option<ListHit>,
        vector: Option<ListHit>,
        fusion: &str,
    ) -> Self {
        Self {
            id,
            score,
            bm25,
            vector,
            explain: Explain {
                fusion: fusion.to_string(),
                bm25: bm25.map(|l| l.score),
                cosine: vector.map(|l| l.score),
                fused: score,
                final_score: score,
                ..Explain::default()
            },
        }
    }
}

/// `query` with its typos corrected against `index`'s words under the term function `cfg`,
/// `embedder`'s tokenizer telling a typo from a word ([`crate::typo::correct`]): what `ask`
/// does before anything else, and what `bib eval` asks of each unknown word.
pub fn correct_typos_in(
    index: &dyn ChunkIndex,
    embedder: &dyn Embedder,
    cfg: &TermConfig,
    query: &str,
) -> Result<crate::typo::Corrected, RetrieveError> {
    let tokenizer = embedder.tokenizer();
    crate::typo::correct(
        query,
        cfg,
        |w| tokenizer.count_tokens(w),
        |terms| index.doc_freqs(terms).map(|(_, dfs)| dfs),
    )
}

/// Convex fusion of a BM25 list and a vector list (each best first): every candidate scores
/// `alpha · bm25 / max bm25 + (1 − alpha) · (cos − min cos) / (max cos − min cos)`, where a
/// candidate absent from the BM25 list scores 0 on it, and `extra_cosine` gives the cosine of
/// BM25-only candidates (one absent there too gets the lowest cosine). Ties by id. Each hit keeps
/// its raw score and rank in the lists it came from.
pub fn convex_fuse(
    bm25: &[Hit],
    vector: &[Hit],
    extra_cosine: &[Hit],
    alpha: f64,
    top_k: usize,
) -> Vec<ScoredHit> {
    let mut out = convex_scores(bm25, vector, extra_cosine, &[], alpha);
    out.truncate(top_k);
    out
}

/// [`convex_fuse`] over every candidate, uncut, with `pool` ids (in neither list, e.g. pulled
/// in by an exact item of the question) as candidates scoring 0 on BM25.
pub fn convex_scores(
    bm25: &[Hit],
    vector: &[Hit],
    extra_cosine: &[Hit],
    pool: &[ChunkId],
    alpha: f64,
) -> Vec<ScoredHit> {
    use std::collections::HashMap;
    let mut by_id: HashMap<ChunkId, (Option<ListHit>, Option<ListHit>)> = HashMap::new();
    let mut cos: HashMap<ChunkId, f64> = HashMap::new();
    for (i, h) in bm25.iter().enumerate() {
        by_id.entry(h.id).or_insert((
            Some(ListHit {
                score: h.score,
                rank: i + 1,
            }),
            None,
        ));
    }
    for (i, h) in vector.iter().enumerate() {
        let e = by_id.entry(h.id).or_insert((None, None));
        if e.1.is_none() {
            e.1 = Some(ListHit {
                score: h.score,
                rank: i + 1,
            });
            cos.insert(h.id, h.score);
        }
    }
    for id in pool {
        by_id.entry(*id).or_insert((None, None));
    }
    for h in extra_cosine {
        cos.entry(h.id).or_insert(h.score);
    }
    let bmax = bm25.iter().map(|h| h.score).fold(0.0, f64::max);
    let cmin = cos.values().copied().fold(f64::INFINITY, f64::min);
    let cmax = cos.values().copied().fold(f64::NEG_INFINITY, f64::max);
    let span = cmax - cmin;
    let mut out: Vec<ScoredHit> = by_id
        .into_iter()
        .map(|(id, (bl, vl))| {
            let b = match (bl, bmax > 0.0) {
                (Some(l), true) => l.score / bmax,
                _ => 0.0,
            };
            let raw_cos = cos.get(&id).copied();
            let c = match raw_cos {
                Some(c) if span > 0.0 => (c - cmin) / span,
                Some(_) => 1.0,
                None => 0.0,
            };
            let score = alpha * b + (1.0 - alpha) * c;
            let mut h = ScoredHit::new(id, score, bl, vl, "convex");
            h.explain.bm25_norm = Some(b);
            h.explain.cosine = raw_cos;
            h.explain.cosine_norm = Some(c);
            h.explain.alpha = Some(alpha);
            h
        })
        .collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    out
}

/// BM25 alone on the scale the signals add to: each score divided by the list's best, with
/// `pool` ids as candidates scoring 0.
fn bm25_scaled(bm25: &[Hit], pool: &[ChunkId]) -> Vec<ScoredHit> {
    let bmax = bm25.iter().map(|h| h.score).fold(0.0, f64::max);
    let mut out: Vec<ScoredHit> = bm25
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let b = if bmax > 0.0 { h.score / bmax } else { 0.0 };
            let l = ListHit {
                score: h.score,
                rank: i + 1,
            };
            let mut s = ScoredHit::new(h.id, b, Some(l), None, "bm25");
            s.explain.bm25_norm = Some(b);
            s
        })
        .collect();
    out.extend(
        pool.iter()
            .map(|&id| ScoredHit::new(id, 0.0, None, None, "bm25")),
    );
    out
}

/// Combine the lists for `mode` (hybrid: by RRF) and keep `top_k`.
pub fn rank(mode: Mode, bm25: &[Hit], vector: &[Hit], rrf_k: f64, top_k: usize) -> Vec<ScoredHit> {
    let single = |list: &[Hit], is_bm25: bool| -> Vec<ScoredHit> {
        list.iter()
            .take(top_k)
            .enumerate()
            .map(|(i, h)| {
                let lh = Some(ListHit {
                    score: h.score,
                    rank: i + 1,
                });
                if is_bm25 {
                    ScoredHit::new(h.id, h.score, lh, None, "bm25")
                } else {
                    ScoredHit::new(h.id, h.score, None, lh, "vector")
                }
            })
            .collect()
    };
    match mode {
        Mode::Bm25 => single(bm25, true),
        Mode::Vector => single(vector, false),
        Mode::Hybrid => rrf_fuse(&[bm25.to_vec(), vector.to_vec()], rrf_k)
            .into_iter()
            .take(top_k)
            .map(|f| ScoredHit::new(f.id, f.score, f.lists[0], f.lists[1], "rrf"))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::tests::{bag_of_words, bag_of_words_vector, FakeEmbedder};
    use crate::index::MemoryIndex;
    use serde_json::json;

    /// A result's exact token count comes from the store when the store counted this very
    /// text with this model, and from the tokenizer otherwise.
    #[test]
    fn stored_token_counts_are_used_only_for_the_text_they_count() {
        let text = "[Doc: A]\nThe cat sleeps all day.";
        let chunk = ChunkRecord {
            model_id: "m".into(),
            tokens_model: 1234,
            tokens_estimate: estimate_tokens(text) as u32,
            ..ChunkRecord::default()
        };
        let scored = |text: &str, chunk: ChunkRecord| ScoredChunk {
            chunk,
            text: text.into(),
            score: 0.0,
            bm25: None,
            vector: None,
            trim: None,
            explain: Explain::default(),
        };
        let counter = bib_text::tokens::EstimateCounter;
        let c = scored(text, chunk.clone());
        assert_eq!(Untrimmed::of(&c, Some("m")).exact_tokens(&counter), 1234);
        let counted = counter.count_tokens(text);
        assert_eq!(
            Untrimmed::of(&c, Some("other")).exact_tokens(&counter),
            counted
        );
        assert_eq!(Untrimmed::of(&c, None).exact_tokens(&counter), counted);
        let other_text = scored(
            "[Doc: A]\nSomething else, and longer than that.",
            chunk.clone(),
        );
        assert_ne!(
            Untrimmed::of(&other_text, Some("m")).exact_tokens(&counter),
            1234
        );
        let unknown = scored(
            text,
            ChunkRecord {
                tokens_model: 0,
                ..chunk
            },
        );
        assert_eq!(
            Untrimmed::of(&unknown, Some("m")).exact_tokens(&counter),
            counted
        );
    }

    fn index(e: &FakeEmbedder) -> MemoryIndex {
        let docs = [
            (
                "a.md",
                "[Doc: A]\nThe cat sleeps all day. Dogs bark at night.",
                json!({"app": "pets"}),
            ),
            (
                "b.md",
                "[Doc: B]\nDiesel engines burn fuel. The cat is not an engine.",
                json!({"app": "cars"}),
            ),
            (
                "c.md",
                "[Doc: C]\nFelines and kittens nap. A cat naps.",
                json!({"app": "pets"}),
            ),
            ("d.md", "[Doc: D]\nNothing related here at all.", json!({})),
        ];
        let mut ix = MemoryIndex::new();
        for (i, (p, c, m)) in docs.into_iter().enumerate() {
            let v = e.embed(&[c], EmbedKind::Passage).unwrap().remove(0);
            ix.add(
                ChunkRecord {
                    id: i as i64 + 1,
                    path: p.into(),
                    chunk_index: 0,
                    title: p.into(),
                    heading_path: vec![],
                    content: c.into(),
                    metadata: m,
                    ..Default::default()
                },
                Some(v),
            )
            .unwrap();
        }
        ix
    }

    #[test]
    fn modes_and_scores() {
        let e = bag_of_words();
        let ix = index(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        let runs = [
            (Mode::Hybrid, Fusion::Rrf),
            (Mode::Hybrid, Fusion::Convex),
            (Mode::Bm25, Fusion::default()),
            (Mode::Vector, Fusion::default()),
        ];
        for (mode, fusion) in runs {
            let opts = RetrieveOptions {
                top_k: 2,
                mode,
                fusion,
                ..Default::default()
            };
            let res = r.retrieve("cat naps", &opts, &Filter::default()).unwrap();
            assert_eq!(res.mode, mode);
            assert!(res.chunks.len() <= 2 && !res.chunks.is_empty());
            assert!(res.chunks.windows(2).all(|w| w[0].score >= w[1].score));
            assert_eq!(res.tokens_before, res.tokens_in_context);
            assert!(res.exact_tokens_before.is_some());
            let c0 = &res.chunks[0];
            match mode {
                Mode::Bm25 => assert!(c0.bm25.is_some() && c0.vector.is_none()),
                Mode::Vector => assert!(c0.vector.is_some() && c0.bm25.is_none()),
                Mode::Hybrid if fusion == Fusion::Rrf => {
                    let expect: f64 = [c0.bm25, c0.vector]
                        .iter()
                        .flatten()
                        .map(|l| 1.0 / (60.0 + l.rank as f64))
                        .sum();
                    assert!((c0.score - expect).abs() < 1e-12);
                }
                Mode::Hybrid => {
                    // First in both lists: 1 on both normalised scales, before the signals.
                    assert_eq!(c0.bm25.map(|l| l.rank), Some(1));
                    assert_eq!(c0.vector.map(|l| l.rank), Some(1));
                    assert!((c0.explain.fused - 1.0).abs() < 1e-12, "{:?}", c0.explain);
                }
            }
            assert_eq!(res.chunks[0].chunk.path, "c.md", "{mode}");
        }
    }

    /// An index that counts how often its term function is read.
    struct CountingTerms<'a> {
        inner: &'a MemoryIndex,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl ChunkIndex for CountingTerms<'_> {
        fn bm25_top(&self, q: &str, limit: usize, f: &Filter) -> Result<Vec<Hit>, RetrieveError> {
            self.inner.bm25_top(q, limit, f)
        }
        fn vector_top(
            &self,
            v: &[f32],
            limit: usize,
            f: &Filter,
        ) -> Result<Vec<Hit>, RetrieveError> {
            self.inner.vector_top(v, limit, f)
        }
        fn chunks(&self, ids: &[ChunkId]) -> Result<Vec<ChunkRecord>, RetrieveError> {
            self.inner.chunks(ids)
        }
        fn vectors(&self, ids: &[ChunkId]) -> Result<Vec<(ChunkId, Vec<f32>)>, RetrieveError> {
            self.inner.vectors(ids)
        }
        fn term_config(&self) -> Result<TermConfig, RetrieveError> {
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.term_config()
        }
        fn doc_freqs(&self, terms: &[String]) -> Result<(usize, Vec<usize>), RetrieveError> {
            self.inner.doc_freqs(terms)
        }
    }

    /// One ask reads the knowledge base's term function once, however many of its steps
    /// analyse text (typos, synonyms, the signals, trimming, the relevance check): each read
    /// is a query to the store, and every step must analyse alike.
    #[test]
    fn one_ask_reads_the_term_function_once() {
        let e = bag_of_words();
        let ix = index(&e);
        let counting = CountingTerms {
            inner: &ix,
            reads: Default::default(),
        };
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&counting, Some(&e), &cache);
        let opts = RetrieveOptions {
            top_k: 2,
            trim: Some(TrimOptions::default()),
            synonyms: vec!["motor => engine".into()],
            ..Default::default()
        };
        let res = r
            .retrieve("motor felines nap", &opts, &Filter::default())
            .unwrap();
        assert!(!res.chunks.is_empty() && !res.synonyms.is_empty());
        assert_eq!(counting.reads.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    /// Architecture invariant: the first results do not depend on how many are asked for
    /// (up to the candidate lists' length): `-k 5` is the start of `-k 40`.
    #[test]
    fn the_first_results_do_not_depend_on_top_k() {
        let e = bag_of_words();
        let words = [
            "cat", "naps", "engine", "kitten", "fuel", "sleeps", "feline", "diesel",
        ];
        let mut ix = MemoryIndex::new();
        for i in 0..60usize {
            // Each chunk mixes a few of the words, some repeated, so scores spread out.
            let text: Vec<&str> = (0..3 + i % 5)
                .map(|j| words[(i * 7 + j * (i % 3 + 1)) % words.len()])
                .collect();
            let content = format!("[Doc: D{i}]\n{}.", text.join(" "));
            let v = e.embed(&[&content], EmbedKind::Passage).unwrap().remove(0);
            ix.add(
                ChunkRecord {
                    id: i as i64 + 1,
                    path: format!("d{i}.md"),
                    title: format!("D{i}"),
                    content,
                    ..Default::default()
                },
                Some(v),
            )
            .unwrap();
        }
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        for depth in [3, 30] {
            let ids = |top_k: usize| -> Vec<i64> {
                let opts = RetrieveOptions {
                    top_k,
                    signals: Signals {
                        depth,
                        ..Signals::default()
                    },
                    ..Default::default()
                };
                let res = r
                    .retrieve("cat naps kitten", &opts, &Filter::default())
                    .unwrap();
                res.chunks.iter().map(|c| c.chunk.id).collect()
            };
            let all = ids(40);
            assert_eq!(all.len(), 40);
            for k in [1, 2, 3, 4, 5, 8, 20, 31] {
                assert_eq!(ids(k), all[..k], "depth {depth}, top {k}");
            }
        }
    }

    fn hits(v: &[(i64, f64)]) -> Vec<Hit> {
        v.iter().map(|&(id, score)| Hit { id, score }).collect()
    }

    #[test]
    fn convex_fusion_table() {
        // BM25: 1 (10), 2 (5). Vector: 3 (0.9), 1 (0.5). Cosine of BM25-only 2: 0.1.
        // cos scaled over {0.9, 0.5, 0.1}: 3 → 1, 1 → 0.5, 2 → 0.
        let bm = hits(&[(1, 10.0), (2, 5.0)]);
        let ve = hits(&[(3, 0.9), (1, 0.5)]);
        let extra = hits(&[(2, 0.1)]);
        // (alpha, expected order, expected score of id 1)
        let cases: &[(f64, &[i64], f64)] = &[
            (0.5, &[1, 3, 2], 0.5 * 1.0 + 0.5 * 0.5),
            (1.0, &[1, 2, 3], 1.0),
            (0.0, &[3, 1, 2], 0.5),
            (0.2, &[3, 1, 2], 0.2 + 0.8 * 0.5),
        ];
        for &(alpha, order, s1) in cases {
            let f = convex_fuse(&bm, &ve, &extra, alpha, 10);
            let ids: Vec<i64> = f.iter().map(|h| h.id).collect();
            assert_eq!(ids, order, "alpha {alpha}");
            let h1 = f.iter().find(|h| h.id == 1).unwrap();
            assert!((h1.score - s1).abs() < 1e-12, "alpha {alpha}: {}", h1.score);
            assert_eq!(h1.bm25.map(|l| l.rank), Some(1));
            assert_eq!(h1.vector.map(|l| l.rank), Some(2));
        }
        // top_k cuts; a BM25-only hit keeps no vector list entry.
        let f = convex_fuse(&bm, &ve, &extra, 1.0, 2);
        assert_eq!(f.len(), 2);
        assert!(f[1].vector.is_none());
        // No BM25 hits at all: pure scaled cosine.
        let f = convex_fuse(&[], &ve, &[], 0.7, 10);
        assert_eq!(f.iter().map(|h| h.id).collect::<Vec<_>>(), vec![3, 1]);
        assert!((f[0].score - 0.3).abs() < 1e-12);
    }

    #[test]
    fn bad_fusion_alpha_is_refused_naming_the_field() {
        let e = bag_of_words();
        let ix = index(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        let opts = RetrieveOptions {
            convex_alpha: 1.5,
            ..Default::default()
        };
        let err = r.retrieve("cat", &opts, &Filter::default()).unwrap_err();
        assert!(err.to_string().contains("fusion_alpha"), "{err}");
        assert!("nope".parse::<Fusion>().is_err());
        assert_eq!("RRF".parse::<Fusion>().unwrap(), Fusion::Rrf);
    }

    #[test]
    fn synonym_rules_widen_the_keyword_search_and_say_so() {
        let e = bag_of_words();
        let ix = index(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, None, &cache);
        let opts = |rules: &[&str]| RetrieveOptions {
            mode: Mode::Bm25,
            synonyms: rules.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let ask = |rules: &[&str]| r.retrieve("motor", &opts(rules), &Filter::default());
        // No page says "motor": nothing without a rule.
        let plain = ask(&[]).unwrap();
        assert!(plain.chunks.is_empty() && plain.synonyms.is_empty());
        // The owner's rule: a question about motors searches "engines" too.
        let got = ask(&["motor, motors => engine"]).unwrap();
        assert_eq!(got.chunks[0].chunk.path, "b.md");
        assert_eq!(got.query, "motor", "the answer names the question as asked");
        assert_eq!(got.synonyms[0].matched, "motor");
        assert_eq!(got.synonyms[0].added, ["engine"]);
        // A rule that cannot be read is refused, naming the option.
        let err = ask(&["motor =>"]).unwrap_err().to_string();
        assert!(err.contains("synonyms") && err.contains("rule 1"), "{err}");
    }

    #[test]
    fn filter_before_cut_and_no_embedder_fallback() {
        let e = bag_of_words();
        let ix = index(&e);
        let cache = EmbeddingCache::default();
        let f = Filter::parse(&["app=cars"]).unwrap();
        let r = Retriever::new(&ix, Some(&e), &cache);
        let opts = RetrieveOptions {
            top_k: 1,
            ..Default::default()
        };
        let res = r.retrieve("cat naps", &opts, &f).unwrap();
        assert_eq!(res.chunks.len(), 1);
        assert_eq!(res.chunks[0].chunk.path, "b.md");

        let r0 = Retriever::new(&ix, None, &cache);
        let res = r0
            .retrieve("cat naps", &RetrieveOptions::default(), &Filter::default())
            .unwrap();
        assert_eq!(res.mode, Mode::Bm25);
        assert!(res.exact_tokens_before.is_none());
        let vec_opts = RetrieveOptions {
            mode: Mode::Vector,
            ..Default::default()
        };
        assert!(r0.retrieve("cat", &vec_opts, &Filter::default()).is_err());
        let bad = RetrieveOptions {
            top_k: 0,
            ..Default::default()
        };
        assert!(r.retrieve("cat", &bad, &Filter::default()).is_err());
    }

    /// A model that puts every text at the same point: every sentence matches every question.
    fn same_point() -> FakeEmbedder {
        FakeEmbedder::new("fake-same-point", 4, |_, _| vec![0.5; 4])
    }

    /// With a sentence model, the chunks are ranked by the chunks' model and trimmed in the
    /// sentence model's space, the question embedded by each; the chunks' model embeds no
    /// sentence.
    #[test]
    fn a_sentence_model_trims_in_its_own_space() {
        let e = bag_of_words();
        let ix = index(&e);
        let chunk_texts = e.texts_embedded();
        let same = same_point();
        let cache = EmbeddingCache::default();
        let opts = |trim| RetrieveOptions {
            top_k: 3,
            mode: Mode::Vector,
            trim,
            ..Default::default()
        };
        // Only sentences at cosine ≥ 0.55 to the question survive (under the chunks' model,
        // only those about cats).
        let strict = TrimOptions {
            threshold: 0.55,
            min_sentences: 0,
            lexical_top: 0,
            window: 0,
            ..TrimOptions::default()
        };
        let split = Retriever::new(&ix, Some(&e), &cache).with_sentence_model(Some(&same));
        let untrimmed = split
            .retrieve("cat", &opts(None), &Filter::default())
            .unwrap();
        let res = split
            .retrieve("cat", &opts(Some(strict)), &Filter::default())
            .unwrap();
        let paths = |r: &RetrievalResult| -> Vec<String> {
            r.chunks.iter().map(|c| c.chunk.path.clone()).collect()
        };
        assert_eq!(res.chunks.len(), 3);
        assert_eq!(paths(&res), paths(&untrimmed), "the chunks' model ranks");
        for c in &res.chunks {
            let t = c.trim.as_ref().expect("trimmed");
            assert_eq!(
                t.sentences_kept.len(),
                t.sentences_total,
                "{}",
                c.chunk.path
            );
        }
        assert_eq!(
            e.texts_embedded() - chunk_texts,
            1,
            "the chunks' model embeds the question only"
        );
        assert!(same.texts_embedded() > 1);
        // Without the sentence model the same trimming keeps fewer sentences.
        let own = Retriever::new(&ix, Some(&e), &cache)
            .retrieve("cat", &opts(Some(strict)), &Filter::default())
            .unwrap();
        let kept = |r: &RetrievalResult| -> usize {
            r.chunks
                .iter()
                .filter_map(|c| c.trim.as_ref())
                .map(|t| t.sentences_kept.len())
                .sum()
        };
        let total = |r: &RetrievalResult| -> usize {
            r.chunks
                .iter()
                .filter_map(|c| c.trim.as_ref())
                .map(|t| t.sentences_total)
                .sum()
        };
        assert!(
            kept(&own) < total(&own),
            "the chunks' model drops sentences"
        );
    }

    /// A result whose trimming keeps nothing gives its slot to the next result, which joins
    /// the answer trimmed; the relevance of the answer is the vector list's best cosine.
    #[test]
    fn empty_trims_give_their_slot_to_the_next_result() {
        let e = bag_of_words();
        let mut ix = index(&e);
        // A chunk whose vector is far from "cat" (it ranks below a.md and b.md), but one short
        // sentence of it is all about cats.
        let c = "[Doc: E]\nWeather reports mention rain. My cat.";
        let (q, w) = (bag_of_words_vector("cat"), bag_of_words_vector("zebra"));
        let mixed: Vec<f32> = q.iter().zip(&w).map(|(q, w)| 0.2 * q + w).collect();
        let v = bib_text::vectors::unit(&mixed);
        let rec = ChunkRecord {
            id: 5,
            path: "e.md".into(),
            chunk_index: 0,
            title: "e.md".into(),
            heading_path: vec![],
            content: c.into(),
            metadata: json!({}),
            ..Default::default()
        };
        ix.add(rec, Some(v)).unwrap();
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        let vector = |top_k, trim| RetrieveOptions {
            top_k,
            mode: Mode::Vector,
            trim,
            ..Default::default()
        };
        let order: Vec<String> = r
            .retrieve("cat", &vector(5, None), &Filter::default())
            .unwrap()
            .chunks
            .iter()
            .map(|c| c.chunk.path.clone())
            .collect();
        let e_at = order.iter().position(|p| p == "e.md").unwrap();
        assert!(e_at >= 2, "e.md must rank below the first two: {order:?}");
        // Only sentences at cosine ≥ 0.55 survive: "A cat naps." (c.md) and "My cat." (e.md).
        let strict = TrimOptions {
            threshold: 0.55,
            min_sentences: 0,
            lexical_top: 0,
            ..TrimOptions::default()
        };
        let res = r
            .retrieve("cat", &vector(2, Some(strict)), &Filter::default())
            .unwrap();
        let paths: Vec<&str> = res.chunks.iter().map(|c| c.chunk.path.as_str()).collect();
        assert_eq!(paths, ["c.md", "e.md"], "ranked {order:?}");
        assert_eq!(
            res.trim_dropped,
            e_at - 1,
            "everything between c.md and e.md"
        );
        assert!(res.chunks.iter().all(|c| c
            .trim
            .as_ref()
            .is_some_and(|t| !t.sentences_kept.is_empty())));
        assert!(res.chunks[1].text.ends_with("My cat."), "trimmed in");
        // Tokens before count the untrimmed top-k (c.md and a.md), what trimming is
        // measured against.
        let plain = r
            .retrieve("cat", &vector(2, None), &Filter::default())
            .unwrap();
        assert_eq!(res.tokens_before, plain.tokens_in_context);
        let best = res.relevance.best_cosine.unwrap();
        let top = r
            .retrieve("cat", &vector(1, None), &Filter::default())
            .unwrap();
        assert_eq!(Some(best), top.chunks[0].vector.map(|h| h.score));
        // The fake model has no calibrated floor: nothing is judged "no good match".
        assert_eq!(res.relevance.floor, None);
        assert!(!res.relevance.no_good_match);
    }

    #[test]
    fn trimming_reduces_tokens_and_keeps_metadata() {
        let e = bag_of_words();
        let ix = index(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        let plain = r
            .retrieve("cat", &RetrieveOptions::default(), &Filter::default())
            .unwrap();
        let opts = RetrieveOptions {
            trim: Some(TrimOptions::default()),
            ..Default::default()
        };
        let res = r.retrieve("cat", &opts, &Filter::default()).unwrap();
        assert!(res.tokens_in_context <= res.tokens_before);
        assert_eq!(res.tokens_before, plain.tokens_in_context);
        for (a, b) in res.chunks.iter().zip(&plain.chunks) {
            assert_eq!(a.chunk.id, b.chunk.id);
            assert_eq!(a.score, b.score);
            assert_eq!(a.chunk.path, b.chunk.path);
            assert!(a.trim.is_some());
        }
    }
}
