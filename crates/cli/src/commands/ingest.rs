//! `bib ingest <dir>` — register, chunk, embed and index a Markdown wiki (phases A/B/C).
//!
//! Thin: opens the store and the default embedding model, runs `bib_ingest::ingest` (or
//! `watch`), draws progress bars when stderr is a terminal, and prints a summary or, with
//! `--json`, the run record. Exits non-zero when the run failed.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use bib_ingest::{IngestOptions, NoProgress, Progress, RunReport};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory of Markdown files (the wiki root).
    pub dir: PathBuf,
    /// Knowledge base: a SQLite file or a postgres:// URL (else BIB_STORE, else `store` in
    /// bib.toml, else .bib/kb.sqlite).
    #[arg(long)]
    pub store: Option<String>,
    /// Print the run record as JSON.
    #[arg(long)]
    pub json: bool,
    /// Keep running and re-ingest whenever files change (until interrupted).
    #[arg(long)]
    pub watch: bool,
    /// Skip (and report) files larger than this many bytes.
    #[arg(long, default_value_t = 10 * 1024 * 1024)]
    pub max_file_bytes: u64,
    /// Chunks embedded before their documents are committed (smaller = less work lost to a crash).
    #[arg(long, default_value_t = 256)]
    pub window_chunks: usize,
    /// Watch mode: wait this long after the last change before re-ingesting.
    #[arg(long, default_value_t = 500)]
    pub debounce_ms: u64,
    /// Do not embed chunk sentences ahead of time (ingest is faster; `bib ask --trim` then
    /// embeds the sentences of its chunks on first use).
    #[arg(long)]
    pub no_sentence_vectors: bool,
    /// Collection to ingest into (default: the directory's name). A run only prunes documents
    /// of its own collection, so several directories can share one knowledge base.
    #[arg(long)]
    pub collection: Option<String>,
    /// Confirm a run that removes more than half of its collection's documents (and more than
    /// 5); without it such a run refuses and changes nothing.
    #[arg(long)]
    pub allow_prune: bool,
    /// Leave out files and directories matching this gitignore-style pattern (`drafts/`,
    /// `*.tmp.md`); repeatable. `.gitignore` and `.bibignore` files are always honoured.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Term function of the lexical index: `default`, `v1` (before issue 15: prefix stems, no
    /// folding, no stop words), `v2`, or a list such as `stem=snowball,fold=1,stop=1`. A
    /// knowledge base built with another one is reindexed first (no re-embedding).
    #[arg(long, value_name = "SPEC", default_value = "default")]
    pub terms: String,
}

/// indicatif bars, one per phase.
struct Bars {
    bar: Mutex<Option<ProgressBar>>,
}

impl Progress for Bars {
    fn start(&self, phase: &str, total: u64) {
        let b = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(
            "{prefix:>9} [{bar:40}] {pos}/{len} {elapsed_precise} eta {eta}",
        ) {
            b.set_style(style.progress_chars("=> "));
        }
        b.set_prefix(phase.to_string());
        *self.bar.lock().unwrap_or_else(|p| p.into_inner()) = Some(b);
    }
    fn advance(&self, n: u64) {
        if let Some(b) = self.bar.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            b.inc(n);
        }
    }
    fn finish(&self) {
        if let Some(b) = self.bar.lock().unwrap_or_else(|p| p.into_inner()).take() {
            b.finish_and_clear();
        }
    }
}

/// One-paragraph human summary of a run.
pub fn summary(r: &RunReport) -> String {
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
        s.push_str(&format!("\n  wiki commit {g}"));
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

fn print(r: &RunReport, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        println!("{}", summary(r));
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !args.dir.is_dir() {
        anyhow::bail!("cannot ingest {}: not a directory", args.dir.display());
    }
    let spec = crate::store_url::resolve(args.store.as_deref(), None)?;
    let store = crate::store_url::open(&spec)
        .with_context(|| format!("opening the knowledge base {spec}"))?;
    let store = store.as_ref();
    let embedder =
        bib_embed::UseM3::load_default().context("loading the default embedding model")?;
    let opts = IngestOptions {
        max_file_bytes: args.max_file_bytes,
        window_chunks: args.window_chunks.max(1),
        sentence_vectors: !args.no_sentence_vectors,
        collection: args.collection.clone(),
        allow_prune: args.allow_prune,
        scan: bib_ingest::scan::ScanOptions {
            excludes: args.exclude.clone(),
        },
        terms: args.terms.parse()?,
        ..IngestOptions::default()
    };
    let bars = Bars {
        bar: Mutex::new(None),
    };
    let progress: &dyn Progress = if !args.json && std::io::stderr().is_terminal() {
        &bars
    } else {
        &NoProgress
    };
    if args.watch {
        let stop = AtomicBool::new(false);
        let mut on_run = |r: &RunReport| {
            if let Err(e) = print(r, args.json) {
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
            &embedder,
            &opts,
            progress,
            Duration::from_millis(args.debounce_ms),
            &stop,
            &mut on_run,
        )?;
        return Ok(());
    }
    let report = bib_ingest::ingest(&args.dir, store, &embedder, &opts, progress)?;
    print(&report, args.json)?;
    if report.status != "completed" {
        anyhow::bail!(
            "ingest failed: {}",
            report.failure.as_deref().unwrap_or("see the run record")
        );
    }
    Ok(())
}
