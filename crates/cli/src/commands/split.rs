//! `bib split` — split Markdown read from stdin into sentences (inspection tool, stable output).
//!
//! Plain output: one sentence per line, in order (a multi-line unit such as a code fence has its
//! line breaks shown as spaces). `--json`: a JSON array of the exact sentence strings.

use std::io::Read;

use anyhow::Context;
use bib_text::sentences::{split_prose, split_sentences};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib split < guide.md
  printf 'Dr. Smith arrived. He sat down.' | bib split --prose --json")]
pub struct Args {
    /// Print a JSON array of strings instead of one sentence per line.
    #[arg(long)]
    json: bool,
    /// Treat the input as plain prose (no Markdown structure; newlines are soft wraps).
    #[arg(long)]
    prose: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .context("reading stdin (it must be UTF-8 text)")?;
    let spans = if args.prose {
        split_prose(&input)
    } else {
        split_sentences(&input)
    };
    let sentences: Vec<&str> = spans.iter().map(|s| s.text(&input)).collect();
    if args.json {
        println!("{}", serde_json::to_string(&sentences)?);
    } else {
        for s in sentences {
            let one_line: String = s
                .split('\n')
                .map(|l| l.strip_suffix('\r').unwrap_or(l))
                .collect::<Vec<_>>()
                .join(" ");
            println!("{one_line}");
        }
    }
    Ok(())
}
