//! Helpers for tests that need a PostgreSQL server (this crate's and the CLI's).
//!
//! Tests read the server URL from `BIB_TEST_PG_URL`. When it is unset they fail with a message
//! saying how to start one, unless `BIB_SKIP_PG_TESTS=1` says to skip them on purpose.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{PgOptions, PgStore, VectorSearch};

/// Environment variable holding the test server URL.
pub const URL_VAR: &str = "BIB_TEST_PG_URL";
/// Set to `1` to skip PostgreSQL tests instead of failing them.
pub const SKIP_VAR: &str = "BIB_SKIP_PG_TESTS";

/// The test server URL; `None` when the tests are skipped on purpose. Panics with
/// instructions when neither variable is set.
pub fn test_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(u) if !u.trim().is_empty() => Some(u),
        _ if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") => {
            eprintln!("{SKIP_VAR}=1: skipping a PostgreSQL test");
            None
        }
        _ => panic!(
            "PostgreSQL tests need a server: run `scripts/postgres-dev.sh start` (as root) and \
             export {URL_VAR}=$(scripts/postgres-dev.sh url), or set {SKIP_VAR}=1 to skip them"
        ),
    }
}

/// A schema name no other test uses (process id, counter, clock).
pub fn fresh_schema(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "bib_t_{tag}_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A fresh, empty store in its own schema, dropped (schema and all) with the store.
pub fn fresh_store(url: &str, tag: &str, v: VectorSearch) -> PgStore {
    let mut o = PgOptions::parse(url)
        .and_then(|o| o.with_schema(&fresh_schema(tag)))
        .unwrap_or_else(|e| panic!("{URL_VAR}: {e}"))
        .with_vector_search(v);
    o.drop_schema_on_drop = true;
    PgStore::connect_with(o).unwrap_or_else(|e| panic!("connecting to {URL_VAR}: {e}"))
}

/// `url` with one more query parameter.
pub fn with_param(url: &str, key: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{key}={value}")
}

/// Run one SQL statement on a plain connection to `url` (tests that tamper with a store).
pub fn admin_exec(url: &str, sql: &str) -> Result<(), bib_store::StoreError> {
    use sqlx::{Connection, Executor};
    let opts = PgOptions::parse(url)?;
    let err = |e: sqlx::Error| bib_store::StoreError::Backend {
        backend: "postgres",
        op: "admin",
        source: Box::new(e),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| bib_store::StoreError::Invalid(e.to_string()))?;
    let sql = sql.to_string();
    rt.block_on(async move {
        let mut c = sqlx::PgConnection::connect(&opts.url).await.map_err(err)?;
        c.execute(sqlx::raw_sql(sqlx::AssertSqlSafe(sql)))
            .await
            .map_err(err)?;
        c.close().await.map_err(err)
    })
}
