//! `bib embed` end to end: the real binary's vectors are the library's vectors for the same
//! texts (passage and query kinds, both models), blank lines keep their index, JSONL is read by
//! its `text` field, and a bad line is named.

mod server_support;

use std::io::Write;
use std::process::Stdio;

use bib_embed::{EmbedKind, Embedder};
use server_support::{bib, model_available};

/// Run `bib embed <args>` with `input` on stdin: exit success, stdout, stderr.
fn embed(args: &[&str], input: &str) -> (bool, String, String) {
    let mut child = bib()
        .arg("embed")
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `(text_index, vector)` of each output line.
fn parse(stdout: &str) -> Vec<(usize, Vec<f32>)> {
    stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let vector = v["vector"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            (v["text_index"].as_u64().unwrap() as usize, vector)
        })
        .collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn vectors_are_the_librarys_and_blank_lines_keep_their_index() {
    if !model_available() {
        return;
    }
    let texts = [
        "how do I sign a package?",
        "¿cómo restauro desde una fuente local?",
    ];
    let (ok, out, err) = embed(&[], &format!("{}\n\n{}\n", texts[0], texts[1]));
    assert!(ok, "{err}");
    let got = parse(&out);
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [0, 2]);
    let model = bib_embed::UseM3::load_default().unwrap();
    let want = model.embed(&texts, EmbedKind::Passage).unwrap();
    for ((_, g), w) in got.iter().zip(&want) {
        assert_eq!(g.len(), model.dimensions());
        assert!(max_diff(g, w) < 1e-6, "use-m3 vectors differ");
    }
    // JSONL, found by its first line, with other fields alongside `text`.
    let jsonl = format!(
        "{{\"id\": \"a\", \"text\": {:?}}}\n{{\"text\": {:?}}}\n",
        texts[0], texts[1]
    );
    let (ok, out, err) = embed(&["--batch", "1"], &jsonl);
    assert!(ok, "{err}");
    let got = parse(&out);
    assert_eq!(got.len(), 2);
    assert!(max_diff(&got[1].1, &want[1]) < 1e-6);
}

#[test]
fn e5_small_queries_get_the_query_prefix() {
    if !model_available() {
        return;
    }
    let Ok(model) = bib_embed::E5Small::load_default() else {
        eprintln!("skipping: e5-small is not installed (`bib model install e5-small`)");
        return;
    };
    let text = "where is the package cache";
    let (ok, out, err) = embed(&["--model", "e5-small", "--query"], text);
    assert!(ok, "{err}");
    let query = &parse(&out)[0].1;
    let (ok, out, _) = embed(&["--model", "e5-small"], text);
    assert!(ok);
    let passage = &parse(&out)[0].1;
    let want_q = &model.embed(&[text], EmbedKind::Query).unwrap()[0];
    let want_p = &model.embed(&[text], EmbedKind::Passage).unwrap()[0];
    assert!(max_diff(query, want_q) < 1e-5);
    assert!(max_diff(passage, want_p) < 1e-5);
    assert!(
        max_diff(query, passage) > 1e-3,
        "query and passage are the same"
    );
}

#[test]
fn bad_input_and_unknown_models_are_named() {
    let (ok, out, err) = embed(&["--model", "nope"], "x\n");
    assert!(!ok && out.is_empty());
    assert!(
        err.contains("unknown embedding model `nope`") && err.contains("e5-small"),
        "{err}"
    );
    if !model_available() {
        return;
    }
    let (ok, _, err) = embed(&["--format", "jsonl"], "{\"text\": \"a\"}\n{\"text\": 5}\n");
    assert!(!ok);
    assert!(
        err.contains("input line 2: `text` is not a string"),
        "{err}"
    );
}
