//! Shared harness of the `bib ask` end-to-end tests: the real binary run in a directory with
//! the configuration variables that would change its answers cleared.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Variables that would change an ask's behaviour; every test starts without them: every
/// settings variable (from the one list of keys) and a few more.
pub fn env_cleared() -> Vec<&'static str> {
    let mut vars: Vec<&'static str> = bib_app::settings::KEYS
        .iter()
        .flat_map(|k| k.env.map(|(var, _)| var).into_iter().chain(k.env_fallback))
        .collect();
    vars.extend(["BIB_CONFIG", "NO_COLOR", "RUST_BACKTRACE"]);
    vars
}

pub fn cmd(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bib"));
    c.current_dir(cwd).args(args);
    for k in env_cleared() {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

pub fn bib(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    cmd(cwd, args, env).output().expect("bib runs")
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn model_available(cwd: &Path) -> bool {
    let o = bib(cwd, &["model", "list"], &[]);
    if String::from_utf8_lossy(&o.stdout).contains("use-m3") {
        return true;
    }
    if std::env::var("BIB_SKIP_MODEL_TESTS").as_deref() == Ok("1") {
        eprintln!("skipping: default model not installed and BIB_SKIP_MODEL_TESTS=1");
        return false;
    }
    panic!("the default embedding model is not installed: run `bib model install` (or set BIB_SKIP_MODEL_TESTS=1)");
}

pub fn write(root: &Path, rel: &str, body: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}
