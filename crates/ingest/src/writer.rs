//! The one write path of documents into a store ([`DocumentWriter`]): Phase B of an ingest,
//! and a document registered over MCP or HTTP.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use bib_embed::{EmbedKind, Embedder};
use bib_store::{
    ApplyOutcome, ChunkState, ChunkWrite, DocRecord, DocumentChange, Store, StoreError,
    VectorsByHash,
};
use bib_text::chunk::{chunk_markdown, Chunk};
use bib_text::tokens::estimate_tokens;

use crate::pipeline::{embed_sentence_vectors, ms, sha256_hex, ParsedDoc};
use crate::{FileIssue, IngestError, IngestOptions, Phase, PhaseB, Progress};

struct PlannedChunk {
    index: u32,
    chunk: Chunk,
    text: String,
    hash: String,
    /// 1-based lines of the file the chunk cites.
    lines: (u32, u32),
    write: bool,
    vector: Option<Vec<f32>>,
    tokens_model: u32,
}

struct DocPlan {
    doc_idx: usize,
    chunks: Vec<PlannedChunk>,
    write: bool,
    failed: Option<String>,
}

/// A document this writer wrote or found unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub node_id: bib_store::NodeId,
    /// Chunks the document has now.
    pub chunk_count: u32,
    /// What the store did; `None` when the document was already as given (nothing written).
    pub outcome: Option<ApplyOutcome>,
}

/// What a [`DocumentWriter`] did.
#[derive(Debug, Default)]
pub struct WriteReport {
    /// The documents given to it, in order.
    pub docs: Vec<ParsedDoc>,
    pub phase_b: PhaseB,
    /// Documents that could not be written (embedding or store failures, a refused gate).
    pub issues: Vec<FileIssue>,
    pub warnings: Vec<FileIssue>,
    /// By path: the documents written or unchanged.
    pub written: HashMap<String, Written>,
}

/// The one write path of documents into a collection, for a directory's ingest and for one
/// document registered over MCP or HTTP alike: each document's chunks are planned against
/// what is stored (an unchanged chunk at the same lines is skipped), vectors known for a chunk
/// hash are reused, the rest are embedded in padded-token batches across documents, each
/// document is written in one transaction, then the sentence vectors trimming looks up.
///
/// Documents are buffered until `window_chunks` chunks need embedding, then written; call
/// [`DocumentWriter::finish`] to write the rest.
pub struct DocumentWriter<'a> {
    store: &'a dyn Store,
    embedder: &'a dyn Embedder,
    opts: &'a IngestOptions,
    progress: &'a dyn Progress,
    docs: Vec<ParsedDoc>,
    b: PhaseB,
    issues: Vec<FileIssue>,
    warnings: Vec<FileIssue>,
    written: HashMap<String, Written>,
    /// The collection written into.
    collection: String,
    /// Stored chunk states and documents, by path: all of them as the writer started
    /// ([`DocumentWriter::with_stored`]), or each document's own, looked up as it is added
    /// (`lookup`, [`DocumentWriter::new`]).
    by_path: HashMap<String, Vec<ChunkState>>,
    stored: HashMap<String, DocRecord>,
    lookup: bool,
    window: Vec<DocPlan>,
    pending: usize,
    gate: Option<&'a (dyn Fn() -> bool + Sync)>,
}

impl<'a> DocumentWriter<'a> {
    /// A writer into `collection` of `store` that looks each document's stored row and chunk
    /// states up by its path as it is added ([`Store::document`], [`Store::chunk_states_of`]):
    /// for a few documents, such as one registration, in a store of any size.
    pub fn new(
        store: &'a dyn Store,
        embedder: &'a dyn Embedder,
        opts: &'a IngestOptions,
        progress: &'a dyn Progress,
        collection: &str,
    ) -> Result<Self, IngestError> {
        Ok(Self {
            store,
            embedder,
            opts,
            progress,
            docs: Vec::new(),
            b: PhaseB::default(),
            issues: Vec::new(),
            warnings: Vec::new(),
            written: HashMap::new(),
            collection: collection.to_string(),
            by_path: HashMap::new(),
            stored: HashMap::new(),
            lookup: true,
            window: Vec::new(),
            pending: 0,
            gate: None,
        })
    }

    /// A writer into `collection` of `store` for a whole directory: `documents` are the
    /// store's documents as the caller read them (ingest's Phase A), and every chunk state is
    /// read once, here.
    pub fn with_stored(
        store: &'a dyn Store,
        embedder: &'a dyn Embedder,
        opts: &'a IngestOptions,
        progress: &'a dyn Progress,
        collection: &str,
        documents: Vec<DocRecord>,
    ) -> Result<Self, IngestError> {
        let mut by_path: HashMap<String, Vec<ChunkState>> = HashMap::new();
        for s in store.chunk_states()? {
            by_path.entry(s.path.clone()).or_default().push(s);
        }
        let mut writer = Self::new(store, embedder, opts, progress, collection)?;
        writer.stored = documents.into_iter().map(|d| (d.path.clone(), d)).collect();
        writer.by_path = by_path;
        writer.lookup = false;
        Ok(writer)
    }

    /// Ask `gate` right before each document's transaction; when it answers `false` the
    /// document is not written (an issue says so). A server uses it to stop a request past its
    /// deadline at the last moment nothing is written yet.
    pub fn with_gate(mut self, gate: &'a (dyn Fn() -> bool + Sync)) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Plan `doc`'s chunks; writes the buffered documents once enough chunks wait.
    pub fn add(&mut self, doc: ParsedDoc) -> Result<(), IngestError> {
        if self.lookup && !self.by_path.contains_key(&doc.path) {
            if let Some(d) = self.store.document(&doc.path)? {
                self.stored.insert(doc.path.clone(), d);
            }
            let states = self.store.chunk_states_of(&doc.path)?;
            self.by_path.insert(doc.path.clone(), states);
        }
        let model = self.embedder.model_id().to_string();
        let body = &doc.text[doc.body_offset..];
        let chunks = chunk_markdown(&doc.title, body, doc.body_offset, &self.opts.chunk);
        // Spans of a document with includes refer to the expanded text; cite the file's lines
        // (crate::lines).
        let line_map = crate::lines::LineMap::new(&doc.source, &doc.text, doc.body_offset);
        let old: HashMap<u32, &ChunkState> = self
            .by_path
            .get(&doc.path)
            .map(|v| v.iter().map(|s| (s.chunk_index, s)).collect())
            .unwrap_or_default();
        let mut planned = Vec::with_capacity(chunks.len());
        for (idx, chunk) in chunks.into_iter().enumerate() {
            let text = chunk.text();
            let hash = sha256_hex(&text);
            let index = idx as u32;
            let lines = line_map.lines(chunk.start, chunk.end);
            // A chunk that moved (same text, other lines) is rewritten so citations stay true;
            // its vector comes from the cache.
            let skip = old.get(&index).is_some_and(|s| {
                s.content_hash == hash && s.model_id == model && (s.line_start, s.line_end) == lines
            });
            if skip {
                self.b.chunks_skipped += 1;
            } else {
                self.pending += 1;
            }
            planned.push(PlannedChunk {
                index,
                chunk,
                text,
                hash,
                lines,
                write: !skip,
                vector: None,
                tokens_model: 0,
            });
        }
        self.b.chunks_total += planned.len() as u64;
        let row_same = self.stored.get(&doc.path).is_some_and(|d| {
            d.title == doc.title
                && d.metadata == doc.metadata
                && d.content_hash == doc.content_hash
                && d.chunk_count as usize == planned.len()
                && d.has_source
                && d.collection == self.collection
        });
        let write = !row_same || planned.iter().any(|c| c.write) || old.len() != planned.len();
        self.window.push(DocPlan {
            doc_idx: self.docs.len(),
            chunks: planned,
            write,
            failed: None,
        });
        self.docs.push(doc);
        if self.pending >= self.opts.window_chunks {
            self.flush()?;
        }
        Ok(())
    }

    /// Write what is buffered and say what was done.
    pub fn finish(mut self) -> Result<WriteReport, IngestError> {
        self.flush()?;
        Ok(WriteReport {
            docs: self.docs,
            phase_b: self.b,
            issues: self.issues,
            warnings: self.warnings,
            written: self.written,
        })
    }

    fn flush(&mut self) -> Result<(), IngestError> {
        self.pending = 0;
        let mut window = std::mem::take(&mut self.window);
        self.give_vectors(&mut window)?;
        // Texts whose sentences trimming will look up (as `ChunkWrite::text` builds them).
        let sentence_sources: Vec<String> = if self.opts.sentence_vectors {
            window
                .iter()
                .filter(|p| p.failed.is_none())
                .flat_map(|p| &p.chunks)
                .map(|pc| format!("{}\n{}", pc.chunk.prefix, pc.chunk.content))
                .collect()
        } else {
            Vec::new()
        };
        // 3. One transaction per document.
        let model = self.embedder.model_id().to_string();
        for plan in window.drain(..) {
            self.write_document(plan, &model);
        }
        // 4. Sentence vectors for trimming, after the chunks are safely written.
        self.embed_sentences(&sentence_sources);
        Ok(())
    }

    /// Steps 1 and 2 of a flush: vectors for the window's chunks to write, reused by hash or
    /// embedded ([`embed_by_hash`]); a document whose embedding failed is marked failed.
    fn give_vectors(&mut self, window: &mut [DocPlan]) -> Result<(), IngestError> {
        // 1. Reuse vectors already known for a hash, 2. embed the rest in padded-token batches.
        let mut need: Vec<(usize, usize)> = Vec::new();
        for (d, plan) in window.iter().enumerate() {
            for (c, pc) in plan.chunks.iter().enumerate() {
                if pc.write {
                    need.push((d, c));
                }
            }
        }
        let items: Vec<EmbedItem<'_>> = need
            .iter()
            .map(|&(d, c)| EmbedItem {
                group: d,
                hash: &window[d].chunks[c].hash,
                text: &window[d].chunks[c].text,
            })
            .collect();
        let (store, embedder, opts) = (self.store, self.embedder, self.opts);
        let (docs, progress, warnings) = (&self.docs, self.progress, &mut self.warnings);
        let mut too_long = |i: usize, tokens: u32, cap: usize| {
            let (d, c) = need[i];
            let issue = FileIssue {
                path: docs[window[d].doc_idx].path.clone(),
                phase: Phase::B,
                reason: format!(
                    "chunk {} has {tokens} tokens; {} reads the first {cap}, so the rest of it \
                     is found by keywords only",
                    window[d].chunks[c].index,
                    embedder.model_id()
                ),
            };
            progress.warn(&issue);
            warnings.push(issue);
        };
        let mut got = embed_by_hash(store, embedder, opts, &items, &mut too_long)?;
        for (i, &(d, c)) in need.iter().enumerate() {
            let pc = &mut window[d].chunks[c];
            pc.vector = got.vectors[i].take();
            pc.tokens_model = got.tokens_model[i];
        }
        for (d, reason) in got.failed {
            window[d].failed.get_or_insert(reason);
        }
        self.b.vectors_reused += got.reused;
        self.b.chunks_embedded += got.embedded;
        self.b.tokens_embedded += got.tokens_embedded;
        self.b.tokens_embedded_estimate += got.tokens_embedded_estimate;
        self.b.batches += got.batches;
        self.b.embed_ms += got.embed_ms;
        Ok(())
    }

    /// Write one planned document in one transaction (after the gate), or count it unchanged
    /// or failed.
    fn write_document(&mut self, plan: DocPlan, model: &str) {
        let tokenizer = self.embedder.tokenizer();
        let doc = &self.docs[plan.doc_idx];
        if !plan.write {
            self.b.documents_unchanged += 1;
            self.written.insert(
                doc.path.clone(),
                Written {
                    // Unchanged means stored as it is: the row is there.
                    node_id: self.stored.get(&doc.path).map_or(0, |d| d.node_id),
                    chunk_count: plan.chunks.len() as u32,
                    outcome: None,
                },
            );
            self.progress.advance(doc.text.len() as u64);
            return;
        }
        let to_write = plan.chunks.iter().filter(|c| c.write).count() as u64;
        if let Some(reason) = plan.failed {
            self.b.errors += to_write;
            self.issues.push(FileIssue {
                path: doc.path.clone(),
                phase: Phase::B,
                reason,
            });
            self.progress.advance(doc.text.len() as u64);
            return;
        }
        let mut upserts = Vec::new();
        for pc in plan.chunks.iter().filter(|c| c.write) {
            let text_tokens = if pc.tokens_model == 0 {
                tokenizer.count_tokens(&pc.text) as u32
            } else {
                pc.tokens_model
            };
            upserts.push(ChunkWrite {
                chunk_index: pc.index,
                prefix: pc.chunk.prefix.clone(),
                heading_path: pc.chunk.heading_path.clone(),
                content: pc.chunk.content.clone(),
                content_hash: pc.hash.clone(),
                tokens_estimate: estimate_tokens(&pc.text) as u32,
                tokens_model: text_tokens,
                span_start: pc.chunk.start as u64,
                span_end: pc.chunk.end as u64,
                line_start: pc.lines.0,
                line_end: pc.lines.1,
                model_id: model.to_string(),
                embedding: pc.vector.clone().unwrap_or_default(),
            });
        }
        let change = DocumentChange {
            path: doc.path.clone(),
            collection: self.collection.clone(),
            title: doc.title.clone(),
            metadata: doc.metadata.clone(),
            content_hash: doc.content_hash.clone(),
            chunk_count: plan.chunks.len() as u32,
            upserts,
            source: Some(doc.source.clone()),
        };
        if self.gate.is_some_and(|open| !open()) {
            self.b.errors += to_write;
            self.issues.push(FileIssue {
                path: doc.path.clone(),
                phase: Phase::B,
                reason: "stopped before its write; nothing was written".into(),
            });
            self.progress.advance(doc.text.len() as u64);
            return;
        }
        match self.store.apply_document(&change) {
            Ok(out) => {
                self.b.documents_written += 1;
                self.b.chunks_created += u64::from(out.created);
                self.b.chunks_updated += u64::from(out.updated);
                self.b.chunks_pruned += u64::from(out.pruned);
                self.written.insert(
                    doc.path.clone(),
                    Written {
                        node_id: out.node_id,
                        chunk_count: change.chunk_count,
                        outcome: Some(out),
                    },
                );
            }
            Err(e) => {
                self.b.errors += to_write;
                self.issues.push(FileIssue {
                    path: doc.path.clone(),
                    phase: Phase::B,
                    reason: format!("store write failed: {}", bib_store::error_chain(&e)),
                });
            }
        }
        self.progress.advance(doc.text.len() as u64);
    }

    /// Sentence vectors for `texts` through [`embed_sentence_vectors`], counted in Phase B.
    fn embed_sentences(&mut self, texts: &[String]) {
        let s = embed_sentence_vectors(self.store, self.embedder, texts, self.opts);
        self.b.sentences_embedded += s.embedded;
        self.b.sentences_reused += s.reused;
        self.b.sentence_embed_ms += s.embed_ms;
        self.b.embed_ms += s.embed_ms;
        if s.warning.is_some() {
            self.b.sentence_warning = s.warning;
        }
    }
}

/// One text to give a vector, known by its content hash ([`embed_by_hash`]).
#[derive(Debug, Clone, Copy)]
pub struct EmbedItem<'t> {
    /// Items of one group (a document) fail together: once a batch holding one of them
    /// fails, batches holding only failed groups are not embedded.
    pub group: usize,
    pub hash: &'t str,
    /// The indexed text (prefix, newline, content).
    pub text: &'t str,
}

/// What [`embed_by_hash`] found and made, per item in the order given, and counted.
#[derive(Debug, Default)]
pub struct Embedded {
    /// The item's vector; `None` when its batch failed.
    pub vectors: Vec<Option<Vec<f32>>>,
    /// Whether the vector was embedded now rather than reused by hash.
    pub fresh: Vec<bool>,
    /// The item's length in the model's tokens (0 for a reused vector: not counted).
    pub tokens_model: Vec<u32>,
    /// The first failure of each failed group.
    pub failed: HashMap<usize, String>,
    pub reused: u64,
    pub embedded: u64,
    pub tokens_embedded: u64,
    pub tokens_embedded_estimate: u64,
    pub batches: u64,
    pub embed_ms: u64,
}

/// The one "vectors by content hash" step of every chunk write (the [`DocumentWriter`], and
/// chunks a caller supplies over MCP): vectors the store already knows for an item's hash
/// under the embedder's model (and of its dimensions) are reused; the rest are embedded in
/// padded-token batches (`opts.batch_token_budget`, `opts.batch_max_chunks`; shortest first).
/// `too_long(item, tokens, cap)` hears of each item longer than the model reads, before any
/// embedding. An embedding failure fails the groups of its batch, never the call; only a store
/// read does.
pub fn embed_by_hash(
    store: &dyn VectorsByHash,
    embedder: &dyn Embedder,
    opts: &IngestOptions,
    items: &[EmbedItem<'_>],
    too_long: &mut dyn FnMut(usize, u32, usize),
) -> Result<Embedded, StoreError> {
    let n = items.len();
    let mut out = Embedded {
        vectors: vec![None; n],
        fresh: vec![false; n],
        tokens_model: vec![0; n],
        ..Embedded::default()
    };
    if n == 0 {
        return Ok(out);
    }
    // 1. Reuse vectors already known for a hash.
    let model = embedder.model_id().to_string();
    let hashes: Vec<String> = items
        .iter()
        .map(|it| it.hash.to_string())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let known: HashMap<String, Vec<f32>> =
        store.cached_vectors(&model, &hashes)?.into_iter().collect();
    let dims = embedder.dimensions();
    let mut need: Vec<usize> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        match known.get(it.hash) {
            Some(v) if v.len() == dims || dims == 0 => {
                out.vectors[i] = Some(v.clone());
                out.reused += 1;
            }
            _ => need.push(i),
        }
    }
    // 2. Embed the rest in padded-token batches (split_batches orders them shortest first).
    let tokenizer = embedder.tokenizer();
    let cap = embedder.max_input_tokens().max(1);
    for &i in &need {
        let tokens = tokenizer.count_tokens(items[i].text) as u32;
        out.tokens_model[i] = tokens;
        if tokens as usize > cap {
            too_long(i, tokens, cap);
        }
    }
    let padded: Vec<usize> = need
        .iter()
        .map(|&i| (out.tokens_model[i] as usize).min(cap) + 2)
        .collect();
    let plan = bib_embed::split_batches(&padded, opts.batch_token_budget, opts.batch_max_chunks);
    for batch in &plan.batches {
        let batch: Vec<usize> = batch.iter().map(|&j| need[j]).collect();
        if batch
            .iter()
            .all(|&i| out.failed.contains_key(&items[i].group))
        {
            continue;
        }
        let texts: Vec<&str> = batch.iter().map(|&i| items[i].text).collect();
        let t = Instant::now();
        let res = embedder.embed(&texts, EmbedKind::Passage);
        out.embed_ms += ms(t.elapsed());
        out.batches += 1;
        let res = res.and_then(|v| {
            if v.len() == texts.len() {
                Ok(v)
            } else {
                Err(bib_embed::EmbedError::Other(format!(
                    "model returned {} vectors for {} texts",
                    v.len(),
                    texts.len()
                )))
            }
        });
        match res {
            Ok(vectors) => {
                for (&i, v) in batch.iter().zip(vectors) {
                    out.embedded += 1;
                    out.tokens_embedded += u64::from(out.tokens_model[i]);
                    out.tokens_embedded_estimate += estimate_tokens(items[i].text) as u64;
                    out.vectors[i] = Some(v);
                    out.fresh[i] = true;
                }
            }
            Err(e) => {
                for &i in &batch {
                    out.failed.entry(items[i].group).or_insert_with(|| {
                        format!("embedding failed: {}", bib_store::error_chain(&e))
                    });
                }
            }
        }
    }
    Ok(out)
}
