//! `bib embed` — texts in, vectors out: one text per line (or JSONL with a `text` field) on
//! stdin or `--input`, one JSON line `{"text_index": i, "vector": [...]}` per text on stdout,
//! with an installed model or an `openai:<name>` endpoint model (`bib_app::model::load_embedder`,
//! the loader every command uses; the endpoint from `[embed]` of bib.toml and the environment).
//!
//! Input is read and embedded in batches, so memory stays bounded whatever the input's size,
//! and each batch is written as soon as it is embedded.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context};
use bib_embed::{EmbedKind, Embedder};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSONL when the first non-blank line is a JSON object with a string `text`, else lines.
    Auto,
    /// One text per line.
    Lines,
    /// One JSON object per line; its `text` field is embedded.
    Jsonl,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  printf 'how do I sign a package?\\nrestore from a local feed\\n' | bib embed
  bib embed --model e5-small --query < questions.txt > vectors.jsonl
  bib embed --input passages.jsonl --format jsonl | head -1

Each output line is {\"text_index\": i, \"vector\": [...]}: i counts the input's lines from 0
(blank lines are skipped but counted, so i is always the line the text came from). Vectors
are unit length. `--query` embeds questions (e5-small's `query: ` prefix; use-m3 embeds both
kinds alike); without it texts are embedded as passages, as ingest embeds chunks.")]
pub struct Args {
    /// Embedding model: use-m3 or e5-small (installed with `bib model install NAME`), or
    /// openai:<name> of the endpoint BIB_EMBED_BASE_URL
    #[arg(long, default_value = bib_embed::DEFAULT_MODEL)]
    model: String,
    /// Embed the texts as questions instead of passages
    #[arg(long)]
    query: bool,
    /// Read texts from this file instead of stdin
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Input format
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    format: Format,
    /// Texts embedded per call to the model
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    batch: u32,
}

/// One text of the input: the line it came from and its text.
struct Text {
    index: usize,
    text: String,
}

/// Parse one non-blank input line (`number` is 1-based, for errors).
fn text_of(line: &str, format: Format, number: usize) -> anyhow::Result<String> {
    match format {
        Format::Lines | Format::Auto => Ok(line.to_string()),
        Format::Jsonl => {
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("input line {number}: not a JSON object"))?;
            match v.get("text") {
                Some(serde_json::Value::String(t)) => Ok(t.clone()),
                Some(_) => bail!("input line {number}: `text` is not a string"),
                None => bail!("input line {number}: no `text` field"),
            }
        }
    }
}

/// Whether `line` reads as a JSONL record (an object with a string `text`).
fn looks_like_jsonl(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .is_some_and(|v| v.get("text").is_some_and(serde_json::Value::is_string))
}

/// One output line.
#[derive(serde::Serialize)]
struct Line<'a> {
    text_index: usize,
    vector: &'a [f32],
}

fn write_batch(
    out: &mut impl Write,
    embedder: &dyn Embedder,
    kind: EmbedKind,
    batch: &[Text],
) -> anyhow::Result<()> {
    let texts: Vec<&str> = batch.iter().map(|t| t.text.as_str()).collect();
    let vectors = embedder
        .embed(&texts, kind)
        .with_context(|| format!("embedding input lines {}..", batch[0].index + 1))?;
    if vectors.len() != texts.len() {
        bail!(
            "the model returned {} vectors for {} texts",
            vectors.len(),
            texts.len()
        );
    }
    for (t, vector) in batch.iter().zip(&vectors) {
        // f32 as f32 (shortest round-trip text), not widened to f64 digits.
        let line = Line {
            text_index: t.index,
            vector,
        };
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // No `--config` flag here (its `--model` is not `ingest.model`): the endpoint of an
    // `openai:` model comes from BIB_CONFIG or ./bib.toml and the environment.
    let settings = crate::settings::ConfigArg { config: None }.resolve(|_| ())?;
    let model = bib_app::model::requested_model(&args.model, &settings.embed);
    let embedder = bib_app::model::load_embedder(&model, &settings.embed)
        .with_context(|| format!("loading the embedding model `{}`", args.model))?;
    let kind = if args.query {
        EmbedKind::Query
    } else {
        EmbedKind::Passage
    };
    let input: Box<dyn Read> = match &args.input {
        Some(p) => Box::new(
            std::fs::File::open(p).with_context(|| format!("cannot open {}", p.display()))?,
        ),
        None => Box::new(std::io::stdin().lock()),
    };
    let bars = crate::progress::Bars::for_stderr(false);
    bars.begin_open("embed", "texts");
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut format = args.format;
    let mut batch: Vec<Text> = Vec::with_capacity(args.batch as usize);
    for (index, line) in BufReader::new(input).lines().enumerate() {
        let line = line.with_context(|| format!("reading input line {}", index + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        if format == Format::Auto {
            format = if looks_like_jsonl(&line) {
                Format::Jsonl
            } else {
                Format::Lines
            };
        }
        batch.push(Text {
            index,
            text: text_of(&line, format, index + 1)?,
        });
        if batch.len() == args.batch as usize {
            write_batch(&mut out, embedder.as_ref(), kind, &batch)?;
            bars.inc(batch.len() as u64);
            batch.clear();
        }
    }
    if !batch.is_empty() {
        write_batch(&mut out, embedder.as_ref(), kind, &batch)?;
        bars.inc(batch.len() as u64);
    }
    bars.end();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_lines_are_read_by_format_and_errors_name_the_line() {
        assert!(looks_like_jsonl(r#"{"text": "a", "id": 3}"#));
        assert!(!looks_like_jsonl(r#"{"title": "a"}"#));
        assert!(!looks_like_jsonl("{not json"));
        assert!(!looks_like_jsonl("plain text"));
        assert_eq!(
            text_of(r#"{"text": "hola"}"#, Format::Jsonl, 1).unwrap(),
            "hola"
        );
        assert_eq!(text_of("{x", Format::Lines, 1).unwrap(), "{x");
        let e = text_of(r#"{"text": 5}"#, Format::Jsonl, 7).unwrap_err();
        assert_eq!(e.to_string(), "input line 7: `text` is not a string");
        let e = text_of("nope", Format::Jsonl, 2).unwrap_err();
        assert!(e.to_string().starts_with("input line 2:"), "{e}");
    }
}
