//! When passes run: signals that stop the loop, the backoff after failures, and the
//! watch on a configuration directory that wakes a pass early.

use crate::setup;
use gpushare_core::util::backoff_delays;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A flag set by the first SIGINT or SIGTERM: the pass stops after the current
/// apply step (the journal consistent, the lock released). A second SIGINT exits.
pub fn cancel_on_signals() -> Arc<AtomicBool> {
    let flag = setup::cancel_on_ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let f = flag.clone();
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::spawn(async move {
                    if term.recv().await.is_some() {
                        eprintln!("\nSIGTERM received: stopping after the current step.");
                        f.store(true, Ordering::SeqCst);
                    }
                });
            }
            Err(e) => tracing::warn!(error = %e, "cannot listen for SIGTERM"),
        }
    }
    flag
}

/// Delay before retrying after `failures` failed passes in a row: 1, 2, 4, ... seconds,
/// capped at the larger of the interval and 60 s (the project's one backoff,
/// [`backoff_delays`], counted in failures).
pub(crate) fn backoff(failures: u32, interval: u64) -> Duration {
    let cap = Duration::from_secs(interval.max(60));
    // Doubling from one second passes any cap within 64 steps; it stays there.
    let nth = failures.saturating_sub(1).min(64) as usize;
    backoff_delays(Duration::from_secs(1), cap)
        .nth(nth)
        .unwrap_or(cap)
}

/// How long a pass waits after a configuration file changed, so an editor's
/// several writes (or a `git checkout` of many files) end up in one pass.
pub(crate) const SETTLE: Duration = Duration::from_millis(300);

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
pub(crate) fn is_config_file(p: &Path) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let secs: Vec<u64> = (1..=8).map(|f| backoff(f, 30).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(200, 300).as_secs(), 300);
    }
}
