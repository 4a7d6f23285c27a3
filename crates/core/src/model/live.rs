//! What exists: hosts and tasks as the store records them ([`StoreState`]), what the
//! cloud and the agents say ([`CloudHost`], [`HostReport`]), and the merged world the
//! planner works from ([`Live`]).

use super::health::HostHealth;
use super::launch::LaunchRecord;
use super::registered::{parse_cost, Hold, HostRegistration, HostSource};
use super::{
    reserves_compute, CapacityProvider, Market, ResourceAddr, ResourceKind, TaskDefinition,
    TaskGpu, TaskShape,
};
use crate::facts::{PoolFacts, SubnetFact};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod report;
pub use report::{
    clean_gpu, output_tail, task_healthy, task_usage_rows, unhealthy_reason, EndpointSample,
    HostReport, TaskStatus, TaskUsage, TaskUsageRow, MAX_LAST_OUTPUT,
};

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
