//! The relevance floor: is anything in the knowledge base close to the question at all?
//!
//! Ranking scores cannot say: a fused score is normalised per question (the best candidate
//! scores near 1 whatever was asked — "how to bake sourdough bread" scored 0.82 on the NuGet
//! wiki) and it moves whenever the fusion weights do. The floor reads signals that depend on
//! neither: the embedding model's own cosine between the question and the closest chunk of
//! the knowledge base (rank 1 of the vector list, under the ask's filters), and the share of
//! the question's words one result contains. The answer is "no good match"
//! (`no_good_match: true` in JSON; the results are still listed) when the cosine is below the
//! model's floor and no result contains every word of the question — a question that is an
//! exact string (`SOURCE_DATE_EPOCH`, an error code) can embed far from its page and still be
//! answered word for word.
//!
//! The floor is calibrated per model with `bib bench relevance` (BENCHMARKS.md, "Relevance
//! floor"): answerable questions of the NuGet wiki development sets against out-of-domain
//! questions (`bench/wiki/offtopic_*.jsonl`). A model without a calibrated floor, and a
//! BM25-only ask (no vector list, no cosine), never reports `no_good_match` unless it found
//! nothing at all.

use bib_text::terms::{terms_with, wanted_terms, Stemming, TermConfig};
use serde::Serialize;

/// The floor of the default model `use-m3`, from `bib bench relevance`: the highest floor
/// that fires on at most 1.5 % of the answerable development questions (3 of 207 when chosen,
/// 2 since the benchmark ranks with the stored sentence vectors; 0 of the 35 held-out golden
/// ones); it fires on 61 of 80 out-of-domain questions (57 of the 60 that are not about other
/// software).
pub const USE_M3_FLOOR: f64 = 0.22;

/// The floor of `e5-small`, calibrated the same way: its cosines sit high and close together
/// (answerable dev questions: median 0.897, min 0.834; off-topic: median 0.831), yet they
/// separate better than use-m3's — at 0.85 it fires on 63 of 80 off-topic questions, 2 of 207
/// answerable dev ones and 0 of the 35 golden ones. The rule's band ends at 0.857 (3/207);
/// 0.85 is the round value inside it.
pub const E5_SMALL_FLOOR: f64 = 0.85;

/// The calibrated floor of `model_id`, if it has one.
pub fn floor_for(model_id: &str) -> Option<f64> {
    match model_id {
        bib_embed::use_m3::MODEL_ID => Some(USE_M3_FLOOR),
        bib_embed::e5::MODEL_ID => Some(E5_SMALL_FLOOR),
        _ => None,
    }
}

/// How close the knowledge base came to a question, and whether that is close enough.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Relevance {
    /// The model's cosine between the question and the closest chunk passing the filters;
    /// `None` when no vector search ran (BM25 mode).
    pub best_cosine: Option<f64>,
    /// The floor `best_cosine` is held against (`None`: no floor known for the model).
    pub floor: Option<f64>,
    /// The largest share of the question's words that one result contains (a word counts
    /// when the chunk has it or its stem); `None` when the cosine settled the answer alone
    /// ([`Relevance::needs_words`] false), since reading the results' words is most of the
    /// judgement's cost.
    pub term_coverage: Option<f64>,
    /// `best_cosine` is below the floor and no result has every word of the question (or
    /// nothing was found at all).
    pub no_good_match: bool,
}

impl Relevance {
    /// Whether the words of the results can change the judgement: only when the cosine is
    /// below the floor.
    pub fn needs_words(best_cosine: Option<f64>, floor: Option<f64>) -> bool {
        matches!((best_cosine, floor), (Some(c), Some(f)) if c < f)
    }

    /// Judge `best_cosine` against `floor`, unless one result contains every word of the
    /// question (`term_coverage` 1, to be given whenever [`Self::needs_words`]); an answer
    /// with no result is never a good match.
    pub fn judge(
        best_cosine: Option<f64>,
        floor: Option<f64>,
        term_coverage: Option<f64>,
        results: usize,
    ) -> Self {
        let below = Self::needs_words(best_cosine, floor);
        let every_word = term_coverage.is_some_and(|c| c >= 1.0);
        Self {
            best_cosine,
            floor,
            term_coverage,
            no_good_match: results == 0 || (below && !every_word),
        }
    }
}

/// The largest share of `query`'s words found in one of `texts`: a word is found when the
/// text has it or one of its stems under the term function `cfg` (the knowledge base's; its
/// stop words are no words). 0 for a query without words.
pub fn term_coverage(query: &str, texts: &[&str], cfg: &TermConfig) -> f64 {
    let plain = TermConfig {
        stem: Stemming::None,
        ..*cfg
    };
    let words = terms_with(query, &plain);
    if words.is_empty() {
        return 0.0;
    }
    let forms: Vec<Vec<String>> = words.iter().map(|w| terms_with(w, cfg)).collect();
    let wanted: Vec<String> = forms.iter().flatten().cloned().collect();
    texts
        .iter()
        .map(|t| {
            let have = wanted_terms(t, cfg, &wanted);
            let found = forms
                .iter()
                .filter(|f| f.iter().any(|x| have.contains(x)))
                .count();
            found as f64 / words.len() as f64
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_floor_or_empty_is_no_good_match() {
        let f = floor_for("use-m3");
        assert!(Relevance::judge(Some(USE_M3_FLOOR - 0.01), f, Some(0.5), 5).no_good_match);
        assert!(!Relevance::judge(Some(USE_M3_FLOOR), f, Some(0.5), 5).no_good_match);
        assert!(Relevance::judge(Some(0.9), f, Some(1.0), 0).no_good_match);
        // Every word of the question in one result: an exact-string question, answered.
        assert!(!Relevance::judge(Some(0.05), f, Some(1.0), 5).no_good_match);
        // Without a cosine or without a floor nothing is judged but emptiness.
        assert!(!Relevance::judge(None, f, Some(0.0), 3).no_good_match);
        assert!(
            !Relevance::judge(Some(0.01), floor_for("other-model"), Some(0.0), 3).no_good_match
        );
        // Each local model is held against its own floor: e5-small's cosines run far higher.
        let e5 = floor_for("e5-small");
        assert_eq!(e5, Some(E5_SMALL_FLOOR));
        assert!(Relevance::judge(Some(0.80), e5, Some(0.5), 5).no_good_match);
        assert!(!Relevance::judge(Some(0.80), f, Some(0.5), 5).no_good_match);
        // At or above the floor the words cannot change the answer, and are not read.
        assert!(!Relevance::needs_words(Some(USE_M3_FLOOR), f));
        assert!(!Relevance::needs_words(None, f) && !Relevance::needs_words(Some(0.0), None));
        assert!(Relevance::needs_words(Some(USE_M3_FLOOR - 0.01), f));
        assert!(!Relevance::judge(Some(0.9), f, None, 5).no_good_match);
    }

    #[test]
    fn coverage_counts_words_found_in_one_text_stems_included() {
        let cfg = TermConfig::default();
        let texts = [
            "[Doc: Restore]\nPackages are restored from the cache.",
            "The cache.",
        ];
        assert_eq!(term_coverage("restoring package cache", &texts, &cfg), 1.0);
        assert_eq!(
            term_coverage("bake sourdough cache", &texts, &cfg),
            1.0 / 3.0
        );
        assert_eq!(term_coverage("", &texts, &cfg), 0.0);
        assert_eq!(term_coverage("cache", &[], &cfg), 0.0);
    }
}
