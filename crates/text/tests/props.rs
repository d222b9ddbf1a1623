//! Property tests for the splitter and the chunker: no text lost or duplicated, spans on char
//! boundaries, fences never split (unless an oversized fence is re-fenced), deterministic output.

use bib_text::chunk::{chunk_markdown, ChunkOptions};
use bib_text::markdown::has_unclosed_fence;
use bib_text::sentences::{split_chunk_prefix, split_prose, split_sentences, Sentence};
use proptest::prelude::*;

fn non_ws(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Fence regions `[start, end)` of `text` (an independent, line-based oracle).
fn fence_regions(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut open: Option<(char, usize, usize)> = None;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let s = line.trim_start();
        let s = {
            let mut s = s;
            while let Some(r) = s.strip_prefix('>') {
                s = r.trim_start();
            }
            s
        };
        let run = |c: char| s.chars().take_while(|&x| x == c).count();
        match open {
            Some((c, n, start)) => {
                let k = run(c);
                if k >= n && s[k * c.len_utf8()..].trim().is_empty() {
                    out.push((start, pos + line.len()));
                    open = None;
                }
            }
            None => {
                for c in ['`', '~'] {
                    let k = run(c);
                    if k >= 3 && !(c == '`' && s[k..].contains('`')) {
                        open = Some((c, k, pos));
                        break;
                    }
                }
            }
        }
        pos += line.len();
    }
    if let Some((_, _, start)) = open {
        out.push((start, text.len()));
    }
    out
}

fn check_spans(text: &str, spans: &[Sentence]) -> Result<(), TestCaseError> {
    let mut prev_end = 0;
    for s in spans {
        prop_assert!(s.start < s.end, "empty span {s:?}");
        prop_assert!(s.start >= prev_end, "overlap at {s:?}");
        prop_assert!(s.end <= text.len());
        prop_assert!(text.is_char_boundary(s.start) && text.is_char_boundary(s.end));
        let t = s.text(text);
        prop_assert_eq!(t, t.trim(), "span not trimmed");
        prev_end = s.end;
    }
    let joined: String = spans.iter().map(|s| s.text(text)).collect();
    prop_assert_eq!(
        non_ws(&joined),
        non_ws(text),
        "non-whitespace lost or duplicated"
    );
    Ok(())
}

/// Markdown-ish text in Spanish and English with the constructs the splitter cares about.
fn markdownish() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        4 => Just("palabra ".to_string()),
        3 => Just("Frase. ".to_string()),
        2 => Just("The end. ".to_string()),
        1 => Just("¿Qué? ".to_string()),
        1 => Just("¡Hola! ".to_string()),
        1 => Just("Sr. García ".to_string()),
        1 => Just("e.g. this ".to_string()),
        1 => Just("EE. UU. ".to_string()),
        1 => Just("v1.2.3 ".to_string()),
        1 => Just("3.14 ".to_string()),
        1 => Just("config.yaml. ".to_string()),
        1 => Just("«cita.» ".to_string()),
        1 => Just("(nota.) ".to_string()),
        1 => Just("… ".to_string()),
        1 => Just("。".to_string()),
        1 => Just("日本語".to_string()),
        1 => Just("`código. X` ".to_string()),
        2 => Just("\n".to_string()),
        2 => Just("\n\n".to_string()),
        1 => Just("\n# Título\n".to_string()),
        1 => Just("\n## <a name=\"x\"></a>Uso\n".to_string()),
        1 => Just("\n- elemento. Otro\n".to_string()),
        1 => Just("\n1. paso uno. Dos\n".to_string()),
        1 => Just("\n> [!Note]\n> nota. Más\n".to_string()),
        1 => Just("\n| a. | B. c |\n|---|---|\n".to_string()),
        1 => Just("\n```bash\necho uno. Dos\n\nfin. X\n```\n".to_string()),
        1 => Just("\n~~~\nA. B\n~~~\n".to_string()),
        1 => Just("\n   ```\n   indentado. Sí\n   ```\n".to_string()),
        1 => Just("\n```\nsin cerrar. X\n".to_string()),
        1 => Just("```x``` inline. Y ".to_string()),
        1 => Just("\r\n".to_string()),
        1 => Just("[Doc: T › S] ".to_string()),
        1 => "[a-zA-Z0-9 .!?¿¡\n]{0,12}".prop_map(|s| s),
    ];
    prop::collection::vec(token, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sentences_cover_text_markdown(text in markdownish()) {
        let spans = split_sentences(&text);
        check_spans(&text, &spans)?;
        // No fence is ever split: each fence region lies inside one sentence.
        for (fs, fe) in fence_regions(&text) {
            for s in &spans {
                let overlaps = s.start < fe && s.end > fs;
                if overlaps {
                    let fence_text = text[fs..fe].trim();
                    let fs_trim = fs + (text[fs..fe].len() - text[fs..fe].trim_start().len());
                    prop_assert!(
                        s.start <= fs_trim && s.end >= fs_trim + fence_text.len(),
                        "fence {:?} split by sentence {:?}", &text[fs..fe], s.text(&text)
                    );
                }
            }
        }
        // Deterministic.
        prop_assert_eq!(split_sentences(&text), spans);
    }

    #[test]
    fn sentences_cover_any_unicode(text in any::<String>()) {
        check_spans(&text, &split_sentences(&text))?;
        check_spans(&text, &split_prose(&text))?;
    }

    #[test]
    fn prose_mode_covers_text(text in markdownish()) {
        check_spans(&text, &split_prose(&text))?;
    }

    #[test]
    fn chunk_prefix_roundtrip(text in markdownish()) {
        let (p, b) = split_chunk_prefix(&text);
        prop_assert_eq!(format!("{p}{b}"), text);
    }
}

/// A Markdown document built from blocks with short lines (≤ 12 words each).
fn document() -> impl Strategy<Value = String> {
    let words = prop::collection::vec(
        prop_oneof![
            Just("uno"),
            Just("dos"),
            Just("tres"),
            Just("NuGet"),
            Just("paquete."),
            Just("Frase."),
            Just("v1.2"),
            Just("¿qué?"),
            Just("ñandú"),
            Just("日本")
        ],
        1..12,
    )
    .prop_map(|w| w.join(" "));
    let block = prop_oneof![
        3 => prop::collection::vec(words.clone(), 1..6).prop_map(|s| s.join(" ")),
        1 => (1u8..4, words.clone()).prop_map(|(l, w)| format!("{} {w}", "#".repeat(l as usize))),
        1 => prop::collection::vec(words.clone(), 1..8)
            .prop_map(|items| items.iter().map(|i| format!("- {i}")).collect::<Vec<_>>().join("\n")),
        1 => (prop::collection::vec(words.clone(), 1..12), prop::bool::ANY).prop_map(|(lines, tilde)| {
            let f = if tilde { "~~~" } else { "```bash" };
            let c = if tilde { "~~~" } else { "```" };
            format!("{f}\n{}\n{c}", lines.join("\n"))
        }),
        1 => prop::collection::vec(words.clone(), 1..10).prop_map(|rows| {
            let body: Vec<String> = rows.iter().map(|r| format!("| {r} | x |")).collect();
            format!("| a | b |\n|---|---|\n{}", body.join("\n"))
        }),
        1 => prop::collection::vec(words.clone(), 1..5)
            .prop_map(|l| l.iter().map(|x| format!("> {x}")).collect::<Vec<_>>().join("\n")),
        1 => prop::collection::vec(words, 1..6).prop_map(|lines| {
            format!("1. Paso:\n\n   ```\n   {}\n   ```", lines.join("\n   "))
        }),
    ];
    (prop::collection::vec(block, 0..14), prop::bool::ANY).prop_map(|(blocks, crlf)| {
        let s = blocks.join("\n\n");
        if crlf {
            s.replace('\n', "\r\n")
        } else {
            s
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn chunks_cover_body(body in document(), max in 20usize..80, offset in 0usize..50) {
        let opts = ChunkOptions { max_words: max, min_words: max / 4 };
        let chunks = chunk_markdown("Título", &body, offset, &opts);
        let mut prev = offset;
        let mut joined = String::new();
        for (i, c) in chunks.iter().enumerate() {
            prop_assert_eq!(c.chunk_index, i);
            prop_assert!(c.start >= prev && c.start < c.end && c.end <= offset + body.len());
            let span = &body[c.start - offset..c.end - offset];
            prop_assert!(body.is_char_boundary(c.start - offset) && body.is_char_boundary(c.end - offset));
            joined.push_str(span);
            prev = c.end;
            prop_assert!(c.prefix.starts_with("[Doc: Título"));
            prop_assert!(!has_unclosed_fence(&c.content), "unclosed fence in {:?}", c.content);
            prop_assert_eq!(&c.hash, &bib_text::chunk::chunk_hash(&c.prefix, &c.content));
            // Size: at most max words, plus the headings the chunk starts with.
            let heading_words: usize = span
                .lines()
                .filter(|l| l.trim_start().starts_with('#'))
                .map(|l| l.split_whitespace().count())
                .sum();
            let span_words = span.split_whitespace().count();
            prop_assert!(span_words <= max + heading_words, "{span_words} words > {max} in {span:?}");
        }
        prop_assert_eq!(non_ws(&joined), non_ws(&body), "chunks lose or duplicate text");
        // A fence that fits the limit is never split.
        for (fs, fe) in fence_regions(&body) {
            let fence_words = body[fs..fe].split_whitespace().count();
            if fence_words > max {
                continue;
            }
            let (a, b) = (offset + fs, offset + fs + body[fs..fe].trim_end().len());
            let a = a + (body[fs..fe].len() - body[fs..fe].trim_start().len());
            let holders = chunks.iter().filter(|c| c.start < b && c.end > a).count();
            prop_assert!(holders <= 1, "fence {:?} split across {holders} chunks", &body[fs..fe]);
        }
        prop_assert_eq!(chunk_markdown("Título", &body, offset, &opts), chunks);
    }

    #[test]
    fn chunker_survives_any_text(body in any::<String>(), max in 1usize..50) {
        let opts = ChunkOptions { max_words: max, min_words: 0 };
        let chunks = chunk_markdown("T", &body, 0, &opts);
        let joined: String = chunks.iter().map(|c| &body[c.start..c.end]).collect();
        prop_assert_eq!(non_ws(&joined), non_ws(&body));
    }
}
