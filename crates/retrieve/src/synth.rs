//! Optional answer synthesis over an OpenAI-compatible chat-completions endpoint
//! (Ollama, vLLM, llama.cpp server, LM Studio, OpenAI).
//!
//! The question and the (trimmed) context go out with numbered sources; the model is told to
//! cite them as `[n]`. The answer is streamed (server-sent events) to a writer as it arrives;
//! a server that ignores `stream: true` and answers with one JSON body works too.

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::RetrieveError;
use crate::index::ChunkRecord;
use crate::retrieve::ScoredChunk;

/// Where and how to call the chat endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SynthConfig {
    /// Base URL up to and including the API version, e.g. `http://localhost:11434/v1`.
    pub base_url: String,
    /// Model name as the server knows it.
    pub model: String,
    /// Bearer token, when the server needs one.
    #[serde(default, skip_serializing)]
    pub api_key: Option<String>,
    /// Whole-request timeout in seconds.
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
}

fn default_timeout() -> u64 {
    120
}

impl SynthConfig {
    /// Build from optional parts, failing with a message that says what to set.
    pub fn from_parts(
        base_url: Option<String>,
        model: Option<String>,
        api_key: Option<String>,
    ) -> Result<Self, RetrieveError> {
        let missing = |what: &str, env: &str| {
            RetrieveError::Synthesis(format!(
                "no {what} configured: set {env} or `[llm] {}` in bib.toml",
                what.replace(' ', "_")
            ))
        };
        let base_url = base_url
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| missing("base url", "BIB_LLM_BASE_URL"))?;
        let model = model
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| missing("model", "BIB_LLM_MODEL"))?;
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(RetrieveError::Synthesis(format!(
                "base url `{base_url}` must start with http:// or https://"
            )));
        }
        Ok(Self {
            base_url,
            model,
            api_key: api_key.filter(|s| !s.is_empty()),
            timeout_s: default_timeout(),
        })
    }

    fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

/// The source label of a chunk: `path:lines › heading › subheading`.
pub fn source_label(c: &ScoredChunk) -> String {
    record_label(&c.chunk)
}

/// [`source_label`] of a stored chunk (the reranker labels its passages the same way).
pub fn record_label(rec: &ChunkRecord) -> String {
    let mut s = rec.cite();
    for h in &rec.heading_path {
        s.push_str(" › ");
        s.push_str(h);
    }
    s
}

/// The chat messages: instructions, then numbered sources and the question.
pub fn build_messages(question: &str, chunks: &[ScoredChunk]) -> Value {
    let mut ctx = String::new();
    for (i, c) in chunks.iter().enumerate() {
        ctx.push_str(&format!(
            "[{}] {}\n{}\n\n",
            i + 1,
            source_label(c),
            c.text.trim()
        ));
    }
    json!([
        {"role": "system", "content":
            "You answer questions using only the numbered sources provided. Cite every claim \
             with the source number in brackets, like [1] or [2][3]. If the sources do not \
             contain the answer, say so. Answer in the language of the question."},
        {"role": "user", "content": format!("Sources:\n\n{ctx}Question: {question}")}
    ])
}

/// POST `body` to the chat-completions endpoint of `cfg` (with its bearer token, when set),
/// the whole request bounded by `timeout`. An HTTP error status becomes
/// [`RetrieveError::Synthesis`] naming the endpoint, the code and the start of the body; a
/// connection failure [`RetrieveError::SynthesisFailed`]. Shared by answer synthesis and the
/// reranker ([`crate::rerank`]): one endpoint configuration, one way to call it.
pub(crate) fn post_chat(
    cfg: &SynthConfig,
    body: &Value,
    accept: &str,
    timeout: Duration,
) -> Result<ureq::Response, RetrieveError> {
    let agent = ureq::AgentBuilder::new().timeout(timeout).build();
    let mut req = agent
        .post(&cfg.endpoint())
        .set("Content-Type", "application/json")
        .set("Accept", accept);
    if let Some(k) = &cfg.api_key {
        req = req.set("Authorization", &format!("Bearer {k}"));
    }
    match req.send_string(&body.to_string()) {
        Ok(r) => Ok(r),
        Err(ureq::Error::Status(code, r)) => {
            let mut text = String::new();
            // The start of the body says what went wrong; a huge one is not read whole.
            let _ = r.into_reader().take(4096).read_to_string(&mut text);
            Err(RetrieveError::Synthesis(format!(
                "{} answered HTTP {code}: {}",
                cfg.endpoint(),
                text.chars().take(300).collect::<String>()
            )))
        }
        Err(e) => Err(RetrieveError::SynthesisFailed {
            reason: format!("cannot reach {}", cfg.endpoint()),
            source: Box::new(e),
        }),
    }
}

/// Send the question and context, stream the answer into `out`, and return it whole.
pub fn synthesize(
    cfg: &SynthConfig,
    question: &str,
    chunks: &[ScoredChunk],
    out: &mut dyn Write,
) -> Result<String, RetrieveError> {
    let body = json!({
        "model": cfg.model,
        "messages": build_messages(question, chunks),
        "stream": true,
    });
    let resp = post_chat(
        cfg,
        &body,
        "text/event-stream",
        Duration::from_secs(cfg.timeout_s.max(1)),
    )?;
    let io = |e: std::io::Error| RetrieveError::SynthesisFailed {
        reason: "reading the answer".into(),
        source: Box::new(e),
    };
    let is_json = resp.content_type().contains("json");
    let mut answer = String::new();
    if is_json {
        let v: Value = serde_json::from_reader(resp.into_reader()).map_err(|e| {
            RetrieveError::SynthesisFailed {
                reason: "bad JSON answer".into(),
                source: Box::new(e),
            }
        })?;
        let text = v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        answer.push_str(text);
        out.write_all(text.as_bytes()).map_err(io)?;
    } else {
        let reader = BufReader::new(resp.into_reader());
        for line in reader.lines() {
            let line = line.map_err(io)?;
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                break;
            }
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if let Some(err) = v.get("error") {
                return Err(RetrieveError::Synthesis(format!("endpoint error: {err}")));
            }
            if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
                answer.push_str(t);
                out.write_all(t.as_bytes()).map_err(io)?;
                out.flush().map_err(io)?;
            }
        }
    }
    Ok(answer)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    fn chunk(path: &str, content: &str) -> ScoredChunk {
        ScoredChunk {
            chunk: ChunkRecord {
                id: 1,
                path: path.into(),
                chunk_index: 0,
                title: "T".into(),
                heading_path: vec!["Uso".into()],
                content: content.into(),
                metadata: Value::Null,
                ..Default::default()
            },
            text: content.into(),
            score: 0.5,
            bm25: None,
            vector: None,
            trim: None,
            explain: Default::default(),
        }
    }

    /// A one-shot fake server: returns the request it saw and answers with `response` (the
    /// reranker's tests use it too).
    pub(crate) fn serve_once(response: String) -> (String, std::thread::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", l.local_addr().unwrap());
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = Vec::new();
            let mut tmp = [0u8; 4096];
            loop {
                let n = s.read(&mut tmp).unwrap();
                buf.extend_from_slice(&tmp[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some(hdr_end) = text.find("\r\n\r\n") {
                    let len = text[..hdr_end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if buf.len() >= hdr_end + 4 + len {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            s.write_all(response.as_bytes()).unwrap();
            String::from_utf8_lossy(&buf).to_string()
        });
        (url, h)
    }

    #[test]
    fn streams_sse_and_sends_numbered_sources() {
        let events = [
            r#"data: {"choices":[{"delta":{"role":"assistant"}}]}"#,
            r#"data: {"choices":[{"delta":{"content":"300 s "}}]}"#,
            r#"data: {"choices":[{"delta":{"content":"[1]."}}]}"#,
            "data: [DONE]",
        ];
        let body: String = events.iter().map(|e| format!("{e}\n\n")).collect();
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let (url, h) = serve_once(resp);
        let mut cfg =
            SynthConfig::from_parts(Some(url), Some("tiny".into()), Some("sk-x".into())).unwrap();
        cfg.timeout_s = 10;
        let mut out = Vec::new();
        let chunks = [chunk("ref/push.md", "The default is 300 seconds.")];
        let ans = synthesize(&cfg, "timeout?", &chunks, &mut out).unwrap();
        assert_eq!(ans, "300 s [1].");
        assert_eq!(String::from_utf8(out).unwrap(), "300 s [1].");
        let req = h.join().unwrap();
        assert!(req.starts_with("POST /v1/chat/completions"), "{req}");
        assert!(req.contains("Bearer sk-x"));
        assert!(req.contains("\"stream\":true"));
        assert!(req.contains("[1] ref/push.md › Uso"));
        assert!(req.contains("Question: timeout?"));
    }

    #[test]
    fn plain_json_answer_and_http_errors() {
        let body = r#"{"choices":[{"message":{"content":"Sí [1]."}}]}"#;
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let (url, h) = serve_once(resp);
        let cfg = SynthConfig::from_parts(Some(url), Some("m".into()), None).unwrap();
        let mut out = Vec::new();
        assert_eq!(synthesize(&cfg, "q", &[], &mut out).unwrap(), "Sí [1].");
        let req = h.join().unwrap();
        assert!(!req.to_ascii_lowercase().contains("authorization"));

        let body = r#"{"error":"model not found"}"#;
        let resp = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let (url, h) = serve_once(resp);
        let cfg = SynthConfig::from_parts(Some(url), Some("m".into()), None).unwrap();
        let err = synthesize(&cfg, "q", &[], &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("404") && err.contains("model not found"),
            "{err}"
        );
        h.join().unwrap();
    }

    #[test]
    fn unconfigured_is_a_clear_error() {
        let e = SynthConfig::from_parts(None, Some("m".into()), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("BIB_LLM_BASE_URL"), "{e}");
        let e = SynthConfig::from_parts(Some("http://x".into()), None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("BIB_LLM_MODEL"), "{e}");
        assert!(SynthConfig::from_parts(Some("ftp://x".into()), Some("m".into()), None).is_err());
    }
}
