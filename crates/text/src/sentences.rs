//! Markdown-aware sentence splitter (spec 000 `splitSentences`), returning byte spans.
//!
//! The splitter works in two layers:
//!
//! 1. **Structure** (Markdown mode only): the input is walked line by line. Fenced code blocks
//!    (```` ``` ```` or `~~~`, also indented inside list items or blockquotes) are atomic units;
//!    headings, table rows, bullets, numbered items, blockquote lines, HTML lines and DocFX
//!    directives are one unit per line (a list item's wrapped continuation lines stay with it);
//!    the remaining lines form prose paragraphs (a blank line ends a paragraph). A leading
//!    `[Doc: …]` prefix (see [`split_chunk_prefix`]) is one unit and is never split.
//! 2. **Prose**: each paragraph is cut after `.`, `!`, `?`, `…` (plus closing quotes/brackets)
//!    when whitespace and an uppercase letter, a digit or an opening character (`¿ ¡ " « ( [`)
//!    follow. Dots that do not end a sentence are protected: known Spanish/English abbreviations
//!    (`Sr.`, `p. ej.`, `e.g.`, `etc.` before a lowercase word, `EE. UU.`, …), initials and
//!    initialisms (`E. Smith`, `U.S.A.`), and anything with no whitespace after the dot
//!    (versions, decimals, IPs, URLs, file names). After an abbreviation the text is only cut
//!    when the next word is a typical sentence starter (`The`, `It`, `El`, `Luego`, …).
//!    CJK terminators (`。！？`) cut without a following space.
//!
//! Every sentence is a trimmed byte span into the input, on char boundaries; concatenating the
//! spans in order loses no non-whitespace character and repeats none.
//!
//! [`split_prose`] is the same prose layer applied to plain text (no Markdown structure, newlines
//! are soft wraps, and a missing space after a sentence end is tolerated, as in `world.Today`):
//! the mode the sentence-boundary benchmarks measure. [`split_uax29`] is the Unicode UAX #29
//! sentence segmentation of the `unicode-segmentation` crate, kept as the comparison baseline.

use unicode_segmentation::UnicodeSegmentation;

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
    let mut out = Vec::new();
    let (prefix, _) = split_chunk_prefix(text);
    push_trimmed(text, 0, prefix.len(), &mut out);
    split_markdown_from(text, prefix.len(), &mut out);
    out
}

/// The sentences of a retrieved chunk as trimming sees them: the `[Doc: …]` prefix split off
/// ([`split_chunk_prefix`]) and the body split by [`split_sentences`]. Returns the body's byte
/// offset in `content` and the non-empty sentence spans, relative to the body.
///
/// Ingest (which embeds these sentences ahead of time) and trimming (which looks them up) both
/// call this, so they always agree on the exact sentence texts.
pub fn chunk_sentences(content: &str) -> (usize, Vec<Sentence>) {
    let (prefix, body) = split_chunk_prefix(content);
    let sentences = split_sentences(body)
        .into_iter()
        .filter(|s| s.end <= body.len() && s.start < s.end)
        .collect();
    (prefix.len(), sentences)
}

/// Split plain prose (no Markdown structure) into sentences. Blank lines end a paragraph; single
/// newlines are soft wraps; `world.Today` (no space after the dot) is a boundary.
pub fn split_prose(text: &str) -> Vec<Sentence> {
    let mut out = Vec::new();
    let mut para_start: Option<usize> = None;
    let mut para_end = 0;
    for (ls, le) in lines(text, 0) {
        if text[ls..le].trim().is_empty() {
            if let Some(ps) = para_start.take() {
                split_prose_run(text, ps, para_end, true, false, &mut out);
            }
        } else {
            para_start.get_or_insert(ls);
            para_end = le;
        }
    }
    if let Some(ps) = para_start {
        split_prose_run(text, ps, para_end, true, false, &mut out);
    }
    out
}

/// UAX #29 sentence boundaries (`unicode-segmentation`), trimmed, as spans: the baseline the
/// throughput and accuracy benchmarks compare against.
pub fn split_uax29(text: &str) -> Vec<Sentence> {
    let mut out = Vec::new();
    for (start, s) in text.split_sentence_bound_indices() {
        push_trimmed(text, start, start + s.len(), &mut out);
    }
    out
}

/// Separate a leading `[Doc: …]` prefix from the body of a chunk (spec `splitChunkPrefix`).
/// Returns `(prefix, body)`; the prefix is empty when there is none. `prefix + body == content`.
/// The prefix runs to its closing bracket (nested brackets are balanced) plus the whitespace up
/// to and including the first line break after it.
pub fn split_chunk_prefix(content: &str) -> (&str, &str) {
    let lead = content.len() - content.trim_start().len();
    let rest = &content[lead..];
    if !rest.starts_with("[Doc:") {
        return ("", content);
    }
    let mut depth = 0usize;
    let mut close = None;
    for (i, c) in rest.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i + 1);
                    break;
                }
            }
            '\n' => break,
            _ => {}
        }
    }
    let Some(close) = close else {
        return ("", content);
    };
    let mut end = lead + close;
    for (i, c) in content[end..].char_indices() {
        if c == '\n' {
            end += i + 1;
            return content.split_at(end);
        }
        if !c.is_whitespace() {
            end += i;
            return content.split_at(end);
        }
    }
    content.split_at(content.len())
}

// ---------------------------------------------------------------------------------------------
// Markdown structure
// ---------------------------------------------------------------------------------------------

/// Iterate the lines of `text` from `from`: `(start, end)` with `end` excluding the line break.
fn lines(text: &str, from: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    let bytes = text.as_bytes();
    let mut pos = from;
    std::iter::from_fn(move || {
        if pos >= bytes.len() {
            return None;
        }
        let start = pos;
        let end = match bytes[pos..].iter().position(|&b| b == b'\n') {
            Some(n) => {
                pos = start + n + 1;
                start + n
            }
            None => {
                pos = bytes.len();
                bytes.len()
            }
        };
        Some((start, end))
    })
}

fn push_trimmed(text: &str, start: usize, end: usize, out: &mut Vec<Sentence>) {
    let s = &text[start..end];
    let t = s.trim_start();
    let start = start + (s.len() - t.len());
    let t = t.trim_end();
    if !t.is_empty() {
        out.push(Sentence {
            start,
            end: start + t.len(),
        });
    }
}

/// A code fence opener: the fence character and its run length.
#[derive(Clone, Copy)]
pub(crate) struct Fence {
    pub(crate) ch: u8,
    pub(crate) len: usize,
}

/// Strip indentation and blockquote markers (`>`), which may precede a fence.
/// A line without its leading indentation and blockquote markers: where a fence marker would
/// be. Indentation is spaces and tabs only, as in CommonMark: a form feed or vertical tab
/// before ```` ``` ```` makes the line text, not a fence (pulldown-cmark agrees; fuzz findings).
pub(crate) fn strip_container_prefix(line: &str) -> &str {
    const INDENT: [char; 2] = [' ', '\t'];
    let mut s = line.trim_start_matches(INDENT);
    while let Some(rest) = s.strip_prefix('>') {
        s = rest.trim_start_matches(INDENT);
    }
    s
}

/// Does `line` open a fence? A backtick fence's info string may not contain a backtick, so a
/// line that starts with inline code (```` ```x``` ````) does not open one.
pub(crate) fn fence_open(line: &str) -> Option<Fence> {
    let s = strip_container_prefix(line);
    let ch = *s.as_bytes().first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let len = s.bytes().take_while(|&b| b == ch).count();
    if len < 3 {
        return None;
    }
    if ch == b'`' && s[len..].contains('`') {
        return None;
    }
    Some(Fence { ch, len })
}

/// Does `line` close the fence `f`? `line` may still carry its line ending (`\n`, `\r\n` or
/// `\r`: callers split differently). After the marker run only spaces may follow, as in
/// pulldown-cmark, which the chunker's blocks come from: a tab, vertical tab, form feed or
/// other Unicode whitespace there leaves the fence open (CommonMark 0.31 also allows tabs;
/// pulldown-cmark 0.13 does not, and the line rules must agree with the parser). `trim()`
/// here once closed fences on ```` ````\x0b ```` that pulldown-cmark kept open (a fuzz finding).
pub(crate) fn fence_close(line: &str, f: Fence) -> bool {
    let s = strip_container_prefix(line);
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_suffix('\r').unwrap_or(s);
    let len = s.bytes().take_while(|&b| b == f.ch).count();
    len >= f.len && s.bytes().skip(len).all(|b| b == b' ')
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LineKind {
    Blank,
    /// A list item or blockquote line: its lazy continuation lines join it.
    Item,
    /// Any other one-unit-per-line structure (heading, table row, HTML, rule, directive).
    Line,
    /// A GFM table delimiter row (`|---|:--:|`).
    TableDelimiter,
    Prose,
}

/// The Markdown structure a sentence (as [`split_sentences`] cuts it) stands in: trimming keeps
/// a table's header with a kept row and a list's lead-in with a kept item, and asks this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Structure {
    /// An ATX heading line (`## Install`).
    Heading,
    /// A list item (`- x`, `1. x`, `•`), continuation lines included.
    ListItem,
    /// A blockquote line.
    Quote,
    /// A table row (header or body).
    TableRow,
    /// A GFM table delimiter row (`|---|:--:|`).
    TableDelimiter,
    /// Another one-line structure: HTML, a rule, a directive.
    OtherLine,
    /// A sentence of a prose paragraph.
    Prose,
}

/// The structure of one sentence, read from its first line.
pub fn structure_of(sentence: &str) -> Structure {
    let first = sentence.lines().next().unwrap_or("");
    let s = first.trim_start();
    match classify_line(first) {
        LineKind::TableDelimiter => Structure::TableDelimiter,
        LineKind::Item if s.starts_with('>') => Structure::Quote,
        LineKind::Item => Structure::ListItem,
        LineKind::Line if s.starts_with('#') => Structure::Heading,
        LineKind::Line if s.starts_with('|') => Structure::TableRow,
        LineKind::Line => Structure::OtherLine,
        LineKind::Blank | LineKind::Prose => Structure::Prose,
    }
}

fn is_table_delimiter(s: &str) -> bool {
    let s = s.trim();
    if !s.contains('-') || !s.contains('|') && !s.contains(':') {
        return false;
    }
    s.contains('|')
        && s.bytes()
            .all(|b| matches!(b, b'|' | b'-' | b':' | b' ' | b'\t'))
}

fn classify_line(line: &str) -> LineKind {
    let s = line.trim_start();
    if s.trim_end().is_empty() {
        return LineKind::Blank;
    }
    let b = s.as_bytes();
    match b[0] {
        b'#' => {
            let hashes = b.iter().take_while(|&&c| c == b'#').count();
            if hashes <= 6 && b.get(hashes).is_none_or(|c| c.is_ascii_whitespace()) {
                return LineKind::Line;
            }
        }
        b'>' => return LineKind::Item,
        b'|' => {
            return if is_table_delimiter(s) {
                LineKind::TableDelimiter
            } else {
                LineKind::Line
            }
        }
        // A lone `-`/`*` line is a thematic break or an empty item; `- x` is a bullet,
        // and `* * *` / `- - -` rules are caught here too.
        b'-' | b'*' | b'+' if b.get(1).is_none_or(|c| c.is_ascii_whitespace()) => {
            return LineKind::Item;
        }
        b'<' if b
            .get(1)
            .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, b'/' | b'!' | b'?')) =>
        {
            return LineKind::Line;
        }
        b'[' => {
            // DocFX directives ([!INCLUDE ...], [!code-csharp ...]) and link reference
            // definitions ([id]: url) are lines of their own.
            if b.get(1) == Some(&b'!') {
                return LineKind::Line;
            }
            if let Some(close) = s.find("]:") {
                if !s[..close].contains(']') {
                    return LineKind::Line;
                }
            }
        }
        b':' if s.starts_with(":::") => return LineKind::Line,
        b'0'..=b'9' => {
            let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
            if digits <= 9
                && matches!(b.get(digits), Some(b'.') | Some(b')'))
                && b.get(digits + 1).is_none_or(|c| c.is_ascii_whitespace())
            {
                return LineKind::Item;
            }
        }
        _ => {}
    }
    if s.starts_with('•') || s.starts_with('⁃') {
        return LineKind::Item;
    }
    // Thematic breaks and setext underlines: only `-`, `=`, `*`, `_` (and spaces).
    let t = s.trim_end();
    if t.len() >= 2
        && t.bytes()
            .all(|c| matches!(c, b'-' | b'=' | b'*' | b'_' | b' '))
    {
        return LineKind::Line;
    }
    if is_table_delimiter(s) {
        return LineKind::TableDelimiter;
    }
    LineKind::Prose
}

fn split_markdown_from(text: &str, from: usize, out: &mut Vec<Sentence>) {
    // Open fence: its opener and the start of the opening line.
    let mut fence: Option<(Fence, usize)> = None;
    // Current prose paragraph span.
    let mut prose: Option<(usize, usize)> = None;
    // Index in `out` of the last item unit, which lazy continuation lines extend.
    let mut open_item: Option<usize> = None;
    let mut in_table = false;

    let flush = |prose: &mut Option<(usize, usize)>, out: &mut Vec<Sentence>| {
        if let Some((s, e)) = prose.take() {
            split_prose_run(text, s, e, false, true, out);
        }
    };

    for (ls, le) in lines(text, from) {
        let line = &text[ls..le];
        if let Some((f, fs)) = fence {
            if fence_close(line, f) {
                push_trimmed(text, fs, le, out);
                fence = None;
            }
            continue;
        }
        if let Some(f) = fence_open(line) {
            flush(&mut prose, out);
            open_item = None;
            in_table = false;
            fence = Some((f, ls));
            continue;
        }
        let kind = classify_line(line);
        match kind {
            LineKind::Blank => {
                flush(&mut prose, out);
                open_item = None;
                in_table = false;
            }
            LineKind::TableDelimiter => {
                // A pipe-less header row was collected as prose: make it a row of its own.
                if let Some((s, e)) = prose {
                    if !text[s..e].contains('\n') {
                        prose = None;
                        push_trimmed(text, s, e, out);
                    }
                }
                flush(&mut prose, out);
                in_table = true;
                open_item = None;
                push_trimmed(text, ls, le, out);
            }
            LineKind::Prose if in_table => push_trimmed(text, ls, le, out),
            LineKind::Prose => {
                if let Some(idx) = open_item {
                    // Lazy continuation of a list item / blockquote line.
                    let before = out.len();
                    push_trimmed(text, ls, le, out);
                    if out.len() > before {
                        let last = out.pop().map(|s| s.end).unwrap_or(le);
                        out[idx].end = last;
                    }
                } else {
                    match &mut prose {
                        Some((_, e)) => *e = le,
                        None => prose = Some((ls, le)),
                    }
                }
            }
            LineKind::Item | LineKind::Line => {
                flush(&mut prose, out);
                let before = out.len();
                push_trimmed(text, ls, le, out);
                open_item = if kind == LineKind::Item && out.len() > before {
                    Some(out.len() - 1)
                } else {
                    None
                };
            }
        }
    }
    if let Some((_, fs)) = fence {
        push_trimmed(text, fs, text.len(), out);
    }
    flush(&mut prose, out);
}

// ---------------------------------------------------------------------------------------------
// Prose
// ---------------------------------------------------------------------------------------------

fn is_closer(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | '”'
            | '’'
            | '»'
            | ')'
            | ']'
            | '}'
            | '*'
            | '_'
            | '」'
            | '』'
            | '）'
            | '】'
            | '》'
    )
}

/// Opening characters that, after a sentence end, start a new sentence (spec: `¿ ¡ " « ( [`).
fn is_opener(c: char) -> bool {
    matches!(c, '¿' | '¡' | '"' | '«' | '“' | '‘' | '(' | '[' | '\'')
}

/// Markdown emphasis/code markers that may precede the first letter of a sentence.
fn is_md_opener(c: char) -> bool {
    matches!(c, '*' | '_' | '`')
}

fn is_cjk_terminator(c: char) -> bool {
    matches!(c, '。' | '！' | '？' | '｡')
}

/// Sentence terminators of caseless scripts that, like `?`/`!`, need whitespace after them:
/// Arabic question mark and full stop, Devanagari danda, Ethiopic and Myanmar full stops.
fn is_other_terminator(c: char) -> bool {
    matches!(c, '؟' | '۔' | '।' | '॥' | '።' | '፧' | '။')
}

fn is_terminator(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…') || is_cjk_terminator(c) || is_other_terminator(c)
}

fn char_at(s: &str, i: usize) -> Option<char> {
    s.get(i..).and_then(|r| r.chars().next())
}

fn char_before(s: &str, i: usize) -> Option<char> {
    s.get(..i).and_then(|r| r.chars().next_back())
}

/// Split the prose run `text[start..end]`, pushing trimmed sentences.
fn split_prose_run(
    text: &str,
    start: usize,
    end: usize,
    no_space_rule: bool,
    markdown: bool,
    out: &mut Vec<Sentence>,
) {
    let s = &text[start..end];
    let mut cuts = Vec::new();
    let markers = inline_list_markers(s, &mut cuts);
    find_cuts(s, no_space_rule, markdown, &markers, &mut cuts);
    cuts.sort_unstable();
    cuts.dedup();
    let mut prev = 0;
    for c in cuts {
        if c > prev && c < s.len() {
            push_trimmed(text, start + prev, start + c, out);
            prev = c;
        }
    }
    push_trimmed(text, start + prev, end, out);
}

/// Inline list markers at the start of a run (`1.) a 2.) b`, `a. x b. y`, `• 9. x • 10. y`):
/// pushes a cut before each following marker of the same series and returns the byte positions
/// of marker dots, which must not be treated as sentence ends.
fn inline_list_markers(s: &str, cuts: &mut Vec<usize>) -> Vec<usize> {
    let mut dots = Vec::new();
    let t = s.trim_start();
    let lead = s.len() - t.len();
    let b = t.as_bytes();
    if b.is_empty() {
        return dots;
    }
    // Bullet series.
    if t.starts_with('•') || t.starts_with('⁃') {
        let bullet = t.chars().next().unwrap_or('•');
        for (i, c) in s.char_indices() {
            if c == bullet {
                if i > lead && char_before(s, i).is_some_and(char::is_whitespace) {
                    cuts.push(i);
                }
                // An optional number after the bullet is part of the marker: `• 9.`.
                let after = s[i + c.len_utf8()..].trim_start();
                let off = s.len() - after.len();
                let d = after.bytes().take_while(u8::is_ascii_digit).count();
                if d > 0 && after.as_bytes().get(d) == Some(&b'.') {
                    dots.push(off + d);
                }
            }
        }
        return dots;
    }
    // Numbered series: `1.)`, `1)`, `1.`; or lettered: `a.`.
    let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    let (first, style): (u32, &str) = if digits > 0 && digits <= 3 {
        let n: u32 = t[..digits].parse().unwrap_or(0);
        let rest = &t[digits..];
        if rest.starts_with(".) ") {
            (n, ".)")
        } else if rest.starts_with(") ") {
            (n, ")")
        } else if rest.starts_with(". ") {
            (n, ".")
        } else {
            return dots;
        }
    } else if b.len() > 2 && b[0].is_ascii_lowercase() && b[1] == b'.' && b[2] == b' ' {
        (u32::from(b[0]), "a.")
    } else {
        return dots;
    };
    let marker = |n: u32| -> String {
        if style == "a." {
            char::from_u32(n)
                .map(|c| format!("{c}."))
                .unwrap_or_default()
        } else {
            format!("{n}{style}")
        }
    };
    let mut n = first;
    let mut pos = lead;
    loop {
        let m = marker(n);
        if m.is_empty() {
            break;
        }
        if m.ends_with('.') || m.ends_with(".)") {
            let dot = pos + m.rfind('.').unwrap_or(0);
            dots.push(dot);
        }
        let search_from = pos + m.len();
        let next = marker(n + 1);
        if next.is_empty() || search_from >= s.len() {
            break;
        }
        let pat = format!(" {next} ");
        match s[search_from..].find(&pat) {
            Some(k) => {
                pos = search_from + k + 1;
                cuts.push(pos);
                n += 1;
            }
            None => {
                // The last item may end the run: `... 2. The second item`.
                let tail = format!(" {next}");
                if s[search_from..].ends_with(&tail) {
                    cuts.push(s.len() - next.len());
                }
                break;
            }
        }
    }
    dots
}

/// Find sentence cuts in prose `s` (positions where the next sentence's whitespace begins).
fn find_cuts(
    s: &str,
    no_space_rule: bool,
    markdown: bool,
    markers: &[usize],
    cuts: &mut Vec<usize>,
) {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if markdown && c == b'`' {
            // Skip an inline code span: a backtick run closed by a run of the same length.
            let run = b[i..].iter().take_while(|&&x| x == b'`').count();
            let mut j = i + run;
            let mut closed = None;
            while j < b.len() {
                if b[j] == b'`' {
                    let r = b[j..].iter().take_while(|&&x| x == b'`').count();
                    if r == run {
                        closed = Some(j + r);
                        break;
                    }
                    j += r;
                } else {
                    j += 1;
                }
            }
            i = closed.unwrap_or(i + run);
            continue;
        }
        // ASCII terminators, or the lead byte of a multi-byte one (…, CJK, Arabic, Indic, …).
        let is_term_start = matches!(
            c,
            b'.' | b'!' | b'?' | 0xD8 | 0xDB | 0xE0 | 0xE1 | 0xE2 | 0xE3 | 0xEF
        );
        if !is_term_start {
            i += 1;
            continue;
        }
        let Some(ch) = char_at(s, i) else {
            i += 1;
            continue;
        };
        if !is_terminator(ch) {
            i += ch.len_utf8();
            continue;
        }
        i = handle_terminator(s, i, no_space_rule, markers, cuts);
    }
}

/// Decide about the terminator at `i`; returns where scanning resumes.
fn handle_terminator(
    s: &str,
    i: usize,
    no_space_rule: bool,
    markers: &[usize],
    cuts: &mut Vec<usize>,
) -> usize {
    let cluster = TerminatorCluster::walk(s, i);
    let k = cluster.end;
    if markers.contains(&i) {
        return k;
    }
    if k >= s.len() {
        return k;
    }
    let next = char_at(s, k).unwrap_or(' ');
    if cluster.cjk {
        cuts.push(k);
        return k;
    }
    if !next.is_whitespace() {
        if no_space_rule
            && cluster.dots == 1
            && !cluster.has_bang_q
            && k == i + 1
            && no_space_boundary(s, i)
        {
            cuts.push(k);
        }
        return k;
    }
    // Bracketed omission `[...]` / `(…)` is never a boundary.
    if char_before(s, i).is_some_and(|p| p == '[' || p == '(')
        && (cluster.dots >= 3 || cluster.ellipsis_char)
    {
        return k;
    }
    // Look at what follows the whitespace.
    let Some(follow) = WhatFollows::after_whitespace(s, k) else {
        return k;
    };
    if cluster.has_bang_q {
        if follow.starts_sentence {
            cuts.push(k);
        }
        return k;
    }
    if cluster.ellipsis_char || cluster.dots >= 2 {
        cut_after_ellipsis_or_dot_run(&cluster, &follow, cuts);
        return k;
    }
    cut_after_single_dot(s, i, k, &follow, cuts);
    k
}

/// A terminator with what belongs to it: more terminators, spaced dots (`. . .`) and closing
/// quotes or brackets. What it holds decides which boundary rules apply.
struct TerminatorCluster {
    /// Where the cluster ends: the candidate cut, and where scanning resumes.
    end: usize,
    /// Whether a space stands right before the terminator (` . . .`).
    spaced_before: bool,
    /// Dots in the cluster, spaced ones included.
    dots: usize,
    /// Whether it holds `!`, `?` or another script's terminator (Arabic, Indic, …).
    has_bang_q: bool,
    /// Whether it holds a CJK terminator (`。！？`), which cuts without a following space.
    cjk: bool,
    /// Whether it holds `…`.
    ellipsis_char: bool,
    /// End of the first attached dot when a spaced ellipsis follows it (`word. . . .`).
    attached_then_spaced: Option<usize>,
}

impl TerminatorCluster {
    /// Walk the cluster that starts with the terminator at `i`.
    fn walk(s: &str, i: usize) -> Self {
        let b = s.as_bytes();
        let spaced_before = i > 0 && b[i - 1] == b' ';
        // Walk the cluster: terminators, spaced dots (`. . .`), closers, more terminators.
        let mut j = i;
        let mut dots = 0usize;
        let mut has_bang_q = false;
        let mut cjk = false;
        let mut ellipsis_char = false;
        // End of the first attached dot when a spaced ellipsis follows it (`word. . . .`).
        let mut attached_then_spaced = None;
        loop {
            match char_at(s, j) {
                Some(c) if is_terminator(c) => {
                    match c {
                        '.' => dots += 1,
                        '…' => ellipsis_char = true,
                        '!' | '?' => has_bang_q = true,
                        c if is_other_terminator(c) => has_bang_q = true,
                        _ => cjk = true,
                    }
                    j += c.len_utf8();
                }
                Some(' ') if b.get(j + 1) == Some(&b'.') && j > i => {
                    // A spaced dot belongs to the cluster only when it stands alone.
                    let after = char_at(s, j + 2);
                    if after.is_none_or(|a| a.is_whitespace() || is_closer(a) || a == '.') {
                        if dots == 1
                            && !spaced_before
                            && attached_then_spaced.is_none()
                            && j == i + 1
                        {
                            attached_then_spaced = Some(i + 1);
                        }
                        j += 1;
                    } else {
                        break;
                    }
                }
                Some(c) if is_closer(c) && j > i => j += c.len_utf8(),
                _ => break,
            }
        }
        Self {
            end: j,
            spaced_before,
            dots,
            has_bang_q,
            cjk,
            ellipsis_char,
            attached_then_spaced,
        }
    }
}

/// The text after the whitespace that follows a terminator cluster, and whether its first
/// character (past opening quotes, brackets and Markdown markup) can start a sentence.
struct WhatFollows<'a> {
    /// The rest of the text from its first non-whitespace character.
    trimmed: &'a str,
    upper: bool,
    open_ok: bool,
    starts_sentence: bool,
}

impl<'a> WhatFollows<'a> {
    /// What follows the whitespace at `k`; `None` when only whitespace and openers follow.
    fn after_whitespace(s: &'a str, k: usize) -> Option<Self> {
        let rest = &s[k..];
        let trimmed = rest.trim_start();
        if trimmed.is_empty() {
            return None;
        }
        let n = s.len() - trimmed.len();
        let mut spec_opener = false;
        let mut first = None;
        for c in trimmed.chars() {
            if is_opener(c) {
                spec_opener = true;
            } else if is_md_opener(c) {
            } else {
                first = Some(c);
                break;
            }
        }
        let first = first?;
        // Caseless scripts (CJK, Arabic, Devanagari, …) can start a sentence with any letter.
        let upper = first.is_uppercase() || (first.is_alphabetic() && !first.is_lowercase());
        let digit = first.is_ascii_digit();
        let open_ok = spec_opener && (first.is_alphanumeric() || first == '¿' || first == '¡');
        let starts_sentence = upper || digit || open_ok;
        let _ = n;
        Some(Self {
            trimmed,
            upper,
            open_ok,
            starts_sentence,
        })
    }
}

/// An ellipsis (`…`) or a run of dots (`...`, `. . .`) ends a sentence only before an
/// uppercase letter or an opener; after a space it marks an omission inside the sentence
/// unless it has four dots or more. The cut goes after the cluster, or after the first dot
/// when a spaced ellipsis follows it (`word. . . .`).
fn cut_after_ellipsis_or_dot_run(
    cluster: &TerminatorCluster,
    follow: &WhatFollows<'_>,
    cuts: &mut Vec<usize>,
) {
    let k = cluster.end;
    if cluster.spaced_before {
        // ` . . . I` is an omission inside a sentence; ` . . . . Next` ends one.
        if cluster.dots >= 4 && follow.starts_sentence {
            cuts.push(k);
        }
        return;
    }
    if let Some(cut) = cluster.attached_then_spaced {
        if follow.upper || follow.open_ok {
            cuts.push(cut);
        }
        return;
    }
    if follow.upper || follow.open_ok {
        cuts.push(k);
    }
}

/// A single dot at `i` (cluster ending at `k`): the word before it decides. A title never
/// ends a sentence, an abbreviation only before an opening question mark or quote or a typical
/// sentence starter, any other word before whatever can start a sentence.
fn cut_after_single_dot(
    s: &str,
    i: usize,
    k: usize,
    follow: &WhatFollows<'_>,
    cuts: &mut Vec<usize>,
) {
    // A single dot: look at the word before it.
    let word = word_before(s, i);
    match classify_word(word) {
        WordClass::Title => {}
        WordClass::Abbreviation => {
            let opener_q = follow.trimmed.starts_with(['¿', '¡', '«', '"', '“']);
            if opener_q || (follow.upper && is_sentence_starter(next_word(follow.trimmed))) {
                cuts.push(k);
            }
        }
        WordClass::Plain => {
            if follow.starts_sentence {
                cuts.push(k);
            }
        }
    }
}

/// `world.Today`, `1,000.That`: a dot with no space after it that still ends a sentence.
fn no_space_boundary(s: &str, i: usize) -> bool {
    let (Some(prev), Some(next)) = (char_before(s, i), char_at(s, i + 1)) else {
        return false;
    };
    if !next.is_uppercase() {
        return false;
    }
    // The following word must look like a word (`Today`, `Mr`), not `NET` or `IO`.
    let after = &s[i + 1 + next.len_utf8()..];
    if !after.chars().next().is_some_and(|c| c.is_lowercase()) {
        return false;
    }
    // Not inside an address, path or identifier-like token.
    let tok_start = s[..i]
        .char_indices()
        .rev()
        .find(|&(_, c)| c.is_whitespace())
        .map_or(0, |(p, c)| p + c.len_utf8());
    let tok_end = s[i..].find(char::is_whitespace).map_or(s.len(), |p| i + p);
    let tok = &s[tok_start..tok_end];
    if tok.contains(['@', '/', '\\', '_', '=', ':', '<', '>']) {
        return false;
    }
    let left = &s[tok_start..i];
    if prev.is_lowercase() {
        // Require a real lowercase word on the left, not `NuGet` or `x` alone.
        return left.chars().filter(|c| c.is_alphabetic()).count() >= 2
            && !left.chars().skip(1).any(char::is_uppercase);
    }
    if prev.is_ascii_digit() {
        // `1.Helado, 2.Carne` is an inline list; `1,000.That` ends a sentence.
        let digits = left.chars().filter(char::is_ascii_digit).count();
        return digits > 2 || left.contains(',');
    }
    false
}

/// The word ending at byte `i` (exclusive), without leading openers.
fn word_before(s: &str, i: usize) -> &str {
    let head = &s[..i];
    let start = head
        .char_indices()
        .rev()
        .find(|&(_, c)| c.is_whitespace() || is_opener(c) || c == '*' || c == '_' || c == '/')
        .map_or(0, |(p, c)| p + c.len_utf8());
    &head[start..]
}

/// The first word of `s` (letters only).
fn next_word(s: &str) -> &str {
    let t = s.trim_start_matches(|c: char| is_opener(c) || is_md_opener(c));
    let end = t
        .char_indices()
        .find(|&(_, c)| !c.is_alphabetic() && c != '\'' && c != '’')
        .map_or(t.len(), |(p, _)| p);
    &t[..end]
}

enum WordClass {
    /// Prepositive title (`Sr.`, `Dr.`, `Mt.`): never a sentence end.
    Title,
    /// Abbreviation, initial or initialism: a sentence end only before a sentence starter.
    Abbreviation,
    Plain,
}

fn classify_word(word: &str) -> WordClass {
    if word.is_empty() {
        return WordClass::Plain;
    }
    let letters = word.chars().filter(|c| c.is_alphabetic()).count();
    let all_alpha = word
        .chars()
        .all(|c| c.is_alphabetic() || c == '.' || c == '°' || c == 'º');
    if !all_alpha || letters == 0 {
        return WordClass::Plain;
    }
    let lower = word.to_lowercase();
    // `Tuesday.Mr` (no space before the title) still ends in a title.
    let last_segment = lower.rsplit('.').next().unwrap_or(&lower);
    if is_title(&lower) || is_title(last_segment) {
        return WordClass::Title;
    }
    if letters == 1 {
        return WordClass::Abbreviation;
    }
    // Initialisms: U.S, e.g, a.m, Ph.D (segments of one or two letters).
    if word.contains('.')
        && word
            .split('.')
            .all(|p| !p.is_empty() && p.chars().count() <= 2)
    {
        return WordClass::Abbreviation;
    }
    if is_abbreviation(&lower) {
        return WordClass::Abbreviation;
    }
    let capitalized = word.chars().next().is_some_and(char::is_uppercase);
    if capitalized && is_capitalized_abbreviation(&lower) {
        return WordClass::Abbreviation;
    }
    WordClass::Plain
}

fn is_title(w: &str) -> bool {
    matches!(
        w,
        "mr" | "mrs"
            | "ms"
            | "mx"
            | "dr"
            | "dra"
            | "drs"
            | "sr"
            | "sra"
            | "srta"
            | "sres"
            | "srs"
            | "lic"
            | "lcdo"
            | "lcda"
            | "ing"
            | "prof"
            | "profa"
            | "st"
            | "mt"
            | "ft"
            | "gen"
            | "gral"
            | "capt"
            | "cap"
            | "lt"
            | "sgt"
            | "rev"
            | "hon"
            | "gov"
            | "pres"
            | "dña"
            | "messrs"
            | "mme"
            | "mlle"
            | "fr"
            | "sto"
            | "sta"
            | "arq"
    )
}

fn is_abbreviation(w: &str) -> bool {
    matches!(
        w,
        // English
        "co" | "corp" | "inc" | "ltd" | "llc" | "jr" | "vs" | "etc" | "approx" | "appt" | "apt"
            | "dept" | "est" | "fig" | "figs" | "vol" | "vols" | "no" | "nos" | "pp" | "ch"
            | "sec" | "ave" | "blvd" | "rd" | "cf" | "viz" | "misc" | "min" | "max" | "ref"
            | "refs" | "ed" | "eds" | "al" | "ca" | "esp" | "jan" | "feb" | "apr" | "jun"
            | "jul" | "aug" | "sep" | "sept" | "oct" | "nov" | "dec" | "mon" | "tue" | "tues"
            | "thu" | "thur" | "thurs" | "fri" | "hr" | "hrs" | "mins" | "sq" | "ft" | "lb"
            | "lbs" | "oz" | "pt" | "qt" | "yr" | "yrs" | "govt" | "intl" | "univ" | "assn"
            | "bros" | "tel" | "ext" | "op" | "cit" | "ibid" | "ie" | "eg" | "ps" | "abbr"
            | "art" | "arts"
            // Spanish
            | "ej" | "p.ej" | "núm" | "nro" | "nº" | "n°" | "pág" | "págs" | "párr" | "párrf"
            | "cap" | "caps" | "aprox" | "máx" | "mín" | "admón" | "hs" | "seg" | "ene" | "abr"
            | "dic" | "lun" | "mié" | "jue" | "vie" | "sáb" | "ee" | "uu" | "cía" | "ltda" | "av"
            | "avda" | "ud" | "uds" | "vd" | "vds" | "cra" | "dpto" | "depto" | "tlf" | "tfno"
            | "obs" | "pto" | "pza" | "izq" | "dcha" | "der" | "cp" | "c.p" | "aa" | "vv"
            | "prov" | "gob" | "dir" | "sig" | "sigs" | "ss" | "fdo" | "atte" | "aff" | "vid"
            | "op.cit" | "km" | "cm" | "mm" | "kg" | "gr" | "lt" | "mg"
    )
}

/// Abbreviations that are also ordinary words (`Mar.` = marzo/martes vs `mar`, `May.`, `No.`):
/// only treated as abbreviations when capitalized.
fn is_capitalized_abbreviation(w: &str) -> bool {
    matches!(
        w,
        "mar" | "may" | "ago" | "sun" | "sat" | "wed" | "dom" | "set" | "mie" | "sab"
    )
}

/// Words that typically start a sentence. After an abbreviation, a capitalized word only ends
/// the sentence when it is one of these (`Co. It closed` vs `U.S. Government`).
fn is_sentence_starter(w: &str) -> bool {
    matches!(
        w,
        // English
        "A" | "An" | "The" | "This" | "That" | "These" | "Those" | "There" | "Then" | "They"
            | "Their" | "We" | "He" | "She" | "It" | "Its" | "I" | "In" | "If" | "Is" | "Are"
            | "Was" | "Were" | "Be" | "Being" | "Did" | "Do" | "Does" | "For" | "From" | "How"
            | "However" | "What" | "When" | "Where" | "Which" | "Who" | "Why" | "While" | "With"
            | "Without" | "You" | "Your" | "Our" | "My" | "Many" | "Most" | "More" | "Millions"
            | "Some" | "Such" | "So" | "But" | "And" | "Or" | "Not" | "Now" | "Note" | "Also"
            | "After" | "Before" | "As" | "At" | "By" | "On" | "Of" | "To" | "Unless" | "Until"
            | "Use" | "See" | "Please" | "Each" | "Every" | "All" | "Any" | "Both" | "Here"
            | "Once" | "Since" | "Although" | "Though" | "Because" | "Even" | "Finally"
            | "First" | "Next" | "Other" | "Another" | "Instead" | "Still" | "Yet" | "Thus"
            | "Therefore" | "Hence" | "Meanwhile" | "Later" | "Today" | "Let" | "Can" | "Could"
            | "Would" | "Should" | "Will" | "Must" | "Has" | "Have" | "Had" | "Only" | "Just"
            | "Much" | "His" | "Her" | "Click" | "Select" | "Run"
            // Spanish
            | "El" | "La" | "Los" | "Las" | "Lo" | "Un" | "Una" | "Unos" | "Unas" | "Es" | "Son"
            | "Este" | "Esta" | "Esto" | "Estos" | "Estas" | "Ese" | "Esa" | "Eso" | "Esos"
            | "Esas" | "Hay" | "En" | "Por" | "Para" | "Pero" | "Sin" | "Con" | "Si" | "Se"
            | "Su" | "Sus" | "No" | "Ya" | "Así" | "Además" | "También" | "Luego" | "Después"
            | "Entonces" | "Cuando" | "Donde" | "Como" | "Al" | "Del" | "De" | "Y" | "O"
            | "Aunque" | "Mientras" | "Sobre" | "Tras" | "Ellos" | "Ella" | "Él" | "Yo" | "Usted"
            | "Ustedes" | "Le" | "Les" | "Me" | "Nos" | "Te" | "Puede" | "Debe" | "Hace"
            | "Fue" | "Era" | "Ha" | "Han" | "Tiene" | "Todo" | "Todos" | "Cada" | "Otro"
            | "Otra" | "Ahora" | "Hoy" | "Gracias" | "Véase" | "Consulte" | "Nota" | "Aquí"
            | "Incluso" | "Según" | "Finalmente" | "Primero" | "Haga" | "Seleccione" | "Ejecute"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structure_of_reads_the_first_line() {
        use Structure::*;
        for (text, want) in [
            ("## Install", Heading),
            ("- item\n  continued", ListItem),
            ("12. step", ListItem),
            ("• bullet", ListItem),
            ("> quoted", Quote),
            ("| a | b |", TableRow),
            ("|---|:-:|", TableDelimiter),
            ("<div>", OtherLine),
            ("A sentence. With | a pipe.", Prose),
            ("#hashtag is prose", Prose),
        ] {
            assert_eq!(structure_of(text), want, "{text:?}");
        }
    }

    fn texts(src: &str, spans: &[Sentence]) -> Vec<String> {
        spans.iter().map(|s| s.text(src).to_string()).collect()
    }

    /// Markdown mode: `input` splits into exactly `expect`.
    fn check(input: &str, expect: &[&str]) {
        let got = texts(input, &split_sentences(input));
        assert_eq!(got, expect, "\ninput: {input:?}");
    }

    /// Prose mode.
    fn check_prose(input: &str, expect: &[&str]) {
        let got = texts(input, &split_prose(input));
        assert_eq!(got, expect, "\ninput: {input:?}");
    }

    #[test]
    fn spec_example() {
        check(
            "El sistema soporta multi-tenancy (v1.2.3). Véase RFC 3986...",
            &[
                "El sistema soporta multi-tenancy (v1.2.3).",
                "Véase RFC 3986...",
            ],
        );
    }

    #[test]
    fn spec_trim_example() {
        check(
            "La multi-tenancy aislaba datos. Cada tenant veía solo su esquema. Las queries explícitas mantenían la RLS.",
            &[
                "La multi-tenancy aislaba datos.",
                "Cada tenant veía solo su esquema.",
                "Las queries explícitas mantenían la RLS.",
            ],
        );
    }

    #[test]
    fn empty_and_whitespace() {
        check("", &[]);
        check("  \n\n\t ", &[]);
    }

    #[test]
    fn spanish_abbreviations() {
        check(
            "Hola Sr. García. La Sra. López llegó. El Dr. Pérez también.",
            &[
                "Hola Sr. García.",
                "La Sra. López llegó.",
                "El Dr. Pérez también.",
            ],
        );
        check(
            "Use comandos, p. ej. dotnet restore, antes de compilar. Luego publique.",
            &[
                "Use comandos, p. ej. dotnet restore, antes de compilar.",
                "Luego publique.",
            ],
        );
        check(
            "Vea el vol. 3, pág. 12 y núm. 4 del informe. Después siga.",
            &[
                "Vea el vol. 3, pág. 12 y núm. 4 del informe.",
                "Después siga.",
            ],
        );
        check(
            "Llegó a las 10 a. m. y se fue a las 5 p. m. Luego cenó.",
            &["Llegó a las 10 a. m. y se fue a las 5 p. m.", "Luego cenó."],
        );
        check(
            "Vive en EE. UU. desde el 5 de ene. de 2020.",
            &["Vive en EE. UU. desde el 5 de ene. de 2020."],
        );
        check(
            "Paquetes, herramientas, etc. están aquí. Etc. no es una frase.",
            &[
                "Paquetes, herramientas, etc. están aquí.",
                "Etc. no es una frase.",
            ],
        );
    }

    #[test]
    fn english_abbreviations() {
        check(
            "Use a tool, e.g. NuGet, or i.e. the CLI. Then run it.",
            &["Use a tool, e.g. NuGet, or i.e. the CLI.", "Then run it."],
        );
        check(
            "It costs approx. 5 dollars. Mr. Smith paid.",
            &["It costs approx. 5 dollars.", "Mr. Smith paid."],
        );
        check(
            "Files, folders, etc. The list is long.",
            &["Files, folders, etc.", "The list is long."],
        );
    }

    #[test]
    fn numbers_versions_urls_files() {
        check(
            "Install v1.2.3 on 192.168.1.1 using 3.14 GB. Edit config.yaml now. See https://example.com/a.html. Done.",
            &[
                "Install v1.2.3 on 192.168.1.1 using 3.14 GB.",
                "Edit config.yaml now.",
                "See https://example.com/a.html.",
                "Done.",
            ],
        );
    }

    #[test]
    fn initials() {
        check(
            "The book by J. R. R. Tolkien sold well. It was long.",
            &["The book by J. R. R. Tolkien sold well.", "It was long."],
        );
    }

    #[test]
    fn questions_exclamations_openers() {
        check(
            "¿Funciona? ¡Sí! «Claro», dijo. (Nota al margen.) [Enlace] final.",
            &[
                "¿Funciona?",
                "¡Sí!",
                "«Claro», dijo.",
                "(Nota al margen.)",
                "[Enlace] final.",
            ],
        );
        check(
            "No split here. lowercase follows.",
            &["No split here. lowercase follows."],
        );
    }

    #[test]
    fn cjk_terminators() {
        check(
            "今日は晴れです。明日は雨です。",
            &["今日は晴れです。", "明日は雨です。"],
        );
        check("你好！你是谁？我是。", &["你好！", "你是谁？", "我是。"]);
    }

    #[test]
    fn caseless_scripts() {
        check("यह पहला है। यह दूसरा है।", &["यह पहला है।", "यह दूसरा है।"]);
        check("هل أنت بخير؟ نعم.", &["هل أنت بخير؟", "نعم."]);
        check("Он пришёл. Она ушла.", &["Он пришёл.", "Она ушла."]);
    }

    #[test]
    fn doc_prefix_is_one_unit() {
        check(
            "[Doc: Guía › Uso. Avanzado. Más]\nPrimera frase. Segunda frase.",
            &[
                "[Doc: Guía › Uso. Avanzado. Más]",
                "Primera frase.",
                "Segunda frase.",
            ],
        );
    }

    #[test]
    fn split_prefix() {
        assert_eq!(
            split_chunk_prefix("[Doc: A › B]\nbody"),
            ("[Doc: A › B]\n", "body")
        );
        assert_eq!(
            split_chunk_prefix("[Doc: A [x] › B] body"),
            ("[Doc: A [x] › B] ", "body")
        );
        assert_eq!(split_chunk_prefix("no prefix"), ("", "no prefix"));
        assert_eq!(
            split_chunk_prefix("[Doc: unclosed\nx"),
            ("", "[Doc: unclosed\nx")
        );
        assert_eq!(split_chunk_prefix("[Doc: T]"), ("[Doc: T]", ""));
        assert_eq!(split_chunk_prefix("[Docs] x"), ("", "[Docs] x"));
    }

    #[test]
    fn markdown_structure_spanish() {
        let md = "# Instalación\n\nPrimero instale NuGet. Después configure el origen.\n\n\
                  - Paso uno. Con detalle.\n- Paso dos\n\n1. Abra la consola.\n2. Ejecute el comando.\n\n\
                  > [!Note]\n> Esto es una nota. Tiene dos frases.\n\n\
                  | Col | Valor |\n|-----|-------|\n| a. | b. C |\n";
        check(
            md,
            &[
                "# Instalación",
                "Primero instale NuGet.",
                "Después configure el origen.",
                "- Paso uno. Con detalle.",
                "- Paso dos",
                "1. Abra la consola.",
                "2. Ejecute el comando.",
                "> [!Note]",
                "> Esto es una nota. Tiene dos frases.",
                "| Col | Valor |",
                "|-----|-------|",
                "| a. | b. C |",
            ],
        );
    }

    #[test]
    fn fences_are_atomic() {
        let md = "Ejecute esto. Luego:\n\n```bash\ndocker run --rm -it img. Otra cosa.\n\necho Hola. Adiós.\n```\nFin. Listo.";
        check(
            md,
            &[
                "Ejecute esto.",
                "Luego:",
                "```bash\ndocker run --rm -it img. Otra cosa.\n\necho Hola. Adiós.\n```",
                "Fin.",
                "Listo.",
            ],
        );
        // Tilde fences, fences inside list items, unclosed fences.
        check(
            "1. Paso:\n\n   ~~~\n   a. B\n   ~~~\n\nTexto.",
            &["1. Paso:", "~~~\n   a. B\n   ~~~", "Texto."],
        );
        check("```\nnunca. Cerrado", &["```\nnunca. Cerrado"]);
        // A line starting with inline code does not open a fence.
        check(
            "```nuget.exe``` es útil. Funciona bien.\n\nOtra frase. Y más.",
            &[
                "```nuget.exe``` es útil.",
                "Funciona bien.",
                "Otra frase.",
                "Y más.",
            ],
        );
        // A shorter run does not close a longer fence.
        check(
            "````\n```\nA. B\n````\nX.",
            &["````\n```\nA. B\n````", "X."],
        );
    }

    #[test]
    fn inline_code_is_protected() {
        check(
            "Use `dotnet pack. Then` now. Next step.",
            &["Use `dotnet pack. Then` now.", "Next step."],
        );
    }

    #[test]
    fn list_item_continuation_stays_with_item() {
        check(
            "- Un elemento largo que\n  sigue en otra línea.\n- Otro\n\nPárrafo.",
            &[
                "- Un elemento largo que\n  sigue en otra línea.",
                "- Otro",
                "Párrafo.",
            ],
        );
    }

    #[test]
    fn headings_with_anchors_and_html() {
        check(
            "## <a name=\"uso\"></a>Uso\nTexto aquí. Más texto.\n<div>bloque</div>",
            &[
                "## <a name=\"uso\"></a>Uso",
                "Texto aquí.",
                "Más texto.",
                "<div>bloque</div>",
            ],
        );
    }

    #[test]
    fn pipe_less_table() {
        check(
            "a | b\n--|--\n1. | 2. X\n\nFin.",
            &["a | b", "--|--", "1. | 2. X", "Fin."],
        );
    }

    #[test]
    fn crlf_input() {
        check(
            "# Título\r\n\r\nUna frase. Otra frase.\r\n- item\r\n",
            &["# Título", "Una frase.", "Otra frase.", "- item"],
        );
    }

    #[test]
    fn prose_mode_rules() {
        check_prose(
            "Hello world.Today is Tuesday.Mr. Smith went to the store and bought 1,000.That is a lot.",
            &[
                "Hello world.",
                "Today is Tuesday.",
                "Mr. Smith went to the store and bought 1,000.",
                "That is a lot.",
            ],
        );
        check_prose(
            "1.) The first item 2.) The second item",
            &["1.) The first item", "2.) The second item"],
        );
        check_prose(
            "a. The first item b. The second item c. The third list item",
            &[
                "a. The first item",
                "b. The second item",
                "c. The third list item",
            ],
        );
        check_prose(
            "• 9. The first item • 10. The second item",
            &["• 9. The first item", "• 10. The second item"],
        );
        check_prose(
            "Aquí: 1.Helado, 2.Carne, 3.Arroz. ¿Cuánto? Quizás $12.5.",
            &[
                "Aquí: 1.Helado, 2.Carne, 3.Arroz.",
                "¿Cuánto?",
                "Quizás $12.5.",
            ],
        );
        check_prose(
            "It was a cold \nnight in the city.",
            &["It was a cold \nnight in the city."],
        );
        // Markdown mode keeps dotted identifiers whole.
        check(
            "Install Newtonsoft.Json today.",
            &["Install Newtonsoft.Json today."],
        );
    }

    #[test]
    fn ellipses() {
        check_prose(
            "I never meant that.... She left the store.",
            &["I never meant that....", "She left the store."],
        );
        check_prose(
            "One habit was weakened . . . was that of compounds. . . . The practice was not abandoned. . . .",
            &[
                "One habit was weakened . . . was that of compounds.",
                ". . . The practice was not abandoned. . . .",
            ],
        );
        check_prose(
            "the thing is . . . I didn’t mean it.",
            &["the thing is . . . I didn’t mean it."],
        );
        check_prose(
            "\"Bohr [...] used stairways [...]\" (Smith 55).",
            &["\"Bohr [...] used stairways [...]\" (Smith 55)."],
        );
        check(
            "Cargando… Espere por favor.",
            &["Cargando…", "Espere por favor."],
        );
    }

    #[test]
    fn uax29_baseline_spans() {
        let t = "One. Two.";
        assert_eq!(texts(t, &split_uax29(t)), ["One.", "Two."]);
    }
}
