//! The embedding model of a knowledge base: which one its chunks were embedded with, and
//! loading it — the one way `bib ask`, `bib eval`, the servers and the benchmarks get it.

use bib_embed::{EmbedError, Embedder};
use bib_store::{Store, StoreError};

/// Why the model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The id is not one this build knows.
    #[error("the knowledge base was embedded with `{0}`, which this build cannot load")]
    Unknown(String),
    /// A known model that failed to load (not installed, a bad file).
    #[error(transparent)]
    Load(#[from] EmbedError),
}

/// Load the embedding model `model_id` (the one a store was built with) from the installed
/// models.
pub fn load_embedder(model_id: &str) -> Result<Box<dyn Embedder>, ModelError> {
    if bib_embed::models::spec(model_id).is_none() {
        return Err(ModelError::Unknown(model_id.to_string()));
    }
    Ok(bib_embed::load_installed(model_id)?)
}

/// The model the knowledge base's chunks were embedded with (the default when none is
/// recorded).
pub fn store_model(store: &dyn Store) -> Result<String, StoreError> {
    Ok(store
        .embedding_model()?
        .unwrap_or_else(|| bib_embed::DEFAULT_MODEL.to_string()))
}
