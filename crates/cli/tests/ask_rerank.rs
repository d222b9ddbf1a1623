//! End-to-end: `bib ask --rerank` on the real binary with the real default model, against a
//! fake OpenAI-compatible chat server on 127.0.0.1 that plays the reranking model: it scores
//! 10 the passage holding a marker string and 0 the others. The reranker moves that passage
//! first; without `--rerank` it is not first; a server answering garbage or HTTP 500 leaves the
//! plain order, with a warning on stderr. Set `BIB_SKIP_MODEL_TESTS=1` where the model cannot be
//! installed.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};

mod ask_support;

use ask_support::*;

const MARKER: &str = "ZEBRA-7731";
const Q: &str = "What is the default timeout of nuget push?";

/// A small wiki where the marker sits in a page the question does not favour.
fn setup() -> Option<(tempfile::TempDir, PathBuf)> {
    let t = tempfile::tempdir().unwrap();
    if !model_available(t.path()) {
        return None;
    }
    let wiki = t.path().join("wiki");
    write(
        &wiki,
        "push.md",
        "---\ntitle: Pushing packages\n---\n# Push\n\n\
         Use `nuget push` to publish a package to a feed. The default timeout of nuget push is \
         300 seconds. You can change it with the -Timeout option.\n",
    );
    write(
        &wiki,
        "config.md",
        &format!(
            "---\ntitle: Configuration\n---\n# Config files\n\n\
             The nuget.config file lists the package sources. Each source has a name and a URL. \
             Internal code {MARKER}.\n"
        ),
    );
    write(
        &wiki,
        "restore.md",
        "---\ntitle: Restoring packages\n---\n# Restore\n\n\
         Restore downloads packages from the configured sources into the global cache.\n",
    );
    let store = t.path().join("kb.sqlite");
    ingest(t.path(), &wiki, &store, &[]);
    Some((t, store))
}

/// The numbered passages of a rerank request's user message, `(id, text)`.
fn passages(request_body: &str) -> Vec<(usize, String)> {
    let v: Value = serde_json::from_str(request_body).expect("the request is JSON");
    let user = v["messages"][1]["content"].as_str().unwrap_or_default();
    let mut starts = Vec::new();
    let mut from = 0;
    for id in 1.. {
        match user[from..].find(&format!("[{id}] ")) {
            Some(i) => {
                starts.push((id, from + i));
                from += i + 1;
            }
            None => break,
        }
    }
    starts
        .iter()
        .enumerate()
        .map(|(k, &(id, at))| {
            let end = starts.get(k + 1).map_or(user.len(), |s| s.1);
            (id, user[at..end].to_string())
        })
        .collect()
}

/// The reranking model: 10 for the passage holding the marker, 0 for the others, as JSON in
/// a fenced block (as chatty models answer).
fn judge_by_marker(body: &str) -> String {
    let scores: Vec<Value> = passages(body)
        .into_iter()
        .map(|(id, p)| json!({"id": id, "score": if p.contains(MARKER) { 10 } else { 0 }}))
        .collect();
    let content = format!("```json\n{}\n```", json!({ "scores": scores }));
    let reply = json!({"choices": [{"message": {"role": "assistant", "content": content}}]});
    http_response("200 OK", "application/json", &reply.to_string())
}

fn ask(cwd: &Path, store: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = vec![
        "ask",
        Q,
        "--json",
        "--no-log",
        "--store",
        store.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = bib(cwd, &args, env);
    assert!(o.status.success(), "ask {extra:?} failed: {}", text(&o));
    o
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", text(o)))
}

fn paths(v: &Value) -> Vec<String> {
    v["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn rerank_puts_the_judged_passage_first() {
    let Some((t, store)) = setup() else { return };
    let cwd = t.path();
    let plain = json_of(&ask(cwd, &store, &[], &[]));
    assert_ne!(paths(&plain)[0], "config.md", "{plain:#}");
    assert!(
        paths(&plain).contains(&"config.md".to_string()),
        "{plain:#}"
    );
    assert!(plain["rerank"].is_null() && plain["warnings"] == json!([]));

    let (url, h) = fake_chat(judge_by_marker);
    let llm = [
        ("BIB_LLM_BASE_URL", url.as_str()),
        ("BIB_LLM_MODEL", "judge"),
    ];
    let o = ask(cwd, &store, &["--rerank"], &llm);
    let v = json_of(&o);
    assert_eq!(paths(&v)[0], "config.md", "{v:#}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(v["warnings"], json!([]));
    let top = &v["results"][0];
    assert_eq!(top["explain"]["llm"]["raw"], 10.0, "{top:#}");
    assert_eq!(top["explain"]["final"], top["score"]);
    assert_eq!(v["rerank"]["depth"], 20);
    let req = h.join().unwrap();
    assert!(req.starts_with("POST /v1/chat/completions"), "{req}");
    assert!(req.contains("\"response_format\":{\"type\":\"json_object\"}"));
    assert!(req.contains("\"model\":\"judge\""));

    // The environment switches it on too; --explain prints the LLM's part.
    let (url, h) = fake_chat(judge_by_marker);
    let o = bib(
        cwd,
        &[
            "ask",
            Q,
            "--explain",
            "--no-log",
            "--store",
            store.to_str().unwrap(),
        ],
        &[
            ("BIB_LLM_BASE_URL", url.as_str()),
            ("BIB_LLM_MODEL", "judge"),
            ("RETRIEVAL_RERANK", "1"),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("[1] config.md"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("+ llm") && l.contains("(raw 10.000)")),
        "{out}"
    );
    h.join().unwrap();

    // Depth 1 sends only the first candidate, which is not the marker's: nothing moves.
    let (url, h) = fake_chat(judge_by_marker);
    let llm = [
        ("BIB_LLM_BASE_URL", url.as_str()),
        ("BIB_LLM_MODEL", "judge"),
    ];
    let v = json_of(&ask(
        cwd,
        &store,
        &["--rerank", "--rerank-depth", "1"],
        &llm,
    ));
    assert_eq!(paths(&v), paths(&plain));
    let req = h.join().unwrap();
    assert!(req.contains("[1] ") && !req.contains("[2] "), "{req}");
}

#[test]
fn a_failing_reranker_leaves_the_plain_order_with_a_warning() {
    let Some((t, store)) = setup() else { return };
    let cwd = t.path();
    let plain = paths(&json_of(&ask(cwd, &store, &[], &[])));
    let garbage = |_: &str| {
        let reply = json!({"choices": [{"message": {"content": "Passage 2 looks best to me."}}]});
        http_response("200 OK", "application/json", &reply.to_string())
    };
    let error = |_: &str| http_response("500 Internal Server Error", "text/plain", "boom");
    for (what, responder) in [
        (
            "garbage",
            Box::new(garbage) as Box<dyn FnOnce(&str) -> String + Send>,
        ),
        ("http 500", Box::new(error)),
    ] {
        let (url, h) = fake_chat(responder);
        let llm = [
            ("BIB_LLM_BASE_URL", url.as_str()),
            ("BIB_LLM_MODEL", "judge"),
        ];
        let o = ask(cwd, &store, &["--rerank"], &llm);
        let v = json_of(&o);
        assert_eq!(paths(&v), plain, "{what}: {v:#}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("warning: rerank:") && err.contains("without the reranker"),
            "{what}: {err}"
        );
        assert_eq!(v["warnings"].as_array().map(Vec::len), Some(1), "{what}");
        assert!(v["results"][0]["explain"]["llm"].is_null(), "{what}");
        h.join().unwrap();
    }
    // No endpoint configured: the same, and the warning says what to set.
    let o = ask(cwd, &store, &["--rerank"], &[]);
    assert_eq!(paths(&json_of(&o)), plain);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("BIB_LLM_BASE_URL"),
        "{}",
        text(&o)
    );
}
