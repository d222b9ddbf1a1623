//! A synthetic knowledge base of any size, for the store benchmarks (`bib bench stores`,
//! `bib bench scale`): deterministic (fixed seed), generated as a stream so a million chunks
//! never sit in memory at once.
//!
//! Ten chunks per document, each 60–180 pseudo-words drawn from a Zipf-like vocabulary of
//! 50,000 words whose ranks shift per topic (200 topics), and a unit vector scattered around
//! its topic's centroid: both the lexical and the vector index see clustered, realistic-ish
//! data — long posting lists for the common words, short ones for the rare, and neighbours
//! that share a topic. Queries are six words and a vector drawn the same way (a wider spread).

use bib_store::DocumentChange;
use serde_json::json;

use super::ask_common::chunk_write;

const TOPICS: usize = 200;
const VOCAB: usize = 50_000;
const PER_DOC: usize = 10;

/// The corpus parameters and topic centroids.
pub struct SyntheticCorpus {
    dims: usize,
    model_id: String,
    centroids: Vec<Vec<f32>>,
}

impl SyntheticCorpus {
    /// A corpus of `dims`-dimension vectors recorded as embedded by `model_id`.
    pub fn new(dims: usize, model_id: &str) -> Self {
        let mut rng = fastrand::Rng::with_seed(0x05ee_db1b);
        let centroids = (0..TOPICS)
            .map(|_| unit((0..dims).map(|_| gaussian(&mut rng)).collect()))
            .collect();
        SyntheticCorpus {
            dims,
            model_id: model_id.to_string(),
            centroids,
        }
    }

    /// Documents holding `chunks` chunks in all, in a fixed order.
    pub fn documents(&self, chunks: usize) -> impl Iterator<Item = DocumentChange> + '_ {
        let mut rng = fastrand::Rng::with_seed(0x0d0c_5eed);
        let mut made = 0usize;
        let mut d = 0usize;
        std::iter::from_fn(move || {
            if made >= chunks {
                return None;
            }
            let topic = rng.usize(..TOPICS);
            let count = PER_DOC.min(chunks - made);
            let upserts = (0..count)
                .map(|ci| {
                    let len = 60 + rng.usize(..120);
                    let text: Vec<String> = (0..len).map(|_| draw(&mut rng, topic)).collect();
                    chunk_write(
                        ci as u32,
                        format!("[Doc: synthetic {d} › part {ci}]"),
                        text.join(" "),
                        &self.model_id,
                        self.near(&mut rng, topic, 1.5),
                    )
                })
                .collect();
            let doc = DocumentChange {
                path: format!("synthetic/{:03}/{d}.md", d % 1000),
                collection: String::new(),
                title: format!("synthetic {d}"),
                metadata: json!({"topic": topic}),
                content_hash: format!("{d:x}"),
                chunk_count: count as u32,
                upserts,
                source: None,
            };
            made += count;
            d += 1;
            Some(doc)
        })
    }

    /// `n` queries: text and vector.
    pub fn queries(&self, n: usize) -> Vec<(String, Vec<f32>)> {
        let mut rng = fastrand::Rng::with_seed(0x0917_e5ed);
        (0..n)
            .map(|_| {
                let topic = rng.usize(..TOPICS);
                let text: Vec<String> = (0..6).map(|_| draw(&mut rng, topic)).collect();
                (text.join(" "), self.near(&mut rng, topic, 2.0))
            })
            .collect()
    }

    /// A unit vector near `topic`'s centroid.
    fn near(&self, rng: &mut fastrand::Rng, topic: usize, spread: f32) -> Vec<f32> {
        let scale = spread / (self.dims as f32).sqrt();
        unit(
            self.centroids[topic]
                .iter()
                .map(|x| x + scale * gaussian(rng))
                .collect(),
        )
    }
}

/// A Zipf-like draw: index `VOCAB^u − 1` favours small indices; each topic shifts the ranks.
fn draw(rng: &mut fastrand::Rng, topic: usize) -> String {
    let r = ((VOCAB as f64).powf(rng.f64()) - 1.0) as usize;
    word((r + topic * 97) % VOCAB)
}

/// A pseudo-word for vocabulary entry `i` (distinct for every `i`).
fn word(i: usize) -> String {
    const SYL: [&str; 16] = [
        "ka", "lo", "mi", "ne", "ru", "ta", "shi", "vo", "de", "pa", "zu", "gri", "on", "el",
        "bra", "ti",
    ];
    let mut s = String::new();
    let mut x = i + 16;
    while x > 0 {
        s.push_str(SYL[x % 16]);
        x /= 16;
    }
    s
}

fn unit(v: Vec<f32>) -> Vec<f32> {
    bib_text::vectors::unit(&v)
}

fn gaussian(rng: &mut fastrand::Rng) -> f32 {
    // Box–Muller.
    let u1 = rng.f64().max(1e-12);
    let u2 = rng.f64();
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_deterministic_and_sized() {
        let c = SyntheticCorpus::new(16, "m");
        let a: Vec<DocumentChange> = c.documents(25).collect();
        let b: Vec<DocumentChange> = c.documents(25).collect();
        assert_eq!(a.len(), 3);
        assert_eq!(a.iter().map(|d| d.upserts.len()).sum::<usize>(), 25);
        assert_eq!(a[2].chunk_count, 5);
        assert_eq!(a[1].upserts[3].content, b[1].upserts[3].content);
        assert_eq!(a[1].upserts[3].embedding, b[1].upserts[3].embedding);
        let v = &a[0].upserts[0].embedding;
        assert!((v.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-4);
        assert_eq!(c.queries(4), c.queries(4));
        // Distinct words for distinct entries.
        assert_ne!(word(0), word(1));
        assert_ne!(word(15), word(16 * 16));
    }
}
