//! Test helpers: a fake embedder (optionally slow, counting its calls) and a service over an
//! in-memory store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bib_embed::{EmbedError, EmbedKind, Embedder};
use bib_store::conformance::{fake_vector, sample_change};
use bib_store::{SqliteStore, Store};
use bib_text::tokens::{EstimateCounter, TokenCounter};

use crate::{Service, TokenCheck};

pub const TOKEN: &str = "unit-test-token-0123456789";

/// 16-d fake vectors (the conformance suite's), `delay` per call, calls counted.
pub struct FakeEmbedder {
    pub delay: Duration,
    pub calls: AtomicUsize,
}

impl FakeEmbedder {
    pub fn new(delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            delay,
            calls: AtomicUsize::new(0),
        })
    }
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Embedder for FakeEmbedder {
    fn model_id(&self) -> &str {
        "fake-16"
    }
    fn dimensions(&self) -> usize {
        16
    }
    fn max_input_tokens(&self) -> usize {
        512
    }
    fn tokenizer(&self) -> &dyn TokenCounter {
        &EstimateCounter
    }
    fn embed(&self, texts: &[&str], _kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        Ok(texts.iter().map(|t| fake_vector(t)).collect())
    }
}

/// A service over an in-memory store holding two documents, with `embedder`, writes enabled.
pub fn service(embedder: Option<Arc<FakeEmbedder>>) -> (Arc<Service>, Arc<SqliteStore>) {
    let store = Arc::new(SqliteStore::open_in_memory().unwrap());
    store
        .apply_document(&sample_change(
            "guides/restore.md",
            &[
                "Packages are restored from the local cache first, then from the feed.",
                "Clear the cache with the clear command.",
            ],
        ))
        .unwrap();
    store
        .apply_document(&sample_change(
            "guides/publish.md",
            &["Publish a package with an API key."],
        ))
        .unwrap();
    let embedder: Result<Arc<dyn Embedder>, String> = match embedder {
        Some(e) => Ok(e),
        None => Err("no model in this test".into()),
    };
    let svc = Service::new(
        store.clone() as Arc<dyn Store>,
        embedder,
        bib_app::Settings::default(),
        TokenCheck::new(Some(TOKEN), false).unwrap(),
    );
    (Arc::new(svc), store)
}
