//! Settings of `bib ask`, resolved in layers: built-in defaults < `bib.toml` < environment <
//! command-line flags. Each layer is a [`Layer`] of optional values; [`AskSettings::resolve`]
//! stacks them. Errors name the file and key, or the variable, that holds the bad value.
//!
//! `bib.toml` (other sections belong to other commands and are ignored here):
//!
//! ```toml
//! [store]
//! path = ".bib/kb.sqlite"
//!
//! [ask]
//! top_k = 5
//! mode = "hybrid"            # hybrid | bm25 | vector
//! trim = false
//! trim_threshold = 0.21      # calibrated for use-m3 (the spec's 0.38 is bge-m3's)
//! trim_window = 0
//! trim_min_sentences = 0
//! trim_lexical_top = 5       # pool sentences always kept for their BM25 rank
//! trim_scorer = "cosine"     # cosine | hybrid
//! fusion = "convex"          # convex | rrf
//! fusion_alpha = 0.7         # BM25 weight of convex fusion
//! signals = "default"        # ranking signals: off, default, or e.g. "field=0.2,doc=0"
//! rrf_k = 60
//! candidates = 50
//! filters = ["app=core"]
//! log = true                 # write each ask to the query log (false: never)
//! fallback = "none"          # none | bm25: what a hybrid/vector/trim ask does when the
//!                            # knowledge base's model cannot be loaded (none = fail)
//!
//! [llm]
//! base_url = "http://localhost:11434/v1"
//! model = "qwen2.5:3b"
//! api_key = "…"
//! ```
//!
//! Environment: `RETRIEVAL_TRIM` (`1`/`0`), `RETRIEVAL_TRIM_THRESHOLD`, `RETRIEVAL_TRIM_WINDOW`,
//! `RETRIEVAL_TRIM_LEXICAL_TOP`, `RETRIEVAL_FUSION`, `RETRIEVAL_FUSION_ALPHA`,
//! `RETRIEVAL_SIGNALS`, `BIB_STORE`, `BIB_LLM_BASE_URL`, `BIB_LLM_MODEL`, `BIB_LLM_API_KEY`,
//! `BIB_QUERY_LOG` (`1`/`0`: the query log on or off).

use std::path::PathBuf;
use std::str::FromStr;

use crate::error::RetrieveError;
use crate::retrieve::{Fusion, Mode, RetrieveOptions};
use crate::signals::Signals;
use crate::trim::{TrimOptions, TrimScorer, ASK_PROFILE};

/// What an ask that needs the embedding model does when the model cannot be loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ModelFallback {
    /// Fail with an error that names the model and how to install it (the default: an answer
    /// is never silently weaker than the one asked for).
    #[default]
    None,
    /// Run BM25 only, untrimmed, and say so (stderr, and `mode`/`fallback` in `--json`).
    Bm25,
}

impl ModelFallback {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelFallback::None => "none",
            ModelFallback::Bm25 => "bm25",
        }
    }
}

impl FromStr for ModelFallback {
    type Err = RetrieveError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(ModelFallback::None),
            "bm25" => Ok(ModelFallback::Bm25),
            other => Err(RetrieveError::InvalidOption {
                name: "fallback".into(),
                reason: format!("`{other}` is not one of none, bm25"),
            }),
        }
    }
}

fn parse_switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// One layer of optional settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layer {
    pub store: Option<PathBuf>,
    pub top_k: Option<usize>,
    pub mode: Option<Mode>,
    pub trim: Option<bool>,
    pub trim_threshold: Option<f32>,
    pub trim_window: Option<usize>,
    pub trim_min_sentences: Option<usize>,
    pub trim_scorer: Option<TrimScorer>,
    pub trim_lexical_top: Option<usize>,
    pub rrf_k: Option<f64>,
    pub fusion: Option<Fusion>,
    pub fusion_alpha: Option<f64>,
    pub candidates: Option<usize>,
    /// Ranking signals (field, phrase, sentence, document).
    pub signals: Option<Signals>,
    /// `key=value` filters; the highest layer that sets any wins (they do not add up).
    pub filters: Option<Vec<String>>,
    pub llm_base_url: Option<String>,
    pub llm_model: Option<String>,
    pub llm_api_key: Option<String>,
    /// Whether asks are written to the query log.
    pub log: Option<bool>,
    /// What to do when the model cannot be loaded.
    pub fallback: Option<ModelFallback>,
}

impl Layer {
    /// Values of `self` where set, else of `lower`.
    pub fn over(self, lower: Layer) -> Layer {
        Layer {
            store: self.store.or(lower.store),
            top_k: self.top_k.or(lower.top_k),
            mode: self.mode.or(lower.mode),
            trim: self.trim.or(lower.trim),
            trim_threshold: self.trim_threshold.or(lower.trim_threshold),
            trim_window: self.trim_window.or(lower.trim_window),
            trim_min_sentences: self.trim_min_sentences.or(lower.trim_min_sentences),
            trim_scorer: self.trim_scorer.or(lower.trim_scorer),
            trim_lexical_top: self.trim_lexical_top.or(lower.trim_lexical_top),
            rrf_k: self.rrf_k.or(lower.rrf_k),
            fusion: self.fusion.or(lower.fusion),
            fusion_alpha: self.fusion_alpha.or(lower.fusion_alpha),
            candidates: self.candidates.or(lower.candidates),
            signals: self.signals.or(lower.signals),
            filters: self.filters.or(lower.filters),
            llm_base_url: self.llm_base_url.or(lower.llm_base_url),
            llm_model: self.llm_model.or(lower.llm_model),
            llm_api_key: self.llm_api_key.or(lower.llm_api_key),
            log: self.log.or(lower.log),
            fallback: self.fallback.or(lower.fallback),
        }
    }

    /// Read the `[store]`, `[ask]` and `[llm]` sections of a `bib.toml` text. `origin` names
    /// the file in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Layer, RetrieveError> {
        let bad = |key: &str, reason: String| RetrieveError::InvalidOption {
            name: format!("{origin}: {key}"),
            reason,
        };
        let doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| bad("(syntax)", e.to_string()))?;
        let section = |name: &str| -> Result<Option<&toml::Table>, RetrieveError> {
            match doc.get(name) {
                None => Ok(None),
                Some(toml::Value::Table(t)) => Ok(Some(t)),
                Some(_) => Err(bad(name, "must be a table".into())),
            }
        };
        let mut l = Layer::default();
        let str_of =
            |t: &toml::Table, sec: &str, k: &str| -> Result<Option<String>, RetrieveError> {
                match t.get(k) {
                    None => Ok(None),
                    Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(bad(&format!("{sec}.{k}"), "must be a string".into())),
                }
            };
        let uint_of = |t: &toml::Table, k: &str| -> Result<Option<usize>, RetrieveError> {
            match t.get(k) {
                None => Ok(None),
                Some(toml::Value::Integer(i)) if *i >= 0 => Ok(Some(*i as usize)),
                Some(_) => Err(bad(
                    &format!("ask.{k}"),
                    "must be a non-negative integer".into(),
                )),
            }
        };
        let float_of = |t: &toml::Table, k: &str| -> Result<Option<f64>, RetrieveError> {
            match t.get(k) {
                None => Ok(None),
                Some(toml::Value::Float(f)) => Ok(Some(*f)),
                Some(toml::Value::Integer(i)) => Ok(Some(*i as f64)),
                Some(_) => Err(bad(&format!("ask.{k}"), "must be a number".into())),
            }
        };
        // `store = "postgres://…"` (or a file path) at the top, or `[store] path = "…"`.
        if let Some(toml::Value::String(s)) = doc.get("store") {
            l.store = Some(PathBuf::from(s));
        } else if let Some(s) = section("store")? {
            l.store = str_of(s, "store", "path")?.map(PathBuf::from);
        }
        if let Some(a) = section("ask")? {
            l.top_k = uint_of(a, "top_k")?;
            l.mode = str_of(a, "ask", "mode")?
                .map(|m| Mode::from_str(&m).map_err(|e| bad("ask.mode", e.to_string())))
                .transpose()?;
            l.trim = match a.get("trim") {
                None => None,
                Some(toml::Value::Boolean(b)) => Some(*b),
                Some(_) => return Err(bad("ask.trim", "must be true or false".into())),
            };
            l.log = match a.get("log") {
                None => None,
                Some(toml::Value::Boolean(b)) => Some(*b),
                Some(_) => return Err(bad("ask.log", "must be true or false".into())),
            };
            l.fallback = str_of(a, "ask", "fallback")?
                .map(|m| {
                    ModelFallback::from_str(&m).map_err(|e| bad("ask.fallback", e.to_string()))
                })
                .transpose()?;
            l.trim_threshold = float_of(a, "trim_threshold")?.map(|f| f as f32);
            l.trim_window = uint_of(a, "trim_window")?;
            l.trim_min_sentences = uint_of(a, "trim_min_sentences")?;
            l.trim_lexical_top = uint_of(a, "trim_lexical_top")?;
            l.trim_scorer = str_of(a, "ask", "trim_scorer")?
                .map(|m| {
                    TrimScorer::from_str(&m).map_err(|e| bad("ask.trim_scorer", e.to_string()))
                })
                .transpose()?;
            l.rrf_k = float_of(a, "rrf_k")?;
            l.fusion = str_of(a, "ask", "fusion")?
                .map(|m| Fusion::from_str(&m).map_err(|e| bad("ask.fusion", e.to_string())))
                .transpose()?;
            l.fusion_alpha = float_of(a, "fusion_alpha")?;
            l.candidates = uint_of(a, "candidates")?;
            l.signals = str_of(a, "ask", "signals")?
                .map(|m| Signals::parse(&m).map_err(|e| bad("ask.signals", e.to_string())))
                .transpose()?;
            l.filters = match a.get("filters") {
                None => None,
                Some(toml::Value::Array(items)) => Some(
                    items
                        .iter()
                        .map(|v| {
                            v.as_str().map(str::to_string).ok_or_else(|| {
                                bad(
                                    "ask.filters",
                                    "must be a list of \"key=value\" strings".into(),
                                )
                            })
                        })
                        .collect::<Result<_, _>>()?,
                ),
                Some(_) => {
                    return Err(bad(
                        "ask.filters",
                        "must be a list of \"key=value\" strings".into(),
                    ))
                }
            };
        }
        if let Some(s) = section("llm")? {
            l.llm_base_url = str_of(s, "llm", "base_url")?;
            l.llm_model = str_of(s, "llm", "model")?;
            l.llm_api_key = str_of(s, "llm", "api_key")?;
        }
        Ok(l)
    }

    /// Read the environment through `get` (so tests need not touch the process environment).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Layer, RetrieveError> {
        let bad = |var: &str, reason: &str| RetrieveError::InvalidOption {
            name: var.to_string(),
            reason: reason.to_string(),
        };
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let mut l = Layer::default();
        if let Some(v) = get("RETRIEVAL_TRIM") {
            l.trim = Some(parse_switch(&v).ok_or_else(|| bad("RETRIEVAL_TRIM", "must be 1 or 0"))?);
        }
        if let Some(v) = get("BIB_QUERY_LOG") {
            l.log = Some(parse_switch(&v).ok_or_else(|| bad("BIB_QUERY_LOG", "must be 1 or 0"))?);
        }
        if let Some(v) = get("RETRIEVAL_TRIM_THRESHOLD") {
            l.trim_threshold = Some(
                v.trim()
                    .parse()
                    .map_err(|_| bad("RETRIEVAL_TRIM_THRESHOLD", "must be a number"))?,
            );
        }
        if let Some(v) = get("RETRIEVAL_TRIM_WINDOW") {
            l.trim_window = Some(
                v.trim()
                    .parse()
                    .map_err(|_| bad("RETRIEVAL_TRIM_WINDOW", "must be a non-negative integer"))?,
            );
        }
        if let Some(v) = get("RETRIEVAL_TRIM_LEXICAL_TOP") {
            l.trim_lexical_top = Some(v.trim().parse().map_err(|_| {
                bad(
                    "RETRIEVAL_TRIM_LEXICAL_TOP",
                    "must be a non-negative integer",
                )
            })?);
        }
        if let Some(v) = get("RETRIEVAL_FUSION") {
            l.fusion = Some(
                Fusion::from_str(v.trim())
                    .map_err(|_| bad("RETRIEVAL_FUSION", "must be rrf or convex"))?,
            );
        }
        if let Some(v) = get("RETRIEVAL_FUSION_ALPHA") {
            l.fusion_alpha = Some(
                v.trim()
                    .parse()
                    .map_err(|_| bad("RETRIEVAL_FUSION_ALPHA", "must be a number"))?,
            );
        }
        if let Some(v) = get("RETRIEVAL_SIGNALS") {
            l.signals =
                Some(Signals::parse(&v).map_err(|e| bad("RETRIEVAL_SIGNALS", &e.to_string()))?);
        }
        l.store = get("BIB_STORE").map(PathBuf::from);
        l.llm_base_url = get("BIB_LLM_BASE_URL");
        l.llm_model = get("BIB_LLM_MODEL");
        l.llm_api_key = get("BIB_LLM_API_KEY");
        Ok(l)
    }
}

/// Fully resolved settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AskSettings {
    pub store: PathBuf,
    pub options: RetrieveOptions,
    pub filters: Vec<String>,
    pub llm_base_url: Option<String>,
    pub llm_model: Option<String>,
    pub llm_api_key: Option<String>,
    /// Write each ask to the query log (default on; `[ask] log`, `BIB_QUERY_LOG`).
    pub log: bool,
    /// What an ask that needs the model does when it cannot be loaded (default: fail).
    pub fallback: ModelFallback,
}

impl AskSettings {
    /// Stack `flags` over `env` over `file` over the defaults (window 1 in ask, as the spec's
    /// ask integration; threshold calibrated for the default model; trimming off).
    pub fn resolve(
        flags: Layer,
        env: Layer,
        file: Layer,
        default_store: &str,
    ) -> Result<Self, RetrieveError> {
        let l = flags.over(env).over(file);
        let d = RetrieveOptions::default();
        let trim = l.trim.unwrap_or(false).then(|| TrimOptions {
            threshold: l.trim_threshold.unwrap_or(ASK_PROFILE.threshold),
            min_sentences: l.trim_min_sentences.unwrap_or(ASK_PROFILE.min_sentences),
            window: l.trim_window.unwrap_or(ASK_PROFILE.window),
            scorer: l.trim_scorer.unwrap_or(ASK_PROFILE.scorer),
            rrf_k: l.rrf_k.unwrap_or(d.rrf_k),
            lexical_top: l.trim_lexical_top.unwrap_or(ASK_PROFILE.lexical_top),
        });
        if let Some(t) = &trim {
            t.validate()?;
        }
        let options = RetrieveOptions {
            top_k: l.top_k.unwrap_or(d.top_k),
            mode: l.mode.unwrap_or(d.mode),
            candidates: l.candidates.unwrap_or(d.candidates),
            rrf_k: l.rrf_k.unwrap_or(d.rrf_k),
            fusion: l.fusion.unwrap_or(d.fusion),
            convex_alpha: l.fusion_alpha.unwrap_or(d.convex_alpha),
            trim,
            signals: l.signals.unwrap_or(d.signals),
        };
        if !(0.0..=1.0).contains(&options.convex_alpha) {
            return Err(RetrieveError::InvalidOption {
                name: "fusion_alpha".into(),
                reason: format!("{} is not a weight in [0, 1]", options.convex_alpha),
            });
        }
        if options.top_k == 0 {
            return Err(RetrieveError::InvalidOption {
                name: "top_k".into(),
                reason: "must be at least 1".into(),
            });
        }
        Ok(Self {
            store: l.store.unwrap_or_else(|| PathBuf::from(default_store)),
            options,
            filters: l.filters.unwrap_or_default(),
            llm_base_url: l.llm_base_url,
            llm_model: l.llm_model,
            llm_api_key: l.llm_api_key,
            log: l.log.unwrap_or(true),
            fallback: l.fallback.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Layer {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Layer::from_env(|k| m.get(k).cloned()).unwrap()
    }

    const FILE: &str = r#"
[store]
path = "kb/file.sqlite"
[ask]
top_k = 7
mode = "bm25"
trim = true
trim_threshold = 0.5
trim_window = 2
filters = ["app=core"]
[llm]
base_url = "http://file/v1"
model = "file-model"
[ingest]
whatever = 1
"#;

    #[test]
    fn defaults() {
        let s = AskSettings::resolve(
            Layer::default(),
            Layer::default(),
            Layer::default(),
            "d.sqlite",
        )
        .unwrap();
        assert_eq!(s.store, PathBuf::from("d.sqlite"));
        assert_eq!(s.options.top_k, 5);
        assert_eq!(s.options.mode, Mode::Hybrid);
        assert!(s.options.trim.is_none(), "trimming is off by default");
        assert!(s.filters.is_empty());
        assert_eq!(s.options.fusion, Fusion::Convex);
    }

    #[test]
    fn store_at_the_top_of_the_file() {
        let url = "postgres://bib@127.0.0.1:55432/bib?schema=kb";
        let file = Layer::from_toml(&format!("store = {url:?}\n[ask]\ntop_k = 3\n"), "f").unwrap();
        let s = AskSettings::resolve(Layer::default(), Layer::default(), file, "d").unwrap();
        assert_eq!(s.store, PathBuf::from(url));
        assert_eq!(s.options.top_k, 3);
        let file = Layer::from_toml("[store]\npath = \"kb.sqlite\"", "f").unwrap();
        assert_eq!(file.store, Some(PathBuf::from("kb.sqlite")));
        assert!(Layer::from_toml("store = 3", "f").is_err());
    }

    #[test]
    fn fusion_from_file_env_and_flags() {
        let file = Layer::from_toml("[ask]\nfusion = \"rrf\"\nfusion_alpha = 0.5", "f").unwrap();
        let s =
            AskSettings::resolve(Layer::default(), Layer::default(), file.clone(), "d").unwrap();
        assert_eq!(
            (s.options.fusion, s.options.convex_alpha),
            (Fusion::Rrf, 0.5)
        );
        let e = env(&[
            ("RETRIEVAL_FUSION", "convex"),
            ("RETRIEVAL_FUSION_ALPHA", "0.9"),
        ]);
        let s = AskSettings::resolve(Layer::default(), e.clone(), file.clone(), "d").unwrap();
        assert_eq!(
            (s.options.fusion, s.options.convex_alpha),
            (Fusion::Convex, 0.9)
        );
        let flags = Layer {
            fusion_alpha: Some(0.6),
            ..Layer::default()
        };
        let s = AskSettings::resolve(flags, e, file, "d").unwrap();
        assert_eq!(s.options.convex_alpha, 0.6);
        let bad = Layer {
            fusion_alpha: Some(2.0),
            ..Layer::default()
        };
        let err = AskSettings::resolve(bad, Layer::default(), Layer::default(), "d").unwrap_err();
        assert!(err.to_string().contains("fusion_alpha"), "{err}");
        assert!(
            Layer::from_env(|k| (k == "RETRIEVAL_FUSION").then(|| "mean".to_string()))
                .unwrap_err()
                .to_string()
                .contains("RETRIEVAL_FUSION")
        );
    }

    #[test]
    fn signals_from_file_env_and_flags() {
        let d = AskSettings::resolve(Layer::default(), Layer::default(), Layer::default(), "d")
            .unwrap();
        assert_eq!(d.options.signals, Signals::default());
        let file = Layer::from_toml("[ask]\nsignals = \"off\"", "f").unwrap();
        let s =
            AskSettings::resolve(Layer::default(), Layer::default(), file.clone(), "d").unwrap();
        assert_eq!(s.options.signals, Signals::OFF);
        let e = env(&[("RETRIEVAL_SIGNALS", "field=0.5")]);
        let s = AskSettings::resolve(Layer::default(), e, file, "d").unwrap();
        assert_eq!(s.options.signals.field, 0.5);
        let err = Layer::from_toml("[ask]\nsignals = \"loud=1\"", "my.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ask.signals") && err.contains("loud"), "{err}");
        let m = |k: &str| (k == "RETRIEVAL_SIGNALS").then(|| "field=x".to_string());
        assert!(Layer::from_env(m)
            .unwrap_err()
            .to_string()
            .contains("RETRIEVAL_SIGNALS"));
    }

    #[test]
    fn precedence_flags_env_file_defaults() {
        let file = Layer::from_toml(FILE, "bib.toml").unwrap();
        // File alone.
        let s =
            AskSettings::resolve(Layer::default(), Layer::default(), file.clone(), "d").unwrap();
        assert_eq!(s.store, PathBuf::from("kb/file.sqlite"));
        assert_eq!(s.options.top_k, 7);
        assert_eq!(s.options.mode, Mode::Bm25);
        let t = s.options.trim.unwrap();
        assert_eq!((t.threshold, t.window, t.min_sentences), (0.5, 2, 0));
        assert_eq!(t.lexical_top, 5);
        assert_eq!(s.filters, vec!["app=core".to_string()]);
        assert_eq!(s.llm_model.as_deref(), Some("file-model"));
        // Env over file.
        let e = env(&[
            ("RETRIEVAL_TRIM", "0"),
            ("BIB_LLM_MODEL", "env-model"),
            ("BIB_STORE", "env.sqlite"),
        ]);
        let s = AskSettings::resolve(Layer::default(), e.clone(), file.clone(), "d").unwrap();
        assert!(s.options.trim.is_none());
        assert_eq!(s.llm_model.as_deref(), Some("env-model"));
        assert_eq!(s.llm_base_url.as_deref(), Some("http://file/v1"));
        assert_eq!(s.store, PathBuf::from("env.sqlite"));
        // Flags over env.
        let flags = Layer {
            trim: Some(true),
            trim_threshold: Some(0.3),
            top_k: Some(2),
            ..Layer::default()
        };
        let s = AskSettings::resolve(flags, e, file, "d").unwrap();
        let t = s.options.trim.unwrap();
        assert_eq!(t.threshold, 0.3);
        assert_eq!(t.window, 2, "window still from the file");
        assert_eq!(s.options.top_k, 2);
        // Env threshold applies when the flag does not set it; the rest is ask's profile.
        let e = env(&[
            ("RETRIEVAL_TRIM", "1"),
            ("RETRIEVAL_TRIM_THRESHOLD", "0.42"),
        ]);
        let s = AskSettings::resolve(Layer::default(), e, Layer::default(), "d").unwrap();
        let t = s.options.trim.unwrap();
        assert_eq!((t.threshold, t.window), (0.42, 0));
        assert_eq!(
            (t.min_sentences, t.lexical_top),
            (ASK_PROFILE.min_sentences, ASK_PROFILE.lexical_top)
        );
    }

    #[test]
    fn query_log_and_fallback_switches() {
        let d = AskSettings::resolve(Layer::default(), Layer::default(), Layer::default(), "d")
            .unwrap();
        assert!(d.log, "the query log is on by default");
        assert_eq!(
            d.fallback,
            ModelFallback::None,
            "no silent fallback by default"
        );
        let file = Layer::from_toml("[ask]\nlog = false\nfallback = \"bm25\"\n", "f").unwrap();
        let s =
            AskSettings::resolve(Layer::default(), Layer::default(), file.clone(), "d").unwrap();
        assert!(!s.log);
        assert_eq!(s.fallback, ModelFallback::Bm25);
        // The environment beats the file, flags beat the environment.
        let e = env(&[("BIB_QUERY_LOG", "1")]);
        let s = AskSettings::resolve(Layer::default(), e.clone(), file.clone(), "d").unwrap();
        assert!(s.log);
        let flags = Layer {
            log: Some(false),
            ..Layer::default()
        };
        assert!(!AskSettings::resolve(flags, e, file, "d").unwrap().log);
        assert!(
            !AskSettings::resolve(
                Layer::default(),
                env(&[("BIB_QUERY_LOG", "0")]),
                Layer::default(),
                "d"
            )
            .unwrap()
            .log
        );
        let m = |k: &str| (k == "BIB_QUERY_LOG").then(|| "sometimes".to_string());
        assert!(Layer::from_env(m)
            .unwrap_err()
            .to_string()
            .contains("BIB_QUERY_LOG"));
        for (text, key) in [
            ("[ask]\nlog = \"no\"", "ask.log"),
            ("[ask]\nfallback = \"vector\"", "ask.fallback"),
        ] {
            let e = Layer::from_toml(text, "bib.toml").unwrap_err().to_string();
            assert!(e.contains(key), "{text:?} → {e}");
        }
    }

    #[test]
    fn errors_name_the_source() {
        let cases = [
            ("[ask]\ntop_k = \"five\"", "ask.top_k"),
            ("[ask]\nmode = \"fuzzy\"", "ask.mode"),
            ("[ask]\nfusion = \"mean\"", "ask.fusion"),
            ("[ask]\ntrim = 1", "ask.trim"),
            ("[ask]\nfilters = \"app=core\"", "ask.filters"),
            ("[ask\n", "(syntax)"),
            ("ask = 3", "ask"),
        ];
        for (text, key) in cases {
            let e = Layer::from_toml(text, "my/bib.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("my/bib.toml") && e.contains(key),
                "{text:?} → {e}"
            );
        }
        let m = |k: &str| (k == "RETRIEVAL_TRIM_THRESHOLD").then(|| "high".to_string());
        let e = Layer::from_env(m).unwrap_err().to_string();
        assert!(e.contains("RETRIEVAL_TRIM_THRESHOLD"), "{e}");
        let m = |k: &str| (k == "RETRIEVAL_TRIM").then(|| "maybe".to_string());
        assert!(Layer::from_env(m).is_err());
        let flags = Layer {
            trim: Some(true),
            trim_threshold: Some(3.0),
            ..Layer::default()
        };
        assert!(AskSettings::resolve(flags, Layer::default(), Layer::default(), "d").is_err());
    }
}
