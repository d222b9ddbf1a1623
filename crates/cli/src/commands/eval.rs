//! `bib eval` — the retrieval A/B harness (`bib_eval::evaluate`): compares baseline, trimming,
//! BM25/vector/hybrid and small-to-big over a golden set, a list of questions, or the last N
//! questions of the query log, and optionally sweeps the trimming threshold.
//!
//! Output: a table on the terminal, `--json` for machines, `--html PATH` for a self-contained
//! report with the calibration chart. `--xquad DIR` evaluates XQuAD (one language) converted on
//! the fly into an in-memory index, instead of the knowledge base.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bib_app::Settings;
use bib_embed::{EmbedKind, Embedder};
use bib_eval::{EvalArgs, EvalReport, GoldenItem, Kb, SweepSpec, Variant};
use bib_retrieve::synth::SynthConfig;
use bib_retrieve::trim::calibrated_threshold;
use bib_retrieve::{ChunkRecord, EmbeddingCache, MemoryIndex, Mode, TrimScorer};
use serde::Deserialize;

use super::ask::{load_embedder, store_model};
use crate::settings::SettingsArgs;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib eval                                     the last 15 distinct questions asked
  bib eval --golden golden.jsonl --html report.html
  bib eval -q \"how do I sign a package\" --per-question
  bib eval --golden golden.jsonl --sweep 0.16:0.50:0.02 --json > sweep.json

Quality (evidence or answer kept) can only be measured against a golden set; over logged
questions the verdict is \"unknown\" unless tokens alone decide it.")]
pub struct Args {
    /// Golden set (JSONL: question, optional files, evidence, answer).
    #[arg(long, value_name = "FILE")]
    pub golden: Option<PathBuf>,
    /// A question to evaluate (repeatable); overrides --golden.
    #[arg(long = "question", short = 'q', value_name = "TEXT")]
    pub questions: Vec<String>,
    /// Without questions or --golden: replay this many distinct questions, the latest logged
    #[arg(long, default_value_t = bib_eval::DEFAULT_LAST_N)]
    pub last: usize,
    /// Evaluate at most this many questions.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Chunks per question
    #[arg(long, short = 'k')]
    pub top_k: Option<usize>,
    /// Lowest sentence-to-question similarity (cosine) the trimming variants keep
    #[arg(long)]
    pub trim_threshold: Option<f32>,
    /// Neighbouring sentences kept on each side of a kept sentence
    #[arg(long)]
    pub trim_window: Option<usize>,
    /// Sentences kept per chunk even when none is similar enough
    #[arg(long)]
    pub trim_min_sentences: Option<usize>,
    /// Sentences of all results always kept for their keyword (BM25) rank
    #[arg(long)]
    pub trim_lexical_top: Option<usize>,
    /// Neighbours each small-to-big sentence hit expands to inside its chunk.
    #[arg(long, default_value_t = 1)]
    pub small_to_big_window: usize,
    /// Retrieval mode of the baseline and trimming variants
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Variants to compare (comma-separated, or `all`): baseline, trim, trim-hybrid, bm25,
    /// vector, hybrid, plain (hybrid without the ranking signals), small-to-big.
    #[arg(long, default_value = "all")]
    pub variants: String,
    /// Sentence hits per question for small-to-big [default: 2 × top-k]
    #[arg(long)]
    pub small_to_big_hits: Option<usize>,
    /// How much evidence/answer recall may drop and still count as "not worse".
    #[arg(long, default_value_t = 0.05)]
    pub quality_tolerance: f64,
    /// Metadata filter `key=value` (repeatable).
    #[arg(long = "filter", value_name = "KEY=VALUE")]
    pub filters: Vec<String>,
    /// Calibration sweep of the trimming threshold, FROM:TO:STEP (e.g. 0.20:0.60:0.02).
    #[arg(long, value_name = "FROM:TO:STEP")]
    pub sweep: Option<String>,
    /// Windows tried by the sweep.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    pub sweep_windows: Vec<usize>,
    /// How the sweep ranks sentences: by similarity, or keyword rank fused with similarity
    #[arg(long, value_enum, default_value_t = TrimScorer::Cosine)]
    pub sweep_scorer: TrimScorer,
    /// Ranking signals of every variant but `plain`: `off`, `default`, or weights such as
    /// `field=0.2,phrase=0.3` (as `bib ask --signals`)
    #[arg(long, value_name = "SPEC")]
    pub signals: Option<bib_retrieve::Signals>,
    /// Also ask the configured chat endpoint for an answer per variant
    #[arg(long)]
    pub synthesize: bool,
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Evaluate XQuAD from this folder (corpus/queries/answers JSONL) instead of the store.
    #[arg(long, value_name = "DIR")]
    pub xquad: Option<PathBuf>,
    /// XQuAD language.
    #[arg(long, default_value = "es")]
    pub lang: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report here.
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
    /// Print per-question lines too.
    #[arg(long)]
    pub per_question: bool,
}

/// The trimming threshold set by `--trim-threshold` or the settings, if any (else each
/// model's calibrated one applies).
fn explicit_trim_threshold(a: &Args, settings: &Settings) -> Option<f32> {
    a.trim_threshold.or(settings.ask.trim_threshold)
}

/// The harness's arguments: this command's flags over the `[ask]` settings.
fn eval_args(a: &Args, settings: &Settings) -> anyhow::Result<EvalArgs> {
    let ask = &settings.ask;
    let sweep = a
        .sweep
        .as_deref()
        .map(|s| SweepSpec::parse(s, a.sweep_windows.clone()))
        .transpose()?;
    Ok(EvalArgs {
        top_k: a.top_k.unwrap_or(ask.top_k),
        // The default model's calibration here; `eval_store` recalibrates for the store's.
        trim_threshold: explicit_trim_threshold(a, settings)
            .unwrap_or_else(|| calibrated_threshold(bib_embed::DEFAULT_MODEL)),
        trim_window: a.trim_window.unwrap_or(ask.trim_window),
        trim_min_sentences: a.trim_min_sentences.unwrap_or(ask.trim_min_sentences),
        trim_lexical_top: a.trim_lexical_top.unwrap_or(ask.trim_lexical_top),
        small_to_big_window: a.small_to_big_window,
        mode: a.mode.unwrap_or(ask.mode),
        candidates: ask.candidates,
        fusion: ask.fusion,
        // As the threshold: the default model's here, the store's in `eval_store`.
        convex_alpha: ask.convex_alpha(bib_embed::DEFAULT_MODEL),
        synthesize: a.synthesize,
        questions: a.questions.clone(),
        golden: a.golden.clone(),
        last_n: a.last,
        limit: a.limit,
        variants: Variant::parse_list(&a.variants)?,
        small_to_big_hits: a.small_to_big_hits,
        quality_tolerance: a.quality_tolerance,
        filters: if a.filters.is_empty() {
            ask.filters.clone()
        } else {
            a.filters.clone()
        },
        sweep,
        sweep_scorer: a.sweep_scorer,
        signals: a.signals.unwrap_or(ask.signals),
    })
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let settings = a.settings.resolve(|_| ())?;
    let args = eval_args(&a, &settings)?;
    let synth = super::ask::synth_config(&settings, args.synthesize)?;
    let needs_model = args
        .variants
        .iter()
        .any(|v| v.needs_embedder(args.mode == Mode::Bm25))
        || args.sweep.is_some();

    let ctx = Ctx {
        cache: EmbeddingCache::default(),
        synth,
        bars: crate::progress::Bars::for_stderr(a.json),
        needs_model,
        embed: settings.embed.clone(),
    };
    let (report, links) = match &a.xquad {
        Some(dir) => (eval_xquad(&a, &args, dir, &ctx)?, HashMap::new()),
        None => eval_store(
            &args,
            explicit_trim_threshold(&a, &settings),
            &settings,
            &ctx,
        )?,
    };
    emit(&a, &report, &links)
}

/// What both kinds of evaluation share.
struct Ctx {
    cache: EmbeddingCache,
    synth: Option<SynthConfig>,
    bars: crate::progress::Bars,
    needs_model: bool,
    /// The `[embed]` endpoint, for a knowledge base built with an `openai:` model.
    embed: bib_app::EmbedSettings,
}

/// XQuAD converted on the fly into an in-memory knowledge base.
fn eval_xquad(a: &Args, args: &EvalArgs, dir: &Path, ctx: &Ctx) -> anyhow::Result<EvalReport> {
    let embedder = load_embedder(bib_embed::DEFAULT_MODEL, &ctx.embed)?;
    let (index, mut items) = xquad(dir, &a.lang, embedder.as_ref(), &ctx.cache)?;
    if !args.questions.is_empty() {
        items = args.questions.iter().map(GoldenItem::question).collect();
    }
    if let Some(l) = args.limit {
        items.truncate(l);
    }
    let kb = Kb {
        index: &index,
        corpus: Some(&index),
        embedder: Some(embedder.as_ref()),
        cache: &ctx.cache,
        synth: ctx.synth.as_ref(),
        progress: &ctx.bars,
    };
    let source = format!("xquad:{}:{}", a.lang, dir.display());
    Ok(bib_eval::evaluate(&kb, &items, &source, args)?)
}

/// The configured knowledge base, and a `file://` link for each of its documents.
fn eval_store(
    args: &EvalArgs,
    trim_threshold: Option<f32>,
    settings: &Settings,
    ctx: &Ctx,
) -> anyhow::Result<(EvalReport, HashMap<String, String>)> {
    let store = settings.store.open_existing()?;
    let store = store.as_ref();
    let model = store_model(store)?;
    let args = &EvalArgs {
        trim_threshold: trim_threshold.unwrap_or_else(|| calibrated_threshold(&model)),
        convex_alpha: settings.ask.convex_alpha(&model),
        ..args.clone()
    };
    let embedder = match load_embedder(&model, &ctx.embed) {
        Ok(e) => Some(e),
        Err(e) if ctx.needs_model => return Err(e.into()),
        Err(_) => None,
    };
    let report = bib_eval::evaluate_store(
        store,
        embedder.as_deref(),
        &ctx.cache,
        ctx.synth.as_ref(),
        args,
        &ctx.bars,
    )?;
    Ok((report, source_links(store)?))
}

/// `file://` URLs of the documents whose files are on this machine: a collection's folder is
/// the root its latest ingest run read (documents registered over the API have none).
fn source_links(store: &dyn bib_store::Store) -> anyhow::Result<HashMap<String, String>> {
    let mut roots: HashMap<String, PathBuf> = HashMap::new();
    for run in store.runs(1000)? {
        let (Some(c), Some(r)) = (
            run.record["collection"].as_str(),
            run.record["root"].as_str(),
        ) else {
            continue;
        };
        if let Ok(abs) = std::fs::canonicalize(r) {
            roots.entry(c.to_string()).or_insert(abs);
        }
    }
    let mut links = HashMap::new();
    for d in store.documents()? {
        if let Some(file) = roots.get(&d.collection).map(|r| r.join(&d.path)) {
            if file.is_file() {
                links.insert(d.path, file_url(&file));
            }
        }
    }
    Ok(links)
}

/// `file:///…` with everything but unreserved characters and `/` percent-encoded.
fn file_url(path: &Path) -> String {
    let mut out = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn emit(a: &Args, report: &EvalReport, links: &HashMap<String, String>) -> anyhow::Result<()> {
    if let Some(p) = &a.html {
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let html = bib_eval::html::render(report, &|path| links.get(path).cloned());
        std::fs::write(p, html).with_context(|| format!("writing {}", p.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        if a.per_question {
            print!("{}", bib_eval::report::render_questions(report));
            println!();
        }
        print!("{}", bib_eval::report::render_text(report));
        if let Some(p) = &a.html {
            println!("HTML report: {}", p.display());
        }
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
struct XPara {
    #[serde(rename = "_id")]
    id: String,
    title: String,
    text: String,
}

#[derive(Debug, Deserialize)]
struct XQuery {
    #[serde(rename = "_id")]
    id: String,
    text: String,
}

#[derive(Debug, Deserialize)]
struct XAnswer {
    #[serde(rename = "_id")]
    id: String,
    passage_id: String,
    answers: Vec<XSpan>,
}

#[derive(Debug, Deserialize)]
struct XSpan {
    text: String,
    start_byte: usize,
    len_bytes: usize,
}

fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: bad row", path.display(), i + 1))
        })
        .collect()
}

/// XQuAD as a knowledge base: one chunk per paragraph (`[Doc: title]` + text, path
/// `title/id.md`), and one golden item per question whose evidence is the sentence (or
/// sentences) holding the answer span and whose answer is the span's text.
fn xquad(
    dir: &Path,
    lang: &str,
    embedder: &dyn Embedder,
    cache: &EmbeddingCache,
) -> anyhow::Result<(MemoryIndex, Vec<GoldenItem>)> {
    let paras: Vec<XPara> = read_jsonl(&dir.join(format!("corpus.{lang}.jsonl")))?;
    let queries: Vec<XQuery> = read_jsonl(&dir.join(format!("queries.{lang}.jsonl")))?;
    let answers: Vec<XAnswer> = read_jsonl(&dir.join(format!("answers.{lang}.jsonl")))?;
    let mut index = MemoryIndex::new();
    let mut by_id: HashMap<String, (String, String)> = HashMap::new();
    let contents: Vec<String> = paras
        .iter()
        .map(|p| format!("[Doc: {}]\n{}", p.title.replace('_', " "), p.text))
        .collect();
    eprintln!("xquad-{lang}: embedding {} paragraphs", paras.len());
    let mut vecs = Vec::with_capacity(contents.len());
    for batch in contents.chunks(32) {
        let strs: Vec<&str> = batch.iter().map(String::as_str).collect();
        vecs.extend(cache.embed(embedder, &strs, EmbedKind::Passage)?);
    }
    for (i, ((p, c), v)) in paras.iter().zip(&contents).zip(vecs).enumerate() {
        let path = format!("{}/{}.md", p.title, p.id);
        index.add(
            ChunkRecord {
                id: i as i64 + 1,
                path: path.clone(),
                chunk_index: 0,
                title: p.title.clone(),
                heading_path: Vec::new(),
                content: c.clone(),
                metadata: serde_json::Value::Null,
                ..Default::default()
            },
            Some(v.to_vec()),
        )?;
        by_id.insert(p.id.clone(), (path, p.text.clone()));
    }
    let ans: HashMap<&str, &XAnswer> = answers.iter().map(|x| (x.id.as_str(), x)).collect();
    let mut items = Vec::new();
    for q in &queries {
        let Some(x) = ans.get(q.id.as_str()) else {
            continue;
        };
        let Some((path, text)) = by_id.get(&x.passage_id) else {
            continue;
        };
        let Some(span) = x.answers.first() else {
            continue;
        };
        let (lo, hi) = (span.start_byte, span.start_byte + span.len_bytes);
        let sents = bib_text::sentences::split_sentences(text);
        let hit: Vec<_> = sents
            .iter()
            .filter(|s| s.start < hi && s.end > lo)
            .collect();
        let evidence = match (hit.first(), hit.last()) {
            (Some(f), Some(l)) => text.get(f.start..l.end).map(str::to_string),
            _ => None,
        };
        items.push(GoldenItem {
            id: Some(q.id.clone()),
            question: q.text.clone(),
            files: vec![path.clone()],
            evidence: evidence.into_iter().collect(),
            answer: Some(span.text.clone()),
            ..GoldenItem::default()
        });
    }
    Ok((index, items))
}
