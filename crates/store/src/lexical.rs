//! Term frequencies for the lexical index: the one term function with counts,
//! [`bib_text::terms::term_counts_with`], re-exported where the stores use it. A chunk's BM25
//! length is the sum of its counts; which [`bib_text::terms::TermConfig`] a store counts with
//! is the one it records ([`crate::Store::term_config`]). The counting rules are tested next to
//! the term function (`bib_text::terms`), the stores' use of them by [`crate::conformance`].

pub use bib_text::terms::{term_counts, term_counts_with, term_sequence, term_sequence_with};
