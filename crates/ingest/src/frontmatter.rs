//! Minimal YAML front-matter reader, used until `bib_text::frontmatter` lands.
//!
//! Understands the subset wikis use: `key: value` scalars (plain, `"double"` or `'single'`
//! quoted, numbers and booleans), inline lists `[a, b]`, and block lists of `- item` lines
//! under a `key:` line. Anything else inside the `---` fences is an error naming the line, so a
//! broken header is reported instead of silently indexed as text.

use serde_json::{Map, Number, Value};

/// A document split into front-matter and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The front-matter as a JSON object, or `Null` when the file has none.
    pub metadata: Value,
    /// Byte offset of the body in the text.
    pub body_offset: usize,
}

/// Split `text` into front-matter and body. Errors describe the broken line.
pub fn split(text: &str) -> Result<Split, String> {
    let mut lines = text.split_inclusive('\n');
    let Some(first) = lines.next() else {
        return Ok(Split {
            metadata: Value::Null,
            body_offset: 0,
        });
    };
    if first.trim_end() != "---" {
        return Ok(Split {
            metadata: Value::Null,
            body_offset: 0,
        });
    }
    let mut offset = first.len();
    let mut body: Vec<(usize, &str)> = Vec::new();
    let mut closed = None;
    for (i, line) in lines.enumerate() {
        let t = line.trim_end();
        offset += line.len();
        if t == "---" || t == "..." {
            closed = Some(offset);
            break;
        }
        body.push((i + 2, t));
    }
    let Some(body_offset) = closed else {
        return Err("front-matter opened by `---` on line 1 is never closed".into());
    };
    let mut map = Map::new();
    let mut current_list: Option<String> = None;
    for (lineno, line) in body {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(item) =
            trimmed
                .strip_prefix("- ")
                .or(if trimmed == "-" { Some("") } else { None })
        {
            let Some(key) = &current_list else {
                return Err(format!(
                    "front-matter line {lineno}: list item `{trimmed}` without a key"
                ));
            };
            if let Some(Value::Array(a)) = map.get_mut(key) {
                a.push(scalar(item.trim(), lineno)?);
            }
            continue;
        }
        if line.starts_with([' ', '\t']) {
            return Err(format!(
                "front-matter line {lineno}: unexpected indented line `{trimmed}`"
            ));
        }
        let Some((k, v)) = line.split_once(':') else {
            return Err(format!(
                "front-matter line {lineno}: expected `key: value`, found `{trimmed}`"
            ));
        };
        let key = unquote(k.trim());
        if key.is_empty() {
            return Err(format!("front-matter line {lineno}: empty key"));
        }
        let v = v.trim();
        current_list = None;
        if v.is_empty() {
            map.insert(key.clone(), Value::Array(Vec::new()));
            current_list = Some(key);
        } else if let Some(inner) = v.strip_prefix('[') {
            let Some(inner) = inner.strip_suffix(']') else {
                return Err(format!("front-matter line {lineno}: unclosed `[` in `{v}`"));
            };
            let items = inner
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| scalar(s, lineno))
                .collect::<Result<Vec<_>, _>>()?;
            map.insert(key, Value::Array(items));
        } else if v.starts_with(['{', '|', '>', '&', '*', '!']) {
            return Err(format!(
                "front-matter line {lineno}: unsupported YAML construct in `{v}`"
            ));
        } else {
            map.insert(key, scalar(v, lineno)?);
        }
    }
    // A key followed by nothing at all is an empty string, not an empty list.
    for v in map.values_mut() {
        if matches!(v, Value::Array(a) if a.is_empty()) {
            *v = Value::String(String::new());
        }
    }
    Ok(Split {
        metadata: Value::Object(map),
        body_offset,
    })
}

fn unquote(s: &str) -> String {
    let b = s.as_bytes();
    if b.len() >= 2
        && ((b[0] == b'"' && b[b.len() - 1] == b'"') || (b[0] == b'\'' && b[b.len() - 1] == b'\''))
    {
        s[1..s.len() - 1].to_string()
    } else {
        s.to_string()
    }
}

fn scalar(s: &str, lineno: usize) -> Result<Value, String> {
    let b = s.as_bytes();
    if let Some(&q) = b.first() {
        if q == b'"' || q == b'\'' {
            if b.len() < 2 || b[b.len() - 1] != q {
                return Err(format!(
                    "front-matter line {lineno}: unterminated quote in `{s}`"
                ));
            }
            let inner = &s[1..s.len() - 1];
            return Ok(Value::String(if q == b'"' {
                inner.replace("\\\"", "\"")
            } else {
                inner.replace("''", "'")
            }));
        }
    }
    // Strip a trailing comment.
    let s = match s.find(" #") {
        Some(i) => s[..i].trim_end(),
        None => s,
    };
    match s {
        "true" | "True" => return Ok(Value::Bool(true)),
        "false" | "False" => return Ok(Value::Bool(false)),
        "null" | "~" => return Ok(Value::Null),
        _ => {}
    }
    if let Ok(i) = s.parse::<i64>() {
        return Ok(Value::Number(i.into()));
    }
    if s.contains('.') && !s.ends_with('.') {
        if let Some(n) = s.parse::<f64>().ok().and_then(Number::from_f64) {
            return Ok(Value::Number(n));
        }
    }
    Ok(Value::String(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_the_common_subset() {
        let t = "---\ntitle: \"Hola: mundo\"\nms.date: 01/09/2017\nn: 3\ndraft: false\ntags: [a, 'b c']\nf1_keywords:\n- NU5128\n  - x\nempty:\n---\n# Body\n";
        let s = split(t).unwrap();
        assert_eq!(
            s.metadata,
            json!({"title": "Hola: mundo", "ms.date": "01/09/2017", "n": 3, "draft": false,
                   "tags": ["a", "b c"], "f1_keywords": ["NU5128", "x"], "empty": ""})
        );
        assert_eq!(&t[s.body_offset..], "# Body\n");
    }

    #[test]
    fn no_front_matter() {
        let s = split("# Title\n---\n").unwrap();
        assert_eq!(s.metadata, Value::Null);
        assert_eq!(s.body_offset, 0);
        assert_eq!(split("").unwrap().body_offset, 0);
    }

    #[test]
    fn broken_front_matter_is_an_error_naming_the_line() {
        assert!(split("---\ntitle: x\n# never closed\n")
            .unwrap_err()
            .contains("never closed"));
        let e = split("---\ntitle: x\nthis is not yaml\n---\nbody").unwrap_err();
        assert!(e.contains("line 3"), "{e}");
        assert!(split("---\ntags: [a, b\n---\n")
            .unwrap_err()
            .contains("unclosed"));
        assert!(split("---\n- orphan\n---\n")
            .unwrap_err()
            .contains("without a key"));
        assert!(split("---\nt: \"open\n---\n")
            .unwrap_err()
            .contains("unterminated"));
    }
}
