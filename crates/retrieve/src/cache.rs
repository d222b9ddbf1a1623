//! A content-keyed embedding cache, so a sentence is embedded once per process.
//!
//! Keys are (model id, kind, text): the same sentence under another model or as a query is a
//! different vector. The cache is bounded; when full it is emptied (simple and predictable —
//! trimming touches a few hundred sentences per question, far below the default bound).
//!
//! A cache may have a persistent second level ([`VectorBacking`], e.g. the store's own
//! content-keyed vector cache through [`StoreVectors`], keyed by [`bib_embed::store_key`] — the
//! key ingest writes sentence vectors under), so a sentence embedded by one `bib ask`
//! process is not embedded again by the next.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bib_embed::{store_key, EmbedKind, Embedder};

use crate::error::RetrieveError;

type Key = (String, EmbedKind, String);

/// A persistent second level for [`EmbeddingCache`]: vectors by (model id, content key).
/// Failures are the backing's to swallow: a miss only costs an embedding.
pub trait VectorBacking: Send + Sync {
    /// Known vectors among `keys`.
    fn get(&self, model_id: &str, keys: &[String]) -> Vec<(String, Vec<f32>)>;
    /// Remember vectors.
    fn put(&self, model_id: &str, items: &[(String, Vec<f32>)]);
}

/// The store's content-keyed vector cache as a [`VectorBacking`].
pub struct StoreVectors(pub Arc<dyn bib_store::Store>);

impl std::fmt::Debug for StoreVectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StoreVectors")
            .field(&self.0.location())
            .finish()
    }
}

impl VectorBacking for StoreVectors {
    fn get(&self, model_id: &str, keys: &[String]) -> Vec<(String, Vec<f32>)> {
        self.0.cached_vectors(model_id, keys).unwrap_or_default()
    }
    fn put(&self, model_id: &str, items: &[(String, Vec<f32>)]) {
        let _ = self.0.cache_vectors(model_id, items);
    }
}

/// Thread-safe, bounded, content-keyed cache of embeddings.
pub struct EmbeddingCache {
    map: Mutex<HashMap<Key, Arc<[f32]>>>,
    capacity: usize,
    backing: Option<Arc<dyn VectorBacking>>,
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
            map: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            backing: None,
        }
    }

    /// Add a persistent second level.
    pub fn with_backing(mut self, backing: Arc<dyn VectorBacking>) -> Self {
        self.backing = Some(backing);
        self
    }

    /// Number of cached vectors.
    pub fn len(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vectors of `texts` already known (in memory, else in the persistent backing, which
    /// then fills memory), in order; `None` where neither has one. Never embeds. Linear in the
    /// number of texts (the ranking signals ask for a thousand sentences at once).
    pub fn cached(
        &self,
        model_id: &str,
        texts: &[&str],
        kind: EmbedKind,
    ) -> Result<Vec<Option<Arc<[f32]>>>, RetrieveError> {
        let key = |t: &str| (model_id.to_string(), kind, t.to_string());
        let mut out: Vec<Option<Arc<[f32]>>> = Vec::with_capacity(texts.len());
        // Each distinct missing text once, with every position it fills.
        let mut missing: Vec<&str> = Vec::new();
        let mut slots: HashMap<&str, Vec<usize>> = HashMap::new();
        {
            let map = self.map.lock().map_err(|_| poisoned())?;
            for (i, t) in texts.iter().enumerate() {
                let hit = map.get(&key(t)).cloned();
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
                let mut map = self.map.lock().map_err(|_| poisoned())?;
                for (t, k) in missing.iter().zip(&keys) {
                    if let Some(v) = found.get(k) {
                        let v: Arc<[f32]> = Arc::from(v.clone());
                        for &i in &slots[t] {
                            out[i] = Some(v.clone());
                        }
                        map.insert(key(t), v);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Embed `texts`, taking what is cached ([`Self::cached`]) and sending the rest
    /// (deduplicated) to the model in **one** batch. Returns one vector per input, in order.
    pub fn embed(
        &self,
        embedder: &dyn Embedder,
        texts: &[&str],
        kind: EmbedKind,
    ) -> Result<Vec<Arc<[f32]>>, RetrieveError> {
        let model = embedder.model_id().to_string();
        let key = |t: &str| (model.clone(), kind, t.to_string());
        let mut out = self.cached(&model, texts, kind)?;
        let mut missing: Vec<&str> = Vec::new();
        let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for (slot, t) in out.iter().zip(texts) {
            if slot.is_none() && seen.insert(t) {
                missing.push(t);
            }
        }
        if !missing.is_empty() {
            let vecs = embedder.embed(&missing, kind)?;
            if vecs.len() != missing.len() {
                return Err(RetrieveError::EmbedCount {
                    expected: missing.len(),
                    got: vecs.len(),
                });
            }
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
                let items: Vec<(String, Vec<f32>)> = fresh
                    .iter()
                    .map(|(t, v)| (store_key(t, kind), v.to_vec()))
                    .collect();
                b.put(&model, &items);
            }
            let mut map = self.map.lock().map_err(|_| poisoned())?;
            if map.len() + fresh.len() > self.capacity {
                map.clear();
            }
            for (t, v) in fresh {
                map.insert(key(t), v);
            }
        }
        Ok(out
            .into_iter()
            .map(|v| v.unwrap_or_else(|| Arc::from(Vec::new())))
            .collect())
    }
}

impl EmbeddingCache {
    /// Remember vectors computed elsewhere (a benchmark's cached corpus), under the keys
    /// [`Self::embed`] looks up: `(model, kind, text)`.
    pub fn insert(&self, model_id: &str, kind: EmbedKind, items: Vec<(String, Vec<f32>)>) {
        let Ok(mut map) = self.map.lock() else { return };
        if map.len() + items.len() > self.capacity {
            map.clear();
        }
        for (t, v) in items {
            map.insert((model_id.to_string(), kind, t), Arc::from(v));
        }
    }
}

fn poisoned() -> RetrieveError {
    RetrieveError::Index("embedding cache lock poisoned".into())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bib_embed::EmbedError;
    use bib_text::tokens::{EstimateCounter, TokenCounter};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A deterministic fake model: a bag-of-words hash embedding over `dims` buckets, so texts
    /// sharing words are similar. Counts calls and texts embedded.
    #[derive(Debug, Default)]
    pub struct FakeEmbedder {
        pub calls: AtomicUsize,
        pub texts: AtomicUsize,
    }

    impl FakeEmbedder {
        pub const DIMS: usize = 64;
        /// The bag of `text`'s words under the original term function (`V1`), so the fake
        /// model's geometry does not move when the product's term function does.
        pub fn vector(text: &str) -> Vec<f32> {
            let mut v = vec![0.0f32; Self::DIMS];
            for w in bib_text::terms::terms_with(text, &bib_text::terms::TermConfig::V1) {
                let h = w.bytes().fold(2166136261u32, |h, b| {
                    (h ^ u32::from(b)).wrapping_mul(16777619)
                });
                v[h as usize % Self::DIMS] += 1.0;
            }
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            if n > 0.0 {
                v.iter_mut().for_each(|x| *x /= n);
            }
            v
        }
    }

    impl Embedder for FakeEmbedder {
        fn model_id(&self) -> &str {
            "fake-bow"
        }
        fn dimensions(&self) -> usize {
            Self::DIMS
        }
        fn max_input_tokens(&self) -> usize {
            512
        }
        fn tokenizer(&self) -> &dyn TokenCounter {
            &EstimateCounter
        }
        fn embed(&self, texts: &[&str], _kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.texts.fetch_add(texts.len(), Ordering::SeqCst);
            Ok(texts.iter().map(|t| Self::vector(t)).collect())
        }
    }

    #[test]
    fn embeds_missing_once_in_one_batch() {
        let e = FakeEmbedder::default();
        let c = EmbeddingCache::default();
        let v = c
            .embed(&e, &["a b", "c d", "a b"], EmbedKind::Passage)
            .unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0], v[2]);
        assert_eq!(e.calls.load(Ordering::SeqCst), 1);
        assert_eq!(e.texts.load(Ordering::SeqCst), 2);
        let _ = c.embed(&e, &["c d", "e f"], EmbedKind::Passage).unwrap();
        assert_eq!(e.calls.load(Ordering::SeqCst), 2);
        assert_eq!(e.texts.load(Ordering::SeqCst), 3);
        // All cached: no call.
        let _ = c.embed(&e, &["a b", "e f"], EmbedKind::Passage).unwrap();
        assert_eq!(e.calls.load(Ordering::SeqCst), 2);
        // Another kind is another key.
        let _ = c.embed(&e, &["a b"], EmbedKind::Query).unwrap();
        assert_eq!(e.calls.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn persistent_backing_survives_a_new_cache() {
        let store: Arc<dyn bib_store::Store> =
            Arc::new(bib_store::SqliteStore::open_in_memory().unwrap());
        let e = FakeEmbedder::default();
        let c1 = EmbeddingCache::default().with_backing(Arc::new(StoreVectors(store.clone())));
        let v1 = c1
            .embed(&e, &["uno dos", "tres"], EmbedKind::Passage)
            .unwrap();
        assert_eq!(e.texts.load(Ordering::SeqCst), 2);
        // A new process-level cache over the same store embeds nothing.
        let c2 = EmbeddingCache::default().with_backing(Arc::new(StoreVectors(store)));
        let v2 = c2
            .embed(&e, &["tres", "uno dos", "cuatro"], EmbedKind::Passage)
            .unwrap();
        assert_eq!(
            e.texts.load(Ordering::SeqCst),
            3,
            "only the new text is embedded"
        );
        assert_eq!(v2[0], v1[1]);
        assert_eq!(v2[1], v1[0]);
        assert_ne!(
            store_key("x", EmbedKind::Query),
            store_key("x", EmbedKind::Passage)
        );
    }

    #[test]
    fn bounded() {
        let e = FakeEmbedder::default();
        let c = EmbeddingCache::with_capacity(2);
        c.embed(&e, &["a", "b"], EmbedKind::Passage).unwrap();
        c.embed(&e, &["c"], EmbedKind::Passage).unwrap();
        assert!(c.len() <= 2);
    }
}
