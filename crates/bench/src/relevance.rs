//! `bib bench relevance` — calibrate the relevance floor (`bib_retrieve::relevance`): on the
//! NuGet wikis, does "no good match" fire on out-of-domain questions and not on answerable ones?
//!
//! Answerable: the development sets `bench/wiki/dev_en.jsonl` / `dev_es.jsonl` (the floor is
//! chosen on them), and the given golden sets as a held-out check. Out of domain:
//! `bench/wiki/offtopic_en.jsonl` / `offtopic_es.jsonl` (cooking, sports, travel, health, home,
//! finance, general knowledge, other software). Every question goes through the real ask path
//! (hybrid, default options, wiki stores cached as `bib bench wiki` caches them) and is judged
//! as an ask judges it (`Relevance::judge`: the model's cosine of the closest chunk against
//! the floor, unless one result has every word of the question). The report sweeps the floor
//! and gives, per floor, how often "no good match" fires on each kind of question.

use std::path::PathBuf;

use bib_eval::load_golden;
use bib_eval::stats::percentile;
use bib_retrieve::relevance::{floor_for, term_coverage};
use bib_retrieve::Relevance;
use bib_retrieve::{EmbeddingCache, Filter, RetrieveOptions, Retriever, StoreIndex, StoreVectors};
use serde_json::json;

use super::ask_common::data_dir;
use super::wiki::{command_line, open_ingested};

/// (set, file, wiki, answerable, in the repository's dev folder)
const SETS: [(&str, &str, &str, bool, bool); 6] = [
    ("dev_en", "dev_en.jsonl", "nuget-en", true, true),
    ("dev_es", "dev_es.jsonl", "nuget-es", true, true),
    ("golden_en", "golden_en.jsonl", "nuget-en", true, false),
    (
        "golden_es_dev",
        "golden_es_dev.jsonl",
        "nuget-es",
        true,
        false,
    ),
    ("offtopic_en", "offtopic_en.jsonl", "nuget-en", false, true),
    ("offtopic_es", "offtopic_es.jsonl", "nuget-es", false, true),
];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark data folder (holds wiki/) [default: ../shared/bench/data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Folder of the repository's sets (dev_*.jsonl, offtopic_*.jsonl).
    #[arg(long, default_value = "bench/wiki")]
    dev_dir: PathBuf,
    /// Where the ingested wiki stores are kept between runs (shared with `bib bench wiki`).
    #[arg(long, default_value = ".bib/bench-cache")]
    cache_dir: PathBuf,
    /// Embedding model: use-m3 (default) or e5-small.
    #[arg(long, default_value = bib_embed::DEFAULT_MODEL)]
    model: String,
    /// Floors swept: `from:to:step`.
    #[arg(long, default_value = "0.10:0.50:0.02")]
    sweep: String,
    /// Write the report (every question's cosine, the sweep) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One question's signal.
struct Scored {
    set: &'static str,
    answerable: bool,
    id: String,
    topic: String,
    cosine: f64,
    coverage: f64,
    /// The best sentence cosine among the results (the sentence signal's raw value; NaN
    /// without sentence vectors).
    sentence_cosine: f64,
}

fn parse_sweep(s: &str) -> anyhow::Result<Vec<f64>> {
    let p: Vec<f64> = s
        .split(':')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--sweep `{s}`: {e}"))?;
    anyhow::ensure!(
        p.len() == 3 && p[2] > 0.0 && p[0] <= p[1],
        "--sweep `{s}`: expected from:to:step with from <= to and step > 0"
    );
    let n = ((p[1] - p[0]) / p[2]).round() as usize;
    Ok((0..=n).map(|i| p[0] + i as f64 * p[2]).collect())
}

/// Whether an ask judges `q` "no good match" at `floor`.
fn fires_on(q: &Scored, floor: f64) -> bool {
    Relevance::judge(Some(q.cosine), Some(floor), Some(q.coverage), 1).no_good_match
}

/// `fires/n` of the questions of `sel` at `floor`.
fn fires(qs: &[&Scored], floor: f64) -> String {
    let f = qs.iter().filter(|q| fires_on(q, floor)).count();
    format!("{f}/{}", qs.len())
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let data = data_dir(a.data.clone()).join("wiki");
    let floors = parse_sweep(&a.sweep)?;
    let embedder = crate::load_embedder(&a.model)?;
    let cmd = command_line();
    println!("command: {cmd}");
    let in_force = floor_for(&a.model);
    let mut scored: Vec<Scored> = Vec::new();
    let mut stores = std::collections::BTreeMap::new();
    for &(set, file, wiki, answerable, in_repo) in &SETS {
        let path = if in_repo {
            a.dev_dir.join(file)
        } else {
            data.join(file)
        };
        let qs = load_golden(&path)?;
        let topics: Vec<String> = std::fs::read_to_string(&path)?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .ok()
                    .and_then(|v| v.get("topic").and_then(|t| t.as_str()).map(String::from))
                    .unwrap_or_default()
            })
            .collect();
        if !stores.contains_key(wiki) {
            let s = open_ingested(
                &a.cache_dir,
                &data.join(wiki),
                wiki,
                embedder.as_ref(),
                &bib_store::TermConfig::default(),
                bib_text::chunk::ChunkOptions::default(),
            )?;
            stores.insert(wiki, std::sync::Arc::new(s));
        }
        let store = stores[wiki].clone();
        let index = StoreIndex::new(store.as_ref());
        let terms = bib_store::Store::term_config(store.as_ref())?;
        // Sentence vectors come from the store, where ingest put them (as in `bib ask`): the
        // sentence signal ranks the results whose words the coverage rule reads.
        let cache = EmbeddingCache::default().with_backing(std::sync::Arc::new(StoreVectors(
            store.clone() as std::sync::Arc<dyn bib_store::Store>,
        )));
        let retriever = Retriever::new(&index, Some(embedder.as_ref()), &cache);
        for (i, q) in qs.iter().enumerate() {
            let r =
                retriever.retrieve(&q.question, &RetrieveOptions::default(), &Filter::default())?;
            scored.push(Scored {
                set,
                answerable,
                id: q.id.clone().unwrap_or_else(|| format!("{set}#{}", i + 1)),
                topic: topics.get(i).cloned().unwrap_or_default(),
                cosine: r.relevance.best_cosine.unwrap_or(f64::NAN),
                // The ask reads the results' words only below the floor in force; the sweep
                // judges at every floor, so it needs them for every question.
                coverage: r.relevance.term_coverage.unwrap_or_else(|| {
                    let texts: Vec<&str> = r.chunks.iter().map(|c| c.text.as_str()).collect();
                    term_coverage(&q.question, &texts, &terms)
                }),
                sentence_cosine: r
                    .chunks
                    .iter()
                    .filter_map(|c| c.explain.sentence.as_ref().and_then(|s| s.raw))
                    .fold(f64::NAN, f64::max),
            });
        }
    }
    print_report(&scored, &floors, in_force, &a.model);
    if let Some(p) = &a.json {
        let v = json!({
            "bench": "relevance", "command": cmd, "model": a.model, "floor_in_force": in_force,
            "questions": scored.iter().map(|s| json!({"set": s.set, "id": s.id,
                "answerable": s.answerable, "topic": s.topic, "best_cosine": s.cosine,
                "term_coverage": s.coverage,
                "best_sentence_cosine": s.sentence_cosine}))
                .collect::<Vec<_>>(),
        });
        std::fs::write(p, serde_json::to_string_pretty(&v)?)?;
        println!("\nJSON report: {}", p.display());
    }
    Ok(())
}

/// The questions of `qs` whose set ends in `suffix` (`_en`, `_es`).
fn of_lang<'a>(qs: &[&'a Scored], suffix: &str) -> Vec<&'a Scored> {
    qs.iter()
        .filter(|q| q.set.ends_with(suffix))
        .copied()
        .collect()
}

fn print_report(scored: &[Scored], floors: &[f64], in_force: Option<f64>, model: &str) {
    let pick =
        |f: &dyn Fn(&Scored) -> bool| -> Vec<&Scored> { scored.iter().filter(|s| f(s)).collect() };
    let dev = pick(&|s| s.answerable && s.set.starts_with("dev_"));
    let held = pick(&|s| s.answerable && !s.set.starts_with("dev_"));
    let off = pick(&|s| !s.answerable);
    let summary = |name: &str, qs: &[&Scored]| {
        let c: Vec<f64> = qs.iter().map(|q| q.cosine).collect();
        let at = |p: f64| (!c.is_empty()).then(|| percentile(&c, p));
        println!(
            "{name:<22} n {:>3}  min {:.3}  p10 {:.3}  median {:.3}  p90 {:.3}  max {:.3}",
            c.len(),
            at(0.0).unwrap_or(f64::NAN),
            at(10.0).unwrap_or(f64::NAN),
            at(50.0).unwrap_or(f64::NAN),
            at(90.0).unwrap_or(f64::NAN),
            at(100.0).unwrap_or(f64::NAN)
        );
    };
    println!("\nbest-chunk cosine ({model}), per kind of question:");
    summary("answerable (dev)", &dev);
    summary("answerable (golden)", &held);
    summary("off-topic", &off);
    println!(
        "\n{:>6}  {:>10} {:>10} {:>10}   {:>10} {:>10} {:>10}   {:>10}",
        "floor", "off en", "off es", "off all", "dev en", "dev es", "dev all", "golden"
    );
    let mut rows = floors.to_vec();
    if let Some(f) = in_force.filter(|f| !rows.iter().any(|r| (r - f).abs() < 1e-9)) {
        rows.push(f);
        rows.sort_by(f64::total_cmp);
    }
    for &f in &rows {
        let mark = if in_force.is_some_and(|x| (x - f).abs() < 1e-9) {
            " ← in force"
        } else {
            ""
        };
        println!(
            "{f:>6.2}  {:>10} {:>10} {:>10}   {:>10} {:>10} {:>10}   {:>10}{mark}",
            fires(&of_lang(&off, "_en"), f),
            fires(&of_lang(&off, "_es"), f),
            fires(&off, f),
            fires(&of_lang(&dev, "_en"), f),
            fires(&of_lang(&dev, "_es"), f),
            fires(&dev, f),
            fires(&held, f),
        );
    }
    if let Some(f) = in_force {
        println!("\nat the floor in force ({f:.2}): off-topic questions it misses, by topic");
        let mut topics: Vec<&str> = off.iter().map(|q| q.topic.as_str()).collect();
        topics.sort_unstable();
        topics.dedup();
        for t in topics {
            let of: Vec<&&Scored> = off.iter().filter(|q| q.topic == t).collect();
            let missed: Vec<String> = of
                .iter()
                .filter(|q| !fires_on(q, f))
                .map(|q| format!("{} ({:.2})", q.id, q.cosine))
                .collect();
            let fired = of.len() - missed.len();
            let missed = if missed.is_empty() {
                String::new()
            } else {
                format!("  missed: {}", missed.join(", "))
            };
            println!("  {t:<10} fires {fired}/{}{missed}", of.len());
        }
        let wrong: Vec<String> = dev
            .iter()
            .chain(&held)
            .filter(|q| fires_on(q, f))
            .map(|q| format!("{} ({:.2})", q.id, q.cosine))
            .collect();
        println!(
            "  answerable questions it fires on: {}",
            if wrong.is_empty() {
                "none".to_string()
            } else {
                wrong.join(", ")
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(lang: &str) -> (Vec<bib_eval::GoldenItem>, Vec<serde_json::Value>) {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../../bench/wiki/offtopic_{lang}.jsonl"));
        let raw = std::fs::read_to_string(&p).unwrap();
        let values = raw
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (load_golden(&p).unwrap(), values)
    }

    /// The out-of-domain sets: at least 30 questions per language, unique ids, every topic
    /// with several questions, and nothing that claims an answer in the wiki.
    #[test]
    fn offtopic_sets_are_well_formed() {
        for lang in ["en", "es"] {
            let (qs, values) = set(lang);
            assert!(qs.len() >= 30, "offtopic_{lang}: {} questions", qs.len());
            let mut ids = std::collections::HashSet::new();
            let mut topics: std::collections::BTreeMap<String, usize> = Default::default();
            for (q, v) in qs.iter().zip(&values) {
                let id = q.id.clone().expect("every question has an id");
                assert!(id.starts_with(&format!("{lang}-off-")), "{id}");
                assert!(ids.insert(id.clone()), "duplicate id {id}");
                assert_eq!(q.style.as_deref(), Some("offtopic"), "{id}");
                assert!(q.files.is_empty() && q.evidence.is_empty(), "{id}");
                let topic = v["topic"].as_str().expect("a topic").to_string();
                *topics.entry(topic).or_default() += 1;
            }
            assert!(topics.len() >= 6, "offtopic_{lang}: topics {topics:?}");
            assert!(topics.values().all(|&n| n >= 3), "{topics:?}");
        }
    }

    #[test]
    fn sweeps_parse_and_fire_below_the_floor() {
        let f = parse_sweep("0.10:0.20:0.05").unwrap();
        assert_eq!(f.len(), 3);
        assert!((f[2] - 0.20).abs() < 1e-9);
        assert!(parse_sweep("0.3:0.1:0.1").is_err());
        assert!(parse_sweep("x").is_err());
        let q = |cosine| Scored {
            set: "dev_en",
            answerable: true,
            id: String::new(),
            topic: String::new(),
            cosine,
            coverage: 0.0,
            sentence_cosine: f64::NAN,
        };
        let (a, b) = (q(0.2), q(0.4));
        assert_eq!(fires(&[&a, &b], 0.3), "1/2");
        let exact = Scored {
            coverage: 1.0,
            ..q(0.05)
        };
        assert_eq!(fires(&[&exact], 0.3), "0/1", "every word found: answered");
    }
}
