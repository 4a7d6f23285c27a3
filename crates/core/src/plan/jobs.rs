//! Jobs (issue 51): what each job's runs reported is folded into its progress
//! record (an attempt succeeded, failed, or was lost with its host), the runs that
//! ended are stopped, and the runs to start are wanted, at most `parallelism` at
//! once, to be placed with the services' packing (`plan/place.rs`). Runs are fenced
//! by their task id: the record counts a report only for the attempt it started, and
//! only once (an attempt already ended, or a task the record does not name, is
//! stopped and never counted), so a lost host that comes back counts nothing twice.

use super::reasons::{DrainReason, Sickness};
use super::retry_backoff_seconds;
use super::services::Want;
use super::types::Stop;
use super::{host_is_up, PlanError, Planner};
use crate::model::{
    AttemptOutcome, IndexState, Job, JobAttempt, JobIndex, JobRecord, JobRun, JobState, JobUpdate,
    PlacementStrategy, ResourceAddr, ResourceKind, Task, TaskState,
};
use std::collections::BTreeMap;
use std::fmt;

/// Why a job's run stops.
enum RunStop {
    Succeeded,
    Failed(String),
    /// Its host is gone, silent or impaired: the attempt failed, retried elsewhere.
    HostLost(String),
    JobRemoved,
    /// A run the record does not count (an attempt already ended, or unknown).
    Fenced,
}

impl fmt::Display for RunStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunStop::Succeeded => f.write_str("the run succeeded (exit 0)"),
            RunStop::Failed(why) => write!(f, "the run failed: {why}"),
            RunStop::HostLost(why) => write!(f, "the run's host is lost ({why}): retried"),
            RunStop::JobRemoved => f.write_str("its job is removed"),
            RunStop::Fenced => f.write_str("not an attempt its job counts (fenced)"),
        }
    }
}

impl<'a> Planner<'a> {
    /// A running job whose task definition changed is refused (as Kubernetes refuses
    /// a changed Job template): its runs all run the revision it started with.
    pub(super) fn validate_jobs(&self) -> Result<(), PlanError> {
        for (name, job) in &self.desired.jobs {
            let Some(rec) = self.live.state.job(name) else {
                continue;
            };
            if !rec.is_active() {
                continue;
            }
            let addr = ResourceAddr::new(ResourceKind::Job, name.clone());
            let started = self
                .live
                .state
                .revisions
                .get(&rec.family)
                .and_then(|v| v.iter().find(|r| r.revision == rec.revision));
            let changed = if job.task_definition != rec.family {
                Some(format!(
                    "task_definition changed from {} to {}",
                    rec.family, job.task_definition
                ))
            } else {
                match (started, self.desired.task_definitions.get(&rec.family)) {
                    (Some(r), Some(d)) if &r.spec != d => Some(format!(
                        "task_definition.{} changed since the job started on its revision {}",
                        rec.family, rec.revision
                    )),
                    _ => None,
                }
            };
            if let Some(what) = changed {
                return Err(PlanError::Invalid {
                    addr,
                    message: format!(
                        "{what}, while the job runs ({}); a job's runs all run the task definition it started with: wait until it finishes, or remove the job (its runs stop) and declare it again",
                        crate::model::job_line(name, rec, job.max_retries)
                    ),
                });
            }
        }
        Ok(())
    }

    /// Fold the runs' reports into each job's record, stop the runs that ended, and
    /// return the runs to start: (placed before the services, placed after them).
    pub(super) fn jobs(&mut self) -> (Vec<Want>, Vec<Want>) {
        let live = &self.live.state;
        let mut runs: BTreeMap<&str, Vec<&'a Task>> = BTreeMap::new();
        let tasks: &'a BTreeMap<String, Task> = &live.tasks;
        for t in tasks.values() {
            let Some(run) = &t.job else { continue };
            if self.desired.jobs.contains_key(&run.job) {
                runs.entry(run.job.as_str()).or_default().push(t);
            } else if matches!(
                t.state,
                TaskState::Pending | TaskState::Running | TaskState::Stopped | TaskState::Failed
            ) {
                self.stop_run(t, RunStop::JobRemoved);
            }
        }
        let (mut first, mut later) = (Vec::new(), Vec::new());
        let desired = self.desired;
        for (name, job) in &desired.jobs {
            let mine = runs.remove(name.as_str()).unwrap_or_default();
            let mut rec = self.job_record(name, job);
            for t in mine {
                self.fold_run(&mut rec, t);
            }
            settle(&mut rec, job, self.live.observed_at);
            let wants = self.job_wants(name, job, &rec);
            if job.priority.is_some_and(|p| p > 0) {
                first.extend(wants);
            } else {
                later.extend(wants);
            }
            self.out.jobs.push(JobUpdate {
                job: name.clone(),
                record: rec,
            });
        }
        (first, later)
    }

    /// The job's record as stored (its indexes fitted to `completions`), or a new one
    /// on the task definition's revision this plan targets.
    fn job_record(&self, name: &str, job: &Job) -> JobRecord {
        let mut rec = self.live.state.job(name).cloned().unwrap_or_else(|| {
            let revision = self
                .targets
                .get(&job.task_definition)
                .map_or(1, |(r, _)| *r);
            JobRecord {
                family: job.task_definition.clone(),
                revision,
                state: JobState::Running,
                started_at: self.live.observed_at,
                finished_at: None,
                expired: false,
                indexes: Vec::new(),
            }
        });
        rec.indexes
            .resize(job.completions as usize, JobIndex::default());
        rec
    }

    /// One run of the job as observed: its attempt ends (succeeded, failed, lost
    /// with its host) and it stops, or it keeps running.
    fn fold_run(&mut self, rec: &mut JobRecord, t: &'a Task) {
        let Some(run) = &t.job else { return };
        let attempt = rec
            .indexes
            .get_mut(run.index as usize)
            .and_then(|i| i.attempts.iter_mut().find(|a| a.task_id == t.id))
            .filter(|a| a.outcome == AttemptOutcome::Running);
        let Some(attempt) = attempt else {
            self.stop_run(t, RunStop::Fenced);
            return;
        };
        let status = self.live.task_status.get(&t.id);
        if let Some(at) = status.and_then(|s| s.started_at) {
            attempt.started_at = at;
        }
        let now = self.live.observed_at;
        let ended_at = status.map_or(now, |s| if s.since > 0 { s.since } else { now });
        let why = match t.state {
            TaskState::Stopped if status.and_then(|s| s.exit_code) == Some(0) => RunStop::Succeeded,
            TaskState::Stopped | TaskState::Failed => RunStop::Failed(
                status
                    .and_then(|s| s.reason.clone())
                    .unwrap_or_else(|| format!("task {} ended on {}", t.id, t.host)),
            ),
            _ => match self.lost_host(t) {
                Some(why) => RunStop::HostLost(why),
                None => return,
            },
        };
        attempt.exit_code = status.and_then(|s| s.exit_code);
        attempt.ended_at = Some(match why {
            RunStop::HostLost(_) => now,
            _ => ended_at,
        });
        match &why {
            RunStop::Succeeded => attempt.outcome = AttemptOutcome::Succeeded,
            RunStop::Failed(r) | RunStop::HostLost(r) => {
                attempt.outcome = AttemptOutcome::Failed;
                attempt.reason = Some(match why {
                    RunStop::HostLost(_) => format!("host {} lost: {r}", t.host),
                    _ => r.clone(),
                });
            }
            _ => {}
        }
        self.stop_run(t, why);
    }

    /// Why run `t`'s host counts as lost (gone, silent or impaired); `None` while it
    /// may finish there.
    fn lost_host(&self, t: &Task) -> Option<String> {
        match self.live.state.hosts.get(&t.host) {
            Some(h) if host_is_up(h) => {}
            Some(h) => return Some(format!("the host is {:?}", h.state).to_lowercase()),
            None => return Some("the host is gone".to_string()),
        }
        match self.drained.get(&t.host)? {
            d @ DrainReason::Sick(
                Sickness::Silent { .. }
                | Sickness::NeverReported { .. }
                | Sickness::MpsImpaired
                | Sickness::HealthImpaired { .. },
            ) => Some(d.to_string()),
            d @ DrainReason::GpuImpaired { gpu, .. } if t.gpus.contains(gpu) => Some(d.to_string()),
            _ => None,
        }
    }

    fn stop_run(&mut self, t: &Task, why: RunStop) {
        if self.out.stops.iter().any(|s| s.task_id == t.id) {
            return;
        }
        self.out
            .stops
            .push(Stop::now(t.id.clone(), why.to_string()));
    }

    /// The runs job `name` starts now: its pending indexes whose backoff is over, in
    /// index order, up to `parallelism` running at once. None once an index used up
    /// its retries (the job fails) or its history expired.
    fn job_wants(&mut self, name: &str, job: &Job, rec: &JobRecord) -> Vec<Want> {
        if rec.state != JobState::Running || rec.expired {
            return Vec::new();
        }
        let now = self.live.observed_at;
        let states: Vec<IndexState> = rec
            .indexes
            .iter()
            .map(|i| i.state(job.max_retries))
            .collect();
        if states.contains(&IndexState::Failed) {
            return Vec::new();
        }
        let running = states.iter().filter(|s| **s == IndexState::Running).count();
        let room = (job.parallelism as usize).saturating_sub(running);
        let Some(&(revision, shape)) = self
            .targets
            .get(&rec.family)
            .filter(|(r, _)| *r == rec.revision)
        else {
            return Vec::new();
        };
        let ready: Vec<(u32, u32)> = rec
            .indexes
            .iter()
            .enumerate()
            .filter(|(n, i)| {
                states[*n] == IndexState::Pending
                    && i.last_failure_at()
                        .is_none_or(|at| at + retry_backoff_seconds(i.counted_failures()) <= now)
            })
            .map(|(n, i)| (n as u32, i.next_attempt()))
            .take(room)
            .collect();
        let reserve = self.desired.reserves_compute(name, &job.capacity_provider);
        let host_ports = self.fixed_ports(&rec.family, revision);
        ready
            .into_iter()
            .map(|(index, attempt)| Want {
                id: self.new_task_id(name),
                service: name.to_string(),
                family: rec.family.clone(),
                revision,
                shape,
                pool: job.capacity_provider.clone(),
                strategy: PlacementStrategy::Binpack,
                distinct_host: false,
                instance_types: Vec::new(),
                reserve_compute: reserve,
                host_ports: host_ports.clone(),
                replaces: None,
                at_once: true,
                healthy_after_seconds: 0,
                job: Some(JobRun {
                    job: name.to_string(),
                    index,
                    attempt,
                    completions: job.completions,
                    indexed: job.indexed,
                    timeout_seconds: job.timeout_seconds,
                }),
            })
            .collect()
    }

    /// After placement: each run this plan starts is its index's new attempt; each
    /// record this plan would leave as stored is dropped from the plan; the jobs
    /// with work get a line with their cost.
    pub(super) fn record_job_starts(&mut self) {
        let now = self.live.observed_at;
        for s in &self.out.starts {
            let Some(run) = &s.task.job else { continue };
            let Some(u) = self.out.jobs.iter_mut().find(|u| u.job == run.job) else {
                continue;
            };
            if let Some(i) = u.record.indexes.get_mut(run.index as usize) {
                i.attempts.push(JobAttempt {
                    attempt: run.attempt,
                    task_id: s.task.id.clone(),
                    host: s.task.host.clone(),
                    outcome: AttemptOutcome::Running,
                    exit_code: None,
                    reason: None,
                    started_at: now,
                    ended_at: None,
                });
            }
        }
        let lines: Vec<String> = self
            .out
            .jobs
            .iter()
            .filter(|u| u.record.state == JobState::Running)
            .filter_map(|u| self.job_cost_line(&u.job))
            .collect();
        self.out.notes.extend(lines);
        let live = &self.live.state;
        self.out
            .jobs
            .retain(|u| live.job(&u.job) != Some(&u.record));
    }

    /// `job.NAME: N runs, P at once on 2 x TYPE, about $X for the estimated
    /// duration` (the cost when the job gives `expected_run_seconds`): the hosts its
    /// runs hold after this plan, for the waves its remaining runs take.
    fn job_cost_line(&self, name: &str) -> Option<String> {
        let job = self.desired.jobs.get(name)?;
        let mut hosts: BTreeMap<&str, &crate::model::Host> = BTreeMap::new();
        for t in self.tasks.values() {
            if t.job.as_ref().is_some_and(|r| r.job == name)
                && !self.out.stops.iter().any(|s| s.task_id == t.id)
            {
                if let Some(h) = self.hosts.get(&t.host) {
                    hosts.insert(h.id.as_str(), h);
                }
            }
        }
        let mut types: BTreeMap<&str, usize> = BTreeMap::new();
        for h in hosts.values() {
            *types.entry(h.instance_type.as_str()).or_default() += 1;
        }
        let on = if types.is_empty() {
            "no host yet".to_string()
        } else {
            types
                .iter()
                .map(|(t, n)| format!("{n} x {t}"))
                .collect::<Vec<_>>()
                .join(" + ")
        };
        let mut line = format!(
            "job.{name}: {} runs, {} at once on {on}",
            job.completions, job.parallelism
        );
        if let Some(secs) = job.expected_run_seconds {
            let done = self
                .out
                .jobs
                .iter()
                .find(|u| u.job == name)
                .map_or(0, |u| u.record.counts(job.max_retries).succeeded);
            let left = u64::from(job.completions.saturating_sub(done));
            let waves = left.div_ceil(u64::from(job.parallelism.max(1)));
            let seconds = waves * secs;
            let per_hour: f64 = hosts.values().filter_map(|h| super::host_price(h)).sum();
            line.push_str(&format!(
                ", about ${:.2} for the estimated duration ({waves} wave(s) of {secs} s)",
                per_hour * seconds as f64 / 3600.0
            ));
        }
        Some(line)
    }
}

/// The job's state from its indexes (a finished job keeps its `finished_at`), and
/// its history dropped once `ttl_after_finished_seconds` passed since it finished.
fn settle(rec: &mut JobRecord, job: &Job, now: u64) {
    let states: Vec<IndexState> = rec
        .indexes
        .iter()
        .map(|i| i.state(job.max_retries))
        .collect();
    let state = if states.iter().all(|s| *s == IndexState::Succeeded) {
        JobState::Succeeded
    } else if states.contains(&IndexState::Failed) && !states.contains(&IndexState::Running) {
        JobState::Failed
    } else {
        JobState::Running
    };
    if state == JobState::Running {
        rec.finished_at = None;
    } else if rec.finished_at.is_none() {
        rec.finished_at = Some(now);
    }
    rec.state = state;
    let expired = match (rec.finished_at, job.ttl_after_finished_seconds) {
        (Some(at), Some(ttl)) => now >= at.saturating_add(ttl),
        _ => false,
    };
    if expired && !rec.expired {
        rec.expired = true;
        for i in &mut rec.indexes {
            i.failed_before = i.failures();
            i.succeeded_before = i.succeeded();
            i.attempts.clear();
        }
    }
}
