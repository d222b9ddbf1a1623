//! `bib rm --collection NAME` — remove one collection (its documents, chunks and postings) in
//! one transaction; other collections are untouched.

use anyhow::bail;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The collection to remove (see `bib ingest --collection`; `api` holds documents
    /// registered over MCP/HTTP).
    #[arg(long, required = true)]
    pub collection: String,
    /// Knowledge base: a SQLite file or a postgres:// URL (else BIB_STORE, else `store` in
    /// bib.toml, else .bib/kb.sqlite).
    #[arg(long)]
    pub store: Option<String>,
    /// Print `{collection, documents, chunks}` removed as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let store = crate::store_url::open_existing(args.store.as_deref())?;
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
