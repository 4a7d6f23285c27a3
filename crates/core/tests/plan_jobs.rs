//! Jobs in the planner (issue 51): at most `parallelism` runs at once, an exit 0
//! is a success never run again, a failure is retried after its backoff up to
//! `max_retries`, a lost host's run is a failed attempt retried elsewhere, a
//! report about an attempt already ended is fenced off, and a running job's task
//! definition may not change.

use gpushare_core::model::*;
use gpushare_core::plan::{plan, Options, Plan};
use gpushare_testkit::plan::*;

const T0: u64 = 1_000_000;

/// One g6.12xlarge pool (4 x L4) and a job of `completions` runs of 10 GiB each.
fn fleet(completions: u32, parallelism: u32) -> Desired {
    let mut d = quickstart(1);
    d.services.clear();
    d.task_definitions
        .insert("sim".into(), mps_td("ghcr.io/example/sim:1", 10240, None));
    d.jobs.insert(
        "sweep".into(),
        Job {
            expected_run_seconds: Some(600),
            ..job("sim", "l4", completions, parallelism)
        },
    );
    d
}

/// The runs of `p` (task id -> index).
fn runs(p: &Plan) -> Vec<(String, u32)> {
    p.starts
        .iter()
        .filter_map(|s| Some((s.task.id.clone(), s.task.job.as_ref()?.index)))
        .collect()
}

/// `live` after `p`, with the run `task` reported ended with `code` at `at`.
fn ended(mut live: Live, task: &str, code: i64, at: u64) -> Live {
    if let Some(t) = live.state.tasks.get_mut(task) {
        t.state = if code == 0 {
            TaskState::Stopped
        } else {
            TaskState::Failed
        };
    }
    live.task_status.insert(
        task.to_string(),
        TaskStatus {
            state: if code == 0 {
                TaskState::Stopped
            } else {
                TaskState::Failed
            },
            reason: Some(format!("essential container main exited with code {code}")),
            exit_code: Some(code),
            since: at,
            restarts: 0,
            health: None,
            container_health: Default::default(),
            last_output: None,
            usage: None,
            started_at: Some(at - 5),
        },
    );
    live
}

fn next(p: &Plan, at: u64) -> Live {
    settle_reports(live_after(p, at))
}

#[test]
fn a_job_starts_parallelism_runs_with_their_index_and_prices_the_sweep() {
    let d = fleet(6, 4);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    let r = runs(&p);
    assert_eq!(
        r.iter().map(|(_, i)| *i).collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "{r:?}"
    );
    assert!(
        p.notes.iter().any(|n| n
            .starts_with("job.sweep: 6 runs, 4 at once on 1 x g6.12xlarge, about $")
            && n.ends_with("for the estimated duration (2 wave(s) of 600 s)")),
        "{:?}",
        p.notes
    );
    let rec = p.after.job("sweep").expect("the job's record");
    assert_eq!(rec.counts(1).running, 4);
    assert_eq!(rec.counts(1).pending, 2);
}

#[test]
fn a_success_is_kept_a_failure_retried_after_its_backoff_and_a_stale_report_fenced() {
    let d = fleet(2, 2);
    let p1 = plan_ok(&d, &empty_live(), &Options::default());
    let r = runs(&p1);
    let (ok_task, fail_task) = (r[0].0.clone(), r[1].0.clone());
    let live = ended(next(&p1, T0), &ok_task, 0, T0);
    let live = ended(live, &fail_task, 3, T0);
    let p2 = plan_ok(&d, &live, &Options::default());
    // Both ended runs stop; nothing starts during the failed index's backoff.
    assert!(runs(&p2).is_empty(), "{:?}", runs(&p2));
    let stopped: Vec<&str> = p2.stops.iter().map(|s| s.task_id.as_str()).collect();
    assert!(stopped.contains(&ok_task.as_str()) && stopped.contains(&fail_task.as_str()));
    let rec = p2.after.job("sweep").expect("record");
    assert_eq!(
        rec.indexes[0].attempts[0].outcome,
        AttemptOutcome::Succeeded
    );
    let failed = &rec.indexes[1].attempts[0];
    assert_eq!(
        (failed.outcome, failed.exit_code),
        (AttemptOutcome::Failed, Some(3))
    );
    // After the backoff the failed index runs again, attempt 2; index 0 never again.
    let mut live = live_after(&p2, T0 + 11);
    // A late report of the first attempt (its host came back) is fenced: not counted.
    let mut stale = p1.starts[1].task.clone();
    stale.state = TaskState::Stopped;
    live.state.tasks.insert(stale.id.clone(), stale.clone());
    let live = ended(live, &stale.id, 0, T0 + 11);
    let p3 = plan_ok(&d, &live, &Options::default());
    assert_eq!(runs(&p3).iter().map(|(_, i)| *i).collect::<Vec<_>>(), [1]);
    assert_eq!(p3.starts[0].task.job.as_ref().map(|r| r.attempt), Some(2));
    assert!(p3
        .stops
        .iter()
        .any(|s| s.task_id == stale.id && s.reason.contains("fenced")));
    let rec = p3.after.job("sweep").expect("record");
    assert_eq!(rec.counts(1).succeeded, 1, "{rec:?}");
}

#[test]
fn a_run_on_a_silent_host_is_a_failed_attempt_retried_and_retries_run_out() {
    let d = fleet(1, 1);
    let p1 = plan_ok(&d, &empty_live(), &Options::default());
    let task = runs(&p1)[0].0.clone();
    // The host falls silent: its run is lost, a failed attempt.
    let mut live = next(&p1, T0);
    live.observed_at = T0 + 1000;
    let p2 = plan_ok(&d, &live, &Options::default());
    let rec = p2.after.job("sweep").expect("record");
    let a = &rec.indexes[0].attempts[0];
    assert_eq!(a.outcome, AttemptOutcome::Failed);
    assert!(a.reason.as_deref().unwrap_or("").contains("lost"), "{a:?}");
    assert!(p2.stops.iter().any(|s| s.task_id == task));
    // Its second attempt fails too: max_retries 1 is used up, the job FAILED.
    let live = next(&p2, T0 + 1011);
    let p3 = plan_ok(&d, &live, &Options::default());
    let second = runs(&p3);
    assert_eq!(second.len(), 1, "{second:?}");
    let live = ended(next(&p3, T0 + 1100), &second[0].0, 1, T0 + 1100);
    let p4 = plan_ok(&d, &live, &Options::default());
    assert!(runs(&p4).is_empty());
    let rec = p4.after.job("sweep").expect("record");
    assert_eq!(rec.state, JobState::Failed, "{rec:?}");
    // `job rerun --failed` gives the index another chance.
    let mut again = rec.clone();
    assert_eq!(rerun_failed(&mut again, 1), [0]);
    assert_eq!(again.state, JobState::Running);
}

#[test]
fn changing_a_running_jobs_task_definition_is_refused_with_the_reason() {
    let mut d = fleet(4, 2);
    let p1 = plan_ok(&d, &empty_live(), &Options::default());
    let live = next(&p1, T0);
    d.task_definitions
        .insert("sim".into(), mps_td("ghcr.io/example/sim:2", 10240, None));
    let e = plan(&d, &live, &Options::default()).expect_err("refused");
    let text = e.to_string();
    assert!(
        text.contains("job.sweep") && text.contains("changed since the job started"),
        "{text}"
    );
    assert_eq!(e.addr().kind, ResourceKind::Job);
}
