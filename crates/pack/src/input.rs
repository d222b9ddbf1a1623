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
    let v: Value = serde_json::from_str(json)?;
    history_from_value(&v)
}

/// Parse a history from an already-parsed JSON value.
pub fn history_from_value(v: &Value) -> Result<Vec<Message>, InputError> {
    let arr = match v {
        Value::Array(a) => a,
        Value::Object(o) => match o.get("messages") {
            Some(Value::Array(a)) => a,
            Some(other) => return Err(InputError::TopLevel(kind(other))),
            None => return Err(InputError::TopLevel("an object without `messages`")),
        },
        other => return Err(InputError::TopLevel(kind(other))),
    };
    let mut out = Vec::with_capacity(arr.len());
    // tool_use id → index in `out` of a call still waiting for its result
    let mut pending: Vec<(String, Message)> = Vec::new();
    for (index, m) in arr.iter().enumerate() {
        let err = |reason: String| InputError::Message { index, reason };
        let obj = m
            .as_object()
            .ok_or_else(|| err(format!("must be an object, found {}", kind(m))))?;
        let role = match obj.get("role") {
            Some(Value::String(r)) if r.trim().is_empty() => {
                return Err(err("field `role` is empty".into()))
            }
            Some(Value::String(r)) => r.clone(),
            Some(other) => {
                return Err(err(format!(
                    "field `role` must be a string, found {}",
                    kind(other)
                )))
            }
            None => return Err(err("missing field `role`".into())),
        };
        let ts = message_time(obj).map_err(err)?;
        let mk = |role: &str, content: String| Message {
            role: role.to_owned(),
            content,
            ts,
        };
        let content = obj.get("content").unwrap_or(&Value::Null);
        let mut texts: Vec<String> = Vec::new();
        let mut results: Vec<(Option<String>, String)> = Vec::new();
        let mut calls: Vec<(Option<String>, String)> = Vec::new();
        match content {
            Value::Null => {}
            Value::String(s) => texts.push(s.clone()),
            Value::Array(blocks) => {
                for (bi, b) in blocks.iter().enumerate() {
                    let berr = |r: String| err(format!("content block {bi}: {r}"));
                    let bo = match b {
                        Value::String(s) => {
                            texts.push(s.clone());
                            continue;
                        }
                        Value::Object(o) => o,
                        other => {
                            return Err(berr(format!("must be an object, found {}", kind(other))))
                        }
                    };
                    let ty = bo.get("type").and_then(Value::as_str).unwrap_or("text");
                    match ty {
                        "text" => match bo.get("text") {
                            Some(Value::String(t)) => texts.push(t.clone()),
                            _ => return Err(berr("`text` block without a string `text`".into())),
                        },
                        "tool_use" => {
                            let name = bo.get("name").and_then(Value::as_str).unwrap_or("tool");
                            let input = bo.get("input").cloned().unwrap_or(Value::Null);
                            calls.push((id_of(bo, "id"), render_call(name, &input)));
                        }
                        "tool_result" => {
                            let body = match bo.get("content") {
                                Some(Value::String(s)) => s.clone(),
                                Some(Value::Array(parts)) => parts
                                    .iter()
                                    .filter_map(|p| match p {
                                        Value::String(s) => Some(s.clone()),
                                        Value::Object(o) => {
                                            o.get("text").and_then(Value::as_str).map(str::to_owned)
                                        }
                                        _ => None,
                                    })
                                    .collect::<Vec<_>>()
                                    .join("\n"),
                                Some(Value::Null) | None => String::new(),
                                Some(other) => other.to_string(),
                            };
                            let err_mark =
                                if bo.get("is_error").and_then(Value::as_bool) == Some(true) {
                                    "Error: "
                                } else {
                                    ""
                                };
                            results.push((
                                id_of(bo, "tool_use_id"),
                                format!("{TOOL_RESULT_PREFIX}{err_mark}{body}"),
                            ));
                        }
                        // images, documents, thinking: no text to retrieve
                        _ => {}
                    }
                }
            }
            other => {
                return Err(err(format!(
                "field `content` must be a string, null or an array of content blocks, found {}",
                kind(other)
            )))
            }
        }
        // OpenAI function calls
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
        let is_tool_role = role == "tool" || role == "function";
        let text = texts.join("\n");
        if is_tool_role {
            let id = id_of(obj, "tool_call_id");
            let body = if text.starts_with(TOOL_RESULT_PREFIX) {
                text
            } else {
                format!("{TOOL_RESULT_PREFIX}{text}")
            };
            place_result(&mut out, &mut pending, id, mk(&role, body));
            continue;
        }
        // results first (they answer calls made before this message), then this message's text
        for (id, body) in results {
            place_result(&mut out, &mut pending, id, mk(&role, body));
        }
        if !pending.is_empty() && (!text.is_empty() || !calls.is_empty()) {
            // calls that never got a result stay where they were made
            out.extend(pending.drain(..).map(|(_, m)| m));
        }
        if !text.is_empty() || (calls.is_empty() && content.is_string()) {
            out.push(mk(&role, text));
        }
        for (id, call) in calls {
            match id {
                Some(id) => pending.push((id, mk(&role, call))),
                None => out.push(mk(&role, call)),
            }
        }
    }
    out.extend(pending.into_iter().map(|(_, m)| m));
    Ok(out)
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
