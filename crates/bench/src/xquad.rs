//! `bib bench xquad` — does the answer survive sentence trimming, and how many tokens go?
//!
//! For XQuAD-es and XQuAD-en (240 paragraphs, 1,190 questions each): index every paragraph as
//! one chunk (`[Doc: title]` + text), retrieve the top 5 by hybrid search (the product's
//! `Retriever::search`, default fusion), trim them at each threshold of a sweep for each trim
//! variant (`--variants scorer:window:lexical_top:min_sentences`), and report
//! - **kept**: of the questions whose answer was in the retrieved context before trimming, the
//!   fraction whose answer text is still in the trimmed context of its own paragraph;
//! - **reduction**: 1 − tokens after / tokens before (spec estimate, summed over questions).
//!
//! Sentences are scored once per question (one embedding batch, cached by content) and the
//! sweep only re-selects, so the sweep costs nothing extra.

use std::collections::HashMap;
use std::path::PathBuf;

use bib_embed::EmbedKind;

use bib_retrieve::trim::{apply, score_texts, Prepared, SentenceScores, TrimOptions, TrimScorer};
use bib_retrieve::{
    ChunkIndex, ChunkRecord, EmbeddingCache, Filter, Fusion, MemoryIndex, Mode, RetrieveOptions,
    Retriever,
};
use bib_text::tokens::estimate_tokens;
use serde::Deserialize;
use serde_json::{json, Value};

use super::ask_common::{data_dir, embed_corpus_cached, read_jsonl};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark data folder (holds xquad/) [default: ../shared/bench/data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Where passage embeddings are cached between runs.
    #[arg(long, default_value = ".bib/bench-cache")]
    cache_dir: PathBuf,
    /// Embedding model.
    #[arg(long, default_value = "use-m3")]
    model: String,
    /// Languages.
    #[arg(long, value_delimiter = ',', default_value = "es,en")]
    langs: Vec<String>,
    /// Chunks retrieved per question.
    #[arg(long, default_value_t = 5)]
    top_k: usize,
    /// Threshold sweep `from:to:step`.
    #[arg(long, default_value = "0.16:0.50:0.01")]
    sweep: String,
    /// Trim variants, each `scorer:window:lexical_top:min_sentences` (scorer cos or hyb).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cos:0:0:1,cos:1:0:1,hyb:1:0:1,cos:0:5:1,cos:0:5:0"
    )]
    variants: Vec<String>,
    /// Hybrid fusion of the retrieval step (convex is the default of `bib ask`).
    #[arg(long, value_enum, ignore_case = true, default_value = "convex")]
    fusion: Fusion,
    /// Goal: answers kept (fraction).
    #[arg(long, default_value_t = 0.97)]
    goal_kept: f64,
    /// Goal: token reduction (fraction).
    #[arg(long, default_value_t = 0.50)]
    goal_reduction: f64,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct Para {
    #[serde(rename = "_id")]
    id: String,
    title: String,
    text: String,
}

#[derive(Debug, Deserialize)]
struct Query {
    #[serde(rename = "_id")]
    id: String,
    text: String,
}

#[derive(Debug, Deserialize)]
struct AnswerSpan {
    text: String,
}

#[derive(Debug, Deserialize)]
struct Answer {
    #[serde(rename = "_id")]
    id: String,
    passage_id: String,
    answers: Vec<AnswerSpan>,
}

/// One question's retrieved context, scored.
struct Case {
    answer: String,
    /// Position of the gold paragraph among the retrieved chunks.
    gold: Option<usize>,
    contents: Vec<String>,
    scores: Vec<SentenceScores>,
}

fn parse_sweep(s: &str) -> anyhow::Result<Vec<f32>> {
    let p: Vec<f32> = s
        .split(':')
        .map(|x| x.trim().parse::<f32>())
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow::anyhow!("--sweep must be from:to:step, got {s:?}"))?;
    anyhow::ensure!(
        p.len() == 3 && p[2] > 0.0 && p[0] <= p[1],
        "--sweep must be from:to:step, got {s:?}"
    );
    let n = ((p[1] - p[0]) / p[2]).round() as usize;
    Ok((0..=n)
        .map(|i| ((p[0] + i as f32 * p[2]) * 1000.0).round() / 1000.0)
        .collect())
}

/// `scorer:window:lexical_top:min_sentences`, e.g. `cos:0:3:0`.
fn parse_variant(v: &str) -> anyhow::Result<(TrimScorer, usize, usize, usize)> {
    let p: Vec<&str> = v.split(':').collect();
    anyhow::ensure!(
        p.len() == 4,
        "--variants: `{v}` is not scorer:window:lexical_top:min_sentences"
    );
    let scorer = match p[0] {
        "cos" | "cosine" => TrimScorer::Cosine,
        "hyb" | "hybrid" => TrimScorer::Hybrid,
        other => anyhow::bail!("--variants: unknown scorer `{other}` (cos or hyb)"),
    };
    let n = |s: &str| -> anyhow::Result<usize> {
        s.parse()
            .map_err(|_| anyhow::anyhow!("--variants: `{s}` in `{v}` is not a count"))
    };
    Ok((scorer, n(p[1])?, n(p[2])?, n(p[3])?))
}

/// A short column label: scorer, window, lexical top, and min sentences when not 1 (e.g.
/// `cos w0 +lx2 m0`).
fn variant_label(&(s, w, lx, min): &(TrimScorer, usize, usize, usize)) -> String {
    let name = if s == TrimScorer::Cosine {
        "cos"
    } else {
        "hyb"
    };
    let mut label = format!("{name} w{w}");
    if lx > 0 {
        label.push_str(&format!(" +lx{lx}"));
    }
    if min != 1 {
        label.push_str(&format!(" m{min}"));
    }
    label
}

/// (kept fraction among answerable, reduction, kept among all)
fn evaluate(cases: &[Case], opts: &TrimOptions) -> (f64, f64, f64) {
    let (mut before, mut after) = (0usize, 0usize);
    let (mut answerable, mut kept) = (0usize, 0usize);
    for c in cases {
        let prepared: Vec<Prepared<'_>> = c.contents.iter().map(|t| Prepared::new(t)).collect();
        let mut trimmed = Vec::with_capacity(prepared.len());
        for (p, s) in prepared.iter().zip(&c.scores) {
            let t = apply(p, s, opts);
            before += estimate_tokens(p.content);
            after += estimate_tokens(&t.content);
            trimmed.push(t.content);
        }
        if let Some(g) = c.gold {
            if c.contents[g].contains(&c.answer) {
                answerable += 1;
                if trimmed[g].contains(&c.answer) {
                    kept += 1;
                }
            }
        }
    }
    let red = if before == 0 {
        0.0
    } else {
        1.0 - after as f64 / before as f64
    };
    (
        kept as f64 / answerable.max(1) as f64,
        red,
        kept as f64 / cases.len().max(1) as f64,
    )
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let data = data_dir(a.data.clone()).join("xquad");
    let thresholds = parse_sweep(&a.sweep)?;
    let embedder = bib_app::model::load_embedder(&a.model)?;
    let cache = EmbeddingCache::default();
    // (scorer, window, lexical_top, min_sentences)
    let variants: Vec<(TrimScorer, usize, usize, usize)> = a
        .variants
        .iter()
        .map(|v| parse_variant(v))
        .collect::<anyhow::Result<_>>()?;
    // results[lang][variant][threshold] = (kept, reduction, kept_all)
    let mut results: Vec<Vec<Vec<(f64, f64, f64)>>> = Vec::new();
    let mut report = Vec::new();
    for lang in &a.langs {
        let paras: Vec<Para> = read_jsonl(&data.join(format!("corpus.{lang}.jsonl")))?;
        let queries: Vec<Query> = read_jsonl(&data.join(format!("queries.{lang}.jsonl")))?;
        let answers: Vec<Answer> = read_jsonl(&data.join(format!("answers.{lang}.jsonl")))?;
        let answers: HashMap<String, Answer> =
            answers.into_iter().map(|x| (x.id.clone(), x)).collect();
        let contents: Vec<String> = paras
            .iter()
            .map(|p| {
                format!(
                    "[Doc: {}]\n{}",
                    p.title.replace('_', " "),
                    p.text.trim_start_matches('\u{feff}')
                )
            })
            .collect();
        let vecs = embed_corpus_cached(
            embedder.as_ref(),
            &contents,
            &a.cache_dir,
            &format!("xquad-{lang}"),
        )?;
        let mut ix = MemoryIndex::new();
        for (i, (p, v)) in paras.iter().zip(vecs).enumerate() {
            ix.add(
                ChunkRecord {
                    id: i as i64,
                    path: p.id.clone(),
                    chunk_index: 0,
                    title: p.title.clone(),
                    heading_path: vec![],
                    content: contents[i].clone(),
                    metadata: Value::Null,
                    citation: Default::default(),
                },
                Some(v),
            )?;
        }
        let qtexts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
        let qvecs = embedder.embed(&qtexts, EmbedKind::Query)?;
        let ropts = RetrieveOptions {
            top_k: a.top_k,
            mode: Mode::Hybrid,
            fusion: a.fusion,
            ..RetrieveOptions::default()
        };
        let mut cases = Vec::new();
        let mut gold_found = 0usize;
        for (i, (q, qv)) in queries.iter().zip(&qvecs).enumerate() {
            let Some(ans) = answers.get(&q.id) else {
                continue;
            };
            let Some(span) = ans.answers.first() else {
                continue;
            };
            let hits = Retriever::new(&ix, Some(embedder.as_ref()), &cache).search(
                &q.text,
                &ropts,
                &Filter::default(),
                Some(qv),
            )?;
            let gold = hits
                .iter()
                .position(|h| paras[h.id as usize].id == ans.passage_id);
            gold_found += usize::from(gold.is_some());
            let cs: Vec<String> = hits
                .iter()
                .map(|h| contents[h.id as usize].clone())
                .collect();
            let prepared: Vec<Prepared<'_>> = cs.iter().map(|t| Prepared::new(t)).collect();
            let scores = score_texts(
                embedder.as_ref(),
                &cache,
                &q.text,
                qv,
                &prepared,
                60.0,
                &ix.term_config()?,
            )?;
            drop(prepared);
            cases.push(Case {
                answer: span.text.clone(),
                gold,
                contents: cs,
                scores,
            });
            if i % 100 == 0 {
                eprint!("\rxquad-{lang}: scored {i}/{}", queries.len());
            }
        }
        eprintln!();
        println!(
            "\nXQuAD-{lang}: {} questions, gold paragraph in top-{}: {:.1}%  (kept% / token reduction%)",
            cases.len(),
            a.top_k,
            100.0 * gold_found as f64 / cases.len().max(1) as f64
        );
        print!("{:>6}", "thr");
        for v in &variants {
            print!("  {:>15}", variant_label(v));
        }
        println!();
        let mut per_variant = Vec::new();
        for (s, w, lx, min) in &variants {
            let mut col = Vec::new();
            for &t in &thresholds {
                let opts = TrimOptions {
                    threshold: t,
                    min_sentences: *min,
                    window: *w,
                    scorer: *s,
                    rrf_k: 60.0,
                    lexical_top: *lx,
                    structure: bib_retrieve::trim::ASK_PROFILE.structure,
                };
                col.push(evaluate(&cases, &opts));
            }
            per_variant.push(col);
        }
        for (ti, t) in thresholds.iter().enumerate() {
            print!("{t:>6.2}");
            for col in &per_variant {
                let (k, r, _) = col[ti];
                let mark = if k >= a.goal_kept && r >= a.goal_reduction {
                    "*"
                } else {
                    " "
                };
                print!("  {:>6.1} / {:>5.1}{mark}", 100.0 * k, 100.0 * r);
            }
            println!();
        }
        for ((s, w, lx, min), col) in variants.iter().zip(&per_variant) {
            for (ti, t) in thresholds.iter().enumerate() {
                let (k, r, ka) = col[ti];
                report.push(
                    json!({"lang": lang, "scorer": s, "window": w, "lexical_top": lx,
                    "min_sentences": min, "threshold": t,
                    "kept": k, "reduction": r, "kept_of_all": ka}),
                );
            }
        }
        results.push(per_variant);
    }
    // Calibration: per variant, the highest threshold meeting the kept goal in every language,
    // and the smallest reduction across languages there.
    println!(
        "\ncalibration (goal: ≥{:.0}% kept at ≥{:.0}% reduction, every language):",
        100.0 * a.goal_kept,
        100.0 * a.goal_reduction
    );
    for (vi, v) in variants.iter().enumerate() {
        let label = variant_label(v);
        let mut best: Option<(f32, f64, f64)> = None;
        for (ti, &t) in thresholds.iter().enumerate() {
            let kept = results
                .iter()
                .map(|l| l[vi][ti].0)
                .fold(f64::INFINITY, f64::min);
            let red = results
                .iter()
                .map(|l| l[vi][ti].1)
                .fold(f64::INFINITY, f64::min);
            if kept >= a.goal_kept {
                best = Some((t, kept, red));
            }
        }
        match best {
            Some((t, k, r)) => println!(
                "  {label}: highest threshold keeping ≥{:.0}%: {t:.2} (min kept {:.1}%, min reduction {:.1}%){}",
                100.0 * a.goal_kept,
                100.0 * k,
                100.0 * r,
                if r >= a.goal_reduction { "  ← meets goal" } else { "" }
            ),
            None => println!("  {label}: no threshold keeps ≥{:.0}%", 100.0 * a.goal_kept),
        }
    }
    if let Some(p) = &a.json {
        std::fs::write(
            p,
            serde_json::to_string_pretty(
                &json!({"bench": "xquad", "model": a.model, "rows": report}),
            )?,
        )?;
    }
    Ok(())
}
