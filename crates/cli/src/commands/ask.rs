//! `bib ask "<question>"` — hybrid retrieval over the knowledge base, optional sentence
//! trimming, token accounting, the query log, and optional answer synthesis.
//!
//! Settings come from flags > environment > `bib.toml` > defaults (`bib_app::Settings`).
//! `--json` prints one object whose shape is stable (external checks read it):
//! `{query, mode, top_k, trim, tokens_before, tokens_in_context, exact_tokens_before,
//!   exact_tokens_in_context, timings, results: [{rank, chunk_id, node_id, path, collection,
//!   line_start, line_end, chunk_index, title, heading_path, content, score, bm25, vector,
//!   sentences_total, sentences_kept, explain}], signals, no_good_match, best_cosine,
//!   relevance_floor, trim_dropped, rerank, warnings, corrections, synonyms, answer?}`. `explain` lists every part of `score`
//!   (`bib_retrieve::signals::Explain`), which `--explain` prints as text; `signals` is the
//!   weights that ran. `line_start`/`line_end` are 1-based lines of the file at `path` (see
//!   `bib_ingest::lines`); `no_good_match` is `bib_retrieve::relevance`'s verdict. `rerank` is
//!   the LLM reranker's options when it ran (else null) and `warnings` what went wrong without
//!   failing the ask (a reranker that could not rerank), also printed on stderr.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::bail;
use bib_app::{ModelFallback, Settings, StoreSpec};
use bib_embed::Embedder;
use bib_retrieve::retrieve::RetrievalResult;
use bib_retrieve::synth::{self, SynthConfig};
use bib_retrieve::{
    log_entry, EmbeddingCache, Fusion, Mode, RetrieveOptions, Retriever, Signals, StoreIndex,
    StoreVectors, TrimScorer,
};
use bib_store::Store;
use serde_json::json;

use crate::settings::SettingsArgs;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib ask how do I sign a package
  bib ask \"¿cómo firmo un paquete?\" --trim --json
  bib ask nuget push timeout --mode bm25 --no-log
  bib ask --trim -- -SkipDuplicate     a question that starts with '-' goes after --

Modes: hybrid (default) and vector need the embedding model the knowledge base was built with,
and so does --trim; --mode bm25 (without --trim) loads no model. When the model cannot be
loaded those asks fail and say how to install it, unless --fallback-bm25 (or
[ask] fallback = \"bm25\" in bib.toml) asks for BM25 instead; --json's `mode` is always the
mode that ran, and `fallback` says why when it is not the one asked for.

Query log: every ask is recorded in the knowledge base (`bib eval` without questions replays
it). Turn it off with --no-log, [ask] log = false in bib.toml, or BIB_QUERY_LOG=0. A store
whose file or directory is read-only is opened read-only: the ask answers and says once on
stderr that it was not logged.

Reranking: --rerank sends the best --rerank-depth candidates (default 20) to the [llm] chat
endpoint that --synthesize uses, in one request, and adds its 0-10 judgement of each to the
score (see --explain). Off by default. When the endpoint is unset, slow (past
[ask] rerank_timeout_s), failing or answering nonsense, the ask answers without it and says so
on stderr.")]
pub struct Args {
    /// The question (quotes optional: `bib ask how do I sign a package`).
    #[arg(required = true, num_args = 1.., value_name = "QUESTION")]
    pub question: Vec<String>,
    /// Number of chunks to return
    #[arg(long, short = 'k')]
    pub top_k: Option<usize>,
    /// Retrieval mode
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Trim each chunk to the sentences relevant to the question
    #[arg(long, overrides_with = "no_trim")]
    pub trim: bool,
    /// Do not trim (the default)
    #[arg(long, overrides_with = "trim")]
    pub no_trim: bool,
    /// Lowest sentence-to-question similarity (cosine) trimming keeps (unset: calibrated for the knowledge base's model)
    #[arg(long)]
    pub trim_threshold: Option<f32>,
    /// Neighbouring sentences kept on each side of a kept sentence
    #[arg(long)]
    pub trim_window: Option<usize>,
    /// Sentences kept per chunk even when none is similar enough
    #[arg(long)]
    pub trim_min_sentences: Option<usize>,
    /// Sentences of all results always kept for their keyword (BM25) rank; 0 keeps by
    /// similarity only
    #[arg(long)]
    pub trim_lexical_top: Option<usize>,
    /// How trimming ranks sentences: by similarity, or keyword rank fused with similarity
    #[arg(long, value_enum)]
    pub trim_scorer: Option<TrimScorer>,
    /// Metadata filter `key=value` (front-matter field, or `path=<prefix>`); repeatable, all
    /// must hold
    #[arg(long = "filter", value_name = "KEY=VALUE")]
    pub filters: Vec<String>,
    /// Synonym rule of the keyword search, `a, b => c` or `a, b, c` (repeatable; replaces
    /// `ask.synonyms` of bib.toml for this ask: try a rule before adding it)
    #[arg(long = "synonym", value_name = "RULE")]
    pub synonyms: Vec<String>,
    /// Only documents of this collection (repeatable: any of them) [default: all]
    #[arg(long = "collection", value_name = "NAME")]
    pub collections: Vec<String>,
    /// Constant k of reciprocal rank fusion (--fusion rrf)
    #[arg(long)]
    pub rrf_k: Option<f64>,
    /// How hybrid mode combines keyword and vector results
    #[arg(long, value_enum)]
    pub fusion: Option<Fusion>,
    /// Keyword (BM25) weight of convex fusion, from 0 to 1
    #[arg(long)]
    pub fusion_alpha: Option<f64>,
    /// Ranking signals over the fused list: `off`, `default`, or weights over the defaults
    /// such as `field=0.2,phrase=0.3,sentence=0,doc=0` (after a leading `off`, over none:
    /// `off,name=1`)
    #[arg(long, value_name = "SPEC")]
    pub signals: Option<Signals>,
    /// Show, per result, every part of its score: BM25 (raw and scaled), cosine, the fusion
    /// weight, each ranking signal's value, weight and what matched, and the final score
    #[arg(long)]
    pub explain: bool,
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
    /// Send the question and context to the configured chat endpoint and stream the answer
    #[arg(long)]
    pub synthesize: bool,
    /// Rerank the best candidates with the configured chat model ([llm]), after the ranking
    /// signals
    #[arg(long, overrides_with = "no_rerank")]
    pub rerank: bool,
    /// Do not rerank (the default)
    #[arg(long, overrides_with = "rerank")]
    pub no_rerank: bool,
    /// Candidates the reranker judges
    #[arg(long, value_name = "N")]
    pub rerank_depth: Option<usize>,
    /// Do not write this ask to the query log
    #[arg(long)]
    pub no_log: bool,
    /// When the knowledge base's model cannot be loaded, answer with keywords only (untrimmed)
    /// instead of failing
    #[arg(long)]
    pub fallback_bm25: bool,
}

/// The flags of this ask over the merged settings.
fn apply_flags(a: &Args, s: &mut Settings) {
    let ask = &mut s.ask;
    let set = |slot: &mut usize, v: Option<usize>| {
        if let Some(v) = v {
            *slot = v;
        }
    };
    set(&mut ask.top_k, a.top_k);
    set(&mut ask.trim_window, a.trim_window);
    set(&mut ask.trim_min_sentences, a.trim_min_sentences);
    set(&mut ask.trim_lexical_top, a.trim_lexical_top);
    set(&mut ask.rerank_depth, a.rerank_depth);
    ask.mode = a.mode.unwrap_or(ask.mode);
    ask.trim_scorer = a.trim_scorer.unwrap_or(ask.trim_scorer);
    ask.fusion = a.fusion.unwrap_or(ask.fusion);
    ask.fusion_alpha = a.fusion_alpha.or(ask.fusion_alpha);
    ask.rrf_k = a.rrf_k.unwrap_or(ask.rrf_k);
    ask.trim_threshold = a.trim_threshold.or(ask.trim_threshold);
    if a.trim {
        ask.trim = true;
    } else if a.no_trim {
        ask.trim = false;
    }
    if a.rerank {
        ask.rerank = true;
    } else if a.no_rerank {
        ask.rerank = false;
    }
    if !a.filters.is_empty() {
        ask.filters = a.filters.clone();
    }
    if !a.synonyms.is_empty() {
        ask.synonyms = a.synonyms.clone();
    }
    if a.no_log {
        ask.log = false;
    }
    if a.fallback_bm25 {
        ask.fallback = ModelFallback::Bm25;
    }
    if let Some(sig) = a.signals {
        ask.signals = sig;
    }
}

pub(crate) use bib_app::model::{load_embedder, store_model};

/// Why an ask needing the model could not have it: the model id and the loader's error.
struct ModelUnavailable {
    model: String,
    error: anyhow::Error,
}

/// The embedder for `model_id`, or why not.
fn try_load(model_id: &str, settings: &Settings) -> Result<Box<dyn Embedder>, ModelUnavailable> {
    load_embedder(model_id, &settings.embed).map_err(|error| ModelUnavailable {
        model: model_id.to_string(),
        error: error.into(),
    })
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
fn open_store(spec: &StoreSpec, log: bool) -> anyhow::Result<Opened> {
    let Some(path) = spec.sqlite_path() else {
        return Ok(Opened {
            store: Arc::from(spec.open()?),
            read_only_notice: None,
        });
    };
    let read_only = || -> anyhow::Result<Arc<dyn Store>> {
        match spec.open_read_only() {
            // A store of an older schema upgrades on its first writable open: do that once,
            // when the file may be written, instead of refusing a read.
            Some(Err(bib_app::store::OpenError::Open {
                source:
                    bib_store::StoreError::Schema {
                        found, expected, ..
                    },
                ..
            })) if found < expected && !marked_read_only(path) => Ok(Arc::from(spec.open()?)),
            Some(s) => Ok(Arc::from(s?)),
            None => Ok(Arc::from(spec.open()?)),
        }
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
    if marked_read_only(path) {
        return Ok(Opened {
            store: read_only()?,
            read_only_notice: Some(notice("is read-only")),
        });
    }
    match spec.open() {
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
            Err(_) => Err(rw.into()),
        },
    }
}

/// What [`load_model`] gives the ask.
struct Model {
    /// `None` when the ask runs without one (BM25 untrimmed, asked for or fallen back to).
    embedder: Option<Box<dyn Embedder>>,
    /// Why the ask fell back to BM25, when it did.
    fallback_reason: Option<String>,
}

/// The embedding model the ask needs (none for BM25 without trimming), loaded. When it cannot
/// be loaded and `fallback = "bm25"`, none, with `options` switched to untrimmed BM25 and the
/// reason; otherwise an error that says how to install it or ask without it.
fn load_model(
    store: &dyn Store,
    settings: &Settings,
    spec: &StoreSpec,
    options: &mut RetrieveOptions,
) -> anyhow::Result<Model> {
    let needs_model = options.mode != Mode::Bm25 || options.trim.is_some();
    let mut fallback_reason = None;
    let embedder = if needs_model {
        match try_load(&store_model(store)?, settings) {
            Ok(e) => Some(e),
            Err(u) if settings.ask.fallback == ModelFallback::Bm25 => {
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
                let m = &u.model;
                let fix = match bib_app::model::ModelSpec::parse(m) {
                    Ok(bib_app::model::ModelSpec::Endpoint { .. }) => {
                        "Check its endpoint (BIB_EMBED_BASE_URL, or [embed] base_url in bib.toml)"
                            .to_string()
                    }
                    _ => format!("Install it with `bib model install {m}`"),
                };
                return Err(u.error.context(format!(
                    "{what} needs the embedding model `{m}` that {spec} was built with, and it \
                     cannot be loaded. {fix}, or ask with `--mode bm25` (keyword search, no \
                     model), or pass --fallback-bm25"
                )));
            }
        }
    } else {
        None
    };

    Ok(Model {
        embedder,
        fallback_reason,
    })
}

/// The `[llm]` endpoint of `settings` for the reranker: `None` when it is not configured
/// (the reranker then warns and the ask goes on without it).
pub(crate) fn rerank_llm(settings: &Settings) -> Option<SynthConfig> {
    if !settings.ask.rerank {
        return None;
    }
    synth_config(settings, true).ok().flatten()
}

/// The `[llm]` endpoint of `settings`, when answers are to be synthesized (`on`).
pub(crate) fn synth_config(settings: &Settings, on: bool) -> anyhow::Result<Option<SynthConfig>> {
    if !on {
        return Ok(None);
    }
    Ok(Some(SynthConfig::from_parts(
        settings.llm.base_url.clone(),
        settings.llm.model.clone(),
        settings.llm.api_key.clone(),
    )?))
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let settings = a.settings.resolve(|s| apply_flags(&a, s))?;
    let question = a.question.join(" ");
    if question.trim().is_empty() {
        bail!("the question is empty");
    }
    let mut filter = settings.ask.filter()?;
    filter.collections = a.collections.clone();
    let synth_cfg = synth_config(&settings, a.synthesize)?;

    // A SQLite file or a postgres:// URL.
    let spec = &settings.store;
    if !spec.exists() {
        return Err(bib_app::OpenError::NotFound {
            store: spec.to_string(),
        }
        .into());
    }
    let Opened {
        store,
        read_only_notice,
    } = open_store(spec, settings.ask.log)?;

    // Load only what the mode needs: BM25 without trimming needs no model at all.
    // Trimming's threshold is calibrated per model: the one the knowledge base was built with.
    let mut options = settings.ask.retrieve_options(&store_model(store.as_ref())?);
    let Model {
        embedder,
        fallback_reason,
    } = load_model(store.as_ref(), &settings, spec, &mut options)?;

    let index = StoreIndex::new(store.as_ref());
    // Sentence vectors persist in the store's cache, so the next ask reuses them.
    let cache = EmbeddingCache::default().with_backing(Arc::new(StoreVectors(store.clone())));
    let llm = rerank_llm(&settings);
    let retriever = Retriever::new(&index, embedder.as_deref(), &cache).with_llm(llm.as_ref());
    let result = retriever.retrieve(&question, &options, &filter)?;
    for w in &result.warnings {
        eprintln!("warning: {w}");
    }

    if let Some(n) = &read_only_notice {
        eprintln!("{n}");
    } else if settings.ask.log {
        if let Err(e) = store.log_query(&log_entry(&result, &options, &filter)) {
            eprintln!("warning: could not write the query log: {e}");
        }
    }

    if a.json {
        let mut v = result_json(&result, &settings, &options);
        if let Some(why) = &fallback_reason {
            v["fallback"] = json!(why);
            v["mode_requested"] = json!(settings.ask.mode);
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
    // "no results" from a knowledge base that holds nothing: say what to do (stderr, so a
    // pipe reads the same answer either way).
    if result.chunks.is_empty() && store.lexical_stats().is_ok_and(|s| s.chunks == 0) {
        out.flush()?;
        eprintln!("hint: the knowledge base at {spec} holds no chunks yet; add Markdown with `bib ingest <dir>`");
    }
    if let Some(cfg) = &synth_cfg {
        writeln!(out, "\n── answer ({}) ──", cfg.model)?;
        out.flush()?;
        synth::synthesize(cfg, &question, &result.chunks, &mut out)?;
        writeln!(out)?;
    }
    Ok(())
}

fn result_json(r: &RetrievalResult, s: &Settings, o: &RetrieveOptions) -> serde_json::Value {
    let results: Vec<_> = r
        .chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({
                "rank": i + 1,
                "chunk_id": c.chunk.id,
                "node_id": c.chunk.node_id,
                "path": c.chunk.path,
                "collection": c.chunk.collection,
                "line_start": c.chunk.line_start,
                "line_end": c.chunk.line_end,
                "chunk_index": c.chunk.chunk_index,
                "title": c.chunk.title,
                "heading_path": c.chunk.heading_path,
                "content": c.text,
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
        "filters": s.ask.filters,
        "trim": o.trim,
        "signals": o.signals,
        "tokens_before": r.tokens_before,
        "tokens_in_context": r.tokens_in_context,
        "exact_tokens_before": r.exact_tokens_before,
        "exact_tokens_in_context": r.exact_tokens_in_context,
        "timings": r.timings,
        "no_good_match": r.relevance.no_good_match,
        "best_cosine": r.relevance.best_cosine,
        "relevance_floor": r.relevance.floor,
        "trim_dropped": r.trim_dropped,
        "rerank": o.rerank,
        "warnings": r.warnings,
        "corrections": r.corrections,
        "synonyms": r.synonyms,
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
        ("name", &e.name),
        ("phrase", &e.phrase),
        ("sentence", &e.sentence),
        ("sent-bm25", &e.sentence_lex),
        ("doc", &e.doc),
        ("prf", &e.prf),
        ("prf-vec", &e.prf_vec),
        ("llm", &e.llm),
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
    lines.push(if e.past_depth {
        format!(
            "= final {:.4} (past the re-scoring depth, `--signals depth=N`: no signals)",
            e.final_score
        )
    } else {
        format!("= final {:.4}", e.final_score)
    });
    lines
}

fn print_human(
    out: &mut dyn Write,
    r: &RetrievalResult,
    o: &RetrieveOptions,
    full: bool,
    explain: bool,
) -> anyhow::Result<()> {
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let (b, d, z) = if color {
        ("\x1b[1m", "\x1b[2m", "\x1b[0m")
    } else {
        ("", "", "")
    };
    if !r.corrections.is_empty() {
        let fixed: Vec<String> = r
            .corrections
            .iter()
            .map(|c| format!("{} → {}", c.from, c.to))
            .collect();
        writeln!(
            out,
            "{d}searched with typos corrected: {}{z}",
            fixed.join(", ")
        )?;
    }
    if !r.synonyms.is_empty() {
        let added: Vec<String> = r
            .synonyms
            .iter()
            .map(|x| format!("{} (for {})", x.added.join(", "), x.matched))
            .collect();
        writeln!(out, "{d}also searched for: {}{z}", added.join("; "))?;
    }
    if r.chunks.is_empty() {
        writeln!(out, "no results for {:?}", r.query)?;
    } else if r.relevance.no_good_match {
        writeln!(
            out,
            "{b}no good match{z} for {:?}: nothing in the knowledge base is close to it \
             (best cosine {:.2} < floor {:.2}); the nearest results follow\n",
            r.query,
            r.relevance.best_cosine.unwrap_or(0.0),
            r.relevance.floor.unwrap_or(0.0)
        )?;
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
            writeln!(out, "{}\n", c.text.trim_end())?;
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
