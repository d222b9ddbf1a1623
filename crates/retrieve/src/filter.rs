//! Metadata filters, applied by the index *before* the top-k cut.
//!
//! A [`Filter`] is a conjunction of conditions: an optional path prefix (`path=guides/`) and
//! front-matter field equalities (`tags=nuget`, `app=core`). A field matches when its value
//! equals the wanted string, or, for a list field, when any element does; numbers and booleans
//! compare by their JSON text. A chunk whose document lacks the field does not match.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::RetrieveError;

/// A conjunction of metadata conditions. The default filter matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    /// Keep only documents whose wiki-relative path starts with this prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    /// Front-matter `(key, value)` conditions, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<(String, String)>,
    /// Keep only documents in one of these collections (empty: all collections).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collections: Vec<String>,
}

impl Filter {
    /// Whether the filter has no condition at all.
    pub fn is_empty(&self) -> bool {
        self.path_prefix.is_none() && self.fields.is_empty() && self.collections.is_empty()
    }

    /// Whether a document of `collection` passes the collection condition.
    pub fn matches_collection(&self, collection: &str) -> bool {
        self.collections.is_empty() || self.collections.iter().any(|c| c == collection)
    }

    /// Build a filter from `key=value` expressions. The key `path` sets the path prefix;
    /// every other key is a front-matter field.
    pub fn parse<S: AsRef<str>>(exprs: &[S]) -> Result<Self, RetrieveError> {
        let mut f = Filter::default();
        for e in exprs {
            let e = e.as_ref();
            let Some((k, v)) = e.split_once('=') else {
                return Err(RetrieveError::InvalidFilter(e.to_string()));
            };
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() {
                return Err(RetrieveError::InvalidFilter(e.to_string()));
            }
            if k == "path" {
                f.path_prefix = Some(v.trim_start_matches("./").to_string());
            } else {
                f.fields.push((k.to_string(), v.to_string()));
            }
        }
        Ok(f)
    }

    /// Whether a document with this path and front-matter passes the filter.
    pub fn matches(&self, path: &str, metadata: &Value) -> bool {
        if let Some(p) = &self.path_prefix {
            if !path.starts_with(p.as_str()) {
                return false;
            }
        }
        self.fields
            .iter()
            .all(|(k, want)| metadata.get(k).is_some_and(|v| value_matches(v, want)))
    }
}

fn value_matches(v: &Value, want: &str) -> bool {
    match v {
        Value::String(s) => s == want,
        Value::Array(items) => items.iter().any(|i| value_matches(i, want)),
        Value::Null | Value::Object(_) => false,
        // Numbers and booleans compare by their JSON text (the store's rule too).
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
