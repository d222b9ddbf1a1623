//! End-to-end tests of `bib split` and `bib chunk`, running the real binary.

use std::io::Write;
use std::process::{Command, Stdio};

fn bib() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bib"))
}

/// Run `bib args…` with `stdin`; return (status ok, stdout, stderr).
fn run(args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = bib()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bib");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Compare and print both sides on mismatch.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) {
    if got != want {
        panic!("{what} mismatch\n--- got:\n{got:#?}\n--- want:\n{want:#?}");
    }
}

fn split_json(input: &str) -> Vec<String> {
    let (ok, out, err) = run(&["split", "--json"], input);
    assert!(ok, "bib split failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn split_spec_example_json() {
    same(
        "sentences",
        split_json("El sistema soporta multi-tenancy (v1.2.3). Véase RFC 3986..."),
        vec![
            "El sistema soporta multi-tenancy (v1.2.3).".to_string(),
            "Véase RFC 3986...".to_string(),
        ],
    );
}

#[test]
fn split_plain_one_per_line() {
    let (ok, out, err) = run(&["split"], "Hola Sr. García. ¿Cómo está?\n\n- uno\n- dos\n");
    assert!(ok, "{err}");
    same(
        "lines",
        out.lines().collect::<Vec<_>>(),
        vec!["Hola Sr. García.", "¿Cómo está?", "- uno", "- dos"],
    );
}

#[test]
fn split_markdown_spanish_keeps_fences_and_structure() {
    let md = "## <a name=\"uso\"></a>Uso\n\nEjecute el comando. Luego revise, p. ej. la salida.\n\n```bash\ndocker run --rm -it img. Otra\n```\n\n| a. | B |\n|---|---|\n> [!Note]\n> Nota. Dos\n";
    same(
        "sentences",
        split_json(md),
        vec![
            "## <a name=\"uso\"></a>Uso",
            "Ejecute el comando.",
            "Luego revise, p. ej. la salida.",
            "```bash\ndocker run --rm -it img. Otra\n```",
            "| a. | B |",
            "|---|---|",
            "> [!Note]",
            "> Nota. Dos",
        ]
        .into_iter()
        .map(String::from)
        .collect(),
    );
}

#[test]
fn split_empty_input() {
    same("sentences", split_json(""), Vec::<String>::new());
}

#[test]
fn chunk_json_has_stable_fields_and_spans() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guia.md");
    let src = "---\ntitle: \"Guía: uso\"\ntags: [a, b]\n---\n# Guía: uso\n\nIntro corta.\n\n## Instalar\n\nPaso uno. Paso dos.\n";
    std::fs::write(&path, src).unwrap();
    let (ok, out, err) = run(
        &[
            "chunk",
            path.to_str().unwrap(),
            "--json",
            "--max-words",
            "5",
        ],
        "",
    );
    assert!(ok, "bib chunk failed: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let arr = v.as_array().expect("array");
    assert!(arr.len() >= 2, "{out}");
    for (i, c) in arr.iter().enumerate() {
        for k in ["chunk_index", "prefix", "content", "start", "end", "hash"] {
            assert!(c.get(k).is_some(), "missing {k} in {c}");
        }
        same("chunk_index", c["chunk_index"].as_u64(), Some(i as u64));
        let (s, e) = (
            c["start"].as_u64().unwrap() as usize,
            c["end"].as_u64().unwrap() as usize,
        );
        same("span text", &src[s..e], c["content"].as_str().unwrap());
        assert!(
            c["prefix"].as_str().unwrap().starts_with("[Doc: Guía: uso"),
            "{c}"
        );
        same("hash length", c["hash"].as_str().unwrap().len(), 64);
    }
    let last = arr.last().unwrap();
    same(
        "last prefix",
        last["prefix"].as_str().unwrap(),
        "[Doc: Guía: uso › Instalar]",
    );
}

#[test]
fn chunk_plain_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notas.md");
    std::fs::write(&path, "Texto sin título. Otra frase.\n").unwrap();
    let (ok, out, err) = run(&["chunk", path.to_str().unwrap()], "");
    assert!(ok, "{err}");
    assert!(out.contains("[Doc: notas]"), "{out}");
    assert!(out.contains("Texto sin título. Otra frase."), "{out}");
}

#[test]
fn chunk_broken_yaml_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roto.md");
    std::fs::write(&path, "---\ntitle: ok\nbad: [unclosed\n---\ncuerpo\n").unwrap();
    let (ok, out, err) = run(&["chunk", path.to_str().unwrap()], "");
    assert!(!ok, "should fail, printed: {out}");
    assert!(
        err.contains("roto.md"),
        "stderr should name the file: {err}"
    );
    assert!(err.contains("line"), "stderr should give the line: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn chunk_missing_file_is_an_error() {
    let (ok, _, err) = run(&["chunk", "/nonexistent/x.md"], "");
    assert!(!ok);
    assert!(err.contains("/nonexistent/x.md"), "{err}");
}
