//! A content-keyed embedding cache, so a sentence is embedded once per process.
//!
//! Keys are (model id, kind, text): the same sentence under another model or as a query is a
//! different vector. The cache is bounded; when full it is emptied (simple and predictable —
//! trimming touches a few hundred sentences per question, far below the default bound).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bib_embed::{EmbedKind, Embedder};

use crate::error::RetrieveError;

type Key = (String, EmbedKind, String);

/// Thread-safe, bounded, content-keyed cache of embeddings.
#[derive(Debug)]
pub struct EmbeddingCache {
    map: Mutex<HashMap<Key, Arc<[f32]>>>,
    capacity: usize,
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
        }
    }

    /// Number of cached vectors.
    pub fn len(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Embed `texts`, taking what is cached and sending the rest (deduplicated) to the model
    /// in **one** batch. Returns one vector per input, in order.
    pub fn embed(
        &self,
        embedder: &dyn Embedder,
        texts: &[&str],
        kind: EmbedKind,
    ) -> Result<Vec<Arc<[f32]>>, RetrieveError> {
        let model = embedder.model_id().to_string();
        let key = |t: &str| (model.clone(), kind, t.to_string());
        let mut out: Vec<Option<Arc<[f32]>>> = Vec::with_capacity(texts.len());
        let mut missing: Vec<&str> = Vec::new();
        {
            let map = self.map.lock().map_err(|_| poisoned())?;
            for t in texts {
                let hit = map.get(&key(t)).cloned();
                if hit.is_none() && !missing.contains(t) {
                    missing.push(t);
                }
                out.push(hit);
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
        pub fn vector(text: &str) -> Vec<f32> {
            let mut v = vec![0.0f32; Self::DIMS];
            for w in bib_text::terms::terms(text) {
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
    fn bounded() {
        let e = FakeEmbedder::default();
        let c = EmbeddingCache::with_capacity(2);
        c.embed(&e, &["a", "b"], EmbedKind::Passage).unwrap();
        c.embed(&e, &["c"], EmbedKind::Passage).unwrap();
        assert!(c.len() <= 2);
    }
}
