//! `bib ingest <dir>` — register, chunk, embed and index a Markdown wiki (phases A/B/C).
//!
//! Thin: opens the store and its embedding model (`--model`: installed, or `openai:<name>`), runs `bib_ingest::ingest` (or
//! `watch`), draws progress bars when stderr is a terminal, and prints a summary or, with
//! `--json`, the run record. Exits non-zero when the run failed.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bib_app::Settings;
use bib_ingest::{IngestOptions, Progress, RunReport};
use bib_store::RunStatus;

use crate::progress::Bars;
use crate::settings::SettingsArgs;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib ingest ~/wikis/kb-en                      into collection kb-en of .bib/kb.sqlite
  bib ingest notes --collection team-notes --exclude drafts/
  bib ingest ~/wikis/kb-en --watch              ingest again after every saved change
  bib ingest docs --store postgres://bib@127.0.0.1/bib?schema=kb --json
  BIB_EMBED_BASE_URL=http://localhost:11434 bib ingest notes --model openai:nomic-embed-text

A run that would remove more than half of its collection's documents (and more than 5)
refuses and changes nothing; --allow-prune confirms it. A folder with no Markdown file is an
error (exit 1), so a typo in the path does not look like an empty wiki.")]
pub struct Args {
    /// Directory of Markdown files (the wiki root).
    pub dir: PathBuf,
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Print the run record as JSON
    #[arg(long)]
    pub json: bool,
    /// Keep running and ingest again whenever a document changes (until interrupted)
    #[arg(long)]
    pub watch: bool,
    /// Skip (and report) files larger than this many bytes
    #[arg(long, value_name = "BYTES")]
    pub max_file_bytes: Option<u64>,
    /// Chunks embedded before their documents are committed (smaller loses less work to a
    /// crash)
    #[arg(long, value_name = "N")]
    pub window_chunks: Option<usize>,
    /// With --watch: milliseconds of quiet after a change before the next run
    #[arg(long, value_name = "MS")]
    pub debounce_ms: Option<u64>,
    /// Do not embed chunk sentences ahead of time (ingest is faster; `bib ask --trim` then
    /// embeds the sentences of its chunks on first use)
    #[arg(long)]
    pub no_sentence_vectors: bool,
    /// Collection to ingest into. A run only prunes documents of its own collection, so
    /// several directories can share one knowledge base [default: the directory's name]
    #[arg(long, value_name = "NAME")]
    pub collection: Option<String>,
    /// Confirm a run that removes more than half of its collection's documents (and more than
    /// 5); without it such a run refuses and changes nothing
    #[arg(long)]
    pub allow_prune: bool,
    /// Leave out files and directories matching this gitignore-style pattern (`drafts/`,
    /// `*.tmp.md`); repeatable. `.gitignore` and `.bibignore` files always apply
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Embedding model: `use-m3` or `e5-small` (installed; see `bib model list`), or
    /// `openai:<name>`, model <name> of the OpenAI-compatible endpoint of `[embed] base_url`
    /// (BIB_EMBED_BASE_URL). A knowledge base keeps the model it was built with unless this is
    /// given [default: the knowledge base's model, else use-m3]
    #[arg(long, value_name = "ID")]
    pub model: Option<String>,
    /// Term function of the lexical index: `default`, `v1` (before issue 15: prefix stems, no
    /// folding, no stop words), `v2`, or a list such as `stem=snowball,fold=1,stop=1`. A
    /// knowledge base built with another one is reindexed first (no re-embedding).
    #[arg(long, value_name = "SPEC", default_value = "default")]
    pub terms: String,
}

/// This run's flags over the `[ingest]` settings.
fn apply_flags(a: &Args, s: &mut Settings) {
    let i = &mut s.ingest;
    if a.model.is_some() {
        i.model = a.model.clone();
    }
    i.max_file_bytes = a.max_file_bytes.unwrap_or(i.max_file_bytes);
    i.window_chunks = a.window_chunks.unwrap_or(i.window_chunks);
    i.debounce_ms = a.debounce_ms.unwrap_or(i.debounce_ms);
    if a.no_sentence_vectors {
        i.sentence_vectors = false;
    }
    if !a.exclude.is_empty() {
        i.exclude = a.exclude.clone();
    }
}

/// One-paragraph human summary of a run. `warnings_shown`: each warning was already printed
/// on this terminal as it happened, so the summary counts them instead of listing them again.
pub fn summary(r: &RunReport, warnings_shown: bool) -> String {
    let mut s = format!(
        "ingest #{} (collection {}) {} in {:.2} s: {}/{} documents registered",
        r.id,
        r.collection,
        r.status,
        r.duration_ms as f64 / 1000.0,
        r.phase_a.registered,
        r.phase_a.files
    );
    if let Some(b) = &r.phase_b {
        s.push_str(&format!(
            "\n  chunks {}: created {}, updated {}, skipped {}, pruned {}, errors {}; \
             documents written {}, unchanged {}, removed {}",
            b.chunks_total,
            b.chunks_created,
            b.chunks_updated,
            b.chunks_skipped,
            b.chunks_pruned,
            b.errors,
            b.documents_written,
            b.documents_unchanged,
            b.documents_removed
        ));
        s.push_str(&format!(
            "\n  embedded {} chunks ({} tokens, {} batches, {} vectors reused) in {:.2} s = {:.0}% of the run; {:.1} chunks/s",
            b.chunks_embedded,
            b.tokens_embedded,
            b.batches,
            b.vectors_reused,
            b.embed_ms as f64 / 1000.0,
            r.embed_fraction * 100.0,
            r.chunks_per_sec
        ));
        if b.sentences_embedded + b.sentences_reused > 0 || b.sentence_warning.is_some() {
            s.push_str(&format!(
                "\n  sentence vectors for trimming: {} embedded in {:.2} s, {} already known",
                b.sentences_embedded,
                b.sentence_embed_ms as f64 / 1000.0,
                b.sentences_reused
            ));
        }
        if let Some(w) = &b.sentence_warning {
            s.push_str(&format!("\n  warning: {w}"));
        }
        s.push_str(&format!("\n  prune: {}", b.prune));
    }
    if let Some(c) = &r.phase_c {
        s.push_str(&format!(
            "\n  audit: {} ({} documents, {} chunks, {} vectors, {} lexical entries)",
            if c.coherent { "coherent" } else { "INCOHERENT" },
            c.audit.documents,
            c.audit.chunks,
            c.audit.vectors,
            c.audit.lexical_entries
        ));
    }
    if let Some(g) = &r.git_commit {
        s.push_str(&format!("\n  git commit {g}"));
    }
    if !r.warnings.is_empty() && warnings_shown {
        s.push_str(&format!(
            "\n  {} warnings (printed above)",
            r.warnings.len()
        ));
    } else if !r.warnings.is_empty() {
        s.push_str(&format!("\n  {} warnings:", r.warnings.len()));
        for w in &r.warnings {
            s.push_str(&format!("\n    {}: {}", w.path, w.reason));
        }
    }
    if !r.errors.is_empty() {
        s.push_str(&format!("\n  {} problems:", r.errors.len()));
        for e in &r.errors {
            s.push_str(&format!("\n    [{}] {}: {}", e.phase, e.path, e.reason));
        }
    }
    if let Some(f) = &r.failure {
        s.push_str(&format!("\n  FAILED: {f}"));
    }
    s
}

fn print(r: &RunReport, json: bool, bars: &Bars) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        // Warnings went to stderr as they happened; list them again only when the summary is
        // read somewhere else (stdout redirected to a file or a pipe).
        let shown = bars.enabled() && std::io::stdout().is_terminal();
        println!("{}", summary(r, shown));
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !args.dir.is_dir() {
        anyhow::bail!("cannot ingest {}: not a directory", args.dir.display());
    }
    let settings = args.settings.resolve(|s| apply_flags(&args, s))?;
    let store = settings.store.open()?;
    let store = store.as_ref();
    let model = match &settings.ingest.model {
        // A width asked for in [embed] becomes part of a new build's model id.
        Some(m) => bib_app::model::requested_model(m, &settings.embed),
        None => bib_app::model::store_model(store)?,
    };
    // The one loader: it names the known models for an unknown id, says how to install a
    // missing one, what to set for an endpoint model, and fails here — naming the URL — when
    // the endpoint does not answer, before the run touches the store.
    let embedder = bib_app::model::load_embedder(&model, &settings.embed)?;
    let embedder = embedder.as_ref();
    let opts = IngestOptions {
        collection: args.collection.clone(),
        allow_prune: args.allow_prune,
        terms: args.terms.parse()?,
        ..settings.ingest.options()
    };
    let bars = Bars::for_stderr(args.json);
    let progress: &dyn Progress = &bars;
    if args.watch {
        let stop = AtomicBool::new(false);
        let mut on_run = |r: &RunReport| {
            if let Err(e) = print(r, args.json, &bars) {
                eprintln!("bib ingest --watch: {e}");
            }
        };
        if !args.json {
            eprintln!(
                "watching {} (Ctrl-C to stop; stopping mid-run is safe)",
                args.dir.display()
            );
        }
        bib_ingest::watch(
            &args.dir,
            store,
            embedder,
            &opts,
            progress,
            bib_ingest::WatchOptions {
                debounce: Duration::from_millis(settings.ingest.debounce_ms),
                stop: &stop,
            },
            &mut on_run,
        )?;
        return Ok(());
    }
    let report = bib_ingest::ingest(&args.dir, store, embedder, &opts, progress)?;
    print(&report, args.json, &bars)?;
    if report.status != RunStatus::Completed {
        anyhow::bail!(
            "ingest failed: {}",
            report.failure.as_deref().unwrap_or("see the run record")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bib_ingest::{FileIssue, Phase};

    #[test]
    fn warnings_are_listed_unless_the_terminal_already_showed_them() {
        let r = RunReport {
            warnings: vec![FileIssue {
                path: "guides/long.md".into(),
                phase: Phase::B,
                reason: "chunk 3 has 1200 tokens".into(),
            }],
            ..RunReport::default()
        };
        let listed = summary(&r, false);
        assert!(
            listed.contains("1 warnings:\n    guides/long.md: chunk 3 has 1200 tokens"),
            "{listed}"
        );
        let counted = summary(&r, true);
        assert!(counted.contains("1 warnings (printed above)"), "{counted}");
        assert!(!counted.contains("guides/long.md"), "{counted}");
    }
}
