//! `retrieve()`: hybrid search → optional trimming → token accounting (spec 000 `retrieve`).

use std::time::Instant;

use bib_embed::{EmbedKind, Embedder};
use bib_text::tokens::estimate_tokens;
use serde::{Deserialize, Serialize};

use crate::cache::EmbeddingCache;
use crate::error::RetrieveError;
use crate::filter::Filter;
use crate::fusion::{rrf_fuse, ListHit, DEFAULT_RRF_K};
use crate::index::{ChunkId, ChunkIndex, ChunkRecord, Hit};
use crate::signals::{
    best_other_of_doc, exact_items, field_text, min_max, normalize_exact, phrase_score, Explain,
    QueryTerms, SignalPart, Signals,
};
use crate::trim::{trim_texts, Prepared, TrimOptions};

/// Which lists feed the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// BM25 and vector lists fused by RRF.
    #[default]
    Hybrid,
    /// BM25 only.
    Bm25,
    /// Vector (cosine) only.
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
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// Reciprocal rank fusion (`Σ w / (k + rank)`): ranks only, robust when both lists are
    /// of comparable quality (spec 003).
    Rrf,
    /// Convex combination of normalised scores: `α · bm25 / max bm25 + (1 − α) · cosine`
    /// min-max scaled over the candidates. Keeps *how much* better a hit is, not only its
    /// place, so a weaker list nudges instead of reshuffling; on SciFact with the default
    /// model it is the only fusion above BM25 alone (BENCHMARKS.md, "Ask").
    #[default]
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

/// Default BM25 weight α of [`Fusion::Convex`] (calibrated with `bib bench scifact`).
pub const DEFAULT_CONVEX_ALPHA: f64 = 0.7;

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
    pub chunk: ChunkRecord,
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
}

/// The outcome of [`Retriever::retrieve`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetrievalResult {
    pub query: String,
    /// The mode actually used (hybrid falls back to bm25 when no embedder is available).
    pub mode: Mode,
    /// Best first.
    pub chunks: Vec<ScoredChunk>,
    /// Spec estimate (words × 1.3) of the chunks as retrieved.
    pub tokens_before: usize,
    /// Spec estimate of the chunks after trimming (equal to `tokens_before` without trimming).
    pub tokens_in_context: usize,
    /// Exact count with the embedding model's tokenizer, when a model is present.
    pub exact_tokens_before: Option<usize>,
    pub exact_tokens_in_context: Option<usize>,
    pub timings: Timings,
}

/// Hybrid retrieval over a [`ChunkIndex`].
pub struct Retriever<'a> {
    index: &'a dyn ChunkIndex,
    embedder: Option<&'a dyn Embedder>,
    cache: &'a EmbeddingCache,
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
        }
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

    /// Ranked hits without trimming: the fused lists, re-scored by the ranking signals. The
    /// query vector is computed when needed.
    pub fn search(
        &self,
        query: &str,
        opts: &RetrieveOptions,
        filter: &Filter,
        query_vec: Option<&[f32]>,
    ) -> Result<Vec<ScoredHit>, RetrieveError> {
        Ok(self.ranked(query, opts, filter, query_vec)?.0)
    }

    /// [`Self::search`], plus the records the signals fetched (so `retrieve` need not fetch
    /// them again).
    fn ranked(
        &self,
        query: &str,
        opts: &RetrieveOptions,
        filter: &Filter,
        query_vec: Option<&[f32]>,
    ) -> Result<(Vec<ScoredHit>, Vec<ChunkRecord>), RetrieveError> {
        let mode = self.effective_mode(opts.mode);
        let n = opts.candidates.max(opts.top_k);
        let sig = opts.signals;
        let bm25 = if mode != Mode::Vector {
            self.index.bm25_top(query, n, filter)?
        } else {
            Vec::new()
        };
        let items = if sig.phrase > 0.0 {
            exact_items(query)
        } else {
            Vec::new()
        };
        // The question's exact items bring their own BM25 candidates (a pasted error message
        // shares few words with the whole question).
        let mut pulled: Vec<ChunkId> = Vec::new();
        if sig.exact_candidates > 0 && mode != Mode::Vector {
            let seen: std::collections::HashSet<ChunkId> = bm25.iter().map(|h| h.id).collect();
            for it in items.iter().filter(|i| i.strong) {
                for h in self
                    .index
                    .bm25_top(&it.text, sig.exact_candidates, filter)?
                {
                    if !seen.contains(&h.id) && !pulled.contains(&h.id) {
                        pulled.push(h.id);
                    }
                }
            }
        }
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
        let signals_apply = sig.any()
            && match mode {
                Mode::Hybrid => opts.fusion == Fusion::Convex && qv.is_some(),
                Mode::Bm25 => true,
                Mode::Vector => false,
            };
        let fused = match (mode, opts.fusion, &qv) {
            (Mode::Hybrid, Fusion::Convex, Some(qv)) => {
                // Candidates outside the vector list need their cosine too.
                let in_vec: std::collections::HashSet<_> = vector.iter().map(|h| h.id).collect();
                let missing: Vec<_> = bm25
                    .iter()
                    .map(|h| h.id)
                    .chain(pulled.iter().copied())
                    .filter(|id| !in_vec.contains(id))
                    .collect();
                let extra: Vec<Hit> = self
                    .index
                    .vectors(&missing)?
                    .into_iter()
                    .map(|(id, v)| Hit {
                        id,
                        score: f64::from(bib_embed::cosine(&v, qv)),
                    })
                    .collect();
                convex_scores(&bm25, &vector, &extra, &pulled, opts.convex_alpha)
            }
            (Mode::Bm25, _, _) if signals_apply => bm25_scaled(&bm25, &pulled),
            _ => rank(mode, &bm25, &vector, opts.rrf_k, usize::MAX),
        };
        if !signals_apply {
            let mut out = fused;
            out.truncate(opts.top_k);
            return Ok((out, Vec::new()));
        }
        self.rescore(query, opts, fused, &items, qv.as_deref())
    }

    /// Re-score the best `signals.depth` fused hits with the ranking signals and cut to
    /// `top_k`.
    fn rescore(
        &self,
        query: &str,
        opts: &RetrieveOptions,
        mut fused: Vec<ScoredHit>,
        items: &[crate::signals::ExactItem],
        qv: Option<&[f32]>,
    ) -> Result<(Vec<ScoredHit>, Vec<ChunkRecord>), RetrieveError> {
        let sig = opts.signals;
        let depth = sig.depth.max(opts.top_k).min(fused.len());
        let ids: Vec<ChunkId> = fused[..depth].iter().map(|h| h.id).collect();
        let records = self.index.chunks(&ids)?;
        let by_id: std::collections::HashMap<ChunkId, &ChunkRecord> =
            records.iter().map(|r| (r.id, r)).collect();
        let cfg = self.index.term_config()?;
        let qterms = if sig.field > 0.0 {
            let t = bib_text::terms::terms_with(query, &cfg);
            let (n, dfs) = self.index.doc_freqs(&t)?;
            Some(QueryTerms::new(query, &cfg, n, &dfs))
        } else {
            None
        };
        let want_cos = match (sig.sentence > 0.0, qv, self.embedder) {
            (true, Some(qv), Some(e)) => Some((e, qv)),
            _ => None,
        };
        let want_lex = (sig.sentence_lex > 0.0).then_some(&cfg);
        let evidence = if want_cos.is_some() || want_lex.is_some() {
            self.sentence_evidence(query, want_cos, want_lex, &ids, &by_id)?
        } else {
            Vec::new()
        };
        // Cosines min-max scaled over the candidates; BM25 over the best sentence's.
        let raw = |f: &dyn Fn(&SentenceEvidence) -> Option<f64>| -> Vec<f64> {
            evidence.iter().map(|e| f(e).unwrap_or(f64::NAN)).collect()
        };
        let cos_scaled = min_max(&raw(&|e| e.cosine.as_ref().map(|c| c.0)));
        let lex_raw = raw(&|e| e.lexical.as_ref().map(|c| c.0));
        let lex_top = lex_raw
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .fold(0.0, f64::max);
        for (i, h) in fused[..depth].iter_mut().enumerate() {
            let Some(rec) = by_id.get(&h.id) else {
                continue;
            };
            let ex = &mut h.explain;
            if let Some(q) = &qterms {
                let f = bib_text::terms::terms_with(&field_text(rec), &cfg);
                let (v, m) = q.field_score(&f);
                ex.field = Some(SignalPart::new(v, sig.field, m, None));
            }
            if sig.phrase > 0.0 && !items.is_empty() {
                let (v, m) = phrase_score(items, &normalize_exact(&rec.content));
                ex.phrase = Some(SignalPart::new(v, sig.phrase, m, None));
            }
            if let Some(ev) = evidence.get(i) {
                if want_cos.is_some() {
                    ex.sentence = Some(SignalPart::new(
                        cos_scaled[i],
                        sig.sentence,
                        ev.cosine.iter().map(|c| c.1.clone()).collect(),
                        ev.cosine.as_ref().map(|c| c.0),
                    ));
                }
                if want_lex.is_some() {
                    let v = match &ev.lexical {
                        Some((b, _)) if lex_top > 0.0 => b / lex_top,
                        _ => 0.0,
                    };
                    ex.sentence_lex = Some(SignalPart::new(
                        v,
                        sig.sentence_lex,
                        ev.lexical.iter().map(|c| c.1.clone()).collect(),
                        ev.lexical.as_ref().map(|c| c.0),
                    ));
                }
            }
            h.score = ex.fused
                + [&ex.field, &ex.phrase, &ex.sentence, &ex.sentence_lex]
                    .iter()
                    .filter_map(|p| p.as_ref().map(|p| p.contribution))
                    .sum::<f64>();
        }
        if sig.doc > 0.0 {
            let paths: Vec<&str> = fused[..depth]
                .iter()
                .map(|h| by_id.get(&h.id).map_or("", |r| r.path.as_str()))
                .collect();
            let scores: Vec<f64> = fused[..depth].iter().map(|h| h.score).collect();
            let top = scores.iter().copied().fold(0.0, f64::max);
            let other = best_other_of_doc(&paths, &scores);
            for (h, o) in fused[..depth].iter_mut().zip(other) {
                // The best other chunk of the same file, relative to the best candidate.
                let v = if top > 0.0 { o / top } else { 0.0 };
                let part = SignalPart::new(v, sig.doc, Vec::new(), None);
                h.score += part.contribution;
                h.explain.doc = Some(part);
            }
        }
        for h in fused.iter_mut() {
            h.explain.final_score = h.score;
        }
        fused[..depth].sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        fused.truncate(opts.top_k);
        Ok((fused, records))
    }

    /// Per candidate (in `ids` order): its best sentence by cosine to the question (sentence
    /// vectors the cache already holds, under the trimmer's split and keys) when `qv` is given,
    /// and its best sentence by BM25 over all the candidates' sentences when `lexical`.
    fn sentence_evidence(
        &self,
        query: &str,
        qv: Option<(&dyn Embedder, &[f32])>,
        lexical: Option<&bib_text::terms::TermConfig>,
        ids: &[ChunkId],
        by_id: &std::collections::HashMap<ChunkId, &ChunkRecord>,
    ) -> Result<Vec<SentenceEvidence>, RetrieveError> {
        let prepared: Vec<Option<Prepared<'_>>> = ids
            .iter()
            .map(|id| by_id.get(id).map(|r| Prepared::new(&r.content)))
            .collect();
        let all: Vec<&str> = prepared
            .iter()
            .flatten()
            .flat_map(|p| (0..p.sentences.len()).map(move |i| p.sentence(i)))
            .collect();
        // Only vectors already known (stored by ingest, or from an earlier ask): ranking never
        // embeds sentences, so a store without them costs nothing and gets no sentence signal.
        let cos: Vec<f64> = match qv {
            Some((e, qv)) if !all.is_empty() => self
                .cache
                .cached(e.model_id(), &all, EmbedKind::Passage)?
                .iter()
                .map(|v| {
                    v.as_ref()
                        .map_or(f64::NAN, |v| f64::from(bib_embed::cosine(v, qv)))
                })
                .collect(),
            _ => Vec::new(),
        };
        let lex: Vec<f64> = match lexical {
            Some(cfg) if !all.is_empty() => {
                let ix = bib_text::bm25::Bm25Index::new(
                    all.iter()
                        .map(|t| bib_text::terms::term_sequence_with(t, cfg)),
                    bib_text::bm25::Bm25Params::default(),
                );
                let q = bib_text::terms::terms_with(query, cfg);
                (0..all.len()).map(|i| ix.score(i, &q)).collect()
            }
            _ => Vec::new(),
        };
        let best_of = |scores: &[f64], at: usize, m: usize| {
            (0..m)
                .filter(|i| scores.get(at + i).is_some_and(|x| x.is_finite()))
                .map(|i| (scores[at + i], i))
                .max_by(|a, b| a.0.total_cmp(&b.0))
        };
        let mut at = 0;
        let mut out = Vec::with_capacity(ids.len());
        for p in &prepared {
            let Some(p) = p else {
                out.push(SentenceEvidence::default());
                continue;
            };
            let m = p.sentences.len();
            let pick = |scores: &[f64]| {
                best_of(scores, at, m).map(|(v, i)| (v, p.sentence(i).to_string()))
            };
            out.push(SentenceEvidence {
                cosine: pick(&cos),
                lexical: pick(&lex),
            });
            at += m;
        }
        Ok(out)
    }

    fn effective_mode(&self, asked: Mode) -> Mode {
        if self.embedder.is_none() && asked == Mode::Hybrid {
            Mode::Bm25
        } else {
            asked
        }
    }

    /// Retrieve the `top_k` chunks for `query` under `filter`, trimming them when asked.
    pub fn retrieve(
        &self,
        query: &str,
        opts: &RetrieveOptions,
        filter: &Filter,
    ) -> Result<RetrievalResult, RetrieveError> {
        let t0 = Instant::now();
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
        let t = Instant::now();
        let (hits, mut records) = self.ranked(query, opts, filter, qv.as_deref())?;
        let missing: Vec<_> = hits
            .iter()
            .map(|h| h.id)
            .filter(|id| !records.iter().any(|r| r.id == *id))
            .collect();
        if !missing.is_empty() {
            records.extend(self.index.chunks(&missing)?);
        }
        let mut chunks: Vec<ScoredChunk> = hits
            .into_iter()
            .filter_map(|h| {
                let at = records.iter().position(|r| r.id == h.id)?;
                Some(ScoredChunk {
                    chunk: records.swap_remove(at),
                    score: h.score,
                    bm25: h.bm25,
                    vector: h.vector,
                    trim: None,
                    explain: h.explain,
                })
            })
            .collect();
        timings.search_ms = ms(t);

        let tokenizer = self.embedder.map(|e| e.tokenizer());
        let tokens_before = chunks
            .iter()
            .map(|c| estimate_tokens(&c.chunk.content))
            .sum();
        let exact_tokens_before = tokenizer.map(|tk| {
            chunks
                .iter()
                .map(|c| tk.count_tokens(&c.chunk.content))
                .sum()
        });

        if let (Some(topts), Some(qv), Some(e)) = (&opts.trim, &qv, self.embedder) {
            if !chunks.is_empty() {
                let t = Instant::now();
                let texts: Vec<&str> = chunks.iter().map(|c| c.chunk.content.as_str()).collect();
                let cfg = self.index.term_config()?;
                let trimmed = trim_texts(e, self.cache, query, qv, &texts, topts, &cfg)?;
                for (c, tr) in chunks.iter_mut().zip(trimmed) {
                    c.chunk.content = tr.content;
                    c.trim = Some(TrimInfo {
                        sentences_total: tr.total,
                        sentences_kept: tr.kept,
                    });
                }
                timings.trim_ms = ms(t);
            }
        }
        let tokens_in_context = chunks
            .iter()
            .map(|c| estimate_tokens(&c.chunk.content))
            .sum();
        let exact_tokens_in_context = tokenizer.map(|tk| {
            chunks
                .iter()
                .map(|c| tk.count_tokens(&c.chunk.content))
                .sum()
        });
        timings.total_ms = ms(t0);
        Ok(RetrievalResult {
            query: query.to_string(),
            mode,
            chunks,
            tokens_before,
            tokens_in_context,
            exact_tokens_before,
            exact_tokens_in_context,
            timings,
        })
    }
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

/// A candidate's best sentences: `(score, text)` by cosine to the question and by BM25.
#[derive(Debug, Clone, Default)]
struct SentenceEvidence {
    cosine: Option<(f64, String)>,
    lexical: Option<(f64, String)>,
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
    use crate::cache::tests::FakeEmbedder;
    use crate::index::MemoryIndex;
    use serde_json::json;

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
                    citation: Default::default(),
                },
                Some(v),
            )
            .unwrap();
        }
        ix
    }

    #[test]
    fn modes_and_scores() {
        let e = FakeEmbedder::default();
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
        let e = FakeEmbedder::default();
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
    fn filter_before_cut_and_no_embedder_fallback() {
        let e = FakeEmbedder::default();
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

    #[test]
    fn trimming_reduces_tokens_and_keeps_metadata() {
        let e = FakeEmbedder::default();
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

    /// Long (so plain BM25 ranks it low), with the identifier and an error message.
    const NU1101_PAGE: &str = "Unable to find package Foo. NU1101 is raised then. Lorem ipsum dolor \
        sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore \
        magna aliqua ut enim ad minim veniam quis nostrud exercitation ullamco laboris nisi ut \
        aliquip ex ea commodo consequat duis aute irure dolor in reprehenderit in voluptate velit \
        esse cillum dolore eu fugiat nulla pariatur excepteur sint occaecat cupidatat non proident.";

    /// A small wiki where the question's identifier and title words sit in a chunk that plain
    /// fusion ranks low.
    fn wiki(e: &FakeEmbedder) -> MemoryIndex {
        let docs: [(&str, &str, &str); 5] = [
            ("errors/nu1101.md", "NU1101", NU1101_PAGE),
            (
                "guides/restore.md",
                "Restore",
                "Restore packages restore restore from every source; restore the packages.",
            ),
            (
                "guides/sources.md",
                "Sources",
                "A package source is a feed; restore reads every package source.",
            ),
            (
                "reference/nuspec.md",
                "nuspec reference",
                "The manifest lists metadata such as id and version.",
            ),
            (
                "guides/create.md",
                "Create a package",
                "Write a nuspec, then pack the nuspec into a package with nuspec tools.",
            ),
        ];
        let mut ix = MemoryIndex::new();
        for (i, (p, t, c)) in docs.into_iter().enumerate() {
            let content = format!("[Doc: {t}]\n{c}");
            let v = e
                .embed(&[content.as_str()], EmbedKind::Passage)
                .unwrap()
                .remove(0);
            ix.add(
                ChunkRecord {
                    id: i as i64 + 1,
                    path: p.into(),
                    chunk_index: 0,
                    title: t.into(),
                    heading_path: vec![],
                    content,
                    metadata: json!({}),
                    citation: Default::default(),
                },
                Some(v),
            )
            .unwrap();
        }
        ix
    }

    fn paths(r: &RetrievalResult) -> Vec<&str> {
        r.chunks.iter().map(|c| c.chunk.path.as_str()).collect()
    }

    #[test]
    fn signals_lift_field_and_exact_matches_and_explain_adds_up() {
        let e = FakeEmbedder::default();
        let ix = wiki(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        let run = |q: &str, signals: Signals| {
            let opts = RetrieveOptions {
                top_k: 5,
                signals,
                ..Default::default()
            };
            r.retrieve(q, &opts, &Filter::default()).unwrap()
        };
        let field = Signals {
            field: 1.0,
            ..Signals::OFF
        };
        let rank_of = |r: &RetrievalResult, p: &str| paths(r).iter().position(|x| *x == p);
        let plain = run("nuspec", Signals::OFF);
        let boosted = run("nuspec", field);
        assert!(
            rank_of(&plain, "reference/nuspec.md") > Some(0),
            "{:?}",
            paths(&plain)
        );
        assert_eq!(
            rank_of(&boosted, "reference/nuspec.md"),
            Some(0),
            "{:?}",
            paths(&boosted)
        );
        let phrase = Signals {
            phrase: 1.5,
            exact_candidates: 5,
            ..Signals::OFF
        };
        let q = "restore says \"Unable to find package\" for my package source";
        let plain = run(q, Signals::OFF);
        let boosted = run(q, phrase);
        assert!(
            rank_of(&plain, "errors/nu1101.md") > Some(0),
            "{:?}",
            paths(&plain)
        );
        assert_eq!(
            rank_of(&boosted, "errors/nu1101.md"),
            Some(0),
            "{:?}",
            paths(&boosted)
        );
        let p = boosted.chunks[0].explain.phrase.as_ref().unwrap();
        assert!(
            p.matched.contains(&"unable to find package".to_string()),
            "{p:?}"
        );
        let all = Signals {
            field: 0.3,
            phrase: 0.3,
            sentence: 0.3,
            sentence_lex: 0.3,
            doc: 0.3,
            depth: 10,
            exact_candidates: 5,
        };
        for res in [run(q, all), run("nuspec", all)] {
            for c in &res.chunks {
                let x = &c.explain;
                let parts: f64 = [&x.field, &x.phrase, &x.sentence, &x.sentence_lex, &x.doc]
                    .iter()
                    .filter_map(|p| p.as_ref().map(|p| p.contribution))
                    .sum();
                assert!((x.fused + parts - c.score).abs() < 1e-12, "{x:?}");
                assert_eq!(x.final_score, c.score);
                assert!(x.field.is_some() && x.sentence.is_some() && x.doc.is_some());
                assert!(x.sentence_lex.is_some());
                assert_eq!(
                    x.phrase.is_some(),
                    res.query == q,
                    "only {q:?} has exact items"
                );
                let b = x.bm25_norm.unwrap_or(0.0);
                let cn = x.cosine_norm.unwrap_or(0.0);
                assert!(
                    (x.alpha.unwrap() * b + (1.0 - x.alpha.unwrap()) * cn - x.fused).abs() < 1e-12
                );
            }
            assert!(res.chunks.windows(2).all(|w| w[0].score >= w[1].score));
        }
        // Off: nothing but the fusion, and the same order as before the signals existed.
        let off = run(q, Signals::OFF);
        assert!(off
            .chunks
            .iter()
            .all(|c| c.explain.field.is_none() && c.explain.doc.is_none()));
        let bm = ix.bm25_top(q, 50, &Filter::default()).unwrap();
        let qv = r.embed_query(q).unwrap();
        let ve = ix.vector_top(&qv, 50, &Filter::default()).unwrap();
        let missing: Vec<ChunkId> = bm
            .iter()
            .map(|h| h.id)
            .filter(|id| !ve.iter().any(|v| v.id == *id))
            .collect();
        let extra: Vec<Hit> = ix
            .vectors(&missing)
            .unwrap()
            .into_iter()
            .map(|(id, v)| Hit {
                id,
                score: f64::from(bib_embed::cosine(&v, &qv)),
            })
            .collect();
        let want: Vec<ChunkId> = convex_fuse(&bm, &ve, &extra, DEFAULT_CONVEX_ALPHA, 5)
            .iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(
            off.chunks.iter().map(|c| c.chunk.id).collect::<Vec<_>>(),
            want
        );
    }

    #[test]
    fn exact_items_pull_their_own_candidates() {
        let e = FakeEmbedder::default();
        let ix = wiki(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        // One BM25 candidate, and it is not the NU1101 page, unless its identifier pulls it in.
        let q = "NU1101 restore";
        let top = ix.bm25_top(q, 1, &Filter::default()).unwrap();
        assert_ne!(
            top[0].id, 1,
            "the fixture's long NU1101 page must not lead plain BM25"
        );
        let opts = |exact_candidates| RetrieveOptions {
            top_k: 1,
            candidates: 1,
            mode: Mode::Bm25,
            signals: Signals {
                phrase: 2.0,
                exact_candidates,
                ..Signals::OFF
            },
            ..Default::default()
        };
        let without = r.retrieve(q, &opts(0), &Filter::default()).unwrap();
        let with = r.retrieve(q, &opts(3), &Filter::default()).unwrap();
        assert!(
            !paths(&without).contains(&"errors/nu1101.md"),
            "{:?}",
            paths(&without)
        );
        assert!(
            paths(&with).contains(&"errors/nu1101.md"),
            "{:?}",
            paths(&with)
        );
        let c = with.chunks.iter().find(|c| c.chunk.id == 1).unwrap();
        assert_eq!(c.explain.fusion, "bm25");
        assert!(
            c.bm25.is_none(),
            "pulled in: not in the question's BM25 list"
        );
        let p = c.explain.phrase.as_ref().unwrap();
        assert!(p.matched.contains(&"nu1101".to_string()), "{p:?}");
    }

    #[test]
    fn sentence_signal_reads_known_vectors_and_never_embeds() {
        let e = FakeEmbedder::default();
        let ix = wiki(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        let q = "which metadata does the manifest list";
        let opts = RetrieveOptions {
            top_k: 5,
            signals: Signals {
                sentence: 1.0,
                ..Signals::OFF
            },
            ..Default::default()
        };
        let calls = e.calls.load(std::sync::atomic::Ordering::SeqCst);
        let cold = r.retrieve(q, &opts, &Filter::default()).unwrap();
        assert_eq!(
            e.calls.load(std::sync::atomic::Ordering::SeqCst),
            calls + 1,
            "the query only"
        );
        assert!(cold.chunks.iter().all(|c| c
            .explain
            .sentence
            .as_ref()
            .is_some_and(|p| p.raw.is_none())));
        let sentence = "The manifest lists metadata such as id and version.";
        cache.embed(&e, &[sentence], EmbedKind::Passage).unwrap();
        let warm = r.retrieve(q, &opts, &Filter::default()).unwrap();
        let top = &warm.chunks[0];
        assert_eq!(top.chunk.path, "reference/nuspec.md");
        let p = top.explain.sentence.as_ref().unwrap();
        assert_eq!(p.matched, [sentence]);
        assert!(p.raw.is_some_and(|c| c > 0.0) && p.value == 1.0, "{p:?}");
    }
}
