//! e5-small throughput with f32 products and with 4-bit × 8-bit integer products, side by side
//! in one run (same texts, same threads), and how close the two vectors are:
//! `cargo run --release -p bib-embed --example e5_products [texts] [variant]`.

use std::time::Instant;

mod common;

use bib_embed::e5::{E5Small, Products};
use bib_embed::qgemm::Kernel;
use bib_embed::{cosine, EmbedKind, Embedder};
use common::texts;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(200), |a| a.parse())?;
    let variants = [
        ("f32 sgemm", Products::F32),
        ("int8 (detected)", Products::Int8(Kernel::detect())),
        ("int8 portable", Products::Int8(Kernel::Portable)),
    ];
    // A second argument keeps only the variants whose name contains it (e.g. `int8 (d`); the
    // first one kept is the base of the ratios.
    let only = std::env::args().nth(2).unwrap_or_default();
    let models: Vec<(&str, E5Small)> = variants
        .iter()
        .filter(|(name, _)| name.contains(only.as_str()))
        .map(|(name, p)| Ok((*name, E5Small::load_default_with(*p)?)))
        .collect::<Result<_, bib_embed::EmbedError>>()?;
    for words in [20, 200] {
        let set = texts(words, n);
        let refs: Vec<&str> = set.iter().map(String::as_str).collect();
        let mut base: Option<(f64, Vec<Vec<f32>>)> = None;
        for (name, m) in &models {
            m.embed(&refs[..4.min(refs.len())], EmbedKind::Passage)?;
            let t = Instant::now();
            let v = m.embed(&refs, EmbedKind::Passage)?;
            let s = t.elapsed().as_secs_f64();
            let rate = n as f64 / s;
            match &base {
                None => {
                    println!("{words:>3} words  {name:<16} {rate:8.1} texts/s");
                    base = Some((rate, v));
                }
                Some((r0, v0)) => {
                    let worst = v0
                        .iter()
                        .zip(&v)
                        .map(|(a, b)| cosine(a, b))
                        .fold(1.0f32, f32::min);
                    println!(
                        "{words:>3} words  {name:<16} {rate:8.1} texts/s  ×{:.2}  worst cosine to f32 {worst:.5}",
                        rate / r0
                    );
                }
            }
        }
    }
    Ok(())
}
