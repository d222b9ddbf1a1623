//! End-to-end on the real binary and model: `bib get` prints exactly the lines a result cites
//! (CLI and `GET /docs/{path}`), as ingested even after the file changed; unknown paths and
//! ranges outside the file fail clearly; an out-of-domain question is "no good match"; a
//! trimmed result that keeps nothing gives its slot to the next one.

mod ask_support;
mod server_support;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

/// A tiny wiki ingested into `kb.sqlite`: (tempdir, wiki root, store), or `None` without the
/// model (when the tests are told to skip).
fn ingested() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    let dir = tempfile::tempdir().unwrap();
    if !ask_support::model_available(dir.path()) {
        return None;
    }
    let wiki = dir.path().join("wiki");
    server_support::tiny_wiki(&wiki);
    let store = dir.path().join("kb.sqlite");
    server_support::ingest(&wiki, &store);
    Some((dir, wiki, store))
}

fn run(cwd: &Path, store: &Path, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--store", store.to_str().unwrap()]);
    ask_support::bib(cwd, &all, &[])
}

fn ok_json(o: &Output) -> Value {
    assert!(o.status.success(), "bib failed: {}", ask_support::text(o));
    serde_json::from_slice(&o.stdout).expect("--json prints JSON")
}

/// Lines `from..=to` (1-based) of `text`, line ends included.
fn lines(text: &str, from: u64, to: u64) -> String {
    text.split_inclusive('\n')
        .skip(from as usize - 1)
        .take((to - from + 1) as usize)
        .collect()
}

#[test]
fn get_prints_exactly_the_lines_a_result_cites() {
    let Some((dir, wiki, store)) = ingested() else {
        return;
    };
    let cwd = dir.path();
    let ask = ok_json(&run(
        cwd,
        &store,
        &["ask", server_support::QUESTION, "--json", "-k", "5"],
    ));
    let results = ask["results"].as_array().unwrap();
    assert!(!results.is_empty(), "{ask}");
    for r in results {
        let path = r["path"].as_str().unwrap();
        let (a, b) = (
            r["line_start"].as_u64().unwrap(),
            r["line_end"].as_u64().unwrap(),
        );
        assert!(a >= 1 && b >= a, "{r}");
        let file = std::fs::read_to_string(wiki.join(path)).unwrap();
        let cited = lines(&file, a, b);
        let spec = if a == b {
            format!("{path}:{a}")
        } else {
            format!("{path}:{a}-{b}")
        };
        let out = run(cwd, &store, &["get", &spec]);
        assert!(out.status.success(), "{}", ask_support::text(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            cited,
            "bib get {spec}"
        );
        // The chunk's own text (its body, without the `[Doc: …]` prefix) is in those lines.
        let content = r["content"].as_str().unwrap();
        let body = content.split_once('\n').map_or(content, |(_, b)| b).trim();
        let first_line = body.lines().next().unwrap_or_default();
        assert!(
            cited.contains(first_line),
            "{spec}: {first_line:?} not in {cited:?}"
        );
        let j = ok_json(&run(cwd, &store, &["get", &spec, "--json"]));
        assert_eq!(j["content"], cited.as_str());
        assert_eq!(
            (j["line_start"].as_u64(), j["line_end"].as_u64()),
            (Some(a), Some(b))
        );
        assert_eq!(
            j["total_lines"].as_u64(),
            Some(file.split_inclusive('\n').count() as u64)
        );
        assert_eq!(j["node_id"], r["node_id"]);
    }
    // The whole document, front-matter included, is the file.
    let path = server_support::EXPECT_PATH;
    let file = std::fs::read_to_string(wiki.join(path)).unwrap();
    let whole = run(cwd, &store, &["get", path]);
    assert_eq!(String::from_utf8_lossy(&whole.stdout), file);
    assert!(file.starts_with("---\n"), "the tiny wiki has front-matter");

    // HTTP serves the same lines under the same rules.
    let r = &results[0];
    let (p, a, b) = (
        r["path"].as_str().unwrap(),
        r["line_start"].as_u64().unwrap(),
        r["line_end"].as_u64().unwrap(),
    );
    let served = server_support::serve(&store, None, &[]);
    let (st, v) = server_support::get(served.addr, &format!("/docs/{p}?from={a}&to={b}"));
    assert_eq!(st, 200, "{v}");
    let file = std::fs::read_to_string(wiki.join(p)).unwrap();
    assert_eq!(v["content"], lines(&file, a, b).as_str());
    let (st, v) = server_support::get(served.addr, "/docs/guides/restor.md");
    assert_eq!(st, 404, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains(path),
        "{v}"
    );
    let (st, v) = server_support::get(served.addr, &format!("/docs/{path}?from=1&to=9999"));
    assert_eq!((st, v["error"]["field"].as_str()), (400, Some("to")), "{v}");
}

#[test]
fn get_explains_unknown_paths_and_ranges_and_serves_what_was_ingested() {
    let Some((dir, wiki, store)) = ingested() else {
        return;
    };
    let cwd = dir.path();
    let path = server_support::EXPECT_PATH;
    let n = std::fs::read_to_string(wiki.join(path))
        .unwrap()
        .split_inclusive('\n')
        .count();
    let fail = |args: &[&str]| {
        let o = run(cwd, &store, args);
        assert_eq!(o.status.code(), Some(1), "{}", ask_support::text(&o));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = fail(&["get", "guides/restor.md"]);
    assert!(e.contains("did you mean") && e.contains(path), "{e}");
    let e = fail(&["get", "restore.md:2"]);
    assert!(e.contains(path), "{e}");
    let e = fail(&["get", &format!("{path}:2-{}", n + 5)]);
    assert!(e.contains(&format!("has {n} lines")), "{e}");
    let e = fail(&["get", &format!("{path}:{}", n + 1)]);
    assert!(e.contains(&format!("has {n} lines")), "{e}");
    let e = fail(&["get", path, "--collection", "nope"]);
    assert!(e.contains("collection `wiki`"), "{e}");

    // The file changes on disk: `bib get` still shows the text the citations count in, until
    // the next ingest stores the new one.
    let before = std::fs::read_to_string(wiki.join(path)).unwrap();
    let after = format!("# A new first line\n\n{before}");
    std::fs::write(wiki.join(path), &after).unwrap();
    let o = run(cwd, &store, &["get", &format!("{path}:1-2")]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), lines(&before, 1, 2));
    server_support::ingest(&wiki, &store);
    let o = run(cwd, &store, &["get", &format!("{path}:1-2")]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), lines(&after, 1, 2));
}

#[test]
fn out_of_domain_questions_are_no_good_match() {
    let Some((dir, _wiki, store)) = ingested() else {
        return;
    };
    let cwd = dir.path();
    let off = ok_json(&run(
        cwd,
        &store,
        &["ask", "how to bake sourdough bread", "--json"],
    ));
    assert_eq!(off["no_good_match"], true, "{off}");
    let (c, f) = (
        off["best_cosine"].as_f64().unwrap(),
        off["relevance_floor"].as_f64().unwrap(),
    );
    assert!(c < f, "{c} {f}");
    assert!(
        !off["results"].as_array().unwrap().is_empty(),
        "results still listed"
    );
    let text = run(cwd, &store, &["ask", "how to bake sourdough bread"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("no good match"),
        "{}",
        ask_support::text(&text)
    );
    let on = ok_json(&run(
        cwd,
        &store,
        &["ask", server_support::QUESTION, "--json"],
    ));
    assert_eq!(on["no_good_match"], false, "{on}");
    assert!(on["best_cosine"].as_f64().unwrap() >= f);
}

#[test]
fn trimmed_results_that_keep_nothing_give_their_slot_to_the_next() {
    let Some((dir, _wiki, store)) = ingested() else {
        return;
    };
    let cwd = dir.path();
    let k = 3;
    let ks = k.to_string();
    let wide = (3 * k).to_string();
    let plain = ok_json(&run(
        cwd,
        &store,
        &["ask", server_support::QUESTION, "--json", "-k", &wide],
    ));
    let trimmed = ok_json(&run(
        cwd,
        &store,
        &[
            "ask",
            server_support::QUESTION,
            "--json",
            "-k",
            &ks,
            "--trim",
        ],
    ));
    let ids = |v: &Value| -> Vec<i64> {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["chunk_id"].as_i64().unwrap())
            .collect()
    };
    let (ranked, kept) = (ids(&plain), ids(&trimmed));
    for r in trimmed["results"].as_array().unwrap() {
        let total = r["sentences_total"].as_u64().unwrap();
        assert!(
            total == 0 || r["sentences_kept"].as_u64().unwrap() > 0,
            "{r}"
        );
    }
    // The answer keeps the ranking's order, skipping exactly the dropped results.
    let mut pos = ranked.iter();
    assert!(
        kept.iter().all(|id| pos.any(|r| r == id)),
        "{kept:?} is not in the order of {ranked:?}"
    );
    let dropped = trimmed["trim_dropped"].as_u64().unwrap() as usize;
    if kept.len() == k {
        // Filled: every result dropped ranked above the last one kept.
        let last = ranked
            .iter()
            .position(|id| Some(id) == kept.last())
            .unwrap();
        assert_eq!(
            last + 1,
            kept.len() + dropped,
            "{ranked:?} {kept:?} {dropped}"
        );
    } else {
        // Not filled: every ranked candidate was either kept or dropped.
        assert_eq!(
            kept.len() + dropped,
            ranked.len(),
            "{ranked:?} {kept:?} {dropped}"
        );
    }
    // On this wiki the Spanish page shares nothing with the English question: it is dropped.
    assert!(dropped >= 1, "{trimmed}");
}
