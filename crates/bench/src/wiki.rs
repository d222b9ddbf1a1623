//! `bib bench wiki` — NuGet wiki question sets: is the evidence in the top-k chunks, before
//! and after sentence trimming, per question style?
//!
//! Sets: the given `golden_en` / `golden_es_dev` (in the benchmark data) and the repository's
//! development sets `bench/wiki/dev_en.jsonl` / `dev_es.jsonl` (issue 15), with the held-out
//! sets `bench/wiki/heldout{,2}/dev_{en,es}.jsonl` that no setting was tuned on. Each wiki is ingested
//! (real pipeline, the chosen model) into a cached store under `--cache-dir` (re-runs skip
//! unchanged chunks; one store per model), then every question goes through the real ask path
//! (`bib_retrieve::Retriever` over the store).
//!
//! A question is *answered at k* when every evidence quote occurs in its top-k context, matched
//! by `bib_eval::matching` (the harness's normalisation: NFC, lower case, Markdown marks
//! dropped, whitespace collapsed). Reported per set and style (`direct` / `paraphrase` /
//! `exact`): answered at k = 1, 3, 5, 10 untrimmed and after trimming with ask's `--trim`
//! profile (each k is its own trimmed retrieval, as `bib ask --top-k k --trim` would do it),
//! and, unless `--no-settings`, the older per-setting table at `--top-k` (modes, fusions, trim
//! settings: file hit, quotes found, tokens).
//!
//! `--signals SPEC` (repeatable) runs the top-k table once per ranking-signal setting over the
//! same stores; `--terms SPEC` picks the term function the stores are indexed with (a store
//! built with another one is reindexed in place — postings only, nothing re-embedded). Trimming
//! reads the sentence vectors ingest stored, as `bib ask` does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bib_embed::Embedder;
use bib_eval::{load_golden, GoldenItem, Haystack};
use bib_retrieve::trim::{calibrated_threshold, TrimOptions, ASK_PROFILE, USE_M3_THRESHOLD};
use bib_retrieve::{
    EmbeddingCache, Filter, Fusion, Mode, RetrieveOptions, Retriever, ScoredChunk, Signals,
    StoreIndex, StoreVectors,
};
use bib_store::{SqliteStore, TermConfig};
use bib_text::chunk::ChunkOptions;
use serde_json::json;

use super::ask_common::data_dir;

/// The sets `bib bench wiki` knows: (name, file, wiki, lives in the repository's dev folder).
/// The held-out sets run with the others, so a change tuned on the dev sets shows at once
/// what it does to questions nothing was tuned on.
const SETS: [(&str, &str, &str, bool); 8] = [
    ("golden_en", "golden_en.jsonl", "nuget-en", false),
    ("golden_es_dev", "golden_es_dev.jsonl", "nuget-es", false),
    ("dev_en", "dev_en.jsonl", "nuget-en", true),
    ("dev_es", "dev_es.jsonl", "nuget-es", true),
    ("heldout_en", "heldout/dev_en.jsonl", "nuget-en", true),
    ("heldout_es", "heldout/dev_es.jsonl", "nuget-es", true),
    ("heldout2_en", "heldout2/dev_en.jsonl", "nuget-en", true),
    ("heldout2_es", "heldout2/dev_es.jsonl", "nuget-es", true),
];

/// Styles in report order; anything else is reported after them under its own name.
const STYLES: [&str; 3] = ["direct", "paraphrase", "exact"];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark data folder (holds wiki/) [default: ../shared/bench/data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Folder of the repository's development sets (dev_en.jsonl, dev_es.jsonl).
    #[arg(long, default_value = "bench/wiki")]
    dev_dir: PathBuf,
    /// Sets to run, comma-separated: golden_en, golden_es_dev, dev_en, dev_es, heldout_en,
    /// heldout_es, heldout2_en, heldout2_es [default: all that exist].
    #[arg(long, value_delimiter = ',')]
    sets: Vec<String>,
    /// Where the ingested wiki stores are kept between runs.
    #[arg(long, default_value = ".bib/bench-cache")]
    cache_dir: PathBuf,
    /// Embedding model for ingest and ask: use-m3 (default) or e5-small; each model has its
    /// own cached store.
    #[arg(long, default_value = bib_embed::DEFAULT_MODEL)]
    model: String,
    /// Model of the sentence vectors (trimming, the sentence signal) when not `--model`'s:
    /// the split knowledge base (e5-small chunks, use-m3 sentences). Its vectors are added
    /// to the cached store of `--model`.
    #[arg(long)]
    sentence_model: Option<String>,
    /// Retrieval mode of the top-k table.
    #[arg(long, value_enum, ignore_case = true, default_value = "hybrid")]
    mode: Mode,
    /// Fusion of the top-k table in hybrid mode.
    #[arg(long, value_enum, ignore_case = true, default_value = "convex")]
    fusion: Fusion,
    /// BM25 weight α of convex fusion [default: the one `bib ask` calibrates for `--model`].
    #[arg(long)]
    fusion_alpha: Option<f64>,
    /// Length of each list (BM25, vector) before fusion [default: the product default]
    #[arg(long)]
    candidates: Option<usize>,
    /// Cut-offs of the top-k table.
    #[arg(long, value_delimiter = ',', default_value = "1,3,5,10")]
    ks: Vec<usize>,
    /// Cosine threshold of the "after trimming" columns (otherwise the one ask calibrates for
    /// `--model`).
    #[arg(long)]
    trim_threshold: Option<f32>,
    /// Trim without keeping structure (table headers, list lead-ins, sub-headings of kept
    /// sentences) in the "after trimming" columns, to measure what keeping it is worth.
    #[arg(long)]
    no_trim_structure: bool,
    /// Skip the per-setting table (modes, fusions, trim settings at --top-k).
    #[arg(long)]
    no_settings: bool,
    /// Chunks retrieved per question in the per-setting table.
    #[arg(long, default_value_t = 5)]
    top_k: usize,
    /// Trim thresholds of the per-setting table (window 0 and 1 each).
    #[arg(long, value_delimiter = ',')]
    thresholds: Vec<f32>,
    /// More trim settings of the per-setting table, each
    /// `threshold:window:lexical_top:min_sentences`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.28:1:5:1,0.21:0:5:0,0.21:1:5:0"
    )]
    trims: Vec<String>,
    /// Ranking signals of the top-k table (repeatable: one table per setting): `off`,
    /// `default`, or weights such as `field=0.2,phrase=0.3`.
    #[arg(long = "signals", value_name = "SPEC", default_value = "default")]
    signals: Vec<String>,
    /// Term function the wiki stores are indexed with (`v1`, `v2`, `v3`, `default` or a `key=value`
    /// list); a store built with another one is reindexed (postings only).
    #[arg(long, value_name = "SPEC", default_value = "default")]
    terms: String,
    /// Maximum words per chunk of the wiki stores [default: the product default]; a size
    /// other than the default has its own cached stores.
    #[arg(long)]
    chunk_words: Option<usize>,
    /// Skip the "after trimming" columns (faster).
    #[arg(long)]
    no_trimmed: bool,
    /// Put one typo into every question, seeded by this number: in one word of five letters
    /// or more, a letter dropped, doubled, replaced or swapped with the next, at any place
    /// (`bib bench wiki --typos 1 --signals default --signals typo=1` measures typo tolerance).
    #[arg(long, value_name = "SEED")]
    typos: Option<u64>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Whether every evidence quote of `evidence` occurs in the first `k` chunk texts. A question
/// without evidence is never answered.
fn answered(contents: &[&str], evidence: &[String], k: usize) -> bool {
    if evidence.is_empty() {
        return false;
    }
    let h = Haystack::new(contents.iter().take(k).copied());
    evidence.iter().all(|e| h.contains(e))
}

fn contents(chunks: &[ScoredChunk]) -> Vec<&str> {
    chunks.iter().map(|c| c.text.as_str()).collect()
}

/// The style a question is reported under.
fn style_of(q: &GoldenItem) -> &str {
    q.style.as_deref().unwrap_or("unspecified")
}

/// Report order of the styles present in `qs`: the known ones first, then the rest by name.
fn styles_in(qs: &[GoldenItem]) -> Vec<String> {
    let mut out: Vec<String> = STYLES
        .iter()
        .filter(|s| qs.iter().any(|q| style_of(q) == **s))
        .map(|s| s.to_string())
        .collect();
    let mut rest: Vec<String> = qs
        .iter()
        .map(|q| style_of(q).to_string())
        .filter(|s| !out.contains(s))
        .collect();
    rest.sort();
    rest.dedup();
    out.extend(rest);
    out
}

/// Answered counts per k for one question: (untrimmed, trimmed).
#[derive(Debug, Clone, Default)]
struct QuestionHits {
    plain: Vec<bool>,
    trimmed: Vec<bool>,
    /// Per k, with trimming: the answer's tokens (estimate) before and after trimming.
    tokens: Vec<(usize, usize)>,
    /// Rank (1-based) of the first chunk from a gold file within the largest k.
    file_rank: Option<usize>,
}

/// The command line that reproduces this run, as a user would type it.
pub(super) fn command_line() -> String {
    let mut parts = vec!["bib".to_string()];
    for a in std::env::args().skip(1) {
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
            parts.push(format!("'{}'", a.replace('\'', "'\\''")));
        } else {
            parts.push(a);
        }
    }
    parts.join(" ")
}

fn pct(n: usize, d: usize) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.0}%", 100.0 * n as f64 / d as f64)
    }
}

/// What every set's run reads: the flags and what was derived from them, and the model.
struct WikiRun<'a> {
    a: &'a Args,
    /// `<data>/wiki`.
    data: PathBuf,
    mode: Mode,
    fusion: Fusion,
    /// `--ks`, sorted, without repeats.
    ks: Vec<usize>,
    embedder: Box<dyn Embedder>,
    /// `--sentence-model`, loaded.
    sentence_embedder: Option<Box<dyn Embedder>>,
    /// BM25 weight of convex fusion.
    alpha: f64,
    /// The trimming of the "after trimming" columns.
    trim: TrimOptions,
    /// Trim thresholds of the per-setting table.
    thresholds: Vec<f32>,
    terms: TermConfig,
    /// Each `--signals` setting, as given and parsed.
    signals: Vec<(String, Signals)>,
}

/// One retrieval setting of the per-setting table: (label, mode, fusion, trimming).
type RetrievalSetting = (String, Mode, Fusion, Option<TrimOptions>);

/// What one setting of the per-setting table found over a question set.
#[derive(Default)]
struct SettingCounts {
    file_hit: usize,
    ev_found: usize,
    ev_total: usize,
    all_found: usize,
    tokens: usize,
    /// Ids (or `#n`) of the questions with some evidence missing.
    misses: Vec<String>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let data = data_dir(a.data.clone()).join("wiki");
    let (mode, fusion) = (a.mode, a.fusion);
    let ks = sorted_distinct_cutoffs(&a)?;
    let wanted = wanted_set_names(&a)?;
    let embedder = crate::load_embedder(&a.model)?;
    let sentence_embedder = match &a.sentence_model {
        Some(m) if *m != a.model => Some(crate::load_embedder(m)?),
        _ => None,
    };
    let sentence_model = sentence_model_of(&a, sentence_embedder.as_deref());
    let alpha = a
        .fusion_alpha
        .unwrap_or_else(|| bib_retrieve::retrieve::calibrated_alpha(&a.model));
    anyhow::ensure!(
        (0.0..=1.0).contains(&alpha),
        "--fusion-alpha must be within [0, 1]"
    );
    let trim = TrimOptions {
        threshold: a
            .trim_threshold
            .unwrap_or_else(|| calibrated_threshold(sentence_model)),
        structure: !a.no_trim_structure,
        ..ASK_PROFILE
    };
    let cmd = command_line();
    print_run_header(&cmd, &a, sentence_model, alpha, &trim);
    let thresholds = if a.thresholds.is_empty() {
        vec![0.2, 0.3, USE_M3_THRESHOLD]
    } else {
        a.thresholds.clone()
    };
    let terms: TermConfig = a.terms.parse()?;
    let signals: Vec<(String, Signals)> = a
        .signals
        .iter()
        .map(|sp| Ok((sp.clone(), sp.parse::<Signals>()?)))
        .collect::<anyhow::Result<_>>()?;
    println!("terms {}", terms.id());
    let run = WikiRun {
        a: &a,
        data,
        mode,
        fusion,
        ks,
        embedder,
        sentence_embedder,
        alpha,
        trim,
        thresholds,
        terms,
        signals,
    };
    let mut settings_rows = Vec::new();
    let mut topk_rows = Vec::new();
    let mut stores: BTreeMap<&str, std::sync::Arc<SqliteStore>> = BTreeMap::new();
    for set in SETS.iter().filter(|s| wanted.contains(&s.0)) {
        let (topk, settings) = run.run_set(set, &mut stores)?;
        topk_rows.extend(topk);
        settings_rows.extend(settings);
    }
    if let Some(p) = &a.json {
        run.write_json_report(p, &cmd, topk_rows, settings_rows)?;
    }
    Ok(())
}

/// `question` with one typo (`--typos`): in one of its words of five letters or more (picked
/// by `seed` and the question itself, so each question gets the same typo in every run), a
/// letter dropped, doubled, replaced by a random letter, or swapped with the next one, at any
/// place including the first. A question without such a word is returned as it is.
fn with_one_typo(question: &str, seed: u64) -> String {
    let mut hash = seed ^ 0x9e37_79b9_7f4a_7c15;
    for b in question.bytes() {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut rng = fastrand::Rng::with_seed(hash);
    let mut words: Vec<(usize, &str)> = Vec::new();
    let mut start = None;
    for (i, c) in question.char_indices().chain([(question.len(), ' ')]) {
        if c.is_alphabetic() {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            words.push((s, &question[s..i]));
        }
    }
    words.retain(|(_, w)| w.chars().count() >= 5);
    if words.is_empty() {
        return question.to_string();
    }
    let (start, word) = words[rng.usize(..words.len())];
    let mut chars: Vec<char> = word.chars().collect();
    let i = rng.usize(..chars.len() - 1);
    match rng.u8(..4) {
        0 => {
            chars.remove(i);
        }
        1 => chars.insert(i, chars[i]),
        2 => chars[i] = rng.char('a'..='z'),
        _ => chars.swap(i, i + 1),
    }
    let mut out = question.to_string();
    out.replace_range(
        start..start + word.len(),
        &chars.into_iter().collect::<String>(),
    );
    out
}

/// `--ks` sorted and without repeats; every cut-off must be at least 1.
fn sorted_distinct_cutoffs(a: &Args) -> anyhow::Result<Vec<usize>> {
    anyhow::ensure!(
        !a.ks.is_empty() && a.ks.iter().all(|&k| k > 0),
        "--ks: every cut-off must be at least 1"
    );
    let mut ks = a.ks.clone();
    ks.sort_unstable();
    ks.dedup();
    Ok(ks)
}

/// The names of the sets to run: `--sets`, each checked against [`SETS`]; else every set
/// whose file exists in the repository's folder (`--dev-dir`), and the given golden sets.
fn wanted_set_names(a: &Args) -> anyhow::Result<Vec<&str>> {
    if a.sets.is_empty() {
        return Ok(SETS
            .iter()
            .filter(|(_, file, _, in_repo)| !in_repo || a.dev_dir.join(file).is_file())
            .map(|s| s.0)
            .collect());
    }
    let wanted: Vec<&str> = a.sets.iter().map(String::as_str).collect();
    for w in &wanted {
        anyhow::ensure!(
            SETS.iter().any(|s| s.0 == *w),
            "--sets: `{w}` is not one of {}",
            SETS.map(|s| s.0).join(", ")
        );
    }
    Ok(wanted)
}

/// The model of the sentence vectors: `--sentence-model`'s (loaded as `sentence_embedder`
/// when it differs), else `--model`'s.
fn sentence_model_of<'a>(a: &'a Args, sentence_embedder: Option<&'a dyn Embedder>) -> &'a str {
    sentence_embedder.map_or(a.model.as_str(), |e| e.model_id())
}

/// The command line and the model, retrieval and trimming settings of the run.
fn print_run_header(cmd: &str, a: &Args, sentence_model: &str, alpha: f64, trim: &TrimOptions) {
    println!("command: {cmd}");
    let sentences = if sentence_model == a.model {
        String::new()
    } else {
        format!(" (sentences: {sentence_model})")
    };
    println!(
        "model {}{sentences} · mode {} · fusion {} (α {alpha:.2}) · trim: threshold {:.2}, lexical top {}, window {}, min {}, structure {}",
        a.model,
        a.mode,
        a.fusion.as_str(),
        trim.threshold,
        trim.lexical_top,
        trim.window,
        trim.min_sentences,
        if trim.structure { "kept" } else { "off" }
    );
}

impl WikiRun<'_> {
    /// Run one set: its top-k table per signals setting and, unless `--no-settings`, its
    /// per-setting table. Opens (and ingests) the set's wiki store on first use. Returns the
    /// JSON rows of both tables.
    fn run_set(
        &self,
        &(name, file, wiki, in_repo): &(&str, &str, &'static str, bool),
        stores: &mut BTreeMap<&str, std::sync::Arc<SqliteStore>>,
    ) -> anyhow::Result<(Vec<serde_json::Value>, Vec<serde_json::Value>)> {
        let a = self.a;
        let mut topk_rows = Vec::new();
        let mut settings_rows = Vec::new();
        let path = if in_repo {
            a.dev_dir.join(file)
        } else {
            self.data.join(file)
        };
        let mut qs = load_golden(&path)?;
        if let Some(seed) = a.typos {
            for q in &mut qs {
                q.question = with_one_typo(&q.question, seed);
            }
        }
        if !stores.contains_key(wiki) {
            let store = open_ingested(
                &a.cache_dir,
                &self.data.join(wiki),
                wiki,
                self.embedder.as_ref(),
                &self.terms,
                chunk_options(a.chunk_words),
            )?;
            if let Some(s) = &self.sentence_embedder {
                add_sentence_vectors(&store, s.as_ref())?;
            }
            stores.insert(wiki, std::sync::Arc::new(store));
        }
        let store = stores[wiki].clone();
        let index = StoreIndex::new(store.as_ref());
        // Sentence vectors come from the store, where ingest put them (as in `bib ask`).
        let cache = EmbeddingCache::default().with_backing(std::sync::Arc::new(StoreVectors(
            store.clone() as std::sync::Arc<dyn bib_store::Store>,
        )));
        let retriever = Retriever::new(&index, Some(self.embedder.as_ref()), &cache)
            .with_sentence_model(self.sentence_embedder.as_deref());
        for (spec, sig) in &self.signals {
            let base = RetrieveOptions {
                mode: self.mode,
                fusion: self.fusion,
                convex_alpha: self.alpha,
                signals: *sig,
                candidates: self
                    .a
                    .candidates
                    .unwrap_or(RetrieveOptions::default().candidates),
                ..RetrieveOptions::default()
            };
            let trimmed = (!a.no_trimmed).then_some(self.trim);
            let hits = question_hits(&retriever, &qs, &base, &self.ks, trimmed)?;
            println!("\nsignals {}", sig.spec());
            print_topk(name, wiki, &qs, &hits, &self.ks);
            topk_rows.extend(topk_json(name, wiki, spec, &qs, &hits, &self.ks));
        }
        if !a.no_settings {
            settings_rows.extend(self.settings_table(&retriever, name, wiki, &qs)?);
        }
        Ok((topk_rows, settings_rows))
    }

    /// Write the JSON report (settings, top-k rows, per-setting rows) to `p`.
    fn write_json_report(
        &self,
        p: &Path,
        cmd: &str,
        topk_rows: Vec<serde_json::Value>,
        settings_rows: Vec<serde_json::Value>,
    ) -> anyhow::Result<()> {
        let (a, trim, mode, fusion, alpha) =
            (self.a, &self.trim, self.mode, self.fusion, self.alpha);
        std::fs::write(
            p,
            serde_json::to_string_pretty(&json!({
                "bench": "wiki", "command": cmd, "model": a.model,
                "sentence_model": sentence_model_of(a, self.sentence_embedder.as_deref()),
                "terms": self.terms.id(),
                "mode": mode.as_str(), "fusion": fusion.as_str(), "fusion_alpha": alpha,
                "trim": {"threshold": trim.threshold, "lexical_top": trim.lexical_top,
                         "window": trim.window, "min_sentences": trim.min_sentences},
                "topk": topk_rows, "rows": settings_rows}))?,
        )
        .with_context(|| format!("writing {}", p.display()))?;
        Ok(())
    }
}

/// Answered-at-k of every question: one untrimmed retrieval at the largest k (the candidate
/// lists do not depend on k, so its prefixes are the smaller cut-offs), and, with `trim`, one
/// trimmed retrieval per k (trimming's lexical pool depends on the chunks retrieved).
fn question_hits(
    retriever: &Retriever<'_>,
    qs: &[GoldenItem],
    base: &RetrieveOptions,
    ks: &[usize],
    trim: Option<TrimOptions>,
) -> anyhow::Result<Vec<QuestionHits>> {
    let k_max = *ks.last().unwrap_or(&10);
    let mut hits = Vec::with_capacity(qs.len());
    for q in qs {
        let r = retriever.retrieve(
            &q.question,
            &RetrieveOptions {
                top_k: k_max,
                ..base.clone()
            },
            &Filter::default(),
        )?;
        let texts = contents(&r.chunks);
        let mut h = QuestionHits {
            plain: ks
                .iter()
                .map(|&k| answered(&texts, &q.evidence, k))
                .collect(),
            file_rank: r
                .chunks
                .iter()
                .position(|c| q.files.contains(&c.chunk.path))
                .map(|i| i + 1),
            ..QuestionHits::default()
        };
        for &k in ks {
            let Some(t) = trim else { break };
            let t = retriever.retrieve(
                &q.question,
                &RetrieveOptions {
                    top_k: k,
                    trim: Some(t),
                    ..base.clone()
                },
                &Filter::default(),
            )?;
            h.trimmed
                .push(answered(&contents(&t.chunks), &q.evidence, k));
            h.tokens.push((t.tokens_before, t.tokens_in_context));
        }
        hits.push(h);
    }
    Ok(hits)
}

/// The answers' tokens before and after trimming at the `j`-th k, summed over `hits`.
fn token_sums<'h>(hits: impl Iterator<Item = &'h QuestionHits>, j: usize) -> (usize, usize) {
    hits.filter_map(|h| h.tokens.get(j))
        .fold((0, 0), |(b, a), t| (b + t.0, a + t.1))
}

/// The JSON rows of one top-k table: per style and k, the answered counts and the ids missed.
fn topk_json(
    name: &str,
    wiki: &str,
    signals: &str,
    qs: &[GoldenItem],
    hits: &[QuestionHits],
    ks: &[usize],
) -> Vec<serde_json::Value> {
    let id = |i: usize| qs[i].id.clone().unwrap_or_else(|| format!("#{}", i + 1));
    let mut rows = Vec::new();
    for style in std::iter::once("all".to_string()).chain(styles_in(qs)) {
        let sel: Vec<usize> = (0..qs.len())
            .filter(|&i| style == "all" || style_of(&qs[i]) == style)
            .collect();
        let count =
            |f: &dyn Fn(&QuestionHits) -> bool| sel.iter().filter(|&&i| f(&hits[i])).count();
        let trimmed = |h: &QuestionHits, j: usize| h.trimmed.get(j).copied();
        let tokens = |j: usize| token_sums(sel.iter().map(|&i| &hits[i]), j);
        let per_k: Vec<_> = ks
            .iter()
            .enumerate()
            .map(|(j, &k)| {
                let (before_trim, after_trim) = tokens(j);
                json!({"k": k,
                    "tokens_before_trim": before_trim, "tokens_trimmed": after_trim,
                    "answered": count(&|h| h.plain[j]),
                    "answered_trimmed": (!hits.iter().all(|h| h.trimmed.is_empty()))
                        .then(|| count(&|h| trimmed(h, j) == Some(true))),
                    "file_hit": count(&|h| h.file_rank.is_some_and(|r| r <= k)),
                    "missed": sel.iter().filter(|&&i| !hits[i].plain[j])
                        .map(|&i| id(i)).collect::<Vec<_>>(),
                    "missed_trimmed": sel.iter().filter(|&&i| trimmed(&hits[i], j) == Some(false))
                        .map(|&i| id(i)).collect::<Vec<_>>()})
            })
            .collect();
        rows.push(
            json!({"set": name, "wiki": wiki, "signals": signals, "style": style,
            "questions": sel.len(), "at": per_k}),
        );
    }
    rows
}

/// The chunker options of `--chunk-words`: the product default when unset; otherwise that
/// maximum, with the default's ratio of minimum to maximum.
pub(super) fn chunk_options(max_words: Option<usize>) -> ChunkOptions {
    let d = ChunkOptions::default();
    match max_words {
        None => d,
        Some(w) => ChunkOptions {
            max_words: w.max(1),
            min_words: w * d.min_words / d.max_words,
        },
    }
}

/// Add `e`'s vectors of every sentence of every chunk of `store` to its vector cache (the
/// function ingest calls; those already there are kept).
fn add_sentence_vectors(store: &SqliteStore, e: &dyn Embedder) -> anyhow::Result<()> {
    use bib_store::Store;
    let texts: Vec<String> = store
        .get_chunks(&store.chunk_ids()?)?
        .iter()
        .map(|c| c.text())
        .collect();
    let sv =
        bib_ingest::embed_sentence_vectors(store, e, &texts, &bib_ingest::IngestOptions::default());
    eprintln!(
        "sentence vectors ({}): {} embedded, {} already there, {} ms",
        e.model_id(),
        sv.embedded,
        sv.reused,
        sv.embed_ms
    );
    Ok(())
}

/// Open (and bring up to date) the cached store of one wiki for the embedder's model. The
/// default model keeps the historical file name, so earlier caches stay valid.
pub(super) fn open_ingested(
    cache_dir: &Path,
    root: &Path,
    wiki: &str,
    embedder: &dyn bib_embed::Embedder,
    terms: &TermConfig,
    chunk: ChunkOptions,
) -> anyhow::Result<SqliteStore> {
    let model = embedder.model_id();
    let mut stem = if model == bib_embed::DEFAULT_MODEL {
        format!("wiki-{wiki}")
    } else {
        format!("wiki-{wiki}-{model}")
    };
    if chunk != ChunkOptions::default() {
        stem.push_str(&format!("-w{}", chunk.max_words));
    }
    let file = format!("{stem}.sqlite");
    let store_path = cache_dir.join(file);
    std::fs::create_dir_all(cache_dir)
        .with_context(|| format!("creating {}", cache_dir.display()))?;
    let store = SqliteStore::open(&store_path)
        .with_context(|| format!("opening {}", store_path.display()))?;
    let run = bib_ingest::ingest(
        root,
        &store,
        embedder,
        &bib_ingest::IngestOptions {
            terms: *terms,
            chunk,
            ..bib_ingest::IngestOptions::default()
        },
        &bib_ingest::NoProgress,
    )?;
    eprintln!(
        "{wiki} ({model}): ingest {} in {} ms ({} chunks reindexed for the term function)",
        run.status, run.duration_ms, run.reindexed
    );
    Ok(store)
}

fn print_topk(name: &str, wiki: &str, qs: &[GoldenItem], hits: &[QuestionHits], ks: &[usize]) {
    println!(
        "\n{name} over {wiki}: {} questions — answered at k (every quote in the top-k context)",
        qs.len()
    );
    let head: String = ks
        .iter()
        .map(|k| format!("{:>9}", format!("@{k}")))
        .collect();
    let with_trim = hits.iter().any(|h| !h.trimmed.is_empty());
    let trim_head = if with_trim {
        format!("   trimmed: {head}")
    } else {
        String::new()
    };
    println!("{:<12} {:>4}   untrimmed: {head}{trim_head}", "style", "n");
    for style in std::iter::once("all".to_string()).chain(styles_in(qs)) {
        let sel: Vec<&QuestionHits> = qs
            .iter()
            .zip(hits)
            .filter(|(q, _)| style == "all" || style_of(q) == style)
            .map(|(_, h)| h)
            .collect();
        let cell = |f: &dyn Fn(&QuestionHits) -> bool| {
            let n = sel.iter().filter(|&&h| f(h)).count();
            format!("{:>9}", format!("{n} {}", pct(n, sel.len())))
        };
        let plain: String = (0..ks.len()).map(|j| cell(&|h| h.plain[j])).collect();
        let trimmed: String = if with_trim {
            let cells: String = (0..ks.len())
                .map(|j| cell(&|h| h.trimmed.get(j).copied().unwrap_or(false)))
                .collect();
            format!("   trimmed: {cells}")
        } else {
            String::new()
        };
        println!("{style:<12} {:>4}   untrimmed: {plain}{trimmed}", sel.len());
    }
    // Where a user would look first: a chunk of a gold file within the top k (a page found,
    // whether or not the quoted sentence is in the chunk found).
    let files: String = ks
        .iter()
        .map(|&k| {
            let n = hits
                .iter()
                .filter(|h| h.file_rank.is_some_and(|r| r <= k))
                .count();
            format!("{:>9}", format!("{n} {}", pct(n, hits.len())))
        })
        .collect();
    println!("{:<12} {:>4}   gold file: {files}", "file", hits.len());
    if with_trim {
        let cells: String = (0..ks.len())
            .map(|j| {
                let (before, after) = token_sums(hits.iter(), j);
                let cut = 100.0 * (1.0 - after as f64 / before.max(1) as f64);
                format!("  @{}: {after} of {before} (−{cut:.1}%)", ks[j])
            })
            .collect();
        println!(
            "{:<12} {:>4}   trimmed tokens (estimate):{cells}",
            "tokens",
            qs.len()
        );
    }
}

impl WikiRun<'_> {
    /// The per-setting table at `--top-k`: retrieval modes and fusions untrimmed, then trim
    /// settings over the chosen retrieval.
    fn settings_table(
        &self,
        retriever: &Retriever<'_>,
        name: &str,
        wiki: &str,
        qs: &[GoldenItem],
    ) -> anyhow::Result<Vec<serde_json::Value>> {
        let (a, fusion) = (self.a, self.fusion);
        let settings = self.settings_of_the_table()?;
        println!(
            "{name} over {wiki}: per setting, top-{} (trim rows: mode {}, fusion {})",
            a.top_k,
            self.mode,
            fusion.as_str()
        );
        println!(
            "{:<22} {:>10} {:>12} {:>14} {:>10}",
            "setting", "file hit", "evidence", "all evidence", "tokens"
        );
        let mut rows = Vec::new();
        let mut base_tokens = 0usize;
        for (setting, mode, fusion, trim) in &settings {
            let opts = RetrieveOptions {
                top_k: a.top_k,
                mode: *mode,
                fusion: *fusion,
                convex_alpha: self.alpha,
                trim: *trim,
                ..RetrieveOptions::default()
            };
            let c = measure_setting(retriever, qs, &opts)?;
            if setting == "no trim" {
                base_tokens = c.tokens;
            }
            let red = if base_tokens == 0 {
                0.0
            } else {
                1.0 - c.tokens as f64 / base_tokens as f64
            };
            println!(
                "{setting:<22} {:>4}/{:<5} {:>5}/{:<6} {:>6}/{:<7} {:>6} ({:+.0}%)",
                c.file_hit,
                qs.len(),
                c.ev_found,
                c.ev_total,
                c.all_found,
                qs.len(),
                c.tokens,
                -100.0 * red
            );
            rows.push(
                json!({"set": name, "setting": setting, "file_hit": c.file_hit, "questions": qs.len(),
                "evidence_found": c.ev_found, "evidence_total": c.ev_total, "all_evidence": c.all_found,
                "tokens": c.tokens, "reduction": red, "missed": c.misses}),
            );
        }
        Ok(rows)
    }

    /// The rows of the per-setting table, in order: modes and fusions untrimmed, then
    /// `--trims`, then every `--thresholds` value at window 0 and 1.
    fn settings_of_the_table(&self) -> anyhow::Result<Vec<RetrievalSetting>> {
        let (mode, fusion) = (self.mode, self.fusion);
        let mut settings: Vec<RetrievalSetting> = vec![
            ("no trim".into(), mode, fusion, None),
            ("bm25".into(), Mode::Bm25, fusion, None),
            ("vector".into(), Mode::Vector, fusion, None),
            ("hybrid rrf".into(), Mode::Hybrid, Fusion::Rrf, None),
            ("hybrid convex".into(), Mode::Hybrid, Fusion::Convex, None),
        ];
        for spec in &self.a.trims {
            let t = parse_trim_setting(spec)?;
            settings.push((
                format!(
                    "trim {:.2} w{} lx{} m{}",
                    t.threshold, t.window, t.lexical_top, t.min_sentences
                ),
                mode,
                fusion,
                Some(t),
            ));
        }
        for &t in &self.thresholds {
            for w in [0usize, 1] {
                settings.push((
                    format!("trim {t:.2} w{w}"),
                    mode,
                    fusion,
                    Some(TrimOptions {
                        threshold: t,
                        window: w,
                        ..TrimOptions::default()
                    }),
                ));
            }
        }
        Ok(settings)
    }
}

/// One `--trims` value, `threshold:window:lexical_top:min_sentences`.
fn parse_trim_setting(spec: &str) -> anyhow::Result<TrimOptions> {
    let p: Vec<&str> = spec.split(':').collect();
    anyhow::ensure!(
        p.len() == 4,
        "--trims: `{spec}` is not threshold:window:lexical_top:min_sentences"
    );
    let bad = || anyhow::anyhow!("--trims: `{spec}` has a value that is not a number");
    Ok(TrimOptions {
        threshold: p[0].parse().map_err(|_| bad())?,
        window: p[1].parse().map_err(|_| bad())?,
        lexical_top: p[2].parse().map_err(|_| bad())?,
        min_sentences: p[3].parse().map_err(|_| bad())?,
        ..TrimOptions::default()
    })
}

/// Retrieve every question with `opts` and count file hits, evidence found and tokens.
fn measure_setting(
    retriever: &Retriever<'_>,
    qs: &[GoldenItem],
    opts: &RetrieveOptions,
) -> anyhow::Result<SettingCounts> {
    let mut counts = SettingCounts::default();
    for (i, q) in qs.iter().enumerate() {
        let r = retriever.retrieve(&q.question, opts, &Filter::default())?;
        counts.tokens += r.tokens_in_context;
        if r.chunks.iter().any(|c| q.files.contains(&c.chunk.path)) {
            counts.file_hit += 1;
        }
        let h = Haystack::new(contents(&r.chunks));
        let found = q.evidence.iter().filter(|e| h.contains(e)).count();
        counts.ev_found += found;
        counts.ev_total += q.evidence.len();
        if found == q.evidence.len() {
            counts.all_found += 1;
        } else {
            counts
                .misses
                .push(q.id.clone().unwrap_or_else(|| format!("#{}", i + 1)));
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bib_eval::matching::normalize;

    fn repo_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// A parser of `bib bench wiki`'s arguments alone.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// Without `--sets`, every set whose file exists runs (the held-out sets with the dev
    /// sets); a set asked by name must exist, and the error lists the names.
    #[test]
    fn the_held_out_sets_run_with_the_others() {
        use clap::Parser;
        let dev = repo_root().join("bench/wiki");
        let dev = dev.to_str().unwrap();
        let cli = Cli::parse_from(["wiki", "--dev-dir", dev]);
        assert_eq!(
            wanted_set_names(&cli.args).unwrap(),
            SETS.map(|s| s.0),
            "all eight, in order"
        );
        let empty = tempfile::tempdir().unwrap();
        let cli = Cli::parse_from(["wiki", "--dev-dir", empty.path().to_str().unwrap()]);
        assert_eq!(
            wanted_set_names(&cli.args).unwrap(),
            ["golden_en", "golden_es_dev"],
            "a folder without the repository's sets runs the given ones"
        );
        let cli = Cli::parse_from(["wiki", "--sets", "heldout2_es,dev"]);
        let err = wanted_set_names(&cli.args).unwrap_err().to_string();
        assert!(
            err.contains("`dev` is not one of") && err.contains("heldout2_es"),
            "{err}"
        );
    }

    /// `--typos` changes one long word of a question by one edit, the same way every run, and
    /// leaves a question without a long word alone.
    #[test]
    fn one_typo_per_question() {
        let q = "¿Cómo publico mi paquete en la galería?";
        let t = with_one_typo(q, 1);
        assert_eq!(t, with_one_typo(q, 1));
        assert_ne!(t, q);
        let (a, b): (Vec<&str>, Vec<&str>) = (q.split(' ').collect(), t.split(' ').collect());
        assert_eq!(a.len(), b.len());
        let changed: Vec<(&&str, &&str)> = a.iter().zip(&b).filter(|(x, y)| x != y).collect();
        assert_eq!(changed.len(), 1, "{t}");
        let (x, y) = changed[0];
        assert!(x.chars().count().abs_diff(y.chars().count()) <= 1, "{t}");
        assert_eq!(with_one_typo("NU1101 in a pkg", 3), "NU1101 in a pkg");
    }

    fn dev_set(lang: &str) -> Vec<GoldenItem> {
        load_golden(&repo_root().join(format!("bench/wiki/dev_{lang}.jsonl"))).unwrap()
    }

    /// The held-out sets: `bench/wiki/heldout/` (ids `<lang>-ho-NN`) and
    /// `bench/wiki/heldout2/` (ids `<lang>-ho2-NN`), same format as the dev sets.
    fn heldout_set(lang: &str) -> Vec<GoldenItem> {
        ["heldout", "heldout2"]
            .iter()
            .flat_map(|dir| {
                load_golden(&repo_root().join(format!("bench/wiki/{dir}/dev_{lang}.jsonl")))
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn answered_needs_every_quote_within_k() {
        let chunks = [
            "[Doc: Push]\nThe default is **300 seconds** (5 minutes).",
            "Use `-SkipDuplicate` to skip.",
        ];
        let ev = vec!["the default is 300 seconds".to_string()];
        assert!(answered(&chunks, &ev, 1));
        let both = vec![ev[0].clone(), "Use -SkipDuplicate".to_string()];
        assert!(!answered(&chunks, &both, 1), "second quote is in chunk 2");
        assert!(answered(&chunks, &both, 2));
        assert!(
            answered(&chunks, &both, 10),
            "k beyond the list is the whole list"
        );
        assert!(!answered(&chunks, &[], 5), "no evidence is never answered");
    }

    #[test]
    fn styles_are_reported_known_first() {
        let q = |s: Option<&str>| GoldenItem {
            style: s.map(str::to_string),
            ..GoldenItem::question("q")
        };
        let qs = vec![q(Some("exact")), q(None), q(Some("direct")), q(Some("zz"))];
        assert_eq!(styles_in(&qs), vec!["direct", "exact", "unspecified", "zz"]);
    }

    /// The development sets (issue 15): sizes, styles, unique ids, files and evidence on every
    /// question. Needs no benchmark data.
    #[test]
    fn dev_sets_are_well_formed() {
        for lang in ["es", "en"] {
            let qs = dev_set(lang);
            assert!(qs.len() >= 70, "dev_{lang}: {} questions", qs.len());
            let mut ids = std::collections::HashSet::new();
            for q in &qs {
                let id = q.id.clone().expect("every dev question has an id");
                assert!(id.starts_with(&format!("{lang}-dev-")), "{id}");
                assert!(ids.insert(id.clone()), "duplicate id {id}");
                assert!(STYLES.contains(&style_of(q)), "{id}: style {:?}", q.style);
                assert!(!q.files.is_empty(), "{id}: no files");
                assert!(!q.evidence.is_empty(), "{id}: no evidence");
                assert!(q.answer.is_some(), "{id}: no answer");
            }
            let n = |s: &str| qs.iter().filter(|q| style_of(q) == s).count();
            assert!(2 * n("paraphrase") >= qs.len(), "dev_{lang}: paraphrases");
            assert!(10 * n("exact") >= qs.len(), "dev_{lang}: exact strings");
            let pages: std::collections::HashSet<&String> =
                qs.iter().flat_map(|q| &q.files).collect();
            assert!(pages.len() >= 30, "dev_{lang}: {} pages", pages.len());
            for q in heldout_set(lang) {
                let id = q.id.clone().expect("every held-out question has an id");
                assert!(
                    id.starts_with(&format!("{lang}-ho-"))
                        || id.starts_with(&format!("{lang}-ho2-")),
                    "{id}"
                );
                assert!(ids.insert(id.clone()), "duplicate id {id}");
                assert!(STYLES.contains(&style_of(&q)), "{id}: style {:?}", q.style);
                assert!(!q.files.is_empty() && !q.evidence.is_empty() && q.answer.is_some());
            }
        }
    }

    /// Every evidence quote occurs in one of its files, normalised as the benchmark matches.
    /// Reads the wiki from ../shared/bench/data/wiki (or `BIB_WIKI_DATA`), so it is run
    /// explicitly, as the corpus tests are (no test of the default suite reads ../shared):
    /// `cargo test -p bib-bench dev_set_quotes -- --ignored`.
    #[test]
    #[ignore = "reads ../shared/bench/data (run explicitly)"]
    fn dev_set_quotes_occur_in_their_pages() {
        let wiki = std::env::var_os("BIB_WIKI_DATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("../shared/bench/data/wiki"));
        if !wiki.join("nuget-es").is_dir() || !wiki.join("nuget-en").is_dir() {
            eprintln!(
                "skipped: the NuGet wikis are not at {} (set BIB_WIKI_DATA)",
                wiki.display()
            );
            return;
        }
        let mut missing = Vec::new();
        let mut checked = 0;
        for (lang, dir) in [("es", "nuget-es"), ("en", "nuget-en")] {
            for q in dev_set(lang).into_iter().chain(heldout_set(lang)) {
                let pages: Vec<String> = q
                    .files
                    .iter()
                    .map(|f| {
                        let p = wiki.join(dir).join(f);
                        std::fs::read_to_string(&p)
                            .map(|t| normalize(&t))
                            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
                    })
                    .collect();
                for e in &q.evidence {
                    checked += 1;
                    if !pages.iter().any(|p| p.contains(&normalize(e))) {
                        missing.push(format!("{:?} {:?}: {e}", q.id, q.files));
                    }
                }
            }
        }
        assert!(checked >= 230, "only {checked} quotes checked");
        assert!(
            missing.is_empty(),
            "quotes not in their pages:\n{}",
            missing.join("\n")
        );
    }
}
