//! Time a cold `UseM3::load` and one query embedding, as a fresh `bib ask` process pays them:
//! `cargo run --release -p bib-embed --example load_time` (run it several times; the first
//! run after an install also realigns an old packed file).
use bib_embed::{EmbedKind, Embedder, UseM3};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let t0 = std::time::Instant::now();
    let m = UseM3::load_default()?;
    let t1 = std::time::Instant::now();
    let v = m.embed(&["¿cómo firmo un paquete?"], EmbedKind::Query)?;
    let t2 = std::time::Instant::now();
    println!(
        "load {:.2} ms, first query {:.2} ms ({} dims)",
        (t1 - t0).as_secs_f64() * 1e3,
        (t2 - t1).as_secs_f64() * 1e3,
        v[0].len()
    );
    Ok(())
}
