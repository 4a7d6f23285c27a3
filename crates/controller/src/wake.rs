//! When passes run early or not at all: the sleep between passes that a cancel flag
//! ends and a changed configuration file cuts short, and the watch on a
//! configuration directory that notices the change.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a pass waits after a configuration file changed, so an editor's
/// several writes (or a `git checkout` of many files) end up in one pass.
pub const SETTLE: Duration = Duration::from_millis(300);

/// Sleep for `d`, or until `wake` is notified (a configuration file changed; then
/// after [`SETTLE`]); returns true if interrupted first.
pub(crate) async fn sleep_unless_cancelled(
    d: Duration,
    cancel: &AtomicBool,
    wake: &tokio::sync::Notify,
) -> bool {
    let deadline = tokio::time::Instant::now() + d;
    while tokio::time::Instant::now() < deadline {
        if cancel.load(Ordering::SeqCst) {
            return true;
        }
        let left = deadline - tokio::time::Instant::now();
        tokio::select! {
            _ = wake.notified() => {
                tokio::time::sleep(SETTLE).await;
                tracing::info!("a configuration file changed: reconciling now");
                break;
            }
            _ = tokio::time::sleep(left.min(Duration::from_millis(200))) => {}
        }
    }
    cancel.load(Ordering::SeqCst)
}

/// Whether a path is one the loader reads (`*.hcl`, `*.tf`, variable files).
pub fn is_config_file(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    [".hcl", ".tf", ".tfvars", ".tfvars.json"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

/// Watches `dir` (not recursively: the loader reads only its own files, and the state
/// directory inside it changes every pass) and notifies `wake` when a configuration
/// file is written, created, renamed or removed.
pub(crate) fn watch_config_dir(
    dir: &Path,
    wake: Arc<tokio::sync::Notify>,
) -> notify::Result<notify::RecommendedWatcher> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else { return };
        let relevant = matches!(
            ev.kind,
            EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
        ) && ev.paths.iter().any(|p| is_config_file(p));
        if relevant {
            wake.notify_one();
        }
    })?;
    w.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(w)
}
