//! Jobs (issue 51): run-to-completion work, `completions` runs of a task definition
//! that each must exit 0 once, at most `parallelism` at once, placed with the same
//! MPS packing as service tasks. The `job` resource ([`Job`]), what a run carries on
//! its task ([`JobRun`]: its job, index and attempt, for the agent), and the progress
//! the store keeps beside the job's attributes ([`JobRecord`]: every attempt of every
//! index, with its exit code, reason, start and end).

use serde::{Deserialize, Serialize};
use std::fmt;

/// `job "NAME" { ... }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Family name of the task definition each run runs.
    pub task_definition: String,
    /// Name of the capacity provider the runs are placed in.
    pub capacity_provider: String,
    /// How many runs must succeed (exit 0), one per index `0..completions`.
    pub completions: u32,
    /// At most this many runs at once.
    #[serde(default = "one")]
    pub parallelism: u32,
    /// Failed attempts an index may have before the job fails (each retried after a
    /// backoff, on any host).
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// A run still running after this many seconds is stopped and counts as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// Give each run `GPUSHARE_JOB_INDEX` (0..completions-1) and `GPUSHARE_JOB_COMPLETIONS`.
    #[serde(default)]
    pub indexed: bool,
    /// Placement order against services (priority 0): a job with a priority above 0
    /// is placed before the services, otherwise after them (the room they leave).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// How long one run takes, roughly: the plan prices the job with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_run_seconds: Option<u64>,
    /// Seconds a finished job's attempt history is kept; after that only its counts
    /// stay (the job never runs again while it is declared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_after_finished_seconds: Option<u64>,
}

fn one() -> u32 {
    1
}

/// Kubernetes' `backoffLimit` default is 6; gpushare's is 3 per index.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

fn default_retries() -> u32 {
    DEFAULT_MAX_RETRIES
}

/// What a task that is a job's run carries: the agent runs it to completion (never
/// restarted once it ended) and gives indexed runs their index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRun {
    pub job: String,
    pub index: u32,
    /// 1 for the first attempt of the index.
    pub attempt: u32,
    pub completions: u32,
    #[serde(default)]
    pub indexed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

impl JobRun {
    /// The environment the run's containers get beside their own: the index and the
    /// completions for an indexed job, nothing otherwise.
    pub fn environment(&self) -> Vec<(String, String)> {
        if !self.indexed {
            return Vec::new();
        }
        vec![
            ("GPUSHARE_JOB_INDEX".to_string(), self.index.to_string()),
            (
                "GPUSHARE_JOB_COMPLETIONS".to_string(),
                self.completions.to_string(),
            ),
        ]
    }
}

/// How one attempt of an index ended (or that it runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    Running,
    Succeeded,
    Failed,
}

/// One attempt of one index: the task that ran it and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobAttempt {
    pub attempt: u32,
    /// The task that runs it: its id is the attempt's fence (a report about another
    /// task of the index, or about this one once it ended, is never counted).
    pub task_id: String,
    pub host: String,
    pub outcome: AttemptOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Seconds since the epoch: the agent's start of the run (the plan's time until
    /// the agent reports it).
    pub started_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<u64>,
}

/// The attempts of one index, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct JobIndex {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<JobAttempt>,
    /// Failed attempts before this count are forgiven (`gpushare job rerun --failed`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forgiven: u32,
    /// Failed attempts, for an index whose history the TTL dropped.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_before: u32,
    /// Succeeded, for an index whose history the TTL dropped.
    #[serde(default, skip_serializing_if = "is_false")]
    pub succeeded_before: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
fn is_false(b: &bool) -> bool {
    !*b
}

/// Where one index stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexState {
    Pending,
    Running,
    Succeeded,
    /// Its failed attempts passed `max_retries`.
    Failed,
}

impl JobIndex {
    pub fn succeeded(&self) -> bool {
        self.succeeded_before
            || self
                .attempts
                .iter()
                .any(|a| a.outcome == AttemptOutcome::Succeeded)
    }
    pub fn running(&self) -> Option<&JobAttempt> {
        self.attempts
            .iter()
            .find(|a| a.outcome == AttemptOutcome::Running)
    }
    /// Failed attempts, all of them.
    pub fn failures(&self) -> u32 {
        self.failed_before
            + self
                .attempts
                .iter()
                .filter(|a| a.outcome == AttemptOutcome::Failed)
                .count() as u32
    }
    /// Failed attempts that count against `max_retries` (those since the last rerun).
    pub fn counted_failures(&self) -> u32 {
        self.failures().saturating_sub(self.forgiven)
    }
    pub fn state(&self, max_retries: u32) -> IndexState {
        if self.succeeded() {
            IndexState::Succeeded
        } else if self.running().is_some() {
            IndexState::Running
        } else if self.counted_failures() > max_retries {
            IndexState::Failed
        } else {
            IndexState::Pending
        }
    }
    /// The next attempt's number.
    pub fn next_attempt(&self) -> u32 {
        self.attempts.iter().map(|a| a.attempt).max().unwrap_or(0) + 1
    }
    /// When the last failed attempt ended.
    pub fn last_failure_at(&self) -> Option<u64> {
        self.attempts
            .iter()
            .filter(|a| a.outcome == AttemptOutcome::Failed)
            .filter_map(|a| a.ended_at)
            .max()
    }
}

/// A job's state as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    #[default]
    Running,
    /// Every index succeeded.
    Succeeded,
    /// An index used up its retries, and nothing runs any more.
    Failed,
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JobState::Running => "RUNNING",
            JobState::Succeeded => "SUCCEEDED",
            JobState::Failed => "FAILED",
        })
    }
}

/// A job's progress, kept in the store with its applied resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct JobRecord {
    /// The task definition (family, revision) every run of the job runs: fixed when
    /// the job starts; a changed one is refused while the job runs.
    pub family: String,
    pub revision: u32,
    pub state: JobState,
    pub started_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
    /// The TTL passed: the attempts' history was dropped, the counts kept.
    #[serde(default, skip_serializing_if = "is_false")]
    pub expired: bool,
    /// One entry per index, `0..completions`.
    pub indexes: Vec<JobIndex>,
}

/// How many indexes stand where, and the attempts that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct JobCounts {
    pub succeeded: u32,
    pub running: u32,
    pub pending: u32,
    /// Indexes that used up their retries.
    pub failed: u32,
    /// Failed attempts, all indexes.
    pub failed_attempts: u32,
}

impl JobRecord {
    pub fn counts(&self, max_retries: u32) -> JobCounts {
        let mut c = JobCounts::default();
        for i in &self.indexes {
            match i.state(max_retries) {
                IndexState::Pending => c.pending += 1,
                IndexState::Running => c.running += 1,
                IndexState::Succeeded => c.succeeded += 1,
                IndexState::Failed => c.failed += 1,
            }
            c.failed_attempts += i.failures();
        }
        c
    }

    /// Whether the job still has work: it is neither finished nor expired.
    pub fn is_active(&self) -> bool {
        self.state == JobState::Running
    }
}

/// A job's progress record as a plan writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobUpdate {
    pub job: String,
    pub record: JobRecord,
}

/// One line of a job's progress: `job.NAME: STATE, S/N succeeded, R running, P
/// pending, F failed (A failed attempts)`.
pub fn job_line(name: &str, rec: &JobRecord, max_retries: u32) -> String {
    progress_line(
        name,
        rec.state,
        rec.counts(max_retries),
        rec.indexes.len() as u32,
    )
}

fn progress_line(name: &str, state: JobState, c: JobCounts, completions: u32) -> String {
    format!(
        "job.{name}: {state}, {}/{completions} succeeded, {} running, {} pending, {} failed ({} failed attempt(s))",
        c.succeeded, c.running, c.pending, c.failed, c.failed_attempts
    )
}

/// One index of a job as `show --json` and `gpushare job status` give it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IndexStatus {
    pub index: u32,
    pub state: IndexState,
    pub attempts: Vec<JobAttempt>,
}

/// A job's progress as `show --json`, `gpushare job status` and the metrics give it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobStatus {
    pub name: String,
    pub state: JobState,
    pub completions: u32,
    pub parallelism: u32,
    pub max_retries: u32,
    #[serde(flatten)]
    pub counts: JobCounts,
    pub family: String,
    pub revision: u32,
    pub started_at: u64,
    pub finished_at: Option<u64>,
    pub expired: bool,
    pub indexes: Vec<IndexStatus>,
}

/// Every job of `state` that has a progress record, by name.
pub fn job_status(state: &super::StoreState) -> Vec<JobStatus> {
    state
        .resources
        .iter()
        .filter(|(addr, _)| addr.kind == super::ResourceKind::Job)
        .filter_map(|(addr, r)| {
            let rec = r.job.as_ref()?;
            let job: Option<Job> = serde_json::from_value(r.attrs.clone()).ok();
            let max_retries = job.as_ref().map_or(DEFAULT_MAX_RETRIES, |j| j.max_retries);
            Some(JobStatus {
                name: addr.name.clone(),
                state: rec.state,
                completions: rec.indexes.len() as u32,
                parallelism: job.as_ref().map_or(1, |j| j.parallelism),
                max_retries,
                counts: rec.counts(max_retries),
                family: rec.family.clone(),
                revision: rec.revision,
                started_at: rec.started_at,
                finished_at: rec.finished_at,
                expired: rec.expired,
                indexes: rec
                    .indexes
                    .iter()
                    .enumerate()
                    .map(|(n, i)| IndexStatus {
                        index: n as u32,
                        state: i.state(max_retries),
                        attempts: i.attempts.clone(),
                    })
                    .collect(),
            })
        })
        .collect()
}

impl JobStatus {
    /// `job.NAME: STATE, S/N succeeded, ...` ([`job_line`]'s words).
    pub fn line(&self) -> String {
        progress_line(&self.name, self.state, self.counts, self.completions)
    }

    /// The line, then one line per index with its attempts (`gpushare job status`).
    pub fn text(&self) -> String {
        let mut out = format!(
            "{}\n  task definition {}:{}, {} at once, max_retries {}{}\n",
            self.line(),
            self.family,
            self.revision,
            self.parallelism,
            self.max_retries,
            if self.expired {
                " (history dropped by ttl_after_finished_seconds)"
            } else {
                ""
            }
        );
        for i in &self.indexes {
            let attempts: Vec<String> = i
                .attempts
                .iter()
                .map(|a| {
                    let mut s = format!("#{} {:?} on {}", a.attempt, a.outcome, a.host);
                    if let Some(c) = a.exit_code {
                        s.push_str(&format!(" exit {c}"));
                    }
                    if let (Some(e), true) = (a.ended_at, a.started_at > 0) {
                        s.push_str(&format!(" {} s", e.saturating_sub(a.started_at)));
                    }
                    if let Some(r) = &a.reason {
                        s.push_str(&format!(" ({r})"));
                    }
                    s.to_lowercase()
                })
                .collect();
            out.push_str(&format!(
                "  [{}] {:?}{}{}\n",
                i.index,
                i.state,
                if attempts.is_empty() { "" } else { ": " },
                attempts.join("; ")
            ));
        }
        out
    }
}

/// The one-off jobs `state` records (`gpushare run`) that `desired` does not declare,
/// added to it: what the planner plans, so that a pass neither stops nor removes
/// them. `Ok(None)` when there is none (plan `desired` as it is). A record that does
/// not read as a job is an error naming it: planning without it would stop its runs.
pub fn with_one_off_jobs(
    desired: &super::Desired,
    state: &super::StoreState,
) -> Result<Option<super::Desired>, super::UnreadableRecord> {
    let mut extra = state
        .resources
        .iter()
        .filter(|(addr, r)| {
            addr.kind == super::ResourceKind::Job
                && r.one_off
                && !desired.jobs.contains_key(&addr.name)
        })
        .peekable();
    if extra.peek().is_none() {
        return Ok(None);
    }
    let mut out = desired.clone();
    for (addr, r) in extra {
        out.put(addr, &r.attrs)
            .map_err(|source| super::UnreadableRecord::new(addr, source))?;
    }
    Ok(Some(out))
}

/// `gpushare job rerun JOB --failed`: the indexes that used up their retries get
/// `max_retries` more (their failures so far forgiven); the job runs again. Returns
/// the indexes given another chance.
pub fn rerun_failed(rec: &mut JobRecord, max_retries: u32) -> Vec<u32> {
    let mut again = Vec::new();
    for (n, i) in rec.indexes.iter_mut().enumerate() {
        if i.state(max_retries) == IndexState::Failed {
            i.forgiven = i.failures();
            again.push(n as u32);
        }
    }
    if !again.is_empty() {
        rec.state = JobState::Running;
        rec.finished_at = None;
    }
    again
}
