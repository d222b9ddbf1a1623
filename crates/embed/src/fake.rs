//! An embedder without a model, for tests: vectors from a function of the text, every call and
//! text recorded, an optional delay per call and a switch that makes calls fail. The crates'
//! tests build their fakes from it instead of each implementing [`Embedder`] again.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bib_text::tokens::{EstimateCounter, TokenCounter};

use crate::{EmbedError, EmbedKind, Embedder};

/// How a [`FakeEmbedder`] turns a text into a vector.
pub type VectorFn = Box<dyn Fn(&str, EmbedKind) -> Vec<f32> + Send + Sync>;

/// A model stand-in: `vector(text, kind)` for each text, with the token estimate as its
/// tokenizer and 512 tokens as its input limit.
pub struct FakeEmbedder {
    model_id: String,
    dimensions: usize,
    vector: VectorFn,
    delay: Duration,
    failing: AtomicBool,
    calls: AtomicUsize,
    texts: Mutex<Vec<String>>,
}

impl FakeEmbedder {
    /// A fake named `model_id` whose vectors (of length `dimensions`) `vector` computes.
    pub fn new(
        model_id: &str,
        dimensions: usize,
        vector: impl Fn(&str, EmbedKind) -> Vec<f32> + Send + Sync + 'static,
    ) -> Self {
        Self {
            model_id: model_id.to_string(),
            dimensions,
            vector: Box::new(vector),
            delay: Duration::ZERO,
            failing: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
            texts: Mutex::new(Vec::new()),
        }
    }

    /// Sleep this long in every call (a slow model, for cancellation tests).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Make every later call fail (`true`) or succeed again (`false`).
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// Calls made, counted when they start (failed ones are not counted).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// How many texts were embedded since the start or the last [`FakeEmbedder::reset`].
    pub fn texts_embedded(&self) -> usize {
        self.texts.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The texts embedded since the start or the last [`FakeEmbedder::reset`], in order.
    pub fn embedded_texts(&self) -> Vec<String> {
        self.texts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Forget the texts embedded so far (the call count stays).
    pub fn reset(&self) {
        self.texts.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

impl Embedder for FakeEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }
    fn dimensions(&self) -> usize {
        self.dimensions
    }
    fn max_input_tokens(&self) -> usize {
        512
    }
    fn tokenizer(&self) -> &dyn TokenCounter {
        &EstimateCounter
    }
    fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(EmbedError::Other("injected failure".into()));
        }
        // Counted on entry: a cancelled caller sees the call it started, even mid-sleep.
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        self.texts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(texts.iter().map(|t| t.to_string()));
        Ok(texts.iter().map(|t| (self.vector)(t, kind)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_calls_and_texts_and_fails_on_demand() {
        let e = FakeEmbedder::new("fake-len", 1, |t, _| vec![t.len() as f32]);
        let v = e.embed(&["ab", "abc"], EmbedKind::Passage).unwrap();
        assert_eq!(v, vec![vec![2.0], vec![3.0]]);
        assert_eq!((e.calls(), e.texts_embedded()), (1, 2));
        assert_eq!(e.embedded_texts(), ["ab", "abc"]);
        e.set_failing(true);
        assert!(e.embed(&["x"], EmbedKind::Query).is_err());
        assert_eq!(e.calls(), 1, "a failed call is not counted");
        e.set_failing(false);
        e.reset();
        assert_eq!(e.texts_embedded(), 0);
        e.embed(&["x"], EmbedKind::Query).unwrap();
        assert_eq!((e.calls(), e.embedded_texts()), (2, vec!["x".to_string()]));
    }
}
