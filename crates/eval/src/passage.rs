//! What a trimming variant sent, sentence by sentence: each chunk as stored, cut into pieces
//! marked kept or removed, so a report can show the trimmed text with the removed sentences
//! still visible.

use bib_retrieve::retrieve::RetrievalResult;
use bib_retrieve::trim::Prepared;
use bib_retrieve::ChunkRecord;
use serde::{Deserialize, Serialize};

/// A run of the chunk's text, kept by trimming or removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    pub text: String,
    pub kept: bool,
}

/// One chunk of a trimmed context, as stored, with what trimming kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passage {
    pub path: String,
    /// 1-based lines of the source file the chunk cites (0 when unknown).
    pub line_start: u32,
    pub line_end: u32,
    /// The chunk's `[Doc: …]` prefix (always sent).
    pub prefix: String,
    /// The body in order; the whitespace before a sentence belongs to it.
    pub pieces: Vec<Piece>,
}

impl Passage {
    /// Sentences kept and in all.
    pub fn kept_of_total(&self) -> (usize, usize) {
        let kept = self.pieces.iter().filter(|p| p.kept).count();
        (kept, self.pieces.len())
    }
}

/// The passages of a trimmed result: each result's whole chunk (its record; trimming changed
/// only what it shows) cut into sentences.
pub fn passages(r: &RetrievalResult) -> Vec<Passage> {
    r.chunks
        .iter()
        .map(|c| {
            let kept = c.trim.as_ref().map(|t| t.sentences_kept.as_slice());
            split(&c.chunk, kept)
        })
        .collect()
}

/// `chunk` cut into its sentences, each marked kept when its index is in `kept` (all kept
/// when `kept` is `None`: the chunk was not trimmed).
pub fn split(chunk: &ChunkRecord, kept: Option<&[usize]>) -> Passage {
    let text = chunk.text();
    let p = Prepared::new(&text);
    let body = p.body();
    let mut pieces = Vec::with_capacity(p.sentences.len());
    let mut from = 0;
    for (i, s) in p.sentences.iter().enumerate() {
        let end = s.end.min(body.len());
        if let Some(text) = body.get(from..end) {
            pieces.push(Piece {
                text: text.to_string(),
                kept: kept.is_none_or(|k| k.contains(&i)),
            });
        }
        from = end;
    }
    Passage {
        path: chunk.path.clone(),
        line_start: chunk.line_start,
        line_end: chunk.line_end,
        prefix: text[..p.body_offset.min(text.len())].trim().to_string(),
        pieces,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_rebuild_the_body_and_mark_what_was_kept() {
        let chunk = ChunkRecord {
            id: 1,
            path: "push.md".into(),
            chunk_index: 0,
            title: "Push".into(),
            heading_path: Vec::new(),
            content: "[Doc: Push]\nThe push command uploads a package. The default timeout is \
                      300 seconds. Large packages may need more time."
                .into(),
            metadata: serde_json::Value::Null,
            ..Default::default()
        };
        let p = split(&chunk, Some(&[1]));
        assert_eq!(p.prefix, "[Doc: Push]");
        assert_eq!(p.kept_of_total(), (1, 3));
        let kept: Vec<&str> = p
            .pieces
            .iter()
            .filter(|x| x.kept)
            .map(|x| x.text.trim())
            .collect();
        assert_eq!(kept, ["The default timeout is 300 seconds."]);
        let body: String = p.pieces.iter().map(|x| x.text.as_str()).collect();
        assert!(chunk.content.ends_with(&body), "{body:?}");
        assert_eq!(split(&chunk, None).kept_of_total(), (3, 3));
    }
}
