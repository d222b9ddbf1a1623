//! End-to-end tests of `bib pack` on the real binary.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn bib(args: &[&str], stdin: &str, envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bib"));
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn bib");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn history_json(n: usize) -> String {
    let mut msgs = vec![serde_json::json!({
        "role": "user",
        "content": "the spare key is under the blue flower pot",
        "ts": 1_786_104_000
    })];
    for i in 0..n {
        msgs.push(serde_json::json!({
            "role": if i % 2 == 0 { "assistant" } else { "user" },
            "content": format!("turn {i}: small talk about weather and football number {i}")
        }));
    }
    msgs.push(serde_json::json!({"role": "user", "content": "where is the spare key?"}));
    serde_json::Value::Array(msgs).to_string()
}

fn tokens(v: &serde_json::Value) -> usize {
    v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| bib_pack::estimate_tokens(m["content"].as_str().unwrap()) + 4)
        .sum()
}

#[test]
fn packs_openai_history_within_budget_with_stable_shape() {
    let out = bib(&["pack", "--budget", "200"], &history_json(150), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let msgs = v["messages"].as_array().expect("messages array");
    assert!(msgs
        .iter()
        .all(|m| m["role"].is_string() && m["content"].is_string()));
    assert!(v["stats"].is_object());
    assert_eq!(v["stats"]["mode"], "lexical");
    assert!(tokens(&v) <= 200, "{} > 200", tokens(&v));
    assert_eq!(
        v["stats"]["output_tokens"].as_u64().unwrap() as usize,
        tokens(&v)
    );
    let text = v.to_string();
    assert!(text.contains("blue flower pot"), "{text}");
    assert_eq!(msgs.last().unwrap()["content"], "where is the spare key?");
}

#[test]
fn stats_flag_prints_a_summary_to_stderr() {
    let out = bib(
        &["pack", "--budget", "300", "--stats"],
        &history_json(50),
        &[],
    );
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mode=lexical") && err.contains("output_tokens="),
        "{err}"
    );
}

#[test]
fn anthropic_blocks_are_accepted() {
    let h = serde_json::json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "read the config"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "conf/app.toml"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "port = 8443\nhost = \"zeta\""}]},
        {"role": "user", "content": [{"type": "text", "text": "which port?"}]}
    ]});
    let out = bib(&["pack", "--budget", "500"], &h.to_string(), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = v.to_string();
    assert!(text.contains("port = 8443"), "{text}");
    assert!(text.contains("[Tool result]: "), "{text}");
}

#[test]
fn malformed_json_is_a_clear_error() {
    let out = bib(&["pack", "--budget", "100"], "[{\"role\": \"user\", ", &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not valid JSON"), "{err}");

    let out = bib(
        &["pack", "--budget", "100"],
        r#"[{"role": "user", "content": 7}]"#,
        &[],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("message 0") && err.contains("content"),
        "{err}"
    );
}

#[test]
fn hybrid_without_a_model_falls_back_to_lexical() {
    let dir = tempfile::tempdir().unwrap();
    let out = bib(
        &["pack", "--budget", "200", "--hybrid"],
        &history_json(40),
        &[("BIB_MODEL_DIR", dir.path().to_str().unwrap())],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stats"]["mode"], "lexical");
    assert!(v["stats"]["semantic_error"]
        .as_str()
        .unwrap()
        .contains("not installed"));
    assert!(tokens(&v) <= 200);
}

#[test]
fn now_flag_annotates_messages_without_timestamps() {
    let h =
        r#"[{"role":"user","content":"lo arreglamos ayer"},{"role":"user","content":"¿cuándo?"}]"#;
    let out = bib(
        &["pack", "--budget", "500", "--now", "2026-08-07T12:00:00Z"],
        h,
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ayer (2026-08-06)"));
    let out = bib(&["pack", "--budget", "500"], h, &[]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("(2026-"));
}
