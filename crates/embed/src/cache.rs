//! The one embedding cache: vectors keyed by (model id, kind, text).
//!
//! [`EmbeddingCache`] is bounded and thread-safe; it embeds only the misses (each distinct
//! text once, even if repeated within the call) in one batch and returns vectors in input
//! order. It may have a persistent second level ([`VectorBacking`]: the store's content-keyed
//! vector table, through `bib_retrieve::StoreVectors`), keyed by [`store_key`] — the key ingest
//! writes sentence vectors under — so a sentence embedded by one process is not embedded again
//! by the next. [`CachedEmbedder`] wraps any [`Embedder`] with one. Retrieval, trimming, the
//! history packer and the benchmarks all use this cache. The key covers whether the text is a
//! query or a passage (asymmetric models embed the two differently).

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bib_text::tokens::TokenCounter;
use sha2::{Digest, Sha256};

use crate::{EmbedError, EmbedKind, Embedder};

/// sha256 of the kind tag and the text.
pub type ContentKey = [u8; 32];

/// The cache key of `text` embedded as `kind`.
pub fn content_key(text: &str, kind: EmbedKind) -> ContentKey {
    let mut h = Sha256::new();
    h.update(match kind {
        EmbedKind::Query => b"q\0",
        EmbedKind::Passage => b"p\0",
    });
    h.update(text.as_bytes());
    h.finalize().into()
}

/// The key under which a store's persistent vector cache keeps `text` embedded as `kind`: the
/// hex [`content_key`], tagged `text:` so it can never collide with the chunk content hashes
/// kept in the same table. Ingest writes sentence vectors under it; trimming reads them.
pub fn store_key(text: &str, kind: EmbedKind) -> String {
    format!("text:{}", hex::encode(content_key(text, kind)))
}

/// A persistent second level for [`EmbeddingCache`]: vectors by (model id, [`store_key`]).
/// Failures are the backing's to swallow: a miss only costs an embedding.
pub trait VectorBacking: Send + Sync {
    /// Known vectors among `keys`.
    fn get(&self, model_id: &str, keys: &[String]) -> Vec<(String, Vec<f32>)>;
    /// Remember vectors.
    fn put(&self, model_id: &str, items: &[(String, Vec<f32>)]);
}

/// The texts of one (model, kind), looked up by `&str` without building a key.
type Group = HashMap<String, Arc<[f32]>>;

#[derive(Debug, Default)]
struct Entries {
    /// One map per (model id, kind); few, so found by a scan.
    groups: Vec<((String, EmbedKind), Group)>,
    /// Insertion order (group index, text), for evicting the oldest first.
    order: VecDeque<(usize, String)>,
    len: usize,
}

impl Entries {
    fn group(&self, model_id: &str, kind: EmbedKind) -> Option<&Group> {
        self.groups
            .iter()
            .find(|((m, k), _)| m == model_id && *k == kind)
            .map(|(_, g)| g)
    }

    fn get(&self, model_id: &str, kind: EmbedKind, text: &str) -> Option<Arc<[f32]>> {
        self.group(model_id, kind)?.get(text).cloned()
    }

    fn insert(
        &mut self,
        model_id: &str,
        kind: EmbedKind,
        text: String,
        v: Arc<[f32]>,
        capacity: usize,
    ) {
        let gi = match self
            .groups
            .iter()
            .position(|((m, k), _)| m == model_id && *k == kind)
        {
            Some(i) => i,
            None => {
                self.groups
                    .push(((model_id.to_string(), kind), Group::default()));
                self.groups.len() - 1
            }
        };
        if self.groups[gi].1.insert(text.clone(), v).is_none() {
            self.order.push_back((gi, text));
            self.len += 1;
        }
        while self.len > capacity {
            let Some((g, old)) = self.order.pop_front() else {
                break;
            };
            if self.groups[g].1.remove(&old).is_some() {
                self.len -= 1;
            }
        }
    }
}

/// Thread-safe, bounded (oldest insertions evicted first), content-keyed cache of embeddings.
pub struct EmbeddingCache {
    entries: Mutex<Entries>,
    capacity: usize,
    backing: Option<Arc<dyn VectorBacking>>,
    hits: AtomicUsize,
    embedded: AtomicUsize,
}

impl std::fmt::Debug for EmbeddingCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingCache")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .field("persistent", &self.backing.is_some())
            .finish()
    }
}

impl Default for EmbeddingCache {
    fn default() -> Self {
        Self::with_capacity(100_000)
    }
}

impl EmbeddingCache {
    /// A cache holding at most `capacity` vectors.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            entries: Mutex::default(),
            capacity: capacity.max(1),
            backing: None,
            hits: AtomicUsize::new(0),
            embedded: AtomicUsize::new(0),
        }
    }

    /// Add a persistent second level.
    pub fn with_backing(mut self, backing: Arc<dyn VectorBacking>) -> Self {
        self.backing = Some(backing);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding the lock cannot leave the map half-updated in a way that
        // matters for a cache, so a poisoned lock is simply reused.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Number of vectors held in memory.
    pub fn len(&self) -> usize {
        self.lock().len
    }

    /// Whether the cache holds nothing in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Texts served without embedding so far (from memory or the backing).
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::Relaxed)
    }

    /// Distinct texts sent to a model so far.
    pub fn embedded(&self) -> usize {
        self.embedded.load(Ordering::Relaxed)
    }

    /// The vectors of `texts` already known (in memory, else in the persistent backing, which
    /// then fills memory), in order; `None` where neither has one. Never embeds.
    pub fn cached(
        &self,
        model_id: &str,
        texts: &[&str],
        kind: EmbedKind,
    ) -> Vec<Option<Arc<[f32]>>> {
        let mut out: Vec<Option<Arc<[f32]>>> = Vec::with_capacity(texts.len());
        // Each distinct missing text once, with every position it fills.
        let mut missing: Vec<&str> = Vec::new();
        let mut slots: HashMap<&str, Vec<usize>> = HashMap::new();
        {
            let entries = self.lock();
            for (i, t) in texts.iter().enumerate() {
                let hit = entries.get(model_id, kind, t);
                if hit.is_none() {
                    let e = slots.entry(t).or_default();
                    if e.is_empty() {
                        missing.push(t);
                    }
                    e.push(i);
                }
                out.push(hit);
            }
        }
        if let (Some(b), false) = (&self.backing, missing.is_empty()) {
            let keys: Vec<String> = missing.iter().map(|t| store_key(t, kind)).collect();
            let found: HashMap<String, Vec<f32>> = b.get(model_id, &keys).into_iter().collect();
            if !found.is_empty() {
                let mut entries = self.lock();
                for (t, k) in missing.iter().zip(&keys) {
                    if let Some(v) = found.get(k) {
                        let v: Arc<[f32]> = Arc::from(v.as_slice());
                        for &i in &slots[t] {
                            out[i] = Some(v.clone());
                        }
                        entries.insert(model_id, kind, t.to_string(), v, self.capacity);
                    }
                }
            }
        }
        self.hits.fetch_add(
            out.iter().filter(|v| v.is_some()).count(),
            Ordering::Relaxed,
        );
        out
    }

    /// Embed `texts`, taking what is cached ([`Self::cached`]) and sending the rest
    /// (deduplicated) to the model in **one** batch. Returns one vector per input, in order.
    pub fn embed(
        &self,
        embedder: &dyn Embedder,
        texts: &[&str],
        kind: EmbedKind,
    ) -> Result<Vec<Arc<[f32]>>, EmbedError> {
        let model = embedder.model_id().to_string();
        let mut out = self.cached(&model, texts, kind);
        let mut missing: Vec<&str> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        for (slot, t) in out.iter().zip(texts) {
            if slot.is_none() && seen.insert(t) {
                missing.push(t);
            }
        }
        if missing.is_empty() {
            return Ok(out.into_iter().flatten().collect());
        }
        let vecs = embedder.embed(&missing, kind)?;
        if vecs.len() != missing.len() {
            return Err(EmbedError::Other(format!(
                "{model} returned {} vectors for {} texts",
                vecs.len(),
                missing.len()
            )));
        }
        self.embedded.fetch_add(missing.len(), Ordering::Relaxed);
        let fresh: HashMap<&str, Arc<[f32]>> = missing
            .iter()
            .copied()
            .zip(vecs.into_iter().map(Arc::from))
            .collect();
        for (slot, t) in out.iter_mut().zip(texts) {
            if slot.is_none() {
                *slot = fresh.get(t).cloned();
            }
        }
        if let Some(b) = &self.backing {
            let items: Vec<(String, Vec<f32>)> = missing
                .iter()
                .map(|t| (store_key(t, kind), fresh[t].to_vec()))
                .collect();
            b.put(&model, &items);
        }
        let mut entries = self.lock();
        for t in &missing {
            entries.insert(&model, kind, t.to_string(), fresh[t].clone(), self.capacity);
        }
        drop(entries);
        Ok(out
            .into_iter()
            .map(|v| v.unwrap_or_else(|| Arc::from(Vec::new())))
            .collect())
    }

    /// Remember vectors computed elsewhere (a benchmark's cached corpus), under the keys
    /// [`Self::embed`] looks up: `(model, kind, text)`.
    pub fn insert(&self, model_id: &str, kind: EmbedKind, items: Vec<(String, Vec<f32>)>) {
        let mut entries = self.lock();
        for (t, v) in items {
            entries.insert(model_id, kind, t, Arc::from(v), self.capacity);
        }
    }
}

/// An [`Embedder`] that consults an [`EmbeddingCache`] before embedding: its own (`C` =
/// `EmbeddingCache`) or one it borrows (`&EmbeddingCache`), such as a server's cache shared by
/// its requests.
pub struct CachedEmbedder<E, C = EmbeddingCache> {
    inner: E,
    cache: C,
}

impl<E: Embedder, C: Borrow<EmbeddingCache>> std::fmt::Debug for CachedEmbedder<E, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedEmbedder")
            .field("model", &self.inner.model_id())
            .field("cache", self.cache.borrow())
            .finish()
    }
}

impl<E: Embedder, C: Borrow<EmbeddingCache>> CachedEmbedder<E, C> {
    pub fn new(inner: E, cache: C) -> Self {
        Self { inner, cache }
    }

    /// The wrapped embedder.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// The cache.
    pub fn cache(&self) -> &EmbeddingCache {
        self.cache.borrow()
    }
}

impl<E: Embedder, C: Borrow<EmbeddingCache> + Send + Sync> Embedder for CachedEmbedder<E, C> {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dimensions(&self) -> usize {
        self.inner.dimensions()
    }

    fn max_input_tokens(&self) -> usize {
        self.inner.max_input_tokens()
    }

    fn tokenizer(&self) -> &dyn TokenCounter {
        self.inner.tokenizer()
    }

    fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(self
            .cache()
            .embed(&self.inner, texts, kind)?
            .iter()
            .map(|v| v.to_vec())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts calls and texts; vector = [len, first byte (+1 for a question)].
    fn counting() -> crate::fake::FakeEmbedder {
        crate::fake::FakeEmbedder::new("counting", 2, |t, kind| {
            let k = if kind == EmbedKind::Query { 1.0 } else { 0.0 };
            vec![t.len() as f32, k + f32::from(t.bytes().next().unwrap_or(0))]
        })
    }

    #[test]
    fn unchanged_text_is_embedded_once() {
        let e = CachedEmbedder::new(counting(), EmbeddingCache::default());
        let a = e.embed(&["uno", "dos", "uno"], EmbedKind::Passage).unwrap();
        assert_eq!(e.inner().texts_embedded(), 2);
        assert_eq!(a[0], a[2]);
        assert_eq!(a[1], vec![3.0, f32::from(b'd')]);
        let b = e
            .embed(&["dos", "tres", "uno"], EmbedKind::Passage)
            .unwrap();
        assert_eq!(e.inner().texts_embedded(), 3);
        assert_eq!(b[0], a[1]);
        assert_eq!(b[2], a[0]);
        assert_eq!((e.cache().hits(), e.cache().embedded()), (2, 3));
        // Query and passage are cached separately.
        let q = e.embed(&["uno"], EmbedKind::Query).unwrap();
        assert_ne!(q[0], a[0]);
        assert_eq!(e.cache().len(), 4);
    }

    #[test]
    fn keys_separate_models_and_kinds() {
        let k = content_key("x", EmbedKind::Passage);
        assert_ne!(k, content_key("x", EmbedKind::Query));
        assert_ne!(k, content_key("y", EmbedKind::Passage));
        let cache = EmbeddingCache::default();
        cache.insert("m1", EmbedKind::Passage, vec![("x".into(), vec![1.0])]);
        let got = |m: &str, kind| {
            cache.cached(m, &["x"], kind)[0]
                .as_deref()
                .map(<[f32]>::to_vec)
        };
        assert_eq!(got("m1", EmbedKind::Passage), Some(vec![1.0]));
        assert_eq!(got("m2", EmbedKind::Passage), None);
        assert_eq!(got("m1", EmbedKind::Query), None);
    }

    #[test]
    fn bounded_cache_evicts_oldest() {
        let cache = EmbeddingCache::with_capacity(2);
        for (i, t) in ["a", "b", "c"].iter().enumerate() {
            cache.insert(
                "m",
                EmbedKind::Passage,
                vec![(t.to_string(), vec![i as f32])],
            );
        }
        assert_eq!(cache.len(), 2);
        let got: Vec<Option<Vec<f32>>> = cache
            .cached("m", &["a", "b", "c"], EmbedKind::Passage)
            .into_iter()
            .map(|v| v.map(|v| v.to_vec()))
            .collect();
        assert_eq!(got, vec![None, Some(vec![1.0]), Some(vec![2.0])]);
    }
}
