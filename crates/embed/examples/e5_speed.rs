//! e5-small speed in one process: passage throughput on 20- and 200-word texts and the latency
//! of a single query (p50 / p90 over many runs), for profiling and for the query-latency row of
//! BENCHMARKS.md:
//! `cargo run --release -p bib-embed --example e5_speed [texts] [query runs] [products] [words]`.
//!
//! `products` is `default`, `portable` (the portable integer kernel and element-wise code
//! forced) or `f32`; `words` keeps one length (`20` or `200`, for profiling one of them).

use std::time::Instant;

mod common;

use bib_embed::e5::{E5Small, Products};
use bib_embed::qgemm::Kernel;
use bib_embed::{EmbedKind, Embedder};
use common::texts;

/// CPU seconds this process has used (user + system, from `/proc/self/stat`; 0 elsewhere):
/// on a machine shared with other jobs, CPU time per text moves less than wall time.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// The value at index `round((n − 1) · p / 100)` of the sorted values (as `bib_eval::stats`).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[i]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let runs: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let products = match args.next().as_deref() {
        Some("portable") => Products::Int8(Kernel::Portable),
        Some("f32") => Products::F32,
        _ => Products::default(),
    };
    let only: Option<usize> = args.next().map(|a| a.parse()).transpose()?;
    let model = E5Small::load_default_with(products)?;
    println!(
        "products {products:?}, {} threads",
        rayon::current_num_threads()
    );
    if n > 0 {
        for (words, count) in [(20, n), (200, n.div_ceil(10).max(2))] {
            if only.is_some_and(|w| w != words) {
                continue;
            }
            let set = texts(words, count);
            let refs: Vec<&str> = set.iter().map(String::as_str).collect();
            model.embed(&refs[..2], EmbedKind::Passage)?;
            let (t, cpu) = (Instant::now(), cpu_seconds());
            model.embed(&refs, EmbedKind::Passage)?;
            let rate = count as f64 / t.elapsed().as_secs_f64();
            let per_text = (cpu_seconds() - cpu) / count as f64 * 1e3;
            println!("{words:>3} words ×{count:<4} {rate:8.1} texts/s  {per_text:7.2} CPU ms/text");
        }
    }
    if runs > 0 {
        let query = "how do I restore packages from a private feed";
        let tokens = model.content_ids(query, EmbedKind::Query).len() + 2;
        model.embed(&[query], EmbedKind::Query)?;
        let mut ms: Vec<f64> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                model.embed(&[query], EmbedKind::Query).expect("embeds");
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        println!(
            "query ({tokens} tokens) ×{runs}: p50 {:.3} ms  p90 {:.3} ms  min {:.3} ms",
            percentile(&ms, 50.0),
            percentile(&ms, 90.0),
            ms[0]
        );
    }
    Ok(())
}
