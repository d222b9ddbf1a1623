//! Experiment (issues 15/16): a chunk's vector as the normalised mean of its sentences'
//! vectors (already embedded for trimming), optionally with its heading prefix embedded alone
//! at weight W (e5-small), so e5-small would need one pass (the sentences) instead of two.
//! Prints SQL that rewrites `chunks.embedding` of a copy of a wiki store:
//! `cargo run --release -p bib-bench --example mean_chunk_vectors -- STORE W [MODEL] [OWN] |
//! sqlite3 COPY` — MODEL the sentence vectors' model (default e5-small), OWN the weight of the
//! chunk's stored vector added to the mean; `MEAN_WEIGHT=len|sqrt` weighs sentences by length.
//! Results: BENCHMARKS.md, "A chunk's vector as the mean of its sentence vectors".

use bib_embed::e5::E5Small;
use bib_embed::{store_key, EmbedKind, Embedder};
use bib_store::{SqliteStore, Store, VectorsByHash};
use bib_text::sentences::chunk_sentences;

fn main() -> anyhow::Result<()> {
    let path = std::env::args().nth(1).expect("store path");
    let prefix_weight: f32 = std::env::args().nth(2).map_or(0.0, |w| w.parse().unwrap());
    let model_id = std::env::args().nth(3).unwrap_or_else(|| "e5-small".into());
    let own_weight: f32 = std::env::args().nth(4).map_or(0.0, |w| w.parse().unwrap());
    let store = SqliteStore::open(std::path::Path::new(&path))?;
    let model = if prefix_weight > 0.0 {
        Some(E5Small::load_default()?)
    } else {
        None
    };
    let chunks = store.get_chunks(&store.chunk_ids()?)?;
    println!("BEGIN;");
    let (mut missing, mut total) = (0, 0);
    for c in &chunks {
        let text = c.text();
        let (offset, spans) = chunk_sentences(&text);
        let keys: Vec<String> = spans
            .iter()
            .map(|s| store_key(&text[offset + s.start..offset + s.end], EmbedKind::Passage))
            .collect();
        let found = store.cached_vectors(&model_id, &keys)?;
        total += keys.len();
        missing += keys.len() - found.len();
        let mut mean = vec![0f32; found.first().map_or(384, |(_, v)| v.len())];
        let weighting = std::env::var("MEAN_WEIGHT").unwrap_or_default();
        let len_of: std::collections::HashMap<&str, usize> = keys
            .iter()
            .map(String::as_str)
            .zip(spans.iter().map(|s| s.end - s.start))
            .collect();
        for (k, v) in &found {
            let len = len_of[k.as_str()] as f32;
            let w = match weighting.as_str() {
                "len" => len,
                "sqrt" => len.sqrt(),
                _ => 1.0,
            };
            mean.iter_mut().zip(v).for_each(|(m, x)| *m += w * x);
        }
        if own_weight > 0.0 {
            let own = store.get_vectors(&[c.id])?.remove(0).1;
            mean = bib_text::vectors::unit(&mean)
                .iter()
                .zip(&own)
                .map(|(m, x)| m + own_weight * x)
                .collect();
        }
        let head = text[..offset].trim();
        if let Some(model) = model.as_ref().filter(|_| !head.is_empty()) {
            let v = model.embed(&[head], EmbedKind::Passage)?.remove(0);
            mean.iter_mut()
                .zip(&v)
                .for_each(|(m, x)| *m += prefix_weight * x);
        }
        let mean = bib_text::vectors::unit(&mean);
        if mean.iter().all(|&x| x == 0.0) {
            continue;
        }
        let hex: String = mean
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .map(|b| format!("{b:02x}"))
            .collect();
        println!(
            "UPDATE chunks SET embedding = X'{hex}' WHERE id = {};",
            c.id
        );
    }
    println!("COMMIT;");
    eprintln!(
        "{} chunks, {total} sentences, {missing} without a vector",
        chunks.len()
    );
    Ok(())
}
