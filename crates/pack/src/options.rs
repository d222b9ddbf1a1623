//! Typed options: the reference's DEFAULTS, one field each, with the measured reason.

use serde::{Deserialize, Serialize};

/// Every knob of the packer. `Default` is the reference's DEFAULTS plus `strict_budget`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PackOptions {
    // — retrieval —
    /// BM25 term-frequency saturation. 0.75, not the reference's 1.2: a chat line is short,
    /// so a word said twice in it should count little more than once (LoCoMo hybrid at 1,000 /
    /// 1,500 / 3,000 / 8,000 tokens: 77.60 / 82.83 / 89.17 / 94.42 → 77.73 / 83.20 / 89.13 /
    /// 94.50 %; probe sets of seeds 17 and 5 unchanged, seed 3 +1; lexical ±0.1; BENCHMARKS.md).
    pub bm25_k1: f64,
    /// BM25 length normalisation.
    pub bm25_b: f64,
    /// The term function of the packer's BM25 (`bib_text::terms`); [`PackOptions::reference`]
    /// keeps the reference's (`TermConfig::V1`).
    pub terms: bib_text::terms::TermConfig,
    /// The question's Cyrillic words also look for their Latin spelling
    /// (`bib_text::terms::latin_spellings`: `порт` finds `DB_PORT`, `минуту` finds
    /// `per_minute`): Russian and Ukrainian speakers ask in their language about the English
    /// names an agent session is full of. Probe set (10 seeds, hybrid, 1,500 tokens): Russian
    /// 83.7 → 90.1 %, Ukrainian 77.0 → 81.3 %, other languages unchanged (no Cyrillic, no
    /// change); BENCHMARKS.md, issue 17.
    pub latin_spellings: bool,
    /// Reciprocal-rank-fusion constant of the hybrid path. 10, not the reference's 60: a small
    /// k lets a block that tops either list win outright, which LoCoMo rewards (1,500 tokens:
    /// 72.2 → 72.6 % at 250 blocks, 70.7 → 70.9 % at 400; BENCHMARKS.md).
    pub rrf_k: f64,
    /// The fused BM25 ranking holds only the lines with a BM25 score, so the lines that share
    /// no term with the question get no rank credit from it (by default they are ranked too,
    /// oldest first, as the reference does).
    pub rrf_scored_only: bool,
    /// Use embeddings when an embedder is given (hybrid path).
    pub semantic: bool,
    /// At most this many blocks are embedded per pack; the block size follows from it. 250,
    /// not the reference's 400: on LoCoMo's ~600-turn conversations that makes blocks of three
    /// turns instead of two, enough context for a question and its answer to land in one block
    /// (1,500 tokens: +2.6 points over 400; single turns lose 5 points).
    pub sem_budget: usize,
    /// Keep the block ranking (`sem_budget` blocks) among the fused lists.
    pub sem_blocks: bool,
    /// Also embed every old message by units (`crate::units`: a sentence of a long line, a
    /// run of short lines) and fuse the ranking of each line's best unit: the question meets
    /// the sentence that states the fact, not a block that blurs it. Each unit is embedded
    /// once (the packer's content cache), so a long session pays per new message only.
    /// On: with `sem_unit_chars` 0, `sem_unit_context` 1 and `pin_hybrid_min_bm` 0.85, probe
    /// recall at 1,500 tokens 66.3 → 80.6 % and LoCoMo 74.0 → 74.5 % (BENCHMARKS.md, issue 17).
    pub sem_units: bool,
    /// Most UTF-16 units in one unit: longer lines are split into sentences, shorter lines
    /// grouped up to it (0 = every line split into sentences: a fact said in one sentence of
    /// a chatty turn; 300 measured 2 probes lower).
    pub sem_unit_chars: usize,
    /// Compare the question with the units after subtracting the mean of this history's
    /// units from both (`Packer::center_unit_scores`): what every line of the session shares
    /// — its language, its register, the chat's topics — stops deciding which line is
    /// closest. On: probe set (10 seeds, 985 probes) at 1,500 tokens 85.9 → 88.0 % with
    /// blocks centered too, LoCoMo 83.13 → 83.87 % alone (BENCHMARKS.md, issue 17).
    pub sem_unit_center: bool,
    /// The same for blocks: the question and every block compared after subtracting the
    /// mean of this pack's blocks. On: probe set 82.1 → 85.9 % alone; LoCoMo within ±0.4
    /// points (−0.55 at 1,500 tokens next to centered units; BENCHMARKS.md).
    pub sem_block_center: bool,
    /// Weight of the unit ranking in the fusion (the others weigh 1).
    pub sem_unit_weight: f64,
    /// A message's best unit similarity, times this, also scores the messages next to it (0 =
    /// off): the answer sits in the turn after the one that matches the question. 1: LoCoMo at
    /// 1,500 tokens 72.9 → 74.6 % with units on (units alone lost 1.1 points to blocks).
    pub sem_unit_context: f64,
    /// Who said it: when the question names exactly one of the history's speakers (messages
    /// written `Name: text`, as multi-party chat logs and LoCoMo are), that speaker's lines
    /// gain this much relevance before rescaling — `(r + w) / (1 + w)` — so among equally
    /// close lines the named speaker's win. 0 = off. LoCoMo at 1,500 tokens (hybrid):
    /// 80.5 → 82.5 % at 0.2 (0.15–0.25 within 0.1 of it; 0.4 gives 81.5: adversarial
    /// questions, which name the wrong speaker on purpose, lose from 0.2 on).
    pub speaker_weight: f64,
    /// What kind of fact: when the question asks for a moment ("when…", «¿a qué hora…?»), a
    /// quantity ("how many…", «сколько…») or a place ("where…", «где…»), lines holding one (a
    /// clock time, a year, a date, a resolved relative date; a number; a locative word and a
    /// capitalised name) gain this much relevance, rescaled with `speaker_weight`
    /// (`crate::kinds`). 0 = off. At 0.2, hybrid at 1,500 tokens: LoCoMo 82.46 → 82.83 %
    /// (temporal 85.0 → 86.4), the probe set 82 → 87 of 98.
    pub kind_weight: f64,
    /// Soft recency prior; informative only — recency acts as a tie-break switch (autotune).
    pub recency_weight: f64,
    /// Outline structure: a kept line that heads an indented block (a test runner's `FAIL
    /// file` over `  ● suite › test name`, a compiler's error over its location, a YAML key
    /// over its value) brings the block's first line, while it fits the budget.
    pub outline: bool,
    // — redundancy —
    /// MMR diversity pass. Off: re-measured at 94.9 % with and without (3 projects × 8 seeds,
    /// budget 3,000) once the elastic window and the fixed splitter left it nothing to decide.
    pub mmr: bool,
    /// MMR λ; `None` = measured from the history's redundancy.
    pub mmr_lambda: Option<f64>,
    /// MMR candidate count; `None` = budget / 6 clamped to 400..=8000.
    pub mmr_cand: Option<usize>,
    /// Collapse exact / near-exact repeated lines (line numbers kept, see `dedup_key`).
    pub dedup: bool,
    /// Lines that share a term with the live question are kept first (up to `pin_max`).
    pub pin_query_terms: bool,
    /// Cap on pinned lines.
    pub pin_max: usize,
    /// Pin in the hybrid path too. Pins are kept before the fused order, so every line that
    /// shares a word with the question outranks one that says the same in other words: the
    /// fusion already ranks BM25, and pinning on top of it is what kept paraphrases out.
    pub pin_hybrid: bool,
    /// With `pin_hybrid`, a line is pinned in the hybrid path only if its BM25 reaches this
    /// fraction of the best line's (0 = every line that names a query term). 0.85: pinning
    /// every word match cost 16 probe points at 1,500 tokens (64.3 vs 80.6 %); pinning none
    /// cost LoCoMo 0.3–0.5 points at 1,000 tokens; 0.5 and 0.7 lost on both.
    pub pin_hybrid_min_bm: f64,
    // — budget —
    /// Demote tool results superseded by a newer result for the same target.
    pub supersede: bool,
    /// A call's target is its tool and every target argument (path, file, command, pattern,
    /// query, regex, glob) when the call is a JSON object, not the first of path / file /
    /// command: a later search of the same folder for another pattern no longer hides an
    /// earlier result. Off in [`PackOptions::reference`].
    pub supersede_full_target: bool,
    /// Stop when the relevant lines run out instead of filling the budget with filler
    /// (filler was 38 % of the budget at 3,000 and 56 % at 16,000).
    pub elastic: bool,
    /// Guaranteed floor for the recent turns, as a fraction of the budget.
    pub tail_min_frac: f64,
    /// Head reserve (first messages kept verbatim). 0 = off: on LoCoMo it cost 56.2 % vs 62.5 %.
    pub head_frac: f64,
    /// How many trailing turns the recent reserve considers: the live question and the
    /// exchange before it. The reference keeps 6; on LoCoMo (1,500 tokens, hybrid) 3 gave
    /// +1.1 points and the probe set +1 probe — the older turns compete on relevance instead.
    pub recent: usize,
    /// Recent-reserve fraction; `None` = derived from compression pressure.
    pub recent_frac: Option<f64>,
    /// Messages longer than this (UTF-16 units) are cut in the middle before reserving.
    pub max_msg_chars: usize,
    /// No single retrieved line may take more than this fraction of the remaining budget.
    pub per_line_cap_frac: f64,
    /// Content prefixes that mark a message as a tool result.
    pub tool_prefixes: Vec<String>,
    // — not retrieval —
    /// Annotate relative dates with the turn's absolute date.
    pub dates: bool,
    /// Where an annotated date goes: at the end of its line (default; the words stay
    /// verbatim) or inline after the expression ([`PackOptions::reference`]).
    pub date_notes: crate::dates::DateNotes,
    /// Carry each kept message's own time into the packed output (`PackedMessage::ts`), so a
    /// fact comes with its date and a correction is seen to be newer. Off in
    /// [`PackOptions::reference`], whose output has no times.
    pub message_times: bool,
    /// Fallback reference time (epoch ms) for messages without their own; `None` = do not
    /// annotate them.
    pub now: Option<i64>,
    /// Tally card (files read/edited, commands, errors). Off: −1.1 points at budget 3,000.
    pub summary: bool,
    /// Card ceiling as a fraction of the budget (below 0.05 the enumeration stops paying).
    pub summary_frac: f64,
    // — adaptation —
    /// Derive the knobs from this history's compression pressure.
    pub auto: bool,
    /// Recent-reserve fraction at pressure 0.
    pub auto_min_pressure: f64,
    /// Recent-reserve fraction at pressure 1.
    pub auto_max_pressure: f64,
    /// Below this pressure, recency breaks ties among irrelevant lines.
    pub auto_recency_pressure: f64,
    // — this port —
    /// Enforce the budget on the real emitted size (markers, truncations and message overhead
    /// included). The reference estimates markers at 8 tokens (they cost 12) and lets
    /// truncated lines overshoot: 1,567 tokens on average at budget 1,500. Off = reference
    /// behaviour, kept for parity checks.
    pub strict_budget: bool,
}

impl Default for PackOptions {
    fn default() -> Self {
        Self {
            bm25_k1: 0.75,
            bm25_b: 0.75,
            terms: bib_text::terms::TermConfig::default(),
            latin_spellings: true,
            rrf_k: 10.0,
            rrf_scored_only: false,
            semantic: true,
            sem_budget: 250,
            sem_blocks: true,
            sem_units: true,
            sem_unit_chars: 0,
            sem_unit_center: true,
            sem_block_center: true,
            sem_unit_weight: 1.0,
            sem_unit_context: 1.0,
            speaker_weight: 0.2,
            kind_weight: 0.2,
            recency_weight: 0.15,
            outline: true,
            mmr: false,
            mmr_lambda: None,
            mmr_cand: None,
            dedup: true,
            pin_query_terms: true,
            pin_max: 40,
            pin_hybrid: true,
            pin_hybrid_min_bm: 0.85,
            supersede: true,
            supersede_full_target: true,
            elastic: true,
            tail_min_frac: 0.05,
            head_frac: 0.0,
            recent: 3,
            recent_frac: None,
            max_msg_chars: 12_000,
            per_line_cap_frac: 0.5,
            tool_prefixes: vec!["[resultado".into(), "[Tool result]:".into()],
            dates: true,
            date_notes: crate::dates::DateNotes::LineEnd,
            message_times: true,
            now: None,
            summary: false,
            summary_frac: 0.05,
            auto: true,
            auto_min_pressure: 0.35,
            auto_max_pressure: 0.80,
            auto_recency_pressure: 0.25,
            strict_budget: true,
        }
    }
}

impl PackOptions {
    /// The reference's behaviour exactly (budget estimated as it does, overshoot included, and
    /// its hybrid settings).
    pub fn reference() -> Self {
        Self {
            strict_budget: false,
            bm25_k1: 1.2,
            rrf_k: 60.0,
            sem_budget: 400,
            terms: bib_text::terms::TermConfig::V1,
            // what this port added after the reference, all off
            latin_spellings: false,
            sem_blocks: true,
            sem_units: false,
            sem_unit_context: 0.0,
            sem_block_center: false,
            speaker_weight: 0.0,
            kind_weight: 0.0,
            outline: false,
            pin_hybrid: true,
            pin_hybrid_min_bm: 0.0,
            supersede_full_target: false,
            message_times: false,
            date_notes: crate::dates::DateNotes::Inline,
            recent: 6,
            ..Self::default()
        }
    }

    pub(crate) fn is_tool(&self, content: &str) -> bool {
        self.tool_prefixes
            .iter()
            .any(|p| content.starts_with(p.as_str()))
    }
}

/// Knobs derived from one history (see [`autotune`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuned {
    /// budget / history tokens, clamped to [0, 1]; `None` when autotune is off.
    pub pressure: Option<f64>,
    /// Fraction of the budget reserved for the recent turns.
    pub recent_frac: f64,
    /// Informative only.
    pub recency_weight: f64,
    /// Whether recency orders the irrelevant lines.
    pub recency_tiebreak: bool,
    /// Whether the head reserve is on.
    pub head_on: bool,
}

/// Knobs from the compression pressure of this history, not from constants.
///
/// - Recent reserve: 0.35 → 0.80 of the budget as pressure goes 0 → 1. Under pressure the
///   search needs the room; with slack, keeping the last turns verbatim is cheap.
/// - Recency is a switch, not a weight: as a tie-break among irrelevant lines it helped +2.9
///   at 15.8× history/budget and cost −7.9 at 3.0× (document order keeps passages together).
///   Threshold measured between 0.17 (neutral) and 0.34 (harmful): 0.25.
pub fn autotune(history_tok: usize, budget_tok: usize, o: &PackOptions) -> Tuned {
    if !o.auto {
        return Tuned {
            pressure: None,
            recent_frac: o.recent_frac.unwrap_or(0.55),
            recency_weight: o.recency_weight,
            recency_tiebreak: o.recency_weight > 0.0,
            head_on: o.head_frac > 0.0,
        };
    }
    let pressure = (budget_tok as f64 / history_tok.max(1) as f64).clamp(0.0, 1.0);
    let recent_frac = o
        .recent_frac
        .unwrap_or(o.auto_min_pressure + (o.auto_max_pressure - o.auto_min_pressure) * pressure);
    Tuned {
        pressure: Some(pressure),
        recent_frac,
        recency_weight: o.recency_weight * (1.0 - pressure),
        recency_tiebreak: pressure < o.auto_recency_pressure,
        head_on: o.head_frac > 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autotune_follows_pressure() {
        let o = PackOptions::default();
        let tight = autotune(30_000, 1_500, &o);
        assert!(tight.recency_tiebreak);
        assert!((tight.recent_frac - (0.35 + 0.45 * 0.05)).abs() < 1e-12);
        let loose = autotune(3_000, 1_500, &o);
        assert!(!loose.recency_tiebreak);
        assert!((loose.recent_frac - 0.575).abs() < 1e-12);
        let fits = autotune(1_000, 3_000, &o);
        assert_eq!(fits.pressure, Some(1.0));
    }
}
