#![no_main]
//! Fuzz the argument decoding of both server transports: HTTP bodies (`decode_body`), MCP tool
//! arguments (`decode_tool_arguments`) and the MCP stdio framing (`classify_line`). Besides
//! "no panic": a decoding error always names a field, and the framing forwards a `tools/call`
//! exactly when its arguments are an object (or absent/null).

use bib_server::args::{
    decode_body, decode_tool_arguments, AskArgs, EvalRetrievalArgs, IndexChunksArgs, PackArgs,
    RegisterDocArgs,
};
use bib_server::stdio::{classify_line, LineVerdict};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

fn one<T: DeserializeOwned>(bytes: &[u8]) {
    if let Err(e) = decode_body::<T>(bytes) {
        assert!(e.field.as_deref().is_some_and(|f| !f.is_empty()), "{e:?}");
    }
    if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(bytes) {
        if let Err(e) = decode_tool_arguments::<T>(Some(m)) {
            assert!(e.field.is_some(), "{e:?}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    one::<AskArgs>(data);
    one::<EvalRetrievalArgs>(data);
    one::<RegisterDocArgs>(data);
    one::<IndexChunksArgs>(data);
    one::<PackArgs>(data);
    let _ = classify_line(data);
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        let line = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "bib_ask", "arguments": v}});
        let forwarded = matches!(
            classify_line(line.to_string().as_bytes()),
            LineVerdict::Forward
        );
        assert_eq!(forwarded, v.is_object() || v.is_null());
    }
});
