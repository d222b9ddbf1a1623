//! `bib rm --collection NAME` — remove one collection (its documents, chunks and postings) in
//! one transaction; other collections are untouched.

use anyhow::bail;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib rm --collection notes
  bib rm --collection api --json      documents registered over MCP/HTTP")]
pub struct Args {
    /// The collection to remove (see `bib ingest --collection`; `api` holds documents
    /// registered over MCP/HTTP).
    #[arg(long, required = true)]
    pub collection: String,
    #[command(flatten)]
    pub settings: crate::settings::SettingsArgs,
    /// Print `{collection, documents, chunks}` removed as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let store = args.settings.resolve(|_| ())?.store.open_existing()?;
    let known = store.collections()?;
    if !known.iter().any(|c| c.name == args.collection) {
        let names: Vec<&str> = known.iter().map(|c| c.name.as_str()).collect();
        bail!(
            "no collection `{}` in {} (collections: {})",
            args.collection,
            store.location(),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
    }
    let (docs, chunks) = store.remove_collection(&args.collection)?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({"collection": args.collection, "documents": docs, "chunks": chunks})
        );
    } else {
        println!(
            "removed collection {}: {docs} documents, {chunks} chunks",
            args.collection
        );
    }
    Ok(())
}
