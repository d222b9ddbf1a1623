//! End-to-end: `bib ingest --watch` re-ingests added, changed and deleted files.

mod ingest_support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use ingest_support::*;
use serde_json::Value;

#[test]
fn watch_reingests_changes_until_killed() {
    if !model_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let wiki = t.path().join("wiki");
    write(&wiki, "a.md", &page("alpha", 2));
    write(&wiki, "b.md", &page("beta", 1));
    let store = store_path(&t, "kb");
    let mut child = bib()
        .arg("ingest")
        .arg(&wiki)
        .arg("--store")
        .arg(&store)
        .args(["--watch", "--json", "--debounce-ms", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if tx.send(v).is_err() {
                    break;
                }
            }
        }
    });
    let next = |what: &str| {
        rx.recv_timeout(Duration::from_secs(180))
            .unwrap_or_else(|_| panic!("no run record after {what}"))
    };
    let r = next("start");
    assert_eq!(r["status"], "completed");
    assert_eq!(r["phase_a"]["registered"], 2);

    // Add a file and edit one: one debounced run picks both up.
    write(&wiki, "c.md", &page("gamma", 1));
    let text = std::fs::read_to_string(wiki.join("a.md")).unwrap();
    write(
        &wiki,
        "a.md",
        &text.replace("step 3 of part 1", "a watched edit of part 1"),
    );
    let mut seen_c = false;
    for _ in 0..5 {
        let r = next("adding c.md and editing a.md");
        assert_eq!(r["status"], "completed");
        if snapshot(&store).iter().any(|d| d.0 == "c.md")
            && std::fs::read_to_string(wiki.join("a.md")).is_ok()
        {
            seen_c = true;
            break;
        }
    }
    assert!(seen_c, "c.md never ingested");

    // Delete a file: it is pruned.
    std::fs::remove_file(wiki.join("b.md")).unwrap();
    let mut gone = false;
    for _ in 0..5 {
        let r = next("deleting b.md");
        assert_eq!(r["status"], "completed");
        if snapshot(&store).iter().all(|d| d.0 != "b.md") {
            gone = true;
            break;
        }
    }
    assert!(gone, "b.md never pruned");
    child.kill().unwrap();
    child.wait().unwrap();
    let paths: Vec<String> = snapshot(&store).into_iter().map(|d| d.0).collect();
    assert_eq!(paths, vec!["a.md".to_string(), "c.md".to_string()]);
}

/// Run records printed by a `--watch` child, read on a thread.
fn watch_child(
    wiki: &std::path::Path,
    store: &std::path::Path,
) -> (std::process::Child, mpsc::Receiver<Value>) {
    let mut child = bib()
        .arg("ingest")
        .arg(wiki)
        .arg("--store")
        .arg(store)
        .args(["--watch", "--json", "--debounce-ms", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if tx.send(v).is_err() {
                    break;
                }
            }
        }
    });
    (child, rx)
}

/// Runs that arrive within `d`.
fn runs_within(rx: &mpsc::Receiver<Value>, d: Duration) -> Vec<Value> {
    let end = std::time::Instant::now() + d;
    let mut out = Vec::new();
    while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(v) => out.push(v),
            Err(_) => break,
        }
    }
    out
}

#[test]
fn watch_settles_and_runs_once_per_change() {
    if !model_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let wiki = t.path().join("wiki");
    write(&wiki, "a.md", &page("alpha", 1));
    write(&wiki, "b.md", "# Beta\n\nA short page.\n");
    // The store (and its WAL/SHM) inside the watched directory, not hidden: its writes and
    // the run's own reads must not cause runs.
    let store = wiki.join("kb.sqlite");
    let (mut child, rx) = watch_child(&wiki, &store);
    let first = rx
        .recv_timeout(Duration::from_secs(180))
        .expect("first run record");
    assert_eq!(first["status"], "completed");

    let idle = runs_within(&rx, Duration::from_secs(10));
    assert!(
        idle.len() <= 1,
        "{} runs in 10 s without a change on disk",
        idle.len()
    );

    // Editor temp files never trigger a run.
    for f in [".a.md.swp", "a.md~", ".#a.md", "4913"] {
        std::fs::write(wiki.join(f), "temp").unwrap();
    }
    let temp = runs_within(&rx, Duration::from_secs(3));
    assert!(
        temp.is_empty(),
        "editor temp files caused {} runs",
        temp.len()
    );

    // One edit: exactly one run, which picks it up.
    let text = std::fs::read_to_string(wiki.join("b.md")).unwrap();
    write(&wiki, "b.md", &format!("{text}\nOne more watched line.\n"));
    let after = runs_within(&rx, Duration::from_secs(15));
    assert_eq!(
        after.len(),
        1,
        "one edit gave {} runs: {after:?}",
        after.len()
    );
    assert_eq!(after[0]["status"], "completed");
    assert!(after[0]["phase_b"]["documents_written"].as_u64().unwrap() >= 1);
    child.kill().unwrap();
    child.wait().unwrap();
}
