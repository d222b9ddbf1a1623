//! `bib serve`: the HTTP API and the streamable-HTTP MCP endpoint in one axum app.
//!
//! Routes (all JSON; described at `GET /openapi.json`):
//! `POST /ask`, `POST /pack`, `POST /eval`, `POST /docs` (register, token), `POST /chunks`
//! (index, token), `GET /docs/{node_id}`, `GET /runs?limit=N`, `GET /healthz`, and MCP at
//! `/mcp`. Errors are `{"error": {"code", "message", "field"?}}` ([`crate::error`]).
//!
//! Protections, applied to every route: a request-body size limit, a per-request timeout (the
//! time to produce the response), a bound on requests in flight (waiting for a slot counts
//! against the timeout; a request that gets none answers `503 overloaded`), and on non-loopback
//! binds a bearer token for everything but `/healthz`.

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
use axum::{Json, Router};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::args::parse_args;
use crate::error::{ErrorCode, ServiceError};
use crate::mcp::BibMcp;
use crate::service::Service;
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
    /// Extra `Host` values accepted by `/mcp` (DNS-rebinding protection; loopback names are
    /// always accepted). Needed when serving on a public name.
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            body_limit: 4 * 1024 * 1024,
            timeout: Duration::from_secs(60),
            max_in_flight: 64,
            allowed_hosts: Vec::new(),
        }
    }
}

#[derive(Clone)]
struct App {
    service: Arc<Service>,
    slots: Arc<Semaphore>,
    timeout: Duration,
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
    let value: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|e| ServiceError::invalid("(body)", format!("not valid JSON: {e}")))?
    };
    parse_args(value)
}

async fn blocking<T, F>(f: F) -> ApiResult
where
    T: Serialize + Send + 'static,
    F: FnOnce() -> Result<T, ServiceError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(Json(v).into_response()),
        Ok(Err(e)) => Err(ApiError(e)),
        Err(e) => Err(ApiError(ServiceError::internal(format!(
            "the operation failed: {e}"
        )))),
    }
}

async fn ask(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let a = body_args(body)?;
    let s = app.service.clone();
    blocking(move || s.ask(a)).await
}

async fn pack(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let a = body_args(body)?;
    let s = app.service.clone();
    blocking(move || s.pack(a)).await
}

async fn eval(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> ApiResult {
    let a = body_args(body)?;
    let s = app.service.clone();
    blocking(move || s.eval(a)).await
}

async fn register(
    State(app): State<App>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let bearer = bearer_of(&headers);
    // Check the token before decoding, so an unauthorized caller learns nothing about the body.
    app.service.tokens().check_mutation(bearer.as_deref())?;
    let a = body_args(body)?;
    let s = app.service.clone();
    match tokio::task::spawn_blocking(move || s.register_doc(a, bearer.as_deref())).await {
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
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let bearer = bearer_of(&headers);
    app.service.tokens().check_mutation(bearer.as_deref())?;
    let a = body_args(body)?;
    let s = app.service.clone();
    blocking(move || s.index_chunks(a, bearer.as_deref())).await
}

async fn get_doc(State(app): State<App>, Path(id): Path<String>) -> ApiResult {
    let id: i64 = id
        .parse()
        .map_err(|_| ServiceError::invalid("node_id", format!("`{id}` is not an integer")))?;
    let s = app.service.clone();
    blocking(move || s.get_doc(id)).await
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
    blocking(move || s.runs(limit)).await
}

async fn healthz(State(app): State<App>) -> ApiResult {
    let s = app.service.clone();
    blocking(move || s.health()).await
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

/// Token for public binds, a slot among the in-flight requests, and the timeout.
async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
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
    match tokio::time::timeout(app.timeout, work).await {
        Ok(r) => r,
        Err(_) => {
            tracing::warn!(path = %path, "request timed out after {:?}", app.timeout);
            ApiError(ServiceError::new(
                ErrorCode::Timeout,
                format!(
                    "the request took longer than {} s",
                    app.timeout.as_secs_f64()
                ),
            ))
            .into_response()
        }
    }
}

/// The whole app: API routes, `/mcp`, and the protections.
pub fn router(service: Arc<Service>, opts: &HttpOptions, shutdown: CancellationToken) -> Router {
    let app = App {
        service: service.clone(),
        slots: Arc::new(Semaphore::new(opts.max_in_flight.max(1))),
        timeout: opts.timeout,
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
        .route("/docs/{node_id}", get(get_doc))
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
