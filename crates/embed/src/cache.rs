//! Embedding cache keyed by (model id, content hash).
//!
//! [`VectorCache`] is the storage seam (an in-memory [`MemoryCache`] here; the store can back
//! it with a table). [`CachedEmbedder`] wraps any [`Embedder`]: it looks every text up first,
//! embeds only the misses (each distinct text once, even if repeated within the call), stores
//! them, and returns vectors in input order. The key covers the text and whether it is a query
//! or a passage (asymmetric models embed the two differently), so unchanged text is never
//! embedded twice by the same model.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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

/// Storage for vectors keyed by (model id, content key).
pub trait VectorCache: Send + Sync {
    /// One entry per key, `None` for a miss.
    fn get_many(
        &self,
        model_id: &str,
        keys: &[ContentKey],
    ) -> Result<Vec<Option<Vec<f32>>>, EmbedError>;
    /// Store vectors (overwriting any previous value for the same key).
    fn put_many(
        &self,
        model_id: &str,
        entries: &[(ContentKey, Vec<f32>)],
    ) -> Result<(), EmbedError>;
}

/// A process-local cache; optionally bounded (oldest insertions are evicted first).
#[derive(Debug, Default)]
pub struct MemoryCache {
    inner: Mutex<MemoryInner>,
    capacity: Option<usize>,
}

#[derive(Debug, Default)]
struct MemoryInner {
    map: HashMap<(String, ContentKey), Vec<f32>>,
    order: std::collections::VecDeque<(String, ContentKey)>,
}

impl MemoryCache {
    /// Unbounded cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cache holding at most `capacity` vectors.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Mutex::default(),
            capacity: Some(capacity.max(1)),
        }
    }

    /// Number of vectors held.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        // A panic while holding the lock cannot leave the map half-updated in a way that
        // matters for a cache, so a poisoned lock is simply reused.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl VectorCache for MemoryCache {
    fn get_many(
        &self,
        model_id: &str,
        keys: &[ContentKey],
    ) -> Result<Vec<Option<Vec<f32>>>, EmbedError> {
        let inner = self.lock();
        Ok(keys
            .iter()
            .map(|k| inner.map.get(&(model_id.to_string(), *k)).cloned())
            .collect())
    }

    fn put_many(
        &self,
        model_id: &str,
        entries: &[(ContentKey, Vec<f32>)],
    ) -> Result<(), EmbedError> {
        let mut inner = self.lock();
        for (k, v) in entries {
            let key = (model_id.to_string(), *k);
            if inner.map.insert(key.clone(), v.clone()).is_none() {
                inner.order.push_back(key);
            }
        }
        if let Some(cap) = self.capacity {
            while inner.map.len() > cap {
                let Some(old) = inner.order.pop_front() else {
                    break;
                };
                inner.map.remove(&old);
            }
        }
        Ok(())
    }
}

/// An [`Embedder`] that consults a [`VectorCache`] before embedding.
pub struct CachedEmbedder<E, C> {
    inner: E,
    cache: C,
    hits: AtomicUsize,
    misses: AtomicUsize,
}

impl<E: Embedder, C: VectorCache> std::fmt::Debug for CachedEmbedder<E, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedEmbedder")
            .field("model", &self.inner.model_id())
            .field("hits", &self.hits())
            .field("misses", &self.misses())
            .finish()
    }
}

impl<E: Embedder, C: VectorCache> CachedEmbedder<E, C> {
    pub fn new(inner: E, cache: C) -> Self {
        Self {
            inner,
            cache,
            hits: AtomicUsize::new(0),
            misses: AtomicUsize::new(0),
        }
    }

    /// The wrapped embedder.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// The cache.
    pub fn cache(&self) -> &C {
        &self.cache
    }

    /// Texts served from the cache so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::Relaxed)
    }

    /// Distinct texts that had to be embedded so far.
    pub fn misses(&self) -> usize {
        self.misses.load(Ordering::Relaxed)
    }
}

impl<E: Embedder, C: VectorCache> Embedder for CachedEmbedder<E, C> {
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
        let model = self.inner.model_id();
        let keys: Vec<ContentKey> = texts.iter().map(|t| content_key(t, kind)).collect();
        let mut out = self.cache.get_many(model, &keys)?;
        if out.len() != texts.len() {
            return Err(EmbedError::Other(
                "vector cache returned the wrong number of entries".into(),
            ));
        }
        // Distinct missing texts, each embedded once.
        let mut first_of: HashMap<ContentKey, usize> = HashMap::new();
        let mut todo: Vec<usize> = Vec::new();
        for (i, slot) in out.iter().enumerate() {
            if slot.is_none() && !first_of.contains_key(&keys[i]) {
                first_of.insert(keys[i], todo.len());
                todo.push(i);
            }
        }
        self.hits.fetch_add(
            out.iter().filter(|s| s.is_some()).count(),
            Ordering::Relaxed,
        );
        if !todo.is_empty() {
            let batch: Vec<&str> = todo.iter().map(|&i| texts[i]).collect();
            let fresh = self.inner.embed(&batch, kind)?;
            if fresh.len() != batch.len() {
                return Err(EmbedError::Other(format!(
                    "{model} returned {} vectors for {} texts",
                    fresh.len(),
                    batch.len()
                )));
            }
            self.misses.fetch_add(todo.len(), Ordering::Relaxed);
            let entries: Vec<(ContentKey, Vec<f32>)> = todo
                .iter()
                .map(|&i| keys[i])
                .zip(fresh.iter().cloned())
                .collect();
            self.cache.put_many(model, &entries)?;
            for (i, slot) in out.iter_mut().enumerate() {
                if slot.is_none() {
                    *slot = Some(fresh[first_of[&keys[i]]].clone());
                }
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bib_text::tokens::EstimateCounter;

    /// Counts calls and texts; vector = [len, first byte].
    #[derive(Default)]
    struct Counting {
        texts: AtomicUsize,
    }

    impl Embedder for Counting {
        fn model_id(&self) -> &str {
            "counting"
        }
        fn dimensions(&self) -> usize {
            2
        }
        fn max_input_tokens(&self) -> usize {
            100
        }
        fn tokenizer(&self) -> &dyn TokenCounter {
            &EstimateCounter
        }
        fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.texts.fetch_add(texts.len(), Ordering::Relaxed);
            let k = if kind == EmbedKind::Query { 1.0 } else { 0.0 };
            Ok(texts
                .iter()
                .map(|t| vec![t.len() as f32, k + f32::from(t.bytes().next().unwrap_or(0))])
                .collect())
        }
    }

    #[test]
    fn unchanged_text_is_embedded_once() {
        let e = CachedEmbedder::new(Counting::default(), MemoryCache::new());
        let a = e.embed(&["uno", "dos", "uno"], EmbedKind::Passage).unwrap();
        assert_eq!(e.inner().texts.load(Ordering::Relaxed), 2);
        assert_eq!(a[0], a[2]);
        assert_eq!(a[1], vec![3.0, f32::from(b'd')]);
        let b = e
            .embed(&["dos", "tres", "uno"], EmbedKind::Passage)
            .unwrap();
        assert_eq!(e.inner().texts.load(Ordering::Relaxed), 3);
        assert_eq!(b[0], a[1]);
        assert_eq!(b[2], a[0]);
        assert_eq!((e.hits(), e.misses()), (2, 3));
        // Query and passage are cached separately.
        let q = e.embed(&["uno"], EmbedKind::Query).unwrap();
        assert_ne!(q[0], a[0]);
        assert_eq!(e.cache().len(), 4);
    }

    #[test]
    fn keys_separate_models_and_kinds() {
        let cache = MemoryCache::new();
        let k = content_key("x", EmbedKind::Passage);
        assert_ne!(k, content_key("x", EmbedKind::Query));
        assert_ne!(k, content_key("y", EmbedKind::Passage));
        cache.put_many("m1", &[(k, vec![1.0])]).unwrap();
        assert_eq!(cache.get_many("m1", &[k]).unwrap(), vec![Some(vec![1.0])]);
        assert_eq!(cache.get_many("m2", &[k]).unwrap(), vec![None]);
    }

    #[test]
    fn bounded_cache_evicts_oldest() {
        let cache = MemoryCache::with_capacity(2);
        let keys: Vec<ContentKey> = ["a", "b", "c"]
            .iter()
            .map(|t| content_key(t, EmbedKind::Passage))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            cache.put_many("m", &[(*k, vec![i as f32])]).unwrap();
        }
        assert_eq!(cache.len(), 2);
        let got = cache.get_many("m", &keys).unwrap();
        assert_eq!(got, vec![None, Some(vec![1.0]), Some(vec![2.0])]);
    }
}
