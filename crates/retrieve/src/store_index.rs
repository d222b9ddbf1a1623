//! [`ChunkIndex`] over a persistent [`bib_store::Store`]: a field-by-field adapter (the store's
//! filters and BM25 have the same semantics as this crate's).

use bib_store::Store;

use crate::error::RetrieveError;
use crate::filter::Filter;
use crate::index::{ChunkId, ChunkIndex, ChunkRecord, Hit};

/// A store seen as a [`ChunkIndex`].
pub struct StoreIndex<'a> {
    store: &'a dyn Store,
}

impl std::fmt::Debug for StoreIndex<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreIndex")
            .field("location", &self.store.location())
            .finish()
    }
}

impl<'a> StoreIndex<'a> {
    pub fn new(store: &'a dyn Store) -> Self {
        Self { store }
    }
}

impl ChunkIndex for StoreIndex<'_> {
    fn bm25_top(
        &self,
        query: &str,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, RetrieveError> {
        self.store
            .bm25_search(query, limit, filter)
            .map_err(RetrieveError::from)
    }

    fn vector_top(
        &self,
        query_vec: &[f32],
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, RetrieveError> {
        self.store
            .vector_search(query_vec, limit, filter)
            .map_err(RetrieveError::from)
    }

    fn chunks(&self, ids: &[ChunkId]) -> Result<Vec<ChunkRecord>, RetrieveError> {
        Ok(self.store.get_chunks(ids)?)
    }

    fn vectors(&self, ids: &[ChunkId]) -> Result<Vec<(ChunkId, Vec<f32>)>, RetrieveError> {
        self.store.get_vectors(ids).map_err(RetrieveError::from)
    }

    fn cosines(&self, query_vec: &[f32], ids: &[ChunkId]) -> Result<Vec<Hit>, RetrieveError> {
        Ok(self
            .store
            .vector_scores(query_vec, ids)?
            .into_iter()
            .map(|(id, score)| Hit { id, score })
            .collect())
    }

    fn term_config(&self) -> Result<bib_text::terms::TermConfig, RetrieveError> {
        self.store.term_config().map_err(RetrieveError::from)
    }

    fn doc_freqs(&self, terms: &[String]) -> Result<(usize, Vec<usize>), RetrieveError> {
        let (n, dfs) = self.store.doc_freqs(terms).map_err(RetrieveError::from)?;
        Ok((n as usize, dfs.into_iter().map(|d| d as usize).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::tests::bag_of_words_vector;
    use crate::index::MemoryIndex;
    use bib_store::{ChunkWrite, DocumentChange, SqliteStore};
    use serde_json::json;

    /// The same corpus in the store and in a MemoryIndex must rank identically.
    #[test]
    fn store_adapter_agrees_with_memory_index() {
        let store = SqliteStore::open_in_memory().unwrap();
        let mut mem = MemoryIndex::new();
        let docs = [
            (
                "guides/push.md",
                json!({"app": "cli"}),
                vec![
                    "Push a package with nuget push. The default timeout is 300 seconds.",
                    "Use -Timeout to change it.",
                ],
            ),
            (
                "guides/restore.md",
                json!({"app": "core", "tags": ["restore"]}),
                vec![
                    "Restore downloads packages from the configured feeds.",
                    "The push command is unrelated to restore.",
                ],
            ),
            (
                "api/keys.md",
                json!({"app": "core"}),
                vec!["API keys authorise a push to nuget.org."],
            ),
        ];
        for (path, meta, chunks) in &docs {
            let upserts: Vec<ChunkWrite> = chunks
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let prefix = format!("[Doc: {path}]");
                    let text = format!("{prefix}\n{c}");
                    ChunkWrite {
                        chunk_index: i as u32,
                        prefix,
                        heading_path: vec![],
                        content: c.to_string(),
                        content_hash: format!("{path}{i}"),
                        tokens_estimate: 0,
                        tokens_model: 0,
                        span_start: 0,
                        span_end: 0,
                        line_start: 0,
                        line_end: 0,
                        model_id: "fake-bow".into(),
                        embedding: bag_of_words_vector(&text),
                    }
                })
                .collect();
            store
                .apply_document(&DocumentChange {
                    path: path.to_string(),
                    collection: String::new(),
                    title: path.to_string(),
                    metadata: meta.clone(),
                    content_hash: path.to_string(),
                    chunk_count: chunks.len() as u32,
                    upserts,
                    source: None,
                })
                .unwrap();
        }
        let six = StoreIndex::new(&store);
        // Mirror the stored chunks into memory with the same ids.
        let all_ids: Vec<i64> = (1..100).collect();
        for c in six.chunks(&all_ids).unwrap() {
            let v = bag_of_words_vector(&c.text());
            mem.add(c, Some(v)).unwrap();
        }
        assert_eq!(mem.len(), 5);
        for (q, f) in [
            ("push timeout", Filter::default()),
            ("push", Filter::parse(&["app=core"]).unwrap()),
            ("restore feeds", Filter::parse(&["path=guides/"]).unwrap()),
            ("push", Filter::parse(&["tags=restore"]).unwrap()),
        ] {
            let a = six.bm25_top(q, 3, &f).unwrap();
            let b = mem.bm25_top(q, 3, &f).unwrap();
            assert_eq!(
                a.iter().map(|h| h.id).collect::<Vec<_>>(),
                b.iter().map(|h| h.id).collect::<Vec<_>>(),
                "{q}"
            );
            for (x, y) in a.iter().zip(&b) {
                assert!((x.score - y.score).abs() < 1e-9, "{q}: {x:?} vs {y:?}");
            }
            let qv = bag_of_words_vector(q);
            let a = six.vector_top(&qv, 3, &f).unwrap();
            let b = mem.vector_top(&qv, 3, &f).unwrap();
            assert_eq!(
                a.iter().map(|h| h.id).collect::<Vec<_>>(),
                b.iter().map(|h| h.id).collect::<Vec<_>>(),
                "{q}"
            );
        }
        // The store's record comes through whole: prefix and body apart, indexed text joined.
        let c = six.chunks(&[1]).unwrap();
        assert_eq!(c[0].prefix, "[Doc: guides/push.md]");
        assert!(c[0]
            .text()
            .starts_with("[Doc: guides/push.md]\nPush a package"));
    }
}
