//! `bib bench split` — sentence-splitter throughput on the NuGet wikis (nuget-es + nuget-en).
//!
//! Reads every `.md` file (except SOURCE.md) into memory, then times, in one run and on the
//! same texts: our Markdown-mode splitter, our prose mode, and UAX #29 sentence segmentation
//! from `unicode-segmentation` used alone (same output type: trimmed spans). Best of N passes.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use bib_text::sentences::{split_prose, split_sentences, split_uax29, Sentence};

use super::sbd::data_dir;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benchmark data folder (holds wiki/) [default: ../shared/bench/data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Timed passes over the corpus per splitter (the best pass is reported).
    #[arg(long, default_value_t = 5)]
    passes: usize,
}

/// A splitter under test.
type Splitter = fn(&str) -> Vec<Sentence>;

fn collect_md(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            collect_md(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "md")
            && p.file_name().is_some_and(|n| n != "SOURCE.md")
        {
            out.push(p);
        }
    }
    Ok(())
}

fn time(texts: &[String], passes: usize, f: Splitter) -> (f64, usize) {
    let mut best = f64::INFINITY;
    let mut count = 0;
    for _ in 0..passes.max(1) {
        let t = Instant::now();
        let mut n = 0;
        for s in texts {
            n += std::hint::black_box(f(s)).len();
        }
        best = best.min(t.elapsed().as_secs_f64());
        count = n;
    }
    (best, count)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = data_dir(args.data)?;
    let texts = read_markdown(&[dir.join("wiki/nuget-es"), dir.join("wiki/nuget-en")])?;
    println!(
        "Splitter throughput: {} files, {:.2} MB (nuget-es + nuget-en), best of {} passes",
        texts.len(),
        megabytes(&texts),
        args.passes
    );
    println!();
    print_table(&texts, args.passes);
    Ok(())
}

/// Every `.md` file under `dirs` (except SOURCE.md), read into memory, in path order.
pub fn read_markdown(dirs: &[PathBuf]) -> anyhow::Result<Vec<String>> {
    let mut files = Vec::new();
    for d in dirs {
        collect_md(d, &mut files)?;
    }
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
        .collect()
}

/// The size of `texts` in MB (10^6 bytes).
pub fn megabytes(texts: &[String]) -> f64 {
    texts.iter().map(String::len).sum::<usize>() as f64 / 1_000_000.0
}

/// The throughput table: each splitter's best of `passes` over `texts`, next to UAX #29.
pub fn print_table(texts: &[String], passes: usize) {
    let mb = megabytes(texts);
    println!("| splitter | sentences | seconds | MB/s | vs UAX #29 |");
    println!("|---|---:|---:|---:|---:|");
    let (base_t, base_n) = time(texts, passes, split_uax29);
    let rows: [(&str, Splitter); 2] = [
        ("bib split_sentences (Markdown mode)", split_sentences),
        ("bib split_prose (prose mode)", split_prose),
    ];
    for (name, f) in rows {
        let (t, n) = time(texts, passes, f);
        println!(
            "| {name} | {n} | {t:.4} | {:.1} | {:.2}x |",
            mb / t,
            base_t / t
        );
    }
    println!(
        "| unicode-segmentation UAX #29 alone | {base_n} | {base_t:.4} | {:.1} | 1.00x |",
        mb / base_t
    );
}
