//! End-to-end on the real binary: collections (two directories in one store survive each
//! other's runs; `ask --collection`; `rm --collection`), safe pruning (a 52-of-60 deletion is
//! refused until `--allow-prune`) and citations (`line_start`/`line_end` point at the cited
//! text of the file, includes cite their directive; text output prints `path:a-b`).

mod ingest_support;
mod server_support;

use std::path::Path;
use std::process::Output;

use bib_store::{SqliteStore, Store};
use ingest_support::*;
use serde_json::Value;

/// `bib ARGS` in `cwd` with the environment that changes ask cleared.
fn run(cwd: &Path, args: &[&str]) -> Output {
    let mut c = bib();
    c.current_dir(cwd).args(args);
    for k in ["BIB_STORE", "BIB_CONFIG", "RETRIEVAL_TRIM", "NO_COLOR"] {
        c.env_remove(k);
    }
    c.output().expect("run bib")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "bib failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ingest_into(cwd: &Path, dir: &Path, store: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "ingest",
        dir.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    run(cwd, &args)
}

fn ask(cwd: &Path, store: &Path, q: &str, extra: &[&str]) -> Value {
    let mut args = vec!["ask", q, "--store", store.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&run(cwd, &args))).expect("ask --json is JSON")
}

fn collections_of(store: &Path) -> Vec<(String, String)> {
    SqliteStore::open(store)
        .unwrap()
        .documents()
        .unwrap()
        .into_iter()
        .map(|d| (d.path, d.collection))
        .collect()
}

#[test]
fn two_collections_share_a_store_and_survive_each_others_runs() {
    if !model_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let kb = t.path().join("kb-en");
    let notes = t.path().join("notes");
    write(&kb, "restore.md", &page("restore", 1));
    write(&kb, "push.md", &page("push", 1));
    write(
        &notes,
        "garden.md",
        "# Garden\n\nTomatoes need sun and water every day.\n",
    );
    // The same path in both directories: the second collection must not take it over.
    write(
        &kb,
        "README.md",
        "# Readme\n\nThe kb readme talks about feeds.\n",
    );
    write(
        &notes,
        "README.md",
        "# Readme\n\nThe notes readme talks about tomatoes.\n",
    );
    let store = store_path(&t, "kb");

    let r1: Value = serde_json::from_str(&ok(&ingest_into(t.path(), &kb, &store, &[]))).unwrap();
    assert_eq!(r1["collection"], "kb-en");
    let r2: Value = serde_json::from_str(&ok(&ingest_into(t.path(), &notes, &store, &[]))).unwrap();
    assert_eq!(r2["collection"], "notes");
    assert_eq!(r2["phase_b"]["documents_removed"], 0, "{r2}");
    let skipped = r2["errors"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|e| e["path"] == "README.md" && e["reason"].as_str().unwrap().contains("kb-en")),
        "the shared path is reported as another collection's: {r2}"
    );
    // And the first collection's run removes nothing of the second.
    let r3: Value = serde_json::from_str(&ok(&ingest_into(t.path(), &kb, &store, &[]))).unwrap();
    assert_eq!(r3["phase_b"]["documents_removed"], 0, "{r3}");
    assert_eq!(
        collections_of(&store),
        vec![
            ("README.md".to_string(), "kb-en".to_string()),
            ("garden.md".to_string(), "notes".to_string()),
            ("push.md".to_string(), "kb-en".to_string()),
            ("restore.md".to_string(), "kb-en".to_string()),
        ]
    );

    // ask --collection filters, results name their collection.
    let v = ask(
        t.path(),
        &store,
        "tomatoes sun water",
        &["--collection", "notes"],
    );
    let res = v["results"].as_array().unwrap();
    assert!(!res.is_empty());
    assert!(res.iter().all(|r| r["collection"] == "notes"), "{v}");
    let v = ask(
        t.path(),
        &store,
        "packages restored",
        &["--collection", "kb-en"],
    );
    let res = v["results"].as_array().unwrap();
    assert!(!res.is_empty());
    assert!(res.iter().all(|r| r["collection"] == "kb-en"), "{v}");
    let both = ask(
        t.path(),
        &store,
        "readme",
        &["--collection", "kb-en", "--collection", "notes"],
    );
    assert!(!both["results"].as_array().unwrap().is_empty());
    // --collection NAME on its own directory name: a renamed collection.
    let other = t.path().join("other");
    write(&other, "x.md", "# X\n\nSomething about sourdough.\n");
    let r4: Value = serde_json::from_str(&ok(&ingest_into(
        t.path(),
        &other,
        &store,
        &["--collection", "bread"],
    )))
    .unwrap();
    assert_eq!(r4["collection"], "bread");

    // status lists the collections with their counts and the last run.
    let st: Value = serde_json::from_str(&ok(&run(
        t.path(),
        &["status", "--json", "--store", store.to_str().unwrap()],
    )))
    .unwrap();
    let names: Vec<(&str, u64)> = st["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["documents"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        vec![("bread", 1), ("kb-en", 3), ("notes", 1)],
        "{st}"
    );
    assert_eq!(st["model"], "use-m3");
    assert_eq!(st["last_run"]["status"], "completed");
    assert_eq!(st["last_run"]["collection"], "bread");
    let text = ok(&run(
        t.path(),
        &["status", "--store", store.to_str().unwrap()],
    ));
    assert!(text.contains("collection kb-en: 3 documents"), "{text}");
    // Which products this CPU runs local models with: exactly what the embedder picks here.
    let cpu = format!(
        "cpu: {} products for local models",
        bib_embed::qgemm::Products::default()
    );
    assert!(text.lines().any(|l| l == cpu), "{cpu} in {text}");

    // rm --collection removes exactly one collection.
    let out = ok(&run(
        t.path(),
        &[
            "rm",
            "--collection",
            "kb-en",
            "--store",
            store.to_str().unwrap(),
        ],
    ));
    assert!(out.contains("3 documents"), "{out}");
    assert_eq!(
        collections_of(&store),
        vec![
            ("garden.md".to_string(), "notes".to_string()),
            ("x.md".to_string(), "bread".to_string()),
        ]
    );
    let missing = run(
        t.path(),
        &[
            "rm",
            "--collection",
            "kb-en",
            "--store",
            store.to_str().unwrap(),
        ],
    );
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no collection `kb-en`"));
}

#[test]
fn deleting_52_of_60_is_refused_until_allow_prune() {
    if !model_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let wiki = t.path().join("wiki");
    for i in 0..60 {
        write(
            &wiki,
            &format!("p{i:02}.md"),
            &format!("# Page {i}\n\nPage number {i} is about topic {i}.\n"),
        );
    }
    let store = store_path(&t, "kb");
    ok(&ingest_into(t.path(), &wiki, &store, &[]));
    assert_eq!(collections_of(&store).len(), 60);
    for i in 8..60 {
        std::fs::remove_file(wiki.join(format!("p{i:02}.md"))).unwrap();
    }
    let refused = ingest_into(t.path(), &wiki, &store, &[]);
    assert!(!refused.status.success(), "a 52-of-60 deletion must fail");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(said.contains("remove 52 of the 60"), "{said}");
    assert!(said.contains("--allow-prune"), "{said}");
    assert_eq!(collections_of(&store).len(), 60, "nothing deleted");

    let allowed = ingest_into(t.path(), &wiki, &store, &["--allow-prune"]);
    let rec: Value = serde_json::from_str(&ok(&allowed)).unwrap();
    assert_eq!(rec["phase_b"]["documents_removed"], 52);
    assert_eq!(collections_of(&store).len(), 8);

    // Small deletions (at most 5, or at most half) need no confirmation.
    for i in 0..3 {
        std::fs::remove_file(wiki.join(format!("p{i:02}.md"))).unwrap();
    }
    ok(&ingest_into(t.path(), &wiki, &store, &[]));
    assert_eq!(collections_of(&store).len(), 5);
}

/// The file's lines `a..=b` (1-based).
fn lines_of(file: &Path, a: u64, b: u64) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        a >= 1 && a <= b && b as usize <= lines.len(),
        "{a}-{b} of {}",
        lines.len()
    );
    lines[(a - 1) as usize..b as usize].join("\n")
}

#[test]
fn results_cite_node_and_lines_of_the_file() {
    if !model_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let wiki = t.path().join("wiki");
    let mut doc = String::from("---\ntitle: Signing\ntags: [nuget]\n---\n# Signing\n\n");
    doc.push_str("Intro paragraph about nothing in particular.\n\n");
    doc.push_str("## Certificates\n\n");
    for i in 0..30 {
        doc.push_str(&format!(
            "Line {i} says certificates are stored in store {i}.\n"
        ));
    }
    doc.push_str("\n## Timestamps\n\nA timestamp server countersigns the signature.\n");
    write(&wiki, "sign.md", &doc);
    write(
        &wiki,
        "inc.md",
        "# Including\n\nOwn text first.\n\n[!INCLUDE [shared](shared/part.md)]\n\nOwn text after.\n",
    );
    write(
        &wiki,
        "shared/part.md",
        "The included paragraph explains quarantine of zebrafish.\n",
    );
    let store = store_path(&t, "kb");
    ok(&ingest_into(t.path(), &wiki, &store, &[]));

    let v = ask(
        t.path(),
        &store,
        "timestamp server countersigns",
        &["--top-k", "3"],
    );
    let res = v["results"].as_array().unwrap();
    assert!(!res.is_empty());
    let docs = SqliteStore::open(&store).unwrap().documents().unwrap();
    for r in res {
        let path = r["path"].as_str().unwrap();
        let node = docs.iter().find(|d| d.path == path).unwrap().node_id;
        assert_eq!(r["node_id"], node, "{r}");
        let (a, b) = (
            r["line_start"].as_u64().unwrap(),
            r["line_end"].as_u64().unwrap(),
        );
        let cited = lines_of(&wiki.join(path), a, b);
        if path == "inc.md" && r["content"].as_str().unwrap().contains("zebrafish") {
            assert!(
                cited.contains("[!INCLUDE"),
                "included text cites its directive: {cited}"
            );
            continue;
        }
        // Every content line of the chunk is within the cited lines.
        for line in r["content"].as_str().unwrap().lines().skip(1) {
            let line = line.trim();
            if !line.is_empty() {
                assert!(
                    cited.contains(line),
                    "{line:?} not in {path}:{a}-{b}:\n{cited}"
                );
            }
        }
    }
    let top = &res[0];
    assert_eq!(top["path"], "sign.md");
    assert!(
        lines_of(&wiki.join("sign.md"), 1, top["line_end"].as_u64().unwrap())
            .contains("countersigns")
    );

    // The included text cites the directive's line in the including file.
    // (shared/part.md is a document too; ask only the including one.)
    let z = ask(
        t.path(),
        &store,
        "quarantine of zebrafish",
        &["--top-k", "1", "--filter", "path=inc.md"],
    );
    let r = &z["results"][0];
    assert_eq!(r["path"], "inc.md", "{z}");
    let (a, b) = (
        r["line_start"].as_u64().unwrap(),
        r["line_end"].as_u64().unwrap(),
    );
    assert!(lines_of(&wiki.join("inc.md"), a, b).contains("[!INCLUDE"));

    // Text output prints `path:from-to`.
    let text = ok(&run(
        t.path(),
        &[
            "ask",
            "timestamp server countersigns",
            "--store",
            store.to_str().unwrap(),
        ],
    ));
    let want = format!(
        "sign.md:{}-{}",
        top["line_start"].as_u64().unwrap(),
        top["line_end"].as_u64().unwrap()
    );
    assert!(text.contains(&want), "{want} not in:\n{text}");
}

#[test]
fn api_documents_live_in_their_own_collection_and_survive_ingest() {
    if !model_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let wiki = t.path().join("wiki");
    server_support::tiny_wiki(&wiki);
    let store = store_path(&t, "kb");
    ok(&ingest_into(t.path(), &wiki, &store, &[]));
    {
        let s = server_support::serve(&store, Some(server_support::TOKEN), &["--no-model"]);
        let auth = format!("Bearer {}", server_support::TOKEN);
        let hdr = [("Authorization", auth.as_str())];
        let doc = serde_json::json!({"path": "notes/api.md", "content": "# Api\n\nRegistered over HTTP.\n"});
        let (st, r) = server_support::post(s.addr, "/docs", &doc, &hdr);
        assert_eq!(st, 201, "{r}");
        let team = serde_json::json!({"path": "notes/team.md", "collection": "team", "content": "# Team\n\nAlso over HTTP.\n"});
        let (st, r) = server_support::post(s.addr, "/docs", &team, &hdr);
        assert_eq!(st, 201, "{r}");
        // HTTP ask: the collection filter and the citation fields.
        let (st, v) = server_support::post(
            s.addr,
            "/ask",
            &serde_json::json!({"query": "packages restored cache", "mode": "bm25", "collections": ["wiki"]}),
            &[],
        );
        assert_eq!(st, 200, "{v}");
        let res = v["results"].as_array().unwrap();
        assert!(!res.is_empty(), "{v}");
        for r in res {
            assert_eq!(r["collection"], "wiki", "{r}");
            assert!(r["node_id"].as_i64().unwrap() > 0, "{r}");
            let (a, b) = (
                r["line_start"].as_u64().unwrap(),
                r["line_end"].as_u64().unwrap(),
            );
            let cited = lines_of(&wiki.join(r["path"].as_str().unwrap()), a, b);
            // Every line of the chunk (after its `[Doc: …]` prefix) is in the cited lines.
            for line in r["content"].as_str().unwrap().lines().skip(1) {
                let line = line.trim();
                assert!(
                    line.is_empty() || cited.contains(line),
                    "{line:?} not in {cited}"
                );
            }
        }
        let (_, none) = server_support::post(
            s.addr,
            "/ask",
            &serde_json::json!({"query": "packages restored cache", "mode": "bm25", "collections": ["team"]}),
            &[],
        );
        assert!(none["results"].as_array().unwrap().is_empty(), "{none}");
    }
    let coll = collections_of(&store);
    assert!(
        coll.contains(&("notes/api.md".to_string(), "api".to_string())),
        "{coll:?}"
    );
    assert!(
        coll.contains(&("notes/team.md".to_string(), "team".to_string())),
        "{coll:?}"
    );
    // A normal ingest of the wiki deletes nothing registered through the API.
    let rec: Value = serde_json::from_str(&ok(&ingest_into(t.path(), &wiki, &store, &[]))).unwrap();
    assert_eq!(rec["phase_b"]["documents_removed"], 0, "{rec}");
    assert_eq!(collections_of(&store), coll);
}
