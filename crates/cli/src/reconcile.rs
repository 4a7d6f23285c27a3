//! `gpushare reconcile`: a level-triggered loop in the style of kube-runtime's
//! controller. Every pass re-reads the configuration (so a `git pull` in the
//! directory is picked up), finishes any interrupted apply, observes, plans and
//! applies. A pass that fails on a transient error (store, cloud) is retried with
//! exponential backoff; a configuration error waits a full interval for the files
//! to change. `--once` runs a single pass and exits 1 if it failed.

use crate::cli::{PlannerArgs, VarArgs};
use crate::commands::{self, ProgressPrinter};
use gpushare_config::Diagnostics;
use gpushare_core::render;
use gpushare_engine::reconcile::{ReconcileError, Reconciler, Run};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What one pass did.
enum Outcome {
    NoChanges,
    Applied(String),
}

pub async fn run(
    dir: &Path,
    interval: u64,
    once: bool,
    vars: &VarArgs,
    planner: &PlannerArgs,
) -> anyhow::Result<u8> {
    let cancel = commands::cancel_on_ctrl_c();
    let mut failures: u32 = 0;
    let mut pass: u64 = 0;
    let mut kept = None;
    loop {
        pass += 1;
        let wait = match reconcile_once(dir, vars, planner, &cancel, &mut kept).await {
            Ok(outcome) => {
                failures = 0;
                match outcome {
                    Outcome::NoChanges => println!("reconcile pass {pass}: no changes"),
                    Outcome::Applied(summary) => {
                        println!("reconcile pass {pass}: applied: {summary}")
                    }
                }
                if once {
                    return Ok(0);
                }
                Duration::from_secs(interval)
            }
            Err(err) => {
                if once {
                    return Err(err);
                }
                failures += 1;
                let permanent = err.downcast_ref::<Diagnostics>().is_some()
                    || err
                        .downcast_ref::<ReconcileError>()
                        .is_some_and(|e| !e.is_transient());
                if let Some(d) = err.downcast_ref::<Diagnostics>() {
                    eprint!("{d}");
                }
                let wait = if permanent {
                    Duration::from_secs(interval)
                } else {
                    backoff(failures, interval)
                };
                eprintln!(
                    "reconcile pass {pass} failed: {err:#}; next pass in {} s",
                    wait.as_secs()
                );
                tracing::warn!(pass, failures, error = %format!("{err:#}"), "reconcile pass failed");
                wait
            }
        };
        if cancel.load(Ordering::SeqCst) || sleep_unless_cancelled(wait, &cancel).await {
            println!("reconcile: interrupted, stopping");
            return Ok(0);
        }
    }
}

/// One pass: re-read the configuration (so a `git pull` is picked up), then the
/// engine's pass. The reconciler (backends, planner options) is kept across passes
/// and opened again only when the configuration's settings change.
async fn reconcile_once(
    dir: &Path,
    vars: &VarArgs,
    planner: &PlannerArgs,
    cancel: &AtomicBool,
    kept: &mut Option<(gpushare_core::model::Settings, Reconciler)>,
) -> anyhow::Result<Outcome> {
    let desired = commands::load(dir, &vars.vars)?;
    if kept.as_ref().is_none_or(|(s, _)| *s != desired.settings) {
        let r = commands::reconciler(&desired, dir, planner, "gpushare reconcile").await?;
        *kept = Some((desired.settings.clone(), r));
    }
    let (_, r) = kept
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("no reconciler was opened"))?;
    let progress = ProgressPrinter::new(false);
    let progress_fn = progress.callback();
    let run = Run {
        cancel: Some(cancel),
        progress: Some(&progress_fn),
    };
    let outcome = r.pass(&desired, run).await?;
    Ok(if outcome.changed() {
        Outcome::Applied(render::summary_line(&outcome.plan))
    } else {
        Outcome::NoChanges
    })
}

/// Delay before retrying after `failures` failed passes in a row: 1, 2, 4, ... seconds,
/// capped at the larger of the interval and 60 s.
fn backoff(failures: u32, interval: u64) -> Duration {
    let cap = interval.max(60);
    let secs = 1u64
        .checked_shl(failures.saturating_sub(1))
        .unwrap_or(u64::MAX);
    Duration::from_secs(secs.min(cap))
}

/// Sleep for `d`; returns true if interrupted first.
async fn sleep_unless_cancelled(d: Duration, cancel: &AtomicBool) -> bool {
    let deadline = tokio::time::Instant::now() + d;
    while tokio::time::Instant::now() < deadline {
        if cancel.load(Ordering::SeqCst) {
            return true;
        }
        let left = deadline - tokio::time::Instant::now();
        tokio::time::sleep(left.min(Duration::from_millis(200))).await;
    }
    cancel.load(Ordering::SeqCst)
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
