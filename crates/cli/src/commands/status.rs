//! `bib status [--json]` — where the knowledge base is, its collections with document and
//! chunk counts, the embedding model, and the last ingest run with its result.

use serde_json::json;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib status
  bib status --json --store postgres://bib@127.0.0.1/bib?schema=kb")]
pub struct Args {
    #[command(flatten)]
    pub settings: crate::settings::SettingsArgs,
    /// Print `{store, backend, model, collections: [{name, documents, chunks}], last_run}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let store = args.settings.resolve(|_| ())?.store.open_existing()?;
    let collections = store.collections()?;
    let model = store.embedding_model()?;
    let last = store.runs(1)?.into_iter().next();
    if args.json {
        let v = json!({
            "store": store.location(),
            "backend": store.backend(),
            "model": model,
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
