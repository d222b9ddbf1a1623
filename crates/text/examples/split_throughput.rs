//! Splitter throughput on a folder of Markdown, next to UAX #29 (`unicode-segmentation`).
//! Same measurement as `bib bench split`, without building the whole CLI:
//! `cargo run --release -p bib-text --example split_throughput -- ../shared/bench/data/wiki/nuget-es ../shared/bench/data/wiki/nuget-en`

use std::path::{Path, PathBuf};
use std::time::Instant;

use bib_text::sentences::{split_prose, split_sentences, split_uax29, Sentence};

/// A splitter under test.
type Splitter = fn(&str) -> Vec<Sentence>;

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut v: Vec<_> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
    v.sort();
    for p in v {
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "md")
            && p.file_name().is_some_and(|n| n != "SOURCE.md")
        {
            out.push(p);
        }
    }
}

fn time(texts: &[String], passes: usize, f: Splitter) -> (f64, usize) {
    let mut best = f64::INFINITY;
    let mut count = 0;
    for _ in 0..passes {
        let t = Instant::now();
        let n: usize = texts.iter().map(|s| std::hint::black_box(f(s)).len()).sum();
        best = best.min(t.elapsed().as_secs_f64());
        count = n;
    }
    (best, count)
}

fn main() {
    let mut files = Vec::new();
    for d in std::env::args().skip(1) {
        collect(Path::new(&d), &mut files);
    }
    let texts: Vec<String> = files
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    let mb = texts.iter().map(String::len).sum::<usize>() as f64 / 1e6;
    println!("{} files, {mb:.2} MB, best of 5 passes", texts.len());
    println!("| splitter | sentences | seconds | MB/s | vs UAX #29 |");
    println!("|---|---:|---:|---:|---:|");
    let (bt, bn) = time(&texts, 5, split_uax29);
    let rows: [(&str, Splitter); 2] = [
        ("bib split_sentences (Markdown mode)", split_sentences),
        ("bib split_prose (prose mode)", split_prose),
    ];
    for (name, f) in rows {
        let (t, n) = time(&texts, 5, f);
        println!("| {name} | {n} | {t:.4} | {:.1} | {:.2}x |", mb / t, bt / t);
    }
    println!(
        "| unicode-segmentation UAX #29 alone | {bn} | {bt:.4} | {:.1} | 1.00x |",
        mb / bt
    );
}
