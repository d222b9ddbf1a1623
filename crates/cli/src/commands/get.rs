//! `bib get PATH[:FROM[-TO]]` — print a document of the knowledge base, or some of its lines,
//! exactly as it was ingested (front-matter included), so `bib get` of a citation `path:12-30`
//! prints the lines the result cited. The lookup is `bib_store::read::get_lines`, the one MCP
//! `bib_get` and HTTP `GET /docs/{path}` use.

use std::io::Write;

use bib_store::read::{get_lines, LineRange};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib get guides/restore.md              the whole document
  bib get guides/restore.md:12-30        lines 12 to 30 (what a result citing path:12-30 cites)
  bib get guides/restore.md:12           line 12 only
  bib get guides/restore.md:12-          from line 12 to the end
  bib get guides/restore.md --json       {node_id, path, collection, title, line_start, line_end, total_lines, content}

Lines are 1-based and inclusive, counted in the file as it was ingested, front-matter
included: the numbers `bib ask` prints. An unknown path names the closest stored paths; a
range outside the document says how many lines it has.")]
pub struct Args {
    /// The document's path in the knowledge base, optionally with a line range.
    #[arg(value_name = "PATH[:FROM[-TO]]")]
    pub spec: String,
    /// Only look in this collection.
    #[arg(long, value_name = "NAME")]
    pub collection: Option<String>,
    #[command(flatten)]
    pub settings: crate::settings::SettingsArgs,
    /// Print one JSON object (the lines in `content`) instead of the text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let store = args.settings.resolve(|_| ())?.store.open_existing()?;
    let (path, range) = LineRange::split_spec(&args.spec);
    let excerpt = get_lines(store.as_ref(), path, args.collection.as_deref(), range)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &excerpt)?;
        writeln!(out)?;
    } else {
        out.write_all(excerpt.content.as_bytes())?;
        if !excerpt.content.is_empty() && !excerpt.content.ends_with('\n') {
            writeln!(out)?;
        }
    }
    Ok(())
}
