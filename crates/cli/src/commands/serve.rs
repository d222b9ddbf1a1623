//! `bib serve` — the HTTP API and MCP over streamable HTTP (`/mcp`) in one process.
//!
//! Binds 127.0.0.1:8080 by default; prints `listening on http://ADDR` on stdout once bound
//! (with `--addr 127.0.0.1:0` the OS picks the port). Writes (`POST /docs`, `POST /chunks`,
//! the `bib_register_doc` / `bib_index_chunks` tools) need `BIB_TOKEN` (or `--token-file`);
//! a non-loopback address refuses to start without one and then requires it everywhere.
//! Logs go to stderr (`BIB_LOG=debug` for more).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use bib_server::{HttpOptions, Service, TokenCheck};
use bib_store::Store;

use crate::settings::SettingsArgs;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  bib serve                                    http://127.0.0.1:8080, MCP at /mcp
  BIB_TOKEN=secret bib serve --addr 0.0.0.0:8080 --allowed-host kb.internal
  curl -s localhost:8080/ask -d '{\"query\": \"sign a package\", \"trim\": true}'")]
pub struct Args {
    /// Address to listen on (a non-loopback address requires a token)
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    #[command(flatten)]
    pub common: CommonArgs,
    /// Largest request body, in bytes
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub body_limit: usize,
    /// Per-request timeout, in seconds
    #[arg(long, default_value_t = 60.0)]
    pub timeout_secs: f64,
    /// Requests handled at once (more wait for a slot within the timeout)
    #[arg(long, default_value_t = 64)]
    pub max_in_flight: usize,
    /// Extra Host header value accepted on every route (DNS-rebinding guard; localhost,
    /// 127.0.0.1 and [::1] always are): `name` for any port or `name:port`; repeatable
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
}

/// Options shared by `bib serve` and `bib mcp`.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Read the write token from this file instead of BIB_TOKEN
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Do not load the embedding model (keyword search only; writes and trimming unavailable)
    #[arg(long)]
    pub no_model: bool,
}

fn env_var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|s| !s.is_empty())
}

/// The configured token: `--token-file`, else `BIB_TOKEN`.
pub fn token(common: &CommonArgs) -> anyhow::Result<Option<String>> {
    match &common.token_file {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read token file {}", p.display()))?;
            Ok(Some(t.trim().to_string()))
        }
        None => Ok(env_var("BIB_TOKEN")),
    }
}

/// Open the store and the model and build the service.
pub fn build_service(common: &CommonArgs, tokens: TokenCheck) -> anyhow::Result<Arc<Service>> {
    let settings = common.settings.resolve(|_| ())?;
    let store: Arc<dyn Store> = Arc::from(settings.store.open_existing()?);
    let model_id = super::ask::store_model(store.as_ref())?;
    let embedder: Result<Arc<dyn bib_embed::Embedder>, String> = if common.no_model {
        Err("started with --no-model".to_string())
    } else {
        match super::ask::load_embedder(&model_id) {
            Ok(e) => Ok(Arc::from(e)),
            Err(e) => {
                eprintln!("warning: {e:#}; serving BM25 only");
                Err(format!("{e:#}"))
            }
        }
    };
    Ok(Arc::new(Service::new(store, embedder, settings, tokens)))
}

pub fn run(a: Args) -> anyhow::Result<()> {
    bib_server::init_logging();
    let public = !a.addr.ip().is_loopback();
    let tokens = TokenCheck::new(token(&a.common)?.as_deref(), public)?;
    if !(a.timeout_secs.is_finite() && a.timeout_secs > 0.0) {
        bail!("--timeout-secs must be a positive number");
    }
    let service = build_service(&a.common, tokens)?;
    let opts = HttpOptions {
        body_limit: a.body_limit,
        timeout: Duration::from_secs_f64(a.timeout_secs),
        max_in_flight: a.max_in_flight,
        allowed_hosts: a.allowed_hosts.clone(),
        // Loopback: every route checks Host (DNS rebinding). Public binds need the token on
        // every request instead (and /mcp keeps its own Host check).
        check_host: !public,
    };
    bib_server::http::serve_blocking(service, a.addr, opts, |addr| {
        use std::io::Write;
        println!("listening on http://{addr}");
        let _ = std::io::stdout().flush();
    })?;
    Ok(())
}
