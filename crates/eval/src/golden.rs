//! The question set: a golden JSONL file, a plain list of questions, or the query log.
//!
//! A golden line is a JSON object with a required `question` and optional `id`, `files`
//! (wiki-relative paths of the documents that hold the answer), `evidence` (the sentences that
//! answer it, as they appear in the source), `answer` (a reference answer) and `style` (how the
//! question was asked: `direct`, `paraphrase` or `exact`, so benchmarks can report per style).
//! Other fields are ignored, blank lines are skipped, and a bad line is an error naming the file
//! and line.

use std::path::Path;

use bib_store::RunLog;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::EvalError;

/// One question, with whatever reference data the set has.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GoldenItem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub question: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// How the question is phrased relative to the page (`direct`, `paraphrase`, `exact`);
    /// free text, kept as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub style: Option<String>,
}

impl GoldenItem {
    /// A bare question.
    pub fn question(q: impl Into<String>) -> Self {
        Self {
            question: q.into(),
            ..Self::default()
        }
    }
}

/// Parse golden JSONL text; `origin` names the source in errors.
pub fn parse_golden(text: &str, origin: &str) -> Result<Vec<GoldenItem>, EvalError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let t = line.trim().trim_start_matches('\u{feff}');
        if t.is_empty() {
            continue;
        }
        let bad = |reason: String| EvalError::GoldenLine {
            path: origin.to_string(),
            line: line_no,
            reason,
        };
        let v: Value = serde_json::from_str(t).map_err(|e| bad(format!("not JSON: {e}")))?;
        let Value::Object(obj) = v else {
            return Err(bad("expected a JSON object".into()));
        };
        let question = match obj.get("question") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
            Some(Value::String(_)) => return Err(bad("field `question` is empty".into())),
            Some(_) => return Err(bad("field `question` must be a string".into())),
            None => return Err(bad("missing field `question`".into())),
        };
        let strings = |key: &str| -> Result<Vec<String>, EvalError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::String(s)) => Ok(vec![s.clone()]),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| bad(format!("field `{key}` must be a list of strings")))
                    })
                    .collect(),
                Some(_) => Err(bad(format!("field `{key}` must be a list of strings"))),
            }
        };
        let opt_string = |key: &str| -> Result<Option<String>, EvalError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(Value::Number(n)) => Ok(Some(n.to_string())),
                Some(_) => Err(bad(format!("field `{key}` must be a string"))),
            }
        };
        out.push(GoldenItem {
            id: opt_string("id")?,
            question,
            files: strings("files")?,
            evidence: strings("evidence")?
                .into_iter()
                .filter(|e| !e.trim().is_empty())
                .collect(),
            answer: opt_string("answer")?.filter(|a| !a.trim().is_empty()),
            style: opt_string("style")?
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
        });
    }
    Ok(out)
}

/// Read and parse a golden JSONL file.
pub fn load_golden(path: &Path) -> Result<Vec<GoldenItem>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::GoldenRead {
        path: path.display().to_string(),
        source,
    })?;
    parse_golden(&text, &path.display().to_string())
}

/// The last `n` distinct logged questions, oldest first (the order they were asked). A
/// question asked several times counts once (its latest occurrence), so repeats never crowd
/// out older questions: the log is read further back until `n` distinct ones are found or it
/// ends.
pub fn from_query_log(store: &dyn RunLog, n: usize) -> Result<Vec<GoldenItem>, EvalError> {
    let mut limit = n.max(1);
    loop {
        let entries = store.recent_queries(limit)?;
        let exhausted = entries.len() < limit;
        let mut seen = std::collections::HashSet::new();
        let mut out: Vec<GoldenItem> = entries
            .into_iter()
            .filter(|e| !e.query.trim().is_empty() && seen.insert(e.query.clone()))
            .take(n)
            .map(|e| GoldenItem {
                id: Some(format!("log-{}", e.id)),
                ..GoldenItem::question(e.query)
            })
            .collect();
        if out.len() >= n || exhausted {
            out.reverse();
            return Ok(out);
        }
        limit = limit.saturating_mul(4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_golden_file_names_it_and_keeps_the_system_error() {
        let e = load_golden(Path::new("/nonexistent/golden.jsonl")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot read golden file /nonexistent/golden.jsonl"
        );
        let source = std::error::Error::source(&e).expect("the I/O error");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("an io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn parses_the_wiki_golden_format() {
        let text = r#"{"id": "es-001", "question": "¿Timeout?", "answer": "300 s", "files": ["a.md"], "evidence": ["El valor es 300."], "style": "direct"}

{"question": "Only a question"}
{"question": "one evidence string", "evidence": "x", "answer": null}
"#;
        let g = parse_golden(text, "g.jsonl").unwrap();
        assert_eq!(g.len(), 3);
        assert_eq!(g[0].id.as_deref(), Some("es-001"));
        assert_eq!(g[0].files, vec!["a.md"]);
        assert_eq!(g[0].evidence, vec!["El valor es 300."]);
        assert_eq!(g[0].answer.as_deref(), Some("300 s"));
        assert_eq!(g[0].style.as_deref(), Some("direct"));
        assert_eq!(g[1], GoldenItem::question("Only a question"));
        assert_eq!(g[1].style, None);
        assert_eq!(g[2].evidence, vec!["x"]);
        assert_eq!(g[2].answer, None);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let cases = [
            ("{\"question\": \"a\"}\nnot json", 2, "not JSON"),
            ("[1,2]", 1, "object"),
            ("{\"q\": 1}", 1, "missing field `question`"),
            ("{\"question\": \"  \"}", 1, "empty"),
            ("{\"question\": \"a\", \"files\": [1]}", 1, "`files`"),
            ("{\"question\": 3}", 1, "must be a string"),
            ("{\"question\": \"a\", \"style\": [1]}", 1, "`style`"),
        ];
        for (text, line, needle) in cases {
            let e = parse_golden(text, "g.jsonl").unwrap_err().to_string();
            assert!(e.starts_with(&format!("g.jsonl:{line}:")), "{e}");
            assert!(e.contains(needle), "{e}");
        }
        let e = load_golden(Path::new("/nonexistent/g.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/g.jsonl"), "{e}");
    }
}
