//! End-to-end: hostile Markdown given to `bib ingest` and `bib chunk` (issue 14). Every input
//! here once killed the process (stack overflow), hung it (an included FIFO), or grew it without
//! bound (include fan-out); each must now be handled or refused with an error naming the file,
//! while the good files beside it are ingested.

mod ingest_support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use ingest_support::*;
use serde_json::Value;

/// Run `cmd`, killing it after `limit`: a hang fails the test instead of hanging the suite.
fn run_bounded(mut cmd: std::process::Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bib");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("bib did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn ingest_cmd(dir: &Path, store: &Path, extra: &[&str]) -> std::process::Command {
    let mut c = bib();
    c.arg("ingest")
        .arg(dir)
        .arg("--store")
        .arg(store)
        .arg("--json")
        .arg("--no-sentence-vectors")
        .args(extra);
    c
}

/// The run record and the `path: reason` lines of its file errors.
fn record(out: &Output) -> (Value, Vec<String>) {
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no run record ({e}); status {:?}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let errors = rec["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| format!("{}: {}", e["path"].as_str().unwrap_or(""), e["reason"]))
                .collect()
        })
        .unwrap_or_default();
    (rec, errors)
}

fn error_for<'a>(errors: &'a [String], path: &str) -> &'a str {
    errors
        .iter()
        .find(|e| e.starts_with(&format!("{path}:")))
        .unwrap_or_else(|| panic!("no error names {path}: {errors:?}"))
}

#[test]
fn deep_nesting_is_chunked_not_fatal() {
    let t = tempfile::tempdir().unwrap();
    let deep = format!("# T\n\n{}x\n", "> - ".repeat(7000));
    let f = t.path().join("deep.md");
    std::fs::write(&f, &deep).unwrap();
    let mut c = bib();
    c.arg("chunk").arg(&f).arg("--json");
    let out = run_bounded(c, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "bib chunk died: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let chunks: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!chunks.as_array().unwrap().is_empty());

    let lists = t.path().join("lists.md");
    std::fs::write(&lists, "- ".repeat(20000)).unwrap();
    let mut c = bib();
    c.arg("chunk").arg(&lists);
    let out = run_bounded(c, Duration::from_secs(60));
    assert!(out.status.success(), "bib chunk died: {:?}", out.status);
}

#[test]
fn hostile_includes_are_refused_and_named() {
    if !model_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let wiki = t.path().join("wiki");
    write(
        &wiki,
        "good.md",
        "# Good\n\nA page about restoring packages.\n",
    );
    // Enough good pages that the bad ones stay under the run's 20 % error guard.
    for i in 0..40 {
        write(
            &wiki,
            &format!("more/p{i}.md"),
            &format!("# Page {i}\n\nPage {i} is about package source {i}.\n"),
        );
    }
    write(
        &wiki,
        "deep.md",
        &format!("# Deep\n\n{}x\n", "> - ".repeat(7000)),
    );

    // Fan-out: 4 levels of 10 includes each is 10,000 expansions of 2 KB of files.
    for level in 0..4 {
        let next = if level == 3 {
            "leaf text.".to_string()
        } else {
            (0..10)
                .map(|_| format!("[!INCLUDE [n](l{}.md)]\n", level + 1))
                .collect()
        };
        write(&wiki, &format!("inc/l{level}.md"), &next);
    }
    write(&wiki, "fanout.md", "# Fan\n\n[!INCLUDE [x](inc/l0.md)]\n");

    // A big include: over --max-file-bytes (set low below).
    write(&wiki, "inc/big.md", &"word ".repeat(20_000));
    write(&wiki, "big.md", "# Big\n\n[!INCLUDE [x](inc/big.md)]\n");

    // A binary include.
    std::fs::create_dir_all(wiki.join("inc")).unwrap();
    std::fs::write(wiki.join("inc/bin.md"), b"abc\0def").unwrap();
    write(&wiki, "bin.md", "# Bin\n\n[!INCLUDE [x](inc/bin.md)]\n");

    // Outside the root: one that exists and one that does not get the same answer.
    std::fs::write(t.path().join("secret.md"), "secret").unwrap();
    write(&wiki, "out1.md", "# O1\n\n[!INCLUDE [x](../secret.md)]\n");
    write(
        &wiki,
        "out2.md",
        "# O2\n\n[!INCLUDE [x](../no-such-file.md)]\n",
    );

    // A FIFO: opening it for reading would block forever.
    let fifo = wiki.join("inc/pipe.md");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        write(&wiki, "fifo.md", "# Fifo\n\n[!INCLUDE [x](inc/pipe.md)]\n");
    }

    let store = store_path(&t, "kb");
    let out = run_bounded(
        ingest_cmd(&wiki, &store, &["--max-file-bytes", "50000"]),
        Duration::from_secs(120),
    );
    let (rec, errors) = record(&out);
    assert!(
        error_for(&errors, "fanout.md").contains("more than 256 includes"),
        "{errors:?}"
    );
    assert!(
        error_for(&errors, "big.md").contains("budget"),
        "{errors:?}"
    );
    assert!(
        error_for(&errors, "bin.md").contains("binary"),
        "{errors:?}"
    );
    let (o1, o2) = (error_for(&errors, "out1.md"), error_for(&errors, "out2.md"));
    assert!(o1.contains("outside the ingested directory"), "{o1}");
    assert_eq!(
        o1.replace("out1.md", "").replace("secret.md", "X"),
        o2.replace("out2.md", "").replace("no-such-file.md", "X"),
        "an include outside the root must not reveal whether its target exists"
    );
    if made {
        assert!(
            error_for(&errors, "fifo.md").contains("not a regular file"),
            "{errors:?}"
        );
    }
    // The good files are in; the deep one too (it is valid Markdown, only deep).
    let docs: Vec<String> = snapshot(&store).into_iter().map(|d| d.0).collect();
    assert!(docs.contains(&"good.md".to_string()), "{docs:?} {rec}");
    assert!(docs.contains(&"deep.md".to_string()), "{docs:?}");
    assert!(!docs.contains(&"fanout.md".to_string()), "{docs:?}");
}
