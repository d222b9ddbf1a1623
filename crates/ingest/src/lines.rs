//! Line numbers that results cite.
//!
//! Chunk spans are byte offsets into the text the chunker saw. For most documents that is the
//! file itself, and the lines are counted in it. A document with DocFX `[!INCLUDE]` directives
//! is chunked after expansion, so its spans refer to the expanded text; [`LineMap`] aligns the
//! expanded text with the file as written: text that is the file's own maps to its own lines,
//! and text that came from an included file cites the line of the `[!INCLUDE]` directive that
//! pulled it in. So `line_start`/`line_end` are always lines of the file at the result's
//! `path`.

use bib_store::LineIndex;

/// Maps byte offsets of the chunked (possibly expanded) text to 1-based lines of the file.
pub struct LineMap {
    /// Line starts of the file as written.
    raw: LineIndex,
    /// `(offset in the chunked text, offset in raw, literal)`: from that chunked offset on,
    /// the text is the file's own (`literal`: offsets advance together) or included (every
    /// offset maps to the directive's start in raw). Sorted by the first field.
    pieces: Vec<(usize, usize, bool)>,
}

impl LineMap {
    /// `chunked` is the text the spans refer to; `raw` the file as written (same front-matter,
    /// so the same `body_offset`). Without includes the two are equal and the map is identity.
    pub fn new(raw: &str, chunked: &str, body_offset: usize) -> Self {
        let index = LineIndex::new(raw);
        if raw == chunked || body_offset > raw.len() || !raw.is_char_boundary(body_offset) {
            return Self {
                raw: index,
                pieces: vec![(0, 0, true)],
            };
        }
        let dirs = bib_text::frontmatter::find_includes(&raw[body_offset..]);
        let mut pieces = vec![(0, 0, true)];
        // The text before the first directive is the same in both.
        let mut cur = body_offset + dirs.first().map_or(raw.len() - body_offset, |d| d.start);
        for (i, d) in dirs.iter().enumerate() {
            let raw_dir = body_offset + d.start;
            pieces.push((cur, raw_dir, false));
            let seg_start = body_offset + d.end;
            let seg_end = dirs.get(i + 1).map_or(raw.len(), |n| body_offset + n.start);
            let Some(seg) = raw.get(seg_start..seg_end) else {
                break;
            };
            if seg.is_empty() {
                continue;
            }
            let Some(found) = chunked.get(cur..).and_then(|rest| rest.find(seg)) else {
                // Alignment lost: the rest cites this directive.
                break;
            };
            cur += found;
            pieces.push((cur, seg_start, true));
            cur += seg.len();
        }
        Self { raw: index, pieces }
    }

    fn raw_offset(&self, pos: usize) -> usize {
        let i = self
            .pieces
            .partition_point(|p| p.0 <= pos)
            .saturating_sub(1);
        let (c, r, literal) = self.pieces[i];
        if literal {
            r + (pos - c)
        } else {
            r
        }
    }

    /// 1-based `(first, last)` lines of the file cited by the chunked span `start..end`.
    pub fn lines(&self, start: usize, end: usize) -> (u32, u32) {
        let s = self.raw_offset(start);
        let e = if end > start {
            self.raw_offset(end - 1) + 1
        } else {
            s
        };
        let (a, _) = self.raw.span(s, s);
        let (_, b) = self.raw.span(s.min(e), e.max(s));
        (a, b.max(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_without_includes() {
        let t = "---\ntitle: x\n---\n# A\n\nOne.\n\n## B\n\nTwo.\n";
        let m = LineMap::new(t, t, 17);
        let at = t.find("Two.").unwrap();
        assert_eq!(m.lines(at, at + 5), (10, 10));
        assert_eq!(m.lines(0, t.len()), (1, 10));
    }

    #[test]
    fn included_text_cites_the_directive_and_own_text_its_lines() {
        let raw = "# Doc\n\nIntro line.\n\n[!INCLUDE [x](inc.md)]\n\nAfter one.\nAfter two.\n";
        let included = "Included A.\nIncluded B.\nIncluded C.\n";
        let dir = "[!INCLUDE [x](inc.md)]";
        let chunked = raw.replace(dir, included);
        let m = LineMap::new(raw, &chunked, 0);
        let inc = chunked.find("Included B.").unwrap();
        assert_eq!(
            m.lines(inc, inc + 11),
            (5, 5),
            "included text cites the directive"
        );
        let after = chunked.find("After two.").unwrap();
        assert_eq!(m.lines(after, after + 10), (8, 8));
        let intro = chunked.find("Intro line.").unwrap();
        assert_eq!(m.lines(intro, after + 10), (3, 8));
        // Out-of-range spans never panic.
        assert_eq!(m.lines(10_000, 20_000).0, m.lines(10_000, 20_000).1);
    }
}
