//! Markdown-aware sentence splitter (spec 000 `splitSentences`). OWNER: text helper.
//! PLACEHOLDER: contract only — the real splitter replaces this body.

/// A sentence: a byte span into the source text (trimmed of surrounding whitespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sentence {
    pub start: usize,
    pub end: usize,
}

impl Sentence {
    /// The sentence's text inside `source` (the string it was split from).
    pub fn text<'a>(&self, source: &'a str) -> &'a str {
        &source[self.start..self.end]
    }
}

/// Split Markdown `text` into sentences, in order, as byte spans into `text`.
pub fn split_sentences(text: &str) -> Vec<Sentence> {
    let t = text.trim();
    if t.is_empty() {
        return Vec::new();
    }
    let start = text.len() - text.trim_start().len();
    vec![Sentence {
        start,
        end: start + t.len(),
    }]
}

/// Separate a leading `[Doc: …]` prefix from the body of a chunk (spec `splitChunkPrefix`).
/// Returns `(prefix, body)`; the prefix is empty when there is none. `prefix + body == content`.
pub fn split_chunk_prefix(content: &str) -> (&str, &str) {
    ("", content)
}
