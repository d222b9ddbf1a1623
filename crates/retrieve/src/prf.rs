//! Pseudo-relevance feedback (issue 15 candidate signals): the best few candidates after the
//! other signals are taken as relevant, and every re-scored candidate is scored by how close
//! it is to them — a paraphrased question whose own words miss the answer's chunk can still
//! reach it through the words (or the vector) of the chunks it did find.
//!
//! - **prf** (lexical, RM3-style): a feedback term model `P(t | R) = Σ_d w_d · tf(t, d) / |d|`
//!   over the feedback chunks (`w_d` their scores, summing to 1), the question's own terms
//!   left out, the `terms` best kept by `P(t | R) · idf(t)`; each candidate scores the BM25 of
//!   that weighted query, divided by the best candidate's;
//! - **prf_vec** (dense, Rocchio-style): the cosine of each candidate's vector to the mean of
//!   the feedback chunks' vectors, min-max scaled over the candidates.
//!
//! Everything here is pure: the caller gathers the term sequences, document frequencies and
//! vectors.

use std::collections::{HashMap, HashSet};

use bib_text::bm25::{idf, tf_factor, Bm25Params};

/// The feedback term model: the expansion terms and their weights `P(t | R)` (renormalised
/// over the kept terms), best first.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackTerms {
    pub terms: Vec<(String, f64)>,
}

/// Term counts of one text's term sequence.
fn counts(seq: &[String]) -> HashMap<&str, f64> {
    let mut m: HashMap<&str, f64> = HashMap::new();
    for t in seq {
        *m.entry(t.as_str()).or_default() += 1.0;
    }
    m
}

/// The feedback chunks' term model. `feedback` pairs each chunk's term sequence with its
/// weight (its score; non-positive weights count as the smallest positive one), `query` holds
/// the question's terms (left out), `df(term)` gives `(n_docs, doc_freq)`. Terms occurring in
/// a single feedback chunk only once are noise at this scale and left out too.
pub fn feedback_terms(
    feedback: &[(&[String], f64)],
    query: &[String],
    keep: usize,
    df: &dyn Fn(&str) -> (usize, usize),
) -> FeedbackTerms {
    let q: HashSet<&str> = query.iter().map(String::as_str).collect();
    let floor = feedback
        .iter()
        .map(|f| f.1)
        .filter(|w| *w > 0.0)
        .fold(f64::INFINITY, f64::min);
    let floor = if floor.is_finite() { floor } else { 1.0 };
    let weights: Vec<f64> = feedback.iter().map(|f| f.1.max(floor)).collect();
    let total: f64 = weights.iter().sum();
    let mut model: HashMap<&str, (f64, f64)> = HashMap::new(); // term → (P(t|R), raw count)
    for ((seq, _), w) in feedback.iter().zip(&weights) {
        if seq.is_empty() {
            continue;
        }
        let len = seq.len() as f64;
        for (t, c) in counts(seq) {
            if q.contains(t) {
                continue;
            }
            let e = model.entry(t).or_default();
            e.0 += (w / total) * c / len;
            e.1 += c;
        }
    }
    let mut ranked: Vec<(String, f64, f64)> = model
        .into_iter()
        .filter(|(_, (_, raw))| *raw >= 2.0)
        .map(|(t, (p, _))| {
            let (n, d) = df(t);
            (t.to_string(), p, p * idf(n, d))
        })
        .filter(|(_, _, s)| *s > 0.0)
        .collect();
    ranked.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(keep);
    let mass: f64 = ranked.iter().map(|r| r.1).sum();
    FeedbackTerms {
        terms: ranked
            .into_iter()
            .map(|(t, p, _)| (t, if mass > 0.0 { p / mass } else { 0.0 }))
            .collect(),
    }
}

/// Each candidate's BM25 of the weighted feedback query (document frequencies from `df`, the
/// average length over the candidates), divided by the best; with the expansion terms it
/// holds. All zeros when no candidate holds a term.
pub fn feedback_scores(
    model: &FeedbackTerms,
    candidates: &[&[String]],
    df: &dyn Fn(&str) -> (usize, usize),
) -> Vec<(f64, Vec<String>)> {
    let p = Bm25Params::default();
    let avg =
        candidates.iter().map(|c| c.len() as f64).sum::<f64>() / (candidates.len().max(1) as f64);
    let idfs: Vec<f64> = model
        .terms
        .iter()
        .map(|(t, _)| {
            let (n, d) = df(t);
            idf(n, d)
        })
        .collect();
    let raw: Vec<(f64, Vec<String>)> = candidates
        .iter()
        .map(|seq| {
            let c = counts(seq);
            let len = seq.len() as f64;
            let mut s = 0.0;
            let mut held = Vec::new();
            for ((t, w), i) in model.terms.iter().zip(&idfs) {
                if let Some(&tf) = c.get(t.as_str()) {
                    s += w * i * tf_factor(tf, len, avg.max(1.0), p);
                    held.push(t.clone());
                }
            }
            (s, held)
        })
        .collect();
    let top = raw.iter().map(|r| r.0).fold(0.0, f64::max);
    raw.into_iter()
        .map(|(s, held)| (if top > 0.0 { s / top } else { 0.0 }, held))
        .collect()
}

/// The normalised mean of the feedback vectors (`None` when there are none or they cancel).
pub fn centroid(vectors: &[&[f32]]) -> Option<Vec<f32>> {
    let dim = vectors.first()?.len();
    let mut c = vec![0f32; dim];
    for v in vectors.iter().filter(|v| v.len() == dim) {
        for (a, b) in c.iter_mut().zip(v.iter()) {
            *a += *b;
        }
    }
    let norm = c.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm <= f32::EPSILON {
        return None;
    }
    c.iter_mut().for_each(|x| *x /= norm);
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn flat_df(_: &str) -> (usize, usize) {
        (100, 5)
    }

    #[test]
    fn feedback_terms_leave_out_the_question_and_favour_rare_repeated_words() {
        let a = seq("packag publish feed feed packag apikey");
        let b = seq("packag publish apikey apikey server");
        let q = seq("publish");
        let df = |t: &str| if t == "packag" { (100, 90) } else { (100, 5) };
        let m = feedback_terms(&[(&a, 2.0), (&b, 1.0)], &q, 10, &df);
        let names: Vec<&str> = m.terms.iter().map(|t| t.0.as_str()).collect();
        assert!(!names.contains(&"publish"), "{names:?}");
        assert!(
            !names.contains(&"server"),
            "a single occurrence is noise: {names:?}"
        );
        assert_eq!(names[0], "apikey", "{names:?}");
        assert!(names.contains(&"feed"), "{names:?}");
        let mass: f64 = m.terms.iter().map(|t| t.1).sum();
        assert!((mass - 1.0).abs() < 1e-9, "{mass}");
    }

    #[test]
    fn feedback_scores_are_scaled_to_the_best_candidate_and_name_what_they_hold() {
        let model = FeedbackTerms {
            terms: vec![("apikey".into(), 0.6), ("feed".into(), 0.4)],
        };
        let c1 = seq("apikey feed other");
        let c2 = seq("feed other words here");
        let c3 = seq("nothing relevant");
        let s = feedback_scores(&model, &[&c1, &c2, &c3], &flat_df);
        assert_eq!(s[0].0, 1.0);
        assert!(s[1].0 > 0.0 && s[1].0 < 1.0, "{s:?}");
        assert_eq!(s[2].0, 0.0);
        assert_eq!(s[0].1, vec!["apikey".to_string(), "feed".to_string()]);
        assert!(s[2].1.is_empty());
    }

    #[test]
    fn no_feedback_terms_score_nothing() {
        let model = FeedbackTerms { terms: vec![] };
        let c1 = seq("a b");
        let s = feedback_scores(&model, &[&c1], &flat_df);
        assert_eq!(s, vec![(0.0, vec![])]);
        let m = feedback_terms(&[], &[], 10, &flat_df);
        assert!(m.terms.is_empty());
    }

    #[test]
    fn centroid_is_the_normalised_mean() {
        let a = [1.0f32, 0.0];
        let b = [0.0f32, 1.0];
        let c = centroid(&[&a, &b]).unwrap();
        assert!((c[0] - c[1]).abs() < 1e-6 && (c[0] * c[0] + c[1] * c[1] - 1.0).abs() < 1e-5);
        let z = [0.0f32, 0.0];
        assert!(centroid(&[&z]).is_none());
        assert!(centroid(&[]).is_none());
    }
}
