//! Histories from JSON: OpenAI-style `[{role, content, ts?}]` and Anthropic-style content
//! blocks, flattened to plain text messages the packer understands.
//!
//! - The top level is an array of messages, or an object with a `messages` array.
//! - `content` is a string, `null`, or an array of blocks: `text` blocks are joined; each
//!   `tool_use` becomes its own assistant message `{"tool": "<name>", "path": …, …}` (the form
//!   superseded-result detection and the tally card read; `file_path` is given as `path`);
//!   each `tool_result` becomes its own message prefixed `[Tool result]: `, placed right after
//!   its call so "the call just before the result" holds even for parallel calls.
//! - OpenAI `tool_calls` on an assistant message are flattened the same way; `role: "tool"`
//!   messages get the `[Tool result]: ` prefix.
//! - The timestamp is read from `ts`, `time`, `timestamp`, `date` or `createdAt` (epoch s/ms or
//!   a date string).

use serde_json::{Map, Value};

use crate::dates::time_value;
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
            Some(Value::String(r)) => r.clone(),
            Some(other) => {
                return Err(err(format!(
                    "field `role` must be a string, found {}",
                    kind(other)
                )))
            }
            None => return Err(err("missing field `role`".into())),
        };
        let ts = ["ts", "time", "timestamp", "date", "createdAt"]
            .iter()
            .find_map(|k| obj.get(*k).filter(|v| !v.is_null()))
            .and_then(time_value);
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
            r#"[{"role":"user","content":"hola","ts":1786104000},
                {"role":"assistant","content":"hi","timestamp":"2026-08-07T12:00:00Z"}]"#,
        )
        .unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].ts, Some(1_786_104_000_000));
        assert_eq!(h[1].ts, Some(1_786_104_000_000));
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
