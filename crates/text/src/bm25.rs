//! Okapi BM25 (Robertson et al., TREC-3 1994; Robertson & Zaragoza 2009), shared formula.
//!
//! The store scores chunks, the trimmer scores sentences and the packer scores history lines
//! with these same functions over the same [`crate::terms`], so a BM25 score means one thing.
//! [`Bm25Index`] is the small in-memory index used where the corpus is built per request.

use std::collections::HashMap;

/// BM25 parameters. Defaults k1 = 1.2, b = 0.75.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    pub k1: f64,
    pub b: f64,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Self { k1: 1.2, b: 0.75 }
    }
}

/// Robertson IDF with the usual +1 inside the log and a tiny floor, so a term present in more
/// than half the corpus still counts a little instead of subtracting.
pub fn idf(n_docs: usize, doc_freq: usize) -> f64 {
    let n = n_docs.max(1) as f64;
    let df = doc_freq as f64;
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln().max(1e-6)
}

/// The saturated, length-normalised term-frequency factor of BM25 for one term in one document.
pub fn tf_factor(tf: f64, doc_len: f64, avg_doc_len: f64, p: Bm25Params) -> f64 {
    let avg = if avg_doc_len > 0.0 { avg_doc_len } else { 1.0 };
    tf * (p.k1 + 1.0) / (tf + p.k1 * (1.0 - p.b + p.b * doc_len / avg))
}

/// The least upper bound of [`tf_factor`] over every term frequency and document length:
/// `k1 + 1` (approached as `tf` grows). What a term can add to a score at most, per unit of
/// IDF — the bound top-k pruning skips postings by.
pub fn max_tf_factor(p: Bm25Params) -> f64 {
    p.k1 + 1.0
}

/// An in-memory BM25 index over a list of documents (already split into terms).
#[derive(Debug, Clone)]
pub struct Bm25Index {
    params: Bm25Params,
    doc_terms: Vec<HashMap<String, u32>>,
    doc_len: Vec<u32>,
    df: HashMap<String, u32>,
    avgdl: f64,
}

impl Bm25Index {
    /// Build an index where document `i` has the terms `docs[i]` (repetitions count as tf).
    pub fn new<I, D, T>(docs: I, params: Bm25Params) -> Self
    where
        I: IntoIterator<Item = D>,
        D: IntoIterator<Item = T>,
        T: Into<String>,
    {
        let mut doc_terms = Vec::new();
        let mut doc_len = Vec::new();
        let mut df: HashMap<String, u32> = HashMap::new();
        let mut total = 0u64;
        for d in docs {
            let mut tf: HashMap<String, u32> = HashMap::new();
            let mut len = 0u32;
            for t in d {
                *tf.entry(t.into()).or_default() += 1;
                len += 1;
            }
            for k in tf.keys() {
                *df.entry(k.clone()).or_default() += 1;
            }
            total += u64::from(len);
            doc_len.push(len);
            doc_terms.push(tf);
        }
        let n = doc_terms.len().max(1) as f64;
        let avgdl = if total == 0 { 1.0 } else { total as f64 / n };
        Self {
            params,
            doc_terms,
            doc_len,
            df,
            avgdl,
        }
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.doc_terms.len()
    }

    /// Whether the index holds no documents.
    pub fn is_empty(&self) -> bool {
        self.doc_terms.is_empty()
    }

    /// IDF of a term in this corpus.
    pub fn idf(&self, term: &str) -> f64 {
        idf(self.len(), self.df.get(term).copied().unwrap_or(0) as usize)
    }

    /// BM25 score of document `i` for the (distinct) query terms.
    pub fn score(&self, i: usize, query_terms: &[String]) -> f64 {
        let Some(tf) = self.doc_terms.get(i) else {
            return 0.0;
        };
        if tf.is_empty() {
            return 0.0;
        }
        let dl = f64::from(self.doc_len[i]);
        query_terms
            .iter()
            .filter_map(|q| tf.get(q).map(|&f| (q, f)))
            .map(|(q, f)| self.idf(q) * tf_factor(f64::from(f), dl, self.avgdl, self.params))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idf_is_floored_and_decreasing() {
        assert!(idf(10, 1) > idf(10, 5));
        assert!(idf(10, 10) > 0.0);
        assert!((idf(1, 0) - (1.0f64 + 1.5 / 0.5).ln()).abs() < 1e-12);
    }

    #[test]
    fn tf_factor_stays_below_its_bound() {
        let p = Bm25Params::default();
        for tf in [1.0, 3.0, 50.0, 1e6] {
            for dl in [1.0, 10.0, 1000.0] {
                assert!(tf_factor(tf, dl, 10.0, p) < max_tf_factor(p));
            }
        }
        assert!(tf_factor(1e9, 1.0, 10.0, p) > 0.999 * max_tf_factor(p));
    }

    #[test]
    fn rare_term_outscores_common_term() {
        let docs = vec![vec!["a", "rare"], vec!["a", "b"], vec!["a", "c"]];
        let ix = Bm25Index::new(docs, Bm25Params::default());
        let q = |s: &str| vec![s.to_string()];
        assert!(ix.score(0, &q("rare")) > ix.score(0, &q("a")));
        assert_eq!(ix.score(1, &q("rare")), 0.0);
        assert_eq!(ix.score(99, &q("a")), 0.0);
    }

    #[test]
    fn longer_documents_are_normalised_down() {
        let docs = vec![vec!["x", "y"], vec!["x", "y", "z", "w", "v", "u"]];
        let ix = Bm25Index::new(docs, Bm25Params::default());
        let q = vec!["x".to_string()];
        assert!(ix.score(0, &q) > ix.score(1, &q));
    }
}
