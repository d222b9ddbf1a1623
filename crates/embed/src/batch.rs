//! Batching by padded tokens (spec 004 `splitChunkBatches`).
//!
//! Engines that pad every text of a batch to the longest one pay `longest × count` tokens, not
//! the sum. [`split_batches`] sorts items by length (so neighbours have similar lengths and
//! little is padded) and closes a batch when adding the next item would push that padded cost
//! over the budget, or when the batch has reached the item cap. An item that alone exceeds the
//! budget travels in a batch of its own (the embedder truncates it to its maximum input).
//! [`BatchPlan::padding_efficiency`] reports how much of the padded cost is real tokens.

use crate::{EmbedError, EmbedKind, Embedder};

/// Batches as lists of item indices (into the caller's slice), plus token accounting.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchPlan {
    /// Each batch lists indices into the input; every index appears exactly once overall.
    pub batches: Vec<Vec<usize>>,
    /// Sum of the items' token counts.
    pub real_tokens: usize,
    /// Sum over batches of `longest item × items`.
    pub padded_tokens: usize,
}

impl BatchPlan {
    /// `real_tokens / padded_tokens` (1.0 for an empty plan): the share of the padded cost that
    /// is real text.
    pub fn padding_efficiency(&self) -> f64 {
        if self.padded_tokens == 0 {
            1.0
        } else {
            self.real_tokens as f64 / self.padded_tokens as f64
        }
    }
}

/// Split items with the given token counts into batches whose padded cost
/// (`longest × items`) stays within `token_budget` and whose size stays within `max_items`
/// (at least 1). Items are sorted by token count first (ties keep input order); an item larger
/// than the budget forms a batch alone.
pub fn split_batches(token_counts: &[usize], token_budget: usize, max_items: usize) -> BatchPlan {
    let max_items = max_items.max(1);
    let mut order: Vec<usize> = (0..token_counts.len()).collect();
    order.sort_by_key(|&i| token_counts[i]);
    let mut plan = BatchPlan {
        real_tokens: token_counts.iter().sum(),
        ..BatchPlan::default()
    };
    let mut current: Vec<usize> = Vec::new();
    let mut longest = 0;
    let close = |plan: &mut BatchPlan, current: &mut Vec<usize>, longest: usize| {
        if !current.is_empty() {
            plan.padded_tokens += longest * current.len();
            plan.batches.push(std::mem::take(current));
        }
    };
    for i in order {
        let n = token_counts[i];
        let new_longest = longest.max(n);
        let fits = current.len() < max_items
            && new_longest.saturating_mul(current.len() + 1) <= token_budget;
        if !current.is_empty() && !fits {
            close(&mut plan, &mut current, longest);
            longest = 0;
        }
        current.push(i);
        longest = longest.max(n);
    }
    close(&mut plan, &mut current, longest);
    plan
}

/// Embed `texts` in padded-token batches planned with the embedder's own tokenizer; vectors come
/// back in input order, with the plan (for its padding efficiency).
pub fn embed_in_batches(
    embedder: &dyn Embedder,
    texts: &[&str],
    kind: EmbedKind,
    token_budget: usize,
    max_items: usize,
) -> Result<(Vec<Vec<f32>>, BatchPlan), EmbedError> {
    let max_in = embedder.max_input_tokens().max(1);
    let counts: Vec<usize> = texts
        .iter()
        .map(|t| embedder.tokenizer().count_tokens(t).min(max_in))
        .collect();
    let plan = split_batches(&counts, token_budget, max_items);
    let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
    for batch in &plan.batches {
        let group: Vec<&str> = batch.iter().map(|&i| texts[i]).collect();
        let vectors = embedder.embed(&group, kind)?;
        if vectors.len() != group.len() {
            return Err(EmbedError::Other(format!(
                "{} returned {} vectors for {} texts",
                embedder.model_id(),
                vectors.len(),
                group.len()
            )));
        }
        for (&i, v) in batch.iter().zip(vectors) {
            out[i] = Some(v);
        }
    }
    let vectors = out.into_iter().map(Option::unwrap_or_default).collect();
    Ok((vectors, plan))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dense_item_closes_on_padded_cost_not_sum() {
        // Nine short items and one long one: 9×10 fits in 100, but adding the 60-token item
        // would cost 60×10 = 600 > 100 even though the sum (150) would be small.
        let mut counts = vec![10; 9];
        counts.push(60);
        let plan = split_batches(&counts, 100, 25);
        assert_eq!(plan.batches, vec![(0..9).collect::<Vec<_>>(), vec![9]]);
        assert_eq!(plan.padded_tokens, 90 + 60);
        assert!((plan.padding_efficiency() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn sorts_by_length_and_respects_cap_and_oversized() {
        let plan = split_batches(&[5, 500, 1, 3], 100, 2);
        assert_eq!(plan.batches, vec![vec![2, 3], vec![0], vec![1]]);
        assert_eq!(plan.padded_tokens, 3 * 2 + 5 + 500);
        assert!(split_batches(&[], 10, 3).batches.is_empty());
        assert_eq!(split_batches(&[], 10, 3).padding_efficiency(), 1.0);
        // A zero cap behaves as one item per batch.
        assert_eq!(split_batches(&[1, 1], 10, 0).batches.len(), 2);
    }

    proptest! {
        #[test]
        fn batching_invariants(
            counts in proptest::collection::vec(0usize..400, 0..120),
            budget in 1usize..2000,
            cap in 1usize..40,
        ) {
            let plan = split_batches(&counts, budget, cap);
            let mut seen: Vec<usize> = plan.batches.iter().flatten().copied().collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..counts.len()).collect::<Vec<_>>());
            let mut padded = 0;
            for b in &plan.batches {
                prop_assert!(!b.is_empty());
                prop_assert!(b.len() <= cap);
                let longest = b.iter().map(|&i| counts[i]).max().unwrap_or(0);
                if b.len() > 1 {
                    prop_assert!(longest * b.len() <= budget);
                }
                if longest > budget {
                    prop_assert_eq!(b.len(), 1, "oversized items travel alone");
                }
                padded += longest * b.len();
            }
            // Sorted by length: every batch's longest is at most the next batch's shortest.
            for pair in plan.batches.windows(2) {
                let max_a = pair[0].iter().map(|&i| counts[i]).max().unwrap_or(0);
                let min_b = pair[1].iter().map(|&i| counts[i]).min().unwrap_or(0);
                prop_assert!(max_a <= min_b);
            }
            prop_assert_eq!(padded, plan.padded_tokens);
            prop_assert_eq!(plan.real_tokens, counts.iter().sum::<usize>());
            prop_assert!(plan.padding_efficiency() <= 1.0 + 1e-12);
        }
    }
}
