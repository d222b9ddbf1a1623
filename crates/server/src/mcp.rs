//! The MCP server (official Rust SDK, `rmcp`): seven tools over the [`Service`], served over
//! stdio (`bib mcp`) or streamable HTTP at `/mcp` (`bib serve`, see [`crate::http`]).
//!
//! Arguments are typed structs ([`crate::args`]) whose JSON Schemas are the tools'
//! `inputSchema`. They are decoded by this module's [`Parameters`] extractor, which — unlike the
//! SDK's own — names the offending field (`invalid_params: invalid argument `top_k`: invalid
//! type: string "five", expected usize`) and puts `{code, message, field}` in the error's
//! `data`. Results carry their JSON as structured content; the text content is that JSON too,
//! except where an agent reads the text: `bib_ask` answers compact Markdown (per result its
//! citation `path:lines › heading` and the kept text, no scores — those stay in the structured
//! content) and `bib_get` the lines themselves under their citation. Failures other than bad
//! arguments are tool results with `isError: true` and `{"error": {code, message}}`.

use std::sync::Arc;

use rmcp::handler::server::common::FromContextPart;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{schema_for_output, ToolCallContext};
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::args::{
    AskArgs, EvalRetrievalArgs, GetArgs, IndexChunksArgs, PackArgs, RegisterDocArgs, StatusArgs,
};
use crate::error::{ErrorCode, ServiceError};
use crate::service::{AskOutput, IndexOutput, PackOutput, RegisterOutput, Service};
use crate::work::Work;
use crate::{ServerError, SERVER_NAME, SERVER_VERSION};

/// Tool-argument extractor that names the bad field (see the module docs). The `#[tool]` macro
/// recognises it by name and uses `T`'s schema as the tool's input schema.
#[derive(Debug, Clone)]
pub struct Parameters<T>(pub T);

impl<T: JsonSchema> JsonSchema for Parameters<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

impl<S, T: DeserializeOwned> FromContextPart<ToolCallContext<'_, S>> for Parameters<T> {
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        crate::args::decode_tool_arguments(context.arguments.take())
            .map(Parameters)
            .map_err(|e| to_error_data(&e))
    }
}

/// A service error as a JSON-RPC error (bad arguments → `invalid_params`).
pub fn to_error_data(e: &ServiceError) -> ErrorData {
    let data = Some(e.to_json()["error"].clone());
    match e.code {
        ErrorCode::InvalidArgument => ErrorData::invalid_params(e.message.clone(), data),
        _ => ErrorData::internal_error(e.message.clone(), data),
    }
}

/// What a tool call runs under: its [`Work`] (for streamable HTTP, the guard's, so the
/// request's timeout cancels it; else one without a deadline), the client's cancellation, and
/// for streamable HTTP the server's in-flight slots ([`crate::http::InFlight`]).
struct ToolCall {
    work: Arc<Work>,
    ct: CancellationToken,
    slots: Option<Arc<Semaphore>>,
}

impl ToolCall {
    fn of(ctx: &RequestContext<RoleServer>) -> Self {
        let parts = ctx.extensions.get::<axum::http::request::Parts>();
        Self {
            work: parts
                .and_then(|p| p.extensions.get::<Arc<Work>>().cloned())
                .unwrap_or_else(|| Arc::new(Work::unbounded())),
            ct: ctx.ct.clone(),
            slots: parts
                .and_then(|p| p.extensions.get::<crate::http::InFlight>())
                .map(|s| s.0.clone()),
        }
    }
}

/// Run a service call on the blocking pool and shape its answer as a tool result (the JSON as
/// structured and as text content).
async fn run_tool<T, F>(call: ToolCall, f: F) -> Result<CallToolResult, ErrorData>
where
    T: Serialize + Send + 'static,
    F: FnOnce(&Work) -> Result<T, ServiceError> + Send + 'static,
{
    run_tool_text(call, f, None).await
}

/// Run `f` on the blocking pool once the call has an in-flight slot (streamable HTTP shares
/// the REST routes' `--max-in-flight`; stdio has one client and no limit).
///
/// The call is cancelled, like a REST request past its timeout ([`crate::work`]), when the
/// HTTP request's deadline passes or the client cancels the request (`notifications/cancelled`,
/// which sets `ct`), also while it waits for a slot: its [`Work`] is cancelled, so it stops at
/// its next check and writes nothing, and the answer is a `timeout` tool error. When the call
/// already started its write, the cancel is refused and its real result is the answer.
async fn call_blocking<T, F>(call: ToolCall, f: F) -> Result<T, ServiceError>
where
    T: Send + 'static,
    F: FnOnce(&Work) -> Result<T, ServiceError> + Send + 'static,
{
    let ToolCall { work, ct, slots } = call;
    let deadline = work.deadline();
    let stop = async {
        tokio::select! {
            () = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
                    None => std::future::pending().await,
                }
            } => work.timeout_error(),
            // rmcp sends no response to a cancelled request (nor after its session closed),
            // so this error only reaches the log.
            () = ct.cancelled() => ServiceError::new(
                ErrorCode::Timeout,
                "the request was cancelled; its work was stopped and nothing was written",
            ),
        }
    };
    let mut stop = std::pin::pin!(stop);
    let _permit = match slots {
        None => None,
        Some(slots) => tokio::select! {
            p = slots.acquire_owned() => match p {
                Ok(p) => Some(p),
                Err(_) => {
                    return Err(ServiceError::new(ErrorCode::Overloaded, "server is shutting down"))
                }
            },
            e = &mut stop => {
                work.cancel();
                tracing::warn!(code = e.code.as_str(), "tool call stopped waiting for a slot: {}", e.message);
                return Err(e);
            }
        },
    };
    let job = work.clone();
    let mut task = tokio::task::spawn_blocking(move || f(&job));
    let joined = tokio::select! {
        r = &mut task => r,
        e = &mut stop => {
            if work.cancel() {
                tracing::warn!(code = e.code.as_str(), "tool call stopped: {}", e.message);
                Ok(Err(e))
            } else {
                // The call is writing: its result is the truth, wait for it.
                task.await
            }
        }
    };
    match joined {
        Ok(r) => r,
        Err(e) => Err(ServiceError::internal(format!("the operation failed: {e}"))),
    }
}

/// [`run_tool`] whose text content is `text(&answer)` instead of the JSON.
async fn run_tool_text<T, F>(
    call: ToolCall,
    f: F,
    text: Option<fn(&T) -> String>,
) -> Result<CallToolResult, ErrorData>
where
    T: Serialize + Send + 'static,
    F: FnOnce(&Work) -> Result<T, ServiceError> + Send + 'static,
{
    let r = call_blocking(call, f).await;
    match r {
        Ok(v) => {
            let shown = text.map(|t| t(&v));
            match serde_json::to_value(v) {
                Ok(v) => {
                    let mut result = CallToolResult::structured(v);
                    if let Some(t) = shown {
                        result.content = vec![ContentBlock::text(t)];
                    }
                    Ok(result)
                }
                Err(e) => Ok(CallToolResult::structured_error(
                    ServiceError::internal(e.to_string()).to_json(),
                )),
            }
        }
        Err(e) if e.code == ErrorCode::InvalidArgument => Err(to_error_data(&e)),
        Err(e) => {
            tracing::info!(
                code = e.code.as_str(),
                "tool call refused or failed: {}",
                e.message
            );
            Ok(CallToolResult::structured_error(e.to_json()))
        }
    }
}

/// The bearer token of the HTTP request carrying this tool call (streamable HTTP only).
fn http_bearer(ctx: &RequestContext<RoleServer>) -> Option<String> {
    let parts = ctx.extensions.get::<axum::http::request::Parts>()?;
    let h = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    crate::auth::bearer(Some(h)).map(str::to_string)
}

/// The MCP handler: one per session, all sharing one [`Service`].
#[derive(Clone)]
pub struct BibMcp {
    service: Arc<Service>,
    tool_router: ToolRouter<Self>,
}

impl std::fmt::Debug for BibMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BibMcp")
            .field("service", &self.service)
            .finish()
    }
}

#[tool_router]
impl BibMcp {
    pub fn new(service: Arc<Service>) -> Self {
        Self {
            service,
            tool_router: Self::tool_router(),
        }
    }

    /// Ask the knowledge base: hybrid (BM25 + vector) retrieval of the best chunks, optionally
    /// trimmed to the sentences relevant to the question (trim: true). The text answer is
    /// compact Markdown, per result its citation `path:lines › heading` and its text; open
    /// more of a document with bib_get. `no_good_match` says that nothing in the knowledge base
    /// is close to the question. Scores, ranks and token counts are in the structured content.
    #[tool(
        name = "bib_ask",
        output_schema = schema_for_output::<AskOutput>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn bib_ask(
        &self,
        Parameters(a): Parameters<AskArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let s = self.service.clone();
        run_tool_text(ToolCall::of(&ctx), move |w| s.ask(a, w), Some(ask_markdown)).await
    }

    /// Read a document of the knowledge base, or lines from..to of it (1-based, inclusive),
    /// exactly as ingested: a bib_ask result citing `path:12-30` is path with from 12, to 30.
    /// An unknown path names the closest stored paths.
    #[tool(
        name = "bib_get",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn bib_get(
        &self,
        Parameters(a): Parameters<GetArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let s = self.service.clone();
        run_tool_text(
            ToolCall::of(&ctx),
            move |_| s.get_lines(a),
            Some(excerpt_text),
        )
        .await
    }

    /// The knowledge base: where it is stored, its collections with document and chunk
    /// counts, the embedding model, and the last ingest run with its result.
    #[tool(
        name = "bib_status",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn bib_status(
        &self,
        Parameters(_): Parameters<StatusArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let s = self.service.clone();
        run_tool(ToolCall::of(&ctx), move |_| s.status()).await
    }

    /// A/B evaluation of retrieval: whole chunks (baseline) against sentence trimming and other
    /// variants, over the given questions or the last real ones — tokens, reduction %, overlap
    /// with the baseline, and a verdict.
    #[tool(
        name = "bib_eval_retrieval",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn bib_eval_retrieval(
        &self,
        Parameters(a): Parameters<EvalRetrievalArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let s = self.service.clone();
        run_tool(ToolCall::of(&ctx), move |w| s.eval(a, w)).await
    }

    /// Create or update one document (path + Markdown, or front-matter + body). Returns its
    /// node_id and whether it was created. Writes: needs the server's token.
    #[tool(
        name = "bib_register_doc",
        output_schema = schema_for_output::<RegisterOutput>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn bib_register_doc(
        &self,
        Parameters(a): Parameters<RegisterDocArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let s = self.service.clone();
        let bearer = http_bearer(&ctx);
        run_tool(ToolCall::of(&ctx), move |w| {
            s.register_doc(a, bearer.as_deref(), w)
        })
        .await
    }

    /// Index chunks of registered documents by (node_id, chunk_index), embedding them, and
    /// prune tail chunks (prune list of {node_id, keep_count}). Returns created / updated /
    /// skipped / pruned / errors. Writes: needs the server's token.
    #[tool(
        name = "bib_index_chunks",
        output_schema = schema_for_output::<IndexOutput>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn bib_index_chunks(
        &self,
        Parameters(a): Parameters<IndexChunksArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let s = self.service.clone();
        let bearer = http_bearer(&ctx);
        run_tool(ToolCall::of(&ctx), move |w| {
            s.index_chunks(a, bearer.as_deref(), w)
        })
        .await
    }

    /// Pack a chat or agent history into a token budget, keeping the lines most relevant to
    /// the live question (BM25, or hybrid with embeddings) and the last turns verbatim.
    #[tool(
        name = "bib_pack",
        output_schema = schema_for_output::<PackOutput>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn bib_pack(
        &self,
        Parameters(a): Parameters<PackArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let s = self.service.clone();
        run_tool(ToolCall::of(&ctx), move |w| s.pack(a, w)).await
    }
}

/// The text content of `bib_ask`: per result its citation and text (the `[Doc: …]` prefix
/// dropped: the citation names the document), nothing else an agent would pay tokens for.
pub fn ask_markdown(a: &AskOutput) -> String {
    let mut out = String::new();
    if a.no_good_match {
        out.push_str(
            "No good match: nothing in the knowledge base is close to this question. \
             The nearest passages follow; they are probably not relevant.\n\n",
        );
    }
    if a.results.is_empty() {
        out.push_str("No results.\n");
    }
    for (i, r) in a.results.iter().enumerate() {
        let mut cite = bib_store::cite(&r.path, r.line_start, r.line_end);
        for h in &r.heading_path {
            cite.push_str(" › ");
            cite.push_str(h);
        }
        let (_, body) = bib_text::sentences::split_chunk_prefix(&r.content);
        out.push_str(&format!("[{}] {cite}\n{}\n\n", i + 1, body.trim()));
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

/// The text content of `bib_get`: the citation of the lines, then the lines.
fn excerpt_text(e: &bib_store::read::Excerpt) -> String {
    format!(
        "{} ({} of {} lines)\n\n{}",
        e.citation(),
        if e.line_start <= 1 && e.line_end == e.total_lines {
            "all".to_string()
        } else {
            format!("lines {}-{}", e.line_start, e.line_end)
        },
        e.total_lines,
        e.content
    )
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for BibMcp {
    fn get_info(&self) -> ServerConfig {
        let mut implementation = Implementation::new(SERVER_NAME, SERVER_VERSION);
        implementation.title = Some("bibliotecario".into());
        implementation.description =
            Some("A local-first librarian for Markdown knowledge bases".into());
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(implementation)
            .with_instructions(
                "bibliotecario answers questions from a Markdown knowledge base. Use bib_ask to \
                 retrieve the most relevant passages (trim: true keeps only relevant sentences), \
                 each cited as path:lines; bib_get to read more of a cited document; bib_status \
                 to see what the knowledge base holds; bib_pack to fit a long history into a \
                 token budget; bib_eval_retrieval to compare retrieval settings. \
                 bib_register_doc and bib_index_chunks write and need the server's token.",
            )
    }
}

/// Serve MCP over stdin/stdout until the client closes stdin, behind the framing layer of
/// [`crate::stdio`] (parse errors answered, line length bounded).
pub async fn serve_stdio(service: Arc<Service>) -> Result<(), ServerError> {
    serve_lines(service, tokio::io::stdin(), tokio::io::stdout()).await
}

/// MCP over any line-oriented byte stream pair (what [`serve_stdio`] runs on stdin/stdout).
pub async fn serve_lines<R, W>(
    service: Arc<Service>,
    input: R,
    output: W,
) -> Result<(), ServerError>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use crate::stdio::{frame_input, merge_output, MAX_LINE_BYTES};
    let (mcp_in, frame_out) = tokio::io::duplex(1024 * 1024);
    let (mcp_out, merge_in) = tokio::io::duplex(1024 * 1024);
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let framing = tokio::spawn(frame_input(input, frame_out, tx, MAX_LINE_BYTES));
    let writer = tokio::spawn(merge_output(merge_in, rx, output));
    let (mcp_read, _) = tokio::io::split(mcp_in);
    let (_, mcp_write) = tokio::io::split(mcp_out);
    let served = async {
        let running = BibMcp::new(service)
            .serve((mcp_read, mcp_write))
            .await
            .map_err(|e| ServerError::McpFailed {
                context: "starting the session",
                source: Box::new(e),
            })?;
        running
            .waiting()
            .await
            .map_err(|e| ServerError::McpFailed {
                context: "serving the session",
                source: Box::new(e),
            })?;
        Ok::<(), ServerError>(())
    };
    let r = served.await;
    framing.abort();
    // rmcp's side of the output pipe is closed now; the writer drains what is left.
    match writer.await {
        Ok(Err(e)) => tracing::warn!("stdio writer: {e}"),
        Err(e) => tracing::warn!("stdio writer task: {e}"),
        Ok(Ok(())) => {}
    }
    r
}

/// [`serve_stdio`] on a fresh runtime (what `bib mcp` runs).
pub fn serve_stdio_blocking(service: Arc<Service>) -> Result<(), ServerError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(serve_stdio(service))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seven_tools_with_object_schemas() {
        let tools = BibMcp::tool_router().list_all();
        let mut names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "bib_ask",
                "bib_eval_retrieval",
                "bib_get",
                "bib_index_chunks",
                "bib_pack",
                "bib_register_doc",
                "bib_status"
            ]
        );
        for t in &tools {
            let schema = serde_json::to_value(t.input_schema.as_ref()).unwrap();
            assert_eq!(schema["type"], "object", "{}", t.name);
            assert_eq!(schema["additionalProperties"], false, "{}", t.name);
            assert!(
                t.description.as_deref().is_some_and(|d| !d.is_empty()),
                "{}",
                t.name
            );
        }
        let ask = tools.iter().find(|t| t.name == "bib_ask").unwrap();
        let props = serde_json::to_value(ask.input_schema.as_ref()).unwrap()["properties"].clone();
        for k in [
            "query",
            "top_k",
            "mode",
            "trim",
            "trim_threshold",
            "trim_window",
            "filters",
        ] {
            assert!(props.get(k).is_some(), "bib_ask lacks {k}");
        }
        assert!(ask.output_schema.is_some());
    }

    /// A client's `notifications/cancelled` stops the call's work: rmcp only cancels the
    /// request's token (it does not drop the handler), so the tool must pass it on to the
    /// `Work`. Over stdio, where there is no deadline, this is the only way to stop a call.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_call_stops_and_writes_nothing() {
        use crate::testing::{fake_embedder, service, TOKEN};
        use bib_store::Store;
        use std::time::Duration;
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

        let slow = fake_embedder(Duration::from_millis(400));
        let (svc, store) = service(Some(slow.clone()));
        let (client, server) = tokio::io::duplex(1 << 16);
        let (server_r, server_w) = tokio::io::split(server);
        let serving = tokio::spawn(serve_lines(svc, server_r, server_w));
        let (client_r, mut client_w) = tokio::io::split(client);
        let mut lines = tokio::io::BufReader::new(client_r).lines();
        let line = |v: serde_json::Value| format!("{v}\n");
        let init = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "mcp-tests", "version": "0"}
            }
        });
        let next = |l: Option<String>| -> serde_json::Value {
            serde_json::from_str(&l.expect("an answer")).unwrap()
        };
        for v in [
            init,
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ] {
            client_w.write_all(line(v).as_bytes()).await.unwrap();
        }
        assert_eq!(next(lines.next_line().await.unwrap())["id"], 1);
        let call = serde_json::json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "bib_register_doc", "arguments": {
                "path": "cancelled.md",
                "content": "# Cancelled\n\nThe client gives up on this one.\n",
                "index": true,
                "token": TOKEN,
            }}
        });
        client_w.write_all(line(call).as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let cancel = serde_json::json!({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 2, "reason": "test"}
        });
        client_w.write_all(line(cancel).as_bytes()).await.unwrap();
        // Well past the embedding call: not written, and no second batch.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let paths: Vec<String> = store
            .documents()
            .unwrap()
            .into_iter()
            .map(|d| d.path)
            .collect();
        assert!(!paths.contains(&"cancelled.md".to_string()), "{paths:?}");
        assert_eq!(slow.calls(), 1, "no embedding after the cancel");
        // Still serving; the cancelled call gets no answer (the next line is the ping's).
        let ping = serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
        client_w.write_all(line(ping).as_bytes()).await.unwrap();
        assert_eq!(next(lines.next_line().await.unwrap())["id"], 3);
        drop(client_w);
        drop(lines);
        let _ = tokio::time::timeout(Duration::from_secs(5), serving).await;
    }

    #[test]
    fn invalid_argument_becomes_invalid_params_with_field() {
        let e = to_error_data(&ServiceError::invalid("top_k", "must be a number"));
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert_eq!(e.data.unwrap()["field"], "top_k");
    }
}
