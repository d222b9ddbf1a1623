//! Ranking signals on top of fusion (issue 15): the fused list's best candidates are re-scored
//! with what a plain BM25 + cosine cannot see, each signal weighted and switchable:
//!
//! - **field**: how much of the question's IDF mass the chunk's title, heading path and file
//!   name cover (a BM25F-like boost of those fields over the body);
//! - **name**: the question *is* a page's name — every word of it is in the file name or the
//!   title, valued by how much of that name it covers (`nuspec` → `nuspec.md`, where headings
//!   such as "Create the .nuspec file" only mention it);
//! - **phrase**: exact strings — quoted phrases, identifier-like tokens (`NU1101`,
//!   `-SkipDuplicate`, `packageSourceCredentials`, `nuget.config`) and runs of adjacent question
//!   words (`dotnet nuget push`) found verbatim (case and accents folded, Markdown code and
//!   emphasis marks dropped) in the chunk; the question's exact items also pull their own BM25
//!   candidates into the pool, so a pasted error message finds its page;
//! - **sentence**: the best single sentence's cosine to the question (sentence vectors are the
//!   trimmer's, looked up in the content-keyed cache that ingest fills), so a chunk with one
//!   sentence very close to the question is not beaten by one that is vaguely close everywhere;
//! - **sentence_lex**: the best single sentence's BM25 among all the candidates' sentences
//!   (the question's words together in one sentence, not spread over a long chunk);
//! - **doc**: document aggregation, the best other candidate chunk of the same file.
//!
//! Each contributes `weight × value` (values in [0, 1]) to the fused score; [`Explain`] keeps
//! every part so `bib ask --explain` can show why a chunk ranked where it did.

use std::collections::HashMap;

use bib_text::bm25::idf;
use bib_text::terms::{fold_accents, is_stop_word, term_initials, terms_with, TermConfig};
use serde::{Deserialize, Serialize};

use crate::error::RetrieveError;
use crate::index::ChunkRecord;

/// Weights of the ranking signals (0 turns one off) and how deep they re-score. Written (in
/// `bib.toml`, JSON reports) as its `key=value` spec ([`Signals::spec`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Signals {
    /// Title, heading path and file name coverage of the question's terms.
    pub field: f64,
    /// The question names the page: its terms within the file name or the title.
    pub name: f64,
    /// Exact strings of the question found verbatim.
    pub phrase: f64,
    /// Best sentence cosine (min-max over the re-scored candidates).
    pub sentence: f64,
    /// Best sentence BM25 among the re-scored candidates' sentences (over the best one).
    pub sentence_lex: f64,
    /// Best other candidate of the same document.
    pub doc: f64,
    /// Pseudo-relevance feedback, lexical: the BM25 of the best candidates' expansion terms
    /// ([`crate::prf`]).
    pub prf: f64,
    /// Pseudo-relevance feedback, dense: cosine to the best candidates' mean vector.
    pub prf_vec: f64,
    /// Candidates taken as relevant by the feedback signals.
    pub prf_docs: usize,
    /// Expansion terms kept by the lexical feedback signal.
    pub prf_terms: usize,
    /// Fused candidates re-scored (the rest keep their fused score).
    pub depth: usize,
    /// BM25 candidates fetched per exact item of the question (0: none).
    pub exact_candidates: usize,
    /// Typos corrected per question word the knowledge base does not know (0: off, 1: one
    /// edit, [`crate::typo`]).
    pub typo: usize,
}

impl Signals {
    /// Every signal off: the fusion alone, as before issue 15.
    pub const OFF: Signals = Signals {
        field: 0.0,
        name: 0.0,
        phrase: 0.0,
        sentence: 0.0,
        sentence_lex: 0.0,
        doc: 0.0,
        prf: 0.0,
        prf_vec: 0.0,
        prf_docs: 3,
        prf_terms: 10,
        depth: 30,
        exact_candidates: 0,
        typo: 0,
    };

    /// Whether any signal changes a score.
    pub fn any(&self) -> bool {
        self.field > 0.0
            || self.name > 0.0
            || self.phrase > 0.0
            || self.sentence > 0.0
            || self.sentence_lex > 0.0
            || self.doc > 0.0
            || self.prf > 0.0
            || self.prf_vec > 0.0
    }

    /// Parse `off`, `default`, or `key=value` pairs over the default (`field=0.2,doc=0`) or over
    /// a leading `off` / `default` (`off,name=1`).
    pub fn parse(spec: &str) -> Result<Signals, RetrieveError> {
        let bad = |reason: String| RetrieveError::InvalidOption {
            name: "signals".into(),
            reason,
        };
        let s = spec.trim();
        match s.to_ascii_lowercase().as_str() {
            "off" | "none" => return Ok(Self::OFF),
            "default" | "" => return Ok(Self::default()),
            _ => {}
        }
        // A leading `off` or `default` names the base the weights change (`off,name=1`: that
        // signal alone); without one, the weights change the default.
        let mut parts = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .peekable();
        let mut out = match parts.peek().map(|p| p.to_ascii_lowercase()).as_deref() {
            Some("off" | "none") => Self::OFF,
            _ => Self::default(),
        };
        if parts
            .peek()
            .is_some_and(|p| matches!(p.to_ascii_lowercase().as_str(), "off" | "none" | "default"))
        {
            parts.next();
        }
        for part in parts {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("`{part}` is not key=value")))?;
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim();
            let num = || -> Result<f64, RetrieveError> {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| bad(format!("`{k}` must be a number ≥ 0, not `{v}`")))
            };
            let int = || -> Result<usize, RetrieveError> {
                v.parse::<usize>()
                    .map_err(|_| bad(format!("`{k}` must be a whole number ≥ 0, not `{v}`")))
            };
            match k.as_str() {
                "field" => out.field = num()?,
                "name" => out.name = num()?,
                "phrase" => out.phrase = num()?,
                "sentence" => out.sentence = num()?,
                "sentence_lex" => out.sentence_lex = num()?,
                "doc" => out.doc = num()?,
                "prf" => out.prf = num()?,
                "prf_vec" => out.prf_vec = num()?,
                "prf_docs" => out.prf_docs = int()?.max(1),
                "prf_terms" => out.prf_terms = int()?,
                "depth" => out.depth = int()?,
                "exact_candidates" | "exact" => out.exact_candidates = int()?,
                "typo" | "typos" => {
                    out.typo = int()?;
                    if out.typo > 1 {
                        return Err(bad(format!(
                            "`typo` allows 0 (off) or 1 edit per word, not {}",
                            out.typo
                        )));
                    }
                }
                other => {
                    return Err(bad(format!(
                        "unknown signal `{other}` (field, name, phrase, sentence, sentence_lex, \
                         doc, prf, prf_vec, prf_docs, prf_terms, depth, exact_candidates, typo)"
                    )))
                }
            }
        }
        Ok(out)
    }

    /// The canonical `key=value` form.
    pub fn spec(&self) -> String {
        format!(
            "field={},name={},phrase={},sentence={},sentence_lex={},doc={},prf={},prf_vec={},\
             prf_docs={},prf_terms={},depth={},exact_candidates={},typo={}",
            self.field,
            self.name,
            self.phrase,
            self.sentence,
            self.sentence_lex,
            self.doc,
            self.prf,
            self.prf_vec,
            self.prf_docs,
            self.prf_terms,
            self.depth,
            self.exact_candidates,
            self.typo
        )
    }
}

/// The defaults, measured on the wiki dev sets and SciFact with term function V2 (BENCHMARKS.md,
/// "Ranking signals (issue 15)"); a signal is on only where both say it pays:
/// - `phrase` 0.4: dev_en top-5 +4, dev_es ±0 (top-1 +3), SciFact nDCG@10 +0.015;
/// - `sentence` 0.3: dev_en top-5 +4, dev_es +1, SciFact +0.004 (alone it costs SciFact
///   0.008; next to `phrase` it pays);
/// - `doc` 0.1: dev top-10 +4 over both sets; SciFact has one chunk per document, so it cannot
///   move there;
/// - `name` 0.3: only questions that are a page's name move (the bare `nuspec`: 4th →
///   1st); the dev sets and SciFact are unchanged but for one dev_es question at top-3 whose
///   bare error code `NU3008` now ranks the code's own page above the page the set expects;
/// - `field` off: with the others on it costs dev_es 1–2 questions at every k and SciFact 0.003;
/// - `sentence_lex` off: alone it costs dev_es top-5 2 questions and SciFact 0.004;
/// - `typo` 1: a question word the knowledge base does not know, one edit from one it does,
///   is searched as that word ([`crate::typo`]); with one typo put into every dev question,
///   top-5 +5 of 95 (en) and +5 of 112 (es), the given golden sets +1 and +2; on the questions
///   as written dev_es top-1 −1 (`login` taken for `logic`) and SciFact −0.002 (its claims
///   hold real typos, `microenviroment`, `methyltrasnferase`, and one wrong fix, `casues` →
///   `cases`);
/// - `depth` 30: the best 30 fused candidates are re-scored, whatever `top_k` (so the first
///   results do not depend on how many are asked for). Deeper pays a little and costs every
///   ask: SciFact 0.6739 at 30, 0.6776 at 50, 0.6825 at 100; all eight wiki sets at top-5
///   245, 246, 249 of 418; an ask at SciFact scale on SQLite (trim off) 4–7 ms p50 at 30
///   against 9–10 at 100 (each re-scored candidate is fetched and its sentence vectors read).
impl Default for Signals {
    fn default() -> Self {
        Self {
            field: 0.0,
            name: 0.3,
            phrase: 0.4,
            sentence: 0.3,
            sentence_lex: 0.0,
            doc: 0.1,
            prf: 0.0,
            prf_vec: 0.0,
            prf_docs: 3,
            prf_terms: 10,
            depth: 30,
            exact_candidates: 20,
            typo: 1,
        }
    }
}

impl TryFrom<String> for Signals {
    type Error = RetrieveError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<Signals> for String {
    fn from(s: Signals) -> String {
        s.spec()
    }
}

impl std::str::FromStr for Signals {
    type Err = RetrieveError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// One signal's part of a score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SignalPart {
    /// The signal's value in [0, 1] (sentence: after min-max scaling).
    pub value: f64,
    /// Its weight.
    pub weight: f64,
    /// `weight × value`, added to the score.
    pub contribution: f64,
    /// What matched (terms, exact strings, the sentence), for people.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub matched: Vec<String>,
    /// The raw value before scaling (sentence: the best sentence's cosine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<f64>,
}

impl SignalPart {
    /// A part with `contribution = weight × value`.
    pub fn new(value: f64, weight: f64, matched: Vec<String>, raw: Option<f64>) -> Self {
        Self {
            value,
            weight,
            contribution: weight * value,
            matched,
            raw,
        }
    }
}

/// Why a chunk scored what it did: every part of its final score.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Explain {
    /// How the lists were fused: `convex`, `rrf`, or the single list's name.
    pub fusion: String,
    /// Raw BM25 score (when the chunk was in the BM25 list).
    pub bm25: Option<f64>,
    /// BM25 divided by the list's best (convex fusion).
    pub bm25_norm: Option<f64>,
    /// Raw cosine to the question (stored vector).
    pub cosine: Option<f64>,
    /// Cosine min-max scaled over the candidates (convex fusion).
    pub cosine_norm: Option<f64>,
    /// BM25 weight α of convex fusion.
    pub alpha: Option<f64>,
    /// The fused score before the signals.
    pub fused: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<SignalPart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<SignalPart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phrase: Option<SignalPart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentence: Option<SignalPart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentence_lex: Option<SignalPart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doc: Option<SignalPart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prf: Option<SignalPart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prf_vec: Option<SignalPart>,
    /// The LLM reranker's judgement ([`crate::rerank`]): value = its 0–10 score / 10, `raw`
    /// the score as the model gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<SignalPart>,
    /// The final score (`fused` + every contribution).
    #[serde(rename = "final")]
    pub final_score: f64,
    /// Past the best `signals.depth` candidates, which alone are re-scored: this one keeps its
    /// fused score (possible only when more results are asked for than the depth).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub past_depth: bool,
}

impl Explain {
    /// The sum of every signal's contribution (`final − fused`).
    pub fn contributions(&self) -> f64 {
        [
            &self.field,
            &self.name,
            &self.phrase,
            &self.sentence,
            &self.sentence_lex,
            &self.doc,
            &self.prf,
            &self.prf_vec,
            &self.llm,
        ]
        .iter()
        .filter_map(|p| p.as_ref().map(|p| p.contribution))
        .sum()
    }
}

/// The exact items of a question: what must occur verbatim, with its weight.
#[derive(Debug, Clone, PartialEq)]
pub struct ExactItem {
    /// Normalised as [`normalize_exact`] does.
    pub text: String,
    /// Quoted phrase 3, identifier 2, run of question words 1.
    pub weight: f64,
    /// Quoted or identifier-like (these also fetch their own BM25 candidates).
    pub strong: bool,
}

/// Lower case, Latin accents folded, Markdown code/emphasis marks (`` ` ``, `*`) dropped,
/// whitespace collapsed to one space: how exact strings are compared.
pub fn normalize_exact(s: &str) -> String {
    // One pass (it runs over every candidate's text on every ask): lower-casing and folding
    // a character at a time gives what lower-casing and folding the whole text gives, except
    // Greek's final sigma, which both sides of a comparison then spell the same way.
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    let mut buf = [0u8; 4];
    for c in s.chars() {
        if c == '`' || c == '*' {
            continue;
        }
        if c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        if space {
            out.push(' ');
            space = false;
        }
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else {
            for l in c.to_lowercase() {
                out.push_str(&fold_accents(l.encode_utf8(&mut buf)));
            }
        }
    }
    out
}

/// Whether a raw question token looks like an identifier: a digit next to letters (`NU1101`),
/// a leading dash (`-SkipDuplicate`), inner capitals (`packageSourceCredentials`), or `.`, `_`,
/// `/`, `\`, `-` between letters (`nuget.config`, `http-cache`).
fn identifier_like(tok: &str) -> bool {
    let has_letter = tok.chars().any(char::is_alphabetic);
    if !has_letter || tok.chars().count() < 3 {
        return false;
    }
    let has_digit = tok.chars().any(|c| c.is_ascii_digit());
    let dash_lead =
        tok.starts_with('-') && tok[1..].starts_with(|c: char| c.is_alphabetic() || c == '-');
    let chars: Vec<char> = tok.chars().collect();
    let inner_caps = chars
        .windows(2)
        .any(|w| w[0].is_lowercase() && w[1].is_uppercase());
    let joined = chars.windows(3).any(|w| {
        w[0].is_alphanumeric()
            && matches!(w[1], '.' | '_' | '/' | '\\' | '-')
            && w[2].is_alphanumeric()
    });
    has_digit || dash_lead || inner_caps || joined
}

/// Trim the punctuation a question puts around a token (`¿`, `?`, `,`, quotes, brackets).
fn trim_token(t: &str) -> &str {
    t.trim_matches(|c: char| {
        matches!(
            c,
            '¿' | '?'
                | '¡'
                | '!'
                | ','
                | ';'
                | ':'
                | '('
                | ')'
                | '['
                | ']'
                | '"'
                | '\''
                | '“'
                | '”'
                | '«'
                | '»'
                | '`'
                | '.'
        )
    })
}

/// The exact items of `query`: quoted spans (`"…"`, `“…”`, `«…»`, `` `…` ``), identifier-like
/// tokens, and runs of two content words of the question that are adjacent or separated only by
/// stop words (`unable to find`, `nuget push`).
pub fn exact_items(query: &str) -> Vec<ExactItem> {
    let mut out: Vec<ExactItem> = Vec::new();
    let mut add = |text: String, weight: f64, strong: bool| {
        if text.chars().count() >= 2 && !out.iter().any(|i| i.text == text) {
            out.push(ExactItem {
                text,
                weight,
                strong,
            });
        }
    };
    for (open, close) in [('"', '"'), ('“', '”'), ('«', '»'), ('`', '`')] {
        let mut rest = query;
        while let Some(a) = rest.find(open) {
            let after = &rest[a + open.len_utf8()..];
            let Some(b) = after.find(close) else { break };
            let inner = normalize_exact(&after[..b]);
            if inner.contains(' ') || identifier_like(after[..b].trim()) {
                add(inner, 3.0, true);
            }
            rest = &after[b + close.len_utf8()..];
        }
    }
    let toks: Vec<&str> = query
        .split_whitespace()
        .map(trim_token)
        .filter(|t| !t.is_empty())
        .collect();
    for t in &toks {
        if identifier_like(t) {
            add(normalize_exact(t), 2.0, true);
        }
    }
    // Runs of content words: pair each content word with the next one, across ≤ 2 stop words.
    let content: Vec<usize> = (0..toks.len())
        .filter(|&i| {
            let t = toks[i];
            t.chars().count() >= 2
                && t.chars().any(char::is_alphanumeric)
                && !is_stop_word(&t.to_lowercase())
        })
        .collect();
    for w in content.windows(2) {
        let (i, j) = (w[0], w[1]);
        if j - i <= 3 {
            add(normalize_exact(&toks[i..=j].join(" ")), 1.0, false);
        }
    }
    out
}

/// Whether `needle` occurs in `hay` (both normalised) between word boundaries.
pub fn contains_exact(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
    let first_alnum = needle.chars().next().is_some_and(char::is_alphanumeric);
    let last_alnum = needle
        .chars()
        .next_back()
        .is_some_and(char::is_alphanumeric);
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let mut from = 0;
    // Overlapping matches: `ab ab` in `xab ab ab` fails at 1, then matches at 4.
    while let Some(i) = finder.find(&hay.as_bytes()[from..]) {
        // A match of a valid UTF-8 needle starts and ends on character boundaries.
        let at = from + i;
        let end = at + needle.len();
        if (!first_alnum || boundary(hay[..at].chars().next_back()))
            && (!last_alnum || boundary(hay[end..].chars().next()))
        {
            return true;
        }
        from = at + needle.chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// The phrase signal of one chunk: matched weight over total weight, and what matched.
pub fn phrase_score(items: &[ExactItem], normalized_content: &str) -> (f64, Vec<String>) {
    let total: f64 = items.iter().map(|i| i.weight).sum();
    if total <= 0.0 {
        return (0.0, Vec::new());
    }
    let mut got = 0.0;
    let mut matched = Vec::new();
    for i in items {
        if contains_exact(normalized_content, &i.text) {
            got += i.weight;
            matched.push(i.text.clone());
        }
    }
    (got / total, matched)
}

/// The text of a chunk's fields: title, heading path and file name (without extension, `-`/`_`
/// as spaces).
pub fn field_text(rec: &ChunkRecord) -> String {
    let stem = file_stem(&rec.path);
    let mut s = String::with_capacity(64);
    s.push_str(&rec.title);
    for h in &rec.heading_path {
        s.push(' ');
        s.push_str(h);
    }
    s.push(' ');
    s.push_str(stem);
    s.push(' ');
    s.push_str(&file_stem_text(&rec.path));
    s
}

/// A path's file name without directory and `.md` extension.
fn file_stem(path: &str) -> &str {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.strip_suffix(".md").unwrap_or(file)
}

/// The question as the name signal sees it: its words, each as its terms under the index's
/// term function. Built once per question, then scored against every candidate's names.
///
/// The name signal of a chunk ([`NameQuery::score`]) is the share of the words of its file
/// name (or title, whichever is more) that the question holds, when the question holds
/// nothing else; 0 when a word of the question is in neither. Words are split at `.`, `-`, `_`
/// and `/` (`nuget.config` is two words, as `nuget-config-file.md` is three) and compared by
/// their terms (a word matches when one of its terms is one of the other's); words without a
/// term (stop words) are left out.
#[derive(Debug, Clone)]
pub struct NameQuery<'c> {
    words: Vec<Vec<String>>,
    /// Per word of `words`, the initials of its terms (lower case, accents folded), to rule
    /// a name out without analysing it.
    initials: Vec<Vec<char>>,
    cfg: &'c TermConfig,
}

impl<'c> NameQuery<'c> {
    pub fn new(query: &str, cfg: &'c TermConfig) -> Self {
        let words = name_words(query, cfg);
        let initials = words
            .iter()
            .map(|terms| terms.iter().filter_map(|t| initial(t)).collect())
            .collect();
        Self {
            words,
            initials,
            cfg,
        }
    }

    /// Whether `name` can hold every word of the question: each question word needs one of
    /// its terms' initials among those of the terms the name can give
    /// ([`bib_text::terms::term_initials`]). Most names fail this, and then none of their
    /// words is stemmed (the candidates' titles were ~12 % of an ask's CPU on SciFact).
    fn could_cover(&self, name: &str) -> bool {
        match term_initials(name, self.cfg) {
            Some(starts) => self
                .initials
                .iter()
                .all(|word| word.iter().any(|c| starts.contains(c))),
            None => true,
        }
    }

    /// The name signal of a page with file name `stem` (as [`file_stem_text`] gives it) and
    /// `title`, and the question's terms when it is one of its names.
    pub fn score(&self, stem: &str, title: &str) -> (f64, Vec<String>) {
        self.score_with(stem, title, true)
    }

    /// [`Self::score`], ruling names out by their initials first when `shortcut` (always, but
    /// in the test that the shortcut never changes a score).
    fn score_with(&self, stem: &str, title: &str, shortcut: bool) -> (f64, Vec<String>) {
        if self.words.is_empty() {
            return (0.0, Vec::new());
        }
        let meets = |a: &[String], b: &[String]| a.iter().any(|t| b.contains(t));
        let covers = |name: &[Vec<String>]| -> f64 {
            let q = &self.words;
            if name.is_empty() || !q.iter().all(|qw| name.iter().any(|nw| meets(qw, nw))) {
                return 0.0;
            }
            let held = name
                .iter()
                .filter(|nw| q.iter().any(|qw| meets(qw, nw)))
                .count();
            held as f64 / name.len() as f64
        };
        let of = |name: &str| {
            if !shortcut || self.could_cover(name) {
                covers(&name_words(name, self.cfg))
            } else {
                0.0
            }
        };
        let v = of(stem).max(of(title));
        let matched = if v > 0.0 {
            self.words.iter().flatten().cloned().collect()
        } else {
            Vec::new()
        };
        (v, matched)
    }
}

/// The words of `text` for the name signal, each as its terms; words without one left out.
fn name_words(text: &str, cfg: &TermConfig) -> Vec<Vec<String>> {
    split_name(text)
        .map(|w| terms_with(w, cfg))
        .filter(|t| !t.is_empty())
        .collect()
}

/// The words of a name or question as the name signal splits them (at spaces, `.`, `-`, `_`,
/// `/`; empty pieces included).
fn split_name(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || matches!(c, '.' | '-' | '_' | '/'))
}

/// The first letter of a term (terms are lower case), accents folded.
fn initial(term: &str) -> Option<char> {
    let first = term.chars().next()?;
    fold_accents(first.encode_utf8(&mut [0; 4])).chars().next()
}

/// A chunk's file name without directory and extension, `-`, `_` and `.` as spaces.
pub fn file_stem_text(path: &str) -> String {
    file_stem(path).replace(['-', '_', '.'], " ")
}

/// IDF of each query term in the index.
#[derive(Debug, Clone, Default)]
pub struct QueryTerms {
    pub terms: Vec<String>,
    pub idf: Vec<f64>,
}

impl QueryTerms {
    /// The question's `terms` (from the index's term function), with IDF from the index's
    /// chunk count and their document frequencies.
    pub fn new(terms: Vec<String>, n_chunks: usize, dfs: &[usize]) -> Self {
        let idf = terms
            .iter()
            .enumerate()
            .map(|(i, _)| idf(n_chunks, dfs.get(i).copied().unwrap_or(0)))
            .collect();
        Self { terms, idf }
    }

    /// The field signal of a chunk: IDF mass of the query terms its fields hold, over the
    /// query's, and the terms that matched.
    pub fn field_score(&self, fields: &[String]) -> (f64, Vec<String>) {
        let total: f64 = self.idf.iter().sum();
        if total <= 0.0 {
            return (0.0, Vec::new());
        }
        let mut got = 0.0;
        let mut matched = Vec::new();
        for (t, w) in self.terms.iter().zip(&self.idf) {
            if fields.contains(t) {
                got += w;
                matched.push(t.clone());
            }
        }
        (got / total, matched)
    }
}

/// Min-max scaling of `v` into [0, 1] (all 1 when they are equal); a non-finite value (a
/// candidate without the signal) scales to 0 and does not count for the range.
pub fn min_max(v: &[f64]) -> Vec<f64> {
    let ok = v.iter().copied().filter(|x| x.is_finite());
    let lo = ok.clone().fold(f64::INFINITY, f64::min);
    let hi = ok.fold(f64::NEG_INFINITY, f64::max);
    let span = hi - lo;
    v.iter()
        .map(|x| match (x.is_finite(), span > 0.0) {
            (false, _) => 0.0,
            (true, true) => (x - lo) / span,
            (true, false) => 1.0,
        })
        .collect()
}

/// Document aggregation: for each candidate, the best score among the *other* candidates of
/// the same path (0 when it is alone).
pub fn best_other_of_doc(paths: &[&str], scores: &[f64]) -> Vec<f64> {
    let mut best: HashMap<&str, (f64, f64)> = HashMap::new(); // path → (best, second best)
    for (p, &s) in paths.iter().zip(scores) {
        let e = best
            .entry(p)
            .or_insert((f64::NEG_INFINITY, f64::NEG_INFINITY));
        if s > e.0 {
            *e = (s, e.0);
        } else if s > e.1 {
            e.1 = s;
        }
    }
    paths
        .iter()
        .zip(scores)
        .map(|(p, &s)| {
            let (b1, b2) = best[p];
            let other = if s >= b1 { b2 } else { b1 };
            if other.is_finite() {
                other.max(0.0)
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bib_text::terms::{terms_with, TermConfig};

    fn texts(items: &[ExactItem]) -> Vec<&str> {
        items.iter().map(|i| i.text.as_str()).collect()
    }

    #[test]
    fn exact_items_of_questions() {
        let q = exact_items("¿Qué hace -StorePasswordInClearText?");
        assert!(texts(&q).contains(&"-storepasswordincleartext"), "{q:?}");
        let q = exact_items("restore fails with NU1101 in packageSourceCredentials");
        let t = texts(&q);
        assert!(
            t.contains(&"nu1101") && t.contains(&"packagesourcecredentials"),
            "{t:?}"
        );
        let q = exact_items("error \"Unable to find package\" when I run dotnet nuget push");
        let t = texts(&q);
        assert!(t.contains(&"unable to find package"), "{t:?}");
        assert!(
            t.contains(&"dotnet nuget") && t.contains(&"nuget push"),
            "{t:?}"
        );
        assert!(
            q.iter()
                .find(|i| i.text == "unable to find package")
                .unwrap()
                .strong
        );
        assert!(!q.iter().find(|i| i.text == "nuget push").unwrap().strong);
        assert!(exact_items("").is_empty());
        assert!(exact_items("the and of").is_empty(), "stop words only");
    }

    #[test]
    fn exact_matching_tries_overlapping_occurrences() {
        // The first occurrence fails its left boundary; the overlapping one after it holds.
        assert!(contains_exact("xab ab ab", "ab ab"));
        assert!(!contains_exact("xab abx", "ab ab"));
        assert!(contains_exact("ñandú ñandú", "ñandú"));
        assert!(!contains_exact("añandú", "ñandú"));
    }

    proptest::proptest! {
        /// Ruling a name out by its initials never changes the name signal, for every term
        /// configuration the shortcut applies to (accents, Cyrillic, apostrophes, separators).
        #[test]
        fn the_initials_shortcut_never_changes_a_name_score(
            q in "[a-eé ÉñÑдД'._/-]{0,16}",
            stem in "[a-eé ÉñÑдД'._/-]{0,16}",
            title in "[a-eé ÉñÑдД'._/-]{0,24}",
            preset in 0usize..3,
        ) {
            let cfg = [TermConfig::V1, TermConfig::V2, TermConfig::V3][preset];
            let nq = NameQuery::new(&q, &cfg);
            proptest::prop_assert_eq!(
                nq.score_with(&stem, &title, true),
                nq.score_with(&stem, &title, false)
            );
        }

        /// The one-pass normalisation equals lower-casing, folding and collapsing the whole
        /// text in turn (Greek final sigma aside, which lower-cases by context).
        #[test]
        fn one_pass_normalisation_equals_the_steps(s in "[^Σσς]{0,80}") {
            let folded = fold_accents(&s.to_lowercase()).into_owned();
            let mut steps = String::new();
            let mut space = false;
            for c in folded.chars().filter(|&c| c != '`' && c != '*') {
                if c.is_whitespace() {
                    space = !steps.is_empty();
                } else {
                    if space {
                        steps.push(' ');
                        space = false;
                    }
                    steps.push(c);
                }
            }
            proptest::prop_assert_eq!(normalize_exact(&s), steps);
        }
    }

    #[test]
    fn exact_matching_respects_word_boundaries_and_marks() {
        let hay =
            normalize_exact("Run `dotnet nuget push` with **-SkipDuplicate**; NU11010 is other.");
        assert!(contains_exact(&hay, "dotnet nuget push"));
        assert!(contains_exact(&hay, "-skipduplicate"));
        assert!(!contains_exact(&hay, "nu1101"), "{hay}");
        assert!(contains_exact(
            &normalize_exact("Configuración  del\n paquete"),
            "configuracion del paquete"
        ));
        let items = exact_items("dotnet nuget push -SkipDuplicate");
        let (s, m) = phrase_score(&items, &hay);
        // The identifier (2) and the runs `dotnet nuget`, `nuget push` (1 each) occur; the run
        // `push -skipduplicate` does not (`with` sits between them).
        assert_eq!(
            m,
            ["-skipduplicate", "dotnet nuget", "nuget push"],
            "{items:?}"
        );
        assert!((s - 4.0 / 5.0).abs() < 1e-12, "{s}");
        let (s, _) = phrase_score(&items, "nothing here");
        assert_eq!(s, 0.0);
    }

    #[test]
    fn field_text_and_score() {
        let rec = ChunkRecord {
            id: 1,
            path: "reference/nuspec-reference.md".into(),
            chunk_index: 0,
            title: ".nuspec reference".into(),
            heading_path: vec!["Metadata".into()],
            content: String::new(),
            metadata: serde_json::Value::Null,
            ..Default::default()
        };
        // No stems, so the query's terms are its three words.
        let cfg = TermConfig {
            stem: bib_text::terms::Stemming::None,
            ..TermConfig::V1
        };
        let f = terms_with(&field_text(&rec), &cfg);
        let q = QueryTerms::new(
            terms_with("nuspec metadata version", &cfg),
            100,
            &[5, 10, 50],
        );
        let (s, m) = q.field_score(&f);
        let want = (idf(100, 5) + idf(100, 10)) / (idf(100, 5) + idf(100, 10) + idf(100, 50));
        assert!((s - want).abs() < 1e-12, "{s} vs {want}");
        assert_eq!(m, vec!["nuspec".to_string(), "metadata".to_string()]);
        let q = QueryTerms::new(Vec::new(), 100, &[]);
        assert_eq!(q.field_score(&f).0, 0.0);
    }

    #[test]
    fn name_signal_is_the_share_of_a_name_the_question_is() {
        let cfg = TermConfig::default();
        let name = |q: &str, path: &str, title: &str| {
            NameQuery::new(q, &cfg).score(&file_stem_text(path), title)
        };
        // The bare name of a page is all of its file name; a heading that mentions the word
        // is not a name.
        let (v, m) = name("nuspec", "reference/nuspec.md", ".nuspec reference");
        assert_eq!(v, 1.0);
        assert_eq!(m, terms_with("nuspec", &cfg));
        assert_eq!(
            name("nuspec", "create/Creating-a-Package.md", "Create a package").0,
            0.0
        );
        // Half a title: the better of file name and title counts; stop words do not.
        assert_eq!(
            name(
                "signed packages",
                "a/Signed-Packages-Reference.md",
                "Signed packages"
            )
            .0,
            1.0
        );
        let v = name("signing packages", "a/Signed-Packages-Reference.md", "").0;
        assert!((v - 2.0 / 3.0).abs() < 1e-12, "{v}");
        assert_eq!(name("the package", "a/Package.md", "").0, 1.0);
        // A question with one word outside the name is not the name.
        assert_eq!(name("nuspec version", "reference/nuspec.md", "").0, 0.0);
        assert_eq!(name("", "reference/nuspec.md", "nuspec").0, 0.0);
        assert_eq!(name("the", "reference/nuspec.md", "nuspec").0, 0.0);
        // Identifiers: `NU1101.md` is named by `NU1101`, `nuget-config-file.md` by `nuget.config`.
        assert_eq!(name("NU1101", "e/NU1101.md", "").0, 1.0);
        let v = name("nuget.config", "r/nuget-config-file.md", "").0;
        assert!((v - 2.0 / 3.0).abs() < 1e-12, "{v}");
        assert_eq!(
            name("nuget.config", "release-notes/NuGet-2.1.md", "NuGet 2.1").0,
            0.0
        );
    }

    #[test]
    fn doc_aggregation_takes_the_best_other() {
        let paths = ["a", "b", "a", "a"];
        let s = [0.9, 0.8, 0.5, 0.7];
        assert_eq!(best_other_of_doc(&paths, &s), vec![0.7, 0.0, 0.9, 0.9]);
        assert_eq!(min_max(&[1.0, 3.0, 2.0]), vec![0.0, 1.0, 0.5]);
        assert_eq!(min_max(&[2.0, 2.0]), vec![1.0, 1.0]);
        assert_eq!(min_max(&[1.0, f64::NAN, 3.0]), vec![0.0, 0.0, 1.0]);
    }

    #[test]
    fn signals_parse_and_name_bad_keys() {
        assert_eq!(Signals::parse("off").unwrap(), Signals::OFF);
        let s = Signals::parse("field=0.25, doc=0").unwrap();
        assert_eq!((s.field, s.doc), (0.25, 0.0));
        let s = Signals::parse("default,field=0.25").unwrap();
        assert_eq!((s.field, s.phrase), (0.25, Signals::default().phrase));
        let s = Signals::parse("off, name=1").unwrap();
        assert_eq!(
            s,
            Signals {
                name: 1.0,
                ..Signals::OFF
            }
        );
        assert_eq!(Signals::parse(&s.spec()).unwrap(), s);
        for (spec, needle) in [
            ("field=-1", "field"),
            ("colour=1", "colour"),
            ("field", "key=value"),
            ("depth=x", "depth"),
        ] {
            let e = Signals::parse(spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }
}
