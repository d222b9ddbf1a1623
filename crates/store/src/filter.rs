//! Metadata filters applied by the store *before* the top-k cut.
//!
//! A [`Filter`] is a conjunction: an optional set of collections (the document's collection is
//! one of them), an optional path prefix (plain string prefix of the
//! normalized path) and front-matter `key = value` conditions. A field matches when its value
//! is that string, or, for a list field, when any element is; numbers and booleans compare by
//! their JSON text; a document lacking the field does not match. This is the one filter type:
//! `bib_retrieve::Filter` is this type, so the same filter goes from the CLI, MCP and HTTP
//! through retrieval into both stores unchanged.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A filter expression that is not `key=value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid filter `{0}`: expected key=value")]
pub struct InvalidFilter(pub String);

/// A conjunction of conditions. The default filter matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<(String, String)>,
    /// Only documents in one of these collections (none: every collection).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collections: Vec<String>,
}

impl Filter {
    /// Matches everything.
    pub fn none() -> Self {
        Self::default()
    }

    /// Only documents whose path starts with `prefix`.
    pub fn path_prefix(prefix: impl Into<String>) -> Self {
        Self {
            path_prefix: Some(prefix.into()),
            ..Self::default()
        }
    }

    /// Add a front-matter condition.
    pub fn with_field(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.fields.push((key.into(), value.into()));
        self
    }

    /// Only documents in one of `collections` (added to those already allowed).
    pub fn with_collections<I, S>(mut self, collections: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.collections
            .extend(collections.into_iter().map(Into::into));
        self
    }

    /// Build a filter from `key=value` expressions. The key `path` sets the path prefix;
    /// every other key is a front-matter field.
    pub fn parse<S: AsRef<str>>(exprs: &[S]) -> Result<Self, InvalidFilter> {
        let mut f = Filter::default();
        for e in exprs {
            let e = e.as_ref();
            let Some((k, v)) = e.split_once('=') else {
                return Err(InvalidFilter(e.to_string()));
            };
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() {
                return Err(InvalidFilter(e.to_string()));
            }
            if k == "path" {
                f.path_prefix = Some(v.trim_start_matches("./").to_string());
            } else {
                f.fields.push((k.to_string(), v.to_string()));
            }
        }
        Ok(f)
    }

    /// Whether the filter has no condition.
    pub fn is_empty(&self) -> bool {
        self.path_prefix.is_none() && self.fields.is_empty() && self.collections.is_empty()
    }

    /// Whether a document of `collection` passes the collection condition.
    pub fn matches_collection(&self, collection: &str) -> bool {
        self.collections.is_empty() || self.collections.iter().any(|c| c == collection)
    }

    /// Whether a document with this path and front-matter passes.
    pub fn matches(&self, path: &str, metadata: &Value) -> bool {
        if let Some(p) = &self.path_prefix {
            if !path.starts_with(p.as_str()) {
                return false;
            }
        }
        self.fields
            .iter()
            .all(|(k, want)| metadata_matches(metadata, k, want))
    }
}

/// Whether front-matter `metadata` has field `key` equal to (or, for a list, containing) `want`.
pub fn metadata_matches(metadata: &Value, key: &str, want: &str) -> bool {
    metadata.get(key).is_some_and(|v| value_matches(v, want))
}

fn value_matches(v: &Value, want: &str) -> bool {
    match v {
        Value::String(s) => s == want,
        Value::Array(items) => items.iter().any(|i| value_matches(i, want)),
        Value::Null | Value::Object(_) => false,
        // Numbers and booleans compare by their JSON text.
        other => json_text(other) == want,
    }
}

fn json_text(v: &Value) -> String {
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matching_rules() {
        let meta =
            json!({"app": "core", "tags": ["nuget", "cli"], "draft": false, "n": 3, "o": {"a": 1}});
        let f = |p: Option<&str>, kv: &[(&str, &str)]| Filter {
            path_prefix: p.map(str::to_string),
            fields: kv
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            collections: Vec::new(),
        };
        assert!(f(None, &[]).matches("a.md", &meta));
        assert!(f(None, &[("app", "core")]).matches("a.md", &meta));
        assert!(!f(None, &[("app", "web")]).matches("a.md", &meta));
        assert!(f(None, &[("tags", "cli")]).matches("a.md", &meta));
        assert!(!f(None, &[("tags", "x")]).matches("a.md", &meta));
        assert!(f(None, &[("draft", "false")]).matches("a.md", &meta));
        assert!(f(None, &[("n", "3")]).matches("a.md", &meta));
        assert!(!f(None, &[("o", "1")]).matches("a.md", &meta));
        assert!(!f(None, &[("missing", "x")]).matches("a.md", &meta));
        assert!(f(Some("guides/"), &[("app", "core")]).matches("guides/x.md", &meta));
        assert!(!f(Some("guides/"), &[]).matches("api/x.md", &meta));
        assert!(!f(None, &[("app", "core")]).matches("a.md", &Value::Null));
        let c = Filter::none().with_collections(["kb", "api"]);
        assert!(!c.is_empty());
        assert!(c.matches_collection("kb") && c.matches_collection("api"));
        assert!(!c.matches_collection("notes"));
        assert!(Filter::none().matches_collection("anything"));
    }

    #[test]
    fn parse_and_match_cases() {
        let meta = json!({"app": "core", "tags": ["nuget", "cli"], "draft": false, "n": 3});
        // (filters, path, expected)
        let cases: &[(&[&str], &str, bool)] = &[
            (&[], "a.md", true),
            (&["app=core"], "a.md", true),
            (&["app=web"], "a.md", false),
            (&["tags=cli"], "a.md", true),
            (&["tags=docs"], "a.md", false),
            (&["draft=false"], "a.md", true),
            (&["n=3"], "a.md", true),
            (&["missing=x"], "a.md", false),
            (&["path=guides/"], "guides/x.md", true),
            (&["path=./guides/"], "guides/x.md", true),
            (&["path=guides/"], "api/x.md", false),
            (&["path=guides/", "app=core"], "guides/x.md", true),
            (&["path=guides/", "app=web"], "guides/x.md", false),
        ];
        for (exprs, path, expect) in cases {
            let f = Filter::parse(exprs).unwrap();
            assert_eq!(f.matches(path, &meta), *expect, "{exprs:?} on {path}");
        }
    }

    #[test]
    fn bad_expressions_are_errors() {
        assert!(Filter::parse(&["novalue"]).is_err());
        assert!(Filter::parse(&["=x"]).is_err());
        assert!(Filter::parse(&["k=v=w"]).unwrap().fields == vec![("k".into(), "v=w".into())]);
    }
}
