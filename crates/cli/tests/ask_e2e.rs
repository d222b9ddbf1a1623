//! End-to-end: `bib ask` on the real binary over a small ingested bilingual wiki, with the real
//! default model: JSON shape, trimming on/off (flag, env, bib.toml and their precedence),
//! filters, modes, the query log, error messages, and `--synthesize` against a fake
//! OpenAI-compatible server. Set `BIB_SKIP_MODEL_TESTS=1` where the model cannot be installed.

use bib_store::RunLog;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod ask_support;

use ask_support::*;

/// A small bilingual wiki, ingested into `<tmp>/kb.sqlite`.
fn setup() -> Option<(tempfile::TempDir, PathBuf)> {
    let t = tempfile::tempdir().unwrap();
    if !model_available(t.path()) {
        return None;
    }
    let wiki = t.path().join("wiki");
    write(
        &wiki,
        "en/push.md",
        "---\ntitle: Pushing packages\napp: cli\ntags: [publish, cli]\n---\n# Push\n\n\
         Use `nuget push` to publish a package to a feed. The default timeout of nuget push is 300 seconds. \
         You can change it with the -Timeout option. The weather today is sunny and warm. \
         Cats like to sleep in the sun all afternoon. Bread is baked in a hot oven.\n",
    );
    write(
        &wiki,
        "en/config.md",
        "---\ntitle: Configuration\napp: core\n---\n# Config files\n\n\
         The nuget.config file lists the package sources. Each source has a name and a URL. \
         Credentials for private feeds are stored separately.\n",
    );
    write(
        &wiki,
        "es/restaurar.md",
        "---\ntitle: Restaurar paquetes\napp: core\ntags: [restore]\n---\n# Restaurar\n\n\
         La restauración descarga los paquetes desde los orígenes configurados. \
         La caché global guarda cada versión una sola vez. \
         El tiempo de espera de la restauración no se puede cambiar.\n",
    );
    let store = t.path().join("kb.sqlite");
    ingest(t.path(), &wiki, &store, &["--json"]);
    Some((t, store))
}

fn ask_json(cwd: &Path, store: &Path, q: &str, extra: &[&str], env: &[(&str, &str)]) -> Value {
    let mut args = vec!["ask", q, "--json", "--store", store.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = bib(cwd, &args, env);
    assert!(o.status.success(), "ask {extra:?} failed: {}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", text(&o)))
}

fn results(v: &Value) -> &Vec<Value> {
    v["results"].as_array().expect("results array")
}

fn paths(v: &Value) -> Vec<String> {
    results(v)
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn ask_json_trim_filters_modes_config_and_log() {
    let Some((t, store)) = setup() else { return };
    let cwd = t.path();
    let q = "What is the default timeout of nuget push?";

    // Shape and ranking, trimming off by default.
    let v = ask_json(cwd, &store, q, &[], &[]);
    assert_eq!(v["query"], q);
    assert_eq!(v["mode"], "hybrid");
    let r0 = &results(&v)[0];
    assert_eq!(r0["path"], "en/push.md", "{v:#}");
    assert_eq!(r0["chunk_index"], 0);
    assert!(r0["content"].as_str().unwrap().contains("300 seconds"));
    assert!(r0["score"].as_f64().unwrap() > 0.0);
    assert!(
        r0["bm25"]["rank"].is_u64() && r0["vector"]["rank"].is_u64(),
        "{r0:#}"
    );
    let scores: Vec<f64> = results(&v)
        .iter()
        .map(|r| r["score"].as_f64().unwrap())
        .collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "best first: {scores:?}"
    );
    let before = v["tokens_before"].as_u64().unwrap();
    assert!(before > 0);
    assert_eq!(v["tokens_in_context"].as_u64().unwrap(), before);
    assert!(r0["sentences_total"].is_null());
    let whole = r0["content"].as_str().unwrap().to_string();

    // --trim with a threshold nothing reaches: best sentence ± 1 neighbour per chunk.
    let v = ask_json(cwd, &store, q, &["--trim", "--trim-threshold", "0.95"], &[]);
    let r0 = &results(&v)[0];
    let trimmed = r0["content"].as_str().unwrap();
    assert_eq!(r0["path"], "en/push.md");
    assert!(
        trimmed.contains("300 seconds"),
        "best sentence kept: {trimmed}"
    );
    assert!(
        !trimmed.contains("Bread is baked"),
        "far sentence dropped: {trimmed}"
    );
    assert!(trimmed.starts_with("[Doc: "), "prefix restored: {trimmed}");
    let prefix = trimmed.split_once('\n').unwrap().0;
    assert!(whole.starts_with(prefix), "same prefix: {prefix}");
    for piece in trimmed[prefix.len()..].split("[...]") {
        assert!(
            whole.contains(piece.trim()),
            "{piece:?} not in the original chunk {whole:?}"
        );
    }
    assert!(v["tokens_in_context"].as_u64().unwrap() < v["tokens_before"].as_u64().unwrap());
    assert_eq!(v["tokens_before"].as_u64().unwrap(), before);
    assert!(
        v["exact_tokens_in_context"].as_u64().unwrap() < v["exact_tokens_before"].as_u64().unwrap()
    );
    assert!(r0["sentences_kept"].as_u64().unwrap() < r0["sentences_total"].as_u64().unwrap());

    // Env turns trimming on; the --no-trim flag beats the env.
    let env = [
        ("RETRIEVAL_TRIM", "1"),
        ("RETRIEVAL_TRIM_THRESHOLD", "0.95"),
    ];
    let v = ask_json(cwd, &store, q, &[], &env);
    assert!(v["tokens_in_context"].as_u64().unwrap() < v["tokens_before"].as_u64().unwrap());
    assert!((v["trim"]["threshold"].as_f64().unwrap() - 0.95).abs() < 1e-6);
    let v = ask_json(cwd, &store, q, &["--no-trim"], &env);
    assert!(v["trim"].is_null());
    assert_eq!(v["tokens_in_context"], v["tokens_before"]);

    // Filters apply before the cut.
    let v = ask_json(cwd, &store, q, &["--filter", "app=core"], &[]);
    let p = paths(&v);
    assert!(
        !p.is_empty() && p.iter().all(|p| p != "en/push.md"),
        "{p:?}"
    );
    let v = ask_json(
        cwd,
        &store,
        q,
        &["--filter", "path=es/", "--top-k", "1"],
        &[],
    );
    assert_eq!(paths(&v), vec!["es/restaurar.md".to_string()]);
    let v = ask_json(
        cwd,
        &store,
        q,
        &["--filter", "tags=publish", "--filter", "app=cli"],
        &[],
    );
    assert_eq!(paths(&v), vec!["en/push.md".to_string()]);

    // Modes.
    let v = ask_json(cwd, &store, q, &["--mode", "bm25"], &[]);
    assert_eq!(v["mode"], "bm25");
    assert!(results(&v)
        .iter()
        .all(|r| r["vector"].is_null() && !r["bm25"].is_null()));
    let v = ask_json(
        cwd,
        &store,
        "¿Dónde se guardan las versiones descargadas?",
        &["--mode", "vector"],
        &[],
    );
    assert_eq!(v["mode"], "vector");
    assert!(results(&v)
        .iter()
        .all(|r| r["bm25"].is_null() && !r["vector"].is_null()));

    // Fusion: convex by default, RRF on request (its score is the RRF formula).
    let v = ask_json(cwd, &store, q, &[], &[]);
    assert_eq!(v["fusion"]["method"], "convex", "{v:#}");
    // The fused score is on [0, 1]; the ranking signals add to it.
    let s0 = results(&v)[0]["explain"]["fused"].as_f64().unwrap();
    assert!(
        (0.0..=1.0).contains(&s0),
        "convex scores are in [0, 1]: {s0}"
    );
    let v = ask_json(cwd, &store, q, &["--fusion", "rrf"], &[]);
    assert_eq!(v["fusion"]["method"], "rrf");
    assert_eq!(paths(&v)[0], "en/push.md");
    let r0 = &results(&v)[0];
    let expect: f64 = ["bm25", "vector"]
        .iter()
        .filter_map(|l| r0[*l]["rank"].as_u64())
        .map(|rank| 1.0 / (60.0 + rank as f64))
        .sum();
    assert!(
        (r0["score"].as_f64().unwrap() - expect).abs() < 1e-9,
        "{r0:#}"
    );
    let v = ask_json(cwd, &store, q, &[], &[("RETRIEVAL_FUSION_ALPHA", "1")]);
    assert_eq!(v["fusion"]["alpha"], 1.0);
    let o = bib(
        cwd,
        &[
            "ask",
            q,
            "--store",
            store.to_str().unwrap(),
            "--fusion",
            "mean",
        ],
        &[],
    );
    assert!(
        !o.status.success() && text(&o).contains("rrf, convex"),
        "{}",
        text(&o)
    );

    // bib.toml in the working directory; flags beat it.
    std::fs::write(
        cwd.join("bib.toml"),
        format!(
            "[store]\npath = {:?}\n[ask]\ntop_k = 1\ntrim = true\ntrim_threshold = 0.95\n",
            store.to_str().unwrap()
        ),
    )
    .unwrap();
    let o = bib(cwd, &["ask", q, "--json"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(results(&v).len(), 1);
    assert!(!v["trim"].is_null(), "file turns trimming on");
    let o = bib(
        cwd,
        &["ask", q, "--json", "--top-k", "2"],
        &[("RETRIEVAL_TRIM", "0")],
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(results(&v).len(), 2);
    assert!(v["trim"].is_null(), "env beats the file");
    std::fs::write(cwd.join("bib.toml"), "[ask]\ntop_k = \"many\"\n").unwrap();
    let o = bib(cwd, &["ask", q, "--store", store.to_str().unwrap()], &[]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("bib.toml") && text(&o).contains("ask.top_k"),
        "{}",
        text(&o)
    );
    std::fs::remove_file(cwd.join("bib.toml")).unwrap();

    // Human output: sources and token accounting.
    let o = bib(
        cwd,
        &["ask", q, "--store", store.to_str().unwrap(), "--trim"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("[1] en/push.md:"), "{out}");
    assert!(
        out.contains("tokens: ") && out.contains("model tokenizer"),
        "{out}"
    );

    // Every successful ask above was logged, newest first.
    let s = bib_store::SqliteStore::open(&store).unwrap();
    let log = s.recent_queries(100).unwrap();
    assert_eq!(log.len(), 15, "{log:#?}");
    assert_eq!(log[0].query, q);
    assert!(!log[0].chunk_ids.is_empty() && log[0].chunk_ids.len() == log[0].scores.len());
    assert!(log.iter().any(|e| e.mode == "vector"));

    // Errors name the problem.
    let o = bib(
        cwd,
        &[
            "ask",
            q,
            "--store",
            cwd.join("nope.sqlite").to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        !o.status.success() && text(&o).contains("no knowledge base"),
        "{}",
        text(&o)
    );
    let o = bib(
        cwd,
        &[
            "ask",
            q,
            "--store",
            store.to_str().unwrap(),
            "--filter",
            "oops",
        ],
        &[],
    );
    assert!(
        !o.status.success() && text(&o).contains("key=value"),
        "{}",
        text(&o)
    );
    let o = bib(
        cwd,
        &[
            "ask",
            q,
            "--store",
            store.to_str().unwrap(),
            "--mode",
            "fuzzy",
        ],
        &[],
    );
    assert!(
        !o.status.success() && text(&o).contains("hybrid, bm25, vector"),
        "{}",
        text(&o)
    );
}

/// `--json` gains `explain` per result (every part of its score, adding up to it) and the
/// `signals` used; `--explain` prints the same parts; `--signals` is checked and named.
/// A question with typos finds what the same question without them finds, and says which
/// words it searched instead; `typo=0` searches the words as written; words the knowledge base
/// knows are never changed.
#[test]
fn ask_corrects_typos_and_says_so() {
    let Some((t, store)) = setup() else { return };
    let cwd = t.path();
    let v = ask_json(
        cwd,
        &store,
        "where are credentails for privte feeds kept?",
        &[],
        &[],
    );
    let fixed: Vec<(String, String)> = v["corrections"]
        .as_array()
        .expect("corrections listed")
        .iter()
        .map(|c| {
            (
                c["from"].as_str().unwrap().into(),
                c["to"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        fixed,
        [
            ("credentails".to_string(), "credentials".to_string()),
            ("privte".to_string(), "private".to_string())
        ],
        "{v:#}"
    );
    assert_eq!(v["query"], "where are credentails for privte feeds kept?");
    assert_eq!(paths(&v)[0], "en/config.md", "{v:#}");
    let o = bib(
        cwd,
        &[
            "ask",
            "where are credentails for privte feeds kept?",
            "--store",
            store.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        text(&o)
            .contains("searched with typos corrected: credentails → credentials, privte → private"),
        "{}",
        text(&o)
    );
    let off = ask_json(cwd, &store, "credentails", &["--signals", "typo=0"], &[]);
    assert_eq!(off["corrections"], serde_json::json!([]), "{off:#}");
    let clean = ask_json(
        cwd,
        &store,
        "where are credentials for private feeds kept?",
        &[],
        &[],
    );
    assert_eq!(clean["corrections"], serde_json::json!([]), "{clean:#}");
}

#[test]
fn ask_searches_the_owners_synonyms_and_says_so() {
    let Some((t, store)) = setup() else { return };
    let cwd = t.path();
    let bm25 = ["--mode", "bm25"];
    // No page says "vault": keywords alone find nothing of the config page.
    let plain = ask_json(cwd, &store, "vault", &bm25, &[]);
    assert!(
        !paths(&plain).contains(&"en/config.md".to_string()),
        "{plain:#}"
    );
    assert_eq!(plain["synonyms"], serde_json::json!([]), "{plain:#}");

    let config = cwd.join("synonyms.toml");
    std::fs::write(
        &config,
        "[ask]\nsynonyms = [\"vault, safe => credentials\"]\n",
    )
    .unwrap();
    let with = [&bm25[..], &["--config", config.to_str().unwrap()]].concat();
    let v = ask_json(cwd, &store, "vault", &with, &[]);
    assert_eq!(paths(&v)[0], "en/config.md", "{v:#}");
    assert_eq!(
        v["synonyms"],
        serde_json::json!([{"matched": "vault", "added": ["credentials"]}]),
        "{v:#}"
    );
    assert_eq!(v["query"], "vault");
    let mut args = vec!["ask", "vault", "--store", store.to_str().unwrap()];
    args.extend_from_slice(&with);
    let o = bib(cwd, &args, &[]);
    assert!(
        text(&o).contains("also searched for: credentials (for vault)"),
        "{}",
        text(&o)
    );

    // A rule given on the command line replaces the file's for one ask.
    let flag = [&bm25[..], &["--synonym", "vault => nuget.config"]].concat();
    let v = ask_json(cwd, &store, "vault", &flag, &[]);
    assert_eq!(
        v["synonyms"],
        serde_json::json!([{"matched": "vault", "added": ["nuget.config"]}]),
        "{v:#}"
    );

    // A rule that cannot be read stops the ask, naming the key and the rule.
    std::fs::write(&config, "[ask]\nsynonyms = [\"vault =>\"]\n").unwrap();
    let o = bib(cwd, &args, &[]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("ask.synonyms") && text(&o).contains("rule 1"),
        "{}",
        text(&o)
    );
}

#[test]
fn ask_explains_every_part_of_a_score() {
    let Some((t, store)) = setup() else { return };
    let cwd = t.path();
    let q = "What is the default timeout of nuget push?";
    let spec = "field=0.3,phrase=0.3,sentence=0.3,sentence_lex=0.2,doc=0.1,exact=5";
    let v = ask_json(cwd, &store, q, &["--signals", spec, "--no-log"], &[]);
    let ran = v["signals"].as_str().unwrap_or_default();
    assert!(
        ran.contains("field=0.3,") && ran.contains("exact_candidates=5"),
        "{ran}"
    );
    assert_eq!(results(&v)[0]["path"], "en/push.md", "{v:#}");
    for r in results(&v) {
        let x = &r["explain"];
        assert_eq!(x["fusion"], "convex", "{x:#}");
        assert_eq!(x["final"], r["score"], "{x:#}");
        let parts: f64 = ["field", "name", "phrase", "sentence", "sentence_lex", "doc"]
            .iter()
            .filter_map(|k| x[k]["contribution"].as_f64())
            .sum();
        let fused = x["fused"].as_f64().unwrap();
        assert!(
            (fused + parts - r["score"].as_f64().unwrap()).abs() < 1e-9,
            "{x:#}"
        );
        assert_eq!(x["bm25"], r["bm25"]["score"], "{x:#}");
        assert!(
            x["field"]["weight"] == 0.3 && x["doc"]["value"].is_number(),
            "{x:#}"
        );
    }
    let phrase = &results(&v)[0]["explain"]["phrase"];
    assert!(
        phrase["matched"]
            .as_array()
            .is_some_and(|m| m.contains(&"nuget push".into())),
        "{phrase:#}"
    );
    // Off: the fusion alone, no signal parts.
    let off = ask_json(cwd, &store, q, &["--signals", "off", "--no-log"], &[]);
    let x = &results(&off)[0]["explain"];
    assert!(x["field"].is_null() && x["sentence"].is_null(), "{x:#}");
    assert_eq!(x["final"], x["fused"]);
    // Text: one line of lists and fusion, one per signal, the final score.
    let o = bib(
        cwd,
        &[
            "ask",
            q,
            "--explain",
            "--signals",
            spec,
            "--no-log",
            "--store",
            store.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let n = results(&v).len();
    assert_eq!(out.matches("→ fused").count(), n, "{out}");
    assert_eq!(out.matches("= final").count(), n, "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("+ phrase") && l.contains("nuget push")),
        "{out}"
    );
    let o = bib(
        cwd,
        &[
            "ask",
            q,
            "--signals",
            "loud=1",
            "--no-log",
            "--store",
            store.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains("signals") && text(&o).contains("loud"),
        "{}",
        text(&o)
    );
    // Past the re-scoring depth a result keeps its fused score, and says so.
    let deep = ["--signals", "depth=1", "--top-k", "3", "--no-log"];
    let v = ask_json(cwd, &store, q, &deep, &[]);
    let past: Vec<bool> = results(&v)
        .iter()
        .map(|r| r["explain"]["past_depth"] == true)
        .collect();
    assert_eq!(past, [false, true, true], "{v:#}");
    let o = bib(
        cwd,
        &[
            &["ask", q, "--explain", "--store", store.to_str().unwrap()][..],
            &deep,
        ]
        .concat(),
        &[],
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout)
            .matches("(past the re-scoring depth")
            .count(),
        2,
        "{}",
        text(&o)
    );
}

/// A one-shot fake chat-completions server answering with SSE; returns the URL and the request.
fn fake_llm() -> (String, std::thread::JoinHandle<String>) {
    fake_chat(|_| {
        let body = "data: {\"choices\":[{\"delta\":{\"content\":\"The timeout is \"}}]}\n\n\
                    data: {\"choices\":[{\"delta\":{\"content\":\"300 seconds [1].\"}}]}\n\ndata: [DONE]\n\n";
        http_response("200 OK", "text/event-stream", body)
    })
}

#[test]
fn ask_synthesize_streams_with_citations() {
    let Some((t, store)) = setup() else { return };
    let cwd = t.path();
    let q = "What is the default timeout of nuget push?";
    let st = store.to_str().unwrap();

    let o = bib(cwd, &["ask", q, "--store", st, "--synthesize"], &[]);
    assert!(!o.status.success());
    assert!(text(&o).contains("BIB_LLM_BASE_URL"), "{}", text(&o));

    let (url, h) = fake_llm();
    let o = bib(
        cwd,
        &["ask", q, "--store", st, "--synthesize", "--trim"],
        &[
            ("BIB_LLM_BASE_URL", &url),
            ("BIB_LLM_MODEL", "tiny"),
            ("BIB_LLM_API_KEY", "sk-test"),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("The timeout is 300 seconds [1]."), "{out}");
    assert!(out.contains("[1] en/push.md:"), "{out}");
    let req = h.join().unwrap();
    assert!(req.starts_with("POST /v1/chat/completions"), "{req}");
    assert!(req.contains("Bearer sk-test"));
    assert!(req.contains("\"model\":\"tiny\""));
    assert!(req.contains("[1] en/push.md"), "{req}");

    // JSON mode carries the answer.
    let (url, h) = fake_llm();
    let o = bib(
        cwd,
        &["ask", q, "--store", st, "--synthesize", "--json"],
        &[("BIB_LLM_BASE_URL", &url), ("BIB_LLM_MODEL", "tiny")],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["answer"], "The timeout is 300 seconds [1].");
    h.join().unwrap();
}

/// A knowledge base whose only ingest found nothing answers "no results", and says on stderr
/// how to fill it (stdout stays the plain answer for pipes).
#[test]
fn ask_on_an_empty_knowledge_base_says_how_to_fill_it() {
    let t = tempfile::tempdir().unwrap();
    if !model_available(t.path()) {
        return;
    }
    let cwd = t.path();
    std::fs::create_dir_all(cwd.join("empty")).unwrap();
    let store = cwd.join("kb.sqlite");
    let o = bib(
        cwd,
        &["ingest", "empty", "--store", store.to_str().unwrap()],
        &[],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(store.exists(), "the failed run is recorded in the store");
    let o = bib(
        cwd,
        &["ask", "how do I push?", "--store", store.to_str().unwrap()],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stdout.starts_with("no results for"), "{stdout}");
    assert!(
        stderr.contains("holds no chunks yet") && stderr.contains("bib ingest"),
        "{stderr}"
    );
}
