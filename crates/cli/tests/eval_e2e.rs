//! End-to-end tests of `bib eval` on the real binary: replay of logged questions, a golden set
//! with a calibration sweep, and the HTML report checked in a real headless Chromium.
//!
//! They use the real embedding model: without it they fail with a "run `bib model install`"
//! message unless BIB_SKIP_MODEL_TESTS=1. The browser test needs Debian's `chromium`
//! (`apt-get install -y chromium`) and fails without it unless BIB_SKIP_BROWSER_TESTS=1.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn bib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bib"))
}

fn model_installed() -> bool {
    let dir = std::env::var_os("BIB_MODEL_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(|c| PathBuf::from(c).join("bibliotecario/models"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/bibliotecario/models"))
        });
    dir.is_some_and(|d| d.join("use-m3").join("sp.model").is_file())
}

/// False when the test should be skipped; panics when the model is missing and skipping is not
/// allowed.
fn need_model() -> bool {
    if model_installed() {
        return true;
    }
    if std::env::var("BIB_SKIP_MODEL_TESTS").as_deref() == Ok("1") {
        eprintln!("skipping: model not installed and BIB_SKIP_MODEL_TESTS=1");
        return false;
    }
    panic!("the use-m3 model is not installed: run `bib model install` (or set BIB_SKIP_MODEL_TESTS=1)");
}

const WIKI: &[(&str, &str)] = &[
    (
        "push.md",
        "---\ntitle: Pushing packages\n---\n# Pushing packages\n\n## Timeout\n\n\
         The push command uploads a package to a feed. The default timeout is 300 seconds. \
         You can change it with the -Timeout option. Large packages may need more time.\n\n\
         ## API keys\n\nA push to nuget.org needs an API key. Keys are created on the account page. \
         Each key can be scoped to a set of packages.\n",
    ),
    (
        "restore.md",
        "# Restoring packages\n\nRestore downloads every package a project references. \
         The resolved graph is written to project.assets.json in the obj folder. \
         Restore runs automatically before a build.\n\n## Lock files\n\n\
         A lock file records the exact versions that were resolved. \
         It is named packages.lock.json and lives next to the project file.\n",
    ),
    (
        "cache.md",
        "# Caches\n\nThe global packages folder holds every downloaded package. \
         Clearing it forces fresh downloads. The http cache keeps feed responses for thirty minutes.\n",
    ),
];

fn setup(tmp: &Path) -> PathBuf {
    let wiki = tmp.join("wiki");
    std::fs::create_dir_all(&wiki).unwrap();
    for (name, text) in WIKI {
        std::fs::write(wiki.join(name), text).unwrap();
    }
    let store = tmp.join("kb.sqlite");
    let out = bib()
        .args([
            "ingest",
            wiki.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ingest failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    store
}

fn eval_json(store: &Path, extra: &[&str]) -> Value {
    let out = bib()
        .args(["eval", "--store", store.to_str().unwrap(), "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "eval failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("eval --json prints JSON")
}

#[test]
fn replays_exactly_the_logged_questions() {
    if !need_model() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = setup(tmp.path());
    // No log yet: a clear error.
    let out = bib()
        .args(["eval", "--store", store.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("query log is empty"));

    let asked = [
        "What is the default push timeout?",
        "Where is the resolved dependency graph written?",
        "How long does the http cache keep responses?",
    ];
    for q in asked {
        let out = bib()
            .args(["ask", q, "--store", store.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ask failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let r = eval_json(&store, &[]);
    assert!(r["settings"]["source"]
        .as_str()
        .unwrap()
        .starts_with("query_log"));
    let got: Vec<&str> = r["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["question"].as_str().unwrap())
        .collect();
    assert_eq!(got, asked, "eval replays the asked questions, oldest first");
    // Every variant reported for every question; baseline overlap with itself is 1.
    for q in r["questions"].as_array().unwrap() {
        let v = q["variants"].as_object().unwrap();
        assert_eq!(v.len(), bib_eval::Variant::ALL.len(), "{v:?}");
        assert_eq!(v["baseline"]["overlap_vs_baseline"], 1.0);
        let t = &v["trim"];
        assert!(t["tokens"].as_u64().unwrap() <= t["tokens_before"].as_u64().unwrap());
        assert!(v["small-to-big"]["chunk_ids"]
            .as_array()
            .is_some_and(|a| !a.is_empty()));
    }
    // Evaluating does not log: the same three come back again.
    let r2 = eval_json(&store, &["--variants", "trim"]);
    assert_eq!(r2["questions"].as_array().unwrap().len(), 3);
    // The last N really is the last N.
    let r3 = eval_json(&store, &["--last", "2", "--variants", "trim"]);
    let got: Vec<&str> = r3["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["question"].as_str().unwrap())
        .collect();
    assert_eq!(got, &asked[1..]);
    // Logged questions carry no evidence: quality is unknown, never a failure on its account.
    for v in r["verdicts"].as_array().unwrap() {
        let status = v["status"].as_str().unwrap();
        assert!(v["quality_ok"].is_null(), "{v}");
        assert!(
            status == "unknown" || (status == "fail" && v["reduction_ok"] == false),
            "only a measured criterion fails: {v}"
        );
    }
    let out = bib()
        .args([
            "eval",
            "--store",
            store.to_str().unwrap(),
            "--variants",
            "hybrid",
        ])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("UNKNOWN") && !table.contains("FAIL"),
        "{table}"
    );
    // Repeats count once: asking the newest question twice more still gives 2 distinct.
    for _ in 0..2 {
        let out = bib()
            .args(["ask", asked[2], "--store", store.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    let r4 = eval_json(&store, &["--last", "2", "--variants", "trim"]);
    let got: Vec<&str> = r4["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["question"].as_str().unwrap())
        .collect();
    assert_eq!(got, &asked[1..], "two distinct questions, the latest");
    assert!(r4["settings"]["source"]
        .as_str()
        .unwrap()
        .contains("distinct"));
}

/// The report's unknown words tell the typos `ask` corrects (and to what) from the users' own
/// words, which are the candidates for synonym rules.
#[test]
fn unknown_words_tell_typos_from_the_users_words() {
    if !need_model() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = setup(tmp.path());
    let golden = tmp.path().join("golden.jsonl");
    std::fs::write(
        &golden,
        "{\"question\": \"what is the defualt push timeout?\"}\n\
         {\"question\": \"does my library need a lockfile?\"}\n\
         {\"question\": \"which lockfile does my library need?\"}\n",
    )
    .unwrap();
    let g = golden.to_str().unwrap();
    let r = eval_json(&store, &["--golden", g, "--variants", "trim"]);
    let words: Vec<(String, u64, Option<String>)> = r["unknown_words"]
        .as_array()
        .expect("unknown words listed")
        .iter()
        .map(|w| {
            (
                w["word"].as_str().unwrap().to_string(),
                w["questions"].as_u64().unwrap(),
                w["typo_of"].as_str().map(str::to_string),
            )
        })
        .collect();
    assert_eq!(
        words,
        [
            ("library".to_string(), 2, None),
            ("lockfile".to_string(), 2, None),
            ("defualt".to_string(), 1, Some("default".to_string())),
        ],
        "{r:#}"
    );
    let out = bib()
        .args(["eval", "--store", store.to_str().unwrap(), "--golden", g])
        .args(["--variants", "trim"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("candidates for ask.synonyms): library ×2, lockfile ×2\n"),
        "{report}"
    );
    assert!(
        report.contains("typos that ask corrects: defualt → default ×1"),
        "{report}"
    );
    // With typo tolerance off, ask corrects nothing, and the report says nothing of typos.
    let off = eval_json(
        &store,
        &["--golden", g, "--variants", "trim", "--signals", "typo=0"],
    );
    let marked: Vec<&Value> = off["unknown_words"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| !w["typo_of"].is_null())
        .collect();
    assert!(marked.is_empty(), "{off:#}");
}

fn chromium() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin/chromium");
    if p.is_file() {
        return Some(p);
    }
    if std::env::var("BIB_SKIP_BROWSER_TESTS").as_deref() == Ok("1") {
        eprintln!("skipping: chromium missing and BIB_SKIP_BROWSER_TESTS=1");
        return None;
    }
    panic!("/usr/bin/chromium is missing: install it with `apt-get install -y chromium` (or set BIB_SKIP_BROWSER_TESTS=1)");
}

fn chromium_cmd(bin: &Path, profile: &Path) -> Command {
    let mut c = Command::new(bin);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

#[test]
fn golden_sweep_and_html_report_in_chromium() {
    if !need_model() {
        return;
    }
    let Some(chrome) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let store = setup(tmp.path());
    let golden = tmp.path().join("golden.jsonl");
    std::fs::write(
        &golden,
        concat!(
            r#"{"id":"t1","question":"What is the default push timeout?","files":["push.md"],"evidence":["The default timeout is 300 seconds."],"answer":"300 seconds"}"#, "\n",
            r#"{"id":"t2","question":"Where is the resolved dependency graph written?","files":["restore.md"],"evidence":["The resolved graph is written to project.assets.json in the obj folder."],"answer":"project.assets.json"}"#, "\n",
            r#"{"id":"t3","question":"What is the lock file called?","files":["restore.md"],"evidence":["It is named packages.lock.json and lives next to the project file."]}"#, "\n",
        ),
    )
    .unwrap();
    let html = tmp.path().join("out/report.html");
    let r = eval_json(
        &store,
        &[
            "--golden",
            golden.to_str().unwrap(),
            "--sweep",
            "0.20:0.60:0.10",
            "--html",
            html.to_str().unwrap(),
        ],
    );
    assert_eq!(r["questions"].as_array().unwrap().len(), 3);
    let base = r["aggregates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["variant"] == "baseline")
        .unwrap();
    assert_eq!(base["file_recall"], 1.0, "the tiny wiki is easy: {base}");
    assert_eq!(base["evidence_recall_before"], 1.0, "{base}");
    let sweep = &r["sweep"];
    assert_eq!(sweep["points"].as_array().unwrap().len(), 5 * 3);
    assert!(r["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|v| v["text"].as_str().unwrap().contains("overlap")));

    // The report renders in a real browser: screenshot taken, charts present, no JS errors.
    // The screenshot is kept (target/tmp/eval-report.png) for a person to look at.
    let profile = tmp.path().join("chrome-profile");
    let png = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("eval-report.png");
    let url = format!("file://{}", html.display());
    let out = chromium_cmd(&chrome, &profile)
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1200,3000")
        .arg(&url)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "chromium screenshot failed: {log}");
    let bytes = std::fs::read(&png).expect("screenshot written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((w, h), (1200, 3000));
    assert!(
        bytes.len() > 10_000,
        "screenshot suspiciously small ({} bytes)",
        bytes.len()
    );
    for needle in ["Uncaught", "console error"] {
        assert!(!log.contains(needle), "browser reported `{needle}`: {log}");
    }
    let out = chromium_cmd(&chrome, &profile)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "chromium dump-dom failed");
    assert!(dom.contains("id=\"sweep-chart\""), "chart element missing");
    assert_eq!(
        dom.matches("class=\"pt\"").count(),
        15,
        "one point per (threshold, window)"
    );
    assert!(
        dom.contains("data-report-ready=\"15\""),
        "the report script did not finish"
    );
    let js_errors = dom
        .split("data-js-errors=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next());
    assert!(
        js_errors.is_none(),
        "JavaScript errors recorded in the page: {js_errors:?}"
    );
    if sweep["chosen"].is_number() {
        assert!(dom.contains("id=\"chosen-point\""));
    }
    // Tokens against evidence, one point per variant.
    assert!(
        dom.contains("id=\"variants-chart\""),
        "variants chart missing"
    );
    assert_eq!(
        dom.matches("class=\"variant-pt\"").count(),
        r["aggregates"].as_array().unwrap().len()
    );
    // The trimmed text, removed sentences struck through, sources linked to their files.
    assert!(dom.contains("class=\"trimmed\""), "trimmed text missing");
    assert!(
        dom.contains("<del>"),
        "removed sentences are shown struck through"
    );
    let wiki = std::fs::canonicalize(tmp.path().join("wiki")).unwrap();
    assert!(
        dom.contains(&format!("href=\"file://{}/push.md\"", wiki.display())),
        "sources link to their files"
    );
}
