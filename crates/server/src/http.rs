//! `bib serve`: the HTTP API and the streamable-HTTP MCP endpoint in one axum app.
//!
//! Routes (all JSON; described at `GET /openapi.json`):
//! `POST /ask`, `POST /pack`, `POST /eval`, `POST /docs` (register, token), `POST /chunks`
//! (index, token), `GET /docs/{node_id}`, `GET /docs/{path}?from=&to=&collection=` (a
//! document's lines), `GET /runs?limit=N`, `GET /healthz`, and MCP at
//! `/mcp`. Errors are `{"error": {"code", "message", "field"?}}` ([`crate::error`]).
//!
//! Protections, applied to every route: a request-body size limit, a per-request timeout (the
//! time to produce the response), a bound on requests in flight (waiting for a slot counts
//! against the timeout; a request that gets none answers `503 overloaded`), and on non-loopback
//! binds a bearer token for everything but `/healthz`.
//!
//! On loopback binds every route (REST and `/mcp`) checks the `Host` header against an
//! allow-list — `localhost`, `127.0.0.1`, `[::1]` with any port, plus `--allowed-host` values —
//! and answers `403 forbidden` otherwise: a DNS-rebinding page (`evil.example.com` resolving
//! to 127.0.0.1) reaches the socket but not the knowledge base.
//!
//! A timeout cancels the work: the handler's [`Work`] is cancelled, the operation stops at its
//! next check and writes nothing, and the client gets `504 timeout`. If the operation already
//! started its write, the guard waits for it and answers the real result, so a 504 always
//! means "nothing was written" (see [`crate::work`]).
//!
//! `/mcp` tool calls answer on an SSE stream whose headers go out before the call runs, so the
//! guard's own timer never sees them finish late. The [`Work`] carries the deadline instead,
//! and the tool call enforces it ([`crate::mcp`]): past it, the work is cancelled the same
//! way and the call answers a `timeout` tool error (`isError: true`), nothing written.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::args::decode_body;
use crate::error::{ErrorCode, ServiceError};
use crate::mcp::BibMcp;
use crate::service::Service;
use crate::work::Work;
use crate::ServerError;

/// Limits and binding of the HTTP server.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest request body accepted (bytes).
    pub body_limit: usize,
    /// Longest time to produce a response.
    pub timeout: Duration,
    /// Requests handled at once; more wait (within the timeout) for a slot.
    pub max_in_flight: usize,
    /// Extra `Host` values accepted (DNS-rebinding protection; loopback names are always
    /// accepted): `name` (any port) or `name:port`. Needed when serving on a public name.
    pub allowed_hosts: Vec<String>,
    /// Check `Host` on every route (on by default; `bib serve` turns it off for non-loopback
    /// binds, where every request needs the token anyway; `/mcp` keeps its own check).
    pub check_host: bool,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            body_limit: 4 * 1024 * 1024,
            timeout: Duration::from_secs(60),
            max_in_flight: 64,
            allowed_hosts: Vec::new(),
            check_host: true,
        }
    }
}

#[derive(Clone)]
struct App {
    service: Arc<Service>,
    slots: Arc<Semaphore>,
    timeout: Duration,
    /// `Some(extra allowed hosts)` when `Host` is checked.
    hosts: Option<Arc<Vec<String>>>,
}

/// The loopback names accepted in `Host` with any port.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Split a `Host` value into lower-cased host and optional port (`[::1]:8080` → `[::1]`,
/// `8080`). `None` when it is not a plausible authority.
fn split_host(value: &str) -> Option<(String, Option<&str>)> {
    let v = value.trim();
    if v.is_empty() || v.contains(['/', '@', ' ', ',']) {
        return None;
    }
    let (host, port) = if v.starts_with('[') {
        let end = v.find(']')?;
        let rest = &v[end + 1..];
        let port = match rest {
            "" => None,
            r => Some(r.strip_prefix(':')?),
        };
        (&v[..=end], port)
    } else {
        match v.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            Some(_) => return None,
            None => (v, None),
        }
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    if host.is_empty() {
        return None;
    }
    Some((host.to_ascii_lowercase(), port))
}

/// Whether a `Host` header value is on the allow-list: a loopback name with any port, or an
/// `extra` entry (`name` with any port, `name:port` exactly).
pub fn host_allowed(value: &str, extra: &[String]) -> bool {
    let Some((host, port)) = split_host(value) else {
        return false;
    };
    let host = host.trim_end_matches('.');
    if LOOPBACK_HOSTS.contains(&host) {
        return true;
    }
    extra.iter().any(|e| match split_host(e) {
        Some((h, None)) => h.trim_end_matches('.') == host,
        Some((h, Some(p))) => h.trim_end_matches('.') == host && port == Some(p),
        None => false,
    })
}

fn check_host(headers: &HeaderMap, extra: &[String]) -> Result<(), ServiceError> {
    let Some(value) = headers.get(header::HOST) else {
        return Err(ServiceError::new(
            ErrorCode::Forbidden,
            "missing Host header (this server checks Host against DNS rebinding)",
        ));
    };
    let value = value.to_str().unwrap_or("");
    if host_allowed(value, extra) {
        return Ok(());
    }
    tracing::info!(host = %value, "refused a request with a Host that is not allowed (DNS rebinding?)");
    Err(ServiceError::new(
        ErrorCode::Forbidden,
        format!(
            "Host `{}` is not allowed: this server answers localhost, 127.0.0.1 and [::1] \
             (add names with --allowed-host)",
            value.chars().take(200).collect::<String>()
        ),
    ))
}

struct ApiError(ServiceError);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = (status, Json(self.0.to_json())).into_response();
        if self.0.code == ErrorCode::Unauthorized {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        r
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        ApiError(e)
    }
}

type ApiResult = Result<Response, ApiError>;

fn bearer_of(headers: &HeaderMap) -> Option<String> {
    let h = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    crate::auth::bearer(Some(h)).map(str::to_string)
}

/// Decode a JSON body into `T`, mapping every failure to a JSON error.
fn body_args<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ServiceError> {
    let bytes = body.map_err(|rej| {
        if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ServiceError::new(
                ErrorCode::PayloadTooLarge,
                "the request body is over the size limit",
            )
        } else {
            ServiceError::invalid("(body)", rej.body_text())
        }
    })?;
    decode_body(&bytes)
}

async fn blocking<T, F>(work: Option<Extension<Arc<Work>>>, f: F) -> ApiResult
where
    T: Serialize + Send + 'static,
    F: FnOnce(&Work) -> Result<T, ServiceError> + Send + 'static,
{
    let work = work.map_or_else(|| Arc::new(Work::unbounded()), |Extension(w)| w);
    match tokio::task::spawn_blocking(move || f(&work)).await {
        Ok(Ok(v)) => Ok(Json(v).into_response()),
        Ok(Err(e)) => Err(ApiError(e)),
        Err(e) => Err(ApiError(ServiceError::internal(format!(
            "the operation failed: {e}"
        )))),
    }
}

async fn ask(
    State(app): State<App>,
    work: Option<Extension<Arc<Work>>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let a = body_args(body)?;
    let s = app.service.clone();
    blocking(work, move |w| s.ask(a, w)).await
}

async fn pack(
    State(app): State<App>,
    work: Option<Extension<Arc<Work>>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let a = body_args(body)?;
    let s = app.service.clone();
    blocking(work, move |w| s.pack(a, w)).await
}

async fn eval(
    State(app): State<App>,
    work: Option<Extension<Arc<Work>>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let a = body_args(body)?;
    let s = app.service.clone();
    blocking(work, move |w| s.eval(a, w)).await
}

async fn register(
    State(app): State<App>,
    work: Option<Extension<Arc<Work>>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let bearer = bearer_of(&headers);
    // Check the token before decoding, so an unauthorized caller learns nothing about the body.
    app.service.tokens().check_mutation(bearer.as_deref())?;
    let a = body_args(body)?;
    let s = app.service.clone();
    let work = work.map_or_else(|| Arc::new(Work::unbounded()), |Extension(w)| w);
    match tokio::task::spawn_blocking(move || s.register_doc(a, bearer.as_deref(), &work)).await {
        Ok(Ok(v)) => {
            let status = if v.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok((status, Json(v)).into_response())
        }
        Ok(Err(e)) => Err(ApiError(e)),
        Err(e) => Err(ApiError(ServiceError::internal(format!(
            "the operation failed: {e}"
        )))),
    }
}

async fn index_chunks(
    State(app): State<App>,
    work: Option<Extension<Arc<Work>>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let bearer = bearer_of(&headers);
    app.service.tokens().check_mutation(bearer.as_deref())?;
    let a = body_args(body)?;
    let s = app.service.clone();
    blocking(work, move |w| s.index_chunks(a, bearer.as_deref(), w)).await
}

#[derive(Debug, Deserialize)]
struct LinesQuery {
    from: Option<String>,
    to: Option<String>,
    collection: Option<String>,
}

/// `GET /docs/{node_id}`: the document record with its chunks. `GET /docs/{path}` (a path ends
/// in `.md`, so it is never a number) with optional `from`, `to`, `collection`: its text or
/// those lines, as `bib get` and MCP `bib_get` give them.
async fn get_doc(
    State(app): State<App>,
    Path(rest): Path<String>,
    Query(q): Query<LinesQuery>,
) -> ApiResult {
    let s = app.service.clone();
    let numeric = !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit());
    if numeric && q.from.is_none() && q.to.is_none() {
        let id: i64 = rest
            .parse()
            .map_err(|_| ServiceError::invalid("node_id", format!("`{rest}` is too large")))?;
        return blocking(None, move |_| s.get_doc(id)).await;
    }
    let line = |field: &str, v: Option<String>| -> Result<Option<u32>, ServiceError> {
        v.map(|v| {
            v.parse::<u32>()
                .map_err(|_| ServiceError::invalid(field, format!("`{v}` is not a line number")))
        })
        .transpose()
    };
    let args = crate::args::GetArgs {
        path: rest,
        from: line("from", q.from)?,
        to: line("to", q.to)?,
        collection: q.collection,
    };
    blocking(None, move |_| s.get_lines(args)).await
}

#[derive(Debug, Deserialize)]
struct RunsQuery {
    limit: Option<String>,
}

async fn runs(State(app): State<App>, Query(q): Query<RunsQuery>) -> ApiResult {
    let limit = match q.limit {
        None => 20,
        Some(l) => l.parse().map_err(|_| {
            ServiceError::invalid("limit", format!("`{l}` is not a positive integer"))
        })?,
    };
    let s = app.service.clone();
    blocking(None, move |_| s.runs(limit)).await
}

async fn healthz(State(app): State<App>) -> ApiResult {
    let s = app.service.clone();
    blocking(None, move |_| s.health()).await
}

async fn openapi() -> Response {
    Json(crate::openapi::document()).into_response()
}

async fn not_found(req: Request) -> ApiError {
    ApiError(ServiceError::not_found(format!(
        "no route {} {}",
        req.method(),
        req.uri().path()
    )))
}

/// Host allow-list, token for public binds, a slot among the in-flight requests, and the
/// timeout that cancels the request's [`Work`].
async fn guard(State(app): State<App>, mut req: Request, next: Next) -> Response {
    if let Some(extra) = &app.hosts {
        if let Err(e) = check_host(req.headers(), extra) {
            return ApiError(e).into_response();
        }
    }
    let path = req.uri().path().to_string();
    if path != "/healthz" {
        if let Err(e) = app
            .service
            .tokens()
            .check_read(bearer_of(req.headers()).as_deref())
        {
            return ApiError(e).into_response();
        }
    }
    let ticket = Arc::new(Work::with_timeout(app.timeout));
    req.extensions_mut().insert(ticket.clone());
    let work = async {
        let _permit = match app.slots.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => {
                return ApiError(ServiceError::new(
                    ErrorCode::Overloaded,
                    "server is shutting down",
                ))
                .into_response()
            }
        };
        next.run(req).await
    };
    let mut work = std::pin::pin!(work);
    tokio::select! {
        r = &mut work => r,
        () = tokio::time::sleep(app.timeout) => {
            if !ticket.cancel() {
                // The operation is writing: its result is the truth, wait for it.
                tracing::warn!(path = %path, "request past its timeout is committing; waiting for it");
                return work.await;
            }
            tracing::warn!(path = %path, "request timed out after {:?}; its work is cancelled", app.timeout);
            ApiError(ticket.timeout_error()).into_response()
        }
    }
}

/// The whole app: API routes, `/mcp`, and the protections.
pub fn router(service: Arc<Service>, opts: &HttpOptions, shutdown: CancellationToken) -> Router {
    let app = App {
        service: service.clone(),
        slots: Arc::new(Semaphore::new(opts.max_in_flight.max(1))),
        timeout: opts.timeout,
        hosts: opts
            .check_host
            .then(|| Arc::new(opts.allowed_hosts.clone())),
    };
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(opts.body_limit);
    if !opts.allowed_hosts.is_empty() {
        let mut hosts = mcp_config.allowed_hosts.clone();
        hosts.extend(opts.allowed_hosts.iter().cloned());
        mcp_config = mcp_config.with_allowed_hosts(hosts);
    }
    let mcp_service = {
        let service = service.clone();
        StreamableHttpService::new(
            move || Ok(BibMcp::new(service.clone())),
            Arc::new(LocalSessionManager::default()),
            mcp_config,
        )
    };
    Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
        .route("/ask", post(ask))
        .route("/pack", post(pack))
        .route("/eval", post(eval))
        .route("/docs", post(register))
        .route("/docs/{*path}", get(get_doc))
        .route("/chunks", post(index_chunks))
        .route("/runs", get(runs))
        .nest_service("/mcp", mcp_service)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(opts.body_limit))
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Serve on `listener` until `shutdown` is cancelled (or Ctrl-C / SIGTERM when `signals`).
pub async fn serve(
    service: Arc<Service>,
    listener: tokio::net::TcpListener,
    opts: HttpOptions,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    let app = router(service, &opts, shutdown.clone());
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "serving HTTP API and MCP (/mcp)");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

/// Build a runtime, bind `addr`, call `on_bound` with the bound address, and serve until
/// Ctrl-C or SIGTERM (what `bib serve` runs).
pub fn serve_blocking(
    service: Arc<Service>,
    addr: SocketAddr,
    opts: HttpOptions,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<(), ServerError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        on_bound(listener.local_addr()?);
        let shutdown = CancellationToken::new();
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down");
            on_signal.cancel();
        });
        serve(service, listener, opts, shutdown).await
    })
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// A server running on its own thread and runtime (benchmarks, embedding in tests).
#[derive(Debug)]
pub struct Background {
    pub addr: SocketAddr,
    shutdown: CancellationToken,
    thread: Option<std::thread::JoinHandle<Result<(), ServerError>>>,
}

impl Background {
    /// Stop accepting, finish in-flight requests, and wait for the thread.
    pub fn stop(mut self) -> Result<(), ServerError> {
        self.shutdown.cancel();
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(ServerError::Mcp("server thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serve on 127.0.0.1 with an ephemeral port, on a background thread.
pub fn spawn_loopback(service: Arc<Service>, opts: HttpOptions) -> Result<Background, ServerError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))?;
    let addr = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let thread = std::thread::Builder::new()
        .name("bib-serve".into())
        .spawn(move || rt.block_on(serve(service, listener, opts, stop)))?;
    Ok(Background {
        addr,
        shutdown,
        thread: Some(thread),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{service, FakeEmbedder, TOKEN};
    use axum::body::Body;
    use bib_store::Store;
    use tower::ServiceExt;

    async fn call(
        app: &Router,
        method: &str,
        path: &str,
        host: Option<&str>,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let mut req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
        if let Some(h) = host {
            req = req.header(header::HOST, h);
        }
        let req = req.body(Body::from(body.to_string())).unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        )
    }

    #[test]
    fn host_values() {
        for ok in [
            "localhost",
            "localhost:8080",
            "LOCALHOST:1",
            "127.0.0.1",
            "127.0.0.1:55555",
            "[::1]",
            "[::1]:8080",
            "localhost.",
        ] {
            assert!(host_allowed(ok, &[]), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:8080",
            "127.0.0.1.evil.example.com",
            "localhost.evil.example.com",
            "",
            "::1",
            "[::1]x",
            "127.0.0.1:80:80",
            "127.0.0.1:",
            "user@127.0.0.1",
            "127.0.0.2",
        ] {
            assert!(!host_allowed(bad, &[]), "{bad}");
        }
        let extra = vec!["kb.example".to_string(), "docs.example:8443".to_string()];
        assert!(host_allowed("kb.example:9999", &extra));
        assert!(host_allowed("docs.example:8443", &extra));
        assert!(!host_allowed("docs.example:8444", &extra));
        assert!(!host_allowed("evil.example", &extra));
    }

    /// Issue 14: `POST /ask` with `Host: evil.example.com` answered 200 (DNS rebinding).
    #[tokio::test]
    async fn every_route_refuses_a_foreign_host() {
        let (svc, _) = service(None);
        let app = router(svc, &HttpOptions::default(), CancellationToken::new());
        let ask = serde_json::json!({"query": "restored from the local cache", "mode": "bm25"});
        let (st, v) = call(&app, "POST", "/ask", Some("evil.example.com"), ask.clone()).await;
        assert_eq!(st, 403, "{v}");
        assert_eq!(v["error"]["code"], "forbidden");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("evil.example.com"));
        for (m, p) in [
            ("GET", "/healthz"),
            ("GET", "/runs"),
            ("GET", "/docs/1"),
            ("GET", "/docs/guides/restore.md?from=1&to=2"),
            ("GET", "/openapi.json"),
            ("POST", "/docs"),
            ("POST", "/mcp"),
            ("POST", "/eval"),
            ("GET", "/nowhere"),
        ] {
            let (st, _) = call(
                &app,
                m,
                p,
                Some("evil.example.com:8080"),
                serde_json::json!({}),
            )
            .await;
            assert_eq!(st, 403, "{m} {p}");
        }
        let (st, _) = call(&app, "GET", "/healthz", None, serde_json::json!({})).await;
        assert_eq!(st, 403, "no Host at all");
        for host in ["127.0.0.1:8080", "localhost", "[::1]:1"] {
            let (st, v) = call(&app, "POST", "/ask", Some(host), ask.clone()).await;
            assert_eq!(st, 200, "{host}: {v}");
            assert_eq!(v["results"][0]["path"], "guides/restore.md");
        }
        // Configured names pass; with the check off (public binds) any Host does.
        let opts = HttpOptions {
            allowed_hosts: vec!["kb.example".into()],
            ..HttpOptions::default()
        };
        let (svc, _) = service(None);
        let app = router(svc.clone(), &opts, CancellationToken::new());
        assert_eq!(
            call(&app, "POST", "/ask", Some("kb.example:80"), ask.clone())
                .await
                .0,
            200
        );
        assert_eq!(
            call(&app, "POST", "/ask", Some("evil.example.com"), ask.clone())
                .await
                .0,
            403
        );
        let opts = HttpOptions {
            check_host: false,
            ..HttpOptions::default()
        };
        let app = router(svc, &opts, CancellationToken::new());
        assert_eq!(
            call(&app, "POST", "/ask", Some("evil.example.com"), ask)
                .await
                .0,
            200
        );
    }

    /// Issue 14: a 3.9 MB query was accepted and logged in full.
    #[tokio::test]
    async fn an_over_long_query_is_refused_and_not_logged() {
        let (svc, store) = service(None);
        let app = router(svc, &HttpOptions::default(), CancellationToken::new());
        let q = "cache ".repeat(650_000); // 3.9 MB
        let (st, v) = call(
            &app,
            "POST",
            "/ask",
            Some("127.0.0.1"),
            serde_json::json!({"query": q, "mode": "bm25"}),
        )
        .await;
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["field"], "query");
        assert!(store.recent_queries(10).unwrap().is_empty());
        let (st, v) = call(
            &app,
            "POST",
            "/eval",
            Some("127.0.0.1"),
            serde_json::json!({"questions": ["ok", "x".repeat(5000)]}),
        )
        .await;
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["field"], "questions[1]");
    }

    /// Issue 14: `POST /docs` answered 504 and the document was committed 21 s later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_timed_out_registration_writes_nothing() {
        let slow = FakeEmbedder::new(Duration::from_millis(400));
        let (svc, store) = service(Some(slow.clone()));
        let opts = HttpOptions {
            timeout: Duration::from_millis(150),
            ..HttpOptions::default()
        };
        let app = router(svc, &opts, CancellationToken::new());
        let body = serde_json::json!({
            "path": "late.md",
            "content": "# Late\n\nThis document arrives after its deadline.\n",
            "index": true,
        });
        let (st, v) = call(&app, "POST", "/docs", Some("127.0.0.1"), body).await;
        assert_eq!(st, 504, "{v}");
        assert_eq!(v["error"]["code"], "timeout");
        // Well past the embedding call: still not there.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let paths: Vec<String> = store
            .documents()
            .unwrap()
            .into_iter()
            .map(|d| d.path)
            .collect();
        assert!(!paths.contains(&"late.md".to_string()), "{paths:?}");
        assert_eq!(slow.calls(), 1, "no embedding after the cancel");
    }

    /// POST one JSON-RPC message to `/mcp` (in session `session`); returns the status, the
    /// session id the server gave, and the JSON-RPC messages of the answer (SSE `data:` lines
    /// or a JSON body).
    async fn mcp_post(
        app: &Router,
        session: Option<&str>,
        msg: serde_json::Value,
    ) -> (u16, Option<String>, Vec<serde_json::Value>) {
        let mut req = axum::http::Request::builder()
            .method("POST")
            .uri("/mcp")
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
        if let Some(id) = session {
            req = req.header("mcp-session-id", id);
        }
        let req = req.body(Body::from(msg.to_string())).unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let sid = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&bytes);
        let msgs = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .chain(std::iter::once(text.as_ref()))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
            .collect();
        (status, sid, msgs)
    }

    /// An initialized MCP session over `/mcp`.
    async fn mcp_session(app: &Router) -> String {
        let init = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "http-tests", "version": "0"}
            }
        });
        let (st, sid, msgs) = mcp_post(app, None, init).await;
        assert_eq!(st, 200, "{msgs:?}");
        let sid = sid.expect("a session id");
        let note = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (st, _, _) = mcp_post(app, Some(&sid), note).await;
        assert_eq!(st, 202);
        sid
    }

    /// `tools/call` of `name` over `/mcp`: the call's JSON-RPC result, and how long it took.
    async fn mcp_tool(
        app: &Router,
        sid: &str,
        name: &str,
        args: serde_json::Value,
    ) -> (serde_json::Value, Duration) {
        let call = serde_json::json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": name, "arguments": args}
        });
        let t = std::time::Instant::now();
        let (st, _, msgs) = mcp_post(app, Some(sid), call).await;
        let took = t.elapsed();
        assert_eq!(st, 200, "{msgs:?}");
        let answer = msgs
            .into_iter()
            .find(|m| m["id"] == 2)
            .expect("an answer to the call");
        (answer["result"].clone(), took)
    }

    /// Issue 14, `/mcp`: a tool call's answer goes out on an SSE stream, so the guard's timer
    /// saw the request finish at once and never cancelled `bib_register_doc`: past its
    /// timeout the call went on and committed. Now it answers a `timeout` tool error at the
    /// deadline and writes nothing, like `POST /docs`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_timed_out_mcp_registration_writes_nothing() {
        let slow = FakeEmbedder::new(Duration::from_millis(400));
        let (svc, store) = service(Some(slow.clone()));
        let opts = HttpOptions {
            timeout: Duration::from_millis(150),
            ..HttpOptions::default()
        };
        let app = router(svc, &opts, CancellationToken::new());
        let sid = mcp_session(&app).await;
        let args = serde_json::json!({
            "path": "late.md",
            "content": "# Late\n\nThis document arrives after its deadline.\n",
            "index": true,
        });
        let (r, took) = mcp_tool(&app, &sid, "bib_register_doc", args).await;
        assert_eq!(r["isError"], true, "{r}");
        assert_eq!(r["structuredContent"]["error"]["code"], "timeout", "{r}");
        assert!(took < Duration::from_millis(380), "answered after {took:?}");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let paths: Vec<String> = store
            .documents()
            .unwrap()
            .into_iter()
            .map(|d| d.path)
            .collect();
        assert!(!paths.contains(&"late.md".to_string()), "{paths:?}");
        assert_eq!(slow.calls(), 1, "no embedding after the cancel");

        // Within its time the same call registers.
        let opts = HttpOptions {
            timeout: Duration::from_secs(30),
            ..HttpOptions::default()
        };
        let (svc, store) = service(Some(FakeEmbedder::new(Duration::ZERO)));
        let app = router(svc, &opts, CancellationToken::new());
        let sid = mcp_session(&app).await;
        let args = serde_json::json!({"path": "on-time.md", "content": "# On time\n\nText.\n", "index": true});
        let (r, _) = mcp_tool(&app, &sid, "bib_register_doc", args).await;
        assert_ne!(r["isError"], true, "{r}");
        assert!(store
            .documents()
            .unwrap()
            .iter()
            .any(|d| d.path == "on-time.md"));
    }

    /// Issue 14, `/mcp`: `bib_eval_retrieval` past its timeout must stop embedding, as
    /// `POST /eval` does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_timed_out_mcp_eval_stops_working() {
        let slow = FakeEmbedder::new(Duration::from_millis(50));
        let (svc, _) = service(Some(slow.clone()));
        let opts = HttpOptions {
            timeout: Duration::from_millis(300),
            ..HttpOptions::default()
        };
        let app = router(svc, &opts, CancellationToken::new());
        let sid = mcp_session(&app).await;
        let questions: Vec<String> = (0..150)
            .map(|i| format!("question number {i} about the cache"))
            .collect();
        let (r, took) = mcp_tool(
            &app,
            &sid,
            "bib_eval_retrieval",
            serde_json::json!({"questions": questions}),
        )
        .await;
        assert_eq!(r["structuredContent"]["error"]["code"], "timeout", "{r}");
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let at_stop = slow.calls();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(at_stop > 0);
        assert_eq!(
            slow.calls(),
            at_stop,
            "eval kept embedding after its timeout"
        );
        assert!(
            at_stop < 60,
            "{at_stop} embedding calls: the eval did not stop"
        );
    }

    /// Issue 14: `/eval` kept the CPU busy 10 s after its 504.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_timed_out_eval_stops_working() {
        let slow = FakeEmbedder::new(Duration::from_millis(50));
        let (svc, _) = service(Some(slow.clone()));
        let opts = HttpOptions {
            timeout: Duration::from_millis(300),
            ..HttpOptions::default()
        };
        let app = router(svc, &opts, CancellationToken::new());
        let questions: Vec<String> = (0..150)
            .map(|i| format!("question number {i} about the cache"))
            .collect();
        let (st, v) = call(
            &app,
            "POST",
            "/eval",
            Some("127.0.0.1"),
            serde_json::json!({"questions": questions}),
        )
        .await;
        assert_eq!(st, 504, "{v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let at_stop = slow.calls();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let later = slow.calls();
        assert!(at_stop > 0);
        assert_eq!(later, at_stop, "eval kept embedding after its 504");
        assert!(
            at_stop < 60,
            "{at_stop} embedding calls: the eval did not stop"
        );
    }
}
