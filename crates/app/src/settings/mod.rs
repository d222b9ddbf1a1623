//! The typed settings of bibliotecario, from `bib.toml`, the environment and the flags.
//!
//! [`Settings::resolve`] is the one place they are merged, strongest first: command-line
//! flags, then environment variables, then the config file, then the built-in defaults. The
//! config file is `--config FILE`, else `BIB_CONFIG`, else `./bib.toml` when it exists. Every
//! table rejects keys it does not know, naming the key, the file and the line. [`KEYS`]
//! documents every key once: its environment variable, its flags and what it does (`bib
//! config --defaults` prints them as a commented `bib.toml`; README.md lists them).

mod keys;

use std::fmt;
use std::path::{Path, PathBuf};

use bib_retrieve::retrieve::calibrated_alpha;
use bib_retrieve::trim::{calibrated_threshold, ASK_PROFILE};
use bib_retrieve::{
    Filter, Fusion, Mode, RerankOptions, RetrieveOptions, Signals, TrimOptions, TrimScorer,
};
use serde::{Deserialize, Serialize};

use crate::store::StoreSpec;
pub use keys::{defaults_toml, key_of_flag, EnvKind, Key, KEYS};

/// The config file read when neither `--config` nor `BIB_CONFIG` names one (only if it exists).
pub const DEFAULT_CONFIG_FILE: &str = "bib.toml";

/// Everything `bib.toml` can set. Missing keys take their defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// The knowledge base (`store = "…"`).
    pub store: StoreSpec,
    /// `[ask]`: retrieval, trimming and the query log (`bib ask`, `bib eval`, MCP/HTTP ask).
    pub ask: AskSettings,
    /// `[llm]`: the chat endpoint of `--synthesize`.
    pub llm: LlmSettings,
    /// `[embed]`: the embeddings endpoint of the `openai:<name>` models.
    pub embed: EmbedSettings,
    /// `[ingest]`: what `bib ingest` reads and how it batches.
    pub ingest: IngestSettings,
    /// `[serve]`: what `bib serve` allows besides its API.
    pub serve: ServeSettings,
}

/// `[serve]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeSettings {
    /// Origins (`scheme://host[:port]`) whose pages may read answers across origins: the
    /// help widget embedded in another site. None by default.
    pub allow_origins: Vec<String>,
}

/// `[ask]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AskSettings {
    pub top_k: usize,
    pub mode: Mode,
    pub candidates: usize,
    pub fusion: Fusion,
    /// BM25 weight of convex fusion; `None`: the value calibrated for the knowledge base's
    /// model ([`bib_retrieve::retrieve::calibrated_alpha`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fusion_alpha: Option<f64>,
    pub rrf_k: f64,
    /// Ranking signals over the fused list (`Signals`, written as its `key=value` spec).
    pub signals: Signals,
    pub trim: bool,
    /// The lowest sentence cosine trimming keeps; `None`: the value calibrated for the
    /// knowledge base's model ([`bib_retrieve::trim::calibrated_threshold`]).
    #[serde(
        serialize_with = "shortest_f32",
        skip_serializing_if = "Option::is_none"
    )]
    pub trim_threshold: Option<f32>,
    pub trim_window: usize,
    pub trim_min_sentences: usize,
    pub trim_lexical_top: usize,
    pub trim_scorer: TrimScorer,
    pub filters: Vec<String>,
    /// Synonym rules of the keyword search ([`bib_retrieve::synonyms`]).
    pub synonyms: Vec<String>,
    pub log: bool,
    pub fallback: ModelFallback,
    /// The LLM reranker after the signals, through the `[llm]` endpoint (off by default).
    pub rerank: bool,
    pub rerank_depth: usize,
    pub rerank_weight: f64,
    pub rerank_timeout_s: u64,
}

impl Default for AskSettings {
    /// Retrieval's own defaults and the calibrated trimming profile of `bib ask` (trimming off).
    fn default() -> Self {
        let r = RetrieveOptions::default();
        Self {
            top_k: r.top_k,
            mode: r.mode,
            candidates: r.candidates,
            fusion: r.fusion,
            fusion_alpha: None,
            rrf_k: r.rrf_k,
            signals: r.signals,
            trim: false,
            trim_threshold: None,
            trim_window: ASK_PROFILE.window,
            trim_min_sentences: ASK_PROFILE.min_sentences,
            trim_lexical_top: ASK_PROFILE.lexical_top,
            trim_scorer: ASK_PROFILE.scorer,
            filters: Vec::new(),
            synonyms: Vec::new(),
            log: true,
            fallback: ModelFallback::None,
            rerank: false,
            rerank_depth: RerankOptions::default().depth,
            rerank_weight: RerankOptions::default().weight,
            rerank_timeout_s: RerankOptions::default().timeout_s,
        }
    }
}

impl AskSettings {
    /// The trimming these settings describe (whether or not `trim` is on) for a knowledge
    /// base embedded with `model_id`: the threshold set, else the one calibrated for it.
    pub fn trim_options(&self, model_id: &str) -> TrimOptions {
        TrimOptions {
            threshold: self
                .trim_threshold
                .unwrap_or_else(|| calibrated_threshold(model_id)),
            min_sentences: self.trim_min_sentences,
            window: self.trim_window,
            scorer: self.trim_scorer,
            rrf_k: self.rrf_k,
            lexical_top: self.trim_lexical_top,
            structure: bib_retrieve::trim::ASK_PROFILE.structure,
        }
    }

    /// Convex fusion's BM25 weight over a knowledge base embedded with `model_id`: the one set,
    /// else the one calibrated for the model.
    pub fn convex_alpha(&self, model_id: &str) -> f64 {
        self.fusion_alpha
            .unwrap_or_else(|| calibrated_alpha(model_id))
    }

    /// The options of one retrieval over a knowledge base embedded with `model_id`
    /// (trimming only when `trim` is on).
    pub fn retrieve_options(&self, model_id: &str) -> RetrieveOptions {
        RetrieveOptions {
            top_k: self.top_k,
            mode: self.mode,
            candidates: self.candidates,
            rrf_k: self.rrf_k,
            fusion: self.fusion,
            convex_alpha: self.convex_alpha(model_id),
            trim: self.trim.then(|| self.trim_options(model_id)),
            signals: self.signals,
            rerank: self.rerank.then(|| self.rerank_options()),
            synonyms: self.synonyms.clone(),
        }
    }

    /// The metadata filter of `filters` (collections are the caller's).
    pub fn filter(&self) -> Result<Filter, ConfigError> {
        Filter::parse(&self.filters).map_err(|e| ConfigError::Invalid {
            key: "ask.filters".into(),
            reason: e.to_string(),
        })
    }

    /// Check the values no type can: ranges, and that the filters parse.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, reason: String| ConfigError::Invalid {
            key: format!("ask.{key}"),
            reason,
        };
        if self.top_k == 0 {
            return Err(bad("top_k", "must be at least 1".into()));
        }
        if let Some(alpha) = self.fusion_alpha.filter(|a| !(0.0..=1.0).contains(a)) {
            return Err(bad(
                "fusion_alpha",
                format!("{alpha} is not a weight in [0, 1]"),
            ));
        }
        let named = |what: &'static str| {
            move |e| match e {
                bib_retrieve::RetrieveError::InvalidOption { name, reason } => bad(&name, reason),
                other => bad(what, other.to_string()),
            }
        };
        // Any model's calibrated threshold is valid, so the default model's stands for all.
        self.trim_options(bib_embed::DEFAULT_MODEL)
            .validate()
            .map_err(named("trim"))?;
        // Checked whether or not it is on, so a bad weight in a file is caught at once.
        self.rerank_options().validate().map_err(named("rerank"))?;
        bib_retrieve::synonyms::validate(&self.synonyms).map_err(named("synonyms"))?;
        self.filter().map(drop)
    }

    /// The reranker's options of these settings (used when `rerank` is on).
    fn rerank_options(&self) -> RerankOptions {
        RerankOptions {
            depth: self.rerank_depth,
            weight: self.rerank_weight,
            timeout_s: self.rerank_timeout_s,
        }
    }
}

/// An optional `f32` written as its shortest decimal (`0.21`, not `0.20999999344348907`).
fn shortest_f32<S: serde::Serializer>(v: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => bib_retrieve::trim::shortest_f32(v, s),
        None => s.serialize_none(),
    }
}

/// What an ask that needs the embedding model does when the model cannot be loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelFallback {
    /// Fail with an error that names the model and how to install it (the default: an answer
    /// is never silently weaker than the one asked for).
    #[default]
    None,
    /// Run BM25 only, untrimmed, and say so (stderr, and `mode`/`fallback` in `--json`).
    Bm25,
}

/// `[llm]`: an OpenAI-compatible chat endpoint.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

/// The key is never printed.
impl fmt::Debug for LlmSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmSettings")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .finish()
    }
}

/// `[embed]`: the OpenAI-compatible embeddings endpoint that a model id `openai:<name>` means
/// (the name is the id's; [`crate::model::load_embedder`] turns both into an embedder).
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbedSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Width asked of the endpoint by a new build (`bib ingest --model openai:<name>`), which
    /// records it in its model id (`@<width>`); loading reads the width from the id alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<usize>,
    /// `[embed] model`: another name of `[ingest] model`, where a reader of `bib.toml` looks
    /// for the embedding model first. Resolving the settings moves it there
    /// ([`Settings::fold_model_names`]), so nothing else reads this field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// The key is never printed.
impl fmt::Debug for EmbedSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbedSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .field("dimensions", &self.dimensions)
            .field("model", &self.model)
            .finish()
    }
}

/// `[ingest]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestSettings {
    /// Embedding model of a new knowledge base (an existing one keeps its own).
    pub model: Option<String>,
    pub exclude: Vec<String>,
    pub max_file_bytes: u64,
    pub window_chunks: usize,
    pub sentence_vectors: bool,
    pub debounce_ms: u64,
}

impl Default for IngestSettings {
    fn default() -> Self {
        let o = bib_ingest::IngestOptions::default();
        Self {
            model: None,
            exclude: o.scan.excludes,
            max_file_bytes: o.max_file_bytes,
            window_chunks: o.window_chunks,
            sentence_vectors: o.sentence_vectors,
            debounce_ms: 500,
        }
    }
}

impl IngestSettings {
    /// The ingest options these settings describe (collection and pruning are per run).
    pub fn options(&self) -> bib_ingest::IngestOptions {
        bib_ingest::IngestOptions {
            max_file_bytes: self.max_file_bytes,
            window_chunks: self.window_chunks.max(1),
            sentence_vectors: self.sentence_vectors,
            scan: bib_ingest::scan::ScanOptions {
                excludes: self.exclude.clone(),
            },
            ..bib_ingest::IngestOptions::default()
        }
    }
}

/// A bad config file, environment variable or value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, a key no table has, or a value of the wrong type.
    #[error("{}{}: {}", .path.display(), .line.map(|l| format!(":{l}")).unwrap_or_default(),
        .key.as_deref().map_or_else(|| "not a valid bib.toml".to_string(), |k| format!("bad key `{k}`")))]
    File {
        path: PathBuf,
        /// 1-based line of the offending text, when known.
        line: Option<usize>,
        /// The key it concerns (`ask.top_k`), when known.
        key: Option<String>,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("environment variable {var}: {reason}")]
    Env { var: &'static str, reason: String },
    /// A value out of range, wherever it came from (the message names the flags and the
    /// environment variable that set the key too, since any of them may have).
    #[error("setting {key}{}: {reason}", keys::set_also_by(key))]
    Invalid { key: String, reason: String },
}

impl Settings {
    /// Merge the sources, strongest first: `flags` (applied to the merged settings) >
    /// environment (`env`, read through a function so tests need not touch the process) >
    /// the config file (`config`, else `BIB_CONFIG`, else `./bib.toml` when present) > the
    /// defaults. Then check the values.
    pub fn resolve(
        config: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
        flags: impl FnOnce(&mut Settings),
    ) -> Result<Settings, ConfigError> {
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let mut table = match config_path(config, &env) {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                Self::parse_file(&text, &path)?
            }
            None => toml::Table::new(),
        };
        for key in KEYS {
            if let Some((var, kind)) = key.env {
                let found = match env(var) {
                    Some(raw) => Some((var, raw)),
                    None => key
                        .env_fallback
                        .and_then(|old| env(old).map(|raw| (old, raw))),
                };
                if let Some((var, raw)) = found {
                    let value = kind.parse(var, &raw)?;
                    checked(key.name, value.clone(), var)?;
                    insert(&mut table, key.name, value);
                }
            }
        }
        let mut settings: Settings =
            table
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Invalid {
                    key: "(merged settings)".into(),
                    reason: e.message().to_string(),
                })?;
        settings.fold_model_names()?;
        flags(&mut settings);
        settings.ask.validate()?;
        Ok(settings)
    }

    /// `[embed] model` and `[ingest] model` are one setting under two names: the first moves
    /// into the second; both set to different models is an error naming both.
    fn fold_model_names(&mut self) -> Result<(), ConfigError> {
        let Some(model) = self.embed.model.take() else {
            return Ok(());
        };
        match &self.ingest.model {
            Some(other) if *other != model => Err(ConfigError::Invalid {
                key: "embed.model".into(),
                reason: format!(
                    "`{model}`, but ingest.model says `{other}`: they are one setting, set one"
                ),
            }),
            _ => {
                self.ingest.model = Some(model);
                Ok(())
            }
        }
    }

    /// The settings of one `bib.toml` text over the defaults (`origin` names it in errors).
    pub fn from_toml(text: &str, origin: &Path) -> Result<Settings, ConfigError> {
        let mut settings: Settings = Self::parse_file(text, origin)?
            .try_into()
            .map_err(|e: toml::de::Error| file_error(text, origin, e))?;
        settings.fold_model_names()?;
        Ok(settings)
    }

    /// Check a file against the types (so its errors carry their line) and return its table.
    fn parse_file(text: &str, origin: &Path) -> Result<toml::Table, ConfigError> {
        toml::from_str::<Settings>(text).map_err(|e| file_error(text, origin, e))?;
        text.parse::<toml::Table>()
            .map_err(|e| file_error(text, origin, e))
    }

    /// These settings as `bib.toml` text, with the API key and a URL's password hidden.
    pub fn to_toml_redacted(&self) -> String {
        let mut shown = self.clone();
        if let StoreSpec::Postgres(_) = &shown.store {
            shown.store = StoreSpec::Postgres(self.store.to_string());
        }
        if shown.llm.api_key.is_some() {
            shown.llm.api_key = Some("(set)".into());
        }
        if shown.embed.api_key.is_some() {
            shown.embed.api_key = Some("(set)".into());
        }
        toml::to_string(&shown).unwrap_or_else(|e| format!("# cannot show the settings: {e}\n"))
    }
}

/// The config file in use: `explicit` (`--config`), else `BIB_CONFIG`, else `./bib.toml` when
/// it exists; `None` when there is none.
pub fn config_path(
    explicit: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Some(p) = env("BIB_CONFIG").filter(|p| !p.trim().is_empty()) {
        return Some(PathBuf::from(p));
    }
    Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.is_file())
}

/// A file's error with the line and the key it concerns.
fn file_error(text: &str, path: &Path, e: toml::de::Error) -> ConfigError {
    let at = e.span().map(|s| s.start);
    ConfigError::File {
        path: path.to_path_buf(),
        line: at.map(|a| 1 + text[..a.min(text.len())].matches('\n').count()),
        key: at.and_then(|a| keys::key_at(text, a)),
        source: Box::new(e),
    }
}

/// `value` for `key` is one its type accepts (so a bad environment variable is named).
fn checked(key: &str, value: toml::Value, var: &'static str) -> Result<(), ConfigError> {
    let mut t = toml::Table::new();
    insert(&mut t, key, value);
    toml::Value::Table(t)
        .try_into::<Settings>()
        .map(drop)
        .map_err(|e| ConfigError::Env {
            var,
            reason: e.message().to_string(),
        })
}

/// Set a dotted key (`ask.trim`) in a table, creating (or replacing) the tables on the way.
fn insert(table: &mut toml::Table, dotted: &str, value: toml::Value) {
    match dotted.split_once('.') {
        None => {
            table.insert(dotted.to_string(), value);
        }
        Some((head, rest)) => {
            let sub = table
                .entry(head.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !sub.is_table() {
                *sub = toml::Value::Table(toml::Table::new());
            }
            if let toml::Value::Table(t) = sub {
                insert(t, rest, value);
            }
        }
    }
}

#[cfg(test)]
mod tests;
