//! `openai`: any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, TEI, vLLM,
//! LM Studio, …) over a blocking HTTP client.
//!
//! Configuration comes from [`OpenAiConfig`] (or the environment via
//! [`OpenAiConfig::from_env`]). Requests are split into batches of at most
//! [`OpenAiConfig::max_batch`] inputs; 429 and 5xx answers and transport errors are retried with
//! exponential backoff (honouring `Retry-After` when the server sends one). Returned vectors are
//! re-normalised to unit length, since not every server normalises.

use std::sync::OnceLock;
use std::time::Duration;

use bib_text::tokens::{EstimateCounter, TokenCounter};

use crate::{EmbedError, EmbedKind, Embedder};

/// Connection and behaviour settings.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Server root, with or without the trailing `/v1` (e.g. `http://localhost:11434`).
    pub base_url: String,
    /// Model name sent in each request.
    pub model: String,
    /// Bearer token, if the server needs one.
    pub api_key: Option<String>,
    /// Requested output width; sent as `dimensions` when set. When unset, the first answer
    /// decides.
    pub dimensions: Option<usize>,
    /// Longest input the model accepts, in tokens (used by batching and truncation warnings).
    pub max_input_tokens: usize,
    /// Inputs per request.
    pub max_batch: usize,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff delay; doubles on each retry (capped at 30 s).
    pub backoff: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".to_string(),
            model: "text-embedding-3-small".to_string(),
            api_key: None,
            dimensions: None,
            max_input_tokens: 8192,
            max_batch: 96,
            max_retries: 5,
            backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(60),
        }
    }
}

impl OpenAiConfig {
    /// Settings from `BIB_OPENAI_BASE_URL`, `BIB_OPENAI_API_KEY` (or `OPENAI_API_KEY`),
    /// `BIB_EMBED_MODEL`, `BIB_EMBED_DIMENSIONS` and `BIB_EMBED_MAX_TOKENS`; anything unset keeps
    /// its default.
    pub fn from_env() -> Result<Self, EmbedError> {
        Self::from_lookup(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// As [`from_env`](Self::from_env), reading variables through `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, EmbedError> {
        let mut cfg = Self::default();
        if let Some(v) = get("BIB_OPENAI_BASE_URL") {
            cfg.base_url = v;
        }
        cfg.api_key = get("BIB_OPENAI_API_KEY").or_else(|| get("OPENAI_API_KEY"));
        if let Some(v) = get("BIB_EMBED_MODEL") {
            cfg.model = v;
        }
        let number = |name: &str| -> Result<Option<usize>, EmbedError> {
            get(name)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        EmbedError::Other(format!("{name} must be a positive integer, got `{v}`"))
                    })
                })
                .transpose()
        };
        cfg.dimensions = number("BIB_EMBED_DIMENSIONS")?;
        if let Some(n) = number("BIB_EMBED_MAX_TOKENS")? {
            cfg.max_input_tokens = n;
        }
        Ok(cfg)
    }

    /// The full embeddings URL.
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/embeddings")
        } else {
            format!("{base}/v1/embeddings")
        }
    }
}

/// Embedder backed by an OpenAI-compatible HTTP endpoint.
pub struct OpenAiEmbedder {
    cfg: OpenAiConfig,
    agent: ureq::Agent,
    model_id: String,
    dims: OnceLock<usize>,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("endpoint", &self.cfg.endpoint())
            .field("model", &self.cfg.model)
            .finish()
    }
}

#[derive(serde::Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [&'a str],
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
    encoding_format: &'static str,
}

#[derive(serde::Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(serde::Deserialize)]
struct Item {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

impl OpenAiEmbedder {
    /// A client for `cfg`. When `cfg.dimensions` is unset the width is learnt from the first
    /// answer (call [`probe`](Self::probe) to learn it up front).
    pub fn new(cfg: OpenAiConfig) -> Self {
        let agent = ureq::AgentBuilder::new().timeout(cfg.timeout).build();
        let model_id = match cfg.dimensions {
            Some(d) => format!("openai:{}@{d}", cfg.model),
            None => format!("openai:{}", cfg.model),
        };
        let dims = OnceLock::new();
        if let Some(d) = cfg.dimensions {
            let _ = dims.set(d);
        }
        Self {
            cfg,
            agent,
            model_id,
            dims,
        }
    }

    /// Settings from the environment ([`OpenAiConfig::from_env`]).
    pub fn from_env() -> Result<Self, EmbedError> {
        Ok(Self::new(OpenAiConfig::from_env()?))
    }

    /// Embed one short text to learn the output width; returns it.
    pub fn probe(&self) -> Result<usize, EmbedError> {
        if let Some(d) = self.dims.get() {
            return Ok(*d);
        }
        let v = self.request(&["dimension probe"])?;
        Ok(v.first().map_or(0, Vec::len))
    }

    fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = serde_json::to_string(&Request {
            model: &self.cfg.model,
            input: texts,
            dimensions: self.cfg.dimensions,
            encoding_format: "float",
        })
        .map_err(|e| EmbedError::failed("encoding the embedding request", e))?;
        let url = self.cfg.endpoint();
        let mut attempt = 0u32;
        loop {
            let mut req = self
                .agent
                .post(&url)
                .set("Content-Type", "application/json");
            if let Some(key) = &self.cfg.api_key {
                req = req.set("Authorization", &format!("Bearer {key}"));
            }
            // A failed attempt: how long the server asks us to wait, and why it failed.
            let (retry_after, why): (_, crate::BoxError) = match req.send_string(&body) {
                Ok(resp) => return self.parse(resp, texts.len()),
                Err(ureq::Error::Status(code, resp)) if code == 429 || code >= 500 => {
                    let after = resp
                        .header("Retry-After")
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .map(|s| Duration::from_secs_f64(s.clamp(0.0, 60.0)));
                    let text = resp.into_string().unwrap_or_default();
                    (after, format!("HTTP {code}: {}", snippet(&text)).into())
                }
                Err(ureq::Error::Status(code, resp)) => {
                    let text = resp.into_string().unwrap_or_default();
                    return Err(EmbedError::Endpoint(format!(
                        "{url} answered HTTP {code}: {}",
                        snippet(&text)
                    )));
                }
                Err(ureq::Error::Transport(t)) => (None, Box::new(t)),
            };
            if attempt >= self.cfg.max_retries {
                let context = format!(
                    "embedding endpoint {url}: giving up after {} attempts",
                    attempt + 1
                );
                return Err(EmbedError::failed(context, why));
            }
            let backoff = self
                .cfg
                .backoff
                .saturating_mul(1 << attempt.min(16))
                .min(Duration::from_secs(30));
            std::thread::sleep(retry_after.unwrap_or(backoff));
            attempt += 1;
        }
    }

    fn parse(&self, resp: ureq::Response, expected: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let text = resp
            .into_string()
            .map_err(|e| EmbedError::failed("embedding endpoint: reading the answer", e))?;
        let parsed: Response = serde_json::from_str(&text).map_err(|e| {
            let context = format!("embedding endpoint: unexpected answer {}", snippet(&text));
            EmbedError::failed(context, e)
        })?;
        if parsed.data.len() != expected {
            return Err(EmbedError::Endpoint(format!(
                "asked for {expected} embeddings, got {}",
                parsed.data.len()
            )));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
        for (pos, item) in parsed.data.into_iter().enumerate() {
            let i = item.index.unwrap_or(pos);
            let slot = slots
                .get_mut(i)
                .ok_or_else(|| EmbedError::Endpoint(format!("answer index {i} out of range")))?;
            *slot = Some(normalize(item.embedding));
        }
        let vectors: Vec<Vec<f32>> = slots
            .into_iter()
            .enumerate()
            .map(|(i, v)| v.ok_or_else(|| EmbedError::Endpoint(format!("answer lacks index {i}"))))
            .collect::<Result<_, _>>()?;
        let width = vectors.first().map_or(0, Vec::len);
        if width == 0 || vectors.iter().any(|v| v.len() != width) {
            return Err(EmbedError::Endpoint(
                "embeddings of inconsistent width".into(),
            ));
        }
        let dims = *self.dims.get_or_init(|| width);
        if width != dims {
            return Err(EmbedError::Endpoint(format!(
                "expected {dims}-dimensional embeddings, got {width}"
            )));
        }
        Ok(vectors)
    }
}

fn normalize(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

fn snippet(text: &str) -> String {
    let t: String = text.chars().take(200).collect();
    t.trim().to_string()
}

impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The configured width, or the one learnt from the first answer (0 before any).
    fn dimensions(&self) -> usize {
        self.dims.get().copied().unwrap_or(0)
    }

    fn max_input_tokens(&self) -> usize {
        self.cfg.max_input_tokens
    }

    fn tokenizer(&self) -> &dyn TokenCounter {
        // The server's tokenizer is unknown here; the spec's estimate stands in.
        &EstimateCounter
    }

    fn embed(&self, texts: &[&str], _kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.cfg.max_batch.max(1)) {
            out.extend(self.request(chunk)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_accepts_roots_with_or_without_v1() {
        let mut cfg = OpenAiConfig {
            base_url: "http://localhost:11434".into(),
            ..OpenAiConfig::default()
        };
        assert_eq!(cfg.endpoint(), "http://localhost:11434/v1/embeddings");
        cfg.base_url = "https://api.example.com/v1/".into();
        assert_eq!(cfg.endpoint(), "https://api.example.com/v1/embeddings");
    }

    #[test]
    fn config_from_variables() {
        let vars = [
            ("BIB_OPENAI_BASE_URL", "http://h:1"),
            ("OPENAI_API_KEY", "k"),
            ("BIB_EMBED_MODEL", "nomic-embed-text"),
            ("BIB_EMBED_DIMENSIONS", "768"),
        ];
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        let cfg = OpenAiConfig::from_lookup(get).unwrap();
        assert_eq!(cfg.base_url, "http://h:1");
        assert_eq!(cfg.api_key.as_deref(), Some("k"));
        assert_eq!(cfg.model, "nomic-embed-text");
        assert_eq!(cfg.dimensions, Some(768));
        let bad = OpenAiConfig::from_lookup(|k| (k == "BIB_EMBED_DIMENSIONS").then(|| "x".into()));
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("BIB_EMBED_DIMENSIONS"));
    }
}
