//! Applying (`apply` of a directory or a saved plan, `destroy`, resuming an interrupted apply, progress).

use super::plan::{hashed_files, print_plan, refresh};
use crate::cli::{LockArgs, PlannerArgs, ScopeArgs, VarArgs};
use crate::setup::{cancel_on_ctrl_c, load, reconciler, with_lock_timeout};
use crate::ui;
use crate::ui::ProgressPrinter;
use crate::{planfile, scope, state_cmd};
use anyhow::{bail, Context};
use gpushare_core::model::{Desired, Live};
use gpushare_core::plan::Plan;
use gpushare_core::{render, FORMAT_VERSION};
use gpushare_engine::apply::ApplyReport;
use gpushare_engine::pass::{AsApplied, Policy, Prepare, Prepared, Scope};
use gpushare_engine::reconcile::{PassOutcome, Reconciler, Run};
use serde_json::json;
use std::path::Path;

pub(crate) struct How {
    pub(crate) destroy: bool,
    pub(crate) auto_approve: bool,
    pub(crate) json: bool,
    /// The plan's fleet picture whatever the fleet's size.
    pub(crate) verbose: bool,
    pub(crate) planner: PlannerArgs,
    pub(crate) scope: ScopeArgs,
    /// Plan every resource as last applied (the configuration gives only the
    /// settings), so that no configuration change is rolled out: `gpushare run`.
    pub(crate) as_applied: bool,
    pub(crate) lock: LockArgs,
}

pub(crate) async fn apply_dir(dir: &Path, vars: &VarArgs, how: &How) -> anyhow::Result<u8> {
    if how.json && !how.auto_approve {
        bail!("--json needs --auto-approve (there is no one to ask)");
    }
    let desired = with_lock_timeout(load(dir, vars)?, &how.lock);
    let holder = if how.destroy {
        "gpushare destroy"
    } else {
        "gpushare apply"
    };
    let r = reconciler(&desired, dir, &how.planner, holder).await?;
    let cancel = cancel_on_ctrl_c();
    let progress = ProgressPrinter::new(how.json);
    let progress_fn = progress.callback();
    let run = Run {
        cancel: Some(&cancel),
        progress: Some(&progress_fn),
    };
    if how.scope.refresh_only {
        // Finish an interrupted apply first, so the refresh starts from where it left off.
        let done = r.resume(&desired, run).await?;
        print_resumed(done.as_ref(), how.json);
        return apply_refresh(&r, &desired, how).await;
    }
    let scope = scope_of(how);
    let prepare = Prepare::to_apply(&*scope)
        .destroying(how.destroy)
        .with_run(run);
    let prepared = r.prepare(&desired, prepare).await?;
    print_resumed(prepared.resumed.as_ref(), how.json);
    if !how.json {
        print_plan(&prepared.plan, &prepared.live, how.verbose);
    }
    if prepared.plan.is_empty() {
        if how.json {
            print_apply_json(&prepared.plan, None, &prepared.live);
        } else {
            println!("\nNo changes. The fleet matches the configuration.");
        }
        return Ok(0);
    }
    if !how.auto_approve {
        let (question, detail) = if how.destroy {
            (
                "Do you really want to destroy every host and task?",
                "gpushare will destroy everything shown above.",
            )
        } else {
            (
                "Do you want to perform these actions?",
                "gpushare will perform the actions described above.",
            )
        };
        if !ui::confirm(question, detail)? {
            println!("\nApply cancelled.");
            return Ok(1);
        }
    }
    if !how.json {
        eprintln!();
    }
    // What was shown (and confirmed) is applied or refused, never planned again.
    let outcome = r.execute(prepared, Policy::REVIEWED, run).await?;
    finish(&r, &desired, outcome, how.json, how.destroy).await
}

/// One pass as `how` asks (auto-approved), printing nothing: `gpushare run --wait`'s
/// passes after the first.
pub(crate) async fn quiet_pass(dir: &Path, vars: &VarArgs, how: &How) -> anyhow::Result<()> {
    let desired = with_lock_timeout(load(dir, vars)?, &how.lock);
    let r = reconciler(&desired, dir, &how.planner, "gpushare run").await?;
    let scope = scope_of(how);
    let prepared = r.prepare(&desired, Prepare::to_apply(&*scope)).await?;
    if !prepared.plan.is_empty() {
        r.execute(prepared, Policy::REVIEWED, Run::default())
            .await?;
    }
    Ok(())
}

/// What the pass plans towards: the configuration as the scoping flags narrow it,
/// or (`as_applied`) every resource as last applied.
fn scope_of(how: &How) -> Box<dyn Scope + '_> {
    if how.as_applied {
        Box::new(AsApplied)
    } else {
        Box::new(scope::Flags {
            targets: &how.scope.target,
            replace: &how.scope.replace,
        })
    }
}

/// Says that an interrupted apply was finished first.
fn print_resumed(done: Option<&ApplyReport>, json: bool) {
    if let (Some(done), false) = (done, json) {
        println!(
            "Finished an interrupted apply ({} steps).\n",
            done.changed_steps + done.skipped_steps
        );
    }
}

/// `apply -refresh-only`: record what observing found (after asking), no cloud call.
pub(crate) async fn apply_refresh(
    r: &Reconciler,
    desired: &Desired,
    how: &How,
) -> anyhow::Result<u8> {
    let (changes, next) = refresh(r, desired, how.json).await?;
    if changes.is_empty() {
        return Ok(0);
    }
    if !how.auto_approve
        && !ui::confirm(
            "Would you like to update the gpushare state to reflect these changes?",
            "gpushare will write these changes to the state without changing the fleet.",
        )?
    {
        println!("\nApply cancelled.");
        return Ok(1);
    }
    let lock_timeout = std::time::Duration::from_secs(desired.settings.lock_timeout_seconds);
    let serial = state_cmd::edit(
        r.backends(),
        "gpushare apply -refresh-only",
        lock_timeout,
        |s| {
            if s.serial + 1 != next.serial {
                bail!(
                    "the state moved on while refreshing (serial {}); run the command again",
                    s.serial
                );
            }
            *s = next.clone();
            Ok(next.serial)
        },
    )
    .await?;
    if !how.json {
        println!(
            "\nApply complete! Recorded {} changes (state serial {serial}).",
            changes.len()
        );
    }
    Ok(0)
}

/// `apply PLANFILE`: the saved plan as it was reviewed, or refused when its
/// configuration files changed (here) or the state moved on (the engine's check).
pub(crate) async fn apply_saved(file: &Path, json: bool, lock: &LockArgs) -> anyhow::Result<u8> {
    let saved = planfile::load(file)?;
    let dir = &saved.config_dir;
    let hash = planfile::config_hash(dir, &hashed_files(dir, &saved.var_files)?, &saved.vars)?;
    if hash != saved.config_hash {
        bail!(
            "the saved plan {} is stale: the configuration in {} changed since it was made; run gpushare plan again",
            file.display(),
            dir.display()
        );
    }
    let desired = with_lock_timeout(saved.desired, lock);
    let r = reconciler(&desired, dir, &PlannerArgs::default(), "gpushare apply").await?;
    if saved.plan.is_empty() {
        if json {
            let live = r.observe(&desired.settings.cluster).await?;
            print_apply_json(&saved.plan, None, &live);
        } else {
            println!("No changes in the saved plan.");
        }
        return Ok(0);
    }
    let cancel = cancel_on_ctrl_c();
    let progress = ProgressPrinter::new(json);
    let progress_fn = progress.callback();
    let run = Run {
        cancel: Some(&cancel),
        progress: Some(&progress_fn),
    };
    if !json {
        eprintln!();
    }
    let destroy = saved.plan.destroy;
    let prepared = Prepared::reviewed(desired.clone(), saved.plan);
    let outcome = r
        .execute(prepared, Policy::REVIEWED, run)
        .await
        .with_context(|| format!("applying the saved plan {}", file.display()))?;
    finish(&r, &desired, outcome, json, destroy).await
}

/// After an apply (the local agents have started what was placed): summarise.
pub(crate) async fn finish(
    r: &Reconciler,
    desired: &Desired,
    outcome: PassOutcome,
    json: bool,
    destroy: bool,
) -> anyhow::Result<u8> {
    let plan = &outcome.plan;
    let Some(report) = &outcome.applied else {
        bail!("the apply carried out nothing");
    };
    if let Some(e) = outcome.agents {
        eprintln!(
            "warning: the local fleet's agents did not report after the apply: {:#}",
            anyhow::Error::new(e)
        );
    }
    let live = r.observe_only(&desired.settings.cluster).await?;
    if json {
        print_apply_json(plan, Some(report), &live);
        return Ok(unconfirmed_exit(report, &live, false));
    }
    let verb = if destroy { "Destroy" } else { "Apply" };
    println!("\n{verb} complete! {}", render::summary_line(plan));
    let running = live
        .state
        .tasks
        .values()
        .filter(|t| t.state == gpushare_core::model::TaskState::Running)
        .count();
    let hosts = live
        .state
        .hosts
        .values()
        .filter(|h| h.state.is_active())
        .count();
    println!(
        "Fleet now: {}, {running} of {} running (state serial {}).",
        gpushare_core::util::count(hosts, "host", "hosts"),
        gpushare_core::util::count(live.state.tasks.len(), "task", "tasks"),
        report.serial
    );
    if !report.retired_unconfirmed.is_empty() {
        println!(
            "Warning: {} host(s) were retired before their agents reported their tasks stopped (within move_timeout_seconds): {}",
            report.retired_unconfirmed.len(),
            report.retired_unconfirmed.join(", ")
        );
    }
    Ok(unconfirmed_exit(report, &live, true))
}

/// When a replacement's successor was not healthy in time or failed, the old tasks
/// keep running and the apply is not confirmed: say which deployments and tasks, and
/// exit 1 (the next plan, or the reconcile loop, carries the deployment on).
fn unconfirmed_exit(report: &ApplyReport, live: &Live, print: bool) -> u8 {
    if report.unconfirmed.is_empty() {
        return 0;
    }
    if print {
        let deployments: Vec<String> = live
            .state
            .resources
            .iter()
            .filter_map(|(addr, r)| {
                let d = r.deployment.as_ref()?;
                (d.state != gpushare_core::model::DeploymentState::Completed).then(|| {
                    format!(
                        "deployment {} of {addr} (revision {}): {}, {} failed task(s){}",
                        d.id,
                        d.revision,
                        d.state,
                        d.failed_tasks,
                        d.reason
                            .as_deref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    )
                })
            })
            .collect();
        eprintln!(
            "Error: {} replacement(s) not confirmed: the new task was not healthy within move_timeout_seconds or failed, so the old task keeps running (nothing healthy was stopped):",
            report.unconfirmed.len()
        );
        for u in &report.unconfirmed {
            eprintln!("  {u}");
        }
        for f in &report.failed_successors {
            eprintln!("  failed: {f}");
        }
        for d in &deployments {
            eprintln!("  {d}");
        }
        eprintln!("The next plan (gpushare apply again, or the reconcile loop) decides from the agents' reports; a deployment with circuit_breaker stops after repeated failures (docs/deployments.md).");
    }
    1
}

pub(crate) fn print_apply_json(plan: &Plan, report: Option<&ApplyReport>, live: &Live) {
    let out = json!({
        "format_version": FORMAT_VERSION,
        "plan": render::plan_json(plan),
        "applied": report.map(|r| json!({
            "resumed_steps": r.resumed_steps,
            "changed_steps": r.changed_steps,
            "skipped_steps": r.skipped_steps,
            "launched": r.launched,
            "serial": r.serial,
            "unconfirmed": r.unconfirmed,
            "failed_successors": r.failed_successors,
            "retired_unconfirmed": r.retired_unconfirmed,
        })),
        "state": render::show_json(&live.state),
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
}
