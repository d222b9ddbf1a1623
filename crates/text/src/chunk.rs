//! Markdown-aware chunker.
//!
//! A document body is cut into chunks of at most [`ChunkOptions::max_words`] words (default 400,
//! the spec's "up to ~500 words" with headroom for the prefix):
//!
//! 1. The body is parsed into blocks ([`crate::markdown::parse_blocks`]). Every byte of the body
//!    belongs to exactly one *atom*: a block plus the whitespace (or unparsed text such as link
//!    reference definitions) before it. Atoms are contiguous, so chunk spans cover the body.
//! 2. A block that alone exceeds the limit is broken down: lists into items, items and
//!    blockquotes into their blocks, tables into rows (each later chunk repeats the header
//!    row), paragraphs into sentences (then words, for a monster sentence), code blocks into
//!    lines — with the fence re-opened and closed at every cut so each chunk stays valid
//!    Markdown. Blocks that fit are never split.
//! 3. Atoms are packed greedily. A heading starts a new chunk unless the current one is still
//!    small (under [`ChunkOptions::min_words`]), so tiny sections merge with the next one; a
//!    final pass merges any remaining tiny chunk into a neighbour when the sum fits.
//!
//! Each chunk carries the prefix `[Doc: <title> › <heading path>]` (the headings shared by all
//! of its content; an H1 equal to the title is not repeated), its byte span in the source file,
//! and the SHA-256 hex of `prefix + "\n" + content` ([`Chunk::text`]). The result is a pure
//! function of the inputs, so chunk indexes and hashes are deterministic.
//!
//! A chunk may exceed `max_words` only by the words of the headings it starts with (a heading
//! is never left alone in a chunk just to respect the limit), or when a single code line or
//! table row is itself longer than the limit.

use sha2::{Digest, Sha256};

use crate::markdown::{parse_blocks, Block, BlockKind};
use crate::sentences::{fence_close, fence_open, split_sentences, strip_container_prefix};

/// Chunking options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkOptions {
    /// Maximum words per chunk (default 400).
    pub max_words: usize,
    /// Chunks smaller than this are merged with a neighbour when the sum fits (default 50).
    pub min_words: usize,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        Self {
            max_words: 400,
            min_words: 50,
        }
    }
}

/// One chunk of a document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Chunk {
    /// Position within the document: 0, 1, 2, …
    pub chunk_index: usize,
    /// `[Doc: <title> › <heading path>]`
    pub prefix: String,
    /// Headings enclosing the chunk, outermost first.
    pub heading_path: Vec<String>,
    /// The chunk's Markdown (valid on its own; fences re-opened/closed when split).
    pub content: String,
    /// Byte span of the chunk in the source file.
    pub start: usize,
    pub end: usize,
    /// Hex SHA-256 of [`Chunk::text`] (`prefix` + `"\n"` + `content`).
    pub hash: String,
    /// Whitespace-separated words in `content`.
    pub words: usize,
}

impl Chunk {
    /// The text that gets indexed and embedded: [`indexed_text`].
    pub fn text(&self) -> String {
        indexed_text(&self.prefix, &self.content)
    }
}

/// The indexed and embedded text of a chunk: prefix, newline, content. [`chunk_hash`] hashes
/// these same bytes.
pub fn indexed_text(prefix: &str, content: &str) -> String {
    format!("{prefix}\n{content}")
}

/// Hex SHA-256 of a chunk text, as stored in [`Chunk::hash`].
pub fn chunk_hash(prefix: &str, content: &str) -> String {
    let mut h = Sha256::new();
    h.update(prefix.as_bytes());
    h.update(b"\n");
    h.update(content.as_bytes());
    hex::encode(h.finalize())
}

/// Build the `[Doc: …]` prefix. Brackets in names become parentheses so the prefix stays
/// balanced for [`crate::sentences::split_chunk_prefix`].
pub fn doc_prefix(title: &str, heading_path: &[String]) -> String {
    let clean = |s: &str| -> String {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace('[', "(")
            .replace(']', ")")
    };
    let mut parts: Vec<String> = Vec::new();
    let t = clean(title);
    if !t.is_empty() {
        parts.push(t);
    }
    parts.extend(
        heading_path
            .iter()
            .map(|h| clean(h))
            .filter(|h| !h.is_empty()),
    );
    format!("[Doc: {}]", parts.join(" › "))
}

#[derive(Debug, Clone)]
enum AtomKind {
    Heading {
        level: u8,
        text: String,
    },
    Block,
    /// A line of an oversized fenced code block.
    FenceLine {
        open: String,
        close: String,
        first: bool,
        last: bool,
    },
    /// A row of an oversized table; `header` holds the header + delimiter lines to repeat.
    TableRow {
        header: Option<String>,
    },
}

#[derive(Debug, Clone)]
struct Atom {
    start: usize,
    end: usize,
    words: usize,
    kind: AtomKind,
}

fn count_words(s: &str) -> usize {
    s.split_whitespace().count()
}

/// Chunk a document body. `body_offset` is the byte offset of `body` in the source file, so
/// spans point into the file.
pub fn chunk_markdown(
    title: &str,
    body: &str,
    body_offset: usize,
    opts: &ChunkOptions,
) -> Vec<Chunk> {
    if body.trim().is_empty() {
        return Vec::new();
    }
    let max = opts.max_words.max(1);
    let atoms = build_atoms(body, max);
    let paths = heading_paths(&atoms, title);
    let groups = merge_small(
        pack(&atoms, max, opts.min_words),
        &atoms,
        max,
        opts.min_words,
    );
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        if let Some(c) = assemble(body, body_offset, title, &atoms, &paths, &g, out.len()) {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Atoms
// ---------------------------------------------------------------------------------------------

fn build_atoms(body: &str, max: usize) -> Vec<Atom> {
    let blocks = parse_blocks(body);
    let mut atoms = Vec::new();
    let n = blocks.len();
    if n == 0 {
        atoms.push(Atom {
            start: 0,
            end: body.len(),
            words: count_words(body),
            kind: AtomKind::Block,
        });
        return atoms;
    }
    for (i, b) in blocks.iter().enumerate() {
        let start = atoms_end(&atoms);
        let end = if i + 1 == n {
            body.len()
        } else {
            blocks[i + 1].start.max(start)
        };
        push_block(body, b, start, end, max, &mut atoms);
    }
    atoms
}

fn atoms_end(atoms: &[Atom]) -> usize {
    atoms.last().map_or(0, |a| a.end)
}

fn push_plain(body: &str, start: usize, end: usize, kind: AtomKind, atoms: &mut Vec<Atom>) {
    if end <= start {
        return;
    }
    atoms.push(Atom {
        start,
        end,
        words: count_words(&body[start..end]),
        kind,
    });
}

/// Push the atoms of block `b`, owning the range `[start, end)` (which contains the block).
fn push_block(body: &str, b: &Block, start: usize, end: usize, max: usize, atoms: &mut Vec<Atom>) {
    if let BlockKind::Heading { level, text } = &b.kind {
        push_plain(
            body,
            start,
            end,
            AtomKind::Heading {
                level: *level,
                text: text.clone(),
            },
            atoms,
        );
        return;
    }
    let words = count_words(&body[start..end]);
    if words <= max {
        push_plain(body, start, end, AtomKind::Block, atoms);
        return;
    }
    match &b.kind {
        BlockKind::Table => push_table(body, b, start, end, atoms),
        BlockKind::CodeBlock { fenced: true, .. } => push_fence(body, b, start, end, atoms),
        BlockKind::CodeBlock { fenced: false, .. } | BlockKind::Html => {
            push_lines(body, start, end, atoms)
        }
        BlockKind::Paragraph | BlockKind::Other if b.children.is_empty() => {
            push_sentences(body, start, end, max, atoms)
        }
        _ if !b.children.is_empty() => {
            let kids = &b.children;
            for (i, child) in kids.iter().enumerate() {
                let s = if i == 0 {
                    start
                } else {
                    atoms_end(atoms).max(start)
                };
                let e = if i + 1 == kids.len() {
                    end
                } else {
                    kids[i + 1].start.clamp(s, end)
                };
                push_block(body, child, s, e, max, atoms);
            }
            // Anything after the last child belongs to the last atom.
            if let Some(last) = atoms.last_mut() {
                if last.end < end {
                    last.end = end;
                    last.words = count_words(&body[last.start..last.end]);
                }
            }
        }
        _ => push_sentences(body, start, end, max, atoms),
    }
}

/// Byte offsets just after each `\n` in `[start, end)`.
fn line_starts(body: &str, start: usize, end: usize) -> Vec<usize> {
    body[start..end]
        .match_indices('\n')
        .map(|(i, _)| start + i + 1)
        .filter(|&p| p < end)
        .collect()
}

fn push_lines(body: &str, start: usize, end: usize, atoms: &mut Vec<Atom>) {
    let mut prev = start;
    for p in line_starts(body, start, end) {
        push_plain(body, prev, p, AtomKind::Block, atoms);
        prev = p;
    }
    push_plain(body, prev, end, AtomKind::Block, atoms);
}

fn push_sentences(body: &str, start: usize, end: usize, max: usize, atoms: &mut Vec<Atom>) {
    let text = &body[start..end];
    let mut cuts: Vec<usize> = split_sentences(text)
        .iter()
        .skip(1)
        .map(|s| start + s.start)
        .filter(|&c| !fence_like_cut(body, c))
        .collect();
    cuts.push(end);
    let mut prev = start;
    for c in cuts {
        if c <= prev {
            continue;
        }
        if count_words(&body[prev..c]) > max {
            push_words(body, prev, c, max, atoms);
        } else {
            push_plain(body, prev, c, AtomKind::Block, atoms);
        }
        prev = c;
    }
}

/// Whether cutting mid-line at `c` would leave a piece whose first line starts with ``` or ~~~
/// (inline code or text, not a fence), which would read as an unclosed fence.
fn fence_like_cut(body: &str, c: usize) -> bool {
    let ls = line_start(body, c);
    if c <= ls {
        return false;
    }
    // The same prefix rule as `fence_open`, or a cut could expose a fence marker that the
    // fence check then sees.
    let fence_like = |s: &str| {
        let s = strip_container_prefix(s);
        s.starts_with("```") || s.starts_with("~~~")
    };
    // Either piece would start a line with the marker: the one ending here or the one starting.
    fence_like(&body[ls..c]) || fence_like(&body[c..])
}

/// Last resort for a sentence longer than the limit: cut before every `max`-th word.
fn push_words(body: &str, start: usize, end: usize, max: usize, atoms: &mut Vec<Atom>) {
    let text = &body[start..end];
    let mut prev = start;
    let mut count = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            in_word = false;
        } else if !in_word {
            in_word = true;
            if count >= max && !fence_like_cut(body, start + i) {
                push_plain(body, prev, start + i, AtomKind::Block, atoms);
                prev = start + i;
                count = 0;
            }
            count += 1;
        }
    }
    push_plain(body, prev, end, AtomKind::Block, atoms);
}

fn push_table(body: &str, b: &Block, start: usize, end: usize, atoms: &mut Vec<Atom>) {
    let rows = &b.children;
    let Some(first_body) = rows
        .iter()
        .position(|r| !matches!(r.kind, BlockKind::TableRow { header: true }))
    else {
        push_lines(body, start, end, atoms);
        return;
    };
    let header_end = rows[first_body].start.clamp(b.start, end);
    let header = body[line_start(body, b.start)..header_end]
        .trim_end()
        .to_string();
    // The header (with the gap before the table) is one atom; each body row another.
    push_plain(
        body,
        start,
        header_end,
        AtomKind::TableRow { header: None },
        atoms,
    );
    for (i, _) in rows.iter().enumerate().skip(first_body) {
        let s = atoms_end(atoms).max(start);
        let e = if i + 1 == rows.len() {
            end
        } else {
            rows[i + 1].start.clamp(s, end)
        };
        push_plain(
            body,
            s,
            e,
            AtomKind::TableRow {
                header: Some(header.clone()),
            },
            atoms,
        );
    }
}

fn line_start(body: &str, pos: usize) -> usize {
    body[..pos].rfind('\n').map_or(0, |i| i + 1)
}

fn push_fence(body: &str, b: &Block, start: usize, end: usize, atoms: &mut Vec<Atom>) {
    let ls = line_start(body, b.start);
    let first_nl = body[b.start..]
        .find('\n')
        .map_or(body.len(), |i| b.start + i);
    let open_line = body[ls..first_nl].trim_end_matches('\r');
    let Some(f) = fence_open(open_line) else {
        push_lines(body, start, end, atoms);
        return;
    };
    let indent: String = open_line
        .chars()
        .take_while(|c| c.is_whitespace() || *c == '>')
        .collect();
    let marker: String = std::iter::repeat_n(f.ch as char, f.len).collect();
    // The closing line: the block's last non-blank line (not its first) when it closes the
    // fence. The line is checked as it is: `trim_end()` on the block would also strip a
    // vertical tab or form feed after the marker, which leaves the fence open (fuzz finding).
    let block_text = &body[b.start..b.end.min(body.len())];
    let closed = block_text
        .split('\n')
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .last()
        .is_some_and(|l| fence_close(l, f));
    let close = format!("{indent}{marker}");
    // Only the block's own lines are fence lines. Text the atom owns after the block (blank
    // lines, link reference definitions) is plain: wrapped in a re-opened fence, a line after
    // the closing one would read as a new open fence (a fuzz finding).
    let block_end = b.end.clamp(start, end);
    let starts = line_starts(body, start, block_end);
    let mut bounds = Vec::with_capacity(starts.len() + 2);
    bounds.push(start);
    bounds.extend(starts.into_iter().filter(|&p| p > first_nl));
    bounds.push(block_end);
    let n = bounds.len() - 1;
    for i in 0..n {
        push_plain(
            body,
            bounds[i],
            bounds[i + 1],
            AtomKind::FenceLine {
                open: open_line.to_string(),
                close: close.clone(),
                first: i == 0,
                // Without a closing line, the last piece needs no added close either: the
                // original fence ran to the end of the document.
                last: i + 1 == n && (closed || bounds[i + 1] == body.len()),
            },
            atoms,
        );
    }
    push_lines(body, block_end, end, atoms);
}

// ---------------------------------------------------------------------------------------------
// Heading paths, packing, assembly
// ---------------------------------------------------------------------------------------------

fn heading_paths(atoms: &[Atom], title: &str) -> Vec<Vec<String>> {
    let mut stack: Vec<(u8, String)> = Vec::new();
    let title_norm = title.trim().to_lowercase();
    atoms
        .iter()
        .map(|a| {
            if let AtomKind::Heading { level, text } = &a.kind {
                while stack.last().is_some_and(|(l, _)| *l >= *level) {
                    stack.pop();
                }
                let is_title = *level == 1 && text.trim().to_lowercase() == title_norm;
                if !is_title && !text.is_empty() {
                    stack.push((*level, text.clone()));
                } else {
                    // Keep the level so deeper headings nest under it, with no name.
                    stack.push((*level, String::new()));
                }
            }
            stack
                .iter()
                .filter(|(_, t)| !t.is_empty())
                .map(|(_, t)| t.clone())
                .collect()
        })
        .collect()
}

fn is_heading(a: &Atom) -> bool {
    matches!(a.kind, AtomKind::Heading { .. })
}

fn pack(atoms: &[Atom], max: usize, min: usize) -> Vec<Vec<usize>> {
    let mut groups = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    let mut cur_words = 0;
    let mut content_words = 0;
    for (i, a) in atoms.iter().enumerate() {
        if is_heading(a) {
            if content_words > 0 && cur_words >= min {
                groups.push(std::mem::take(&mut cur));
                cur_words = 0;
                content_words = 0;
            }
        } else if !cur.is_empty() && cur_words + a.words > max && content_words > 0 {
            groups.push(std::mem::take(&mut cur));
            cur_words = 0;
            content_words = 0;
        }
        cur.push(i);
        cur_words += a.words;
        if !is_heading(a) {
            content_words += a.words;
        }
    }
    if !cur.is_empty() {
        groups.push(cur);
    }
    groups
}

fn group_words(g: &[usize], atoms: &[Atom]) -> usize {
    g.iter().map(|&i| atoms[i].words).sum()
}

/// Merge chunks under `min` words into the next (or previous) chunk when the sum fits.
fn merge_small(
    mut groups: Vec<Vec<usize>>,
    atoms: &[Atom],
    max: usize,
    min: usize,
) -> Vec<Vec<usize>> {
    let mut i = 0;
    while i < groups.len() {
        let w = group_words(&groups[i], atoms);
        if w < min && groups.len() > 1 {
            if i + 1 < groups.len() && w + group_words(&groups[i + 1], atoms) <= max {
                let g = groups.remove(i);
                let next = &mut groups[i];
                let mut merged = g;
                merged.append(next);
                *next = merged;
                continue;
            }
            if i > 0 && w + group_words(&groups[i - 1], atoms) <= max {
                let g = groups.remove(i);
                groups[i - 1].extend(g);
                continue;
            }
        }
        i += 1;
    }
    groups
}

fn common_prefix(paths: &[&Vec<String>]) -> Vec<String> {
    let Some(first) = paths.first() else {
        return Vec::new();
    };
    let mut n = first.len();
    for p in &paths[1..] {
        n = n.min(p.len());
        n = (0..n).find(|&k| p[k] != first[k]).unwrap_or(n);
    }
    first[..n].to_vec()
}

/// `end` is where `trim_end()` stopped, inside the last non-blank line of a piece of a fenced
/// block. What it took from that line is kept unless it is only spaces: a tab, vertical tab,
/// form feed or other whitespace after a marker run leaves the fence open (`fence_close`),
/// and trimmed away it would turn ```` ````\x0b ```` into a closing line inside the chunk,
/// before the close the chunk adds (the fourth fuzz finding).
fn keep_fence_line_tail(body: &str, end: usize, limit: usize) -> usize {
    let line_end = body[end..limit].find('\n').map_or(limit, |i| end + i);
    let tail = body[end..line_end].trim_end_matches('\r');
    if tail.bytes().all(|b| b == b' ') {
        end
    } else {
        end + tail.len()
    }
}

fn assemble(
    body: &str,
    body_offset: usize,
    title: &str,
    atoms: &[Atom],
    paths: &[Vec<String>],
    g: &[usize],
    index: usize,
) -> Option<Chunk> {
    let first = &atoms[*g.first()?];
    let last = &atoms[*g.last()?];
    let raw = &body[first.start..last.end];
    // Drop leading blank lines (keep the first line's indentation) and trailing whitespace.
    let lead_ws = raw.len() - raw.trim_start().len();
    let skip = raw[..lead_ws].rfind('\n').map_or(0, |i| i + 1);
    let start = first.start + skip;
    let mut end = first.start + raw.trim_end().len();
    if matches!(last.kind, AtomKind::FenceLine { .. }) {
        end = keep_fence_line_tail(body, end, last.end);
    }
    if end <= start || body[start..end].trim().is_empty() {
        return None;
    }
    let mut content = String::with_capacity(end - start + 16);
    match &first.kind {
        AtomKind::FenceLine {
            open, first: false, ..
        } => {
            content.push_str(open);
            content.push('\n');
        }
        AtomKind::TableRow { header: Some(h) } => {
            content.push_str(h);
            content.push('\n');
        }
        _ => {}
    }
    content.push_str(&body[start..end]);
    if let AtomKind::FenceLine {
        close, last: false, ..
    } = &last.kind
    {
        content.push('\n');
        content.push_str(close);
    }
    let path_refs: Vec<&Vec<String>> = g.iter().map(|&i| &paths[i]).collect();
    let heading_path = common_prefix(&path_refs);
    let prefix = doc_prefix(title, &heading_path);
    let hash = chunk_hash(&prefix, &content);
    Some(Chunk {
        chunk_index: index,
        words: count_words(&content),
        prefix,
        heading_path,
        content,
        start: body_offset + start,
        end: body_offset + end,
        hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_of_the_indexed_text() {
        for (prefix, content) in [("[Doc: A › B]", "Body.\n\nMore."), ("", "x"), ("p", "")] {
            let whole = hex::encode(Sha256::digest(indexed_text(prefix, content).as_bytes()));
            assert_eq!(chunk_hash(prefix, content), whole, "{prefix:?} {content:?}");
        }
    }

    /// Found by the `text_pipeline` fuzz target (issue 14, item 8): form feeds, NULs and a
    /// backtick run whose "info string" holds backticks (so not a fence). Cutting the one long
    /// line between words left a chunk starting `\f…``````\0…`, which does read as an open
    /// fence. The exact input, as libFuzzer wrote it (the first byte is the options knob).
    #[test]
    fn fuzz_form_feed_fence_cut() {
        let data: &[u8] = b"\x00\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c\x0c``````\x00\x00\x00\x00\x00\x00\x00\x00\t``! !\t\x00\x0c\x0c\x0c!";
        let body = std::str::from_utf8(&data[1..]).unwrap();
        assert!(!crate::markdown::has_unclosed_fence(body));
        assert_no_chunk_opens_a_fence("fuzz", body, 0);
    }

    /// At every small size limit, no chunk of `body` ends inside a fence; but for the last
    /// one when `body` itself ends inside one (a fence left open runs to the end of the
    /// document, and so does its last chunk).
    fn assert_no_chunk_opens_a_fence(title: &str, body: &str, offset: usize) {
        let open_at_end = crate::markdown::has_unclosed_fence(body);
        for max in 1..8 {
            let opts = ChunkOptions {
                max_words: max,
                min_words: 0,
            };
            let chunks = chunk_markdown(title, body, offset, &opts);
            let n = chunks.len() - usize::from(open_at_end);
            for c in chunks.iter().take(n) {
                assert!(
                    !crate::markdown::has_unclosed_fence(&c.content),
                    "max {max}: {:?}",
                    c.content
                );
            }
        }
    }

    /// The second fuzz finding: vertical tabs before ```` ``` ```` lines. A fence marker behind
    /// anything but spaces and tabs is text for CommonMark and for the line-based fence rules.
    #[test]
    fn fuzz_vertical_tab_fence() {
        let data: &[u8] = b"\x00\x00\x00\t\x00\x00\x00\n---\n}5\x00\x00\n---\n}5\x00\t\n\x0b```\x00\n---\n}5\x00-\n}5\x00\x00\n---\n}5\x00\t\n\x0b`\x0b```\x0c\t\n\x0b```\x0c";
        let text = std::str::from_utf8(&data[1..]).unwrap();
        let doc = crate::frontmatter::parse_document(text, "fuzz").unwrap();
        assert_no_chunk_opens_a_fence(&doc.title, doc.body, doc.body_offset);
    }

    /// The third fuzz finding: a fenced block followed by text its atom owns (a link
    /// reference definition line); split line by line, the closing line went into a re-opened
    /// fence and read as a new opening (`` ```\n```\n``` ``).
    #[test]
    fn fuzz_fence_tail_after_close() {
        let data: &[u8] = b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x5cZ\x5c!~[^<<\xe2\x81\x83][^<<\xe2\x81\x83]:[\xe2\x81\x83]:~/\n```\nF\n\n\x00\x00\x00\x00`\n\n\n\n\n`\n\x00\n/\nF`\n```\n\n\n\n```\nF\n\n\n```\n[^<\xe2\x81\x83:\xe2\x81\x83]:~[^<\xe2\x81\x83]:[^\n\n```\nF\n\n\n```\n[<\xe2\x81\x83]:[";
        let text = std::str::from_utf8(&data[1..]).unwrap();
        let doc = crate::frontmatter::parse_document(text, "fuzz").unwrap();
        assert_no_chunk_opens_a_fence(&doc.title, doc.body, doc.body_offset);
    }

    /// The fourth fuzz finding: runs of two to four backticks among vertical tabs and control
    /// characters; with one word per chunk a chunk read `` ```\n````\n``` `` and ended inside a
    /// fence. `````\x0b`` closed the fence for the line rules (`trim()` after the marker) but
    /// not for pulldown-cmark, which allows only spaces there; and the chunk's own
    /// `trim_end()` cut the vertical tab, leaving a real closing line before the added close.
    #[test]
    fn fuzz_backtick_runs() {
        let data: &[u8] = b"\x00\x00\n. @\n\x00``@\n``\n``!\x1a``\n`\n`e\n\n``\x0b\x13\n`e\n``\n``@\n\x00``@\n``\n``!\x1a``\n`\n`e\n\n``\x0b\x13\n`e\n``e\n``\n`\n\n``\x0b\x13\n`e\n```\n``e\n``\n`\n\n`\x0b\x13\n`e\n````\x0b\n``e";
        let text = std::str::from_utf8(&data[1..]).unwrap();
        let doc = crate::frontmatter::parse_document(text, "fuzz").unwrap();
        // The last ```` ``` ```` opens a fence that `````\x0b`` does not close: pulldown-cmark
        // runs that code block to the end, and the line rules now agree.
        let last = crate::markdown::parse_blocks(doc.body).pop().unwrap();
        assert!(matches!(
            last.kind,
            crate::markdown::BlockKind::CodeBlock { fenced: true, .. }
        ));
        assert_eq!(last.end, doc.body.len());
        assert!(crate::markdown::has_unclosed_fence(doc.body));
        assert_no_chunk_opens_a_fence(&doc.title, doc.body, doc.body_offset);
    }

    /// The fourth finding reduced: a line of a longer marker run with whitespace after it
    /// that does not close the fence. Cut line by line, the chunk holding it must keep that
    /// whitespace, or the line reads as the fence's closer.
    #[test]
    fn a_fence_line_keeps_whitespace_that_leaves_the_fence_open() {
        for after in ["\x0b", "\x0c", "\t", " \t", "\u{a0}", "\x0b\r"] {
            for marker in ["```", "~~~"] {
                let long = marker.to_string() + &marker[..1];
                let body = format!("{marker}\nx\n{long}{after}\ny\n{marker}\n\nafter\n");
                assert!(!crate::markdown::has_unclosed_fence(&body), "{body:?}");
                assert_no_chunk_opens_a_fence("T", &body, 0);
                let chunks = chunk_markdown("T", &body, 0, &opts(1));
                let with_it = chunks
                    .iter()
                    .find(|c| c.content.contains(&long))
                    .unwrap_or_else(|| panic!("{body:?}: {chunks:?}"));
                assert!(
                    with_it.content.contains(after.trim_end_matches('\r')),
                    "{:?}",
                    with_it.content
                );
            }
        }
    }

    /// Issue 14: inputs that aborted `bib chunk`/`bib ingest` with a stack overflow, or chunked
    /// in super-linear time. All of the text must still land in the chunks, once.
    #[test]
    fn hostile_nesting_chunks_without_overflow() {
        let cases = [
            format!("# T\n\n{}x\n", "> - ".repeat(7000)),
            format!("# T\n\n{}x\n", "> - ".repeat(2000)),
            "- ".repeat(20000),
            format!("{}x\n", "1. ".repeat(5000)),
        ];
        for md in &cases {
            let chunks = chunk_markdown("T", md, 0, &ChunkOptions::default());
            assert!(!chunks.is_empty());
            let joined: String = chunks.iter().map(|c| &md[c.start..c.end]).collect();
            let non_ws = |s: &str| s.split_whitespace().collect::<String>();
            assert_eq!(non_ws(&joined), non_ws(md), "chunks lose or duplicate text");
            for w in chunks.windows(2) {
                assert!(w[0].end <= w[1].start);
            }
        }
    }

    fn opts(max: usize) -> ChunkOptions {
        ChunkOptions {
            max_words: max,
            min_words: 3,
        }
    }

    #[test]
    fn empty_body() {
        assert!(chunk_markdown("T", "", 0, &ChunkOptions::default()).is_empty());
        assert!(chunk_markdown("T", " \n\n ", 0, &ChunkOptions::default()).is_empty());
    }

    #[test]
    fn small_doc_is_one_chunk_with_prefix_and_hash() {
        let body = "# Guía\n\nTexto corto. Otra frase.\n";
        let c = chunk_markdown("Guía", body, 10, &ChunkOptions::default());
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].prefix, "[Doc: Guía]");
        assert_eq!(c[0].content, "# Guía\n\nTexto corto. Otra frase.");
        assert_eq!((c[0].start, c[0].end), (10, 10 + body.trim_end().len()));
        assert_eq!(c[0].hash, chunk_hash(&c[0].prefix, &c[0].content));
        assert_eq!(c[0].hash.len(), 64);
    }

    #[test]
    fn splits_at_headings_with_paths() {
        let body = "# Guía\n\nIntro uno dos tres cuatro.\n\n## Instalar\n\nPaso uno dos tres cuatro.\n\n### Windows\n\nUse el instalador ahora mismo.\n\n## Usar\n\nEjecute el comando ahora mismo.\n";
        let c = chunk_markdown("Guía", body, 0, &opts(400));
        let prefixes: Vec<&str> = c.iter().map(|c| c.prefix.as_str()).collect();
        assert_eq!(
            prefixes,
            [
                "[Doc: Guía]",
                "[Doc: Guía › Instalar]",
                "[Doc: Guía › Instalar › Windows]",
                "[Doc: Guía › Usar]"
            ]
        );
        assert_eq!(c[2].heading_path, ["Instalar", "Windows"]);
        let idx: Vec<usize> = c.iter().map(|c| c.chunk_index).collect();
        assert_eq!(idx, [0, 1, 2, 3]);
    }

    #[test]
    fn tiny_sections_merge() {
        let body = "## A\n\nuno\n\n## B\n\ndos tres cuatro cinco seis siete ocho nueve\n";
        let c = chunk_markdown(
            "T",
            body,
            0,
            &ChunkOptions {
                max_words: 100,
                min_words: 5,
            },
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].prefix, "[Doc: T]");
    }

    #[test]
    fn oversized_fence_is_refenced() {
        let mut body = String::from("Intro.\n\n```bash\n");
        for i in 0..30 {
            body.push_str(&format!("echo linea {i}\n"));
        }
        body.push_str("```\n\nFin.\n");
        let c = chunk_markdown("T", &body, 0, &opts(20));
        assert!(c.len() > 3, "{c:#?}");
        for ch in &c {
            let fences = ch.content.lines().filter(|l| l.starts_with("```")).count();
            assert_eq!(fences % 2, 0, "unbalanced fence in {:?}", ch.content);
            assert!(ch.words <= 20 + 2, "{}", ch.words);
        }
        assert!(c.iter().any(|ch| ch.content.starts_with("```bash\necho")));
    }

    #[test]
    fn fence_that_fits_is_not_split() {
        let body = "Texto uno dos.\n\n```\na b c d e f g h\n```\n\nMás texto aquí.";
        let c = chunk_markdown("T", body, 0, &opts(10));
        let with_fence: Vec<_> = c.iter().filter(|c| c.content.contains("```")).collect();
        assert_eq!(with_fence.len(), 1);
        assert!(with_fence[0].content.contains("```\na b c d e f g h\n```"));
    }

    #[test]
    fn oversized_table_repeats_header() {
        let mut body = String::from("| Col | Valor |\n|---|---|\n");
        for i in 0..20 {
            body.push_str(&format!("| fila {i} | valor {i} |\n"));
        }
        let c = chunk_markdown("T", &body, 0, &opts(30));
        assert!(c.len() > 1);
        for ch in &c {
            assert!(
                ch.content.starts_with("| Col | Valor |\n|---|---|"),
                "{}",
                ch.content
            );
        }
    }

    #[test]
    fn long_paragraph_splits_at_sentences() {
        let body = "Uno dos tres cuatro. Cinco seis siete ocho. Nueve diez once doce. Trece catorce quince dieciséis.";
        let c = chunk_markdown("T", body, 0, &opts(8));
        let contents: Vec<&str> = c.iter().map(|c| c.content.as_str()).collect();
        assert_eq!(
            contents,
            [
                "Uno dos tres cuatro. Cinco seis siete ocho.",
                "Nueve diez once doce. Trece catorce quince dieciséis."
            ]
        );
    }

    #[test]
    fn never_cuts_inside_a_line_starting_with_backticks() {
        // Found by the fuzzer: "```xm … `x`" is inline code (its info string has a backtick),
        // but a cut after "sources." would leave "```xm sources." alone, an unclosed fence.
        let body =
            "are not typed.\n\n```xm sources. See the `C:\\packages` folder now. More words.";
        for max in 1..8 {
            for c in chunk_markdown("T", body, 0, &opts(max)) {
                assert!(
                    !crate::markdown::has_unclosed_fence(&c.content),
                    "max {max}: {:?}",
                    c.content
                );
            }
        }
    }

    #[test]
    fn never_starts_a_piece_with_tildes() {
        // Fuzzer find: a word cut just before "~~~sections" made a chunk open a tilde fence.
        let body = "uno dos tres cuatro cinco: ~~~sections and keys seis siete ocho nueve";
        for max in 1..10 {
            for c in chunk_markdown("T", body, 0, &opts(max)) {
                assert!(
                    !crate::markdown::has_unclosed_fence(&c.content),
                    "max {max}: {:?}",
                    c.content
                );
            }
        }
    }

    #[test]
    fn prefix_brackets_are_balanced() {
        assert_eq!(doc_prefix("A [b]", &["C]".into()]), "[Doc: A (b) › C)]");
        assert_eq!(doc_prefix("", &[]), "[Doc: ]");
    }
}
