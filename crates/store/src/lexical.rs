//! Term frequencies for the lexical index: the one term function with counts,
//! [`bib_text::terms::term_counts`], re-exported where the stores use it. A chunk's BM25
//! length is the sum of its counts.

pub use bib_text::terms::{term_counts, term_sequence};

#[cfg(test)]
mod tests {
    use super::*;
    use bib_text::terms::terms;
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
