//! `bib bench scifact` — retrieval quality of bm25, vector and hybrid (RRF) on SciFact (BEIR
//! test split: 5,183 abstracts, 300 claims): nDCG@10 and Recall@100, next to the published
//! anchors in `<data>/anchors.json`.
//!
//! Each abstract is one chunk (`title` newline `text`) in a `bib_retrieve::MemoryIndex`, whose
//! BM25 equals the store's (same term function, same formula); vectors come from the default
//! embedding model and are cached on disk between runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use bib_embed::{EmbedKind, Embedder};
use bib_retrieve::retrieve::{rank, ScoredHit};
use bib_retrieve::trim::Prepared;
use bib_retrieve::{
    ChunkIndex, EmbeddingCache, Filter, MemoryIndex, Mode, RetrieveOptions, Retriever, Signals,
};
use bib_store::TermConfig;
use serde_json::{json, Value};

use super::ask_common::{
    add_one_chunk_per_document, data_dir, embed_corpus_cached, load_scifact, ndcg_at,
    read_anchors_or_null, recall_at, OneChunkDocument, SciDoc, SciFact, SciQuery,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark data folder (holds scifact/ and anchors.json) [default: ../shared/bench/data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Where corpus embeddings are cached between runs.
    #[arg(long, default_value = ".bib/bench-cache")]
    cache_dir: PathBuf,
    /// Embedding model.
    #[arg(long, default_value = "use-m3")]
    model: String,
    /// Candidates taken from each list before fusion.
    #[arg(long, default_value_t = 100)]
    candidates: usize,
    /// Extra RRF k values to report beside the default 60.
    #[arg(long, value_delimiter = ',', default_value = "10,30,100")]
    extra_k: Vec<f64>,
    /// BM25 weights (vector weight 1) of the weighted-RRF rows.
    #[arg(long, value_delimiter = ',', default_value = "1.5,2,3")]
    bm25_weights: Vec<f64>,
    /// Weights α of BM25 in the convex-combination rows (α·BM25/max + (1−α)·scaled cosine).
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.6,0.7,0.8,0.9")]
    convex: Vec<f64>,
    /// BM25 candidates of the convex rows (a document outside them scores 0 on BM25).
    #[arg(long, default_value_t = 100)]
    convex_depth: usize,
    /// Skip the sentence-level vector rows (they embed every abstract sentence once).
    #[arg(long)]
    no_sentences: bool,
    /// Term function of the BM25 index (`v1`, `v2`, `v3`, `default` or a `key=value` list).
    #[arg(long, value_name = "SPEC", default_value = "default")]
    terms: String,
    /// Rows through the product's ranking (`Retriever::search`, convex fusion over top-100
    /// lists plus the ranking signals), one per setting: `off`, `default`, or weights such as
    /// `field=0.2,sentence=0.1` (repeatable).
    #[arg(long = "signals", value_name = "SPEC", default_values = ["off", "default"])]
    signals: Vec<String>,
    /// BM25 weight of convex fusion in the `--signals` rows [default: the one `bib ask`
    /// calibrates for `--model`].
    #[arg(long, value_name = "A")]
    fusion_alpha: Option<f64>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Experiment: each abstract's vector is the normalised mean of its sentences' vectors
    /// (those the sentence signal uses), not a pass over the whole abstract.
    #[arg(long)]
    mean_sentence_doc_vectors: bool,
}

#[derive(Default, Clone, Copy)]
struct Acc {
    ndcg: f64,
    r100: f64,
    r10: f64,
}

/// SciFact's test split with its corpus embedded by `--model`.
struct EmbeddedCorpus {
    docs: Vec<SciDoc>,
    queries: Vec<SciQuery>,
    qrels: HashMap<String, Vec<String>>,
    embedder: Box<dyn Embedder>,
    /// What each document is embedded and indexed as: title, newline, text.
    texts: Vec<String>,
    vecs: Vec<Vec<f32>>,
}

/// Every title and abstract sentence on its own: the document each belongs to and, unless
/// `--no-sentences`, its vector (empty then).
struct SentenceVectors {
    doc_of_sentence: Vec<usize>,
    vectors: Vec<Vec<f32>>,
}

/// What the per-query measurement reads: the settings, the index, the corpus vectors and the
/// row layout.
struct QueryListsContext<'a> {
    a: &'a Args,
    ix: &'a MemoryIndex,
    retriever: &'a Retriever<'a>,
    doc_vecs: &'a [Vec<f32>],
    sentences: &'a SentenceVectors,
    doc_count: usize,
    ks: &'a [f64],
    signals: &'a [Signals],
    /// Candidates taken from each list (at least 100).
    n: usize,
}

/// Metric sums of every row over the queries, and the per-query comparison of the compared
/// row with the best single list.
struct MetricTotals {
    acc: Vec<Acc>,
    /// Per query: hybrid better, equal, worse than the best single list.
    wins: [usize; 3],
}

/// What the printed summary and the JSON report are made from.
struct ScifactSummary<'a> {
    a: &'a Args,
    names: &'a [String],
    totals: &'a MetricTotals,
    /// Index of the row compared with the best single list.
    main: usize,
    queries: usize,
    docs: usize,
    n: usize,
    embed_q_ms: f64,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let data = data_dir(a.data.clone());
    let EmbeddedCorpus {
        docs,
        queries,
        qrels,
        embedder,
        texts,
        vecs,
    } = load_and_embed_scifact_corpus(&a, &data)?;
    let vecs = if a.mean_sentence_doc_vectors {
        mean_sentence_vectors(embedder.as_ref(), &texts, &a.cache_dir)?
    } else {
        vecs
    };

    let doc_vecs = vecs.clone();
    let ix = build_scifact_memory_index(&a, &docs, &texts, vecs)?;
    let doc_id = |id: i64| docs[id as usize].id.clone();

    let (qvecs, embed_q_ms) = embed_queries_timed(embedder.as_ref(), &queries)?;
    let sentences = embed_title_and_abstract_sentences(&a, embedder.as_ref(), &docs)?;

    let ks = rrf_ks_of_hybrid_rows(&a);
    let mut names = list_row_names(&a, &ks);
    let signals: Vec<Signals> = a
        .signals
        .iter()
        .map(|sp| sp.parse::<Signals>())
        .collect::<Result<_, _>>()?;
    for sg in &signals {
        match a.fusion_alpha {
            Some(alpha) => names.push(format!("ask ({}, α {alpha})", short_spec(sg))),
            None => names.push(format!("ask ({})", short_spec(sg))),
        }
    }
    let cache = EmbeddingCache::with_capacity(1_000_000);
    if signals.iter().any(|sg| sg.sentence > 0.0) {
        prefill_sentences(embedder.as_ref(), &texts, &a.cache_dir, &cache)?;
    }
    let retriever = Retriever::new(&ix, Some(embedder.as_ref()), &cache);
    let main = index_of_row_compared_with_best_single_list(&a, &ks);
    let mut totals = MetricTotals {
        acc: vec![Acc::default(); names.len()],
        wins: [0usize; 3],
    };
    let n = a.candidates.max(100);
    let ctx = QueryListsContext {
        a: &a,
        ix: &ix,
        retriever: &retriever,
        doc_vecs: &doc_vecs,
        sentences: &sentences,
        doc_count: docs.len(),
        ks: &ks,
        signals: &signals,
        n,
    };
    for (q, qv) in queries.iter().zip(&qvecs) {
        let rel = &qrels[&q.id];
        let lists = ranked_lists_of_every_row(&ctx, q, qv)?;
        totals.add_query(&lists, rel, main, doc_id);
    }
    let summary = ScifactSummary {
        a: &a,
        names: &names,
        totals: &totals,
        main,
        queries: queries.len(),
        docs: docs.len(),
        n,
        embed_q_ms,
    };
    let rows = print_metrics_table(&summary);
    let hybrid_minus_best_single = print_comparison_with_best_single_list(&summary);
    println!("query embedding: {embed_q_ms:.2} ms/query (batched)");

    print_published_anchors(&data);
    if let Some(p) = &a.json {
        write_json_report(&summary, p, rows, hybrid_minus_best_single)?;
    }
    Ok(())
}

/// Load SciFact from `<data>/scifact` and embed its corpus (cached under `--cache-dir`).
fn load_and_embed_scifact_corpus(a: &Args, data: &Path) -> anyhow::Result<EmbeddedCorpus> {
    let dir = data.join("scifact");
    let SciFact {
        docs,
        queries,
        qrels,
    } = load_scifact(&dir)?;
    eprintln!(
        "scifact: {} docs, {} test queries with qrels",
        docs.len(),
        queries.len()
    );

    let embedder = crate::load_embedder(&a.model)?;
    let texts: Vec<String> = docs.iter().map(SciDoc::embed_text).collect();
    let vecs = embed_corpus_cached(embedder.as_ref(), &texts, &a.cache_dir, "scifact")?;
    Ok(EmbeddedCorpus {
        docs,
        queries,
        qrels,
        embedder,
        texts,
        vecs,
    })
}

/// One chunk per abstract, in a `MemoryIndex` with the `--terms` term function.
fn build_scifact_memory_index(
    a: &Args,
    docs: &[SciDoc],
    texts: &[String],
    vecs: Vec<Vec<f32>>,
) -> anyhow::Result<MemoryIndex> {
    let terms: TermConfig = a.terms.parse()?;
    eprintln!("scifact: terms {}", terms.id());
    let mut ix = MemoryIndex::with_terms(terms);
    add_one_chunk_per_document(
        &mut ix,
        docs.iter()
            .zip(vecs)
            .enumerate()
            .map(|(i, (d, v))| OneChunkDocument {
                path: d.id.clone(),
                title: d.title.clone(),
                content: texts[i].clone(),
                embedding: v,
            }),
    )?;
    Ok(ix)
}

/// The vectors of every query (one batch) and the milliseconds that took per query.
fn embed_queries_timed(
    embedder: &dyn Embedder,
    queries: &[SciQuery],
) -> anyhow::Result<(Vec<Vec<f32>>, f64)> {
    let t = Instant::now();
    let qtexts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
    let qvecs = embedder.embed(&qtexts, EmbedKind::Query)?;
    let embed_q_ms = t.elapsed().as_secs_f64() * 1000.0 / queries.len().max(1) as f64;
    Ok((qvecs, embed_q_ms))
}

/// Split every document into its title and abstract sentences and, unless `--no-sentences`,
/// embed them (cached under `--cache-dir`).
fn embed_title_and_abstract_sentences(
    a: &Args,
    embedder: &dyn Embedder,
    docs: &[SciDoc],
) -> anyhow::Result<SentenceVectors> {
    // Sentence-level vectors: every title and abstract sentence embedded on its own; a
    // document's score in this list is its best sentence's cosine ("max-sim"). use-m3 is a
    // sentence-similarity model and a claim is one sentence, so a claim meets its evidence
    // sentence head on instead of an average over a whole abstract.
    let mut sent_texts: Vec<String> = Vec::new();
    let mut sent_doc: Vec<usize> = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        sent_texts.push(d.title.clone());
        sent_doc.push(i);
        for s in bib_text::sentences::split_sentences(&d.text) {
            sent_texts.push(s.text(&d.text).to_string());
            sent_doc.push(i);
        }
    }
    eprintln!("scifact: {} sentences", sent_texts.len());
    let sent_vecs = if a.no_sentences {
        Vec::new()
    } else {
        embed_corpus_cached(embedder, &sent_texts, &a.cache_dir, "scifact-sentences")?
    };
    Ok(SentenceVectors {
        doc_of_sentence: sent_doc,
        vectors: sent_vecs,
    })
}

/// The RRF k of the hybrid rows: 60 first, then the extra ones (60 only once).
fn rrf_ks_of_hybrid_rows(a: &Args) -> Vec<f64> {
    let mut ks = vec![60.0];
    ks.extend(a.extra_k.iter().copied().filter(|k| *k != 60.0));
    ks
}

/// The labels of every row before the signals rows, in table order.
fn list_row_names(a: &Args, ks: &[f64]) -> Vec<String> {
    let mut names: Vec<String> = vec!["bm25".into(), "vector".into()];
    names.extend(ks.iter().map(|k| format!("hybrid (RRF k={k})")));
    for w in &a.bm25_weights {
        names.push(format!("hybrid (k=60, bm25 ×{w})"));
    }
    for al in &a.convex {
        names.push(format!("convex (α={al} bm25)"));
    }
    if !a.no_sentences {
        names.push("vector (best sentence)".into());
        names.push("hybrid sent (k=60)".into());
        for w in &a.bm25_weights {
            names.push(format!("hybrid sent (k=60, bm25 ×{w})"));
        }
    }
    names
}

/// The index of the row compared with the best single list.
fn index_of_row_compared_with_best_single_list(a: &Args, ks: &[f64]) -> usize {
    // The row compared with the best single list: bib ask's default fusion when it is among
    // the rows, else RRF k = 60.
    let default_alpha = bib_retrieve::retrieve::calibrated_alpha(&a.model);
    a.convex
        .iter()
        .position(|&al| (al - default_alpha).abs() < 1e-9)
        .map_or(2, |i| 2 + ks.len() + a.bm25_weights.len() + i)
}

/// The top 100 of a fused list as ranked hits.
fn fused_top_100_as_scored_hits(f: Vec<bib_retrieve::FusedHit>) -> Vec<ScoredHit> {
    f.into_iter()
        .take(100)
        .map(|f| ScoredHit::new(f.id, f.score, f.lists[0], f.lists[1], "rrf"))
        .collect()
}

/// One query's ranked list of every row, in row order.
fn ranked_lists_of_every_row(
    ctx: &QueryListsContext<'_>,
    q: &SciQuery,
    qv: &[f32],
) -> anyhow::Result<Vec<Vec<ScoredHit>>> {
    let (a, n) = (ctx.a, ctx.n);
    let bm = ctx.ix.bm25_top(&q.text, n, &Filter::default())?;
    let ve = ctx.ix.vector_top(qv, n, &Filter::default())?;
    let mut lists = vec![
        rank(Mode::Bm25, &bm, &ve, 60.0, 100),
        rank(Mode::Vector, &bm, &ve, 60.0, 100),
    ];
    for &k in ctx.ks {
        lists.push(rank(Mode::Hybrid, &bm, &ve, k, 100));
    }
    for &w in &a.bm25_weights {
        lists.push(fused_top_100_as_scored_hits(
            bib_retrieve::rrf_fuse_weighted(&[bm.clone(), ve.clone()], &[w, 1.0], 60.0),
        ));
    }
    if !a.convex.is_empty() {
        push_convex_lists(ctx, q, qv, &ve, &mut lists)?;
    }
    if !a.no_sentences {
        push_best_sentence_lists(ctx, qv, &bm, &mut lists);
    }
    for sg in ctx.signals {
        let opts = RetrieveOptions {
            top_k: 100,
            signals: *sg,
            convex_alpha: ctx
                .a
                .fusion_alpha
                .unwrap_or_else(|| bib_retrieve::retrieve::calibrated_alpha(&ctx.a.model)),
            ..RetrieveOptions::default()
        };
        lists.push(
            ctx.retriever
                .search(&q.text, &opts, &Filter::default(), Some(qv))?,
        );
    }
    Ok(lists)
}

/// The convex rows, one per `--convex` weight.
fn push_convex_lists(
    ctx: &QueryListsContext<'_>,
    q: &SciQuery,
    qv: &[f32],
    ve: &[bib_retrieve::Hit],
    lists: &mut Vec<Vec<ScoredHit>>,
) -> anyhow::Result<()> {
    // The product's convex fusion (bib_retrieve::retrieve::convex_fuse) over BM25
    // top-`convex_depth` and vector top-n; BM25-only candidates get their cosine.
    let bm_wide = ctx
        .ix
        .bm25_top(&q.text, ctx.a.convex_depth, &Filter::default())?;
    let in_vec: std::collections::HashSet<i64> = ve.iter().map(|h| h.id).collect();
    let extra: Vec<bib_retrieve::Hit> = bm_wide
        .iter()
        .filter(|h| !in_vec.contains(&h.id))
        .map(|h| bib_retrieve::Hit {
            id: h.id,
            score: f64::from(bib_embed::cosine(&ctx.doc_vecs[h.id as usize], qv)),
        })
        .collect();
    for &al in &ctx.a.convex {
        lists.push(bib_retrieve::retrieve::convex_fuse(
            &bm_wide, ve, &extra, al, 100,
        ));
    }
    Ok(())
}

/// The sentence-level rows: best-sentence vector list alone, with BM25 by RRF, and weighted.
fn push_best_sentence_lists(
    ctx: &QueryListsContext<'_>,
    qv: &[f32],
    bm: &[bib_retrieve::Hit],
    lists: &mut Vec<Vec<ScoredHit>>,
) {
    let doc_count = ctx.doc_count;
    let mut best = vec![f32::NEG_INFINITY; doc_count];
    for (v, &d) in ctx
        .sentences
        .vectors
        .iter()
        .zip(&ctx.sentences.doc_of_sentence)
    {
        let c = bib_embed::cosine(v, qv);
        if c > best[d] {
            best[d] = c;
        }
    }
    let mut order: Vec<usize> = (0..doc_count).collect();
    order.sort_by(|&x, &y| best[y].total_cmp(&best[x]).then(x.cmp(&y)));
    let vs: Vec<bib_retrieve::Hit> = order
        .into_iter()
        .take(ctx.n)
        .map(|i| bib_retrieve::Hit {
            id: i as i64,
            score: f64::from(best[i]),
        })
        .collect();
    lists.push(rank(Mode::Vector, bm, &vs, 60.0, 100));
    lists.push(rank(Mode::Hybrid, bm, &vs, 60.0, 100));
    for &w in &ctx.a.bm25_weights {
        lists.push(fused_top_100_as_scored_hits(
            bib_retrieve::rrf_fuse_weighted(&[bm.to_vec(), vs.clone()], &[w, 1.0], 60.0),
        ));
    }
}

impl MetricTotals {
    /// Add one query's nDCG@10, R@10 and R@100 of every row, and count whether row `main`
    /// beat, equalled or lost to the best single list on nDCG@10.
    fn add_query(
        &mut self,
        lists: &[Vec<ScoredHit>],
        rel: &[String],
        main: usize,
        doc_id: impl Fn(i64) -> String,
    ) {
        let mut nd = Vec::new();
        for (slot, l) in self.acc.iter_mut().zip(lists) {
            let ids: Vec<String> = l.iter().map(|h| doc_id(h.id)).collect();
            let x = ndcg_at(&ids, rel, 10);
            nd.push(x);
            slot.ndcg += x;
            slot.r10 += recall_at(&ids, rel, 10);
            slot.r100 += recall_at(&ids, rel, 100);
        }
        let best_single = nd[0].max(nd[1]);
        let h = nd[main];
        let i = if h > best_single + 1e-12 {
            0
        } else if (h - best_single).abs() <= 1e-12 {
            1
        } else {
            2
        };
        self.wins[i] += 1;
    }
}

/// Print the per-row table (means over the queries); also its JSON rows.
fn print_metrics_table(summary: &ScifactSummary<'_>) -> Vec<Value> {
    let nq = summary.queries.max(1) as f64;
    println!(
        "SciFact test ({} queries, {} docs), model {}, candidates {} per list",
        summary.queries, summary.docs, summary.a.model, summary.n
    );
    println!(
        "{:<32} {:>8} {:>8} {:>9}",
        "run", "nDCG@10", "R@10", "R@100"
    );
    let mut rows = Vec::new();
    for (name, s) in summary.names.iter().zip(&summary.totals.acc) {
        let (nd, r10, r100) = (s.ndcg / nq, s.r10 / nq, s.r100 / nq);
        println!("{name:<32} {nd:>8.4} {r10:>8.4} {r100:>9.4}");
        rows.push(json!({"run": name, "ndcg10": nd, "r10": r10, "r100": r100}));
    }
    rows
}

/// Print how the compared row does against the best single list; returns the nDCG@10
/// difference.
fn print_comparison_with_best_single_list(s: &ScifactSummary<'_>) -> f64 {
    let nq = s.queries.max(1) as f64;
    let (acc, main, wins) = (&s.totals.acc, s.main, &s.totals.wins);
    let best_single = (acc[0].ndcg.max(acc[1].ndcg)) / nq;
    let hybrid = acc[main].ndcg / nq;
    println!(
        "{} (bib ask's default) vs best single list: {:+.4} nDCG@10 ({:.3}×); per query better/equal/worse: {}/{}/{}",
        s.names[main],
        hybrid - best_single,
        hybrid / best_single.max(1e-12),
        wins[0],
        wins[1],
        wins[2]
    );
    hybrid - best_single
}

/// Print the published nDCG@10 anchors of `<data>/anchors.json` that are there.
fn print_published_anchors(data: &Path) {
    let anchors = read_anchors_or_null(data);
    let sf = &anchors["scifact_test_ndcg10"];
    println!("anchors (nDCG@10):");
    let anchor_rows = [
        ("BM25 (BEIR paper)", &sf["BEIR_paper_Table2"]["BM25"]),
        (
            "BM25 flat (Anserini)",
            &sf["Anserini_regressions"]["BM25_flat"]["ndcg10"],
        ),
        ("BM25 bm25s local", &sf["local_sanity_bm25s"]["ndcg10"]),
        (
            "bge-small-en-v1.5",
            &sf["MTEB_results"]["bge-small-en-v1.5"]["ndcg10"],
        ),
        (
            "multilingual-e5-small",
            &sf["MTEB_results"]["multilingual-e5-small"]["ndcg10"],
        ),
        (
            "all-MiniLM-L6-v2",
            &sf["MTEB_results"]["all-MiniLM-L6-v2"]["ndcg10"],
        ),
        (
            "bge-m3 dense",
            &sf["MTEB_results"]["bge-m3_dense"]["ndcg10"],
        ),
    ];
    for (name, v) in anchor_rows {
        if let Some(x) = v.as_f64() {
            println!("  {name:<24} {x:.4}");
        }
    }
}

/// Write the JSON report to `p`.
fn write_json_report(
    s: &ScifactSummary<'_>,
    p: &Path,
    rows: Vec<Value>,
    hybrid_minus_best_single: f64,
) -> anyhow::Result<()> {
    let report = json!({
        "bench": "scifact", "model": s.a.model, "queries": s.queries, "docs": s.docs,
        "candidates": s.n, "rows": rows, "hybrid_minus_best_single": hybrid_minus_best_single,
        "per_query_better_equal_worse": s.totals.wins, "query_embed_ms": s.embed_q_ms,
    });
    std::fs::write(p, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", p.display()))?;
    Ok(())
}

/// A signals setting as a short row label: the weights that are on, or `off`.
fn short_spec(s: &Signals) -> String {
    let on: Vec<String> = [
        ("field", s.field),
        ("name", s.name),
        ("phrase", s.phrase),
        ("sentence", s.sentence),
        ("sentence_lex", s.sentence_lex),
        ("doc", s.doc),
        ("prf", s.prf),
        ("prf_vec", s.prf_vec),
    ]
    .iter()
    .filter(|(_, w)| *w > 0.0)
    .map(|(n, w)| format!("{n} {w}"))
    .collect();
    if on.is_empty() {
        "signals off".into()
    } else {
        on.join(", ")
    }
}

/// Every distinct abstract sentence, split as the ranking signals split a chunk
/// (`Prepared::new`), and its vector (embedded once, then read from `cache_dir`).
fn embedded_chunk_sentences(
    e: &dyn bib_embed::Embedder,
    texts: &[String],
    cache_dir: &std::path::Path,
) -> anyhow::Result<(Vec<String>, Vec<Vec<f32>>)> {
    let mut all: Vec<String> = Vec::new();
    for t in texts {
        let p = Prepared::new(t);
        all.extend((0..p.sentences.len()).map(|i| p.sentence(i).to_string()));
    }
    all.sort();
    all.dedup();
    let vecs = embed_corpus_cached(e, &all, cache_dir, "scifact-chunk-sentences")?;
    Ok((all, vecs))
}

/// Put the vector of every abstract sentence, split as the ranking signals split a chunk
/// (`Prepared::new`), into `cache` (embedded once, then read from `cache_dir`).
fn prefill_sentences(
    e: &dyn bib_embed::Embedder,
    texts: &[String],
    cache_dir: &std::path::Path,
    cache: &EmbeddingCache,
) -> anyhow::Result<()> {
    let (all, vecs) = embedded_chunk_sentences(e, texts, cache_dir)?;
    cache.insert(
        e.model_id(),
        EmbedKind::Passage,
        all.into_iter().zip(vecs).collect(),
    );
    Ok(())
}

/// Each text's normalised mean of its sentences' vectors (split as `Prepared::new` splits).
fn mean_sentence_vectors(
    e: &dyn bib_embed::Embedder,
    texts: &[String],
    cache_dir: &std::path::Path,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let (all, vecs) = embedded_chunk_sentences(e, texts, cache_dir)?;
    let by_text: HashMap<&str, &Vec<f32>> = all.iter().map(String::as_str).zip(&vecs).collect();
    Ok(texts
        .iter()
        .map(|t| {
            let p = Prepared::new(t);
            let mut mean = vec![0f32; e.dimensions()];
            for i in 0..p.sentences.len() {
                for (m, x) in mean.iter_mut().zip(by_text[p.sentence(i)]) {
                    *m += x;
                }
            }
            bib_text::vectors::unit(&mean)
        })
        .collect())
}
