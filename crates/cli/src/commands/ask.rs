//! `bib ask "<question>"` — hybrid retrieval over the knowledge base, optional sentence
//! trimming, token accounting, the query log, and optional answer synthesis.
//!
//! Settings come from flags > environment > `bib.toml` > defaults (see `bib_retrieve::config`).
//! `--json` prints one object whose shape is stable (external checks read it):
//! `{query, mode, top_k, trim, tokens_before, tokens_in_context, exact_tokens_before,
//!   exact_tokens_in_context, timings, results: [{rank, chunk_id, node_id, path, collection,
//!   line_start, line_end, chunk_index, title, heading_path, content, score, bm25, vector,
//!   sentences_total, sentences_kept}], answer?}`. `line_start`/`line_end` are 1-based lines of
//!   the file at `path` (see `bib_ingest::lines`).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use bib_embed::Embedder;
use bib_retrieve::config::{AskSettings, Layer};
use bib_retrieve::retrieve::RetrievalResult;
use bib_retrieve::synth::{self, SynthConfig};
use bib_retrieve::{
    log_entry, EmbeddingCache, Filter, Mode, Retriever, StoreIndex, StoreVectors, TrimScorer,
};
use bib_store::Store;
use serde_json::json;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The question.
    pub question: String,
    /// Number of chunks to return (default 5).
    #[arg(long, short = 'k')]
    pub top_k: Option<usize>,
    /// Retrieval mode: hybrid (default), bm25 or vector.
    #[arg(long)]
    pub mode: Option<String>,
    /// Trim each chunk to the sentences relevant to the question.
    #[arg(long, overrides_with = "no_trim")]
    pub trim: bool,
    /// Do not trim (the default unless RETRIEVAL_TRIM=1 or bib.toml says otherwise).
    #[arg(long, overrides_with = "trim")]
    pub no_trim: bool,
    /// Minimum sentence–question cosine kept when trimming (default 0.21, calibrated for use-m3).
    #[arg(long)]
    pub trim_threshold: Option<f32>,
    /// Neighbouring sentences kept on each side of a kept sentence (default 0).
    #[arg(long)]
    pub trim_window: Option<usize>,
    /// Sentences kept per chunk even when none reaches the threshold (default 0).
    #[arg(long)]
    pub trim_min_sentences: Option<usize>,
    /// Sentences of the whole context always kept for their sentence-level BM25 rank (default
    /// 5; 0 = cosine only, as the spec).
    #[arg(long)]
    pub trim_lexical_top: Option<usize>,
    /// Sentence scorer for trimming: cosine (default) or hybrid (BM25 rank fused with cosine).
    #[arg(long)]
    pub trim_scorer: Option<String>,
    /// Metadata filter `key=value` (front-matter field, or `path=<prefix>`); repeatable, all
    /// must hold.
    #[arg(long = "filter", value_name = "KEY=VALUE")]
    pub filters: Vec<String>,
    /// Only documents of this collection (repeatable: any of them; default all).
    #[arg(long = "collection", value_name = "NAME")]
    pub collections: Vec<String>,
    /// Reciprocal-rank-fusion constant k (default 60; used with `--fusion rrf`).
    #[arg(long)]
    pub rrf_k: Option<f64>,
    /// How hybrid mode combines BM25 and vectors: convex (default: weighted normalised
    /// scores) or rrf (reciprocal rank fusion).
    #[arg(long)]
    pub fusion: Option<String>,
    /// BM25 weight α in [0, 1] of convex fusion (default 0.7).
    #[arg(long)]
    pub fusion_alpha: Option<f64>,
    /// Knowledge-base file (default .bib/kb.sqlite, or BIB_STORE, or [store] path).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Config file (default ./bib.toml when it exists, or BIB_CONFIG).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Send the question and context to the configured chat endpoint and stream the answer.
    #[arg(long)]
    pub synthesize: bool,
}

fn env_var(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

/// The config file layer ([`crate::store_url::config_path`]: `--config`, else `BIB_CONFIG`,
/// else `./bib.toml` when present).
pub(crate) fn file_layer(explicit: Option<&Path>) -> anyhow::Result<Layer> {
    let Some(path) = crate::store_url::config_path(explicit) else {
        return Ok(Layer::default());
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    Ok(Layer::from_toml(&text, &path.display().to_string())?)
}

fn flag_layer(a: &Args) -> anyhow::Result<Layer> {
    Ok(Layer {
        store: a.store.clone(),
        top_k: a.top_k,
        mode: a.mode.as_deref().map(str::parse::<Mode>).transpose()?,
        trim: if a.trim {
            Some(true)
        } else if a.no_trim {
            Some(false)
        } else {
            None
        },
        trim_threshold: a.trim_threshold,
        trim_window: a.trim_window,
        trim_min_sentences: a.trim_min_sentences,
        trim_lexical_top: a.trim_lexical_top,
        trim_scorer: a
            .trim_scorer
            .as_deref()
            .map(str::parse::<TrimScorer>)
            .transpose()?,
        rrf_k: a.rrf_k,
        fusion: a
            .fusion
            .as_deref()
            .map(str::parse::<bib_retrieve::Fusion>)
            .transpose()?,
        fusion_alpha: a.fusion_alpha,
        candidates: None,
        filters: (!a.filters.is_empty()).then(|| a.filters.clone()),
        llm_base_url: None,
        llm_model: None,
        llm_api_key: None,
    })
}

/// Load the embedding model the store was built with.
pub fn load_embedder(model_id: &str) -> anyhow::Result<Box<dyn Embedder>> {
    match model_id {
        "use-m3" => Ok(Box::new(bib_embed::UseM3::load_default()?)),
        "e5-small" => Ok(Box::new(bib_embed::E5Small::load_default()?)),
        other => {
            bail!("the knowledge base was embedded with `{other}`, which this build cannot load")
        }
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let settings = AskSettings::resolve(
        flag_layer(&a)?,
        Layer::from_env(env_var)?,
        file_layer(a.config.as_deref())?,
        bib_store::DEFAULT_STORE_PATH,
    )?;
    if a.question.trim().is_empty() {
        bail!("the question is empty");
    }
    let mut filter = Filter::parse(&settings.filters)?;
    filter.collections = a.collections.clone();
    let synth_cfg = if a.synthesize {
        Some(SynthConfig::from_parts(
            settings.llm_base_url.clone(),
            settings.llm_model.clone(),
            settings.llm_api_key.clone(),
        )?)
    } else {
        None
    };

    // A SQLite file or a postgres:// URL.
    let spec = settings.store.to_string_lossy().into_owned();
    if !crate::store_url::exists(&spec) {
        bail!("no knowledge base at {spec} (run `bib ingest <dir>` first, or pass --store)");
    }
    let store: Arc<dyn Store> =
        Arc::from(crate::store_url::open(&spec).with_context(|| format!("opening {spec}"))?);
    let model_id = store
        .chunk_states()?
        .into_iter()
        .map(|s| s.model_id)
        .find(|m| !m.is_empty())
        .unwrap_or_else(|| bib_embed::DEFAULT_MODEL.to_string());

    let needs_model = settings.options.mode == Mode::Vector || settings.options.trim.is_some();
    let embedder = match load_embedder(&model_id) {
        Ok(e) => Some(e),
        Err(e) if !needs_model && settings.options.mode == Mode::Hybrid => {
            eprintln!("warning: {e:#}; falling back to BM25 only");
            None
        }
        Err(e) if !needs_model => {
            let _ = e;
            None
        }
        Err(e) => return Err(e),
    };

    let index = StoreIndex::new(store.as_ref());
    // Sentence vectors persist in the store's cache, so the next ask reuses them.
    let cache = EmbeddingCache::default().with_backing(Arc::new(StoreVectors(store.clone())));
    let retriever = Retriever::new(&index, embedder.as_deref(), &cache);
    let result = retriever.retrieve(&a.question, &settings.options, &filter)?;

    if let Err(e) = store.log_query(&log_entry(&result, &settings.options, &filter)) {
        eprintln!("warning: could not write the query log: {e}");
    }

    if a.json {
        let mut v = result_json(&result, &settings);
        if let Some(cfg) = &synth_cfg {
            let answer = synth::synthesize(cfg, &a.question, &result.chunks, &mut std::io::sink())?;
            v["answer"] = json!(answer);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }

    let mut out = std::io::stdout().lock();
    print_human(&mut out, &result, &settings, synth_cfg.is_none())?;
    if let Some(cfg) = &synth_cfg {
        writeln!(out, "\n── answer ({}) ──", cfg.model)?;
        out.flush()?;
        synth::synthesize(cfg, &a.question, &result.chunks, &mut out)?;
        writeln!(out)?;
    }
    Ok(())
}

fn result_json(r: &RetrievalResult, s: &AskSettings) -> serde_json::Value {
    let results: Vec<_> = r
        .chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({
                "rank": i + 1,
                "chunk_id": c.chunk.id,
                "node_id": c.chunk.citation.node_id,
                "path": c.chunk.path,
                "collection": c.chunk.citation.collection,
                "line_start": c.chunk.citation.line_start,
                "line_end": c.chunk.citation.line_end,
                "chunk_index": c.chunk.chunk_index,
                "title": c.chunk.title,
                "heading_path": c.chunk.heading_path,
                "content": c.chunk.content,
                "score": c.score,
                "bm25": c.bm25,
                "vector": c.vector,
                "sentences_total": c.trim.as_ref().map(|t| t.sentences_total),
                "sentences_kept": c.trim.as_ref().map(|t| t.sentences_kept.len()),
            })
        })
        .collect();
    json!({
        "query": r.query,
        "mode": r.mode,
        "fusion": (r.mode == bib_retrieve::Mode::Hybrid).then(|| json!({
            "method": s.options.fusion.as_str(),
            "alpha": s.options.convex_alpha,
            "rrf_k": s.options.rrf_k,
        })),
        "top_k": s.options.top_k,
        "filters": s.filters,
        "trim": s.options.trim,
        "tokens_before": r.tokens_before,
        "tokens_in_context": r.tokens_in_context,
        "exact_tokens_before": r.exact_tokens_before,
        "exact_tokens_in_context": r.exact_tokens_in_context,
        "timings": r.timings,
        "results": results,
    })
}

fn print_human(
    out: &mut dyn Write,
    r: &RetrievalResult,
    s: &AskSettings,
    full: bool,
) -> anyhow::Result<()> {
    let color = std::io::stdout().is_terminal() && env_var("NO_COLOR").is_none();
    let (b, d, z) = if color {
        ("\x1b[1m", "\x1b[2m", "\x1b[0m")
    } else {
        ("", "", "")
    };
    if r.chunks.is_empty() {
        writeln!(out, "no results for {:?}", r.query)?;
    }
    for (i, c) in r.chunks.iter().enumerate() {
        let mut scores = format!("score {:.4}", c.score);
        if let Some(h) = c.bm25 {
            scores.push_str(&format!(" · bm25 #{} {:.2}", h.rank, h.score));
        }
        if let Some(h) = c.vector {
            scores.push_str(&format!(" · cosine #{} {:.3}", h.rank, h.score));
        }
        if let Some(t) = &c.trim {
            scores.push_str(&format!(
                " · kept {}/{} sentences",
                t.sentences_kept.len(),
                t.sentences_total
            ));
        }
        writeln!(
            out,
            "{b}[{}] {}{z}  {d}({scores}){z}",
            i + 1,
            synth::source_label(c)
        )?;
        if full {
            writeln!(out, "{}\n", c.chunk.content.trim_end())?;
        }
    }
    let pct = |a: usize, b: usize| {
        if a == 0 {
            0.0
        } else {
            100.0 * (a as f64 - b as f64) / a as f64
        }
    };
    let mut line = format!(
        "tokens: {} → {} (−{:.1}%, estimate)",
        r.tokens_before,
        r.tokens_in_context,
        pct(r.tokens_before, r.tokens_in_context)
    );
    if let (Some(eb), Some(ea)) = (r.exact_tokens_before, r.exact_tokens_in_context) {
        line.push_str(&format!("; {eb} → {ea} (model tokenizer)"));
    }
    writeln!(
        out,
        "{d}{line} · mode {} · trim {} · {:.1} ms{z}",
        r.mode,
        if s.options.trim.is_some() {
            "on"
        } else {
            "off"
        },
        r.timings.total_ms
    )?;
    Ok(())
}
