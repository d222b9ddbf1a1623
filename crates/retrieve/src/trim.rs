//! Sentence trimming (spec 000 `trimChunksBySentence`).
//!
//! Each chunk is split into sentences (its `[Doc: …]` prefix kept out), every sentence of every
//! chunk is embedded in **one** batch through the content-keyed cache, and each sentence is
//! scored by cosine against the query vector. Per chunk:
//!
//! 1. keep the sentences scoring ≥ `threshold`;
//! 2. if fewer than `min_sentences`, top up with the best remaining ones;
//! 3. add `window` neighbours on each side of every kept sentence;
//! 4. rebuild in original order — contiguous sentences keep their original separator, and a
//!    `[...]` marks each gap between non-contiguous runs — and put the prefix back in front.
//!
//! Metadata (id, original score, source) is untouched; only the content shrinks.
//!
//! The [`TrimScorer::Hybrid`] option keeps the *number* of sentences the cosine threshold
//! selects but chooses *which* ones by reciprocal rank fusion of the sentence's cosine rank and
//! its BM25 rank among all candidate sentences — the lexical half covers literal matches
//! (numbers, names, flags) that a sentence embedding blurs.
//!
//! The scoring step ([`score_texts`]) and the selection step ([`apply`]) are separate so a
//! calibration sweep scores once and selects at many thresholds.

use std::cmp::Ordering;

use bib_embed::{EmbedKind, Embedder};
use bib_text::bm25::{Bm25Index, Bm25Params};
use bib_text::sentences::{chunk_sentences, structure_of, Sentence, Structure};
use bib_text::terms::{terms_with, TermConfig};
use serde::{Deserialize, Serialize};

use crate::cache::EmbeddingCache;
use crate::error::RetrieveError;
use crate::fusion::DEFAULT_RRF_K;
use crate::index::term_sequence_with;
use crate::signals::{contains_exact, exact_items, normalize_exact};

/// The default cosine threshold of the spec (calibrated for bge-m3; see BENCHMARKS.md for the
/// default local model's calibrated value, [`USE_M3_THRESHOLD`]).
pub const SPEC_THRESHOLD: f32 = 0.38;

/// The threshold calibrated for the default `use-m3` model with `bib bench xquad`, as part of
/// [`ASK_PROFILE`]: ≥ 97% of answers kept in both XQuAD-es and XQuAD-en at ≥ 50% token
/// reduction. The band that meets both is narrow (0.212–0.216 with the shipped signals;
/// 0.21 fell to 49.8 % reduction in Spanish), and 0.214 sits inside it. use-m3 cosines run lower than bge-m3's, so the spec's
/// 0.38 keeps only ~83% with window 0 (BENCHMARKS.md, "Ask").
pub const USE_M3_THRESHOLD: f32 = 0.214;

/// The same calibration for `e5-small` (`bib bench xquad --model e5-small`, same profile and
/// goal): its cosines sit far higher than use-m3's (a question and an unrelated sentence are
/// already ~0.75 apart), so 0.21 would keep every sentence. At 0.82 it keeps 97.6 % / 97.1 %
/// of answers at 56.5 % / 68.0 % reduction (es / en).
pub const E5_SMALL_THRESHOLD: f32 = 0.82;

/// The trimming threshold calibrated for the embedding model `model_id`, the one a knowledge
/// base was built with. A model not calibrated here (an OpenAI-compatible endpoint's) gets
/// the default model's value; `ask.trim_threshold` sets one explicitly.
pub fn calibrated_threshold(model_id: &str) -> f32 {
    match model_id {
        bib_embed::e5::MODEL_ID => E5_SMALL_THRESHOLD,
        _ => USE_M3_THRESHOLD,
    }
}

/// The trimming `bib ask --trim` (and the MCP/HTTP ask) applies unless told otherwise, found
/// with `bib bench xquad` and checked on the NuGet wiki golden sets (no evidence lost against
/// the earlier window-1 default, more tokens saved): cosine ≥ 0.214, the five best sentences of
/// the pool by sentence BM25 always kept, no neighbours, and no forced sentence — a chunk with
/// nothing relevant shrinks to its prefix and a `[...]`.
pub const ASK_PROFILE: TrimOptions = TrimOptions {
    threshold: USE_M3_THRESHOLD,
    min_sentences: 0,
    window: 0,
    scorer: TrimScorer::Cosine,
    rrf_k: DEFAULT_RRF_K,
    lexical_top: 5,
    structure: true,
};

/// How sentences are ranked for selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum TrimScorer {
    /// Cosine similarity of sentence and question.
    #[default]
    #[cfg_attr(feature = "clap", value(help = "similarity of sentence and question"))]
    Cosine,
    /// Keyword (BM25) rank of the sentence fused with its similarity rank.
    #[cfg_attr(
        feature = "clap",
        value(help = "keyword rank of the sentence fused with its similarity rank")
    )]
    Hybrid,
}

impl std::str::FromStr for TrimScorer {
    type Err = RetrieveError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "cosine" => Ok(Self::Cosine),
            "hybrid" => Ok(Self::Hybrid),
            other => Err(RetrieveError::InvalidOption {
                name: "trim_scorer".into(),
                reason: format!("`{other}` is not one of cosine, hybrid"),
            }),
        }
    }
}

/// An `f32` written as its shortest decimal (`0.21`), not as the `f64` nearest to it
/// (`0.20999999344348907`, what a JSON value of an `f32` would show).
pub fn shortest_f32<S: serde::Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(v.to_string().parse().unwrap_or(f64::from(*v)))
}

/// Trimming options. Defaults: the spec's library defaults (0.38, 1, 0), cosine scorer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrimOptions {
    /// Minimum cosine for a sentence to be kept.
    #[serde(serialize_with = "shortest_f32")]
    pub threshold: f32,
    /// Sentences kept per chunk even when none reaches the threshold.
    pub min_sentences: usize,
    /// Neighbours added on each side of every kept sentence.
    pub window: usize,
    /// How sentences are ranked.
    pub scorer: TrimScorer,
    /// RRF constant for the hybrid scorer.
    pub rrf_k: f64,
    /// Also keep the `lexical_top` best sentences of the whole pool (all chunks of the answer)
    /// by sentence-level BM25, whatever their cosine: the sentence a question was written from
    /// usually shares its rare words, which a sentence embedding can rank below a paraphrase.
    /// With it, every sentence holding one of the question's exact strings (an identifier
    /// such as `NU1905`, a quoted span: [`crate::signals::exact_items`]) is kept too, and those
    /// sentences rank first by words. 0 (the spec's behaviour) turns both off.
    #[serde(default)]
    pub lexical_top: usize,
    /// Keep the structure that gives a kept sentence its meaning ([`structural_context`]): a
    /// table's header and delimiter rows with a kept body row, a list's lead-in (a sentence
    /// ending in `:` or saying "as follows") with a kept item and the list's first items with
    /// a kept lead-in, a label's whole short description with a kept sentence of it, the
    /// nearest heading of the body above a kept sentence.
    #[serde(default)]
    pub structure: bool,
}

impl Default for TrimOptions {
    fn default() -> Self {
        Self {
            threshold: SPEC_THRESHOLD,
            min_sentences: 1,
            window: 0,
            scorer: TrimScorer::Cosine,
            rrf_k: DEFAULT_RRF_K,
            lexical_top: 0,
            structure: false,
        }
    }
}

impl TrimOptions {
    /// Check values, naming the bad one.
    pub fn validate(&self) -> Result<(), RetrieveError> {
        if !self.threshold.is_finite() || !(-1.0..=1.0).contains(&self.threshold) {
            return Err(RetrieveError::InvalidOption {
                name: "trim_threshold".into(),
                reason: format!("{} is not a cosine in [-1, 1]", self.threshold),
            });
        }
        if !self.rrf_k.is_finite() || self.rrf_k < 0.0 {
            return Err(RetrieveError::InvalidOption {
                name: "rrf_k".into(),
                reason: format!("{} must be a non-negative number", self.rrf_k),
            });
        }
        Ok(())
    }
}

/// A chunk text split for trimming: where its body starts and its sentences (spans relative to
/// the body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared<'a> {
    pub content: &'a str,
    pub body_offset: usize,
    pub sentences: Vec<Sentence>,
}

impl<'a> Prepared<'a> {
    /// Split `content` into prefix and body, and the body into sentences.
    pub fn new(content: &'a str) -> Self {
        let (body_offset, sentences) = chunk_sentences(content);
        Self {
            content,
            body_offset,
            sentences,
        }
    }

    /// The body (content after the prefix).
    pub fn body(&self) -> &'a str {
        &self.content[self.body_offset..]
    }

    /// The text of sentence `i`.
    pub fn sentence(&self, i: usize) -> &'a str {
        self.sentences[i].text(self.body())
    }
}

/// Scores of the sentences of one text.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SentenceScores {
    /// Cosine against the query, per sentence.
    pub cosine: Vec<f32>,
    /// RRF of cosine rank and BM25 rank over all candidate sentences, per sentence.
    pub fused: Vec<f64>,
    /// 1-based BM25 rank of the sentence among all candidate sentences (`None`: no query term;
    /// an empty vector: not computed).
    pub bm25_rank: Vec<Option<usize>>,
    /// Whether the sentence holds one of the question's exact strings (empty: not computed).
    pub exact: Vec<bool>,
}

/// The result of trimming one text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrimmedText {
    /// The rebuilt content (prefix + kept sentences, `[...]` between gaps).
    pub content: String,
    /// Indices of the kept sentences, ascending.
    pub kept: Vec<usize>,
    /// Number of sentences in the body.
    pub total: usize,
}

/// Score every sentence of every text: one embedding batch (through `cache`) for all of them,
/// cosine against `query_vec`, and the sentence-level BM25 (term function `terms`, the index's)
/// + cosine rank fusion.
pub fn score_texts(
    embedder: &dyn Embedder,
    cache: &EmbeddingCache,
    query: &str,
    query_vec: &[f32],
    prepared: &[Prepared<'_>],
    rrf_k: f64,
    terms: &TermConfig,
) -> Result<Vec<SentenceScores>, RetrieveError> {
    let all: Vec<&str> = prepared
        .iter()
        .flat_map(|p| (0..p.sentences.len()).map(move |i| p.sentence(i)))
        .collect();
    let vecs = if all.is_empty() {
        Vec::new()
    } else {
        cache.embed(embedder, &all, EmbedKind::Passage)?
    };
    let cos: Vec<f32> = vecs
        .iter()
        .map(|v| bib_embed::cosine(v, query_vec))
        .collect();

    // Global ranks over the pool of all sentences.
    let n = all.len();
    let mut cos_order: Vec<usize> = (0..n).collect();
    cos_order.sort_by(|&a, &b| cos[b].total_cmp(&cos[a]).then(a.cmp(&b)));
    let bm = Bm25Index::new(
        all.iter().map(|s| term_sequence_with(s, terms)),
        Bm25Params::default(),
    );
    let q = terms_with(query, terms);
    let bm_scores: Vec<f64> = (0..n).map(|i| bm.score(i, &q)).collect();
    // A sentence holding one of the question's exact strings (an identifier such as `NU1905`,
    // a quoted span) ranks before every other: a pasted error code is answered by the lines
    // that name it, which may share fewer of the question's other words.
    let exact: Vec<String> = exact_items(query)
        .into_iter()
        .filter(|i| i.strong)
        .map(|i| i.text)
        .collect();
    let holds_exact: Vec<bool> = if exact.is_empty() {
        vec![false; n]
    } else {
        all.iter()
            .map(|s| {
                let hay = normalize_exact(s);
                exact.iter().any(|e| contains_exact(&hay, e))
            })
            .collect()
    };
    let mut bm_order: Vec<usize> = (0..n).filter(|&i| bm_scores[i] > 0.0).collect();
    bm_order.sort_by(|&a, &b| {
        holds_exact[b]
            .cmp(&holds_exact[a])
            .then(bm_scores[b].total_cmp(&bm_scores[a]))
            .then(a.cmp(&b))
    });
    let mut fused = vec![0.0f64; n];
    for (r, &i) in cos_order.iter().enumerate() {
        fused[i] += bib_text::fusion::rrf(1.0, rrf_k, r + 1);
    }
    let mut bm25_rank = vec![None; n];
    for (r, &i) in bm_order.iter().enumerate() {
        fused[i] += bib_text::fusion::rrf(1.0, rrf_k, r + 1);
        bm25_rank[i] = Some(r + 1);
    }

    let mut out = Vec::with_capacity(prepared.len());
    let mut at = 0;
    for p in prepared {
        let m = p.sentences.len();
        out.push(SentenceScores {
            cosine: cos[at..at + m].to_vec(),
            fused: fused[at..at + m].to_vec(),
            bm25_rank: bm25_rank[at..at + m].to_vec(),
            exact: holds_exact[at..at + m].to_vec(),
        });
        at += m;
    }
    Ok(out)
}

/// Which sentences to keep, ascending. `cosine` decides how many pass the threshold;
/// `priority` (sentence indices, best first) decides which ones, and the top-up order.
pub fn select_sentences(
    cosine: &[f32],
    priority: &[usize],
    threshold: f32,
    min_sentences: usize,
    window: usize,
) -> Vec<usize> {
    select_sentences_with(cosine, priority, &[], threshold, min_sentences, window)
}

/// [`select_sentences`] plus `forced` sentences kept whatever their score (before the window is
/// applied, so they get neighbours like any kept sentence).
pub fn select_sentences_with(
    cosine: &[f32],
    priority: &[usize],
    forced: &[usize],
    threshold: f32,
    min_sentences: usize,
    window: usize,
) -> Vec<usize> {
    let n = cosine.len();
    let passing = cosine.iter().filter(|&&c| c >= threshold).count();
    let want = passing.max(min_sentences.min(n));
    let mut keep = vec![false; n];
    for &i in priority.iter().filter(|&&i| i < n).take(want) {
        keep[i] = true;
    }
    for &i in forced.iter().filter(|&&i| i < n) {
        keep[i] = true;
    }
    if window > 0 {
        let core: Vec<usize> = (0..n).filter(|&i| keep[i]).collect();
        for i in core {
            let lo = i.saturating_sub(window);
            let hi = (i + window).min(n - 1);
            keep[lo..=hi].iter_mut().for_each(|k| *k = true);
        }
    }
    (0..n).filter(|&i| keep[i]).collect()
}

/// Sentence indices ordered best first by `score`, ties by position.
fn order_by<T>(score: &[T], cmp: impl Fn(&T, &T) -> Ordering) -> Vec<usize> {
    let mut o: Vec<usize> = (0..score.len()).collect();
    o.sort_by(|&a, &b| cmp(&score[b], &score[a]).then(a.cmp(&b)));
    o
}

/// The gap marker for the original text between two kept runs.
fn gap_marker(between: &str) -> &'static str {
    if between.contains("\n\n") {
        "\n\n[...]\n\n"
    } else if between.contains('\n') {
        "\n[...]\n"
    } else {
        " [...] "
    }
}

/// Rebuild a text from the kept sentences: prefix (and the whitespace after it), contiguous runs
/// with their original separators, `[...]` between non-contiguous runs.
pub fn rebuild(p: &Prepared<'_>, kept: &[usize]) -> String {
    let body = p.body();
    if p.sentences.is_empty() {
        return p.content.to_string();
    }
    if kept.is_empty() {
        // Nothing relevant: say so rather than return a bare prefix.
        let prefix = &p.content[..p.body_offset];
        let sep = if prefix.is_empty() || prefix.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        return format!("{prefix}{sep}[...]");
    }
    let lead = body.len() - body.trim_start().len();
    let mut out = String::with_capacity(p.content.len());
    out.push_str(&p.content[..p.body_offset]);
    out.push_str(&body[..lead.min(p.sentences[0].start)]);
    let mut prev: Option<usize> = None;
    for &i in kept.iter().filter(|&&i| i < p.sentences.len()) {
        if let Some(j) = prev {
            let between = &body[p.sentences[j].end..p.sentences[i].start.max(p.sentences[j].end)];
            if i == j + 1 {
                out.push_str(between);
            } else {
                out.push_str(gap_marker(between));
            }
        }
        out.push_str(p.sentence(i));
        prev = Some(i);
    }
    out
}

/// List items kept after a kept lead-in sentence (see [`announces_list`]).
const LEAD_IN_ITEMS: usize = 5;

/// The longest description under a label kept whole when one of its sentences is kept.
const DESCRIPTION_SENTENCES: usize = 4;

/// Whether a prose sentence introduces a list: it ends in `:`, or says so in words ("as
/// follows", "the following", "a continuación", "de la siguiente manera") in English or
/// Spanish.
fn announces_list(sentence: &str) -> bool {
    const PHRASES: [&str; 5] = [
        "as follows",
        "the following",
        "a continuación",
        "siguiente",
        "como sigue",
    ];
    let t = sentence.trim_end();
    t.ends_with(':') || {
        let lower = t.to_lowercase();
        PHRASES.iter().any(|w| lower.contains(w))
    }
}

/// The sentences that give the `kept` ones their meaning, which a reader of the trimmed text
/// needs: a table body row means little without the table's header (and the delimiter row
/// keeps it a Markdown table), a list item without the sentence that introduces the list
/// ("To sign a package:", "enable restore as follows.") and that sentence without the list's
/// first items, one sentence of an option's description without the option's label and the
/// rest of the description, a sentence under a sub-heading of the chunk without that heading.
pub fn structural_context(p: &Prepared<'_>, kept: &[usize]) -> Vec<usize> {
    let n = p.sentences.len();
    let kinds: Vec<Structure> = (0..n).map(|i| structure_of(p.sentence(i))).collect();
    let body = p.body();
    // Whether sentences `j` and `j + 1` are in one block (no blank line between them).
    let joined = |j: usize| {
        let between = &body[p.sentences[j].end..p.sentences[j + 1].start.max(p.sentences[j].end)];
        between.matches('\n').count() <= 1
    };
    let mut out = Vec::new();
    for &i in kept.iter().filter(|&&i| i < n) {
        match kinds[i] {
            Structure::TableRow | Structure::Prose if p.sentence(i).contains('|') => {
                // Walk up the rows of this table to its delimiter; the header is just above.
                let mut j = i;
                while j > 0 && joined(j - 1) && kinds[j - 1] != Structure::TableDelimiter {
                    j -= 1;
                }
                if j > 1 && joined(j - 1) && kinds[j - 1] == Structure::TableDelimiter {
                    out.extend([j - 2, j - 1]);
                }
            }
            Structure::ListItem => {
                let mut j = i;
                while j > 0 && kinds[j - 1] == Structure::ListItem {
                    j -= 1;
                }
                // The lead-in is in the paragraph just above the list, not always its last
                // sentence ("Enable restore as follows. Otherwise see below.").
                let mut k = j;
                while k > 0 && kinds[k - 1] == Structure::Prose && (k == j || joined(k - 1)) {
                    k -= 1;
                    if announces_list(p.sentence(k)) {
                        out.push(k);
                        break;
                    }
                }
            }
            // A kept lead-in ("… in the following order:", "enable restore as follows.")
            // promises the list under its paragraph: keep the list's first items, which a
            // "which comes first" or "how do I" question is about.
            Structure::Prose if announces_list(p.sentence(i)) => {
                let mut j = i + 1;
                while j < n && kinds[j] == Structure::Prose && joined(j - 1) {
                    j += 1;
                }
                out.extend(
                    (j..n)
                        .take_while(|&j| kinds[j] == Structure::ListItem)
                        .take(LEAD_IN_ITEMS),
                );
            }
            _ => {}
        }
        // The description under a label (an option's `- **`-Timeout`**`) is one record: a
        // kept sentence of it brings the label and the rest of that short paragraph ("The
        // default is 300 seconds." after "Specifies the timeout.").
        if kinds[i] == Structure::Prose {
            let mut first = i;
            while first > 0 && kinds[first - 1] == Structure::Prose && joined(first - 1) {
                first -= 1;
            }
            let mut last = i;
            while last + 1 < n && kinds[last + 1] == Structure::Prose && joined(last) {
                last += 1;
            }
            if first > 0 && is_label(p.sentence(first - 1)) && last - first < DESCRIPTION_SENTENCES
            {
                out.push(first - 1);
                out.extend(first..=last);
            }
        }
        // A label — a heading, or a list item or line that only names something
        // (`- **`-SkipDuplicate`**`) — means nothing without the description that follows it.
        if (kinds[i] == Structure::Heading || is_label(p.sentence(i)))
            && i + 1 < n
            && !matches!(
                kinds[i + 1],
                Structure::Heading | Structure::TableRow | Structure::TableDelimiter
            )
        {
            out.push(i + 1);
        }
        if kinds[i] != Structure::Heading {
            if let Some(h) = (0..i).rev().find(|&j| kinds[j] == Structure::Heading) {
                out.push(h);
            }
        }
    }
    out
}

/// Whether a sentence only names something: at most four words once list markers and
/// Markdown emphasis and code marks are gone, with no sentence or lead-in punctuation at the
/// end, and some emphasis or code in it (`- **`-Source`**`, `` `packageSourceCredentials` ``).
fn is_label(sentence: &str) -> bool {
    let t = sentence.trim();
    if !(t.contains('`') || t.contains("**") || t.contains('_')) || t.contains('\n') {
        return false;
    }
    let body = t
        .trim_start_matches(|c: char| c == '-' || c == '*' || c == '+' || c.is_ascii_digit())
        .trim_start_matches('.')
        .trim();
    let bare: String = body
        .chars()
        .filter(|c| !matches!(c, '`' | '*' | '_'))
        .collect();
    let bare = bare.trim();
    !bare.is_empty()
        && bare.split_whitespace().count() <= 4
        && !bare.ends_with(['.', '!', '?', ':', ';', ','])
}

/// Select and rebuild one text from its scores.
pub fn apply(p: &Prepared<'_>, s: &SentenceScores, opts: &TrimOptions) -> TrimmedText {
    let priority = match opts.scorer {
        TrimScorer::Cosine => order_by(&s.cosine, f32::total_cmp),
        TrimScorer::Hybrid => order_by(&s.fused, f64::total_cmp),
    };
    let forced: Vec<usize> = if opts.lexical_top == 0 {
        Vec::new()
    } else {
        s.bm25_rank
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_some_and(|r| r <= opts.lexical_top))
            .map(|(i, _)| i)
            .chain(
                s.exact
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| **e)
                    .map(|(i, _)| i),
            )
            .collect()
    };
    let mut kept = select_sentences_with(
        &s.cosine,
        &priority,
        &forced,
        opts.threshold,
        opts.min_sentences,
        opts.window,
    );
    if opts.structure {
        kept.extend(structural_context(p, &kept));
        kept.sort_unstable();
        kept.dedup();
    }
    TrimmedText {
        content: rebuild(p, &kept),
        total: p.sentences.len(),
        kept,
    }
}

/// Trim several texts against one query: split, one embedding batch, score, select, rebuild
/// (sentence BM25 with the term function `terms`).
pub fn trim_texts(
    embedder: &dyn Embedder,
    cache: &EmbeddingCache,
    query: &str,
    query_vec: &[f32],
    texts: &[&str],
    opts: &TrimOptions,
    terms: &TermConfig,
) -> Result<Vec<TrimmedText>, RetrieveError> {
    opts.validate()?;
    let prepared: Vec<Prepared<'_>> = texts.iter().map(|t| Prepared::new(t)).collect();
    let scores = score_texts(
        embedder, cache, query, query_vec, &prepared, opts.rrf_k, terms,
    )?;
    Ok(prepared
        .iter()
        .zip(&scores)
        .map(|(p, s)| apply(p, s, opts))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_written_as_its_shortest_decimal() {
        let v = serde_json::to_value(ASK_PROFILE).unwrap();
        assert_eq!(v["threshold"].to_string(), "0.214");
    }

    #[test]
    fn each_model_gets_its_calibrated_threshold() {
        assert_eq!(
            calibrated_threshold(bib_embed::DEFAULT_MODEL),
            ASK_PROFILE.threshold
        );
        assert_eq!(calibrated_threshold("e5-small"), E5_SMALL_THRESHOLD);
        // A model calibrated nowhere (an endpoint's) falls back to the default model's value.
        assert_eq!(
            calibrated_threshold("text-embedding-3-small"),
            USE_M3_THRESHOLD
        );
    }
    use crate::cache::tests::{bag_of_words, bag_of_words_vector};

    /// Build a Prepared with explicit sentence texts (found in order), independent of the
    /// splitter.
    fn prepared<'a>(content: &'a str, prefix_len: usize, sents: &[&str]) -> Prepared<'a> {
        let body = &content[prefix_len..];
        let mut at = 0;
        let sentences = sents
            .iter()
            .map(|s| {
                let start = at + body[at..].find(s).expect("sentence in body");
                at = start + s.len();
                Sentence { start, end: at }
            })
            .collect();
        Prepared {
            content,
            body_offset: prefix_len,
            sentences,
        }
    }

    /// The index of the first sentence of `p` that starts with `start` (leading indentation
    /// aside).
    fn sentence_at(p: &Prepared<'_>, start: &str) -> usize {
        (0..p.sentences.len())
            .find(|&i| p.sentence(i).trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no sentence starting with {start:?} in {:?}", p.sentences))
    }

    const SPEC: &str = "La multi-tenancy aislaba datos. Cada tenant veía solo su esquema. Las queries explícitas mantenían la RLS.";
    const SPEC_S: [&str; 3] = [
        "La multi-tenancy aislaba datos.",
        "Cada tenant veía solo su esquema.",
        "Las queries explícitas mantenían la RLS.",
    ];

    const STRUCTURED: &str =
        "[Doc: Sign › CLI]\n\nYou can sign packages.\n\nTo sign a package:\n\n\
        1. Get a certificate.\n2. Run `nuget sign`.\n\n### Options\n\n| Option | Meaning |\n\
        |---|---|\n| -Timestamper | URL of an RFC 3161 server |\n| -Force | Overwrite |\n";

    #[test]
    fn structure_brings_lead_in_table_header_and_heading() {
        let p = Prepared::new(STRUCTURED);
        let at = |t: &str| sentence_at(&p, t);
        assert_eq!(structural_context(&p, &[at("2. Run")]), vec![at("To sign")]);
        let mut got = structural_context(&p, &[at("| -Force")]);
        got.sort_unstable();
        assert_eq!(got, vec![at("### Options"), at("| Option"), at("|---")]);
        // The header row itself, plain prose and the heading need nothing more.
        assert_eq!(
            structural_context(&p, &[at("| Option")]),
            vec![at("### Options")]
        );
        assert!(structural_context(&p, &[at("You can")]).is_empty());
        // A kept lead-in brings the list it introduces (and nothing else here: no heading
        // above it in the chunk).
        assert_eq!(
            structural_context(&p, &[at("To sign")]),
            vec![at("1. Get"), at("2. Run")]
        );
        // A kept heading brings the first sentence of its section, but not a table's header
        // row (it means nothing without a kept body row).
        assert!(structural_context(&p, &[at("### Options")]).is_empty());
    }

    #[test]
    fn a_kept_lead_in_brings_at_most_the_first_items_of_its_list() {
        let items: String = (1..=9)
            .map(|i| format!("{i}. Step number {i}.\n"))
            .collect();
        let text = format!("[Doc: Order]\n\nNuGet looks in this order:\n\n{items}\nThe end.\n");
        let p = Prepared::new(&text);
        let lead = sentence_at(&p, "NuGet looks");
        let got = structural_context(&p, &[lead]);
        assert_eq!(got.len(), LEAD_IN_ITEMS);
        assert!(got.iter().all(|&j| p.sentence(j).contains("Step number")));
        assert!(p.sentence(got[0]).starts_with("1. "));
    }

    #[test]
    fn a_lead_in_in_words_brings_the_list_after_its_paragraph_and_back() {
        let text = "[Doc: Restore]\n\nIn Visual Studio, enable restore as follows. Otherwise \
                    read on.\n\n1. Open the settings.\n2. Set both options.\n\nDone here.\n";
        let p = Prepared::new(text);
        let at = |t: &str| sentence_at(&p, t);
        assert_eq!(
            structural_context(&p, &[at("In Visual Studio")]),
            vec![at("1. Open"), at("2. Set")]
        );
        // A kept item brings the announcing sentence, not the paragraph's last one.
        assert_eq!(
            structural_context(&p, &[at("2. Set")]),
            vec![at("In Visual Studio")]
        );
        // A sentence that announces nothing brings nothing; nor does one whose paragraph
        // is followed by prose rather than a list.
        assert!(structural_context(&p, &[at("Otherwise")]).is_empty());
        assert!(structural_context(&p, &[at("Done here")]).is_empty());
        assert!(announces_list("Siga los pasos a continuación."));
        assert!(announces_list("Do the following:"));
        assert!(!announces_list("Restore runs before the build."));
    }

    #[test]
    fn a_kept_sentence_of_a_description_brings_its_label_and_the_rest_of_it() {
        let text = "[Doc: Push › Options]\n\n- **`-Timeout`**\n\n  Specifies the timeout, in \
                    seconds. The default is 300 seconds.\n\n- **`-Source`**\n\n  The server URL.\n\n\
                    Plain prose here. More prose there.\n";
        let p = Prepared::new(text);
        let at = |t: &str| sentence_at(&p, t);
        let mut got = structural_context(&p, &[at("Specifies")]);
        got.sort_unstable();
        assert_eq!(
            got,
            vec![at("- **`-Timeout"), at("Specifies"), at("The default")]
        );
        // Prose that follows no label is not a description.
        assert!(structural_context(&p, &[at("Plain prose")]).is_empty());
    }

    #[test]
    fn a_kept_label_brings_the_description_that_follows_it() {
        let text = "[Doc: Push › Options]\n\n## Options\n\n- **`-SkipDuplicate`**\n\n  \
                    If a package and version already exists, skip it.\n\n- **`-Source`**\n\n  \
                    The server URL.\n";
        let p = Prepared::new(text);
        let at = |t: &str| sentence_at(&p, t);
        let mut got = structural_context(&p, &[at("- **`-SkipDuplicate")]);
        got.sort_unstable();
        assert_eq!(got, vec![at("## Options"), at("If a package")]);
        // A kept heading is a label too: it brings the first sentence of its section.
        assert_eq!(
            structural_context(&p, &[at("## Options")]),
            vec![at("- **`-SkipDuplicate")]
        );
        // A description brings its label back (and the heading), no following sentence.
        let mut got = structural_context(&p, &[at("If a package")]);
        got.sort_unstable();
        got.dedup();
        assert_eq!(
            got,
            vec![
                at("## Options"),
                at("- **`-SkipDuplicate"),
                at("If a package")
            ]
        );
        assert!(is_label("- **`-Source`**"));
        assert!(is_label("`packageSourceCredentials`"));
        assert!(!is_label(
            "- Use `nuget push` to publish a package to a feed."
        ));
        assert!(!is_label("To sign a package:"));
        assert!(!is_label("plain words only"));
    }

    #[test]
    fn apply_with_structure_rebuilds_a_readable_table() {
        let p = Prepared::new(STRUCTURED);
        let n = p.sentences.len();
        let force = (0..n)
            .find(|&i| p.sentence(i).starts_with("| -Force"))
            .unwrap();
        let mut cosine = vec![0.0f32; n];
        cosine[force] = 0.9;
        let s = SentenceScores {
            cosine,
            ..SentenceScores::default()
        };
        let opts = TrimOptions {
            threshold: 0.5,
            min_sentences: 0,
            ..TrimOptions::default()
        };
        let plain = apply(&p, &s, &opts);
        assert_eq!(plain.kept, vec![force]);
        let kept = apply(
            &p,
            &s,
            &TrimOptions {
                structure: true,
                ..opts
            },
        );
        assert_eq!(kept.kept.len(), 4);
        assert!(
            kept.content.contains(
                "### Options\n\n| Option | Meaning |\n|---|---|\n[...]\n| -Force | Overwrite |"
            ),
            "{}",
            kept.content
        );
    }

    #[test]
    fn spec_example_keeps_0_and_2() {
        let p = prepared(SPEC, 0, &SPEC_S);
        let s = SentenceScores {
            cosine: vec![0.52, 0.21, 0.40],
            fused: vec![0.0; 3],
            bm25_rank: vec![],
            exact: vec![],
        };
        let t = apply(&p, &s, &TrimOptions::default());
        assert_eq!(
            t.content,
            "La multi-tenancy aislaba datos. [...] Las queries explícitas mantenían la RLS."
        );
        assert_eq!(t.kept, vec![0, 2]);
        assert_eq!(t.total, 3);
    }

    /// The spec example through the real splitter and prefix handling.
    #[test]
    fn spec_example_through_the_splitter() {
        let content = format!("[Doc: Arquitectura › Datos]\n{SPEC}");
        let p = Prepared::new(&content);
        assert_eq!(p.sentences.len(), 3, "{:?}", p.sentences);
        assert_eq!(&content[..p.body_offset], "[Doc: Arquitectura › Datos]\n");
        let s = SentenceScores {
            cosine: vec![0.52, 0.21, 0.40],
            fused: vec![0.0; 3],
            bm25_rank: vec![],
            exact: vec![],
        };
        let t = apply(&p, &s, &TrimOptions::default());
        assert_eq!(
            t.content,
            "[Doc: Arquitectura › Datos]\nLa multi-tenancy aislaba datos. [...] Las queries explícitas mantenían la RLS."
        );
        // Window 1 brings the middle sentence back: the whole chunk, no marker.
        let t = apply(
            &p,
            &s,
            &TrimOptions {
                window: 1,
                ..TrimOptions::default()
            },
        );
        assert_eq!(t.content, content);
    }

    #[test]
    fn selection_table() {
        // (cosine, threshold, min, window, expected kept)
        type Case<'a> = (&'a [f32], f32, usize, usize, &'a [usize]);
        let cases: &[Case<'_>] = &[
            (&[0.5, 0.1, 0.4], 0.38, 1, 0, &[0, 2]),
            (&[0.1, 0.2, 0.3], 0.38, 1, 0, &[2]),
            (&[0.1, 0.2, 0.3], 0.38, 2, 0, &[1, 2]),
            (&[0.1, 0.2, 0.3], 0.38, 5, 0, &[0, 1, 2]),
            (&[0.1, 0.2, 0.3], 0.38, 0, 0, &[]),
            (&[0.1, 0.9, 0.1, 0.1, 0.1], 0.38, 1, 1, &[0, 1, 2]),
            (&[0.1, 0.1, 0.1, 0.1, 0.9], 0.38, 1, 2, &[2, 3, 4]),
            (&[0.9, 0.1, 0.1, 0.1, 0.9], 0.38, 1, 1, &[0, 1, 3, 4]),
            (&[0.38, 0.37], 0.38, 0, 0, &[0]),
            (&[], 0.38, 1, 1, &[]),
        ];
        for (cos, thr, min, win, want) in cases {
            let pr = order_by(cos, f32::total_cmp);
            assert_eq!(
                select_sentences(cos, &pr, *thr, *min, *win),
                want.to_vec(),
                "{cos:?} thr={thr} min={min} win={win}"
            );
        }
    }

    #[test]
    fn rebuild_restores_prefix_and_marks_gaps() {
        let content = "[Doc: Guía › Uso]\nUno. Dos. Tres. Cuatro.";
        let p = prepared(
            content,
            content.find('\n').unwrap(),
            &["Uno.", "Dos.", "Tres.", "Cuatro."],
        );
        let cases: &[(&[usize], &str)] = &[
            (&[0, 1, 2, 3], content),
            (&[0, 3], "[Doc: Guía › Uso]\nUno. [...] Cuatro."),
            (&[1, 2], "[Doc: Guía › Uso]\nDos. Tres."),
            (&[2], "[Doc: Guía › Uso]\nTres."),
            (&[], "[Doc: Guía › Uso]\n[...]"),
        ];
        for (kept, want) in cases {
            assert_eq!(rebuild(&p, kept), *want, "kept {kept:?}");
        }
    }

    #[test]
    fn gaps_across_lines_keep_markdown_lines() {
        let content = "- a uno\n- b dos\n- c tres\n\nPárrafo final.";
        let p = prepared(
            content,
            0,
            &["- a uno", "- b dos", "- c tres", "Párrafo final."],
        );
        assert_eq!(rebuild(&p, &[0, 2]), "- a uno\n[...]\n- c tres");
        assert_eq!(rebuild(&p, &[0, 3]), "- a uno\n\n[...]\n\nPárrafo final.");
        assert_eq!(rebuild(&p, &[2, 3]), "- c tres\n\nPárrafo final.");
    }

    #[test]
    fn hybrid_scorer_prefers_lexical_match_with_same_count() {
        let content = "Alpha beta. Gamma delta. Version 4.2 ships today.";
        let p = prepared(
            content,
            0,
            &["Alpha beta.", "Gamma delta.", "Version 4.2 ships today."],
        );
        // Cosine prefers sentence 0 but only one passes; BM25 strongly prefers sentence 2.
        let s = SentenceScores {
            cosine: vec![0.5, 0.3, 0.36],
            fused: vec![1.0 / 61.0, 1.0 / 63.0, 1.0 / 62.0 + 1.0 / 61.0],
            bm25_rank: vec![Some(3), None, Some(1)],
            exact: vec![false; 3],
        };
        let cos = apply(&p, &s, &TrimOptions::default());
        assert_eq!(cos.kept, vec![0]);
        let hy = apply(
            &p,
            &s,
            &TrimOptions {
                scorer: TrimScorer::Hybrid,
                ..TrimOptions::default()
            },
        );
        assert_eq!(hy.kept, vec![2]);
        // The lexical top-1 of the pool joins the cosine pick.
        let lx = apply(
            &p,
            &s,
            &TrimOptions {
                lexical_top: 1,
                ..TrimOptions::default()
            },
        );
        assert_eq!(lx.kept, vec![0, 2]);
        assert_eq!(lx.content, "Alpha beta. [...] Version 4.2 ships today.");
        // A sentence holding the question's exact string is kept with the lexical ones, and
        // only when they are kept at all.
        let named = SentenceScores {
            exact: vec![false, true, false],
            ..s.clone()
        };
        let lexical = TrimOptions {
            lexical_top: 1,
            ..TrimOptions::default()
        };
        assert_eq!(apply(&p, &named, &lexical).kept, vec![0, 1, 2]);
        assert_eq!(apply(&p, &named, &TrimOptions::default()).kept, vec![0]);
    }

    #[test]
    fn trim_texts_with_fake_model_one_batch() {
        let e = bag_of_words();
        let cache = EmbeddingCache::default();
        let texts = [
            "Los gatos duermen mucho. El motor diésel consume gasoil.",
            "Nada que ver aquí. Los gatos cazan ratones.",
        ];
        let q = "gatos";
        let qv = bag_of_words_vector(q);
        let out = trim_texts(
            &e,
            &cache,
            q,
            &qv,
            &texts,
            &TrimOptions::default(),
            &TermConfig::default(),
        )
        .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(e.calls(), 1);
        for (o, t) in out.iter().zip(texts) {
            assert!(!o.content.is_empty() && o.content.len() <= t.len());
        }
        // Whatever the splitter decides, trimming never invents text: every kept sentence is
        // a substring of the original.
        for (o, t) in out.iter().zip(texts) {
            for part in o.content.split("[...]") {
                assert!(t.contains(part.trim()), "{part:?} not in {t:?}");
            }
        }
        assert!(TrimOptions {
            threshold: 2.0,
            ..TrimOptions::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn sentences_naming_the_questions_identifier_rank_first_by_words() {
        let e = bag_of_words();
        let cache = EmbeddingCache::default();
        let texts = [
            "Warning NU1905 is raised when a source has no data. A warning is a warning; \
             warnings about warnings warn.",
            "| Code | Reason |\n|------|--------|\n| [NU1901](x/NU1901.md) | Low severity |\n\
             | [NU1905](x/NU1905.md) | An audit source does not provide a vulnerability database |",
        ];
        let q = "warning NU1905";
        let qv = bag_of_words_vector(q);
        let prepared: Vec<Prepared<'_>> = texts.iter().map(|t| Prepared::new(t)).collect();
        let scores = score_texts(
            &e,
            &cache,
            q,
            &qv,
            &prepared,
            DEFAULT_RRF_K,
            &TermConfig::default(),
        )
        .unwrap();
        let rank_of = |t: usize, needle: &str| {
            let p = &prepared[t];
            let i = (0..p.sentences.len())
                .find(|&i| p.sentence(i).contains(needle))
                .unwrap();
            scores[t].bm25_rank[i]
        };
        // The sentence full of the question's other word but without its identifier ranks
        // after both sentences naming NU1905.
        let wordy = rank_of(0, "warnings about").unwrap();
        assert!(rank_of(0, "is raised").unwrap() < wordy);
        assert!(rank_of(1, "audit source").unwrap() < wordy);
    }

    use proptest::prelude::*;
    proptest! {
        #[test]
        fn selection_invariants(cos in proptest::collection::vec(-1.0f32..1.0, 0..30),
                                thr in -1.0f32..1.0, min in 0usize..4, win in 0usize..3) {
            let pr = order_by(&cos, f32::total_cmp);
            let kept = select_sentences(&cos, &pr, thr, min, win);
            // Sorted, unique, in range.
            prop_assert!(kept.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(kept.iter().all(|&i| i < cos.len()));
            // Every passing sentence kept; at least min(min, n) kept.
            for (i, &c) in cos.iter().enumerate() {
                if c >= thr { prop_assert!(kept.contains(&i)); }
            }
            prop_assert!(kept.len() >= min.min(cos.len()));
            // Window 0 with nothing passing keeps exactly the min best.
            if win == 0 && cos.iter().all(|&c| c < thr) {
                prop_assert_eq!(kept.len(), min.min(cos.len()));
            }
        }
    }
}
