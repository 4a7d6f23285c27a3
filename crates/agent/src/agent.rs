//! The agent loop, level-triggered like the reconciler: every pass reads this host's
//! assignment from the store, compares it with what the runtime runs, starts and
//! stops to converge, and writes a report (heartbeat, GPUs, MPS health, task states).

use crate::health::{DeepCheck, HealthBook};
use crate::inventory::Inventory;
use crate::launch::is_mps;
pub use crate::launch::{launch_spec, revision_of, AssignmentError};
use crate::link::{Link, StoreLink};
use crate::mps::{MpsGate, MpsHealthTracker, MpsProbe};
use crate::runtime::{Runtime, RuntimeError, TaskVerdict};
use gpushare_core::model::{HostReport, MpsHealth, Task, TaskState, TaskStatus};
use gpushare_core::util::unix_now;
use gpushare_engine::store::{Store, StoreError};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

mod checks;

/// How long a task may stay created-but-not-running before its start is redone.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The agent's version, as reported.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot read the assignment from the store (running tasks are kept)")]
    Store {
        #[source]
        source: StoreError,
    },
    #[error("cannot write this host's report to the store")]
    Report {
        #[source]
        source: StoreError,
    },
    #[error("host id {host:?} is not in the store {location} (known hosts: {known}); nothing is started")]
    UnknownHost {
        host: String,
        location: String,
        known: String,
    },
    #[error(
        "the store {location} belongs to cluster {found:?}, not {expected:?}; nothing is started"
    )]
    ClusterMismatch {
        location: String,
        expected: String,
        found: String,
    },
    #[error("the {runtime} runtime cannot list its tasks; nothing is started or stopped")]
    Runtime {
        runtime: &'static str,
        #[source]
        source: RuntimeError,
    },
    #[error("unknown runtime {name:?}: use docker or process")]
    UnknownRuntime { name: String },
    #[error("cannot set up the {runtime} runtime")]
    RuntimeSetup {
        runtime: &'static str,
        #[source]
        source: RuntimeError,
    },
    #[error("store URL {url:?} is not supported here: {reason}")]
    StoreUrl { url: String, reason: String },
}

/// How the agent behaves; everything but the identity has a default.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub cluster: String,
    pub host_id: String,
    /// The MPS daemon to probe; `None`: MPS is off on this host (reported `disabled`,
    /// MPS tasks are not started).
    pub mps: Option<MpsProbe>,
    pub gate: MpsGate,
    /// SIGTERM to SIGKILL.
    pub stop_grace: Duration,
    /// First wait before restarting a failed task; doubles per failure up to the max.
    pub restart_backoff: Duration,
    pub restart_backoff_max: Duration,
    /// The first-boot deep diagnostic (the pool's `deep_check`): run once before any
    /// task starts. `None`: not run, no `deep_diagnostic` check.
    pub deep_check: Option<DeepCheck>,
}

impl AgentConfig {
    pub fn new(cluster: impl Into<String>, host_id: impl Into<String>) -> AgentConfig {
        AgentConfig {
            cluster: cluster.into(),
            host_id: host_id.into(),
            mps: None,
            gate: MpsGate::default(),
            stop_grace: Duration::from_secs(30),
            restart_backoff: Duration::from_secs(10),
            restart_backoff_max: Duration::from_secs(300),
            deep_check: None,
        }
    }
}

#[derive(Debug, Clone)]
struct Memo {
    status: TaskStatus,
    /// Failures in a row (start errors, essential exits).
    failures: u32,
    /// No new start before this instant.
    retry_at: Option<Instant>,
    started_at: Option<Instant>,
    starts: u32,
}

/// What one pass did (for logs and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassSummary {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub running: usize,
    pub waiting: Vec<String>,
}

pub struct Agent {
    config: AgentConfig,
    link: Arc<dyn Link>,
    runtime: Arc<dyn Runtime>,
    inventory: Arc<dyn Inventory>,
    tracker: MpsHealthTracker,
    /// The health checks, with their last change.
    book: HealthBook,
    memo: BTreeMap<String, Memo>,
    clock: Arc<dyn Fn() -> u64 + Send + Sync>,
}

/// An error and its sources, `a: b: c`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let next = c.to_string();
        if !s.contains(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        cur = c.source();
    }
    s
}

impl Agent {
    pub fn new(
        config: AgentConfig,
        store: Arc<dyn Store>,
        runtime: Arc<dyn Runtime>,
        inventory: Arc<dyn Inventory>,
    ) -> Agent {
        Agent::with_link(config, Arc::new(StoreLink(store)), runtime, inventory)
    }

    /// An agent that reads its assignment and writes its report through `link`.
    pub fn with_link(
        config: AgentConfig,
        link: Arc<dyn Link>,
        runtime: Arc<dyn Runtime>,
        inventory: Arc<dyn Inventory>,
    ) -> Agent {
        Agent {
            config,
            link,
            runtime,
            inventory,
            tracker: MpsHealthTracker::new(),
            book: HealthBook::default(),
            memo: BTreeMap::new(),
            clock: Arc::new(unix_now),
        }
    }

    /// Seconds since the Unix epoch by another clock than the system's (the local
    /// fleet's agents report at the reconciler's time).
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Agent {
        self.clock = Arc::new(clock);
        self
    }

    /// Carry on from this host's last report (written by an earlier run of the agent):
    /// the MPS verdict and failures in a row, the health checks (their last change,
    /// and whether the deep diagnostic ran), and each task's state, reason and
    /// restart count. What runs is still read from the runtime.
    pub fn resume(mut self, last: &HostReport) -> Agent {
        if last.host_id != self.config.host_id {
            return self;
        }
        self.book = HealthBook::resume(&last.health);
        if self.config.mps.is_some() && last.mps_health != MpsHealth::Disabled {
            self.tracker = MpsHealthTracker::resume(
                last.mps_health,
                last.mps_failures,
                last.mps_error.clone(),
            );
        }
        for (id, status) in &last.task_details {
            self.memo.insert(
                id.clone(),
                Memo {
                    status: status.clone(),
                    failures: u32::from(status.state == TaskState::Failed),
                    retry_at: None,
                    started_at: None,
                    starts: u32::from(status.state == TaskState::Running) + status.restarts,
                },
            );
        }
        self
    }

    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    pub fn mps_health(&self) -> MpsHealth {
        if self.config.mps.is_none() {
            MpsHealth::Disabled
        } else {
            self.tracker.health()
        }
    }

    pub fn mps_tracker(&self) -> &MpsHealthTracker {
        &self.tracker
    }

    /// The health checks as the last pass left them.
    pub fn health(&self) -> &gpushare_core::model::HostHealth {
        &self.book.health
    }

    /// The state and reason of a task as the last pass left it.
    pub fn task_status(&self, task_id: &str) -> Option<&TaskStatus> {
        self.memo.get(task_id).map(|m| &m.status)
    }

    fn backoff(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(16);
        self.config
            .restart_backoff
            .saturating_mul(1u32 << exp)
            .min(self.config.restart_backoff_max)
    }

    fn set(&mut self, id: &str, state: TaskState, reason: Option<String>, exit_code: Option<i64>) {
        let now = (self.clock)();
        let m = self.memo.entry(id.to_string()).or_insert_with(|| Memo {
            status: TaskStatus {
                state,
                reason: None,
                exit_code: None,
                since: now,
                restarts: 0,
            },
            failures: 0,
            retry_at: None,
            started_at: None,
            starts: 0,
        });
        if m.status.state != state {
            m.status.since = now;
        }
        m.status.state = state;
        m.status.reason = reason;
        m.status.exit_code = exit_code;
    }

    fn fail(&mut self, id: &str, state: TaskState, reason: String, exit_code: Option<i64>) {
        tracing::warn!(task = id, %reason, "task not running");
        self.set(id, state, Some(reason), exit_code);
        let failures = self.memo.get(id).map(|m| m.failures + 1).unwrap_or(1);
        let wait = self.backoff(failures);
        if let Some(m) = self.memo.get_mut(id) {
            m.failures = failures;
            m.retry_at = Some(Instant::now() + wait);
        }
    }

    /// One level-triggered pass. On a store or runtime error nothing is started or
    /// stopped (running tasks are kept) and the error is returned.
    pub async fn pass(&mut self) -> Result<PassSummary, AgentError> {
        let mut summary = PassSummary::default();
        let now = (self.clock)();
        // 1. The MPS daemon, every pass.
        let mut fresh_probe_ok = false;
        if let Some(probe) = &self.config.mps {
            let outcome = probe.probe().await;
            if let Err(e) = &outcome {
                tracing::warn!(error = %e, "MPS probe failed");
            }
            fresh_probe_ok = outcome.is_ok();
            self.tracker.record(&outcome);
        }
        self.check_mps(now);
        // 1b. The first-boot deep diagnostic, once.
        self.check_deep(now).await;
        // 2. The GPUs (judged once the assignment names the instance type).
        let scan = self.inventory.scan().map_err(|e| {
            let msg = error_chain(&e);
            tracing::warn!(error = %msg, "GPU inventory unavailable");
            msg
        });
        // 3. The assignment (read only: the store's kept state, not a copy of it).
        let state = self
            .link
            .assignment()
            .await
            .map_err(|source| AgentError::Store { source })?;
        if !state.cluster.is_empty() && state.cluster != self.config.cluster {
            return Err(AgentError::ClusterMismatch {
                location: self.link.location(),
                expected: self.config.cluster.clone(),
                found: state.cluster.clone(),
            });
        }
        if !state.hosts.contains_key(&self.config.host_id) {
            let mut known: Vec<&str> = state.hosts.keys().map(String::as_str).collect();
            known.truncate(10);
            return Err(AgentError::UnknownHost {
                host: self.config.host_id.clone(),
                location: self.link.location(),
                known: if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                },
            });
        }
        let (gpus, inventory_error) = self.check_gpus(scan, &state, now);
        let runtime_down = self.check_runtime(now).await;
        let mine: BTreeMap<&str, &Task> = state
            .tasks
            .values()
            .filter(|t| t.host == self.config.host_id)
            .map(|t| (t.id.as_str(), t))
            .collect();
        let wanted: BTreeSet<&str> = mine
            .iter()
            .filter(|(_, t)| matches!(t.state, TaskState::Pending | TaskState::Running))
            .map(|(id, _)| *id)
            .collect();
        // 4. What runs. A runtime that does not answer its check is not asked (a
        // listing would wait for the client's timeout); one that cannot list still
        // gets its host reported (container_runtime impaired, tasks as last seen).
        let listed = match runtime_down {
            Some(source) => Err(AgentError::Runtime {
                runtime: self.runtime.name(),
                source,
            }),
            None => self.running().await,
        };
        let observed = match listed {
            Ok(o) => o,
            Err(e) => {
                self.runtime_failed(error_chain(&e), now);
                let report = self.report(gpus, &mine);
                if let Err(re) = self.link.put_report(&report).await {
                    tracing::warn!(error = %error_chain(&re), "cannot write the report");
                }
                return Err(e);
            }
        };
        let deep_gate = self.deep_gate();

        // 5. Stop what is not wanted here any more.
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

        // 6. Start what is wanted and not running.
        let mut gate: Option<Result<(), String>> = fresh_probe_ok.then_some(Ok(()));
        let pipe_dir = self
            .config
            .mps
            .as_ref()
            .map(|p| p.pipe_dir.clone())
            .unwrap_or_else(|| PathBuf::from("/run/gpushare-mps/pipe"));
        for id in &wanted {
            let task = mine[id];
            match observed.get(*id).map(|o| o.verdict()) {
                Some(TaskVerdict::Running) => {
                    summary.running += 1;
                    let reset_after = self.config.restart_backoff_max;
                    self.set(id, TaskState::Running, None, None);
                    if let Some(m) = self.memo.get_mut(*id) {
                        if m.started_at.is_some_and(|s| s.elapsed() >= reset_after) {
                            m.failures = 0;
                        }
                        if m.started_at.is_none() {
                            // Adopted from an earlier agent.
                            m.started_at = Some(Instant::now());
                        }
                    }
                    continue;
                }
                Some(TaskVerdict::Starting) => {
                    // Created, not running: a start this agent made moments ago, or
                    // one interrupted (a crash between create and start) or stuck.
                    let stuck = self
                        .memo
                        .get(*id)
                        .and_then(|m| m.started_at)
                        .is_none_or(|s| s.elapsed() > START_TIMEOUT);
                    if stuck {
                        tracing::warn!(task = %id, "removing an interrupted or stuck start");
                        match self.runtime.stop(id, self.config.stop_grace).await {
                            Ok(()) => self.set(
                                id,
                                TaskState::Pending,
                                Some("an interrupted start was cleaned up; starting again".into()),
                                None,
                            ),
                            Err(e) => self.set(
                                id,
                                TaskState::Pending,
                                Some(format!(
                                    "cleaning up an interrupted start failed: {}",
                                    error_chain(&e)
                                )),
                                None,
                            ),
                        }
                    } else {
                        self.set(id, TaskState::Pending, Some("starting".into()), None);
                    }
                    summary.waiting.push(id.to_string());
                    continue;
                }
                Some(TaskVerdict::Exited { container, code }) => {
                    // An essential container ended: the task is over; stop the rest.
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
                    summary.waiting.push(id.to_string());
                    continue;
                }
                None => {}
            }
            // Not running: start it, unless the deep diagnostic or a backoff holds it back.
            if let Err(why) = &deep_gate {
                self.set(
                    id,
                    TaskState::Pending,
                    Some(format!("not started: {why}")),
                    None,
                );
                summary.waiting.push(id.to_string());
                continue;
            }
            if let Some(at) = self.memo.get(*id).and_then(|m| m.retry_at) {
                if Instant::now() < at {
                    summary.waiting.push(id.to_string());
                    continue;
                }
            }
            let spec = revision_of(&state, task).and_then(|rev| {
                launch_spec(task, rev, &gpus, inventory_error.as_deref(), &pipe_dir)
                    .map(|s| (s, is_mps(task, rev)))
            });
            let (spec, mps) = match spec {
                Ok(s) => s,
                Err(e) => {
                    self.fail(id, TaskState::Failed, e.to_string(), None);
                    summary.waiting.push(id.to_string());
                    continue;
                }
            };
            if mps {
                let verdict = match (&self.config.mps, &gate) {
                    (None, _) => {
                        Err("MPS is disabled on this host (agent started with --no-mps)"
                            .to_string())
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
                        gate = Some(v.clone());
                        v
                    }
                };
                if let Err(e) = verdict {
                    // Not a failure of the task: it waits for the daemon (a client
                    // started without it would escape its memory limit).
                    self.set(
                        id,
                        TaskState::Pending,
                        Some(format!("not started: the MPS daemon does not answer ({e})")),
                        None,
                    );
                    summary.waiting.push(id.to_string());
                    continue;
                }
            }
            match self.runtime.start(&spec).await {
                Ok(()) | Err(RuntimeError::AlreadyRunning { .. }) => {
                    summary.started.push(id.to_string());
                    self.set(id, TaskState::Running, None, None);
                    if let Some(m) = self.memo.get_mut(*id) {
                        m.retry_at = None;
                        m.started_at = Some(Instant::now());
                        if m.starts > 0 {
                            m.status.restarts = m.status.restarts.saturating_add(1);
                        }
                        m.starts = m.starts.saturating_add(1);
                    }
                }
                Err(e) => {
                    let reason = format!("start failed: {}", error_chain(&e));
                    self.fail(id, TaskState::Failed, reason, None);
                    summary.waiting.push(id.to_string());
                }
            }
        }

        // 7. Tasks of this host the store stops: report them stopped.
        for (id, t) in &mine {
            if !wanted.contains(id) && !observed.contains_key(*id) {
                let keep_reason = self
                    .memo
                    .get(*id)
                    .filter(|m| m.status.state == TaskState::Stopped)
                    .and_then(|m| m.status.reason.clone());
                let _ = t;
                self.set(id, TaskState::Stopped, keep_reason, None);
            }
        }
        // Forget tasks that are neither assigned here nor running here.
        self.memo
            .retain(|id, _| mine.contains_key(id.as_str()) || observed.contains_key(id));

        // 8. Report.
        let report = self.report(gpus, &mine);
        self.link
            .put_report(&report)
            .await
            .map_err(|source| AgentError::Report { source })?;
        Ok(summary)
    }

    /// This host's report: heartbeat, MPS health, health checks, `gpus`, and the
    /// state of each task of `mine` this agent knows.
    fn report(
        &self,
        gpus: Vec<gpushare_core::model::GpuInfo>,
        mine: &BTreeMap<&str, &Task>,
    ) -> HostReport {
        let mut report = HostReport {
            host_id: self.config.host_id.clone(),
            at: (self.clock)(),
            mps_health: self.mps_health(),
            gpus,
            tasks: BTreeMap::new(),
            agent_version: AGENT_VERSION.to_string(),
            mps_error: self.tracker.last_error().map(str::to_string),
            mps_failures: self.tracker.failures_in_a_row(),
            task_details: BTreeMap::new(),
            health: self.book.health.clone(),
            unreadable: None,
        };
        for (id, m) in &self.memo {
            if mine.contains_key(id.as_str()) {
                report.tasks.insert(id.clone(), m.status.state);
                report.task_details.insert(id.clone(), m.status.clone());
            }
        }
        report
    }

    /// What the runtime runs now.
    async fn running(&self) -> Result<BTreeMap<String, crate::runtime::ObservedTask>, AgentError> {
        self.runtime
            .list()
            .await
            .map_err(|source| AgentError::Runtime {
                runtime: self.runtime.name(),
                source,
            })
    }

    /// Stop every task the runtime runs (its host left the fleet). Returns the ids
    /// stopped; a task that would not stop is logged and left.
    pub async fn stop_all(&mut self) -> Result<Vec<String>, AgentError> {
        let observed = self.running().await?;
        let mut stopped = Vec::new();
        for id in observed.keys() {
            match self.runtime.stop(id, self.config.stop_grace).await {
                Ok(()) => {
                    self.memo.remove(id);
                    stopped.push(id.clone());
                }
                Err(e) => tracing::warn!(task = %id, error = %error_chain(&e), "stopping failed"),
            }
        }
        Ok(stopped)
    }

    /// Pass after pass, `interval` apart, until `shutdown` completes (the pass in
    /// progress finishes first). Errors are logged; running tasks are kept.
    pub async fn run(&mut self, interval: Duration, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            match self.pass().await {
                Ok(s) => tracing::debug!(
                    started = s.started.len(),
                    stopped = s.stopped.len(),
                    running = s.running,
                    waiting = s.waiting.len(),
                    "pass"
                ),
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "pass failed; retrying next interval")
                }
            }
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(interval) => {}
            }
        }
        tracing::info!("agent stopped (its tasks keep running)");
    }
}
