//! Experiment (issue 15/16): replace an e5-small store's sentence vectors by contextual ones,
//! pooled from each chunk's own encoder pass (`E5Small::embed_spans`), so `bib bench wiki
//! --cache-dir <copy>` measures them: `cargo run --release -p bib-bench --example
//! pooled_sentences -- STORE.sqlite`.

use bib_embed::e5::E5Small;
use bib_embed::{store_key, EmbedKind};
use bib_store::{SqliteStore, Store, VectorsByHash};
use bib_text::sentences::chunk_sentences;

fn main() -> anyhow::Result<()> {
    let path = std::env::args().nth(1).expect("store path");
    let store = SqliteStore::open(std::path::Path::new(&path))?;
    let model = E5Small::load_default()?;
    let chunks = store.get_chunks(&store.chunk_ids()?)?;
    let t = std::time::Instant::now();
    let mut written = 0;
    for c in &chunks {
        let text = c.text();
        let (offset, spans) = chunk_sentences(&text);
        let ranges: Vec<std::ops::Range<usize>> = spans
            .iter()
            .map(|s| offset + s.start..offset + s.end)
            .collect();
        let vectors = model.embed_spans(&text, &ranges);
        let items: Vec<(String, Vec<f32>)> = ranges
            .iter()
            .zip(vectors)
            .filter_map(|(r, v)| Some((store_key(&text[r.clone()], EmbedKind::Passage), v?)))
            .collect();
        written += items.len();
        store.cache_vectors("e5-small", &items)?;
    }
    eprintln!(
        "{} chunks, {written} sentence vectors pooled in {:.1} s",
        chunks.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
