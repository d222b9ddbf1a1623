//! The embedding model of a knowledge base: which one its chunks were embedded with, and
//! loading it — the one way `bib ingest`, `bib ask`, `bib eval`, `bib embed`, the servers and
//! the benchmarks get it.
//!
//! A model id is either an installed model (`use-m3`, `e5-small`: [`bib_embed::models::MODELS`])
//! or `openai:<name>` (`openai:<name>@<width>` when a width was asked for): model `<name>` of
//! the OpenAI-compatible endpoint of the `[embed]` settings. A knowledge base records the id it
//! was built with, so whatever loads it later gets the same model, endpoint included.

use bib_embed::openai::{OpenAiConfig, OpenAiEmbedder, ID_PREFIX};
use bib_embed::{EmbedError, Embedder};
use bib_store::{Store, StoreError};

use crate::settings::EmbedSettings;

/// Why the model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The id is not one this build knows.
    #[error(
        "unknown embedding model `{0}`: this build knows {known} and openai:<name> (a model of the OpenAI-compatible endpoint of [embed] base_url)",
        known = installed_ids().join(", ")
    )]
    Unknown(String),
    /// `openai:` with nothing after it.
    #[error(
        "embedding model `{0}` names no model: write openai:<name>, e.g. openai:nomic-embed-text"
    )]
    NoName(String),
    /// An endpoint model, but no endpoint configured.
    #[error(
        "embedding model `{0}` is served by an OpenAI-compatible endpoint, and none is configured: set BIB_EMBED_BASE_URL (or [embed] base_url in bib.toml), e.g. http://localhost:11434 for Ollama"
    )]
    NoEndpoint(String),
    /// A known model that failed to load (not installed, a bad file, an endpoint that does
    /// not answer).
    #[error(transparent)]
    Load(#[from] EmbedError),
}

/// The installed models' ids.
fn installed_ids() -> Vec<&'static str> {
    bib_embed::models::MODELS.iter().map(|m| m.id).collect()
}

/// What a model id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec<'a> {
    /// An installed model (`use-m3`, `e5-small`).
    Installed(&'a str),
    /// Model `name` of the OpenAI-compatible endpoint, with the width in the id, if any.
    Endpoint {
        name: &'a str,
        dimensions: Option<usize>,
    },
}

impl<'a> ModelSpec<'a> {
    /// Parse a model id; an id that is neither installed nor `openai:<name>` is refused,
    /// naming the known ones.
    pub fn parse(id: &'a str) -> Result<Self, ModelError> {
        if let Some(rest) = id.strip_prefix(ID_PREFIX) {
            // `@<width>` ends the id only when it is a number (a name may hold an `@`).
            let (name, dimensions) = match rest.rsplit_once('@') {
                Some((name, w)) => match w.parse::<usize>() {
                    Ok(d) if d > 0 => (name, Some(d)),
                    _ => (rest, None),
                },
                None => (rest, None),
            };
            if name.trim().is_empty() {
                return Err(ModelError::NoName(id.to_string()));
            }
            return Ok(ModelSpec::Endpoint { name, dimensions });
        }
        if bib_embed::models::spec(id).is_some() {
            return Ok(ModelSpec::Installed(id));
        }
        Err(ModelError::Unknown(id.to_string()))
    }
}

/// The id to build a knowledge base with when `id` is asked for (`bib ingest --model`,
/// `[ingest] model`): an `openai:<name>` id without a width gets `[embed] dimensions`, if set
/// (`openai:<name>@<width>`). Loading reads the width from the id alone, so a knowledge base
/// keeps the width it was built with whatever `dimensions` says later.
pub fn requested_model(id: &str, embed: &EmbedSettings) -> String {
    match (ModelSpec::parse(id), embed.dimensions) {
        (
            Ok(ModelSpec::Endpoint {
                name,
                dimensions: None,
            }),
            Some(d),
        ) => format!("{ID_PREFIX}{name}@{d}"),
        _ => id.to_string(),
    }
}

/// The client settings of endpoint model `name` (the id `id`, whose width is `dimensions`):
/// the `[embed]` endpoint and key.
pub fn endpoint_config(
    id: &str,
    name: &str,
    dimensions: Option<usize>,
    embed: &EmbedSettings,
) -> Result<OpenAiConfig, ModelError> {
    let base_url = embed
        .base_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ModelError::NoEndpoint(id.to_string()))?;
    Ok(OpenAiConfig {
        base_url: base_url.to_string(),
        model: name.to_string(),
        api_key: embed.api_key.clone().filter(|k| !k.trim().is_empty()),
        dimensions,
        ..OpenAiConfig::default()
    })
}

/// Load the embedding model `model_id` (the one a store was built with, or the one to build
/// it with): an installed model, or `openai:<name>` of the `[embed]` endpoint. An endpoint is
/// asked for one embedding first, so a load fails — naming the URL — when it does not answer,
/// before any work depends on it.
pub fn load_embedder(
    model_id: &str,
    embed: &EmbedSettings,
) -> Result<Box<dyn Embedder>, ModelError> {
    match ModelSpec::parse(model_id)? {
        ModelSpec::Installed(id) => Ok(bib_embed::load_installed(id)?),
        ModelSpec::Endpoint { name, dimensions } => {
            let cfg = endpoint_config(model_id, name, dimensions, embed)?;
            let embedder = OpenAiEmbedder::new(cfg);
            embedder.probe()?;
            Ok(Box::new(embedder))
        }
    }
}

/// The model the knowledge base's chunks were embedded with (the default when none is
/// recorded).
pub fn store_model(store: &dyn Store) -> Result<String, StoreError> {
    Ok(store
        .embedding_model()?
        .unwrap_or_else(|| bib_embed::DEFAULT_MODEL.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_an_installed_model_or_an_endpoint_model() {
        assert_eq!(
            ModelSpec::parse("use-m3").unwrap(),
            ModelSpec::Installed("use-m3")
        );
        assert_eq!(
            ModelSpec::parse("e5-small").unwrap(),
            ModelSpec::Installed("e5-small")
        );
        let endpoint = |name, dimensions| ModelSpec::Endpoint { name, dimensions };
        assert_eq!(
            ModelSpec::parse("openai:nomic-embed-text").unwrap(),
            endpoint("nomic-embed-text", None)
        );
        // Ollama's tags keep their colon; the width an embedder records comes back.
        assert_eq!(
            ModelSpec::parse("openai:nomic-embed-text:latest").unwrap(),
            endpoint("nomic-embed-text:latest", None)
        );
        assert_eq!(
            ModelSpec::parse("openai:text-embedding-3-small@256").unwrap(),
            endpoint("text-embedding-3-small", Some(256))
        );
        assert_eq!(
            ModelSpec::parse("openai:org@name").unwrap(),
            endpoint("org@name", None)
        );
        for bad in ["openai:", "openai: ", "openai:@256"] {
            assert!(
                matches!(ModelSpec::parse(bad), Err(ModelError::NoName(_))),
                "{bad}"
            );
        }
        let e = ModelSpec::parse("bge-m3").unwrap_err();
        let shown = e.to_string();
        assert!(matches!(e, ModelError::Unknown(_)), "{shown}");
        for known in ["`bge-m3`", "use-m3", "e5-small", "openai:<name>"] {
            assert!(shown.contains(known), "{shown}");
        }
    }

    #[test]
    fn the_id_and_the_embed_settings_make_the_client() {
        let embed = EmbedSettings {
            base_url: Some("http://127.0.0.1:11434".into()),
            api_key: Some("k".into()),
            dimensions: Some(768),
            model: None,
        };
        let cfg = endpoint_config("openai:m", "m", None, &embed).unwrap();
        assert_eq!(cfg.endpoint(), "http://127.0.0.1:11434/v1/embeddings");
        // The width is the id's alone: a knowledge base keeps the width it was built with.
        assert_eq!(
            (cfg.model.as_str(), cfg.api_key.as_deref(), cfg.dimensions),
            ("m", Some("k"), None)
        );
        let cfg = endpoint_config("openai:m@256", "m", Some(256), &embed).unwrap();
        assert_eq!(cfg.dimensions, Some(256));
        assert_eq!(OpenAiEmbedder::new(cfg).model_id(), "openai:m@256");
        let cfg = endpoint_config(
            "openai:m",
            "m",
            None,
            &EmbedSettings {
                base_url: Some("http://h".into()),
                ..EmbedSettings::default()
            },
        )
        .unwrap();
        assert_eq!((cfg.api_key.as_deref(), cfg.dimensions), (None, None));
        assert_eq!(OpenAiEmbedder::new(cfg).model_id(), "openai:m");
    }

    #[test]
    fn a_new_build_records_the_width_it_asks_for() {
        let wide = EmbedSettings {
            dimensions: Some(768),
            ..EmbedSettings::default()
        };
        assert_eq!(requested_model("openai:m", &wide), "openai:m@768");
        assert_eq!(requested_model("openai:m@256", &wide), "openai:m@256");
        assert_eq!(requested_model("e5-small", &wide), "e5-small");
        assert_eq!(requested_model("bogus", &wide), "bogus");
        let own = EmbedSettings::default();
        assert_eq!(requested_model("openai:m", &own), "openai:m");
        let Ok(ModelSpec::Endpoint { dimensions, .. }) =
            ModelSpec::parse(&requested_model("openai:m", &wide))
        else {
            panic!("an endpoint model");
        };
        assert_eq!(dimensions, Some(768));
    }

    #[test]
    fn an_endpoint_model_without_an_endpoint_says_what_to_set() {
        for base_url in [None, Some(" ".to_string())] {
            let embed = EmbedSettings {
                base_url,
                ..EmbedSettings::default()
            };
            let Err(e) = load_embedder("openai:nomic-embed-text", &embed) else {
                panic!("loaded without an endpoint");
            };
            let shown = e.to_string();
            assert!(matches!(e, ModelError::NoEndpoint(_)), "{shown}");
            assert!(
                shown.contains("openai:nomic-embed-text")
                    && shown.contains("BIB_EMBED_BASE_URL")
                    && shown.contains("[embed] base_url"),
                "{shown}"
            );
        }
    }

    #[test]
    fn an_endpoint_that_does_not_answer_fails_the_load_naming_its_url() {
        // A port nobody listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let embed = EmbedSettings {
            base_url: Some(format!("http://127.0.0.1:{port}")),
            ..EmbedSettings::default()
        };
        let Err(e) = load_embedder("openai:m", &embed) else {
            panic!("loaded from a port nobody listens on");
        };
        let chain = bib_store::error_chain(&e);
        assert!(
            chain.contains(&format!("http://127.0.0.1:{port}/v1/embeddings")),
            "{chain}"
        );
    }
}
