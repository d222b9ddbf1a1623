//! Test helpers: a fake model (optionally slow, counting its calls) and a service over an
//! in-memory store.

use std::sync::Arc;
use std::time::Duration;

use bib_embed::fake::FakeEmbedder;
use bib_embed::Embedder;
use bib_store::conformance::{fake_vector, sample_change};
use bib_store::{SqliteStore, Store};

use crate::{Service, TokenCheck};

pub const TOKEN: &str = "unit-test-token-0123456789";

/// A fake model with the conformance suite's 16-d vectors, `delay` per call, calls counted.
pub fn fake_embedder(delay: Duration) -> Arc<FakeEmbedder> {
    Arc::new(FakeEmbedder::new("fake-16", 16, |t, _| fake_vector(t)).with_delay(delay))
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
    let pack_embedder = embedder.as_ref().ok().cloned();
    let svc = Service::new(
        store.clone() as Arc<dyn Store>,
        embedder,
        bib_app::Settings::default(),
        TokenCheck::new(Some(TOKEN), false).unwrap(),
    )
    .with_pack_embedder(pack_embedder);
    (Arc::new(svc), store)
}
