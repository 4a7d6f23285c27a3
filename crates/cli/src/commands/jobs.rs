//! `gpushare job status JOB` and `gpushare job rerun JOB --failed` (issue 51): a
//! job's progress as the store keeps it, and another chance for its failed indexes.

use crate::cli::{JobCommand, LockArgs, VarArgs};
use crate::setup::{config_dir, load, open_for_edit};
use crate::state_cmd;
use anyhow::{bail, Context};
use gpushare_core::model::{job_status, rerun_failed, Job, ResourceAddr, ResourceKind};

pub(crate) async fn job(command: JobCommand) -> anyhow::Result<u8> {
    match command {
        JobCommand::Status {
            job,
            dir,
            json,
            vars,
        } => status(&job, dir, json, &vars).await,
        JobCommand::Rerun {
            job,
            failed,
            dir,
            vars,
            lock,
        } => rerun(&job, failed, dir, &vars, &lock).await,
    }
}

async fn status(
    job: &str,
    dir: Option<std::path::PathBuf>,
    json: bool,
    vars: &VarArgs,
) -> anyhow::Result<u8> {
    let dir = config_dir(dir)?;
    let desired = load(&dir, vars)?;
    let b = gpushare_backends::open(&desired.settings, &dir).await?;
    let state = b.store.load().await.context("reading the state")?;
    let Some(s) = job_status(&state).into_iter().find(|s| s.name == job) else {
        bail!("job.{job} has no progress in the state (not declared, or not applied yet)");
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", s.text());
    }
    Ok(0)
}

async fn rerun(
    job: &str,
    failed: bool,
    dir: Option<std::path::PathBuf>,
    vars: &VarArgs,
    lock: &LockArgs,
) -> anyhow::Result<u8> {
    if !failed {
        bail!("say what to run again: --failed (the indexes that used up their retries)");
    }
    let (b, timeout) = open_for_edit(dir, vars, lock).await?;
    let addr = ResourceAddr::new(ResourceKind::Job, job.to_string());
    let again = state_cmd::edit(&b, "gpushare job rerun", timeout, |s| {
        let Some(r) = s.resources.get_mut(&addr) else {
            bail!("job.{job} is not in the state");
        };
        let max_retries = serde_json::from_value::<Job>(r.attrs.clone())
            .map(|j| j.max_retries)
            .with_context(|| format!("reading job.{job} from the state"))?;
        let Some(rec) = r.job.as_mut() else {
            bail!("job.{job} has not run yet");
        };
        Ok(rerun_failed(rec, max_retries))
    })
    .await?;
    if again.is_empty() {
        println!("job.{job} has no failed index: nothing to run again.");
    } else {
        let list: Vec<String> = again.iter().map(u32::to_string).collect();
        println!(
            "job.{job}: index(es) {} get another max_retries + 1 attempts; the next apply or reconcile pass starts them.",
            list.join(", ")
        );
    }
    Ok(0)
}
