use std::collections::{BTreeSet, HashMap};

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

/// Resolve with a config file holding `text`.
fn with_file(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    flags: impl FnOnce(&mut Settings),
) -> Result<Settings, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bib.toml");
    std::fs::write(&path, text).unwrap();
    Settings::resolve(Some(&path), env, flags)
}

const FILE: &str = r#"
[store]
path = "kb/file.sqlite"
[ask]
top_k = 7
mode = "bm25"
trim = true
trim_threshold = 0.5
trim_window = 2
filters = ["app=core"]
[llm]
base_url = "http://file/v1"
model = "file-model"
"#;

#[test]
fn defaults_are_retrievals_and_the_ask_profile() {
    let s = Settings::resolve(None, &no_env, |_| ()).unwrap();
    assert_eq!(s, Settings::default());
    assert_eq!(s.store, StoreSpec::default());
    let o = s.ask.retrieve_options(bib_embed::DEFAULT_MODEL);
    assert_eq!(
        (o.top_k, o.mode, o.fusion),
        (5, Mode::Hybrid, Fusion::Convex)
    );
    assert!(o.trim.is_none(), "trimming is off by default");
    assert_eq!(s.ask.trim_options(bib_embed::DEFAULT_MODEL), ASK_PROFILE);
    // Unset, the threshold is the one calibrated for the knowledge base's model.
    assert_eq!(s.ask.trim_threshold, None);
    assert_eq!(
        s.ask.trim_options("e5-small"),
        TrimOptions {
            threshold: bib_retrieve::trim::E5_SMALL_THRESHOLD,
            ..ASK_PROFILE
        }
    );
    // So is convex fusion's BM25 weight, and one that is set holds for every model.
    assert_eq!(s.ask.fusion_alpha, None);
    let alpha = |s: &Settings, model: &str| s.ask.retrieve_options(model).convex_alpha;
    assert_eq!(alpha(&s, bib_embed::DEFAULT_MODEL), 0.7);
    assert_eq!(alpha(&s, "e5-small"), 0.5);
    assert_eq!(alpha(&s, "openai:nomic-embed-text"), 0.7);
    let set = Settings::resolve(None, &no_env, |s| s.ask.fusion_alpha = Some(0.9)).unwrap();
    assert_eq!(alpha(&set, "e5-small"), 0.9);
    assert!(s.ask.log, "the query log is on by default");
    assert_eq!(s.ask.fallback, ModelFallback::None, "no silent fallback");
    assert!(s.ingest.sentence_vectors);
}

#[test]
fn store_forms() {
    let url = "postgres://bib@127.0.0.1:55432/bib?schema=kb";
    let s = Settings::from_toml(
        &format!("store = {url:?}\n[ask]\ntop_k = 3\n"),
        "f".as_ref(),
    )
    .unwrap();
    assert_eq!(s.store, StoreSpec::Postgres(url.into()));
    assert_eq!(s.ask.top_k, 3);
    for text in [
        "[store]\npath = \"kb.sqlite\"",
        "[store]\nurl = \"kb.sqlite\"",
    ] {
        let s = Settings::from_toml(text, "f".as_ref()).unwrap();
        assert_eq!(s.store, StoreSpec::Sqlite("kb.sqlite".into()), "{text}");
    }
    for text in ["store = 3", "[store]\npath = 1", "[store]\nfile = \"x\""] {
        let e = Settings::from_toml(text, "f".as_ref()).unwrap_err();
        assert!(e.to_string().contains("store"), "{text} → {e}");
    }
}

#[test]
fn precedence_flags_env_file_defaults() {
    // File alone.
    let s = with_file(FILE, &no_env, |_| ()).unwrap();
    assert_eq!(s.store, StoreSpec::Sqlite("kb/file.sqlite".into()));
    assert_eq!((s.ask.top_k, s.ask.mode), (7, Mode::Bm25));
    let t = s
        .ask
        .retrieve_options(bib_embed::DEFAULT_MODEL)
        .trim
        .unwrap();
    assert_eq!((t.threshold, t.window, t.min_sentences), (0.5, 2, 0));
    // A threshold that is set holds for every model.
    let t = s.ask.retrieve_options("e5-small").trim.unwrap();
    assert_eq!(t.threshold, 0.5);
    assert_eq!(t.lexical_top, ASK_PROFILE.lexical_top);
    assert_eq!(s.ask.filters, vec!["app=core".to_string()]);
    assert_eq!(s.llm.model.as_deref(), Some("file-model"));
    // Environment over the file.
    let env = env_of(&[
        ("RETRIEVAL_TRIM", "0"),
        ("BIB_LLM_MODEL", "env-model"),
        ("BIB_STORE", "env.sqlite"),
    ]);
    let s = with_file(FILE, &env, |_| ()).unwrap();
    assert!(!s.ask.trim);
    assert_eq!(s.llm.model.as_deref(), Some("env-model"));
    assert_eq!(s.llm.base_url.as_deref(), Some("http://file/v1"));
    assert_eq!(s.store, StoreSpec::Sqlite("env.sqlite".into()));
    // Flags over the environment.
    let s = with_file(FILE, &env, |s| {
        s.ask.trim = true;
        s.ask.trim_threshold = Some(0.3);
        s.ask.top_k = 2;
    })
    .unwrap();
    let t = s
        .ask
        .retrieve_options(bib_embed::DEFAULT_MODEL)
        .trim
        .unwrap();
    assert_eq!(
        (t.threshold, t.window),
        (0.3, 2),
        "window still from the file"
    );
    assert_eq!(s.ask.top_k, 2);
    // The environment alone over the defaults.
    let env = env_of(&[
        ("RETRIEVAL_TRIM", "yes"),
        ("RETRIEVAL_TRIM_THRESHOLD", "0.42"),
        ("RETRIEVAL_FUSION", "RRF"),
        ("RETRIEVAL_FUSION_ALPHA", "0.9"),
        ("RETRIEVAL_TRIM_WINDOW", "1"),
        ("RETRIEVAL_TRIM_LEXICAL_TOP", "0"),
        ("BIB_QUERY_LOG", "off"),
        ("RETRIEVAL_TRIM_MIN_SENTENCES", "9"), // not a variable bib reads
    ]);
    let s = Settings::resolve(None, &env, |_| ()).unwrap();
    assert!(s.ask.trim && !s.ask.log);
    assert_eq!(
        (
            s.ask.trim_threshold,
            s.ask.trim_window,
            s.ask.trim_lexical_top
        ),
        (Some(0.42), 1, 0)
    );
    assert_eq!((s.ask.fusion, s.ask.fusion_alpha), (Fusion::Rrf, Some(0.9)));
    assert_eq!(s.ask.trim_min_sentences, ASK_PROFILE.min_sentences);
    // Empty variables are unset.
    let s = Settings::resolve(None, &env_of(&[("BIB_STORE", " ")]), |_| ()).unwrap();
    assert_eq!(s.store, StoreSpec::default());
}

#[test]
fn query_log_and_fallback_switches() {
    let file = "[ask]\nlog = false\nfallback = \"bm25\"\n";
    let s = with_file(file, &no_env, |_| ()).unwrap();
    assert!(!s.ask.log);
    assert_eq!(s.ask.fallback, ModelFallback::Bm25);
    let on = env_of(&[("BIB_QUERY_LOG", "1")]);
    assert!(with_file(file, &on, |_| ()).unwrap().ask.log);
    assert!(!with_file(file, &on, |s| s.ask.log = false).unwrap().ask.log);
}

#[test]
fn config_file_from_flag_or_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.toml");
    std::fs::write(&path, "[ask]\ntop_k = 9\n").unwrap();
    let env = env_of(&[("BIB_CONFIG", path.to_str().unwrap())]);
    assert_eq!(Settings::resolve(None, &env, |_| ()).unwrap().ask.top_k, 9);
    let missing = dir.path().join("missing.toml");
    let e = Settings::resolve(Some(&missing), &env, |_| ()).unwrap_err();
    assert!(
        matches!(&e, ConfigError::Read { path, .. } if path == &missing),
        "{e}"
    );
}

#[test]
fn file_errors_name_the_file_key_and_line() {
    let cases = [
        ("[ask]\ntop_k = \"five\"", "ask.top_k", Some(2)),
        ("[ask]\nmode = \"fuzzy\"", "ask.mode", Some(2)),
        ("[ask]\nfusion = \"mean\"", "ask.fusion", Some(2)),
        ("[ask]\ntrim = 1", "ask.trim", Some(2)),
        ("[ask]\nfilters = \"app=core\"", "ask.filters", Some(2)),
        ("[ask]\nlog = \"no\"", "ask.log", Some(2)),
        ("[ask]\nfallback = \"vector\"", "ask.fallback", Some(2)),
        ("ask = 3", "ask", Some(1)),
        // Unknown keys, in a known table, at the top, and an unknown table.
        (
            "[ask]\ntop_k = 3\ntrim_treshold = 0.3\n",
            "ask.trim_treshold",
            Some(3),
        ),
        ("stor = \"kb.sqlite\"", "stor", Some(1)),
        ("[ingest]\nwhatever = 1\n", "ingest.whatever", Some(2)),
        ("\n[server]\naddr = \"x\"\n", "server", Some(2)),
        ("[serve]\naddr = \"x\"\n", "serve.addr", Some(2)),
    ];
    for (text, key, line) in cases {
        let e = Settings::from_toml(text, "my/bib.toml".as_ref()).unwrap_err();
        let ConfigError::File {
            key: k, line: l, ..
        } = &e
        else {
            panic!("{text:?} → {e}");
        };
        assert_eq!((k.as_deref(), *l), (Some(key), line), "{text:?} → {e}");
        let shown = format!("{e}");
        assert!(
            shown.contains("my/bib.toml") && shown.contains(key),
            "{text:?} → {shown}"
        );
    }
    let e = Settings::from_toml("[ask\n", "my/bib.toml".as_ref()).unwrap_err();
    assert!(e.to_string().contains("my/bib.toml"), "{e}");
    // The cause says what is wrong (the known keys, for an unknown one).
    let e = Settings::from_toml("[ask]\ntrim_treshold = 0.3", "f".as_ref()).unwrap_err();
    let cause = std::error::Error::source(&e).unwrap().to_string();
    assert!(cause.contains("trim_threshold"), "{cause}");
}

#[test]
fn environment_and_range_errors_name_their_source() {
    for (var, value) in [
        ("RETRIEVAL_TRIM", "maybe"),
        ("RETRIEVAL_TRIM_THRESHOLD", "high"),
        ("RETRIEVAL_TRIM_WINDOW", "-1"),
        ("RETRIEVAL_FUSION", "mean"),
        ("BIB_QUERY_LOG", "sometimes"),
    ] {
        let e = Settings::resolve(None, &env_of(&[(var, value)]), |_| ()).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Env { var: v, .. } if *v == var),
            "{var}={value} → {e}"
        );
        assert!(e.to_string().contains(var), "{e}");
    }
    type Flags = fn(&mut Settings);
    let out_of_range: [(&str, Flags); 5] = [
        ("ask.fusion_alpha", |s| s.ask.fusion_alpha = Some(2.0)),
        ("ask.top_k", |s| s.ask.top_k = 0),
        ("ask.trim_threshold", |s| s.ask.trim_threshold = Some(3.0)),
        ("ask.filters", |s| s.ask.filters = vec!["no-equals".into()]),
        ("ask.synonyms", |s| s.ask.synonyms = vec!["lib =>".into()]),
    ];
    for (key, flags) in out_of_range {
        let e = Settings::resolve(None, &no_env, flags).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Invalid { key: k, .. } if k == key),
            "{key} → {e}"
        );
    }
    let env = env_of(&[("RETRIEVAL_FUSION_ALPHA", "1.5")]);
    let e = Settings::resolve(None, &env, |_| ()).unwrap_err();
    assert!(e.to_string().contains("fusion_alpha"), "{e}");
    // Any source may have set a bad value, so the message names the flag and the variable.
    assert_eq!(
        e.to_string(),
        "setting ask.fusion_alpha (--fusion-alpha, RETRIEVAL_FUSION_ALPHA): 1.5 is not a weight in [0, 1]"
    );
    let e = Settings::resolve(None, &no_env, |s| s.ask.top_k = 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "setting ask.top_k (--top-k): must be at least 1"
    );
}

/// The dotted keys of a settings table (`ask.top_k`).
fn dotted_keys(t: &toml::Table) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (k, v) in t {
        match v {
            toml::Value::Table(sub) => {
                out.extend(dotted_keys(sub).into_iter().map(|s| format!("{k}.{s}")))
            }
            _ => {
                out.insert(k.clone());
            }
        }
    }
    out
}

#[test]
fn keys_document_every_setting_and_nothing_else() {
    let full = Settings {
        llm: LlmSettings {
            base_url: Some("u".into()),
            model: Some("m".into()),
            api_key: Some("k".into()),
        },
        embed: EmbedSettings {
            base_url: Some("u".into()),
            api_key: Some("k".into()),
            dimensions: Some(768),
            model: Some("e5-small".into()),
        },
        ingest: IngestSettings {
            model: Some("e5-small".into()),
            ..IngestSettings::default()
        },
        ask: AskSettings {
            trim_threshold: Some(0.5),
            fusion_alpha: Some(0.6),
            ..AskSettings::default()
        },
        ..Settings::default()
    };
    let fields = dotted_keys(&toml::Table::try_from(&full).unwrap());
    let documented: BTreeSet<String> = KEYS.iter().map(|k| k.name.to_string()).collect();
    assert_eq!(fields, documented);
    let flags: Vec<&str> = KEYS.iter().flat_map(|k| k.flags.iter().copied()).collect();
    for f in &flags {
        assert_eq!(
            flags.iter().filter(|g| g == &f).count(),
            1,
            "--{f} sets one key"
        );
        assert!(key_of_flag(f).is_some());
    }
    for k in KEYS {
        assert!(!k.doc.is_empty() && k.doc.ends_with('.'), "{}", k.name);
    }
}

#[test]
fn defaults_toml_parses_back_into_the_defaults() {
    let text = defaults_toml();
    let s = Settings::from_toml(&text, "defaults".as_ref()).unwrap();
    assert_eq!(s, Settings::default());
    for k in KEYS {
        assert!(
            text.contains(&format!("\n{} =", k.leaf()))
                || text.contains(&format!("# {} =", k.leaf())),
            "{} is in the defaults",
            k.name
        );
        if let Some((var, _)) = k.env {
            assert!(text.contains(var), "{var} is named");
        }
        if let Some(old) = k.env_fallback {
            assert!(text.contains(&format!("(else {old})")), "{old} is named");
        }
    }
    // Uncommenting the examples gives valid settings too.
    let uncommented: String = text
        .lines()
        .map(|l| {
            let example = KEYS
                .iter()
                .any(|k| k.example.is_some() && l.starts_with(&format!("# {} = ", k.leaf())));
            if example {
                l.trim_start_matches("# ").to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let s = Settings::from_toml(&uncommented, "examples".as_ref()).unwrap();
    assert_eq!(s.llm.model.as_deref(), Some("qwen2.5:3b"));
    assert_eq!(s.embed.base_url.as_deref(), Some("http://localhost:11434"));
    assert_eq!(s.ingest.exclude.len(), 2);
}

#[test]
fn readme_lists_every_key() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    for k in KEYS {
        let row = format!("| `{}` |", k.name);
        assert!(readme.contains(&row), "README.md has a row {row}");
        if let Some((var, _)) = k.env {
            let line = readme.lines().find(|l| l.starts_with(&row)).unwrap();
            assert!(line.contains(var), "README names {var} for {}", k.name);
            if let Some(old) = k.env_fallback {
                assert!(line.contains(old), "README names {old} for {}", k.name);
            }
        }
    }
}

#[test]
fn redacted_text_hides_secrets_and_parses_back() {
    let mut s = Settings {
        store: StoreSpec::parse("postgres://bib:hunter2@127.0.0.1/bib"),
        ..Settings::default()
    };
    s.llm.api_key = Some("sk-secret".into());
    s.embed.api_key = Some("sk-embed-secret".into());
    let text = s.to_toml_redacted();
    assert!(
        !text.contains("hunter2") && !text.contains("sk-secret") && !text.contains("sk-embed"),
        "{text}"
    );
    assert!(text.contains("[embed]\napi_key = \"(set)\""), "{text}");
    assert!(!format!("{s:?}").contains("sk-secret"));
    assert!(!format!("{s:?}").contains("sk-embed-secret"));
    let back = Settings::from_toml(&text, "shown".as_ref()).unwrap();
    assert_eq!(back.ask, s.ask);
}

#[test]
fn signals_from_file_env_and_flags_name_the_bad_one() {
    let d = Settings::resolve(None, &no_env, |_| ()).unwrap();
    assert_eq!(
        d.ask.retrieve_options(bib_embed::DEFAULT_MODEL).signals,
        Signals::default()
    );
    let file = "[ask]\nsignals = \"off\"\n";
    let s = with_file(file, &no_env, |_| ()).unwrap();
    assert_eq!(s.ask.signals, Signals::OFF);
    // The environment beats the file; its spec sets weights over the defaults.
    let env = env_of(&[("RETRIEVAL_SIGNALS", "field=0.5")]);
    let s = with_file(file, &env, |_| ()).unwrap();
    assert_eq!(s.ask.signals.field, 0.5);
    assert_eq!(s.ask.signals.phrase, Signals::default().phrase);
    // Flags beat both.
    let s = with_file(file, &env, |s| s.ask.signals = Signals::OFF).unwrap();
    assert_eq!(s.ask.signals, Signals::OFF);
    let err = with_file("[ask]\nsignals = \"loud=1\"\n", &no_env, |_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("ask.signals"), "{err}");
    let bad_env = env_of(&[("RETRIEVAL_SIGNALS", "field=x")]);
    let err = Settings::resolve(None, &bad_env, |_| ()).unwrap_err();
    assert!(err.to_string().contains("RETRIEVAL_SIGNALS"), "{err}");
    // Written back as its spec, it parses to the same settings.
    let text = d.to_toml_redacted();
    assert!(text.contains("signals = \"field=0,"), "{text}");
    let back = Settings::from_toml(&text, "shown".as_ref()).unwrap();
    assert_eq!(back.ask.signals, d.ask.signals);
}

#[test]
fn embed_endpoint_from_file_env_and_older_variables() {
    let file = "[embed]\nbase_url = \"http://file:11434\"\ndimensions = 256\n";
    let s = with_file(file, &no_env, |_| ()).unwrap();
    assert_eq!(s.embed.base_url.as_deref(), Some("http://file:11434"));
    assert_eq!(
        (s.embed.api_key.as_deref(), s.embed.dimensions),
        (None, Some(256))
    );
    // The older, more general names stand in when the embed ones are unset...
    let older = env_of(&[
        ("BIB_OPENAI_BASE_URL", "http://old:1"),
        ("OPENAI_API_KEY", "sk-old"),
    ]);
    let s = with_file(file, &older, |_| ()).unwrap();
    assert_eq!(s.embed.base_url.as_deref(), Some("http://old:1"));
    assert_eq!(s.embed.api_key.as_deref(), Some("sk-old"));
    assert_eq!(
        s.llm.api_key, None,
        "OPENAI_API_KEY is the endpoint's, not the chat's"
    );
    // ... and give way to them.
    let both = env_of(&[
        ("BIB_OPENAI_BASE_URL", "http://old:1"),
        ("BIB_EMBED_BASE_URL", "http://new:2"),
        ("OPENAI_API_KEY", "sk-old"),
        ("BIB_EMBED_API_KEY", "sk-new"),
        ("BIB_EMBED_DIMENSIONS", "512"),
    ]);
    let s = with_file(file, &both, |_| ()).unwrap();
    assert_eq!(s.embed.base_url.as_deref(), Some("http://new:2"));
    assert_eq!(s.embed.api_key.as_deref(), Some("sk-new"));
    assert_eq!(s.embed.dimensions, Some(512));
    // A bad value names the variable it came from, the older one included.
    let e =
        Settings::resolve(None, &env_of(&[("BIB_EMBED_DIMENSIONS", "wide")]), |_| ()).unwrap_err();
    assert!(e.to_string().contains("BIB_EMBED_DIMENSIONS"), "{e}");
}

/// `[embed] model` is `[ingest] model` under the name a reader looks for first: either sets
/// the model, the same value in both is fine, two different models are refused by name.
#[test]
fn embed_model_is_another_name_of_ingest_model() {
    let s = Settings::from_toml("[embed]\nmodel = \"e5-small\"\n", "f".as_ref()).unwrap();
    assert_eq!(s.ingest.model.as_deref(), Some("e5-small"));
    assert_eq!(s.embed.model, None, "moved, not kept twice");
    let s = with_file(
        "[embed]\nmodel = \"openai:nomic-embed-text\"\n",
        &no_env,
        |_| (),
    )
    .unwrap();
    assert_eq!(s.ingest.model.as_deref(), Some("openai:nomic-embed-text"));
    let same = "[embed]\nmodel = \"e5-small\"\n[ingest]\nmodel = \"e5-small\"\n";
    let s = Settings::from_toml(same, "f".as_ref()).unwrap();
    assert_eq!(s.ingest.model.as_deref(), Some("e5-small"));
    let both = "[embed]\nmodel = \"e5-small\"\n[ingest]\nmodel = \"use-m3\"\n";
    let e = Settings::from_toml(both, "f".as_ref())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("embed.model") && e.contains("ingest.model") && e.contains("use-m3"),
        "{e}"
    );
    let e = with_file(both, &no_env, |_| ()).unwrap_err().to_string();
    assert!(e.contains("embed.model"), "{e}");
    // The flag is stronger than either name in the file.
    let s = with_file("[embed]\nmodel = \"e5-small\"\n", &no_env, |s| {
        s.ingest.model = Some("use-m3".into())
    })
    .unwrap();
    assert_eq!(s.ingest.model.as_deref(), Some("use-m3"));
}
