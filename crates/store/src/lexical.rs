//! Term frequencies for the lexical index.
//!
//! BM25 needs how often each term occurs in a chunk, while `bib_text::terms::terms` returns
//! each term once. [`term_counts`] splits the text into the same tokens `terms` sees and runs
//! `terms` on each token, so the set of terms is exactly `terms(text)` (property-tested) and the
//! count of a term is the number of tokens that produce it. A chunk's BM25 length is the sum of
//! its counts.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

use bib_text::terms::terms;
use regex::Regex;
use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};

fn token_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"[\p{L}\p{N}_][\p{L}\p{N}_./-]*").expect("valid regex"))
}

/// Distinct terms of `text` with their occurrence counts, in first-seen order.
pub fn term_counts(text: &str) -> Vec<(String, u32)> {
    let lower: Cow<'_, str> = if text.is_ascii() {
        Cow::Owned(text.to_ascii_lowercase())
    } else {
        let nfc: Cow<'_, str> = match is_nfc_quick(text.chars()) {
            IsNormalized::Yes => Cow::Borrowed(text),
            _ => Cow::Owned(text.nfc().collect()),
        };
        Cow::Owned(nfc.to_lowercase())
    };
    let mut order: Vec<(String, u32)> = Vec::new();
    let mut pos: HashMap<String, usize> = HashMap::new();
    for m in token_re().find_iter(&lower) {
        for t in terms(m.as_str()) {
            match pos.get(&t) {
                Some(&i) => order[i].1 += 1,
                None => {
                    pos.insert(t.clone(), order.len());
                    order.push((t, 1));
                }
            }
        }
    }
    order
}

/// The term list with repetitions (`term` repeated `count` times), as
/// `bib_text::bm25::Bm25Index::new` expects a document.
pub fn expanded_terms(text: &str) -> Vec<String> {
    term_counts(text)
        .into_iter()
        .flat_map(|(t, n)| std::iter::repeat_n(t, n as usize))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counts_repetitions() {
        let c = term_counts("Deploy the deployment; the DEPLOYMENT deploys.");
        let get = |t: &str| c.iter().find(|(x, _)| x == t).map(|(_, n)| *n);
        assert_eq!(get("the"), Some(2));
        assert_eq!(get("deployment"), Some(2));
        // "deploys." keeps its period (a compound token), so only its part is counted, unstemmed.
        assert_eq!(get("deploy"), Some(3));
        assert_eq!(get("deploys"), Some(1));
    }

    #[test]
    fn compound_parts_counted() {
        let c = term_counts("src/utils.js and utils");
        assert!(c.contains(&("utils".to_string(), 2)));
        assert!(c.contains(&("src/utils.js".to_string(), 1)));
    }

    proptest! {
        #[test]
        fn same_terms_as_the_shared_function(s in "[a-zA-Záéñü ./_-ДЖж0-9\u{301}\n,]{0,80}") {
            let mut a: Vec<String> = term_counts(&s).into_iter().map(|(t, _)| t).collect();
            let mut b = terms(&s);
            a.sort();
            b.sort();
            prop_assert_eq!(a, b);
        }
    }
}
