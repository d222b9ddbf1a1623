//! How long `QuantizedVectors::push` takes per 512-d vector.
use bib_text::vectors::quantized::{random_unit_vectors, QuantizedVectors};
fn main() {
    let vs = random_unit_vectors(20_000, 512, 7);
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let mut q = QuantizedVectors::new(512);
        for v in &vs {
            q.push(v);
        }
        let el = t.elapsed();
        println!(
            "{} vectors: {:?} ({:.2} µs each)",
            q.len(),
            el,
            el.as_secs_f64() * 1e6 / vs.len() as f64
        );
    }
}
