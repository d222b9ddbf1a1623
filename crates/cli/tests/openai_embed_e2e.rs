//! End-to-end: a knowledge base built with an OpenAI-compatible embeddings endpoint
//! (`--model openai:<name>`, the endpoint from BIB_EMBED_BASE_URL), on the real binary.
//!
//! The endpoint is a small HTTP server on 127.0.0.1 inside the test that answers
//! `POST /v1/embeddings` with vectors of the real installed use-m3 model, so retrieval quality
//! is real: the paraphrased question must find its document. Set `BIB_SKIP_MODEL_TESTS=1`
//! where the model cannot be installed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bib_embed::{EmbedKind, Embedder};
use serde_json::{json, Value};

mod ask_support;
mod ingest_support;

use ask_support::*;

/// One request the endpoint received.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    model: String,
    inputs: Vec<String>,
    /// The width asked for, if any.
    dimensions: Option<u64>,
}

/// A running endpoint: its base URL (no `/v1`) and what it received.
struct Endpoint {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Endpoint {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Start the endpoint: every connection is one request, answered with use-m3's vectors of its
/// inputs (listed in reverse order, with their index, as some servers do). It runs until the
/// test process ends.
fn start_endpoint(model: Arc<dyn Embedder>) -> Endpoint {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            // A broken request must not stop the endpoint for the next one.
            let _ = answer(stream, model.as_ref(), &log);
        }
    });
    Endpoint { url, seen }
}

fn answer(stream: TcpStream, model: &dyn Embedder, log: &Mutex<Vec<Seen>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                len = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let (status, answer) = if method != "POST" || path != "/v1/embeddings" {
        (404, json!({"error": {"message": "not found"}}))
    } else {
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let inputs: Vec<String> = match &body["input"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .map(|t| t.as_str().unwrap_or_default().to_string())
                .collect(),
            _ => Vec::new(),
        };
        log.lock().unwrap().push(Seen {
            path: path.clone(),
            model: body["model"].as_str().unwrap_or_default().to_string(),
            inputs: inputs.clone(),
            dimensions: body["dimensions"].as_u64(),
        });
        let width = body["dimensions"].as_u64().map(|d| d as usize);
        let texts: Vec<&str> = inputs.iter().map(String::as_str).collect();
        match model.embed(&texts, EmbedKind::Passage) {
            Ok(vectors) => {
                let mut data: Vec<Value> = vectors
                    .into_iter()
                    .enumerate()
                    // A width asked for cuts the vector, as shortening models do.
                    .map(|(i, mut v)| {
                        v.truncate(width.unwrap_or(v.len()));
                        json!({"object": "embedding", "index": i, "embedding": v})
                    })
                    .collect();
                data.reverse();
                (
                    200,
                    json!({"object": "list", "data": data, "model": body["model"]}),
                )
            }
            Err(e) => (500, json!({"error": {"message": e.to_string()}})),
        }
    };
    let answer = answer.to_string();
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    )?;
    stream.flush()
}

/// use-m3 as the endpoint's model, or `None` (skip) where it is not installed.
fn endpoint_model(cwd: &Path) -> Option<Arc<dyn Embedder>> {
    if !model_available(cwd) {
        return None;
    }
    Some(Arc::from(bib_embed::load_installed("use-m3").unwrap()))
}

/// Four pages on unrelated subjects.
fn wiki(root: &Path) -> PathBuf {
    let wiki = root.join("wiki");
    write(
        &wiki,
        "trains.md",
        "---\ntitle: Rail travel\n---\n# Rail travel\n\n\
         High-speed trains connect Madrid and Barcelona in under three hours. \
         Tickets can be bought at the station or online, and seats are assigned.\n",
    );
    write(
        &wiki,
        "cats.md",
        "---\ntitle: Pets\n---\n# Pets\n\n\
         Cats sleep most of the afternoon in a sunny spot. \
         They purr when they are content and groom their fur often.\n",
    );
    write(
        &wiki,
        "bread.md",
        "---\ntitle: Baking\n---\n# Baking\n\n\
         Bread dough rises while yeast ferments the sugars in the flour. \
         Bake the loaf in a hot oven until the crust is golden.\n",
    );
    write(
        &wiki,
        "push.md",
        "---\ntitle: Pushing packages\n---\n# Push\n\n\
         Use `nuget push` to publish a package to a feed. \
         The default timeout of nuget push is 300 seconds.\n",
    );
    wiki
}

fn ingest(
    cwd: &Path,
    wiki: &Path,
    store: &Path,
    model: &str,
    env: &[(&str, &str)],
) -> std::process::Output {
    bib(
        cwd,
        &[
            "ingest",
            wiki.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "--model",
            model,
            "--json",
        ],
        env,
    )
}

#[test]
fn ingest_status_and_ask_through_an_openai_compatible_endpoint() {
    let t = tempfile::tempdir().unwrap();
    let cwd = t.path();
    let Some(model) = endpoint_model(cwd) else {
        return;
    };
    let endpoint = start_endpoint(model);
    let env = [("BIB_EMBED_BASE_URL", endpoint.url.as_str())];
    let wiki = wiki(cwd);
    let store = cwd.join("kb.sqlite");

    let o = ingest(cwd, &wiki, &store, "openai:test-model", &env);
    assert!(o.status.success(), "ingest failed: {}", text(&o));
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(run["status"], "completed", "{run:#}");
    assert!(
        run["phase_b"]["chunks_embedded"].as_u64().unwrap() >= 4,
        "{run:#}"
    );
    let at_ingest = endpoint.seen();
    assert!(!at_ingest.is_empty());
    for s in &at_ingest {
        assert_eq!(
            (s.path.as_str(), s.model.as_str()),
            ("/v1/embeddings", "test-model")
        );
    }
    assert!(
        at_ingest
            .iter()
            .any(|s| s.inputs.iter().any(|i| i.contains("High-speed trains"))),
        "the chunks were embedded by the endpoint: {at_ingest:?}"
    );

    // The knowledge base records the endpoint model as its own.
    let o = bib(cwd, &["status", "--store", store.to_str().unwrap()], &env);
    assert!(o.status.success(), "status failed: {}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("model: openai:test-model"),
        "{}",
        text(&o)
    );

    // A paraphrase that shares no content word with its page: the vectors find it, and the
    // question itself is embedded by the endpoint (the store's model, loaded automatically).
    let q = "How long does the fast railway journey between the two Spanish cities take?";
    for mode in ["hybrid", "vector"] {
        let o = bib(
            cwd,
            &[
                "ask",
                q,
                "--json",
                "--mode",
                mode,
                "--store",
                store.to_str().unwrap(),
            ],
            &env,
        );
        assert!(o.status.success(), "ask --mode {mode} failed: {}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["mode"], mode, "{v:#}");
        assert_eq!(v["results"][0]["path"], "trains.md", "--mode {mode}: {v:#}");
    }
    let asked = &endpoint.seen()[at_ingest.len()..];
    assert!(
        asked.iter().any(|s| s.inputs.iter().any(|i| i == q)),
        "the endpoint embedded the question: {asked:?}"
    );

    // Without the endpoint's address the ask says what to set.
    let o = bib(
        cwd,
        &["ask", q, "--json", "--store", store.to_str().unwrap()],
        &[],
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("BIB_EMBED_BASE_URL"), "{}", text(&o));
}

#[test]
fn a_width_asked_for_is_recorded_in_the_model_id_and_kept() {
    let t = tempfile::tempdir().unwrap();
    let cwd = t.path();
    let Some(model) = endpoint_model(cwd) else {
        return;
    };
    let endpoint = start_endpoint(model);
    let wiki = wiki(cwd);
    let store = cwd.join("kb.sqlite");
    let url = endpoint.url.as_str();
    let o = ingest(
        cwd,
        &wiki,
        &store,
        "openai:test-model",
        &[("BIB_EMBED_BASE_URL", url), ("BIB_EMBED_DIMENSIONS", "128")],
    );
    assert!(o.status.success(), "ingest failed: {}", text(&o));
    let at_ingest = endpoint.seen();
    assert!(
        at_ingest.iter().all(|s| s.dimensions == Some(128)),
        "{at_ingest:?}"
    );
    let o = bib(cwd, &["status", "--store", store.to_str().unwrap()], &[]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("model: openai:test-model@128"),
        "{}",
        text(&o)
    );
    // A later ask gets the width from the knowledge base, whatever the settings say now.
    let q = "How long does the fast railway journey between the two Spanish cities take?";
    let o = bib(
        cwd,
        &[
            "ask",
            q,
            "--json",
            "--mode",
            "vector",
            "--store",
            store.to_str().unwrap(),
        ],
        &[("BIB_EMBED_BASE_URL", url), ("BIB_EMBED_DIMENSIONS", "64")],
    );
    assert!(o.status.success(), "ask failed: {}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["results"][0]["path"], "trains.md", "{v:#}");
    let asked = &endpoint.seen()[at_ingest.len()..];
    assert!(
        asked
            .iter()
            .any(|s| s.dimensions == Some(128) && s.inputs.iter().any(|i| i == q)),
        "{asked:?}"
    );
}

#[test]
fn an_endpoint_that_is_down_fails_the_ingest_naming_it_and_loses_nothing() {
    let t = tempfile::tempdir().unwrap();
    let cwd = t.path();
    let Some(model) = endpoint_model(cwd) else {
        return;
    };
    let endpoint = start_endpoint(model);
    let wiki = wiki(cwd);
    let store = cwd.join("kb.sqlite");
    let live = [("BIB_EMBED_BASE_URL", endpoint.url.as_str())];
    let o = ingest(cwd, &wiki, &store, "openai:test-model", &live);
    assert!(o.status.success(), "ingest failed: {}", text(&o));
    let before = ingest_support::snapshot(&store);
    assert_eq!(before.len(), 4);

    // The wiki changes, and the endpoint is down (a port nobody listens on).
    write(
        &wiki,
        "cats.md",
        "# Pets\n\nDogs bark at the postman every morning.\n",
    );
    std::fs::remove_file(wiki.join("bread.md")).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("http://127.0.0.1:{port}");
    for model in ["openai:test-model", ""] {
        // Named, or the knowledge base's own (BIB_EMBED_BASE_URL through its older name).
        let o = if model.is_empty() {
            bib(
                cwd,
                &[
                    "ingest",
                    wiki.to_str().unwrap(),
                    "--store",
                    store.to_str().unwrap(),
                ],
                &[("BIB_OPENAI_BASE_URL", down.as_str())],
            )
        } else {
            ingest(
                cwd,
                &wiki,
                &store,
                model,
                &[("BIB_EMBED_BASE_URL", down.as_str())],
            )
        };
        assert!(!o.status.success(), "{}", text(&o));
        assert!(
            text(&o).contains(&format!("{down}/v1/embeddings")),
            "the error names the endpoint: {}",
            text(&o)
        );
        assert_eq!(
            ingest_support::snapshot(&store),
            before,
            "nothing stored was lost or changed"
        );
    }

    // No address at all: the error says what to set; an unknown model names the known ones.
    let o = ingest(cwd, &wiki, &store, "openai:test-model", &[]);
    assert!(!o.status.success());
    let shown = text(&o);
    assert!(
        shown.contains("BIB_EMBED_BASE_URL") && shown.contains("[embed] base_url"),
        "{shown}"
    );
    let o = ingest(cwd, &wiki, &store, "bge-m3", &live);
    assert!(!o.status.success());
    let shown = text(&o);
    assert!(
        shown.contains("unknown embedding model `bge-m3`")
            && shown.contains("use-m3")
            && shown.contains("openai:<name>"),
        "{shown}"
    );
    assert_eq!(ingest_support::snapshot(&store), before);

    // Back up, the same knowledge base takes the change.
    let o = bib(
        cwd,
        &[
            "ingest",
            wiki.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "--json",
        ],
        &live,
    );
    assert!(o.status.success(), "ingest failed: {}", text(&o));
    let after = ingest_support::snapshot(&store);
    assert_eq!(after.len(), 3);
    assert_ne!(after, before);
}
