//! Splitter throughput on any folders of Markdown, next to UAX #29 (`unicode-segmentation`).
//! The measurement of `bib bench split` on folders of your choice:
//! `cargo run --release -p bib-bench --example split_throughput -- ../shared/bench/data/wiki/nuget-es ../shared/bench/data/wiki/nuget-en`

use std::path::PathBuf;

use bib_bench::split::{megabytes, print_table, read_markdown};

fn main() {
    let dirs: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    let texts = match read_markdown(&dirs) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("split_throughput: {e:#}");
            std::process::exit(1);
        }
    };
    println!(
        "{} files, {:.2} MB, best of 5 passes",
        texts.len(),
        megabytes(&texts)
    );
    print_table(&texts, 5);
}
