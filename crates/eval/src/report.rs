//! What an evaluation produces: per-question metrics per variant, aggregates, the verdict
//! against the spec's criteria, and the human table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::stats::mean;
use crate::sweep::SweepReport;
use crate::variant::Variant;

/// The spec's criteria for moving on to the next phase.
pub const MIN_REDUCTION_PCT: f64 = 20.0;
/// Minimum average chunk overlap with the baseline.
pub const MIN_OVERLAP: f64 = 0.70;

/// The metrics of one variant on one question (the spec's `VariantMetrics`, extended).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantMetrics {
    /// Chunks in the context, best first (parents, for small-to-big).
    pub chunk_ids: Vec<i64>,
    /// `path#chunk_index` of each chunk.
    pub sources: Vec<String>,
    /// Ranking score of the first result.
    pub top_score: Option<f64>,
    /// Spec token estimate of the context as sent.
    pub tokens: usize,
    /// Spec token estimate of the same chunks whole.
    pub tokens_before: usize,
    /// Exact counts with the embedding model's tokenizer, when a model is loaded.
    pub exact_tokens: Option<usize>,
    pub exact_tokens_before: Option<usize>,
    /// Share of the baseline's chunk ids present here.
    pub overlap_vs_baseline: f64,
    /// Share of the golden evidence strings found in the whole chunks (before trimming).
    pub evidence_in_topk: Option<f64>,
    /// Share of the golden evidence strings found in the context as sent (after trimming).
    pub evidence_kept: Option<f64>,
    /// Whether the golden answer occurs in the whole chunks.
    pub answer_in_topk: Option<bool>,
    /// Whether the golden answer occurs in the context as sent.
    pub answer_kept: Option<bool>,
    /// Whether any chunk comes from one of the golden `files`.
    pub file_hit: Option<bool>,
    /// The synthesised answer, when synthesis is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Trimming variants: each chunk with the sentences kept and removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passages: Vec<crate::passage::Passage>,
    /// Wall time of this variant for this question, milliseconds.
    pub ms: f64,
}

/// One question and its metrics per variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub question: String,
    pub variants: BTreeMap<Variant, VariantMetrics>,
}

/// Averages of one variant over all questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantAggregate {
    pub variant: Variant,
    pub questions: usize,
    pub avg_tokens: f64,
    pub avg_tokens_before: f64,
    /// `100 × (avg_tokens_baseline − avg_tokens) / avg_tokens_baseline`.
    pub token_reduction_pct: f64,
    pub avg_overlap_vs_baseline: f64,
    /// Mean `evidence_in_topk` over questions with evidence.
    pub evidence_recall_before: Option<f64>,
    /// Mean `evidence_kept` over questions with evidence.
    pub evidence_recall_after: Option<f64>,
    /// Share of questions with an answer whose whole chunks contain it.
    pub answer_recall_before: Option<f64>,
    /// Share of questions with an answer whose context as sent contains it.
    pub answer_recall_after: Option<f64>,
    /// Share of questions with golden files hit by at least one chunk.
    pub file_recall: Option<f64>,
    pub avg_ms: f64,
}

/// Outcome of the criteria for one variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    /// A criterion that can be measured failed: quality measured worse, or (for a
    /// token-saving variant) too few tokens saved.
    Fail,
    /// Quality cannot be measured (the questions carry no evidence or answers, e.g. replayed
    /// from the query log) and nothing measurable failed.
    #[serde(alias = "inconclusive")]
    Unknown,
}

impl Status {
    /// How the terminal table and the HTML report name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Unknown => "unknown",
        }
    }
}

/// The verdict for one variant against the spec's criteria, with the numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub variant: Variant,
    pub status: Status,
    pub reduction_ok: bool,
    pub overlap_ok: bool,
    pub quality_ok: Option<bool>,
    pub text: String,
}

/// The settings an evaluation ran with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSettings {
    /// Where the questions came from (`golden:<file>`, `questions`, `query_log:last N`).
    pub source: String,
    pub model: Option<String>,
    pub top_k: usize,
    pub mode: String,
    pub trim_threshold: f32,
    pub trim_window: usize,
    pub trim_min_sentences: usize,
    pub small_to_big_hits: usize,
    pub quality_tolerance: f64,
    pub filters: Vec<String>,
    pub variants: Vec<Variant>,
    pub synthesize: bool,
    pub questions: usize,
}

/// Everything an evaluation produces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    pub settings: EvalSettings,
    /// The spec's flat keys: `avg_tokens_baseline`, `avg_tokens_<variant>`, and for the spec's
    /// `trim` variant `token_reduction_pct` and `avg_overlap_vs_baseline`.
    pub summary: Value,
    pub aggregates: Vec<VariantAggregate>,
    pub verdicts: Vec<Verdict>,
    pub questions: Vec<QuestionReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepReport>,
    /// Words of the questions the knowledge base never uses, most asked first: typos, and the
    /// users' own words for what the pages say otherwise (candidates for `ask.synonyms`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_words: Vec<UnknownWord>,
}

/// A question word the knowledge base never uses, and how many questions hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownWord {
    pub word: String,
    pub questions: usize,
    /// The word `ask` searches instead, when it corrects this one as a typo (known only with
    /// the knowledge base's model); such a word needs no synonym rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typo_of: Option<String>,
}

/// Unknown words shown in the text report (the JSON holds them all).
const UNKNOWN_WORDS_SHOWN: usize = 20;

/// Percentage reduction of `after` relative to `before` (0 when `before` is 0).
pub fn reduction_pct(before: f64, after: f64) -> f64 {
    if before <= 0.0 {
        0.0
    } else {
        100.0 * (before - after) / before
    }
}

/// Aggregate every variant over the questions.
pub fn aggregate(questions: &[QuestionReport], variants: &[Variant]) -> Vec<VariantAggregate> {
    let per = |v: Variant| questions.iter().filter_map(move |q| q.variants.get(&v));
    let base_tokens = mean(per(Variant::Baseline).map(|m| m.tokens as f64)).unwrap_or(0.0);
    variants
        .iter()
        .map(|&v| {
            let avg_tokens = mean(per(v).map(|m| m.tokens as f64)).unwrap_or(0.0);
            let bool_rate = |f: fn(&VariantMetrics) -> Option<bool>| {
                mean(per(v).filter_map(f).map(|b| f64::from(u8::from(b))))
            };
            VariantAggregate {
                variant: v,
                questions: per(v).count(),
                avg_tokens,
                avg_tokens_before: mean(per(v).map(|m| m.tokens_before as f64)).unwrap_or(0.0),
                token_reduction_pct: reduction_pct(base_tokens, avg_tokens),
                avg_overlap_vs_baseline: mean(per(v).map(|m| m.overlap_vs_baseline)).unwrap_or(0.0),
                evidence_recall_before: mean(per(v).filter_map(|m| m.evidence_in_topk)),
                evidence_recall_after: mean(per(v).filter_map(|m| m.evidence_kept)),
                answer_recall_before: bool_rate(|m| m.answer_in_topk),
                answer_recall_after: bool_rate(|m| m.answer_kept),
                file_recall: bool_rate(|m| m.file_hit),
                avg_ms: mean(per(v).map(|m| m.ms)).unwrap_or(0.0),
            }
        })
        .collect()
}

/// The spec's flat summary keys.
pub fn spec_summary(aggs: &[VariantAggregate]) -> Value {
    let mut m = serde_json::Map::new();
    for a in aggs {
        m.insert(
            format!("avg_tokens_{}", a.variant.as_str().replace('-', "_")),
            json!(round2(a.avg_tokens)),
        );
    }
    if let Some(t) = aggs.iter().find(|a| a.variant == Variant::Trim) {
        m.insert(
            "token_reduction_pct".into(),
            json!(round2(t.token_reduction_pct)),
        );
        m.insert(
            "avg_overlap_vs_baseline".into(),
            json!(round2(t.avg_overlap_vs_baseline)),
        );
    }
    Value::Object(m)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Whether `after` is "not worse" than `before` within `tol` (absolute).
pub fn not_worse(before: f64, after: f64, tol: f64) -> bool {
    after + 1e-9 >= before - tol
}

/// Judge every non-baseline variant. Token-saving variants ([`Variant::saves_tokens`]) face the
/// spec's three criteria (reduction > 20 %, overlap > 70 %, quality not worse); retrieval
/// variants (bm25, vector, hybrid) send whole chunks, so only quality decides (reduction and
/// overlap are still reported). Quality compares the variant's evidence (and answer) recall
/// *after* trimming with the baseline's, within `tol`.
pub fn verdicts(aggs: &[VariantAggregate], tol: f64) -> Vec<Verdict> {
    let Some(base) = aggs.iter().find(|a| a.variant == Variant::Baseline) else {
        return Vec::new();
    };
    aggs.iter()
        .filter(|a| a.variant != Variant::Baseline)
        .map(|a| {
            let reduction_ok = a.token_reduction_pct > MIN_REDUCTION_PCT;
            let overlap_ok = a.avg_overlap_vs_baseline > MIN_OVERLAP;
            let mut parts = vec![
                format!(
                    "tokens {:.0} → {:.0} ({:+.1}%; needs a reduction > {MIN_REDUCTION_PCT:.0}%: {})",
                    base.avg_tokens,
                    a.avg_tokens,
                    -a.token_reduction_pct,
                    yes_no(reduction_ok)
                ),
                format!(
                    "overlap {:.2} (needs > {MIN_OVERLAP:.2}: {})",
                    a.avg_overlap_vs_baseline,
                    yes_no(overlap_ok)
                ),
            ];
            let mut quality: Option<bool> = None;
            let pairs = [
                ("evidence", base.evidence_recall_after, a.evidence_recall_after),
                ("answer", base.answer_recall_after, a.answer_recall_after),
            ];
            for (what, b, x) in pairs {
                if let (Some(b), Some(x)) = (b, x) {
                    let ok = not_worse(b, x, tol);
                    quality = Some(quality.unwrap_or(true) && ok);
                    parts.push(format!(
                        "{what} recall {x:.3} vs baseline {b:.3} ({:+.3}; not worse within {tol:.2}: {})",
                        x - b,
                        yes_no(ok)
                    ));
                }
            }
            if quality.is_none() {
                parts.push(
                    "quality unknown: the questions carry no evidence or answers (use --golden)"
                        .into(),
                );
            }
            let shape_ok = !a.variant.saves_tokens() || (reduction_ok && overlap_ok);
            if !a.variant.saves_tokens() {
                parts.push("(a retrieval variant: judged on quality only)".into());
            }
            // Without quality data only the token criterion can fail for sure: low overlap
            // says the variant sends other chunks, not that they are worse.
            let status = match quality {
                Some(true) if shape_ok => Status::Pass,
                Some(_) => Status::Fail,
                None if a.variant.saves_tokens() && !reduction_ok => Status::Fail,
                None => Status::Unknown,
            };
            Verdict {
                variant: a.variant,
                status,
                reduction_ok,
                overlap_ok,
                quality_ok: quality,
                text: parts.join("; "),
            }
        })
        .collect()
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.3}"))
}

/// The report as a plain-text table for a terminal.
pub fn render_text(r: &EvalReport) -> String {
    let s = &r.settings;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} questions from {} · top_k {} · mode {} · trim threshold {:.2} window {} · model {}",
        s.questions,
        s.source,
        s.top_k,
        s.mode,
        s.trim_threshold,
        s.trim_window,
        s.model.as_deref().unwrap_or("none")
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<13} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "variant",
        "tokens",
        "reduct%",
        "overlap",
        "ev.top",
        "ev.kept",
        "ans.top",
        "ans.kept",
        "files",
        "ms"
    );
    for a in &r.aggregates {
        let _ = writeln!(
            out,
            "{:<13} {:>8.1} {:>8.1} {:>8.3} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8.1}",
            a.variant.as_str(),
            a.avg_tokens,
            a.token_reduction_pct,
            a.avg_overlap_vs_baseline,
            opt(a.evidence_recall_before),
            opt(a.evidence_recall_after),
            opt(a.answer_recall_before),
            opt(a.answer_recall_after),
            opt(a.file_recall),
            a.avg_ms
        );
    }
    let _ = writeln!(out);
    for v in &r.verdicts {
        let _ = writeln!(
            out,
            "{:<13} {:<12} {}",
            v.variant.as_str(),
            v.status.as_str().to_uppercase(),
            v.text
        );
    }
    if let Some(sw) = &r.sweep {
        let _ = writeln!(out);
        out.push_str(&crate::sweep::render_text(sw));
    }
    render_unknown_words(&mut out, &r.unknown_words);
    out
}

/// The unknown-words lines of the text report: the words `ask` leaves as they are (typos it
/// cannot correct, or the users' own words: candidates for `ask.synonyms`), then the typos it
/// corrects. Each list shows its [`UNKNOWN_WORDS_SHOWN`] most asked.
fn render_unknown_words(out: &mut String, words: &[UnknownWord]) {
    let (typos, rest): (Vec<&UnknownWord>, Vec<&UnknownWord>) =
        words.iter().partition(|w| w.typo_of.is_some());
    let line = |out: &mut String, label: &str, list: &[&UnknownWord]| {
        if list.is_empty() {
            return;
        }
        let shown: Vec<String> = list
            .iter()
            .take(UNKNOWN_WORDS_SHOWN)
            .map(|w| match &w.typo_of {
                Some(to) => format!("{} → {to} ×{}", w.word, w.questions),
                None => format!("{} ×{}", w.word, w.questions),
            })
            .collect();
        let more = list.len().saturating_sub(UNKNOWN_WORDS_SHOWN);
        let _ = writeln!(
            out,
            "{label}: {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" (+{more} more in --json)")
            } else {
                String::new()
            }
        );
    };
    if !words.is_empty() {
        let _ = writeln!(out);
    }
    line(
        out,
        "words of these questions the knowledge base never uses (typos, or candidates for \
         ask.synonyms)",
        &rest,
    );
    line(out, "typos that ask corrects", &typos);
}

/// Per-question lines (tokens per variant) for a terminal.
pub fn render_questions(r: &EvalReport) -> String {
    let mut out = String::new();
    for (i, q) in r.questions.iter().enumerate() {
        let _ = writeln!(out, "[{}] {}", i + 1, q.question);
        for (v, m) in &q.variants {
            let _ = writeln!(
                out,
                "    {:<13} tokens {:>5}/{:<5} overlap {:.2} top {:>7} evidence {}/{} answer {}",
                v.as_str(),
                m.tokens,
                m.tokens_before,
                m.overlap_vs_baseline,
                m.top_score
                    .map_or_else(|| "-".into(), |x| format!("{x:.4}")),
                opt(m.evidence_in_topk),
                opt(m.evidence_kept),
                match m.answer_kept {
                    Some(true) => "kept",
                    Some(false) => "lost",
                    None => "-",
                }
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(tokens: usize, overlap: f64, ev: Option<f64>) -> VariantMetrics {
        VariantMetrics {
            chunk_ids: vec![],
            sources: vec![],
            top_score: None,
            tokens,
            tokens_before: 100,
            exact_tokens: None,
            exact_tokens_before: None,
            overlap_vs_baseline: overlap,
            evidence_in_topk: ev,
            evidence_kept: ev,
            answer_in_topk: None,
            answer_kept: None,
            file_hit: None,
            answer: None,
            passages: Vec::new(),
            ms: 1.0,
        }
    }

    fn q(base: VariantMetrics, trim: VariantMetrics) -> QuestionReport {
        QuestionReport {
            id: None,
            question: "q".into(),
            variants: [(Variant::Baseline, base), (Variant::Trim, trim)]
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn aggregates_and_verdicts() {
        let qs = vec![
            q(m(100, 1.0, Some(1.0)), m(50, 1.0, Some(1.0))),
            q(m(300, 1.0, Some(1.0)), m(150, 0.6, Some(0.5))),
        ];
        let vs = [Variant::Baseline, Variant::Trim];
        let a = aggregate(&qs, &vs);
        assert_eq!(a[0].avg_tokens, 200.0);
        assert_eq!(a[1].avg_tokens, 100.0);
        assert!((a[1].token_reduction_pct - 50.0).abs() < 1e-9);
        assert!((a[1].avg_overlap_vs_baseline - 0.8).abs() < 1e-9);
        assert_eq!(a[1].evidence_recall_after, Some(0.75));
        let s = spec_summary(&a);
        assert_eq!(s["avg_tokens_baseline"], json!(200.0));
        assert_eq!(s["token_reduction_pct"], json!(50.0));
        // Evidence fell from 1.0 to 0.75: worse beyond 0.05 → fail; within 0.3 → pass.
        let v = verdicts(&a, 0.05);
        assert_eq!(v[0].status, Status::Fail);
        assert!(
            v[0].text.contains("0.750") && v[0].text.contains("-50.0%"),
            "{}",
            v[0].text
        );
        assert_eq!(verdicts(&a, 0.3)[0].status, Status::Pass);
    }

    #[test]
    fn verdict_cases() {
        // (trim tokens, overlap, evidence, expected)
        let cases = [
            (70, 1.0, Some(1.0), Status::Pass),
            (85, 1.0, Some(1.0), Status::Fail), // only 15% saved
            (50, 0.5, Some(1.0), Status::Fail), // overlap too low
            (50, 1.0, None, Status::Unknown),
            (50, 0.5, None, Status::Unknown), // other chunks, maybe not worse
            (85, 1.0, None, Status::Fail),    // too few tokens saved, whatever the quality
        ];
        for (t, o, ev, want) in cases {
            let base_ev = ev.map(|_| 1.0);
            let qs = vec![q(m(100, 1.0, base_ev), m(t, o, ev))];
            let a = aggregate(&qs, &[Variant::Baseline, Variant::Trim]);
            assert_eq!(verdicts(&a, 0.0)[0].status, want, "{t} {o} {ev:?}");
        }
        // A retrieval variant sends whole chunks: no reduction needed, quality decides.
        for (ev, want) in [(1.0, Status::Pass), (0.5, Status::Fail)] {
            let qs = vec![QuestionReport {
                id: None,
                question: "q".into(),
                variants: [
                    (Variant::Baseline, m(100, 1.0, Some(1.0))),
                    (Variant::Bm25, m(100, 0.4, Some(ev))),
                ]
                .into_iter()
                .collect(),
            }];
            let a = aggregate(&qs, &[Variant::Baseline, Variant::Bm25]);
            assert_eq!(verdicts(&a, 0.0)[0].status, want, "bm25 evidence {ev}");
        }
        // Logged questions: a retrieval variant with other chunks is unknown, not failed.
        let qs = vec![QuestionReport {
            id: None,
            question: "q".into(),
            variants: [
                (Variant::Baseline, m(100, 1.0, None)),
                (Variant::Vector, m(100, 0.2, None)),
            ]
            .into_iter()
            .collect(),
        }];
        let a = aggregate(&qs, &[Variant::Baseline, Variant::Vector]);
        let v = &verdicts(&a, 0.0)[0];
        assert_eq!((v.status, v.quality_ok), (Status::Unknown, None));
        assert!(v.text.contains("quality unknown"), "{}", v.text);
    }
}
