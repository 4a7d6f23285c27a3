//! The resource model: what the user wants ([`Desired`]), what exists ([`Live`]),
//! and the shapes both are made of.
//!
//! Desired resources are typed structs that serialise (serde) to a flat JSON
//! object whose keys are exactly the schema's attribute names (see
//! `schemas/*.json`). The planner diffs resources attribute by attribute on that
//! JSON form, using the schema to know which attributes force replacement.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod capacity;
mod deployments;
mod desired_ops;
mod endpoints;
mod health;
mod host_records;
mod jobs;
mod launch;
mod live;
mod logs;
mod registered;
mod scaling;
mod secret;
mod serving;
mod settings;
mod targets;
pub use capacity::{
    is_registered_attrs, parse_port_range, parse_price, reserves_compute, AgentSource,
    CapacityProvider, GpuInstance, Market, MetadataOptions, MpsSettings, RootVolume,
    DEFAULT_MPS_MAX_CLIENTS, DEFAULT_UNHEALTHY_THRESHOLD_PERCENT, LAUNCH_ONLY_ATTRIBUTES,
};
pub use deployments::{
    failure_threshold, service_status, CircuitBreaker, Deployment, DeploymentRecord,
    DeploymentState, DeploymentUpdate, ServiceStatus, DEFAULT_MIN_HEALTHY_SECONDS,
};
pub use desired_ops::UnreadableRecord;
pub use endpoints::{
    annotate_target_health, endpoints, host_addresses, prometheus_sd, reported_task_status,
    Endpoint,
};
pub use health::{
    clean_text, CheckKind, CheckStatus, GpuHealth, HealthCheck, HostHealth, HostNotice, NoticeKind,
    MAX_HOST_GPUS, MAX_REPORT_TASKS, MAX_REPORT_TEXT,
};
pub use host_records::gpus_of;
pub use jobs::with_one_off_jobs;
pub use jobs::{
    job_line, job_status, rerun_failed, AttemptOutcome, IndexState, IndexStatus, Job, JobAttempt,
    JobCounts, JobIndex, JobRecord, JobRun, JobState, JobStatus, JobUpdate, DEFAULT_MAX_RETRIES,
};
pub use launch::{LaunchRecord, RefreshSettings, SettingChange};
pub use live::{
    applied_pool, clamp_inventory, clean_gpu, output_tail, task_healthy, task_usage_rows,
    unhealthy_reason, AppliedResource, CloudHost, EndpointSample, GpuInfo, GpuMode, Host,
    HostReport, HostState, Live, MpsHealth, Revision, StoreState, Task, TaskState, TaskStatus,
    TaskUsage, TaskUsageRow, MAX_LAST_OUTPUT,
};
pub use logs::{
    ContainerLog, LogReply, LogRequest, LOG_REQUEST_SECONDS, MAX_LOG_REPLY_BYTES, MAX_LOG_TAIL,
};
pub use registered::{Hold, HostRegistration, HostSource, REGISTERED_TYPE};
pub use scaling::{
    is_prometheus_name, AutoScaling, MetricScrape, ScalingChange, ScalingMetric, ScalingRecord,
    ScalingTarget, ScalingUpdate, ScrapeChange, DEFAULT_METRICS_PATH, DEFAULT_SCALING_COOLDOWN,
};
pub use secret::{redact, redact_pair, Secret, SENSITIVE, SENSITIVE_CHANGED};
pub use serving::{
    assign_ports, fixed_host_ports, port_text, CheckCommand, ContainerHealthCheck, DockerVolume,
    HealthStatus, HostPortKey, MountPoint, NetworkMode, PortMapping, Protocol, TaskPort, Ulimit,
    Volume, VolumeScope, DEFAULT_HOST_PORT_RANGE, HEALTH_INTERVAL, HEALTH_RETRIES,
    HEALTH_START_PERIOD, HEALTH_TIMEOUT, ULIMIT_NAMES,
};
pub use settings::{
    store_url_issue, CloudKind, LocalAgents, Settings, DEFAULT_BOOT_GRACE_SECONDS,
    DEFAULT_CAPACITY_REFUSAL_SECONDS, DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
};
pub use targets::{
    group_name, task_port, task_target, LoadBalancer, ObservedTarget, Target, TargetGroupObs,
    TargetType,
};

/// Version of every JSON document gpushare prints (`plan --json`, `show --json`, saved plans).
pub const FORMAT_VERSION: &str = "2.0";

/// Where a value came from in the user's configuration, for diagnostics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SourceLoc {
    pub file: String,
    pub line: u32,
    pub col: u32,
}

impl std::fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// The four resource kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    CapacityProvider,
    GpuInstance,
    TaskDefinition,
    Service,
    /// Run-to-completion work (issue 51).
    Job,
}

impl ResourceKind {
    pub const ALL: [ResourceKind; 5] = [
        ResourceKind::CapacityProvider,
        ResourceKind::GpuInstance,
        ResourceKind::TaskDefinition,
        ResourceKind::Service,
        ResourceKind::Job,
    ];
    /// The HCL block name and schema file stem, e.g. `capacity_provider`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::CapacityProvider => "capacity_provider",
            ResourceKind::GpuInstance => "gpu_instance",
            ResourceKind::TaskDefinition => "task_definition",
            ResourceKind::Service => "service",
            ResourceKind::Job => "job",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
    /// Terraform type name, e.g. `gpushare_capacity_provider`.
    pub fn terraform_type(self) -> String {
        format!("gpushare_{}", self.as_str())
    }
}

/// `kind.name`, e.g. `service.embedder`. Ordered so that plans list resources stably.
/// Serialises as the string `kind.name` (so it can key JSON maps).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceAddr {
    pub kind: ResourceKind,
    pub name: String,
}

impl ResourceAddr {
    pub fn new(kind: ResourceKind, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
        }
    }
}

impl std::str::FromStr for ResourceAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, name) = s
            .split_once('.')
            .ok_or_else(|| format!("{s:?} is not of the form kind.name"))?;
        let kind =
            ResourceKind::parse(kind).ok_or_else(|| format!("{kind:?} is not a resource kind"))?;
        if name.is_empty() {
            return Err(format!("{s:?} has an empty name"));
        }
        Ok(ResourceAddr::new(kind, name))
    }
}

impl Serialize for ResourceAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ResourceAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for ResourceAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.kind.as_str(), self.name)
    }
}

// ---------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------
fn is_false(b: &bool) -> bool {
    !*b
}
fn is_true(b: &bool) -> bool {
    *b
}
fn yes() -> bool {
    true
}

/// `mps { memory = MiB, max_compute_percent = P }` inside a container's `gpu` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpsShare {
    /// MiB of GPU memory (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`), >= 1.
    pub memory: u64,
    /// Cap on the share of the GPU's SMs (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`), 1-100.
    #[serde(default)]
    pub max_compute_percent: Option<u8>,
    /// CUDA processes the container starts: each is one client of the GPU's MPS
    /// server, and each is limited to `memory / processes` (MPS limits a process,
    /// not a container). Left out of the stored form at 1.
    #[serde(default = "one_u32", skip_serializing_if = "is_one_u32")]
    pub processes: u32,
}

fn one_u32() -> u32 {
    1
}
fn is_one_u32(n: &u32) -> bool {
    *n == 1
}

/// GPU need of one container: `gpu { count = N }` (whole dedicated GPUs) or
/// `gpu { mps { ... } }` (a share of one GPU). Exactly one of the two is set
/// (checked by the loader).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct GpuSpec {
    #[serde(default)]
    pub count: Option<u32>,
    #[serde(default)]
    pub mps: Option<MpsShare>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Container {
    pub name: String,
    pub image: String,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Environment variables whose values are secret: kept in the store (0600 files,
    /// or etcd) for the host's agent, shown as `(sensitive)` everywhere else.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: BTreeMap<String, Secret>,
    /// CPU units, 1024 = one vCPU, as in ECS.
    #[serde(default)]
    pub cpu: u32,
    /// MiB of host memory.
    #[serde(default)]
    pub memory: u64,
    #[serde(default)]
    pub gpu: Option<GpuSpec>,
    #[serde(default = "yes")]
    pub essential: bool,
    /// `port_mapping { ... }` blocks (serving, issue 47).
    #[serde(
        default,
        rename = "port_mapping",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub port_mappings: Vec<PortMapping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<ContainerHealthCheck>,
    #[serde(default, rename = "mount_point", skip_serializing_if = "Vec::is_empty")]
    pub mount_points: Vec<MountPoint>,
    /// MiB of `/dev/shm` (Docker's default is 64 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_memory_size: Option<u64>,
    #[serde(default, rename = "ulimit", skip_serializing_if = "Vec::is_empty")]
    pub ulimits: Vec<Ulimit>,
    /// Run an init process (Docker's `--init`) that reaps zombies and forwards signals.
    #[serde(default, skip_serializing_if = "is_false")]
    pub init_process_enabled: bool,
    /// Seconds between SIGTERM and SIGKILL when the task stops (the agent's default: 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_timeout: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    /// Replaces the image's entry point (empty: the image's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entry_point: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub docker_labels: BTreeMap<String, String>,
}

impl Default for Container {
    /// An essential container with nothing else set (for building specs in code).
    fn default() -> Self {
        Container {
            name: String::new(),
            image: String::new(),
            command: Vec::new(),
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            cpu: 0,
            memory: 0,
            gpu: None,
            essential: true,
            port_mappings: Vec::new(),
            health_check: None,
            mount_points: Vec::new(),
            shared_memory_size: None,
            ulimits: Vec::new(),
            init_process_enabled: false,
            stop_timeout: None,
            user: None,
            working_directory: None,
            entry_point: Vec::new(),
            docker_labels: BTreeMap::new(),
        }
    }
}

impl Container {
    /// The container's whole environment, secrets included: what the agent gives
    /// the runtime (the loader refuses a key set in both maps).
    pub fn environment(&self) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        for (k, v) in &self.secret_env {
            env.insert(k.clone(), v.expose().to_string());
        }
        env
    }
}

/// `task_definition "FAMILY" { container "NAME" { ... } }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TaskDefinition {
    /// The `container "NAME" { ... }` blocks, in declaration order.
    #[serde(rename = "container")]
    pub containers: Vec<Container>,
    #[serde(default, skip_serializing_if = "NetworkMode::is_bridge")]
    pub network_mode: NetworkMode,
    /// The `volume "NAME" { ... }` blocks the containers' mount points name.
    #[serde(default, rename = "volume", skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
}

/// What one task needs from a host, summed over its containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct TaskShape {
    pub cpu_units: u32,
    pub memory_mib: u64,
    pub gpu: TaskGpu,
}

/// GPU need of a whole task (ECS semantics: all MPS containers of one task share one GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum TaskGpu {
    #[default]
    None,
    Whole {
        count: u32,
    },
    /// `compute_percent` is the sum of the containers' `max_compute_percent`
    /// (0 when none declares one): the share of the GPU's SMs the task may use.
    /// It is reserved on the GPU only when the service or its pool sets
    /// `reserve_compute` (placement's `Request::reserve_compute`). `clients`: the
    /// MPS client processes the task starts (its containers' `processes`; 1 for
    /// tasks recorded before it was counted).
    Mps {
        memory_mib: u64,
        compute_percent: u8,
        capped: bool,
        #[serde(default = "one_u32", skip_serializing_if = "is_one_u32")]
        clients: u32,
    },
}

impl TaskDefinition {
    /// The task's total need. Errors when whole-GPU and MPS needs are mixed (validated at load time).
    pub fn shape(&self) -> Result<TaskShape, ShapeError> {
        let mut shape = TaskShape::default();
        let mut whole = 0u32;
        let mut mps_mem = 0u64;
        let mut mps_compute = 0u32;
        let mut any_mps = false;
        let mut capped = false;
        let mut clients = 0u32;
        for c in &self.containers {
            shape.cpu_units += c.cpu;
            shape.memory_mib += c.memory;
            if let Some(g) = &c.gpu {
                whole += g.count.unwrap_or(0);
                if let Some(m) = &g.mps {
                    any_mps = true;
                    clients += m.processes.max(1);
                    mps_mem += m.memory;
                    if let Some(p) = m.max_compute_percent {
                        capped = true;
                        mps_compute += u32::from(p);
                    }
                }
            }
        }
        if whole > 0 && any_mps {
            return Err(ShapeError::MixedGpuModes);
        }
        if mps_compute > 100 {
            return Err(ShapeError::ComputeOver100 { total: mps_compute });
        }
        shape.gpu = if whole > 0 {
            TaskGpu::Whole { count: whole }
        } else if any_mps {
            TaskGpu::Mps {
                memory_mib: mps_mem,
                compute_percent: mps_compute as u8,
                capped,
                clients,
            }
        } else {
            TaskGpu::None
        };
        Ok(shape)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("a task cannot mix whole GPUs (gpu {{ count }}) and MPS shares (gpu {{ mps }})")]
    MixedGpuModes,
    #[error("the containers' max_compute_percent add up to {total}, over 100")]
    ComputeOver100 { total: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PlacementStrategy {
    /// Fewest GPUs and hosts.
    #[default]
    Binpack,
    /// Spread tasks over hosts.
    Spread,
}

/// `service "NAME" { ... }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Service {
    /// Family name of the task definition.
    pub task_definition: String,
    /// Name of the capacity provider.
    pub capacity_provider: String,
    pub desired_count: u32,
    #[serde(default)]
    pub placement_strategy: PlacementStrategy,
    /// At most one task of this service per host.
    #[serde(default)]
    pub distinct_host: bool,
    /// Allowed instance types (empty = any in the pool).
    #[serde(default)]
    pub instance_types: Vec<String>,
    #[serde(default)]
    pub deployment: Deployment,
    /// Reserve the tasks' `max_compute_percent`: caps of reserving tasks on one
    /// GPU add up to at most 100 (strict isolation). False (the default): the cap
    /// is a limit the host enforces (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`), as in
    /// ECS, and placement goes by GPU memory. The pool's `reserve_compute = true`
    /// applies to every service in it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reserve_compute: bool,
    /// `load_balancer { ... }` blocks: the ELBv2 target groups its tasks are
    /// registered with once healthy, and deregistered from before they stop.
    #[serde(
        default,
        rename = "load_balancer",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub load_balancers: Vec<LoadBalancer>,
    /// `auto_scaling { ... }`: target tracking between `min_count` and `max_count`;
    /// `desired_count` is then the starting count (docs/autoscaling.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_scaling: Option<AutoScaling>,
}

/// Everything the user's configuration asks for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Desired {
    pub settings: Settings,
    pub capacity_providers: BTreeMap<String, CapacityProvider>,
    pub gpu_instances: BTreeMap<String, GpuInstance>,
    pub task_definitions: BTreeMap<String, TaskDefinition>,
    pub services: BTreeMap<String, Service>,
    /// Jobs (issue 51): runs to completion.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub jobs: BTreeMap<String, Job>,
    /// Where each resource was declared (for diagnostics and plan output).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub locations: BTreeMap<String, SourceLoc>,
}

impl Desired {
    /// Whether the tasks of `service` in pool `pool` reserve their compute caps
    /// ([`reserves_compute`]); a name not declared counts as not reserving.
    pub fn reserves_compute(&self, service: &str, pool: &str) -> bool {
        reserves_compute(
            self.services
                .get(service)
                .is_some_and(|s| s.reserve_compute),
            self.capacity_providers
                .get(pool)
                .is_some_and(|p| p.reserve_compute),
        )
    }

    /// Every resource as (address, attributes as a JSON object keyed by schema attribute name).
    pub fn resources(&self) -> BTreeMap<ResourceAddr, serde_json::Value> {
        let mut out = BTreeMap::new();
        let mut put = |kind, name: &String, v: serde_json::Result<serde_json::Value>| {
            // Serialising plain structs of strings and numbers cannot fail.
            if let Ok(v) = v {
                out.insert(ResourceAddr::new(kind, name.clone()), v);
            }
        };
        for (n, r) in &self.capacity_providers {
            put(ResourceKind::CapacityProvider, n, serde_json::to_value(r));
        }
        for (n, r) in &self.gpu_instances {
            put(ResourceKind::GpuInstance, n, serde_json::to_value(r));
        }
        for (n, r) in &self.task_definitions {
            put(ResourceKind::TaskDefinition, n, serde_json::to_value(r));
        }
        for (n, r) in &self.services {
            put(ResourceKind::Service, n, serde_json::to_value(r));
        }
        for (n, r) in &self.jobs {
            put(ResourceKind::Job, n, serde_json::to_value(r));
        }
        out
    }
}

#[cfg(test)]
mod tests;
