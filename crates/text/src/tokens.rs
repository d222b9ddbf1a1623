//! Token accounting.
//!
//! Two ways to count: [`estimate_tokens`], the spec's cheap heuristic (words × 1.3, rounded),
//! which the A/B harness reports so numbers stay comparable with the seed system; and a
//! [`TokenCounter`], the exact count of a real tokenizer (the embedding model's own plugs in
//! through this trait).

/// Spec 000 `estimateTokens`: whitespace-separated words × 1.3, rounded to the nearest integer.
pub fn estimate_tokens(text: &str) -> usize {
    let words = text.split_whitespace().count();
    (words as f64 * 1.3).round() as usize
}

/// Sum of [`estimate_tokens`] over several texts, each rounded on its own as the spec does per chunk.
pub fn estimate_tokens_all<'a>(texts: impl IntoIterator<Item = &'a str>) -> usize {
    texts.into_iter().map(estimate_tokens).sum()
}

/// An exact token counter: the tokenizer of a model, or any other deterministic count.
pub trait TokenCounter: Send + Sync {
    /// Number of tokens `text` occupies for this tokenizer, without special tokens.
    fn count_tokens(&self, text: &str) -> usize;
}

/// The heuristic as a [`TokenCounter`], for places that need a counter but have no model.
#[derive(Debug, Default, Clone, Copy)]
pub struct EstimateCounter;

impl TokenCounter for EstimateCounter {
    fn count_tokens(&self, text: &str) -> usize {
        estimate_tokens(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_matches_spec_examples() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("   \n\t"), 0);
        // 3 words × 1.3 = 3.9 → 4
        assert_eq!(estimate_tokens("uno dos tres"), 4);
        // 10 words × 1.3 = 13
        assert_eq!(estimate_tokens("a b c d e f g h i j"), 13);
        // 5 × 1.3 = 6.5 → rounds half away from zero → 7 (JS Math.round gives 7 too)
        assert_eq!(estimate_tokens("a b c d e"), 7);
        assert_eq!(estimate_tokens_all(["a b c d e", "uno dos tres"]), 11);
    }
}
