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
use bib_store::{ChunkId, DocumentChange, RunStatus, Store, StoreError};

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
    let existing = dst.documents().context("reading the target")?;
    if !existing.is_empty() {
        bail!(
            "the target {} already holds {} documents; migrate into an empty store (for \
             PostgreSQL, pick a new ?schema=name)",
            dst.location(),
            existing.len()
        );
    }
    let mut sum = Summary {
        from: src.location(),
        to: dst.location(),
        ..Summary::default()
    };

    // Documents, chunks and vectors.
    let mut old_ids: HashMap<ChunkId, (String, u32)> = HashMap::new();
    for doc in src.documents()? {
        let chunks = src.document_chunks(&doc.path)?;
        if chunks.len() as u32 != doc.chunk_count {
            bail!(
                "{}: the source is incoherent ({} chunks stored, {} expected); run `bib ingest` \
                 on it first",
                doc.path,
                chunks.len(),
                doc.chunk_count
            );
        }
        let ids: Vec<ChunkId> = chunks.iter().map(|c| c.id).collect();
        let vectors: HashMap<ChunkId, Vec<f32>> = src.get_vectors(&ids)?.into_iter().collect();
        let mut upserts = Vec::with_capacity(chunks.len());
        for c in &chunks {
            let Some(v) = vectors.get(&c.id) else {
                bail!(
                    "{}: chunk {} has no vector in the source",
                    doc.path,
                    c.chunk_index
                );
            };
            old_ids.insert(c.id, (doc.path.clone(), c.chunk_index));
            upserts.push(bib_store::ChunkWrite {
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
        dst.apply_document(&change)
            .with_context(|| format!("copying {}", doc.path))?;
        sum.documents += 1;
        sum.chunks += chunks.len() as u64;
    }

    // The translation of chunk ids for the query log.
    let mut new_ids: HashMap<(String, u32), ChunkId> = HashMap::new();
    for doc in dst.documents()? {
        for c in dst.document_chunks(&doc.path)? {
            new_ids.insert((doc.path.clone(), c.chunk_index), c.id);
        }
    }

    // Runs, oldest first, so ids keep their order.
    let mut runs = src.runs(usize::MAX)?;
    runs.reverse();
    for r in &runs {
        match &pg_target {
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

    // Query log, oldest first, chunk ids translated (entries for vanished chunks dropped).
    let mut queries = src.recent_queries(usize::MAX)?;
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
        dst.log_query(&q)?;
        sum.queries += 1;
    }

    if let Some(p) = &pg_target {
        p.ensure_hnsw_indexes()?;
    }
    let audit = dst.audit()?;
    if !audit.coherent || audit.documents != sum.documents || audit.chunks != sum.chunks {
        return Err(StoreError::Corrupt {
            what: dst.location(),
            reason: format!("the copy does not check out: {audit:?}"),
        })
        .context("verifying the target");
    }
    sum.seconds = t0.elapsed().as_secs_f64();
    if args.json {
        println!("{}", serde_json::to_string(&sum)?);
    } else {
        println!(
            "migrated {} documents, {} chunks, {} runs, {} logged queries from {} to {} in {:.1}s",
            sum.documents, sum.chunks, sum.runs, sum.queries, sum.from, sum.to, sum.seconds
        );
    }
    Ok(())
}
