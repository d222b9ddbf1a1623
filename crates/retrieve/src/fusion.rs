//! Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009).
//!
//! `fused(d) = Σ_lists 1 / (k + rank_list(d))`, ranks 1-based, a list where `d` is absent
//! contributes nothing. Only ranks enter: raw scores are kept for display but never mixed,
//! because BM25 is unbounded and cosine is not, and spec 003 measured rank fusion above both a
//! weighted score sum and either list alone.

use std::collections::HashMap;

use serde::Serialize;

use crate::index::{ChunkId, Hit};

/// The `k` of RRF used unless configured otherwise.
pub const DEFAULT_RRF_K: f64 = 60.0;

/// Where a chunk stood in one input list.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ListHit {
    /// Raw score in that list (BM25 score or cosine).
    pub score: f64,
    /// 1-based rank in that list.
    pub rank: usize,
}

/// A fused entry: the RRF score and the entry's place in every input list.
#[derive(Debug, Clone, PartialEq)]
pub struct FusedHit {
    pub id: ChunkId,
    pub score: f64,
    /// One slot per input list, `None` where the chunk was absent.
    pub lists: Vec<Option<ListHit>>,
}

/// Fuse ranked lists (each best first) by RRF with constant `k`. Output best first; ties broken
/// by the best single rank, then by id, so the order is deterministic.
pub fn rrf_fuse(lists: &[Vec<Hit>], k: f64) -> Vec<FusedHit> {
    rrf_fuse_weighted(lists, &[], k)
}

/// Weighted RRF: list `i` contributes `weights[i] / (k + rank)` (a missing weight is 1). A
/// weight still only scales *ranks*: it says how much one list's opinion counts when the two
/// lists are of unequal quality (e.g. a sentence-similarity model on claim → abstract search),
/// without ever mixing raw scores.
pub fn rrf_fuse_weighted(lists: &[Vec<Hit>], weights: &[f64], k: f64) -> Vec<FusedHit> {
    let mut by_id: HashMap<ChunkId, FusedHit> = HashMap::new();
    for (li, list) in lists.iter().enumerate() {
        for (pos, h) in list.iter().enumerate() {
            let rank = pos + 1;
            let e = by_id.entry(h.id).or_insert_with(|| FusedHit {
                id: h.id,
                score: 0.0,
                lists: vec![None; lists.len()],
            });
            // A list that repeats an id counts only its best (first) position.
            if e.lists[li].is_none() {
                e.lists[li] = Some(ListHit {
                    score: h.score,
                    rank,
                });
                e.score += bib_text::fusion::rrf(weights.get(li).copied().unwrap_or(1.0), k, rank);
            }
        }
    }
    let mut out: Vec<FusedHit> = by_id.into_values().collect();
    let best_rank = |f: &FusedHit| {
        f.lists
            .iter()
            .flatten()
            .map(|l| l.rank)
            .min()
            .unwrap_or(usize::MAX)
    };
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(best_rank(a).cmp(&best_rank(b)))
            .then(a.id.cmp(&b.id))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn list(ids: &[ChunkId]) -> Vec<Hit> {
        ids.iter()
            .enumerate()
            .map(|(i, &id)| Hit {
                id,
                score: 100.0 - i as f64,
            })
            .collect()
    }

    #[test]
    fn fuses_by_rank_with_k() {
        let f = rrf_fuse(&[list(&[1, 2, 3]), list(&[3, 1, 4])], 60.0);
        let ids: Vec<_> = f.iter().map(|h| h.id).collect();
        // 1: 1/61 + 1/62; 3: 1/63 + 1/61; 2: 1/62; 4: 1/63
        assert_eq!(ids, vec![1, 3, 2, 4]);
        assert!((f[0].score - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-12);
        assert_eq!(
            f[0].lists[0],
            Some(ListHit {
                score: 100.0,
                rank: 1
            })
        );
        assert_eq!(
            f[0].lists[1],
            Some(ListHit {
                score: 99.0,
                rank: 2
            })
        );
        assert_eq!(f[3].lists[0], None);
    }

    #[test]
    fn an_item_in_both_lists_beats_a_single_top() {
        // Rank 2 in both beats rank 1 in one list only.
        let f = rrf_fuse(&[list(&[9, 5]), list(&[8, 5])], 60.0);
        assert_eq!(f[0].id, 5);
    }

    #[test]
    fn k_changes_the_balance() {
        // With a small k, a single first place beats two third places; with k = 60 it does not.
        let a = list(&[1, 7, 2]);
        let b = list(&[3, 8, 2]);
        assert_eq!(rrf_fuse(&[a.clone(), b.clone()], 1.0)[0].id, 1);
        assert_eq!(rrf_fuse(&[a, b], 60.0)[0].id, 2);
    }

    #[test]
    fn raw_scores_do_not_matter() {
        let mut a = list(&[1, 2, 3]);
        a.iter_mut().for_each(|h| h.score *= 1000.0);
        let b = list(&[2, 3, 1]);
        let f1: Vec<_> = rrf_fuse(&[a, b.clone()], 60.0)
            .iter()
            .map(|h| h.id)
            .collect();
        let f2: Vec<_> = rrf_fuse(&[list(&[1, 2, 3]), b], 60.0)
            .iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(f1, f2);
    }

    #[test]
    fn weights_tilt_the_balance_toward_one_list() {
        // Equal weights (k = 1): 2 (rank 2 + rank 2: 2/3) beats 1 and 3 (rank 1 once: 1/2).
        let a = list(&[1, 2]);
        let b = list(&[3, 2]);
        assert_eq!(
            rrf_fuse_weighted(&[a.clone(), b.clone()], &[1.0, 1.0], 1.0)[0].id,
            2
        );
        // A heavy first list: its first place (3/2) beats 2 (3/3 + 0.5/3).
        assert_eq!(
            rrf_fuse_weighted(&[a.clone(), b.clone()], &[3.0, 0.5], 1.0)[0].id,
            1
        );
        // Unit weights are the plain RRF.
        assert_eq!(
            rrf_fuse_weighted(&[a.clone(), b.clone()], &[1.0, 1.0], 60.0),
            rrf_fuse(&[a, b], 60.0)
        );
    }

    proptest! {
        #[test]
        fn fused_is_a_sorted_union(a in proptest::collection::vec(0i64..30, 0..20),
                                   b in proptest::collection::vec(0i64..30, 0..20)) {
            let f = rrf_fuse(&[list(&a), list(&b)], 60.0);
            let mut union: Vec<_> = a.iter().chain(&b).copied().collect();
            union.sort();
            union.dedup();
            let mut got: Vec<_> = f.iter().map(|h| h.id).collect();
            got.sort();
            prop_assert_eq!(got, union);
            for w in f.windows(2) {
                prop_assert!(w[0].score >= w[1].score);
            }
            for h in &f {
                let s: f64 = h.lists.iter().flatten().map(|l| 1.0 / (60.0 + l.rank as f64)).sum();
                prop_assert!((s - h.score).abs() < 1e-12);
            }
        }
    }
}
