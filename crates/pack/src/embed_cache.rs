//! Embeddings cached by content: a line seen once is never encoded again in the session,
//! however many turns later it reappears. Without it the cost grows with the square of the
//! turns — the v1 failure of recomputing everything on every message.

use std::collections::VecDeque;
use std::sync::Arc;

use bib_embed::{EmbedError, EmbedKind, Embedder};
use rustc_hash::{FxHashMap, FxHashSet};

/// A bounded, insertion-ordered (FIFO eviction) cache of vectors keyed by (kind, text),
/// tied to one model: a different `model_id` empties it.
#[derive(Debug)]
pub struct EmbedCache {
    max: usize,
    model: String,
    map: FxHashMap<(EmbedKind, String), Arc<[f32]>>,
    order: VecDeque<(EmbedKind, String)>,
    /// Texts encoded so far (misses), for reporting.
    pub encoded: usize,
}

impl Default for EmbedCache {
    fn default() -> Self {
        Self::new(4000)
    }
}

impl EmbedCache {
    /// A cache holding at most `max` vectors (the reference keeps 4,000).
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            model: String::new(),
            map: FxHashMap::default(),
            order: VecDeque::new(),
            encoded: 0,
        }
    }

    /// Number of cached vectors.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Vectors for `texts`, encoding only the ones not seen before (in one batch).
    pub fn encode(
        &mut self,
        embedder: &dyn Embedder,
        texts: &[&str],
        kind: EmbedKind,
    ) -> Result<Vec<Arc<[f32]>>, EmbedError> {
        if embedder.model_id() != self.model {
            self.map.clear();
            self.order.clear();
            self.model = embedder.model_id().to_owned();
        }
        let mut seen = FxHashSet::default();
        let miss: Vec<&str> = texts
            .iter()
            .copied()
            .filter(|t| !self.map.contains_key(&(kind, (*t).to_owned())) && seen.insert(*t))
            .collect();
        let mut fresh: FxHashMap<&str, Arc<[f32]>> = FxHashMap::default();
        if !miss.is_empty() {
            let vecs = embedder.embed(&miss, kind)?;
            if vecs.len() != miss.len() {
                return Err(EmbedError::Other(format!(
                    "embedder returned {} vectors for {} texts",
                    vecs.len(),
                    miss.len()
                )));
            }
            self.encoded += miss.len();
            for (t, v) in miss.iter().zip(vecs) {
                let v: Arc<[f32]> = v.into();
                fresh.insert(t, v.clone());
                self.map.insert((kind, (*t).to_owned()), v);
                self.order.push_back((kind, (*t).to_owned()));
            }
            while self.map.len() > self.max {
                match self.order.pop_front() {
                    Some(k) => {
                        self.map.remove(&k);
                    }
                    None => break,
                }
            }
        }
        texts
            .iter()
            .map(|t| {
                fresh
                    .get(t)
                    .cloned()
                    .or_else(|| self.map.get(&(kind, (*t).to_owned())).cloned())
                    .ok_or_else(|| EmbedError::Other("embedding cache lost a vector".into()))
            })
            .collect()
    }
}
