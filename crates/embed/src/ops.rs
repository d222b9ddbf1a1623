//! Element-wise and attention kernels of the e5-small and use-m3 forward passes: residual add +
//! layer norm (+ 8-bit quantization of the result), GELU + quantization, ReLU + residual add
//! (+ quantization), and scaled dot-product attention of one head over contiguous buffers.
//!
//! Each is written once in plain Rust and compiled three times by [`multiversion!`]: for
//! AVX-512, for AVX2 + FMA, and for the baseline target; [`Isa::detect`] picks one at run time.
//! Rust never reorders or contracts float operations, and every reduction here runs over a
//! fixed array of [`LANES`] partial sums combined in a fixed order, so the three versions give
//! the same bits (tested); the baseline is what a forced portable run uses. Attention's
//! products are explicit fused multiply-adds (`mul_add`): one instruction instead of a
//! multiply and a dependent add where the CPU has FMA, and correctly rounded everywhere
//! (libm's `fmaf` in the baseline), so the bits still agree.
//!
//! The `unsafe` here is only the call of a `#[target_feature]` function after run-time
//! detection of those features.
#![allow(unsafe_code)]

use crate::qgemm::Q8Rows;

/// Partial sums of a reduction: one 512-bit register of f32, two of 256 bits.
pub const LANES: usize = 16;

/// Which compiled version of the kernels runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512 F/BW/VL (+ AVX2, FMA).
    Avx512,
    /// AVX2 + FMA.
    Avx2,
    /// The baseline target (SSE2 on x86-64), and every other architecture.
    Base,
}

impl Isa {
    /// The widest version this CPU runs.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx2") {
                return Isa::Avx512;
            }
            if has!("avx2") && has!("fma") {
                return Isa::Avx2;
            }
        }
        Isa::Base
    }

    /// The element-wise code that goes with `products`: the baseline when the portable integer
    /// kernel is forced (so the whole pass is the fallback's), else the widest this CPU runs.
    pub fn for_products(products: crate::qgemm::Products) -> Self {
        match products {
            crate::qgemm::Products::Int8(crate::qgemm::Kernel::Portable) => Isa::Base,
            _ => Isa::detect(),
        }
    }

    /// `self` if this CPU runs it, else the baseline.
    fn checked(self) -> Self {
        match (self, Isa::detect()) {
            (Isa::Avx512, Isa::Avx512) => Isa::Avx512,
            (Isa::Avx2, Isa::Avx512 | Isa::Avx2) => Isa::Avx2,
            _ => Isa::Base,
        }
    }
}

/// Define `pub fn name(isa: Isa, args…)` that runs `body` compiled for `isa`.
macro_rules! multiversion {
    ($(#[$m:meta])* pub fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        pub fn $name(isa: Isa, $($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
            fn avx512($($arg: $ty),*) {
                body($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            fn avx2($($arg: $ty),*) {
                body($($arg),*)
            }
            match isa.checked() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `checked` returned this version only because the CPU has its
                // features (run-time detection).
                Isa::Avx512 => unsafe { avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                Isa::Avx2 => unsafe { avx2($($arg),*) },
                _ => body($($arg),*),
            }
        }
    };
}

/// `Σ v` over [`LANES`] partial sums, combined pairwise in a fixed order.
#[inline(always)]
fn sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = v.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    for (a, x) in acc.iter_mut().zip(chunks.remainder()) {
        *a += x;
    }
    combine(acc)
}

/// The partial sums added as a tree (the same order in every version).
#[inline(always)]
fn combine(mut acc: [f32; LANES]) -> f32 {
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            acc[i] += acc[i + n];
        }
    }
    acc[0]
}

/// `row = LayerNorm(row)` with gain `w` and bias `b`.
#[inline(always)]
fn norm_row(row: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = sum(row) / n;
    let mut acc = [0f32; LANES];
    for c in row.chunks(LANES) {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += (v - mean) * (v - mean);
        }
    }
    let var = combine(acc) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, g), bb) in row.iter_mut().zip(w).zip(b) {
        *v = (*v - mean) * inv * g + bb;
    }
}

multiversion! {
    /// For each row of `x` (`cols` wide): add the same row of `add` (if any), apply the
    /// layer norm, and quantize the result into row `i` of `q` (if any).
    #[allow(clippy::too_many_arguments)]
    pub fn add_norm(
        x: &mut [f32],
        add: Option<&[f32]>,
        cols: usize,
        w: &[f32],
        b: &[f32],
        eps: f32,
        q: Option<&mut Q8Rows>,
    ) {
        let mut q = q;
        for (i, row) in x.chunks_exact_mut(cols).enumerate() {
            if let Some(add) = add {
                for (v, a) in row.iter_mut().zip(&add[i * cols..(i + 1) * cols]) {
                    *v += a;
                }
            }
            norm_row(row, w, b, eps);
            if let Some(q) = q.as_deref_mut() {
                q.quantize_row(i, row);
            }
        }
    }
}

multiversion! {
    /// `y = GELU(y)` element-wise, each row (`cols` wide) quantized into `q` (if any) as it
    /// is done.
    pub fn gelu_quantize(y: &mut [f32], cols: usize, q: Option<&mut Q8Rows>) {
        let mut q = q;
        for (i, row) in y.chunks_exact_mut(cols).enumerate() {
            for v in row.iter_mut() {
                *v = gelu(*v);
            }
            if let Some(q) = q.as_deref_mut() {
                q.quantize_row(i, row);
            }
        }
    }
}

multiversion! {
    /// Quantize the first `cols` values of each row of `x` (rows `ld` apart) into the rows of
    /// `q` (as many as `q` has).
    pub fn quantize(x: &[f32], ld: usize, cols: usize, q: &mut Q8Rows) {
        for i in 0..q.rows() {
            q.quantize_row(i, &x[i * ld..i * ld + cols]);
        }
    }
}

multiversion! {
    /// For each row `i` of `y` (`cols` wide): `out` row `i` (`ld_out` apart) =
    /// `ReLU(y row i) + res row i` (`ld_res` apart), quantized into row `i` of `q` (if any):
    /// the tail of one of use-m3's residual convolution steps.
    #[allow(clippy::too_many_arguments)]
    pub fn relu_add(
        y: &[f32],
        cols: usize,
        res: &[f32],
        ld_res: usize,
        out: &mut [f32],
        ld_out: usize,
        q: Option<&mut Q8Rows>,
    ) {
        let mut q = q;
        for (i, row) in y.chunks_exact(cols).enumerate() {
            let r = &res[i * ld_res..i * ld_res + cols];
            let o = &mut out[i * ld_out..i * ld_out + cols];
            for ((o, v), r) in o.iter_mut().zip(row).zip(r) {
                *o = v.max(0.0) + r;
            }
            if let Some(q) = q.as_deref_mut() {
                q.quantize_row(i, o);
            }
        }
    }
}

/// Error function in f32: a rational approximation `x·P(x²)/Q(x²)` on `[−4, 4]` (erf is ±1 to
/// f32 precision beyond), the form XLA and Eigen use for float erf; absolute error about 1e-7.
/// Branch-free, so it vectorizes.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = x2 * p + -2.101_024e-6;
    p = x2 * p + -5.692_506_4e-5;
    p = x2 * p + -7.349_906_3e-4;
    p = x2 * p + -2.954_600_1e-3;
    p = x2 * p + -1.609_603_3e-2;
    let mut q = x2 * -1.456_607_2e-5 + -2.133_740_6e-4;
    q = x2 * q + -1.682_827e-3;
    q = x2 * q + -7.373_329_2e-3;
    q = x2 * q + -1.426_474e-2;
    x * p / q
}

/// Exact-erf GELU.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `eˣ` for `x ≤ 0` (softmax after the maximum is taken out), branch-free so it vectorizes:
/// `x = n·ln 2 + r` with `n` rounded to nearest by the 1.5·2²³ trick, a degree-6 Taylor
/// polynomial in `r` (`|r| ≤ ln 2 / 2`, relative error below 3e-7), and `2ⁿ` built in the
/// exponent bits. Inputs below −87 give about 1e-38 instead of underflowing.
#[inline(always)]
pub fn exp_neg(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2²³
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    // ln 2 split in two so `n·ln 2` is exact in the first part.
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let mut p = r * (1.0 / 720.0) + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // `n + 127` read out of the mantissa of `n + 127 + 2²³` (no float-to-int cast).
    let biased = (n + (127.0 + 8_388_608.0)).to_bits() - 8_388_608f32.to_bits();
    p * f32::from_bits(biased << 23)
}

/// The shape of one attention call: a segment of `len` tokens of `qkv` rows (`ld` wide:
/// queries, keys at `hidden`, values at `2·hidden`), one head of `dim` columns at `col`;
/// `dim` must be a multiple of [`LANES`].
#[derive(Debug, Clone, Copy)]
pub struct Head {
    pub len: usize,
    pub ld: usize,
    pub col: usize,
    pub hidden: usize,
    pub dim: usize,
    pub scale: f32,
}

/// Scratch buffers of [`attention`], reused across calls.
#[derive(Debug, Default)]
pub struct AttentionScratch {
    kt: Vec<f32>,
    p: Vec<f32>,
}

/// Queries handled together (each key and value row loaded once for all of them).
const QBLOCK: usize = 4;

multiversion! {
    /// One head of softmax(Q·Kᵀ·scale)·V over the segment `qkv` (`h.len` rows of `h.ld`),
    /// into `out` (`h.len × h.dim`, row-major).
    pub fn attention(qkv: &[f32], h: Head, s: &mut AttentionScratch, out: &mut [f32]) {
        let (len, dim) = (h.len, h.dim);
        assert!(dim.is_multiple_of(LANES), "attention: head width {dim}");
        // Keys transposed (`dim × padded`, zero past `len`); queries and values are read in
        // place.
        let padded = len.div_ceil(LANES) * LANES;
        let AttentionScratch { kt, p } = s;
        kt.clear();
        kt.resize(dim * padded, 0.0);
        p.resize(QBLOCK * padded, 0.0);
        transpose_keys(qkv, h, padded, kt);
        let v = &qkv[2 * h.hidden + h.col..];
        let mut i = 0;
        while i < len {
            let n = (len - i).min(QBLOCK);
            // Rows past the segment repeat its last query; their scores are never used.
            let q: [&[f32]; QBLOCK] = std::array::from_fn(|r| {
                let at = (i + r.min(n - 1)) * h.ld + h.col;
                &qkv[at..at + dim]
            });
            for c in (0..padded).step_by(LANES) {
                scores::<LANES>(&q, kt, padded, c, p);
            }
            let mut inv = [0f32; QBLOCK];
            for (r, inv) in inv.iter_mut().enumerate().take(n) {
                *inv = 1.0 / softmax_row(&mut p[r * padded..r * padded + len], h.scale);
            }
            let rows = &mut out[i * dim..(i + n) * dim];
            for c in (0..dim).step_by(LANES) {
                weighted_values::<LANES>(p, padded, v, h.ld, len, &inv, c, dim, rows);
            }
            i += n;
        }
    }
}

/// `kt[d][j] = k_j[d]` for the segment's keys, [`LANES`] keys at a time (their rows stay in
/// L1 while each `kt` row gets a contiguous run).
#[inline(always)]
fn transpose_keys(qkv: &[f32], h: Head, padded: usize, kt: &mut [f32]) {
    let key = |j: usize| &qkv[j * h.ld + h.hidden + h.col..j * h.ld + h.hidden + h.col + h.dim];
    for j0 in (0..h.len).step_by(LANES) {
        let n = (h.len - j0).min(LANES);
        for jj in 0..n {
            let k = key(j0 + jj);
            for (d, &x) in k.iter().enumerate() {
                kt[d * padded + j0 + jj] = x;
            }
        }
    }
}

/// `p[r][c..c + W] = q_r · k_j` for the block's queries and keys `c..c + W` of `kt`
/// (`dim × padded`), with the `QBLOCK × W` sums in registers.
#[inline(always)]
fn scores<const W: usize>(
    q: &[&[f32]; QBLOCK],
    kt: &[f32],
    padded: usize,
    c: usize,
    p: &mut [f32],
) {
    let dim = q[0].len();
    // Equal lengths up front, so the loop below indexes without checks.
    let q: [&[f32]; QBLOCK] = std::array::from_fn(|r| &q[r][..dim]);
    let mut acc = [[0f32; W]; QBLOCK];
    for (d, row) in kt.chunks_exact(padded).take(dim).enumerate() {
        let k: &[f32; W] = row[c..c + W].try_into().expect("a lane group");
        for r in 0..QBLOCK {
            let qr = q[r][d];
            for l in 0..W {
                acc[r][l] = qr.mul_add(k[l], acc[r][l]);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        p[r * padded + c..r * padded + c + W].copy_from_slice(a);
    }
}

/// `row = exp((row − max)·scale)` in place; returns the sum.
#[inline(always)]
fn softmax_row(row: &mut [f32], scale: f32) -> f32 {
    let mut mx = [f32::NEG_INFINITY; LANES];
    for c in row.chunks(LANES) {
        for (m, v) in mx.iter_mut().zip(c) {
            *m = m.max(*v);
        }
    }
    let mx = mx.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut acc = [0f32; LANES];
    for c in row.chunks_mut(LANES) {
        for (a, v) in acc.iter_mut().zip(c.iter_mut()) {
            *v = exp_neg((*v - mx) * scale);
            *a += *v;
        }
    }
    combine(acc)
}

/// `out[r][c..c + W] = inv[r] · Σ_j p[r][j] · v_j[c..c + W]` for the block's query rows
/// (`out.len() / dim` of them; value `j` at `v[j·ld..]`), with the `QBLOCK × W` sums in
/// registers.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn weighted_values<const W: usize>(
    p: &[f32],
    padded: usize,
    v: &[f32],
    ld: usize,
    len: usize,
    inv: &[f32; QBLOCK],
    c: usize,
    dim: usize,
    out: &mut [f32],
) {
    // The block's score rows cut to `len`, so the loop below indexes without checks.
    let rows: [&[f32]; QBLOCK] = std::array::from_fn(|r| &p[r * padded..r * padded + len]);
    let mut acc = [[0f32; W]; QBLOCK];
    for (j, vrow) in v.chunks(ld).take(len).enumerate() {
        let vj: &[f32; W] = vrow[c..c + W].try_into().expect("a lane group");
        for r in 0..QBLOCK {
            let pr = rows[r][j];
            for l in 0..W {
                acc[r][l] = pr.mul_add(vj[l], acc[r][l]);
            }
        }
    }
    for (r, a) in acc.iter().enumerate().take(out.len() / dim) {
        for (o, x) in out[r * dim + c..r * dim + c + W].iter_mut().zip(a) {
            *o = x * inv[r];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 8) as f32 / (1u32 << 24) as f32 * 6.0 - 3.0
            })
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn exp_is_accurate_on_the_softmax_range() {
        for i in 0..=17_000 {
            let x = -(i as f32) * 0.005;
            let (got, want) = (exp_neg(x), (x as f64).exp());
            assert!(
                ((got as f64 - want) / want).abs() < 1e-6,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert!(exp_neg(-1000.0) >= 0.0 && exp_neg(-1000.0) < 1e-37);
        assert_eq!(exp_neg(0.0), 1.0);
    }

    #[test]
    fn erf_and_gelu() {
        assert!(erf(0.0).abs() < 1e-6);
        assert!((erf(1.0) - 0.842_700_8).abs() < 1e-6);
        assert!((erf(-2.0) + 0.995_322_3).abs() < 1e-6);
        assert!((gelu(1.0) - 0.841_344_7).abs() < 1e-6);
    }

    /// Every compiled version gives the same bits (the baseline is the forced fallback).
    #[test]
    fn all_versions_give_the_same_bits() {
        let (rows, cols) = (7, 96);
        let w = data(cols, 1);
        let b = data(cols, 2);
        let add = data(rows * cols, 3);
        let (hidden, dim) = (64, 32);
        for len in [1, 5, 37] {
            let qkv = data(len * 3 * hidden, len as u32);
            let mut results = Vec::new();
            for isa in [Isa::Base, Isa::Avx2, Isa::Avx512] {
                let mut x = data(rows * cols, 4);
                let mut q = Q8Rows::default();
                q.reset(rows, cols);
                add_norm(isa, &mut x, Some(&add), cols, &w, &b, 1e-12, Some(&mut q));
                let mut g = data(rows * cols, 5);
                let mut qg = Q8Rows::default();
                qg.reset(rows, cols);
                gelu_quantize(isa, &mut g, cols, Some(&mut qg));
                let mut r = vec![0f32; rows * (cols + 32)];
                let mut qr = Q8Rows::default();
                qr.reset(rows, cols);
                relu_add(isa, &add, cols, &g, cols, &mut r, cols + 32, Some(&mut qr));
                let mut qs = Q8Rows::default();
                qs.reset(rows, 64);
                quantize(isa, &r[32..], cols + 32, 64, &mut qs);
                let head = first_head(len, hidden, dim);
                let mut out = vec![0f32; len * dim];
                attention(isa, &qkv, head, &mut AttentionScratch::default(), &mut out);
                results.push((
                    bits(&x),
                    bits(&g),
                    bits(&out),
                    bits(&r),
                    format!("{q:?}{qg:?}{qr:?}{qs:?}"),
                ));
            }
            assert!(results.windows(2).all(|w| w[0] == w[1]), "len {len}");
        }
    }

    /// The first head of a stacked `[Q | K | V]` buffer of `len` rows, scale 0.17.
    fn first_head(len: usize, hidden: usize, dim: usize) -> Head {
        Head {
            len,
            ld: 3 * hidden,
            col: dim,
            hidden,
            dim,
            scale: 0.17,
        }
    }

    /// Attention against a direct f64 computation.
    #[test]
    fn attention_matches_the_definition() {
        let (hidden, dim, len) = (64, 32, 9);
        let qkv = data(len * 3 * hidden, 7);
        let head = first_head(len, hidden, dim);
        let mut out = vec![0f32; len * dim];
        attention(
            Isa::detect(),
            &qkv,
            head,
            &mut AttentionScratch::default(),
            &mut out,
        );
        let at = |r: usize, c: usize| qkv[r * 3 * hidden + c] as f64;
        for i in 0..len {
            let s: Vec<f64> = (0..len)
                .map(|j| {
                    (0..dim)
                        .map(|d| at(i, dim + d) * at(j, hidden + dim + d))
                        .sum::<f64>()
                        * 0.17
                })
                .collect();
            let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|v| (v - mx).exp()).collect();
            let z: f64 = e.iter().sum();
            for d in 0..dim {
                let want: f64 = (0..len)
                    .map(|j| e[j] / z * at(j, 2 * hidden + dim + d))
                    .sum();
                let got = out[i * dim + d] as f64;
                assert!((got - want).abs() < 1e-5, "({i}, {d}): {got} vs {want}");
            }
        }
    }
}
