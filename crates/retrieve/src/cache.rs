//! The store as the persistent second level of the one embedding cache
//! ([`bib_embed::EmbeddingCache`]): [`StoreVectors`] reads and writes the store's
//! content-keyed vector table under [`bib_embed::store_key`] — the key ingest writes sentence
//! vectors under — so a sentence embedded by one `bib ask` process is not embedded again by
//! the next.

use std::sync::Arc;

pub use bib_embed::{EmbeddingCache, VectorBacking};

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bib_embed::{store_key, EmbedKind};

    pub use bib_embed::fake::FakeEmbedder;

    /// Length of [`bag_of_words_vector`]s.
    pub const BAG_DIMS: usize = 64;

    /// A deterministic fake model: a bag-of-words hash embedding over [`BAG_DIMS`] buckets, so
    /// texts sharing words are similar. Counts calls and texts embedded.
    pub fn bag_of_words() -> FakeEmbedder {
        FakeEmbedder::new("fake-bow", BAG_DIMS, |t, _| bag_of_words_vector(t))
    }

    /// The bag of `text`'s words under the original term function (`V1`), so the fake model's
    /// geometry does not move when the product's term function does.
    pub fn bag_of_words_vector(text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; BAG_DIMS];
        for w in bib_text::terms::terms_with(text, &bib_text::terms::TermConfig::V1) {
            let h = w.bytes().fold(2166136261u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(16777619)
            });
            v[h as usize % BAG_DIMS] += 1.0;
        }
        bib_text::vectors::unit(&v)
    }

    #[test]
    fn embeds_missing_once_in_one_batch() {
        let e = bag_of_words();
        let c = EmbeddingCache::default();
        let v = c
            .embed(&e, &["a b", "c d", "a b"], EmbedKind::Passage)
            .unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0], v[2]);
        assert_eq!(e.calls(), 1);
        assert_eq!(e.texts_embedded(), 2);
        let _ = c.embed(&e, &["c d", "e f"], EmbedKind::Passage).unwrap();
        assert_eq!(e.calls(), 2);
        assert_eq!(e.texts_embedded(), 3);
        // All cached: no call.
        let _ = c.embed(&e, &["a b", "e f"], EmbedKind::Passage).unwrap();
        assert_eq!(e.calls(), 2);
        // Another kind is another key.
        let _ = c.embed(&e, &["a b"], EmbedKind::Query).unwrap();
        assert_eq!(e.calls(), 3);
    }

    #[test]
    fn persistent_backing_survives_a_new_cache() {
        let store: Arc<dyn bib_store::Store> =
            Arc::new(bib_store::SqliteStore::open_in_memory().unwrap());
        let e = bag_of_words();
        let c1 = EmbeddingCache::default().with_backing(Arc::new(StoreVectors(store.clone())));
        let v1 = c1
            .embed(&e, &["uno dos", "tres"], EmbedKind::Passage)
            .unwrap();
        assert_eq!(e.texts_embedded(), 2);
        // A new process-level cache over the same store embeds nothing.
        let c2 = EmbeddingCache::default().with_backing(Arc::new(StoreVectors(store)));
        let v2 = c2
            .embed(&e, &["tres", "uno dos", "cuatro"], EmbedKind::Passage)
            .unwrap();
        assert_eq!(e.texts_embedded(), 3, "only the new text is embedded");
        assert_eq!(v2[0], v1[1]);
        assert_eq!(v2[1], v1[0]);
        assert_ne!(
            store_key("x", EmbedKind::Query),
            store_key("x", EmbedKind::Passage)
        );
    }

    #[test]
    fn bounded() {
        let e = bag_of_words();
        let c = EmbeddingCache::with_capacity(2);
        c.embed(&e, &["a", "b"], EmbedKind::Passage).unwrap();
        c.embed(&e, &["c"], EmbedKind::Passage).unwrap();
        assert!(c.len() <= 2);
    }
}
