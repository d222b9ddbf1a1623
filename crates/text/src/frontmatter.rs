//! YAML front-matter and DocFX include transclusion.
//!
//! [`parse_document`] splits a Markdown source into metadata (the YAML front-matter as a JSON
//! map), a title and the body with its byte offset in the source. It tolerates what real wikis
//! contain: a UTF-8 BOM, CRLF line endings, no front-matter at all, quoted titles with colons,
//! fields that are sometimes a string and sometimes a list, empty values. Broken YAML is a
//! [`FrontMatterError`] carrying the line number in the source file (the caller adds the file
//! name); it never panics. YAML is parsed with `serde-saphyr` (maintained, panic-free; the
//! archived `serde_yaml` and the unsound `serde_yml` are avoided on purpose).
//!
//! [`resolve_includes`] expands DocFX `[!INCLUDE [title](path)]` lines. This crate does no I/O:
//! the caller supplies an [`IncludeLoader`] that reads a path. Paths are resolved relative to the
//! including file, included files lose their own front-matter, and cycles are reported.

use serde_json::{Map, Value};

/// A parsed Markdown document: borrowed body, owned metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Document<'a> {
    /// The front-matter as a JSON object (empty when there is none).
    pub metadata: Map<String, Value>,
    /// Front-matter `title`, else the first H1, else the caller's fallback (the file stem).
    pub title: String,
    /// The Markdown after the front-matter.
    pub body: &'a str,
    /// Byte offset of `body` in the source (BOM and front-matter skipped).
    pub body_offset: usize,
    /// Whether the source had a front-matter block.
    pub has_front_matter: bool,
}

/// Front-matter that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontMatterError {
    /// The YAML is malformed; `line` is 1-based in the source file.
    #[error("invalid YAML front-matter at line {line}: {message}")]
    Yaml { line: usize, message: String },
    /// The YAML parsed, but is not a mapping of keys to values.
    #[error("front-matter at line {line} is not a key/value mapping")]
    NotAMapping { line: usize },
    /// A field the product reads (`title`, `tags`) has a type it cannot use.
    #[error("front-matter field `{field}` at line {line} must be {expected}, not {found}")]
    FieldType {
        line: usize,
        field: &'static str,
        expected: &'static str,
        found: &'static str,
    },
}

impl FrontMatterError {
    /// The 1-based line number in the source file.
    pub fn line(&self) -> usize {
        match self {
            Self::Yaml { line, .. } | Self::NotAMapping { line } | Self::FieldType { line, .. } => {
                *line
            }
        }
    }
}

/// The raw pieces of a source: YAML text (if any), its first line number, the body and its offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawParts<'a> {
    pub yaml: Option<&'a str>,
    /// 1-based line in the source where the YAML text starts.
    pub yaml_line: usize,
    pub body: &'a str,
    pub body_offset: usize,
}

/// Split the front-matter off `source` without parsing it. A block opens with a `---` line at
/// the very start (after an optional BOM) and closes with a `---` or `...` line; an opening
/// line with no closing one is not front-matter (it is a thematic break).
pub fn split_front_matter(source: &str) -> RawParts<'_> {
    let bom = if source.starts_with('\u{feff}') { 3 } else { 0 };
    let s = &source[bom..];
    let no_fm = RawParts {
        yaml: None,
        yaml_line: 0,
        body: s,
        body_offset: bom,
    };
    let first_end = s.find('\n').map_or(s.len(), |i| i + 1);
    if s[..first_end].trim_end() != "---" {
        return no_fm;
    }
    let yaml_start = first_end;
    let mut pos = yaml_start;
    while pos < s.len() {
        let end = s[pos..].find('\n').map_or(s.len(), |i| pos + i + 1);
        let line = s[pos..end].trim_end();
        if line == "---" || line == "..." {
            return RawParts {
                yaml: Some(&s[yaml_start..pos]),
                yaml_line: 2,
                body: &s[end..],
                body_offset: bom + end,
            };
        }
        pos = end;
    }
    no_fm
}

/// Parse a YAML front-matter text into a JSON map. `first_line` is the source line of its first
/// line, used to report errors in file coordinates.
pub fn parse_yaml(yaml: &str, first_line: usize) -> Result<Map<String, Value>, FrontMatterError> {
    let normalized;
    let yaml = if yaml.contains('\r') {
        normalized = yaml.replace("\r\n", "\n");
        normalized.as_str()
    } else {
        yaml
    };
    if yaml.trim().is_empty() {
        return Ok(Map::new());
    }
    let value: Value = serde_saphyr::from_str(yaml).map_err(|e| {
        let rel = e.location().map_or(1, |l| l.line().max(1) as usize);
        FrontMatterError::Yaml {
            line: first_line + rel - 1,
            message: first_line_of(&e.to_string()),
        }
    })?;
    match value {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        _ => Err(FrontMatterError::NotAMapping { line: first_line }),
    }
}

fn first_line_of(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

/// The document title from metadata: a non-empty string `title`, or the first non-empty string
/// of a `title` list.
pub fn metadata_title(metadata: &Map<String, Value>) -> Option<String> {
    let t = match metadata.get("title")? {
        Value::String(s) => s.trim().to_string(),
        Value::Array(items) => items
            .iter()
            .find_map(|v| v.as_str().map(str::trim).filter(|s| !s.is_empty()))?
            .to_string(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    (!t.is_empty()).then_some(t)
}

/// A metadata field as a list of strings, whether it was written as a string or a list.
pub fn string_list(metadata: &Map<String, Value>, key: &str) -> Vec<String> {
    match metadata.get(key) {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                _ => None,
            })
            .collect(),
        Some(Value::Number(n)) => vec![n.to_string()],
        Some(Value::Bool(b)) => vec![b.to_string()],
        _ => Vec::new(),
    }
}

/// The fields the product reads, and the shapes it accepts for them: a title is text (a number,
/// or a list whose items are text, is tolerated); tags are text or a list of scalars. Anything
/// else (`title: [1, 2]`, `tags: {a: b}`) is refused with the field and its line, instead of
/// being dropped silently.
fn check_field_types(
    metadata: &Map<String, Value>,
    yaml: &str,
    first_line: usize,
) -> Result<(), FrontMatterError> {
    fn kind(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "a list",
            Value::Object(_) => "a mapping",
        }
    }
    let line_of = |field: &str| {
        yaml.lines()
            .position(|l| {
                l.strip_prefix(field)
                    .is_some_and(|rest| rest.trim_start().starts_with(':'))
            })
            .map_or(first_line, |i| first_line + i)
    };
    type Check = (&'static str, &'static str, fn(&Value) -> bool);
    let checks: [Check; 2] = [
        ("title", "a string (or a list of strings)", |v| match v {
            Value::String(_) | Value::Number(_) | Value::Null => true,
            Value::Array(items) => items.iter().all(|i| matches!(i, Value::String(_))),
            _ => false,
        }),
        ("tags", "a string or a list of strings", |v| match v {
            Value::Array(items) => items
                .iter()
                .all(|i| matches!(i, Value::String(_) | Value::Number(_) | Value::Bool(_))),
            v => v.is_null() || matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_)),
        }),
    ];
    for (field, expected, ok) in checks {
        if let Some(v) = metadata.get(field) {
            if !ok(v) {
                let found = match v {
                    Value::Array(items) => {
                        items
                            .iter()
                            .find(|i| !i.is_string())
                            .map_or("a list", |i| match i {
                                Value::Object(_) => "a list holding a mapping",
                                Value::Array(_) => "a list holding a list",
                                _ => "a list of non-strings",
                            })
                    }
                    v => kind(v),
                };
                return Err(FrontMatterError::FieldType {
                    line: line_of(field),
                    field,
                    expected,
                    found,
                });
            }
        }
    }
    Ok(())
}

/// Parse a Markdown source: front-matter, title, body. `fallback_title` (the file stem) is used
/// when neither the front-matter nor an H1 gives a title.
pub fn parse_document<'a>(
    source: &'a str,
    fallback_title: &str,
) -> Result<Document<'a>, FrontMatterError> {
    let raw = split_front_matter(source);
    let metadata = match raw.yaml {
        Some(y) => {
            let m = parse_yaml(y, raw.yaml_line)?;
            check_field_types(&m, y, raw.yaml_line)?;
            m
        }
        None => Map::new(),
    };
    let title = metadata_title(&metadata)
        .or_else(|| crate::markdown::first_h1(raw.body))
        .unwrap_or_else(|| fallback_title.to_string());
    Ok(Document {
        metadata,
        title,
        body: raw.body,
        body_offset: raw.body_offset,
        has_front_matter: raw.yaml.is_some(),
    })
}

// ---------------------------------------------------------------------------------------------
// Includes
// ---------------------------------------------------------------------------------------------

/// Loads the text of an included file. Implemented by the caller (ingest), which owns I/O.
pub trait IncludeLoader {
    /// Read `path` (already resolved relative to the including file, `/`-separated). A file
    /// longer than `max_bytes` must be refused without being read whole: it would exceed the
    /// document's budget anyway ([`IncludeLimits`]).
    fn load(&mut self, path: &str, max_bytes: usize) -> Result<String, String>;
}

impl<F: FnMut(&str, usize) -> Result<String, String>> IncludeLoader for F {
    fn load(&mut self, path: &str, max_bytes: usize) -> Result<String, String> {
        self(path, max_bytes)
    }
}

/// The budget of one document's include expansion. Includes fan out (10 includes of 10
/// includes of … is 10^depth copies), so depth alone does not bound the work: the number of
/// includes expanded and the size of the expanded text are bounded per document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncludeLimits {
    /// Include directives expanded per document, at every depth together (default 256).
    pub max_includes: usize,
    /// Bytes of the expanded body, the document's own text included (default 10 MiB, the
    /// ingest default of `--max-file-bytes`).
    pub max_bytes: usize,
}

impl Default for IncludeLimits {
    fn default() -> Self {
        Self {
            max_includes: 256,
            max_bytes: 10 * 1024 * 1024,
        }
    }
}

/// Why includes could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IncludeError {
    /// A file includes itself, directly or through others; `chain` ends with the repeated path.
    #[error("include cycle: {}", chain.join(" -> "))]
    Cycle { chain: Vec<String> },
    /// The loader could not read an included file.
    #[error("cannot load include {path} (from {from}): {message}")]
    Load {
        path: String,
        from: String,
        message: String,
    },
    /// Includes nested deeper than [`MAX_INCLUDE_DEPTH`].
    #[error("includes nested deeper than {MAX_INCLUDE_DEPTH} levels at {path}")]
    TooDeep { path: String },
    /// More include directives than [`IncludeLimits::max_includes`] for one document.
    #[error("more than {limit} includes in one document (at {path})")]
    TooMany { path: String, limit: usize },
    /// The expanded document would exceed [`IncludeLimits::max_bytes`].
    #[error("the document with its includes exceeds {limit} bytes (at {path})")]
    TooLarge { path: String, limit: usize },
    /// An included file has broken front-matter.
    #[error("included file {path}: {source}")]
    FrontMatter {
        path: String,
        source: FrontMatterError,
    },
}

/// Maximum include nesting.
pub const MAX_INCLUDE_DEPTH: usize = 16;

/// One `[!INCLUDE [title](path)]` occurrence: its byte span in the text and its raw target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncludeDirective {
    pub start: usize,
    pub end: usize,
    pub target: String,
}

/// Find include directives outside code fences and inline code spans (a document that shows
/// the syntax in backticks is describing it, not using it).
pub fn find_includes(text: &str) -> Vec<IncludeDirective> {
    let mut out = Vec::new();
    let mut fence = None;
    let mut pos = 0;
    while pos < text.len() {
        let end = text[pos..].find('\n').map_or(text.len(), |i| pos + i + 1);
        let line = &text[pos..end];
        if let Some(f) = fence {
            if crate::sentences::fence_close(line, f) {
                fence = None;
            }
        } else if let Some(f) = crate::sentences::fence_open(line) {
            fence = Some(f);
        } else {
            scan_line_includes(line, pos, &mut out);
        }
        pos = end;
    }
    out
}

/// Byte ranges of the inline code spans of one line: a run of N backticks opens a span that the
/// next run of exactly N backticks closes (CommonMark); an unclosed run is literal text.
fn inline_code_spans(line: &str) -> Vec<(usize, usize)> {
    let b = line.as_bytes();
    let run_at = |i: usize| b[i..].iter().take_while(|&&c| c == b'`').count();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let n = run_at(i);
        let mut j = i + n;
        let mut closed = None;
        while j < b.len() {
            if b[j] == b'`' {
                let m = run_at(j);
                if m == n {
                    closed = Some(j + m);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match closed {
            Some(end) => {
                spans.push((i, end));
                i = end;
            }
            None => i += n,
        }
    }
    spans
}

fn scan_line_includes(line: &str, base: usize, out: &mut Vec<IncludeDirective>) {
    let lower = line.to_ascii_lowercase();
    let code = inline_code_spans(line);
    let mut from = 0;
    while let Some(k) = lower[from..].find("[!include") {
        let start = from + k;
        from = start + 1;
        if code.iter().any(|&(s, e)| s <= start && start < e) {
            continue;
        }
        // [!INCLUDE [title](target)]
        let rest = &line[start + "[!include".len()..];
        let rest_trim = rest.trim_start();
        let Some(after_open) = rest_trim.strip_prefix('[') else {
            continue;
        };
        let Some(close_title) = after_open.find("](") else {
            continue;
        };
        let target_part = &after_open[close_title + 2..];
        let Some(close_paren) = target_part.find(')') else {
            continue;
        };
        let target = target_part[..close_paren]
            .trim()
            .trim_start_matches('<')
            .trim_end_matches('>')
            .to_string();
        let tail = target_part[close_paren + 1..].trim_start();
        if !tail.starts_with(']') || target.is_empty() {
            continue;
        }
        let consumed = line.len() - tail.len() + 1;
        out.push(IncludeDirective {
            start: base + start,
            end: base + consumed,
            target,
        });
        from = consumed;
    }
}

/// Resolve `target` relative to the file `current` (`/`-separated): `a/b/c.md` + `../x.md` →
/// `a/x.md`. Absolute targets and DocFX root paths (`~/…`) are returned normalized as they are.
pub fn resolve_relative(current: &str, target: &str) -> String {
    let target = target.split(['#', '?']).next().unwrap_or(target);
    let target = target.replace('\\', "/");
    let (root, joined) = if target.starts_with('/') || target.starts_with("~/") {
        (String::new(), target.clone())
    } else {
        let cur = current.replace('\\', "/");
        let dir = cur.rfind('/').map_or("", |i| &cur[..i]);
        let joined = if dir.is_empty() {
            target.clone()
        } else {
            format!("{dir}/{target}")
        };
        (String::new(), joined)
    };
    let absolute = joined.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for p in joined.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != ".." && *l != "~") {
                    parts.pop();
                } else if !absolute {
                    parts.push("..");
                }
            }
            _ => parts.push(p),
        }
    }
    let body = parts.join("/");
    if absolute {
        format!("{root}/{body}")
    } else {
        format!("{root}{body}")
    }
}

/// Expand every `[!INCLUDE [..](path)]` in `body` (recursively), loading files through `loader`.
/// `current_path` is the including file's path, used to resolve relative targets and to detect
/// cycles. Included files' front-matter is dropped; their trailing newline is trimmed so an
/// inline include stays inline. The expansion stops with an error as soon as it would pass
/// `limits`, so the work and the memory are bounded by the budget, whatever the files hold.
pub fn resolve_includes(
    body: &str,
    current_path: &str,
    loader: &mut impl IncludeLoader,
    limits: &IncludeLimits,
) -> Result<String, IncludeError> {
    let mut state = Expansion {
        chain: vec![normalize_key(current_path)],
        includes: 0,
        limits: *limits,
    };
    if body.len() > limits.max_bytes {
        return Err(IncludeError::TooLarge {
            path: current_path.to_string(),
            limit: limits.max_bytes,
        });
    }
    let mut out = String::with_capacity(body.len());
    state.expand(body, current_path, loader, &mut out)?;
    Ok(out)
}

fn normalize_key(p: &str) -> String {
    resolve_relative("", p)
}

/// The state of one document's expansion: the include chain (for cycles and depth) and what
/// the budget has spent.
struct Expansion {
    chain: Vec<String>,
    includes: usize,
    limits: IncludeLimits,
}

impl Expansion {
    /// Append `body` to `out`, expanded. `out` only grows within `limits.max_bytes`: the text
    /// still to append is checked before it is appended.
    fn expand(
        &mut self,
        body: &str,
        current: &str,
        loader: &mut impl IncludeLoader,
        out: &mut String,
    ) -> Result<(), IncludeError> {
        let mut last = 0;
        for d in find_includes(body) {
            self.push(out, &body[last..d.start], current)?;
            let path = resolve_relative(current, &d.target);
            if self.chain.contains(&path) {
                let mut chain = self.chain.clone();
                chain.push(path);
                return Err(IncludeError::Cycle { chain });
            }
            if self.chain.len() > MAX_INCLUDE_DEPTH {
                return Err(IncludeError::TooDeep { path });
            }
            self.includes += 1;
            if self.includes > self.limits.max_includes {
                return Err(IncludeError::TooMany {
                    path,
                    limit: self.limits.max_includes,
                });
            }
            let room = self.limits.max_bytes.saturating_sub(out.len());
            let text = loader
                .load(&path, room)
                .map_err(|message| IncludeError::Load {
                    path: path.clone(),
                    from: current.to_string(),
                    message,
                })?;
            let doc = parse_document(&text, "").map_err(|source| IncludeError::FrontMatter {
                path: path.clone(),
                source,
            })?;
            let mark = out.len();
            self.chain.push(path.clone());
            self.expand(doc.body, &path, loader, out)?;
            self.chain.pop();
            // An inline include stays inline: the expansion's trailing line breaks go.
            let kept = mark + out[mark..].trim_end_matches(['\n', '\r']).len();
            out.truncate(kept);
            last = d.end;
        }
        self.push(out, &body[last..], current)
    }

    fn push(&self, out: &mut String, text: &str, at: &str) -> Result<(), IncludeError> {
        if out.len() + text.len() > self.limits.max_bytes {
            return Err(IncludeError::TooLarge {
                path: at.to_string(),
                limit: self.limits.max_bytes,
            });
        }
        out.push_str(text);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn no_front_matter() {
        let d = parse_document("# Hola\n\nTexto.", "stem").unwrap();
        assert_eq!(d.title, "Hola");
        assert_eq!(d.body_offset, 0);
        assert!(d.metadata.is_empty());
        assert!(!d.has_front_matter);
        let d = parse_document("Solo texto.", "stem").unwrap();
        assert_eq!(d.title, "stem");
    }

    #[test]
    fn bom_crlf_quoted_title_with_colon() {
        let src = "\u{feff}---\r\ntitle: \"NuGet: guía rápida\"\r\nms.reviewer: [a, b]\r\n---\r\n# Otro\r\nCuerpo";
        let d = parse_document(src, "x").unwrap();
        assert_eq!(d.title, "NuGet: guía rápida");
        assert_eq!(&src[d.body_offset..], d.body);
        assert!(d.body.starts_with("# Otro"));
        assert_eq!(string_list(&d.metadata, "ms.reviewer"), ["a", "b"]);
    }

    #[test]
    fn string_or_list_fields_and_nulls() {
        let src = "---\ntitle: T\nms.reviewer: anangaur\nf1_keywords:\n  - a\n  - b\nempty:\nms.date: 07/01/2025, 7/29/2026\n---\nbody";
        let d = parse_document(src, "x").unwrap();
        assert_eq!(string_list(&d.metadata, "ms.reviewer"), ["anangaur"]);
        assert_eq!(string_list(&d.metadata, "f1_keywords"), ["a", "b"]);
        assert_eq!(d.metadata.get("empty"), Some(&Value::Null));
        assert_eq!(
            d.metadata.get("ms.date").and_then(Value::as_str),
            Some("07/01/2025, 7/29/2026")
        );
        assert_eq!(d.body, "body");
    }

    #[test]
    fn title_fallbacks() {
        let d = parse_document(
            "---\nauthor: x\n---\n## <a name=\"a\"></a>No\n# <a name=\"t\"></a>Sí\n",
            "f",
        )
        .unwrap();
        assert_eq!(d.title, "Sí");
        let d = parse_document("---\ntitle: ''\n---\ntexto", "f").unwrap();
        assert_eq!(d.title, "f");
        let d = parse_document("---\ntitle: [Uno, Dos]\n---\n", "f").unwrap();
        assert_eq!(d.title, "Uno");
    }

    #[test]
    fn broken_yaml_reports_line() {
        let src = "---\ntitle: ok\nbad: [unclosed\nother: 1\n---\nbody";
        let err = parse_document(src, "x").unwrap_err();
        assert!(err.line() >= 3, "{err}");
        assert!(matches!(err, FrontMatterError::Yaml { .. }));
        let err = parse_document("---\ntitle: a\n  - b: : c\n---\n", "x").unwrap_err();
        assert!(err.line() >= 2 && err.line() <= 4, "{err}");
        let err = parse_document("---\n- a\n- b\n---\n", "x").unwrap_err();
        assert_eq!(err, FrontMatterError::NotAMapping { line: 2 });
    }

    #[test]
    fn unclosed_front_matter_is_body() {
        let d = parse_document("---\ntitle: x\nno close", "f").unwrap();
        assert!(!d.has_front_matter);
        assert_eq!(d.body_offset, 0);
    }

    #[test]
    fn relative_paths() {
        assert_eq!(resolve_relative("a/b/c.md", "../x.md"), "a/x.md");
        assert_eq!(
            resolve_relative("a/b/c.md", "./includes/y.md"),
            "a/b/includes/y.md"
        );
        assert_eq!(resolve_relative("c.md", "../../x.md"), "../../x.md");
        assert_eq!(resolve_relative("a/c.md", "y.md#frag"), "a/y.md");
        assert_eq!(resolve_relative("a\\c.md", "z.md"), "a/z.md");
    }

    fn loader(files: &[(&str, &str)]) -> impl FnMut(&str, usize) -> Result<String, String> {
        let map: HashMap<String, String> = files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |p: &str, _max: usize| {
            map.get(p)
                .cloned()
                .ok_or_else(|| format!("no such file: {p}"))
        }
    }

    #[test]
    fn includes_resolve_recursively() {
        let mut l = loader(&[
            (
                "docs/includes/a.md",
                "---\nms.topic: include\n---\nTexto A [!INCLUDE [b](b.md)]\n",
            ),
            ("docs/includes/b.md", "B"),
        ]);
        let body = "Antes\n\n[!INCLUDE [a](includes/a.md)]\n\nDespués";
        let out =
            resolve_includes(body, "docs/page.md", &mut l, &IncludeLimits::default()).unwrap();
        assert_eq!(out, "Antes\n\nTexto A B\n\nDespués");
        // Directives inside code fences are left alone.
        let fenced = "```\n[!INCLUDE [a](includes/a.md)]\n```";
        assert_eq!(
            resolve_includes(fenced, "docs/page.md", &mut l, &IncludeLimits::default()).unwrap(),
            fenced
        );
    }

    #[test]
    fn include_cycles_and_missing() {
        let mut l = loader(&[
            ("x/a.md", "[!include[b](b.md)]"),
            ("x/b.md", "[!INCLUDE [a](./a.md)]"),
        ]);
        let err = resolve_includes(
            "[!INCLUDE [a](a.md)]",
            "x/a.md",
            &mut l,
            &IncludeLimits::default(),
        )
        .unwrap_err();
        assert!(matches!(err, IncludeError::Cycle { .. }), "{err}");
        let err = resolve_includes(
            "[!INCLUDE [z](z.md)]",
            "x/p.md",
            &mut l,
            &IncludeLimits::default(),
        )
        .unwrap_err();
        assert!(matches!(err, IncludeError::Load { .. }), "{err}");
        assert!(err.to_string().contains("x/z.md"));
    }

    #[test]
    fn wrong_field_types_are_named() {
        // Issue 14: these were accepted silently (the title fell back to the H1, tags vanished).
        let e = parse_document("---\nms.topic: x\ntitle: [1, 2]\n---\n# H\n", "f").unwrap_err();
        assert_eq!(
            e.to_string(),
            "front-matter field `title` at line 3 must be a string (or a list of strings), not a list of non-strings"
        );
        let e = parse_document("---\ntags: {a: b}\n---\nx", "f").unwrap_err();
        assert_eq!(e.line(), 2);
        assert!(
            e.to_string().contains("`tags`") && e.to_string().contains("a mapping"),
            "{e}"
        );
        // The shapes real wikis use still parse.
        for ok in [
            "title: T\ntags: [a, 1, true]",
            "title: [A, B]\ntags: a",
            "title: 2024\ntags:",
        ] {
            let src = format!("---\n{ok}\n---\nx");
            assert!(parse_document(&src, "f").is_ok(), "{ok}");
        }
    }

    #[test]
    fn include_budget_bounds_fan_out_and_size() {
        // Issue 14: 4 levels of 10 includes of 2.2 KB became 12,123 chunks.
        let ten = |next: &str| format!("[!INCLUDE [n]({next})]\n").repeat(10);
        let (l1, l2, l3) = (ten("l2.md"), ten("l3.md"), ten("l4.md"));
        let mut l = loader(&[
            ("l1.md", &l1),
            ("l2.md", &l2),
            ("l3.md", &l3),
            ("l4.md", "hoja"),
        ]);
        let limits = IncludeLimits::default();
        let err = resolve_includes("[!INCLUDE [a](l1.md)]", "p.md", &mut l, &limits).unwrap_err();
        assert!(
            matches!(err, IncludeError::TooMany { limit: 256, .. }),
            "{err}"
        );

        // The expanded size is bounded, and the loader is told how much room is left.
        let small = IncludeLimits {
            max_includes: 1000,
            max_bytes: 64,
        };
        let mut rooms = Vec::new();
        let mut big = |_: &str, room: usize| {
            rooms.push(room);
            Ok("x".repeat(40))
        };
        let body = "0123456789 [!INCLUDE [a](a.md)] [!INCLUDE [b](b.md)]";
        let err = resolve_includes(body, "p.md", &mut big, &small).unwrap_err();
        assert!(
            matches!(err, IncludeError::TooLarge { limit: 64, .. }),
            "{err}"
        );
        assert_eq!(rooms, [53, 12]);
        let ok = resolve_includes(
            "ab [!INCLUDE [a](a.md)]",
            "p.md",
            &mut |_: &str, _| Ok("cd\n\n".to_string()),
            &small,
        );
        assert_eq!(ok.unwrap(), "ab cd");
    }

    #[test]
    fn find_includes_case_and_spacing() {
        let t = "a [!INCLUDE[t](p.md)] b [!include [t2]( q.md )] c [!INCLUDE oops]";
        let found: Vec<_> = find_includes(t).into_iter().map(|d| d.target).collect();
        assert_eq!(found, ["p.md", "q.md"]);
    }

    #[test]
    fn includes_in_code_are_text() {
        // (text, targets found)
        let cases: &[(&str, &[&str])] = &[
            ("syntax: `[!INCLUDE [name](path.md)]` (docs)", &[]),
            (
                "``a `[!INCLUDE [x](in.md)]` b`` then [!INCLUDE [y](out.md)]",
                &["out.md"],
            ),
            ("an unclosed ` [!INCLUDE [z](real.md)]", &["real.md"]),
            (
                "```\n[!INCLUDE [f](fenced.md)]\n```\n[!INCLUDE [g](after.md)]",
                &["after.md"],
            ),
            (
                "```\r\n[!INCLUDE [f](fenced.md)]\r\n```  \r\n[!INCLUDE [g](after.md)]",
                &["after.md"],
            ),
            // A vertical tab after the marker does not close the fence (CommonMark,
            // pulldown-cmark): what follows is still code.
            (
                "```\n[!INCLUDE [f](fenced.md)]\n```\x0b\n[!INCLUDE [g](code.md)]",
                &[],
            ),
        ];
        for (text, want) in cases {
            let got: Vec<String> = find_includes(text).into_iter().map(|d| d.target).collect();
            assert_eq!(&got, want, "{text:?}");
        }
    }
}
