//! The read use cases every front end shares, so `bib get` / MCP `bib_get` / HTTP
//! `GET /docs/{path}` and `bib status` / MCP `bib_status` answer the same thing:
//!
//! - [`get_lines`]: a document's source text, or a range of its lines, as the store kept it at
//!   ingest (front-matter included), so the lines are the ones a citation `path:12-30` names;
//! - [`status`]: where the knowledge base is, its collections, its model and its last run.

use serde::{Deserialize, Serialize};

use crate::{CollectionInfo, DocRecord, RunStatus, Store, StoreError};

/// A range of 1-based, inclusive line numbers; `None` ends are the first and last line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineRange {
    pub from: Option<u32>,
    pub to: Option<u32>,
}

impl LineRange {
    /// The whole document.
    pub const ALL: LineRange = LineRange {
        from: None,
        to: None,
    };

    /// Split `PATH[:FROM[-TO]]` (the form of a citation) into the path and its range:
    /// `a.md` is the whole file, `a.md:12` line 12, `a.md:12-30` lines 12 to 30, `a.md:12-` from
    /// line 12 to the end, `a.md:-30` the first 30 lines. A suffix that is not such a range is
    /// part of the path.
    pub fn split_spec(spec: &str) -> (&str, LineRange) {
        let Some((path, suffix)) = spec.rsplit_once(':') else {
            return (spec, Self::ALL);
        };
        let number = |s: &str| -> Option<Option<u32>> {
            if s.is_empty() {
                Some(None)
            } else if s.bytes().all(|b| b.is_ascii_digit()) {
                // Too many digits for a line number: still a range, and out of every file.
                Some(Some(s.parse().unwrap_or(u32::MAX)))
            } else {
                None
            }
        };
        let range = match suffix.split_once('-') {
            None => number(suffix)
                .filter(Option::is_some)
                .map(|n| LineRange { from: n, to: n }),
            Some((a, b)) => match (number(a), number(b)) {
                (Some(from), Some(to)) if from.is_some() || to.is_some() => {
                    Some(LineRange { from, to })
                }
                _ => None,
            },
        };
        match range {
            Some(r) if !path.is_empty() => (path, r),
            _ => (spec, Self::ALL),
        }
    }
}

/// Lines of one document, as [`get_lines`] returns them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Excerpt {
    pub node_id: i64,
    pub path: String,
    pub collection: String,
    pub title: String,
    /// 1-based, inclusive lines returned (`0`, `0` for an empty document).
    pub line_start: u32,
    pub line_end: u32,
    /// Lines in the whole document.
    pub total_lines: u32,
    /// The text of those lines exactly as stored, line ends included.
    pub content: String,
}

impl Excerpt {
    /// `path:12-30` (`path:12` for one line), the form results cite.
    pub fn citation(&self) -> String {
        crate::cite(&self.path, self.line_start, self.line_end)
    }
}

/// Why [`get_lines`] could not answer.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// No document at that path (in that collection).
    #[error("{}", unknown_message(.path, .collection.as_deref(), .elsewhere.as_deref(), .suggestions))]
    UnknownPath {
        path: String,
        collection: Option<String>,
        /// The collection that does hold the path, when it is another one.
        elsewhere: Option<String>,
        /// Stored paths close to the one asked for, best first.
        suggestions: Vec<String>,
    },
    /// The range does not fit the document. `field` is `from` or `to`.
    #[error("{reason}")]
    BadRange { field: &'static str, reason: String },
    /// The document exists but its text is not stored.
    #[error(
        "the text of `{0}` is not in the knowledge base (stored before bib kept document \
         text, or indexed through the API without it); ingest its directory again to store it"
    )]
    NoSource(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn unknown_message(
    path: &str,
    collection: Option<&str>,
    elsewhere: Option<&str>,
    suggestions: &[String],
) -> String {
    let mut m = format!("no document `{path}` in the knowledge base");
    if let Some(c) = collection {
        m.push_str(&format!(" in collection `{c}`"));
    }
    if let Some(e) = elsewhere {
        m.push_str(&format!(" (it is in collection `{e}`)"));
    } else if !suggestions.is_empty() {
        m.push_str(&format!("; did you mean {}?", suggestions.join(", ")));
    }
    m
}

/// The forms of `path` a user may type for a stored one: `\` for `/`, a leading `./`,
/// doubled separators, surrounding blanks.
fn normalize(path: &str) -> String {
    let p = path.trim().replace('\\', "/");
    p.split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Levenshtein distance over characters, stopping early once over `cap`.
fn distance(a: &str, b: &str, cap: usize) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > cap {
        return cap + 1;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        if cur.iter().min().is_some_and(|&m| m > cap) {
            return cap + 1;
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Up to five stored paths close to `wanted` (case-insensitive): the same file name or a path
/// ending like it first, then the nearest whole paths by edit distance, then paths whose file
/// name is near (each at most a third of its length away), then file names that begin like the
/// wanted one (`determinstic.md` finds `deterministic-packages.md`).
pub fn suggest_paths<'a>(wanted: &str, paths: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let w = normalize(wanted).to_lowercase();
    let w_name = w.rsplit('/').next().unwrap_or(&w).to_string();
    let cap = (w.chars().count() / 3).max(2);
    let name_cap = (w_name.chars().count() / 3).max(2);
    let w_stem = w_name.strip_suffix(".md").unwrap_or(&w_name);
    let stem_cap = (w_stem.chars().count() / 4).max(1);
    let mut scored: Vec<(usize, usize, &str)> = Vec::new();
    for p in paths {
        let l = p.to_lowercase();
        let name = l.rsplit('/').next().unwrap_or(&l);
        let class_dist = if l == w {
            Some((0, 0))
        } else if name == w_name || l.ends_with(&format!("/{w}")) || w.ends_with(&format!("/{l}")) {
            Some((1, 0))
        } else {
            // The whole path a little off, or the file name a little off in another folder.
            let full = distance(&w, &l, cap);
            let by_name = distance(&w_name, name, name_cap);
            if full <= cap {
                Some((2, full))
            } else if by_name <= name_cap {
                Some((3, by_name))
            } else {
                // The name's beginning, as long as the wanted stem, a little off.
                let start: String = name.chars().take(w_stem.chars().count()).collect();
                let by_start = distance(w_stem, &start, stem_cap);
                (w_stem.chars().count() >= 4 && by_start <= stem_cap).then_some((4, by_start))
            }
        };
        if let Some((class, d)) = class_dist {
            scored.push((class, d, p));
        }
    }
    scored.sort();
    scored
        .into_iter()
        .take(5)
        .map(|(_, _, p)| p.to_string())
        .collect()
}

/// Find the stored document `path` names, in `collection` when given.
fn find_document(
    store: &dyn Store,
    path: &str,
    collection: Option<&str>,
) -> Result<DocRecord, GetError> {
    let docs = store.documents()?;
    let wanted = normalize(path);
    let stripped = wanted.strip_prefix("public/").unwrap_or(&wanted);
    let found = docs
        .iter()
        .find(|d| d.path == wanted || d.path == stripped)
        .or_else(|| {
            // A unique case-insensitive match is the document (`Guides/A.md` for `guides/a.md`).
            let mut same = docs.iter().filter(|d| d.path.eq_ignore_ascii_case(&wanted));
            match (same.next(), same.next()) {
                (Some(d), None) => Some(d),
                _ => None,
            }
        });
    match (found, collection) {
        (Some(d), Some(c)) if d.collection != c => Err(GetError::UnknownPath {
            path: path.to_string(),
            collection: Some(c.to_string()),
            elsewhere: Some(d.collection.clone()),
            suggestions: Vec::new(),
        }),
        (Some(d), _) => Ok(d.clone()),
        (None, c) => Err(GetError::UnknownPath {
            path: path.to_string(),
            collection: c.map(str::to_string),
            elsewhere: None,
            suggestions: suggest_paths(
                path,
                docs.iter()
                    .filter(|d| c.is_none_or(|c| d.collection == c))
                    .map(|d| d.path.as_str()),
            ),
        }),
    }
}

/// Byte offset where each line of `text` starts (a final line end opens no new line).
fn line_starts(text: &str) -> Vec<usize> {
    let mut starts = vec![0];
    starts.extend(
        text.bytes()
            .enumerate()
            .filter(|&(i, b)| b == b'\n' && i + 1 < text.len())
            .map(|(i, _)| i + 1),
    );
    if text.is_empty() {
        starts.clear();
    }
    starts
}

/// Resolve `range` against a document of `total` lines, or say why it does not fit.
fn resolve(range: LineRange, total: u32, path: &str) -> Result<(u32, u32), GetError> {
    let bad = |field, reason: String| GetError::BadRange { field, reason };
    if range.from == Some(0) {
        return Err(bad("from", "line numbers start at 1".into()));
    }
    if range.to == Some(0) {
        return Err(bad("to", "line numbers start at 1".into()));
    }
    if total == 0 {
        return match range {
            LineRange {
                from: None,
                to: None,
            } => Ok((0, 0)),
            _ => Err(bad("from", format!("`{path}` is empty: it has no lines"))),
        };
    }
    let from = range.from.unwrap_or(1);
    let to = range.to.unwrap_or(total);
    if from > total {
        return Err(bad(
            "from",
            format!("line {from} is past the end of `{path}`, which has {total} lines"),
        ));
    }
    if to > total {
        return Err(bad(
            "to",
            format!(
                "line {to} is past the end of `{path}`, which has {total} lines \
                 (`{path}:{from}-` reads to the end)"
            ),
        ));
    }
    if from > to {
        return Err(bad(
            "to",
            format!("the range {from}-{to} ends before it starts"),
        ));
    }
    Ok((from, to))
}

/// The lines `range` of the document at `path` (in `collection` when given), from the source
/// text the store kept: line numbers are those of the file as ingested, front-matter included,
/// the same that results cite.
pub fn get_lines(
    store: &dyn Store,
    path: &str,
    collection: Option<&str>,
    range: LineRange,
) -> Result<Excerpt, GetError> {
    let doc = find_document(store, path, collection)?;
    let text = store
        .document_source(&doc.path)?
        .ok_or_else(|| GetError::NoSource(doc.path.clone()))?;
    let starts = line_starts(&text);
    let total = u32::try_from(starts.len()).unwrap_or(u32::MAX);
    let (from, to) = resolve(range, total, &doc.path)?;
    let content = if total == 0 {
        String::new()
    } else {
        let a = starts[from as usize - 1];
        let b = starts.get(to as usize).copied().unwrap_or(text.len());
        text[a..b].to_string()
    };
    Ok(Excerpt {
        node_id: doc.node_id,
        path: doc.path,
        collection: doc.collection,
        title: doc.title,
        line_start: from,
        line_end: to,
        total_lines: total,
        content,
    })
}

/// The last ingest run as [`status`] reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastRun {
    pub id: i64,
    pub status: RunStatus,
    /// RFC 3339 UTC.
    pub started_at: String,
    pub collection: Option<String>,
    pub root: Option<String>,
    pub failure: Option<String>,
}

/// What `bib status` and MCP `bib_status` report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KbStatus {
    /// Where the store lives (file path or URL without secrets).
    pub store: String,
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// The model the chunks were embedded with (`None` before the first chunk).
    pub model: Option<String>,
    /// The term function of its lexical index (`TermConfig::id`); `None` when it is one this
    /// bib does not know (`Store::term_config` says which).
    #[serde(default)]
    pub terms: Option<String>,
    pub collections: Vec<CollectionInfo>,
    pub last_run: Option<LastRun>,
}

/// The status of `store`.
pub fn status(store: &dyn Store) -> Result<KbStatus, StoreError> {
    let model = store.embedding_model()?;
    let text = |r: &serde_json::Value, k: &str| r.get(k).and_then(|v| v.as_str()).map(String::from);
    let last_run = store.runs(1)?.into_iter().next().map(|r| LastRun {
        id: r.id,
        status: r.status,
        started_at: iso_utc(r.started_at_ms),
        collection: text(&r.record, "collection"),
        root: text(&r.record, "root"),
        failure: text(&r.record, "failure"),
    });
    Ok(KbStatus {
        store: store.location(),
        backend: store.backend().to_string(),
        model,
        terms: store.term_config().ok().map(|t| t.id()),
        collections: store.collections()?,
        last_run,
    })
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub fn iso_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::sample_change;
    use crate::{RunLog, SqliteStore};

    #[test]
    fn specs_split_into_path_and_range() {
        let r = |from, to| LineRange { from, to };
        let cases = [
            ("a.md", "a.md", LineRange::ALL),
            ("a.md:12", "a.md", r(Some(12), Some(12))),
            ("dir/a.md:12-30", "dir/a.md", r(Some(12), Some(30))),
            ("a.md:12-", "a.md", r(Some(12), None)),
            ("a.md:-30", "a.md", r(None, Some(30))),
            ("a.md:", "a.md:", LineRange::ALL),
            ("a.md:-", "a.md:-", LineRange::ALL),
            ("a.md:x-3", "a.md:x-3", LineRange::ALL),
            ("odd:name.md", "odd:name.md", LineRange::ALL),
            (":12", ":12", LineRange::ALL),
            (
                "a.md:99999999999",
                "a.md",
                r(Some(u32::MAX), Some(u32::MAX)),
            ),
        ];
        for (spec, path, range) in cases {
            assert_eq!(LineRange::split_spec(spec), (path, range), "{spec}");
        }
    }

    fn store_with(text: &str) -> SqliteStore {
        let s = SqliteStore::open_in_memory().unwrap();
        let mut c = sample_change("guides/restore.md", &["x"]);
        c.source = Some(text.to_string());
        s.apply_document(&c).unwrap();
        let mut other = sample_change("guides/publish.md", &["y"]);
        other.collection = "notes".into();
        other.source = Some("one line, no newline".into());
        s.apply_document(&other).unwrap();
        s
    }

    #[test]
    fn lines_are_the_stored_text_front_matter_included() {
        let text = "---\ntitle: R\n---\n# R\r\n\nline five\nline six\n";
        let s = store_with(text);
        let all = get_lines(&s, "guides/restore.md", None, LineRange::ALL).unwrap();
        assert_eq!((all.line_start, all.line_end, all.total_lines), (1, 7, 7));
        assert_eq!(all.content, text);
        let (path, range) = LineRange::split_spec("./guides\\restore.md:4-5");
        let part = get_lines(&s, path, Some("kb"), range).unwrap();
        assert_eq!(part.content, "# R\r\n\n");
        assert_eq!(part.citation(), "guides/restore.md:4-5");
        let one = get_lines(&s, "guides/publish.md", None, LineRange::ALL).unwrap();
        assert_eq!(
            (one.total_lines, one.content.as_str()),
            (1, "one line, no newline")
        );
        let to_end = LineRange {
            from: Some(7),
            to: None,
        };
        let tail = get_lines(&s, "GUIDES/RESTORE.MD", None, to_end).unwrap();
        assert_eq!(tail.content, "line six\n");
    }

    #[test]
    fn errors_name_the_problem_and_suggest_paths() {
        let s = store_with("a\nb\nc\n");
        let e = get_lines(&s, "guide/restor.md", None, LineRange::ALL).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("did you mean guides/restore.md"), "{m}");
        let e = get_lines(&s, "restore.md", None, LineRange::ALL).unwrap_err();
        assert!(e.to_string().contains("guides/restore.md"), "{e}");
        let e = get_lines(&s, "guides/publish.md", Some("kb"), LineRange::ALL).unwrap_err();
        assert!(e.to_string().contains("in collection `notes`"), "{e}");
        let begins_like = suggest_paths(
            "determinstic.md",
            ["create/deterministic-packages.md", "create/signing.md"],
        );
        assert_eq!(begins_like, ["create/deterministic-packages.md"]);
        let e = get_lines(&s, "zzz/nothing-like-it.md", None, LineRange::ALL).unwrap_err();
        assert!(!e.to_string().contains("did you mean"), "{e}");
        for (range, field, says) in [
            ((Some(4), None), "from", "has 3 lines"),
            ((Some(2), Some(9)), "to", "has 3 lines"),
            ((Some(0), Some(2)), "from", "start at 1"),
            ((Some(3), Some(2)), "to", "ends before it starts"),
        ] {
            let r = LineRange {
                from: range.0,
                to: range.1,
            };
            match get_lines(&s, "guides/restore.md", None, r) {
                Err(GetError::BadRange { field: f, reason }) => {
                    assert_eq!(f, field, "{reason}");
                    assert!(reason.contains(says), "{reason}");
                }
                other => panic!("{r:?}: {other:?}"),
            }
        }
        // A document stored without its text says so.
        s.apply_document(&sample_change("bare.md", &["z"])).unwrap();
        let e = get_lines(&s, "bare.md", None, LineRange::ALL).unwrap_err();
        assert!(matches!(e, GetError::NoSource(_)), "{e}");
    }

    #[test]
    fn status_reports_collections_model_and_last_run() {
        let s = store_with("a\n");
        let id = s
            .begin_run(&serde_json::json!({"collection": "kb", "root": "/w/kb"}))
            .unwrap();
        s.finish_run(
            id,
            RunStatus::Failed,
            &serde_json::json!({"collection": "kb", "failure": "boom"}),
        )
        .unwrap();
        let st = status(&s).unwrap();
        assert_eq!(st.backend, "sqlite");
        assert_eq!(st.model.as_deref(), Some("fake-16"));
        let names: Vec<&str> = st.collections.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["kb", "notes"]);
        let run = st.last_run.unwrap();
        assert_eq!((run.id, run.status), (id, RunStatus::Failed));
        assert_eq!(run.failure.as_deref(), Some("boom"));
    }

    #[test]
    fn iso_dates() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(iso_utc(1_795_000_000_123), "2026-11-18T11:06:40Z");
    }
}
