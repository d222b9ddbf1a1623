#![no_main]
//! Fuzz front-matter + includes + splitter + chunker with invariant checks.

use bib_text::chunk::{chunk_markdown, ChunkOptions};
use bib_text::frontmatter::{parse_document, resolve_includes, IncludeLimits};
use bib_text::markdown::has_unclosed_fence;
use bib_text::sentences::{split_chunk_prefix, split_prose, split_sentences, Sentence};
use libfuzzer_sys::fuzz_target;

fn non_ws(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

fn check_spans(text: &str, spans: &[Sentence]) {
    let mut prev = 0;
    for s in spans {
        assert!(s.start >= prev && s.start < s.end && s.end <= text.len());
        assert!(text.is_char_boundary(s.start) && text.is_char_boundary(s.end));
        prev = s.end;
    }
    let joined: String = spans.iter().map(|s| s.text(text)).collect();
    assert_eq!(non_ws(&joined), non_ws(text));
}

/// Whether every fence-looking line starts at column 0 and there are no HTML blocks, so the
/// line-based fence check agrees with CommonMark (indented code, HTML blocks and containers can
/// make a ``` line plain text, which is not a chunker bug).
fn simple_fences(body: &str) -> bool {
    // A lone CR is a line ending for CommonMark but not for the line-based fence logic.
    if body.replace("\r\n", "\n").contains('\r') {
        return false;
    }
    body.lines().all(|l| {
        let t = l.trim_start_matches([' ', '\t', '>']);
        let fence_like = t.starts_with("```") || t.starts_with("~~~");
        (!fence_like || l.starts_with(t)) && !t.starts_with('<')
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&knob, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };

    check_spans(text, &split_sentences(text));
    check_spans(text, &split_prose(text));
    let (p, b) = split_chunk_prefix(text);
    assert_eq!(p.len() + b.len(), text.len());

    let Ok(doc) = parse_document(text, "fuzz") else {
        return;
    };
    assert_eq!(&text[doc.body_offset..], doc.body);

    let opts = ChunkOptions {
        max_words: 1 + usize::from(knob % 64),
        min_words: usize::from(knob / 64) * 4,
    };
    let chunks = chunk_markdown(&doc.title, doc.body, doc.body_offset, &opts);
    let mut prev = doc.body_offset;
    let mut joined = String::new();
    for (i, c) in chunks.iter().enumerate() {
        assert_eq!(c.chunk_index, i);
        assert!(c.start >= prev && c.start < c.end && c.end <= text.len());
        joined.push_str(&text[c.start..c.end]);
        prev = c.end;
        if simple_fences(doc.body) && !has_unclosed_fence(doc.body) {
            assert!(
                !has_unclosed_fence(&c.content),
                "unclosed fence in chunk {i}"
            );
        }
    }
    assert_eq!(non_ws(&joined), non_ws(doc.body));

    // Includes: every target resolves to the document itself (a cycle) or to a leaf.
    let mut loader = |path: &str, _room: usize| -> Result<String, String> {
        if path.ends_with("leaf.md") {
            Ok("hoja [!INCLUDE [x](sub/leaf2.md)]".to_string())
        } else if path.ends_with("leaf2.md") {
            Ok("---\ntitle: t\n---\nfin".to_string())
        } else if path.contains("missing") {
            Err("missing".to_string())
        } else {
            Ok(text.to_string())
        }
    };
    // A self-including page fans out; the budget must stop it, and the output stay within it.
    let limits = IncludeLimits {
        max_includes: 64,
        max_bytes: 1 << 20,
    };
    if let Ok(expanded) = resolve_includes(doc.body, "docs/page.md", &mut loader, &limits) {
        assert!(expanded.len() <= limits.max_bytes);
    }
});
