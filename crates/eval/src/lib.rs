//! # bib-eval — the A/B harness (`bib eval`, MCP `bib_eval_retrieval`)
//!
//! Decides retrieval choices with data. For every question (a golden JSONL set, a plain list,
//! or the last N real questions from the query log) it builds the context once per
//! [`Variant`] — whole chunks (baseline), spec-000 trimming, hybrid-scored trimming, BM25,
//! vector and hybrid lists, and small-to-big — and records tokens, chunk overlap with the
//! baseline, and, when the set has reference data, whether the evidence and the answer are in
//! the context before and after trimming. Aggregates and a verdict against the spec's criteria
//! (reduction > 20 %, overlap > 70 %, quality not worse) follow, and optionally a calibration
//! [`sweep`] of the trimming threshold with a self-contained [`html`] report.
//!
//! Entry points: [`evaluate`] over any [`ChunkIndex`], and [`evaluate_store`] over a
//! [`bib_store::Store`] (what the CLI and the MCP tool call). Retrieval is isolated: nothing is
//! sent to a language model unless `synthesize` is on, and nothing is written to the query log.

pub mod error;
pub mod golden;
pub mod html;
pub mod matching;
pub mod passage;
pub mod report;
pub mod small_to_big;
pub mod stats;
pub mod sweep;
pub mod variant;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use bib_embed::Embedder;
use bib_retrieve::retrieve::RetrievalResult;
use bib_retrieve::synth::{self, SynthConfig};
use bib_retrieve::trim::{score_texts, Prepared, TrimOptions, ASK_PROFILE};
use bib_retrieve::{
    ChunkIndex, EmbeddingCache, Filter, Mode, RetrieveOptions, Retriever, StoreIndex, TrimScorer,
};
use bib_store::Store;
use bib_text::tokens::estimate_tokens;
use serde::{Deserialize, Serialize};

pub use error::EvalError;
pub use golden::{from_query_log, load_golden, parse_golden, GoldenItem};
pub use matching::Haystack;
pub use report::{
    EvalReport, EvalSettings, QuestionReport, Status, VariantAggregate, VariantMetrics, Verdict,
};
pub use small_to_big::{Corpus, PassageSearch, SentenceIndex, StoreCorpus};
pub use sweep::{SweepReport, SweepSpec};
pub use variant::Variant;

use error::invalid;

/// Default number of logged questions replayed when no questions are given.
pub const DEFAULT_LAST_N: usize = 15;

/// The harness's arguments (the MCP tool's input: every field optional in JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalArgs {
    /// Chunks per question.
    pub top_k: usize,
    /// Cosine threshold of the trimming variants.
    pub trim_threshold: f32,
    /// Neighbours kept around each kept sentence.
    pub trim_window: usize,
    /// Sentences kept per chunk even when none passes the threshold.
    pub trim_min_sentences: usize,
    /// Pool sentences always kept for their sentence-level BM25 rank.
    pub trim_lexical_top: usize,
    /// Neighbours each small-to-big sentence hit expands to, inside its chunk.
    pub small_to_big_window: usize,
    /// Retrieval mode of the baseline and the trimming variants.
    pub mode: Mode,
    /// List length before fusion.
    pub candidates: usize,
    /// How hybrid combines its lists, as `bib ask` does.
    pub fusion: bib_retrieve::Fusion,
    /// BM25 weight of convex fusion (the caller passes the knowledge base's calibrated one).
    pub convex_alpha: f64,
    /// Ask the configured chat endpoint for an answer per variant (off: retrieval only).
    pub synthesize: bool,
    /// Questions to evaluate (used when non-empty).
    pub questions: Vec<String>,
    /// A golden JSONL file (used when `questions` is empty).
    pub golden: Option<PathBuf>,
    /// Without questions or golden file: replay this many logged questions.
    pub last_n: usize,
    /// Evaluate at most this many questions (the first ones).
    pub limit: Option<usize>,
    /// Variants to compare; baseline is always included.
    pub variants: Vec<Variant>,
    /// Sentence hits per question for small-to-big (default 2 × top_k).
    pub small_to_big_hits: Option<usize>,
    /// How much recall may drop and still count as "not worse" (absolute).
    pub quality_tolerance: f64,
    /// `key=value` metadata filters.
    pub filters: Vec<String>,
    /// Calibration sweep of the trimming threshold.
    pub sweep: Option<SweepSpec>,
    /// Sentence scorer swept (cosine: the spec's trimming).
    pub sweep_scorer: TrimScorer,
    /// Ranking signals of every variant but `plain` (which runs them off).
    pub signals: bib_retrieve::Signals,
}

impl Default for EvalArgs {
    fn default() -> Self {
        Self {
            top_k: 5,
            trim_threshold: ASK_PROFILE.threshold,
            trim_window: ASK_PROFILE.window,
            trim_min_sentences: ASK_PROFILE.min_sentences,
            trim_lexical_top: ASK_PROFILE.lexical_top,
            small_to_big_window: 1,
            mode: Mode::Hybrid,
            candidates: 50,
            fusion: bib_retrieve::Fusion::default(),
            convex_alpha: bib_retrieve::retrieve::DEFAULT_CONVEX_ALPHA,
            synthesize: false,
            questions: Vec::new(),
            golden: None,
            last_n: DEFAULT_LAST_N,
            limit: None,
            variants: Variant::ALL.to_vec(),
            small_to_big_hits: None,
            quality_tolerance: 0.05,
            filters: Vec::new(),
            sweep: None,
            sweep_scorer: TrimScorer::Cosine,
            signals: bib_retrieve::Signals::default(),
        }
    }
}

impl EvalArgs {
    fn validate(&self) -> Result<(), EvalError> {
        if self.top_k == 0 {
            return Err(invalid("top_k", "must be at least 1"));
        }
        if !(self.quality_tolerance.is_finite() && self.quality_tolerance >= 0.0) {
            return Err(invalid("quality_tolerance", "must be a number ≥ 0"));
        }
        self.trim_options(TrimScorer::Cosine).validate()?;
        if let Some(s) = &self.sweep {
            s.validate()?;
        }
        Ok(())
    }

    fn trim_options(&self, scorer: TrimScorer) -> TrimOptions {
        TrimOptions {
            threshold: self.trim_threshold,
            min_sentences: self.trim_min_sentences,
            window: self.trim_window,
            scorer,
            lexical_top: self.trim_lexical_top,
            structure: bib_retrieve::trim::ASK_PROFILE.structure,
            ..TrimOptions::default()
        }
    }

    fn s2b_hits(&self) -> usize {
        self.small_to_big_hits.unwrap_or(self.top_k * 2).max(1)
    }

    fn variants(&self) -> Vec<Variant> {
        let mut v = vec![Variant::Baseline];
        for x in &self.variants {
            if !v.contains(x) {
                v.push(*x);
            }
        }
        v
    }
}

/// Told how far an evaluation is (the CLI draws a bar on a terminal; [`NoProgress`] is
/// silent). One step at a time: `questions`, one unit per question.
pub trait Progress {
    fn start(&self, _step: &str, _total: u64) {}
    fn advance(&self, _n: u64) {}
    fn finish(&self) {}
}

/// Silent progress.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}

/// What the harness reads from: an index, optionally every chunk (small-to-big), the embedder,
/// a cache shared across variants, a chat endpoint for synthesis, and where progress goes.
pub struct Kb<'a> {
    pub index: &'a dyn ChunkIndex,
    pub corpus: Option<&'a dyn Corpus>,
    pub embedder: Option<&'a dyn Embedder>,
    pub cache: &'a EmbeddingCache,
    pub synth: Option<&'a SynthConfig>,
    pub progress: &'a dyn Progress,
}

impl std::fmt::Debug for Kb<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kb")
            .field("embedder", &self.embedder.map(|e| e.model_id().to_string()))
            .finish_non_exhaustive()
    }
}

/// Resolve the question set: `questions`, else the golden file, else the last `last_n` logged
/// questions of `log`. Returns the items and a label of where they came from.
pub fn resolve_questions(
    args: &EvalArgs,
    log: Option<&dyn Store>,
) -> Result<(Vec<GoldenItem>, String), EvalError> {
    let (mut items, source) = if !args.questions.is_empty() {
        let items: Vec<GoldenItem> = args
            .questions
            .iter()
            .filter(|q| !q.trim().is_empty())
            .map(|q| GoldenItem::question(q.trim()))
            .collect();
        (items, "questions".to_string())
    } else if let Some(path) = &args.golden {
        (load_golden(path)?, format!("golden:{}", path.display()))
    } else {
        let Some(store) = log else {
            return Err(EvalError::NoQuestions(
                "pass questions or a golden file (no query log available)".into(),
            ));
        };
        let items = from_query_log(store, args.last_n)?;
        (items, format!("query_log:last {} distinct", args.last_n))
    };
    if let Some(l) = args.limit {
        items.truncate(l);
    }
    if items.is_empty() {
        return Err(EvalError::NoQuestions(match source.as_str() {
            s if s.starts_with("query_log") => {
                "the query log is empty: ask some questions with `bib ask` first, or pass --golden"
                    .into()
            }
            s => format!("{s} holds no question"),
        }));
    }
    Ok((items, source))
}

/// Evaluate over a store: resolves the questions (query log included) and builds the adapters.
pub fn evaluate_store(
    store: &dyn Store,
    embedder: Option<&dyn Embedder>,
    cache: &EmbeddingCache,
    synth: Option<&SynthConfig>,
    args: &EvalArgs,
    progress: &dyn Progress,
) -> Result<EvalReport, EvalError> {
    let (items, source) = resolve_questions(args, Some(store))?;
    let index = StoreIndex::new(store);
    let corpus = StoreCorpus::new(store);
    let kb = Kb {
        index: &index,
        corpus: Some(&corpus),
        embedder,
        cache,
        synth,
        progress,
    };
    evaluate(&kb, &items, &source, args)
}

fn sources(r: &RetrievalResult) -> Vec<String> {
    r.chunks
        .iter()
        .map(|c| format!("{}#{}", c.chunk.path, c.chunk.chunk_index))
        .collect()
}

fn overlap(base: &[i64], ids: &[i64]) -> f64 {
    if base.is_empty() {
        return if ids.is_empty() { 1.0 } else { 0.0 };
    }
    let set: HashSet<i64> = ids.iter().copied().collect();
    base.iter().filter(|i| set.contains(i)).count() as f64 / base.len() as f64
}

/// Measures of one context against the golden item.
struct Measured {
    tokens: usize,
    exact: Option<usize>,
    evidence: Option<f64>,
    answer: Option<bool>,
}

fn measure(texts: &[&str], item: &GoldenItem, embedder: Option<&dyn Embedder>) -> Measured {
    let h = Haystack::new(texts.iter().copied());
    Measured {
        tokens: texts.iter().map(|t| estimate_tokens(t)).sum(),
        exact: embedder.map(|e| texts.iter().map(|t| e.tokenizer().count_tokens(t)).sum()),
        evidence: h.recall(&item.evidence),
        answer: item.answer.as_ref().map(|a| h.contains(a)),
    }
}

fn file_hit(item: &GoldenItem, paths: &[&str]) -> Option<bool> {
    if item.files.is_empty() {
        return None;
    }
    let norm = |p: &str| p.trim_start_matches("./").replace('\\', "/");
    let want: HashSet<String> = item.files.iter().map(|f| norm(f)).collect();
    Some(paths.iter().any(|p| want.contains(&norm(p))))
}

/// What an evaluation needs before its first question, checked: the arguments, questions to
/// ask, an embedding model for the variants (and sweep) that need one, a chat endpoint when
/// answers are synthesized. Returns the variants, the filter and the endpoint.
fn check_setup<'k>(
    kb: &Kb<'k>,
    items: &[GoldenItem],
    source: &str,
    args: &EvalArgs,
) -> Result<(Vec<Variant>, Filter, Option<&'k SynthConfig>), EvalError> {
    args.validate()?;
    if items.is_empty() {
        return Err(EvalError::NoQuestions(format!(
            "{source} holds no question"
        )));
    }
    let variants = args.variants();
    let filter = Filter::parse(&args.filters).map_err(bib_retrieve::RetrieveError::from)?;
    let base_bm25 = args.mode == Mode::Bm25;
    if kb.embedder.is_none() {
        if let Some(v) = variants.iter().find(|v| v.needs_embedder(base_bm25)) {
            return Err(invalid(
                "variants",
                format!("`{v}` needs an embedding model (run `bib model install`), or choose --variants bm25 with --mode bm25"),
            ));
        }
        if args.sweep.is_some() {
            return Err(invalid(
                "sweep",
                "the sweep needs an embedding model (run `bib model install`)",
            ));
        }
    }
    let synth_cfg = if args.synthesize {
        Some(kb.synth.ok_or_else(|| {
            invalid("synthesize", "no chat endpoint configured (set BIB_LLM_BASE_URL and BIB_LLM_MODEL, or [llm] in bib.toml)")
        })?)
    } else {
        None
    };
    Ok((variants, filter, synth_cfg))
}

/// Run the harness over `items`. `source` labels where they came from.
pub fn evaluate(
    kb: &Kb<'_>,
    items: &[GoldenItem],
    source: &str,
    args: &EvalArgs,
) -> Result<EvalReport, EvalError> {
    let (variants, filter, synth_cfg) = check_setup(kb, items, source, args)?;
    let sentence_index = build_sentence_index_when_small_to_big_is_asked(kb, &variants)?;
    let evaluation = QuestionEvaluation {
        kb,
        args,
        variants: &variants,
        filter: &filter,
        synth_cfg,
        sentence_index: sentence_index.as_ref(),
        retriever: Retriever::new(kb.index, kb.embedder, kb.cache),
        base_opts: baseline_retrieve_options(args),
    };
    let (questions, sweep_inputs) = evaluation.evaluate_every_question(items)?;
    // Typos are told apart only when the baseline's ask corrects them (`typo` on).
    let corrector = kb
        .embedder
        .filter(|_| evaluation.base_opts.signals.typo > 0);
    let unknown = unknown_words(kb.index, corrector, items)?;
    Ok(assemble_report(
        kb,
        source,
        args,
        variants,
        questions,
        &sweep_inputs,
        unknown,
    ))
}

/// The question words `index` never uses, with the number of questions holding each, most
/// asked first (then by word). Given the knowledge base's model (`embedder`, whose tokenizer
/// tells a typo from a word), each word `ask` corrects as a typo says what to.
fn unknown_words(
    index: &dyn ChunkIndex,
    embedder: Option<&dyn Embedder>,
    items: &[GoldenItem],
) -> Result<Vec<report::UnknownWord>, EvalError> {
    let cfg = index.term_config()?;
    let doc_freqs = |terms: &[String]| index.doc_freqs(terms).map(|(_, dfs)| dfs);
    let mut counts: HashMap<String, usize> = HashMap::new();
    for item in items {
        for w in bib_retrieve::typo::unknown_words(&item.question, &cfg, doc_freqs)? {
            *counts.entry(w).or_default() += 1;
        }
    }
    let mut out = Vec::with_capacity(counts.len());
    for (word, questions) in counts {
        let typo_of = match embedder {
            Some(e) => bib_retrieve::retrieve::correct_typos_in(index, e, &cfg, &word)?
                .corrections
                .pop()
                .map(|c| c.to),
            None => None,
        };
        out.push(report::UnknownWord {
            word,
            questions,
            typo_of,
        });
    }
    out.sort_by(|a, b| b.questions.cmp(&a.questions).then(a.word.cmp(&b.word)));
    Ok(out)
}

/// The sentence-level index of the whole corpus, built once before the first question, but
/// only when small-to-big is among the variants (it embeds every sentence of the corpus).
fn build_sentence_index_when_small_to_big_is_asked(
    kb: &Kb<'_>,
    variants: &[Variant],
) -> Result<Option<SentenceIndex>, EvalError> {
    if variants.contains(&Variant::SmallToBig) {
        let (Some(corpus), Some(e)) = (kb.corpus, kb.embedder) else {
            return Err(invalid(
                "variants",
                "small-to-big needs the whole corpus and an embedding model",
            ));
        };
        Ok(Some(SentenceIndex::build(
            corpus.all_chunks()?,
            e,
            kb.cache,
        )?))
    } else {
        Ok(None)
    }
}

/// The retrieval options of the baseline, from which every other retrieval variant derives
/// its own (the candidate list is never shorter than `top_k`).
fn baseline_retrieve_options(args: &EvalArgs) -> RetrieveOptions {
    RetrieveOptions {
        top_k: args.top_k,
        mode: args.mode,
        candidates: args.candidates.max(args.top_k),
        fusion: args.fusion,
        convex_alpha: args.convex_alpha,
        signals: args.signals,
        ..RetrieveOptions::default()
    }
}

/// What the per-question loop reads, fixed for the whole evaluation: the knowledge base, the
/// arguments, the checked setup and the retriever shared by every variant.
struct QuestionEvaluation<'e, 'k> {
    kb: &'e Kb<'k>,
    args: &'e EvalArgs,
    variants: &'e [Variant],
    filter: &'e Filter,
    synth_cfg: Option<&'k SynthConfig>,
    /// Present exactly when small-to-big is among the variants.
    sentence_index: Option<&'e SentenceIndex>,
    retriever: Retriever<'k>,
    base_opts: RetrieveOptions,
}

impl QuestionEvaluation<'_, '_> {
    /// Every question in order, reporting progress one question at a time. Returns the
    /// per-question reports and, when a sweep is asked, the baseline's scored sentences per
    /// question.
    fn evaluate_every_question(
        &self,
        items: &[GoldenItem],
    ) -> Result<(Vec<QuestionReport>, Vec<sweep::SweepQuestion>), EvalError> {
        let mut questions = Vec::with_capacity(items.len());
        let mut sweep_inputs = Vec::new();
        self.kb.progress.start("questions", items.len() as u64);
        for item in items {
            questions.push(self.evaluate_one_question(item, &mut sweep_inputs)?);
            self.kb.progress.advance(1);
        }
        self.kb.progress.finish();
        Ok((questions, sweep_inputs))
    }

    /// One question through every variant, baseline first (the others' overlap is measured
    /// against its chunks), each timed on its own.
    fn evaluate_one_question(
        &self,
        item: &GoldenItem,
        sweep_inputs: &mut Vec<sweep::SweepQuestion>,
    ) -> Result<QuestionReport, EvalError> {
        let mut per: BTreeMap<Variant, VariantMetrics> = BTreeMap::new();
        let mut base_ids: Vec<i64> = Vec::new();
        for &v in self.variants {
            let t0 = Instant::now();
            let mut m = if v == Variant::SmallToBig {
                let Some(ix) = self.sentence_index else {
                    continue;
                };
                self.evaluate_small_to_big_variant(ix, item, &base_ids)?
            } else {
                self.evaluate_retrieval_variant(v, item, &mut base_ids, sweep_inputs)?
            };
            m.ms = t0.elapsed().as_secs_f64() * 1000.0;
            per.insert(v, m);
        }
        Ok(QuestionReport {
            id: item.id.clone(),
            question: item.question.clone(),
            variants: per,
        })
    }

    /// Small-to-big: the best sentences, each expanded inside its chunk. "Before" measures the
    /// whole parent chunks, "after" the expanded passages actually sent.
    fn evaluate_small_to_big_variant(
        &self,
        ix: &SentenceIndex,
        item: &GoldenItem,
        base_ids: &[i64],
    ) -> Result<VariantMetrics, EvalError> {
        let kb = self.kb;
        let passages = ix.search(
            &item.question,
            kb.embedder,
            kb.cache,
            small_to_big::PassageSearch {
                hits: self.args.s2b_hits(),
                window: self.args.small_to_big_window,
                mode: self.args.mode,
            },
            self.filter,
        )?;
        let whole: Vec<&str> = passages.iter().map(|p| p.parent.content.as_str()).collect();
        let cut: Vec<&str> = passages.iter().map(|p| p.content.as_str()).collect();
        let before = measure(&whole, item, kb.embedder);
        let after = measure(&cut, item, kb.embedder);
        let paths: Vec<&str> = passages.iter().map(|p| p.parent.path.as_str()).collect();
        let ids: Vec<i64> = passages.iter().map(|p| p.parent.id).collect();
        Ok(VariantMetrics {
            overlap_vs_baseline: overlap(base_ids, &ids),
            chunk_ids: ids,
            sources: passages
                .iter()
                .map(|p| format!("{}#{}", p.parent.path, p.parent.chunk_index))
                .collect(),
            top_score: passages.first().map(|p| p.score),
            tokens: after.tokens,
            tokens_before: before.tokens,
            exact_tokens: after.exact,
            exact_tokens_before: before.exact,
            evidence_in_topk: before.evidence,
            evidence_kept: after.evidence,
            answer_in_topk: before.answer,
            answer_kept: after.answer,
            file_hit: file_hit(item, &paths),
            answer: None,
            passages: Vec::new(),
            ms: 0.0,
        })
    }

    /// Every variant but small-to-big: one retrieval with the variant's options, measured
    /// before and after trimming. The baseline also records its chunk ids (for the others'
    /// overlap) and, when a sweep is asked, its scored sentences; with `synthesize` on, an
    /// answer is asked for.
    fn evaluate_retrieval_variant(
        &self,
        v: Variant,
        item: &GoldenItem,
        base_ids: &mut Vec<i64>,
        sweep_inputs: &mut Vec<sweep::SweepQuestion>,
    ) -> Result<VariantMetrics, EvalError> {
        let kb = self.kb;
        let opts = self.retrieve_options_for_variant(v);
        let r = self
            .retriever
            .retrieve(&item.question, &opts, self.filter)?;
        let ids: Vec<i64> = r.chunks.iter().map(|c| c.chunk.id).collect();
        let cut: Vec<&str> = r.chunks.iter().map(|c| c.text.as_str()).collect();
        let after = measure(&cut, item, kb.embedder);
        let (before, passages) = self.measure_before_trimming(&opts, &r, &cut, item);
        let paths: Vec<&str> = r.chunks.iter().map(|c| c.chunk.path.as_str()).collect();
        if v == Variant::Baseline {
            *base_ids = ids.clone();
            if self.args.sweep.is_some() {
                sweep_inputs.push(sweep_question(kb, &self.retriever, item, &r, self.args)?);
            }
        }
        let answer = self.synthesize_answer_when_asked(item, &r)?;
        Ok(VariantMetrics {
            overlap_vs_baseline: overlap(base_ids, &ids),
            sources: sources(&r),
            chunk_ids: ids,
            top_score: r.chunks.first().map(|c| c.score),
            tokens: after.tokens,
            tokens_before: before.tokens,
            exact_tokens: after.exact,
            exact_tokens_before: before.exact,
            evidence_in_topk: before.evidence,
            evidence_kept: after.evidence,
            answer_in_topk: before.answer,
            answer_kept: after.answer,
            file_hit: file_hit(item, &paths),
            answer,
            passages,
            ms: 0.0,
        })
    }

    /// The retrieval options of a variant: the baseline's, with the variant's trimming, mode
    /// or signals changed.
    fn retrieve_options_for_variant(&self, v: Variant) -> RetrieveOptions {
        let (args, base_opts) = (self.args, &self.base_opts);
        match v {
            Variant::Baseline => base_opts.clone(),
            Variant::Trim => RetrieveOptions {
                trim: Some(args.trim_options(TrimScorer::Cosine)),
                ..base_opts.clone()
            },
            Variant::TrimHybrid => RetrieveOptions {
                trim: Some(args.trim_options(TrimScorer::Hybrid)),
                ..base_opts.clone()
            },
            Variant::Bm25 => RetrieveOptions {
                mode: Mode::Bm25,
                ..base_opts.clone()
            },
            Variant::Vector => RetrieveOptions {
                mode: Mode::Vector,
                ..base_opts.clone()
            },
            Variant::Hybrid => RetrieveOptions {
                mode: Mode::Hybrid,
                ..base_opts.clone()
            },
            Variant::Plain => RetrieveOptions {
                mode: Mode::Hybrid,
                signals: bib_retrieve::Signals::OFF,
                ..base_opts.clone()
            },
            Variant::SmallToBig => unreachable_variant(),
        }
    }

    /// The context before trimming and, for a trimming variant, its passages (kept and
    /// removed sentences). A trimmed result still carries its whole chunk, so "before" is
    /// measured on those; any other variant sent them whole, so "before" is the same context
    /// as "after".
    fn measure_before_trimming(
        &self,
        opts: &RetrieveOptions,
        r: &RetrievalResult,
        cut: &[&str],
        item: &GoldenItem,
    ) -> (Measured, Vec<passage::Passage>) {
        let kb = self.kb;
        if opts.trim.is_some() {
            let texts: Vec<String> = r.chunks.iter().map(|c| c.chunk.text()).collect();
            let whole: Vec<&str> = texts.iter().map(String::as_str).collect();
            (measure(&whole, item, kb.embedder), passage::passages(r))
        } else {
            (measure(cut, item, kb.embedder), Vec::new())
        }
    }

    /// With `synthesize` on, the chat endpoint's answer over the retrieved chunks (streamed
    /// nowhere); otherwise none.
    fn synthesize_answer_when_asked(
        &self,
        item: &GoldenItem,
        r: &RetrievalResult,
    ) -> Result<Option<String>, EvalError> {
        Ok(match self.synth_cfg {
            Some(cfg) => Some(synth::synthesize(
                cfg,
                &item.question,
                &r.chunks,
                &mut std::io::sink(),
            )?),
            None => None,
        })
    }
}

/// The report: aggregates and verdicts over the per-question results, the sweep when asked,
/// and the settings the evaluation ran with.
fn assemble_report(
    kb: &Kb<'_>,
    source: &str,
    args: &EvalArgs,
    variants: Vec<Variant>,
    questions: Vec<QuestionReport>,
    sweep_inputs: &[sweep::SweepQuestion],
    unknown_words: Vec<report::UnknownWord>,
) -> EvalReport {
    let aggregates = report::aggregate(&questions, &variants);
    let verdicts = report::verdicts(&aggregates, args.quality_tolerance);
    let sweep = args.sweep.as_ref().map(|spec| {
        sweep::run(
            spec,
            sweep_inputs,
            args.sweep_scorer,
            args.trim_min_sentences,
            args.trim_lexical_top,
            args.quality_tolerance,
        )
    });
    EvalReport {
        settings: EvalSettings {
            source: source.to_string(),
            model: kb.embedder.map(|e| e.model_id().to_string()),
            top_k: args.top_k,
            mode: args.mode.to_string(),
            trim_threshold: args.trim_threshold,
            trim_window: args.trim_window,
            trim_min_sentences: args.trim_min_sentences,
            small_to_big_hits: args.s2b_hits(),
            quality_tolerance: args.quality_tolerance,
            filters: args.filters.clone(),
            variants,
            synthesize: args.synthesize,
            questions: questions.len(),
        },
        summary: report::spec_summary(&aggregates),
        aggregates,
        verdicts,
        questions,
        sweep,
        unknown_words,
    }
}

fn unreachable_variant() -> RetrieveOptions {
    // Small-to-big is handled before this match; keep a harmless value rather than panic.
    RetrieveOptions::default()
}

/// Score the sentences of the baseline chunks once, for the sweep.
fn sweep_question(
    kb: &Kb<'_>,
    retriever: &Retriever<'_>,
    item: &GoldenItem,
    base: &RetrievalResult,
    args: &EvalArgs,
) -> Result<sweep::SweepQuestion, EvalError> {
    let Some(e) = kb.embedder else {
        return Err(invalid("sweep", "the sweep needs an embedding model"));
    };
    let qv = retriever.embed_query(&item.question)?;
    let prepared: Vec<Prepared<'_>> = base.chunks.iter().map(|c| Prepared::new(&c.text)).collect();
    let scores = score_texts(
        e,
        kb.cache,
        &item.question,
        &qv,
        &prepared,
        args.trim_options(args.sweep_scorer).rrf_k,
        &kb.index.term_config()?,
    )?;
    Ok(sweep::SweepQuestion {
        chunks: base
            .chunks
            .iter()
            .zip(scores)
            .map(|(c, s)| sweep::SweepChunk {
                content: c.text.clone(),
                cosine: s.cosine,
                fused: s.fused,
                bm25_rank: s.bm25_rank,
                exact: s.exact,
            })
            .collect(),
        evidence: item.evidence.clone(),
        answer: item.answer.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The baseline retrieves as `bib ask` would with the same settings: its fusion and the
    /// fusion weight the caller calibrated for the knowledge base's model.
    #[test]
    fn baseline_takes_the_fusion_and_its_weight_from_the_arguments() {
        let args = EvalArgs {
            fusion: bib_retrieve::Fusion::Rrf,
            convex_alpha: 0.5,
            top_k: 8,
            candidates: 3,
            ..EvalArgs::default()
        };
        let o = baseline_retrieve_options(&args);
        assert_eq!((o.fusion, o.convex_alpha), (bib_retrieve::Fusion::Rrf, 0.5));
        assert_eq!(
            (o.top_k, o.candidates),
            (8, 8),
            "never fewer candidates than top_k"
        );
    }

    /// The users' words the pages never use, counted per question, most asked first.
    #[test]
    fn unknown_words_are_counted_per_question() {
        let mut ix = bib_retrieve::MemoryIndex::new();
        let chunk = bib_retrieve::ChunkRecord {
            id: 1,
            path: "push.md".into(),
            content: "Publish a package with nuget push.".into(),
            ..Default::default()
        };
        ix.add(chunk, None).unwrap();
        let items: Vec<GoldenItem> = [
            "how do I upload my library?",
            "upload my library again, upload!",
            "publish a package",
        ]
        .into_iter()
        .map(GoldenItem::question)
        .collect();
        let got = unknown_words(&ix, None, &items).unwrap();
        let pairs: Vec<(&str, usize)> =
            got.iter().map(|w| (w.word.as_str(), w.questions)).collect();
        assert_eq!(pairs, [("library", 2), ("upload", 2)]);
        let mut report = assemble_report_for_test();
        report.unknown_words = got;
        let text = report::render_text(&report);
        assert!(
            text.contains(
                "never uses (typos, or candidates for ask.synonyms): library ×2, upload ×2"
            ),
            "{text}"
        );
    }

    fn assemble_report_for_test() -> EvalReport {
        serde_json::from_value(serde_json::json!({
            "settings": {"source": "questions", "model": null, "top_k": 5, "mode": "hybrid",
                "trim_threshold": 0.2, "trim_window": 0, "trim_min_sentences": 0,
                "small_to_big_hits": 10, "quality_tolerance": 0.05, "filters": [],
                "variants": [], "synthesize": false, "questions": 3},
            "summary": null, "aggregates": [], "verdicts": [], "questions": []
        }))
        .expect("a report with no variants")
    }
}
