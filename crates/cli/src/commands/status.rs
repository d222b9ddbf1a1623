//! `bib status [--json]` — where the knowledge base is, its collections with document and
//! chunk counts, the embedding model, the term function of its lexical index, and the last
//! ingest run with its result.

use serde_json::json;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Knowledge base: a SQLite file or a postgres:// URL (else BIB_STORE, else `store` in
    /// bib.toml, else .bib/kb.sqlite).
    #[arg(long)]
    pub store: Option<String>,
    /// Print `{store, backend, model, terms, collections: [{name, documents, chunks}],
    /// last_run}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let store = crate::store_url::open_existing(args.store.as_deref())?;
    let collections = store.collections()?;
    let model = store
        .chunk_states()?
        .into_iter()
        .map(|s| s.model_id)
        .find(|m| !m.is_empty());
    let last = store.runs(1)?.into_iter().next();
    let terms = store.term_config();
    if args.json {
        let v = json!({
            "store": store.location(),
            "backend": store.backend(),
            "model": model,
            "terms": terms.as_ref().ok().map(bib_store::TermConfig::id),
            "collections": collections,
            "last_run": last.as_ref().map(|r| json!({
                "id": r.id,
                "status": r.status,
                "started_at": crate::commands::runs::iso_utc(r.started_at_ms),
                "collection": r.record.get("collection"),
                "root": r.record.get("root"),
                "failure": r.record.get("failure"),
            })),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("store: {} ({})", store.location(), store.backend());
    println!(
        "model: {}",
        model.as_deref().unwrap_or("none (no chunks yet)")
    );
    let default_terms = bib_store::TermConfig::default();
    match &terms {
        Ok(t) if *t == default_terms => println!("terms: {t}"),
        Ok(t) => println!(
            "terms: {t} (this bib indexes with {default_terms}; `bib ingest` reindexes, no re-embedding)"
        ),
        Err(e) => println!("terms: {e}"),
    }
    if collections.is_empty() {
        println!("collections: none");
    }
    for c in &collections {
        println!(
            "collection {}: {} documents, {} chunks",
            c.name, c.documents, c.chunks
        );
    }
    match &last {
        None => println!("last run: none"),
        Some(r) => {
            let what = r
                .record
                .get("collection")
                .and_then(|c| c.as_str())
                .unwrap_or("?");
            println!(
                "last run: #{} {} at {} (collection {what})",
                r.id,
                r.status,
                crate::commands::runs::iso_utc(r.started_at_ms)
            );
            if let Some(f) = r.record.get("failure").and_then(|f| f.as_str()) {
                println!("  failure: {f}");
            }
        }
    }
    Ok(())
}
