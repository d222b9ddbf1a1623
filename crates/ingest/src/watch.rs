//! `--watch`: re-ingest whenever Markdown under the root changes.
//!
//! Events are debounced (many saves become one run) and filtered: changes under hidden
//! directories (`.git`, `.bib` — where the store itself may live) never trigger a run. Each
//! run is the ordinary incremental ingest, so unchanged documents are skipped and the same
//! crash guarantees hold; stopping the process at any moment is safe.

use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use bib_embed::Embedder;
use bib_store::Store;
use notify::RecursiveMode;
use notify_debouncer_mini::new_debouncer;

use crate::{ingest, IngestError, IngestOptions, Progress, RunReport};

fn relevant(root: &Path, path: &Path) -> bool {
    let rel = path.strip_prefix(root).unwrap_or(path);
    !rel.components().any(|c| match c {
        Component::Normal(s) => s.to_str().is_some_and(|s| s.starts_with('.')),
        _ => false,
    })
}

/// Ingest `root` once, then again after every debounced batch of relevant changes, until
/// `stop` becomes true. `on_run` sees every run record.
#[allow(clippy::too_many_arguments)]
pub fn watch(
    root: &Path,
    store: &dyn Store,
    embedder: &dyn Embedder,
    opts: &IngestOptions,
    progress: &dyn Progress,
    debounce: Duration,
    stop: &AtomicBool,
    on_run: &mut dyn FnMut(&RunReport),
) -> Result<(), IngestError> {
    let canon = std::fs::canonicalize(root).map_err(|e| IngestError::Root {
        path: root.display().to_string(),
        reason: e.to_string(),
    })?;
    let (tx, rx) = mpsc::channel();
    let mut debouncer =
        new_debouncer(debounce, tx).map_err(|e| IngestError::Watch(e.to_string()))?;
    debouncer
        .watcher()
        .watch(&canon, RecursiveMode::Recursive)
        .map_err(|e| IngestError::Watch(e.to_string()))?;
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
                    on_run(&ingest(root, store, embedder, opts, progress)?);
                }
            }
            Ok(Err(e)) => return Err(IngestError::Watch(e.to_string())),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(IngestError::Watch("watcher stopped".into()))
            }
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
    }
}
