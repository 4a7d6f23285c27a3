//! Inspecting and editing what is recorded (`show`, `state ...`, `import`, `debug fault`).

use super::plan::render_opts;
use crate::cli::{FaultArg, LockArgs, PlannerArgs, StateCommand, VarArgs};
use crate::setup::{config_dir, load, open_for_edit, reconciler, with_lock_timeout};
use crate::{planfile, state_cmd};
use anyhow::{bail, Context};
use gpushare_core::model::Desired;
use gpushare_core::render;
use gpushare_engine::cloud::Fault;
use std::path::Path;

/// Settings of the configuration in `dir`, for commands that only need to find the state.
pub(crate) fn settings_of(dir: &Path) -> anyhow::Result<Desired> {
    load(dir, &VarArgs::default())
}

/// `show PLANFILE`: the saved plan as `plan` printed it, or with `json` in Terraform's
/// JSON plan representation (`gpushare_core::tfplan`).
pub(crate) async fn show_plan(file: &Path, json: bool) -> anyhow::Result<u8> {
    let saved = planfile::load(file)?;
    if json {
        let out = gpushare_core::tfplan::terraform_plan_json(&saved.plan, Some(&saved.desired));
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(0);
    }
    let r = reconciler(
        &saved.desired,
        &saved.config_dir,
        &PlannerArgs::default(),
        "gpushare show",
    )
    .await?;
    let state = r.store().load().await.context("reading the state")?;
    print!("{}", render::plan_text(&saved.plan, &state, &render_opts()));
    Ok(0)
}

pub(crate) async fn show(dir: &Path, json: bool, svg: Option<&Path>) -> anyhow::Result<u8> {
    let desired = settings_of(dir)?;
    let r = reconciler(&desired, dir, &PlannerArgs::default(), "gpushare show").await?;
    let live = r.observe_only(&desired.settings.cluster).await?;
    if let Some(file) = svg {
        let reports = r
            .store()
            .reports()
            .await
            .context("reading the agents' reports")?;
        crate::console::write_svg(file, &live.state, &reports, live.observed_at)?;
        if !json {
            eprintln!("Wrote the fleet picture to {}.", file.display());
        }
    }
    let services =
        gpushare_core::model::service_status(&live.state, &live.task_status, live.observed_at);
    let mut live = live;
    r.observe_target_groups(&desired, &mut live).await;
    // The disruption budget is the planner's judgement: what a pass would hold back
    // now (a configuration the planner refuses holds nothing here; plan says why).
    // The planner runs only when some host is silent: nothing is held otherwise.
    let options = r.options_for(&desired);
    let any_silent = live
        .state
        .hosts
        .values()
        .any(|h| options.silence(h, live.observed_at).is_some());
    let held = if any_silent {
        gpushare_core::plan::plan(&desired, &live, &options)
            .map(|p| p.held_pools)
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let usage = gpushare_core::model::task_usage_rows(&live.state, &live.task_status);
    if json {
        let mut out = render::show_json(&live.state);
        out["services"] = serde_json::to_value(&services)?;
        let jobs = gpushare_core::model::job_status(&live.state);
        if !jobs.is_empty() {
            out["jobs"] = serde_json::to_value(&jobs)?;
        }
        if !held.is_empty() {
            out["held_pools"] = serde_json::to_value(&held)?;
        }
        if !usage.is_empty() {
            out["task_usage"] = serde_json::to_value(&usage)?;
        }
        if !live.target_groups.is_empty() {
            out["target_groups"] = serde_json::to_value(&live.target_groups)?;
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(0);
    }
    if live.state.hosts.is_empty() {
        println!("No hosts. (state serial {})", live.state.serial);
    } else {
        print!("{}", render::fleet_picture(&live.state, &render_opts()));
    }
    let reports = r
        .store()
        .reports()
        .await
        .context("reading the agents' reports")?;
    print!(
        "{}",
        render::agent_status(&live.state, &reports, live.observed_at)
    );
    print!("{}", render::services_text(&services));
    for j in gpushare_core::model::job_status(&live.state) {
        println!("{}", j.line());
    }
    if !live.target_groups.is_empty() {
        let addresses = gpushare_core::model::host_addresses(&reports, &live.state.hosts);
        let mut list =
            gpushare_core::model::endpoints(&live.state, &live.task_status, &addresses, None);
        gpushare_core::model::annotate_target_health(
            &mut list,
            &desired.services,
            &live.state.hosts,
            &live.target_groups,
        );
        print!("{}", target_health_text(&list));
    }
    for h in &held {
        println!("\nReplacements held: {}", h.text());
    }
    print!("{}", usage_text(&usage));
    let outdated = gpushare_core::plan::outdated_hosts(&live.state);
    if !outdated.is_empty() {
        println!(
            "\nOutdated hosts ({}: launched with other settings than their pool's; a rolling refresh replaces them, see docs/refresh.md and `gpushare plan`):",
            outdated.len()
        );
        for (pool, o) in &outdated {
            println!(
                "  {} (pool {pool}, {} task(s)): {}",
                o.host_id,
                o.tasks,
                o.changes_text()
            );
        }
    }
    for s in &live.strays {
        println!("stray instance {} ({}, host id {}) is tagged for this cluster but unknown to the state", s.instance_id, s.instance_type, s.host_id);
    }
    for f in &live.foreign {
        println!("{}", render::foreign_line(f));
    }
    Ok(0)
}

pub(crate) async fn state(command: StateCommand) -> anyhow::Result<u8> {
    match command {
        StateCommand::List { dir } => state_list(&config_dir(dir)?).await,
        StateCommand::Show {
            addr,
            dir,
            json,
            vars,
        } => {
            let dir = config_dir(dir)?;
            let desired = load(&dir, &vars)?;
            let b = gpushare_backends::open(&desired.settings, &dir).await?;
            let state = b.store.load().await.context("reading the state")?;
            print!("{}", state_cmd::show(&state, &addr, json)?);
            Ok(0)
        }
        StateCommand::Pull { dir, vars } => {
            let dir = config_dir(dir)?;
            let desired = load(&dir, &vars)?;
            let b = gpushare_backends::open(&desired.settings, &dir).await?;
            let state = b.store.load().await.context("reading the state")?;
            println!("{}", serde_json::to_string_pretty(&state)?);
            Ok(0)
        }
        StateCommand::Push {
            file,
            dir,
            force,
            vars,
            lock,
        } => {
            let pushed = state_cmd::read_pushed(&file)?;
            let dir = config_dir(dir)?;
            let desired = with_lock_timeout(load(&dir, &vars)?, &lock);
            let b = gpushare_backends::open(&desired.settings, &dir).await?;
            let timeout = std::time::Duration::from_secs(desired.settings.lock_timeout_seconds);
            let serial = gpushare_engine::state_ops::push(
                &*b.store,
                &desired.settings.cluster,
                pushed,
                force,
                timeout,
            )
            .await?;
            println!(
                "Pushed {} into {} (state serial {serial}).",
                file.display(),
                b.store.location()
            );
            Ok(0)
        }
        StateCommand::Rm {
            addr,
            dir,
            vars,
            lock,
        } => {
            let (b, timeout) = open_for_edit(dir, &vars, &lock).await?;
            let removed = state_cmd::edit(&b, "gpushare state rm", timeout, |s| {
                Ok(gpushare_engine::state_ops::remove(s, &addr)?)
            })
            .await?;
            for r in &removed {
                println!("Removed {r}");
            }
            println!(
                "Successfully removed {} object(s) from the state (the cloud was not touched).",
                removed.len()
            );
            Ok(0)
        }
        StateCommand::Mv {
            from,
            to,
            dir,
            vars,
            lock,
        } => {
            let (b, timeout) = open_for_edit(dir, &vars, &lock).await?;
            state_cmd::edit(&b, "gpushare state mv", timeout, |s| {
                Ok(gpushare_engine::state_ops::rename(s, &from, &to)?)
            })
            .await?;
            println!("Move \"{from}\" to \"{to}\"\nSuccessfully moved 1 object.");
            Ok(0)
        }
    }
}

/// `gpushare import capacity_provider.POOL INSTANCE_ID`.
pub(crate) async fn import(
    dir: &Path,
    addr: &str,
    id: &str,
    vars: &VarArgs,
    lock: &LockArgs,
) -> anyhow::Result<u8> {
    let desired = with_lock_timeout(load(dir, vars)?, lock);
    let b = gpushare_backends::open(&desired.settings, dir).await?;
    let cluster = desired.settings.cluster.clone();
    // Checked before taking the lock (a cloud call), and again under it.
    let state = b.store.load().await.context("reading the state")?;
    let inst = gpushare_engine::state_ops::find_instance(&*b.cloud, &cluster, &state, id).await?;
    let host = gpushare_engine::state_ops::imported_host(&desired, addr, &inst)?;
    let timeout = std::time::Duration::from_secs(desired.settings.lock_timeout_seconds);
    let store_id = state_cmd::edit(&b, "gpushare import", timeout, |s| {
        if s.hosts.contains_key(&host.id) {
            bail!("host.{} is already in the state", host.id);
        }
        s.hosts.insert(host.id.clone(), host.clone());
        Ok(s.store_id.clone())
    })
    .await?;
    if inst.store_id.is_none() && !store_id.is_empty() {
        b.cloud
            .claim(&cluster, &store_id, id)
            .await
            .with_context(|| format!("tagging instance {id} with this store's id"))?;
    }
    println!(
        "Imported instance {id} as host.{} of {addr} ({}). The next plan places tasks on it.",
        host.id, host.instance_type
    );
    Ok(0)
}

pub(crate) async fn state_list(dir: &Path) -> anyhow::Result<u8> {
    let desired = settings_of(dir)?;
    let b = gpushare_backends::open(&desired.settings, dir).await?;
    let state = b.store.load().await.context("reading the state")?;
    for addr in state.resources.keys() {
        println!("{addr}");
    }
    for id in state.hosts.keys() {
        println!("host.{id}");
    }
    for id in state.tasks.keys() {
        println!("task.{id}");
    }
    Ok(0)
}

pub(crate) async fn debug_fault(
    dir: &Path,
    host: &str,
    fault: FaultArg,
    gpu: u32,
    xid: u64,
) -> anyhow::Result<u8> {
    let desired = settings_of(dir)?;
    let b = gpushare_backends::open(&desired.settings, dir).await?;
    let Some(local) = &b.local else {
        bail!(
            "debug fault works on the local cloud only (this configuration uses cloud = {:?})",
            b.cloud.kind()
        );
    };
    let f = match fault {
        FaultArg::MpsDown => Fault::MpsDown,
        FaultArg::Silent => Fault::Silent,
        FaultArg::GpuLost => Fault::GpuLost { gpu },
        FaultArg::Xid => Fault::Xid { gpu, code: xid },
        FaultArg::Ecc => Fault::Ecc { gpu },
        FaultArg::PendingRetirement => Fault::PendingRetirement { gpu },
        FaultArg::RowRemapFailure => Fault::RowRemapFailure { gpu },
        FaultArg::RuntimeDown => Fault::RuntimeDown,
        FaultArg::Clear => Fault::Clear,
    };
    let inst = local
        .inject_fault(&desired.settings.cluster, host, f)
        .context("injecting the fault")?;
    let what = match fault {
        FaultArg::MpsDown => {
            "the MPS daemon of host {h} is now down; its agent reports MPS impaired".to_string()
        }
        FaultArg::Silent => "the agent of host {h} has gone silent".to_string(),
        FaultArg::GpuLost => format!("GPU {gpu} of host {{h}} is lost; its agent reports the gpus check impaired"),
        FaultArg::Xid => format!("GPU {gpu} of host {{h}} had Xid {xid}; its agent reports it"),
        FaultArg::Ecc => format!("GPU {gpu} of host {{h}} has an uncorrectable ECC error"),
        FaultArg::PendingRetirement => format!("GPU {gpu} of host {{h}} has pages pending retirement"),
        FaultArg::RowRemapFailure => format!("a row remapping of GPU {gpu} of host {{h}} failed"),
        FaultArg::RuntimeDown => "the container runtime of host {h} no longer answers; its agent reports container_runtime impaired".to_string(),
        FaultArg::Clear => "host {h} has no injected fault".to_string(),
    };
    println!(
        "{} (instance {}).",
        what.replace("{h}", &inst.host_id),
        inst.instance_id
    );
    Ok(0)
}

/// `gpushare debug user-data HOST`: the boot environment a local host was launched
/// with (what a real host finds in its user data), as env-file lines.
pub(crate) async fn debug_user_data(dir: &Path, host: &str) -> anyhow::Result<u8> {
    let desired = settings_of(dir)?;
    let b = gpushare_backends::open(&desired.settings, dir).await?;
    let Some(local) = &b.local else {
        bail!(
            "debug user-data works on the local cloud only (this configuration uses cloud = {:?}; \
             on EC2 the user data is the instance's userData attribute)",
            b.cloud.kind()
        );
    };
    let env = local
        .user_data(&desired.settings.cluster, host)
        .context("reading the host's launch record")?
        .with_context(|| {
            format!(
                "host {host} was launched without a join token: set controller_address in the \
                 gpushare block (and local_agents = \"external\"); hosts launched from then on get one"
            )
        })?;
    print!("{env}");
    Ok(0)
}

/// `Target groups:` one line per task port behind a load balancer, with the
/// group's verdict on it; empty when no endpoint is behind one.
fn target_health_text(list: &[gpushare_core::model::Endpoint]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for e in list {
        for (group, state) in &e.target_health {
            let target = e
                .target()
                .unwrap_or_else(|| format!("{}:{}", e.host, e.host_port));
            let _ = writeln!(out, "  {group:<20} {target:<24} {:<24} {state}", e.task);
        }
    }
    if out.is_empty() {
        return out;
    }
    format!("\nTarget groups (load balancers; docs/serving.md):\n{out}")
}

/// The tasks' GPU use as their agents measured it: used now and peak against the
/// MPS memory declared, SM percent (issue 49). Empty when no agent measured any.
fn usage_text(rows: &[gpushare_core::model::TaskUsageRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nGPU use by task (as the agents measured it):\n");
    for r in rows {
        let declared = if r.declared_gpu_memory_mib > 0 {
            format!(" of {} MiB declared", r.declared_gpu_memory_mib)
        } else {
            String::new()
        };
        let sm = r
            .usage
            .sm_percent
            .map(|p| format!(", SM {p}%"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {} (service {}, host {}): {} MiB used, peak {} MiB{declared}{sm}\n",
            r.task, r.service, r.host, r.usage.gpu_memory_mib, r.usage.peak_gpu_memory_mib
        ));
    }
    out
}
