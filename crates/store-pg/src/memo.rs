//! BM25 answers the PostgreSQL store remembers, valid for one state of the database.
//!
//! Every transaction that changes what BM25 reads (documents, chunks, postings, the term
//! function) ends by counting itself in `meta.changes` ([`crate::store`]'s `COUNT_CHANGE`),
//! whichever process wrote it. A search sends the count at which it remembered its answer to
//! the same question (schema migration 7, `bib_bm25_since`): when `meta.changes` still holds
//! it, the answer is what the statement would return now, so the database says so without
//! scoring and the store gives the answer back; otherwise the statement scores, and its answer
//! is remembered under the count read in the same snapshot (so an answer is never labelled
//! with a state it was not computed in). One round trip either way. This is what the embedded store's
//! posting-list memo does for a repeated question, one level up: PostgreSQL scores where the
//! postings are, so what can be remembered is the scored answer (issue 20).

use std::collections::HashMap;

use bib_store::{Hit, NodeId};

/// The number of changes `meta.changes` recorded (0 while no write has counted itself).
pub(crate) type Changes = i64;

/// `meta.changes` as read from the database: `None` (no row yet) is no change, and a value
/// that is not a number (written by hand) means nothing can be remembered.
pub(crate) fn changes_of(value: Option<&str>) -> Option<Changes> {
    match value {
        None => Some(0),
        Some(v) => v.trim().parse().ok(),
    }
}

/// What one BM25 answer depends on besides the database: the query's analysed terms, the
/// number of hits, the documents a filter allows, and the term function it was analysed with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Bm25Key {
    pub(crate) terms: Vec<String>,
    pub(crate) limit: i64,
    pub(crate) allowed: Option<Vec<NodeId>>,
    pub(crate) term_function: Option<String>,
}

impl Bm25Key {
    /// Bytes this key holds (its strings and node ids), for the memo's budget.
    fn bytes(&self) -> usize {
        let strings: usize = self.terms.iter().map(|t| t.len() + 24).sum();
        let nodes = self.allowed.as_ref().map_or(0, |a| a.len() * 8);
        strings + nodes + self.term_function.as_ref().map_or(0, String::len) + 64
    }
}

/// Bytes of keys and hits held at most (16 bytes a hit: some 2,600 answers of 100 hits with
/// their keys): the memo starts over beyond, so a server meeting endless distinct questions,
/// or very long ones, stays within it.
const MAX_BYTES: usize = 4 << 20;

/// Bytes one remembered answer holds, its key holding `key_bytes`.
fn answer_bytes(key_bytes: usize, hits: &[Hit]) -> usize {
    key_bytes + std::mem::size_of_val(hits)
}

/// Answers remembered at one [`Changes`] count.
#[derive(Debug, Default)]
pub(crate) struct Bm25Memo {
    at: Changes,
    answers: HashMap<Bm25Key, Vec<Hit>>,
    bytes: usize,
}

impl Bm25Memo {
    /// The answer remembered for `key`, with the count it was computed at.
    pub(crate) fn remembered(&self, key: &Bm25Key) -> Option<(Changes, Vec<Hit>)> {
        self.answers.get(key).map(|hits| (self.at, hits.clone()))
    }

    /// Remember `hits` as the answer to `key` at `changes`. A newer count starts the memo
    /// over; an older one (a search that began before a write finished after a newer search
    /// remembered) leaves it alone.
    pub(crate) fn remember(&mut self, changes: Changes, key: Bm25Key, hits: &[Hit]) {
        if changes < self.at {
            return;
        }
        let key_bytes = key.bytes();
        let size = answer_bytes(key_bytes, hits);
        if changes > self.at || self.bytes + size > MAX_BYTES {
            self.clear();
            self.at = changes;
        }
        if size > MAX_BYTES {
            return;
        }
        self.bytes += size;
        if let Some(old) = self.answers.insert(key, hits.to_vec()) {
            // The same key again: only the old hits leave.
            self.bytes -= answer_bytes(key_bytes, &old);
        }
    }

    /// Forget every answer (benchmarks time the statement itself with it).
    pub(crate) fn clear(&mut self) {
        self.answers.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(term: &str) -> Bm25Key {
        Bm25Key {
            terms: vec![term.to_string()],
            limit: 10,
            allowed: None,
            term_function: Some("v3".into()),
        }
    }

    fn hits(n: usize) -> Vec<Hit> {
        (0..n)
            .map(|i| Hit {
                id: i as i64,
                score: 1.0 / (i + 1) as f64,
            })
            .collect()
    }

    #[test]
    fn an_answer_is_remembered_with_the_count_it_was_computed_at() {
        let mut memo = Bm25Memo::default();
        memo.remember(3, key("nuget"), &hits(2));
        assert_eq!(memo.remembered(&key("nuget")), Some((3, hits(2))));
        assert_eq!(memo.remembered(&key("push")), None);
        let mut filtered = key("nuget");
        filtered.allowed = Some(vec![7]);
        assert_eq!(memo.remembered(&filtered), None);
        let mut other_limit = key("nuget");
        other_limit.limit = 11;
        assert_eq!(memo.remembered(&other_limit), None);
    }

    #[test]
    fn an_older_count_never_replaces_a_newer_memo() {
        let mut memo = Bm25Memo::default();
        memo.remember(5, key("a"), &hits(1));
        memo.remember(4, key("b"), &hits(1));
        assert_eq!(memo.remembered(&key("a")), Some((5, hits(1))));
        assert_eq!(memo.remembered(&key("b")), None);
        memo.remember(6, key("b"), &hits(3));
        assert_eq!(memo.remembered(&key("a")), None);
        assert_eq!(memo.remembered(&key("b")), Some((6, hits(3))));
    }

    #[test]
    fn the_memo_stays_within_its_budget() {
        let mut memo = Bm25Memo::default();
        let held = |m: &Bm25Memo| -> usize {
            m.answers
                .iter()
                .map(|(k, h)| answer_bytes(k.bytes(), h))
                .sum()
        };
        for i in 0..(MAX_BYTES / 1600 + 10) {
            memo.remember(1, key(&format!("t{i}")), &hits(100));
            assert!(memo.bytes <= MAX_BYTES);
            assert_eq!(memo.bytes, held(&memo));
        }
        memo.remember(1, key("t0"), &hits(3));
        assert_eq!(memo.bytes, held(&memo), "an answer replaced");
        memo.remember(1, key("huge"), &hits(MAX_BYTES / 16 + 1));
        assert_eq!(memo.remembered(&key("huge")), None);
        // A very long question is counted by its words too.
        let long = Bm25Key {
            terms: (0..MAX_BYTES / 30).map(|i| format!("w{i}")).collect(),
            ..key("x")
        };
        memo.remember(1, long.clone(), &hits(1));
        assert_eq!(memo.remembered(&long), None);
        assert!(memo.bytes <= MAX_BYTES);
    }

    #[test]
    fn the_counter_is_read_as_a_number_or_not_at_all() {
        assert_eq!(changes_of(None), Some(0));
        assert_eq!(changes_of(Some("42")), Some(42));
        assert_eq!(changes_of(Some("forty")), None);
    }
}
