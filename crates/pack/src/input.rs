//! Histories from JSON: OpenAI-style `[{role, content, ts?}]` and Anthropic-style content
//! blocks, flattened to plain text messages the packer understands. [`history_from_value`] is
//! the one reader of this format: `bib pack` (stdin) and HTTP `/pack` / MCP `bib_pack`
//! (`messages`) all go through it.
//!
//! - The top level is an array of messages, or an object with a `messages` array.
//! - `content` is a string, `null`, or an array of blocks: `text` blocks are joined; each
//!   `tool_use` becomes its own assistant message `{"tool": "<name>", "path": …, …}` (the form
//!   superseded-result detection and the tally card read; `file_path` is given as `path`);
//!   each `tool_result` becomes its own message prefixed `[Tool result]: `, placed right after
//!   its call so "the call just before the result" holds even for parallel calls.
//! - OpenAI `tool_calls` on an assistant message are flattened the same way; `role: "tool"`
//!   messages get the `[Tool result]: ` prefix.
//! - `role` is a non-empty string.
//! - A message's time is `ts` or `timestamp` (one of them), as [`timestamp_ms`] reads it: an
//!   RFC 3339 date-time string (`2026-08-07T12:00:00Z`, `2026-08-07T14:00:00+02:00`) or a
//!   number of epoch **milliseconds**. Seconds are never guessed: a number in the range of
//!   epoch seconds (1e8 to 1e11, 1973 to 5138 as seconds) is refused with the milliseconds it
//!   probably meant, as are numbers too large for milliseconds (micro- or nanoseconds) and
//!   anything else. `time`, `date` and `createdAt` are refused, naming `ts`.

use serde_json::{Map, Value};

use crate::Message;

/// Why a history could not be read. Messages name the index and field at fault.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("history is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "history is empty: expected a JSON array of messages, or an object with a `messages` array"
    )]
    Empty,
    #[error(
        "history must be a JSON array of messages or an object with a `messages` array, found {0}"
    )]
    TopLevel(&'static str),
    #[error("message {index}: {reason}")]
    Message { index: usize, reason: String },
}

/// The keys a message's time is read from.
pub const TIME_KEYS: [&str; 2] = ["ts", "timestamp"];

/// Keys that look like a time but are not read (refused so a time is never silently lost).
const NOT_TIME_KEYS: [&str; 3] = ["time", "date", "createdAt"];

/// Epoch milliseconds accepted: from 1e11 (1973-03-03) to below 1e14 (year 5138).
const MS_RANGE: std::ops::Range<f64> = 1e11..1e14;

/// A message's time as epoch milliseconds: an RFC 3339 date-time string, or a number of epoch
/// milliseconds in [1e11, 1e14). The error says what the value probably was.
pub fn timestamp_ms(v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => {
            let f = n.as_f64().filter(|f| f.is_finite()).unwrap_or(f64::NAN);
            if MS_RANGE.contains(&f) {
                Ok(f as i64)
            } else if (1e8..1e11).contains(&f) {
                Err(format!(
                    "{n} looks like epoch seconds; give epoch milliseconds ({}) or an RFC 3339 \
                     date-time",
                    (f * 1000.0) as i64
                ))
            } else if f >= 1e14 {
                Err(format!(
                    "{n} is too large for epoch milliseconds (micro- or nanoseconds?)"
                ))
            } else {
                Err(format!(
                    "{n} is not a time: give epoch milliseconds or an RFC 3339 date-time"
                ))
            }
        }
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s.trim())
            .map(|d| d.timestamp_millis())
            .map_err(|_| {
                format!("`{s}` is not an RFC 3339 date-time such as 2026-08-07T12:00:00Z")
            }),
        other => Err(format!(
            "must be an RFC 3339 string or epoch milliseconds, found {}",
            kind(other)
        )),
    }
}

/// The time of one message object, if it has one.
fn message_time(obj: &Map<String, Value>) -> Result<Option<i64>, String> {
    if let Some(k) = NOT_TIME_KEYS.iter().find(|k| obj.contains_key(**k)) {
        return Err(format!(
            "field `{k}` is not read: put the message's time in `ts` (or `timestamp`)"
        ));
    }
    let given: Vec<(&str, &Value)> = TIME_KEYS
        .iter()
        .filter_map(|k| obj.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
        .collect();
    match given.as_slice() {
        [] => Ok(None),
        [(k, v)] => timestamp_ms(v)
            .map(Some)
            .map_err(|e| format!("field `{k}`: {e}")),
        _ => Err("give `ts` or `timestamp`, not both".into()),
    }
}

/// The prefix that marks a flattened tool result (one of the default `tool_prefixes`).
pub const TOOL_RESULT_PREFIX: &str = "[Tool result]: ";

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parse a history from JSON text.
pub fn parse_history(json: &str) -> Result<Vec<Message>, InputError> {
    if json.trim().is_empty() {
        return Err(InputError::Empty);
    }
    let v: Value = serde_json::from_str(json)?;
    history_from_value(&v)
}

/// Parse a history from an already-parsed JSON value.
pub fn history_from_value(v: &Value) -> Result<Vec<Message>, InputError> {
    let arr = top_level_messages(v)?;
    let mut placer = MessagePlacer {
        out: Vec::with_capacity(arr.len()),
        pending: Vec::new(),
    };
    for (index, m) in arr.iter().enumerate() {
        let read = read_message(m).map_err(|reason| InputError::Message { index, reason })?;
        placer.place(read);
    }
    Ok(placer.finish())
}

/// The array of messages: the top level itself, or the `messages` field of an object.
fn top_level_messages(v: &Value) -> Result<&Vec<Value>, InputError> {
    match v {
        Value::Array(a) => Ok(a),
        Value::Object(o) => match o.get("messages") {
            Some(Value::Array(a)) => Ok(a),
            Some(other) => Err(InputError::TopLevel(kind(other))),
            None => Err(InputError::TopLevel("an object without `messages`")),
        },
        other => Err(InputError::TopLevel(kind(other))),
    }
}

/// One input message, read and flattened but not yet placed in the output.
struct ReadMessage {
    role: String,
    ts: Option<i64>,
    /// Whether `content` was a plain string (an empty string still makes a message).
    content_is_string: bool,
    /// `tool_call_id`, read for `tool` and `function` messages.
    tool_call_id: Option<String>,
    content: FlatContent,
}

/// A message's content blocks and tool calls, flattened to text.
#[derive(Default)]
struct FlatContent {
    texts: Vec<String>,
    /// `tool_result` blocks: (the `tool_use_id` they answer, the prefixed text).
    results: Vec<(Option<String>, String)>,
    /// `tool_use` blocks and OpenAI `tool_calls`: (the call's id, the rendered call).
    calls: Vec<(Option<String>, String)>,
}

/// Read one message object: role, time, content blocks and OpenAI tool calls, in that order,
/// so the first problem found is the one reported (the error is the reason, without the
/// message's index).
fn read_message(m: &Value) -> Result<ReadMessage, String> {
    let obj = m
        .as_object()
        .ok_or_else(|| format!("must be an object, found {}", kind(m)))?;
    let role = message_role(obj)?;
    let ts = message_time(obj)?;
    let content = obj.get("content").unwrap_or(&Value::Null);
    let mut flat = flatten_content(content)?;
    push_openai_tool_calls(obj, &mut flat.calls);
    let tool_call_id = if role == "tool" || role == "function" {
        id_of(obj, "tool_call_id")
    } else {
        None
    };
    Ok(ReadMessage {
        role,
        ts,
        content_is_string: content.is_string(),
        tool_call_id,
        content: flat,
    })
}

/// The `role` field: a non-empty string.
fn message_role(obj: &Map<String, Value>) -> Result<String, String> {
    match obj.get("role") {
        Some(Value::String(r)) if r.trim().is_empty() => Err("field `role` is empty".into()),
        Some(Value::String(r)) => Ok(r.clone()),
        Some(other) => Err(format!(
            "field `role` must be a string, found {}",
            kind(other)
        )),
        None => Err("missing field `role`".into()),
    }
}

/// The `content` field (a string, `null` or an array of blocks), flattened.
fn flatten_content(content: &Value) -> Result<FlatContent, String> {
    let mut flat = FlatContent::default();
    match content {
        Value::Null => {}
        Value::String(s) => flat.texts.push(s.clone()),
        Value::Array(blocks) => {
            for (bi, b) in blocks.iter().enumerate() {
                flatten_content_block(b, &mut flat)
                    .map_err(|r| format!("content block {bi}: {r}"))?;
            }
        }
        other => {
            return Err(format!(
                "field `content` must be a string, null or an array of content blocks, found {}",
                kind(other)
            ))
        }
    }
    Ok(flat)
}

/// One content block: a string or a `text` block adds text, a `tool_use` block a call, a
/// `tool_result` block a result; any other type carries no text to retrieve.
fn flatten_content_block(b: &Value, flat: &mut FlatContent) -> Result<(), String> {
    let bo = match b {
        Value::String(s) => {
            flat.texts.push(s.clone());
            return Ok(());
        }
        Value::Object(o) => o,
        other => return Err(format!("must be an object, found {}", kind(other))),
    };
    let ty = bo.get("type").and_then(Value::as_str).unwrap_or("text");
    match ty {
        "text" => match bo.get("text") {
            Some(Value::String(t)) => flat.texts.push(t.clone()),
            _ => return Err("`text` block without a string `text`".into()),
        },
        "tool_use" => {
            let name = bo.get("name").and_then(Value::as_str).unwrap_or("tool");
            let input = bo.get("input").cloned().unwrap_or(Value::Null);
            flat.calls
                .push((id_of(bo, "id"), render_call(name, &input)));
        }
        "tool_result" => flat
            .results
            .push((id_of(bo, "tool_use_id"), tool_result_text(bo))),
        // images, documents, thinking: no text to retrieve
        _ => {}
    }
    Ok(())
}

/// A `tool_result` block as one message text: the prefix, `Error: ` when `is_error`, and the
/// body (a string, or the text parts of an array joined by newlines).
fn tool_result_text(bo: &Map<String, Value>) -> String {
    let body = match bo.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_owned),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let err_mark = if bo.get("is_error").and_then(Value::as_bool) == Some(true) {
        "Error: "
    } else {
        ""
    };
    format!("{TOOL_RESULT_PREFIX}{err_mark}{body}")
}

/// OpenAI function calls (`tool_calls`), rendered like `tool_use` blocks.
fn push_openai_tool_calls(obj: &Map<String, Value>, calls: &mut Vec<(Option<String>, String)>) {
    if let Some(Value::Array(tcs)) = obj.get("tool_calls") {
        for tc in tcs {
            let f = tc.get("function").unwrap_or(tc);
            let name = f.get("name").and_then(Value::as_str).unwrap_or("tool");
            let args = match f.get("arguments") {
                Some(Value::String(s)) => {
                    serde_json::from_str(s).unwrap_or(Value::String(s.clone()))
                }
                Some(v) => v.clone(),
                None => Value::Null,
            };
            let id = tc.as_object().and_then(|o| id_of(o, "id"));
            calls.push((id, render_call(name, &args)));
        }
    }
}

/// The output history being built, and the tool calls still waiting for their result.
struct MessagePlacer {
    out: Vec<Message>,
    // tool_use id → index in `out` of a call still waiting for its result
    pending: Vec<(String, Message)>,
}

impl MessagePlacer {
    /// Place one read message: a `tool`/`function` message is one result; otherwise its
    /// results, then its text, then its calls (held back until their results arrive).
    fn place(&mut self, read: ReadMessage) {
        let ReadMessage {
            role,
            ts,
            content_is_string,
            tool_call_id,
            content,
        } = read;
        let mk = |role: &str, content: String| Message {
            role: role.to_owned(),
            content,
            ts,
        };
        let FlatContent {
            texts,
            results,
            calls,
        } = content;
        let is_tool_role = role == "tool" || role == "function";
        let text = texts.join("\n");
        if is_tool_role {
            let id = tool_call_id;
            let body = if text.starts_with(TOOL_RESULT_PREFIX) {
                text
            } else {
                format!("{TOOL_RESULT_PREFIX}{text}")
            };
            place_result(&mut self.out, &mut self.pending, id, mk(&role, body));
            return;
        }
        // results first (they answer calls made before this message), then this message's text
        for (id, body) in results {
            place_result(&mut self.out, &mut self.pending, id, mk(&role, body));
        }
        if !self.pending.is_empty() && (!text.is_empty() || !calls.is_empty()) {
            // calls that never got a result stay where they were made
            self.out.extend(self.pending.drain(..).map(|(_, m)| m));
        }
        if !text.is_empty() || (calls.is_empty() && content_is_string) {
            self.out.push(mk(&role, text));
        }
        for (id, call) in calls {
            match id {
                Some(id) => self.pending.push((id, mk(&role, call))),
                None => self.out.push(mk(&role, call)),
            }
        }
    }

    /// The history, with calls that never got a result at the end, in call order.
    fn finish(mut self) -> Vec<Message> {
        self.out.extend(self.pending.into_iter().map(|(_, m)| m));
        self.out
    }
}

fn id_of(o: &Map<String, Value>, key: &str) -> Option<String> {
    o.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Put a tool result right after its call (moving the call down from `pending`).
fn place_result(
    out: &mut Vec<Message>,
    pending: &mut Vec<(String, Message)>,
    id: Option<String>,
    result: Message,
) {
    let pos = id.and_then(|id| pending.iter().position(|(p, _)| *p == id));
    match pos {
        Some(p) => {
            let (_, call) = pending.remove(p);
            out.push(call);
        }
        None if !pending.is_empty() => {
            let (_, call) = pending.remove(0);
            out.push(call);
        }
        None => {}
    }
    out.push(result);
}

/// `{"tool": "<name>", "path": …, <other input fields>}` on one line.
fn render_call(name: &str, input: &Value) -> String {
    let mut s = format!("{{\"tool\": {}", Value::String(name.to_owned()));
    if let Value::Object(o) = input {
        let path_key = ["path", "file_path", "notebook_path", "file", "filename"]
            .into_iter()
            .find(|k| o.get(*k).is_some_and(Value::is_string));
        if let Some(k) = path_key {
            s.push_str(&format!(", \"path\": {}", o[k]));
        }
        for (k, v) in o {
            if Some(k.as_str()) == path_key {
                continue;
            }
            s.push_str(&format!(", {}: {}", Value::String(k.clone()), v));
        }
    } else if !input.is_null() {
        s.push_str(&format!(", \"input\": {input}"));
    }
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_style_with_timestamps() {
        let h = parse_history(
            r#"[{"role":"user","content":"hola","ts":1786104000000},
                {"role":"assistant","content":"hi","timestamp":"2026-08-07T14:00:00+02:00"},
                {"role":"user","content":"no time","ts":null}]"#,
        )
        .unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h[0].ts, Some(1_786_104_000_000));
        assert_eq!(h[1].ts, Some(1_786_104_000_000));
        assert_eq!(h[2].ts, None);
    }

    /// Issue 18: HTTP read `ts` 1786104000 (seconds) as milliseconds, i.e. 1970.
    #[test]
    fn times_are_never_guessed() {
        let one = |m: &str| parse_history(&format!("[{m}]")).map(|h| h[0].ts);
        let e = one(r#"{"role":"user","content":"x","ts":1786104000}"#).unwrap_err();
        assert!(
            e.to_string().contains("looks like epoch seconds")
                && e.to_string().contains("1786104000000"),
            "{e}"
        );
        for (m, says) in [
            (
                r#"{"role":"user","content":"x","ts":1786104000000000}"#,
                "too large",
            ),
            (r#"{"role":"user","content":"x","ts":-5}"#, "not a time"),
            (
                r#"{"role":"user","content":"x","ts":"2026-08-07"}"#,
                "RFC 3339",
            ),
            (
                r#"{"role":"user","content":"x","ts":"yesterday"}"#,
                "RFC 3339",
            ),
            (r#"{"role":"user","content":"x","ts":true}"#, "a boolean"),
            (
                r#"{"role":"user","content":"x","createdAt":1786104000000}"#,
                "`ts`",
            ),
            (
                r#"{"role":"user","content":"x","ts":1786104000000,"timestamp":1}"#,
                "not both",
            ),
            (r#"{"role":" ","content":"x"}"#, "`role` is empty"),
        ] {
            let e = one(m).unwrap_err().to_string();
            assert!(e.starts_with("message 0: "), "{e}");
            assert!(e.contains(says), "{m}: {e}");
        }
    }

    #[test]
    fn anthropic_blocks_are_flattened_and_results_follow_calls() {
        let h = parse_history(
            r#"{"messages":[
              {"role":"user","content":[{"type":"text","text":"read both files"}]},
              {"role":"assistant","content":[
                 {"type":"text","text":"reading"},
                 {"type":"tool_use","id":"a","name":"Read","input":{"file_path":"src/a.rs"}},
                 {"type":"tool_use","id":"b","name":"Bash","input":{"command":"ls"}}]},
              {"role":"user","content":[
                 {"type":"tool_result","tool_use_id":"b","content":"a.rs b.rs"},
                 {"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"fn a() {}"}]}]}
            ]}"#,
        )
        .unwrap();
        let c: Vec<&str> = h.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(
            c,
            vec![
                "read both files",
                "reading",
                r#"{"tool": "Bash", "command": "ls"}"#,
                "[Tool result]: a.rs b.rs",
                r#"{"tool": "Read", "path": "src/a.rs"}"#,
                "[Tool result]: fn a() {}",
            ]
        );
    }

    #[test]
    fn openai_tool_calls_and_tool_role() {
        let h = parse_history(
            r##"[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
                 "function":{"name":"fs.read","arguments":"{\"path\":\"x.md\"}"}}]},
                {"role":"tool","tool_call_id":"c1","content":"X doc"}]"##,
        )
        .unwrap();
        assert_eq!(h[0].content, r#"{"tool": "fs.read", "path": "x.md"}"#);
        assert_eq!(h[1].content, "[Tool result]: X doc");
        assert_eq!(h[1].role, "tool");
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let e = parse_history("[{\"role\":\"user\",\"content\":").unwrap_err();
        assert!(
            e.to_string().starts_with("history is not valid JSON"),
            "{e}"
        );
        let e = parse_history(" \n").unwrap_err();
        assert!(e.to_string().starts_with("history is empty"), "{e}");
        let e = parse_history(r#"{"foo":1}"#).unwrap_err();
        assert!(e.to_string().contains("`messages`"), "{e}");
        let e = parse_history(r#"[{"role":"user","content":5}]"#).unwrap_err();
        assert!(e.to_string().contains("message 0: field `content`"), "{e}");
        let e = parse_history(r#"[{"content":"x"}]"#).unwrap_err();
        assert!(e.to_string().contains("missing field `role`"), "{e}");
        let e = parse_history(r#"[{"role":"user","content":[{"type":"text"}]}]"#).unwrap_err();
        assert!(e.to_string().contains("content block 0"), "{e}");
    }
}
