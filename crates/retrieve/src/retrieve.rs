//! `retrieve()`: hybrid search → optional trimming → token accounting (spec 000 `retrieve`).

use std::time::Instant;

use bib_embed::{EmbedKind, Embedder};
use bib_text::tokens::estimate_tokens;
use serde::{Deserialize, Serialize};

use crate::cache::EmbeddingCache;
use crate::error::RetrieveError;
use crate::filter::Filter;
use crate::fusion::{rrf_fuse, ListHit, DEFAULT_RRF_K};
use crate::index::{ChunkIndex, ChunkRecord, Hit};
use crate::trim::{trim_texts, TrimOptions};

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
    /// Sentence trimming; `None` returns whole chunks.
    pub trim: Option<TrimOptions>,
}

impl Default for RetrieveOptions {
    fn default() -> Self {
        Self {
            top_k: 5,
            mode: Mode::Hybrid,
            candidates: 50,
            rrf_k: DEFAULT_RRF_K,
            trim: None,
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
    /// The ranking score: the RRF score in hybrid mode, the list's raw score otherwise.
    pub score: f64,
    /// Raw BM25 score and rank, when the chunk was in the BM25 list.
    pub bm25: Option<ListHit>,
    /// Raw cosine and rank, when the chunk was in the vector list.
    pub vector: Option<ListHit>,
    /// Set when trimming ran.
    pub trim: Option<TrimInfo>,
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

    /// Ranked hits without fetching or trimming: `(fused hits, mode used)`. The query vector is
    /// computed when needed and returned for reuse.
    pub fn search(
        &self,
        query: &str,
        opts: &RetrieveOptions,
        filter: &Filter,
        query_vec: Option<&[f32]>,
    ) -> Result<Vec<ScoredHit>, RetrieveError> {
        let mode = self.effective_mode(opts.mode);
        let n = opts.candidates.max(opts.top_k);
        let bm25 = if mode != Mode::Vector {
            self.index.bm25_top(query, n, filter)?
        } else {
            Vec::new()
        };
        let vector = if mode != Mode::Bm25 {
            let qv = match query_vec {
                Some(v) => v.to_vec(),
                None => self.embed_query(query)?,
            };
            self.index.vector_top(&qv, n, filter)?
        } else {
            Vec::new()
        };
        Ok(rank(mode, &bm25, &vector, opts.rrf_k, opts.top_k))
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
        let hits = self.search(query, opts, filter, qv.as_deref())?;
        let ids: Vec<_> = hits.iter().map(|h| h.id).collect();
        let records = self.index.chunks(&ids)?;
        let mut chunks: Vec<ScoredChunk> = hits
            .iter()
            .filter_map(|h| {
                let rec = records.iter().find(|r| r.id == h.id)?.clone();
                Some(ScoredChunk {
                    chunk: rec,
                    score: h.score,
                    bm25: h.bm25,
                    vector: h.vector,
                    trim: None,
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
                let trimmed = trim_texts(e, self.cache, query, qv, &texts, topts)?;
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

/// A ranked hit before fetching: id, ranking score and its place in each list.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoredHit {
    pub id: crate::index::ChunkId,
    pub score: f64,
    pub bm25: Option<ListHit>,
    pub vector: Option<ListHit>,
}

/// Combine the lists for `mode` and keep `top_k`.
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
                ScoredHit {
                    id: h.id,
                    score: h.score,
                    bm25: if is_bm25 { lh } else { None },
                    vector: if is_bm25 { None } else { lh },
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
            .map(|f| ScoredHit {
                id: f.id,
                score: f.score,
                bm25: f.lists[0],
                vector: f.lists[1],
            })
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
        for mode in [Mode::Hybrid, Mode::Bm25, Mode::Vector] {
            let opts = RetrieveOptions {
                top_k: 2,
                mode,
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
                Mode::Hybrid => {
                    let expect: f64 = [c0.bm25, c0.vector]
                        .iter()
                        .flatten()
                        .map(|l| 1.0 / (60.0 + l.rank as f64))
                        .sum();
                    assert!((c0.score - expect).abs() < 1e-12);
                }
            }
            assert_eq!(res.chunks[0].chunk.path, "c.md", "{mode}");
        }
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
}
