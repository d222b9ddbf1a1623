//! Small-to-big retrieval (the spec's "Fase 3"): index every sentence of every chunk on its own,
//! search that sentence index (BM25 + vectors fused by rank, as chunk retrieval does), and
//! expand each hit to ±`window` sentences inside its parent chunk. Hits in the same parent merge
//! into one passage, rebuilt like a trimmed chunk (prefix kept, `[...]` between gaps).
//!
//! Sentences are split with the same function trimming uses and embedded without the chunk
//! prefix, so their vectors are shared with the trimmer through the embedding cache.

use std::collections::HashMap;

use bib_embed::{EmbedKind, Embedder};
use bib_retrieve::trim::{rebuild, Prepared};
use bib_retrieve::{
    ChunkId, ChunkIndex, ChunkRecord, EmbeddingCache, Filter, MemoryIndex, Mode, RetrieveOptions,
    Retriever,
};
use bib_store::Store;

use crate::error::EvalError;

/// Enumerates every chunk of a knowledge base (the sentence index is built from all of them).
pub trait Corpus {
    fn all_chunks(&self) -> Result<Vec<ChunkRecord>, EvalError>;
}

impl Corpus for MemoryIndex {
    fn all_chunks(&self) -> Result<Vec<ChunkRecord>, EvalError> {
        Ok(self.all().to_vec())
    }
}

/// Every chunk of a [`Store`], read through its public interface: ids are probed in ranges
/// until as many chunks as the lexical statistics count have been found.
pub struct StoreCorpus<'a> {
    store: &'a dyn Store,
}

impl std::fmt::Debug for StoreCorpus<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreCorpus").finish_non_exhaustive()
    }
}

impl<'a> StoreCorpus<'a> {
    pub fn new(store: &'a dyn Store) -> Self {
        Self { store }
    }
}

impl Corpus for StoreCorpus<'_> {
    fn all_chunks(&self) -> Result<Vec<ChunkRecord>, EvalError> {
        let want = self.store.lexical_stats()?.chunks as usize;
        let index = bib_retrieve::StoreIndex::new(self.store);
        let mut out = Vec::with_capacity(want);
        let step = 2048i64;
        let mut lo = 1i64;
        let mut empty_runs = 0;
        // Ids are row ids: dense after a fresh ingest, with holes after deletions. Stop once
        // everything is found, or after many empty ranges in a row.
        while out.len() < want && empty_runs < 64 {
            let ids: Vec<ChunkId> = (lo..lo + step).collect();
            let got = index.chunks(&ids)?;
            empty_runs = if got.is_empty() { empty_runs + 1 } else { 0 };
            out.extend(got);
            lo += step;
        }
        Ok(out)
    }
}

/// One small-to-big passage: a parent chunk cut to the windows around its sentence hits.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    /// The whole parent chunk.
    pub parent: ChunkRecord,
    /// The expanded passage (prefix + kept sentences).
    pub content: String,
    /// Best fused score among its sentence hits.
    pub score: f64,
    /// Kept sentence indices, ascending.
    pub kept: Vec<usize>,
}

/// The sentence-level index.
pub struct SentenceIndex {
    index: MemoryIndex,
    /// Per sentence id (its position): parent chunk id and sentence number in the parent.
    owner: Vec<(ChunkId, usize)>,
    parents: HashMap<ChunkId, ChunkRecord>,
}

impl std::fmt::Debug for SentenceIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceIndex")
            .field("sentences", &self.owner.len())
            .field("parents", &self.parents.len())
            .finish()
    }
}

/// How [`SentenceIndex::search`] searches: the `hits` best sentences by `mode`, each
/// expanded by `window` sentences either side.
#[derive(Debug, Clone, Copy)]
pub struct PassageSearch {
    pub hits: usize,
    pub window: usize,
    pub mode: Mode,
}

impl SentenceIndex {
    /// Split and embed every sentence of `chunks` (through `cache`, in batches of 256).
    pub fn build(
        chunks: Vec<ChunkRecord>,
        embedder: &dyn Embedder,
        cache: &EmbeddingCache,
    ) -> Result<Self, EvalError> {
        let mut texts: Vec<(ChunkRecord, String, usize)> = Vec::new();
        for c in &chunks {
            let text = c.text();
            let p = Prepared::new(&text);
            for i in 0..p.sentences.len() {
                let s = p.sentence(i).trim();
                if !s.is_empty() {
                    texts.push((c.clone(), s.to_string(), i));
                }
            }
        }
        let mut index = MemoryIndex::new();
        let mut owner = Vec::with_capacity(texts.len());
        for batch in texts.chunks(256) {
            let strs: Vec<&str> = batch.iter().map(|(_, s, _)| s.as_str()).collect();
            let vecs = cache
                .embed(embedder, &strs, EmbedKind::Passage)
                .map_err(bib_retrieve::RetrieveError::from)?;
            for ((parent, s, i), v) in batch.iter().zip(vecs) {
                let id = owner.len() as ChunkId;
                index.add(
                    ChunkRecord {
                        id,
                        path: parent.path.clone(),
                        chunk_index: parent.chunk_index,
                        title: parent.title.clone(),
                        heading_path: parent.heading_path.clone(),
                        content: s.clone(),
                        metadata: parent.metadata.clone(),
                        ..Default::default()
                    },
                    Some(v.to_vec()),
                )?;
                owner.push((parent.id, *i));
            }
        }
        let parents = chunks.into_iter().map(|c| (c.id, c)).collect();
        Ok(Self {
            index,
            owner,
            parents,
        })
    }

    /// Number of indexed sentences.
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// Whether no sentence is indexed.
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    /// The `hits` best sentences for `query`, expanded by `window` and merged per parent,
    /// passages ordered by their best hit.
    pub fn search(
        &self,
        query: &str,
        embedder: Option<&dyn Embedder>,
        cache: &EmbeddingCache,
        params: PassageSearch,
        filter: &Filter,
    ) -> Result<Vec<Passage>, EvalError> {
        let PassageSearch { hits, window, mode } = params;
        let retriever = Retriever::new(&self.index, embedder, cache);
        let opts = RetrieveOptions {
            top_k: hits.max(1),
            mode,
            candidates: (hits * 4).max(50),
            ..RetrieveOptions::default()
        };
        let ranked = retriever.search(query, &opts, filter, None)?;
        let mut order: Vec<ChunkId> = Vec::new();
        let mut marks: HashMap<ChunkId, (Vec<usize>, f64)> = HashMap::new();
        for h in ranked {
            let Some(&(parent, i)) = self.owner.get(h.id as usize) else {
                continue;
            };
            let e = marks.entry(parent).or_insert_with(|| {
                order.push(parent);
                (Vec::new(), h.score)
            });
            e.0.push(i);
        }
        let mut out = Vec::with_capacity(order.len());
        for pid in order {
            let (Some(parent), Some((centres, score))) = (self.parents.get(&pid), marks.get(&pid))
            else {
                continue;
            };
            let text = parent.text();
            let p = Prepared::new(&text);
            let n = p.sentences.len();
            let mut keep = vec![false; n];
            for &c in centres.iter().filter(|&&c| c < n) {
                let lo = c.saturating_sub(window);
                let hi = (c + window).min(n - 1);
                keep[lo..=hi].iter_mut().for_each(|k| *k = true);
            }
            let kept: Vec<usize> = (0..n).filter(|&i| keep[i]).collect();
            out.push(Passage {
                content: rebuild(&p, &kept),
                parent: parent.clone(),
                score: *score,
                kept,
            });
        }
        Ok(out)
    }
}
