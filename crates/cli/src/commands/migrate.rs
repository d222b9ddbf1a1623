//! `bib migrate --from SRC --to DST` — copy a knowledge base between stores (typically
//! `.bib/kb.sqlite` to `postgres://…`).
//!
//! Copies every document with all its chunks and vectors (one transaction per document, so
//! the target is never half a document), then the ingest runs and the query log (its chunk ids
//! translated to the target's ids through (path, chunk_index)). The target must be empty. The
//! content-keyed embedding cache is not copied: vectors of stored chunks travel with them.
//! Ends with an audit of the target and a count check.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{bail, Context};
use bib_store::{
    ChunkId, ChunkRecord, ChunkWrite, DocRecord, DocumentChange, RunStatus, Store, StoreError,
};
use bib_store_pg::PgStore;

use bib_app::StoreSpec;

use crate::settings::ConfigArg;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib migrate --to \"postgres://bib:bib@127.0.0.1:55432/bib?schema=kb\"
  bib migrate --from old/kb.sqlite --to copy.sqlite --json")]
pub struct Args {
    /// Source knowledge base: a file path or a postgres:// URL [default: the configured store]
    #[arg(long, value_name = "PATH|URL")]
    pub from: Option<String>,
    /// Target knowledge base: postgres://user:pw@host:port/db[?schema=name], or a file path
    #[arg(long, value_name = "PATH|URL")]
    pub to: String,
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print the summary as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Default, serde::Serialize)]
struct Summary {
    from: String,
    to: String,
    documents: u64,
    chunks: u64,
    runs: u64,
    queries: u64,
    seconds: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let settings = args.config.resolve(|_| ())?;
    let from = match &args.from {
        Some(f) => StoreSpec::parse(f),
        None => settings.store,
    };
    let to = StoreSpec::parse(&args.to);
    if !from.exists() {
        bail!("no knowledge base at {from} (--from)");
    }
    if from == to {
        bail!("--from and --to are the same store");
    }
    let src = from.open()?;
    // Keep the concrete PostgreSQL type: it can import runs with their original times.
    let pg_target = match &to {
        StoreSpec::Postgres(_) => Some(to.open_postgres()?),
        StoreSpec::Sqlite(_) => None,
    };
    let sqlite_target;
    let dst: &dyn Store = match &pg_target {
        Some(p) => p,
        None => {
            sqlite_target = to.open()?;
            sqlite_target.as_ref()
        }
    };
    check_target_is_empty(dst)?;
    let mut sum = Summary {
        from: src.location(),
        to: dst.location(),
        ..Summary::default()
    };
    let copy = Migration {
        src: src.as_ref(),
        dst,
        pg_target: pg_target.as_ref(),
    };

    // Documents, chunks and vectors, as the bulk load they are (PostgreSQL builds its vector
    // index once at the end instead of row by row).
    dst.set_bulk_writes(true);
    let copied = copy.copy_documents(&mut sum);
    dst.set_bulk_writes(false);
    let old_ids = copied?;
    // The translation of chunk ids for the query log (reading every chunk of the target back:
    // skipped when there is no log to translate).
    let new_ids = if src.recent_queries(1)?.is_empty() {
        HashMap::new()
    } else {
        copy.target_chunk_ids()?
    };
    copy.copy_runs(&mut sum)?;
    copy.copy_query_log(&old_ids, &new_ids, &mut sum)?;
    copy.verify_target(&sum)?;
    sum.seconds = t0.elapsed().as_secs_f64();
    print_summary(&sum, args.json)
}

/// Refuse a target that already holds documents: a migration only fills an empty store.
fn check_target_is_empty(dst: &dyn Store) -> anyhow::Result<()> {
    let existing = dst.documents().context("reading the target")?;
    if !existing.is_empty() {
        bail!(
            "the target {} already holds {} documents; migrate into an empty store (for \
             PostgreSQL, pick a new ?schema=name)",
            dst.location(),
            existing.len()
        );
    }
    Ok(())
}

/// The two stores of one migration. `pg_target` is the target again as its concrete
/// PostgreSQL type when it is one (it can import runs with their original times).
struct Migration<'a> {
    src: &'a dyn Store,
    dst: &'a dyn Store,
    pg_target: Option<&'a PgStore>,
}

impl Migration<'_> {
    /// Copy every document with its chunks and vectors, one store transaction per document
    /// (so the target is never half a document), counting them in `sum`. Returns each
    /// source chunk id's `(path, chunk_index)`, to translate the query log's ids.
    fn copy_documents(&self, sum: &mut Summary) -> anyhow::Result<HashMap<ChunkId, (String, u32)>> {
        let src = self.src;
        let mut old_ids: HashMap<ChunkId, (String, u32)> = HashMap::new();
        for doc in src.documents()? {
            let chunks = src.document_chunks(&doc.path)?;
            if chunks.len() as u32 != doc.chunk_count {
                bail!(
                    "{}: the source is incoherent ({} chunks stored, {} expected); run `bib \
                     ingest` on it first",
                    doc.path,
                    chunks.len(),
                    doc.chunk_count
                );
            }
            let upserts = self.chunk_writes_with_vectors(&doc, &chunks, &mut old_ids)?;
            let change = DocumentChange {
                path: doc.path.clone(),
                collection: doc.collection.clone(),
                title: doc.title.clone(),
                metadata: doc.metadata.clone(),
                content_hash: doc.content_hash.clone(),
                chunk_count: doc.chunk_count,
                upserts,
                source: src.document_source(&doc.path)?,
            };
            self.dst
                .apply_document(&change)
                .with_context(|| format!("copying {}", doc.path))?;
            sum.documents += 1;
            sum.chunks += chunks.len() as u64;
        }
        Ok(old_ids)
    }

    /// The source chunks of `doc` as writes for the target, each with its source vector (a
    /// chunk without one is an error: the target would answer without it). Records each
    /// chunk's `(path, chunk_index)` by its source id in `old_ids`.
    fn chunk_writes_with_vectors(
        &self,
        doc: &DocRecord,
        chunks: &[ChunkRecord],
        old_ids: &mut HashMap<ChunkId, (String, u32)>,
    ) -> anyhow::Result<Vec<ChunkWrite>> {
        let ids: Vec<ChunkId> = chunks.iter().map(|c| c.id).collect();
        let vectors: HashMap<ChunkId, Vec<f32>> = self.src.get_vectors(&ids)?.into_iter().collect();
        let mut upserts = Vec::with_capacity(chunks.len());
        for c in chunks {
            let Some(v) = vectors.get(&c.id) else {
                bail!(
                    "{}: chunk {} has no vector in the source",
                    doc.path,
                    c.chunk_index
                );
            };
            old_ids.insert(c.id, (doc.path.clone(), c.chunk_index));
            upserts.push(ChunkWrite {
                chunk_index: c.chunk_index,
                prefix: c.prefix.clone(),
                heading_path: c.heading_path.clone(),
                content: c.content.clone(),
                content_hash: c.content_hash.clone(),
                tokens_estimate: c.tokens_estimate,
                tokens_model: c.tokens_model,
                span_start: c.span_start,
                span_end: c.span_end,
                line_start: c.line_start,
                line_end: c.line_end,
                model_id: c.model_id.clone(),
                embedding: v.clone(),
            });
        }
        Ok(upserts)
    }

    /// Each target chunk's id by `(path, chunk_index)`, read back after the documents were
    /// copied (the target numbers its chunks itself).
    fn target_chunk_ids(&self) -> anyhow::Result<HashMap<(String, u32), ChunkId>> {
        let dst = self.dst;
        let mut new_ids: HashMap<(String, u32), ChunkId> = HashMap::new();
        for doc in dst.documents()? {
            for c in dst.document_chunks(&doc.path)? {
                new_ids.insert((doc.path.clone(), c.chunk_index), c.id);
            }
        }
        Ok(new_ids)
    }

    /// Copy the ingest runs, oldest first so ids keep their order: PostgreSQL imports them
    /// with their original times, other targets begin (and finish, unless still running)
    /// each anew.
    fn copy_runs(&self, sum: &mut Summary) -> anyhow::Result<()> {
        let dst = self.dst;
        // Runs, oldest first, so ids keep their order.
        let mut runs = self.src.runs(usize::MAX)?;
        runs.reverse();
        for r in &runs {
            match self.pg_target {
                Some(p) => {
                    p.import_run(r)?;
                }
                None => {
                    let id = dst.begin_run(&r.record)?;
                    if r.status != RunStatus::Running {
                        dst.finish_run(id, r.status, &r.record)?;
                    }
                }
            }
            sum.runs += 1;
        }
        Ok(())
    }

    /// Copy the query log, oldest first, with its chunk ids translated from source to target
    /// ids (`old_ids` then `new_ids`); ids of chunks that are gone are dropped with their
    /// scores.
    fn copy_query_log(
        &self,
        old_ids: &HashMap<ChunkId, (String, u32)>,
        new_ids: &HashMap<(String, u32), ChunkId>,
        sum: &mut Summary,
    ) -> anyhow::Result<()> {
        // Query log, oldest first, chunk ids translated (entries for vanished chunks dropped).
        let mut queries = self.src.recent_queries(usize::MAX)?;
        queries.reverse();
        for mut q in queries {
            let mut ids = Vec::with_capacity(q.chunk_ids.len());
            let mut scores = Vec::with_capacity(q.scores.len());
            for (i, old) in q.chunk_ids.iter().enumerate() {
                if let Some(new) = old_ids.get(old).and_then(|k| new_ids.get(k)) {
                    ids.push(*new);
                    if let Some(s) = q.scores.get(i) {
                        scores.push(*s);
                    }
                }
            }
            q.chunk_ids = ids;
            q.scores = scores;
            self.dst.log_query(&q)?;
            sum.queries += 1;
        }
        Ok(())
    }

    /// Finish the bulk load (PostgreSQL builds its vector indexes and vacuums the postings),
    /// then audit the target: it must be coherent and hold exactly the documents and chunks
    /// copied.
    fn verify_target(&self, sum: &Summary) -> anyhow::Result<()> {
        let dst = self.dst;
        dst.optimize()
            .context("building the target's indexes after the copy")?;
        let audit = dst.audit()?;
        if !audit.coherent || audit.documents != sum.documents || audit.chunks != sum.chunks {
            return Err(StoreError::Corrupt {
                what: dst.location(),
                reason: format!("the copy does not check out: {audit:?}"),
                source: None,
            })
            .context("verifying the target");
        }
        Ok(())
    }
}

/// Print the summary: one JSON object with `--json`, else one line.
fn print_summary(sum: &Summary, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(sum)?);
    } else {
        println!(
            "migrated {} documents, {} chunks, {} runs, {} logged queries from {} to {} in {:.1}s",
            sum.documents, sum.chunks, sum.runs, sum.queries, sum.from, sum.to, sum.seconds
        );
    }
    Ok(())
}
