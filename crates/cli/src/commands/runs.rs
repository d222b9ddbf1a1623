//! `bib runs` — list past ingest runs (the audit record), newest first.

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib runs
  bib runs --limit 1 --json")]
pub struct Args {
    #[command(flatten)]
    pub settings: crate::settings::SettingsArgs,
    /// Print the run records as a JSON array
    #[arg(long)]
    pub json: bool,
    /// How many runs to list
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}

pub use bib_store::read::iso_utc;

pub fn run(args: Args) -> anyhow::Result<()> {
    let store = args.settings.resolve(|_| ())?.store.open_existing()?;
    let runs = store.runs(args.limit)?;
    if args.json {
        let arr: Vec<serde_json::Value> = runs
            .iter()
            .map(|r| {
                let mut v = r.record.clone();
                if let Some(o) = v.as_object_mut() {
                    o.insert("id".into(), r.id.into());
                    o.insert("status".into(), r.status.as_str().into());
                    o.insert("finished_at_ms".into(), r.finished_at_ms.into());
                }
                v
            })
            .collect();
        println!("{}", serde_json::to_string(&arr)?);
        return Ok(());
    }
    if runs.is_empty() {
        println!("no ingest runs recorded in {}", store.location());
        return Ok(());
    }
    println!(
        "{:>4}  {:<11}  {:<20}  {:>8}  {:>9}  {:>7} {:>7} {:>7} {:>7} {:>6}  {:>8}  commit",
        "id",
        "status",
        "started (UTC)",
        "secs",
        "docs",
        "created",
        "updated",
        "skipped",
        "pruned",
        "errors",
        "embedded"
    );
    for r in &runs {
        let rec = &r.record;
        let get = |a: &str, b: &str| rec[a][b].as_u64().unwrap_or(0);
        let secs = rec["duration_ms"]
            .as_u64()
            .map_or_else(|| "-".to_string(), |d| format!("{:.2}", d as f64 / 1000.0));
        let errors = rec["errors"].as_array().map_or(0, Vec::len);
        println!(
            "{:>4}  {:<11}  {:<20}  {:>8}  {:>9}  {:>7} {:>7} {:>7} {:>7} {:>6}  {:>8}  {}",
            r.id,
            r.status,
            iso_utc(r.started_at_ms),
            secs,
            format!(
                "{}/{}",
                get("phase_a", "registered"),
                get("phase_a", "files")
            ),
            get("phase_b", "chunks_created"),
            get("phase_b", "chunks_updated"),
            get("phase_b", "chunks_skipped"),
            get("phase_b", "chunks_pruned"),
            errors,
            get("phase_b", "chunks_embedded"),
            rec["git_commit"]
                .as_str()
                .map_or("-", |c| &c[..c.len().min(10)]),
        );
    }
    Ok(())
}
