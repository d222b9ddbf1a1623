//! Term frequencies for the lexical index: the one term function with counts,
//! [`bib_text::terms::term_counts_with`], re-exported where the stores use it. A chunk's BM25
//! length is the sum of its counts; which [`bib_text::terms::TermConfig`] a store counts with
//! is the one it records ([`crate::Store::term_config`]). The counting rules are tested next to
//! the term function (`bib_text::terms`), the stores' use of them by [`crate::conformance`].

pub use bib_text::terms::{term_counts, term_counts_with, term_sequence, term_sequence_with};

use std::collections::{HashMap, HashSet};

use bib_text::bm25::{idf, max_tf_factor, tf_factor, Bm25Params};

use crate::{ChunkId, LexicalStats, NodeId};

/// Where [`top_bm25`] reads postings: a store's index, or a test's map.
pub trait PostingSource {
    type Error;
    /// How many chunks hold `term`.
    fn doc_freq(&mut self, term: &str) -> Result<u64, Self::Error>;
    /// Every posting of `term`, as `(chunk, node, tf, dl)`.
    fn scan(
        &mut self,
        term: &str,
        each: &mut dyn FnMut(ChunkId, NodeId, u32, u32),
    ) -> Result<(), Self::Error>;
    /// The postings of `term` among `chunks` (ascending), as `(chunk, tf, dl)`.
    fn lookup(
        &mut self,
        term: &str,
        chunks: &[ChunkId],
        each: &mut dyn FnMut(ChunkId, u32, u32),
    ) -> Result<(), Self::Error>;
}

/// A point lookup of one posting costs about as much as reading this many postings of a scan
/// (SQLite: a B-tree descent per lookup against consecutive cells).
const LOOKUP_COST: u64 = 32;

/// One query term: its weight (occurrences in the query × IDF) and what it can add at most.
struct WeightedTerm<'q> {
    term: &'q str,
    weight: f64,
    bound: f64,
}

/// The `limit` best chunks by BM25 for the analysed `query` terms (repeats count, as in
/// [`bib_text::bm25::Bm25Index::score`]), among chunks whose node is `allowed` (`None`: all),
/// best first, ties by chunk id — exactly, reading fewer postings than a full scan.
///
/// Term-at-a-time with MaxScore pruning (Turtle & Flood 1995): terms go from the highest
/// possible contribution (`weight · (k1 + 1)`) to the lowest, each scanned in full, until the
/// sum of what the remaining terms could still add falls below the `limit`-th best score so
/// far. From then on no chunk seen by none of the scanned terms can reach the top, so the
/// remaining terms (the common ones, with the longest posting lists) are only looked up for
/// the chunks that still can — by point lookups where that is cheaper than the scan. Scores
/// only grow, so a chunk whose score plus every remaining bound is below the current
/// `limit`-th best is dropped for good; the ones returned carry their full scores.
pub fn top_bm25<S: PostingSource>(
    source: &mut S,
    query: &[String],
    stats: LexicalStats,
    limit: usize,
    allowed: Option<&HashSet<NodeId>>,
) -> Result<Vec<(ChunkId, f64)>, S::Error> {
    if limit == 0 || query.is_empty() {
        return Ok(Vec::new());
    }
    let params = Bm25Params::default();
    let avg = stats.avg_len();
    let mut counts: Vec<(&str, u32)> = Vec::new();
    for t in query {
        match counts.iter_mut().find(|(q, _)| q == t) {
            Some((_, n)) => *n += 1,
            None => counts.push((t, 1)),
        }
    }
    let mut terms = Vec::with_capacity(counts.len());
    for (term, n) in counts {
        let df = source.doc_freq(term)?;
        if df == 0 {
            continue;
        }
        let weight = f64::from(n) * idf(stats.chunks as usize, df as usize);
        let bound = weight * max_tf_factor(params);
        terms.push((
            WeightedTerm {
                term,
                weight,
                bound,
            },
            df,
        ));
    }
    terms.sort_by(|a, b| b.0.bound.total_cmp(&a.0.bound).then(a.0.term.cmp(b.0.term)));
    // rest[i]: what terms i.. can add at most (with a margin for rounding).
    let mut rest = vec![0.0; terms.len() + 1];
    for i in (0..terms.len()).rev() {
        rest[i] = rest[i + 1] + terms[i].0.bound;
    }
    let rest: Vec<f64> = rest.into_iter().map(|r| r * (1.0 + 1e-9) + 1e-12).collect();
    let pass = |node: NodeId| allowed.is_none_or(|a| a.contains(&node));

    let mut scores: HashMap<ChunkId, f64> = HashMap::new();
    let mut i = 0;
    while i < terms.len() {
        if scores.len() >= limit && rest[i] < kth_best(&scores, limit) {
            break;
        }
        let w = terms[i].0.weight;
        source.scan(terms[i].0.term, &mut |chunk, node, tf, dl| {
            if pass(node) {
                let s = w * tf_factor(f64::from(tf), f64::from(dl), avg, params);
                *scores.entry(chunk).or_insert(0.0) += s;
            }
        })?;
        i += 1;
    }
    if i < terms.len() {
        // Only chunks already seen can still make the top; rescore those that can.
        let mut floor = kth_best(&scores, limit);
        scores.retain(|_, s| *s + rest[i] >= floor);
        for (j, (t, df)) in terms.iter().enumerate().skip(i) {
            let w = t.weight;
            let lookup = (scores.len() as u64).saturating_mul(LOOKUP_COST) < *df;
            let mut ids: Vec<ChunkId> = Vec::new();
            if lookup {
                ids = scores.keys().copied().collect();
                ids.sort_unstable();
            }
            let mut add = |chunk: ChunkId, tf: u32, dl: u32| {
                if let Some(s) = scores.get_mut(&chunk) {
                    *s += w * tf_factor(f64::from(tf), f64::from(dl), avg, params);
                }
            };
            if lookup {
                source.lookup(t.term, &ids, &mut add)?;
            } else {
                source.scan(t.term, &mut |chunk, _, tf, dl| add(chunk, tf, dl))?;
            }
            floor = kth_best(&scores, limit);
            scores.retain(|_, s| *s + rest[j + 1] >= floor);
        }
    }
    let mut ranked: Vec<(ChunkId, f64)> = scores.into_iter().collect();
    ranked.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.truncate(limit);
    Ok(ranked)
}

/// The `k`-th best score (the lowest when there are fewer).
fn kth_best(scores: &HashMap<ChunkId, f64>, k: usize) -> f64 {
    let mut v: Vec<f64> = scores.values().copied().collect();
    if v.is_empty() {
        return f64::NEG_INFINITY;
    }
    let k = k.min(v.len());
    let (_, kth, _) = v.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    *kth
}

#[cfg(test)]
mod tests {
    use super::*;
    use bib_text::bm25::Bm25Index;
    use proptest::prelude::*;

    /// Postings in memory, counting what was read.
    struct Mem {
        /// term → (chunk, node, tf, dl), ascending by chunk.
        postings: HashMap<String, Vec<(ChunkId, NodeId, u32, u32)>>,
        read: usize,
    }

    impl PostingSource for Mem {
        type Error = std::convert::Infallible;
        fn doc_freq(&mut self, term: &str) -> Result<u64, Self::Error> {
            Ok(self.postings.get(term).map_or(0, |p| p.len() as u64))
        }
        fn scan(
            &mut self,
            term: &str,
            each: &mut dyn FnMut(ChunkId, NodeId, u32, u32),
        ) -> Result<(), Self::Error> {
            for &(c, n, tf, dl) in self.postings.get(term).into_iter().flatten() {
                self.read += 1;
                each(c, n, tf, dl);
            }
            Ok(())
        }
        fn lookup(
            &mut self,
            term: &str,
            chunks: &[ChunkId],
            each: &mut dyn FnMut(ChunkId, u32, u32),
        ) -> Result<(), Self::Error> {
            let list = self.postings.get(term).map(Vec::as_slice).unwrap_or(&[]);
            for c in chunks {
                self.read += 1;
                if let Ok(i) = list.binary_search_by_key(c, |p| p.0) {
                    each(*c, list[i].2, list[i].3);
                }
            }
            Ok(())
        }
    }

    /// Documents of words from a skewed vocabulary (word 0 nearly everywhere, word 30 rare).
    fn corpus(seed: u64, docs: usize) -> Vec<Vec<String>> {
        let mut x = seed.max(1);
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        (0..docs)
            .map(|_| {
                let len = 3 + next(20);
                (0..len)
                    .map(|_| {
                        let spread = next(31) + 1;
                        format!("w{}", next(spread))
                    })
                    .collect()
            })
            .collect()
    }

    fn mem(docs: &[Vec<String>]) -> (Mem, LexicalStats) {
        let mut postings: HashMap<String, Vec<(ChunkId, NodeId, u32, u32)>> = HashMap::new();
        let mut total = 0u64;
        for (i, d) in docs.iter().enumerate() {
            let mut tf: HashMap<&str, u32> = HashMap::new();
            for t in d {
                *tf.entry(t).or_default() += 1;
            }
            for (t, n) in tf {
                postings.entry(t.to_string()).or_default().push((
                    i as ChunkId,
                    (i % 3) as NodeId,
                    n,
                    d.len() as u32,
                ));
            }
            total += d.len() as u64;
        }
        let stats = LexicalStats {
            chunks: docs.len() as u64,
            total_len: total,
            terms: postings.len() as u64,
        };
        (Mem { postings, read: 0 }, stats)
    }

    proptest! {
        /// Pruned top-k equals the in-memory index's full ranking, cut at k (filtered too).
        #[test]
        fn pruning_keeps_the_exact_top_k(seed in 1u64..u64::MAX, limit in 1usize..12,
                                         q in proptest::collection::vec(0u64..32, 1..6),
                                         filtered: bool) {
            let docs = corpus(seed, 120);
            let (mut m, stats) = mem(&docs);
            let query: Vec<String> = q.iter().map(|i| format!("w{i}")).collect();
            let allowed: HashSet<NodeId> = [0, 2].into_iter().collect();
            let allowed = filtered.then_some(&allowed);
            let ix = Bm25Index::new(docs.iter().cloned(), Bm25Params::default());
            let mut want: Vec<(ChunkId, f64)> = (0..docs.len())
                .filter(|i| allowed.is_none_or(|a| a.contains(&((i % 3) as NodeId))))
                .map(|i| (i as ChunkId, ix.score(i, &query)))
                .filter(|(_, s)| *s > 0.0)
                .collect();
            want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            want.truncate(limit);
            let got = top_bm25(&mut m, &query, stats, limit, allowed).unwrap();
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((g.1 - w.1).abs() <= 1e-9 * w.1.max(1.0), "{:?} vs {:?}", got, want);
            }
            // Equal scores may list in either order only if they are equal to 1e-9.
            for g in &got {
                let s = ix.score(g.0 as usize, &query);
                prop_assert!((g.1 - s).abs() <= 1e-9 * s.max(1.0));
            }
        }
    }

    #[test]
    fn rare_terms_first_skip_most_common_postings() {
        // 2,000 documents hold "common"; 5 hold "rare".
        let docs: Vec<Vec<String>> = (0..2000)
            .map(|i| {
                let mut d = vec!["common".to_string(), format!("filler{}", i % 50)];
                if i % 400 == 0 {
                    d.push("rare".into());
                }
                d
            })
            .collect();
        let (mut m, stats) = mem(&docs);
        let q = vec!["rare".to_string(), "common".to_string()];
        let got = top_bm25(&mut m, &q, stats, 3, None).unwrap();
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|(id, _)| id % 400 == 0), "{got:?}");
        assert!(m.read < 100, "read {} postings of 2,005", m.read);
    }
}
