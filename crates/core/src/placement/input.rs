//! What the engine is given: the pools it may grow, the hosts with their load,
//! and the tasks to place.

use crate::catalog::InstanceType;
use crate::facts::InstanceFacts;
use crate::model::{HostPortKey, PlacementStrategy, TaskShape};
use serde::{Deserialize, Serialize};

/// The shape of one host of an instance type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceShape {
    pub instance_type: String,
    pub gpu_model: String,
    pub gpu_count: u32,
    pub gpu_memory_mib: u64,
    pub cpu_units: u32,
    pub memory_mib: u64,
    /// On-demand USD per hour (`None`: unknown).
    pub price_per_hour: Option<f64>,
}

// The placement shapes of the catalogue's and the cloud's instance figures, defined
// here so the catalogue and the facts stay below placement.
impl InstanceType {
    /// The shape the placement engine works with.
    pub fn shape(&self) -> InstanceShape {
        InstanceShape {
            instance_type: self.name.to_string(),
            gpu_model: self.gpu_model.to_string(),
            gpu_count: self.gpu_count,
            gpu_memory_mib: self.gpu_memory_mib,
            cpu_units: self.cpu_units(),
            memory_mib: self.memory_mib,
            price_per_hour: self.price_per_hour,
        }
    }
}

impl InstanceFacts {
    /// `shape` with the cloud's figures in place of the catalogue's.
    pub fn apply_to(&self, shape: &mut InstanceShape) {
        shape.gpu_count = self.gpu_count;
        shape.gpu_memory_mib = self.gpu_memory_mib;
        shape.cpu_units = self.vcpus * 1024;
        shape.memory_mib = self.memory_mib;
    }
}

/// A pool the engine may grow (up to `max_size`) or must keep (`min_size`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSpec {
    pub name: String,
    pub shape: InstanceShape,
    pub min_size: u32,
    pub max_size: u32,
    pub mps_enabled: bool,
    /// The most MPS client processes one GPU takes (`mps { max_clients }`).
    #[serde(default = "default_max_clients")]
    pub max_clients: u32,
}

fn default_max_clients() -> u32 {
    crate::model::DEFAULT_MPS_MAX_CLIENTS
}

/// Load of one GPU of an existing host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuLoad {
    pub index: u32,
    pub model: String,
    pub memory_mib: u64,
    pub used_memory_mib: u64,
    /// The compute shares reserved on the GPU: the sum of the `max_compute_percent`
    /// of the tasks there that reserve compute (`reserve_compute`); caps of the
    /// other tasks are limits only and not counted.
    pub used_compute_percent: u32,
    pub mode: crate::model::GpuMode,
    pub tasks: u32,
    /// MPS client processes on it (its MPS tasks' `clients`).
    #[serde(default)]
    pub clients: u32,
    /// The most its MPS server takes (its pool's `mps { max_clients }`).
    #[serde(default = "default_max_clients")]
    pub max_clients: u32,
}

/// An existing host with what is already placed on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostLoad {
    pub id: String,
    pub pool: String,
    pub instance_type: String,
    pub zone: Option<String>,
    pub gpus: Vec<GpuLoad>,
    pub cpu_units: u32,
    pub used_cpu_units: u32,
    pub memory_mib: u64,
    pub used_memory_mib: u64,
    /// False for hosts that take no new tasks (impaired MPS, draining, retiring).
    pub accepting: bool,
    /// False when MPS is impaired or disabled: no MPS task may be placed there.
    pub mps_ok: bool,
    /// Services with at least one task on this host (for `distinct_host`).
    pub services: Vec<String>,
    /// Host ports its tasks hold (a task needing one of them cannot go here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPortKey>,
}

/// One task to place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Caller's key (the planned task id).
    pub key: String,
    pub service: String,
    pub pool: String,
    pub shape: TaskShape,
    pub strategy: PlacementStrategy,
    pub distinct_host: bool,
    /// Allowed instance types (empty = any).
    pub instance_types: Vec<String>,
    /// Allowed GPU models (empty = any), e.g. the openb trace's `gpu_spec`.
    #[serde(default)]
    pub gpu_models: Vec<String>,
    /// Whether the task's `max_compute_percent` is reserved on its GPU (the
    /// reserved shares of a GPU add up to at most 100). False, as in ECS: the cap
    /// is a limit the host enforces and an MPS task is placed by GPU memory alone.
    #[serde(default)]
    pub reserve_compute: bool,
    /// Host ports the task needs whatever host it lands on (fixed `host_port`s,
    /// host-mode ports): no two tasks holding one share a host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPortKey>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementInput {
    pub pools: Vec<PoolSpec>,
    pub hosts: Vec<HostLoad>,
    pub requests: Vec<Request>,
    pub seed: u64,
}
