//! `bib status [--json]` — where the knowledge base is, its collections with document and
//! chunk counts, the embedding model, the term function of its lexical index, the products
//! this CPU runs local models with, and the last ingest run with its result. The report is
//! `bib_store::read::status`, the same one MCP `bib_status` returns.

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib status
  bib status --json --store postgres://bib@127.0.0.1/bib?schema=kb")]
pub struct Args {
    #[command(flatten)]
    pub settings: crate::settings::SettingsArgs,
    /// Print `{store, backend, model, terms, collections: [{name, documents, chunks}], last_run}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let store = args.settings.resolve(|_| ())?.store.open_existing()?;
    let st = bib_store::read::status(store.as_ref())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&st)?);
        return Ok(());
    }
    println!("store: {} ({})", st.store, st.backend);
    println!(
        "model: {}",
        st.model.as_deref().unwrap_or("none (no chunks yet)")
    );
    // What this CPU runs a local model's products with (the same vectors on every kernel;
    // f32 differs by cosine ≥ 0.9998).
    println!(
        "cpu: {} products for local models",
        bib_embed::qgemm::Products::default()
    );
    let default_terms = bib_store::TermConfig::default();
    match store.term_config() {
        Ok(t) if t == default_terms => println!("terms: {t}"),
        Ok(t) => println!(
            "terms: {t} (this bib indexes with {default_terms}; `bib ingest` reindexes, no re-embedding)"
        ),
        Err(e) => println!("terms: {e}"),
    }
    if st.collections.is_empty() {
        println!("collections: none");
    }
    for c in &st.collections {
        println!(
            "collection {}: {} documents, {} chunks",
            c.name, c.documents, c.chunks
        );
    }
    match &st.last_run {
        None => println!("last run: none"),
        Some(r) => {
            println!(
                "last run: #{} {} at {} (collection {})",
                r.id,
                r.status,
                r.started_at,
                r.collection.as_deref().unwrap_or("?")
            );
            if let Some(f) = &r.failure {
                println!("  failure: {f}");
            }
        }
    }
    Ok(())
}
