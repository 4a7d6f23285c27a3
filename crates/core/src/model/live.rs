//! What exists: hosts and tasks as the store records them ([`StoreState`]), what the
//! cloud and the agents say ([`CloudHost`], [`HostReport`]), and the merged world the
//! planner works from ([`Live`]).

use super::health::{clean_text, HostHealth, MAX_HOST_GPUS, MAX_REPORT_TASKS, MAX_REPORT_TEXT};
use super::launch::LaunchRecord;
use super::registered::{parse_cost, Hold, HostRegistration, HostSource};
use super::{
    reserves_compute, CapacityProvider, Market, ResourceAddr, ResourceKind, TaskDefinition,
    TaskGpu, TaskShape,
};
use crate::facts::{PoolFacts, SubnetFact};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostState {
    /// Launch requested, not yet running.
    Pending,
    Running,
    /// Being emptied before termination.
    Draining,
    ShuttingDown,
    Terminated,
}

impl HostState {
    pub fn is_active(self) -> bool {
        matches!(self, HostState::Pending | HostState::Running)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MpsHealth {
    #[default]
    Unknown,
    Healthy,
    /// Three failed probes in a row.
    Impaired,
    /// MPS disabled in the pool: no MPS tasks may go there.
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum GpuMode {
    #[default]
    Idle,
    Mps,
    Dedicated,
}

/// One GPU of a host, as the catalogue (or the agent) reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub model: String,
    pub memory_mib: u64,
    /// NVML's UUID (`GPU-...`), as the agent reports it; `None` from the catalogue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// NVML's compute mode (`default`, `exclusive_process`, `prohibited`), as the agent reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_mode: Option<String>,
}

impl GpuInfo {
    /// A GPU as the catalogue knows it (no UUID, no compute mode).
    pub fn new(index: u32, model: impl Into<String>, memory_mib: u64) -> GpuInfo {
        GpuInfo {
            index,
            model: model.into(),
            memory_mib,
            uuid: None,
            compute_mode: None,
        }
    }
}

/// A host: a record in the store, merged with what the cloud and the agent report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// gpushare's own id, fixed by the planner (e.g. `h-l4-3f9a2c`); also a tag on the instance.
    pub id: String,
    /// The cloud's id (EC2 instance id, or the local fleet's id); `None` until launched.
    #[serde(default)]
    pub instance_id: Option<String>,
    pub capacity_provider: String,
    /// Set when the host is a `gpu_instance` resource.
    #[serde(default)]
    pub gpu_instance: Option<String>,
    pub instance_type: String,
    #[serde(default)]
    pub zone: Option<String>,
    /// The subnet the plan fixed for the launch (`None`: the default network, or a
    /// host planned without the cloud's facts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    /// The image the plan fixed for the launch (an AMI id on EC2). Set: apply launches
    /// exactly this type, image, subnet and zone; `None`: the cloud chooses at apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    pub state: HostState,
    #[serde(default)]
    pub mps_health: MpsHealth,
    /// Each health check and GPU as the agent last reported them (empty: never
    /// reported, or an agent from before the checks).
    #[serde(default, skip_serializing_if = "HostHealth::is_empty")]
    pub health: HostHealth,
    pub gpus: Vec<GpuInfo>,
    /// CPU units (1024 per vCPU).
    pub cpu_units: u32,
    pub memory_mib: u64,
    /// Deterministic idempotency token of the launch.
    pub launch_token: String,
    /// Seconds since the Unix epoch of the agent's last report (`None`: never).
    #[serde(default)]
    pub last_heartbeat: Option<u64>,
    /// Seconds since the Unix epoch when apply launched the host (`None`: planned, or
    /// launched before gpushare recorded it). A host whose agent never reports within
    /// the planner's boot grace counts as silent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_at: Option<u64>,
    /// How the host is bought: its pool's `market` when it was planned.
    #[serde(default, skip_serializing_if = "Market::is_on_demand")]
    pub market: Market,
    /// Spot only: the pool's `max_price` when the host was planned (USD per hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price: Option<f64>,
    /// The pool's launch settings when the host was planned (`None`: planned before
    /// gpushare recorded them); a host whose settings differ from its pool's is outdated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<LaunchRecord>,
    /// Set for a host of a registered pool: it joined by itself (never launched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration: Option<HostRegistration>,
    /// The operator's hold on it (`gpushare host cordon|drain|remove`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
    /// `gpushare logs`: output its agent is asked for (answered in its report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_request: Option<super::LogRequest>,
}

impl Host {
    /// Where the host launches, for the plan and messages: `subnet S (Z)`, `subnet S`,
    /// `zone Z` or `the default VPC`.
    pub fn launch_place(&self) -> String {
        match (&self.subnet, &self.zone) {
            (Some(s), Some(z)) => format!("subnet {s} ({z})"),
            (Some(s), None) => format!("subnet {s}"),
            (None, Some(z)) => format!("zone {z}"),
            (None, None) => "the default VPC".to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Recorded, waiting for the agent to start it.
    Pending,
    Running,
    Stopping,
    Stopped,
    Failed,
}

/// A placed task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: String,
    pub service: String,
    /// Task definition family and revision.
    pub family: String,
    pub revision: u32,
    pub host: String,
    /// GPU indices on the host (one for MPS tasks, `count` for whole-GPU tasks, none for CPU-only).
    pub gpus: Vec<u32>,
    pub shape: TaskShape,
    pub state: TaskState,
    /// The host ports the task holds (its port mappings, dynamic ones as the planner
    /// assigned them): where it is reached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<super::TaskPort>,
    /// Set for a job's run (issue 51): run to completion, never restarted once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<super::JobRun>,
    /// The Prometheus metric its agent scrapes from its own endpoint each pass (its
    /// service auto scales on it; docs/autoscaling.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrape: Option<super::MetricScrape>,
}

impl Task {
    pub fn gpu_memory_mib(&self) -> u64 {
        match self.shape.gpu {
            TaskGpu::Mps { memory_mib, .. } => memory_mib,
            _ => 0,
        }
    }
    pub fn max_compute_percent(&self) -> Option<u8> {
        match self.shape.gpu {
            TaskGpu::Mps {
                compute_percent,
                capped: true,
                ..
            } => Some(compute_percent),
            _ => None,
        }
    }
}

/// A registered, immutable task-definition revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revision {
    pub family: String,
    pub revision: u32,
    pub spec: TaskDefinition,
}

/// A resource as last applied: its attributes as they were, and the computed ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedResource {
    pub attrs: serde_json::Value,
    /// A service's last deployment (services only; kept when its attributes change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<super::DeploymentRecord>,
    /// A service's auto scaling record (services with `auto_scaling` only; kept when
    /// its attributes change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<super::ScalingRecord>,
    /// A job's progress (jobs only; kept when its attributes change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<super::JobRecord>,
    /// A one-off job (`gpushare run`): recorded in the store, not declared; the
    /// planner plans it as if it were declared until `gpushare job rm` removes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub one_off: bool,
}

impl AppliedResource {
    /// A resource applied with `attrs` and no deployment or scaling record.
    pub fn new(attrs: serde_json::Value) -> AppliedResource {
        AppliedResource {
            attrs,
            deployment: None,
            scaling: None,
            job: None,
            one_off: false,
        }
    }
}

/// The system of record, as kept by a `Store`: everything gpushare has applied.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StoreState {
    /// Bumped by every committed change; a saved plan records the serial it was made from.
    pub serial: u64,
    pub cluster: String,
    /// The store's identity: a random id made when the store was created, never
    /// changed. Every `Store` fills it on `load` (whatever an older `state.json`
    /// holds); it is mixed into launch tokens and tagged on every instance and volume
    /// (`gpushare:store-id`), so two stores of one cluster name never take over each
    /// other's instances. Empty only for a store that has no identity (launch tokens
    /// are then what they were before store identity).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub store_id: String,
    pub resources: BTreeMap<ResourceAddr, AppliedResource>,
    /// Task-definition revisions by family, oldest first.
    pub revisions: BTreeMap<String, Vec<Revision>>,
    pub hosts: BTreeMap<String, Host>,
    pub tasks: BTreeMap<String, Task>,
    /// Launches the cloud refused for lack of capacity, recently: the planner places
    /// new hosts elsewhere for a while (see [`crate::facts`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_refusals: Vec<crate::facts::CapacityRefusal>,
}

impl StoreState {
    /// The tasks `keep` takes, by the id of the host they are placed on, in one pass
    /// over the tasks: the index every view of many hosts reads its hosts' tasks from
    /// (the fleet picture, `show --json`, the console, `state rm`), instead of a scan
    /// of every task per host (issue 52). Each host's tasks are in id order.
    pub fn tasks_by_host(&self, keep: impl Fn(&Task) -> bool) -> BTreeMap<&str, Vec<&Task>> {
        let mut out: BTreeMap<&str, Vec<&Task>> = BTreeMap::new();
        for t in self.tasks.values().filter(|t| keep(t)) {
            out.entry(t.host.as_str()).or_default().push(t);
        }
        out
    }

    /// Each host's share of the state: the cluster, the host, the tasks placed on it
    /// and the revisions they run (what its agent reads), built in one pass over the
    /// tasks, for a caller that serves many agents from one state (the local fleet's
    /// round) instead of each agent scanning every task (issue 52).
    pub fn host_shares(&self) -> BTreeMap<String, StoreState> {
        let mut out: BTreeMap<String, StoreState> = self
            .hosts
            .iter()
            .map(|(id, h)| {
                let mut s = StoreState {
                    serial: self.serial,
                    cluster: self.cluster.clone(),
                    store_id: self.store_id.clone(),
                    ..StoreState::default()
                };
                s.hosts.insert(id.clone(), h.clone());
                (id.clone(), s)
            })
            .collect();
        for t in self.tasks.values() {
            if let Some(s) = out.get_mut(&t.host) {
                s.tasks.insert(t.id.clone(), t.clone());
            }
        }
        for s in out.values_mut() {
            let runs: std::collections::BTreeSet<(&str, u32)> = s
                .tasks
                .values()
                .map(|t| (t.family.as_str(), t.revision))
                .collect();
            let mut revisions: BTreeMap<String, Vec<Revision>> = BTreeMap::new();
            for (family, revision) in runs {
                let found = self
                    .revisions
                    .get(family)
                    .and_then(|v| v.iter().find(|r| r.revision == revision));
                if let Some(r) = found {
                    revisions
                        .entry(family.to_string())
                        .or_default()
                        .push(r.clone());
                }
            }
            s.revisions = revisions;
        }
        out
    }

    /// Service `service`'s last deployment, as recorded with its applied resource.
    pub fn deployment(&self, service: &str) -> Option<&super::DeploymentRecord> {
        self.resources
            .get(&ResourceAddr::new(
                ResourceKind::Service,
                service.to_string(),
            ))
            .and_then(|r| r.deployment.as_ref())
    }

    /// Service `service`'s auto scaling record, as recorded with its applied resource.
    pub fn scaling(&self, service: &str) -> Option<&super::ScalingRecord> {
        self.resources
            .get(&ResourceAddr::new(
                ResourceKind::Service,
                service.to_string(),
            ))
            .and_then(|r| r.scaling.as_ref())
    }

    /// Job `job`'s progress, as recorded with its applied resource.
    pub fn job(&self, job: &str) -> Option<&super::JobRecord> {
        self.resources
            .get(&ResourceAddr::new(ResourceKind::Job, job.to_string()))
            .and_then(|r| r.job.as_ref())
    }

    /// Whether the tasks of `service` in pool `pool` reserve their compute caps,
    /// as the service and the pool were last applied ([`reserves_compute`]).
    pub fn reserves_compute(&self, service: &str, pool: &str) -> bool {
        let says = |kind, name: &str| {
            self.resources
                .get(&ResourceAddr::new(kind, name.to_string()))
                .and_then(|r| r.attrs.get("reserve_compute"))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false)
        };
        reserves_compute(
            says(ResourceKind::Service, service),
            says(ResourceKind::CapacityProvider, pool),
        )
    }
}

/// What the cloud says about one instance of this cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudHost {
    pub instance_id: String,
    /// The `gpushare:host-id` tag.
    pub host_id: String,
    pub capacity_provider: String,
    pub instance_type: String,
    #[serde(default)]
    pub zone: Option<String>,
    pub state: HostState,
    pub launch_token: String,
    /// The `gpushare:store-id` tag: the store that launched the instance (`None` for
    /// instances launched before store identity, or tagged by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_id: Option<String>,
}

impl CloudHost {
    /// True when the instance carries another store's id than `store_id` (an
    /// instance without the tag belongs to no store in particular).
    pub fn is_foreign_to(&self, store_id: &str) -> bool {
        self.store_id.as_deref().is_some_and(|s| s != store_id)
    }
}

/// What an agent last reported about its host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HostReport {
    pub host_id: String,
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub mps_health: MpsHealth,
    pub gpus: Vec<GpuInfo>,
    /// Task id -> state as the agent sees it.
    pub tasks: BTreeMap<String, TaskState>,
    /// The reporting agent's version (`CARGO_PKG_VERSION`); empty in reports written before agents.
    #[serde(default)]
    pub agent_version: String,
    /// The last failed MPS probe's error (`None` after a success or when never probed).
    #[serde(default)]
    pub mps_error: Option<String>,
    /// Failed MPS probes in a row (three make the host impaired; a success resets).
    #[serde(default)]
    pub mps_failures: u32,
    /// Task id -> state with its reason, exit code and restarts (the detail of `tasks`).
    #[serde(default)]
    pub task_details: BTreeMap<String, TaskStatus>,
    /// Every health check and GPU with status, reason and last change (absent in
    /// reports of agents from before the checks).
    #[serde(default, skip_serializing_if = "HostHealth::is_empty")]
    pub health: HostHealth,
    /// The time the agent itself wrote in the report, kept as information only: the
    /// controller stamps `at` with the time it received the report (issue 46).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_at: Option<u64>,
    /// The address clients reach the host's published ports at (the agent's
    /// `--address`, else the address it reaches the controller from): what
    /// `gpushare endpoints` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The answer to the host's standing log request (`Host::log_request`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<super::LogReply>,
    /// Set by the store, never read from a report: why what is stored as this host's
    /// report was not taken (it does not parse, or it names another host). Such a
    /// report gives no heartbeat, health, inventory or task states, so the host turns
    /// silent after the planner's grace, and `show` says why.
    #[serde(skip)]
    pub unreadable: Option<String>,
}

/// [`clean_text`] in place, only when needed.
fn clean_in_place(s: &mut String) {
    if s.len() > MAX_REPORT_TEXT || s.chars().any(char::is_control) {
        *s = clean_text(s);
    }
}

/// Make a GPU as a host reported it fit to store and show (its texts cleaned).
pub fn clean_gpu(g: &mut GpuInfo) {
    clean_in_place(&mut g.model);
    if let Some(u) = g.uuid.as_mut() {
        clean_in_place(u);
    }
    if let Some(m) = g.compute_mode.as_mut() {
        clean_in_place(m);
    }
}

impl HostReport {
    /// Take a report an agent sent at `now` (the controller's clock): refused when it
    /// names more GPUs or tasks than a host can have; its texts cleaned of control
    /// characters; `at` set to `now` (the agent's own time kept in `agent_at`), so a
    /// host cannot stay "heard from" by reporting a time ahead (issue 46).
    pub fn accept(&mut self, now: u64) -> Result<(), String> {
        if self.gpus.len() > MAX_HOST_GPUS {
            return Err(format!(
                "the report names {} GPUs; a host has at most {MAX_HOST_GPUS}",
                self.gpus.len()
            ));
        }
        let tasks = self.tasks.len().max(self.task_details.len());
        if tasks > MAX_REPORT_TASKS {
            return Err(format!(
                "the report names {tasks} tasks; a report may name at most {MAX_REPORT_TASKS}"
            ));
        }
        self.gpus.iter_mut().for_each(clean_gpu);
        clean_in_place(&mut self.agent_version);
        if let Some(e) = self.mps_error.as_mut() {
            clean_in_place(e);
        }
        for s in self.task_details.values_mut() {
            if let Some(r) = s.reason.as_mut() {
                clean_in_place(r);
            }
            if let Some(o) = s.last_output.as_mut() {
                *o = output_tail(o, MAX_LAST_OUTPUT);
            }
            if let Some(u) = s.usage.as_mut() {
                u.gpus.truncate(MAX_HOST_GPUS);
            }
        }
        self.health.clean();
        if let Some(a) = self.address.as_mut() {
            clean_in_place(a);
        }
        if let Some(l) = self.logs.as_mut() {
            l.bound();
        }
        self.agent_at = Some(self.at);
        self.at = now;
        Ok(())
    }

    /// What is stored under `key_host`'s report (a file `reports/<host>.json`, an etcd
    /// key `report/<host>`), as the planner may trust it: a report is taken only for the
    /// host it is stored under (a host can write only its own key, but could write any
    /// `host_id` into the value), and one that does not parse stands for that host alone
    /// instead of failing every read of the cluster's reports.
    pub fn from_stored(key_host: &str, bytes: &[u8]) -> HostReport {
        let refused = |why: String| HostReport {
            host_id: key_host.to_string(),
            unreadable: Some(why),
            ..HostReport::default()
        };
        match serde_json::from_slice::<HostReport>(bytes) {
            Ok(r) => HostReport::stored_under(key_host, r),
            Err(e) => refused(format!(
                "the report stored for host {key_host} does not parse: {e}"
            )),
        }
    }

    /// Report `r` as read from where host `key_host`'s report is kept: itself when it
    /// names that host, else refused (`unreadable` says why: a report counts only for
    /// the host it is stored under).
    pub fn stored_under(key_host: &str, r: HostReport) -> HostReport {
        if r.host_id == key_host {
            return r;
        }
        HostReport {
            host_id: key_host.to_string(),
            unreadable: Some(format!(
                "the report stored for host {key_host} names host {:?}; a report counts only for the host it is stored under",
                r.host_id
            )),
            ..HostReport::default()
        }
    }
}

/// Whether a task in `state` counts as healthy at `now`: running, and (when its
/// agent reports the detail, `status`) reported running without a restart for
/// `min_seconds` (a deployment's `min_healthy_seconds`; docs/deployments.md). A task
/// whose agent gives no detail counts once running. The one rule the planner, apply's
/// wait for successors and `show` judge health by.
/// A task with a health check counts once its check says HEALTHY, as in ECS
/// (and never while UNHEALTHY or UNKNOWN), whatever `min_seconds`.
pub fn task_healthy(
    state: TaskState,
    status: Option<&TaskStatus>,
    now: u64,
    min_seconds: u64,
) -> bool {
    state == TaskState::Running
        && status.is_none_or(|s| {
            s.state == TaskState::Running
                && match s.health {
                    Some(h) => h == super::HealthStatus::Healthy,
                    None => now.saturating_sub(s.since) >= min_seconds,
                }
        })
}

/// Why a running task counts as failed by its health check (its essential
/// container turned UNHEALTHY), for the planner that replaces it; `None` otherwise.
pub fn unhealthy_reason(status: Option<&TaskStatus>) -> Option<String> {
    let s = status?;
    if s.state != TaskState::Running || s.health != Some(super::HealthStatus::Unhealthy) {
        return None;
    }
    let which: Vec<&str> = s
        .container_health
        .iter()
        .filter(|(_, h)| **h == super::HealthStatus::Unhealthy)
        .map(|(c, _)| c.as_str())
        .collect();
    Some(if which.is_empty() {
        "the task failed its health checks (UNHEALTHY)".to_string()
    } else {
        format!(
            "container {} failed its health check (UNHEALTHY)",
            which.join(", ")
        )
    })
}

/// One task as its agent sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub state: TaskState,
    /// Why the task is in this state (e.g. "container main exited with code 1",
    /// "MPS daemon not answering: ..."); `None` when running normally.
    #[serde(default)]
    pub reason: Option<String>,
    /// Exit code of the essential container that stopped the task.
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// Seconds since the Unix epoch when the task entered this state.
    #[serde(default)]
    pub since: u64,
    /// How many times this agent (re)started the task.
    #[serde(default)]
    pub restarts: u32,
    /// The task's health by its essential containers' health checks (ECS's rule);
    /// `None` when none has a check (or the agent predates checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<super::HealthStatus>,
    /// Each container with a health check: its verdict.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub container_health: BTreeMap<String, super::HealthStatus>,
    /// The last lines the essential container that ended the task wrote (at most
    /// [`MAX_LAST_OUTPUT`] bytes): what `show` prints for a task that keeps failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_output: Option<String>,
    /// What the task uses of its GPUs, as its host's agent measured it this pass
    /// (NVML's compute processes mapped to the task; issue 49). `None`: not measured
    /// (no GPU process of the task, or an agent that predates it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TaskUsage>,
    /// Seconds since the epoch when the agent last started the task (a job's run:
    /// its attempt's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
}

/// A task's GPU use: what its processes hold and compute now, and the most memory
/// they held since the task started.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TaskUsage {
    /// GPU memory its processes hold now, MiB (all its GPUs).
    pub gpu_memory_mib: u64,
    /// The most they held at once since the task started (as this agent saw it).
    pub peak_gpu_memory_mib: u64,
    /// SM utilisation of its processes over the last sample, percent of one GPU
    /// (summed over its processes; `None` when the driver gave no sample).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_percent: Option<u32>,
    /// The GPU indexes its processes run on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<u32>,
    /// When it was measured (seconds since the epoch, the agent's clock).
    pub at: u64,
    /// The Prometheus metric of the task's own endpoint (its [`Task::scrape`]) as the
    /// agent scraped it this pass; `None`: not asked, or the scrape failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<EndpointSample>,
}

/// A Prometheus metric's value read from a task's endpoint: the sum of its samples.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointSample {
    pub metric: String,
    pub value: f64,
}

impl PartialEq for EndpointSample {
    fn eq(&self, other: &Self) -> bool {
        self.metric == other.metric && self.value.to_bits() == other.value.to_bits()
    }
}

impl Eq for EndpointSample {}

/// One task's GPU use with where it runs (`show`, the metrics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskUsageRow {
    pub service: String,
    pub task: String,
    pub host: String,
    /// The MPS memory it declared, MiB (0: a dedicated GPU or none).
    pub declared_gpu_memory_mib: u64,
    #[serde(flatten)]
    pub usage: TaskUsage,
}

/// Every task of `state` whose agent reported its GPU use (`status`, from the
/// reports), in task id order.
pub fn task_usage_rows(
    state: &StoreState,
    status: &BTreeMap<String, TaskStatus>,
) -> Vec<TaskUsageRow> {
    state
        .tasks
        .values()
        .filter_map(|t| {
            let usage = status.get(&t.id)?.usage.clone()?;
            Some(TaskUsageRow {
                service: t.service.clone(),
                task: t.id.clone(),
                host: t.host.clone(),
                declared_gpu_memory_mib: t.gpu_memory_mib(),
                usage,
            })
        })
        .collect()
}

/// The most of a failed task's last output a report keeps.
pub const MAX_LAST_OUTPUT: usize = 4096;

/// `text` fit for a report: its last `max` bytes (on a character boundary), its
/// control characters other than newline and tab replaced.
pub fn output_tail(text: &str, max: usize) -> String {
    let mut cut = text.len().saturating_sub(max);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..]
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

/// The observed world the planner works from: the store's records merged with
/// the cloud's instances and the agents' reports. Built by `observe` (I/O lives there).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Live {
    pub state: StoreState,
    /// Instances tagged with this cluster that the store does not know.
    pub strays: Vec<CloudHost>,
    /// Instances of this cluster tagged with another store's id (`gpushare:store-id`):
    /// they belong to another state store and are never matched, retired or terminated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<CloudHost>,
    /// Instances without a store-id tag (launched before store identity) that matched
    /// one of this store's hosts and were adopted by it (the plan notes each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adopted: Vec<CloudHost>,
    /// Seconds since the Unix epoch when observed (the planner never reads a clock).
    pub observed_at: u64,
    /// The cloud's launch facts for the desired pools (images, subnets and zones),
    /// gathered beside observe; the planner fixes each launch from them.
    #[serde(default, skip_serializing_if = "crate::facts::CloudFacts::is_empty")]
    pub facts: crate::facts::CloudFacts,
    /// Each task's state as its host's agent last reported it (since when, restarts):
    /// what the planner judges a task healthy by (task id -> status).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub task_status: BTreeMap<String, TaskStatus>,
    /// Each host's address as its agent reported it (host id -> address): what a
    /// target group of type `ip` registers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_addresses: BTreeMap<String, String>,
    /// The services' ELBv2 target groups as observed (ARN -> group), read beside
    /// observe when a service has a `load_balancer`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub target_groups: BTreeMap<String, super::TargetGroupObs>,
}

impl Host {
    /// Whether the host joined a registered pool by itself (gpushare never launched it).
    pub fn is_registered(&self) -> bool {
        self.registration.is_some()
    }
}

/// What a pool as recorded in a state (`resources`) says of its hosts: whether it
/// is registered, and what each of its hosts costs per hour (`host_hourly_cost`).
pub fn applied_pool(state: &StoreState, pool: &str) -> Option<(HostSource, f64)> {
    let attrs = &state
        .resources
        .get(&ResourceAddr::new(ResourceKind::CapacityProvider, pool))?
        .attrs;
    let source = attrs
        .get("hosts")
        .and_then(|v| serde_json::from_value::<HostSource>(v.clone()).ok())
        .unwrap_or_default();
    let cost = match attrs.get("host_hourly_cost") {
        Some(serde_json::Value::String(s)) => parse_cost(Some(s)),
        Some(v) => v.as_f64().filter(|c| *c >= 0.0).unwrap_or(0.0),
        None => 0.0,
    };
    Some((source, cost))
}

/// The catalogue's entry for `name`, or the error naming the closest known ones.
/// A reported GPU inventory held against the catalogue's entry for `instance_type`:
/// a host is never trusted to hold more GPUs, or more memory per GPU, than its type
/// has (an agent, or whoever writes its report, could otherwise make the planner pack
/// tasks onto GPUs that do not exist). Returns the inventory to plan with (GPUs past
/// the type's count dropped, memory cut to the catalogue's) and, when anything was cut,
/// why. A type the catalogue lacks is taken as reported.
pub fn clamp_inventory(
    instance_type: &str,
    reported: &[GpuInfo],
) -> (Vec<GpuInfo>, Option<String>) {
    let Some(t) = crate::catalog::lookup(instance_type) else {
        return (reported.to_vec(), None);
    };
    let mut problems = Vec::new();
    let extra = reported.iter().filter(|g| g.index >= t.gpu_count).count();
    if extra > 0 {
        problems.push(format!(
            "{} GPU(s) beyond the {} of a {}",
            extra, t.gpu_count, t.name
        ));
    }
    let mut out: Vec<GpuInfo> = Vec::with_capacity(reported.len());
    for g in reported.iter().filter(|g| g.index < t.gpu_count) {
        if out.iter().any(|o| o.index == g.index) {
            problems.push(format!("GPU {} twice", g.index));
            continue;
        }
        let mut g = g.clone();
        if g.memory_mib > t.gpu_memory_mib {
            problems.push(format!(
                "GPU {} with {} MiB, more than a {}'s {} MiB",
                g.index, g.memory_mib, t.gpu_model, t.gpu_memory_mib
            ));
            g.memory_mib = t.gpu_memory_mib;
        }
        out.push(g);
    }
    let why = (!problems.is_empty()).then(|| {
        format!(
            "the report claims {}; held to the catalogue's {}",
            problems.join(", "),
            t.name
        )
    });
    (out, why)
}

// Defined beside the model so the facts stay below it.
impl PoolFacts {
    /// What the configuration alone says of `pool`, when the cloud gave no facts:
    /// its `image` (empty when it names none) and its subnets in order, their zones
    /// unknown (empty). [`choose_launch`] then picks deterministically from these.
    pub fn from_config(pool: &CapacityProvider) -> PoolFacts {
        PoolFacts {
            image_id: pool.image.clone().unwrap_or_default(),
            subnets: pool
                .subnets
                .iter()
                .map(|s| SubnetFact {
                    id: s.clone(),
                    zone: String::new(),
                })
                .collect(),
            instance: None,
            root_device: None,
        }
    }
}
