//! 8-bit vectors for the first pass of exact vector search.
//!
//! A store with a million 512-dimension chunks holds 2 GiB of `f32` vectors; scanning them per
//! query costs ~0.4 s. [`QuantizedVectors`] keeps one byte per dimension instead (a quarter of
//! the memory and of the bytes a scan reads): each unit vector `v` is stored as
//! `c_i = round(v_i / s) + 128` with `s = max |v_i| / 127`, and a query `q` is quantized the same
//! way to signed bytes `p_i = round(q_i / t)`. Then
//!
//! ```text
//! v · q ≈ s · t · Σ (c_i − 128) · p_i = s · t · (Σ c_i · p_i − 128 · Σ p_i)
//! ```
//!
//! where `Σ c_i · p_i` is what AVX-512 VNNI's `vpdpbusd` computes (unsigned × signed bytes,
//! 64 per instruction) and `128 · Σ p_i` is one number per query. The integer sums are exact,
//! so every kernel — VNNI, AVX2, plain Rust — returns the same bits; only the quantization
//! itself approximates. The store ranks by these scores, then rescores the best candidates
//! with their stored `f32` vectors (`bib_store`'s vector index), so what a caller sees are
//! exact cosines; the history packer compares a question with every unit of a session this
//! way (`bib_pack`).
//!
//! Pure: no I/O. Lengths are the caller's contract: a vector or a query of another length
//! than [`QuantizedVectors::dims`], or rows out of range, panic (documented per method). The `unsafe` here is the call of a `#[target_feature]` kernel after run-time
//! detection, and its loads, whose bounds are asserted before the call.
#![allow(unsafe_code)]

/// Bytes per row are padded to a multiple of this (one 512-bit register), with codes of 128
/// (a zero component), so the kernels need no tail loop.
const LANE: usize = 64;

/// Which kernel computes the integer dot products (all give the same results).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DotKernel {
    /// AVX-512 F/BW + VNNI: `vpdpbusd`.
    Vnni,
    /// AVX2: widen to 16 bits, `vpmaddwd`.
    Avx2,
    /// Plain Rust.
    Portable,
}

impl DotKernel {
    /// Whether this CPU runs `self` (the standard library caches the detection).
    pub fn runs_here(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            DotKernel::Vnni => {
                use std::arch::is_x86_feature_detected as has;
                has!("avx512f") && has!("avx512bw") && has!("avx512vnni")
            }
            #[cfg(target_arch = "x86_64")]
            DotKernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            DotKernel::Portable => true,
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest kernel this CPU runs.
    pub fn detect() -> Self {
        [DotKernel::Vnni, DotKernel::Avx2]
            .into_iter()
            .find(|k| k.runs_here())
            .unwrap_or(DotKernel::Portable)
    }

    /// Every kernel this CPU can run (for tests that compare them).
    pub fn available() -> Vec<Self> {
        [DotKernel::Vnni, DotKernel::Avx2, DotKernel::Portable]
            .into_iter()
            .filter(|k| k.runs_here())
            .collect()
    }
}

/// What 1.0 is in [`QuantizedVectors::add_row_fixed`]'s sums: 2^32, so a row's scale (at most
/// 1/127 for a unit vector) keeps ~25 bits, and 2^24 rows of codes up to 127 still fit an
/// `i64`.
pub const FIXED_ONE: f64 = 4_294_967_296.0;

/// A query quantized for [`QuantizedVectors::scores`].
#[derive(Debug, Clone)]
pub struct QuantizedQuery {
    /// Signed codes, padded with zeros to the rows' stride.
    codes: Vec<i8>,
    /// `128 · Σ codes`: what the unsigned offset of the stored codes adds to every dot.
    offset: i32,
    scale: f32,
}

/// Row vectors of one length, one byte per component (see the module documentation).
#[derive(Debug, Clone)]
pub struct QuantizedVectors {
    dims: usize,
    stride: usize,
    codes: Vec<u8>,
    scales: Vec<f32>,
}

impl QuantizedVectors {
    /// An empty set of `dims`-component vectors.
    pub fn new(dims: usize) -> Self {
        QuantizedVectors {
            dims,
            stride: dims.div_ceil(LANE).max(1) * LANE,
            codes: Vec::new(),
            scales: Vec::new(),
        }
    }

    /// Components per vector.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Vectors held.
    pub fn len(&self) -> usize {
        self.scales.len()
    }

    /// Whether no vector is held.
    pub fn is_empty(&self) -> bool {
        self.scales.is_empty()
    }

    /// Bytes held (codes and scales).
    pub fn heap_bytes(&self) -> usize {
        self.codes.capacity() + 4 * self.scales.capacity()
    }

    /// Reserve room for `more` vectors.
    pub fn reserve(&mut self, more: usize) {
        self.codes.reserve(more * self.stride);
        self.scales.reserve(more);
    }

    /// Append `v` (a zero or non-finite vector is stored as zero and scores 0 against
    /// everything).
    ///
    /// # Panics
    /// If `v.len()` is not [`Self::dims`].
    pub fn push(&mut self, v: &[f32]) {
        assert_eq!(v.len(), self.dims, "QuantizedVectors::push: wrong length");
        let (scale, inv) = scale_of(v);
        let start = self.codes.len();
        self.codes.resize(start + self.stride, 128);
        for (c, x) in self.codes[start..].iter_mut().zip(v) {
            *c = (quantize(*x, inv) as i16 + 128) as u8;
        }
        self.scales.push(scale);
    }

    /// Whether row `row` was stored as zero (a zero or non-finite vector).
    pub fn is_zero_row(&self, row: usize) -> bool {
        self.scales[row] == 0.0
    }

    /// Add (`sign` 1) or take away (`sign` −1) row `row`, as the vector its codes stand for,
    /// in fixed point with [`FIXED_ONE`] as 1: integer sums are exact, so adding rows and
    /// taking them away in any order leaves the same sum.
    ///
    /// # Panics
    /// If `row` is not below [`Self::len`] or `acc` is not [`Self::dims`] long.
    pub fn add_row_fixed(&self, row: usize, sign: i64, acc: &mut [i64]) {
        assert_eq!(acc.len(), self.dims, "add_row_fixed: wrong length");
        let unit = (f64::from(self.scales[row]) * FIXED_ONE).round() as i64 * sign;
        let codes = &self.codes[row * self.stride..row * self.stride + self.dims];
        for (a, &c) in acc.iter_mut().zip(codes) {
            *a += i64::from(c as i16 - 128) * unit;
        }
    }

    /// `query` quantized for [`Self::scores`].
    ///
    /// # Panics
    /// If `query.len()` is not [`Self::dims`].
    pub fn quantize_query(&self, query: &[f32]) -> QuantizedQuery {
        assert_eq!(query.len(), self.dims, "quantize_query: wrong length");
        let (scale, inv) = scale_of(query);
        let mut codes = vec![0i8; self.stride];
        for (c, x) in codes.iter_mut().zip(query) {
            *c = quantize(*x, inv);
        }
        let offset = 128 * codes.iter().map(|&c| i32::from(c)).sum::<i32>();
        QuantizedQuery {
            codes,
            offset,
            scale,
        }
    }

    /// The approximate dot product of `query` with each row in `rows`, into `out` (one per
    /// row, in order), computed by `kernel`.
    ///
    /// # Panics
    /// If `rows` ends past [`Self::len`], `out` is not as long as `rows`, or `query` was
    /// quantized for vectors of another length.
    pub fn scores(
        &self,
        query: &QuantizedQuery,
        rows: std::ops::Range<usize>,
        kernel: DotKernel,
        out: &mut [f32],
    ) {
        assert!(rows.end <= self.len() && out.len() == rows.len());
        assert_eq!(query.codes.len(), self.stride, "query of another length");
        let codes = &self.codes[rows.start * self.stride..rows.end * self.stride];
        let scales = &self.scales[rows.clone()];
        // A kernel this CPU lacks would be undefined behaviour: fall back to the best it has.
        let kernel = if kernel.runs_here() {
            kernel
        } else {
            DotKernel::detect()
        };
        for ((o, row), s) in out
            .iter_mut()
            .zip(codes.chunks_exact(self.stride))
            .zip(scales)
        {
            let dot = match kernel {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `checked` returned VNNI only where the CPU has it; the row and the
                // query both hold `stride` bytes, a multiple of 64 (asserted above).
                DotKernel::Vnni => unsafe { x86::dot_vnni(row, &query.codes) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above, for AVX2.
                DotKernel::Avx2 => unsafe { x86::dot_avx2(row, &query.codes) },
                _ => dot_portable(row, &query.codes),
            };
            *o = (dot - query.offset) as f32 * (s * query.scale);
        }
    }
}

/// The scale `max |v| / 127` and its inverse (both 0 for a zero or non-finite vector).
fn scale_of(v: &[f32]) -> (f32, f32) {
    // One pass in eight lanes (SIMD once compiled): the largest magnitude, and whether any
    // component is NaN or infinite (a NaN would slip past the comparison).
    let mut lanes = [0f32; 8];
    let mut finite = true;
    for c in v.chunks(8) {
        for (l, x) in lanes.iter_mut().zip(c) {
            let a = x.abs();
            *l = if a > *l { a } else { *l };
            finite &= x.is_finite();
        }
    }
    let max = lanes.iter().fold(0f32, |m, &x| if x > m { x } else { m });
    if max == 0.0 || !finite {
        return (0.0, 0.0);
    }
    (max / 127.0, 127.0 / max)
}

/// `x · inv` rounded half away from zero to a code in −127..=127. `f32::round` is a library
/// call per component on baseline x86-64 (no SSE4.1); adding ±0.5 and truncating (`as`) is
/// one instruction each, and differs from it only within one ulp of a half.
fn quantize(x: f32, inv: f32) -> i8 {
    let y = (x * inv).clamp(-127.0, 127.0);
    // in range after the clamp, so the i32 conversion (which vectorizes) loses nothing
    (y + 0.5f32.copysign(y)) as i32 as i8
}

/// `Σ c_i · p_i` in plain Rust.
fn dot_portable(row: &[u8], query: &[i8]) -> i32 {
    row.iter()
        .zip(query)
        .map(|(&c, &p)| i32::from(c) * i32::from(p))
        .sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `Σ c_i · p_i` with `vpdpbusd`.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VNNI; `row` and `query` have the same length, a
    /// multiple of 64.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn dot_vnni(row: &[u8], query: &[i8]) -> i32 {
        debug_assert!(row.len() == query.len() && row.len().is_multiple_of(64));
        let mut acc = _mm512_setzero_si512();
        let mut i = 0;
        while i < row.len() {
            // SAFETY: i + 64 ≤ len for both slices (the contract).
            unsafe {
                let c = _mm512_loadu_si512(row.as_ptr().add(i) as *const _);
                let p = _mm512_loadu_si512(query.as_ptr().add(i) as *const _);
                acc = _mm512_dpbusd_epi32(acc, c, p);
            }
            i += 64;
        }
        _mm512_reduce_add_epi32(acc)
    }

    /// `Σ c_i · p_i` with AVX2: both widened to 16 bits, `vpmaddwd` into 32-bit sums (no
    /// saturation: |c · p| ≤ 255 · 127).
    ///
    /// # Safety
    /// The CPU must have AVX2; `row` and `query` have the same length, a multiple of 16.
    #[target_feature(enable = "avx2")]
    pub unsafe fn dot_avx2(row: &[u8], query: &[i8]) -> i32 {
        debug_assert!(row.len() == query.len() && row.len().is_multiple_of(16));
        let mut acc = _mm256_setzero_si256();
        let mut i = 0;
        while i < row.len() {
            // SAFETY: i + 16 ≤ len for both slices (the contract).
            unsafe {
                let c = _mm_loadu_si128(row.as_ptr().add(i) as *const _);
                let p = _mm_loadu_si128(query.as_ptr().add(i) as *const _);
                let prod = _mm256_madd_epi16(_mm256_cvtepu8_epi16(c), _mm256_cvtepi8_epi16(p));
                acc = _mm256_add_epi32(acc, prod);
            }
            i += 16;
        }
        let hi = _mm256_extracti128_si256(acc, 1);
        let s = _mm_add_epi32(_mm256_castsi256_si128(acc), hi);
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }
}

/// `n` pseudo-random unit vectors of `dims` components (xorshift from `seed`; the same for
/// the same arguments), for tests and benchmarks of vector code.
pub fn random_unit_vectors(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut x = seed.max(1);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f32 / (1u64 << 53) as f32 - 0.5
    };
    (0..n)
        .map(|_| super::unit(&(0..dims).map(|_| next()).collect::<Vec<_>>()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vectors(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
        random_unit_vectors(n, dims, seed)
    }

    fn scores_with(q: &QuantizedVectors, query: &[f32], k: DotKernel) -> Vec<f32> {
        let qq = q.quantize_query(query);
        let mut out = vec![0.0; q.len()];
        q.scores(&qq, 0..q.len(), k, &mut out);
        out
    }

    proptest! {
        /// Every kernel this CPU runs returns the same bits, for any length (padding included).
        #[test]
        fn kernels_agree(dims in 1usize..300, n in 1usize..20, seed in 1u64..u64::MAX) {
            let vs = vectors(n + 1, dims, seed);
            let mut q = QuantizedVectors::new(dims);
            for v in &vs[1..] {
                q.push(v);
            }
            let base = scores_with(&q, &vs[0], DotKernel::Portable);
            for k in DotKernel::available() {
                prop_assert_eq!(&scores_with(&q, &vs[0], k), &base, "{:?}", k);
            }
        }

        /// The 8-bit score is within 0.02 of the exact dot product of unit vectors.
        #[test]
        fn scores_approximate_the_dot_product(dims in 8usize..600, seed in 1u64..u64::MAX) {
            let vs = vectors(9, dims, seed);
            let mut q = QuantizedVectors::new(dims);
            for v in &vs[1..] {
                q.push(v);
            }
            let got = scores_with(&q, &vs[0], DotKernel::detect());
            for (v, g) in vs[1..].iter().zip(got) {
                let exact: f32 = v.iter().zip(&vs[0]).map(|(a, b)| a * b).sum();
                prop_assert!((exact - g).abs() < 0.02, "exact {exact} got {g}");
            }
        }
    }

    #[test]
    fn zero_and_non_finite_vectors_score_zero() {
        let mut q = QuantizedVectors::new(4);
        q.push(&[0.0; 4]);
        q.push(&[f32::NAN, 1.0, 0.0, 0.0]);
        q.push(&[1.0, 0.0, 0.0, 0.0]);
        let s = scores_with(&q, &[1.0, 0.0, 0.0, 0.0], DotKernel::detect());
        assert_eq!(s[..2], [0.0, 0.0]);
        assert!((s[2] - 1.0).abs() < 1e-6, "{s:?}");
        // A zero query scores 0 everywhere.
        assert!(scores_with(&q, &[0.0; 4], DotKernel::detect())
            .iter()
            .all(|&x| x == 0.0));
    }

    #[test]
    fn fixed_point_sums_are_the_vectors_and_exact_under_removal() {
        let vs = vectors(3, 77, 11);
        let mut q = QuantizedVectors::new(77);
        for v in &vs {
            q.push(v);
        }
        let mut acc = vec![0i64; 77];
        q.add_row_fixed(0, 1, &mut acc);
        q.add_row_fixed(1, 1, &mut acc);
        let step: f64 = vs[..2]
            .iter()
            .map(|v| f64::from(v.iter().fold(0f32, |m, x| m.max(x.abs()))) / 127.0)
            .sum();
        for (i, &a) in acc.iter().enumerate() {
            let want = f64::from(vs[0][i]) + f64::from(vs[1][i]);
            let got = a as f64 / FIXED_ONE;
            assert!(
                (got - want).abs() <= step / 2.0 + 1e-6,
                "{i}: {got} vs {want}"
            );
        }
        // adding a row and taking it away again leaves the same bits
        let before = acc.clone();
        q.add_row_fixed(2, 1, &mut acc);
        q.add_row_fixed(0, -1, &mut acc);
        q.add_row_fixed(2, -1, &mut acc);
        q.add_row_fixed(0, 1, &mut acc);
        assert_eq!(acc, before);
    }

    #[test]
    fn a_row_takes_one_byte_per_padded_component() {
        let mut q = QuantizedVectors::new(384);
        q.reserve(10);
        for v in vectors(10, 384, 7) {
            q.push(&v);
        }
        assert_eq!(q.len(), 10);
        assert_eq!(q.codes.len(), 10 * 384);
        let mut r = QuantizedVectors::new(100);
        r.push(&vectors(1, 100, 3)[0]);
        assert_eq!(r.codes.len(), 128);
    }
}
