//! Typo tolerance: a question word the knowledge base has never seen, one edit away from a
//! word it holds, is searched as that word (`paqeute` → `paquete`, `publsh` → `publish`).
//!
//! The rule follows Meilisearch's defaults, which users of search boxes know: words of five
//! letters or more may carry one typo — a letter dropped, added, replaced, or two neighbours
//! swapped — and never on the first letter (a different first letter is a different word more
//! often than a typo). Only plain words are corrected: nothing with digits, inner capitals or
//! identifier punctuation (`NU1101`, `-SkipDuplicate`, `nuget.config`, `packageSourceCredentials`
//! are exact strings, matched as written), and only when *none* of the word's terms occurs in
//! the knowledge base, so a question whose words the base knows is never changed (a word its
//! stem already matches, `paquet` for `paquete`, is not a typo). Among the variants the base
//! holds, the one with most known terms wins (the word itself, not only its stem), then the
//! most frequent, then the first in sorted order.
//!
//! Pure logic over a document-frequency lookup; [`crate::Retriever`] applies it to the
//! question before anything else, so BM25, the signals, the embedding and trimming all see the
//! corrected question, and the answer says what was corrected.

use std::collections::HashMap;

use bib_text::terms::{is_stop_word, terms_with, TermConfig};
use serde::Serialize;

/// Letters a word must have before one typo is allowed in it (Meilisearch's default).
pub const MIN_LETTERS_FOR_ONE_TYPO: usize = 5;

/// Letters a word must have to count in [`unknown_words`] (shorter ones are mostly
/// abbreviations and particles).
pub const MIN_LETTERS_OF_AN_UNKNOWN_WORD: usize = 3;

/// Unknown words of one question looked at, at most (the first ones): a pasted page of
/// words the knowledge base never saw costs a bounded amount, not ~2 ms a word.
pub const MAX_UNKNOWN_WORDS: usize = 8;

/// One corrected word of a question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Correction {
    /// The word as the question wrote it.
    pub from: String,
    /// The word searched instead.
    pub to: String,
}

/// A question after typo correction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Corrected {
    /// The question with every correction applied (the question itself when there is none).
    pub query: String,
    pub corrections: Vec<Correction>,
}

impl Corrected {
    /// `query` as it is, nothing corrected.
    pub fn unchanged(query: &str) -> Self {
        Self {
            query: query.to_string(),
            corrections: Vec::new(),
        }
    }
}

/// Correct `query` against a knowledge base whose document frequencies `doc_freqs` gives (one
/// count per term, in order) under the term function `cfg`. At most two lookups: the
/// question's candidate words, then the variants of those the base does not know.
///
/// `pieces` counts the pieces a subword tokenizer cuts a word into (the embedding model's):
/// its vocabulary holds the common words of many languages whole, and a typo breaks a word
/// into more pieces. A variant is taken only when it has fewer pieces than the word as
/// written, so a real word the knowledge base happens not to use (`subir`, `llave`, `stuff`)
/// is not turned into a neighbour it does use (`sabir`, `llame`, `staff`).
pub fn correct<E>(
    query: &str,
    cfg: &TermConfig,
    pieces: impl Fn(&str) -> usize,
    mut doc_freqs: impl FnMut(&[String]) -> Result<Vec<usize>, E>,
) -> Result<Corrected, E> {
    let mut unknown = unknown_in(query, cfg, MIN_LETTERS_FOR_ONE_TYPO, &mut doc_freqs)?;
    unknown.truncate(MAX_UNKNOWN_WORDS);
    if unknown.is_empty() {
        return Ok(Corrected::unchanged(query));
    }
    // Only variants the tokenizer finds more word-like than the word as written are looked
    // up; a word it holds whole (one piece) has none, and costs nothing more.
    let variants: Vec<Vec<(String, Vec<String>)>> = unknown
        .iter()
        .map(|(_, w, _)| {
            let lower = w.to_lowercase();
            let written = pieces(&lower);
            if written <= 1 {
                return Vec::new();
            }
            one_edit_variants(&lower)
                .into_iter()
                .filter(|v| pieces(v) < written)
                .map(|v| {
                    let t = terms_with(&v, cfg);
                    (v, t)
                })
                .filter(|(_, t)| !t.is_empty())
                .collect()
        })
        .collect();
    let df = known_terms(
        variants.iter().flatten().flat_map(|(_, t)| t.iter()),
        &mut doc_freqs,
    )?;
    let mut out = query.to_string();
    let mut corrections = Vec::new();
    // Right to left, so earlier byte offsets stay valid while later words are replaced.
    for ((at, word, _), vs) in unknown.iter().zip(&variants).rev() {
        // Most of its terms known (the word as written, not only its stem), then the most
        // frequent; the first in sorted order on a tie.
        let best = vs
            .iter()
            .filter_map(|(v, terms)| {
                let known = terms.iter().filter_map(|t| df.get(t).copied());
                let (n, f) = known.fold((0, 0), |(n, f), d| (n + 1, f.max(d)));
                (n > 0).then_some(((n, f), v))
            })
            .fold(
                None::<((usize, usize), &String)>,
                |best, (score, v)| match best {
                    Some((b, _)) if b >= score => best,
                    _ => Some((score, v)),
                },
            );
        if let Some((_, to)) = best {
            out.replace_range(*at..at + word.len(), to);
            corrections.push(Correction {
                from: word.to_string(),
                to: to.clone(),
            });
        }
    }
    corrections.reverse();
    Ok(Corrected {
        query: out,
        corrections,
    })
}

/// A word of a question: its byte offset, the word, its terms.
type QuestionWord<'q> = (usize, &'q str, Vec<String>);

/// The plain words of `query` (at least `min_letters` letters; see [`candidate_words`]) none
/// of whose terms the knowledge base holds, with their byte offsets and terms, in order.
fn unknown_in<'q, E>(
    query: &'q str,
    cfg: &TermConfig,
    min_letters: usize,
    doc_freqs: &mut impl FnMut(&[String]) -> Result<Vec<usize>, E>,
) -> Result<Vec<QuestionWord<'q>>, E> {
    let words: Vec<QuestionWord<'q>> = candidate_words(query, min_letters)
        .into_iter()
        .map(|(at, w)| (at, w, terms_with(w, cfg)))
        .filter(|(_, _, terms)| !terms.is_empty())
        .collect();
    if words.is_empty() {
        return Ok(words);
    }
    let known = known_terms(words.iter().flat_map(|w| w.2.iter()), doc_freqs)?;
    Ok(words
        .into_iter()
        .filter(|(_, _, terms)| terms.iter().all(|t| !known.contains_key(t)))
        .collect())
}

/// The words of `query` the knowledge base never uses ([`MIN_LETTERS_OF_AN_UNKNOWN_WORD`]
/// letters or more, lower case, in order, each once): typos, and the users' own words for
/// what the pages call otherwise — the candidates for synonym rules ([`crate::synonyms`]).
pub fn unknown_words<E>(
    query: &str,
    cfg: &TermConfig,
    mut doc_freqs: impl FnMut(&[String]) -> Result<Vec<usize>, E>,
) -> Result<Vec<String>, E> {
    let mut out: Vec<String> = Vec::new();
    for (_, w, _) in unknown_in(query, cfg, MIN_LETTERS_OF_AN_UNKNOWN_WORD, &mut doc_freqs)? {
        let w = w.to_lowercase();
        if !out.contains(&w) {
            out.push(w);
        }
    }
    Ok(out)
}

/// The terms among `terms` the knowledge base holds, with their document frequencies.
fn known_terms<'a, E>(
    terms: impl Iterator<Item = &'a String>,
    doc_freqs: &mut impl FnMut(&[String]) -> Result<Vec<usize>, E>,
) -> Result<HashMap<String, usize>, E> {
    let mut distinct: Vec<String> = terms.cloned().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.is_empty() {
        return Ok(HashMap::new());
    }
    let dfs = doc_freqs(&distinct)?;
    Ok(distinct
        .into_iter()
        .zip(dfs)
        .filter(|(_, df)| *df > 0)
        .collect())
}

/// The plain words of `query`, with their byte offsets: runs of at least `min_letters` letters
/// ([`MIN_LETTERS_FOR_ONE_TYPO`] for a typo, [`MIN_LETTERS_OF_AN_UNKNOWN_WORD`] for the
/// unknown-word report), lower case after the first letter, not stop words, in a
/// whitespace-separated token of nothing but letters and sentence punctuation.
fn candidate_words(query: &str, min_letters: usize) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut at = 0;
    for token in query.split_inclusive(char::is_whitespace) {
        let start = at;
        at += token.len();
        let core = token.trim_matches(|c: char| c.is_whitespace() || is_sentence_punctuation(c));
        if core.is_empty() || !core.chars().all(char::is_alphabetic) {
            continue;
        }
        if core.chars().skip(1).any(char::is_uppercase)
            || core.chars().count() < min_letters
            || is_stop_word(&core.to_lowercase())
        {
            continue;
        }
        let offset = start + token.find(core).unwrap_or(0);
        out.push((offset, core));
    }
    out
}

/// Punctuation that may surround a word in a sentence (not identifier punctuation such as
/// `-`, `.`, `_`, `/` inside a token, which the token test rejects).
fn is_sentence_punctuation(c: char) -> bool {
    matches!(
        c,
        '?' | '¿'
            | '!'
            | '¡'
            | ','
            | ';'
            | ':'
            | '.'
            | '"'
            | '\''
            | '('
            | ')'
            | '«'
            | '»'
            | '“'
            | '”'
    )
}

/// Every word one edit from `word` (lower case) that keeps its first letter: a letter
/// dropped, added, replaced, or two neighbours swapped, with letters of the word's own
/// alphabet (Latin words take `a`–`z`: the term function folds accents; Cyrillic words the
/// Russian and Ukrainian letters). Empty for a word of another script.
pub fn one_edit_variants(word: &str) -> Vec<String> {
    let chars: Vec<char> = word.chars().collect();
    let Some(alphabet) = alphabet_of(&chars) else {
        return Vec::new();
    };
    let n = chars.len();
    let mut out = Vec::with_capacity(2 * n * alphabet.len() + 2 * n);
    let mut push = |v: Vec<char>| {
        let s: String = v.into_iter().collect();
        if s != word {
            out.push(s);
        }
    };
    for i in 1..n {
        // A letter dropped.
        let mut v = chars.clone();
        v.remove(i);
        push(v);
        // Two neighbours swapped (never the first letter).
        if i + 1 < n && chars[i] != chars[i + 1] {
            let mut v = chars.clone();
            v.swap(i, i + 1);
            push(v);
        }
        // A letter replaced.
        for &c in &alphabet {
            if c != chars[i] {
                let mut v = chars.clone();
                v[i] = c;
                push(v);
            }
        }
    }
    // A letter added (after the first).
    for i in 1..=n {
        for &c in &alphabet {
            let mut v = chars.clone();
            v.insert(i, c);
            push(v);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The letters variants of a word are made of: `None` when the word mixes scripts or is in
/// one without a list here.
fn alphabet_of(chars: &[char]) -> Option<Vec<char>> {
    let latin =
        |c: char| c.is_alphabetic() && (c.is_ascii() || ('\u{c0}'..='\u{24f}').contains(&c));
    let cyrillic = |c: char| ('\u{400}'..='\u{4ff}').contains(&c);
    if chars.iter().all(|&c| latin(c)) {
        return Some(('a'..='z').collect());
    }
    if chars.iter().all(|&c| cyrillic(c)) {
        let mut letters: Vec<char> = ('а'..='я').collect();
        letters.extend(['ё', 'і', 'ї', 'є', 'ґ']);
        return Some(letters);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// A knowledge base holding these words (their terms, with the given frequency each).
    fn base(words: &[(&str, usize)]) -> impl FnMut(&[String]) -> Result<Vec<usize>, Infallible> {
        let cfg = TermConfig::default();
        let mut df: HashMap<String, usize> = HashMap::new();
        for (w, n) in words {
            for t in terms_with(w, &cfg) {
                *df.entry(t).or_default() += n;
            }
        }
        move |terms: &[String]| {
            Ok(terms
                .iter()
                .map(|t| df.get(t).copied().unwrap_or(0))
                .collect())
        }
    }

    /// Pieces as a tokenizer whose vocabulary holds `vocabulary` whole would cut: one for
    /// those, one per two letters for any other word.
    fn pieces<'a>(vocabulary: &'a [&'a str]) -> impl Fn(&str) -> usize + 'a {
        move |w: &str| {
            if vocabulary.contains(&w) {
                1
            } else {
                w.chars().count().div_ceil(2)
            }
        }
    }

    fn fix(query: &str, words: &[(&str, usize)]) -> Corrected {
        let vocabulary: Vec<&str> = words.iter().map(|w| w.0).collect();
        correct(
            query,
            &TermConfig::default(),
            pieces(&vocabulary),
            base(words),
        )
        .unwrap()
    }

    #[test]
    fn unknown_words_are_the_words_the_base_never_uses() {
        let kb = [("publish", 3), ("package", 9), ("paquete", 4)];
        let got = unknown_words(
            "¿Cómo subo mi Biblioteca? subo, publish package lib v2 my_lib",
            &TermConfig::default(),
            base(&kb),
        )
        .unwrap();
        // Lower case, each once, in order; stop words, short words, identifiers left out.
        assert_eq!(got, ["subo", "biblioteca", "lib"]);
        let none = unknown_words("paquetes", &TermConfig::default(), base(&kb)).unwrap();
        assert!(none.is_empty(), "a stem the base holds is known: {none:?}");
    }

    #[test]
    fn a_real_word_the_base_does_not_use_is_left_alone() {
        // `subir` is not in the base, `sabir` is, one edit away — but the tokenizer knows
        // `subir` as a word, so it is no typo.
        let words = [("sabir", 3)];
        let vocabulary = ["sabir", "subir"];
        let run = |q: &str| {
            correct(q, &TermConfig::default(), pieces(&vocabulary), base(&words)).unwrap()
        };
        assert!(run("subir").corrections.is_empty());
        let c = run("subbir");
        assert!(
            c.corrections.is_empty(),
            "`subir` is the nearer word, not in the base"
        );
    }

    #[test]
    fn a_swapped_dropped_added_or_replaced_letter_is_corrected() {
        let words = [("paquete", 5), ("publicar", 3), ("firmado", 2)];
        for (typo, want) in [
            ("paqeute", "paquete"),
            ("paqete", "paquete"),
            ("paquuete", "paquete"),
            ("paquite", "paquete"),
        ] {
            let c = fix(&format!("¿cómo subo mi {typo}?"), &words);
            assert_eq!(c.query, format!("¿cómo subo mi {want}?"), "{typo}");
            assert_eq!(
                c.corrections,
                [Correction {
                    from: typo.into(),
                    to: want.into()
                }]
            );
        }
    }

    #[test]
    fn known_words_short_words_and_exact_strings_are_never_changed() {
        let words = [("package", 9), ("restore", 4), ("skipduplicate", 1)];
        for q in [
            "how do I restore a package",       // known words
            "how do I restre a pakage offline", // `offline` unknown, no neighbour: unchanged words
            "pkage",                            // a typo'd word the base has no neighbour for
            "-SkipDuplicat with NU1101",        // identifier-like tokens
            "packageSourceCredentals",          // inner capitals
            "a pakg",                           // under five letters
        ] {
            let c = fix(q, &words);
            if q.contains("restre") {
                assert_eq!(c.query, "how do I restore a package offline");
                continue;
            }
            assert_eq!(c.query, q, "{q}");
            assert!(c.corrections.is_empty(), "{q}");
        }
    }

    #[test]
    fn a_word_its_stem_already_matches_is_not_a_typo() {
        // `paquet` has the stem of `paquete`: BM25 finds it as it is.
        let c = fix("mi paquet", &[("paquete", 5)]);
        assert_eq!((c.query.as_str(), c.corrections.len()), ("mi paquet", 0));
    }

    #[test]
    fn the_first_letter_is_never_the_typo() {
        // `mackage` is one edit from `package` only through its first letter.
        let c = fix("mackage", &[("package", 9)]);
        assert!(c.corrections.is_empty());
        assert!(one_edit_variants("mackage")
            .iter()
            .all(|v| v.starts_with('m')));
    }

    #[test]
    fn the_most_frequent_variant_wins() {
        // `sorce` is one edit from both `source` and `sorte`.
        let c = fix("sorce", &[("source", 50), ("sorte", 2)]);
        assert_eq!(c.query, "source");
        let c = fix("sorce", &[("source", 2), ("sorte", 50)]);
        assert_eq!(c.query, "sorte");
    }

    #[test]
    fn cyrillic_words_are_corrected_in_their_alphabet() {
        let c = fix("где мой пароьл", &[("пароль", 3)]);
        assert_eq!(c.query, "где мой пароль");
        assert!(one_edit_variants("日本語です").is_empty());
    }

    #[test]
    fn two_typos_in_one_question_keep_every_offset_right() {
        let c = fix(
            "¿Dónde configuro las credenciales del feeed privvado?",
            &[("credenciales", 4), ("privado", 3), ("configuro", 1)],
        );
        assert_eq!(
            c.query,
            "¿Dónde configuro las credenciales del feeed privado?"
        );
        let c = fix(
            "credencailes y privvado",
            &[("credenciales", 4), ("privado", 3)],
        );
        assert_eq!(c.query, "credenciales y privado");
        assert_eq!(c.corrections.len(), 2);
    }

    #[test]
    fn only_the_first_unknown_words_are_looked_at() {
        let words = [("credenciales", 4)];
        let filler: Vec<String> = (0..MAX_UNKNOWN_WORDS)
            .map(|i| format!("q{}rstuvw", (b'a' + i as u8) as char))
            .collect();
        let late = format!("{} credencailes", filler.join(" "));
        assert!(
            fix(&late, &words).corrections.is_empty(),
            "the ninth unknown word"
        );
        let early = format!("credencailes {}", filler.join(" "));
        assert_eq!(fix(&early, &words).corrections.len(), 1);
    }

    #[test]
    fn variants_have_one_edit_each() {
        let v = one_edit_variants("casa");
        assert!(v.contains(&"cas".to_string()) && v.contains(&"caas".to_string()));
        assert!(v.contains(&"csaa".to_string()) && v.contains(&"cosa".to_string()));
        assert!(!v.contains(&"casa".to_string()) && !v.contains(&"asa".to_string()));
        // (n − 1) drops + (n − 2) swaps + 25 (n − 1) replacements + 26 n insertions, minus
        // the duplicates (a doubled letter dropped at either place, …).
        assert!(v.len() <= 3 + 2 + 25 * 3 + 26 * 4);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Words a question may hold: the base's words with typos, other words, identifiers,
        /// non-Latin letters and punctuation.
        fn word() -> impl Strategy<Value = String> {
            prop_oneof![
                prop::sample::select(vec![
                    "paquete",
                    "paqeute",
                    "publicar",
                    "pubilcar",
                    "firmado",
                    "firmaod",
                    "NU1101",
                    "-SkipDuplicate",
                    "my_lib",
                    "ñandú",
                    "пакет",
                    "пакте",
                    "¿cómo",
                    "subo?",
                    "a",
                    "",
                    "x.y",
                    "ß",
                    "İstanbul",
                    "Ǆemal",
                ])
                .prop_map(str::to_string),
                "\\PC{0,12}",
            ]
        }

        proptest! {
            /// Any question: no panic; nothing corrected means the question unchanged; each
            /// correction replaces one whole word as written, in order, with one edit of it in
            /// lower case, and nothing else changes.
            #[test]
            fn corrections_are_one_edit_of_a_whole_word_each(
                words in prop::collection::vec(word(), 0..8),
                seps in prop::collection::vec(prop::sample::select(vec![" ", "  ", "\n", ", ", " ¿"]), 8),
            ) {
                let mut q = String::new();
                for (w, s) in words.iter().zip(&seps) {
                    q.push_str(w);
                    q.push_str(s);
                }
                let kb = [("paquete", 5), ("publicar", 3), ("firmado", 2), ("пакет", 2)];
                let c = fix(&q, &kb);
                if c.corrections.is_empty() {
                    prop_assert_eq!(&c.query, &q);
                }
                // The output is the question with each corrected word, in order, replaced
                // where it stands as a whole word.
                let mut want = String::new();
                let mut pending = c.corrections.iter().peekable();
                for token in q.split_inclusive(char::is_whitespace) {
                    let core = token
                        .trim_matches(|ch: char| ch.is_whitespace() || is_sentence_punctuation(ch));
                    match pending.peek() {
                        Some(fix) if !core.is_empty() && core == fix.from => {
                            prop_assert!(
                                one_edit_variants(&fix.from.to_lowercase()).contains(&fix.to),
                                "{} → {}", fix.from, fix.to
                            );
                            want.push_str(&token.replacen(core, &fix.to, 1));
                            pending.next();
                        }
                        _ => want.push_str(token),
                    }
                }
                prop_assert!(pending.next().is_none(), "a correction of no word: {:?}", c);
                prop_assert_eq!(&c.query, &want);
            }
        }
    }
}
