//! Markdown block structure with byte spans, on top of pulldown-cmark.
//!
//! [`parse_blocks`] returns the document's top-level blocks (headings, paragraphs, lists,
//! tables, code blocks, blockquotes, HTML, rules), each with its byte span in the input and its
//! children (list items, the blocks inside an item or a blockquote, table rows). Heading text is
//! plain text: inline HTML such as `<a name="x"></a>` is dropped. DocFX alert blockquotes
//! (`> [!Note]`, any case) carry the alert name. Tables, footnotes, strikethrough and task lists
//! (GFM) are enabled; everything else is CommonMark, so ```` ``` ```` and `~~~` fences (also
//! indented inside list items) are recognised and a line that merely starts with inline code
//! does not open a fence.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// What a block is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BlockKind {
    /// ATX or setext heading; `text` is plain text without inline HTML or markup.
    Heading {
        level: u8,
        text: String,
    },
    Paragraph,
    /// A list; `ordered` when numbered. Its children are [`BlockKind::ListItem`]s.
    List {
        ordered: bool,
    },
    ListItem,
    Table,
    /// A table row (the header row included); children of [`BlockKind::Table`].
    TableRow {
        header: bool,
    },
    /// A code block; `fenced` for ```` ``` ````/`~~~`, else indented. `info` is the info string.
    CodeBlock {
        fenced: bool,
        info: String,
    },
    /// A blockquote; `alert` is the DocFX/GFM alert name (`Note`, `TIP`, …) when it opens with one.
    BlockQuote {
        alert: Option<String>,
    },
    Html,
    Rule,
    FootnoteDefinition,
    /// Anything else pulldown-cmark reports as a block (definition lists, metadata, math).
    Other,
}

/// A block with its byte span `[start, end)` in the parsed text and its child blocks.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Block {
    #[serde(flatten)]
    pub kind: BlockKind,
    pub start: usize,
    pub end: usize,
    pub children: Vec<Block>,
}

impl Block {
    /// The block's source text.
    pub fn text<'a>(&self, source: &'a str) -> &'a str {
        source.get(self.start..self.end).unwrap_or("")
    }
}

fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
}

/// The DocFX alert name of a blockquote whose first line is `> [!Name]`.
fn alert_of(src: &str) -> Option<String> {
    let first = src.lines().next()?.trim_start();
    let rest = first.strip_prefix('>')?.trim_start();
    let rest = rest.strip_prefix("[!")?;
    let end = rest.find(']')?;
    let name = &rest[..end];
    (!name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '-' || c == '_'))
    .then(|| name.to_string())
}

/// Deepest block nesting [`parse_blocks`] reports. Blocks nested deeper (`> - > - …` thousands
/// of levels, which no real document has) are not tracked as blocks of their own: their text
/// stays inside the span of their ancestor at this depth. This keeps every walk over the tree
/// (the chunker recurses into children) bounded in stack and linear in time.
pub const MAX_BLOCK_DEPTH: usize = 32;

/// Parse `text` into top-level blocks with nested children, at most [`MAX_BLOCK_DEPTH`] deep.
pub fn parse_blocks(text: &str) -> Vec<Block> {
    let mut tree = BlockTreeBuilder::default();
    for (ev, range) in Parser::new_ext(text, options()).into_offset_iter() {
        match ev {
            Event::Start(tag) => tree.open_block(&tag, range, text),
            Event::End(tag) => tree.close_block(tag, range),
            Event::Text(t) | Event::Code(t) => tree.append_to_heading_text(&t),
            Event::SoftBreak | Event::HardBreak => tree.append_to_heading_text(" "),
            Event::Rule => tree.attach_to_innermost_open_block(Block {
                kind: BlockKind::Rule,
                start: range.start,
                end: range.end,
                children: Vec::new(),
            }),
            // Inline HTML inside headings (anchors) is dropped; HTML blocks are tracked above.
            _ => {}
        }
    }
    tree.finish()
}

/// The block tree under construction while [`parse_blocks`] walks pulldown-cmark's events: the
/// finished top-level blocks, the blocks still open, and the text of the heading being read.
#[derive(Default)]
struct BlockTreeBuilder {
    top: Vec<Block>,
    // Open container/leaf blocks; `None` marks an inline tag or a too-deep block we do not track.
    stack: Vec<Option<Block>>,
    // How many entries of `stack` are tracked blocks.
    depth: usize,
    heading_text: Option<String>,
}

impl BlockTreeBuilder {
    /// A start tag: opens a tracked block when the tag is a block and the tree is not yet
    /// [`MAX_BLOCK_DEPTH`] deep, else an untracked `None` entry, so that every end tag still
    /// pops exactly one entry of the stack.
    fn open_block(&mut self, tag: &Tag<'_>, range: Range<usize>, text: &str) {
        if self.depth >= MAX_BLOCK_DEPTH {
            self.stack.push(None);
            return;
        }
        let kind = self.block_kind_of_start_tag(tag, text, &range);
        self.depth += usize::from(kind.is_some());
        self.stack.push(kind.map(|kind| Block {
            kind,
            start: range.start,
            end: range.end,
            children: Vec::new(),
        }));
    }

    /// The kind of block a start tag opens, or `None` for inline tags. A heading also starts
    /// collecting its plain text (see [`BlockTreeBuilder::append_to_heading_text`]); a
    /// blockquote reads its alert name from its source text.
    fn block_kind_of_start_tag(
        &mut self,
        tag: &Tag<'_>,
        text: &str,
        range: &Range<usize>,
    ) -> Option<BlockKind> {
        match tag {
            Tag::Heading { level, .. } => {
                self.heading_text = Some(String::new());
                Some(BlockKind::Heading {
                    level: *level as u8,
                    text: String::new(),
                })
            }
            Tag::Paragraph => Some(BlockKind::Paragraph),
            Tag::List(first) => Some(BlockKind::List {
                ordered: first.is_some(),
            }),
            Tag::Item => Some(BlockKind::ListItem),
            Tag::Table(_) => Some(BlockKind::Table),
            Tag::TableHead => Some(BlockKind::TableRow { header: true }),
            Tag::TableRow => Some(BlockKind::TableRow { header: false }),
            Tag::CodeBlock(k) => Some(match k {
                CodeBlockKind::Fenced(info) => BlockKind::CodeBlock {
                    fenced: true,
                    info: info.to_string(),
                },
                CodeBlockKind::Indented => BlockKind::CodeBlock {
                    fenced: false,
                    info: String::new(),
                },
            }),
            Tag::BlockQuote(_) => Some(BlockKind::BlockQuote {
                alert: alert_of(text.get(range.clone()).unwrap_or("")),
            }),
            Tag::HtmlBlock => Some(BlockKind::Html),
            Tag::FootnoteDefinition(_) => Some(BlockKind::FootnoteDefinition),
            Tag::DefinitionList | Tag::MetadataBlock(_) => Some(BlockKind::Other),
            _ => None,
        }
    }

    /// An end tag: pops the matching entry and, when it is a tracked block, fixes its end,
    /// gives a heading its normalised plain text, and attaches it to its parent.
    fn close_block(&mut self, tag: TagEnd, range: Range<usize>) {
        let Some(entry) = self.stack.pop() else {
            return;
        };
        let Some(mut b) = entry else { return };
        self.depth -= 1;
        b.end = range.end.max(b.start);
        if let (TagEnd::Heading(_), BlockKind::Heading { text: t, .. }) = (tag, &mut b.kind) {
            *t = normalize_space(&self.heading_text.take().unwrap_or_default());
        }
        self.attach_to_innermost_open_block(b);
    }

    /// Inline text (or a line break, as a space) inside the heading being read, if any.
    fn append_to_heading_text(&mut self, text: &str) {
        if let Some(h) = self.heading_text.as_mut() {
            h.push_str(text);
        }
    }

    /// A finished block becomes a child of the innermost tracked open block, or a top-level
    /// block when none is open.
    fn attach_to_innermost_open_block(&mut self, b: Block) {
        match self.stack.iter_mut().rev().find_map(|x| x.as_mut()) {
            Some(parent) => parent.children.push(b),
            None => self.top.push(b),
        }
    }

    /// The top-level blocks, after closing whatever is still open.
    fn finish(mut self) -> Vec<Block> {
        // Unbalanced input cannot happen with pulldown-cmark, but never lose a block.
        while let Some(entry) = self.stack.pop() {
            if let Some(b) = entry {
                self.attach_to_innermost_open_block(b);
            }
        }
        self.top
    }
}

fn normalize_space(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Plain text of an ATX heading line (`## <a name="x"></a>Uso ##` → `Uso`), or `None` when the
/// line is not an ATX heading. Cheap line-level helper for callers that do not need a full parse.
pub fn atx_heading(line: &str) -> Option<(u8, String)> {
    let s = line.trim_start_matches(' ');
    if line.len() - s.len() > 3 {
        return None;
    }
    let level = s.bytes().take_while(|&b| b == b'#').count();
    if level == 0 || level > 6 {
        return None;
    }
    let rest = &s[level..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t', '\r']) {
        return None;
    }
    let rest = rest.trim();
    // Closing sequence of #s.
    let rest = rest.trim_end_matches('#');
    let rest = if rest.ends_with([' ', '\t']) || rest.is_empty() {
        rest.trim_end()
    } else {
        rest
    };
    Some((level as u8, normalize_space(&strip_inline_html(rest))))
}

/// Remove inline HTML tags (`<a name="x"></a>`, `<br/>`) from a line of text.
pub fn strip_inline_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        let after = &rest[lt + 1..];
        let is_tag = after
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '/' || c == '!');
        match (is_tag, after.find('>')) {
            (true, Some(gt)) => rest = &after[gt + 1..],
            _ => {
                out.push('<');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether `text` ends inside a fenced code block that was opened and never closed (line-based,
/// the same fence rules the sentence splitter uses). Chunks must never end this way.
pub fn has_unclosed_fence(text: &str) -> bool {
    let mut fence = None;
    for line in text.split('\n') {
        match fence {
            Some(f) => {
                if crate::sentences::fence_close(line, f) {
                    fence = None;
                }
            }
            None => fence = crate::sentences::fence_open(line),
        }
    }
    fence.is_some()
}

/// The first level-1 heading's plain text, if any.
pub fn first_h1(text: &str) -> Option<String> {
    fn find(blocks: &[Block]) -> Option<String> {
        blocks.iter().find_map(|b| match &b.kind {
            BlockKind::Heading { level: 1, text } if !text.is_empty() => Some(text.clone()),
            _ => None,
        })
    }
    find(&parse_blocks(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<String> {
        parse_blocks(src)
            .iter()
            .map(|b| match &b.kind {
                BlockKind::Heading { level, text } => format!("h{level}:{text}"),
                BlockKind::CodeBlock { fenced, info } => format!("code({fenced},{info})"),
                BlockKind::BlockQuote { alert } => {
                    format!("quote({})", alert.clone().unwrap_or_default())
                }
                BlockKind::List { ordered } => format!("list({ordered})/{}", b.children.len()),
                BlockKind::Table => format!("table/{}", b.children.len()),
                k => format!("{k:?}").to_lowercase(),
            })
            .collect()
    }

    #[test]
    fn headings_strip_anchors() {
        assert_eq!(
            kinds("## <a name=\"usage\"></a>Uso\n\nTexto.\n\n# Título `code` *x*\n"),
            ["h2:Uso", "paragraph", "h1:Título code x"]
        );
        assert_eq!(
            atx_heading("## <a name=\"x\"></a>Uso ##"),
            Some((2, "Uso".into()))
        );
        assert_eq!(atx_heading("#hashtag"), None);
        assert_eq!(
            first_h1("texto\n\n# Primero\n# Segundo"),
            Some("Primero".into())
        );
        assert_eq!(first_h1("Título\n======\n"), Some("Título".into()));
    }

    #[test]
    fn fences_and_alerts() {
        let md = "- Paso:\n\n  ```bash\n  dotnet restore\n  ```\n\n~~~\nx\n~~~\n\n```nuget``` no es bloque.\n\n> [!Note]\n> Nota.\n\n> cita\n";
        assert_eq!(
            kinds(md),
            [
                "list(false)/1",
                "code(true,)",
                "paragraph",
                "quote(Note)",
                "quote()"
            ]
        );
        let blocks = parse_blocks(md);
        // The fence inside the list item is a child of the item.
        let item = &blocks[0].children[0];
        assert!(item
            .children
            .iter()
            .any(|b| matches!(b.kind, BlockKind::CodeBlock { fenced: true, .. })));
    }

    #[test]
    fn spans_point_into_source() {
        let md = "# A\r\n\r\n| a | b |\r\n|---|---|\r\n| 1 | 2 |\r\n";
        let blocks = parse_blocks(md);
        assert_eq!(blocks[0].text(md).trim_end(), "# A");
        assert!(matches!(blocks[1].kind, BlockKind::Table));
        assert_eq!(blocks[1].children.len(), 2);
        assert!(blocks[1].text(md).starts_with("| a | b |"));
    }

    #[test]
    fn unclosed_fences() {
        assert!(!has_unclosed_fence("a\n```\nx\n```\nb"));
        assert!(has_unclosed_fence("a\n~~~\nx\n"));
        assert!(!has_unclosed_fence("```x``` inline only"));
        assert!(has_unclosed_fence("````\n```\n"));
    }

    /// What may follow a closing fence's marker: the line rules (`fence_close`, behind
    /// `has_unclosed_fence`, the chunker and the include scanner) must agree with pulldown-cmark,
    /// which the chunker's blocks come from. Only spaces (then the line ending) close; a tab,
    /// vertical tab, form feed or no-break space leaves the fence open (the fourth fuzz
    /// finding was `````\x0b``, closed by `trim()` in the line rules only).
    #[test]
    fn what_follows_a_closing_fence_agrees_with_pulldown() {
        for (after, closes) in [
            ("", true),
            (" ", true),
            ("   ", true),
            ("\r", true),
            ("  \r", true),
            ("\t", false),
            (" \t", false),
            ("\x0b", false),
            ("\x0c", false),
            ("\u{a0}", false),
            ("\u{2003}", false),
            ("x", false),
        ] {
            for marker in ["```", "````", "~~~"] {
                let md = format!("{marker}\ncode\n{marker}{after}\n\nafter\n");
                let by_parser = matches!(
                    parse_blocks(&md).last().map(|b| &b.kind),
                    Some(BlockKind::Paragraph)
                );
                assert_eq!(by_parser, closes, "pulldown-cmark on {md:?}");
                assert_eq!(!has_unclosed_fence(&md), closes, "line rules on {md:?}");
            }
        }
    }

    fn tree_depth(blocks: &[Block]) -> usize {
        // Iterative, so the test itself cannot overflow on a broken tree.
        let mut max = 0;
        let mut todo: Vec<(&Block, usize)> = blocks.iter().map(|b| (b, 1)).collect();
        while let Some((b, d)) = todo.pop() {
            max = max.max(d);
            todo.extend(b.children.iter().map(|c| (c, d + 1)));
        }
        max
    }

    #[test]
    fn nesting_is_capped() {
        // Issue 14: `'> - ' * 7000` overflowed the stack of every walk over the tree.
        let md = format!("# T\n\n{}x\n", "> - ".repeat(7000));
        let blocks = parse_blocks(&md);
        assert_eq!(tree_depth(&blocks), MAX_BLOCK_DEPTH);
        // The deepest tracked block still spans the text below it.
        assert_eq!(blocks.last().map(|b| b.end), Some(md.len()));
        let shallow = "> - a\n>   - b\n";
        assert_eq!(tree_depth(&parse_blocks(shallow)), 5);
    }

    #[test]
    fn strip_html() {
        assert_eq!(strip_inline_html("a <b>x</b> 1 < 2"), "a x 1 < 2");
    }
}
