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
use std::path::{Path, PathBuf};

use bib_embed::{EmbedKind, Embedder};

use bib_retrieve::trim::{apply, score_texts, Prepared, SentenceScores, TrimOptions, TrimScorer};
use bib_retrieve::{
    ChunkIndex, EmbeddingCache, Filter, Fusion, MemoryIndex, Mode, RetrieveOptions, Retriever,
};
use bib_text::tokens::estimate_tokens;
use serde::Deserialize;
use serde_json::{json, Value};

use super::ask_common::{
    add_one_chunk_per_document, data_dir, embed_corpus_cached, read_jsonl, OneChunkDocument,
};

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
    /// Term function of the paragraph index and the trimmer's lexical side (`v1`, `v2`, `v3`,
    /// `default` or a `key=value` list).
    #[arg(long, value_name = "SPEC", default_value = "default")]
    terms: String,
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

/// A trim variant: (scorer, window, lexical_top, min_sentences).
type TrimVariant = (TrimScorer, usize, usize, usize);

/// One sweep point of one variant: (kept, reduction, kept_all).
type SweepPoint = (f64, f64, f64);

/// What every language's run reads: the settings, the model and the parsed sweep.
struct XquadSetup<'a> {
    a: &'a Args,
    data: PathBuf,
    thresholds: Vec<f32>,
    embedder: Box<dyn Embedder>,
    cache: EmbeddingCache,
    variants: Vec<TrimVariant>,
}

/// One language's paragraphs, questions and answers, and the text each paragraph is indexed
/// as.
struct LanguageData {
    paras: Vec<Para>,
    queries: Vec<Query>,
    answers: HashMap<String, Answer>,
    /// Per paragraph: `[Doc: title]`, newline, text.
    contents: Vec<String>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let setup = parse_settings_and_load_model(&a)?;
    // results[lang][variant][threshold] = (kept, reduction, kept_all)
    let mut results: Vec<Vec<Vec<SweepPoint>>> = Vec::new();
    let mut report = Vec::new();
    for lang in &a.langs {
        let ld = load_language(&setup.data, lang)?;
        let ix = embed_and_index_paragraphs(&setup, lang, &ld)?;
        let (cases, gold_found) = retrieve_and_score_questions(&setup, lang, &ld, &ix)?;
        eprintln!();
        print_language_header(&setup, lang, &cases, gold_found);
        let per_variant = evaluate_every_variant_over_sweep(&setup, &cases);
        print_sweep_table(&setup, &per_variant);
        report.extend(sweep_json_rows(&setup, lang, &per_variant));
        results.push(per_variant);
    }
    print_calibration(&setup, &results);
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

/// Parse the sweep and the variants, and load the model.
fn parse_settings_and_load_model(a: &Args) -> anyhow::Result<XquadSetup<'_>> {
    let data = data_dir(a.data.clone()).join("xquad");
    let thresholds = parse_sweep(&a.sweep)?;
    let embedder = crate::load_embedder(&a.model)?;
    let cache = EmbeddingCache::default();
    // (scorer, window, lexical_top, min_sentences)
    let variants: Vec<TrimVariant> = a
        .variants
        .iter()
        .map(|v| parse_variant(v))
        .collect::<anyhow::Result<_>>()?;
    Ok(XquadSetup {
        a,
        data,
        thresholds,
        embedder,
        cache,
        variants,
    })
}

/// Read `corpus.<lang>.jsonl`, `queries.<lang>.jsonl` and `answers.<lang>.jsonl`.
fn load_language(data: &Path, lang: &str) -> anyhow::Result<LanguageData> {
    let paras: Vec<Para> = read_jsonl(&data.join(format!("corpus.{lang}.jsonl")))?;
    let queries: Vec<Query> = read_jsonl(&data.join(format!("queries.{lang}.jsonl")))?;
    let answers: Vec<Answer> = read_jsonl(&data.join(format!("answers.{lang}.jsonl")))?;
    let answers: HashMap<String, Answer> = answers.into_iter().map(|x| (x.id.clone(), x)).collect();
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
    Ok(LanguageData {
        paras,
        queries,
        answers,
        contents,
    })
}

/// Embed every paragraph (cached under `--cache-dir`) and index each as one chunk.
fn embed_and_index_paragraphs(
    setup: &XquadSetup<'_>,
    lang: &str,
    ld: &LanguageData,
) -> anyhow::Result<MemoryIndex> {
    let vecs = embed_corpus_cached(
        setup.embedder.as_ref(),
        &ld.contents,
        &setup.a.cache_dir,
        &format!("xquad-{lang}"),
    )?;
    let mut ix = MemoryIndex::with_terms(setup.a.terms.parse()?);
    add_one_chunk_per_document(
        &mut ix,
        ld.paras
            .iter()
            .zip(vecs)
            .enumerate()
            .map(|(i, (p, v))| OneChunkDocument {
                path: p.id.clone(),
                title: p.title.clone(),
                content: ld.contents[i].clone(),
                embedding: v,
            }),
    )?;
    Ok(ix)
}

/// Retrieve the top-k of every answered question and score its sentences; also how many had
/// the gold paragraph among them.
fn retrieve_and_score_questions(
    setup: &XquadSetup<'_>,
    lang: &str,
    ld: &LanguageData,
    ix: &MemoryIndex,
) -> anyhow::Result<(Vec<Case>, usize)> {
    let (a, embedder, cache) = (setup.a, setup.embedder.as_ref(), &setup.cache);
    let (paras, queries, contents) = (&ld.paras, &ld.queries, &ld.contents);
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
        let Some(ans) = ld.answers.get(&q.id) else {
            continue;
        };
        let Some(span) = ans.answers.first() else {
            continue;
        };
        let hits = Retriever::new(ix, Some(embedder), cache).search(
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
            embedder,
            cache,
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
    Ok((cases, gold_found))
}

/// The language's title line and the column head of its sweep table.
fn print_language_header(setup: &XquadSetup<'_>, lang: &str, cases: &[Case], gold_found: usize) {
    println!(
        "\nXQuAD-{lang}: {} questions, gold paragraph in top-{}: {:.1}%  (kept% / token reduction%)",
        cases.len(),
        setup.a.top_k,
        100.0 * gold_found as f64 / cases.len().max(1) as f64
    );
    print!("{:>6}", "thr");
    for v in &setup.variants {
        print!("  {:>15}", variant_label(v));
    }
    println!();
}

/// Per variant, the result at every threshold of the sweep.
fn evaluate_every_variant_over_sweep(
    setup: &XquadSetup<'_>,
    cases: &[Case],
) -> Vec<Vec<SweepPoint>> {
    let mut per_variant = Vec::new();
    for (s, w, lx, min) in &setup.variants {
        let mut col = Vec::new();
        for &t in &setup.thresholds {
            let opts = TrimOptions {
                threshold: t,
                min_sentences: *min,
                window: *w,
                scorer: *s,
                rrf_k: 60.0,
                lexical_top: *lx,
                structure: bib_retrieve::trim::ASK_PROFILE.structure,
            };
            col.push(evaluate(cases, &opts));
        }
        per_variant.push(col);
    }
    per_variant
}

/// One line per threshold: kept% / reduction% of every variant, `*` where both goals are met.
fn print_sweep_table(setup: &XquadSetup<'_>, per_variant: &[Vec<SweepPoint>]) {
    let a = setup.a;
    for (ti, t) in setup.thresholds.iter().enumerate() {
        print!("{t:>6.2}");
        for col in per_variant {
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
}

/// The JSON rows of one language: per variant and threshold.
fn sweep_json_rows(
    setup: &XquadSetup<'_>,
    lang: &str,
    per_variant: &[Vec<SweepPoint>],
) -> Vec<Value> {
    let mut report = Vec::new();
    for ((s, w, lx, min), col) in setup.variants.iter().zip(per_variant) {
        for (ti, t) in setup.thresholds.iter().enumerate() {
            let (k, r, ka) = col[ti];
            report.push(
                json!({"lang": lang, "scorer": s, "window": w, "lexical_top": lx,
                "min_sentences": min, "threshold": t,
                "kept": k, "reduction": r, "kept_of_all": ka}),
            );
        }
    }
    report
}

/// Per variant, the calibrated threshold across every language.
fn print_calibration(setup: &XquadSetup<'_>, results: &[Vec<Vec<SweepPoint>>]) {
    let a = setup.a;
    // Calibration: per variant, the highest threshold meeting the kept goal in every language,
    // and the smallest reduction across languages there.
    println!(
        "\ncalibration (goal: ≥{:.0}% kept at ≥{:.0}% reduction, every language):",
        100.0 * a.goal_kept,
        100.0 * a.goal_reduction
    );
    for (vi, v) in setup.variants.iter().enumerate() {
        let label = variant_label(v);
        let mut best: Option<(f32, f64, f64)> = None;
        for (ti, &t) in setup.thresholds.iter().enumerate() {
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
}
