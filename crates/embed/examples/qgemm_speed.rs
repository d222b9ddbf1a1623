//! Throughput of the integer matrix product alone, in multiply-adds per second, on the shapes of
//! an e5-small layer (4-bit weights; 8-bit weights, as use-m3's, with a third argument `q8`):
//! `cargo run --release -p bib-embed --example qgemm_speed [rows] [portable|detected] [q8]`.

use std::time::Instant;

use bib_embed::qgemm::{self, Kernel, Q8Rows, QMatrix};

fn main() {
    let rows: usize = std::env::args()
        .nth(1)
        .map_or(2048, |a| a.parse().expect("rows"));
    let kernel = match std::env::args().nth(2).as_deref() {
        Some("portable") => Kernel::Portable,
        _ => Kernel::detect(),
    };
    let eight_bit = std::env::args().nth(3).as_deref() == Some("q8");
    let mut seed = 1u64;
    let mut next = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (seed >> 33) as u32
    };
    for (out, inp) in [(1152, 384), (384, 384), (1536, 384), (384, 1536)] {
        let nib: Vec<u8> = (0..out * inp).map(|_| (next() % 16) as u8).collect();
        let w = if eight_bit {
            QMatrix::quantize(out, inp, |o, k| f32::from(nib[o * inp + k]) - 7.5)
        } else {
            QMatrix::pack(out, inp, |o, k| nib[o * inp + k], |_, _| 0.01)
        };
        let x: Vec<f32> = (0..rows * inp)
            .map(|_| next() as f32 / u32::MAX as f32 - 0.5)
            .collect();
        let q = Q8Rows::quantize(&x, inp);
        let bias = vec![0.0f32; out];
        let mut y = vec![0.0f32; rows * out];
        qgemm::matmul(kernel, &q, &w, &bias, &mut y);
        let reps = (2_000_000_000 / (rows * out * inp)).max(1);
        let t = Instant::now();
        for _ in 0..reps {
            qgemm::matmul(kernel, &q, &w, &bias, &mut y);
        }
        let s = t.elapsed().as_secs_f64();
        let gmacs = (reps * rows * out * inp) as f64 / s / 1e9;
        println!(
            "{rows:>5} × {out:>4} × {inp:>4}: {gmacs:6.1} GMAC/s ({:.3} ms)",
            s / reps as f64 * 1e3
        );
    }
}
