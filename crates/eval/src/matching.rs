//! Does a piece of reference text survive in a retrieved context?
//!
//! Both sides are normalised the same way before a substring test: Unicode NFC, lower case,
//! Markdown emphasis and code marks (`` ` ``, `*`, `_`) removed, every whitespace run made one
//! space. A trimming gap marker (`[...]`) is kept, so evidence that spans a dropped sentence
//! does not match.

use unicode_normalization::UnicodeNormalization;

/// The normalised form used for matching.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.nfc().flat_map(char::to_lowercase) {
        if matches!(c, '`' | '*' | '_' | '\u{feff}') {
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
        out.push(c);
    }
    out
}

/// A context prepared once for many lookups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Haystack(String);

impl Haystack {
    /// Normalise the concatenation of `parts` (joined by a blank line, so a match never
    /// straddles two chunks).
    pub fn new<'a>(parts: impl IntoIterator<Item = &'a str>) -> Self {
        let joined: Vec<String> = parts.into_iter().map(normalize).collect();
        Self(joined.join(" \u{1} "))
    }

    /// Whether `needle` (normalised) occurs. An empty needle never does.
    pub fn contains(&self, needle: &str) -> bool {
        let n = normalize(needle);
        !n.is_empty() && self.0.contains(&n)
    }

    /// Fraction of `needles` that occur; `None` when there are none.
    pub fn recall(&self, needles: &[String]) -> Option<f64> {
        if needles.is_empty() {
            return None;
        }
        let hit = needles.iter().filter(|n| self.contains(n)).count();
        Some(hit as f64 / needles.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn normalisation_cases() {
        let cases = [
            ("  El  valor\n es `300`. ", "el valor es 300."),
            ("**Bold** _x_", "bold x"),
            ("Cafe\u{301}", "café"),
            ("\u{feff}Hola", "hola"),
        ];
        for (a, b) in cases {
            assert_eq!(normalize(a), b, "{a:?}");
        }
    }

    #[test]
    fn contains_and_recall() {
        let h = Haystack::new([
            "[Doc: Push]\nThe default is **300 seconds** (5 minutes).",
            "Other.",
        ]);
        assert!(h.contains("the default is 300 seconds"));
        assert!(
            !h.contains("300 seconds (5 minutes). Other"),
            "no match across chunks"
        );
        assert!(!h.contains(""));
        let ev = vec!["default is 300".to_string(), "missing".to_string()];
        assert_eq!(h.recall(&ev), Some(0.5));
        assert_eq!(h.recall(&[]), None);
        let trimmed = Haystack::new(["Uno. [...] Tres."]);
        assert!(!trimmed.contains("Uno. Dos."));
    }

    proptest! {
        #[test]
        fn any_substring_of_words_is_found(words in proptest::collection::vec("[a-zA-Záé]{1,8}", 1..12),
                                           lo in 0usize..12, len in 1usize..12) {
            let text = words.join("  \n ");
            let lo = lo.min(words.len() - 1);
            let hi = (lo + len).min(words.len());
            let needle = words[lo..hi].join(" ");
            prop_assert!(Haystack::new([text.as_str()]).contains(&needle));
            prop_assert_eq!(normalize(&normalize(&text)), normalize(&text));
        }
    }
}
