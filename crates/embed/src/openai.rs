//! `openai`: any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, TEI, vLLM,
//! LM Studio, …) over a blocking HTTP client.
//!
//! Configuration comes from [`OpenAiConfig`]; the product builds it from the `[embed]` settings
//! (`bib_app::model::load_embedder`, the one place a model id becomes an embedder), so this crate
//! reads no environment. Requests are split into batches of at most
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

/// The prefix of an endpoint model's id: `openai:<model>`, or `openai:<model>@<dimensions>`
/// when a width is requested ([`OpenAiEmbedder::new`] makes it, a knowledge base records it).
pub const ID_PREFIX: &str = "openai:";

/// Retries of [`OpenAiEmbedder::probe`] (after the first attempt).
pub const PROBE_RETRIES: u32 = 2;

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
            Some(d) => format!("{ID_PREFIX}{}@{d}", cfg.model),
            None => format!("{ID_PREFIX}{}", cfg.model),
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

    /// Embed one short text: checks that the endpoint answers (with the configured width, when
    /// one is set) and learns the width; returns it. At most [`PROBE_RETRIES`] retries, so an
    /// endpoint that is down is reported in about a second, not after the full backoff that
    /// protects a long ingest from a passing failure.
    pub fn probe(&self) -> Result<usize, EmbedError> {
        let v = self.request_with(
            &["dimension probe"],
            self.cfg.max_retries.min(PROBE_RETRIES),
        )?;
        Ok(v.first().map_or(0, Vec::len))
    }

    fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.request_with(texts, self.cfg.max_retries)
    }

    fn request_with(&self, texts: &[&str], max_retries: u32) -> Result<Vec<Vec<f32>>, EmbedError> {
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
            if attempt >= max_retries {
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
}
