//! `gpushare run TASK_DEFINITION` (issue 51: ECS RunTask) and `gpushare job rm`:
//! a one-off job recorded in the store beside the applied resources, marked
//! `one_off`, which the planner plans as if it were declared
//! (`gpushare_core::model::with_one_off_jobs`), so that plan, apply and reconcile
//! show it and never stop it; it is removed by `gpushare job rm`.

use super::apply::{apply_dir, quiet_pass, How};
use crate::cli::{PlannerArgs, RunArgs, ScopeArgs, StoreArgs, VarArgs};
use crate::setup::{config_dir, load, open_for_edit};
use crate::state_cmd;
use anyhow::{bail, Context};
use gpushare_core::model::{
    job_status, AppliedResource, Desired, Job, JobState, ResourceAddr, ResourceKind, StoreState,
};
use std::path::Path;

pub(crate) async fn run(args: RunArgs) -> anyhow::Result<u8> {
    let dir = config_dir(args.at.dir.clone())?;
    let desired = load(&dir, &args.at.vars)?;
    let (name, job) = one_off(&desired, &args, gpushare_core::util::unix_now())?;
    let (b, timeout) = open_for_edit(Some(dir.clone()), &args.at.vars, &args.at.lock).await?;
    state_cmd::edit(&b, "gpushare run", timeout, |s| record(s, &name, &job)).await?;
    println!(
        "job.{name}: {} run(s) of task_definition.{}, {} at once, on capacity_provider.{}: recorded (`gpushare job rm {name}` removes it).\n",
        job.completions, job.task_definition, job.parallelism, job.capacity_provider
    );
    // Its runs are placed now, by a pass that plans every resource as last applied
    // (so no configuration edit waiting for `gpushare apply` rolls out with them).
    let how = How {
        destroy: false,
        auto_approve: true,
        json: false,
        verbose: false,
        planner: PlannerArgs::default(),
        scope: ScopeArgs::default(),
        as_applied: true,
        lock: args.at.lock.clone(),
    };
    let code = apply_dir(&dir, &args.at.vars, &how).await?;
    if code != 0 || !args.wait {
        return Ok(code);
    }
    wait(&dir, &args.at.vars, &how, &b, &name).await
}

/// Run passes (as the first one) every two seconds until job `name` finishes,
/// printing its progress line when it changes: 0 when it succeeded, 1 when it failed.
async fn wait(
    dir: &Path,
    vars: &VarArgs,
    how: &How,
    b: &gpushare_engine::reconcile::Backends,
    name: &str,
) -> anyhow::Result<u8> {
    let mut last = String::new();
    loop {
        let state = b.store.load().await.context("reading the state")?;
        let Some(st) = job_status(&state).into_iter().find(|s| s.name == name) else {
            bail!("job.{name} was removed while waiting for it");
        };
        let line = st.line();
        if line != last {
            println!("{line}");
            last = line;
        }
        match st.state {
            JobState::Succeeded => return Ok(0),
            JobState::Failed => {
                eprintln!(
                    "job.{name} failed: `gpushare job status {name}` says which runs and why"
                );
                return Ok(1);
            }
            JobState::Running => {}
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        quiet_pass(dir, vars, how).await?;
    }
}

/// The one-off job `args` asks for, checked against the configuration: its name
/// and the job.
fn one_off(desired: &Desired, args: &RunArgs, now: u64) -> anyhow::Result<(String, Job)> {
    let td = &args.task_definition;
    if !desired.task_definitions.contains_key(td) {
        bail!(
            "the configuration declares no task_definition.{td} (declared: {})",
            names(desired.task_definitions.keys())
        );
    }
    let pool = match &args.pool {
        Some(p) if desired.capacity_providers.contains_key(p) => p.clone(),
        Some(p) => bail!(
            "the configuration declares no capacity_provider.{p} (declared: {})",
            names(desired.capacity_providers.keys())
        ),
        None if desired.capacity_providers.len() == 1 => desired
            .capacity_providers
            .keys()
            .next()
            .cloned()
            .unwrap_or_default(),
        None => bail!(
            "say which pool with --pool (declared: {})",
            names(desired.capacity_providers.keys())
        ),
    };
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("run-{td}-{now}"));
    let good = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !good {
        bail!("--name {name:?}: a letter, then letters, digits, '_' or '-'");
    }
    if desired.jobs.contains_key(&name) {
        bail!("job.{name} is declared in the configuration: give the one-off job another --name");
    }
    let job = Job {
        task_definition: td.clone(),
        capacity_provider: pool,
        completions: args.count,
        parallelism: args.parallelism.unwrap_or(args.count),
        max_retries: args.max_retries,
        timeout_seconds: None,
        indexed: true,
        priority: None,
        expected_run_seconds: None,
        ttl_after_finished_seconds: None,
    };
    Ok((name, job))
}

fn names<'a>(it: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = it.map(String::as_str).collect();
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

/// Record one-off job `name` in the state: refused when the name is taken, or when
/// its task definition or pool was never applied (its runs are planned from the
/// applied resources only).
fn record(s: &mut StoreState, name: &str, job: &Job) -> anyhow::Result<()> {
    let addr = ResourceAddr::new(ResourceKind::Job, name);
    if s.resources.contains_key(&addr) {
        bail!("job.{name} is in the state already (`gpushare job status {name}`); give another --name");
    }
    for needed in [
        ResourceAddr::new(ResourceKind::TaskDefinition, job.task_definition.clone()),
        ResourceAddr::new(
            ResourceKind::CapacityProvider,
            job.capacity_provider.clone(),
        ),
    ] {
        if !s.resources.contains_key(&needed) {
            bail!("{needed} is not applied yet: run `gpushare apply` first (a one-off job runs what was applied)");
        }
    }
    let mut r = AppliedResource::new(serde_json::to_value(job).context("the job as JSON")?);
    r.one_off = true;
    s.resources.insert(addr, r);
    Ok(())
}

/// `gpushare job rm JOB`: a one-off job's record goes; the next pass stops its runs.
pub(crate) async fn rm(job: &str, at: &StoreArgs) -> anyhow::Result<u8> {
    let (b, timeout) = open_for_edit(at.dir.clone(), &at.vars, &at.lock).await?;
    state_cmd::edit(&b, "gpushare job rm", timeout, |s| remove(s, job)).await?;
    println!("job.{job} removed; the next apply or reconcile pass stops its runs.");
    Ok(0)
}

fn remove(s: &mut StoreState, job: &str) -> anyhow::Result<()> {
    let addr = ResourceAddr::new(ResourceKind::Job, job);
    match s.resources.get(&addr) {
        None => bail!("job.{job} is not in the state"),
        Some(r) if !r.one_off => bail!(
            "job.{job} is declared in the configuration, not a one-off job: remove it there and apply"
        ),
        Some(_) => {
            s.resources.remove(&addr);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired() -> Desired {
        serde_json::from_value(serde_json::json!({
            "settings": {"cluster": "c"},
            "task_definitions": {},
            "capacity_providers": {},
        }))
        .unwrap_or_default()
    }

    #[test]
    fn a_one_off_job_is_recorded_once_and_only_a_one_off_job_is_removed() {
        let job = Job {
            task_definition: "sim".into(),
            capacity_provider: "l4".into(),
            completions: 3,
            parallelism: 3,
            max_retries: 0,
            timeout_seconds: None,
            indexed: true,
            priority: None,
            expected_run_seconds: None,
            ttl_after_finished_seconds: None,
        };
        let mut s = StoreState::default();
        let unapplied = format!(
            "{:#}",
            record(&mut s, "adhoc", &job).expect_err("unapplied")
        );
        assert!(
            unapplied.contains("task_definition.sim is not applied yet"),
            "{unapplied}"
        );
        for (kind, n) in [
            (ResourceKind::TaskDefinition, "sim"),
            (ResourceKind::CapacityProvider, "l4"),
        ] {
            s.resources.insert(
                ResourceAddr::new(kind, n),
                AppliedResource::new(serde_json::json!({})),
            );
        }
        record(&mut s, "adhoc", &job).expect("recorded");
        let again = format!("{:#}", record(&mut s, "adhoc", &job).expect_err("taken"));
        assert!(again.contains("in the state already"), "{again}");
        let mut d = desired();
        d.jobs.insert("declared".into(), job.clone());
        let planned = gpushare_core::model::with_one_off_jobs(&d, &s)
            .expect("readable")
            .expect("one-off jobs");
        assert_eq!(planned.jobs.get("adhoc"), Some(&job));
        s.resources.insert(
            ResourceAddr::new(ResourceKind::Job, "declared"),
            AppliedResource::new(serde_json::to_value(&job).expect("json")),
        );
        let refused = format!("{:#}", remove(&mut s, "declared").expect_err("declared"));
        assert!(
            refused.contains("declared in the configuration"),
            "{refused}"
        );
        remove(&mut s, "adhoc").expect("removed");
        assert!(gpushare_core::model::with_one_off_jobs(&d, &s)
            .expect("readable")
            .is_none());
    }
}
