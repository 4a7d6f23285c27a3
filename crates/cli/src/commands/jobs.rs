//! `gpushare job status JOB`, `gpushare job logs JOB --index I` and `gpushare job
//! rerun JOB --failed` (issue 51): a job's progress as the store keeps it, a run's
//! output (through `gpushare logs`), and another chance for its failed indexes.

use crate::cli::{JobCommand, StoreArgs, VarArgs};
use crate::setup::{config_dir, load, open_for_edit};
use crate::state_cmd;
use anyhow::{bail, Context};
use gpushare_core::model::{
    job_status, rerun_failed, Job, JobAttempt, ResourceAddr, ResourceKind, StoreState,
};

pub(crate) async fn job(command: JobCommand) -> anyhow::Result<u8> {
    match command {
        JobCommand::Status {
            job,
            dir,
            json,
            vars,
        } => status(&job, dir, json, &vars).await,
        JobCommand::Rerun { job, failed, at } => rerun(&job, failed, &at).await,
        JobCommand::Rm { job, at } => super::run_job::rm(&job, &at).await,
        JobCommand::Logs {
            job,
            index,
            attempt,
            output,
            at,
        } => {
            let (b, timeout) = open_for_edit(at.dir, &at.vars, &at.lock).await?;
            let state = b.store.load().await.context("reading the state")?;
            let run = attempt_of(&state, &job, index, attempt)?;
            let args =
                super::serving::LogsArgs::new(run.task_id.clone(), Some(run.host.clone()), output);
            super::serving::logs_from(&b, timeout, args).await
        }
    }
}

/// The attempt of `job`'s index `index` that `gpushare job logs` reads: attempt
/// number `attempt`, or the latest.
fn attempt_of<'s>(
    state: &'s StoreState,
    job: &str,
    index: u32,
    attempt: Option<u32>,
) -> anyhow::Result<&'s JobAttempt> {
    let addr = ResourceAddr::new(ResourceKind::Job, job.to_string());
    let Some(rec) = state.resources.get(&addr).and_then(|r| r.job.as_ref()) else {
        bail!("job.{job} has no progress in the state (not declared, or not applied yet)");
    };
    let Some(i) = rec.indexes.get(index as usize) else {
        bail!(
            "job.{job} has indexes 0..{} (completions {}): no index {index}",
            rec.indexes.len().saturating_sub(1),
            rec.indexes.len()
        );
    };
    if rec.expired {
        bail!("job.{job}'s attempts were dropped by its ttl_after_finished_seconds");
    }
    let found = match attempt {
        Some(n) => i.attempts.iter().find(|a| a.attempt == n),
        None => i.attempts.last(),
    };
    found.ok_or_else(|| {
        let had: Vec<String> = i.attempts.iter().map(|a| a.attempt.to_string()).collect();
        match (attempt, had.is_empty()) {
            (_, true) => anyhow::anyhow!("job.{job} index {index} has not started yet"),
            (Some(n), false) => anyhow::anyhow!(
                "job.{job} index {index} has no attempt {n} (its attempts: {})",
                had.join(", ")
            ),
            (None, false) => anyhow::anyhow!("job.{job} index {index} has no attempt"),
        }
    })
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

async fn rerun(job: &str, failed: bool, at: &StoreArgs) -> anyhow::Result<u8> {
    if !failed {
        bail!("say what to run again: --failed (the indexes that used up their retries)");
    }
    let (b, timeout) = open_for_edit(at.dir.clone(), &at.vars, &at.lock).await?;
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

#[cfg(test)]
mod tests {
    use super::attempt_of;
    use gpushare_core::model::{
        AppliedResource, AttemptOutcome, JobAttempt, JobIndex, JobRecord, ResourceAddr,
        ResourceKind, StoreState,
    };

    fn attempt(n: u32, task: &str, outcome: AttemptOutcome) -> JobAttempt {
        JobAttempt {
            attempt: n,
            task_id: task.into(),
            host: format!("h-{task}"),
            outcome,
            exit_code: None,
            reason: None,
            started_at: 1,
            ended_at: None,
        }
    }

    fn state() -> StoreState {
        let rec = JobRecord {
            family: "run".into(),
            revision: 1,
            indexes: vec![
                JobIndex::default(),
                JobIndex {
                    attempts: vec![
                        attempt(1, "t1", AttemptOutcome::Failed),
                        attempt(2, "t2", AttemptOutcome::Succeeded),
                    ],
                    ..JobIndex::default()
                },
            ],
            ..JobRecord::default()
        };
        let mut r = AppliedResource::new(serde_json::json!({}));
        r.job = Some(rec);
        let mut s = StoreState::default();
        s.resources
            .insert(ResourceAddr::new(ResourceKind::Job, "sweep"), r);
        s
    }

    #[test]
    fn job_logs_reads_the_latest_attempt_or_the_one_asked_for() {
        let s = state();
        let latest = attempt_of(&s, "sweep", 1, None).expect("latest");
        assert_eq!(
            (latest.task_id.as_str(), latest.host.as_str()),
            ("t2", "h-t2")
        );
        let first = attempt_of(&s, "sweep", 1, Some(1)).expect("first");
        assert_eq!(first.task_id, "t1");
        let err = |i, a| format!("{:#}", attempt_of(&s, "sweep", i, a).expect_err("refused"));
        assert!(err(1, Some(3)).contains("no attempt 3 (its attempts: 1, 2)"));
        assert!(err(0, None).contains("index 0 has not started yet"));
        assert!(err(2, None).contains("no index 2"));
        let other = format!("{:#}", attempt_of(&s, "other", 0, None).expect_err("none"));
        assert!(other.contains("job.other has no progress"), "{other}");
    }
}
