//! Throughput of the integer matrix product alone, in multiply-adds per second, on the shapes of
//! an e5-small layer (4-bit weights; 8-bit weights, as use-m3's, with a third argument `q8`):
//! `cargo run --release -p bib-embed --example qgemm_speed [rows] [portable|avx2|detected] [q8|q4] [cold]`.
//!
//! Each shape is timed on one matrix, over and over, so its weights stay in cache; with `cold`
//! the four shapes are instead repeated for 12 layers of distinct matrices (e5-small's 21 MB of
//! weights), one pass after another as a forward pass runs them: with a query's few rows the
//! weights then come from memory, which is what a query waits on.

use std::time::Instant;

use bib_embed::qgemm::{self, Kernel, Q8Rows, QMatrix};

/// e5-small's product shapes (outputs, inputs): attention in, attention out, FFN in, FFN out.
const SHAPES: [(usize, usize); 4] = [(1152, 384), (384, 384), (1536, 384), (384, 1536)];
/// Layers of distinct matrices in the `cold` pass.
const LAYERS: usize = 12;

fn main() {
    let rows: usize = std::env::args()
        .nth(1)
        .map_or(2048, |a| a.parse().expect("rows"));
    let kernel = match std::env::args().nth(2).as_deref() {
        Some("portable") => Kernel::Portable,
        Some("avx2") => Kernel::Avx2,
        _ => Kernel::detect(),
    };
    let eight_bit = std::env::args().nth(3).as_deref() == Some("q8");
    let cold = std::env::args().nth(4).as_deref() == Some("cold");
    let mut seed = 1u64;
    let mut next = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (seed >> 33) as u32
    };
    let matrix = |next: &mut dyn FnMut() -> u32, out: usize, inp: usize| {
        let nib: Vec<u8> = (0..out * inp).map(|_| (next() % 16) as u8).collect();
        if eight_bit {
            QMatrix::quantize(out, inp, |o, k| f32::from(nib[o * inp + k]) - 7.5)
        } else {
            QMatrix::pack(out, inp, |o, k| nib[o * inp + k], |_, _| 0.01)
        }
    };
    let activations = |next: &mut dyn FnMut() -> u32, inp: usize| {
        let x: Vec<f32> = (0..rows * inp)
            .map(|_| next() as f32 / u32::MAX as f32 - 0.5)
            .collect();
        Q8Rows::quantize(&x, inp)
    };
    let mut y = vec![0.0f32; rows * 1536];
    if cold {
        let layers: Vec<QMatrix> = (0..LAYERS)
            .flat_map(|_| SHAPES.map(|(out, inp)| (out, inp)))
            .map(|(out, inp)| matrix(&mut next, out, inp))
            .collect();
        let xs = SHAPES.map(|(_, inp)| activations(&mut next, inp));
        let bias = vec![0.0f32; 1536];
        let macs: usize = SHAPES.iter().map(|(o, i)| o * i * rows).sum::<usize>() * LAYERS;
        let pass = |y: &mut [f32]| {
            for (m, w) in layers.iter().enumerate() {
                let (out, _) = SHAPES[m % SHAPES.len()];
                let x = &xs[m % SHAPES.len()];
                qgemm::matmul(kernel, x, w, &bias[..out], &mut y[..rows * out]);
            }
        };
        pass(&mut y);
        let reps = (4_000_000_000 / macs).max(3);
        let t = Instant::now();
        for _ in 0..reps {
            pass(&mut y);
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "{rows:>5} rows × {LAYERS} layers of distinct matrices: {:6.1} GMAC/s ({:.3} ms per pass)",
            (reps * macs) as f64 / s / 1e9,
            s / reps as f64 * 1e3
        );
        return;
    }
    for (out, inp) in SHAPES {
        let w = matrix(&mut next, out, inp);
        let q = activations(&mut next, inp);
        let bias = vec![0.0f32; out];
        let y = &mut y[..rows * out];
        qgemm::matmul(kernel, &q, &w, &bias, y);
        let reps = (2_000_000_000 / (rows * out * inp)).max(1);
        let t = Instant::now();
        for _ in 0..reps {
            qgemm::matmul(kernel, &q, &w, &bias, y);
        }
        let s = t.elapsed().as_secs_f64();
        let gmacs = (reps * rows * out * inp) as f64 / s / 1e9;
        println!(
            "{rows:>5} × {out:>4} × {inp:>4}: {gmacs:6.1} GMAC/s ({:.3} ms)",
            s / reps as f64 * 1e3
        );
    }
}
