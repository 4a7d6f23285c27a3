//! A capacity provider (pool) and its hosts' launch settings: MPS, instance
//! metadata, root volume, the agent binary, the market; and `gpu_instance`.

use super::launch::RefreshSettings;
use super::registered::HostSource;
use super::serving::DEFAULT_HOST_PORT_RANGE;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MpsSettings {
    #[serde(default = "super::yes")]
    pub enabled: bool,
    /// Default `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` for clients that declare none.
    #[serde(default)]
    pub default_active_thread_percentage: Option<u8>,
    #[serde(default = "default_pipe_dir")]
    pub pipe_directory: String,
    #[serde(default = "default_log_dir")]
    pub log_directory: String,
    /// The most client processes one GPU's MPS server takes (issue 50): NVIDIA's
    /// limit is 48 on Volta-class GPUs (60 on newer ones); the planner puts no more
    /// MPS processes on a GPU. Left out of the stored form at its default.
    #[serde(
        default = "default_max_clients",
        skip_serializing_if = "is_default_max_clients"
    )]
    pub max_clients: u32,
    /// The user id every MPS container runs as (issue 50): an MPS server runs as
    /// one user, and clients of another user wait for its clients to finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<u32>,
}

/// NVIDIA's MPS client limit on Volta-class GPUs, the least of the generations.
pub const DEFAULT_MPS_MAX_CLIENTS: u32 = 48;
fn default_max_clients() -> u32 {
    DEFAULT_MPS_MAX_CLIENTS
}
fn is_default_max_clients(n: &u32) -> bool {
    *n == DEFAULT_MPS_MAX_CLIENTS
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
            max_clients: DEFAULT_MPS_MAX_CLIENTS,
            user: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetadataOptions {
    #[serde(default = "super::yes")]
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
    #[serde(default = "super::yes")]
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
}

fn default_agent_path() -> String {
    "/usr/local/bin/gpushare".into()
}

impl Default for AgentSource {
    fn default() -> Self {
        Self {
            url: None,
            sha256: None,
            path: default_agent_path(),
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

/// The attributes of a capacity provider that only launching hosts uses (sizing,
/// markets, the EC2 launch settings and the bootstrap's agent): a registered pool's
/// hosts join by themselves, so its plans and pages leave them out.
pub const LAUNCH_ONLY_ATTRIBUTES: [&str; 14] = [
    "min_size",
    "max_size",
    "instance_types",
    "market",
    "max_price",
    "image",
    "subnets",
    "security_groups",
    "instance_profile",
    "key_name",
    "metadata_options",
    "root_volume",
    "agent",
    "tags",
];

/// Whether a capacity provider's attributes (as JSON) make it a registered pool.
pub fn is_registered_attrs(attrs: &serde_json::Value) -> bool {
    attrs.get("hosts").and_then(serde_json::Value::as_str) == Some("registered")
}

/// `capacity_provider "NAME" { ... }`: a pool of identical GPU hosts, sized by the planner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityProvider {
    /// Launched pools: the instance type. Registered pools: empty (any host), or
    /// the only instance type hosts may join with.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_type: String,
    /// Launched by gpushare (the default) or registered: hosts that join by themselves.
    #[serde(default, skip_serializing_if = "HostSource::is_launched")]
    pub hosts: HostSource,
    /// Registered pools: what one host costs per hour, USD, a decimal string (unset: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_hourly_cost: Option<String>,
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
    /// Required for launched pools (checked by the loader); unused by registered ones.
    #[serde(default)]
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
    /// When more than this share of the pool's hosts (in percent) are silent or
    /// impaired at once, none is replaced for being silent: a mass silence is more
    /// likely the control plane's or the network's fault than the hosts' (Kubernetes'
    /// `--unhealthy-zone-threshold`). Left out at its default, so that pools stored
    /// before it existed compare equal.
    #[serde(
        default = "default_unhealthy_threshold",
        skip_serializing_if = "is_default_unhealthy_threshold"
    )]
    pub unhealthy_threshold_percent: u8,
    /// How outdated hosts roll (`refresh { ... }`; see docs/refresh.md).
    #[serde(default, skip_serializing_if = "RefreshSettings::is_default")]
    pub refresh: RefreshSettings,
    /// Reserve compute for every MPS task of the pool: the `max_compute_percent`
    /// caps of the tasks on one GPU add up to at most 100. False (the default):
    /// a cap is only a limit the host enforces, as in ECS, and tasks are placed
    /// by GPU memory alone. See [`reserves_compute`].
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub reserve_compute: bool,
    /// Replace a host whose health checks find it impaired, and move the tasks off an
    /// impaired GPU (the default). False (ECS's `actionsStatus = DISABLED`): every host
    /// is kept and its health only reported. Left out when true, so that pools stored
    /// before it existed compare equal.
    #[serde(default = "super::yes", skip_serializing_if = "super::is_true")]
    pub auto_repair: bool,
    /// Run the deep GPU diagnostic (`dcgmi diag -r 1`, when DCGM is installed) once at
    /// first boot, before the host takes tasks; a failure impairs the host.
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub deep_check: bool,
    /// Where the planner takes dynamic host ports from (`"FROM-TO"`; unset: ECS's
    /// 49153-65535, [`DEFAULT_HOST_PORT_RANGE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_port_range: Option<String>,
}

impl CapacityProvider {
    /// The pool's dynamic host port range ([`parse_port_range`]; the default when unset or invalid).
    pub fn port_range(&self) -> (u16, u16) {
        self.host_port_range
            .as_deref()
            .and_then(|r| parse_port_range(r).ok())
            .unwrap_or(DEFAULT_HOST_PORT_RANGE)
    }
}

/// `"FROM-TO"`, 1 <= FROM <= TO <= 65535.
pub fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("{s:?} is not a port range \"FROM-TO\" with 1 <= FROM <= TO <= 65535");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok((a, b))
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

/// Default [`CapacityProvider::unhealthy_threshold_percent`].
pub const DEFAULT_UNHEALTHY_THRESHOLD_PERCENT: u8 = 50;

fn default_unhealthy_threshold() -> u8 {
    DEFAULT_UNHEALTHY_THRESHOLD_PERCENT
}

fn is_default_unhealthy_threshold(p: &u8) -> bool {
    *p == DEFAULT_UNHEALTHY_THRESHOLD_PERCENT
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

/// A `max_price` as a number of USD: a decimal (digits, at most one point) above 0.
pub fn parse_price(s: &str) -> Option<f64> {
    let s = s.trim();
    let decimal = !s.is_empty()
        && s.chars().all(|c| c.is_ascii_digit() || c == '.')
        && s.matches('.').count() <= 1;
    let p: f64 = s.parse().ok().filter(|_| decimal)?;
    (p > 0.0 && p.is_finite()).then_some(p)
}
