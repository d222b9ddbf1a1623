//! End-to-end tests of the settings on the real binary: unknown `bib.toml` keys are rejected
//! with the file, line and key; every command that reads settings takes `--config` (and
//! `BIB_CONFIG`); `bib config --defaults` parses back into the defaults; `--help` shows each
//! settings flag's default, variable and key, and has examples. None needs the model.

mod ask_support;

use ask_support::{bib, text};
use bib_app::Settings;

/// Each command that reads settings, with the fewest arguments that make it run.
fn settings_commands(dir: &str) -> Vec<Vec<String>> {
    let cmds: [&[&str]; 11] = [
        &["ask", "how", "do", "I", "sign", "--mode", "bm25"],
        &["get", "notes/a.md"],
        &["eval"],
        &["ingest", dir],
        &["runs"],
        &["rm", "--collection", "notes"],
        &["status"],
        &["serve", "--addr", "127.0.0.1:0"],
        &["mcp"],
        &["migrate", "--to", "copy.sqlite"],
        &["config"],
    ];
    cmds.iter()
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect()
}

#[test]
fn unknown_keys_are_rejected_naming_file_line_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    std::fs::write(
        cwd.join("bib.toml"),
        "store = \"kb.sqlite\"\n[ask]\ntop_k = 3\ntrim_treshold = 0.3\n",
    )
    .unwrap();
    for args in [
        &["status"][..],
        &["ask", "anything", "--mode", "bm25"],
        &["config"],
    ] {
        let o = bib(cwd, args, &[]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {t}");
        assert!(
            t.contains("bib.toml:4") && t.contains("ask.trim_treshold"),
            "{args:?} names file, line and key: {t}"
        );
        assert!(
            t.contains("trim_threshold"),
            "the known keys are listed: {t}"
        );
    }
    // An unknown table too, and an unknown key of a known one.
    std::fs::write(cwd.join("bib.toml"), "[server]\naddr = \"0.0.0.0:80\"\n").unwrap();
    let t = text(&bib(cwd, &["status"], &[]));
    assert!(t.contains("bib.toml:1") && t.contains("`server`"), "{t}");
    std::fs::write(cwd.join("bib.toml"), "[serve]\naddr = \"0.0.0.0:80\"\n").unwrap();
    let t = text(&bib(cwd, &["status"], &[]));
    assert!(
        t.contains("bib.toml:2") && t.contains("`serve.addr`"),
        "{t}"
    );
}

#[test]
fn every_settings_command_reads_config_and_bib_config() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    std::fs::create_dir(cwd.join("wiki")).unwrap();
    let missing = cwd.join("missing.toml");
    for args in settings_commands("wiki") {
        let mut with = args.clone();
        with.extend(["--config".to_string(), missing.display().to_string()]);
        let refs: Vec<&str> = with.iter().map(String::as_str).collect();
        let o = bib(cwd, &refs, &[]);
        let t = text(&o);
        assert!(!o.status.success(), "bib {with:?}: {t}");
        assert!(
            t.contains("cannot read config file") && t.contains("missing.toml"),
            "bib {} reads --config: {t}",
            args[0]
        );
        // BIB_CONFIG names the file when --config does not.
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let env = [("BIB_CONFIG", missing.to_str().unwrap())];
        let t = text(&bib(cwd, &refs, &env));
        assert!(
            t.contains("missing.toml"),
            "bib {} reads BIB_CONFIG: {t}",
            args[0]
        );
    }
    // A config naming a store: each reading command looks for it there.
    let cfg = cwd.join("team.toml");
    std::fs::write(&cfg, "store = \"elsewhere.sqlite\"\n").unwrap();
    for args in settings_commands("wiki") {
        if ["ingest", "config"].contains(&args[0].as_str()) {
            continue; // ingest would create the store; config is checked below
        }
        let mut with = args.clone();
        with.extend(["--config".to_string(), cfg.display().to_string()]);
        let refs: Vec<&str> = with.iter().map(String::as_str).collect();
        let t = text(&bib(cwd, &refs, &[]));
        assert!(
            t.contains("no knowledge base at elsewhere.sqlite"),
            "bib {} uses the configured store: {t}",
            args[0]
        );
    }
    assert!(!cwd.join("elsewhere.sqlite").exists(), "nothing created");
}

#[test]
fn config_prints_defaults_that_parse_back_and_the_merged_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let o = bib(cwd, &["config", "--defaults"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let defaults = String::from_utf8(o.stdout).unwrap();
    let parsed = Settings::from_toml(&defaults, "defaults".as_ref()).unwrap();
    assert_eq!(parsed, Settings::default());
    for k in bib_app::settings::KEYS {
        assert!(
            defaults.contains(k.doc.split_whitespace().next().unwrap()),
            "{}",
            k.name
        );
    }
    // Written to a file it is a valid config, and `bib config` shows the same settings.
    std::fs::write(cwd.join("bib.toml"), &defaults).unwrap();
    let o = bib(cwd, &["config"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let shown = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        Settings::from_toml(&shown, "shown".as_ref()).unwrap(),
        Settings::default()
    );
    // Precedence: flag > environment > file.
    std::fs::write(
        cwd.join("bib.toml"),
        "store = \"file.sqlite\"\n[ask]\ntrim = false\ntop_k = 3\n[llm]\napi_key = \"sk-file\"\n[embed]\napi_key = \"sk-embed-file\"\n",
    )
    .unwrap();
    let env = [
        ("BIB_STORE", "env.sqlite"),
        ("RETRIEVAL_TRIM", "1"),
        ("OPENAI_API_KEY", "sk-embed-env"),
    ];
    let o = bib(cwd, &["config"], &env);
    let s = Settings::from_toml(&String::from_utf8_lossy(&o.stdout), "shown".as_ref()).unwrap();
    assert_eq!(s.store, bib_app::StoreSpec::parse("env.sqlite"));
    assert!(s.ask.trim, "the environment beats the file");
    assert_eq!(s.ask.top_k, 3, "the file beats the defaults");
    assert!(!text(&o).contains("sk-file"), "secrets are hidden");
    assert!(!text(&o).contains("sk-embed"), "the endpoint's key too");
    assert_eq!(s.embed.api_key.as_deref(), Some("(set)"), "{}", text(&o));
    let o = bib(cwd, &["config", "--store", "flag.sqlite"], &env);
    let s = Settings::from_toml(&String::from_utf8_lossy(&o.stdout), "shown".as_ref()).unwrap();
    assert_eq!(
        s.store,
        bib_app::StoreSpec::parse("flag.sqlite"),
        "the flag beats both"
    );
}

#[test]
fn help_has_examples_and_names_each_settings_key() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let o = bib(cwd, &["ask", "--help"], &[]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(help.contains("Examples:"), "{help}");
    for note in [
        "[env: BIB_STORE] [config: store]",
        "[default: calibrated per model: use-m3 0.214, e5-small 0.82, others 0.214] [env: RETRIEVAL_TRIM_THRESHOLD] [config: ask.trim_threshold]",
        "[env: BIB_CONFIG]",
        "- bm25:   keywords only; loads no embedding model",
    ] {
        assert!(help.contains(note), "ask --help shows {note:?}: {help}");
    }
    for cmd in ["ingest", "eval", "status", "config", "pack", "serve"] {
        let o = bib(cwd, &[cmd, "--help"], &[]);
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(
            help.contains("Examples:\n  bib"),
            "bib {cmd} --help: {help}"
        );
    }
    // A typed flag rejects what it does not know, naming the choices.
    let t = text(&bib(cwd, &["ask", "q", "--fusion", "mean"], &[]));
    assert!(t.contains("convex") && t.contains("rrf"), "{t}");
}
