//! The `openai` provider against a tiny HTTP server started on 127.0.0.1 inside the test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bib_embed::openai::{OpenAiConfig, OpenAiEmbedder};
use bib_embed::{EmbedKind, Embedder};

#[derive(Debug, Clone)]
struct Seen {
    path: String,
    auth: Option<String>,
    body: serde_json::Value,
}

/// Serves `script` in order (a status per connection; 200 answers embed the inputs as
/// `[len, 2, 0]`, listed in reverse index order), then stops.
fn serve(script: Vec<u16>) -> (String, Arc<Mutex<Vec<Seen>>>, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let handle = std::thread::spawn(move || {
        for status in script {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_string();
            let (mut len, mut auth) = (0usize, None);
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                let (name, value) = line.split_once(':').unwrap();
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => len = value.trim().parse().unwrap(),
                    "authorization" => auth = Some(value.trim().to_string()),
                    _ => {}
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            log.lock().unwrap().push(Seen {
                path,
                auth,
                body: body.clone(),
            });
            let answer = if status == 200 {
                let inputs = body["input"].as_array().unwrap();
                let mut data: Vec<serde_json::Value> = inputs
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let n = t.as_str().unwrap().len() as f32;
                        serde_json::json!({"object": "embedding", "index": i, "embedding": [n, 2.0, 0.0]})
                    })
                    .collect();
                data.reverse();
                serde_json::json!({"object": "list", "data": data, "model": body["model"]})
                    .to_string()
            } else {
                r#"{"error": {"message": "slow down"}}"#.to_string()
            };
            let mut stream = stream;
            let extra = if status == 429 {
                "Retry-After: 0\r\n"
            } else {
                ""
            };
            write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{answer}",
                answer.len()
            )
            .unwrap();
        }
    });
    (url, seen, handle)
}

fn config(url: &str) -> OpenAiConfig {
    OpenAiConfig {
        base_url: url.to_string(),
        model: "test-model".into(),
        api_key: Some("secret".into()),
        dimensions: None,
        max_batch: 2,
        max_retries: 3,
        backoff: Duration::from_millis(5),
        timeout: Duration::from_secs(10),
        ..OpenAiConfig::default()
    }
}

#[test]
fn embeds_in_batches_retries_and_normalises() {
    // First batch: 429 then 503 then 200; second batch: 200.
    let (url, seen, handle) = serve(vec![429, 503, 200, 200]);
    let e = OpenAiEmbedder::new(config(&url));
    let v = e.embed(&["abc", "a", "abcdef"], EmbedKind::Query).unwrap();
    handle.join().unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(e.dimensions(), 3);
    for (vec, n) in v.iter().zip([3.0f32, 1.0, 6.0]) {
        let norm = (n * n + 4.0).sqrt();
        assert!((vec[0] - n / norm).abs() < 1e-6, "{vec:?}");
        assert!((vec[1] - 2.0 / norm).abs() < 1e-6);
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    assert!(seen.iter().all(|s| s.path == "/v1/embeddings"));
    assert!(seen
        .iter()
        .all(|s| s.auth.as_deref() == Some("Bearer secret")));
    assert_eq!(seen[2].body["input"], serde_json::json!(["abc", "a"]));
    assert_eq!(seen[3].body["input"], serde_json::json!(["abcdef"]));
    assert_eq!(seen[0].body["model"], "test-model");
    assert!(seen[0].body.get("dimensions").is_none());
}

#[test]
fn gives_up_after_the_retry_budget_and_does_not_retry_client_errors() {
    let (url, seen, handle) = serve(vec![500, 500, 500, 500]);
    let e = OpenAiEmbedder::new(config(&url));
    let err = e.embed(&["x"], EmbedKind::Passage).unwrap_err();
    handle.join().unwrap();
    assert!(
        err.to_string().contains("giving up after 4 attempts"),
        "{err}"
    );
    // The last attempt's failure is the source, not text pasted into the message.
    let source = std::error::Error::source(&err).expect("the last failure");
    assert!(source.to_string().contains("HTTP 500"), "{source}");
    assert_eq!(seen.lock().unwrap().len(), 4);

    let (url, seen, handle) = serve(vec![400]);
    let mut cfg = config(&url);
    cfg.dimensions = Some(3);
    let e = OpenAiEmbedder::new(cfg);
    let err = e.embed(&["x"], EmbedKind::Passage).unwrap_err();
    handle.join().unwrap();
    assert!(err.to_string().contains("HTTP 400"), "{err}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body["dimensions"], 3);
}

#[test]
fn wrong_width_is_an_error() {
    let (url, _seen, handle) = serve(vec![200]);
    let mut cfg = config(&url);
    cfg.dimensions = Some(8);
    let e = OpenAiEmbedder::new(cfg);
    assert_eq!(e.model_id(), "openai:test-model@8");
    let err = e.embed(&["x"], EmbedKind::Passage).unwrap_err();
    handle.join().unwrap();
    assert!(err.to_string().contains("expected 8-dimensional"), "{err}");
}
