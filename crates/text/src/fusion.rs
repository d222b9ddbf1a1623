//! Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009): the one formula every
//! fused ranking in the system adds up — the knowledge base's hybrid ask and the history
//! packer's lists alike.

/// What an entry at 1-based `rank` of one list adds to its fused score: `weight / (k + rank)`.
/// Only ranks enter, so lists whose raw scores live on different scales (an unbounded BM25, a
/// cosine) need no calibration; `weight` says how much one list's opinion counts.
pub fn rrf(weight: f64, k: f64, rank: usize) -> f64 {
    weight / (k + rank as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earlier_ranks_and_heavier_lists_add_more() {
        assert_eq!(rrf(1.0, 60.0, 1), 1.0 / 61.0);
        assert!(rrf(1.0, 60.0, 1) > rrf(1.0, 60.0, 2));
        assert!(rrf(2.0, 60.0, 5) > rrf(1.0, 60.0, 5));
        // A smaller k lets the top of a list stand further above the rest.
        let top_over_tenth = |k| rrf(1.0, k, 1) / rrf(1.0, k, 10);
        assert!(top_over_tenth(10.0) > top_over_tenth(60.0));
    }
}
