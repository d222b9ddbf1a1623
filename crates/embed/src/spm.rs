//! A SentencePiece unigram tokenizer read straight from a `.model` file.
//!
//! Three parts, all written for the files this project ships models from:
//! - a minimal protobuf reader that pulls the pieces (text + score) and the precompiled
//!   normalisation charsmap out of the `ModelProto`;
//! - the `nmt_nfkc` normaliser: the charsmap is a darts-clone double-array trie of UTF-8 byte
//!   sequences whose values point into a table of NUL-terminated replacements; at every position
//!   the longest matching key is replaced. Whitespace handling follows SentencePiece's defaults
//!   (drop leading/trailing/repeated spaces, prefix a dummy space, spaces become `▁`);
//! - unigram Viterbi segmentation over code points, with SentencePiece's tie-breaking (strictly
//!   better scores win, so the earliest-starting candidate is kept on ties) and a one-character
//!   unknown node when no single-character piece matches.
//!
//! The result is token-for-token identical to the reference Python package on its test set
//! (see `tests/use_m3_parity.rs`).

use std::path::Path;

use bib_text::tokens::TokenCounter;
use rustc_hash::FxHashMap;

use crate::mapped::{MappedFile, Words};
use crate::EmbedError;

/// Id of `<unk>`.
pub const UNK_ID: u32 = 0;
/// Id of `<s>`.
pub const BOS_ID: u32 = 1;
/// Id of `</s>`.
pub const EOS_ID: u32 = 2;

const SPACE_SYMBOL: &str = "\u{2581}";

/// First bytes of a [`SentencePiece::load_cached`] cache file (the digit is the layout version).
const CACHE_MAGIC: &[u8; 8] = b"BIBSPM01";

/// Length and modification time (ns since the epoch) of a file: what a cache was made from.
fn file_stamp(path: &Path) -> Option<[u64; 2]> {
    let m = std::fs::metadata(path).ok()?;
    let mtime = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some([m.len(), u64::try_from(mtime).ok()?])
}

/// A loaded SentencePiece unigram model.
pub struct SentencePiece {
    scores: Words<f32>,
    trie: PieceTrie,
    max_piece_chars: usize,
    unk_score: f64,
    normalizer: Normalizer,
}

impl std::fmt::Debug for SentencePiece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentencePiece")
            .field("pieces", &self.scores.len())
            .finish()
    }
}

fn bad(path: &str, reason: impl Into<String>) -> EmbedError {
    EmbedError::BadModelFile {
        path: path.to_string(),
        reason: reason.into(),
    }
}

/// One length-delimited or fixed32 field of a protobuf message.
struct Field<'a> {
    number: u64,
    data: &'a [u8],
}

fn read_varint(data: &[u8], pos: &mut usize) -> Option<u64> {
    let mut result = 0u64;
    let mut shift = 0;
    loop {
        let b = *data.get(*pos)?;
        *pos += 1;
        if shift < 64 {
            result |= u64::from(b & 0x7f) << shift;
        }
        if b & 0x80 == 0 {
            return Some(result);
        }
        shift += 7;
    }
}

/// The length-delimited (wire type 2) and 32-bit (wire type 5) fields of a message, in order.
/// Varint and 64-bit fields are skipped. `None` on truncated or malformed input.
fn parse_fields(data: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let key = read_varint(data, &mut pos)?;
        let number = key >> 3;
        match key & 7 {
            0 => {
                read_varint(data, &mut pos)?;
            }
            1 => pos = pos.checked_add(8).filter(|&p| p <= data.len())?,
            2 => {
                let len = usize::try_from(read_varint(data, &mut pos)?).ok()?;
                let end = pos.checked_add(len).filter(|&e| e <= data.len())?;
                out.push(Field {
                    number,
                    data: &data[pos..end],
                });
                pos = end;
            }
            5 => {
                let end = pos.checked_add(4).filter(|&e| e <= data.len())?;
                out.push(Field {
                    number,
                    data: &data[pos..end],
                });
                pos = end;
            }
            _ => return None,
        }
    }
    Some(out)
}

impl SentencePiece {
    /// Read a `.model` file.
    pub fn load(path: &std::path::Path) -> Result<Self, EmbedError> {
        let bytes = std::fs::read(path)
            .map_err(|e| EmbedError::failed(format!("model file {}", path.display()), e))?;
        Self::from_bytes(&bytes, &path.display().to_string())
    }

    /// Parse a serialized `ModelProto`; `name` only labels errors.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Self, EmbedError> {
        let top = parse_fields(bytes).ok_or_else(|| bad(name, "not a protobuf ModelProto"))?;
        let mut pieces: Vec<&str> = Vec::new();
        let mut scores = Vec::new();
        let mut charsmap: Option<&[u8]> = None;
        let mut saw_trainer = false;
        for field in &top {
            match field.number {
                1 => {
                    let sub = parse_fields(field.data)
                        .ok_or_else(|| bad(name, "malformed SentencePiece entry"))?;
                    let Some(text) = sub.iter().find(|f| f.number == 1) else {
                        continue;
                    };
                    let text = std::str::from_utf8(text.data)
                        .map_err(|_| bad(name, "piece is not UTF-8"))?;
                    let score = sub
                        .iter()
                        .find(|f| f.number == 2 && f.data.len() == 4)
                        .map(|f| f32::from_le_bytes([f.data[0], f.data[1], f.data[2], f.data[3]]))
                        .unwrap_or(0.0);
                    pieces.push(text);
                    scores.push(score);
                }
                // The charsmap lives in the first sub-message with field 3 (this model's layout)
                // and that message's field 2.
                3 if !saw_trainer => {
                    saw_trainer = true;
                    let sub = parse_fields(field.data)
                        .ok_or_else(|| bad(name, "malformed normalizer spec"))?;
                    charsmap = sub.iter().find(|f| f.number == 2).map(|f| f.data);
                }
                _ => {}
            }
        }
        if pieces.len() <= EOS_ID as usize {
            return Err(bad(name, "model has too few pieces"));
        }
        let min_score = scores.iter().copied().fold(f32::INFINITY, f32::min);
        let unk_score = f64::from(min_score) - 10.0;
        let max_piece_chars = pieces.iter().map(|p| p.chars().count()).max().unwrap_or(1);
        let trie = PieceTrie::build(&pieces);
        let normalizer = match charsmap {
            Some(map) => Normalizer::from_charsmap(map).ok_or_else(|| bad(name, "bad charsmap"))?,
            None => Normalizer::identity(),
        };
        Ok(Self {
            scores: Words::Owned(scores),
            trie,
            max_piece_chars,
            unk_score,
            normalizer,
        })
    }

    /// Load `model`, through a cache file of the parsed model (`cache`): read when it exists
    /// and was made from this very `model` (same length and modification time), else the model
    /// is parsed and the cache written for next time — best effort: a read-only model
    /// directory only costs the parse.
    pub fn load_cached(model: &Path, cache: &Path) -> Result<Self, EmbedError> {
        let stamp = file_stamp(model);
        if let Some(stamp) = stamp {
            if let Some(sp) = MappedFile::open(cache)
                .ok()
                .and_then(|f| Self::from_cache(&f, stamp))
            {
                return Ok(sp);
            }
        }
        let sp = Self::load(model)?;
        if let Some(stamp) = file_stamp(model) {
            let tmp = crate::models::private_tmp(cache);
            if std::fs::write(&tmp, sp.to_cache_bytes(stamp)).is_ok()
                && std::fs::rename(&tmp, cache).is_err()
            {
                let _ = std::fs::remove_file(&tmp);
            }
        }
        Ok(sp)
    }

    fn to_cache_bytes(&self, stamp: [u64; 2]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(CACHE_MAGIC);
        for v in stamp {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.max_piece_chars as u64).to_le_bytes());
        out.extend_from_slice(&self.unk_score.to_le_bytes());
        let scores: Vec<u32> = self.scores.iter().map(|f| f.to_bits()).collect();
        for words in [
            &scores[..],
            &self.trie.first,
            &self.trie.labels,
            &self.trie.targets,
            &self.trie.piece_at,
            &self.normalizer.units,
        ] {
            out.extend_from_slice(&(words.len() as u64).to_le_bytes());
            for w in words {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        out.extend_from_slice(&(self.normalizer.replacements.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.normalizer.replacements);
        out
    }

    /// The model saved by [`Self::to_cache_bytes`], when `file` is such a cache of the model
    /// file stamped `stamp` and is internally consistent; `None` otherwise. The arrays are read
    /// in place from the map (every offset is 4-aligned), not copied.
    fn from_cache(file: &MappedFile, stamp: [u64; 2]) -> Option<Self> {
        let bytes = file.bytes();
        let mut at = CACHE_MAGIC.len();
        if !bytes.starts_with(CACHE_MAGIC) {
            return None;
        }
        let mut u64_ = |at: &mut usize| -> Option<u64> {
            let head = bytes.get(*at..at.checked_add(8)?)?;
            *at += 8;
            Some(u64::from_le_bytes(head.try_into().ok()?))
        };
        if [u64_(&mut at)?, u64_(&mut at)?] != stamp {
            return None;
        }
        let max_piece_chars = usize::try_from(u64_(&mut at)?).ok()?;
        let unk_score = f64::from_bits(u64_(&mut at)?);
        fn words<T: bytemuck::Pod>(
            file: &MappedFile,
            at: &mut usize,
            len_of: &mut impl FnMut(&mut usize) -> Option<u64>,
        ) -> Option<Words<T>> {
            let n = usize::try_from(len_of(at)?).ok()?;
            // The cache is written little-endian, and only little-endian hosts map it.
            let w = Words::mapped_or_copied(file, *at, n, |b| {
                b.chunks_exact(std::mem::size_of::<T>())
                    .map(bytemuck::pod_read_unaligned)
                    .collect()
            })?;
            *at = at.checked_add(n.checked_mul(std::mem::size_of::<T>())?)?;
            Some(w)
        }
        let scores: Words<f32> = words(file, &mut at, &mut u64_)?;
        let trie = PieceTrie {
            first: words(file, &mut at, &mut u64_)?,
            labels: words(file, &mut at, &mut u64_)?,
            targets: words(file, &mut at, &mut u64_)?,
            piece_at: words(file, &mut at, &mut u64_)?,
        };
        let units = words(file, &mut at, &mut u64_)?;
        let replacements: Words<u8> = words(file, &mut at, &mut u64_)?;
        if at != bytes.len() || scores.len() <= EOS_ID as usize || !trie.is_consistent(scores.len())
        {
            return None;
        }
        Some(Self {
            scores,
            trie,
            max_piece_chars,
            unk_score,
            normalizer: Normalizer {
                units,
                replacements,
            },
        })
    }

    /// Number of pieces in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.scores.len()
    }

    /// The normalised form of `text` (spaces already turned into `▁`, dummy prefix added).
    pub fn normalize(&self, text: &str) -> String {
        self.normalizer.normalize(text)
    }

    /// Piece ids of `text` without `<s>`/`</s>`. An empty normalised text gives `[<unk>]`, as the
    /// reference implementation does.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let normalized = self.normalize(text);
        if normalized.is_empty() {
            return vec![UNK_ID];
        }
        self.viterbi(&normalized)
    }

    /// Piece ids wrapped in `<s>` … `</s>`, the form the encoder consumes.
    pub fn encode_with_specials(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 3);
        ids.push(BOS_ID);
        ids.extend(self.encode(text));
        ids.push(EOS_ID);
        ids
    }

    fn viterbi(&self, normalized: &str) -> Vec<u32> {
        let chars: Vec<char> = normalized.chars().collect();
        let len = chars.len();
        let mut best = vec![-1e38f64; len + 1];
        best[0] = 0.0;
        let mut start_of = vec![0usize; len + 1];
        let mut piece_of = vec![UNK_ID; len + 1];
        for i in 0..len {
            let base = best[i];
            let stop = (i + self.max_piece_chars).min(len);
            let mut node = PieceTrie::ROOT;
            let mut has_single = false;
            for j in (i + 1)..=stop {
                let Some(next) = self.trie.child(node, chars[j - 1]) else {
                    break;
                };
                node = next;
                if let Some(id) = self.trie.piece(node) {
                    let score = base + f64::from(self.scores[id as usize]);
                    if score > best[j] {
                        best[j] = score;
                        start_of[j] = i;
                        piece_of[j] = id;
                    }
                    if j == i + 1 {
                        has_single = true;
                    }
                }
            }
            if !has_single {
                let score = base + self.unk_score;
                if score > best[i + 1] {
                    best[i + 1] = score;
                    start_of[i + 1] = i;
                    piece_of[i + 1] = UNK_ID;
                }
            }
        }
        let mut ids = Vec::new();
        let mut p = len;
        while p > 0 {
            ids.push(piece_of[p]);
            p = start_of[p];
        }
        if ids.is_empty() {
            ids.push(UNK_ID);
        }
        ids.reverse();
        ids
    }
}

impl TokenCounter for SentencePiece {
    fn count_tokens(&self, text: &str) -> usize {
        let normalized = self.normalize(text);
        if normalized.is_empty() {
            0
        } else {
            self.viterbi(&normalized).len()
        }
    }
}

/// A character trie over the vocabulary in compressed-row form: node `n`'s children are edges
/// `first[n]..first[n + 1]`, sorted by character. Flat arrays, so the whole trie saves to and
/// loads from a cache file without rebuilding (building it costs more than the rest of loading
/// the model together).
struct PieceTrie {
    first: Words<u32>,
    labels: Words<u32>,
    targets: Words<u32>,
    /// Piece id ending at each node, `u32::MAX` when none.
    piece_at: Words<u32>,
}

impl PieceTrie {
    const ROOT: u32 = 0;

    fn build(pieces: &[&str]) -> Self {
        let mut edges: FxHashMap<(u32, char), u32> = FxHashMap::default();
        edges.reserve(pieces.len() * 4);
        let mut piece_at = vec![u32::MAX];
        for (id, piece) in pieces.iter().enumerate() {
            let mut node = Self::ROOT;
            for c in piece.chars() {
                let next_free = piece_at.len() as u32;
                let child = *edges.entry((node, c)).or_insert(next_free);
                if child == next_free {
                    piece_at.push(u32::MAX);
                }
                node = child;
            }
            // A later duplicate of the same text overwrites, as a dict assignment would.
            if node != Self::ROOT {
                piece_at[node as usize] = id as u32;
            }
        }
        let mut list: Vec<(u32, u32, u32)> = edges
            .into_iter()
            .map(|((node, c), child)| (node, c as u32, child))
            .collect();
        list.sort_unstable();
        let nodes = piece_at.len();
        let mut first = vec![0u32; nodes + 1];
        for &(node, _, _) in &list {
            first[node as usize + 1] += 1;
        }
        for n in 0..nodes {
            first[n + 1] += first[n];
        }
        Self {
            first: Words::Owned(first),
            labels: Words::Owned(list.iter().map(|e| e.1).collect()),
            targets: Words::Owned(list.iter().map(|e| e.2).collect()),
            piece_at: Words::Owned(piece_at),
        }
    }

    /// Whether the arrays describe a trie `child` and `piece` can walk without going out of
    /// bounds (a cache file is input too).
    fn is_consistent(&self, pieces: usize) -> bool {
        let nodes = self.piece_at.len();
        self.first.len() == nodes + 1
            && self.labels.len() == self.targets.len()
            && self.first.first() == Some(&0)
            && self.first.last().map(|&l| l as usize) == Some(self.labels.len())
            && self.first.windows(2).all(|w| w[0] <= w[1])
            && self.targets.iter().all(|&t| (t as usize) < nodes)
            && self
                .piece_at
                .iter()
                .all(|&p| p == u32::MAX || (p as usize) < pieces)
    }

    #[inline]
    fn child(&self, node: u32, c: char) -> Option<u32> {
        let n = node as usize;
        let (a, b) = (
            *self.first.get(n)? as usize,
            *self.first.get(n + 1)? as usize,
        );
        let labels = self.labels.get(a..b)?;
        let at = labels.binary_search(&(c as u32)).ok()?;
        self.targets.get(a + at).copied()
    }

    #[inline]
    fn piece(&self, node: u32) -> Option<u32> {
        let id = *self.piece_at.get(node as usize)?;
        (id != u32::MAX).then_some(id)
    }
}

/// The precompiled-charsmap normaliser.
struct Normalizer {
    units: Words<u32>,
    replacements: Words<u8>,
}

impl Normalizer {
    fn identity() -> Self {
        Self {
            units: Words::Owned(Vec::new()),
            replacements: Words::Owned(Vec::new()),
        }
    }

    /// Layout: u32 LE trie size in bytes, the trie's 32-bit units, then the replacement strings.
    fn from_charsmap(map: &[u8]) -> Option<Self> {
        let size = u32::from_le_bytes(map.get(..4)?.try_into().ok()?) as usize;
        let trie = map.get(4..4 + size)?;
        let units = trie
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Some(Self {
            units: Words::Owned(units),
            replacements: Words::Owned(map[4 + size..].to_vec()),
        })
    }

    #[inline]
    fn offset(unit: u32) -> usize {
        ((unit >> 10) << ((unit & 0x200) >> 6)) as usize
    }

    /// The normalised bytes for the longest charsmap key at the start of `data`, and how many
    /// input bytes it consumed. Falls back to the first character unchanged.
    fn normalize_prefix<'a>(&'a self, data: &'a [u8]) -> (&'a [u8], usize) {
        let mut best_len = 0;
        let mut best_value = 0usize;
        if let Some(&root) = self.units.first() {
            let mut node = Self::offset(root);
            for (i, &c) in data.iter().enumerate() {
                node ^= c as usize;
                let Some(&unit) = self.units.get(node) else {
                    break;
                };
                if unit & 0x8000_00ff != u32::from(c) {
                    break;
                }
                node ^= Self::offset(unit);
                if unit & 0x100 != 0 {
                    let Some(&value) = self.units.get(node) else {
                        break;
                    };
                    best_len = i + 1;
                    best_value = (value & 0x7fff_ffff) as usize;
                }
            }
        }
        if best_len == 0 || best_value >= self.replacements.len() {
            let len = utf8_len(data);
            return (&data[..len], len);
        }
        let tail = &self.replacements[best_value..];
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        (&tail[..end], best_len)
    }

    fn normalize(&self, text: &str) -> String {
        let raw = text.as_bytes();
        let mut pos = 0;
        // Skip leading input that normalises to a single space.
        while pos < raw.len() {
            let (piece, used) = self.normalize_prefix(&raw[pos..]);
            if piece != b" " {
                break;
            }
            pos += used;
        }
        if pos >= raw.len() {
            return String::new();
        }
        let space = SPACE_SYMBOL.as_bytes();
        let mut out: Vec<u8> = Vec::with_capacity(raw.len() + 8);
        out.extend_from_slice(space);
        let mut prev_space = true;
        while pos < raw.len() {
            let (mut piece, used) = self.normalize_prefix(&raw[pos..]);
            pos += used;
            if prev_space {
                while let [b' ', rest @ ..] = piece {
                    piece = rest;
                }
            }
            if piece.is_empty() {
                continue;
            }
            if piece.contains(&b' ') {
                for &b in piece {
                    if b == b' ' {
                        out.extend_from_slice(space);
                    } else {
                        out.push(b);
                    }
                }
                prev_space = piece.last() == Some(&b' ');
            } else {
                out.extend_from_slice(piece);
                prev_space = false;
            }
        }
        while out.ends_with(space) {
            out.truncate(out.len() - space.len());
        }
        match String::from_utf8(out) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

/// Byte length of the UTF-8 sequence starting `data` (1 for an invalid or truncated one).
fn utf8_len(data: &[u8]) -> usize {
    let first = data[0];
    let len = if first < 0x80 {
        1
    } else if first >> 5 == 0x6 {
        2
    } else if first >> 4 == 0xe {
        3
    } else if first >> 3 == 0x1e {
        4
    } else {
        1
    };
    if len > 1 && (data.len() < len || data[1..len].iter().any(|&b| b & 0xc0 != 0x80)) {
        return 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-built model: pieces as (text, score) entries, no charsmap.
    fn model(pieces: &[(&str, f32)]) -> SentencePiece {
        SentencePiece::from_bytes(&model_bytes(pieces), "test").unwrap()
    }

    /// The serialized model [`model`] parses.
    fn model_bytes(pieces: &[(&str, f32)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (text, score) in pieces {
            let mut entry = vec![0x0a, text.len() as u8];
            entry.extend_from_slice(text.as_bytes());
            entry.push(0x15);
            entry.extend_from_slice(&score.to_le_bytes());
            bytes.push(0x0a);
            bytes.push(entry.len() as u8);
            bytes.extend_from_slice(&entry);
        }
        bytes
    }

    #[test]
    fn cache_file_round_trips_and_is_checked() {
        let pieces = [
            ("<unk>", 0.0),
            ("<s>", 0.0),
            ("</s>", 0.0),
            ("▁", -1.0),
            ("▁ab", -5.0),
            ("a", -1.0),
            ("b", -1.0),
            ("▁a", -1.5),
            ("ñu", -0.5),
        ];
        let dir = tempfile::tempdir().unwrap();
        let (model, cache) = (dir.path().join("sp.model"), dir.path().join("sp.cache"));
        std::fs::write(&model, model_bytes(&pieces)).unwrap();
        let parsed = SentencePiece::load(&model).unwrap();
        let first = SentencePiece::load_cached(&model, &cache).unwrap();
        let written = std::fs::read(&cache).expect("the cache is written on first load");
        let stamp = file_stamp(&model).unwrap();
        let from_cache_bytes = |bytes: &[u8], stamp| {
            let p = dir.path().join("probe.cache");
            std::fs::write(&p, bytes).unwrap();
            SentencePiece::from_cache(&MappedFile::open(&p).unwrap(), stamp)
        };
        let cached = from_cache_bytes(&written, stamp).expect("cache reads back");
        assert!(cached.trie.first.is_mapped(), "read in place");
        for text in ["ab", "  a   b ", "aé", "ñu ab", ""] {
            assert_eq!(cached.encode(text), parsed.encode(text), "{text:?}");
            assert_eq!(first.encode(text), parsed.encode(text), "{text:?}");
        }
        assert_eq!(*cached.scores, *parsed.scores);
        assert_eq!(cached.unk_score, parsed.unk_score);
        // Made from another file, truncated or inconsistent: not used.
        assert!(from_cache_bytes(&written, [stamp[0] + 1, stamp[1]]).is_none());
        for cut in [0, 8, 40, written.len() / 2, written.len() - 1] {
            assert!(from_cache_bytes(&written[..cut], stamp).is_none());
        }
        let mut broken = written.clone();
        let n = broken.len();
        broken[n - 30..n - 26].copy_from_slice(&u32::MAX.to_le_bytes());
        let _ = from_cache_bytes(&broken, stamp).map(|sp| sp.encode("ab ñu"));
        // A garbage cache falls back to parsing the model (and is rewritten).
        std::fs::write(&cache, b"BIBSPM01 garbage").unwrap();
        let again = SentencePiece::load_cached(&model, &cache).unwrap();
        assert_eq!(again.encode("ab"), parsed.encode("ab"));
        assert_eq!(std::fs::read(&cache).unwrap(), written);
    }

    #[test]
    fn viterbi_prefers_the_best_total_score() {
        let sp = model(&[
            ("<unk>", 0.0),
            ("<s>", 0.0),
            ("</s>", 0.0),
            ("▁", -1.0),
            ("▁ab", -5.0),
            ("a", -1.0),
            ("b", -1.0),
            ("▁a", -1.5),
        ]);
        // "▁a"+"b" = -2.5 beats "▁ab" = -5 and "▁"+"a"+"b" = -3.
        assert_eq!(sp.encode("ab"), vec![7, 6]);
        assert_eq!(sp.normalize("  a   b "), "▁a▁b");
        assert_eq!(sp.count_tokens(""), 0);
        assert_eq!(sp.encode("   "), vec![UNK_ID]);
        // An unknown character becomes a single <unk>.
        assert_eq!(sp.encode("aé"), vec![7, UNK_ID]);
        assert_eq!(sp.encode_with_specials("a"), vec![BOS_ID, 7, EOS_ID]);
    }

    #[test]
    fn malformed_model_is_an_error_not_a_panic() {
        assert!(SentencePiece::from_bytes(&[0x0a, 0x50, 1, 2], "x").is_err());
        assert!(SentencePiece::from_bytes(&[], "x").is_err());
        assert!(SentencePiece::from_bytes(&[0xff; 3], "x").is_err());
    }
}
