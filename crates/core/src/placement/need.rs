//! A request compiled against a cluster's interned names ([`Need`]: cheap to
//! test against every host), and the expected task shapes ([`Typical`]) that
//! the fragmentation scores weigh.
//!
//! GPU shares are measured in thousandths of one GPU ("milli"), as in the FGD
//! paper: an MPS task holding `m` MiB of a GPU with `M` MiB uses `1000 * m / M`.

use super::input::Request;
use crate::model::{HostPortKey, TaskGpu};
use std::collections::HashMap;

/// The GPU part of a compiled need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuNeed {
    None,
    /// `count` idle GPUs on one host, each becoming dedicated.
    Whole(u32),
    /// One GPU in MPS mode with `memory_mib` free and `compute` percent of compute
    /// left (`compute`: the reserved share, 0 when the task does not reserve compute),
    /// and room for `clients` more MPS client processes.
    Mps {
        memory_mib: u64,
        compute: u32,
        clients: u32,
    },
}

/// A request compiled against a cluster's interned names (cheap to test per host).
#[derive(Debug, Clone, PartialEq)]
pub struct Need {
    /// Interned shape (equal needs share it): keys the per-host score cache.
    pub(super) shape: u32,
    pub cpu: u32,
    pub memory_mib: u64,
    pub gpu: GpuNeed,
    pub(super) pool: u32,
    pub(super) service: u32,
    pub(super) distinct_host: bool,
    /// Allowed instance types (empty = any).
    pub(super) instance_types: Vec<u32>,
    /// Allowed GPU models (empty = any).
    pub(super) models: Vec<u32>,
    /// Host ports the task needs (`Request::host_ports`).
    pub(super) ports: Vec<HostPortKey>,
}

impl Need {
    pub fn instance_types_allow(&self, t: u32) -> bool {
        self.instance_types.is_empty() || self.instance_types.contains(&t)
    }
    pub fn models_allow(&self, m: u32) -> bool {
        self.models.is_empty() || self.models.contains(&m)
    }
    /// Whether a host whose tasks hold `held` lacks a port this task needs.
    pub fn port_taken(&self, held: &std::collections::BTreeSet<HostPortKey>) -> bool {
        self.ports.iter().any(|p| held.contains(p))
    }
    /// Whether `distinct_host` forbids a host running `services`.
    pub fn blocks_host_with(&self, services: &[u32]) -> bool {
        self.distinct_host && services.contains(&self.service)
    }
    /// GPU demand in thousandths of a GPU (whole GPUs count 1000 each; an MPS
    /// share is relative to `gpu_memory_mib`).
    pub fn gpu_milli(&self, gpu_memory_mib: u64) -> u64 {
        match self.gpu {
            GpuNeed::None => 0,
            GpuNeed::Whole(k) => 1000 * u64::from(k),
            GpuNeed::Mps { memory_mib, .. } => milli_of(memory_mib, gpu_memory_mib),
        }
    }

    /// Whether `self` and `other` are one shape as the typical shapes count them.
    fn same_shape(&self, other: &Need) -> bool {
        self.cpu == other.cpu
            && self.memory_mib == other.memory_mib
            && self.gpu == other.gpu
            && self.models == other.models
            && self.pool == other.pool
            && self.instance_types == other.instance_types
    }
}

/// `memory_mib` of a GPU with `gpu_memory_mib` in thousandths of it, rounded up.
pub(super) fn milli_of(memory_mib: u64, gpu_memory_mib: u64) -> u64 {
    (memory_mib * 1000).div_ceil(gpu_memory_mib.max(1))
}

/// A task shape weighted by how often it is expected (FGD's "typical pods").
#[derive(Debug, Clone, PartialEq)]
pub struct Typical {
    pub need: Need,
    pub weight: f64,
}

impl Typical {
    /// Typical shapes from a list of needs: each distinct shape weighted by its count.
    pub fn from_needs(needs: &[Need]) -> Vec<Typical> {
        let mut out: Vec<Typical> = Vec::new();
        // Equal compiled shapes are one typical shape; the first need of each
        // `same_shape` class stands for it (in order of first appearance).
        let mut by_shape: HashMap<u32, usize> = HashMap::new();
        for n in needs {
            let at = *by_shape.entry(n.shape).or_insert_with(|| {
                out.iter()
                    .position(|t| t.need.same_shape(n))
                    .unwrap_or_else(|| {
                        out.push(Typical {
                            need: n.clone(),
                            weight: 0.0,
                        });
                        out.len() - 1
                    })
            });
            out[at].weight += 1.0;
        }
        out
    }
}

#[derive(Default, Debug, Clone)]
pub(super) struct Interner {
    pub(super) ids: HashMap<String, u32>,
    pub(super) names: Vec<String>,
}

impl Interner {
    pub(super) fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.names.len() as u32;
        self.ids.insert(s.to_string(), i);
        self.names.push(s.to_string());
        i
    }
}

type ShapeKey = (
    u32,
    u64,
    GpuNeed,
    u32,
    u32,
    bool,
    Vec<u32>,
    Vec<u32>,
    Vec<HostPortKey>,
);

/// The names a cluster interns, so that a host test compares numbers, and the
/// shapes compiled so far.
#[derive(Default, Debug, Clone)]
pub(super) struct Names {
    pub(super) pools: Interner,
    pub(super) types: Interner,
    pub(super) models: Interner,
    pub(super) services: Interner,
    shapes: HashMap<ShapeKey, u32>,
}

impl Names {
    /// Compile a request against these names.
    pub(super) fn compile(&mut self, r: &Request) -> Need {
        let gpu = match r.shape.gpu {
            TaskGpu::None => GpuNeed::None,
            TaskGpu::Whole { count } => GpuNeed::Whole(count),
            TaskGpu::Mps {
                memory_mib,
                compute_percent,
                clients,
                ..
            } => GpuNeed::Mps {
                memory_mib,
                clients: clients.max(1),
                // A cap that is not reserved is a limit only: it takes nothing.
                compute: if r.reserve_compute {
                    u32::from(compute_percent)
                } else {
                    0
                },
            },
        };
        let pool = self.pools.id(&r.pool);
        let service = self.services.id(&r.service);
        let instance_types: Vec<u32> = r.instance_types.iter().map(|t| self.types.id(t)).collect();
        let models: Vec<u32> = r.gpu_models.iter().map(|m| self.models.id(m)).collect();
        let key = (
            r.shape.cpu_units,
            r.shape.memory_mib,
            gpu,
            pool,
            service,
            r.distinct_host,
            instance_types.clone(),
            models.clone(),
            r.host_ports.clone(),
        );
        let next = self.shapes.len() as u32;
        let shape = *self.shapes.entry(key).or_insert(next);
        Need {
            shape,
            cpu: r.shape.cpu_units,
            memory_mib: r.shape.memory_mib,
            gpu,
            pool,
            service,
            distinct_host: r.distinct_host,
            instance_types,
            models,
            ports: r.host_ports.clone(),
        }
    }
}
