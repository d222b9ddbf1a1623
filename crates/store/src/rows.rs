//! Small helpers every store implementation uses to turn database rows into records, kept
//! here once so SQLite and PostgreSQL read timestamps, JSON and counts the same way.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::StoreError;

/// Milliseconds since the Unix epoch (0 if the clock is before it), the stores' timestamps.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A stored JSON text; a parse failure is corruption of `what`.
pub fn parse_json(what: &str, s: &str) -> Result<Value, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt {
        what: what.to_string(),
        reason: "not valid JSON".into(),
        source: Some(Box::new(e)),
    })
}

/// A stored integer as a `u32` count or index (0 when out of range).
pub fn to_u32(x: i64) -> u32 {
    u32::try_from(x).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_helpers() {
        assert!(now_ms() > 1_600_000_000_000);
        assert_eq!(to_u32(7), 7);
        assert_eq!(to_u32(-1), 0);
        assert_eq!(to_u32(i64::MAX), 0);
        assert_eq!(parse_json("m", "{\"a\":1}").unwrap()["a"], 1);
        let e = parse_json("document metadata", "{").unwrap_err();
        assert!(e.to_string().contains("document metadata"), "{e}");
    }
}
