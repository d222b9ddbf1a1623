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

/// `YYYY-MM-DDTHH:MM:SSZ` for unix milliseconds (UTC, proleptic Gregorian).
pub fn iso_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

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
                    o.insert("status".into(), r.status.clone().into());
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

#[cfg(test)]
mod tests {
    use super::iso_utc;

    #[test]
    fn iso_dates() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(iso_utc(1_795_000_000_123), "2026-11-18T11:06:40Z");
    }
}
