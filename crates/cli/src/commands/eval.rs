//! `bib eval` — the retrieval A/B harness (`bib_eval::evaluate`): compares baseline, trimming,
//! BM25/vector/hybrid and small-to-big over a golden set, a list of questions, or the last N
//! questions of the query log, and optionally sweeps the trimming threshold.
//!
//! Output: a table on the terminal, `--json` for machines, `--html PATH` for a self-contained
//! report with the calibration chart. `--xquad DIR` evaluates XQuAD (one language) converted on
//! the fly into an in-memory index, instead of the knowledge base.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use bib_embed::{EmbedKind, Embedder};
use bib_eval::{EvalArgs, EvalReport, GoldenItem, Kb, SweepSpec, Variant};
use bib_retrieve::config::Layer;
use bib_retrieve::synth::SynthConfig;
use bib_retrieve::{ChunkRecord, EmbeddingCache, MemoryIndex, Mode, TrimScorer};
use bib_store::{SqliteStore, Store};
use serde::Deserialize;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Golden set (JSONL: question, optional files, evidence, answer).
    #[arg(long, value_name = "FILE")]
    pub golden: Option<PathBuf>,
    /// A question to evaluate (repeatable); overrides --golden.
    #[arg(long = "question", short = 'q', value_name = "TEXT")]
    pub questions: Vec<String>,
    /// Without questions or --golden: replay this many of the latest logged questions.
    #[arg(long, default_value_t = bib_eval::DEFAULT_LAST_N)]
    pub last: usize,
    /// Evaluate at most this many questions.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Chunks per question.
    #[arg(long, short = 'k', default_value_t = 5)]
    pub top_k: usize,
    /// Trimming threshold (default: RETRIEVAL_TRIM_THRESHOLD, bib.toml, or the calibrated value).
    #[arg(long)]
    pub trim_threshold: Option<f32>,
    /// Neighbouring sentences kept around each kept sentence.
    #[arg(long, default_value_t = bib_retrieve::trim::ASK_PROFILE.window)]
    pub trim_window: usize,
    /// Sentences kept per chunk even when none passes the threshold.
    #[arg(long, default_value_t = bib_retrieve::trim::ASK_PROFILE.min_sentences)]
    pub trim_min_sentences: usize,
    /// Sentences of the whole context always kept for their sentence-level BM25 rank.
    #[arg(long, default_value_t = bib_retrieve::trim::ASK_PROFILE.lexical_top)]
    pub trim_lexical_top: usize,
    /// Neighbours each small-to-big sentence hit expands to inside its chunk.
    #[arg(long, default_value_t = 1)]
    pub small_to_big_window: usize,
    /// Retrieval mode of the baseline and trimming variants: hybrid, bm25 or vector.
    #[arg(long, default_value = "hybrid")]
    pub mode: String,
    /// Variants to compare (comma-separated, or `all`): baseline, trim, trim-hybrid, bm25,
    /// vector, hybrid, plain (hybrid without the ranking signals), small-to-big.
    #[arg(long, default_value = "all")]
    pub variants: String,
    /// Sentence hits per question for small-to-big (default 2 × top-k).
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
    /// Sentence scorer swept: cosine (the spec's trimming) or hybrid.
    #[arg(long, default_value = "cosine")]
    pub sweep_scorer: String,
    /// Ranking signals of every variant but `plain`: `off`, `default`, or weights such as
    /// `field=0.2,phrase=0.3` (as `bib ask --signals`).
    #[arg(long, default_value = "default", value_name = "SPEC")]
    pub signals: String,
    /// Ask the configured chat endpoint for an answer per variant (default: retrieval only).
    #[arg(long)]
    pub synthesize: bool,
    /// Knowledge-base file (default .bib/kb.sqlite, or BIB_STORE).
    #[arg(long)]
    pub store: Option<PathBuf>,
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

fn env_var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.trim().is_empty())
}

fn eval_args(a: &Args, env: &Layer) -> anyhow::Result<EvalArgs> {
    let sweep = a
        .sweep
        .as_deref()
        .map(|s| SweepSpec::parse(s, a.sweep_windows.clone()))
        .transpose()?;
    Ok(EvalArgs {
        top_k: a.top_k,
        trim_threshold: a
            .trim_threshold
            .or(env.trim_threshold)
            .unwrap_or(bib_retrieve::trim::ASK_PROFILE.threshold),
        trim_window: a.trim_window,
        trim_min_sentences: a.trim_min_sentences,
        trim_lexical_top: a.trim_lexical_top,
        small_to_big_window: a.small_to_big_window,
        mode: a.mode.parse::<Mode>()?,
        synthesize: a.synthesize,
        questions: a.questions.clone(),
        golden: a.golden.clone(),
        last_n: a.last,
        limit: a.limit,
        variants: Variant::parse_list(&a.variants)?,
        small_to_big_hits: a.small_to_big_hits,
        quality_tolerance: a.quality_tolerance,
        filters: a.filters.clone(),
        sweep,
        sweep_scorer: a.sweep_scorer.parse::<TrimScorer>()?,
        signals: a.signals.parse::<bib_retrieve::Signals>()?,
        ..EvalArgs::default()
    })
}

fn load_model(model_id: &str) -> anyhow::Result<Box<dyn Embedder>> {
    match model_id {
        "use-m3" => Ok(Box::new(bib_embed::UseM3::load_default()?)),
        other => {
            bail!("the knowledge base was embedded with `{other}`, which this build cannot load")
        }
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let env = Layer::from_env(env_var)?;
    let args = eval_args(&a, &env)?;
    let synth = if args.synthesize {
        Some(SynthConfig::from_parts(
            env.llm_base_url.clone(),
            env.llm_model.clone(),
            env.llm_api_key.clone(),
        )?)
    } else {
        None
    };
    let needs_model = args
        .variants
        .iter()
        .any(|v| v.needs_embedder(args.mode == Mode::Bm25))
        || args.sweep.is_some();
    let cache = EmbeddingCache::default();

    let report = if let Some(dir) = &a.xquad {
        let embedder = load_model(bib_embed::DEFAULT_MODEL)?;
        let (index, items) = xquad(dir, &a.lang, embedder.as_ref(), &cache)?;
        let mut items = items;
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
            cache: &cache,
            synth: synth.as_ref(),
        };
        let source = format!("xquad:{}:{}", a.lang, dir.display());
        bib_eval::evaluate(&kb, &items, &source, &args)?
    } else {
        let path = a
            .store
            .clone()
            .or(env.store.clone())
            .unwrap_or_else(|| PathBuf::from(bib_store::DEFAULT_STORE_PATH));
        if !path.is_file() {
            bail!(
                "no knowledge base at {} (run `bib ingest <dir>` first, or pass --store)",
                path.display()
            );
        }
        let store =
            SqliteStore::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let model_id = store
            .chunk_states()?
            .into_iter()
            .map(|s| s.model_id)
            .find(|m| !m.is_empty())
            .unwrap_or_else(|| bib_embed::DEFAULT_MODEL.to_string());
        let embedder = match load_model(&model_id) {
            Ok(e) => Some(e),
            Err(e) if needs_model => return Err(e),
            Err(_) => None,
        };
        bib_eval::evaluate_store(&store, embedder.as_deref(), &cache, synth.as_ref(), &args)?
    };
    emit(&a, &report)
}

fn emit(a: &Args, report: &EvalReport) -> anyhow::Result<()> {
    if let Some(p) = &a.html {
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(p, bib_eval::html::render(report))
            .with_context(|| format!("writing {}", p.display()))?;
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
                citation: Default::default(),
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
