//! End-to-end tests of `bib pack` on the real binary: budget and shape, the one input format
//! (the CLI and HTTP `/pack` read the same histories the same way, times in RFC 3339 or epoch
//! ms, seconds refused), and omission notes in order, as `system` messages, in the history's
//! language.

mod server_support;

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
        "ts": 1_786_104_000_000_i64
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

    // Nothing on stdin says so, instead of a JSON parser's "EOF at column 0".
    let out = bib(&["pack", "--budget", "100"], " \n", &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("history is empty"), "{err}");

    // A budget of 0 is refused, as HTTP /pack and MCP bib_pack refuse it.
    let out = bib(&["pack", "--budget", "0"], &history_json(3), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--budget") && err.contains("at least 1"),
        "{err}"
    );
}

/// A `bib pack --hybrid` run that succeeded with a lexical pack: its output and why the
/// model was not used (`stats.semantic_error`).
fn lexical_fallback(out: &Output) -> (serde_json::Value, String) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stats"]["mode"], "lexical");
    let why = v["stats"]["semantic_error"].as_str().unwrap().to_owned();
    (v, why)
}

#[test]
fn hybrid_without_a_model_falls_back_to_lexical() {
    let dir = tempfile::tempdir().unwrap();
    let out = bib(
        &["pack", "--budget", "200", "--hybrid"],
        &history_json(40),
        &[("BIB_MODEL_DIR", dir.path().to_str().unwrap())],
    );
    let (v, why) = lexical_fallback(&out);
    assert!(why.contains("not installed"), "{why}");
    assert!(tokens(&v) <= 200);
}

#[test]
fn a_model_that_names_nothing_is_an_error_and_one_not_installed_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("BIB_MODEL_DIR", dir.path().to_str().unwrap())];
    let args = ["pack", "--budget", "200", "--hybrid", "--model"];
    let out = bib(&[&args[..], &["use-m4"]].concat(), &history_json(10), &env);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--model") && err.contains("unknown embedding model `use-m4`"),
        "{err}"
    );
    assert!(
        err.contains("e5-small"),
        "the known models are named: {err}"
    );

    let out = bib(
        &[&args[..], &["e5-small"]].concat(),
        &history_json(10),
        &env,
    );
    let (_, why) = lexical_fallback(&out);
    assert!(
        why.contains("e5-small") && why.contains("not installed"),
        "{why}"
    );

    // --model only means something with --hybrid
    let out = bib(
        &["pack", "--budget", "200", "--model", "e5-small"],
        "[]",
        &env,
    );
    assert!(!out.status.success());
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
    assert!(String::from_utf8_lossy(&out.stdout).contains("lo arreglamos ayer [ayer = 2026-08-06]"));
    let out = bib(&["pack", "--budget", "500"], h, &[]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("2026-08-06"));
}

/// `relevant` in the middle of `filler` turns of small talk, then the live question.
fn history_with(relevant: &str, filler: &[String], question: &str) -> serde_json::Value {
    let half = filler.len() / 2;
    let mut msgs: Vec<serde_json::Value> = Vec::new();
    for (i, f) in filler.iter().enumerate() {
        if i == half {
            msgs.push(serde_json::json!({"role": "user", "content": relevant}));
        }
        let role = if i % 2 == 0 { "assistant" } else { "user" };
        msgs.push(serde_json::json!({"role": role, "content": f}));
    }
    msgs.push(serde_json::json!({"role": "user", "content": question}));
    serde_json::Value::Array(msgs)
}

/// (role, content) of the packed messages.
fn packed(args: &[&str], history: &serde_json::Value) -> Vec<(String, String)> {
    let out = bib(args, &history.to_string(), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Issue 18: the marker was a Spanish `user` message after everything kept, in English chats too.
#[test]
fn omitted_messages_become_system_notes_in_place_in_the_history_language() {
    let en: Vec<String> = (0..120)
        .map(|i| format!("turn {i}: small talk about the weather and the football match"))
        .collect();
    let h = history_with(
        "the spare key is under the blue flower pot",
        &en,
        "where is the spare key?",
    );
    let msgs = packed(&["pack", "--budget", "120"], &h);
    let at = msgs
        .iter()
        .position(|(_, c)| c.contains("blue flower pot"))
        .expect("the relevant turn is kept");
    let notes: Vec<usize> = (0..msgs.len())
        .filter(|&i| msgs[i].1.contains("earlier messages omitted"))
        .collect();
    // In place: the turns before the kept one were omitted, so a note comes before it (the old
    // marker came after every kept turn).
    assert!(
        notes.first().is_some_and(|&i| i < at),
        "a note before the kept turn: {msgs:?}"
    );
    for &i in &notes {
        assert_eq!(msgs[i].0, "system", "{msgs:?}");
    }
    assert!(
        !msgs.iter().any(|(_, c)| c.contains("omitidos")),
        "{msgs:?}"
    );
    assert_eq!(msgs.last().unwrap().1, "where is the spare key?");

    let es: Vec<String> = (0..120)
        .map(|i| format!("turno {i}: charla sobre el tiempo y el partido de fútbol de la semana"))
        .collect();
    let h = history_with(
        "la llave de repuesto está debajo de la maceta azul",
        &es,
        "¿dónde está la llave de repuesto?",
    );
    let msgs = packed(&["pack", "--budget", "120"], &h);
    let notes: Vec<&(String, String)> = msgs
        .iter()
        .filter(|(_, c)| c.contains("mensajes anteriores omitidos"))
        .collect();
    assert!(!notes.is_empty(), "{msgs:?}");
    assert!(notes.iter().all(|(r, _)| r == "system"), "{msgs:?}");
}

/// One input format: the same history (RFC 3339 and epoch-ms times, Anthropic blocks) packs
/// to the same messages through `bib pack` and HTTP `/pack`, and epoch seconds are refused by
/// both with the milliseconds they probably meant.
#[test]
fn cli_and_http_read_one_format_and_refuse_seconds() {
    let h = serde_json::json!([
        {"role": "user", "content": "we deployed yesterday", "ts": "2026-08-07T12:00:00Z"},
        {"role": "assistant", "content": [{"type": "text", "text": "the rollback plan is ready"}],
         "timestamp": 1_786_104_060_000_i64},
        {"role": "user", "content": "when did we deploy?"}
    ]);
    let cli = bib(&["pack", "--budget", "300"], &h.to_string(), &[]);
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let cli: serde_json::Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert!(
        cli.to_string()
            .contains("we deployed yesterday [yesterday = 2026-08-06]"),
        "{cli}"
    );

    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("kb.sqlite");
    bib_store::SqliteStore::open(&store).unwrap();
    let served = server_support::serve(&store, None, &["--no-model"]);
    let (st, http) = server_support::post(
        served.addr,
        "/pack",
        &serde_json::json!({"messages": h, "budget": 300}),
        &[],
    );
    assert_eq!(st, 200, "{http}");
    assert_eq!(http["messages"], cli["messages"]);

    let seconds = serde_json::json!([{"role": "user", "content": "x", "ts": 1_786_104_000}]);
    let out = bib(&["pack", "--budget", "50"], &seconds.to_string(), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("1786104000000"),
        "{err}"
    );
    let (st, e) = server_support::post(
        served.addr,
        "/pack",
        &serde_json::json!({"messages": seconds, "budget": 50}),
        &[],
    );
    assert_eq!(
        (st, e["error"]["field"].as_str()),
        (400, Some("messages[0]")),
        "{e}"
    );
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1786104000000"),
        "{e}"
    );
}

/// `--hybrid` keeps what it embedded in the file of `BIB_PACK_VECTORS`: the next call on the
/// same history reads the vectors back and packs exactly the same; a file that is not a
/// database is only a miss. Needs an installed model (`scripts/test.sh` installs both).
#[test]
fn hybrid_packs_keep_their_vectors_between_calls_and_pack_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vectors.sqlite");
    let run = |path: &std::path::Path| {
        let out = bib(
            &["pack", "--budget", "120", "--hybrid"],
            &history_json(60),
            &[("BIB_PACK_VECTORS", path.to_str().unwrap())],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let first = run(&file);
    if first["stats"]["mode"] != "hybrid" {
        eprintln!(
            "skipped: no model installed ({})",
            first["stats"]["semantic_error"]
        );
        return;
    }
    let model = first["stats"]["model"].as_str().unwrap().to_owned();
    assert!(["e5-small", "use-m3"].contains(&model.as_str()), "{model}");
    let held = bib_store::VectorFile::open(&file, 1_000)
        .unwrap()
        .len()
        .unwrap();
    assert!(held > 60, "the history's lines and the question: {held}");
    assert_eq!(run(&file), first);
    let junk = dir.path().join("junk.sqlite");
    std::fs::write(&junk, "not a database, only words").unwrap();
    assert_eq!(run(&junk), first);
    // `off` keeps nothing and packs the same.
    assert_eq!(run(std::path::Path::new("off")), first);
}
