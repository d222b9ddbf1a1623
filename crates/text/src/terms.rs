//! The term function shared by every BM25 in the system (spec 003 `terms`, issue 15).
//!
//! Documents in the store, sentences in the trimmer, candidates in the ranking signals and lines
//! in the history packer are all scored through this module, so a score means the same thing
//! everywhere. How words become terms is a [`TermConfig`]; a knowledge base records the one its
//! postings were built with (`TermConfig::id`), and queries against it are analysed with that
//! same configuration, never another.
//!
//! What it does, and the measured reason for each rule:
//! - Tokens start with a letter, digit or `_` of **any script** and continue through letters,
//!   digits, `_`, `.`, `/` and `-`. ASCII-only splitting turned «mañana» into `[ma, ana]` and gave
//!   Russian no terms at all (Ukrainian/Russian went from 0/18 to 10/18 and 9/18 when fixed).
//! - The **compound token and its parts** are both emitted: `src/utils.js` matches exactly, and
//!   a question about `utils` still finds it. Changing only the splitter explained 3.5 of 4.8
//!   points on LoCoMo.
//! - **NFC** and lower case, so composed and decomposed forms, and cases, are one term.
//! - Stems ([`Stemming`]): `prefix` is the original lemmatiser without a dictionary (letters-only
//!   words ≥ 7 chars → first 6; Cyrillic words ≥ 6 chars → first 5; spec 003: +3 cases on a
//!   blind multilingual set, LoCoMo 163 → 173 evidence lines of 354). `snowball` is the Snowball
//!   stemmer of the text's language (Spanish or English, by [`Language`]; Russian for Cyrillic
//!   words). The word itself is emitted too unless `surface` is off, so an exact form scores
//!   above a stem-only match.
//! - `fold`: Latin accents folded (`configuración` = `configuracion`, `ñ` = `n`), since people
//!   type questions without them. Alone it hurt (spec 003: «qué/está» collide with «que/esta» and
//!   filler outranks the answer); with `stop` those words are gone.
//! - `stop`: Spanish and English function words dropped (plain words only; a compound such as
//!   `how-to` keeps its whole form).
//! - `cyr`: Ukrainian words, and Russian words with `ё`, stemmed too (`і`, `ї`, `є`, `ґ`, `ё`
//!   spelt as the Russian letters the Russian stemmer knows). On the probe set (20 seeds,
//!   hybrid with e5-small, 1,500 tokens) Ukrainian gained 10 probes and nothing was lost (with
//!   use-m3 Ukrainian lost 5). Russian and Ukrainian stop words were measured and left out: 7
//!   more Ukrainian probes in hybrid packs, but 12 fewer in lexical ones.
//! - Terms shorter than 2 UTF-16 units are dropped; each term is emitted once per token, and
//!   [`terms_with`] lists each once, in first-seen order.
//!
//! BENCHMARKS.md ("Ranking signals (issue 15)") has the measurements behind [`TermConfig::default`].

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use regex::Regex;
use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::char::decompose_canonical;
use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};

/// Revision of the stop lists and folding rules: part of every [`TermConfig::id`], so a store
/// built with other lists is detected instead of silently mismatched.
const REVISION: u32 = 1;

/// Which stems a word gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stemming {
    /// No stems: the words only.
    None,
    /// The original prefix stems (spec 003).
    Prefix,
    /// Snowball stems of the text's language.
    Snowball,
    /// Both prefix and Snowball stems.
    Both,
}

/// Which Snowball stemmer Latin-script words get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// Per text, by its Spanish and English stop words; a text with neither (or a tie) gets
    /// both stemmers.
    Detect,
    /// Always both stemmers.
    Both,
    /// Spanish only.
    Es,
    /// English only.
    En,
}

/// How the term function turns words into terms. Parse one from `v1` to `v4`, `default` or a
/// list such as `stem=snowball,fold=1,stop=1,lang=detect,surface=1`, optionally led by a preset
/// (`v1,fold=1`); keys not given keep the preset's (else the default's) value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TermConfig {
    pub stem: Stemming,
    /// Fold Latin accents.
    pub fold: bool,
    /// Drop Spanish and English stop words.
    pub stop: bool,
    /// Language of the Snowball stems.
    pub lang: Language,
    /// Emit the word itself besides its stems.
    pub surface: bool,
    /// Split identifiers at `_` too (`db_port` → `db_port`, `db`, `port`), as at `.`, `/`, `-`:
    /// a question that says "port" finds `DB_PORT=5433`.
    pub snake: bool,
    /// Split camelCase identifiers into their words too (`packageSourceCredentials` →
    /// `package`, `source`, `credentials` besides the whole). Off in every preset: on the wiki
    /// dev sets it cost 4 top-10 answers in Spanish and 1 top-5 on golden_en, and gained none
    /// on the probes (BENCHMARKS.md); `camel=1` turns it on for comparison.
    pub camel: bool,
    /// Before the Russian stemmer, spell the Cyrillic letters it does not know as ones it does:
    /// Ukrainian `і`, `ї` → `и`, `є` → `е`, `ґ` → `г`, and `ё` → `е` (as Snowball's current
    /// Russian stemmer does itself). It reads the others as consonants, so Ukrainian words
    /// (`ліків` → `ликив` → `лик`, as `ліки`) and Russian words with `ё` (`счёт`, `ещё`) kept
    /// their endings and never met their other forms. Other words are untouched.
    pub cyrillic_letters: bool,
}

impl TermConfig {
    /// The term function before issue 15: prefix stems, no folding, no stop words. A knowledge
    /// base that records no term function was built with this one.
    pub const V1: TermConfig = TermConfig {
        stem: Stemming::Prefix,
        fold: false,
        stop: false,
        lang: Language::Detect,
        surface: true,
        snake: false,
        camel: false,
        cyrillic_letters: false,
    };

    /// Snowball stems (Spanish and English both), accent folding, stop words (issue 15).
    /// Both stemmers beat detecting each text's language on the wiki dev sets (BENCHMARKS.md).
    pub const V2: TermConfig = TermConfig {
        stem: Stemming::Snowball,
        fold: true,
        stop: true,
        lang: Language::Both,
        surface: true,
        snake: false,
        camel: false,
        cyrillic_letters: false,
    };

    /// V2 with identifiers also split at `_` (`DB_PORT`, `SHELL_TIMEOUT_MS`): agent sessions
    /// and configuration name things in snake case, and people ask for the words.
    pub const V3: TermConfig = TermConfig {
        snake: true,
        ..Self::V2
    };

    /// V3 with Ukrainian words and Russian words with `ё` stemmed too
    /// ([`TermConfig::cyrillic_letters`]).
    pub const V4: TermConfig = TermConfig {
        cyrillic_letters: true,
        ..Self::V3
    };

    /// The full, explicit description stored with a knowledge base (never a preset name, so a
    /// later change of presets cannot reinterpret an old store).
    pub fn id(&self) -> String {
        let stem = match self.stem {
            Stemming::None => "none",
            Stemming::Prefix => "prefix",
            Stemming::Snowball => "snowball",
            Stemming::Both => "prefix+snowball",
        };
        let lang = match self.lang {
            Language::Detect => "detect",
            Language::Both => "both",
            Language::Es => "es",
            Language::En => "en",
        };
        // `snake`, `camel` and `cyr` are written only when on, so ids stored before the keys
        // existed still read back as the function they were built with (see `parse`).
        format!(
            "stem={stem},fold={},stop={},lang={lang},surface={}{}{}{},rev={REVISION}",
            u8::from(self.fold),
            u8::from(self.stop),
            u8::from(self.surface),
            if self.snake { ",snake=1" } else { "" },
            if self.camel { ",camel=1" } else { "" },
            if self.cyrillic_letters { ",cyr=1" } else { "" },
        )
    }

    /// Parse a preset name or a `key=value` list (see the type's documentation).
    pub fn parse(spec: &str) -> Result<TermConfig, TermConfigError> {
        let bad = |reason: String| TermConfigError {
            spec: spec.to_string(),
            reason,
        };
        let preset = |name: &str| match name.to_ascii_lowercase().as_str() {
            "v1" | "legacy" => Some(Self::V1),
            "v2" => Some(Self::V2),
            "v3" => Some(Self::V3),
            "v4" => Some(Self::V4),
            "default" | "" => Some(Self::default()),
            _ => None,
        };
        let mut parts = spec.split(',').map(str::trim).peekable();
        // A preset may lead the list: `v1,fold=1`.
        let mut c = match parts.peek().and_then(|p| preset(p)) {
            Some(p) => {
                parts.next();
                p
            }
            None => Self::default(),
        };
        let (mut snake_given, mut camel_given, mut cyr_given, mut stored_id) =
            (false, false, false, false);
        for part in parts.filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("`{part}` is not key=value")))?;
            let v = v.trim().to_ascii_lowercase();
            let flag = |v: &str| match v {
                "1" | "true" | "on" | "yes" => Ok(true),
                "0" | "false" | "off" | "no" => Ok(false),
                _ => Err(bad(format!("`{k}` must be 0 or 1, not `{v}`"))),
            };
            match k.trim().to_ascii_lowercase().as_str() {
                "stem" => {
                    c.stem = match v.as_str() {
                        "none" => Stemming::None,
                        "prefix" => Stemming::Prefix,
                        "snowball" => Stemming::Snowball,
                        "prefix+snowball" | "both" => Stemming::Both,
                        _ => {
                            return Err(bad(format!(
                                "stem `{v}` is not one of none, prefix, snowball, prefix+snowball"
                            )))
                        }
                    }
                }
                "lang" => {
                    c.lang = match v.as_str() {
                        "detect" => Language::Detect,
                        "both" => Language::Both,
                        "es" => Language::Es,
                        "en" => Language::En,
                        _ => {
                            return Err(bad(format!(
                                "lang `{v}` is not one of detect, both, es, en"
                            )))
                        }
                    }
                }
                "fold" => c.fold = flag(&v)?,
                "stop" => c.stop = flag(&v)?,
                "surface" => c.surface = flag(&v)?,
                "snake" => {
                    c.snake = flag(&v)?;
                    snake_given = true;
                }
                "camel" => {
                    c.camel = flag(&v)?;
                    camel_given = true;
                }
                "cyr" => {
                    c.cyrillic_letters = flag(&v)?;
                    cyr_given = true;
                }
                "rev" => {
                    stored_id = true;
                    if v != REVISION.to_string() {
                        return Err(bad(format!(
                            "revision {v} of the stop lists is not this build's ({REVISION}); \
                             reindex with this build"
                        )));
                    }
                }
                other => return Err(bad(format!("unknown key `{other}`"))),
            }
        }
        // A stored id is a full description: one without `snake`, `camel` or `cyr` was built
        // without.
        if stored_id {
            c.snake &= snake_given;
            c.camel &= camel_given;
            c.cyrillic_letters &= cyr_given;
        }
        Ok(c)
    }
}

impl Default for TermConfig {
    fn default() -> Self {
        Self::V4
    }
}

impl std::fmt::Display for TermConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id())
    }
}

impl std::str::FromStr for TermConfig {
    type Err = TermConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// As its [`TermConfig::id`] string (what a knowledge base records).
impl serde::Serialize for TermConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.id())
    }
}

/// From a preset name or a `key=value` list ([`TermConfig::parse`]).
impl<'de> serde::Deserialize<'de> for TermConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TermConfig::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A term-function description that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("term function `{spec}`: {reason}")]
pub struct TermConfigError {
    pub spec: String,
    pub reason: String,
}

/// Distinct terms of `text` with the default configuration.
pub fn terms(text: &str) -> Vec<String> {
    terms_with(text, &TermConfig::default())
}

/// Distinct terms of `text`, in first-seen order.
pub fn terms_with(text: &str, cfg: &TermConfig) -> Vec<String> {
    term_counts_with(text, cfg)
        .into_iter()
        .map(|(t, _)| t)
        .collect()
}

/// [`term_counts_with`] with the default configuration.
pub fn term_counts(text: &str) -> Vec<(String, u32)> {
    term_counts_with(text, &TermConfig::default())
}

/// Distinct terms of `text` with their occurrence counts, in first-seen order: what every
/// BM25 in the system counts (the store's postings, the in-memory index, the trimmer). A term's
/// count is the number of tokens that produce it (`"foo,foo"` counts `foo` twice); a
/// document's BM25 length is the sum of the counts.
pub fn term_counts_with(text: &str, cfg: &TermConfig) -> Vec<(String, u32)> {
    analyse(text, cfg, None)
}

/// The terms of `text` among `wanted` (terms of this function under `cfg`): the analysis of
/// [`terms_with`], skipping the words that cannot give one of them (a word's terms all start
/// with its first letter), so asking about a few terms of a long text stems few of its words.
pub fn wanted_terms(text: &str, cfg: &TermConfig, wanted: &[String]) -> HashSet<String> {
    let first: HashSet<char> = wanted
        .iter()
        .filter_map(|t| t.chars().next().map(fold_char))
        .collect();
    analyse(text, cfg, Some(&first))
        .into_iter()
        .map(|(t, _)| t)
        .filter(|t| wanted.contains(t))
        .collect()
}

/// The initials (lower case, accents folded) of every term `text` can give under `cfg`: the
/// first letter of each token and of each of its compound parts, since every term starts
/// there (Snowball rewrites endings only). A cheap test that a text cannot hold some term,
/// without stemming it. `None` with `camel`, whose parts start inside a word.
pub fn term_initials(text: &str, cfg: &TermConfig) -> Option<HashSet<char>> {
    if cfg.camel {
        return None;
    }
    let lower = lower_nfc(text);
    let mut out = HashSet::new();
    for tok in tokens(&lower) {
        for part in tok.split(['.', '/', '-', '_']) {
            if let Some(c) = part.chars().next() {
                out.insert(fold_char(c));
            }
        }
    }
    Some(out)
}

/// Words to analyse: those starting with one of these letters (lower case, accents folded);
/// `None`: every word.
type Only<'a> = Option<&'a HashSet<char>>;

/// [`term_counts_with`], restricted to the words of `only` when given.
fn analyse(text: &str, cfg: &TermConfig, only: Only<'_>) -> Vec<(String, u32)> {
    let lower = lower_nfc(text);
    let toks = tokens(&lower);
    let langs = match cfg.stem {
        Stemming::Snowball | Stemming::Both => languages(cfg.lang, &toks),
        Stemming::None | Stemming::Prefix => &[][..],
    };
    let mut order: Vec<(String, u32)> = Vec::new();
    // A token's terms depend on the token alone (and `cfg`, `langs`): each distinct token is
    // analysed once — stemming is most of the cost, and prose repeats its words — and maps to
    // the indexes in `order` of its terms.
    let mut pos: HashMap<String, usize> = HashMap::new();
    let mut seen: HashMap<&str, std::ops::Range<usize>> = HashMap::new();
    let mut of_token: Vec<usize> = Vec::new();
    let mut buf: Vec<String> = Vec::new();
    for tok in toks {
        // With `camel`, a token's terms depend on its case too: it is memoised as written.
        let orig = cfg
            .camel
            .then(|| original_case(text, &lower, tok))
            .flatten();
        let key = orig.unwrap_or(tok);
        let range = match seen.get(key) {
            Some(r) => r.clone(),
            None => {
                buf.clear();
                emit_token(&mut buf, tok, cfg, langs, only);
                if let Some(o) = orig {
                    emit_camel_parts(&mut buf, o, cfg, langs, only);
                }
                let start = of_token.len();
                for t in buf.drain(..) {
                    let i = *pos.entry(t).or_insert_with_key(|t| {
                        order.push((t.clone(), 0));
                        order.len() - 1
                    });
                    of_token.push(i);
                }
                seen.insert(key, start..of_token.len());
                start..of_token.len()
            }
        };
        for &i in &of_token[range] {
            order[i].1 += 1;
        }
    }
    order
}

/// [`term_sequence_with`] with the default configuration.
pub fn term_sequence(text: &str) -> Vec<String> {
    term_sequence_with(text, &TermConfig::default())
}

/// [`term_counts_with`] as a list with repetitions (each term `count` times), the document
/// shape `crate::bm25::Bm25Index::new` takes.
pub fn term_sequence_with(text: &str, cfg: &TermConfig) -> Vec<String> {
    term_counts_with(text, cfg)
        .into_iter()
        .flat_map(|(t, n)| std::iter::repeat_n(t, n as usize))
        .collect()
}

/// Latin spellings of a text's Cyrillic words, for matching the English words Russian and
/// Ukrainian speakers borrow (`порт` = `port`, `тест` = `test`, `лимит` = `limit`, `деплой` =
/// `deploy`, `коммит` = `commit`): each word's letters spelled out, of the word and of its
/// stem (Russian's, letters it does not know respelt first: [`TermConfig::cyrillic_letters`]),
/// with `к` as `k` and as `c`. Spellings shorter than 4 letters are left out (they collide
/// with unrelated words). Most spellings match nothing, which costs nothing. (Dropping a final
/// vowel as well changed no probe.)
pub fn latin_spellings(text: &str) -> Vec<String> {
    let lower = lower_nfc(text);
    let mut out: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut done: HashSet<&str> = HashSet::new();
    for tok in tokens(&lower) {
        if !done.insert(tok) || !cyrillic_re().is_match(tok) || !is_letters(tok) {
            continue;
        }
        let stem = cyrillic_stem(tok, true);
        for form in [tok, stem.as_str()] {
            for k in ["k", "c"] {
                let latin = spell_in_latin(form, k);
                if latin.len() >= 4 && latin.is_ascii() && seen.insert(latin.clone()) {
                    out.push(latin);
                }
            }
        }
    }
    out
}

/// A Cyrillic word letter by letter in Latin, as loanwords are usually spelt back.
fn spell_in_latin(word: &str, k: &str) -> String {
    let mut out = String::with_capacity(word.len());
    for c in word.chars() {
        out.push_str(match c {
            'а' => "a",
            'б' => "b",
            'в' => "v",
            'г' | 'ґ' => "g",
            'д' => "d",
            'е' | 'ё' | 'э' | 'є' => "e",
            'ж' => "zh",
            'з' => "z",
            'и' | 'і' | 'ї' => "i",
            'й' | 'ы' => "y",
            'к' => k,
            'л' => "l",
            'м' => "m",
            'н' => "n",
            'о' => "o",
            'п' => "p",
            'р' => "r",
            'с' => "s",
            'т' => "t",
            'у' => "u",
            'ф' => "f",
            'х' => "h",
            'ц' => "ts",
            'ч' => "ch",
            'ш' => "sh",
            'щ' => "shch",
            'ъ' | 'ь' => "",
            'ю' => "yu",
            'я' => "ya",
            _ => return String::new(),
        });
    }
    out
}

/// `s` with Latin accents folded (`é` → `e`, `ñ` → `n`, `ü` → `u`); other scripts untouched.
/// Lower case in, lower case out. The normalisation the ranking signals use for exact strings.
pub fn fold_accents(s: &str) -> Cow<'_, str> {
    if s.is_ascii() {
        return Cow::Borrowed(s);
    }
    Cow::Owned(s.chars().map(fold_char).collect())
}

/// Whether `word` (lower case) is a Spanish or English stop word of the term function.
pub fn is_stop_word(word: &str) -> bool {
    let f = fold_accents(word);
    stop_en().contains(f.as_ref()) || stop_es().contains(f.as_ref())
}

fn fold_char(c: char) -> char {
    if c.is_ascii() {
        return c;
    }
    let mut base = None;
    decompose_canonical(c, |d| {
        if base.is_none() {
            base = Some(d);
        }
    });
    match base {
        Some(b) if b.is_ascii_alphabetic() => b,
        _ => c,
    }
}

/// Lower case and NFC.
fn lower_nfc(text: &str) -> Cow<'_, str> {
    if text.is_ascii() {
        if text.bytes().any(|b| b.is_ascii_uppercase()) {
            return Cow::Owned(text.to_ascii_lowercase());
        }
        return Cow::Borrowed(text);
    }
    let nfc: Cow<'_, str> = match is_nfc_quick(text.chars()) {
        IsNormalized::Yes => Cow::Borrowed(text),
        _ => Cow::Owned(text.nfc().collect()),
    };
    Cow::Owned(nfc.to_lowercase())
}

/// The tokens of lower-cased, NFC text.
fn tokens(lower: &str) -> Vec<&str> {
    if !lower.is_ascii() {
        return unicode_word_re()
            .find_iter(lower)
            .map(|m| m.as_str())
            .collect();
    }
    let bytes = lower.as_bytes();
    let is_start = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let is_cont = |b: u8| is_start(b) || b == b'.' || b == b'/' || b == b'-';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_start(bytes[i]) {
            i += 1;
            continue;
        }
        let s = i;
        while i < bytes.len() && is_cont(bytes[i]) {
            i += 1;
        }
        out.push(&lower[s..i]);
    }
    out
}

/// The Snowball languages of a text's Latin words.
fn languages(mode: Language, toks: &[&str]) -> &'static [Algorithm] {
    const ES: &[Algorithm] = &[Algorithm::Spanish];
    const EN: &[Algorithm] = &[Algorithm::English];
    const BOTH: &[Algorithm] = &[Algorithm::Spanish, Algorithm::English];
    match mode {
        Language::Es => ES,
        Language::En => EN,
        Language::Both => BOTH,
        Language::Detect => {
            let (mut es, mut en) = (0usize, 0usize);
            for t in toks {
                let f = fold_accents(t);
                es += usize::from(stop_es().contains(f.as_ref()));
                en += usize::from(stop_en().contains(f.as_ref()));
            }
            match es.cmp(&en) {
                std::cmp::Ordering::Greater => ES,
                std::cmp::Ordering::Less => EN,
                std::cmp::Ordering::Equal => BOTH,
            }
        }
    }
}

fn push(out: &mut Vec<String>, t: &str) {
    if utf16_len(t) >= 2 && !out.iter().any(|x| x == t) {
        out.push(t.to_owned());
    }
}

/// `tok` (a slice of `lower`) as `text` wrote it, when it has a lower-to-upper hump and
/// lower-casing kept the byte offsets (always for ASCII); else `None`.
fn original_case<'a>(text: &'a str, lower: &str, tok: &str) -> Option<&'a str> {
    if text.len() != lower.len() {
        return None;
    }
    let at = (tok.as_ptr() as usize).checked_sub(lower.as_ptr() as usize)?;
    let orig = text.get(at..at + tok.len())?;
    let hump = orig
        .chars()
        .zip(orig.chars().skip(1))
        .any(|(a, b)| a.is_lowercase() && b.is_uppercase());
    (hump && orig.to_lowercase() == tok).then_some(orig)
}

/// The words of a camelCase identifier (`packageSourceCredentials`, `XMLHttpRequest`,
/// `net8PackageRoot`), each analysed as a compound part.
fn emit_camel_parts(
    out: &mut Vec<String>,
    orig: &str,
    cfg: &TermConfig,
    langs: &[Algorithm],
    only: Only<'_>,
) {
    for piece in orig.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<(usize, char)> = piece.char_indices().collect();
        let mut start = 0;
        for k in 1..chars.len() {
            let (i, c) = chars[k];
            let prev = chars[k - 1].1;
            let next_lower = chars.get(k + 1).is_some_and(|&(_, n)| n.is_lowercase());
            // a hump (`eS`) or the last capital of an acronym before a word (`LHt` in XMLHttp)
            if c.is_uppercase() && (prev.is_lowercase() || (prev.is_uppercase() && next_lower)) {
                emit_word(out, &piece[start..i].to_lowercase(), cfg, langs, true, only);
                start = i;
            }
        }
        if start > 0 {
            emit_word(out, &piece[start..].to_lowercase(), cfg, langs, true, only);
        }
    }
}

/// The terms of one token, each once.
fn emit_token(
    out: &mut Vec<String>,
    tok: &str,
    cfg: &TermConfig,
    langs: &[Algorithm],
    only: Only<'_>,
) {
    let seps: &[char] = if cfg.snake {
        &['.', '/', '-', '_']
    } else {
        &['.', '/', '-']
    };
    if tok.contains(seps) {
        let whole = if cfg.fold {
            fold_accents(tok)
        } else {
            Cow::Borrowed(tok)
        };
        push(out, &whole);
        for part in tok.split(seps) {
            emit_word(out, part, cfg, langs, true, only);
        }
    } else {
        emit_word(out, tok, cfg, langs, false, only);
    }
}

/// The terms of one word (a token without `.`, `/`, `-`, or a part of one).
fn emit_word(
    out: &mut Vec<String>,
    w: &str,
    cfg: &TermConfig,
    langs: &[Algorithm],
    part: bool,
    only: Only<'_>,
) {
    if w.is_empty() {
        return;
    }
    if let Some(first) = only {
        // Every term of a word starts with the word's first letter, accents folded (Snowball
        // only rewrites endings), so a word whose letter is not wanted gives no wanted term.
        if !w
            .chars()
            .next()
            .is_some_and(|c| first.contains(&fold_char(c)))
        {
            return;
        }
    }
    let folded: Cow<'_, str> = if cfg.fold || cfg.stop {
        fold_accents(w)
    } else {
        Cow::Borrowed(w)
    };
    if cfg.stop && (stop_en().contains(folded.as_ref()) || stop_es().contains(folded.as_ref())) {
        return;
    }
    let f: &str = if cfg.fold { &folded } else { w };
    let mut stems: Vec<String> = Vec::new();
    if matches!(cfg.stem, Stemming::Prefix | Stemming::Both) && !part {
        if let Some(p) = prefix_stem(f) {
            stems.push(p.to_string());
        }
    }
    if matches!(cfg.stem, Stemming::Snowball | Stemming::Both) && is_letters(w) {
        if cyrillic_re().is_match(w) {
            stems.push(cyrillic_stem(w, cfg.cyrillic_letters));
        } else {
            for &alg in langs {
                let s = stemmer(alg).stem(w);
                stems.push(if cfg.fold {
                    fold_accents(&s).into_owned()
                } else {
                    s.into_owned()
                });
                if cfg.fold && folded.as_ref() != w {
                    stems.push(stemmer(alg).stem(&folded).into_owned());
                }
            }
        }
    }
    if cfg.surface || stems.is_empty() {
        push(out, f);
    }
    for s in &stems {
        push(out, s);
    }
}

/// The Snowball stem of a Cyrillic word: Russian's, with the letters the stemmer does not know
/// respelt first when `respell` is on (see [`TermConfig::cyrillic_letters`]).
fn cyrillic_stem(w: &str, respell: bool) -> String {
    let unknown_to_the_stemmer = |c: char| matches!(c, 'і' | 'ї' | 'є' | 'ґ' | 'ё');
    if respell && w.contains(unknown_to_the_stemmer) {
        let russian: String = w
            .chars()
            .map(|c| match c {
                'і' | 'ї' => 'и',
                'є' | 'ё' => 'е',
                'ґ' => 'г',
                c => c,
            })
            .collect();
        return stemmer(Algorithm::Russian).stem(&russian).into_owned();
    }
    stemmer(Algorithm::Russian).stem(w).into_owned()
}

/// The spec-003 prefix stem of a word, if it gets one.
fn prefix_stem(word: &str) -> Option<&str> {
    if word.is_ascii() {
        return (word.len() >= 7 && word.bytes().all(|b| b.is_ascii_lowercase()))
            .then(|| &word[..6]);
    }
    let n = utf16_len(word);
    if n >= 6 && cyrillic_re().is_match(word) {
        Some(prefix_chars(word, 5))
    } else if n >= 7 && letters_only_re().is_match(word) {
        Some(prefix_chars(word, 6))
    } else {
        None
    }
}

fn is_letters(w: &str) -> bool {
    if w.is_ascii() {
        w.bytes().all(|b| b.is_ascii_lowercase())
    } else {
        letters_only_re().is_match(w)
    }
}

fn stemmer(alg: Algorithm) -> &'static Stemmer {
    static ES: OnceLock<Stemmer> = OnceLock::new();
    static EN: OnceLock<Stemmer> = OnceLock::new();
    static RU: OnceLock<Stemmer> = OnceLock::new();
    let cell = match alg {
        Algorithm::Spanish => &ES,
        Algorithm::Russian => &RU,
        _ => &EN,
    };
    cell.get_or_init(|| Stemmer::create(alg))
}

fn unicode_word_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"[\p{L}\p{N}_][\p{L}\p{N}_./-]*").expect("valid regex"))
}

fn cyrillic_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\p{Cyrillic}").expect("valid regex"))
}

fn letters_only_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^\p{L}+$").expect("valid regex"))
}

/// Length in UTF-16 code units, the unit the reference implementation measures in.
fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// The first `n` characters of `s`.
fn prefix_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// English stop words (Snowball's list, contractions as the tokenizer cuts them), folded.
#[rustfmt::skip]
const STOP_EN: &[&str] = &[
    "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "aren",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but",
    "by", "can", "cannot", "could", "couldn", "did", "didn", "do", "does", "doesn", "doing", "don",
    "down", "during", "each", "few", "for", "from", "further", "had", "hadn", "has", "hasn",
    "have", "haven", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his",
    "how", "if", "in", "into", "is", "isn", "it", "its", "itself", "just", "ll", "me", "more",
    "most", "mustn", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only",
    "or", "other", "ought", "our", "ours", "ourselves", "out", "over", "own", "re", "same", "shan",
    "she", "should", "shouldn", "so", "some", "such", "than", "that", "the", "their", "theirs",
    "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to",
    "too", "under", "until", "up", "ve", "very", "was", "wasn", "we", "were", "weren", "what",
    "when", "where", "which", "while", "who", "whom", "why", "will", "with", "won", "would",
    "wouldn", "you", "your", "yours", "yourself", "yourselves",
];

/// Spanish stop words (Snowball's list without `os`, which is also "OS"), folded.
#[rustfmt::skip]
const STOP_ES: &[&str] = &[
    "al", "algo", "algunas", "algunos", "ante", "antes", "como", "con", "contra", "cual", "cuales",
    "cuando", "de", "del", "desde", "donde", "durante", "el", "ella", "ellas", "ellos", "en",
    "entre", "era", "erais", "eramos", "eran", "eras", "eres", "es", "esa", "esas", "ese", "eso",
    "esos", "esta", "estaba", "estabais", "estabamos", "estaban", "estabas", "estad", "estada",
    "estadas", "estado", "estados", "estais", "estamos", "estan", "estar", "estara", "estaran",
    "estaras", "estare", "estareis", "estaremos", "estaria", "estariais", "estariamos", "estarian",
    "estarias", "estas", "este", "esteis", "estemos", "esten", "estes", "esto", "estos", "estoy",
    "estuve", "estuvieron", "estuvimos", "estuviste", "estuvo", "fue", "fuera", "fueron", "fui",
    "fuimos", "ha", "habeis", "haber", "habia", "habiais", "habiamos", "habian", "habias", "habra",
    "habran", "habras", "habre", "habreis", "habremos", "habria", "habrian", "habrias", "han",
    "has", "hasta", "hay", "haya", "hayan", "hayas", "he", "hemos", "hube", "hubiera", "hubieron",
    "hubo", "la", "las", "le", "les", "lo", "los", "mas", "me", "mi", "mia", "mias", "mio", "mios",
    "mis", "mucho", "muchos", "muy", "nada", "ni", "no", "nos", "nosotras", "nosotros", "nuestra",
    "nuestras", "nuestro", "nuestros", "otra", "otras", "otro", "otros", "para", "pero", "poco",
    "por", "porque", "que", "quien", "quienes", "se", "sea", "sean", "seas", "ser", "sera",
    "seran", "seras", "sere", "seria", "serian", "si", "sido", "siendo", "sin", "sobre", "sois",
    "somos", "son", "soy", "su", "sus", "suya", "suyas", "suyo", "suyos", "tambien", "tanto", "te",
    "tendra", "tendran", "tendre", "tenemos", "tener", "tenga", "tengan", "tengas", "tengo",
    "tenia", "tenian", "tenias", "ti", "tiene", "tienen", "tienes", "todo", "todos", "tu", "tus",
    "tuya", "tuyas", "tuyo", "tuyos", "tuve", "tuvo", "un", "una", "unas", "uno", "unos",
    "vosotras", "vosotros", "vuestra", "vuestras", "vuestro", "vuestros", "ya", "yo",
];

fn stop_en() -> &'static HashSet<&'static str> {
    static S: OnceLock<HashSet<&'static str>> = OnceLock::new();
    S.get_or_init(|| STOP_EN.iter().copied().collect())
}

fn stop_es() -> &'static HashSet<&'static str> {
    static S: OnceLock<HashSet<&'static str>> = OnceLock::new();
    S.get_or_init(|| STOP_ES.iter().copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// [`term_counts_with`] without the per-token memo: every token analysed where it stands.
    fn term_counts_unmemoized(text: &str, cfg: &TermConfig) -> Vec<(String, u32)> {
        let lower = lower_nfc(text);
        let toks = tokens(&lower);
        let langs = match cfg.stem {
            Stemming::Snowball | Stemming::Both => languages(cfg.lang, &toks),
            Stemming::None | Stemming::Prefix => &[][..],
        };
        let mut order: Vec<(String, u32)> = Vec::new();
        for tok in toks {
            let mut buf = Vec::new();
            emit_token(&mut buf, tok, cfg, langs, None);
            if let Some(o) = cfg
                .camel
                .then(|| original_case(text, &lower, tok))
                .flatten()
            {
                emit_camel_parts(&mut buf, o, cfg, langs, None);
            }
            for t in buf {
                match order.iter_mut().find(|(x, _)| *x == t) {
                    Some(e) => e.1 += 1,
                    None => order.push((t, 1)),
                }
            }
        }
        order
    }

    proptest! {
        /// The memo changes nothing: same terms, counts and order, under every configuration.
        #[test]
        fn memoized_counts_equal_token_by_token(
            words in proptest::collection::vec(
                "(running|runs|Canción|canciones|nuget\\.config|dotnet-cli|the|de|a/b|ÁRBOL|árboles|x|DB_PORT|packageSource|PackageSource|packagesource|XMLHttp|ÁrbolGrande)",
                0..40),
        ) {
            let text = words.join(" ");
            let camel = TermConfig { camel: true, ..TermConfig::V3 };
            for cfg in [TermConfig::V1, TermConfig::V2, TermConfig::default(), camel] {
                prop_assert_eq!(term_counts_with(&text, &cfg), term_counts_unmemoized(&text, &cfg));
            }
        }
    }

    proptest! {
        /// `wanted_terms` answers as the whole analysis does, under every configuration: the
        /// words it skips give none of the wanted terms.
        #[test]
        fn wanted_terms_equal_the_full_analysis(
            words in proptest::collection::vec(
                "(running|runs|Canción|canciones|nuget\\.config|dotnet-cli|the|de|a/b|ÁRBOL|árboles|arbol|x|DB_PORT|packageSource|PackageSource|XMLHttp|ÁrbolGrande|dying|skies|happy|Ünïcode|éxito|exitoso|поезда|поезд|bajo-nivel|Ñandú)",
                0..30),
            query in proptest::collection::vec(
                "(run|canción|arbol|Árbol|config|port|source|http|die|sky|happiness|unicode|Éxito|поездом|nivel|ñandu|grande|zzz)",
                1..6),
        ) {
            let text = words.join(" ");
            let camel = TermConfig { camel: true, ..TermConfig::V3 };
            let unfolded = TermConfig { fold: false, ..TermConfig::V3 };
            for cfg in [TermConfig::V1, TermConfig::V2, TermConfig::default(), camel, unfolded] {
                let wanted = terms_with(&query.join(" "), &cfg);
                let all: HashSet<String> = terms_with(&text, &cfg).into_iter().collect();
                let expect: HashSet<String> =
                    wanted.iter().filter(|t| all.contains(*t)).cloned().collect();
                prop_assert_eq!(wanted_terms(&text, &cfg, &wanted), expect, "{} / {:?}", cfg, query);
            }
        }
    }

    fn check(cfg: &TermConfig, input: &str, expect: &[&str]) {
        let got = terms_with(input, cfg);
        assert_eq!(got, expect, "terms({input:?}) with {cfg}");
    }

    #[test]
    fn compound_tokens_and_parts() {
        let v1 = TermConfig::V1;
        check(&v1, "src/utils.js", &["src/utils.js", "src", "utils", "js"]);
        check(
            &v1,
            "process.env.HOME",
            &["process.env.home", "process", "env", "home"],
        );
    }

    #[test]
    fn v1_digits_start_tokens_and_short_tokens_drop() {
        let v1 = TermConfig::V1;
        check(
            &v1,
            "at 3pm on the 2nd, a 5",
            &["at", "3pm", "on", "the", "2nd"],
        );
        check(&v1, "fs db id", &["fs", "db", "id"]);
    }

    #[test]
    fn v1_prefix_stems_only_for_letter_words() {
        let v1 = TermConfig::V1;
        check(&v1, "deployment", &["deployment", "deploy"]);
        check(&v1, "deploy2024x", &["deploy2024x"]);
        check(&v1, "config_file", &["config_file"]);
        check(&v1, "mañana alérgica", &["mañana", "alérgica", "alérgi"]);
        check(&v1, "está", &["está"]);
        check(&v1, "полиса", &["полиса", "полис"]);
        check(&v1, "бронирования", &["бронирования", "брони"]);
        check(&v1, "Vorlagen", &["vorlagen", "vorlag"]);
        let none = TermConfig {
            stem: Stemming::None,
            ..TermConfig::V1
        };
        check(&none, "recuérdame", &["recuérdame"]);
    }

    #[test]
    fn nfc_merges_composed_and_decomposed() {
        for cfg in [TermConfig::V1, TermConfig::V2] {
            assert_eq!(
                terms_with("canción", &cfg),
                terms_with("cancio\u{301}n", &cfg)
            );
        }
    }

    #[test]
    fn distinct_in_first_seen_order() {
        check(&TermConfig::V1, "Foo foo FOO bar", &["foo", "bar"]);
    }

    #[test]
    fn counts_repetitions_per_token() {
        let c = term_counts_with("foo,foo", &TermConfig::V1);
        assert_eq!(c, [("foo".to_string(), 2)]);
        let c = term_counts_with(
            "Deploy the deployment; the DEPLOYMENT deploys.",
            &TermConfig::V1,
        );
        let get = |t: &str| c.iter().find(|(x, _)| x == t).map(|(_, n)| *n);
        assert_eq!(get("the"), Some(2));
        assert_eq!(get("deploy"), Some(3));
        assert_eq!(get("deploys"), Some(1));
        let s = term_sequence_with("push push src/a.js", &TermConfig::V1);
        assert_eq!(s.iter().filter(|t| *t == "push").count(), 2);
    }

    #[test]
    fn cyrillic_words_get_the_latin_spellings_of_their_loanwords() {
        let got = latin_spellings("На каком порту слушает база? Тест упал, коммит 42, DB_PORT");
        for want in ["port", "portu", "test", "kommit", "commit"] {
            assert!(got.iter().any(|t| t == want), "{want} not in {got:?}");
        }
        // Latin words, digits and spellings under four letters give nothing.
        for not in ["db_port", "42", "baz", "na"] {
            assert!(!got.iter().any(|t| t == not), "{not} in {got:?}");
        }
        assert!(got.iter().all(|t| t.is_ascii()));
        // Ukrainian letters; an apostrophe ends a token, so no spelling carries one.
        let uk = latin_spellings("Яка стеля ліміту? На якому порту? Хто рев'юїть");
        for want in ["limitu", "portu", "port"] {
            assert!(uk.iter().any(|t| t == want), "{want} not in {uk:?}");
        }
        assert!(
            uk.iter().all(|t| t.bytes().all(|b| b.is_ascii_lowercase())),
            "{uk:?}"
        );
        assert!(latin_spellings("no Cyrillic here at all").is_empty());
    }

    #[test]
    fn v2_stems_fold_and_drops_stop_words() {
        let v2 = TermConfig::V2;
        // Spanish: detected by its stop words; accents folded; plural and singular meet.
        let a = terms_with("la configuración de los paquetes", &v2);
        let b = terms_with("como cambio la configuracion del paquete", &v2);
        assert!(!a.contains(&"la".to_string()) && !a.contains(&"de".to_string()));
        assert!(a.contains(&"configuracion".to_string()), "{a:?}");
        assert!(b.contains(&"configuracion".to_string()), "{b:?}");
        let stem_es = |w: &str| stemmer(Algorithm::Spanish).stem(w).into_owned();
        assert!(a.contains(&stem_es("paquetes")) && b.contains(&stem_es("paquete")));
        assert_eq!(stem_es("paquetes"), stem_es("paquete"));
        // English: plural and singular meet, stop words go.
        let e = terms_with("How do I push the packages?", &v2);
        assert!(
            !e.iter().any(|t| t == "how" || t == "do" || t == "the"),
            "{e:?}"
        );
        let p = terms_with("package", &v2);
        let shared: Vec<_> = p.iter().filter(|t| e.contains(t)).collect();
        assert!(!shared.is_empty(), "{e:?} vs {p:?}");
        // Identifiers keep their form; compounds keep their stop-word parts' whole.
        let id = terms_with("NU1101 -SkipDuplicate how-to", &v2);
        assert!(id.contains(&"nu1101".to_string()) && id.contains(&"skipduplicate".to_string()));
        assert!(id.contains(&"how-to".to_string()) && !id.contains(&"how".to_string()));
    }

    #[test]
    fn v2_surface_off_and_language_choice() {
        let stem_only = TermConfig {
            surface: false,
            snake: false,
            camel: false,
            lang: Language::En,
            ..TermConfig::V2
        };
        check(&stem_only, "packages", &["packag"]);
        check(&stem_only, "nu1101", &["nu1101"]);
        let both = TermConfig {
            lang: Language::Both,
            surface: false,
            snake: false,
            camel: false,
            ..TermConfig::V2
        };
        let t = terms_with("versiones", &both);
        assert!(t.len() <= 2 && !t.is_empty(), "{t:?}");
        // Cyrillic words get the Russian stemmer whatever the language.
        let r = terms_with("бронирования", &TermConfig::V2);
        assert!(r.len() == 2 && r[0] == "бронирования", "{r:?}");
    }

    #[test]
    fn folding_is_latin_only() {
        assert_eq!(fold_accents("canción ñandú über"), "cancion nandu uber");
        assert_eq!(fold_accents("йогурт"), "йогурт");
        assert!(is_stop_word("qué") && is_stop_word("the") && !is_stop_word("paquete"));
    }

    #[test]
    fn serde_as_the_id_string() {
        let j = serde_json::to_string(&TermConfig::V1).unwrap();
        assert_eq!(j, format!("\"{}\"", TermConfig::V1.id()));
        assert_eq!(
            serde_json::from_str::<TermConfig>(&j).unwrap(),
            TermConfig::V1
        );
        assert_eq!(
            serde_json::from_str::<TermConfig>("\"v2\"").unwrap(),
            TermConfig::V2
        );
        assert!(serde_json::from_str::<TermConfig>("\"stem=lemma\"").is_err());
    }

    #[test]
    fn ids_round_trip_and_errors_name_the_key() {
        for c in [
            TermConfig::V1,
            TermConfig::V2,
            TermConfig {
                stem: Stemming::Both,
                lang: Language::Es,
                surface: false,
                snake: false,
                camel: false,
                ..TermConfig::V2
            },
        ] {
            assert_eq!(TermConfig::parse(&c.id()).unwrap(), c, "{c}");
        }
        assert_eq!(TermConfig::parse("v1").unwrap(), TermConfig::V1);
        assert_eq!(
            TermConfig::parse("v1, fold=1").unwrap(),
            TermConfig {
                fold: true,
                ..TermConfig::V1
            }
        );
        assert_eq!(
            TermConfig::parse("stop=0").unwrap(),
            TermConfig {
                stop: false,
                ..TermConfig::default()
            }
        );
        for (spec, key) in [
            ("stem=lemma", "stem"),
            ("fold=maybe", "fold"),
            ("colour=1", "colour"),
            ("rev=99", "revision"),
            ("snowball", "key=value"),
        ] {
            let e = TermConfig::parse(spec).unwrap_err().to_string();
            assert!(e.contains(key), "{spec}: {e}");
        }
    }

    proptest! {
        /// No panic on any text (the stemmers included), and the distinct terms are the
        /// counted ones.
        #[test]
        fn any_text_any_config(s in "\\PC{0,60}", stem in 0usize..4, fold: bool, stop: bool, lang in 0usize..4, snake: bool, camel: bool, cyrillic_letters: bool) {
            let cfg = TermConfig {
                stem: [Stemming::None, Stemming::Prefix, Stemming::Snowball, Stemming::Both][stem],
                fold,
                stop,
                lang: [Language::Detect, Language::Both, Language::Es, Language::En][lang],
                surface: true,
                snake,
                camel,
                cyrillic_letters,
            };
            let counts = term_counts_with(&s, &cfg);
            let distinct = terms_with(&s, &cfg);
            prop_assert_eq!(counts.len(), distinct.len());
            prop_assert!(counts.iter().all(|(t, n)| *n > 0 && utf16_len(t) >= 2));
        }

        #[test]
        fn letter_words_stem_without_panic(w in "[a-záéíóúñüçàèâêôœæß]{1,24}|[а-яёіїєґ]{1,24}") {
            for alg in [Algorithm::Spanish, Algorithm::English, Algorithm::Russian] {
                let _ = stemmer(alg).stem(&w);
            }
            let _ = cyrillic_stem(&w, true);
        }
    }

    #[test]
    fn snake_case_identifiers_split_only_when_asked() {
        check(
            &TermConfig::V3,
            "DB_PORT=5433",
            &["db_port", "db", "port", "5433"],
        );
        check(&TermConfig::V2, "DB_PORT=5433", &["db_port", "5433"]);
        // the id round-trips, and an id stored before the key existed reads as off
        let v3 = TermConfig::V3;
        assert_eq!(TermConfig::parse(&v3.id()).unwrap(), v3);
        assert!(v3.id().contains("snake=1"));
        let old = "stem=snowball,fold=1,stop=1,lang=both,surface=1,rev=1";
        assert_eq!(TermConfig::V2.id(), old);
        assert!(!TermConfig::parse(old).unwrap().snake);
        assert!(TermConfig::parse("v2,snake=1").unwrap().snake);
    }

    #[test]
    fn ukrainian_words_and_russian_words_with_yo_get_stems_with_cyr() {
        let stems = |text: &str, cfg: &TermConfig| {
            terms_with(text, cfg)
                .into_iter()
                .collect::<HashSet<String>>()
        };
        // Two cases of «medicine» and of «city» share a stem only when `і` is read as a vowel.
        // «account» with and without `ё` likewise.
        for (x, y) in [("ліки", "ліків"), ("місто", "місті"), ("счёт", "счета")]
        {
            let (a, b) = (stems(x, &TermConfig::V4), stems(y, &TermConfig::V4));
            assert!(!a.is_disjoint(&b), "{a:?} {b:?}");
            let (a, b) = (stems(x, &TermConfig::V3), stems(y, &TermConfig::V3));
            assert!(a.is_disjoint(&b), "{a:?} {b:?}");
        }
        // Russian words without `ё` are stemmed as before.
        assert_eq!(
            stems("бронирования", &TermConfig::V4),
            stems("бронирования", &TermConfig::V3)
        );
        // Latin words are untouched.
        assert_eq!(
            terms_with("the packages were restored", &TermConfig::V4),
            terms_with("the packages were restored", &TermConfig::V3)
        );
        // The key round-trips, and an id stored before it existed reads as off.
        assert_eq!(
            TermConfig::parse(&TermConfig::V4.id()).unwrap(),
            TermConfig::V4
        );
        assert!(TermConfig::V4.id().contains(",cyr=1"));
        assert!(
            !TermConfig::parse(&TermConfig::V3.id())
                .unwrap()
                .cyrillic_letters
        );
        assert_eq!(TermConfig::parse("v3,cyr=1").unwrap(), TermConfig::V4);
        assert_eq!(TermConfig::default(), TermConfig::V4);
    }

    #[test]
    fn camel_case_identifiers_split_only_when_asked() {
        let on = TermConfig {
            camel: true,
            ..TermConfig::V3
        };
        check(
            &on,
            "packageSourceCredentials XMLHttpRequest",
            &[
                "packagesourcecredentials",
                "packagesourcecredenti",
                "package",
                "packag",
                "source",
                "sourc",
                "credentials",
                "credenti",
                "xmlhttprequest",
                "xml",
                "http",
                "request",
            ],
        );
        // off by default, and lower-case text has no humps: the identifier stays whole
        let whole = &["packagesourcecredentials", "packagesourcecredenti"];
        check(&TermConfig::default(), "packageSourceCredentials", whole);
        check(&on, "packagesourcecredentials", whole);
        assert_eq!(TermConfig::parse(&on.id()).unwrap(), on);
        assert!(
            !TermConfig::parse("stem=snowball,fold=1,stop=1,lang=both,surface=1,snake=1,rev=1")
                .unwrap()
                .camel
        );
    }
}
