//! `bib bench scale` — the embedded store from 100k to a million chunks: what each figure costs
//! and how it grows.
//!
//! Per size (`--chunks`, default 100,000 and 1,000,000) one SQLite store of the
//! [`SyntheticCorpus`] (512-d vectors recorded as the default model's, so the real `bib ask`
//! and `bib serve` run on it) is built through `Store::apply_document` — the write path of
//! `bib ingest` — and kept under `--dir` for the next run (`--rebuild` starts over). Then:
//!
//! - **ingest**: chunks/s of the build (`Store::apply_documents`, 250 documents per
//!   transaction), and the store's size on disk;
//! - **index load**: the first vector search of a freshly opened store (reading every vector
//!   and building the in-memory 8-bit index);
//! - **queries** (in this process, warm): BM25 top 100, vector top 100, and a hybrid ask
//!   without the model (`Retriever::retrieve` with the query's given vector, default options)
//!   — p50 and p99;
//! - **recall@10** of the vector search against an exact scan of every stored vector;
//! - **processes**: peak RSS and wall time of a real `bib ask` (a fresh process, hybrid) and
//!   peak RSS of `bib serve` after asks over HTTP — what a user's machine sees.
//!
//! - **PostgreSQL** (`--pg URL`): the same queries on a copy of the store made with `bib
//!   migrate` — BM25, HNSW vector search and the hybrid ask, recall@10 against the same exact
//!   top-10 (by path and chunk index, as ids differ between stores); then BM25 on both stores
//!   **side by side**: each query on SQLite and on PostgreSQL one right after the other (which
//!   first alternates), three rounds, so both see the same moment of a machine whose speed
//!   drifts — the ratio of issue 20 ("PostgreSQL BM25 within 2× of SQLite") from one run.
//!
//! A last table divides each figure at the largest size by the same at the smallest.

use bib_text::vectors::unit;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use bib_eval::stats::percentile;
use bib_store::{ChunkId, DocumentChange, Filter, SqliteStore, Store};
use bib_store_pg::{PgOptions, PgStore, VectorSearch};
use serde_json::{json, Value};

use super::serve::Conn;
use super::stores::{chunk_keys, recall_at_10, time_store_paths, top10_keys, ChunkKey, PathTimes};
use super::synthetic::SyntheticCorpus;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Store sizes, in chunks.
    #[arg(long, value_delimiter = ',', default_value = "100000,1000000")]
    chunks: Vec<usize>,
    /// Vector dimensions (use-m3's 512 by default).
    #[arg(long, default_value_t = 512)]
    dims: usize,
    /// Queries timed per size.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Where the stores are built and kept between runs.
    #[arg(long, default_value = ".bib/bench-cache/scale")]
    dir: PathBuf,
    /// Build the stores again even when complete ones are there.
    #[arg(long)]
    rebuild: bool,
    /// Skip the `bib ask` and `bib serve` processes (no embedding model needed then).
    #[arg(long)]
    no_processes: bool,
    /// Also time a PostgreSQL copy of each size's store (same paths, HNSW with the URL's
    /// `ef_search`, recall@10 against the same exact top-10): a `postgres://` URL whose
    /// `schema` holds it, or without one the schema `bib_scale_<chunks>`. Copy a store there first with `bib migrate --from
    /// <dir>/scale-<chunks>-<dims>d.sqlite --to <url>`.
    #[arg(long, value_name = "URL")]
    pg: Option<String>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Everything measured at one size.
#[derive(Debug, Default)]
struct Row {
    chunks: usize,
    ingest_s: f64,
    disk_mib: f64,
    index_load_s: f64,
    times: PathTimes,
    recall10: f64,
    ask_rss_mib: Option<f64>,
    ask_wall_s: Option<f64>,
    serve_rss_mib: Option<f64>,
    /// The same queries on the PostgreSQL copy (`--pg`): path times and HNSW recall@10.
    pg: Option<(PathTimes, f64)>,
    /// BM25 on both stores interleaved per query (`--pg`).
    bm25_side_by_side: Option<SideBySide>,
}

/// BM25 top-100 times of the same queries on SQLite and PostgreSQL, interleaved per query.
#[derive(Debug, Default)]
struct SideBySide {
    /// SQLite reading each query's postings from the file (its memo emptied before each).
    sqlite_cold_ms: Vec<f64>,
    /// SQLite answering a query it answered before (postings from its memo).
    sqlite_ms: Vec<f64>,
    /// PostgreSQL running the statement (its remembered answers forgotten before each).
    postgres_cold_ms: Vec<f64>,
    /// PostgreSQL answering a query it answered before (the answer from its memo, after the
    /// one round trip in which the database finds `meta.changes` unmoved).
    postgres_ms: Vec<f64>,
}

impl SideBySide {
    /// PostgreSQL's p50 over SQLite's: both answering a query they answered before, and both
    /// reading the postings (each engine's own cost).
    fn ratios_of_p50s(&self) -> (f64, f64) {
        let p50 = |v: &[f64]| percentile(v, 50.0).max(1e-9);
        (
            p50(&self.postgres_ms) / p50(&self.sqlite_ms),
            p50(&self.postgres_cold_ms) / p50(&self.sqlite_cold_ms),
        )
    }

    fn report(&self) -> Value {
        let p = |v: &[f64], q: f64| percentile(v, q);
        let (warm, cold) = self.ratios_of_p50s();
        json!({
            "sqlite_bm25_p50_ms": p(&self.sqlite_ms, 50.0), "sqlite_bm25_p99_ms": p(&self.sqlite_ms, 99.0),
            "sqlite_cold_bm25_p50_ms": p(&self.sqlite_cold_ms, 50.0),
            "sqlite_cold_bm25_p99_ms": p(&self.sqlite_cold_ms, 99.0),
            "postgres_bm25_p50_ms": p(&self.postgres_ms, 50.0), "postgres_bm25_p99_ms": p(&self.postgres_ms, 99.0),
            "postgres_cold_bm25_p50_ms": p(&self.postgres_cold_ms, 50.0),
            "postgres_cold_bm25_p99_ms": p(&self.postgres_cold_ms, 99.0),
            "ratio_of_p50": warm,
            "ratio_of_p50_cold": cold,
            "timings_each": self.sqlite_ms.len(),
        })
    }
}

impl Row {
    fn report(&self) -> Value {
        let p = |v: &[f64], q: f64| percentile(v, q);
        json!({
            "chunks": self.chunks,
            "ingest_s": self.ingest_s,
            "chunks_per_s": self.chunks as f64 / self.ingest_s.max(1e-9),
            "disk_mib": self.disk_mib,
            "index_load_s": self.index_load_s,
            "bm25_p50_ms": p(&self.times.bm25, 50.0), "bm25_p99_ms": p(&self.times.bm25, 99.0),
            "vector_p50_ms": p(&self.times.vector, 50.0), "vector_p99_ms": p(&self.times.vector, 99.0),
            "hybrid_p50_ms": p(&self.times.hybrid, 50.0), "hybrid_p99_ms": p(&self.times.hybrid, 99.0),
            "recall10": self.recall10,
            "ask_peak_rss_mib": self.ask_rss_mib,
            "ask_wall_s": self.ask_wall_s,
            "serve_peak_rss_mib": self.serve_rss_mib,
            "postgres": self.pg.as_ref().map(|(t, recall)| json!({
                "bm25_p50_ms": p(&t.bm25, 50.0), "bm25_p99_ms": p(&t.bm25, 99.0),
                "vector_p50_ms": p(&t.vector, 50.0), "vector_p99_ms": p(&t.vector, 99.0),
                "hybrid_p50_ms": p(&t.hybrid, 50.0), "hybrid_p99_ms": p(&t.hybrid, 99.0),
                "recall10": recall,
            })),
            "bm25_side_by_side": self.bm25_side_by_side.as_ref().map(SideBySide::report),
        })
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.chunks.is_empty() || a.chunks.contains(&0) {
        bail!("--chunks: give one or more sizes above 0, e.g. --chunks 100000,1000000");
    }
    // Smallest first: a child's peak RSS is read as the largest among the children so far.
    let mut sizes = a.chunks.clone();
    sizes.sort_unstable();
    sizes.dedup();
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let corpus = SyntheticCorpus::new(a.dims, bib_embed::DEFAULT_MODEL);
    let queries = corpus.queries(a.queries);
    let mut rows = Vec::new();
    for &n in &sizes {
        let path = a.dir.join(format!("scale-{n}-{}d.sqlite", a.dims));
        let ingest_s = build_or_reuse(&a, &corpus, n, &path)?;
        let mut row = Row {
            chunks: n,
            ingest_s,
            disk_mib: disk_mib(&path),
            ..Row::default()
        };
        let store = SqliteStore::open_read_only(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let t = Instant::now();
        store.vector_search(&queries[0].1, 10, &Filter::default())?;
        row.index_load_s = t.elapsed().as_secs_f64();
        let tops: Vec<Vec<ChunkId>> = time_store_paths(&store, &queries, &mut row.times)?
            .iter()
            .map(|hits| hits.iter().take(10).map(|h| h.id).collect())
            .collect();
        eprintln!("{n} chunks: exact top-10 of {} queries…", queries.len());
        let exact = exact_top10(&store, &queries)?;
        row.recall10 = recall_at_10(&exact, &tops);
        if let Some(url) = &a.pg {
            let exact_keys = exact
                .iter()
                .map(|ids| chunk_keys(&store, ids))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let pg = connect_postgres(url, n, &path)?;
            row.pg = Some(time_postgres(&pg, n, &queries, &exact_keys)?);
            row.bm25_side_by_side = Some(bm25_side_by_side(&store, &pg, &queries)?);
        }
        drop(store);
        if !a.no_processes {
            processes(&path, &queries, &mut row)?;
        }
        rows.push(row);
    }
    print_report(&rows);
    if let Some(p) = &a.json {
        let report = json!({"bench": "scale", "dims": a.dims, "queries": a.queries,
                            "rows": rows.iter().map(Row::report).collect::<Vec<_>>()});
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// Open the PostgreSQL copy of the `n`-chunk store at `url`, with HNSW search (the URL's
/// `ef_search` when it gives one); an error names the `bib migrate` that makes the copy.
fn connect_postgres(url: &str, n: usize, sqlite_path: &Path) -> anyhow::Result<PgStore> {
    let mut opts = PgOptions::parse(url)?;
    if opts.vector_search == VectorSearch::Exact {
        opts = opts.with_vector_search(VectorSearch::Hnsw {
            ef_search: bib_store_pg::DEFAULT_EF_SEARCH,
        });
    }
    if !url.contains("schema=") {
        opts = opts.with_schema(&format!("bib_scale_{n}"))?;
    }
    let pg = PgStore::connect_with(opts)?;
    let held = pg.lexical_stats()?.chunks;
    if held != n as u64 {
        bail!(
            "{}: holds {held} chunks, not {n}; copy the store there first: bib migrate --from \
             {} --to \"{url}\"",
            pg.location(),
            sqlite_path.display()
        );
    }
    Ok(pg)
}

/// Time the PostgreSQL copy on the same queries, after one untimed pass over them; its path
/// times and recall@10 against `exact` (by chunk key).
fn time_postgres(
    pg: &PgStore,
    n: usize,
    queries: &[(String, Vec<f32>)],
    exact: &[Vec<ChunkKey>],
) -> anyhow::Result<(PathTimes, f64)> {
    // One untimed pass first: the SQLite measurements before this one read the whole SQLite
    // file, which pushes PostgreSQL's pages out of the page cache; a server's are warm.
    eprintln!("{n} chunks: warming and timing {}…", pg.location());
    time_store_paths(pg, queries, &mut PathTimes::default())?;
    // The pass warmed the pages, not the answers: SQLite's run above met these questions for
    // the first time, so PostgreSQL runs its statement too (its remembered answers are timed
    // in the side-by-side phase).
    pg.forget_remembered();
    let mut times = PathTimes::default();
    let hits = time_store_paths(pg, queries, &mut times)?;
    Ok((times, recall_at_10(exact, &top10_keys(pg, &hits)?)))
}

/// Rounds of [`bm25_side_by_side`].
const SIDE_BY_SIDE_ROUNDS: usize = 3;

/// BM25 top 100 of every query on both stores, one right after the other, the first store
/// alternating from query to query, [`SIDE_BY_SIDE_ROUNDS`] times (after one untimed pass):
/// a drift in the machine's speed — minutes apart, the same binary here ran 40 % slower —
/// then falls on both stores alike instead of on whichever was timed second. SQLite is timed
/// twice per query: with its memo emptied first (the postings read from the file, as the
/// first time a server meets the query's terms) and then again (from its memo, as a server
/// answers terms it has met); PostgreSQL too: the statement with its remembered answers
/// forgotten (its shared buffers warm), then the answer it remembered.
fn bm25_side_by_side(
    sqlite: &SqliteStore,
    pg: &PgStore,
    queries: &[(String, Vec<f32>)],
) -> anyhow::Result<SideBySide> {
    let f = Filter::default();
    for (q, _) in queries {
        sqlite.bm25_search(q, 100, &f)?;
        pg.bm25_search(q, 100, &f)?;
    }
    let time = |store: &dyn Store, q: &str| -> anyhow::Result<f64> {
        let t = Instant::now();
        std::hint::black_box(store.bm25_search(q, 100, &f)?);
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    };
    let mut out = SideBySide::default();
    for round in 0..SIDE_BY_SIDE_ROUNDS {
        for (i, (q, _)) in queries.iter().enumerate() {
            let pg_first = (i + round) % 2 == 1;
            let mut postgres = || -> anyhow::Result<()> {
                pg.forget_remembered();
                out.postgres_cold_ms.push(time(pg, q)?);
                out.postgres_ms.push(time(pg, q)?);
                Ok(())
            };
            if pg_first {
                postgres()?;
            }
            sqlite.forget_remembered();
            out.sqlite_cold_ms.push(time(sqlite, q)?);
            out.sqlite_ms.push(time(sqlite, q)?);
            if !pg_first {
                postgres()?;
            }
        }
    }
    Ok(out)
}

/// Documents written per transaction (`Store::apply_documents`): a bulk load, as an ingest of
/// a large folder would write it.
const BATCH_DOCS: usize = 250;

/// The marker written next to a complete store: its build time.
fn marker(path: &Path) -> PathBuf {
    path.with_extension("sqlite.complete.json")
}

/// Build the store of `n` chunks at `path` (or reuse a complete one); its ingest seconds.
fn build_or_reuse(
    a: &Args,
    corpus: &SyntheticCorpus,
    n: usize,
    path: &Path,
) -> anyhow::Result<f64> {
    if !a.rebuild {
        if let Ok(text) = std::fs::read_to_string(marker(path)) {
            let v: Value = serde_json::from_str(&text)?;
            if let Some(s) = v["ingest_s"].as_f64() {
                eprintln!("{n} chunks: reusing {} (built in {s:.0} s)", path.display());
                return Ok(s);
            }
        }
    }
    let _ = std::fs::remove_file(marker(path));
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
    }
    let store = SqliteStore::open(path).with_context(|| format!("creating {}", path.display()))?;
    // A bulk load, as `bib ingest` runs one.
    store.set_bulk_writes(true);
    let t = Instant::now();
    let mut done = 0usize;
    let mut docs = corpus.documents(n).peekable();
    while docs.peek().is_some() {
        let batch: Vec<DocumentChange> = docs.by_ref().take(BATCH_DOCS).collect();
        store
            .apply_documents(&batch)
            .with_context(|| format!("writing {} and the rest of its batch", batch[0].path))?;
        done += batch.iter().map(|d| d.upserts.len()).sum::<usize>();
        let s = t.elapsed().as_secs_f64();
        eprint!(
            "\r{n} chunks: {done} written, {:.0} chunks/s   ",
            done as f64 / s.max(1e-9)
        );
    }
    store.set_bulk_writes(false);
    store.optimize()?;
    drop(store);
    let s = t.elapsed().as_secs_f64();
    eprintln!(
        "\r{n} chunks: built in {s:.0} s ({:.0} chunks/s)",
        n as f64 / s
    );
    std::fs::write(
        marker(path),
        json!({"ingest_s": s, "chunks": n}).to_string(),
    )?;
    Ok(s)
}

fn disk_mib(path: &Path) -> f64 {
    ["", "-wal"]
        .iter()
        .filter_map(|ext| std::fs::metadata(format!("{}{ext}", path.display())).ok())
        .map(|m| m.len() as f64)
        .sum::<f64>()
        / (1 << 20) as f64
}

/// The exact top-10 ids of every query: cosine against every stored vector, ties by id.
fn exact_top10(
    store: &dyn Store,
    queries: &[(String, Vec<f32>)],
) -> anyhow::Result<Vec<Vec<ChunkId>>> {
    let qs: Vec<Vec<f32>> = queries.iter().map(|(_, v)| unit(v)).collect();
    let mut best: Vec<Vec<(f32, ChunkId)>> = vec![Vec::new(); qs.len()];
    let ids = store.chunk_ids()?;
    for batch in ids.chunks(8192) {
        let vs: Vec<(ChunkId, Vec<f32>)> = store
            .get_vectors(batch)?
            .into_iter()
            .map(|(id, v)| (id, unit(&v)))
            .collect();
        let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
        let per = qs.len().div_ceil(threads).max(1);
        std::thread::scope(|s| {
            for (qpart, bpart) in qs.chunks(per).zip(best.chunks_mut(per)) {
                let vs = &vs;
                s.spawn(move || {
                    for (q, b) in qpart.iter().zip(bpart) {
                        for (id, v) in vs {
                            if v.len() == q.len() {
                                b.push((bib_text::vectors::dot(q, v), *id));
                            }
                        }
                        if b.len() > 10 {
                            b.select_nth_unstable_by(9, by_score_then_id);
                            b.truncate(10);
                        }
                    }
                });
            }
        });
    }
    Ok(best
        .into_iter()
        .map(|mut b| {
            b.sort_unstable_by(by_score_then_id);
            b.into_iter().map(|(_, id)| id).collect()
        })
        .collect())
}

fn by_score_then_id(x: &(f32, ChunkId), y: &(f32, ChunkId)) -> std::cmp::Ordering {
    y.0.total_cmp(&x.0).then(x.1.cmp(&y.1))
}

/// Peak RSS and wall time of a fresh `bib ask`, peak RSS of `bib serve` after asks.
fn processes(path: &Path, queries: &[(String, Vec<f32>)], row: &mut Row) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating the bib binary")?;
    let store = path.to_string_lossy().to_string();
    let t = Instant::now();
    let out = Command::new(&exe)
        .args([
            "ask",
            &queries[0].0,
            "--store",
            &store,
            "--json",
            "--no-log",
        ])
        .stdin(Stdio::null())
        .output()
        .context("running bib ask")?;
    if !out.status.success() {
        eprintln!(
            "bib ask failed ({}); skipping the process figures (is the model installed? \
             `bib model install`):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return Ok(());
    }
    row.ask_wall_s = Some(t.elapsed().as_secs_f64());
    row.ask_rss_mib = children_peak_rss_mib();

    let mut child = Command::new(&exe)
        .args(["serve", "--store", &store, "--addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting bib serve")?;
    let result = (|| -> anyhow::Result<f64> {
        let stdout = child.stdout.take().context("bib serve's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .with_context(|| format!("bib serve printed {line:?}"))?
            .parse()
            .context("bib serve's address")?;
        let mut conn = Conn::new(addr);
        for (q, _) in queries.iter().take(20) {
            let body = json!({"query": q}).to_string();
            let (status, _) = conn.post("/ask", &body, false)?;
            if status != 200 {
                bail!("bib serve answered {status} to an ask");
            }
        }
        peak_rss_mib_of(child.id()).context("reading bib serve's peak RSS")
    })();
    let _ = child.kill();
    let _ = child.wait();
    row.serve_rss_mib = Some(result?);
    Ok(())
}

/// `VmHWM` of a running process, in MiB.
fn peak_rss_mib_of(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// The largest peak RSS among this process's waited-for children, in MiB (so the sizes run
/// smallest first, and the `bib ask` of a size is its largest child yet).
#[allow(unsafe_code)]
fn children_peak_rss_mib() -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes one `rusage` into the pointer it is given, which points to
    // memory of that type and size.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: a zero return means the structure was filled in.
    let usage = unsafe { usage.assume_init() };
    Some(usage.ru_maxrss as f64 / 1024.0)
}

fn print_report(rows: &[Row]) {
    let p = |v: &[f64], q: f64| percentile(v, q);
    let opt = |x: Option<f64>, d: usize| x.map_or("—".to_string(), |x| format!("{x:.d$}"));
    println!(
        "\n{:>9} {:>9} {:>9} {:>8} {:>15} {:>15} {:>15} {:>9} {:>9} {:>8} {:>9}",
        "chunks",
        "chunks/s",
        "disk MiB",
        "load s",
        "bm25 p50/p99",
        "vector p50/p99",
        "hybrid p50/p99",
        "recall@10",
        "ask MiB",
        "ask s",
        "serve MiB"
    );
    for r in rows {
        println!(
            "{:>9} {:>9.0} {:>9.0} {:>8.2} {:>7.2}/{:>7.2} {:>7.2}/{:>7.2} {:>7.2}/{:>7.2} {:>9.4} {:>9} {:>8} {:>9}",
            r.chunks,
            r.chunks as f64 / r.ingest_s.max(1e-9),
            r.disk_mib,
            r.index_load_s,
            p(&r.times.bm25, 50.0),
            p(&r.times.bm25, 99.0),
            p(&r.times.vector, 50.0),
            p(&r.times.vector, 99.0),
            p(&r.times.hybrid, 50.0),
            p(&r.times.hybrid, 99.0),
            r.recall10,
            opt(r.ask_rss_mib, 0),
            opt(r.ask_wall_s, 2),
            opt(r.serve_rss_mib, 0),
        );
    }
    for r in rows {
        if let Some((t, recall)) = &r.pg {
            println!(
                "{:>9} {:>9} {:>9} {:>8} {:>7.2}/{:>7.2} {:>7.2}/{:>7.2} {:>7.2}/{:>7.2} {:>9.4}   (postgres, hnsw)",
                r.chunks,
                "—",
                "—",
                "—",
                p(&t.bm25, 50.0),
                p(&t.bm25, 99.0),
                p(&t.vector, 50.0),
                p(&t.vector, 99.0),
                p(&t.hybrid, 50.0),
                p(&t.hybrid, 99.0),
                recall,
            );
        }
    }
    for r in rows {
        if let Some(sbs) = &r.bm25_side_by_side {
            let (warm, cold) = sbs.ratios_of_p50s();
            println!(
                "\n{} chunks, BM25 top 100 side by side ({} timings each, interleaved per query), p50/p99 ms:\n  \
                 first time:     PostgreSQL statement {:.2}/{:.2} · SQLite, postings read from the file {:.2}/{:.2} ({cold:.2}×)\n  \
                 asked before:   PostgreSQL, answer remembered {:.2}/{:.2} · SQLite, postings remembered {:.2}/{:.2} ({warm:.2}×)",
                r.chunks,
                sbs.sqlite_ms.len(),
                p(&sbs.postgres_cold_ms, 50.0),
                p(&sbs.postgres_cold_ms, 99.0),
                p(&sbs.sqlite_cold_ms, 50.0),
                p(&sbs.sqlite_cold_ms, 99.0),
                p(&sbs.postgres_ms, 50.0),
                p(&sbs.postgres_ms, 99.0),
                p(&sbs.sqlite_ms, 50.0),
                p(&sbs.sqlite_ms, 99.0),
            );
        }
    }
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return;
    };
    if rows.len() < 2 {
        return;
    }
    let growth = last.chunks as f64 / first.chunks as f64;
    println!(
        "\ncost growth from {} to {} chunks ({growth:.0}× the data):",
        first.chunks, last.chunks
    );
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.2}×", a / b)
        } else {
            "—".into()
        }
    };
    let items: Vec<(&str, f64, f64)> = vec![
        ("ingest time", last.ingest_s, first.ingest_s),
        ("disk size", last.disk_mib, first.disk_mib),
        ("index load", last.index_load_s, first.index_load_s),
        (
            "bm25 p50",
            p(&last.times.bm25, 50.0),
            p(&first.times.bm25, 50.0),
        ),
        (
            "vector p50",
            p(&last.times.vector, 50.0),
            p(&first.times.vector, 50.0),
        ),
        (
            "hybrid p50",
            p(&last.times.hybrid, 50.0),
            p(&first.times.hybrid, 50.0),
        ),
        (
            "hybrid p99",
            p(&last.times.hybrid, 99.0),
            p(&first.times.hybrid, 99.0),
        ),
        (
            "ask peak RSS",
            last.ask_rss_mib.unwrap_or(0.0),
            first.ask_rss_mib.unwrap_or(0.0),
        ),
        (
            "serve peak RSS",
            last.serve_rss_mib.unwrap_or(0.0),
            first.serve_rss_mib.unwrap_or(0.0),
        ),
    ];
    for (name, a, b) in items {
        println!("  {name:<15} {}", ratio(a, b));
    }
}
