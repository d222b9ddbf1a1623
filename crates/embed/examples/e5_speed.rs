//! e5-small speed in one process: passage throughput on 20- and 200-word texts and the latency
//! of a single query (p50 / p90 over many runs), for profiling and for the query-latency row of
//! BENCHMARKS.md:
//! `cargo run --release -p bib-embed --example e5_speed [texts] [query runs] [products] [words]`.
//!
//! `products` is `default`, `portable` (the portable integer kernel and element-wise code
//! forced) or `f32`; `words` keeps one length (`20` or `200`, for profiling one of them).

mod common;

use bib_embed::e5::E5Small;
use bib_embed::EmbedKind;
use common::{print_query_latency, timed_passages, SpeedArgs, QUERY};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = SpeedArgs::parse(200, 200)?;
    let (runs, products) = (args.runs, args.products);
    let model = E5Small::load_default_with(products)?;
    args.print_header();
    for (words, set) in args.sets() {
        let count = set.len();
        let refs: Vec<&str> = set.iter().map(String::as_str).collect();
        let (_, rate, per_text) = timed_passages(&model, &refs)?;
        println!("{words:>3} words ×{count:<4} {rate:8.1} texts/s  {per_text:7.2} CPU ms/text");
    }
    if runs > 0 {
        let tokens = model.content_ids(QUERY, EmbedKind::Query).len() + 2;
        print_query_latency(&model, tokens, runs);
    }
    Ok(())
}
