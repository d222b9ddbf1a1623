//! The language of a history, for the notes the packer writes into it ("3 lines omitted").
//!
//! A note in the wrong language is noise a model has to read around (issue 18: a Spanish
//! marker in an English chat), so the packer writes its notes in the history's language:
//! Spanish when the history's most common function words are Spanish, English otherwise. The
//! two word lists are disjoint (no `a`, `no`, `me`), and only the newest [`SAMPLE_BYTES`] of
//! text are read, so the check costs little on long histories.

use std::sync::OnceLock;

use rustc_hash::FxHashMap;

use crate::Message;

/// Languages the packer writes its notes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Lang {
    #[default]
    English,
    Spanish,
}

/// Bytes of message text read to decide, from the newest message back: a few thousand words,
/// plenty for function words, and cheap enough to run on every pack.
pub const SAMPLE_BYTES: usize = 8 * 1024;

const SPANISH: &[&str] = &[
    "el", "la", "los", "las", "de", "del", "que", "en", "y", "se", "por", "para", "con", "una",
    "un", "es", "lo", "como", "más", "pero", "está", "están", "este", "esta", "hay", "también",
    "cómo", "qué", "dónde", "cuando", "muy", "sin", "sobre", "porque", "puedo", "tengo",
];

const ENGLISH: &[&str] = &[
    "the", "and", "of", "to", "is", "are", "in", "that", "it", "for", "with", "on", "this", "was",
    "be", "have", "what", "how", "where", "can", "do", "you", "my", "we", "your", "from", "or",
    "by", "an", "at", "not", "there", "which", "would",
];

/// Bytes of the longest listed word (`también`): longer words are not looked up.
const LONGEST: usize = 8;

/// The language each listed function word belongs to.
fn function_words() -> &'static FxHashMap<&'static str, Lang> {
    static WORDS: OnceLock<FxHashMap<&'static str, Lang>> = OnceLock::new();
    WORDS.get_or_init(|| {
        let es = SPANISH.iter().map(|w| (*w, Lang::Spanish));
        es.chain(ENGLISH.iter().map(|w| (*w, Lang::English)))
            .collect()
    })
}

/// The language `word` (in any case) is a listed function word of.
fn function_word(word: &str) -> Option<Lang> {
    if word.is_empty() || word.len() > LONGEST {
        return None;
    }
    let words = function_words();
    if word.is_ascii() {
        let mut buf = [0u8; LONGEST];
        let lower = &mut buf[..word.len()];
        lower.copy_from_slice(word.as_bytes());
        lower.make_ascii_lowercase();
        let lower = std::str::from_utf8(lower).ok()?;
        words.get(lower).copied()
    } else {
        words.get(word.to_lowercase().as_str()).copied()
    }
}

/// How many function words of each language a text holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub spanish: u32,
    pub english: u32,
}

impl Counts {
    /// The function words of `text`.
    pub fn of(text: &str) -> Counts {
        let mut c = Counts::default();
        for w in text.split(|c: char| !c.is_alphabetic()) {
            match function_word(w) {
                Some(Lang::Spanish) => c.spanish += 1,
                Some(Lang::English) => c.english += 1,
                None => {}
            }
        }
        c
    }

    /// Spanish when it has more Spanish function words, English otherwise.
    pub fn lang(self) -> Lang {
        if self.spanish > self.english {
            Lang::Spanish
        } else {
            Lang::English
        }
    }
}

/// The part of each message [`detect`] reads, from the newest back until [`SAMPLE_BYTES`]:
/// `(index in history, text, whether it is the whole message)`.
fn sample(history: &[Message]) -> impl Iterator<Item = (usize, &str, bool)> {
    let mut read = 0usize;
    history.iter().enumerate().rev().map_while(move |(i, m)| {
        if read >= SAMPLE_BYTES {
            return None;
        }
        let mut end = m.content.len().min(SAMPLE_BYTES - read);
        while !m.content.is_char_boundary(end) {
            end -= 1;
        }
        read += end;
        Some((i, &m.content[..end], end == m.content.len()))
    })
}

/// The language of `history`'s text (see the module docs).
pub fn detect(history: &[Message]) -> Lang {
    detect_with(history, |_, text, _| Counts::of(text))
}

/// [`detect`], with `counts(index, text, whole)` giving the [`Counts::of`] each sampled text:
/// the packer answers from the counts it remembers for whole messages.
pub fn detect_with(
    history: &[Message],
    mut counts: impl FnMut(usize, &str, bool) -> Counts,
) -> Lang {
    let mut total = Counts::default();
    for (i, text, whole) in sample(history) {
        let c = counts(i, text, whole);
        total.spanish += c.spanish;
        total.english += c.english;
    }
    total.lang()
}

impl Lang {
    /// The note for `n` consecutive lines left out of a message.
    pub fn lines_omitted(self, n: usize) -> String {
        match (self, n) {
            (Lang::English, 1) => "  […1 line omitted…]".to_string(),
            (Lang::English, n) => format!("  […{n} lines omitted…]"),
            (Lang::Spanish, 1) => "  […1 línea omitida…]".to_string(),
            (Lang::Spanish, n) => format!("  […{n} líneas omitidas…]"),
        }
    }

    /// The note for `n` consecutive earlier messages left out of the history.
    pub fn messages_omitted(self, n: usize) -> String {
        match (self, n) {
            (Lang::English, 1) => "[…1 earlier message omitted…]".to_string(),
            (Lang::English, n) => format!("[…{n} earlier messages omitted…]"),
            (Lang::Spanish, 1) => "[…1 mensaje anterior omitido…]".to_string(),
            (Lang::Spanish, n) => format!("[…{n} mensajes anteriores omitidos…]"),
        }
    }

    /// The one note for `n` earlier messages left out here and further on (when the budget
    /// has no room for a note per run).
    pub fn messages_omitted_from_here(self, n: usize) -> String {
        match (self, n) {
            (Lang::English, 1) => "[…1 earlier message omitted here…]".to_string(),
            (Lang::English, n) => format!("[…{n} earlier messages omitted from here on…]"),
            (Lang::Spanish, 1) => "[…1 mensaje anterior omitido aquí…]".to_string(),
            (Lang::Spanish, n) => {
                format!("[…{n} mensajes anteriores omitidos a partir de aquí…]")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(texts: &[&str]) -> Vec<Message> {
        texts.iter().map(|t| Message::new("user", *t)).collect()
    }

    #[test]
    fn the_sample_reads_whole_messages_then_a_prefix() {
        let long = "the key is in the box ".repeat(500);
        let history = h(&["¿dónde está la clave?", &long, "la clave está en el cofre"]);
        let read: Vec<(usize, usize, bool)> = sample(&history)
            .map(|(i, t, whole)| (i, t.len(), whole))
            .collect();
        let newest = history[2].content.len();
        assert_eq!(read, [(2, newest, true), (1, SAMPLE_BYTES - newest, false)]);
        assert_eq!(detect(&history), Lang::English);
        assert_eq!(detect(&history[..1]), Lang::Spanish);
    }

    #[test]
    fn the_history_decides_the_language() {
        assert_eq!(
            detect(&h(&[
                "where is the staging password?",
                "it is in the vault"
            ])),
            Lang::English
        );
        assert_eq!(
            detect(&h(&[
                "¿dónde está la contraseña de staging?",
                "en el vault, con la clave"
            ])),
            Lang::Spanish
        );
        assert_eq!(detect(&h(&["kubectl get pods -A", "ok"])), Lang::English);
        assert_eq!(detect(&[]), Lang::English);
        // A long history is read only up to the sample (and a multi-byte cut does not panic).
        let long = "ñ".repeat(SAMPLE_BYTES);
        assert_eq!(detect(&h(&["the and of to", &long])), Lang::English);
    }

    #[test]
    fn word_lists_are_disjoint_and_short() {
        for w in SPANISH {
            assert!(!ENGLISH.contains(w), "{w}");
        }
        for w in SPANISH.iter().chain(ENGLISH) {
            assert!(w.len() <= LONGEST, "{w}");
            assert!(
                function_word(&w.to_uppercase()).is_some(),
                "{w} in capitals"
            );
        }
        assert_eq!(function_word("También"), Some(Lang::Spanish));
        assert_eq!(function_word("THE"), Some(Lang::English));
        assert_eq!(function_word("theory"), None);
    }

    #[test]
    fn notes_count_in_the_language() {
        assert_eq!(Lang::English.lines_omitted(1), "  […1 line omitted…]");
        assert_eq!(
            Lang::English.messages_omitted(7),
            "[…7 earlier messages omitted…]"
        );
        assert_eq!(Lang::Spanish.lines_omitted(3), "  […3 líneas omitidas…]");
        assert_eq!(
            Lang::Spanish.messages_omitted(1),
            "[…1 mensaje anterior omitido…]"
        );
        assert_eq!(
            Lang::English.messages_omitted_from_here(22),
            "[…22 earlier messages omitted from here on…]"
        );
    }
}
