//! The framing layer in front of `rmcp` on stdio (`bib mcp`).
//!
//! `rmcp`'s line codec drops lines it cannot decode without a word, so a client that sent
//! truncated JSON, bad UTF-8 or a huge line waited forever; and a `tools/call` whose
//! `arguments` is not an object fell through to "method not found". This layer reads stdin
//! itself, one line at a time with a bounded buffer, and:
//! - answers a line over [`MAX_LINE_BYTES`] with JSON-RPC `-32700` (parse error) after
//!   discarding it as it streams in (never buffering more than the limit);
//! - answers bad UTF-8 and invalid JSON with `-32700`;
//! - answers JSON that is not a JSON-RPC message with `-32600` (invalid request), echoing
//!   its `id` when it has one;
//! - answers a `tools/call` whose `params` or `arguments` is not an object with `-32602`
//!   (invalid params);
//! - forwards every other line to `rmcp` unchanged.
//!
//! `rmcp`'s answers and this layer's errors are written to stdout by one task, one whole line
//! at a time, so they never interleave.

use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Longest line accepted on stdio (a 10 MiB document, JSON-escaped, fits).
pub const MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

/// JSON-RPC parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC invalid params.
pub const INVALID_PARAMS: i64 = -32602;

/// What to do with one input line.
#[derive(Debug, Clone, PartialEq)]
pub enum LineVerdict {
    /// Hand it to the MCP server.
    Forward,
    /// Blank line: nothing to do.
    Skip,
    /// Answer this JSON-RPC error instead.
    Reply(Value),
}

/// A JSON-RPC error response.
pub fn error_response(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// A valid JSON-RPC id (string, number or null).
fn id_of(v: &Value) -> Option<Value> {
    match v.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Some(id.clone()),
        _ => None,
    }
}

/// Judge one line (without its newline). Never panics, on any input.
pub fn classify_line(line: &[u8]) -> LineVerdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return LineVerdict::Skip;
    }
    let text = match std::str::from_utf8(line) {
        Ok(t) => t,
        Err(e) => {
            return LineVerdict::Reply(error_response(
                Value::Null,
                PARSE_ERROR,
                format!(
                    "Parse error: the line is not valid UTF-8 (at byte {})",
                    e.valid_up_to()
                ),
            ))
        }
    };
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return LineVerdict::Reply(error_response(
                Value::Null,
                PARSE_ERROR,
                format!("Parse error: {e}"),
            ))
        }
    };
    let Value::Object(obj) = &v else {
        return LineVerdict::Reply(error_response(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: a JSON-RPC message is an object (batches are not supported)",
        ));
    };
    let id = id_of(&v);
    let invalid = |msg: &str| {
        LineVerdict::Reply(error_response(
            id.clone().unwrap_or(Value::Null),
            INVALID_REQUEST,
            format!("Invalid Request: {msg}"),
        ))
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    if obj.contains_key("id") && id.is_none() {
        return invalid("`id` must be a string, a number or null");
    }
    let method = match obj.get("method") {
        None => {
            // A response (to a server request) or garbage.
            if obj.contains_key("result") || obj.contains_key("error") {
                return LineVerdict::Forward;
            }
            return invalid("no `method`");
        }
        Some(Value::String(m)) => m.as_str(),
        Some(_) => return invalid("`method` must be a string"),
    };
    let params = obj.get("params");
    if params.is_some_and(|p| !matches!(p, Value::Object(_) | Value::Array(_) | Value::Null)) {
        return match id {
            Some(id) => LineVerdict::Reply(error_response(
                id,
                INVALID_PARAMS,
                "Invalid params: `params` must be an object",
            )),
            None => LineVerdict::Skip,
        };
    }
    if method == "tools/call" {
        let bad = match params {
            Some(Value::Object(p)) => match p.get("arguments") {
                None | Some(Value::Object(_)) | Some(Value::Null) => None,
                Some(other) => Some(format!(
                    "Invalid params: `arguments` must be an object, not {}",
                    json_kind(other)
                )),
            },
            _ => Some("Invalid params: `params` must be an object with `name`".to_string()),
        };
        if let Some(msg) = bad {
            // A notification gets no answer, by JSON-RPC's rules.
            return match id {
                Some(id) => LineVerdict::Reply(error_response(id, INVALID_PARAMS, msg)),
                None => LineVerdict::Skip,
            };
        }
    }
    LineVerdict::Forward
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One line read with a bound: the line, or how many bytes an over-long one had.
enum Line {
    Text(Vec<u8>),
    TooLong(u64),
    Eof,
}

/// Read one `\n`-terminated line, keeping at most `max` bytes; the rest of an over-long line
/// is consumed and counted, not stored.
async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    buf.clear();
    let mut total: u64 = 0;
    let mut too_long = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if too_long {
                Line::TooLong(total)
            } else if total == 0 {
                Line::Eof
            } else {
                Line::Text(std::mem::take(buf))
            });
        }
        let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        total += part.len() as u64;
        if !too_long {
            if buf.len() + part.len() > max {
                too_long = true;
                buf.clear();
                buf.shrink_to(64 * 1024);
            } else {
                buf.extend_from_slice(part);
            }
        }
        let used = done.unwrap_or(chunk.len());
        r.consume(used);
        if done.is_some() {
            return Ok(if too_long {
                Line::TooLong(total)
            } else {
                Line::Text(std::mem::take(buf))
            });
        }
    }
}

/// Read `input` line by line, forward good lines to `to_mcp`, send error answers to
/// `replies`. Returns at end of input.
pub async fn frame_input<R, W>(
    input: R,
    mut to_mcp: W,
    replies: mpsc::Sender<Value>,
    max_line: usize,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut r = BufReader::with_capacity(64 * 1024, input);
    let mut buf = Vec::new();
    loop {
        match read_line_bounded(&mut r, &mut buf, max_line).await? {
            Line::Eof => break,
            Line::TooLong(n) => {
                tracing::warn!(bytes = n, "refused an over-long stdio line");
                let e = error_response(
                    Value::Null,
                    PARSE_ERROR,
                    format!(
                        "Parse error: a line of {n} bytes is over the limit of {max_line} bytes"
                    ),
                );
                if replies.send(e).await.is_err() {
                    break;
                }
            }
            Line::Text(line) => match classify_line(&line) {
                LineVerdict::Skip => {}
                LineVerdict::Forward => {
                    to_mcp.write_all(&line).await?;
                    to_mcp.write_all(b"\n").await?;
                    to_mcp.flush().await?;
                }
                LineVerdict::Reply(e) => {
                    if replies.send(e).await.is_err() {
                        break;
                    }
                }
            },
        }
    }
    to_mcp.shutdown().await?;
    Ok(())
}

/// Copy `rmcp`'s output lines and this layer's replies to `out`, one whole line at a time,
/// until both are finished.
pub async fn merge_output<R, W>(
    from_mcp: R,
    mut replies: mpsc::Receiver<Value>,
    mut out: W,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = BufReader::new(from_mcp);
    let mut line = Vec::new();
    let mut mcp_open = true;
    let mut replies_open = true;
    while mcp_open || replies_open {
        tokio::select! {
            n = lines.read_until(b'\n', &mut line), if mcp_open => {
                if n? == 0 {
                    mcp_open = false;
                } else {
                    if !line.ends_with(b"\n") {
                        line.push(b'\n');
                    }
                    out.write_all(&line).await?;
                    out.flush().await?;
                    line.clear();
                }
            }
            r = replies.recv(), if replies_open => match r {
                None => replies_open = false,
                Some(v) => {
                    let mut s = v.to_string();
                    s.push('\n');
                    out.write_all(s.as_bytes()).await?;
                    out.flush().await?;
                }
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(v: &LineVerdict) -> i64 {
        match v {
            LineVerdict::Reply(e) => e["error"]["code"].as_i64().unwrap(),
            other => panic!("expected an error reply, got {other:?}"),
        }
    }

    #[test]
    fn unparseable_lines_get_parse_errors() {
        // Issue 14: truncated JSON and bad UTF-8 were ignored; the client waited forever.
        assert_eq!(
            code(&classify_line(
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/li"#
            )),
            PARSE_ERROR
        );
        assert_eq!(
            code(&classify_line(
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}"
            )),
            PARSE_ERROR
        );
        let LineVerdict::Reply(e) = classify_line(b"not json") else {
            panic!()
        };
        assert_eq!(e["id"], Value::Null);
        assert_eq!(e["jsonrpc"], "2.0");
    }

    #[test]
    fn string_arguments_are_invalid_params_with_the_id() {
        // Issue 14: a string `arguments` got -32601 (method not found).
        let v = classify_line(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"bib_ask","arguments":"{\"query\":\"x\"}"}}"#,
        );
        assert_eq!(code(&v), INVALID_PARAMS);
        let LineVerdict::Reply(e) = v else { panic!() };
        assert_eq!(e["id"], 7);
        assert!(e["error"]["message"].as_str().unwrap().contains("a string"));
        assert_eq!(
            code(&classify_line(
                br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":"x"}"#
            )),
            INVALID_PARAMS
        );
    }

    #[test]
    fn good_messages_are_forwarded() {
        for l in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#[..],
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bib_ask","arguments":{"query":"q"}}}"#,
            br#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
            b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\r",
        ] {
            assert_eq!(classify_line(l), LineVerdict::Forward, "{}", String::from_utf8_lossy(l));
        }
        assert_eq!(classify_line(b"  \r"), LineVerdict::Skip);
    }

    #[test]
    fn json_that_is_not_jsonrpc_is_an_invalid_request() {
        assert_eq!(code(&classify_line(b"[1,2]")), INVALID_REQUEST);
        assert_eq!(
            code(&classify_line(br#"{"id":1,"method":"ping"}"#)),
            INVALID_REQUEST
        );
        assert_eq!(
            code(&classify_line(
                br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#
            )),
            INVALID_REQUEST
        );
        let LineVerdict::Reply(e) = classify_line(br#"{"jsonrpc":"2.0","id":9}"#) else {
            panic!()
        };
        assert_eq!(e["id"], 9);
    }

    #[tokio::test]
    async fn an_over_long_line_is_answered_without_buffering_it() {
        // A 3 MB line under a 1 MB limit, then a good line: one error, one forward.
        let mut input = vec![b'{'; 3 * 1024 * 1024];
        input.push(b'\n');
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
        let (tx, mut rx) = mpsc::channel(8);
        let mut forwarded = Vec::new();
        frame_input(&input[..], &mut forwarded, tx, 1024 * 1024)
            .await
            .unwrap();
        let e = rx.recv().await.unwrap();
        assert_eq!(e["error"]["code"], PARSE_ERROR);
        assert!(e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("3145728 bytes"));
        assert!(rx.recv().await.is_none());
        assert_eq!(
            forwarded,
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"
        );
    }

    #[tokio::test]
    async fn the_last_line_needs_no_newline() {
        let (tx, _rx) = mpsc::channel(8);
        let mut forwarded = Vec::new();
        frame_input(
            &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"[..],
            &mut forwarded,
            tx,
            1024,
        )
        .await
        .unwrap();
        assert_eq!(
            forwarded,
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"
        );
    }
}
