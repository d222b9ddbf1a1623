//! `bib bench sbd` — sentence-boundary accuracy on the golden sets in `<data>/sbd/*.json`.
//!
//! Each case is `{"text", "expected": [..]}`; a case passes when the stripped segments equal the
//! stripped expected list exactly (the pySBD / Pragmatic Segmenter convention). Our prose mode
//! (`bib_text::sentences::split_prose`) is scored next to Markdown mode and the UAX #29 baseline,
//! and the published anchors from `<data>/anchors.json` are printed alongside.

use std::path::{Path, PathBuf};

use anyhow::Context;
use bib_text::sentences::{split_prose, split_sentences, split_uax29, Sentence};
use serde::Deserialize;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark data folder (holds sbd/ and anchors.json) [default: ../shared/bench/data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Print every failing case of our prose mode.
    #[arg(long)]
    verbose: bool,
}

#[derive(Debug, Deserialize)]
struct Case {
    id: String,
    text: String,
    expected: Vec<String>,
    #[serde(default)]
    set: Option<String>,
    #[serde(default)]
    context: Option<String>,
}

/// Resolve the shared benchmark data folder: the flag, else `../shared/bench/data` from the
/// working directory, else the same path relative to the repository root.
pub(crate) fn data_dir(flag: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(d) = flag {
        return Ok(d);
    }
    let candidates = [
        PathBuf::from("../shared/bench/data"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/data"),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_dir())
        .context("benchmark data not found: pass --data DIR (expected ../shared/bench/data)")
}

fn load(dir: &Path, name: &str) -> anyhow::Result<Vec<Case>> {
    let path = dir.join("sbd").join(name);
    let raw =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&raw).with_context(|| format!("parsing {}", path.display()))
}

fn segments(text: &str, spans: &[Sentence]) -> Vec<String> {
    spans
        .iter()
        .map(|s| s.text(text).trim().to_string())
        .collect()
}

fn expected(case: &Case) -> Vec<String> {
    case.expected
        .iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

struct Score {
    prose: usize,
    markdown: usize,
    uax29: usize,
    total: usize,
    failures: Vec<String>,
}

fn score(cases: &[&Case]) -> Score {
    let mut s = Score {
        prose: 0,
        markdown: 0,
        uax29: 0,
        total: cases.len(),
        failures: Vec::new(),
    };
    for c in cases {
        let want = expected(c);
        let got = segments(&c.text, &split_prose(&c.text));
        if got == want {
            s.prose += 1;
        } else {
            s.failures.push(format!(
                "{}: {:?}\n    want {want:?}\n    got  {got:?}",
                c.id, c.text
            ));
        }
        if segments(&c.text, &split_sentences(&c.text)) == want {
            s.markdown += 1;
        }
        if segments(&c.text, &split_uax29(&c.text)) == want {
            s.uax29 += 1;
        }
    }
    s
}

fn all(v: &[Case]) -> Vec<&Case> {
    v.iter().collect()
}

fn pct(n: usize, d: usize) -> f64 {
    if d == 0 {
        0.0
    } else {
        100.0 * n as f64 / d as f64
    }
}

/// Every golden set of `<data>/sbd`.
struct GoldenSets {
    golden_en: Vec<Case>,
    golden_es: Vec<Case>,
    ps_en: Vec<Case>,
    ps_es: Vec<Case>,
    sx_en: Vec<Case>,
    sx_es: Vec<Case>,
    reg_en: Vec<Case>,
}

/// One table row: (set label, its cases, the anchor, whose anchor).
type TableRow<'a> = (&'a str, Vec<&'a Case>, String, &'a str);

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = data_dir(args.data)?;
    let anchors = read_anchors(&dir)?;
    let sets = load_golden_sets(&dir)?;
    let rows = table_rows(&sets, &anchors);
    let failures = print_score_table(&dir, rows);
    if args.verbose {
        print_prose_failures(failures);
    }
    Ok(())
}

/// `<data>/anchors.json`.
fn read_anchors(dir: &Path) -> anyhow::Result<serde_json::Value> {
    let p = dir.join("anchors.json");
    let raw = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&raw).with_context(|| format!("parsing {}", p.display()))
}

/// The anchor at `path` in `anchors` as a percentage, `?` when absent.
fn anchor_pct(anchors: &serde_json::Value, path: &[&str]) -> String {
    let mut v = anchors;
    for k in path {
        v = &v[*k];
    }
    v.as_f64().map_or("?".into(), |x| format!("{x:.2}%"))
}

/// Load every golden set of `<data>/sbd`.
fn load_golden_sets(dir: &Path) -> anyhow::Result<GoldenSets> {
    Ok(GoldenSets {
        golden_en: load(dir, "golden_en.json")?,
        golden_es: load(dir, "golden_es.json")?,
        ps_en: load(dir, "pragmatic_segmenter_en.json")?,
        ps_es: load(dir, "pragmatic_segmenter_es.json")?,
        sx_en: load(dir, "sentencex_en.json")?,
        sx_es: load(dir, "sentencex_es.json")?,
        reg_en: load(dir, "pysbd_regressions_en.json")?,
    })
}

/// `golden_es` without the cases that need cleaning (`ES_CLEAN_TEST_CASES`, `ES_PDF_CASE`).
fn spanish_golden_without_cleaning(golden_es: &[Case]) -> Vec<&Case> {
    golden_es
        .iter()
        .filter(|c| {
            !matches!(
                c.set.as_deref(),
                Some("ES_CLEAN_TEST_CASES") | Some("ES_PDF_CASE")
            )
        })
        .collect()
}

/// The Pragmatic Segmenter cases of its "Golden Rules" section.
fn pragmatic_segmenter_golden_rules(ps_en: &[Case]) -> Vec<&Case> {
    ps_en
        .iter()
        .filter(|c| c.context.as_deref() == Some("Golden Rules"))
        .collect()
}

/// The Golden Rules without the three that need newline/PDF cleaning.
fn golden_rules_without_cleaning<'a>(ps_golden: &[&'a Case]) -> Vec<&'a Case> {
    // #40-#42 need newline/PDF cleaning (see sbd/README.md).
    ps_golden
        .iter()
        .copied()
        .filter(|c| !matches!(c.id.as_str(), "en-ps-040" | "en-ps-041" | "en-ps-042"))
        .collect()
}

/// The rows of the table, in order, with their anchors.
fn table_rows<'a>(sets: &'a GoldenSets, anchors: &serde_json::Value) -> Vec<TableRow<'a>> {
    let a = |path: &[&str]| anchor_pct(anchors, path);
    let es_no_clean = spanish_golden_without_cleaning(&sets.golden_es);
    let ps_golden = pragmatic_segmenter_golden_rules(&sets.ps_en);
    let ps_golden_49 = golden_rules_without_cleaning(&ps_golden);
    vec![
        (
            "golden_en (pySBD GRS)",
            all(&sets.golden_en),
            a(&["sbd_english_grs_exact_match_pct", "GRS", "pySBD"]),
            "pySBD (paper)",
        ),
        (
            "golden_es, no cleaning",
            es_no_clean,
            "100.00%".into(),
            "pySBD 0.3.4 (36/36, README)",
        ),
        (
            "PS en Golden Rules, no cleaning",
            ps_golden_49,
            a(&[
                "sbd_pragmatic_segmenter_readme_pct",
                "GRS_English",
                "Pragmatic Segmenter",
            ]),
            "Pragmatic Segmenter (52 rules)",
        ),
        (
            "PS en Golden Rules, all 52",
            ps_golden,
            a(&[
                "sbd_pragmatic_segmenter_readme_pct",
                "GRS_English",
                "Pragmatic Segmenter",
            ]),
            "Pragmatic Segmenter",
        ),
        (
            "PS en, all 181",
            all(&sets.ps_en),
            "97.24%".into(),
            "pySBD 0.3.4 (176/181, README)",
        ),
        (
            "PS es, all 36",
            all(&sets.ps_es),
            "94.44%".into(),
            "pySBD 0.3.4 (34/36, README)",
        ),
        (
            "sentencex_en (reference)",
            all(&sets.sx_en),
            "58.12%".into(),
            "pySBD 0.3.4 (136/234, README)",
        ),
        ("sentencex_es", all(&sets.sx_es), "-".into(), ""),
        ("pysbd_regressions_en", all(&sets.reg_en), "-".into(), ""),
    ]
}

/// Score and print every row; returns each row's prose-mode failures.
fn print_score_table<'a>(dir: &Path, rows: Vec<TableRow<'a>>) -> Vec<(&'a str, Vec<String>)> {
    println!("Sentence-boundary exact match (stripped segments, exact list equality)");
    println!("data: {}", dir.display());
    println!();
    println!(
        "| set | cases | bib prose | bib markdown | UAX #29 (unicode-segmentation) | anchor |"
    );
    println!("|---|---:|---:|---:|---:|---|");
    let mut failures = Vec::new();
    for (name, cases, anchor, who) in rows {
        let s = score(&cases);
        println!(
            "| {name} | {} | {}/{} ({:.2}%) | {}/{} ({:.2}%) | {}/{} ({:.2}%) | {anchor} {who} |",
            s.total,
            s.prose,
            s.total,
            pct(s.prose, s.total),
            s.markdown,
            s.total,
            pct(s.markdown, s.total),
            s.uax29,
            s.total,
            pct(s.uax29, s.total),
        );
        failures.push((name, s.failures));
    }
    failures
}

/// Every failing case of our prose mode, per set (`--verbose`).
fn print_prose_failures(failures: Vec<(&str, Vec<String>)>) {
    for (name, f) in failures {
        if f.is_empty() {
            continue;
        }
        println!("\n## failures in {name} (bib prose)");
        for line in f {
            println!("  {line}");
        }
    }
}
