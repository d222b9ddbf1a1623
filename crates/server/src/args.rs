//! Typed arguments of every operation, shared by MCP tools and HTTP endpoints.
//!
//! Each struct rejects unknown fields and derives a JSON Schema (the MCP `inputSchema`). JSON
//! is decoded with [`parse_args`], which names the offending field (`top_k`,
//! `chunks[2].chunk_index`) in every error instead of serde's field-less type message.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ServiceError;

/// Decode `value` into `T`; errors name the field path.
pub fn parse_args<T: DeserializeOwned>(value: Value) -> Result<T, ServiceError> {
    let value = match value {
        Value::Null => Value::Object(Default::default()),
        v => v,
    };
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // Unknown and missing fields sit one level above the field they name: serde says
        // which in the message (`unknown field `foo``), so lift it into the path.
        let field = match (path.as_str(), quoted_field(&inner)) {
            ("" | ".", Some(f)) => f,
            (p, Some(f)) if p == f || p.ends_with(&format!(".{f}")) => p.to_string(),
            (p, Some(f)) if p.ends_with('.') => format!("{p}{f}"),
            (p, Some(f)) => format!("{p}.{f}"),
            (".", None) => "(arguments)".to_string(),
            (p, _) => p.to_string(),
        };
        ServiceError::invalid(field, inner)
    })
}

/// Decode a raw JSON body (HTTP) into `T`: blank means `{}`, invalid JSON is an error on
/// `(body)`, the rest goes through [`parse_args`]. Never panics, on any bytes.
pub fn decode_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ServiceError> {
    let value: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(bytes)
            .map_err(|e| ServiceError::invalid("(body)", format!("not valid JSON: {e}")))?
    };
    parse_args(value)
}

/// Decode MCP tool arguments (`params.arguments`, absent = `{}`) into `T`.
pub fn decode_tool_arguments<T: DeserializeOwned>(
    arguments: Option<serde_json::Map<String, Value>>,
) -> Result<T, ServiceError> {
    parse_args(Value::Object(arguments.unwrap_or_default()))
}

/// The first backquoted name in a serde message (`unknown field `foo`, expected …`).
fn quoted_field(msg: &str) -> Option<String> {
    if !(msg.starts_with("unknown field") || msg.starts_with("missing field")) {
        return None;
    }
    let start = msg.find('`')? + 1;
    let len = msg[start..].find('`')?;
    // An empty key (`{"": 1}`) still needs a visible name.
    Some(match &msg[start..start + len] {
        "" => "\"\"".to_string(),
        f => f.to_string(),
    })
}

/// Retrieval mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModeArg {
    /// BM25 and vector lists fused by reciprocal rank.
    Hybrid,
    /// BM25 only.
    Bm25,
    /// Cosine over embeddings only.
    Vector,
}

impl From<ModeArg> for bib_retrieve::Mode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Hybrid => bib_retrieve::Mode::Hybrid,
            ModeArg::Bm25 => bib_retrieve::Mode::Bm25,
            ModeArg::Vector => bib_retrieve::Mode::Vector,
        }
    }
}

/// `bib_ask` / `POST /ask`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskArgs {
    /// The question.
    pub query: String,
    /// Chunks returned (1–100; default 5 or the server's setting).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Retrieval mode (default hybrid).
    #[serde(default)]
    pub mode: Option<ModeArg>,
    /// Trim every chunk to the sentences relevant to the question (default off, or
    /// RETRIEVAL_TRIM=1 on the server).
    #[serde(default)]
    pub trim: Option<bool>,
    /// Minimum sentence–question cosine kept when trimming.
    #[serde(default)]
    pub trim_threshold: Option<f32>,
    /// Neighbouring sentences kept on each side of a kept sentence.
    #[serde(default)]
    pub trim_window: Option<usize>,
    /// Metadata filters, all of which must hold: front-matter `field: value`, or `path` for a
    /// path prefix.
    #[serde(default)]
    pub filters: Option<BTreeMap<String, String>>,
    /// Only documents of these collections (default: every collection).
    #[serde(default)]
    pub collections: Option<Vec<String>>,
    /// Also give each result's whole text sentence by sentence, each marked kept or removed
    /// by trimming (`passage`), for a reader who wants the whole passage (default false).
    #[serde(default)]
    pub passages: Option<bool>,
    /// Rerank the best candidates with the server's `[llm]` chat model after the ranking
    /// signals (default off, or `[ask] rerank` / RETRIEVAL_RERANK=1 on the server). A reranker
    /// that fails leaves the ranking as it was and says why in `warnings`.
    #[serde(default)]
    pub rerank: Option<bool>,
}

/// `bib_get` / `GET /docs/{path}?from=&to=&collection=`: a document's text or some of its lines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    /// The document's path, as results give it (`guides/restore.md`).
    pub path: String,
    /// First line (1-based, inclusive; default 1). A result citing `path:12-30` has
    /// `line_start` 12 and `line_end` 30.
    #[serde(default)]
    pub from: Option<u32>,
    /// Last line (inclusive; default the last line of the document).
    #[serde(default)]
    pub to: Option<u32>,
    /// Only look in this collection.
    #[serde(default)]
    pub collection: Option<String>,
}

/// `bib_status`: no arguments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {}

/// `bib_eval_retrieval` / `POST /eval`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalRetrievalArgs {
    /// Questions to evaluate; without them the last real questions of the query log are
    /// replayed.
    #[serde(default)]
    pub questions: Option<Vec<String>>,
    /// Chunks per question (default 5).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Cosine threshold of the trimming variant.
    #[serde(default)]
    pub trim_threshold: Option<f32>,
    /// Neighbours kept around each kept sentence.
    #[serde(default)]
    pub trim_window: Option<usize>,
    /// Ask the configured chat endpoint for an answer per variant (default false).
    #[serde(default)]
    pub synthesize: Option<bool>,
}

/// `bib_register_doc` / `POST /docs`: create or update one document (its row and metadata).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterDocArgs {
    /// Wiki-relative path (`guides/setup.md`); a leading `public/` is stripped.
    pub path: String,
    /// The collection the document belongs to (default `api`; an ingest run never prunes
    /// documents of another collection).
    #[serde(default)]
    pub collection: Option<String>,
    /// The whole Markdown source, front-matter included. Give this, or `front_matter` + `body`.
    #[serde(default)]
    pub content: Option<String>,
    /// The front-matter as an object (with `body`, instead of `content`).
    #[serde(default)]
    pub front_matter: Option<BTreeMap<String, Value>>,
    /// The Markdown body (with `front_matter`, instead of `content`).
    #[serde(default)]
    pub body: Option<String>,
    /// Also chunk, embed and index the body now (default false: chunks arrive through
    /// `bib_index_chunks`).
    #[serde(default)]
    pub index: Option<bool>,
    /// The server's token (over stdio, and over HTTP when no `Authorization` header is sent).
    #[serde(default)]
    pub token: Option<String>,
}

/// One chunk of `bib_index_chunks`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChunkArg {
    /// The document, as returned by `bib_register_doc`.
    pub node_id: i64,
    /// Position of the chunk in its document (0, 1, 2 …); re-sending an index overwrites it.
    pub chunk_index: u32,
    /// The chunk's Markdown.
    pub content: String,
    /// Headings enclosing the chunk, outermost first (used in the `[Doc: …]` prefix).
    #[serde(default)]
    pub heading_path: Option<Vec<String>>,
}

/// One entry of the prune list: keep chunks `0..keep_count` of the document, delete the rest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PruneArg {
    pub node_id: i64,
    pub keep_count: u32,
}

/// `bib_index_chunks` / `POST /chunks`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IndexChunksArgs {
    /// Chunks to create or overwrite (embedded by the server).
    #[serde(default)]
    pub chunks: Vec<ChunkArg>,
    /// Documents whose tail chunks (index ≥ keep_count) are deleted, after the upserts.
    #[serde(default)]
    pub prune: Option<Vec<PruneArg>>,
    /// The server's token (over stdio, and over HTTP when no `Authorization` header is sent).
    #[serde(default)]
    pub token: Option<String>,
}

/// One history message of `bib_pack` (the schema only: messages are read by
/// `bib_pack::input::history_from_value`, the reader `bib pack` uses, which also takes
/// Anthropic content blocks and OpenAI `tool_calls`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MessageArg {
    /// `user`, `assistant`, `system`, `tool` … (not empty).
    pub role: String,
    /// The text: a string, null, or an array of content blocks (`text`, `tool_use`,
    /// `tool_result`).
    #[serde(default)]
    pub content: Value,
    /// The message's time, for relative dates: an RFC 3339 date-time
    /// (`2026-08-07T12:00:00Z`) or epoch milliseconds. Epoch seconds are refused.
    #[serde(default)]
    pub ts: Option<Value>,
    /// The same as `ts` (give one of them).
    #[serde(default)]
    pub timestamp: Option<Value>,
}

/// `bib_pack` / `POST /pack`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PackArgs {
    /// The history, oldest first; the live question is the last user message. The format of
    /// `bib pack` (see `bib pack --help`).
    #[schemars(with = "Vec<MessageArg>")]
    pub messages: Vec<Value>,
    /// Token budget of the packed output.
    pub budget: usize,
    /// Fuse embeddings with BM25 (e5-small when installed, else the knowledge base's model;
    /// falls back to lexical without a model; `stats.model` names the one used).
    #[serde(default)]
    pub hybrid: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrong_type_names_the_field() {
        let e = parse_args::<AskArgs>(json!({"query": "q", "top_k": "five"})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("top_k"));
        assert!(e.message.contains("top_k"), "{}", e.message);
    }

    #[test]
    fn unknown_field_is_rejected_and_named() {
        let e = parse_args::<AskArgs>(json!({"query": "q", "topk": 3})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("topk"));
        let e = parse_args::<IndexChunksArgs>(json!({
            "chunks": [{"node_id": 1, "chunk_index": 0, "content": "x", "extra": 1}]
        }))
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("chunks[0].extra"));
    }

    #[test]
    fn nested_type_error_has_the_path() {
        let e = parse_args::<IndexChunksArgs>(json!({
            "chunks": [{"node_id": 1, "chunk_index": 0, "content": "x"},
                       {"node_id": "one", "chunk_index": 1, "content": "y"}]
        }))
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("chunks[1].node_id"));
    }

    #[test]
    fn missing_field_is_named() {
        let e = parse_args::<AskArgs>(json!({"top_k": 2})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("query"));
        let e = parse_args::<PackArgs>(json!({"messages": []})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("budget"));
    }

    #[test]
    fn null_arguments_mean_empty_object() {
        let a = parse_args::<EvalRetrievalArgs>(Value::Null).unwrap();
        assert_eq!(a, EvalRetrievalArgs::default());
    }

    /// Found by the `server_args` fuzz target: an empty key gave an empty field name.
    #[test]
    fn an_empty_key_is_still_named() {
        let e = decode_body::<AskArgs>(b"\t\t{\"\":99\t}").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("\"\""));
        let e = parse_args::<IndexChunksArgs>(serde_json::json!({
            "chunks": [{"node_id": 1, "chunk_index": 0, "content": "x", "": 1}]
        }))
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("chunks[0].\"\""));
    }

    #[test]
    fn bodies_that_are_not_json_name_the_body() {
        let e = decode_body::<AskArgs>(b"{\"query\": \"q\"").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("(body)"));
        let e = decode_body::<AskArgs>(b"\xff\xfe").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("(body)"));
        let e = decode_body::<AskArgs>(b"\"a string\"").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("(arguments)"));
        assert_eq!(
            decode_body::<AskArgs>(br#"{"query":"q"}"#).unwrap().query,
            "q"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any bytes: the decoders of both transports answer Ok or an error that names a
        /// field, never panic; and the stdio framing judges every line.
        #[test]
        fn decoders_never_panic_and_errors_name_a_field(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            check_decoders(&bytes);
        }

        /// JSON-shaped input (objects with the real field names and random values) reaches
        /// the typed decoders rather than stopping at the JSON parser.
        #[test]
        fn json_shaped_arguments_never_panic(
            keys in proptest::collection::vec(proptest::sample::select(vec![
                "query", "top_k", "mode", "trim", "trim_threshold", "filters", "path",
                "content", "front_matter", "body", "index", "token", "chunks", "prune",
                "messages", "budget", "hybrid", "questions", "node_id", "x",
            ]), 0..6),
            values in proptest::collection::vec(proptest::sample::select(vec![
                "1", "-1", "0", "1e400", "18446744073709551616", "\"s\"", "\"\\u0000\"",
                "null", "true", "[]", "{}", "[{\"node_id\":1,\"chunk_index\":0,\"content\":\"x\"}]",
                "[{\"role\":\"user\",\"content\":\"q\"}]", "{\"a\":\"b\"}", "0.5",
            ]), 0..6),
        ) {
            let body = format!(
                "{{{}}}",
                keys.iter()
                    .zip(values.iter())
                    .map(|(k, v)| format!("\"{k}\":{v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            check_decoders(body.as_bytes());
        }
    }

    fn check_decoders(bytes: &[u8]) {
        fn one<T: DeserializeOwned>(bytes: &[u8]) {
            if let Err(e) = decode_body::<T>(bytes) {
                assert!(e.field.as_deref().is_some_and(|f| !f.is_empty()), "{e:?}");
                assert!(e.message.contains("invalid argument"), "{e:?}");
            }
            if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(bytes) {
                if let Err(e) = decode_tool_arguments::<T>(Some(m)) {
                    assert!(e.field.is_some(), "{e:?}");
                }
            }
        }
        one::<AskArgs>(bytes);
        one::<EvalRetrievalArgs>(bytes);
        one::<RegisterDocArgs>(bytes);
        one::<IndexChunksArgs>(bytes);
        one::<PackArgs>(bytes);
        let _ = crate::stdio::classify_line(bytes);
        // An object line that is a tools/call with these bytes as arguments, if they are JSON.
        if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
            let line = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "bib_ask", "arguments": v}});
            let verdict = crate::stdio::classify_line(line.to_string().as_bytes());
            let forwarded = matches!(verdict, crate::stdio::LineVerdict::Forward);
            assert_eq!(forwarded, v.is_object() || v.is_null(), "{verdict:?}");
        }
    }

    #[test]
    fn schemas_are_objects_without_extra_properties() {
        let s = serde_json::to_value(schemars::schema_for!(AskArgs)).unwrap();
        assert_eq!(s["type"], "object");
        assert_eq!(s["additionalProperties"], false);
        assert!(s["properties"].get("trim_window").is_some());
    }
}
