//! [`PgStore`]: the [`Store`] trait over a sqlx connection pool.
//!
//! The trait is synchronous, so the store owns a small current-thread tokio runtime and runs
//! each call to completion on it ([`PgStore::block`]). Called from inside another tokio
//! runtime (an async server), the call moves to a scoped helper thread instead of panicking.

use bib_store::rows::{now_ms, parse_json, to_u32};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bib_store::{
    could_be_chunk_hash, qualified_name, ApplyOutcome, AuditReport, ChunkId, ChunkRecord,
    ChunkState, DocRecord, DocumentChange, Filter, Hit, LexicalStats, NodeId, QueryLogEntry,
    QueryLogRetention, RunLog, RunRow, RunStatus, Store, StoreError, VectorsByHash,
};
use bib_text::bm25::Bm25Params;
use bib_text::terms::{term_counts_with, terms_with, TermConfig};
use pgvector::Vector;
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection, Row};

use crate::memo::{changes_of, Bm25Key, Bm25Memo};
use crate::schema::{self, HNSW_MAX_DIMS};
use crate::url::{PgOptions, VectorSearch};

const BACKEND: &str = "postgres";
/// With a filter matching at most this many documents, HNSW mode scans their chunks exactly
/// (cheap through the `(node_id, chunk_index)` index, and never short of results).
const EXACT_FILTER_MAX_DOCS: usize = 1000;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

fn pg(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| StoreError::Backend {
        backend: BACKEND,
        op,
        source: Box::new(e),
    }
}

/// BM25 over the postings of the query's distinct terms, best `limit` first, through the
/// schema's `bib_bm25` function ([`crate::schema`], migration 6: the formula, its history and
/// why it is a function), called by `bib_bm25_since` (migration 7), which answers with one row
/// of `NULL`s instead when `meta.changes` still holds `$1`, the count at which this process
/// remembered its answer ([`crate::memo`]); else each row carries the count. `$7` is the
/// documents a filter allows, `NULL` for all.
const BM25_SQL: &str =
    "SELECT chunk_id, score, changes FROM bib_bm25_since($1, $2, $3, $4, $5, $6, $7)";

/// The last statement of every transaction that changes what BM25 reads: it counts the
/// transaction in `meta.changes`, so every process's remembered answers stop holding when it
/// commits. Last, so the row is locked only while the transaction commits (two writers wait
/// for each other only there, and never hold it while waiting for anything else).
const COUNT_CHANGE: &str = "INSERT INTO meta (key, value) VALUES ('changes', '1') \
                            ON CONFLICT (key) DO UPDATE SET value = (meta.value::bigint + 1)::text";

/// Count the transaction of `tx` in `meta.changes` ([`COUNT_CHANGE`]): its last statement.
async fn count_change(tx: &mut PgConnection) -> Result<(), StoreError> {
    sqlx::query(COUNT_CHANGE)
        .execute(tx)
        .await
        .map_err(pg("count the change"))?;
    Ok(())
}

/// `"name"` with inner quotes doubled.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Memory (KiB) to build an HNSW index over `rows` vectors of `dims` floats in one pass:
/// pgvector keeps each element's vector and its neighbour lists (~600 bytes at m = 16) in
/// `maintenance_work_mem`. Capped at 4 GiB, which holds 1.5M vectors of 512 floats.
fn hnsw_build_memory_kib(rows: i64, dims: i32) -> i64 {
    const CAP_KIB: i64 = 4 * 1024 * 1024;
    let per_row = 4 * i64::from(dims.max(0)) + 640;
    (rows.max(0).saturating_mul(per_row) / 1024).min(CAP_KIB)
}

fn get<'r, T>(row: &'r PgRow, idx: usize, op: &'static str) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get::<T, _>(idx).map_err(pg(op))
}

/// The shared checks of every store, plus pgvector's limit on dimensions.
fn validate(change: &DocumentChange) -> Result<(), StoreError> {
    change.validate()?;
    for c in &change.upserts {
        if c.embedding.len() > usize::from(u16::MAX) {
            return Err(StoreError::Invalid(format!(
                "{}: chunk {} has {} dimensions; pgvector stores at most 16000",
                change.path,
                c.chunk_index,
                c.embedding.len()
            )));
        }
    }
    Ok(())
}

/// The PostgreSQL + pgvector store. Share it behind an `Arc`; calls may come from any thread.
pub struct PgStore {
    rt: Option<tokio::runtime::Runtime>,
    pool: PgPool,
    opts: PgOptions,
    location: String,
    /// Dimensions that already have their partial HNSW index.
    hnsw_dims: Mutex<HashSet<i32>>,
    /// A bulk load is under way ([`Store::set_bulk_writes`]): writes commit without waiting
    /// for the WAL flush, and missing HNSW indexes wait for [`Store::optimize`].
    bulk: AtomicBool,
    /// Dimensions written during a bulk load whose HNSW index [`Store::optimize`] builds.
    hnsw_pending: Mutex<HashSet<i32>>,
    /// Query-log bounds applied by every `log_query`.
    retention: Mutex<QueryLogRetention>,
    /// The `terms` row BM25 last analysed a query with, and its parsed term function: a
    /// query sends the row back and is answered only while it still holds (see
    /// [`BM25_SQL`]), so the common case needs no second round trip.
    terms_seen: Mutex<Option<(Option<String>, TermConfig)>>,
    /// BM25 answers remembered for the current `meta.changes` count.
    bm25_memo: Mutex<Bm25Memo>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("location", &self.location)
            .field("vector_search", &self.opts.vector_search)
            .finish()
    }
}

fn run_on<F>(rt: &tokio::runtime::Runtime, f: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        // Blocking inside someone else's runtime would panic; drive ours from a helper thread.
        std::thread::scope(|s| match s.spawn(|| rt.block_on(f)).join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    } else {
        rt.block_on(f)
    }
}

impl PgStore {
    /// Connect to the store named by a `postgres://` URL (see [`crate::url`] for the extra
    /// parameters), creating its schema and applying migrations as needed.
    pub fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(PgOptions::parse(url)?)
    }

    /// Connect with explicit options.
    pub fn connect_with(opts: PgOptions) -> Result<Self, StoreError> {
        let location = opts.location();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                StoreError::open_failed(location.clone(), "cannot start the async runtime", e)
            })?;
        let (pool, dims) = run_on(&rt, Self::open_async(&opts, &location))?;
        Ok(Self {
            rt: Some(rt),
            pool,
            opts,
            location,
            hnsw_dims: Mutex::new(dims),
            bulk: AtomicBool::new(false),
            hnsw_pending: Mutex::new(HashSet::new()),
            retention: Mutex::new(QueryLogRetention::default()),
            terms_seen: Mutex::new(None),
            bm25_memo: Mutex::new(Bm25Memo::default()),
        })
    }

    async fn open_async(
        opts: &PgOptions,
        location: &str,
    ) -> Result<(PgPool, HashSet<i32>), StoreError> {
        let failed = |reason: &str, e: sqlx::Error| StoreError::open_failed(location, reason, e);
        let base = PgConnectOptions::from_str(&opts.url)
            .map_err(|e| failed("bad URL", e))?
            .application_name("bib");
        let mut conn =
            match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&base)).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(failed("cannot connect", e)),
                Err(_) => {
                    return Err(StoreError::open(
                        location,
                        format!("no answer within {}s", CONNECT_TIMEOUT.as_secs()),
                    ))
                }
            };
        let ext_schema = Self::ensure_vector_extension(&mut conn)
            .await
            .map_err(|(reason, e)| failed(reason, e))?;
        let search_path = format!(
            "{}, {}",
            quote_ident(&opts.schema),
            quote_ident(&ext_schema)
        );
        Self::migrate(&mut conn, opts, &search_path, location).await?;
        let dims = Self::existing_hnsw_dims(&mut conn, &opts.schema).await?;
        let _ = conn.close().await;

        let mut session = format!("SET search_path TO {search_path};");
        if let VectorSearch::Hnsw { ef_search } = opts.vector_search {
            // Iterative scans (pgvector 0.8) keep filtered HNSW queries from coming back short.
            session.push_str(&format!(
                " SET hnsw.ef_search = {ef_search}; SET hnsw.iterative_scan = strict_order;"
            ));
        }
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_connections)
            .acquire_timeout(Duration::from_secs(60))
            .after_connect(move |conn, _meta| {
                let session = session.clone();
                Box::pin(async move {
                    conn.execute(sqlx::raw_sql(AssertSqlSafe(session))).await?;
                    Ok(())
                })
            })
            .connect_with(base)
            .await
            .map_err(|e| failed("cannot open the connection pool", e))?;
        Ok((pool, dims))
    }

    /// The schema holding the `vector` extension, creating the extension when allowed. An
    /// error says what failed, with the database's error.
    async fn ensure_vector_extension(
        conn: &mut PgConnection,
    ) -> Result<String, (&'static str, sqlx::Error)> {
        const FIND: &str = "SELECT n.nspname::text FROM pg_extension e \
             JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'";
        let found: Option<String> = sqlx::query_scalar(FIND)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| ("cannot inspect extensions", e))?;
        if let Some(s) = found {
            return Ok(s);
        }
        if let Err(e) = sqlx::query("CREATE EXTENSION IF NOT EXISTS vector")
            .execute(&mut *conn)
            .await
        {
            return Err((
                "the pgvector extension is not installed in this database and this role cannot \
                 create it; as a superuser run `CREATE EXTENSION vector;` in it \
                 (scripts/postgres-dev.sh sets up a server that has it)",
                e,
            ));
        }
        sqlx::query_scalar(FIND)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| ("pgvector extension missing after CREATE EXTENSION", e))
    }

    async fn migrate(
        conn: &mut PgConnection,
        opts: &PgOptions,
        search_path: &str,
        location: &str,
    ) -> Result<(), StoreError> {
        let e = pg("migrate");
        let mut tx = conn.begin().await.map_err(pg("migrate"))?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('bib-migrate:' || $1))")
            .bind(&opts.schema)
            .execute(&mut *tx)
            .await
            .map_err(pg("migrate"))?;
        let setup = format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; SET LOCAL search_path TO {search_path}; \
             CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text NOT NULL);",
            schema = quote_ident(&opts.schema)
        );
        tx.execute(sqlx::raw_sql(AssertSqlSafe(setup)))
            .await
            .map_err(|err| {
                let reason = format!("cannot create schema {}", opts.schema);
                StoreError::open_failed(location, reason, err)
            })?;
        let found: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'schema_version'")
                .fetch_optional(&mut *tx)
                .await
                .map_err(pg("migrate"))?;
        let found = match found {
            None => 0,
            Some(v) => v.parse::<i64>().unwrap_or(-1),
        };
        let expected = schema::current_version();
        if found < 0 || found > expected {
            return Err(StoreError::Schema {
                path: location.to_string(),
                found,
                expected,
            });
        }
        for m in &schema::MIGRATIONS[found as usize..] {
            tx.execute(sqlx::raw_sql(*m)).await.map_err(pg("migrate"))?;
        }
        if (1..2).contains(&found) {
            // Documents from before collections join the collection of the newest run's
            // directory (the same rule as the SQLite store).
            let last: Option<String> = sqlx::query_scalar(
                "SELECT record FROM runs WHERE record LIKE '%\"root\"%' ORDER BY id DESC LIMIT 1",
            )
            .fetch_optional(&mut *tx)
            .await
            .map_err(pg("migrate"))?;
            let record = last.and_then(|r| serde_json::from_str::<Value>(&r).ok());
            sqlx::query("UPDATE documents SET collection = $1")
                .bind(bib_store::legacy_collection(record.as_ref()))
                .execute(&mut *tx)
                .await
                .map_err(pg("migrate"))?;
        }
        // A new schema gets this build's term function; one from before issue 15 was built
        // with the first. Recorded as a row either way, so writers can lock it.
        let terms = if found == 0 {
            TermConfig::default()
        } else {
            TermConfig::V1
        };
        sqlx::query("INSERT INTO meta (key, value) VALUES ('terms', $1) ON CONFLICT DO NOTHING")
            .bind(terms.id())
            .execute(&mut *tx)
            .await
            .map_err(pg("migrate"))?;
        sqlx::query(
            "INSERT INTO meta (key, value) VALUES ('schema_version', $1) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        )
        .bind(expected.to_string())
        .execute(&mut *tx)
        .await
        .map_err(pg("migrate"))?;
        if found < expected {
            // A migration may change what BM25 reads (migration 2 moved documents).
            count_change(&mut tx).await?;
        }
        tx.commit().await.map_err(e)?;
        Ok(())
    }

    async fn existing_hnsw_dims(
        conn: &mut PgConnection,
        schema: &str,
    ) -> Result<HashSet<i32>, StoreError> {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT indexname::text FROM pg_indexes WHERE schemaname = $1 \
             AND tablename = 'chunks' AND indexname LIKE 'chunks_hnsw_%'",
        )
        .bind(schema)
        .fetch_all(&mut *conn)
        .await
        .map_err(pg("list indexes"))?;
        Ok(names
            .iter()
            .filter_map(|n| n.strip_prefix("chunks_hnsw_")?.parse().ok())
            .collect())
    }

    /// Run a future to completion on the store's runtime.
    fn block<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let rt = self
            .rt
            .as_ref()
            .expect("runtime lives as long as the store");
        run_on(rt, f)
    }

    /// The options this store was opened with.
    pub fn options(&self) -> &PgOptions {
        &self.opts
    }

    /// The same store answering vector queries another way (shares nothing but the URL).
    pub fn reopen_with(&self, v: VectorSearch) -> Result<Self, StoreError> {
        let mut o = self.opts.clone().with_vector_search(v);
        o.drop_schema_on_drop = false;
        Self::connect_with(o)
    }

    /// Insert a run row as it is (used by `bib migrate` to keep the audit history).
    pub fn import_run(&self, row: &RunRow) -> Result<i64, StoreError> {
        self.block(async {
            sqlx::query_scalar::<_, i64>(
                "INSERT INTO runs (started_at_ms, finished_at_ms, status, record) \
                 VALUES ($1, $2, $3, $4) RETURNING id",
            )
            .bind(row.started_at_ms)
            .bind(row.finished_at_ms)
            .bind(row.status.as_str())
            .bind(row.record.to_string())
            .fetch_one(&self.pool)
            .await
            .map_err(pg("import run"))
        })
    }

    fn ensure_hnsw_index(&self, dims: i32) -> Result<(), StoreError> {
        if !(1..=HNSW_MAX_DIMS).contains(&dims) {
            return Ok(());
        }
        if self
            .hnsw_dims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&dims)
        {
            return Ok(());
        }
        let res = self.block(async {
            let mut conn = self.pool.acquire().await?;
            // The graph is built in memory when it fits in `maintenance_work_mem`, and many
            // times slower on disk once it does not (1M vectors of 512 floats need ~2.5 GB),
            // so this session asks for what the rows need, never less than the server's own.
            let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM chunks WHERE dims = $1")
                .bind(dims)
                .fetch_one(&mut *conn)
                .await?;
            let server_kib: i64 = sqlx::query_scalar(
                "SELECT setting::bigint FROM pg_settings WHERE name = 'maintenance_work_mem'",
            )
            .fetch_one(&mut *conn)
            .await?;
            let kib = hnsw_build_memory_kib(rows, dims).max(server_kib);
            sqlx::query(AssertSqlSafe(format!(
                "SET maintenance_work_mem = '{kib}kB'"
            )))
            .execute(&mut *conn)
            .await?;
            let built = sqlx::query(AssertSqlSafe(schema::hnsw_index_sql(dims)))
                .execute(&mut *conn)
                .await;
            sqlx::query("RESET maintenance_work_mem")
                .execute(&mut *conn)
                .await?;
            built
        });
        match res {
            Ok(_) => {}
            // Two writers creating the same index at once: one wins, which is all we need.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23505") => {}
            Err(e) => return Err(pg("create hnsw index")(e)),
        }
        self.hnsw_dims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(dims);
        Ok(())
    }

    /// PostgreSQL's plan for an unfiltered vector query of `dims` dimensions in this store's
    /// mode (`EXPLAIN` text), to check which index a query can use.
    ///
    /// Sequential scans are disabled for the one explained statement: on a small table the
    /// planner rightly prefers scanning and sorting a few thousand rows (an exact answer at
    /// lower cost), and whether it does depends on when autovacuum last analysed the table.
    /// What the plan must show is that the query matches the index expression, so that it is
    /// used once the table grows.
    pub fn vector_plan(&self, dims: i32) -> Result<String, StoreError> {
        let q = Vector::from(vec![1.0_f32; dims.max(1) as usize]);
        let sql = match self.opts.vector_search {
            VectorSearch::Hnsw { .. } if dims <= HNSW_MAX_DIMS => format!(
                "EXPLAIN SELECT id FROM chunks WHERE dims = {dims} \
                 ORDER BY embedding::vector({dims}) <=> $1::vector({dims}) LIMIT 10"
            ),
            _ => "EXPLAIN SELECT id FROM chunks WHERE dims = $2 ORDER BY embedding <=> $1, id \
                  LIMIT 10"
                .to_string(),
        };
        self.block(async {
            let mut tx = self.pool.begin().await.map_err(pg("explain"))?;
            sqlx::query("SET LOCAL enable_seqscan = off")
                .execute(&mut *tx)
                .await
                .map_err(pg("explain"))?;
            let mut query = sqlx::query_scalar::<_, String>(AssertSqlSafe(sql.clone())).bind(&q);
            if sql.contains("$2") {
                query = query.bind(dims);
            }
            let lines = query.fetch_all(&mut *tx).await.map_err(pg("explain"))?;
            tx.rollback().await.map_err(pg("explain"))?;
            Ok(lines.join("\n"))
        })
    }

    /// Node ids passing `filter`, or `None` when the filter is empty.
    async fn allowed_nodes(&self, filter: &Filter) -> Result<Option<Vec<NodeId>>, StoreError> {
        if filter.is_empty() {
            return Ok(None);
        }
        let prefix = filter.path_prefix.clone().unwrap_or_default();
        let rows = sqlx::query(
            "SELECT node_id, path, metadata FROM documents WHERE starts_with(path, $1) \
             AND (cardinality($2::text[]) = 0 OR collection = ANY($2))",
        )
        .bind(prefix)
        .bind(&filter.collections)
        .fetch_all(&self.pool)
        .await
        .map_err(pg("filter"))?;
        let mut out = Vec::new();
        for r in &rows {
            let id: i64 = get(r, 0, "filter")?;
            let path: String = get(r, 1, "filter")?;
            let meta = if filter.fields.is_empty() {
                Value::Null
            } else {
                parse_json("document metadata", &get::<String>(r, 2, "filter")?)?
            };
            if filter.matches(&path, &meta) {
                out.push(id);
            }
        }
        out.sort_unstable();
        Ok(Some(out))
    }

    /// Documents whose row matches `filter` (an SQL condition on `documents d`, `$1` bound to
    /// `path`), ordered by path.
    async fn select_documents(
        &self,
        filter: &str,
        path: Option<&str>,
    ) -> Result<Vec<DocRecord>, StoreError> {
        // COLLATE "C": byte order, the order SQLite gives, whatever the database locale.
        let sql = format!(
            "SELECT node_id, qualified_name, path, title, metadata, content_hash, \
             chunk_count, collection, EXISTS (SELECT 1 FROM doc_sources s \
             WHERE s.node_id = d.node_id AND s.content_hash = d.content_hash) \
             FROM documents d WHERE {filter} ORDER BY path COLLATE \"C\""
        );
        // `filter` is one of this file's constant conditions; the path is bound.
        let mut q = sqlx::query(AssertSqlSafe(sql));
        if let Some(p) = path {
            q = q.bind(p);
        }
        let rows = q.fetch_all(&self.pool).await.map_err(pg("documents"))?;
        rows.iter().map(doc_from_row).collect()
    }

    /// Chunk states of the documents matching `filter` (an SQL condition on `documents d`,
    /// `$1` bound to `path`), ordered by (path, chunk_index).
    async fn select_chunk_states(
        &self,
        filter: &str,
        path: Option<&str>,
    ) -> Result<Vec<ChunkState>, StoreError> {
        let sql = format!(
            "SELECT d.path, c.node_id, c.chunk_index, c.content_hash, c.model_id, \
             c.line_start, c.line_end FROM chunks c JOIN documents d ON d.node_id = c.node_id \
             WHERE {filter} ORDER BY d.path COLLATE \"C\", c.chunk_index"
        );
        // `filter` is one of this file's constant conditions; the path is bound.
        let mut q = sqlx::query(AssertSqlSafe(sql));
        if let Some(p) = path {
            q = q.bind(p);
        }
        let op = "chunk states";
        let rows = q.fetch_all(&self.pool).await.map_err(pg(op))?;
        rows.iter()
            .map(|r| {
                Ok(ChunkState {
                    path: get(r, 0, op)?,
                    node_id: get(r, 1, op)?,
                    chunk_index: to_u32(get(r, 2, op)?),
                    content_hash: get(r, 3, op)?,
                    model_id: get(r, 4, op)?,
                    line_start: to_u32(get(r, 5, op)?),
                    line_end: to_u32(get(r, 6, op)?),
                })
            })
            .collect()
    }

    /// Scored ids as hits, without those whose chunk is gone (the search and a concurrent
    /// write may interleave on the pool).
    async fn hits_from(&self, scored: Vec<(ChunkId, f64)>) -> Result<Vec<Hit>, StoreError> {
        if scored.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = scored.iter().map(|(id, _)| *id).collect();
        let rows = sqlx::query("SELECT id FROM chunks WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("hits"))?;
        let mut present = std::collections::HashSet::with_capacity(rows.len());
        for r in &rows {
            let id: i64 = get(r, 0, "hits")?;
            present.insert(id);
        }
        Ok(scored
            .into_iter()
            .filter(|(id, _)| present.contains(id))
            .map(|(id, score)| Hit { id, score })
            .collect())
    }

    /// The recorded term function ([`TermConfig::V1`] when none is).
    fn parse_terms(&self, recorded: Option<String>) -> Result<TermConfig, StoreError> {
        match recorded {
            None => Ok(TermConfig::V1),
            Some(s) => TermConfig::parse(&s).map_err(|source| StoreError::TermFunction {
                path: self.location.clone(),
                source,
            }),
        }
    }

    /// The recorded term function (`meta.terms`, absent in stores from before it was
    /// recorded) and its parsed form, remembered for [`Store::bm25_search`].
    async fn read_terms(&self) -> Result<(Option<String>, TermConfig), StoreError> {
        let recorded: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'terms'")
                .fetch_optional(&self.pool)
                .await
                .map_err(pg("term function"))?;
        let terms = self.parse_terms(recorded.clone())?;
        *self.terms_seen.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((recorded.clone(), terms));
        Ok((recorded, terms))
    }

    /// One BM25 call ([`BM25_SQL`]): the best `key.limit` chunks for `key.terms`, or none
    /// when `meta.terms` no longer holds `key.term_function`. The answer remembered for `key`
    /// while no transaction has written since; else the statement's, remembered under the
    /// `meta.changes` count it was computed at.
    async fn bm25_answer(&self, key: Bm25Key) -> Result<Vec<Hit>, StoreError> {
        if key.terms.is_empty() {
            return Ok(Vec::new());
        }
        let seen = self
            .bm25_memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remembered(&key);
        let params = Bm25Params::default();
        // Scored where the postings are: one statement (one snapshot, so the statistics, the
        // postings and the count agree) that ships back only the best `limit` chunks.
        let rows = sqlx::query(BM25_SQL)
            .bind(seen.as_ref().map(|(at, _)| at.to_string()))
            .bind(&key.terms)
            .bind(params.k1)
            .bind(params.b)
            .bind(key.limit)
            .bind(&key.term_function)
            .bind(&key.allowed)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("bm25"))?;
        let Some(first) = rows.first() else {
            return Ok(Vec::new());
        };
        if get::<Option<i64>>(first, 0, "bm25")?.is_none() {
            // Nothing written since the answer was remembered.
            return Ok(seen.map(|(_, hits)| hits).unwrap_or_default());
        }
        // Each posting's chunk exists in the statement's snapshot (a foreign key that
        // cascades), so the hits need no second look at `chunks`.
        let hits = rows
            .iter()
            .map(|r| {
                Ok(Hit {
                    id: get::<i64>(r, 0, "bm25")?,
                    score: get::<f64>(r, 1, "bm25")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        if let Some(at) = changes_of(get::<Option<String>>(first, 2, "bm25")?.as_deref()) {
            self.bm25_memo
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remember(at, key, &hits);
        }
        Ok(hits)
    }

    /// Forget the remembered BM25 answers, so the next search of each question runs the
    /// statement (what `bib bench scale` times as PostgreSQL's own cost).
    pub fn forget_remembered(&self) {
        self.bm25_memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Rebuild every posting and chunk length with `terms`, in one transaction that holds the
    /// `terms` row (writers wait).
    async fn reindex_async(&self, terms: &TermConfig) -> Result<u64, StoreError> {
        let e = pg("reindex");
        let mut tx = self.pool.begin().await.map_err(pg("begin"))?;
        let recorded: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'terms' FOR UPDATE")
                .fetch_optional(&mut *tx)
                .await
                .map_err(pg("reindex"))?;
        if self.parse_terms(recorded).ok().as_ref() == Some(terms) {
            tx.commit().await.map_err(pg("commit"))?;
            return Ok(0);
        }
        let rows = sqlx::query("SELECT id, node_id, prefix, content FROM chunks ORDER BY id")
            .fetch_all(&mut *tx)
            .await
            .map_err(pg("reindex"))?;
        sqlx::query("DELETE FROM postings")
            .execute(&mut *tx)
            .await
            .map_err(pg("reindex"))?;
        let (mut ids, mut lens) = (
            Vec::with_capacity(rows.len()),
            Vec::with_capacity(rows.len()),
        );
        let (mut p_term, mut p_chunk, mut p_node, mut p_tf, mut p_dl) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in &rows {
            let id: i64 = get(r, 0, "reindex")?;
            let node: i64 = get(r, 1, "reindex")?;
            let prefix: String = get(r, 2, "reindex")?;
            let content: String = get(r, 3, "reindex")?;
            let counts = term_counts_with(&bib_store::indexed_text(&prefix, &content), terms);
            let len: u64 = counts.iter().map(|(_, k)| u64::from(*k)).sum();
            let len = i32::try_from(len)
                .map_err(|_| StoreError::Invalid(format!("chunk {id} has too many terms")))?;
            ids.push(id);
            lens.push(len);
            for (t, k) in counts {
                p_term.push(t);
                p_chunk.push(id);
                p_node.push(node);
                p_tf.push(k as i32);
                p_dl.push(len);
            }
        }
        sqlx::query(
            "UPDATE chunks SET lex_len = u.l FROM UNNEST($1::bigint[], $2::integer[]) AS u(i, l) \
             WHERE chunks.id = u.i",
        )
        .bind(&ids)
        .bind(&lens)
        .execute(&mut *tx)
        .await
        .map_err(pg("reindex"))?;
        const BATCH: usize = 50_000;
        for at in (0..p_term.len()).step_by(BATCH) {
            let end = (at + BATCH).min(p_term.len());
            sqlx::query(
                "INSERT INTO postings (term, chunk_id, node_id, tf, dl) SELECT * FROM \
                 UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::integer[], $5::integer[])",
            )
            .bind(&p_term[at..end])
            .bind(&p_chunk[at..end])
            .bind(&p_node[at..end])
            .bind(&p_tf[at..end])
            .bind(&p_dl[at..end])
            .execute(&mut *tx)
            .await
            .map_err(pg("reindex"))?;
        }
        sqlx::query(
            "INSERT INTO meta (key, value) VALUES ('terms', $1) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        )
        .bind(terms.id())
        .execute(&mut *tx)
        .await
        .map_err(pg("reindex"))?;
        count_change(&mut tx).await?;
        tx.commit().await.map_err(e)?;
        Ok(rows.len() as u64)
    }

    /// Write `change` in one transaction: the document row, its source, the upserted chunks
    /// with their postings, then the pruning of chunks at `chunk_count` and above.
    async fn apply_async(&self, change: &DocumentChange) -> Result<ApplyOutcome, StoreError> {
        let meta = serde_json::to_string(&change.metadata)
            .map_err(|err| StoreError::Invalid(format!("metadata of {}: {err}", change.path)))?;
        let mut tx = self.pool.begin().await.map_err(pg("begin"))?;
        if self.bulk.load(Ordering::Relaxed) {
            // A bulk load commits without waiting for its WAL to reach the disk: a crash may
            // lose the last documents written, never corrupt them, and the first ordinary
            // commit after the load (the run's record) flushes all of it.
            sqlx::query("SET LOCAL synchronous_commit = off")
                .execute(&mut *tx)
                .await
                .map_err(pg("bulk commit mode"))?;
        }
        // FOR SHARE: a reindex (`set_term_config`) waits for this write, or this write for it.
        let recorded: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'terms' FOR SHARE")
                .fetch_optional(&mut *tx)
                .await
                .map_err(pg("term function"))?;
        let terms = self.parse_terms(recorded)?;
        let (node_id, document_created) = Self::upsert_document_row(&mut tx, change, &meta).await?;
        let mut out = ApplyOutcome {
            node_id,
            document_created,
            ..ApplyOutcome::default()
        };
        Self::store_document_source_if_given(&mut tx, node_id, change).await?;

        if !change.upserts.is_empty() {
            let columns = ChunkColumns::of_upserts(change, &terms)?;
            Self::upsert_chunks_with_their_postings(&mut tx, node_id, columns, &mut out).await?;
        }

        out.pruned =
            Self::prune_chunks_past_chunk_count(&mut tx, node_id, change.chunk_count).await?;
        count_change(&mut tx).await?;
        tx.commit().await.map_err(pg("commit"))?;
        Ok(out)
    }

    /// Insert the document row at `change.path`, or update the one there. Returns its node id
    /// and whether it was inserted.
    async fn upsert_document_row(
        tx: &mut PgConnection,
        change: &DocumentChange,
        meta: &str,
    ) -> Result<(NodeId, bool), StoreError> {
        let row = sqlx::query(
            "INSERT INTO documents (qualified_name, path, title, metadata, content_hash, \
             chunk_count, updated_at_ms, collection) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (path) DO UPDATE SET title = EXCLUDED.title, \
             metadata = EXCLUDED.metadata, content_hash = EXCLUDED.content_hash, \
             chunk_count = EXCLUDED.chunk_count, updated_at_ms = EXCLUDED.updated_at_ms, \
             collection = EXCLUDED.collection \
             RETURNING node_id, (xmax = 0) AS inserted",
        )
        .bind(qualified_name(&change.path))
        .bind(&change.path)
        .bind(&change.title)
        .bind(meta)
        .bind(&change.content_hash)
        .bind(i64::from(change.chunk_count))
        .bind(now_ms())
        .bind(change.collection_or_default())
        .fetch_one(&mut *tx)
        .await
        .map_err(pg("upsert document"))?;
        let node_id: i64 = get(&row, 0, "upsert document")?;
        Ok((node_id, get(&row, 1, "upsert document")?))
    }

    /// Store `change.source` under `change.content_hash` when the change carries a source.
    async fn store_document_source_if_given(
        tx: &mut PgConnection,
        node_id: NodeId,
        change: &DocumentChange,
    ) -> Result<(), StoreError> {
        if let Some(source) = &change.source {
            sqlx::query(
                "INSERT INTO doc_sources (node_id, content_hash, source) VALUES ($1, $2, $3) \
                 ON CONFLICT (node_id) DO UPDATE SET content_hash = EXCLUDED.content_hash, \
                 source = EXCLUDED.source",
            )
            .bind(node_id)
            .bind(&change.content_hash)
            .bind(source)
            .execute(&mut *tx)
            .await
            .map_err(pg("store document source"))?;
        }
        Ok(())
    }

    /// Upsert the chunks of `columns` in one statement, drop the old postings of the updated
    /// ones and insert the postings of all, counting created and updated chunks in `out`.
    async fn upsert_chunks_with_their_postings(
        tx: &mut PgConnection,
        node_id: NodeId,
        columns: ChunkColumns,
        out: &mut ApplyOutcome,
    ) -> Result<(), StoreError> {
        let rows = Self::upsert_chunk_rows(tx, node_id, &columns).await?;
        let mut id_of: HashMap<i64, i64> = HashMap::with_capacity(columns.chunk_index.len());
        let mut updated_ids = Vec::new();
        for r in &rows {
            let id: i64 = get(r, 0, "upsert chunks")?;
            let ci: i64 = get(r, 1, "upsert chunks")?;
            if get::<bool>(r, 2, "upsert chunks")? {
                out.created += 1;
            } else {
                out.updated += 1;
                updated_ids.push(id);
            }
            id_of.insert(ci, id);
        }
        if !updated_ids.is_empty() {
            sqlx::query("DELETE FROM postings WHERE chunk_id = ANY($1)")
                .bind(&updated_ids)
                .execute(&mut *tx)
                .await
                .map_err(pg("delete postings"))?;
        }
        let postings = PostingColumns::of_upserted_chunks(columns, &id_of)?;
        sqlx::query(
            "INSERT INTO postings (term, chunk_id, node_id, tf, dl) \
             SELECT t, c, $1, f, l FROM UNNEST($2::text[], $3::bigint[], $4::integer[], \
             $5::integer[]) AS u(t, c, f, l)",
        )
        .bind(node_id)
        .bind(&postings.term)
        .bind(&postings.chunk_id)
        .bind(&postings.tf)
        .bind(&postings.dl)
        .execute(&mut *tx)
        .await
        .map_err(pg("insert postings"))?;
        Ok(())
    }

    /// Insert or overwrite every chunk of `columns` at its (document, chunk index) in one
    /// statement. Returns one row per chunk: id, chunk index, whether it was inserted.
    async fn upsert_chunk_rows(
        tx: &mut PgConnection,
        node_id: NodeId,
        columns: &ChunkColumns,
    ) -> Result<Vec<PgRow>, StoreError> {
        sqlx::query(
            "INSERT INTO chunks (node_id, chunk_index, prefix, heading_path, content, \
             content_hash, tokens_estimate, tokens_model, span_start, span_end, model_id, \
             dims, embedding, lex_len, line_start, line_end) \
             SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::text[], $5::text[], \
             $6::text[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], \
             $11::text[], $12::integer[], $13::vector[], $14::integer[], $15::bigint[], \
             $16::bigint[]) \
             ON CONFLICT (node_id, chunk_index) DO UPDATE SET prefix = EXCLUDED.prefix, \
             heading_path = EXCLUDED.heading_path, content = EXCLUDED.content, \
             content_hash = EXCLUDED.content_hash, \
             tokens_estimate = EXCLUDED.tokens_estimate, \
             tokens_model = EXCLUDED.tokens_model, span_start = EXCLUDED.span_start, \
             span_end = EXCLUDED.span_end, model_id = EXCLUDED.model_id, \
             dims = EXCLUDED.dims, embedding = EXCLUDED.embedding, \
             lex_len = EXCLUDED.lex_len, line_start = EXCLUDED.line_start, \
             line_end = EXCLUDED.line_end \
             RETURNING id, chunk_index, (xmax = 0) AS inserted",
        )
        .bind(node_id)
        .bind(&columns.chunk_index)
        .bind(&columns.prefix)
        .bind(&columns.heading_path_json)
        .bind(&columns.content)
        .bind(&columns.content_hash)
        .bind(&columns.tokens_estimate)
        .bind(&columns.tokens_model)
        .bind(&columns.span_start)
        .bind(&columns.span_end)
        .bind(&columns.model_id)
        .bind(&columns.dims)
        .bind(&columns.embedding)
        .bind(&columns.lex_len)
        .bind(&columns.line_start)
        .bind(&columns.line_end)
        .fetch_all(&mut *tx)
        .await
        .map_err(pg("upsert chunks"))
    }

    /// Delete the chunks of document `node_id` at `chunk_count` and above, postings first.
    /// Returns how many chunks were deleted.
    async fn prune_chunks_past_chunk_count(
        tx: &mut PgConnection,
        node_id: NodeId,
        chunk_count: u32,
    ) -> Result<u32, StoreError> {
        let limit = i64::from(chunk_count);
        sqlx::query(
            "DELETE FROM postings WHERE chunk_id IN \
             (SELECT id FROM chunks WHERE node_id = $1 AND chunk_index >= $2)",
        )
        .bind(node_id)
        .bind(limit)
        .execute(&mut *tx)
        .await
        .map_err(pg("prune postings"))?;
        let pruned = sqlx::query("DELETE FROM chunks WHERE node_id = $1 AND chunk_index >= $2")
            .bind(node_id)
            .bind(limit)
            .execute(&mut *tx)
            .await
            .map_err(pg("prune chunks"))?
            .rows_affected();
        Ok(pruned as u32)
    }

    async fn exact_search(
        &self,
        query: &Vector,
        dims: i32,
        limit: i64,
        allowed: Option<&[i64]>,
    ) -> Result<Vec<PgRow>, StoreError> {
        sqlx::query(
            "SELECT c.id, c.embedding <=> $1 AS dist FROM chunks c \
             WHERE c.dims = $2 AND ($4::bigint[] IS NULL OR c.node_id = ANY($4)) \
             ORDER BY dist, c.id LIMIT $3",
        )
        .bind(query)
        .bind(dims)
        .bind(limit)
        .bind(allowed)
        .fetch_all(&self.pool)
        .await
        .map_err(pg("vector search"))
    }

    async fn hnsw_search(
        &self,
        query: &Vector,
        dims: i32,
        limit: i64,
        allowed: Option<&[i64]>,
    ) -> Result<Vec<PgRow>, StoreError> {
        // The typmod must be a literal to match the partial expression index.
        let sql = format!(
            "SELECT id, dist FROM (SELECT id, embedding::vector({dims}) <=> $1::vector({dims}) \
             AS dist FROM chunks WHERE dims = {dims} \
             AND ($3::bigint[] IS NULL OR node_id = ANY($3)) \
             ORDER BY embedding::vector({dims}) <=> $1::vector({dims}) LIMIT $2) s \
             ORDER BY dist, id"
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(query)
            .bind(limit)
            .bind(allowed)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("vector search"))
    }
}

/// The upserted chunks of one change as parallel columns, bound as arrays to one
/// `INSERT … SELECT * FROM UNNEST(…)`, with each chunk's term counts for its postings.
struct ChunkColumns {
    chunk_index: Vec<i64>,
    prefix: Vec<String>,
    /// The heading paths as JSON arrays (`[]` where one cannot be written).
    heading_path_json: Vec<String>,
    content: Vec<String>,
    content_hash: Vec<String>,
    tokens_estimate: Vec<i64>,
    tokens_model: Vec<i64>,
    span_start: Vec<i64>,
    span_end: Vec<i64>,
    model_id: Vec<String>,
    dims: Vec<i32>,
    embedding: Vec<Vector>,
    /// BM25 lengths: the number of term occurrences of each indexed text.
    lex_len: Vec<i32>,
    line_start: Vec<i64>,
    line_end: Vec<i64>,
    term_counts: Vec<Vec<(String, u32)>>,
}

impl ChunkColumns {
    /// The columns of `change.upserts`, terms counted with `terms`. Fails on a chunk with
    /// more term occurrences than an `integer` holds.
    fn of_upserts(change: &DocumentChange, terms: &TermConfig) -> Result<Self, StoreError> {
        let n = change.upserts.len();
        let mut columns = ChunkColumns {
            chunk_index: Vec::with_capacity(n),
            prefix: Vec::with_capacity(n),
            heading_path_json: Vec::with_capacity(n),
            content: Vec::with_capacity(n),
            content_hash: Vec::with_capacity(n),
            tokens_estimate: Vec::with_capacity(n),
            tokens_model: Vec::with_capacity(n),
            span_start: Vec::with_capacity(n),
            span_end: Vec::with_capacity(n),
            model_id: Vec::with_capacity(n),
            dims: Vec::with_capacity(n),
            embedding: Vec::with_capacity(n),
            lex_len: Vec::with_capacity(n),
            line_start: Vec::with_capacity(n),
            line_end: Vec::with_capacity(n),
            term_counts: Vec::with_capacity(n),
        };
        for c in &change.upserts {
            let tc = term_counts_with(&c.text(), terms);
            let len: u64 = tc.iter().map(|(_, k)| u64::from(*k)).sum();
            columns.chunk_index.push(i64::from(c.chunk_index));
            columns.prefix.push(c.prefix.clone());
            columns
                .heading_path_json
                .push(serde_json::to_string(&c.heading_path).unwrap_or_else(|_| "[]".into()));
            columns.content.push(c.content.clone());
            columns.content_hash.push(c.content_hash.clone());
            columns.tokens_estimate.push(i64::from(c.tokens_estimate));
            columns.tokens_model.push(i64::from(c.tokens_model));
            columns.span_start.push(c.span_start as i64);
            columns.span_end.push(c.span_end as i64);
            columns.line_start.push(i64::from(c.line_start));
            columns.line_end.push(i64::from(c.line_end));
            columns.model_id.push(c.model_id.clone());
            columns.dims.push(c.embedding.len() as i32);
            columns.embedding.push(Vector::from(c.embedding.clone()));
            columns.lex_len.push(i32::try_from(len).map_err(|_| {
                StoreError::Invalid(format!(
                    "{}: chunk {} has too many terms",
                    change.path, c.chunk_index
                ))
            })?);
            columns.term_counts.push(tc);
        }
        Ok(columns)
    }
}

/// The postings of the upserted chunks as parallel columns (the node id is one parameter).
struct PostingColumns {
    term: Vec<String>,
    chunk_id: Vec<i64>,
    tf: Vec<i32>,
    dl: Vec<i32>,
}

impl PostingColumns {
    /// One posting per term of each chunk of `columns`, under the chunk id the upsert
    /// returned for its chunk index (`id_of`). Fails when the upsert returned none for one.
    fn of_upserted_chunks(
        columns: ChunkColumns,
        id_of: &HashMap<i64, i64>,
    ) -> Result<Self, StoreError> {
        let mut postings = PostingColumns {
            term: Vec::new(),
            chunk_id: Vec::new(),
            tf: Vec::new(),
            dl: Vec::new(),
        };
        let ChunkColumns {
            chunk_index: idx,
            lex_len,
            term_counts,
            ..
        } = columns;
        for (i, tc) in term_counts.into_iter().enumerate() {
            let Some(&cid) = id_of.get(&idx[i]) else {
                return Err(StoreError::Backend {
                    backend: BACKEND,
                    op: "upsert chunks",
                    source: format!("no id returned for chunk {}", idx[i]).into(),
                });
            };
            for (t, k) in tc {
                postings.term.push(t);
                postings.chunk_id.push(cid);
                postings.tf.push(k as i32);
                postings.dl.push(lex_len[i]);
            }
        }
        Ok(postings)
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        let Some(rt) = self.rt.take() else { return };
        let pool = self.pool.clone();
        let drop_schema = self.opts.drop_schema_on_drop.then(|| {
            format!(
                "DROP SCHEMA IF EXISTS {} CASCADE",
                quote_ident(&self.opts.schema)
            )
        });
        run_on(&rt, async move {
            if let Some(sql) = drop_schema {
                let _ = sqlx::query(AssertSqlSafe(sql)).execute(&pool).await;
            }
            pool.close().await;
        });
        rt.shutdown_background();
    }
}

fn doc_from_row(r: &PgRow) -> Result<DocRecord, StoreError> {
    let op = "documents";
    Ok(DocRecord {
        node_id: get(r, 0, op)?,
        qualified_name: get(r, 1, op)?,
        path: get(r, 2, op)?,
        title: get(r, 3, op)?,
        metadata: parse_json("document metadata", &get::<String>(r, 4, op)?)?,
        content_hash: get(r, 5, op)?,
        chunk_count: to_u32(get(r, 6, op)?),
        collection: get(r, 7, op)?,
        has_source: get(r, 8, op)?,
    })
}

fn chunk_from_row(r: &PgRow) -> Result<ChunkRecord, StoreError> {
    let op = "get chunks";
    let heading: String = get(r, 7, op)?;
    Ok(ChunkRecord {
        id: get(r, 0, op)?,
        node_id: get(r, 1, op)?,
        path: get(r, 2, op)?,
        title: get(r, 3, op)?,
        metadata: parse_json("document metadata", &get::<String>(r, 4, op)?)?,
        chunk_index: to_u32(get(r, 5, op)?),
        prefix: get(r, 6, op)?,
        heading_path: serde_json::from_str(&heading).map_err(|err| StoreError::Corrupt {
            what: "heading path".into(),
            reason: "not valid JSON".into(),
            source: Some(Box::new(err)),
        })?,
        content: get(r, 8, op)?,
        content_hash: get(r, 9, op)?,
        tokens_estimate: to_u32(get(r, 10, op)?),
        tokens_model: to_u32(get(r, 11, op)?),
        span_start: get::<i64>(r, 12, op)?.max(0) as u64,
        span_end: get::<i64>(r, 13, op)?.max(0) as u64,
        model_id: get(r, 14, op)?,
        collection: get(r, 15, op)?,
        line_start: to_u32(get(r, 16, op)?),
        line_end: to_u32(get(r, 17, op)?),
    })
}

impl VectorsByHash for PgStore {
    fn cached_vectors(
        &self,
        model_id: &str,
        hashes: &[String],
    ) -> Result<Vec<(String, Vec<f32>)>, StoreError> {
        if hashes.is_empty() {
            return Ok(Vec::new());
        }
        self.block(async {
            let mut found: HashMap<String, Vec<f32>> = HashMap::new();
            // Chunk rows first (only for keys shaped like a chunk hash; sentence keys never
            // match there), then the cache table for whatever is still missing. An empty key
            // list skips its round trip: sentence lookups sit on the ask hot path.
            let sources = [
                (
                    "SELECT DISTINCT ON (content_hash) content_hash, embedding FROM chunks \
                     WHERE model_id = $1 AND content_hash = ANY($2) ORDER BY content_hash, id",
                    true,
                ),
                (
                    "SELECT content_hash, vector FROM embed_cache \
                     WHERE model_id = $1 AND content_hash = ANY($2)",
                    false,
                ),
            ];
            for (sql, chunks_table) in sources {
                let keys: Vec<&str> = hashes
                    .iter()
                    .map(String::as_str)
                    .filter(|h| {
                        !found.contains_key(*h) && (!chunks_table || could_be_chunk_hash(h))
                    })
                    .collect();
                if keys.is_empty() {
                    continue;
                }
                let rows = sqlx::query(sql)
                    .bind(model_id)
                    .bind(&keys)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(pg("cached vectors"))?;
                for r in &rows {
                    let v: Vector = get(r, 1, "cached vectors")?;
                    found.insert(get(r, 0, "cached vectors")?, v.to_vec());
                }
            }
            Ok(hashes
                .iter()
                .filter_map(|h| found.get(h).map(|v| (h.clone(), v.clone())))
                .collect())
        })
    }

    fn cache_vectors(
        &self,
        model_id: &str,
        items: &[(String, Vec<f32>)],
    ) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        for (h, v) in items {
            if v.is_empty() || v.iter().any(|x| !x.is_finite()) {
                return Err(StoreError::Invalid(format!(
                    "cached vector for {h} is empty or not finite"
                )));
            }
        }
        // Last write wins for a hash given twice, as with SQLite's INSERT OR REPLACE.
        let mut last: HashMap<&str, &Vec<f32>> = HashMap::new();
        for (h, v) in items {
            last.insert(h.as_str(), v);
        }
        let hashes: Vec<String> = last.keys().map(|h| h.to_string()).collect();
        let vectors: Vec<Vector> = hashes
            .iter()
            .map(|h| Vector::from(last[h.as_str()].clone()))
            .collect();
        self.block(async {
            sqlx::query(
                "INSERT INTO embed_cache (model_id, content_hash, vector) \
                 SELECT $1, h, v FROM UNNEST($2::text[], $3::vector[]) AS u(h, v) \
                 ON CONFLICT (model_id, content_hash) DO UPDATE SET vector = EXCLUDED.vector",
            )
            .bind(model_id)
            .bind(&hashes)
            .bind(&vectors)
            .execute(&self.pool)
            .await
            .map_err(pg("cache vectors"))?;
            Ok(())
        })
    }
}

impl Store for PgStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn documents(&self) -> Result<Vec<DocRecord>, StoreError> {
        self.block(self.select_documents("TRUE", None))
    }

    fn document(&self, path: &str) -> Result<Option<DocRecord>, StoreError> {
        Ok(self
            .block(self.select_documents("d.path = $1", Some(path)))?
            .pop())
    }

    fn embedding_model(&self) -> Result<Option<String>, StoreError> {
        self.block(async {
            sqlx::query_scalar("SELECT model_id FROM chunks WHERE model_id <> '' LIMIT 1")
                .fetch_optional(&self.pool)
                .await
                .map_err(pg("embedding model"))
        })
    }

    fn chunk_states(&self) -> Result<Vec<ChunkState>, StoreError> {
        self.block(self.select_chunk_states("TRUE", None))
    }

    fn chunk_states_of(&self, path: &str) -> Result<Vec<ChunkState>, StoreError> {
        self.block(self.select_chunk_states("d.path = $1", Some(path)))
    }

    fn apply_document(&self, change: &DocumentChange) -> Result<ApplyOutcome, StoreError> {
        validate(change)?;
        let out = self.block(self.apply_async(change))?;
        let dims: HashSet<i32> = change
            .upserts
            .iter()
            .map(|c| c.embedding.len() as i32)
            .collect();
        if self.bulk.load(Ordering::Relaxed) {
            // Inserting into a graph row by row costs several times building it once at the
            // end; until then vector search reads these rows exactly.
            self.hnsw_pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(dims);
        } else {
            for d in dims {
                self.ensure_hnsw_index(d)?;
            }
        }
        Ok(out)
    }

    fn set_bulk_writes(&self, on: bool) {
        self.bulk.store(on, Ordering::Relaxed);
    }

    fn optimize(&self) -> Result<(), StoreError> {
        let pending: Vec<i32> = self
            .hnsw_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        for d in pending {
            // A size whose build failed stays pending for the next call.
            self.ensure_hnsw_index(d)?;
            self.hnsw_pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&d);
        }
        // VACUUM cannot run inside a transaction; on a pool connection it runs on its own.
        // It skips pages already all-visible, so after a small ingest it reads little.
        self.block(async {
            sqlx::query("VACUUM (ANALYZE) postings")
                .execute(&self.pool)
                .await
                .map_err(pg("vacuum postings"))
        })?;
        Ok(())
    }

    fn remove_documents(&self, paths: &[String]) -> Result<u64, StoreError> {
        if paths.is_empty() {
            return Ok(0);
        }
        self.block(async {
            let mut tx = self.pool.begin().await.map_err(pg("begin"))?;
            let ids: Vec<i64> = sqlx::query_scalar(
                "SELECT node_id FROM documents WHERE path = ANY($1) ORDER BY node_id FOR UPDATE",
            )
            .bind(paths)
            .fetch_all(&mut *tx)
            .await
            .map_err(pg("find documents"))?;
            if ids.is_empty() {
                tx.commit().await.map_err(pg("commit"))?;
                return Ok(0);
            }
            sqlx::query("DELETE FROM postings WHERE node_id = ANY($1)")
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(pg("delete postings"))?;
            let removed = sqlx::query("DELETE FROM chunks WHERE node_id = ANY($1)")
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(pg("delete chunks"))?
                .rows_affected();
            sqlx::query("DELETE FROM doc_sources WHERE node_id = ANY($1)")
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(pg("delete document sources"))?;
            sqlx::query("DELETE FROM documents WHERE node_id = ANY($1)")
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(pg("delete documents"))?;
            count_change(&mut tx).await?;
            tx.commit().await.map_err(pg("commit"))?;
            Ok(removed)
        })
    }

    fn document_source(&self, path: &str) -> Result<Option<String>, StoreError> {
        self.block(async {
            sqlx::query_scalar(
                "SELECT s.source FROM doc_sources s JOIN documents d ON d.node_id = s.node_id \
                 WHERE d.path = $1 AND s.content_hash = d.content_hash",
            )
            .bind(path)
            .fetch_optional(&self.pool)
            .await
            .map_err(pg("document source"))
        })
    }

    fn get_chunks(&self, ids: &[ChunkId]) -> Result<Vec<ChunkRecord>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.block(async {
            let rows = sqlx::query(
                "SELECT c.id, c.node_id, d.path, d.title, d.metadata, c.chunk_index, c.prefix, \
                 c.heading_path, c.content, c.content_hash, c.tokens_estimate, c.tokens_model, \
                 c.span_start, c.span_end, c.model_id, d.collection, c.line_start, c.line_end \
                 FROM chunks c JOIN documents d ON d.node_id = c.node_id WHERE c.id = ANY($1)",
            )
            .bind(ids)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("get chunks"))?;
            let mut by_id = HashMap::with_capacity(rows.len());
            for r in &rows {
                let c = chunk_from_row(r)?;
                by_id.insert(c.id, c);
            }
            Ok(ids.iter().filter_map(|id| by_id.get(id).cloned()).collect())
        })
    }

    fn chunk_ids(&self) -> Result<Vec<ChunkId>, StoreError> {
        self.block(async {
            sqlx::query_scalar("SELECT id FROM chunks ORDER BY id")
                .fetch_all(&self.pool)
                .await
                .map_err(pg("chunk ids"))
        })
    }

    fn document_chunks(&self, path: &str) -> Result<Vec<ChunkRecord>, StoreError> {
        self.block(async {
            let rows = sqlx::query(
                "SELECT c.id, c.node_id, d.path, d.title, d.metadata, c.chunk_index, c.prefix, \
                 c.heading_path, c.content, c.content_hash, c.tokens_estimate, c.tokens_model, \
                 c.span_start, c.span_end, c.model_id, d.collection, c.line_start, c.line_end \
                 FROM chunks c JOIN documents d ON d.node_id = c.node_id WHERE d.path = $1 \
                 ORDER BY c.chunk_index",
            )
            .bind(path)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("document chunks"))?;
            rows.iter().map(chunk_from_row).collect()
        })
    }

    fn get_vectors(&self, ids: &[ChunkId]) -> Result<Vec<(ChunkId, Vec<f32>)>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.block(async {
            let rows = sqlx::query("SELECT id, embedding FROM chunks WHERE id = ANY($1)")
                .bind(ids)
                .fetch_all(&self.pool)
                .await
                .map_err(pg("get vectors"))?;
            let mut by_id = HashMap::with_capacity(rows.len());
            for r in &rows {
                let id: i64 = get(r, 0, "get vectors")?;
                let v: Vector = get(r, 1, "get vectors")?;
                by_id.insert(id, v.to_vec());
            }
            Ok(ids
                .iter()
                .filter_map(|id| by_id.get(id).map(|v| (*id, v.clone())))
                .collect())
        })
    }

    fn bm25_search(
        &self,
        query: &str,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.block(async {
            let allowed = self.allowed_nodes(filter).await?;
            if allowed.as_ref().is_some_and(|a| a.is_empty()) {
                return Ok(Vec::new());
            }
            let seen = self
                .terms_seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let remembered = seen.is_some();
            let (mut recorded, mut terms) = match seen {
                Some(seen) => seen,
                None => self.read_terms().await?,
            };
            loop {
                let key = Bm25Key {
                    terms: terms_with(query, &terms),
                    limit,
                    allowed: allowed.clone(),
                    term_function: recorded.clone(),
                };
                let hits = self.bm25_answer(key).await?;
                // No rows from a remembered term function: it may have been changed (a
                // reindex); answer with the one recorded now.
                if !hits.is_empty() || !remembered {
                    return Ok(hits);
                }
                let now = self.read_terms().await?;
                if now.0 == recorded {
                    return Ok(hits);
                }
                (recorded, terms) = now;
            }
        })
    }

    fn vector_search(
        &self,
        query: &[f32],
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<Hit>, StoreError> {
        if limit == 0 || query.is_empty() || query.len() > usize::from(u16::MAX) {
            return Ok(Vec::new());
        }
        let norm: f32 = query.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm == 0.0 || !norm.is_finite() {
            // Cosine is undefined; pgvector would answer NaN for every row.
            return Ok(Vec::new());
        }
        let dims = query.len() as i32;
        let q = Vector::from(query.to_vec());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.block(async {
            let allowed = self.allowed_nodes(filter).await?;
            if allowed.as_ref().is_some_and(|a| a.is_empty()) {
                return Ok(Vec::new());
            }
            let small_filter = allowed
                .as_ref()
                .is_some_and(|a| a.len() <= EXACT_FILTER_MAX_DOCS);
            let rows = match self.opts.vector_search {
                VectorSearch::Hnsw { .. } if dims <= HNSW_MAX_DIMS && !small_filter => {
                    self.hnsw_search(&q, dims, limit, allowed.as_deref())
                        .await?
                }
                _ => {
                    self.exact_search(&q, dims, limit, allowed.as_deref())
                        .await?
                }
            };
            let mut scored = Vec::with_capacity(rows.len());
            for r in &rows {
                let id: i64 = get(r, 0, "vector search")?;
                let dist: f64 = get(r, 1, "vector search")?;
                scored.push((id, 1.0 - dist));
            }
            self.hits_from(scored).await
        })
    }

    fn lexical_stats(&self) -> Result<LexicalStats, StoreError> {
        self.block(async {
            let r = sqlx::query(
                "SELECT n_chunks, total_len, (SELECT count(*) FROM term_df WHERE df > 0) \
                 FROM lex_stats WHERE id = 1",
            )
            .fetch_one(&self.pool)
            .await
            .map_err(pg("lexical stats"))?;
            Ok(LexicalStats {
                chunks: get::<i64>(&r, 0, "lexical stats")?.max(0) as u64,
                total_len: get::<i64>(&r, 1, "lexical stats")?.max(0) as u64,
                terms: get::<i64>(&r, 2, "lexical stats")?.max(0) as u64,
            })
        })
    }

    fn doc_freqs(&self, terms: &[String]) -> Result<(u64, Vec<u64>), StoreError> {
        self.block(async {
            let n: i64 = sqlx::query_scalar("SELECT n_chunks FROM lex_stats WHERE id = 1")
                .fetch_one(&self.pool)
                .await
                .map_err(pg("doc freqs"))?;
            let rows = sqlx::query("SELECT term, df FROM term_df WHERE term = ANY($1)")
                .bind(terms)
                .fetch_all(&self.pool)
                .await
                .map_err(pg("doc freqs"))?;
            let mut by: HashMap<String, i64> = HashMap::with_capacity(rows.len());
            for r in &rows {
                by.insert(get(r, 0, "doc freqs")?, get(r, 1, "doc freqs")?);
            }
            let dfs = terms
                .iter()
                .map(|t| by.get(t).copied().unwrap_or(0).max(0) as u64)
                .collect();
            Ok((n.max(0) as u64, dfs))
        })
    }

    fn term_config(&self) -> Result<TermConfig, StoreError> {
        self.block(self.read_terms()).map(|(_, terms)| terms)
    }

    fn set_term_config(&self, terms: &TermConfig) -> Result<u64, StoreError> {
        self.block(self.reindex_async(terms))
    }

    fn audit(&self) -> Result<AuditReport, StoreError> {
        self.block(async {
            let op = "audit";
            let mut tx = self.pool.begin().await.map_err(pg("begin"))?;
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .execute(&mut *tx)
                .await
                .map_err(pg(op))?;
            let r = sqlx::query(
                "SELECT \
                 (SELECT count(*) FROM documents), \
                 (SELECT count(*) FROM chunks), \
                 (SELECT count(*) FROM chunks WHERE dims > 0 AND vector_dims(embedding) = dims), \
                 (SELECT count(*) FROM chunks c WHERE c.lex_len = \
                    (SELECT coalesce(sum(p.tf), 0) FROM postings p WHERE p.chunk_id = c.id) \
                  AND NOT EXISTS (SELECT 1 FROM postings p WHERE p.chunk_id = c.id AND \
                    (p.dl <> c.lex_len OR p.node_id <> c.node_id))), \
                 (SELECT count(*) FROM chunks c WHERE NOT EXISTS \
                    (SELECT 1 FROM documents d WHERE d.node_id = c.node_id)), \
                 (SELECT count(*) FROM postings p WHERE NOT EXISTS \
                    (SELECT 1 FROM chunks c WHERE c.id = p.chunk_id)), \
                 (SELECT n_chunks FROM lex_stats WHERE id = 1), \
                 (SELECT total_len FROM lex_stats WHERE id = 1), \
                 (SELECT coalesce(sum(lex_len), 0)::bigint FROM chunks)",
            )
            .fetch_one(&mut *tx)
            .await
            .map_err(pg(op))?;
            let incomplete: Vec<String> = sqlx::query_scalar(
                "SELECT d.path FROM documents d LEFT JOIN \
                 (SELECT node_id, count(*) AS n, min(chunk_index) AS lo, max(chunk_index) AS hi \
                  FROM chunks GROUP BY node_id) c ON c.node_id = d.node_id \
                 WHERE coalesce(c.n, 0) <> d.chunk_count \
                    OR (d.chunk_count > 0 AND (c.lo <> 0 OR c.hi <> d.chunk_count - 1)) \
                 ORDER BY d.path COLLATE \"C\"",
            )
            .fetch_all(&mut *tx)
            .await
            .map_err(pg(op))?;
            tx.commit().await.map_err(pg("commit"))?;
            let n = |i: usize| -> Result<i64, StoreError> {
                Ok(get::<Option<i64>>(&r, i, op)?.unwrap_or(-1))
            };
            let (documents, chunks, vectors, lexical) = (n(0)?, n(1)?, n(2)?, n(3)?);
            let (orphan_chunks, orphan_postings) = (n(4)?, n(5)?);
            let stats_consistent = n(6)? == chunks && n(7)? == n(8)?;
            Ok(AuditReport {
                documents: documents.max(0) as u64,
                chunks: chunks.max(0) as u64,
                vectors: vectors.max(0) as u64,
                lexical_entries: lexical.max(0) as u64,
                orphan_chunks: orphan_chunks.max(0) as u64,
                incomplete_documents: incomplete,
                orphan_postings: orphan_postings.max(0) as u64,
                stats_consistent,
                coherent: false,
            }
            .judged())
        })
    }
}

impl RunLog for PgStore {
    fn begin_run(&self, record: &Value) -> Result<i64, StoreError> {
        self.block(async {
            let mut tx = self.pool.begin().await.map_err(pg("begin"))?;
            sqlx::query("UPDATE runs SET status = 'interrupted' WHERE status = 'running'")
                .execute(&mut *tx)
                .await
                .map_err(pg("begin run"))?;
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO runs (started_at_ms, status, record) VALUES ($1, 'running', $2) \
                 RETURNING id",
            )
            .bind(now_ms())
            .bind(record.to_string())
            .fetch_one(&mut *tx)
            .await
            .map_err(pg("begin run"))?;
            tx.commit().await.map_err(pg("commit"))?;
            Ok(id)
        })
    }

    fn finish_run(&self, id: i64, status: RunStatus, record: &Value) -> Result<(), StoreError> {
        let n = self.block(async {
            sqlx::query(
                "UPDATE runs SET status = $2, finished_at_ms = $3, record = $4 WHERE id = $1",
            )
            .bind(id)
            .bind(status.as_str())
            .bind(now_ms())
            .bind(record.to_string())
            .execute(&self.pool)
            .await
            .map_err(pg("finish run"))
        })?;
        if n.rows_affected() == 0 {
            return Err(StoreError::Invalid(format!("no run with id {id}")));
        }
        Ok(())
    }

    fn runs(&self, limit: usize) -> Result<Vec<RunRow>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.block(async {
            let rows = sqlx::query(
                "SELECT id, started_at_ms, finished_at_ms, status, record FROM runs \
                 ORDER BY id DESC LIMIT $1",
            )
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("runs"))?;
            rows.iter()
                .map(|r| {
                    Ok(RunRow {
                        id: get(r, 0, "runs")?,
                        started_at_ms: get(r, 1, "runs")?,
                        finished_at_ms: get(r, 2, "runs")?,
                        status: get::<String>(r, 3, "runs")?.parse()?,
                        record: parse_json("run record", &get::<String>(r, 4, "runs")?)?,
                    })
                })
                .collect()
        })
    }

    fn log_query(&self, entry: &QueryLogEntry) -> Result<i64, StoreError> {
        let r = self.query_log_retention();
        let (query, rec) = r.prepare(entry)?;
        let keep_rows = i64::try_from(r.max_rows.max(1)).unwrap_or(i64::MAX);
        let max_bytes = i64::try_from(r.max_bytes).unwrap_or(i64::MAX);
        self.block(async {
            let mut tx = self.pool.begin().await.map_err(pg("begin"))?;
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO query_log (at_ms, query, mode, record) VALUES ($1, $2, $3, $4) \
                 RETURNING id",
            )
            .bind(entry.at_ms)
            .bind(&query)
            .bind(&entry.mode)
            .bind(&rec)
            .fetch_one(&mut *tx)
            .await
            .map_err(pg("log query"))?;
            // Several writers may interleave ids, so keep the newest `keep_rows` by rank (an
            // index range of the primary key, not a scan of the records).
            sqlx::query(
                "DELETE FROM query_log WHERE id < \
                 (SELECT id FROM query_log ORDER BY id DESC LIMIT 1 OFFSET $1)",
            )
            .bind(keep_rows - 1)
            .execute(&mut *tx)
            .await
            .map_err(pg("query log retention (rows)"))?;
            if !r.check_bytes(id, query.len() + rec.len()) {
                tx.commit().await.map_err(pg("commit"))?;
                return Ok(id);
            }
            sqlx::query(
                "DELETE FROM query_log WHERE id < COALESCE((SELECT MIN(id) FROM \
                 (SELECT id, SUM(octet_length(query) + octet_length(record)) \
                  OVER (ORDER BY id DESC) AS total FROM query_log) t WHERE total <= $1), $2)",
            )
            .bind(max_bytes)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(pg("query log retention (bytes)"))?;
            tx.commit().await.map_err(pg("commit"))?;
            Ok(id)
        })
    }

    fn set_query_log_retention(&self, retention: QueryLogRetention) {
        *self.retention.lock().unwrap_or_else(|p| p.into_inner()) = retention;
    }

    fn query_log_retention(&self) -> QueryLogRetention {
        *self.retention.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recent_queries(&self, limit: usize) -> Result<Vec<QueryLogEntry>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.block(async {
            let rows = sqlx::query("SELECT id, record FROM query_log ORDER BY id DESC LIMIT $1")
                .bind(limit)
                .fetch_all(&self.pool)
                .await
                .map_err(pg("recent queries"))?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let id: i64 = get(r, 0, "recent queries")?;
                let rec: String = get(r, 1, "recent queries")?;
                let mut entry: QueryLogEntry =
                    serde_json::from_str(&rec).map_err(|err| StoreError::Corrupt {
                        what: format!("query log entry {id}"),
                        reason: "not valid JSON".into(),
                        source: Some(Box::new(err)),
                    })?;
                entry.id = id;
                out.push(entry);
            }
            Ok(out)
        })
    }
}
