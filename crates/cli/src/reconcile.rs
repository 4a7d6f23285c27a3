//! `gpushare reconcile`: a level-triggered loop in the style of kube-runtime's
//! controller. Every pass re-reads the configuration (so a `git pull` in the
//! directory is picked up), finishes any interrupted apply, observes, plans and
//! applies. A pass that fails on a transient error (store, cloud) is retried with
//! exponential backoff; a configuration error waits a full interval for the files
//! to change. `--once` runs a single pass and exits 1 if it failed.

use crate::backends;
use crate::cli::{PlannerArgs, VarArgs};
use crate::commands;
use gpushare_config::Diagnostics;
use gpushare_core::render;
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
    loop {
        pass += 1;
        let wait = match reconcile_once(dir, vars, planner, &cancel).await {
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
                let permanent = err.downcast_ref::<Diagnostics>().is_some();
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

async fn reconcile_once(
    dir: &Path,
    vars: &VarArgs,
    planner: &PlannerArgs,
    cancel: &AtomicBool,
) -> anyhow::Result<Outcome> {
    let desired = commands::load(dir, &vars.vars)?;
    let b = backends::build(&desired.settings, dir).await?;
    commands::resume_interrupted(&b, &desired, cancel, false).await?;
    let live = commands::observe(&b, &desired.settings.cluster).await?;
    let plan = commands::make_plan(&desired, &live, &commands::plan_options(false, planner))?;
    if plan.is_empty() {
        return Ok(Outcome::NoChanges);
    }
    commands::run_apply(&b, &desired, &plan, cancel, false).await?;
    Ok(Outcome::Applied(render::summary_line(&plan)))
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
