//! Observing and planning (`plan`, `-refresh-only`, scoped plans, the user data preview).

use crate::cli::{LockArgs, PlannerArgs, ScopeArgs, VarArgs};
use crate::planfile::{self, SavedPlan};
use crate::setup::{load, reconciler, with_lock_timeout};
use crate::{scope, ui};
use anyhow::{bail, Context};
use gpushare_core::model::{Desired, Live};
use gpushare_core::plan::Plan;
use gpushare_core::render::{self, RenderOptions};
use gpushare_core::{tfplan, FORMAT_VERSION};
use gpushare_engine::pass::{Prepare, Prepared};
use gpushare_engine::reconcile::Reconciler;
use serde_json::json;
use std::path::{Path, PathBuf};

pub(crate) fn render_opts() -> RenderOptions {
    RenderOptions {
        color: ui::use_color(),
        verbose: false,
    }
}

/// The human-readable plan: changes, the fleet picture after it (a summary of a
/// large fleet unless `verbose`), counts and cost.
pub(crate) fn print_plan(plan: &Plan, live: &Live, verbose: bool) {
    let opts = RenderOptions {
        verbose,
        ..render_opts()
    };
    print!("{}", render::plan_text(plan, &live.state, &opts));
}

/// What `gpushare plan` prints and how it exits.
pub(crate) struct PlanOutput {
    pub(crate) detailed: bool,
    pub(crate) json: bool,
    pub(crate) show_user_data: bool,
    /// The fleet picture whatever the fleet's size.
    pub(crate) verbose: bool,
}

/// `plan --show-user-data`: the cloud-init script each planned launch would boot with.
#[cfg(feature = "ec2")]
pub(crate) fn print_user_data(plan: &Plan, desired: &Desired) -> anyhow::Result<()> {
    // Each launch mints its own single-use token; the preview shows one of its shape.
    let server = match desired.settings.controller_address.as_deref() {
        Some(s) => s,
        None => {
            if !plan.launches.is_empty() {
                println!("\n# No controller_address in the gpushare block: the controller's address below is a placeholder (hosts on EC2 need one to join).");
            }
            "https://controller.invalid:7443"
        }
    };
    let join = gpushare_engine::join::JoinGrant::placeholder(server);
    if !plan.launches.is_empty() {
        println!("\n# The join token below is a placeholder: each launch mints its own (single-use, for that host).");
    }
    for launch in &plan.launches {
        // The pool's settings as the launch carries them: what the host boots with.
        let host = &launch.host;
        let script = gpushare_ec2::render_user_data(&gpushare_ec2::UserDataInput {
            cluster: &plan.cluster,
            pool_name: &host.capacity_provider,
            pool: &launch.pool,
            host_id: &host.id,
            join: &join,
        })
        .with_context(|| format!("rendering the user data of host {}", host.id))?;
        println!(
            "\n# user data of host {} ({} bytes)\n{script}",
            host.id,
            script.len()
        );
    }
    Ok(())
}

#[cfg(not(feature = "ec2"))]
pub(crate) fn print_user_data(_: &Plan, _: &Desired) -> anyhow::Result<()> {
    bail!("--show-user-data needs the EC2 backend, and this gpushare was built without the `ec2` feature")
}

/// The files a saved plan's staleness hash covers: the configuration, the variable
/// files read automatically and the -var-file files.
pub(crate) fn hashed_files(dir: &Path, var_files: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = planfile::config_files(dir)?;
    files.extend(
        gpushare_config::auto_var_files(dir)
            .with_context(|| format!("listing the variable files of {}", dir.display()))?,
    );
    files.extend(var_files.iter().cloned());
    Ok(files)
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn plan_cmd(
    dir: &Path,
    out: Option<&Path>,
    output: PlanOutput,
    destroy: bool,
    vars: &VarArgs,
    planner: &PlannerArgs,
    scope_args: &ScopeArgs,
    lock: &LockArgs,
) -> anyhow::Result<u8> {
    let PlanOutput {
        detailed,
        json,
        show_user_data,
        verbose,
    } = output;
    let desired = with_lock_timeout(load(dir, vars)?, lock);
    let r = reconciler(&desired, dir, planner, "gpushare plan").await?;
    if r.store()
        .read_journal()
        .await
        .context("reading the apply journal")?
        .is_some()
    {
        eprintln!("warning: an interrupted apply left a journal; the next apply finishes it before anything else");
    }
    if scope_args.refresh_only {
        if out.is_some() {
            bail!("-refresh-only plans cannot be saved: run gpushare apply -refresh-only");
        }
        let changes = refresh(&r, &desired, json).await?.0;
        return Ok(if detailed && !changes.is_empty() {
            2
        } else {
            0
        });
    }
    let flags = scope::Flags {
        targets: &scope_args.target,
        replace: &scope_args.replace,
    };
    let Prepared {
        desired,
        live,
        plan,
        ..
    } = r
        .prepare(&desired, Prepare::to_show(&flags).destroying(destroy))
        .await?;
    if json {
        // Terraform's machine-readable UI stream, one message per line.
        let now = jiff::Timestamp::now().to_string();
        for m in tfplan::ui_messages(&plan, &now, env!("CARGO_PKG_VERSION")) {
            println!("{}", serde_json::to_string(&m)?);
        }
    } else {
        print_plan(&plan, &live, verbose);
        if show_user_data {
            print_user_data(&plan, &desired)?;
        }
    }
    if let Some(out) = out {
        let saved = SavedPlan {
            format_version: FORMAT_VERSION.to_string(),
            config_dir: dir.to_path_buf(),
            config_hash: planfile::config_hash(
                dir,
                &hashed_files(dir, &vars.var_files)?,
                &vars.vars,
            )?,
            vars: vars.vars.clone(),
            var_files: vars.var_files.clone(),
            desired,
            plan: plan.clone(),
            digest: String::new(),
        };
        planfile::save(out, &saved)?;
        if !json {
            println!(
                "\nSaved the plan to {}. To carry it out: gpushare apply {}",
                out.display(),
                out.display()
            );
        }
    }
    // A plan that only records deployments is the rollout going on, not a change
    // to the fleet (as a refresh is none in Terraform's exit code).
    Ok(if detailed && !plan.is_empty() && !plan.records_only() {
        2
    } else {
        0
    })
}

/// `-refresh-only`: print what the world says that the state does not record yet;
/// returns those changes and the state that records them.
pub(crate) async fn refresh(
    r: &Reconciler,
    desired: &Desired,
    json: bool,
) -> anyhow::Result<(Vec<String>, gpushare_core::model::StoreState)> {
    let recorded = r.store().load().await.context("reading the state")?;
    let live = r.observe(&desired.settings.cluster).await?;
    let changes = gpushare_engine::refresh_only::refresh_changes(&recorded, &live);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "format_version": FORMAT_VERSION,
                "refresh_only": true,
                "changes_outside_gpushare": changes,
            }))?
        );
    } else if changes.is_empty() {
        println!("No changes. The state matches the fleet; refresh-only proposes nothing.");
    } else {
        println!("Objects have changed outside of gpushare:\n");
        for c in &changes {
            println!("  ~ {c}");
        }
        println!("\nThis is a refresh-only plan: it proposes no change to the fleet. gpushare apply -refresh-only records the above in the state.");
    }
    Ok((
        changes,
        gpushare_engine::refresh_only::refreshed_state(&recorded, &live),
    ))
}
