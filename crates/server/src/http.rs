//! `bib serve`: the HTTP API and the streamable-HTTP MCP endpoint in one axum app.
//!
//! Routes (JSON unless said; described at `GET /openapi.json`):
//! `POST /ask`, `POST /answer` (an ask, then the configured LLM's answer, as server-sent
//! events), `POST /pack`, `POST /eval`, `POST /docs` (register, token), `POST /chunks`
//! (index, token), `GET /docs/{node_id}`, `GET /docs/{path}?from=&to=&collection=` (a
//! document's lines; `&format=html`: the document as a page with those lines marked),
//! `GET /status`, `GET /runs?limit=N`, `GET /healthz`, MCP at `/mcp`, and for people the
//! ask page `GET /` and the help widget `GET /widget.js` ([`crate::ui`]). Errors are
//! `{"error": {"code", "message", "field"?}}` ([`crate::error`]).
//!
//! Cross-origin reads (the widget on another site) are answered only for the origins
//! configured in [`HttpOptions::allowed_origins`], only on the read routes ([`crate::cors`]).
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
    /// Origins whose pages may read answers across origins (the help widget on another site):
    /// `scheme://host[:port]`, checked by [`crate::cors::Origins::parse`]. None by default.
    pub allowed_origins: Vec<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            body_limit: 4 * 1024 * 1024,
            timeout: Duration::from_secs(60),
            max_in_flight: 64,
            allowed_hosts: Vec::new(),
            check_host: true,
            allowed_origins: Vec::new(),
        }
    }
}

/// The server's in-flight slots, handed to `/mcp` tool calls through the request's
/// extensions: an MCP request's HTTP exchange ends before its tool call does (the answer comes
/// on a stream), so the tool call takes the slot itself ([`crate::mcp`]).
#[derive(Clone)]
pub(crate) struct InFlight(pub Arc<Semaphore>);

#[derive(Clone)]
struct App {
    service: Arc<Service>,
    slots: Arc<Semaphore>,
    timeout: Duration,
    /// `Some(extra allowed hosts)` when `Host` is checked.
    hosts: Option<Arc<Vec<String>>>,
    /// The ask page, rendered once.
    page: Arc<str>,
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

/// The JSON error response of `e` (its status, `WWW-Authenticate` for 401).
pub(crate) fn error_response(e: ServiceError) -> Response {
    ApiError(e).into_response()
}

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

async fn answer(
    State(app): State<App>,
    work: Option<Extension<Arc<Work>>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let a: crate::args::AskArgs = body_args(body)?;
    if !app.service.synthesis_configured() {
        return Err(ApiError(ServiceError::not_available(
            "no chat endpoint is configured: set `[llm] base_url` and `model` in bib.toml \
             (or BIB_LLM_BASE_URL and BIB_LLM_MODEL); POST /ask answers without one",
        )));
    }
    let work = work.map_or_else(|| Arc::new(Work::unbounded()), |Extension(w)| w);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<AnswerEvent>(64);
    let s = app.service.clone();
    tokio::task::spawn_blocking(move || {
        let results_tx = tx.clone();
        let mut on_results = |o: &crate::service::AskOutput| {
            let v = serde_json::to_value(o).map_err(|e| ServiceError::internal(e.to_string()))?;
            results_tx
                .blocking_send(AnswerEvent::Results(v))
                .map_err(|_| ServiceError::internal("the client went away"))
        };
        let mut out = DeltaWriter {
            tx: tx.clone(),
            pending: Vec::new(),
        };
        let end = s.answer(a, &work, &mut on_results, &mut out);
        let _ = std::io::Write::flush(&mut out);
        let _ = tx.blocking_send(match end {
            Ok(end) => AnswerEvent::Done(serde_json::to_value(end).unwrap_or_default()),
            Err(e) => AnswerEvent::Error(e),
        });
    });
    // Failures before the sources (a bad argument, no model, the timeout) answer with their
    // own status; once the sources are out, the stream carries the rest, errors included.
    let first = match rx.recv().await {
        Some(AnswerEvent::Error(e)) => return Err(ApiError(e)),
        Some(ev) => ev,
        None => {
            return Err(ApiError(ServiceError::internal(
                "the answer ended before it began",
            )))
        }
    };
    let first = futures_stream_once(first);
    let rest = tokio_stream::wrappers::ReceiverStream::new(rx);
    let stream = tokio_stream::StreamExt::map(tokio_stream::StreamExt::chain(first, rest), |ev| {
        Ok::<_, std::convert::Infallible>(ev.to_sse())
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        axum::body::Body::from_stream(stream),
    )
        .into_response())
}

fn futures_stream_once(ev: AnswerEvent) -> tokio_stream::Iter<std::iter::Once<AnswerEvent>> {
    tokio_stream::iter(std::iter::once(ev))
}

/// One server-sent event of `POST /answer`: `results` (the ask's JSON) first, then `delta`
/// (`{"text"}`: the next piece of the answer) any number of times, then `done`
/// (`{"answer", "skipped"?}`) or `error` (`{"error": …}`).
enum AnswerEvent {
    Results(serde_json::Value),
    Delta(String),
    Done(serde_json::Value),
    Error(ServiceError),
}

impl AnswerEvent {
    fn to_sse(&self) -> Bytes {
        let (name, data) = match self {
            AnswerEvent::Results(v) => ("results", v.clone()),
            AnswerEvent::Delta(t) => ("delta", serde_json::json!({ "text": t })),
            AnswerEvent::Done(v) => ("done", v.clone()),
            AnswerEvent::Error(e) => ("error", e.to_json()),
        };
        // Compact JSON has no raw newline, so one `data:` line holds it.
        Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
    }
}

/// The synthesizer's output as `delta` events, cut only at whole UTF-8 characters.
struct DeltaWriter {
    tx: tokio::sync::mpsc::Sender<AnswerEvent>,
    pending: Vec<u8>,
}

impl std::io::Write for DeltaWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(s) => s.len(),
            Err(e) => e.valid_up_to(),
        };
        if valid > 0 {
            let text = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
            self.pending.drain(..valid);
            self.tx
                .blocking_send(AnswerEvent::Delta(text))
                .map_err(|_| std::io::Error::other("the client went away"))?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.pending.is_empty() {
            let text = String::from_utf8_lossy(&self.pending).into_owned();
            self.pending.clear();
            self.tx
                .blocking_send(AnswerEvent::Delta(text))
                .map_err(|_| std::io::Error::other("the client went away"))?;
        }
        Ok(())
    }
}

async fn status(State(app): State<App>) -> ApiResult {
    let s = app.service.clone();
    blocking(None, move |_| s.status()).await
}

async fn page(State(app): State<App>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        app.page.to_string(),
    )
        .into_response()
}

async fn widget() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        crate::ui::WIDGET_JS,
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct LinesQuery {
    from: Option<String>,
    to: Option<String>,
    collection: Option<String>,
    format: Option<String>,
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
    let html = match q.format.as_deref() {
        None | Some("json") => false,
        Some("html") => true,
        Some(f) => {
            return Err(ApiError(ServiceError::invalid(
                "format",
                format!("`{f}` is not `json` or `html`"),
            )))
        }
    };
    let numeric = !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit());
    if numeric && q.from.is_none() && q.to.is_none() && !html {
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
    if !html {
        return blocking(None, move |_| s.get_lines(args)).await;
    }
    // The page a person opens from a result: the whole document, the cited lines marked.
    // The range is checked as the JSON route checks it, so a bad one answers the same error.
    let ranged = args.from.is_some() || args.to.is_some();
    let view = tokio::task::spawn_blocking(move || {
        let cited = s.get_lines(args.clone())?;
        let whole = s.get_lines(crate::args::GetArgs {
            from: None,
            to: None,
            collection: Some(cited.collection.clone()),
            ..args
        })?;
        let mark = ranged.then_some((cited.line_start, cited.line_end));
        Ok::<_, ServiceError>(crate::ui::document_view(&whole, mark))
    })
    .await
    .map_err(|e| ApiError(ServiceError::internal(format!("the operation failed: {e}"))))??;
    Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], view).into_response())
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

/// Host allow-list, token for public binds, a slot among the in-flight requests (an `/mcp`
/// request hands the slots to its tool call, which takes one while it runs), and the
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
    let mcp = path == "/mcp" || path.starts_with("/mcp/");
    if mcp {
        req.extensions_mut().insert(InFlight(app.slots.clone()));
    }
    let work = async {
        let _permit = match (!mcp).then(|| app.slots.clone().acquire_owned()) {
            None => None,
            Some(wait) => match wait.await {
                Ok(p) => Some(p),
                Err(_) => {
                    return ApiError(ServiceError::new(
                        ErrorCode::Overloaded,
                        "server is shutting down",
                    ))
                    .into_response()
                }
            },
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
        page: crate::ui::page(service.synthesis_configured()).into(),
    };
    let origins = crate::cors::Origins::parse(&opts.allowed_origins).unwrap_or_else(|e| {
        // `bib serve` checks them before it gets here; a library caller gets no CORS.
        tracing::warn!("no cross-origin reads: {e}");
        crate::cors::Origins::default()
    });
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
        .route("/", get(page))
        .route("/widget.js", get(widget))
        .route("/status", get(status))
        .route("/answer", post(answer))
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
        .layer(middleware::from_fn_with_state(origins, crate::cors::layer))
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
    use crate::testing::{fake_embedder, service, TOKEN};
    use axum::body::Body;
    use bib_store::RunLog;
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
            ("GET", "/"),
            ("GET", "/widget.js"),
            ("GET", "/status"),
            ("POST", "/answer"),
            ("GET", "/docs/guides/restore.md?format=html"),
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

    /// GET with `Host: 127.0.0.1`: status, content type and body as text.
    async fn get_text(app: &Router, path: &str) -> (u16, String, String) {
        let req = axum::http::Request::builder()
            .uri(path)
            .header(header::HOST, "127.0.0.1")
            .body(Body::empty())
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, ctype, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Issue 19: the ask page, the widget, the status the page's filter reads, and the HTML
    /// view a citation opens.
    #[tokio::test]
    async fn pages_for_people() {
        let (svc, store) = service(None);
        let mut doc = bib_store::conformance::sample_change("guides/lines.md", &["Line two."]);
        doc.source = Some("# Lines\nLine two.\n<b>three</b>\n".into());
        store.apply_document(&doc).unwrap();
        let app = router(svc, &HttpOptions::default(), CancellationToken::new());
        let (st, ctype, page) = get_text(&app, "/").await;
        assert_eq!(st, 200);
        assert!(ctype.starts_with("text/html"), "{ctype}");
        assert!(
            page.contains("<label for=\"q\""),
            "the question is labelled"
        );
        assert!(
            page.contains("data-synthesis=\"off\""),
            "no [llm] configured"
        );
        let (st, ctype, js) = get_text(&app, "/widget.js").await;
        assert_eq!(st, 200);
        assert!(ctype.starts_with("text/javascript"), "{ctype}");
        assert!(js.contains("attachShadow"));
        let (st, _, status) = get_text(&app, "/status").await;
        assert_eq!(st, 200);
        let status: serde_json::Value = serde_json::from_str(&status).unwrap();
        assert!(status["collections"].as_array().is_some(), "{status}");
        assert!(status.get("queries").is_none(), "no query log");
        let (st, ctype, view) =
            get_text(&app, "/docs/guides/lines.md?from=2&to=2&format=html").await;
        assert_eq!(st, 200, "{view}");
        assert!(ctype.starts_with("text/html"));
        assert!(view.contains("<tr id=\"L2\" class=\"mark\">"), "{view}");
        assert!(view.contains("<tr id=\"L3\"><td"), "{view}");
        assert!(view.contains("&lt;b&gt;three"), "{view}");
        let (st, _, e) = get_text(&app, "/docs/guides/lines.md?from=9&format=html").await;
        assert_eq!(st, 400, "a range outside the document: {e}");
        let (st, _, e) = get_text(&app, "/docs/guides/restore.md?format=pdf").await;
        assert_eq!(st, 400, "{e}");
        assert!(e.contains("format"), "{e}");
        let (st, _, e) = get_text(&app, "/docs/nowhere.md?format=html").await;
        assert_eq!(st, 404, "{e}");
        // Without an [llm] endpoint, /answer says what to configure.
        let (st, v) = call(
            &app,
            "POST",
            "/answer",
            Some("127.0.0.1"),
            serde_json::json!({"query": "cache", "mode": "bm25"}),
        )
        .await;
        assert_eq!(st, 501, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("[llm]"));
    }

    /// Issue 19: `passages: true` gives each result's whole text, sentence by sentence,
    /// with what trimming kept; without it the answer is as before.
    #[tokio::test]
    async fn passages_mark_what_trimming_kept() {
        let (svc, _) = service(Some(fake_embedder(Duration::ZERO)));
        let app = router(svc, &HttpOptions::default(), CancellationToken::new());
        let ask = serde_json::json!({"query": "restored from the local cache", "trim": true,
            "trim_threshold": 0.99, "passages": true});
        let (st, v) = call(&app, "POST", "/ask", Some("127.0.0.1"), ask).await;
        assert_eq!(st, 200, "{v}");
        assert!(!v["results"].as_array().unwrap().is_empty(), "{v}");
        for r in v["results"].as_array().unwrap() {
            let p = &r["passage"];
            let pieces = p["pieces"].as_array().unwrap();
            assert!(!pieces.is_empty(), "{r}");
            let kept = pieces.iter().filter(|x| x["kept"] == true).count();
            assert_eq!(Some(kept as u64), r["sentences_kept"].as_u64(), "{r}");
            assert_eq!(
                Some(pieces.len() as u64),
                r["sentences_total"].as_u64(),
                "{r}"
            );
            assert!(
                p["tokens_kept"].as_u64() <= p["tokens_whole"].as_u64(),
                "{r}"
            );
        }
        let plain = serde_json::json!({"query": "restored from the local cache", "trim": true});
        let (_, v) = call(&app, "POST", "/ask", Some("127.0.0.1"), plain).await;
        assert!(v["results"][0].get("passage").is_none(), "{v}");
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
        let slow = fake_embedder(Duration::from_millis(400));
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
        let slow = fake_embedder(Duration::from_millis(400));
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
        let (svc, store) = service(Some(fake_embedder(Duration::ZERO)));
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
        let slow = fake_embedder(Duration::from_millis(50));
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
        let slow = fake_embedder(Duration::from_millis(50));
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
