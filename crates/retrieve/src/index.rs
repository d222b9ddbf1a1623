//! What retrieval needs from an index, and an in-memory implementation.
//!
//! [`ChunkIndex`] is deliberately small: a BM25 top-N, a vector top-N and a chunk fetch, each
//! honouring a [`Filter`] *before* the top-N cut (so a filter never empties a result that a
//! larger N would have filled). The persistent store implements it through an adapter;
//! [`MemoryIndex`] implements it over a `Vec` for benchmarks and tests.

use std::collections::HashMap;

use bib_text::bm25::{idf, tf_factor, Bm25Params};
use bib_text::terms::{terms_with, TermConfig};

use crate::error::RetrieveError;
use crate::filter::Filter;

/// Chunk ids and ranked-list entries are the store's: one type from the store's searches
/// through fusion to the answer.
pub use bib_store::{ChunkId, Hit};

/// The chunk record is the store's: one type from the store (or a benchmark's corpus) through
/// ranking, trimming and citing to the answer.
pub use bib_store::ChunkRecord;

/// Everything hybrid retrieval needs from an index.
pub trait ChunkIndex: Send + Sync {
    /// The `limit` best chunks for `query` by BM25 among those passing `filter`, best first.
    /// Chunks with no query term are not returned.
    fn bm25_top(
        &self,
        query: &str,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, RetrieveError>;
    /// The `limit` chunks most similar (cosine) to `query_vec` among those passing `filter`,
    /// best first.
    fn vector_top(
        &self,
        query_vec: &[f32],
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, RetrieveError>;
    /// Fetch chunks by id, in the order asked; unknown ids are skipped.
    fn chunks(&self, ids: &[ChunkId]) -> Result<Vec<ChunkRecord>, RetrieveError>;
    /// Stored vectors of chunks by id (unknown ids and chunks without a vector are skipped):
    /// convex fusion needs the cosine of BM25-only candidates.
    fn vectors(&self, ids: &[ChunkId]) -> Result<Vec<(ChunkId, Vec<f32>)>, RetrieveError>;
    /// The cosine of each given chunk's vector to `query_vec` (unknown ids and chunks without
    /// a vector skipped).
    fn cosines(&self, query_vec: &[f32], ids: &[ChunkId]) -> Result<Vec<Hit>, RetrieveError> {
        Ok(self
            .vectors(ids)?
            .into_iter()
            .map(|(id, v)| Hit {
                id,
                score: f64::from(bib_embed::cosine(&v, query_vec)),
            })
            .collect())
    }
    /// The term function this index's BM25 was built with: every other BM25 over its chunks
    /// (the trimmer's, the field signal's) analyses text the same way.
    fn term_config(&self) -> Result<TermConfig, RetrieveError>;
    /// The number of chunks and, per term, how many chunks hold it (IDF of the ranking
    /// signals).
    fn doc_freqs(&self, terms: &[String]) -> Result<(usize, Vec<usize>), RetrieveError>;
}

/// The terms of `text` with repetitions, as every BM25 counts them (the store's postings
/// included): [`bib_text::terms::term_sequence_with`].
pub use bib_text::terms::{term_sequence, term_sequence_with};

/// Sort hits best first (ties by id, for determinism) and keep `limit`.
pub(crate) fn top_hits(mut hits: Vec<Hit>, limit: usize) -> Vec<Hit> {
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    hits.truncate(limit);
    hits
}

/// An in-memory [`ChunkIndex`]: postings-list BM25 and brute-force cosine.
#[derive(Debug, Clone, Default)]
pub struct MemoryIndex {
    chunks: Vec<ChunkRecord>,
    by_id: HashMap<ChunkId, usize>,
    vectors: Vec<Option<Vec<f32>>>,
    postings: HashMap<String, Vec<(u32, u32)>>,
    doc_len: Vec<u32>,
    total_len: u64,
    params: Bm25Params,
    terms: TermConfig,
}

impl MemoryIndex {
    /// An empty index with default BM25 parameters (k1 = 1.2, b = 0.75) and the default term
    /// function.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index whose BM25 uses the term function `terms`.
    pub fn with_terms(terms: TermConfig) -> Self {
        Self {
            terms,
            ..Self::default()
        }
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Add a chunk with an optional embedding (normalised on the way in). A chunk without a
    /// vector is found by BM25 only. Re-adding an id replaces nothing: ids must be unique.
    pub fn add(
        &mut self,
        chunk: ChunkRecord,
        vector: Option<Vec<f32>>,
    ) -> Result<(), RetrieveError> {
        if self.by_id.contains_key(&chunk.id) {
            return Err(RetrieveError::DuplicateChunk(chunk.id));
        }
        let pos = self.chunks.len() as u32;
        let mut tf: HashMap<String, u32> = HashMap::new();
        let seq = term_sequence_with(&chunk.text(), &self.terms);
        for t in &seq {
            *tf.entry(t.clone()).or_default() += 1;
        }
        for (t, f) in tf {
            self.postings.entry(t).or_default().push((pos, f));
        }
        self.doc_len.push(seq.len() as u32);
        self.total_len += seq.len() as u64;
        self.by_id.insert(chunk.id, self.chunks.len());
        self.chunks.push(chunk);
        self.vectors
            .push(vector.map(|v| bib_text::vectors::unit(&v)));
        Ok(())
    }

    /// All chunks, in insertion order.
    pub fn all(&self) -> &[ChunkRecord] {
        &self.chunks
    }

    fn allowed(&self, filter: &Filter) -> Option<Vec<bool>> {
        if filter.is_empty() {
            return None;
        }
        Some(
            self.chunks
                .iter()
                .map(|c| {
                    filter.matches(&c.path, &c.metadata) && filter.matches_collection(&c.collection)
                })
                .collect(),
        )
    }
}

impl ChunkIndex for MemoryIndex {
    fn bm25_top(
        &self,
        query: &str,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, RetrieveError> {
        let n = self.chunks.len();
        if n == 0 || limit == 0 {
            return Ok(Vec::new());
        }
        let allowed = self.allowed(filter);
        let avgdl = self.total_len as f64 / n as f64;
        let mut acc: HashMap<u32, f64> = HashMap::new();
        for q in terms_with(query, &self.terms) {
            let Some(post) = self.postings.get(&q) else {
                continue;
            };
            let w = idf(n, post.len());
            for &(d, f) in post {
                if allowed.as_ref().is_some_and(|a| !a[d as usize]) {
                    continue;
                }
                let dl = f64::from(self.doc_len[d as usize]);
                *acc.entry(d).or_default() += w * tf_factor(f64::from(f), dl, avgdl, self.params);
            }
        }
        let hits = acc
            .into_iter()
            .map(|(d, s)| Hit {
                id: self.chunks[d as usize].id,
                score: s,
            })
            .collect();
        Ok(top_hits(hits, limit))
    }

    fn vector_top(
        &self,
        query_vec: &[f32],
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, RetrieveError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let q = bib_text::vectors::unit(query_vec);
        let allowed = self.allowed(filter);
        let hits = self
            .vectors
            .iter()
            .enumerate()
            .filter(|(i, _)| allowed.as_ref().is_none_or(|a| a[*i]))
            .filter_map(|(i, v)| {
                let v = v.as_ref()?;
                if v.len() != q.len() {
                    return None;
                }
                let dot: f32 = v.iter().zip(&q).map(|(a, b)| a * b).sum();
                Some(Hit {
                    id: self.chunks[i].id,
                    score: f64::from(dot),
                })
            })
            .collect();
        Ok(top_hits(hits, limit))
    }

    fn chunks(&self, ids: &[ChunkId]) -> Result<Vec<ChunkRecord>, RetrieveError> {
        Ok(ids
            .iter()
            .filter_map(|id| self.by_id.get(id).map(|&i| self.chunks[i].clone()))
            .collect())
    }

    fn vectors(&self, ids: &[ChunkId]) -> Result<Vec<(ChunkId, Vec<f32>)>, RetrieveError> {
        Ok(ids
            .iter()
            .filter_map(|id| {
                let &i = self.by_id.get(id)?;
                Some((*id, self.vectors[i].clone()?))
            })
            .collect())
    }

    fn term_config(&self) -> Result<TermConfig, RetrieveError> {
        Ok(self.terms)
    }

    fn doc_freqs(&self, terms: &[String]) -> Result<(usize, Vec<usize>), RetrieveError> {
        Ok((
            self.chunks.len(),
            terms
                .iter()
                .map(|t| self.postings.get(t).map_or(0, Vec::len))
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    pub(crate) fn rec(id: ChunkId, path: &str, content: &str, meta: Value) -> ChunkRecord {
        ChunkRecord {
            id,
            path: path.into(),
            chunk_index: 0,
            title: path.into(),
            heading_path: vec![],
            content: content.into(),
            metadata: meta,
            ..ChunkRecord::default()
        }
    }

    fn sample() -> MemoryIndex {
        let mut ix = MemoryIndex::new();
        let docs = [
            (
                1,
                "guides/a.md",
                "nuget push timeout seconds",
                json!({"app": "cli"}),
                [1.0, 0.0],
            ),
            (
                2,
                "guides/b.md",
                "restore packages from a feed",
                json!({"app": "core"}),
                [0.0, 1.0],
            ),
            (
                3,
                "api/c.md",
                "push a package with the api key push",
                json!({"app": "core"}),
                [0.7, 0.7],
            ),
        ];
        for (id, p, c, m, v) in docs {
            ix.add(rec(id, p, c, m), Some(v.to_vec())).unwrap();
        }
        ix
    }

    #[test]
    fn bm25_ranks_and_skips_non_matching() {
        let ix = sample();
        let hits = ix.bm25_top("push timeout", 10, &Filter::default()).unwrap();
        let ids: Vec<_> = hits.iter().map(|h| h.id).collect();
        assert_eq!(ids, vec![1, 3]);
        assert!(hits[0].score > hits[1].score);
    }

    #[test]
    fn filters_apply_before_the_cut() {
        let ix = sample();
        // Unfiltered top-1 is chunk 1; with app=core the top-1 must be chunk 3, not empty.
        let f = Filter::parse(&["app=core"]).unwrap();
        let hits = ix.bm25_top("push timeout", 1, &f).unwrap();
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![3]);
        let v = ix.vector_top(&[1.0, 0.0], 1, &f).unwrap();
        assert_eq!(v[0].id, 3);
        let p = Filter::parse(&["path=guides/"]).unwrap();
        let v = ix.vector_top(&[0.0, 1.0], 5, &p).unwrap();
        assert_eq!(v.iter().map(|h| h.id).collect::<Vec<_>>(), vec![2, 1]);
    }

    #[test]
    fn vector_is_cosine_on_normalised_vectors() {
        let ix = sample();
        let v = ix.vector_top(&[2.0, 0.0], 3, &Filter::default()).unwrap();
        assert_eq!(v[0].id, 1);
        assert!((v[0].score - 1.0).abs() < 1e-6);
        assert!((v[1].score - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-3);
        // Wrong dimension: nothing, no panic.
        assert!(ix
            .vector_top(&[1.0, 0.0, 0.0], 3, &Filter::default())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn fetch_keeps_order_and_skips_unknown() {
        let ix = sample();
        let c = ix.chunks(&[3, 99, 1]).unwrap();
        assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), vec![3, 1]);
        let mut ix2 = sample();
        assert!(ix2.add(rec(1, "x", "y", Value::Null), None).is_err());
    }

    #[test]
    fn term_sequence_keeps_repetitions() {
        // Issue 13: a whitespace split gave `foo,foo` one `foo` here and two in the store.
        let t = term_sequence("foo,foo");
        assert_eq!(t, ["foo", "foo"]);
        assert_eq!(
            bib_store::lexical::term_counts("foo,foo"),
            [("foo".to_string(), 2)]
        );
        let s = term_sequence("push push src/a.js");
        assert_eq!(s.iter().filter(|t| *t == "push").count(), 2);
        assert!(s.contains(&"src/a.js".to_string()) && s.contains(&"src".to_string()));
    }
}
