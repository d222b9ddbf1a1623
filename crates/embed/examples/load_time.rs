//! Time a cold `UseM3::load` and one query embedding, as a fresh `bib ask` process pays them:
//! `cargo run --release -p bib-embed --example load_time [f32|portable]` (run it several times;
//! the first run after an install also realigns an old packed file). The argument picks the
//! products (default: the fastest on this CPU; `f32` skips quantizing the weights at load).
use bib_embed::qgemm::Kernel;
use bib_embed::use_m3::Products;
use bib_embed::{EmbedKind, Embedder, UseM3};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let products = match std::env::args().nth(1).as_deref() {
        Some("f32") => Products::F32,
        Some("portable") => Products::Int8(Kernel::Portable),
        _ => Products::default(),
    };
    let t0 = std::time::Instant::now();
    let m = UseM3::load_default_with(products)?;
    let t1 = std::time::Instant::now();
    let v = m.embed(&["¿cómo firmo un paquete?"], EmbedKind::Query)?;
    let t2 = std::time::Instant::now();
    println!(
        "{products:?}: load {:.2} ms, first query {:.2} ms ({} dims)",
        (t1 - t0).as_secs_f64() * 1e3,
        (t2 - t1).as_secs_f64() * 1e3,
        v[0].len()
    );
    Ok(())
}
