//! Shared helpers of the ask benchmarks (SciFact, XQuAD, wiki, latency): data loading, a
//! disk cache of corpus embeddings (so re-runs skip the slow part), and IR metrics.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use bib_embed::{EmbedKind, Embedder};
use serde::de::DeserializeOwned;

/// The benchmark data folder: `--data`, else `../shared/bench/data`.
pub fn data_dir(arg: Option<PathBuf>) -> PathBuf {
    arg.unwrap_or_else(|| PathBuf::from("../shared/bench/data"))
}

/// A SciFact (BEIR) corpus document.
#[derive(Debug, serde::Deserialize)]
pub struct SciDoc {
    #[serde(rename = "_id")]
    pub id: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub text: String,
}

impl SciDoc {
    /// The text the benchmarks embed for this abstract: title, newline, text.
    pub fn embed_text(&self) -> String {
        format!("{}\n{}", self.title, self.text)
    }

    /// The abstract as one stored chunk (`[Doc: title]` prefix, the text as content), path
    /// `<id>.md`, with `embedding` from model `model_id`.
    pub fn change(&self, model_id: &str, embedding: Vec<f32>) -> bib_store::DocumentChange {
        bib_store::DocumentChange {
            path: format!("{}.md", self.id),
            collection: String::new(),
            title: self.title.clone(),
            metadata: serde_json::Value::Null,
            content_hash: self.id.clone(),
            chunk_count: 1,
            upserts: vec![chunk_write(
                0,
                format!("[Doc: {}]", self.title),
                self.text.clone(),
                model_id,
                embedding,
            )],
            source: None,
        }
    }
}

/// A benchmark chunk for any store: hash and token estimate of `content`, no heading path.
pub fn chunk_write(
    index: u32,
    prefix: String,
    content: String,
    model: &str,
    v: Vec<f32>,
) -> bib_store::ChunkWrite {
    let hash = format!("{:016x}", fnv1a(&content));
    bib_store::ChunkWrite {
        chunk_index: index,
        tokens_estimate: bib_text::tokens::estimate_tokens(&content) as u32,
        tokens_model: 0,
        span_start: 0,
        span_end: content.len() as u64,
        line_start: 0,
        line_end: 0,
        prefix,
        heading_path: vec![],
        content,
        content_hash: hash,
        model_id: model.to_string(),
        embedding: v,
    }
}

/// FNV-1a: a content hash for benchmark chunks (no cryptographic need here).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A SciFact test claim.
#[derive(Debug, serde::Deserialize)]
pub struct SciQuery {
    #[serde(rename = "_id")]
    pub id: String,
    pub text: String,
}

/// SciFact's test split as every benchmark reads it.
pub struct SciFact {
    pub docs: Vec<SciDoc>,
    /// Test claims that have at least one relevant document, in file order.
    pub queries: Vec<SciQuery>,
    /// Relevant document ids per query id (qrels with a non-zero grade).
    pub qrels: std::collections::HashMap<String, Vec<String>>,
}

/// Load `<dir>/corpus.jsonl`, `queries_test.jsonl` and `qrels_test.tsv`.
pub fn load_scifact(dir: &Path) -> anyhow::Result<SciFact> {
    let docs: Vec<SciDoc> = read_jsonl(&dir.join("corpus.jsonl"))?;
    let queries: Vec<SciQuery> = read_jsonl(&dir.join("queries_test.jsonl"))?;
    let qrels_path = dir.join("qrels_test.tsv");
    let text = std::fs::read_to_string(&qrels_path)
        .with_context(|| format!("reading {}", qrels_path.display()))?;
    let mut qrels: std::collections::HashMap<String, Vec<String>> = Default::default();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() >= 3 && f[2].trim() != "0" {
            qrels
                .entry(f[0].to_string())
                .or_default()
                .push(f[1].to_string());
        }
    }
    let queries = queries
        .into_iter()
        .filter(|q| qrels.contains_key(&q.id))
        .collect();
    Ok(SciFact {
        docs,
        queries,
        qrels,
    })
}

/// Read a JSONL file into typed rows; a bad line names the file and line number.
/// SciFact's corpus and first `queries` queries, with the default model and the corpus
/// vectors (cached under `cache_dir`): what the latency and store benchmarks measure on.
pub struct EmbeddedSciFact {
    pub docs: Vec<SciDoc>,
    pub queries: Vec<SciQuery>,
    pub embedder: Box<dyn Embedder>,
    pub vecs: Vec<Vec<f32>>,
}

/// Load SciFact from the data folder `data` and embed its corpus ([`EmbeddedSciFact`]).
pub fn scifact_embedded(
    data: Option<PathBuf>,
    queries: usize,
    cache_dir: &Path,
) -> anyhow::Result<EmbeddedSciFact> {
    let SciFact {
        docs,
        queries: mut qs,
        ..
    } = load_scifact(&data_dir(data).join("scifact"))?;
    qs.truncate(queries);
    let embedder = crate::load_embedder(bib_embed::DEFAULT_MODEL)?;
    let texts: Vec<String> = docs.iter().map(SciDoc::embed_text).collect();
    let vecs = embed_corpus_cached(embedder.as_ref(), &texts, cache_dir, "scifact")?;
    Ok(EmbeddedSciFact {
        docs,
        queries: qs,
        embedder,
        vecs,
    })
}

pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str(&line)
                .with_context(|| format!("{}:{}: bad JSON row", path.display(), i + 1))?,
        );
    }
    Ok(out)
}

/// Embed `texts` as passages, reusing `<cache_dir>/<name>-<model>-<hash>.f32` when the same
/// model embedded the same texts before. Progress goes to stderr.
pub fn embed_corpus_cached(
    e: &dyn Embedder,
    texts: &[String],
    cache_dir: &Path,
    name: &str,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let mut h = DefaultHasher::new();
    e.model_id().hash(&mut h);
    texts.hash(&mut h);
    let file = cache_dir.join(format!("{name}-{}-{:016x}.f32", e.model_id(), h.finish()));
    let dim = e.dimensions();
    if let Ok(bytes) = std::fs::read(&file) {
        if bytes.len() == texts.len() * dim * 4 {
            let flat: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            eprintln!(
                "{name}: {} cached vectors from {}",
                texts.len(),
                file.display()
            );
            return Ok(flat.chunks(dim).map(<[f32]>::to_vec).collect());
        }
    }
    let t = Instant::now();
    let mut out = Vec::with_capacity(texts.len());
    for batch in texts.chunks(64) {
        let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
        out.extend(e.embed(&refs, EmbedKind::Passage)?);
        eprint!("\r{name}: embedded {}/{}", out.len(), texts.len());
        std::io::stderr().flush().ok();
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "\r{name}: embedded {} texts in {secs:.1} s ({:.0} texts/s)",
        texts.len(),
        texts.len() as f64 / secs.max(1e-9)
    );
    std::fs::create_dir_all(cache_dir).ok();
    let mut bytes = Vec::with_capacity(texts.len() * dim * 4);
    for v in &out {
        for x in v {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    if let Err(err) = std::fs::write(&file, bytes) {
        eprintln!("warning: could not write {}: {err}", file.display());
    }
    Ok(out)
}

/// One benchmark document indexed as a single chunk ([`add_one_chunk_per_document`]).
pub struct OneChunkDocument {
    pub path: String,
    pub title: String,
    /// The indexed text of the chunk.
    pub content: String,
    pub embedding: Vec<f32>,
}

/// Add every document of `documents` to `index` as one chunk whose id is its position
/// (0, 1, …): chunk index 0, no heading path, no metadata, the default citation.
pub fn add_one_chunk_per_document(
    index: &mut bib_retrieve::MemoryIndex,
    documents: impl IntoIterator<Item = OneChunkDocument>,
) -> anyhow::Result<()> {
    for (i, d) in documents.into_iter().enumerate() {
        index.add(
            bib_retrieve::ChunkRecord {
                id: i as i64,
                path: d.path,
                chunk_index: 0,
                title: d.title,
                heading_path: vec![],
                content: d.content,
                metadata: serde_json::Value::Null,
                ..Default::default()
            },
            Some(d.embedding),
        )?;
    }
    Ok(())
}

/// The published anchors `<data>/anchors.json`, or `null` when the file is missing or not
/// JSON.
pub fn read_anchors_or_null(data: &Path) -> serde_json::Value {
    std::fs::read_to_string(data.join("anchors.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// nDCG@k with binary relevance.
pub fn ndcg_at(ranked: &[String], relevant: &[String], k: usize) -> f64 {
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .filter(|(_, d)| relevant.contains(d))
        .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
        .sum();
    let idcg: f64 = (0..relevant.len().min(k))
        .map(|i| 1.0 / ((i + 2) as f64).log2())
        .sum();
    if idcg == 0.0 {
        0.0
    } else {
        dcg / idcg
    }
}

/// Recall@k: the fraction of relevant documents in the top k.
pub fn recall_at(ranked: &[String], relevant: &[String], k: usize) -> f64 {
    if relevant.is_empty() {
        return 0.0;
    }
    let top = &ranked[..ranked.len().min(k)];
    relevant.iter().filter(|r| top.contains(r)).count() as f64 / relevant.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!((ndcg_at(&s(&["a", "b"]), &s(&["a"]), 10) - 1.0).abs() < 1e-12);
        assert!((ndcg_at(&s(&["b", "a"]), &s(&["a"]), 10) - 1.0 / 3f64.log2()).abs() < 1e-12);
        assert_eq!(ndcg_at(&s(&["b"]), &s(&["a"]), 10), 0.0);
        assert_eq!(recall_at(&s(&["a", "b", "c"]), &s(&["c", "d"]), 2), 0.0);
        assert_eq!(recall_at(&s(&["a", "b", "c"]), &s(&["c", "d"]), 3), 0.5);
    }
}
