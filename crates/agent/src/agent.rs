//! The agent loop, level-triggered like the reconciler: every pass reads this host's
//! assignment from the store, compares it with what the runtime runs, starts and
//! stops to converge, and writes a report (heartbeat, GPUs, MPS health, task states).

use crate::health::{DeepCheck, GpuScan, HealthBook};
use crate::inventory::Inventory;
pub use crate::launch::{launch_spec, revision_of, AssignmentError};
use crate::link::{Link, StoreLink};
use crate::mps::{ClientProbeBook, MpsGate, MpsHealthTracker, MpsProbe};
use crate::runtime::{ObservedTask, Runtime, RuntimeError};
use gpushare_core::model::{
    GpuInfo, HostNotice, HostReport, LogReply, MpsHealth, StoreState, Task, TaskState, TaskStatus,
};
use gpushare_core::util::{backoff_delays, unix_now};
use gpushare_engine::store::{Store, StoreError};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

mod checks;
mod converge;
mod logs;
mod usage;

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
    /// The address clients reach this host's published ports at (reported).
    pub address: Option<String>,
    /// The instance metadata service to read EC2's notices from (Spot interruption,
    /// scheduled events); `None`: not read (registered hosts, local runs).
    pub imds: Option<crate::imds::ImdsWatch>,
    /// The user id every MPS container runs as (the pool's `mps { user }`); `None`:
    /// as the image or the container's `user` says.
    pub mps_user: Option<u32>,
    /// The address this host's published task ports are scraped at (a task's own
    /// Prometheus metric): the publish address, else loopback.
    pub scrape_address: String,
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
            address: None,
            imds: None,
            mps_user: None,
            scrape_address: "127.0.0.1".into(),
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
    /// A job's run that ended (issue 51): never started again here.
    ended: bool,
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
    /// The MPS client probe's count per GPU (`--mps-client-probe`).
    client_probes: ClientProbeBook,
    /// The health checks, with their last change.
    book: HealthBook,
    memo: BTreeMap<String, Memo>,
    clock: Arc<dyn Fn() -> u64 + Send + Sync>,
    /// The answer to this host's standing log request (`gpushare logs`), sent in
    /// every report while the request stands.
    log_reply: Option<LogReply>,
    /// The output of the job runs that ended here (`gpushare job logs`).
    ended_output: logs::EndedOutput,
    /// EC2's notice that it ends this host (read from the instance metadata), kept
    /// once seen: it is reported in every report after.
    notice: Option<HostNotice>,
}

/// What starting a task needs, for one pass (see `converge`).
struct Starts<'a> {
    state: &'a StoreState,
    gpus: &'a [GpuInfo],
    inventory_error: Option<&'a str>,
    pipe_dir: PathBuf,
    /// The deep diagnostic's hold on new starts.
    deep_gate: Result<(), String>,
    /// The MPS gate's verdict, once asked this pass (or this pass's probe answered).
    mps_gate: Option<Result<(), String>>,
}

/// The tasks `state` places on `host`, by id.
fn tasks_of<'s>(state: &'s StoreState, host: &str) -> BTreeMap<&'s str, &'s Task> {
    state
        .tasks
        .values()
        .filter(|t| t.host == host)
        .map(|t| (t.id.as_str(), t))
        .collect()
}

/// Those of `mine` that should run (pending or running).
fn wanted<'s>(mine: &BTreeMap<&'s str, &'s Task>) -> BTreeSet<&'s str> {
    mine.iter()
        .filter(|(_, t)| matches!(t.state, TaskState::Pending | TaskState::Running))
        .map(|(id, _)| *id)
        .collect()
}

pub use gpushare_core::util::error_chain;

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
            client_probes: ClientProbeBook::default(),
            book: HealthBook::default(),
            memo: BTreeMap::new(),
            log_reply: None,
            ended_output: logs::EndedOutput::default(),
            notice: None,
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
                    // Only a job's run reads it: one reported ended stays ended.
                    ended: matches!(status.state, TaskState::Stopped | TaskState::Failed),
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

    /// The wait before restarting a task after `failures` failures in a row: the
    /// first backoff after one, doubling with each further failure (at most 16 times)
    /// up to the max.
    fn backoff(&self, failures: u32) -> Duration {
        let cap = self.config.restart_backoff_max;
        let doublings = failures.saturating_sub(1).min(16) as usize;
        backoff_delays(self.config.restart_backoff, cap)
            .nth(doublings)
            .map_or(cap, |d| d.min(cap))
    }

    fn set(&mut self, id: &str, state: TaskState, reason: Option<String>, exit_code: Option<i64>) {
        let now = (self.clock)();
        let m = self.memo.entry(id.to_string()).or_insert_with(|| Memo {
            status: TaskStatus {
                last_output: None,
                usage: None,
                state,
                reason: None,
                exit_code: None,
                since: now,
                restarts: 0,
                health: None,
                container_health: Default::default(),
                started_at: None,
            },
            failures: 0,
            retry_at: None,
            started_at: None,
            starts: 0,
            ended: false,
        });
        if m.status.state != state {
            m.status.since = now;
            m.status.health = None;
            m.status.container_health.clear();
            m.status.usage = None;
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
        // 1. The MPS daemon, every pass; the first-boot deep diagnostic, once.
        let fresh_probe_ok = self.probe_mps(now).await;
        self.check_deep(now).await;
        self.watch_imds().await;
        // 2. The GPUs (judged once the assignment names the instance type), and
        //    whether an MPS server refuses clients on them.
        let mut scan = self.scan_gpus();
        if fresh_probe_ok {
            self.mark_mps_faults(&mut scan).await;
        }
        let processes = scan
            .as_mut()
            .map(|s| std::mem::take(&mut s.processes))
            .unwrap_or_default();
        // 3. The assignment.
        let state = self.read_assignment().await?;
        let (gpus, inventory_error) = self.check_gpus(scan, &state, now);
        let runtime_down = self.check_runtime(now).await;
        let mine = tasks_of(&state, &self.config.host_id);
        let wanted = wanted(&mine);
        // 4. What runs.
        let observed = match self.observe(runtime_down).await {
            Ok(o) => o,
            Err(e) => return Err(self.runtime_unavailable(e, gpus, &mine, now).await),
        };
        let deep_gate = self.deep_gate();
        // 5. Stop what is not wanted here any more.
        self.stop_strays(&observed, &wanted, &mut summary).await;
        // 6. Start what is wanted and not running.
        let mut starts = Starts {
            state: &state,
            gpus: &gpus,
            inventory_error: inventory_error.as_deref(),
            pipe_dir: self.pipe_dir(),
            deep_gate,
            mps_gate: fresh_probe_ok.then_some(Ok(())),
        };
        for id in &wanted {
            self.converge_task(id, mine[id], observed.get(*id), &mut starts, &mut summary)
                .await;
        }
        // 7. Tasks of this host the store stops: report them stopped; the output
        // `gpushare logs` asks for.
        self.settle_unwanted(&mine, &wanted, &observed);
        self.answer_logs(&state, &observed, now).await;
        self.measure_usage(processes, &mine, now).await;
        // 8. Report.
        let report = self.report(gpus, &mine);
        self.link
            .put_report(&report)
            .await
            .map_err(|source| AgentError::Report { source })?;
        Ok(summary)
    }

    /// Probe the MPS daemon (when MPS is on) and record the `mps` check. True when
    /// this pass's probe answered (the MPS gate then needs no probe of its own).
    async fn probe_mps(&mut self, now: u64) -> bool {
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
        fresh_probe_ok
    }

    /// Read EC2's notice for this host from the instance metadata (when watched).
    /// A notice, once seen, stays: EC2 does not take one back. A failed read is
    /// logged and changes nothing.
    async fn watch_imds(&mut self) {
        let Some(imds) = &self.config.imds else {
            return;
        };
        match imds.notice().await {
            Ok(Some(n)) if self.notice.as_ref() != Some(&n) => {
                tracing::warn!(notice = %n, "EC2 gave notice: the host is drained");
                self.notice = Some(n);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "cannot read the instance metadata")
            }
        }
    }

    /// Mark the GPUs of `scan` whose MPS server refuses clients: every GPU when a
    /// server is in a fault state (the daemon cannot say which GPUs a server serves,
    /// and a faulted one refuses clients on all of them), and each GPU on which the
    /// client probe, where one is configured, has been refused
    /// [`crate::mps::IMPAIRED_AFTER`] times in a row ([`ClientProbeBook`]).
    async fn mark_mps_faults(&mut self, scan: &mut Result<GpuScan, String>) {
        let (Some(probe), Ok(scan)) = (&self.config.mps, scan) else {
            return;
        };
        let faults = probe.server_faults().await;
        if !faults.is_empty() {
            tracing::warn!(
                ?faults,
                "an MPS server is in a fault state: the GPUs are impaired"
            );
        }
        for g in &scan.gpus {
            let mut why = faults.clone();
            if let Some(outcome) = probe.client_probe(g.index, g.uuid.as_deref()).await {
                if let Err(e) = &outcome {
                    tracing::warn!(gpu = g.index, error = %e, "MPS client probe failed");
                }
                if let Some(f) = self.client_probes.record(g.index, &outcome) {
                    tracing::warn!(gpu = g.index, fault = %f, "the GPU is impaired");
                    why.push(f);
                }
            }
            if why.is_empty() {
                continue;
            }
            let why = why.join("; ");
            match scan.facts.iter_mut().find(|f| f.index == g.index) {
                Some(f) => f.mps_server_fault = Some(why),
                None => scan.facts.push(crate::health::GpuFacts {
                    index: g.index,
                    mps_server_fault: Some(why),
                    ..Default::default()
                }),
            }
        }
    }

    /// Read the GPU inventory; its error as text (and logged).
    fn scan_gpus(&self) -> Result<GpuScan, String> {
        self.inventory.scan().map_err(|e| {
            let msg = error_chain(&e);
            tracing::warn!(error = %msg, "GPU inventory unavailable");
            msg
        })
    }

    /// The assignment, read from the store (read only: the store's kept state, not a
    /// copy of it). An error when the store belongs to another cluster or does not
    /// know this host.
    async fn read_assignment(&self) -> Result<Arc<StoreState>, AgentError> {
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
        Ok(state)
    }

    /// What the runtime runs. A runtime that does not answer its check
    /// (`runtime_down`) is not asked: a listing would wait for the client's timeout.
    async fn observe(
        &self,
        runtime_down: Option<RuntimeError>,
    ) -> Result<BTreeMap<String, ObservedTask>, AgentError> {
        match runtime_down {
            Some(source) => Err(AgentError::Runtime {
                runtime: self.runtime.name(),
                source,
            }),
            None => self.running().await,
        }
    }

    /// The runtime cannot list its tasks (`e`): its host is still reported
    /// (`container_runtime` impaired, tasks as last seen); returns `e`.
    async fn runtime_unavailable(
        &mut self,
        e: AgentError,
        gpus: Vec<GpuInfo>,
        mine: &BTreeMap<&str, &Task>,
        now: u64,
    ) -> AgentError {
        self.runtime_failed(error_chain(&e), now);
        let report = self.report(gpus, mine);
        if let Err(re) = self.link.put_report(&report).await {
            tracing::warn!(error = %error_chain(&re), "cannot write the report");
        }
        e
    }

    /// Where MPS clients find the daemon's pipes.
    fn pipe_dir(&self) -> PathBuf {
        self.config
            .mps
            .as_ref()
            .map(|p| p.pipe_dir.clone())
            .unwrap_or_else(|| PathBuf::from("/run/gpushare-mps/pipe"))
    }

    /// This host's report: heartbeat, MPS health, health checks, `gpus`, and the
    /// state of each task of `mine` this agent knows.
    fn report(&self, gpus: Vec<GpuInfo>, mine: &BTreeMap<&str, &Task>) -> HostReport {
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
            agent_at: None,
            address: self.config.address.clone(),
            logs: self.log_reply.clone(),
            unreadable: None,
        };
        report.health.notice = self.notice.clone();
        for (id, m) in &self.memo {
            if mine.contains_key(id.as_str()) {
                report.tasks.insert(id.clone(), m.status.state);
                report.task_details.insert(id.clone(), m.status.clone());
            }
        }
        report
    }

    /// What the runtime runs now.
    async fn running(&self) -> Result<BTreeMap<String, ObservedTask>, AgentError> {
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
