//! Markdown-aware chunker. OWNER: text helper. PLACEHOLDER: contract only.

/// Chunking options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkOptions {
    /// Maximum words per chunk (default 400).
    pub max_words: usize,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        Self { max_words: 400 }
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
    /// Hex content hash of `prefix` + `content`.
    pub hash: String,
}

impl Chunk {
    /// The text that gets indexed and embedded: prefix, newline, content.
    pub fn text(&self) -> String {
        format!("{}\n{}", self.prefix, self.content)
    }
}

/// Chunk a document body. `body_offset` is the byte offset of `body` in the source file, so
/// spans point into the file.
pub fn chunk_markdown(
    title: &str,
    body: &str,
    body_offset: usize,
    opts: &ChunkOptions,
) -> Vec<Chunk> {
    let _ = opts;
    if body.trim().is_empty() {
        return Vec::new();
    }
    vec![Chunk {
        chunk_index: 0,
        prefix: format!("[Doc: {title}]"),
        heading_path: Vec::new(),
        content: body.to_string(),
        start: body_offset,
        end: body_offset + body.len(),
        hash: String::new(),
    }]
}
