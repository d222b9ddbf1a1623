//! Phase A, part 1: find the Markdown files of a wiki.
//!
//! Walks the root recursively in a deterministic (sorted) order, skipping hidden entries
//! (names starting with `.`). Symbolic links are followed only while they stay inside the root;
//! a directory reached twice (a symlink loop, or two links to one place) is reported once and
//! not walked again. Paths are normalized: relative to the root, `/`-separated, Unicode NFC,
//! with a leading `public/` stripped so the same document never registers twice.
//!
//! Ignore rules (the `ignore` crate's gitignore matcher): every directory's `.gitignore` and
//! `.bibignore` (gitignore syntax, in or out of a git repository; deeper files win, `!` re-
//! includes), then the caller's `--exclude` patterns (gitignore syntax relative to the root:
//! `drafts/`, `*.tmp.md`). An ignored directory is not descended.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use unicode_normalization::UnicodeNormalization;

use crate::{FileIssue, Phase};

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

/// What a scan leaves out besides hidden entries and ignore files' patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanOptions {
    /// Gitignore-style patterns relative to the root (`--exclude`, repeatable).
    pub excludes: Vec<String>,
}

/// Scan `root` for `.md` files.
pub fn scan(root: &Path) -> Result<Scan, std::io::Error> {
    scan_with(root, &ScanOptions::default())
}

/// Scan `root` for `.md` files, honouring `.gitignore`/`.bibignore` and `opts.excludes`.
pub fn scan_with(root: &Path, opts: &ScanOptions) -> Result<Scan, std::io::Error> {
    let canon_root = std::fs::canonicalize(root)?;
    let mut out = Scan::default();
    let mut visited: HashSet<PathBuf> = HashSet::new();
    visited.insert(canon_root.clone());
    let mut rules = Vec::new();
    if !opts.excludes.is_empty() {
        let mut b = GitignoreBuilder::new("");
        for g in &opts.excludes {
            if let Err(e) = b.add_line(None, g) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("bad --exclude pattern {g:?}: {e}"),
                ));
            }
        }
        let built = b.build().map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("--exclude: {e}"))
        })?;
        rules.push(built);
    }
    let mut w = Walker {
        canon_root: &canon_root,
        visited: &mut visited,
        out: &mut out,
        excludes: rules.pop(),
        stack: Vec::new(),
    };
    w.walk(root, Path::new(""));
    out.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

struct Walker<'a> {
    canon_root: &'a Path,
    visited: &'a mut HashSet<PathBuf>,
    out: &'a mut Scan,
    excludes: Option<Gitignore>,
    /// Ignore files of the directories being walked, outermost first.
    stack: Vec<Gitignore>,
}

impl Walker<'_> {
    /// Whether `rel` (relative to the root) is ignored: the deepest ignore file with an
    /// opinion decides, then `--exclude`.
    fn ignored(&self, rel: &Path, is_dir: bool) -> bool {
        for g in self.stack.iter().rev() {
            match g.matched(rel, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => break,
                Match::None => {}
            }
        }
        self.excludes
            .as_ref()
            .is_some_and(|g| g.matched(rel, is_dir).is_ignore())
    }

    fn walk(&mut self, dir: &Path, rel: &Path) {
        let mut b = GitignoreBuilder::new(rel);
        let mut any = false;
        for name in [".gitignore", ".bibignore"] {
            let f = dir.join(name);
            if f.is_file() {
                any = true;
                if let Some(e) = b.add(&f) {
                    issue(self.out, &rel.join(name), format!("ignore file: {e}"));
                }
            }
        }
        let pushed = any
            && match b.build() {
                Ok(g) => {
                    self.stack.push(g);
                    true
                }
                Err(e) => {
                    issue(self.out, rel, format!("ignore files: {e}"));
                    false
                }
            };
        walk(self.canon_root, dir, rel, self);
        if pushed {
            self.stack.pop();
        }
    }
}

fn issue(out: &mut Scan, rel: &Path, reason: String) {
    out.issues.push(FileIssue {
        path: rel.to_string_lossy().replace('\\', "/"),
        phase: Phase::A,
        reason,
    });
}

fn walk(canon_root: &Path, dir: &Path, rel: &Path, w: &mut Walker<'_>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            issue(w.out, rel, format!("cannot read directory: {e}"));
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
            issue(w.out, &child_rel, "cannot stat".into());
            continue;
        };
        let (is_dir, is_file) = if ft.is_symlink() {
            let target = match std::fs::canonicalize(&path) {
                Ok(t) => t,
                Err(e) => {
                    if is_markdown(&path) || e.raw_os_error() == Some(40) {
                        issue(w.out, &child_rel, format!("broken or looping symlink: {e}"));
                    }
                    continue;
                }
            };
            if !target.starts_with(canon_root) {
                issue(
                    w.out,
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
                    issue(
                        w.out,
                        &child_rel,
                        format!("cannot stat symlink target: {e}"),
                    );
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
                    issue(w.out, &child_rel, format!("cannot resolve directory: {e}"));
                    continue;
                }
            };
            if !w.visited.insert(canon.clone()) {
                issue(
                    w.out,
                    &child_rel,
                    format!(
                        "symlink loop: directory {} was already scanned; not followed",
                        canon.display()
                    ),
                );
                continue;
            }
            if w.ignored(&child_rel, true) {
                continue;
            }
            w.walk(&path, &child_rel);
        } else if is_file && is_markdown(&path) && !w.ignored(&child_rel, false) {
            match normalize_rel(&child_rel) {
                Some(p) => w.out.files.push(FoundFile { abs: path, path: p }),
                None => issue(w.out, &child_rel, "file name is not valid UTF-8".into()),
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

    #[test]
    fn gitignore_bibignore_and_excludes_are_respected() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        for f in [
            "a.md",
            "skip.md",
            "drafts/d.md",
            "sub/keep.md",
            "sub/local.md",
            "sub/again.md",
            "build/out.md",
            "x.tmp.md",
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        }
        std::fs::write(root.join(".gitignore"), "build/\nskip.md\nagain.md\n").unwrap();
        std::fs::write(root.join("sub/.bibignore"), "local.md\n!again.md\n").unwrap();
        let paths = |opts: &ScanOptions| -> Vec<String> {
            scan_with(root, opts)
                .unwrap()
                .files
                .into_iter()
                .map(|f| f.path)
                .collect()
        };
        assert_eq!(
            paths(&ScanOptions::default()),
            vec![
                "a.md",
                "drafts/d.md",
                "sub/again.md",
                "sub/keep.md",
                "x.tmp.md"
            ]
        );
        let ex = ScanOptions {
            excludes: vec!["drafts/".into(), "*.tmp.md".into()],
        };
        assert_eq!(paths(&ex), vec!["a.md", "sub/again.md", "sub/keep.md"]);
        let bad = ScanOptions {
            excludes: vec!["a{".into()],
        };
        assert!(scan_with(root, &bad).is_err());
    }
}
