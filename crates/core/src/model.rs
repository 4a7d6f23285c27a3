//! The resource model: what the user wants ([`Desired`]), what exists ([`Live`]),
//! and the shapes both are made of.
//!
//! Desired resources are typed structs that serialise (serde) to a flat JSON
//! object whose keys are exactly the schema's attribute names (see
//! `schemas/*.json`). The planner diffs resources attribute by attribute on that
//! JSON form, using the schema to know which attributes force replacement.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of every JSON document gpushare prints (`plan --json`, `show --json`, saved plans).
pub const FORMAT_VERSION: &str = "1.0";

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
}

impl ResourceKind {
    pub const ALL: [ResourceKind; 4] = [
        ResourceKind::CapacityProvider,
        ResourceKind::GpuInstance,
        ResourceKind::TaskDefinition,
        ResourceKind::Service,
    ];
    /// The HCL block name and schema file stem, e.g. `capacity_provider`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::CapacityProvider => "capacity_provider",
            ResourceKind::GpuInstance => "gpu_instance",
            ResourceKind::TaskDefinition => "task_definition",
            ResourceKind::Service => "service",
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
// Settings
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CloudKind {
    #[default]
    Local,
    Ec2,
}

impl CloudKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CloudKind::Local => "local",
            CloudKind::Ec2 => "ec2",
        }
    }
}

/// Who runs the agents of the local simulated fleet's hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LocalAgents {
    /// gpushare runs them in-process, a round before every plan and after every apply
    /// (simulated runtime, stand-in GPUs and MPS daemon).
    #[default]
    InProcess,
    /// Each host's `gpushare agent` runs as a process of its own, started by the user
    /// or a test; hosts whose agent has not reported show so.
    External,
}

/// The `gpushare { ... }` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub cluster: String,
    #[serde(default)]
    pub cloud: CloudKind,
    /// Store URL: `file://DIR` (default `DIR/.gpushare/` next to the config) or `etcd://host:port`.
    #[serde(default)]
    pub store: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    /// EC2 endpoint override (also read from AWS_ENDPOINT_URL_EC2 / AWS_ENDPOINT_URL).
    #[serde(default)]
    pub ec2_endpoint: Option<String>,
    /// Seed for every random choice the planner makes (placement tie-breaks, ids).
    #[serde(default)]
    pub seed: u64,
    /// How long to wait for the store lock, in seconds.
    #[serde(default = "default_lock_timeout")]
    pub lock_timeout_seconds: u64,
    /// Local cloud: who runs the simulated hosts' agents.
    #[serde(default)]
    pub local_agents: LocalAgents,
    /// Tags on every launched host and its volumes, under the pool's and the host's
    /// own tags (the more specific wins on a key).
    #[serde(default)]
    pub default_tags: BTreeMap<String, String>,
    /// How long after its recorded launch a host that the cloud does not list yet is
    /// taken for eventual consistency (pending), not for gone, in seconds.
    #[serde(default = "default_consistency_window")]
    pub consistency_window_seconds: u64,
    /// How long apply waits for a moved task's successor to be reported running by
    /// its agent before it stops the old task anyway, in seconds (0: no wait).
    #[serde(default = "default_move_timeout")]
    pub move_timeout_seconds: u64,
}

fn default_consistency_window() -> u64 {
    300
}

fn default_move_timeout() -> u64 {
    600
}

fn default_lock_timeout() -> u64 {
    30
}

impl Settings {
    /// Settings from a Terraform provider block's attributes (as JSON, nulls for
    /// unset ones; see `schema::provider_schema`): `state_dir = DIR` is
    /// `store = "file://DIR"` (it wins over `store`), `endpoints = { ec2 = URL }`
    /// is `ec2_endpoint`, `cluster` defaults to "default".
    pub fn from_provider_block(
        mut obj: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Settings, serde_json::Error> {
        use serde_json::Value;
        if let Some(Value::String(dir)) = obj.remove("state_dir") {
            obj.insert("store".into(), Value::String(format!("file://{dir}")));
        }
        if let Some(url) = obj
            .remove("endpoints")
            .and_then(|e| e.get("ec2").and_then(|u| u.as_str()).map(str::to_string))
        {
            obj.insert("ec2_endpoint".into(), Value::String(url));
        }
        obj.retain(|_, v| !v.is_null());
        obj.entry("cluster")
            .or_insert_with(|| Value::String("default".into()));
        serde_json::from_value(Value::Object(obj))
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            cluster: "default".into(),
            cloud: CloudKind::Local,
            store: None,
            region: None,
            ec2_endpoint: None,
            seed: 0,
            lock_timeout_seconds: default_lock_timeout(),
            local_agents: LocalAgents::InProcess,
            default_tags: BTreeMap::new(),
            consistency_window_seconds: default_consistency_window(),
            move_timeout_seconds: default_move_timeout(),
        }
    }
}

// ---------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MpsSettings {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Default `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` for clients that declare none.
    #[serde(default)]
    pub default_active_thread_percentage: Option<u8>,
    #[serde(default = "default_pipe_dir")]
    pub pipe_directory: String,
    #[serde(default = "default_log_dir")]
    pub log_directory: String,
}

fn yes() -> bool {
    true
}
fn default_pipe_dir() -> String {
    "/run/gpushare-mps/pipe".into()
}
fn default_log_dir() -> String {
    "/run/gpushare-mps/log".into()
}

impl Default for MpsSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            default_active_thread_percentage: None,
            pipe_directory: default_pipe_dir(),
            log_directory: default_log_dir(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetadataOptions {
    #[serde(default = "yes")]
    pub http_tokens_required: bool,
    #[serde(default = "one")]
    pub http_put_response_hop_limit: u8,
}

fn one() -> u8 {
    1
}

impl Default for MetadataOptions {
    fn default() -> Self {
        Self {
            http_tokens_required: true,
            http_put_response_hop_limit: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootVolume {
    #[serde(default = "default_root_size")]
    pub size_gib: u32,
    #[serde(default = "default_volume_type")]
    pub volume_type: String,
    #[serde(default = "yes")]
    pub encrypted: bool,
}

fn default_root_size() -> u32 {
    100
}
fn default_volume_type() -> String {
    "gp3".into()
}

impl Default for RootVolume {
    fn default() -> Self {
        Self {
            size_gib: default_root_size(),
            volume_type: default_volume_type(),
            encrypted: true,
        }
    }
}

/// Where the agent binary comes from on a launched host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSource {
    /// URL to download `gpushare` from; `None` = already in the image at `path`.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default = "default_agent_path")]
    pub path: String,
    /// File on the host with the agent's store credentials (`GPUSHARE_ETCD_*` lines,
    /// readable by root only); never part of the user data.
    #[serde(default = "default_credentials_file")]
    pub credentials_file: String,
}

fn default_agent_path() -> String {
    "/usr/local/bin/gpushare".into()
}

fn default_credentials_file() -> String {
    "/etc/gpushare/agent.env".into()
}

impl Default for AgentSource {
    fn default() -> Self {
        Self {
            url: None,
            sha256: None,
            path: default_agent_path(),
            credentials_file: default_credentials_file(),
        }
    }
}

/// EC2 purchasing option of a pool's hosts (`capacity_provider { market }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Market {
    #[default]
    OnDemand,
    /// One-time Spot requests, the instance terminated when EC2 interrupts it.
    Spot,
}

impl Market {
    pub fn as_str(self) -> &'static str {
        match self {
            Market::OnDemand => "on_demand",
            Market::Spot => "spot",
        }
    }

    pub fn is_on_demand(&self) -> bool {
        *self == Market::OnDemand
    }
}

/// `capacity_provider "NAME" { ... }`: a pool of identical GPU hosts, sized by the planner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityProvider {
    pub instance_type: String,
    /// Fallback instance types, in priority order, tried after `instance_type` on a
    /// capacity error (same GPU model and count, at least its vCPUs and memory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<String>,
    #[serde(default, skip_serializing_if = "Market::is_on_demand")]
    pub market: Market,
    /// Spot only: the most to pay per host and hour, USD, a decimal string as EC2's
    /// `MaxPrice` takes it (checked by [`crate::pool::parse_price`]); `None` = the
    /// On-Demand price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price: Option<String>,
    #[serde(default)]
    pub min_size: u32,
    pub max_size: u32,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub subnets: Vec<String>,
    #[serde(default)]
    pub security_groups: Vec<String>,
    #[serde(default)]
    pub instance_profile: Option<String>,
    #[serde(default)]
    pub key_name: Option<String>,
    #[serde(default)]
    pub mps: MpsSettings,
    #[serde(default)]
    pub metadata_options: MetadataOptions,
    #[serde(default)]
    pub root_volume: RootVolume,
    #[serde(default)]
    pub agent: AgentSource,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Largest share of the pool's hosts replaced (drained) at once, in percent.
    #[serde(default = "default_max_draining")]
    pub max_draining_percent: u8,
    /// Reserve compute for every MPS task of the pool: the `max_compute_percent`
    /// caps of the tasks on one GPU add up to at most 100. False (the default):
    /// a cap is only a limit the host enforces, as in ECS, and tasks are placed
    /// by GPU memory alone. See [`reserves_compute`].
    #[serde(default, skip_serializing_if = "is_false")]
    pub reserve_compute: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl CapacityProvider {
    /// Every instance type the pool may launch, in priority order: `instance_type`,
    /// then its `instance_types` fallbacks.
    pub fn launch_types(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.instance_type.as_str())
            .chain(self.instance_types.iter().map(String::as_str))
    }

    /// Whether a host of `instance_type` belongs in this pool as configured.
    pub fn allows_type(&self, instance_type: &str) -> bool {
        self.launch_types().any(|t| t == instance_type)
    }
}

/// Whether a task of a service with `reserve_compute = service` in a pool with
/// `reserve_compute = pool` reserves its compute cap: when either says so (a
/// service cannot opt out of its pool's strict isolation).
pub fn reserves_compute(service: bool, pool: bool) -> bool {
    service || pool
}

fn default_max_draining() -> u8 {
    25
}

/// `gpu_instance "NAME" { ... }`: one named host pinned in a capacity provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInstance {
    pub capacity_provider: String,
    /// Defaults to the pool's instance type.
    #[serde(default)]
    pub instance_type: Option<String>,
    #[serde(default)]
    pub availability_zone: Option<String>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// `mps { memory = MiB, max_compute_percent = P }` inside a container's `gpu` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpsShare {
    /// MiB of GPU memory (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`), >= 1.
    pub memory: u64,
    /// Cap on the share of the GPU's SMs (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`), 1-100.
    #[serde(default)]
    pub max_compute_percent: Option<u8>,
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

/// What a secret value is shown as, in plans, `show` and logs.
pub const SENSITIVE: &str = "(sensitive)";
/// What a secret value that a plan changes is shown as (its old value is [`SENSITIVE`]).
pub const SENSITIVE_CHANGED: &str = "(sensitive, changed)";

/// A secret string (a `secret_env` value). Serialised as itself, because the store
/// keeps it for the host's agent; `Debug` and `Display` show [`SENSITIVE`], so a
/// secret never reaches a log line or a message by formatting.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }
    /// The secret itself, for the one place that needs it (the container's environment).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(SENSITIVE)
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(SENSITIVE)
    }
}

/// Replaces every value under a `secret_env` key anywhere in `v` with [`SENSITIVE`]:
/// for JSON shown to users (`plan --json`, `show --json`) built from values that
/// hold secrets.
pub fn redact(v: &mut serde_json::Value) {
    redact_in(v, None);
}

/// Redacts `after` as [`redact`] does, but marks each secret whose value differs from
/// the same secret in `before` (matched by object key, and by `name` in lists of
/// named objects such as containers; absent counts as different) as
/// [`SENSITIVE_CHANGED`]: a plan's diff then shows that a secret changes without
/// showing it. Redact `before` itself with [`redact`].
pub fn redact_pair(before: &serde_json::Value, after: &mut serde_json::Value) {
    redact_in(after, Some(Some(before)));
}

/// `compare`: `None` to redact plainly; `Some(old)` to compare with `old` (`Some(None)`:
/// there is no old value at this place).
fn redact_in(v: &mut serde_json::Value, compare: Option<Option<&serde_json::Value>>) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                let old = compare.map(|o| o.and_then(|o| o.get(k)));
                if k == "secret_env" {
                    if let Value::Object(secrets) = v {
                        for (name, value) in secrets.iter_mut() {
                            let shown = match old {
                                Some(o) if o.and_then(|o| o.get(name)) != Some(&*value) => {
                                    SENSITIVE_CHANGED
                                }
                                _ => SENSITIVE,
                            };
                            *value = Value::String(shown.into());
                        }
                    }
                } else {
                    redact_in(v, old);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let old = compare.map(|o| {
                    o.and_then(|o| match item.get("name") {
                        Some(n) => o.as_array()?.iter().find(|x| x.get("name") == Some(n)),
                        None => o.get(i),
                    })
                });
                redact_in(item, old);
            }
        }
        _ => {}
    }
}

/// `task_definition "FAMILY" { container "NAME" { ... } }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDefinition {
    /// The `container "NAME" { ... }` blocks, in declaration order.
    #[serde(rename = "container")]
    pub containers: Vec<Container>,
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
    /// `reserve_compute` (placement's `Request::reserve_compute`).
    Mps {
        memory_mib: u64,
        compute_percent: u8,
        capped: bool,
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
        for c in &self.containers {
            shape.cpu_units += c.cpu;
            shape.memory_mib += c.memory;
            if let Some(g) = &c.gpu {
                whole += g.count.unwrap_or(0);
                if let Some(m) = &g.mps {
                    any_mps = true;
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployment {
    #[serde(default = "default_max_surge")]
    pub max_surge_percent: u32,
    #[serde(default = "default_min_healthy")]
    pub min_healthy_percent: u32,
}

fn default_max_surge() -> u32 {
    100
}
fn default_min_healthy() -> u32 {
    100
}

impl Default for Deployment {
    fn default() -> Self {
        Self {
            max_surge_percent: default_max_surge(),
            min_healthy_percent: default_min_healthy(),
        }
    }
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
}

/// Everything the user's configuration asks for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Desired {
    pub settings: Settings,
    pub capacity_providers: BTreeMap<String, CapacityProvider>,
    pub gpu_instances: BTreeMap<String, GpuInstance>,
    pub task_definitions: BTreeMap<String, TaskDefinition>,
    pub services: BTreeMap<String, Service>,
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
        out
    }
}

// ---------------------------------------------------------------------------
// Live objects
// ---------------------------------------------------------------------------

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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_addr_round_trips_as_a_json_map_key() {
        let mut m = BTreeMap::new();
        m.insert(ResourceAddr::new(ResourceKind::Service, "embedder"), 1);
        let j = serde_json::to_string(&m).expect("serialises");
        assert_eq!(j, r#"{"service.embedder":1}"#);
        let back: BTreeMap<ResourceAddr, i32> = serde_json::from_str(&j).expect("parses");
        assert_eq!(back, m);
        assert!("nope.x".parse::<ResourceAddr>().is_err());
        assert!("service.".parse::<ResourceAddr>().is_err());
    }

    fn container(gpu: Option<GpuSpec>) -> Container {
        Container {
            name: "c".into(),
            image: "i".into(),
            command: vec![],
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            cpu: 1024,
            memory: 512,
            gpu,
            essential: true,
        }
    }

    #[test]
    fn task_shape_sums_mps_containers_and_rejects_mixing() {
        let mps = |m, p| {
            Some(GpuSpec {
                count: None,
                mps: Some(MpsShare {
                    memory: m,
                    max_compute_percent: p,
                }),
            })
        };
        let td = TaskDefinition {
            containers: vec![
                container(mps(1000, Some(20))),
                container(mps(500, None)),
                container(None),
            ],
        };
        let s = td.shape().expect("valid");
        assert_eq!(s.cpu_units, 3072);
        assert_eq!(s.memory_mib, 1536);
        assert_eq!(
            s.gpu,
            TaskGpu::Mps {
                memory_mib: 1500,
                compute_percent: 20,
                capped: true
            }
        );
        let mixed = TaskDefinition {
            containers: vec![
                container(mps(1000, None)),
                container(Some(GpuSpec {
                    count: Some(1),
                    mps: None,
                })),
            ],
        };
        assert_eq!(mixed.shape(), Err(ShapeError::MixedGpuModes));
    }
}
