//! The steps of a pass that converge the runtime on the assignment: stop what is not
//! wanted here, keep, clean up, end or start each wanted task, and mark the tasks
//! the store stopped.

use super::{error_chain, Agent, PassSummary, Starts};
use crate::launch::{is_mps, launch_spec, revision_of};
use crate::runtime::{LaunchSpec, ObservedTask, RuntimeError, TaskVerdict};
use gpushare_core::model::{
    output_tail, unhealthy_reason, HealthStatus, Task, TaskState, MAX_LAST_OUTPUT,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::time::Instant;

/// How many lines of an exited task's output its status keeps.
const LAST_OUTPUT_LINES: u32 = 20;

/// How long a task may stay created-but-not-running before its start is redone.
const START_TIMEOUT: Duration = Duration::from_secs(60);

impl Agent {
    /// Stop each task the runtime runs that is not `wanted` here any more.
    pub(super) async fn stop_strays(
        &mut self,
        observed: &BTreeMap<String, ObservedTask>,
        wanted: &BTreeSet<&str>,
        summary: &mut PassSummary,
    ) {
        for id in observed.keys() {
            if wanted.contains(id.as_str()) {
                continue;
            }
            match self.runtime.stop(id, self.config.stop_grace).await {
                Ok(()) => {
                    summary.stopped.push(id.clone());
                    self.set(id, TaskState::Stopped, None, None);
                }
                Err(e) => {
                    let reason = format!("stopping failed: {}", error_chain(&e));
                    tracing::warn!(task = %id, %reason);
                    self.set(id, TaskState::Stopping, Some(reason), None);
                }
            }
        }
    }

    /// Bring one wanted task (`observed`: what the runtime runs of it) a step closer
    /// to running, and count it in `summary`.
    pub(super) async fn converge_task(
        &mut self,
        id: &str,
        task: &Task,
        observed: Option<&ObservedTask>,
        starts: &mut Starts<'_>,
        summary: &mut PassSummary,
    ) {
        let job_run = task.job.is_some();
        if job_run && self.memo.get(id).is_some_and(|m| m.ended) {
            // A job's run ran to its end: its report stands until the store stops it.
            return;
        }
        match observed.map(ObservedTask::verdict) {
            Some(TaskVerdict::Running) if self.timed_out(id, task) => {
                self.keep_output(id, observed).await;
                self.end_timed_out(id, task).await;
            }
            Some(TaskVerdict::Running) => {
                summary.running += 1;
                self.keep_running(id);
                if let Some(o) = observed {
                    self.note_health(id, o);
                }
            }
            Some(TaskVerdict::Starting) => {
                self.settle_start(id).await;
                summary.waiting.push(id.to_string());
            }
            Some(TaskVerdict::Exited { container, code }) => {
                if job_run {
                    self.keep_output(id, observed).await;
                }
                self.end_exited(id, &container, code).await;
                if job_run {
                    self.mark_ended(id);
                } else {
                    summary.waiting.push(id.to_string());
                }
            }
            None => {
                if self.start_task(id, task, starts).await {
                    summary.started.push(id.to_string());
                } else if job_run
                    && self
                        .memo
                        .get(id)
                        .is_some_and(|m| m.status.state == TaskState::Failed)
                {
                    // A run that could not start is a failed attempt, not retried here.
                    self.mark_ended(id);
                } else {
                    summary.waiting.push(id.to_string());
                }
            }
        }
    }

    /// Whether job run `task` has run past its `timeout_seconds`.
    fn timed_out(&self, id: &str, task: &Task) -> bool {
        let Some(limit) = task.job.as_ref().and_then(|r| r.timeout_seconds) else {
            return false;
        };
        self.memo
            .get(id)
            .and_then(|m| m.started_at)
            .is_some_and(|s| s.elapsed() >= Duration::from_secs(limit))
    }

    /// A job's run past its timeout: stopped, a failed attempt (the planner retries
    /// the index elsewhere or here, as a new task).
    async fn end_timed_out(&mut self, id: &str, task: &Task) {
        let limit = task.job.as_ref().and_then(|r| r.timeout_seconds);
        if let Err(e) = self.runtime.stop(id, self.config.stop_grace).await {
            tracing::warn!(task = %id, error = %error_chain(&e), "stopping a timed-out run");
        }
        let reason = format!(
            "the run timed out after {} s (timeout_seconds)",
            limit.unwrap_or(0)
        );
        self.fail(id, TaskState::Failed, reason, None);
        self.mark_ended(id);
    }

    /// A job's run ended: reported as it ended, never started again here.
    fn mark_ended(&mut self, id: &str) {
        if let Some(m) = self.memo.get_mut(id) {
            m.ended = true;
            m.retry_at = None;
        }
    }

    /// A task that runs: reported running; its failures are forgotten once it has
    /// run for the longest backoff.
    fn keep_running(&mut self, id: &str) {
        let reset_after = self.config.restart_backoff_max;
        self.set(id, TaskState::Running, None, None);
        if let Some(m) = self.memo.get_mut(id) {
            if m.started_at.is_some_and(|s| s.elapsed() >= reset_after) {
                m.failures = 0;
            }
            if m.started_at.is_none() {
                // Adopted from an earlier agent.
                m.started_at = Some(Instant::now());
            }
        }
    }

    /// A running task's health checks, as the runtime last saw them: reported, and
    /// said in the reason when UNHEALTHY (the planner replaces it; the agent keeps
    /// it running until then, as ECS's agent does).
    fn note_health(&mut self, id: &str, observed: &ObservedTask) {
        let Some(m) = self.memo.get_mut(id) else {
            return;
        };
        m.status.health = observed.health();
        m.status.container_health = observed
            .containers
            .iter()
            .filter_map(|(name, c)| c.health.map(|h| (name.clone(), h)))
            .collect();
        if let Some(why) = unhealthy_reason(Some(&m.status)) {
            m.status.reason = Some(why);
        }
    }

    /// A task created but not running: a start this agent made moments ago (left to
    /// finish), or one interrupted (a crash between create and start) or stuck for
    /// longer than `START_TIMEOUT` (removed, to be started again).
    async fn settle_start(&mut self, id: &str) {
        let stuck = self
            .memo
            .get(id)
            .and_then(|m| m.started_at)
            .is_none_or(|s| s.elapsed() > START_TIMEOUT);
        if !stuck {
            self.set(id, TaskState::Pending, Some("starting".into()), None);
            return;
        }
        tracing::warn!(task = %id, "removing an interrupted or stuck start");
        let reason = match self.runtime.stop(id, self.config.stop_grace).await {
            Ok(()) => "an interrupted start was cleaned up; starting again".to_string(),
            Err(e) => format!(
                "cleaning up an interrupted start failed: {}",
                error_chain(&e)
            ),
        };
        self.set(id, TaskState::Pending, Some(reason), None);
    }

    /// An essential container of the task ended: the task is over; the rest is
    /// stopped and the task reported stopped (code 0) or failed (and backed off).
    async fn end_exited(&mut self, id: &str, container: &str, code: Option<i64>) {
        // Its last words, before stopping removes the container (or its records).
        let last_output = match self.runtime.logs(id, container, LAST_OUTPUT_LINES).await {
            Ok(text) if !text.trim().is_empty() => Some(output_tail(&text, MAX_LAST_OUTPUT)),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(task = %id, error = %error_chain(&e), "cannot read the output of an exited task");
                None
            }
        };
        if let Err(e) = self.runtime.stop(id, self.config.stop_grace).await {
            tracing::warn!(task = %id, error = %error_chain(&e), "stopping an exited task");
        }
        let (state, reason) = match code {
            Some(0) => (
                TaskState::Stopped,
                format!("essential container {container} exited with code 0"),
            ),
            Some(c) => (
                TaskState::Failed,
                format!("essential container {container} exited with code {c}"),
            ),
            None => (
                TaskState::Failed,
                format!("essential container {container} ended without an exit code (killed)"),
            ),
        };
        self.fail(id, state, reason, code);
        if let Some(m) = self.memo.get_mut(id) {
            m.status.last_output = last_output;
        }
    }

    /// Start a wanted task the runtime does not run, unless the deep diagnostic, a
    /// backoff, its assignment (no revision, missing GPUs) or the MPS daemon holds it
    /// back. True when it was started.
    async fn start_task(&mut self, id: &str, task: &Task, starts: &mut Starts<'_>) -> bool {
        if let Err(why) = &starts.deep_gate {
            self.set(
                id,
                TaskState::Pending,
                Some(format!("not started: {why}")),
                None,
            );
            return false;
        }
        if let Some(at) = self.memo.get(id).and_then(|m| m.retry_at) {
            if Instant::now() < at {
                return false;
            }
        }
        let spec = revision_of(starts.state, task).and_then(|rev| {
            launch_spec(
                task,
                rev,
                starts.gpus,
                starts.inventory_error,
                &starts.pipe_dir,
            )
            .and_then(|mut s| {
                crate::launch::run_as_mps_user(&mut s, self.config.mps_user)?;
                Ok((s, is_mps(task, rev)))
            })
        });
        let (spec, mps) = match spec {
            Ok(s) => s,
            Err(e) => {
                self.fail(id, TaskState::Failed, e.to_string(), None);
                return false;
            }
        };
        if mps {
            if let Err(e) = self.mps_gate(&mut starts.mps_gate).await {
                // Not a failure of the task: it waits for the daemon (a client
                // started without it would escape its memory limit).
                self.set(
                    id,
                    TaskState::Pending,
                    Some(format!("not started: the MPS daemon does not answer ({e})")),
                    None,
                );
                return false;
            }
        }
        self.launch(id, &spec).await
    }

    /// Whether an MPS task may start: MPS must be on and its daemon answer the gate.
    /// The gate is asked once a pass (`verdict` keeps its answer).
    async fn mps_gate(&mut self, verdict: &mut Option<Result<(), String>>) -> Result<(), String> {
        match (&self.config.mps, &*verdict) {
            (None, _) => {
                Err("MPS is disabled on this host (agent started with --no-mps)".to_string())
            }
            (Some(_), Some(v)) => v.clone(),
            (Some(probe), None) => {
                let probe = probe.clone();
                let v = self
                    .config
                    .gate
                    .check(&probe, &mut self.tracker)
                    .await
                    .map_err(|e| e.to_string());
                *verdict = Some(v.clone());
                v
            }
        }
    }

    /// Have the runtime start `spec`; a task already running counts as started (and a
    /// start after the first as a restart). True when started; a failed start backs
    /// the task off.
    async fn launch(&mut self, id: &str, spec: &LaunchSpec) -> bool {
        let now = (self.clock)();
        match self.runtime.start(spec).await {
            Ok(()) | Err(RuntimeError::AlreadyRunning { .. }) => {
                self.set(id, TaskState::Running, None, None);
                if let Some(m) = self.memo.get_mut(id) {
                    // Checked containers are UNKNOWN until their first check: a task
                    // with a check is never reported ready before it passes.
                    m.status.container_health = spec
                        .containers
                        .iter()
                        .filter(|c| c.health_check.is_some())
                        .map(|c| (c.name.clone(), HealthStatus::Unknown))
                        .collect();
                    m.status.health = spec
                        .containers
                        .iter()
                        .any(|c| c.essential && c.health_check.is_some())
                        .then_some(HealthStatus::Unknown);
                    m.retry_at = None;
                    m.started_at = Some(Instant::now());
                    m.status.started_at = Some(now);
                    if m.starts > 0 {
                        m.status.restarts = m.status.restarts.saturating_add(1);
                    }
                    m.starts = m.starts.saturating_add(1);
                }
                true
            }
            Err(e) => {
                let reason = format!("start failed: {}", error_chain(&e));
                self.fail(id, TaskState::Failed, reason, None);
                false
            }
        }
    }

    /// Report stopped the tasks of this host the store stops (keeping the reason of
    /// one already stopped), and forget the tasks neither assigned nor running here.
    pub(super) fn settle_unwanted(
        &mut self,
        mine: &BTreeMap<&str, &Task>,
        wanted: &BTreeSet<&str>,
        observed: &BTreeMap<String, ObservedTask>,
    ) {
        for id in mine.keys() {
            if !wanted.contains(id) && !observed.contains_key(*id) {
                let keep_reason = self
                    .memo
                    .get(*id)
                    .filter(|m| m.status.state == TaskState::Stopped)
                    .and_then(|m| m.status.reason.clone());
                self.set(id, TaskState::Stopped, keep_reason, None);
            }
        }
        self.memo
            .retain(|id, _| mine.contains_key(id.as_str()) || observed.contains_key(id));
    }
}
