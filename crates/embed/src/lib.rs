//! # bib-embed — sentence embeddings behind one trait
//!
//! [`Embedder`] is the seam: texts in, unit vectors out. Implementations live in their own
//! modules (the default pure-Rust USE multilingual v3, an OpenAI-compatible HTTP client, …).
//! Batching by padded tokens and the content-keyed cache are here too, because every caller
//! (ingest, trimming, the history packer) needs both.

use bib_text::tokens::TokenCounter;

pub mod batch;
pub mod cache;
pub mod e5;
pub mod fake;
mod mapped;
pub mod models;
pub mod npy;
pub mod openai;
pub mod ops;
pub mod qgemm;
pub mod spm;
pub mod use_m3;

pub use batch::{embed_in_batches, split_batches, BatchPlan};
pub use cache::{
    content_key, store_key, CachedEmbedder, ContentKey, EmbeddingCache, VectorBacking,
};
pub use e5::E5Small;
pub use models::{model_dir, DEFAULT_MODEL};
pub use openai::{OpenAiConfig, OpenAiEmbedder};
pub use use_m3::UseM3;

/// Load the installed model `id` (one of [`models::MODELS`]). The product reaches it through
/// `bib_app::model::load_embedder`, the one place a model id (installed or `openai:<name>`,
/// the endpoint of [`openai`]) and the settings become an [`Embedder`].
pub fn load_installed(id: &str) -> Result<Box<dyn Embedder>, EmbedError> {
    match id {
        "use-m3" => Ok(Box::new(UseM3::load_default()?)),
        "e5-small" => Ok(Box::new(E5Small::load_default()?)),
        other => {
            let known: Vec<&str> = models::MODELS.iter().map(|m| m.id).collect();
            Err(EmbedError::Other(format!(
                "unknown embedding model `{other}` (known: {})",
                known.join(", ")
            )))
        }
    }
}

/// Whether a text is a search query or a passage being indexed. Symmetric models ignore it;
/// asymmetric ones (e5: `query: ` / `passage: `) prefix accordingly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmbedKind {
    Query,
    Passage,
}

/// Any other error, kept as the source of an [`EmbedError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors from any embedding backend.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error(
        "model `{model}` is not installed (looked in {path}); run `bib model install {model}`"
    )]
    NotInstalled { model: String, path: String },
    #[error("model file {path} is invalid: {reason}")]
    BadModelFile { path: String, reason: String },
    /// The embedding endpoint answered something this client cannot use.
    #[error("embedding endpoint error: {0}")]
    Endpoint(String),
    /// A step failed because of another error, kept as the source: a file, an archive, a
    /// process, the network. `context` says what was being done.
    #[error("{context}")]
    Failed {
        context: String,
        #[source]
        source: BoxError,
    },
    #[error("{0}")]
    Other(String),
}

impl EmbedError {
    /// `context` failed because of `source`.
    pub fn failed(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        EmbedError::Failed {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// A sentence-embedding model.
pub trait Embedder: Send + Sync {
    /// Stable identifier, used as part of every cache key (e.g. `use-m3`).
    fn model_id(&self) -> &str;
    /// Length of every returned vector.
    fn dimensions(&self) -> usize;
    /// Longest input, in the model's own tokens, before truncation.
    fn max_input_tokens(&self) -> usize;
    /// The model's tokenizer, for exact token counts.
    fn tokenizer(&self) -> &dyn TokenCounter;
    /// Embed a batch. Returns one L2-normalised vector per input, in order.
    fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError>;
}

macro_rules! forward_embedder {
    ($($ptr:ident)::+) => {
        impl<E: Embedder + ?Sized> Embedder for $($ptr)::+<E> {
            fn model_id(&self) -> &str {
                (**self).model_id()
            }
            fn dimensions(&self) -> usize {
                (**self).dimensions()
            }
            fn max_input_tokens(&self) -> usize {
                (**self).max_input_tokens()
            }
            fn tokenizer(&self) -> &dyn TokenCounter {
                (**self).tokenizer()
            }
            fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
                (**self).embed(texts, kind)
            }
        }
    };
}

// Boxed and shared embedders are embedders too (so wrappers such as `CachedEmbedder` take them).
forward_embedder!(Box);
forward_embedder!(std::sync::Arc);

/// Cosine similarity of two vectors (0 when either is empty or their lengths differ).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    use bib_text::vectors::dot;
    cosine_given_norms(a, dot(a, a), b, dot(b, b))
}

/// [`cosine`] of `a` and `b` whose squared norms `na` and `nb` (each one's `dot` with itself)
/// are already known: one vector compared with many computes its own once.
pub fn cosine_given_norms(a: &[f32], na: f32, b: &[f32], nb: f32) -> f32 {
    if a.len() != b.len() || a.is_empty() || na == 0.0 || nb == 0.0 {
        0.0
    } else {
        bib_text::vectors::dot(a, b) / (na.sqrt() * nb.sqrt())
    }
}
