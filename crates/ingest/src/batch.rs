//! Padded-token batching (spec 004 `splitChunkBatches`).
//!
//! An embedding model pads every text of a batch to the longest one, so a batch really costs
//! `longest × count` tokens. A batch closes when adding the next text would push that padded
//! cost over the budget, or at the maximum count. A text longer than the budget alone travels in
//! a batch of its own (never split). Callers sort by length first so similar lengths share a
//! batch and little is padded.

use std::ops::Range;

/// Split items with the given token counts, in order, into consecutive batches.
pub fn padded_batches(
    tokens: &[usize],
    max_items: usize,
    token_budget: usize,
) -> Vec<Range<usize>> {
    let max_items = max_items.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    let mut longest = 0usize;
    for (i, &t) in tokens.iter().enumerate() {
        let n = i - start;
        let new_longest = longest.max(t);
        if n > 0 && (n + 1 > max_items || new_longest.saturating_mul(n + 1) > token_budget) {
            out.push(start..i);
            start = i;
            longest = t;
        } else {
            longest = new_longest;
        }
    }
    if start < tokens.len() {
        out.push(start..tokens.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn closes_on_padded_cost_not_sum() {
        // 10 small texts and one dense one: padded cost is what closes the batch.
        let mut t = vec![10; 10];
        t.push(1000);
        let b = padded_batches(&t, 25, 2000);
        assert_eq!(b, vec![0..10, 10..11]);
        assert_eq!(padded_batches(&[5; 7], 3, 1000), vec![0..3, 3..6, 6..7]);
        assert_eq!(padded_batches(&[5000], 3, 1000), vec![0..1]);
        assert!(padded_batches(&[], 3, 1000).is_empty());
    }

    proptest! {
        #[test]
        fn batches_cover_in_order_and_respect_limits(
            t in proptest::collection::vec(1usize..500, 0..80),
            max in 1usize..30,
            budget in 1usize..3000,
        ) {
            let b = padded_batches(&t, max, budget);
            let mut next = 0;
            for r in &b {
                prop_assert_eq!(r.start, next);
                prop_assert!(!r.is_empty());
                prop_assert!(r.len() <= max);
                let longest = t[r.clone()].iter().copied().max().unwrap();
                prop_assert!(r.len() == 1 || longest * r.len() <= budget);
                next = r.end;
            }
            prop_assert_eq!(next, t.len());
        }
    }
}
