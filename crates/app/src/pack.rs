//! Packing a history with a model of the user's choosing: which model `auto` means, and the
//! vectors a pack keeps between processes — the one way `bib pack` (and anything else that
//! packs outside a knowledge base) gets them.
//!
//! `bib pack` is called once per turn of a conversation, each time with the whole history.
//! Without a memory between calls it embeds every message again on every turn; with
//! [`pack_vectors_path`] (a bounded [`VectorFile`] in the user cache) it embeds only what is new.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bib_embed::{CachedEmbedder, Embedder, EmbeddingCache, VectorBacking};
use bib_pack::{Message, PackOptions, Packed};
use bib_store::VectorFile;

use crate::settings::EmbedSettings;

/// The model id that lets [`pack_model`] choose.
pub const AUTO_MODEL: &str = "auto";

/// The installed model `auto` prefers: it finds more of what a history says in other words
/// and in more languages (probe set, 10 seeds at 1,500 tokens: 91.3 % against 88.0 %;
/// Ukrainian 77.0 % against 61.9 %; LoCoMo 84.7 % against 83.3 %; BENCHMARKS.md).
pub const PREFERRED_PACK_MODEL: &str = "e5-small";

/// Most vectors the file of [`pack_vectors_path`] keeps (~75 MiB of 384-wide vectors): the lines of some
/// fifty long agent sessions.
pub const PACK_VECTORS_CAPACITY: usize = 50_000;

/// The model id a pack asked for `requested` uses: `auto` is [`PREFERRED_PACK_MODEL`] when it
/// is installed, else the default model; any other id is itself.
pub fn pack_model(requested: &str) -> String {
    if requested != AUTO_MODEL {
        return requested.to_string();
    }
    let preferred = bib_embed::models::spec(PREFERRED_PACK_MODEL).and_then(|spec| {
        let dir = bib_embed::models::installed_path(spec.id).ok()?;
        bib_embed::models::is_installed(spec, &dir).then_some(spec.id)
    });
    preferred.unwrap_or(bib_embed::DEFAULT_MODEL).to_string()
}

/// Where packs keep vectors between processes: `$BIB_PACK_VECTORS` (`off`: nowhere), else
/// `pack-vectors.sqlite` in the user cache ([`bib_embed::models::user_cache_dir`], where the
/// models are too).
pub fn pack_vectors_path() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os("BIB_PACK_VECTORS").filter(|v| !v.is_empty()) {
        return (v != "off").then(|| PathBuf::from(v));
    }
    Some(bib_embed::models::user_cache_dir()?.join("pack-vectors.sqlite"))
}

/// A [`VectorFile`] as the persistent level of an [`EmbeddingCache`]; its failures are misses.
#[derive(Debug)]
pub struct FileVectors(pub Arc<VectorFile>);

impl VectorBacking for FileVectors {
    fn get(&self, model_id: &str, keys: &[String]) -> Vec<(String, Vec<f32>)> {
        self.0.get(model_id, keys).unwrap_or_default()
    }
    fn put(&self, model_id: &str, items: &[(String, Vec<f32>)]) {
        let _ = self.0.put(model_id, items);
    }
}

/// What a pack of [`pack_history`] embeds with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackSemantics {
    /// Lexical only.
    Lexical,
    /// Hybrid, with this model id (`auto`, an installed model or `openai:<name>`).
    Hybrid(String),
}

/// Pack `history` into `budget` tokens. A hybrid pack resolves its model ([`pack_model`]),
/// embeds through the [`VectorFile`] at `vectors` when given (only what it lacks is embedded,
/// and kept there; a file that does not open only costs the time it would have saved), and
/// falls back to a lexical pack — saying why in `stats.semantic_error` — when the model cannot
/// be loaded.
pub fn pack_history(
    history: &[Message],
    budget: usize,
    opts: PackOptions,
    semantics: &PackSemantics,
    embed: &EmbedSettings,
    vectors: Option<&Path>,
) -> Packed {
    let PackSemantics::Hybrid(requested) = semantics else {
        return bib_pack::pack(history, budget, &opts);
    };
    let model = crate::model::requested_model(&pack_model(requested), embed);
    let cached = crate::model::load_embedder(&model, embed).map(|e| {
        let mut cache = EmbeddingCache::default();
        if let Some(file) = vectors.and_then(|p| VectorFile::open(p, PACK_VECTORS_CAPACITY).ok()) {
            cache = cache.with_backing(Arc::new(FileVectors(Arc::new(file))));
        }
        CachedEmbedder::new(e, cache)
    });
    let embedder = match &cached {
        Ok(e) => Ok(e as &dyn Embedder),
        Err(err) => Err(err.to_string()),
    };
    bib_pack::pack_hybrid_or_lexical(history, budget, &opts, embedder)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bib_embed::fake::FakeEmbedder;

    #[test]
    fn an_explicit_model_is_itself_and_auto_is_an_installed_model() {
        assert_eq!(pack_model("use-m3"), "use-m3");
        assert_eq!(pack_model("openai:nomic"), "openai:nomic");
        let auto = pack_model(AUTO_MODEL);
        assert!(
            auto == PREFERRED_PACK_MODEL || auto == bib_embed::DEFAULT_MODEL,
            "{auto}"
        );
    }

    #[test]
    fn a_file_backed_cache_embeds_a_text_once_across_caches() {
        let file = Arc::new(VectorFile::open_in_memory(100).unwrap());
        let model = Arc::new(FakeEmbedder::new("fake-3", 3, |t, _| {
            vec![t.len() as f32, 1.0, 0.0]
        }));
        let texts = ["the door code is 4817B", "hello"];
        for _ in 0..2 {
            // A fresh in-memory cache each time, as a new `bib pack` process has.
            let cache = EmbeddingCache::default().with_backing(Arc::new(FileVectors(file.clone())));
            let e = CachedEmbedder::new(model.clone(), cache);
            let v = bib_embed::Embedder::embed(&e, &texts, bib_embed::EmbedKind::Passage).unwrap();
            assert_eq!(v[0], vec![22.0, 1.0, 0.0]);
        }
        assert_eq!(
            model.texts_embedded(),
            2,
            "the second process embedded nothing"
        );
        assert_eq!(file.len().unwrap(), 2);
    }
}
