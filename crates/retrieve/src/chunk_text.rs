//! A candidate chunk's text, analysed once per process: its sentences (the trimmer's split,
//! which the sentence signal scores) and its exact-string normal form (which the phrase signal
//! searches). Both are pure functions of the text, and every ask re-scores ~30 candidates:
//! splitting and normalising them took ~13 % of a served ask's CPU on the SciFact knowledge
//! base, though later questions keep meeting the same chunks.
//!
//! The memo is keyed by the text itself (compared in full on a hit), so it can never serve
//! another text's analysis, whatever the store or its writes; it holds
//! [`MEMO_BYTES`] at most and starts over beyond.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bib_text::sentences::{chunk_sentences, Sentence};

use crate::signals::normalize_exact;
use crate::trim::Prepared;

/// Bytes of analysed texts held at most.
const MEMO_BYTES: usize = 32 << 20;

/// One chunk text with its analysis.
#[derive(Debug)]
pub(crate) struct ChunkText {
    text: String,
    body_offset: usize,
    sentences: Vec<Sentence>,
    normalized: OnceLock<String>,
}

impl ChunkText {
    fn new(text: String) -> Self {
        let (body_offset, sentences) = chunk_sentences(&text);
        ChunkText {
            text,
            body_offset,
            sentences,
            normalized: OnceLock::new(),
        }
    }

    /// The text split as [`Prepared::new`] splits it.
    pub(crate) fn prepared(&self) -> Prepared<'_> {
        Prepared {
            content: &self.text,
            body_offset: self.body_offset,
            sentences: self.sentences.clone(),
        }
    }

    /// The text as [`normalize_exact`] gives it (computed on first use).
    pub(crate) fn normalized(&self) -> &str {
        self.normalized.get_or_init(|| normalize_exact(&self.text))
    }

    /// Memory held, approximately: the normal form (computed on first use) is counted up
    /// front, at twice the text (lower-casing can lengthen a character).
    fn bytes(&self) -> usize {
        const OVERHEAD: usize = 128;
        OVERHEAD + 3 * self.text.len() + self.sentences.len() * std::mem::size_of::<Sentence>()
    }

    /// The analysis of each text, from the memo where it holds the same text.
    pub(crate) fn of_all(texts: Vec<Option<String>>) -> Vec<Option<Arc<ChunkText>>> {
        let memo = memo();
        let mut out: Vec<Option<Arc<ChunkText>>> = {
            let held = lock(memo);
            texts
                .iter()
                .map(|t| t.as_deref().and_then(|t| held.texts.get(t).cloned()))
                .collect()
        };
        let mut fresh = Vec::new();
        for (slot, text) in out.iter_mut().zip(texts) {
            if let (None, Some(text)) = (&slot, text) {
                let analysed = Arc::new(ChunkText::new(text));
                fresh.push(analysed.clone());
                *slot = Some(analysed);
            }
        }
        if !fresh.is_empty() {
            let mut held = lock(memo);
            for t in fresh {
                held.remember(t);
            }
        }
        out
    }
}

#[derive(Default)]
struct Memo {
    texts: HashMap<String, Arc<ChunkText>>,
    bytes: usize,
}

impl Memo {
    fn remember(&mut self, t: Arc<ChunkText>) {
        let size = t.bytes();
        if size > MEMO_BYTES / 64 || self.texts.contains_key(&t.text) {
            return;
        }
        if self.bytes + size > MEMO_BYTES {
            self.texts.clear();
            self.bytes = 0;
        }
        self.bytes += size;
        self.texts.insert(t.text.clone(), t);
    }
}

fn memo() -> &'static Mutex<Memo> {
    static MEMO: OnceLock<Mutex<Memo>> = OnceLock::new();
    MEMO.get_or_init(Mutex::default)
}

fn lock(m: &Mutex<Memo>) -> std::sync::MutexGuard<'_, Memo> {
    // The memo only caches pure functions; a panic elsewhere leaves it consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the memo gives equals a fresh analysis, the first time and the next.
    #[test]
    fn remembered_analysis_equals_a_fresh_one() {
        let texts = [
            "[Doc: a.md]\n\nFirst sentence here. Second one follows!\n\n- a list item",
            "Run `dotnet nuget push` with **-SkipDuplicate**.",
        ];
        for _ in 0..2 {
            let got = ChunkText::of_all(texts.iter().map(|t| Some(t.to_string())).collect());
            for (g, t) in got.iter().zip(texts) {
                let g = g.as_ref().unwrap();
                assert_eq!(g.prepared(), Prepared::new(t));
                assert_eq!(g.normalized(), normalize_exact(t));
            }
        }
        assert!(ChunkText::of_all(vec![None])[0].is_none());
    }

    /// The memo holds at most its budget, whatever it is given.
    #[test]
    fn the_memo_stays_within_its_budget() {
        let unsplit = |text: String| {
            Arc::new(ChunkText {
                text,
                body_offset: 0,
                sentences: Vec::new(),
                normalized: OnceLock::new(),
            })
        };
        let mut m = Memo::default();
        for i in 0..2_000 {
            m.remember(unsplit(format!("{i} {}", "x".repeat(100_000))));
            assert!(m.bytes <= MEMO_BYTES);
        }
        m.remember(unsplit("y".repeat(MEMO_BYTES)));
        assert!(!m.texts.values().any(|t| t.text.starts_with('y')));
    }
}
