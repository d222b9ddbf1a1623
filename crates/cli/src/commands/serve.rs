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
  bib serve --allow-origin http://localhost:3000  pages of that origin may read answers (widget)
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
    /// Requests handled at once, MCP tool calls included (more wait for a slot within the
    /// timeout)
    #[arg(long, default_value_t = 64)]
    pub max_in_flight: usize,
    /// Extra Host header value accepted on every route (DNS-rebinding guard; localhost,
    /// 127.0.0.1 and [::1] always are): `name` for any port or `name:port`; repeatable
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// Origin (scheme://host[:port]) whose pages may read answers across origins, as the
    /// help widget (/widget.js) embedded in that site does; repeatable; none by default
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
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
    service_with(common, tokens, settings)
}

/// [`build_service`] with settings already resolved.
fn service_with(
    common: &CommonArgs,
    tokens: TokenCheck,
    settings: bib_app::Settings,
) -> anyhow::Result<Arc<Service>> {
    let store: Arc<dyn Store> = Arc::from(settings.store.open_existing()?);
    Ok(Arc::new(Service::with_store_model(
        store,
        settings,
        tokens,
        !common.no_model,
        |why| eprintln!("warning: {why}; serving BM25 only"),
    )?))
}

pub fn run(a: Args) -> anyhow::Result<()> {
    bib_server::init_logging();
    let public = !a.addr.ip().is_loopback();
    let tokens = TokenCheck::new(token(&a.common)?.as_deref(), public)?;
    if !(a.timeout_secs.is_finite() && a.timeout_secs > 0.0) {
        bail!("--timeout-secs must be a positive number");
    }
    let settings = a.common.settings.resolve(|s| {
        if !a.allow_origins.is_empty() {
            s.serve.allow_origins = a.allow_origins.clone();
        }
    })?;
    let allowed_origins = settings.serve.allow_origins.clone();
    bib_server::cors::Origins::parse(&allowed_origins)
        .context("--allow-origin / serve.allow_origins")?;
    let service = service_with(&a.common, tokens, settings)?;
    let opts = HttpOptions {
        body_limit: a.body_limit,
        timeout: Duration::from_secs_f64(a.timeout_secs),
        max_in_flight: a.max_in_flight,
        allowed_hosts: a.allowed_hosts.clone(),
        // Loopback: every route checks Host (DNS rebinding). Public binds need the token on
        // every request instead (and /mcp keeps its own Host check).
        check_host: !public,
        allowed_origins,
    };
    bib_server::http::serve_blocking(service, a.addr, opts, |addr| {
        use std::io::Write;
        println!("listening on http://{addr}");
        let _ = std::io::stdout().flush();
    })?;
    Ok(())
}
