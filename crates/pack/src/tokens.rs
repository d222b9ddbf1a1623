//! The packer's own token estimate and middle truncation.
//!
//! The estimate is the reference's: count "pieces" (runs of ASCII word characters, plus every
//! other non-space UTF-16 unit on its own), take `ceil(pieces × 1.25)`, and never less than
//! `ceil(utf16_len / 4)`. It deliberately over-counts punctuation-heavy text (code, logs) and
//! non-Latin scripts, which is the safe side for a budget. Lengths are UTF-16 units so numbers
//! agree with the JavaScript reference on any input.

/// Whitespace as JavaScript's `\s` defines it (differs from Rust's on U+0085 and U+FEFF).
pub(crate) fn is_js_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// Length of `s` in UTF-16 code units (JavaScript's `String.length`).
pub fn utf16_len(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().map(char::len_utf16).sum()
    }
}

/// Byte offset of UTF-16 position `pos` in `s`, rounded down to a char boundary.
pub(crate) fn byte_at_utf16(s: &str, pos: usize) -> usize {
    if s.is_ascii() {
        return pos.min(s.len());
    }
    let mut u = 0;
    for (b, c) in s.char_indices() {
        let next = u + c.len_utf16();
        if next > pos {
            return b;
        }
        u = next;
    }
    s.len()
}

/// `s.slice(start, end)` in UTF-16 units, snapped to char boundaries (never splits a char).
pub(crate) fn slice16(s: &str, start: usize, end: usize) -> &str {
    let a = byte_at_utf16(s, start);
    let b = byte_at_utf16(s, end).max(a);
    &s[a..b]
}

/// The last `n` UTF-16 units of `s` (all of it when shorter), like `s.slice(-n)` for n > 0.
pub(crate) fn tail16(s: &str, n: usize) -> &str {
    let len = utf16_len(s);
    if n >= len {
        s
    } else {
        // Round the start up to a char boundary so the tail never exceeds n units.
        let a = byte_at_utf16(s, len - n);
        let a = if utf16_len(&s[..a]) < len - n {
            s[a..].char_indices().nth(1).map_or(s.len(), |(i, _)| a + i)
        } else {
            a
        };
        &s[a..]
    }
}

/// Estimated tokens of `s` (0 for the empty string).
pub fn estimate_tokens(s: &str) -> usize {
    let (pieces, len16) = pieces_and_len(s);
    estimate_from(pieces, len16)
}

/// The estimate from its two ingredients. Texts joined by newlines add their pieces (a newline
/// separates words) and their lengths plus one per newline, so the estimate of a joined text is
/// exact from cached per-line counts.
pub fn estimate_from(pieces: usize, len16: usize) -> usize {
    if len16 == 0 {
        return 0;
    }
    (pieces * 5).div_ceil(4).max(len16.div_ceil(4))
}

/// (pieces, UTF-16 length) of `s`: the ingredients of [`estimate_tokens`].
pub fn pieces_and_len(s: &str) -> (usize, usize) {
    if s.is_empty() {
        return (0, 0);
    }
    let mut pieces = 0usize;
    let mut in_word = false;
    let len16;
    if s.is_ascii() {
        len16 = s.len();
        for &b in s.as_bytes() {
            if b.is_ascii_alphanumeric() || b == b'_' {
                if !in_word {
                    pieces += 1;
                    in_word = true;
                }
            } else {
                in_word = false;
                if !matches!(b, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ') {
                    pieces += 1;
                }
            }
        }
    } else {
        let mut n = 0usize;
        for c in s.chars() {
            n += c.len_utf16();
            if c.is_ascii_alphanumeric() || c == '_' {
                if !in_word {
                    pieces += 1;
                    in_word = true;
                }
            } else {
                in_word = false;
                if !is_js_space(c) {
                    pieces += c.len_utf16();
                }
            }
        }
        len16 = n;
    }
    (pieces, len16)
}

/// The reference's middle truncation: keep `max(20, 2 × max_tok)` UTF-16 units from each end
/// and say how many tokens were cut. Faithful, including its flaw: the result can exceed
/// `max_tok` on punctuation-dense text (every symbol is a piece). See [`truncate_to_fit`].
pub fn truncate_to_tokens(s: &str, max_tok: usize) -> String {
    let total = estimate_tokens(s);
    if total <= max_tok {
        return s.to_owned();
    }
    let keep = (max_tok * 2).max(20);
    cut_middle(s, keep, total)
}

fn cut_middle(s: &str, keep: usize, total: usize) -> String {
    let head = slice16(s, 0, keep);
    let tail = tail16(s, keep);
    let cut = total as i64 - estimate_tokens(head) as i64 - estimate_tokens(tail) as i64;
    format!("{head} [...{cut}t cut...] {tail}")
}

/// Middle truncation that always honours the limit by the packer's own estimate: starts from
/// the reference's cut and shrinks the kept ends until the result fits; when even the cut
/// marker does not fit, falls back to the longest prefix that does (possibly empty).
pub fn truncate_to_fit(s: &str, max_tok: usize) -> String {
    let total = estimate_tokens(s);
    if total <= max_tok {
        return s.to_owned();
    }
    let mut keep = (max_tok * 2).max(20);
    while keep > 0 {
        let out = cut_middle(s, keep, total);
        let t = estimate_tokens(&out);
        if t <= max_tok {
            return out;
        }
        // Shrink in proportion to the overshoot, at least one unit.
        let shrink = (keep * (t - max_tok)).div_ceil(t).max(1);
        keep = keep.saturating_sub(shrink);
    }
    prefix_to_fit(s, max_tok)
}

/// The longest prefix of `s` whose estimate is ≤ `max_tok` (binary search over chars).
pub(crate) fn prefix_to_fit(s: &str, max_tok: usize) -> String {
    let bounds: Vec<usize> = s
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(s.len()))
        .collect();
    let (mut lo, mut hi) = (0usize, bounds.len() - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if estimate_tokens(&s[..bounds[mid]]) <= max_tok {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    s[..bounds[lo]].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_counts_pieces_and_length() {
        assert_eq!(estimate_tokens(""), 0);
        // "hello world" → 2 pieces → ceil(2.5)=3; 11/4 → 3.
        assert_eq!(estimate_tokens("hello world"), 3);
        // punctuation: each symbol is a piece: "a.b()" → a . b ( ) = 5 → 7 (ceil 6.25)
        assert_eq!(estimate_tokens("a.b()"), 7);
        // long word: 40 chars, 1 piece → ceil(40/4) = 10
        assert_eq!(estimate_tokens(&"x".repeat(40)), 10);
        // non-ASCII letters are pieces of their own (JS `\w` is ASCII): "mañana" → ma ñ ana = 3 → 4
        assert_eq!(estimate_tokens("mañana"), 4);
        // an astral char counts two UTF-16 units
        assert_eq!(estimate_tokens("😀"), 3);
        // JS whitespace includes U+FEFF and not U+0085
        assert_eq!(estimate_tokens("a\u{FEFF}b"), 3);
        assert_eq!(estimate_tokens("a\u{85}b"), 4);
    }

    #[test]
    fn joined_estimate_is_exact_from_parts() {
        let lines = ["fn main() {", "  let x = 1;", "", "mañana ñ", "}"];
        let (mut p, mut l) = (0, 0);
        for s in lines {
            let (a, b) = pieces_and_len(s);
            p += a;
            l += b;
        }
        l += lines.len() - 1;
        assert_eq!(estimate_from(p, l), estimate_tokens(&lines.join("\n")));
    }

    #[test]
    fn truncation_keeps_both_ends() {
        let s = (0..200)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        let t = truncate_to_tokens(&s, 20);
        assert!(t.starts_with("w0 w1"));
        assert!(t.ends_with("w199"));
        assert!(t.contains("t cut...]"));
        assert_eq!(truncate_to_tokens("short", 10), "short");
    }

    #[test]
    fn reference_truncation_can_overshoot_and_fit_does_not() {
        let s = "(){}[];,".repeat(100);
        let r = truncate_to_tokens(&s, 40);
        assert!(
            estimate_tokens(&r) > 40,
            "the reference's flaw this crate fixes"
        );
        for max in [0, 1, 5, 13, 40, 100] {
            let f = truncate_to_fit(&s, max);
            assert!(
                estimate_tokens(&f) <= max,
                "max {max}: {}",
                estimate_tokens(&f)
            );
        }
    }

    #[test]
    fn utf16_slicing_never_splits_chars() {
        let s = "a😀b😀c";
        assert_eq!(utf16_len(s), 7);
        assert_eq!(slice16(s, 0, 2), "a");
        assert_eq!(tail16(s, 2), "c");
        assert_eq!(tail16(s, 3), "😀c");
        assert_eq!(tail16(s, 100), s);
    }
}
