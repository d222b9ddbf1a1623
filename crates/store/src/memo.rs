//! What the embedded store remembers between reads, valid for one database version.
//!
//! A version is SQLite's `PRAGMA data_version` (moves when another connection commits) with
//! the store's own write counter; both parts only grow. [`Versioned`] holds a value for one
//! version and never lets a reader of an older version see or discard what a newer one
//! remembered, so a query that began before a write reads the table, not the memo.

use std::collections::HashMap;

use crate::{ChunkId, ChunkRecord, NodeId};

/// A database version: `(PRAGMA data_version, own writes)`.
pub(crate) type Version = (i64, u64);

/// A value remembered for one [`Version`].
#[derive(Default)]
pub(crate) struct Versioned<T> {
    version: Version,
    value: T,
}

impl<T: Default> Versioned<T> {
    /// The value, when it was remembered at `version`.
    pub(crate) fn of(&self, version: Version) -> Option<&T> {
        (self.version == version).then_some(&self.value)
    }

    /// The value to fill at `version`: started over when `version` is newer than the one it
    /// holds; `None` when `version` is older (a query that started before a write must not
    /// throw away what later queries remembered).
    pub(crate) fn fill_at(&mut self, version: Version) -> Option<&mut T> {
        if self.version == version {
            return Some(&mut self.value);
        }
        if version.0 >= self.version.0 && version.1 >= self.version.1 {
            *self = Self {
                version,
                value: T::default(),
            };
            return Some(&mut self.value);
        }
        None
    }

    /// After a write by this store that moved the version from `before` to `after`: the value
    /// remembered at `before`, now labelled `after`, for the writer to correct what it
    /// changed; `None` (and nothing moves) when the memo holds another version.
    pub(crate) fn carry_over(&mut self, before: Version, after: Version) -> Option<&mut T> {
        if self.version != before {
            return None;
        }
        self.version = after;
        Some(&mut self.value)
    }
}

/// Bytes of chunk records remembered at most (a chunk of the wikis is ~1–2 KiB: some 20k
/// chunks); the memo starts over beyond.
const CHUNK_MEMO_BYTES: usize = 32 << 20;

/// Chunk records read by id. An ask fetches its ~30 re-scored candidates by id, one point
/// query each through a join with `documents` — 8 % of a served ask's CPU on the SciFact
/// knowledge base — and later questions fetch many of the same chunks.
#[derive(Default)]
pub(crate) struct ChunkMemo {
    records: HashMap<ChunkId, ChunkRecord>,
    bytes: usize,
}

impl ChunkMemo {
    pub(crate) fn get(&self, id: ChunkId) -> Option<&ChunkRecord> {
        self.records.get(&id)
    }

    /// Forget the records of the documents `nodes` (rewritten or removed).
    pub(crate) fn forget_nodes(&mut self, nodes: &std::collections::HashSet<NodeId>) {
        let mut freed = 0;
        self.records.retain(|_, r| {
            let keep = !nodes.contains(&r.node_id);
            if !keep {
                freed += record_bytes(r);
            }
            keep
        });
        self.bytes -= freed;
    }

    /// Remember `record` (the memo starts over when it would exceed its budget).
    pub(crate) fn remember(&mut self, record: &ChunkRecord) {
        let size = record_bytes(record);
        if size > CHUNK_MEMO_BYTES / 64 {
            return;
        }
        if self.bytes + size > CHUNK_MEMO_BYTES {
            self.records.clear();
            self.bytes = 0;
        }
        if let Some(old) = self.records.insert(record.id, record.clone()) {
            self.bytes -= record_bytes(&old);
        }
        self.bytes += size;
    }
}

/// The heap bytes a record holds, approximately (its strings and a fixed overhead).
fn record_bytes(r: &ChunkRecord) -> usize {
    const OVERHEAD: usize = 256;
    OVERHEAD
        + r.path.len()
        + r.title.len()
        + r.prefix.len()
        + r.content.len()
        + r.content_hash.len()
        + r.model_id.len()
        + r.collection.len()
        + r.heading_path.iter().map(String::len).sum::<usize>()
        + r.metadata.to_string().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query that started before a write reads nothing from the memo of the newer version
    /// and does not throw it away; a newer version starts it over.
    #[test]
    fn a_memo_is_never_reset_by_an_older_version() {
        let mut memo: Versioned<HashMap<String, u64>> = Versioned::default();
        memo.fill_at((3, 5)).unwrap().insert("zebra".into(), 2);
        assert!(memo.fill_at((3, 4)).is_none());
        assert!(memo.fill_at((2, 9)).is_none());
        assert!(memo.of((3, 4)).is_none());
        assert_eq!(memo.of((3, 5)).unwrap()["zebra"], 2);
        assert!(memo.carry_over((3, 4), (3, 6)).is_none());
        assert_eq!(memo.carry_over((3, 5), (3, 6)).unwrap()["zebra"], 2);
        assert!(memo.of((3, 5)).is_none());
        assert!(memo.fill_at((4, 6)).unwrap().is_empty());
    }

    fn record(id: ChunkId, content: &str) -> ChunkRecord {
        ChunkRecord {
            id,
            node_id: 1,
            path: "a.md".into(),
            title: "A".into(),
            metadata: serde_json::json!({}),
            chunk_index: 0,
            prefix: String::new(),
            heading_path: Vec::new(),
            content: content.into(),
            content_hash: "h".into(),
            tokens_estimate: 1,
            tokens_model: 1,
            span_start: 0,
            span_end: 1,
            model_id: "m".into(),
            collection: "c".into(),
            line_start: 1,
            line_end: 1,
        }
    }

    /// The chunk memo holds at most its budget, whatever is read.
    #[test]
    fn the_chunk_memo_stays_within_its_budget() {
        let mut memo = ChunkMemo::default();
        let text = "x".repeat(100_000);
        for id in 0..2_000 {
            memo.remember(&record(id, &text));
            assert!(memo.bytes <= CHUNK_MEMO_BYTES);
        }
        assert!(memo.get(1_999).is_some());
        // Re-reading a record does not count it twice.
        let before = memo.bytes;
        memo.remember(&record(1_999, &text));
        assert_eq!(memo.bytes, before);
        // A record too large to be worth holding is not held.
        memo.remember(&record(5_000, &"y".repeat(CHUNK_MEMO_BYTES)));
        assert!(memo.get(5_000).is_none());
    }
}
