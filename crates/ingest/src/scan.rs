//! Phase A, part 1: find the Markdown files of a wiki.
//!
//! Walks the root recursively in a deterministic (sorted) order, skipping hidden entries
//! (names starting with `.`). Symbolic links are followed only while they stay inside the root;
//! a directory reached twice (a symlink loop, or two links to one place) is reported once and
//! not walked again. Paths are normalized: relative to the root, `/`-separated, Unicode NFC,
//! with a leading `public/` stripped so the same document never registers twice.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use unicode_normalization::UnicodeNormalization;

use crate::FileIssue;

/// A Markdown file found under the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundFile {
    /// Where to read it.
    pub abs: PathBuf,
    /// Normalized path relative to the root.
    pub path: String,
}

/// What a scan found.
#[derive(Debug, Default)]
pub struct Scan {
    pub files: Vec<FoundFile>,
    /// Entries that could not be scanned (symlink loops, links out of the root, unreadable
    /// directories, file names that are not UTF-8).
    pub issues: Vec<FileIssue>,
}

/// Normalize a relative path: `/` separators, NFC, no `.` components, leading `public/`
/// stripped. `None` when a component is not UTF-8 or the path escapes (`..`).
pub fn normalize_rel(rel: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str()?.nfc().collect()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    if parts.len() > 1 && parts[0] == "public" {
        parts.remove(0);
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts.join("/"))
}

fn is_markdown(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("md"))
}

fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|s| s.starts_with('.'))
}

/// Scan `root` for `.md` files.
pub fn scan(root: &Path) -> Result<Scan, std::io::Error> {
    let canon_root = std::fs::canonicalize(root)?;
    let mut out = Scan::default();
    let mut visited: HashSet<PathBuf> = HashSet::new();
    visited.insert(canon_root.clone());
    walk(&canon_root, root, Path::new(""), &mut visited, &mut out);
    out.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn issue(out: &mut Scan, rel: &Path, reason: String) {
    out.issues.push(FileIssue {
        path: rel.to_string_lossy().replace('\\', "/"),
        phase: "A".into(),
        reason,
    });
}

fn walk(canon_root: &Path, dir: &Path, rel: &Path, visited: &mut HashSet<PathBuf>, out: &mut Scan) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            issue(out, rel, format!("cannot read directory: {e}"));
            return;
        }
    };
    let mut list: Vec<_> = entries.filter_map(Result::ok).collect();
    list.sort_by_key(|e| e.file_name());
    for entry in list {
        let name = entry.file_name();
        if is_hidden(&name) {
            continue;
        }
        let path = entry.path();
        let child_rel = rel.join(&name);
        let Ok(ft) = entry.file_type() else {
            issue(out, &child_rel, "cannot stat".into());
            continue;
        };
        let (is_dir, is_file) = if ft.is_symlink() {
            let target = match std::fs::canonicalize(&path) {
                Ok(t) => t,
                Err(e) => {
                    if is_markdown(&path) || e.raw_os_error() == Some(40) {
                        issue(out, &child_rel, format!("broken or looping symlink: {e}"));
                    }
                    continue;
                }
            };
            if !target.starts_with(canon_root) {
                issue(
                    out,
                    &child_rel,
                    format!(
                        "symlink points outside the root ({}); not followed",
                        target.display()
                    ),
                );
                continue;
            }
            match std::fs::metadata(&path) {
                Ok(m) => (m.is_dir(), m.is_file()),
                Err(e) => {
                    issue(out, &child_rel, format!("cannot stat symlink target: {e}"));
                    continue;
                }
            }
        } else {
            (ft.is_dir(), ft.is_file())
        };
        if is_dir {
            let canon = match std::fs::canonicalize(&path) {
                Ok(c) => c,
                Err(e) => {
                    issue(out, &child_rel, format!("cannot resolve directory: {e}"));
                    continue;
                }
            };
            if !visited.insert(canon.clone()) {
                issue(
                    out,
                    &child_rel,
                    format!(
                        "symlink loop: directory {} was already scanned; not followed",
                        canon.display()
                    ),
                );
                continue;
            }
            walk(canon_root, &path, &child_rel, visited, out);
        } else if is_file && is_markdown(&path) {
            match normalize_rel(&child_rel) {
                Some(p) => out.files.push(FoundFile { abs: path, path: p }),
                None => issue(out, &child_rel, "file name is not valid UTF-8".into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_paths() {
        assert_eq!(normalize_rel(Path::new("a/b.md")).unwrap(), "a/b.md");
        assert_eq!(
            normalize_rel(Path::new("./public/a/b.md")).unwrap(),
            "a/b.md"
        );
        assert_eq!(normalize_rel(Path::new("public.md")).unwrap(), "public.md");
        assert_eq!(
            normalize_rel(Path::new("cancio\u{301}n.md")).unwrap(),
            "canci\u{f3}n.md"
        );
        assert!(normalize_rel(Path::new("../x.md")).is_none());
    }

    #[cfg(unix)]
    #[test]
    fn scans_skipping_hidden_links_out_and_loops() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("wiki");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(root.join("sub/deep")).unwrap();
        std::fs::create_dir_all(root.join(".hidden")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("a.md"), "a").unwrap();
        std::fs::write(root.join("B.MD"), "b").unwrap();
        std::fs::write(root.join("notes.txt"), "x").unwrap();
        std::fs::write(root.join("sub/deep/c.md"), "c").unwrap();
        std::fs::write(root.join(".hidden/h.md"), "h").unwrap();
        std::fs::write(outside.join("o.md"), "o").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("sub"), root.join("sub/deep/loop")).unwrap();
        std::os::unix::fs::symlink(root.join("a.md"), root.join("alias.md")).unwrap();
        let s = scan(&root).unwrap();
        let paths: Vec<&str> = s.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, vec!["B.MD", "a.md", "alias.md", "sub/deep/c.md"]);
        let reasons: Vec<String> = s
            .issues
            .iter()
            .map(|i| format!("{}: {}", i.path, i.reason))
            .collect();
        assert_eq!(s.issues.len(), 2, "{reasons:?}");
        assert!(reasons
            .iter()
            .any(|r| r.starts_with("out: symlink points outside")));
        assert!(reasons
            .iter()
            .any(|r| r.starts_with("sub/deep/loop: symlink loop")));
    }
}
