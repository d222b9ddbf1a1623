//! `--watch`: re-ingest whenever Markdown under the root changes.
//!
//! Events are debounced (many saves become one run) and filtered: changes under hidden
//! directories (`.git`, `.bib` — where the store itself may live) and editor temp files
//! (`*.swp`, `*~`, `.#*`, vim's `4913`) never trigger a run. An event is only a hint: a run
//! happens when the fingerprint of the files a run would read (path, size, modification time
//! of every document the scan finds) differs from the one the previous run started from. So
//! the files a run reads or writes itself (the store, its WAL/SHM, opened documents — inotify
//! reports opens and reads too) never cause another run, and one change causes one run. Each
//! run is the ordinary incremental ingest, so unchanged documents are skipped and the same
//! crash guarantees hold; stopping the process at any moment is safe.

use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use bib_embed::Embedder;
use bib_store::Store;
use notify::RecursiveMode;
use notify_debouncer_mini::new_debouncer;

use crate::{ingest, IngestError, IngestOptions, Progress, RunReport};

fn relevant(root: &Path, path: &Path) -> bool {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let hidden = rel.components().any(|c| match c {
        Component::Normal(s) => s.to_str().is_some_and(|s| s.starts_with('.')),
        _ => false,
    });
    !hidden && !path.file_name().is_some_and(is_editor_temp)
}

/// Swap, backup and lock files editors write next to the file being edited.
fn is_editor_temp(name: &std::ffi::OsStr) -> bool {
    let Some(n) = name.to_str() else {
        return false;
    };
    n == "4913"
        || n.ends_with('~')
        || n.starts_with(".#")
        || [".swp", ".swo", ".swx"].iter().any(|e| n.ends_with(e))
}

/// What a run would read: every document the scan finds, with its size and modification
/// time. Two equal fingerprints mean a run would find nothing new on disk.
fn fingerprint(root: &Path, opts: &IngestOptions) -> Vec<(String, u64, Option<SystemTime>)> {
    let Ok(scan) = crate::scan::scan_with(root, &opts.scan) else {
        return Vec::new();
    };
    scan.files
        .into_iter()
        .map(|f| {
            let meta = std::fs::metadata(&f.abs).ok();
            let len = meta.as_ref().map_or(0, |m| m.len());
            let mtime = meta.and_then(|m| m.modified().ok());
            (f.path, len, mtime)
        })
        .collect()
}

/// How [`watch`] waits: for `debounce` of quiet after a change, until `stop` becomes true.
#[derive(Debug, Clone, Copy)]
pub struct WatchOptions<'a> {
    pub debounce: Duration,
    pub stop: &'a AtomicBool,
}

/// Ingest `root` once, then again after every debounced batch of relevant changes, until
/// `stop` becomes true. `on_run` sees every run record.
pub fn watch(
    root: &Path,
    store: &dyn Store,
    embedder: &dyn Embedder,
    opts: &IngestOptions,
    progress: &dyn Progress,
    wait: WatchOptions<'_>,
    on_run: &mut dyn FnMut(&RunReport),
) -> Result<(), IngestError> {
    let WatchOptions { debounce, stop } = wait;
    let canon = std::fs::canonicalize(root).map_err(|e| IngestError::Root {
        path: root.display().to_string(),
        reason: "cannot resolve it".into(),
        source: Some(e),
    })?;
    let (tx, rx) = mpsc::channel();
    let mut debouncer = new_debouncer(debounce, tx).map_err(IngestError::Watch)?;
    debouncer
        .watcher()
        .watch(&canon, RecursiveMode::Recursive)
        .map_err(IngestError::Watch)?;
    let mut last = fingerprint(root, opts);
    on_run(&ingest(root, store, embedder, opts, progress)?);
    while !stop.load(Ordering::SeqCst) {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(Ok(events)) => {
                if events
                    .iter()
                    .any(|e| relevant(&canon, &e.path) || relevant(root, &e.path))
                {
                    // Coalesce whatever else arrived meanwhile.
                    while rx.try_recv().is_ok() {}
                    let now = fingerprint(root, opts);
                    if now != last {
                        // Taken before the run: a change made while it runs is seen next time.
                        last = now;
                        on_run(&ingest(root, store, embedder, opts, progress)?);
                    }
                }
            }
            Ok(Err(e)) => return Err(IngestError::Watch(e)),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(IngestError::WatchStopped),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_paths_do_not_trigger() {
        let r = Path::new("/w");
        assert!(relevant(r, Path::new("/w/a.md")));
        assert!(relevant(r, Path::new("/w/sub/a.md")));
        assert!(!relevant(r, Path::new("/w/.bib/kb.sqlite-wal")));
        assert!(!relevant(r, Path::new("/w/.git/index")));
        for temp in [
            "/w/.a.md.swp",
            "/w/a.md~",
            "/w/.#a.md",
            "/w/sub/4913",
            "/w/x.swx",
        ] {
            assert!(!relevant(r, Path::new(temp)), "{temp}");
        }
    }

    #[test]
    fn fingerprint_changes_with_content_not_with_reads() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.md"), "# A\n").unwrap();
        let opts = IngestOptions::default();
        let a = fingerprint(d.path(), &opts);
        assert_eq!(a.len(), 1);
        let _ = std::fs::read_to_string(d.path().join("a.md")).unwrap();
        std::fs::write(d.path().join("notes.txt"), "not markdown").unwrap();
        assert_eq!(fingerprint(d.path(), &opts), a);
        std::fs::write(d.path().join("a.md"), "# A, longer now\n").unwrap();
        assert_ne!(fingerprint(d.path(), &opts), a);
    }
}
