//! `bib ask "<question>"` — hybrid retrieval over the knowledge base, optional sentence
//! trimming, token accounting, the query log, and optional answer synthesis.
//!
//! Settings come from flags > environment > `bib.toml` > defaults (see `bib_retrieve::config`).
//! `--json` prints one object whose shape is stable (external checks read it):
//! `{query, mode, top_k, trim, tokens_before, tokens_in_context, exact_tokens_before,
//!   exact_tokens_in_context, timings, results: [{rank, chunk_id, node_id, path, collection,
//!   line_start, line_end, chunk_index, title, heading_path, content, score, bm25, vector,
//!   sentences_total, sentences_kept, explain}], answer?}`; `explain` lists every part of
//!   `score` (`bib_retrieve::signals::Explain`), which `--explain` prints as text. `line_start`/`line_end` are 1-based lines of
//!   the file at `path` (see `bib_ingest::lines`).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use bib_embed::Embedder;
use bib_retrieve::config::{AskSettings, Layer, ModelFallback};
use bib_retrieve::retrieve::RetrievalResult;
use bib_retrieve::synth::{self, SynthConfig};
use bib_retrieve::{
    log_entry, EmbeddingCache, Filter, Mode, RetrieveOptions, Retriever, StoreIndex, StoreVectors,
    TrimScorer,
};
use bib_store::Store;
use serde_json::json;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib ask how do I sign a package
  bib ask \"¿cómo firmo un paquete?\" --trim --json
  bib ask nuget push timeout --mode bm25 --no-log

Modes: hybrid (default) and vector need the embedding model the knowledge base was built with,
and so does --trim; --mode bm25 (without --trim) loads no model. When the model cannot be
loaded those asks fail and say how to install it, unless --fallback-bm25 (or
[ask] fallback = \"bm25\" in bib.toml) asks for BM25 instead; --json's `mode` is always the
mode that ran, and `fallback` says why when it is not the one asked for.

Query log: every ask is recorded in the knowledge base (`bib eval` without questions replays
it). Turn it off with --no-log, [ask] log = false in bib.toml, or BIB_QUERY_LOG=0. A store
whose file or directory is read-only is opened read-only: the ask answers and says once on
stderr that it was not logged.")]
pub struct Args {
    /// The question (quotes optional: `bib ask how do I sign a package`).
    #[arg(required = true, num_args = 1.., value_name = "QUESTION")]
    pub question: Vec<String>,
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
    /// Ranking signals over the fused list: `off`, `default`, or weights such as
    /// `field=0.2,phrase=0.3,sentence=0.1,doc=0` (also `[ask] signals`, RETRIEVAL_SIGNALS).
    #[arg(long, value_name = "SPEC")]
    pub signals: Option<String>,
    /// Show, per result, every part of its score: BM25 (raw and scaled), cosine, the fusion
    /// weight, each ranking signal's value, weight and what matched, and the final score.
    #[arg(long)]
    pub explain: bool,
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
    /// Do not write this ask to the query log (also `[ask] log = false`, `BIB_QUERY_LOG=0`).
    #[arg(long)]
    pub no_log: bool,
    /// When the knowledge base's model cannot be loaded, run BM25 only (untrimmed) instead of
    /// failing (also `[ask] fallback = "bm25"`).
    #[arg(long)]
    pub fallback_bm25: bool,
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
        signals: a
            .signals
            .as_deref()
            .map(str::parse::<bib_retrieve::Signals>)
            .transpose()?,
        filters: (!a.filters.is_empty()).then(|| a.filters.clone()),
        llm_base_url: None,
        llm_model: None,
        llm_api_key: None,
        log: a.no_log.then_some(false),
        fallback: a.fallback_bm25.then_some(ModelFallback::Bm25),
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

/// Why an ask needing the model could not have it: the model id and the loader's error.
struct ModelUnavailable {
    model: String,
    error: anyhow::Error,
}

/// The embedder for `model_id`, or why not.
fn try_load(model_id: &str) -> Result<Box<dyn Embedder>, ModelUnavailable> {
    load_embedder(model_id).map_err(|error| ModelUnavailable {
        model: model_id.to_string(),
        error,
    })
}

/// The model the knowledge base's chunks were embedded with (the default when none is recorded).
fn store_model(store: &dyn Store) -> anyhow::Result<String> {
    Ok(store
        .chunk_states()?
        .into_iter()
        .map(|s| s.model_id)
        .find(|m| !m.is_empty())
        .unwrap_or_else(|| bib_embed::DEFAULT_MODEL.to_string()))
}

/// How the store was opened for this ask.
struct Opened {
    store: Arc<dyn Store>,
    /// Set when the store had to be opened read-only although logging was asked for: the
    /// notice to print (once) instead of logging.
    read_only_notice: Option<String>,
}

/// Whether a path's permission bits forbid writing (the file itself, or its directory, which
/// SQLite's WAL files need). Checked on the bits rather than by trying, so that a user who made
/// a copy read-only gets a read-only ask even when running with privileges that ignore them.
fn marked_read_only(path: &Path) -> bool {
    let ro = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.permissions().readonly());
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    ro(path) || ro(dir)
}

/// Open the store: read-only when nothing will be written (no log), or when the file cannot be
/// written (then the log is skipped with one notice); read-write otherwise.
fn open_store(spec: &str, log: bool) -> anyhow::Result<Opened> {
    if crate::store_url::is_url(spec) {
        let store = Arc::from(crate::store_url::open(spec)?);
        return Ok(Opened {
            store,
            read_only_notice: None,
        });
    }
    let read_only = || -> anyhow::Result<Arc<dyn Store>> {
        let s = bib_store::SqliteStore::open_read_only(spec)
            .with_context(|| format!("opening the knowledge base {spec}"))?;
        Ok(Arc::new(s))
    };
    let notice = |why: &str| {
        format!("note: {spec} {why}; answering read-only, this ask is not written to the query log (--no-log silences this)")
    };
    if !log {
        return Ok(Opened {
            store: read_only()?,
            read_only_notice: None,
        });
    }
    if marked_read_only(Path::new(spec)) {
        return Ok(Opened {
            store: read_only()?,
            read_only_notice: Some(notice("is read-only")),
        });
    }
    match crate::store_url::open(spec) {
        Ok(s) => Ok(Opened {
            store: Arc::from(s),
            read_only_notice: None,
        }),
        // A read-only mount, or a file this user may not write: read it anyway.
        Err(rw) => match read_only() {
            Ok(store) => Ok(Opened {
                store,
                read_only_notice: Some(notice("cannot be opened for writing")),
            }),
            Err(_) => Err(rw),
        },
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let settings = AskSettings::resolve(
        flag_layer(&a)?,
        Layer::from_env(env_var)?,
        file_layer(a.config.as_deref())?,
        bib_store::DEFAULT_STORE_PATH,
    )?;
    let question = a.question.join(" ");
    if question.trim().is_empty() {
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
    let Opened {
        store,
        read_only_notice,
    } = open_store(&spec, settings.log)?;

    // Load only what the mode needs: BM25 without trimming needs no model at all.
    let mut options = settings.options.clone();
    let needs_model = options.mode != Mode::Bm25 || options.trim.is_some();
    let mut fallback_reason = None;
    let embedder = if needs_model {
        match try_load(&store_model(store.as_ref())?) {
            Ok(e) => Some(e),
            Err(u) if settings.fallback == ModelFallback::Bm25 => {
                let why = format!("model `{}` unavailable: {:#}", u.model, u.error);
                eprintln!(
                    "warning: {why}; running BM25 only{} (fallback = \"bm25\")",
                    if options.trim.is_some() {
                        ", untrimmed"
                    } else {
                        ""
                    }
                );
                options.mode = Mode::Bm25;
                options.trim = None;
                fallback_reason = Some(why);
                None
            }
            Err(u) => {
                let what = if options.mode == Mode::Bm25 {
                    "--trim".to_string()
                } else {
                    format!("--mode {}", options.mode)
                };
                return Err(u.error.context(format!(
                    "{what} needs the embedding model `{m}` that {spec} was built with, and it \
                     cannot be loaded. Install it with `bib model install {m}`, or ask with \
                     `--mode bm25` (keyword search, no model), or pass --fallback-bm25",
                    m = u.model
                )));
            }
        }
    } else {
        None
    };

    let index = StoreIndex::new(store.as_ref());
    // Sentence vectors persist in the store's cache, so the next ask reuses them.
    let cache = EmbeddingCache::default().with_backing(Arc::new(StoreVectors(store.clone())));
    let retriever = Retriever::new(&index, embedder.as_deref(), &cache);
    let result = retriever.retrieve(&question, &options, &filter)?;

    if let Some(n) = &read_only_notice {
        eprintln!("{n}");
    } else if settings.log {
        if let Err(e) = store.log_query(&log_entry(&result, &options, &filter)) {
            eprintln!("warning: could not write the query log: {e}");
        }
    }

    if a.json {
        let mut v = result_json(&result, &settings, &options);
        if let Some(why) = &fallback_reason {
            v["fallback"] = json!(why);
            v["mode_requested"] = json!(settings.options.mode);
        }
        if let Some(cfg) = &synth_cfg {
            let answer = synth::synthesize(cfg, &question, &result.chunks, &mut std::io::sink())?;
            v["answer"] = json!(answer);
        }
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
        return Ok(());
    }

    let mut out = std::io::stdout().lock();
    print_human(&mut out, &result, &options, synth_cfg.is_none(), a.explain)?;
    if let Some(cfg) = &synth_cfg {
        writeln!(out, "\n── answer ({}) ──", cfg.model)?;
        out.flush()?;
        synth::synthesize(cfg, &question, &result.chunks, &mut out)?;
        writeln!(out)?;
    }
    Ok(())
}

fn result_json(r: &RetrievalResult, s: &AskSettings, o: &RetrieveOptions) -> serde_json::Value {
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
                "explain": c.explain,
            })
        })
        .collect();
    json!({
        "query": r.query,
        "mode": r.mode,
        "fusion": (r.mode == bib_retrieve::Mode::Hybrid).then(|| json!({
            "method": o.fusion.as_str(),
            "alpha": o.convex_alpha,
            "rrf_k": o.rrf_k,
        })),
        "top_k": o.top_k,
        "filters": s.filters,
        "trim": o.trim,
        "signals": o.signals,
        "tokens_before": r.tokens_before,
        "tokens_in_context": r.tokens_in_context,
        "exact_tokens_before": r.exact_tokens_before,
        "exact_tokens_in_context": r.exact_tokens_in_context,
        "timings": r.timings,
        "results": results,
    })
}

/// The `--explain` lines of one result: the lists, the fusion, each signal, the final score.
fn explain_lines(e: &bib_retrieve::signals::Explain) -> Vec<String> {
    let opt = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "–".to_string(), |x| format!("{x:.digits$}"))
    };
    let mut lines = vec![format!(
        "bm25 {} (scaled {}) · cosine {} (scaled {}) · {}{} → fused {:.4}",
        opt(e.bm25, 2),
        opt(e.bm25_norm, 3),
        opt(e.cosine, 3),
        opt(e.cosine_norm, 3),
        e.fusion,
        e.alpha.map_or_else(String::new, |a| format!(" α {a:.2}")),
        e.fused
    )];
    for (name, part) in [
        ("field", &e.field),
        ("phrase", &e.phrase),
        ("sentence", &e.sentence),
        ("sent-bm25", &e.sentence_lex),
        ("doc", &e.doc),
    ] {
        let Some(p) = part else { continue };
        let mut l = format!(
            "+ {name:<9} {:.3} × {:.2} = {:.4}",
            p.value, p.weight, p.contribution
        );
        if let Some(raw) = p.raw {
            l.push_str(&format!(" (raw {raw:.3})"));
        }
        if !p.matched.is_empty() {
            let shown: Vec<String> = p
                .matched
                .iter()
                .map(|m| {
                    let cut: String = m.chars().take(80).collect();
                    if cut.len() < m.len() {
                        format!("{cut}…")
                    } else {
                        cut
                    }
                })
                .collect();
            l.push_str(&format!(" [{}]", shown.join(" | ")));
        }
        lines.push(l);
    }
    lines.push(format!("= final {:.4}", e.final_score));
    lines
}

fn print_human(
    out: &mut dyn Write,
    r: &RetrievalResult,
    o: &RetrieveOptions,
    full: bool,
    explain: bool,
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
        if explain {
            for l in explain_lines(&c.explain) {
                writeln!(out, "    {d}{l}{z}")?;
            }
        }
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
        if o.trim.is_some() { "on" } else { "off" },
        r.timings.total_ms
    )?;
    Ok(())
}
