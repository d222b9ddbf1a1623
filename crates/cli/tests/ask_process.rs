//! End-to-end: `bib ask` as a process (issue 21, issue 18 item 8). A missing model fails hybrid,
//! vector and trimmed asks loudly (`bib model install …`, non-zero exit) while `--mode bm25`
//! needs no model and `--fallback-bm25` is an explicit, reported opt-in; the query log is a
//! switch (`--no-log`, `[ask] log`, `BIB_QUERY_LOG`) and a read-only store still answers; a
//! closed stdout ends every command quietly with exit 0; an unquoted question is one question.
//! The missing model is simulated with an empty `XDG_CACHE_HOME` (and no `BIB_MODEL_DIR`).
//! Set `BIB_SKIP_MODEL_TESTS=1` where the default model cannot be installed.

use bib_store::RunLog;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use bib_store::SqliteStore;
use serde_json::Value;

mod ask_support;

use ask_support::*;

/// A two-page wiki ingested (with the real default model) into `<tmp>/kb/kb.sqlite`.
fn setup() -> Option<(tempfile::TempDir, PathBuf)> {
    let t = tempfile::tempdir().unwrap();
    if !model_available(t.path()) {
        return None;
    }
    let wiki = t.path().join("wiki");
    write(
        &wiki,
        "sign.md",
        "---\ntitle: Signing packages\n---\n# Sign\n\n\
         Use `nuget sign` to sign a package with a certificate. A signed package proves who \
         published it. The timestamp server keeps the signature valid after the certificate \
         expires.\n",
    );
    write(
        &wiki,
        "push.md",
        "---\ntitle: Pushing packages\n---\n# Push\n\n\
         Use `nuget push` to publish a package to a feed. The default timeout of nuget push \
         is 300 seconds.\n",
    );
    let store = t.path().join("kb").join("kb.sqlite");
    ingest(t.path(), &wiki, &store, &[]);
    Some((t, store))
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", text(o)))
}

fn logged(store: &Path) -> usize {
    SqliteStore::open(store)
        .unwrap()
        .recent_queries(1000)
        .unwrap()
        .len()
}

#[test]
fn missing_model_fails_loudly_and_bm25_needs_none() {
    let Some((t, store)) = setup() else { return };
    let cwd = t.path();
    let st = store.to_str().unwrap();
    let empty_cache = cwd.join("empty-cache");
    std::fs::create_dir_all(&empty_cache).unwrap();
    let no_model = [("XDG_CACHE_HOME", empty_cache.to_str().unwrap())];
    let run = |extra: &[&str]| {
        let mut args = vec!["ask", "how do I sign a package", "--store", st];
        args.extend_from_slice(extra);
        let mut c = cmd(cwd, &args, &no_model);
        c.env_remove("BIB_MODEL_DIR");
        c.output().unwrap()
    };

    // Hybrid (the default), vector and trimmed asks: a clear error, non-zero exit, no answer.
    for extra in [
        &[][..],
        &["--json"][..],
        &["--mode", "vector"][..],
        &["--mode", "bm25", "--trim"][..],
    ] {
        let o = run(extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{extra:?} must fail: {}", text(&o));
        assert!(
            err.contains("`use-m3`") && err.contains("bib model install use-m3"),
            "{extra:?}: the error names the model and the fix: {err}"
        );
        assert!(
            o.stdout.is_empty(),
            "{extra:?}: no answer printed: {}",
            text(&o)
        );
    }

    // BM25 loads no model: it works, and says it ran BM25.
    let o = run(&["--mode", "bm25", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v = json(&o);
    assert_eq!(v["mode"], "bm25");
    assert_eq!(v["results"][0]["path"], "sign.md", "{v:#}");
    assert!(v.get("fallback").is_none(), "{v:#}");
    assert!(o.stderr.is_empty(), "nothing to warn about: {}", text(&o));

    // The opt-in fallback: BM25, untrimmed, reported in --json and on stderr.
    for (extra, env_file) in [(&["--fallback-bm25", "--trim"][..], false), (&[][..], true)] {
        if env_file {
            std::fs::write(cwd.join("bib.toml"), "[ask]\nfallback = \"bm25\"\n").unwrap();
        }
        let mut args = extra.to_vec();
        args.push("--json");
        let o = run(&args);
        assert!(o.status.success(), "{}", text(&o));
        let v = json(&o);
        assert_eq!(v["mode"], "bm25", "the mode actually run: {v:#}");
        assert_eq!(v["mode_requested"], "hybrid", "{v:#}");
        assert!(v["trim"].is_null(), "{v:#}");
        assert!(v["fallback"].as_str().unwrap().contains("use-m3"), "{v:#}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("running BM25 only"),
            "{}",
            text(&o)
        );
    }
    std::fs::remove_file(cwd.join("bib.toml")).unwrap();
}

#[test]
fn query_log_switches_and_read_only_stores() {
    let Some((t, store)) = setup() else { return };
    let cwd = t.path();
    let st = store.to_str().unwrap();
    let q = "how do I sign a package";
    let ask = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["ask", q, "--store", st, "--mode", "bm25", "--json"];
        args.extend_from_slice(extra);
        bib(cwd, &args, env)
    };
    let ok = |o: &Output| {
        assert!(o.status.success(), "{}", text(o));
        assert_eq!(json(o)["results"][0]["path"], "sign.md");
    };

    // On by default.
    let o = ask(&[], &[]);
    ok(&o);
    assert_eq!(logged(&store), 1);
    // --no-log, BIB_QUERY_LOG=0 and [ask] log = false each write nothing (and say nothing).
    let o = ask(&["--no-log"], &[]);
    ok(&o);
    assert!(o.stderr.is_empty(), "{}", text(&o));
    ok(&ask(&[], &[("BIB_QUERY_LOG", "0")]));
    std::fs::write(cwd.join("bib.toml"), "[ask]\nlog = false\n").unwrap();
    ok(&ask(&[], &[]));
    assert_eq!(logged(&store), 1, "no query-log row from the three");
    // The environment turns it back on over the file.
    ok(&ask(&[], &[("BIB_QUERY_LOG", "1")]));
    assert_eq!(logged(&store), 2);
    std::fs::remove_file(cwd.join("bib.toml")).unwrap();

    use std::os::unix::fs::PermissionsExt;
    let set_mode = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    // A read-only file, then a read-only directory: the ask answers, with one notice and no row.
    let dir = store.parent().unwrap().to_path_buf();
    for (path, mode, back) in [(&store, 0o444, 0o644), (&dir, 0o555, 0o755)] {
        set_mode(path, mode);
        let o = ask(&[], &[]);
        let plain = bib(cwd, &["ask", q, "--store", st], &[]);
        set_mode(path, back);
        ok(&o);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "one notice: {err}");
        assert!(
            err.contains("read-only") && err.contains("not written to the query log"),
            "{err}"
        );
        // The default (hybrid, model loaded) ask answers read-only too.
        assert!(plain.status.success(), "{}", text(&plain));
        assert!(
            String::from_utf8_lossy(&plain.stdout).contains("sign.md"),
            "{}",
            text(&plain)
        );
        assert_eq!(logged(&store), 2, "nothing logged while read-only");
        assert!(
            !dir.join("kb.sqlite-journal").exists(),
            "no write was attempted"
        );
    }
}

#[test]
fn unquoted_question_is_one_question() {
    let Some((t, store)) = setup() else { return };
    let st = store.to_str().unwrap();
    let o = bib(
        t.path(),
        &[
            "ask", "how", "do", "I", "sign", "a", "package", "--store", st, "--json", "--mode",
            "bm25",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v = json(&o);
    assert_eq!(v["query"], "how do I sign a package");
    assert_eq!(v["results"][0]["path"], "sign.md");
    let o = bib(t.path(), &["ask", "--store", st], &[]);
    assert!(!o.status.success(), "a question is required: {}", text(&o));
}

/// Run with stdout a pipe whose reading end is already closed: every write is EPIPE.
fn with_closed_stdout(cwd: &Path, args: &[&str]) -> Output {
    let mut child = cmd(cwd, args, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bib");
    drop(child.stdout.take());
    child.wait_with_output().expect("bib ends")
}

#[test]
fn closed_stdout_ends_quietly_with_exit_zero() {
    let Some((t, store)) = setup() else { return };
    let cwd = t.path();
    let st = store.to_str().unwrap();
    let page = cwd.join("wiki").join("sign.md");
    let cases: Vec<Vec<&str>> = vec![
        vec!["ask", "sign a package", "--store", st],
        vec!["ask", "sign a package", "--store", st, "--json"],
        vec!["ask", "sign a package", "--store", st, "--mode", "bm25"],
        vec!["chunk", page.to_str().unwrap()],
        vec!["chunk", page.to_str().unwrap(), "--json"],
        vec!["runs", "--store", st],
        vec!["runs", "--store", st, "--json"],
        vec!["model", "list"],
        vec!["--help"],
    ];
    for args in &cases {
        let o = with_closed_stdout(cwd, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            !err.contains("Broken pipe") && !err.contains("panicked"),
            "{args:?}: quiet: {err}"
        );
    }
    // Commands reading stdin too: split and pack.
    for args in [vec!["split"], vec!["pack", "--budget", "200"]] {
        let mut child = cmd(cwd, &args, &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let input = if args[0] == "split" {
            "One sentence. Another sentence.\n".to_string()
        } else {
            r#"[{"role":"user","content":"how do I sign a package?"}]"#.to_string()
        };
        use std::io::Write;
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
