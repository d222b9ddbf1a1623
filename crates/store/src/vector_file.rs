//! A bounded file of vectors by (model id, key), outside any knowledge base: the persistent
//! second level of the embedding cache for work that has no store of its own — `bib pack`,
//! which embeds a whole history on every call and would otherwise embed the same messages
//! again on the next turn.
//!
//! One SQLite table, `(model_id, key) → vector`, with a use counter per row. A lookup marks
//! the rows it found as used; a write that takes the file past its capacity evicts the rows
//! used longest ago. So the file never holds more than `capacity` vectors, whatever it is fed,
//! and the vectors of a history that is still being packed are the last to go.
//!
//! The file is a cache: a caller that cannot open or write it only loses the time it saves.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection};

use crate::sqlite::{blob_to_vec, open_creating, sqlite_open_failed, vec_to_blob};
use crate::StoreError;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS vectors (
    model_id TEXT NOT NULL,
    key TEXT NOT NULL,
    vector BLOB NOT NULL,
    used INTEGER NOT NULL,
    PRIMARY KEY (model_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vectors_used ON vectors (used);
";

/// Keys per SQL statement (SQLite's default limit on bound values is 32,766).
const BATCH: usize = 500;

/// A bounded, file-backed map of vectors by (model id, key).
#[derive(Debug)]
pub struct VectorFile {
    conn: Mutex<Connection>,
    capacity: usize,
    path: PathBuf,
}

impl VectorFile {
    /// Open (creating it and its folder if needed) the file at `path`, holding at most
    /// `capacity` vectors.
    pub fn open(path: impl AsRef<Path>, capacity: usize) -> Result<Self, StoreError> {
        let path = path.as_ref();
        Self::init(open_creating(path)?, path.to_path_buf(), capacity)
    }

    /// A private in-memory file (tests).
    pub fn open_in_memory(capacity: usize) -> Result<Self, StoreError> {
        let conn = Connection::open_in_memory()
            .map_err(|e| StoreError::open_failed(":memory:", "SQLite cannot open it", e))?;
        Self::init(conn, PathBuf::from(":memory:"), capacity)
    }

    fn init(conn: Connection, path: PathBuf, capacity: usize) -> Result<Self, StoreError> {
        let shown = path.display().to_string();
        let failed = sqlite_open_failed(&shown);
        // Two `bib pack` processes may share the file: wait for the other's write.
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(failed)?;
        conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
            .map_err(failed)?;
        conn.execute_batch(&format!(
            "PRAGMA synchronous=NORMAL; BEGIN IMMEDIATE; {SCHEMA} COMMIT;"
        ))
        .map_err(failed)?;
        Ok(Self {
            conn: Mutex::new(conn),
            capacity,
            path,
        })
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The most vectors the file holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Vectors held.
    pub fn len(&self) -> Result<usize, StoreError> {
        held(&self.conn())
    }

    /// Whether the file holds no vector.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    /// The vectors of `model_id` under `keys` that the file holds, in the order of `keys`;
    /// each found row is marked as used now.
    pub fn get(
        &self,
        model_id: &str,
        keys: &[String],
    ) -> Result<Vec<(String, Vec<f32>)>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(StoreError::sqlite("begin"))?;
        let now = next_use(&tx)?;
        let mut found = std::collections::HashMap::with_capacity(keys.len());
        for part in keys.chunks(BATCH) {
            let marks = vec!["?"; part.len()].join(",");
            let args = || {
                std::iter::once(Value::from(model_id.to_string()))
                    .chain(part.iter().map(|k| Value::from(k.clone())))
            };
            let mut read = tx
                .prepare_cached(&format!(
                    "SELECT key, vector FROM vectors WHERE model_id = ? AND key IN ({marks})"
                ))
                .map_err(StoreError::sqlite("read vectors"))?;
            let rows = read
                .query_map(params_from_iter(args()), |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
                })
                .map_err(StoreError::sqlite("read vectors"))?;
            for row in rows {
                let (k, b) = row.map_err(StoreError::sqlite("read vectors"))?;
                found.insert(k, blob_to_vec(&b)?);
            }
            let mut mark = tx
                .prepare_cached(&format!(
                    "UPDATE vectors SET used = ? WHERE model_id = ? AND key IN ({marks})"
                ))
                .map_err(StoreError::sqlite("mark vectors used"))?;
            mark.execute(params_from_iter(
                std::iter::once(Value::from(now)).chain(args()),
            ))
            .map_err(StoreError::sqlite("mark vectors used"))?;
        }
        tx.commit().map_err(StoreError::sqlite("commit"))?;
        Ok(keys
            .iter()
            .filter_map(|k| found.remove(k).map(|v| (k.clone(), v)))
            .collect())
    }

    /// Remember `items` for `model_id` (replacing what a key held), then evict the vectors
    /// used longest ago beyond the capacity.
    pub fn put(&self, model_id: &str, items: &[(String, Vec<f32>)]) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(StoreError::sqlite("begin"))?;
        let now = next_use(&tx)?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO vectors (model_id, key, vector, used) \
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(StoreError::sqlite("write vectors"))?;
            for (k, v) in items {
                stmt.execute(params![model_id, k, vec_to_blob(v), now])
                    .map_err(StoreError::sqlite("write vectors"))?;
            }
        }
        let excess = held(&tx)?.saturating_sub(self.capacity);
        if excess > 0 {
            tx.execute(
                "DELETE FROM vectors WHERE (model_id, key) IN \
                 (SELECT model_id, key FROM vectors ORDER BY used ASC LIMIT ?1)",
                params![i64::try_from(excess).unwrap_or(i64::MAX)],
            )
            .map_err(StoreError::sqlite("evict vectors"))?;
        }
        tx.commit().map_err(StoreError::sqlite("commit"))?;
        Ok(())
    }
}

/// Vectors held.
fn held(conn: &Connection) -> Result<usize, StoreError> {
    let n: i64 = conn
        .query_row("SELECT COUNT(*) FROM vectors", [], |r| r.get(0))
        .map_err(StoreError::sqlite("count vectors"))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The use counter's next value: one more than any row's.
fn next_use(conn: &Connection) -> Result<i64, StoreError> {
    conn.query_row("SELECT COALESCE(MAX(used), 0) + 1 FROM vectors", [], |r| {
        r.get(0)
    })
    .map_err(StoreError::sqlite("read the use counter"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(k: &str, x: f32) -> (String, Vec<f32>) {
        (k.to_string(), vec![x, -x, 0.5])
    }

    fn keys(ks: &[&str]) -> Vec<String> {
        ks.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn vectors_come_back_by_model_and_key_in_the_order_asked() {
        let f = VectorFile::open_in_memory(10).unwrap();
        f.put("m", &[item("a", 1.0), item("b", 2.0)]).unwrap();
        f.put("other", &[item("a", 9.0)]).unwrap();
        let got = f.get("m", &keys(&["b", "nope", "a"])).unwrap();
        assert_eq!(got, vec![item("b", 2.0), item("a", 1.0)]);
        assert_eq!(
            f.get("other", &keys(&["a", "b"])).unwrap(),
            vec![item("a", 9.0)]
        );
        assert!(f.get("m", &[]).unwrap().is_empty());
        // A key written again holds the new vector, once.
        f.put("m", &[item("a", 3.0)]).unwrap();
        assert_eq!(f.get("m", &keys(&["a"])).unwrap(), vec![item("a", 3.0)]);
        assert_eq!(f.len().unwrap(), 3);
    }

    #[test]
    fn the_file_never_holds_more_than_its_capacity_and_evicts_the_least_recently_used() {
        let f = VectorFile::open_in_memory(3).unwrap();
        f.put("m", &[item("a", 1.0), item("b", 2.0), item("c", 3.0)])
            .unwrap();
        // `a` is read, so `b` and `c` are now the ones used longest ago.
        assert_eq!(f.get("m", &keys(&["a"])).unwrap().len(), 1);
        f.put("m", &[item("d", 4.0)]).unwrap();
        assert_eq!(f.len().unwrap(), 3);
        let left: Vec<String> = f
            .get("m", &keys(&["a", "b", "c", "d"]))
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(left.len(), 3);
        assert!(left.contains(&"a".to_string()) && left.contains(&"d".to_string()));
        // A write larger than the capacity still leaves at most the capacity.
        let many: Vec<_> = (0..10).map(|i| item(&format!("k{i}"), i as f32)).collect();
        f.put("m", &many).unwrap();
        assert_eq!(f.len().unwrap(), 3);
    }

    #[test]
    fn more_keys_than_one_statement_binds_are_read_and_marked() {
        let f = VectorFile::open_in_memory(5_000).unwrap();
        let many: Vec<_> = (0..1_200)
            .map(|i| item(&format!("k{i}"), i as f32))
            .collect();
        f.put("m", &many).unwrap();
        let ks: Vec<String> = many.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(f.get("m", &ks).unwrap(), many);
    }

    #[test]
    fn a_second_process_sees_what_the_first_wrote_and_a_bad_path_is_an_open_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/vectors.sqlite");
        VectorFile::open(&path, 10)
            .unwrap()
            .put("m", &[item("a", 1.0)])
            .unwrap();
        let again = VectorFile::open(&path, 10).unwrap();
        assert_eq!(again.get("m", &keys(&["a"])).unwrap(), vec![item("a", 1.0)]);
        assert_eq!(again.path(), path);
        // A file that is not SQLite is an error naming it, not a panic.
        let junk = dir.path().join("junk.sqlite");
        std::fs::write(&junk, b"this is not a database, not even close").unwrap();
        let err = VectorFile::open(&junk, 10).unwrap_err().to_string();
        assert!(err.contains("junk.sqlite"), "{err}");
    }
}
