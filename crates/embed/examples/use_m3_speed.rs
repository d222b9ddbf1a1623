//! use-m3 speed in one process: throughput on 20- and 200-word texts, and the latency of a
//! single ~10-word query (p50 / p90 over many runs), for profiling and for BENCHMARKS.md:
//! `cargo run --release -p bib-embed --example use_m3_speed [texts] [query runs] [products] [words]`.
//!
//! `products` is `default`, `portable` (the portable integer kernel and element-wise code
//! forced) or `f32`; `words` keeps one length (`20` or `200`, for profiling one of them).
//! Each row also gives the minimum cosine to the f32 products on the same texts.

mod common;

use bib_embed::use_m3::Products;
use bib_embed::{cosine, EmbedKind, Embedder, UseM3};
use common::{print_query_latency, timed_passages, SpeedArgs, QUERY};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = SpeedArgs::parse(1000, 300)?;
    let (runs, products) = (args.runs, args.products);
    let model = UseM3::load_default_with(products)?;
    let reference = (products != Products::F32)
        .then(|| UseM3::load_default_with(Products::F32))
        .transpose()?;
    args.print_header();
    for (words, set) in args.sets() {
        let count = set.len();
        let refs: Vec<&str> = set.iter().map(String::as_str).collect();
        let (got, rate, per_text) = timed_passages(&model, &refs)?;
        let min_cos = match &reference {
            Some(r) => {
                let want = r.embed(&refs, EmbedKind::Passage)?;
                got.iter()
                    .zip(&want)
                    .map(|(a, b)| cosine(a, b))
                    .fold(1.0f32, f32::min)
            }
            None => 1.0,
        };
        println!(
            "{words:>3} words ×{count:<4} {rate:8.1} texts/s  {per_text:7.3} CPU ms/text  \
             min cos vs f32 {min_cos:.6}"
        );
    }
    if runs > 0 {
        let tokens = model.input_ids(QUERY).0.len();
        print_query_latency(&model, tokens, runs);
    }
    Ok(())
}
