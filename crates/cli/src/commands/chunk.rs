//! `bib chunk FILE` — print the chunks of one Markdown file (inspection tool, stable output).
//!
//! The front-matter is parsed (its `title`, else the first H1, else the file stem, names the
//! document in the `[Doc: …]` prefix); spans are byte offsets into FILE. `--json` prints an
//! array of objects with `chunk_index`, `prefix`, `heading_path`, `content`, `start`, `end`,
//! `words` and `hash`.

use std::path::PathBuf;

use anyhow::Context;
use bib_text::chunk::{chunk_markdown, ChunkOptions};
use bib_text::frontmatter::parse_document;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib chunk wiki/getting-started.md
  bib chunk wiki/getting-started.md --json --max-words 120")]
pub struct Args {
    /// The Markdown file.
    file: PathBuf,
    /// Print a JSON array of chunk objects.
    #[arg(long)]
    json: bool,
    /// Maximum words per chunk.
    #[arg(long, default_value_t = ChunkOptions::default().max_words)]
    max_words: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let path = &args.file;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let source = String::from_utf8(bytes)
        .with_context(|| format!("{} is not valid UTF-8", path.display()))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let doc = parse_document(&source, &stem).with_context(|| format!("{}", path.display()))?;
    let opts = ChunkOptions {
        max_words: args.max_words,
        ..ChunkOptions::default()
    };
    let chunks = chunk_markdown(&doc.title, doc.body, doc.body_offset, &opts);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&chunks)?);
    } else {
        for c in &chunks {
            println!(
                "--- chunk {} [{}..{}] {} words, hash {}",
                c.chunk_index,
                c.start,
                c.end,
                c.words,
                &c.hash[..c.hash.len().min(12)]
            );
            println!("{}", c.prefix);
            println!("{}", c.content);
        }
    }
    Ok(())
}
