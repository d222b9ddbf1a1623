//! The three phases of one ingest run.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Instant;

use bib_embed::{store_key, EmbedKind, Embedder};
use bib_store::rows::now_ms;
use bib_store::{DocRecord, RunStatus, Store, VectorsByHash};
use bib_text::sentences::chunk_sentences;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::scan::{scan_with, FoundFile};
use crate::writer::DocumentWriter;
use crate::{
    FileIssue, IngestError, IngestOptions, Phase, PhaseA, PhaseC, Progress, RunReport, Unit,
};

/// A registered document (Phase A output).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedDoc {
    pub path: String,
    pub title: String,
    pub metadata: Value,
    /// The text the chunker reads: the file with its `[!INCLUDE]`s expanded (front-matter
    /// included).
    pub text: String,
    /// The file as written (BOM dropped): what `content_hash` hashes, what citations count
    /// lines in, and what the store keeps for `bib get`.
    pub source: String,
    /// Byte offset of the body within `text`.
    pub body_offset: usize,
    /// SHA-256 of the source text.
    pub content_hash: String,
}

pub(crate) fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

pub(crate) fn ms(d: std::time::Duration) -> u64 {
    d.as_millis() as u64
}

/// Read and parse one file. The error is a human-readable reason (the caller adds the path).
pub fn read_document(root: &Path, file: &FoundFile, max_bytes: u64) -> Result<ParsedDoc, String> {
    let meta = std::fs::metadata(&file.abs).map_err(|e| format!("cannot stat: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".to_string());
    }
    if meta.len() > max_bytes {
        return Err(format!(
            "file is {} bytes, over the limit of {} bytes (--max-file-bytes)",
            meta.len(),
            max_bytes
        ));
    }
    let bytes = std::fs::read(&file.abs).map_err(|e| format!("cannot read: {e}"))?;
    let mut doc = parse_text(&file.path, decode_markdown(bytes)?)?;
    doc.text = resolve_includes(root, file, doc.text, doc.body_offset, max_bytes)?;
    Ok(doc)
}

/// A document's text as a [`ParsedDoc`] stored under `path` (already normalized), however it
/// arrived — read from a file or registered over MCP/HTTP — so both get the same title,
/// metadata, hash and chunks. The title: front-matter `title`, else the first H1, else the
/// file stem. The hash is of the text as written, so an edit to an included file alone is not
/// seen as a change of the document (the chunk hashes still are). `[!INCLUDE]`s are not
/// expanded here (only a file on disk has a folder to resolve them in). The error is a
/// human-readable reason.
pub fn parse_text(path: &str, text: String) -> Result<ParsedDoc, String> {
    let stem = path.rsplit('/').next().unwrap_or(path);
    let stem = stem.rsplit_once('.').map_or(stem, |(s, _)| s);
    let doc = bib_text::frontmatter::parse_document(&text, stem)
        .map_err(|e| format!("broken front-matter: {e}"))?;
    let metadata = if doc.has_front_matter {
        Value::Object(doc.metadata)
    } else {
        Value::Null
    };
    let (title, body_offset) = (doc.title, doc.body_offset);
    Ok(ParsedDoc {
        path: path.to_string(),
        title,
        metadata,
        content_hash: sha256_hex(&text),
        body_offset,
        source: text.clone(),
        text,
    })
}

/// The bytes of a Markdown file as text: no NUL byte in its first 8 KiB (a binary file), valid
/// UTF-8, the BOM dropped. The same checks for a document and for every file it includes.
fn decode_markdown(bytes: Vec<u8>) -> Result<String, String> {
    let head = &bytes[..bytes.len().min(8192)];
    if let Some(pos) = head.iter().position(|&b| b == 0) {
        return Err(format!(
            "binary file (NUL byte at offset {pos}), not Markdown"
        ));
    }
    let mut text = String::from_utf8(bytes).map_err(|e| {
        format!(
            "not valid UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })?;
    if text.starts_with('\u{feff}') {
        text.drain(..3);
    }
    Ok(text)
}

/// Expand DocFX `[!INCLUDE [..](path)]` directives in the body, reading the targets relative to
/// the including file and never outside `root`. Chunk spans of a document with includes refer
/// to the expanded text. The expansion of one document is bounded: at most
/// `IncludeLimits::default().max_includes` includes and `max_bytes` (`--max-file-bytes`) of
/// expanded text; only regular files are read (a FIFO would block the run forever).
fn resolve_includes(
    root: &Path,
    file: &FoundFile,
    text: String,
    body_offset: usize,
    max_bytes: u64,
) -> Result<String, String> {
    use bib_text::frontmatter::IncludeLimits;
    let body = &text[body_offset..];
    if bib_text::frontmatter::find_includes(body).is_empty() {
        return Ok(text);
    }
    let root = root
        .canonicalize()
        .map_err(|e| format!("cannot resolve the root {}: {e}", root.display()))?;
    let current = file
        .abs
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", file.abs.display()))?;
    let current = current.to_string_lossy().replace('\\', "/");
    let mut loader = |path: &str, max: usize| load_include(&root, Path::new(path), max);
    let limits = IncludeLimits {
        max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
        ..IncludeLimits::default()
    };
    let expanded = bib_text::frontmatter::resolve_includes(body, &current, &mut loader, &limits)
        .map_err(|e| e.to_string())?;
    Ok(format!("{}{}", &text[..body_offset], expanded))
}

/// Read one included file for [`resolve_includes`]. `path` is absolute and lexically
/// normalised. A target outside `root` gets one answer whether it exists or not, so an include
/// cannot probe the file system; inside the root, only a regular file of at most `max` bytes is
/// read, with the checks of a document ([`decode_markdown`]).
fn load_include(root: &Path, path: &Path, max: usize) -> Result<String, String> {
    use std::io::Read;
    const OUTSIDE: &str = "outside the ingested directory";
    if !path.starts_with(root) {
        return Err(OUTSIDE.to_string());
    }
    let real = path
        .canonicalize()
        .map_err(|e| format!("cannot open: {e}"))?;
    if !real.starts_with(root) {
        return Err(OUTSIDE.to_string());
    }
    let meta = std::fs::metadata(&real).map_err(|e| format!("cannot stat: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".to_string());
    }
    let limit = u64::try_from(max).unwrap_or(u64::MAX);
    if meta.len() > limit {
        return Err(format!(
            "file is {} bytes, over the {limit} bytes left in the document's budget \
             (--max-file-bytes)",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&real)
        .and_then(|f| f.take(limit.saturating_add(1)).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "file grew past the {limit} bytes left in the document's budget"
        ));
    }
    decode_markdown(bytes)
}

fn git_commit(root: &Path) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// What [`embed_sentence_vectors`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SentenceVectors {
    /// Sentences embedded and stored.
    pub embedded: u64,
    /// Sentences the cache already held.
    pub reused: u64,
    /// Time spent in the model.
    pub embed_ms: u64,
    /// The last failure, if any (best effort: the rest went on).
    pub warning: Option<String>,
}

/// Embed the sentences of chunk `texts` (as `ChunkWrite::text` builds them: prefix, newline,
/// content) that the store's vector cache does not hold yet, under the key trimming looks them
/// up by ([`bib_embed::store_key`]; the split is `bib_text::sentences::chunk_sentences`, the
/// one trimming uses). Misses go to the model in padded-token batches, shortest first. Best
/// effort: a failure is reported in `warning` and only costs latency at ask time.
pub fn embed_sentence_vectors(
    store: &dyn VectorsByHash,
    embedder: &dyn Embedder,
    texts: &[String],
    opts: &IngestOptions,
) -> SentenceVectors {
    let mut out = SentenceVectors::default();
    let model = embedder.model_id().to_string();
    let mut keys: Vec<String> = Vec::new();
    let mut sentences: Vec<&str> = Vec::new();
    let mut seen = HashSet::new();
    for t in texts {
        let (offset, spans) = chunk_sentences(t);
        let body = &t[offset..];
        for s in spans {
            let text = s.text(body);
            let key = store_key(text, EmbedKind::Passage);
            if seen.insert(key.clone()) {
                keys.push(key);
                sentences.push(text);
            }
        }
    }
    if keys.is_empty() {
        return out;
    }
    let known: HashSet<String> = match store.cached_vectors(&model, &keys) {
        Ok(v) => v.into_iter().map(|(k, _)| k).collect(),
        Err(e) => {
            out.warning = Some(format!(
                "reading sentence vectors: {}",
                bib_store::error_chain(&e)
            ));
            return out;
        }
    };
    let tokenizer = embedder.tokenizer();
    let cap = embedder.max_input_tokens().max(1);
    // The misses and their padded token counts (split_batches orders them shortest first).
    let todo: Vec<usize> = (0..keys.len())
        .filter(|&i| !known.contains(&keys[i]))
        .collect();
    out.reused = (keys.len() - todo.len()) as u64;
    let padded: Vec<usize> = todo
        .iter()
        .map(|&i| tokenizer.count_tokens(sentences[i]).min(cap) + 2)
        .collect();
    let plan = bib_embed::split_batches(
        &padded,
        opts.batch_token_budget,
        opts.sentence_batch_max.max(1),
    );
    for batch in &plan.batches {
        let idx: Vec<usize> = batch.iter().map(|&j| todo[j]).collect();
        let batch_texts: Vec<&str> = idx.iter().map(|&i| sentences[i]).collect();
        let t = Instant::now();
        let res = embedder.embed(&batch_texts, EmbedKind::Passage);
        out.embed_ms += ms(t.elapsed());
        match res {
            Ok(vectors) if vectors.len() == batch_texts.len() => {
                let items: Vec<(String, Vec<f32>)> =
                    idx.iter().map(|&i| keys[i].clone()).zip(vectors).collect();
                match store.cache_vectors(&model, &items) {
                    Ok(()) => out.embedded += items.len() as u64,
                    Err(e) => {
                        out.warning = Some(format!(
                            "storing sentence vectors: {}",
                            bib_store::error_chain(&e)
                        ))
                    }
                }
            }
            Ok(v) => {
                out.warning = Some(format!(
                    "model returned {} vectors for {} sentences",
                    v.len(),
                    batch_texts.len()
                ));
            }
            Err(e) => {
                out.warning = Some(format!(
                    "embedding sentences: {}",
                    bib_store::error_chain(&e)
                ))
            }
        }
    }
    out
}

/// One ingest run's fixed inputs, shared by its phases.
struct Run<'a> {
    root: &'a Path,
    /// `root` as the run record and messages show it.
    root_shown: String,
    store: &'a dyn Store,
    embedder: &'a dyn Embedder,
    opts: &'a IngestOptions,
    progress: &'a dyn Progress,
    collection: String,
}

/// What Phase A hands on.
struct Registered {
    /// The documents read, in scan order.
    docs: Vec<ParsedDoc>,
    issues: Vec<FileIssue>,
    /// Every stored document as the run started (all collections).
    stored_docs: Vec<DocRecord>,
    /// Paths of this collection's stored documents no longer in the folder.
    vanished: Vec<String>,
    /// Why the run stops after Phase A (a guard failed).
    failure: Option<String>,
}

/// What Phase B hands on.
struct Indexed {
    docs: Vec<ParsedDoc>,
    written: HashMap<String, crate::Written>,
    /// Why the run failed (the index guard), if it did.
    failure: Option<String>,
    embed_ms: u64,
    /// Chunks created or updated.
    wrote: u64,
}

/// Bulk writes switched on for the life of the value (an ingest run, whatever way it ends).
struct BulkWrites<'s>(&'s dyn Store);

impl<'s> BulkWrites<'s> {
    fn begin(store: &'s dyn Store) -> Self {
        store.set_bulk_writes(true);
        Self(store)
    }
}

impl Drop for BulkWrites<'_> {
    fn drop(&mut self) {
        self.0.set_bulk_writes(false);
    }
}

/// Run one ingest of `root` into `store`. Returns the run record (also stored in the store);
/// `Err` only when the run could not happen at all (missing root, store unusable).
///
/// Phases: A registers the folder's documents ([`phase_a`], with its guards), B writes them
/// and prunes vanished ones ([`phase_b`]), C audits the store against what was written
/// ([`phase_c`]).
pub fn ingest(
    root: &Path,
    store: &dyn Store,
    embedder: &dyn Embedder,
    opts: &IngestOptions,
    progress: &dyn Progress,
) -> Result<RunReport, IngestError> {
    let t0 = Instant::now();
    let root_shown = root.display().to_string();
    if !root.is_dir() {
        return Err(IngestError::Root {
            path: root_shown,
            reason: "not a directory".into(),
            source: None,
        });
    }
    let collection = opts
        .collection
        .clone()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| bib_store::collection_for_root(&root_shown));
    check_model(store, embedder.model_id(), &collection)?;
    let _bulk = BulkWrites::begin(store);
    let run = Run {
        root,
        root_shown,
        store,
        embedder,
        opts,
        progress,
        collection,
    };
    let mut report = begin(&run)?;

    let registered = phase_a(&run, &mut report)?;
    if let Some(f) = registered.failure {
        report.errors = registered.issues;
        return finish(store, report, t0, Some(f));
    }
    report.phase_a.guard_passed = true;
    let mut issues = registered.issues;
    let indexed = phase_b(
        &run,
        registered.docs,
        registered.stored_docs,
        &registered.vanished,
        &mut issues,
        &mut report,
    )?;
    let failure = phase_c(store, &indexed, &mut report, indexed.failure.clone())?;
    // Every path that rewrote postings: new or changed chunks, removed documents, a reindex.
    if indexed.wrote > 0 || !registered.vanished.is_empty() || report.reindexed > 0 {
        if let Err(e) = store.optimize() {
            report.warnings.push(FileIssue {
                path: String::new(),
                phase: Phase::B,
                reason: format!(
                    "store housekeeping after the run failed (nothing is lost; searches may be slower): {}",
                    bib_store::error_chain(&e)
                ),
            });
        }
    }
    report.errors = issues;
    let total_ms = t0.elapsed().as_secs_f64() * 1000.0;
    if total_ms > 0.0 {
        report.embed_fraction = indexed.embed_ms as f64 / total_ms;
        report.chunks_per_sec = indexed.wrote as f64 / (total_ms / 1000.0);
    }
    finish(store, report, t0, failure)
}

/// A knowledge base holds one model's vectors: a run with another model than the stored one
/// re-embeds its own collection, so it may only run where no other collection has chunks.
fn check_model(store: &dyn Store, model: &str, collection: &str) -> Result<(), IngestError> {
    let Some(stored) = store.embedding_model()? else {
        return Ok(());
    };
    if stored == model {
        return Ok(());
    }
    let others: Vec<String> = store
        .collections()?
        .into_iter()
        .filter(|c| c.name != collection && c.chunks > 0)
        .map(|c| c.name)
        .collect();
    if others.is_empty() {
        return Ok(());
    }
    Err(IngestError::ModelMismatch {
        store: store.location(),
        stored,
        model: model.to_string(),
        others,
    })
}

/// The run record, begun in the store, with the lexical index switched to this run's term
/// function (postings only, before any write).
fn begin(run: &Run<'_>) -> Result<RunReport, IngestError> {
    let store = run.store;
    let mut report = RunReport {
        status: RunStatus::Running,
        root: run.root_shown.clone(),
        collection: run.collection.clone(),
        store: store.location(),
        model_id: run.embedder.model_id().to_string(),
        git_commit: git_commit(run.root),
        started_at_ms: now_ms(),
        ..RunReport::default()
    };
    report.id = store.begin_run(&serde_json::to_value(&report).unwrap_or(json!({})))?;
    report.reindexed = store.set_term_config(&run.opts.terms)?;
    report.terms = run.opts.terms.id();
    Ok(report)
}

/// Phase A: scan the folder, read its documents, and judge the guards (an empty folder,
/// more than half of the collection gone, too few files read).
fn phase_a(run: &Run<'_>, report: &mut RunReport) -> Result<Registered, IngestError> {
    let Run {
        root,
        store,
        opts,
        progress,
        ..
    } = *run;
    let (root_shown, collection) = (run.root_shown.as_str(), run.collection.as_str());
    let ta = Instant::now();
    let scanned = scan_with(root, &opts.scan).map_err(|e| IngestError::Root {
        path: root_shown.to_string(),
        reason: "cannot scan it".into(),
        source: Some(e),
    })?;
    let mut issues = scanned.issues;
    let scan_issues = issues.len();
    progress.start("register", scanned.files.len() as u64, Unit::Files);
    let found: HashSet<String> = scanned.files.iter().map(|f| f.path.clone()).collect();
    // Documents of other collections are never read, written or pruned by this run.
    let stored_docs: Vec<DocRecord> = store.documents()?;
    let (docs, distinct) = read_scanned_files(run, &scanned.files, &stored_docs, &mut issues);
    progress.finish();
    // Candidates: distinct documents found plus entries the scan could not read.
    let candidates = (distinct + scan_issues) as u64;
    report.phase_a = PhaseA {
        files: candidates,
        registered: docs.len() as u64,
        errors: issues.len() as u64,
        duration_ms: ms(ta.elapsed()),
        guard_passed: false,
    };
    report.coverage.documents = if candidates == 0 {
        1.0
    } else {
        docs.len() as f64 / candidates as f64
    };
    let own: Vec<&DocRecord> = stored_docs
        .iter()
        .filter(|d| d.collection == collection)
        .collect();
    let vanished: Vec<String> = own
        .iter()
        .filter(|d| !found.contains(&d.path))
        .map(|d| d.path.clone())
        .collect();
    let counts = PhaseACounts {
        candidates,
        registered: docs.len(),
        own: own.len(),
        vanished: vanished.len(),
        coverage: report.coverage.documents,
    };
    let failure = phase_a_guard_failure(run, &counts);
    Ok(Registered {
        docs,
        issues,
        stored_docs,
        vanished,
        failure,
    })
}

/// Read the scanned files in scan order, advancing the progress by one per file of this
/// collection. A file stored under another collection, a second file that normalizes to the
/// same path and a file that cannot be read or parsed become issues instead of documents.
/// Returns the documents read and the number of distinct paths of this collection found.
fn read_scanned_files(
    run: &Run<'_>,
    files: &[FoundFile],
    stored_docs: &[DocRecord],
    issues: &mut Vec<FileIssue>,
) -> (Vec<ParsedDoc>, usize) {
    let Run {
        root,
        opts,
        progress,
        ..
    } = *run;
    let collection = run.collection.as_str();
    let mut docs: Vec<ParsedDoc> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    // The paths stored under another collection, with that collection.
    let foreign: HashMap<&str, &str> = stored_docs
        .iter()
        .filter(|d| d.collection != collection)
        .map(|d| (d.path.as_str(), d.collection.as_str()))
        .collect();
    for f in files {
        if let Some(other) = foreign.get(f.path.as_str()) {
            issues.push(FileIssue {
                path: f.path.clone(),
                phase: Phase::A,
                reason: format!(
                    "already in collection `{other}`; skipped (ingest with --collection {other}, \
                     or remove that collection first with `bib rm --collection {other}`)"
                ),
            });
            continue;
        }
        progress.advance(1);
        if !seen.insert(f.path.clone()) {
            issues.push(FileIssue {
                path: f
                    .abs
                    .strip_prefix(root)
                    .unwrap_or(&f.abs)
                    .to_string_lossy()
                    .into(),
                phase: Phase::A,
                reason: format!(
                    "same document as `{}` after path normalization; skipped",
                    f.path
                ),
            });
            continue;
        }
        match read_document(root, f, opts.max_file_bytes) {
            Ok(d) => docs.push(d),
            Err(reason) => issues.push(FileIssue {
                path: f.path.clone(),
                phase: Phase::A,
                reason,
            }),
        }
    }
    (docs, seen.len())
}

/// The counts Phase A's guards judge.
struct PhaseACounts {
    /// Distinct documents found plus entries the scan could not read.
    candidates: u64,
    /// Documents read.
    registered: usize,
    /// Stored documents of this collection.
    own: usize,
    /// Stored documents of this collection no longer in the folder.
    vanished: usize,
    /// `registered / candidates` (1 when there are no candidates).
    coverage: f64,
}

/// Why the run stops after Phase A, if a guard fails: an empty folder, more than half of the
/// collection gone (unless `--allow-prune`), or fewer files registered than the register
/// guard asks. Checked in that order; the first that fails is the reason.
fn phase_a_guard_failure(run: &Run<'_>, counts: &PhaseACounts) -> Option<String> {
    let opts = run.opts;
    let (root_shown, collection) = (run.root_shown.as_str(), run.collection.as_str());
    if counts.candidates == 0 {
        // An empty folder is almost always the wrong path: say so, and never prune on it.
        let kept = if counts.own == 0 {
            String::new()
        } else {
            format!(
                "; the {} stored documents of collection `{collection}` are kept",
                counts.own
            )
        };
        Some(format!(
            "no Markdown files (*.md) found under {root_shown} (hidden entries, .gitignore, \
             .bibignore and --exclude patterns are skipped); nothing was changed{kept}"
        ))
    } else if !opts.allow_prune
        && counts.vanished > crate::PRUNE_GUARD_MIN
        && counts.vanished * 2 > counts.own
    {
        Some(format!(
            "refusing to remove {} of the {} documents of collection `{collection}` (more than \
             half are gone from {root_shown}); nothing was changed. If they were deleted on \
             purpose, run again with --allow-prune",
            counts.vanished, counts.own
        ))
    } else if counts.coverage < opts.register_guard {
        Some(format!(
            "only {} of {} files registered ({:.1}% < {:.0}%); index left unchanged",
            counts.registered,
            counts.candidates,
            counts.coverage * 100.0,
            opts.register_guard * 100.0
        ))
    } else {
        None
    }
}

/// Phase B: write the documents through the [`DocumentWriter`], judge the index guard, and
/// remove the vanished documents when it holds and nothing failed.
fn phase_b(
    run: &Run<'_>,
    docs: Vec<ParsedDoc>,
    stored_docs: Vec<DocRecord>,
    vanished: &[String],
    issues: &mut Vec<FileIssue>,
    report: &mut RunReport,
) -> Result<Indexed, IngestError> {
    let Run {
        store,
        embedder,
        opts,
        progress,
        ..
    } = *run;
    let tb = Instant::now();
    let mut writer = DocumentWriter::with_stored(
        store,
        embedder,
        opts,
        progress,
        &run.collection,
        stored_docs,
    )?;
    progress.start(
        "index",
        docs.iter().map(|d| d.text.len() as u64).sum(),
        Unit::Bytes,
    );
    for doc in docs {
        writer.add(doc)?;
    }
    let written = writer.finish()?;
    progress.finish();
    let docs = written.docs;
    let mut b = written.phase_b;
    let written_paths = written.written;
    issues.extend(written.issues);
    report.warnings = written.warnings;
    let ok = b.chunks_created + b.chunks_updated + b.chunks_skipped;
    report.coverage.chunks = if b.chunks_total == 0 {
        1.0
    } else {
        ok as f64 / b.chunks_total as f64
    };
    b.guard_passed = report.coverage.chunks >= opts.index_guard;
    let mut failure = None;
    if !b.guard_passed {
        b.prune = "skipped: success guard failed".into();
        failure = Some(format!(
            "only {ok} of {} chunks indexed ({:.1}% < {:.0}%); vanished documents not pruned",
            b.chunks_total,
            report.coverage.chunks * 100.0,
            opts.index_guard * 100.0
        ));
    } else if b.errors > 0 {
        b.prune = format!("skipped: {} chunk writes failed", b.errors);
    } else if vanished.is_empty() {
        b.prune = "done: nothing vanished".into();
    } else {
        let n = store.remove_documents(vanished)?;
        b.chunks_pruned += n;
        b.documents_removed = vanished.len() as u64;
        b.prune = format!("done: {} vanished documents removed", vanished.len());
    }
    b.duration_ms = ms(tb.elapsed());
    report.embed_fraction = 0.0;
    let embed_ms = b.embed_ms;
    let wrote = b.chunks_created + b.chunks_updated;
    report.phase_b = Some(b);

    Ok(Indexed {
        docs,
        written: written_paths,
        failure,
        embed_ms,
        wrote,
    })
}

/// Phase C: audit the store and check each written document against it; returns the run's
/// failure (Phase B's, or an incoherent store).
fn phase_c(
    store: &dyn Store,
    indexed: &Indexed,
    report: &mut RunReport,
    mut failure: Option<String>,
) -> Result<Option<String>, IngestError> {
    let (docs, written_paths) = (&indexed.docs, &indexed.written);
    let tc = Instant::now();
    let audit = store.audit()?;
    let now: HashMap<String, DocRecord> = store
        .documents()?
        .into_iter()
        .map(|d| (d.path.clone(), d))
        .collect();
    let mut mismatches = Vec::new();
    for doc in docs {
        let Some(n) = written_paths.get(&doc.path).map(|w| w.chunk_count) else {
            continue;
        };
        match now.get(&doc.path) {
            None => mismatches.push(format!("{}: not in the store", doc.path)),
            Some(d) if d.chunk_count != n || d.content_hash != doc.content_hash => {
                mismatches.push(format!(
                    "{}: store has {} chunks / hash {}, run wrote {} / {}",
                    doc.path, d.chunk_count, d.content_hash, n, doc.content_hash
                ))
            }
            Some(_) => {}
        }
    }
    let coherent = audit.coherent && mismatches.is_empty();
    if failure.is_none() && !coherent {
        failure = Some(format!(
            "audit found the store incoherent: {:?}; mismatches: {:?}",
            audit, mismatches
        ));
    }
    report.phase_c = Some(PhaseC {
        audit,
        mismatches,
        coherent,
        duration_ms: ms(tc.elapsed()),
    });
    Ok(failure)
}

fn finish(
    store: &dyn Store,
    mut report: RunReport,
    t0: Instant,
    failure: Option<String>,
) -> Result<RunReport, IngestError> {
    report.status = if failure.is_some() {
        RunStatus::Failed
    } else {
        RunStatus::Completed
    };
    report.failure = failure;
    report.duration_ms = ms(t0.elapsed());
    let value = serde_json::to_value(&report).unwrap_or(json!({}));
    store.finish_run(report.id, report.status, &value)?;
    Ok(report)
}
