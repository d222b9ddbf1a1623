//! Calibration sweep of the trimming threshold (and window): score every sentence of the
//! baseline chunks once per question, then select at each (threshold, window) point and measure
//! tokens and evidence kept. The chosen operating point is the one with the largest token
//! reduction whose evidence (and answer) recall after trimming is not worse than the
//! baseline's, within the tolerance.

use std::fmt::Write as _;

use bib_retrieve::trim::{apply, Prepared, SentenceScores, TrimOptions};
use bib_text::tokens::estimate_tokens;
use serde::{Deserialize, Serialize};

use crate::error::{invalid, EvalError};
use crate::matching::Haystack;
use crate::report::{not_worse, reduction_pct, MIN_REDUCTION_PCT};
use crate::stats::mean;

/// Which points to try.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSpec {
    pub from: f32,
    pub to: f32,
    pub step: f32,
    pub windows: Vec<usize>,
}

impl Default for SweepSpec {
    fn default() -> Self {
        Self {
            from: 0.20,
            to: 0.60,
            step: 0.02,
            windows: vec![0, 1, 2],
        }
    }
}

impl SweepSpec {
    /// Parse `FROM:TO:STEP` (e.g. `0.20:0.60:0.02`) with the given windows.
    pub fn parse(range: &str, windows: Vec<usize>) -> Result<Self, EvalError> {
        let parts: Vec<&str> = range.split(':').map(str::trim).collect();
        let bad = || {
            invalid(
                "sweep",
                format!("`{range}` is not FROM:TO:STEP, e.g. 0.20:0.60:0.02"),
            )
        };
        if parts.len() != 3 {
            return Err(bad());
        }
        let num = |s: &str| s.parse::<f32>().map_err(|_| bad());
        let spec = Self {
            from: num(parts[0])?,
            to: num(parts[1])?,
            step: num(parts[2])?,
            windows,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Check the range and windows.
    pub fn validate(&self) -> Result<(), EvalError> {
        let ok = |x: f32| x.is_finite() && (-1.0..=1.0).contains(&x);
        if !ok(self.from) || !ok(self.to) || self.from > self.to {
            return Err(invalid(
                "sweep",
                "FROM and TO must be cosines in [-1, 1] with FROM ≤ TO",
            ));
        }
        if !(self.step.is_finite() && self.step > 0.0) {
            return Err(invalid("sweep", "STEP must be positive"));
        }
        if (self.to - self.from) / self.step > 1000.0 {
            return Err(invalid(
                "sweep",
                "more than 1000 thresholds; use a larger STEP",
            ));
        }
        if self.windows.is_empty() {
            return Err(invalid("sweep_windows", "at least one window"));
        }
        Ok(())
    }

    /// The thresholds, computed by integer steps (no drift), rounded to 4 decimals.
    pub fn thresholds(&self) -> Vec<f32> {
        let n = ((self.to - self.from) / self.step + 1e-4).floor() as usize;
        (0..=n)
            .map(|i| {
                let x = self.from + self.step * i as f32;
                (x * 10_000.0).round() / 10_000.0
            })
            .collect()
    }
}

/// One (threshold, window) point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub threshold: f32,
    pub window: usize,
    pub avg_tokens: f64,
    pub token_reduction_pct: f64,
    pub evidence_recall_after: Option<f64>,
    pub answer_recall_after: Option<f64>,
    /// Evidence and answer recall not worse than the baseline's (None without reference data).
    pub quality_ok: Option<bool>,
}

/// The sweep table and the chosen point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    pub scorer: String,
    pub baseline_avg_tokens: f64,
    pub baseline_evidence_recall: Option<f64>,
    pub baseline_answer_recall: Option<f64>,
    pub tolerance: f64,
    pub points: Vec<SweepPoint>,
    /// Index into `points`.
    pub chosen: Option<usize>,
    /// How the point was chosen, or why none was.
    pub rule: String,
}

/// Per-question input of the sweep: the baseline's whole chunk texts and, for each of them,
/// the sentence cosines and selection priority computed once.
#[derive(Debug, Clone)]
pub struct SweepQuestion {
    pub chunks: Vec<SweepChunk>,
    pub evidence: Vec<String>,
    pub answer: Option<String>,
}

/// One baseline chunk, prepared for selection at many thresholds.
#[derive(Debug, Clone)]
pub struct SweepChunk {
    pub content: String,
    pub cosine: Vec<f32>,
    pub fused: Vec<f64>,
    pub bm25_rank: Vec<Option<usize>>,
    pub exact: Vec<bool>,
}

/// Run the sweep over prepared questions.
pub fn run(
    spec: &SweepSpec,
    questions: &[SweepQuestion],
    scorer: bib_retrieve::TrimScorer,
    min_sentences: usize,
    lexical_top: usize,
    tolerance: f64,
) -> SweepReport {
    let n = questions.len().max(1) as f64;
    let base_tokens = baseline_average_tokens(questions, n);
    let (base_ev, base_ans) = baseline_evidence_and_answer_recall(questions);
    let prepared = prepare_baseline_chunks_for_selection(questions);
    let selection = PointMeasurement {
        questions,
        prepared: &prepared,
        n,
        base_tokens,
        base_ev,
        base_ans,
        scorer,
        min_sentences,
        lexical_top,
        tolerance,
    };
    let mut points = Vec::new();
    for &window in &spec.windows {
        for threshold in spec.thresholds() {
            points.push(selection.measure_point(threshold, window));
        }
    }
    let (chosen, rule) = choose(&points, tolerance);
    SweepReport {
        scorer: format!("{scorer:?}").to_lowercase(),
        baseline_avg_tokens: base_tokens,
        baseline_evidence_recall: base_ev,
        baseline_answer_recall: base_ans,
        tolerance,
        points,
        chosen,
        rule,
    }
}

/// The average tokens of the baseline's whole chunks per question (`n`: the question count,
/// at least 1).
fn baseline_average_tokens(questions: &[SweepQuestion], n: f64) -> f64 {
    questions
        .iter()
        .map(|q| {
            q.chunks
                .iter()
                .map(|c| estimate_tokens(&c.content))
                .sum::<usize>() as f64
        })
        .sum::<f64>()
        / n
}

/// Evidence recall and whether the answer is found in `texts`, against `q`'s reference data
/// (`None` where the question has none).
fn recall_of(texts: &[String], q: &SweepQuestion) -> (Option<f64>, Option<bool>) {
    let h = Haystack::new(texts.iter().map(String::as_str));
    (
        h.recall(&q.evidence),
        q.answer.as_ref().map(|a| h.contains(a)),
    )
}

/// The mean of the values present, `None` when none is.
fn mean_of_present(xs: Vec<Option<f64>>) -> Option<f64> {
    mean(xs.into_iter().flatten())
}

/// The baseline's mean evidence recall and answer recall over the questions that carry
/// each, measured on the whole chunks: what every point is compared against.
fn baseline_evidence_and_answer_recall(questions: &[SweepQuestion]) -> (Option<f64>, Option<f64>) {
    let (mut be, mut ba) = (Vec::new(), Vec::new());
    for q in questions {
        let whole: Vec<String> = q.chunks.iter().map(|c| c.content.clone()).collect();
        let (e, a) = recall_of(&whole, q);
        be.push(e);
        ba.push(a.map(|b| f64::from(u8::from(b))));
    }
    let base_ev = mean_of_present(be);
    let base_ans = mean_of_present(ba);
    (base_ev, base_ans)
}

/// Every baseline chunk split into sentences once, with the scores computed once, so that
/// each point only selects.
fn prepare_baseline_chunks_for_selection(
    questions: &[SweepQuestion],
) -> Vec<Vec<(Prepared<'_>, SentenceScores)>> {
    questions
        .iter()
        .map(|q| {
            q.chunks
                .iter()
                .map(|c| {
                    (
                        Prepared::new(&c.content),
                        SentenceScores {
                            cosine: c.cosine.clone(),
                            fused: c.fused.clone(),
                            bm25_rank: c.bm25_rank.clone(),
                            exact: c.exact.clone(),
                        },
                    )
                })
                .collect()
        })
        .collect()
}

/// What measuring one (threshold, window) point reads: the questions and their prepared
/// chunks, the baseline to compare against, and the trimming settings that do not vary.
struct PointMeasurement<'q> {
    questions: &'q [SweepQuestion],
    prepared: &'q [Vec<(Prepared<'q>, SentenceScores)>],
    /// The question count, at least 1.
    n: f64,
    base_tokens: f64,
    base_ev: Option<f64>,
    base_ans: Option<f64>,
    scorer: bib_retrieve::TrimScorer,
    min_sentences: usize,
    lexical_top: usize,
    tolerance: f64,
}

impl PointMeasurement<'_> {
    /// Trim every question's chunks at `threshold` and `window`, and measure tokens and
    /// evidence and answer recall kept, judged against the baseline.
    fn measure_point(&self, threshold: f32, window: usize) -> SweepPoint {
        let opts = TrimOptions {
            threshold,
            min_sentences: self.min_sentences,
            window,
            scorer: self.scorer,
            lexical_top: self.lexical_top,
            structure: bib_retrieve::trim::ASK_PROFILE.structure,
            ..TrimOptions::default()
        };
        let (mut tok, mut ev, mut ans) = (0usize, Vec::new(), Vec::new());
        for (q, pcs) in self.questions.iter().zip(self.prepared) {
            let texts: Vec<String> = pcs
                .iter()
                .map(|(p, s)| apply(p, s, &opts).content)
                .collect();
            tok += texts.iter().map(|t| estimate_tokens(t)).sum::<usize>();
            let (e, a) = recall_of(&texts, q);
            ev.push(e);
            ans.push(a.map(|b| f64::from(u8::from(b))));
        }
        let avg_tokens = tok as f64 / self.n;
        let evidence_recall_after = mean_of_present(ev);
        let answer_recall_after = mean_of_present(ans);
        SweepPoint {
            threshold,
            window,
            avg_tokens,
            token_reduction_pct: reduction_pct(self.base_tokens, avg_tokens),
            evidence_recall_after,
            answer_recall_after,
            quality_ok: self.quality_not_worse(evidence_recall_after, answer_recall_after),
        }
    }

    /// Whether evidence and answer recall are both not worse than the baseline's, within the
    /// tolerance, judging only those with data on both sides (`None`: nothing to judge).
    fn quality_not_worse(
        &self,
        evidence_recall_after: Option<f64>,
        answer_recall_after: Option<f64>,
    ) -> Option<bool> {
        let checks: Vec<bool> = [
            (self.base_ev, evidence_recall_after),
            (self.base_ans, answer_recall_after),
        ]
        .into_iter()
        .filter_map(|(b, x)| Some(not_worse(b?, x?, self.tolerance)))
        .collect();
        (!checks.is_empty()).then(|| checks.iter().all(|&b| b))
    }
}

/// The largest reduction among points whose quality is not worse; ties go to more evidence,
/// then the smaller window, then the lower threshold.
fn choose(points: &[SweepPoint], tol: f64) -> (Option<usize>, String) {
    if points.iter().all(|p| p.quality_ok.is_none()) {
        return (
            None,
            "no point chosen: the questions carry no evidence or answers to judge quality".into(),
        );
    }
    let best = points
        .iter()
        .enumerate()
        .filter(|(_, p)| p.quality_ok == Some(true))
        .max_by(|(_, a), (_, b)| {
            a.token_reduction_pct
                .total_cmp(&b.token_reduction_pct)
                .then(
                    a.evidence_recall_after
                        .unwrap_or(0.0)
                        .total_cmp(&b.evidence_recall_after.unwrap_or(0.0)),
                )
                .then(b.window.cmp(&a.window))
                .then(b.threshold.total_cmp(&a.threshold))
        })
        .map(|(i, _)| i);
    match best {
        Some(i) => {
            let p = &points[i];
            let meets = if p.token_reduction_pct > MIN_REDUCTION_PCT {
                "meets"
            } else {
                "does NOT meet"
            };
            (
                Some(i),
                format!(
                    "largest token reduction with evidence/answer recall not worse than the baseline \
                     (tolerance {tol:.2}): threshold {:.2}, window {} → −{:.1}% tokens, which {meets} \
                     the > {MIN_REDUCTION_PCT:.0}% criterion",
                    p.threshold, p.window, p.token_reduction_pct
                ),
            )
        }
        None => (
            None,
            format!("no point keeps evidence/answer recall within {tol:.2} of the baseline"),
        ),
    }
}

/// The sweep as a plain-text table.
pub fn render_text(s: &SweepReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sweep ({} scorer) · baseline {:.1} tokens, evidence {}, answer {}",
        s.scorer,
        s.baseline_avg_tokens,
        s.baseline_evidence_recall
            .map_or_else(|| "-".into(), |x| format!("{x:.3}")),
        s.baseline_answer_recall
            .map_or_else(|| "-".into(), |x| format!("{x:.3}"))
    );
    let _ = writeln!(
        out,
        "  {:>9} {:>6} {:>8} {:>8} {:>9} {:>8}",
        "threshold", "window", "tokens", "reduct%", "evidence", "answer"
    );
    for (i, p) in s.points.iter().enumerate() {
        let mark = if Some(i) == s.chosen {
            " ◀ chosen"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:>9.2} {:>6} {:>8.1} {:>8.1} {:>9} {:>8}{mark}",
            p.threshold,
            p.window,
            p.avg_tokens,
            p.token_reduction_pct,
            p.evidence_recall_after
                .map_or_else(|| "-".into(), |x| format!("{x:.3}")),
            p.answer_recall_after
                .map_or_else(|| "-".into(), |x| format!("{x:.3}")),
        );
    }
    let _ = writeln!(out, "{}", s.rule);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_thresholds() {
        let s = SweepSpec::parse("0.20:0.60:0.02", vec![0, 1, 2]).unwrap();
        let t = s.thresholds();
        assert_eq!(t.len(), 21);
        assert_eq!(t[0], 0.2);
        assert_eq!(t[20], 0.6);
        assert_eq!(t[7], 0.34);
        for bad in ["0.2:0.6", "a:b:c", "0.6:0.2:0.1", "0.2:0.6:0", "0.2:2:0.1"] {
            assert!(SweepSpec::parse(bad, vec![0]).is_err(), "{bad}");
        }
        assert!(SweepSpec::parse("0.2:0.6:0.1", vec![]).is_err());
    }

    #[test]
    fn sweep_keeps_evidence_and_chooses_largest_safe_reduction() {
        // One chunk, four sentences; the evidence is sentence 2 (cosine 0.5).
        let content = "[Doc: T]\nAlpha one. Beta two. Gamma answer three. Delta four.".to_string();
        let q = SweepQuestion {
            chunks: vec![SweepChunk {
                content,
                cosine: vec![0.1, 0.3, 0.5, 0.2],
                fused: vec![0.0; 4],
                bm25_rank: vec![],
                exact: vec![],
            }],
            evidence: vec!["Gamma answer three.".into()],
            answer: Some("answer".into()),
        };
        let spec = SweepSpec::parse("0.10:0.60:0.10", vec![0, 1]).unwrap();
        let r = run(&spec, &[q], bib_retrieve::TrimScorer::Cosine, 1, 0, 0.0);
        assert_eq!(r.points.len(), 12);
        assert_eq!(r.baseline_evidence_recall, Some(1.0));
        // Tokens never grow as the threshold rises (same window).
        for w in r.points.windows(2).filter(|w| w[0].window == w[1].window) {
            assert!(w[1].avg_tokens <= w[0].avg_tokens + 1e-9);
        }
        // With min_sentences 1 the best sentence (the evidence) always survives, so the
        // chosen point is the most aggressive one: window 0, reduction maximal.
        let c = &r.points[r.chosen.unwrap()];
        assert_eq!(c.window, 0);
        assert_eq!(c.evidence_recall_after, Some(1.0));
        let max = r
            .points
            .iter()
            .map(|p| p.token_reduction_pct)
            .fold(0.0, f64::max);
        assert!((c.token_reduction_pct - max).abs() < 1e-9);
        assert!(render_text(&r).contains("◀ chosen"));
    }
}
