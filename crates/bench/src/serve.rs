//! `bib bench serve` — load test of `bib serve` on loopback: N concurrent keep-alive clients
//! ask for T seconds while W writers register documents; reports requests/s, latency
//! percentiles, errors, and lost writes (registrations acknowledged but absent afterwards).
//!
//! Bounded in count and time (≤ 1000 clients, ≤ 600 s) and loopback only: the server runs in
//! this process on 127.0.0.1 with an ephemeral port, on a *copy* of the given store, so the
//! original knowledge base is never written.
//!
//! ```text
//! bib ingest /work/shared/bench/data/wiki/nuget-en --store /tmp/nuget-en.sqlite
//! bib bench serve --store /tmp/nuget-en.sqlite --questions /work/shared/bench/data/wiki/golden_en.jsonl
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bib_app::{Settings, StoreSpec};
use bib_eval::stats::percentile;
use bib_server::{HttpOptions, Service, TokenCheck};
use bib_store::{SqliteStore, Store};
use serde_json::{json, Value};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Knowledge base to serve (copied to a temporary directory first).
    #[arg(long)]
    pub store: PathBuf,
    /// Concurrent asking clients (keep-alive connections).
    #[arg(long, default_value_t = 200)]
    pub clients: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 60)]
    pub secs: u64,
    /// Concurrent writers registering documents during the load (0 = asks only).
    #[arg(long, default_value_t = 4)]
    pub writers: usize,
    /// Writers also chunk and embed what they register (`index: true`).
    #[arg(long)]
    pub index_writes: bool,
    /// Questions: a JSONL file with a `question` field per line, or a text file (one per
    /// line) [default: document titles of the store]
    #[arg(long)]
    pub questions: Option<PathBuf>,
    /// Ask with sentence trimming.
    #[arg(long)]
    pub trim: bool,
    /// Server: requests handled at once.
    #[arg(long, default_value_t = 64)]
    pub max_in_flight: usize,
    /// Server: per-request timeout in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub timeout_secs: f64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

const TOKEN: &str = "bench-serve-token-0123456789";

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A keep-alive HTTP/1.1 connection that sends JSON and reads `Content-Length` bodies.
pub(crate) struct Conn {
    addr: SocketAddr,
    reader: Option<BufReader<TcpStream>>,
}

impl Conn {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        Self { addr, reader: None }
    }

    pub(crate) fn post(
        &mut self,
        path: &str,
        body: &str,
        auth: bool,
    ) -> std::io::Result<(u16, Vec<u8>)> {
        for attempt in 0..2 {
            if self.reader.is_none() {
                let s = TcpStream::connect(self.addr)?;
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(Duration::from_secs(120)))?;
                self.reader = Some(BufReader::new(s));
            }
            match self.try_post(path, body, auth) {
                Ok(r) => return Ok(r),
                Err(e) => {
                    self.reader = None;
                    if attempt == 1 {
                        return Err(e);
                    }
                }
            }
        }
        unreachable!("the loop returns")
    }

    fn try_post(&mut self, path: &str, body: &str, auth: bool) -> std::io::Result<(u16, Vec<u8>)> {
        let r = self.reader.as_mut().expect("connected");
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
        if auth {
            req.push_str(&format!("Authorization: Bearer {TOKEN}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        r.get_mut().write_all(req.as_bytes())?;
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed",
            ));
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut len = 0usize;
        let mut close = false;
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let lower = l.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("connection:") && lower.contains("close") {
                close = true;
            }
        }
        let mut buf = vec![0u8; len];
        r.read_exact(&mut buf)?;
        if close {
            self.reader = None;
        }
        Ok((status, buf))
    }
}

fn load_questions(a: &Args, store: &dyn Store) -> anyhow::Result<Vec<String>> {
    let qs: Vec<String> = match &a.questions {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| match serde_json::from_str::<Value>(l) {
                    Ok(v) => v["question"].as_str().unwrap_or(l).to_string(),
                    Err(_) => l.trim().to_string(),
                })
                .collect()
        }
        None => store
            .documents()?
            .into_iter()
            .map(|d| d.title)
            .filter(|t| !t.trim().is_empty())
            .take(200)
            .collect(),
    };
    if qs.is_empty() {
        bail!("no questions (empty store and no --questions)");
    }
    Ok(qs)
}

/// The service `bib serve --store <store>` would run: settings from the environment and
/// `bib.toml` as usual, the store's own model (BM25 only, with a warning, when it cannot load).
fn open_service(store: &std::path::Path, tokens: TokenCheck) -> anyhow::Result<Arc<Service>> {
    let settings = Settings::resolve(None, &|k| std::env::var(k).ok(), |s| {
        s.store = StoreSpec::Sqlite(store.to_path_buf());
    })?;
    let store: Arc<dyn Store> = Arc::from(settings.store.open_existing()?);
    Ok(Arc::new(Service::with_store_model(
        store,
        settings,
        tokens,
        true,
        |why| eprintln!("warning: {why}; serving BM25 only"),
    )?))
}

/// What the asking clients and the writers share: the stop flag and what they measured.
#[derive(Clone, Default)]
struct LoadCounters {
    stop: Arc<AtomicBool>,
    /// Milliseconds of every successful ask.
    latencies: Arc<Mutex<Vec<f64>>>,
    /// Failed asks by `<status> <error code>` or `io <kind>`.
    errors: Arc<Mutex<BTreeMap<String, u64>>>,
    /// Milliseconds of every acknowledged registration.
    write_lat: Arc<Mutex<Vec<f64>>>,
    /// Paths of the acknowledged registrations.
    acked: Arc<Mutex<Vec<String>>>,
    write_errors: Arc<AtomicU64>,
}

/// What one load test measured, for the report.
struct LoadOutcome {
    /// Seconds from the first client's start to the last thread's end.
    wall: f64,
    docs_before: usize,
    questions: usize,
    latencies: Vec<f64>,
    write_lat: Vec<f64>,
    errors: BTreeMap<String, u64>,
    acked: usize,
    write_errors: u64,
    lost: usize,
    store_coherent: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    check_bounds_and_store(&a)?;
    // Work on a copy (with its WAL) in a private temporary directory, removed at the end.
    let tmp = std::env::temp_dir().join(format!("bib-bench-serve-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let _cleanup = RemoveOnDrop(tmp.clone());
    let copy = tmp.join("kb.sqlite");
    copy_store_with_its_wal(&a.store, &copy)?;
    let service = open_service(&copy, TokenCheck::new(Some(TOKEN), false)?)?;
    let questions = Arc::new(load_questions(&a, service.store())?);
    let docs_before = service.store().documents()?.len();
    let opts = HttpOptions {
        max_in_flight: a.max_in_flight,
        timeout: Duration::from_secs_f64(a.timeout_secs),
        ..HttpOptions::default()
    };

    // The server, in this process, on loopback.
    let server = bib_server::http::spawn_loopback(service.clone(), opts)?;
    let addr = server.addr;

    eprintln!(
        "bench serve: {} clients + {} writers for {} s against {} ({} documents, {} questions) on {addr}",
        a.clients, a.writers, a.secs, a.store.display(), docs_before, questions.len()
    );
    let counters = LoadCounters::default();
    let t0 = Instant::now();
    let handles = spawn_clients_and_writers(&a, addr, &counters, &questions)?;
    std::thread::sleep(Duration::from_secs(a.secs));
    counters.stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let wall = t0.elapsed().as_secs_f64();
    server.stop()?;
    drop(service);

    // Lost writes: acknowledged registrations missing from a fresh connection's view.
    let after = SqliteStore::open(&copy)?;
    let present: std::collections::HashSet<String> =
        after.documents()?.into_iter().map(|d| d.path).collect();
    let acked = counters.acked.lock().unwrap();
    let lost = acked.iter().filter(|p| !present.contains(*p)).count();
    let audit = after.audit()?;

    let outcome = LoadOutcome {
        wall,
        docs_before,
        questions: questions.len(),
        latencies: counters.latencies.lock().unwrap().clone(),
        write_lat: counters.write_lat.lock().unwrap().clone(),
        errors: counters.errors.lock().unwrap().clone(),
        acked: acked.len(),
        write_errors: counters.write_errors.load(Ordering::Relaxed),
        lost,
        store_coherent: audit.coherent,
    };
    print_report(&a, &outcome)?;
    if lost > 0 {
        bail!("{lost} acknowledged writes are missing from the store");
    }
    Ok(())
}

/// The bounds of `--clients`, `--secs` and `--writers`, and a knowledge base at `--store`.
fn check_bounds_and_store(a: &Args) -> anyhow::Result<()> {
    if a.clients == 0 || a.clients > 1000 {
        bail!("--clients must be in 1..=1000");
    }
    if a.secs == 0 || a.secs > 600 {
        bail!("--secs must be in 1..=600");
    }
    if a.writers > 64 {
        bail!("--writers must be at most 64");
    }
    if !a.store.is_file() {
        bail!(
            "no knowledge base at {} (run `bib ingest <dir> --store {}` first)",
            a.store.display(),
            a.store.display()
        );
    }
    Ok(())
}

/// Copy the store at `store` (opened once first) and its `-wal` / `-shm` files to `copy`.
fn copy_store_with_its_wal(store: &Path, copy: &Path) -> anyhow::Result<()> {
    let src = SqliteStore::open(store).with_context(|| format!("opening {}", store.display()))?;
    drop(src);
    std::fs::copy(store, copy)?;
    for ext in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{}{ext}", store.display()));
        if side.is_file() {
            std::fs::copy(&side, PathBuf::from(format!("{}{ext}", copy.display())))?;
        }
    }
    Ok(())
}

/// Start `--clients` asking clients and `--writers` writers against `addr`, sharing
/// `counters`.
fn spawn_clients_and_writers(
    a: &Args,
    addr: SocketAddr,
    counters: &LoadCounters,
    questions: &Arc<Vec<String>>,
) -> anyhow::Result<Vec<std::thread::JoinHandle<()>>> {
    let mut handles = Vec::new();
    for c in 0..a.clients {
        let (shared, questions) = (counters.clone(), questions.clone());
        let trim = a.trim;
        handles.push(
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || ask_until_stopped(c, addr, trim, &shared, &questions))?,
        );
    }
    for w in 0..a.writers {
        let shared = counters.clone();
        let index = a.index_writes;
        handles.push(std::thread::spawn(move || {
            register_until_stopped(w, addr, index, &shared)
        }));
    }
    Ok(handles)
}

/// One asking client: ask question `first`, then every 7th one on, over one keep-alive
/// connection until stopped; record latencies and errors in `shared`.
fn ask_until_stopped(
    first: usize,
    addr: SocketAddr,
    trim: bool,
    shared: &LoadCounters,
    questions: &[String],
) {
    let (stop, latencies, errors) = (&shared.stop, &shared.latencies, &shared.errors);
    let mut conn = Conn::new(addr);
    let mut local = Vec::new();
    let mut i = first;
    while !stop.load(Ordering::Relaxed) {
        let q = &questions[i % questions.len()];
        i += 7;
        let body = json!({"query": q, "top_k": 5, "trim": trim}).to_string();
        let t = Instant::now();
        match conn.post("/ask", &body, false) {
            Ok((200, _)) => local.push(t.elapsed().as_secs_f64() * 1000.0),
            Ok((st, b)) => {
                let code = serde_json::from_slice::<Value>(&b)
                    .ok()
                    .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
                    .unwrap_or_default();
                *errors
                    .lock()
                    .unwrap()
                    .entry(format!("{st} {code}"))
                    .or_default() += 1;
            }
            Err(e) => {
                *errors
                    .lock()
                    .unwrap()
                    .entry(format!("io {}", e.kind()))
                    .or_default() += 1
            }
        }
    }
    latencies.lock().unwrap().extend(local);
}

/// One writer `w`: register documents `bench-writes/w<w>/doc-<n>.md` (`index` as given) until
/// stopped; record the acknowledged ones and the failures in `shared`.
fn register_until_stopped(w: usize, addr: SocketAddr, index: bool, shared: &LoadCounters) {
    let (stop, acked, write_lat, write_errors) = (
        &shared.stop,
        &shared.acked,
        &shared.write_lat,
        &shared.write_errors,
    );
    let mut conn = Conn::new(addr);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let path = format!("bench-writes/w{w}/doc-{n}.md");
        let body = json!({
            "path": path,
            "content": format!("---\ntitle: Bench {w}-{n}\n---\n# Bench {w}-{n}\n\nWriter {w} wrote document {n} while clients asked questions.\n"),
            "index": index,
        })
        .to_string();
        let t = Instant::now();
        match conn.post("/docs", &body, true) {
            Ok((200 | 201, _)) => {
                write_lat
                    .lock()
                    .unwrap()
                    .push(t.elapsed().as_secs_f64() * 1000.0);
                acked.lock().unwrap().push(path);
            }
            _ => {
                write_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        n += 1;
    }
}

/// Print the report: as JSON with `--json`, else two summary lines (and the errors by kind).
fn print_report(a: &Args, o: &LoadOutcome) -> anyhow::Result<()> {
    let (lat, wall, errors) = (&o.latencies, o.wall, &o.errors);
    let (ask_p50, ask_p99) = (percentile(lat, 50.0), percentile(lat, 99.0));
    let ask_max = percentile(lat, 100.0);
    let wl = &o.write_lat;
    let (write_p50, write_p99) = (percentile(wl, 50.0), percentile(wl, 99.0));
    let n_err: u64 = errors.values().sum();
    let report = json!({
        "clients": a.clients,
        "writers": a.writers,
        "index_writes": a.index_writes,
        "trim": a.trim,
        "secs": wall,
        "documents_before": o.docs_before,
        "questions": o.questions,
        "asks_ok": lat.len(),
        "asks_per_sec": lat.len() as f64 / wall,
        "ask_p50_ms": ask_p50,
        "ask_p99_ms": ask_p99,
        "ask_max_ms": ask_max,
        "ask_errors": n_err,
        "ask_errors_by_kind": errors,
        "writes_acked": o.acked,
        "writes_per_sec": o.acked as f64 / wall,
        "write_p50_ms": write_p50,
        "write_p99_ms": write_p99,
        "write_errors": o.write_errors,
        "lost_writes": o.lost,
        "store_coherent": o.store_coherent,
        "max_in_flight": a.max_in_flight,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "asks: {} ok in {:.1} s = {:.1} req/s · p50 {:.1} ms · p99 {:.1} ms · max {:.1} ms · errors {}",
            lat.len(), wall, lat.len() as f64 / wall, ask_p50, ask_p99,
            ask_max, n_err
        );
        if !errors.is_empty() {
            println!("  errors by kind: {errors:?}");
        }
        println!(
            "writes: {} acknowledged ({:.1}/s, p50 {:.1} ms, p99 {:.1} ms), {} failed, {} lost · store coherent: {}",
            o.acked, o.acked as f64 / wall, write_p50, write_p99,
            o.write_errors, o.lost, o.store_coherent
        );
    }
    Ok(())
}
