//! The OpenAPI 3.1 description served at `/openapi.json`. Request and response schemas are
//! generated from the same Rust types the handlers decode and encode (schemars, JSON Schema
//! 2020-12, which OpenAPI 3.1 uses as is), so the document cannot drift from the code; the
//! route list is checked against the router by a test.

use schemars::JsonSchema;
use serde_json::{json, Map, Value};

use crate::args::{AskArgs, EvalRetrievalArgs, IndexChunksArgs, PackArgs, RegisterDocArgs};
use crate::service::{AskOutput, IndexOutput, PackOutput, RegisterOutput};

/// Every `(method, path)` the API serves besides `/mcp`.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/ask"),
    ("post", "/pack"),
    ("post", "/eval"),
    ("post", "/docs"),
    ("get", "/docs/{doc}"),
    ("post", "/chunks"),
    ("get", "/runs"),
    ("get", "/healthz"),
    ("get", "/openapi.json"),
];

fn schema_of<T: JsonSchema>(components: &mut Map<String, Value>) -> Value {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
        s.definitions_path = "#/components/schemas/".into();
    });
    let mut generator = settings.into_generator();
    let schema = generator.root_schema_for::<T>();
    let mut v = serde_json::to_value(schema).unwrap_or(Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.remove("$schema");
        if let Some(Value::Object(defs)) = obj.remove("$defs") {
            components.extend(defs);
        }
        if let Some(Value::Object(mut comp)) = obj.remove("components") {
            if let Some(Value::Object(defs)) = comp.remove("schemas") {
                components.extend(defs);
            }
        }
    }
    for (name, def) in generator.take_definitions(true) {
        components.insert(name, def);
    }
    let name = T::schema_name().to_string();
    components.insert(name.clone(), v);
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

fn json_body(schema: Value) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema}}})
}

fn ok(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

/// The OpenAPI document.
pub fn document() -> Value {
    let mut c = Map::new();
    let ask_in = schema_of::<AskArgs>(&mut c);
    let ask_out = schema_of::<AskOutput>(&mut c);
    let pack_in = schema_of::<PackArgs>(&mut c);
    let pack_out = schema_of::<PackOutput>(&mut c);
    let eval_in = schema_of::<EvalRetrievalArgs>(&mut c);
    let reg_in = schema_of::<RegisterDocArgs>(&mut c);
    let reg_out = schema_of::<RegisterOutput>(&mut c);
    let idx_in = schema_of::<IndexChunksArgs>(&mut c);
    let idx_out = schema_of::<IndexOutput>(&mut c);
    c.insert(
        "Error".into(),
        json!({
            "type": "object",
            "required": ["error"],
            "properties": {"error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "enum": [
                        "invalid_argument", "unauthorized", "not_found", "not_available",
                        "payload_too_large", "timeout", "overloaded", "internal"]},
                    "message": {"type": "string"},
                    "field": {"type": "string", "description": "The offending argument, when there is one."}
                }
            }}
        }),
    );
    let any_object = json!({"type": "object"});
    let common_errors = |extra: &[(&str, &str)]| {
        let mut r = Map::new();
        r.insert(
            "400".into(),
            error_response("Bad argument (`error.field` names it)."),
        );
        r.insert("413".into(), error_response("Body over the size limit."));
        r.insert("503".into(), error_response("Overloaded."));
        r.insert("504".into(), error_response("Timed out."));
        for (code, d) in extra {
            r.insert((*code).into(), error_response(d));
        }
        r
    };
    let with = |mut base: Map<String, Value>, code: &str, v: Value| {
        base.insert(code.into(), v);
        Value::Object(base)
    };
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "bibliotecario",
            "version": crate::SERVER_VERSION,
            "description": "HTTP API of `bib serve`. MCP (streamable HTTP) is served at /mcp. \
                Mutating endpoints need `Authorization: Bearer <BIB_TOKEN>`; on a non-loopback \
                bind every endpoint but /healthz does."
        },
        "components": {
            "schemas": Value::Object(c),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        },
        "paths": {
            "/ask": {"post": {
                "summary": "Hybrid retrieval with optional sentence trimming (logged).",
                "operationId": "ask",
                "requestBody": json_body(ask_in),
                "responses": with(common_errors(&[("501", "Needs the embedding model.")]), "200", ok("Ranked chunks and token counts.", ask_out))
            }},
            "/pack": {"post": {
                "summary": "Pack a chat history into a token budget.",
                "operationId": "pack",
                "requestBody": json_body(pack_in),
                "responses": with(common_errors(&[]), "200", ok("Packed messages and statistics.", pack_out))
            }},
            "/eval": {"post": {
                "summary": "A/B evaluation of retrieval (baseline vs trimming …).",
                "operationId": "eval",
                "requestBody": json_body(eval_in),
                "responses": with(common_errors(&[("501", "Needs the embedding model or an LLM.")]), "200", ok("The evaluation report.", any_object.clone()))
            }},
            "/docs": {"post": {
                "summary": "Register (create or update) a document.",
                "operationId": "registerDoc",
                "security": [{"bearer": []}],
                "requestBody": json_body(reg_in),
                "responses": with(
                    with(common_errors(&[("401", "Missing or wrong token.")]), "200", ok("Updated.", reg_out.clone()))
                        .as_object().cloned().unwrap_or_default(),
                    "201", ok("Created.", reg_out))
            }},
            "/docs/{doc}": {"get": {
                "summary": "A document: by node id, its record with its chunks; by path, its text or lines `from`..`to` (as `bib get`).",
                "operationId": "getDoc",
                "parameters": [
                    {"name": "doc", "in": "path", "required": true, "schema": {"type": "string"},
                     "description": "A node id (digits) or the document's path as results give it; the path's `/` are sent as they are (`/docs/guides/restore.md`)."},
                    {"name": "from", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1},
                     "description": "First line, 1-based, inclusive (default 1); with a path only."},
                    {"name": "to", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1},
                     "description": "Last line, inclusive (default the last line)."},
                    {"name": "collection", "in": "query", "required": false, "schema": {"type": "string"},
                     "description": "Only look in this collection."}
                ],
                "responses": with(common_errors(&[("404", "No such document (the message names close paths)."), ("501", "The document's text is not stored.")]), "200", ok("The document record, or `{node_id, path, collection, title, line_start, line_end, total_lines, content}`.", any_object.clone()))
            }},
            "/chunks": {"post": {
                "summary": "Index chunks of registered documents and prune tails.",
                "operationId": "indexChunks",
                "security": [{"bearer": []}],
                "requestBody": json_body(idx_in),
                "responses": with(common_errors(&[("401", "Missing or wrong token."), ("501", "Needs the embedding model.")]), "200", ok("Counts.", idx_out))
            }},
            "/runs": {"get": {
                "summary": "The last ingest runs, newest first.",
                "operationId": "runs",
                "parameters": [{"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 20}}],
                "responses": with(common_errors(&[]), "200", ok("`{runs: [...]}`", any_object.clone()))
            }},
            "/healthz": {"get": {
                "summary": "Liveness and what is served.",
                "operationId": "healthz",
                "responses": {"200": ok("Status.", any_object.clone())}
            }},
            "/openapi.json": {"get": {
                "summary": "This document.",
                "operationId": "openapi",
                "responses": {"200": ok("OpenAPI 3.1.", any_object)}
            }}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_described_and_refs_resolve() {
        let d = document();
        let paths = d["paths"].as_object().unwrap();
        let mut described: Vec<(String, String)> = Vec::new();
        for (p, ops) in paths {
            for m in ops.as_object().unwrap().keys() {
                described.push((m.clone(), p.clone()));
            }
        }
        described.sort();
        let mut want: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        want.sort();
        assert_eq!(described, want);
        let text = d.to_string();
        let schemas = d["components"]["schemas"].as_object().unwrap();
        for piece in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &piece[..piece.find('"').unwrap()];
            assert!(schemas.contains_key(name), "dangling $ref {name}");
        }
    }
}
