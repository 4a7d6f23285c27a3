//! The incremental placement engine: a [`Cluster`] of hosts whose GPUs, CPU and
//! memory are tracked as tasks are committed, and the scoring policies that pick
//! a host and GPUs for one task at a time ([`Cluster::place_one`]).
//!
//! Both [`super::place`] (the planner's entry point) and the openb benchmark
//! (`gpushare-bench`) drive this code; the benchmark's baselines are policies here
//! too, so every policy is measured through the same feasibility rules.
//!
//! GPU shares are measured in thousandths of one GPU ("milli"), as in the FGD
//! paper: an MPS task holding `m` MiB of a GPU with `M` MiB uses `1000 * m / M`.

use super::patterns::{self, Held, Plan};
use super::{GpuLoad, HostLoad, HostRef, PoolSpec, Request};
use crate::model::{GpuMode, PlacementStrategy, TaskGpu};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A placement policy: how the host and GPUs of one task are chosen among the
/// feasible ones. Feasibility is the same for all of them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// gpushare's own policy (the engine default for `binpack`): the growth of
    /// fragmentation over the expected task shapes (weighted by the GPUs they
    /// bring, host memory in the fit test), plus the growth of GPU capacity
    /// stranded by the host's free CPU (at the expected CPU per GPU), plus the
    /// scarcity price of the host's GPU model (expected demand limited to that
    /// model against its free capacity), plus the cost of taking a shared GPU
    /// off the planned sharing patterns of the expected MPS sizes (one GPU's
    /// worth), plus a small packing tie-break; hardest-first order and GPU
    /// completion in batch mode.
    #[default]
    Gpushare,
    /// Fragmentation Gradient Descent (Weng et al., USENIX ATC'23) as its
    /// simulator scores it: the fragmentation growth turned into the integer
    /// `int(100 x sigmoid(-growth / 1000))`, highest wins, ties to the first host.
    Fgd,
    /// FGD with the exact (unquantised) fragmentation growth, ties to the first host.
    FgdExact,
    /// Least free CPU + GPU left on the host after placing; best-fit GPU inside.
    BestFit,
    /// Partly used GPU first (least free first), then a free GPU on a used host, then an empty host.
    GpuPacking,
    /// Smallest dot product of the host's free (CPU, GPU) vector with the request.
    DotProduct,
    /// ECS-style binpack on GPU memory: the host with the least GPU memory left.
    EcsBinpack,
    /// A uniformly random feasible host (seeded).
    Random,
    /// The first feasible host in order.
    FirstFit,
    /// Spread: the host with the fewest tasks of the service, then the emptiest.
    Spread,
}

impl Policy {
    /// Every policy the benchmark compares, in table order.
    pub const BENCHMARKED: [Policy; 8] = [
        Policy::Random,
        Policy::DotProduct,
        Policy::GpuPacking,
        Policy::BestFit,
        Policy::EcsBinpack,
        Policy::Fgd,
        Policy::FgdExact,
        Policy::Gpushare,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Gpushare => "gpushare",
            Policy::Fgd => "fgd",
            Policy::FgdExact => "fgd-exact",
            Policy::BestFit => "bestfit",
            Policy::GpuPacking => "packing",
            Policy::DotProduct => "dotprod",
            Policy::EcsBinpack => "ecs-binpack",
            Policy::Random => "random",
            Policy::FirstFit => "firstfit",
            Policy::Spread => "spread",
        }
    }

    pub fn from_name(s: &str) -> Option<Policy> {
        [
            Policy::Gpushare,
            Policy::Fgd,
            Policy::FgdExact,
            Policy::BestFit,
            Policy::GpuPacking,
            Policy::DotProduct,
            Policy::EcsBinpack,
            Policy::Random,
            Policy::FirstFit,
            Policy::Spread,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }

    /// The policy the engine uses for a service's placement strategy.
    pub fn for_strategy(s: PlacementStrategy) -> Policy {
        match s {
            PlacementStrategy::Binpack => Policy::Gpushare,
            PlacementStrategy::Spread => Policy::Spread,
        }
    }
}

/// The GPU part of a compiled need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuNeed {
    None,
    /// `count` idle GPUs on one host, each becoming dedicated.
    Whole(u32),
    /// One GPU in MPS mode with `memory_mib` free and `compute` percent of compute
    /// left (`compute`: the reserved share, 0 when the task does not reserve compute).
    Mps {
        memory_mib: u64,
        compute: u32,
    },
}

/// A request compiled against a cluster's interned names (cheap to test per host).
#[derive(Debug, Clone, PartialEq)]
pub struct Need {
    /// Interned shape (equal needs share it): keys the per-host score cache.
    shape: u32,
    pub cpu: u32,
    pub memory_mib: u64,
    pub gpu: GpuNeed,
    pool: u32,
    service: u32,
    distinct_host: bool,
    /// Allowed instance types (empty = any).
    instance_types: Vec<u32>,
    /// Allowed GPU models (empty = any).
    models: Vec<u32>,
}

impl Need {
    pub fn instance_types_allow(&self, t: u32) -> bool {
        self.instance_types.is_empty() || self.instance_types.contains(&t)
    }
    pub fn models_allow(&self, m: u32) -> bool {
        self.models.is_empty() || self.models.contains(&m)
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
}

/// One GPU of a host in the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuState {
    pub index: u32,
    pub memory_mib: u64,
    pub used_memory_mib: u64,
    pub used_compute: u32,
    pub mode: GpuMode,
    pub tasks: u32,
    /// The MPS task sizes (thousandths) this GPU holds, when known (GPUs
    /// that were idle when the cluster was built); `None`: unknown or too many.
    held: Option<Held>,
}

impl GpuState {
    fn view(&self) -> Gv {
        let free_mem = match self.mode {
            GpuMode::Dedicated => 0,
            _ => self.memory_mib.saturating_sub(self.used_memory_mib),
        };
        Gv {
            free_mem,
            free_compute: match self.mode {
                GpuMode::Dedicated => 0,
                _ => 100u32.saturating_sub(self.used_compute),
            },
            idle: self.mode == GpuMode::Idle,
            shareable: self.mode != GpuMode::Dedicated,
            milli: if self.memory_mib == 0 {
                0.0
            } else {
                1000.0 * free_mem as f64 / self.memory_mib as f64
            },
        }
    }
}

/// One host in the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct HostState {
    pub host: HostRef,
    pub pool: u32,
    pub instance_type: u32,
    pub model: u32,
    pub gpus: Vec<GpuState>,
    pub cpu_total: u32,
    pub cpu_free: i64,
    pub memory_total: u64,
    pub memory_free: i64,
    pub accepting: bool,
    pub mps_ok: bool,
    services: Vec<u32>,
    pub tasks: u32,
    /// Fragmentation of the current state against the cluster's typical shapes
    /// (gpushare's measure, with host memory; and FGD's, CPU only).
    frag: f64,
    frag_fgd: f64,
}

impl HostState {
    /// Free GPU capacity in thousandths of a GPU.
    pub fn gpu_milli_free(&self) -> f64 {
        self.gpus.iter().map(|g| g.view().milli).sum()
    }
    pub fn gpu_milli_total(&self) -> f64 {
        1000.0 * self.gpus.len() as f64
    }
    pub fn is_empty(&self) -> bool {
        self.tasks == 0
    }
    /// Interned ids of the services with a task here.
    pub fn services(&self) -> &[u32] {
        &self.services
    }
}

/// A task shape weighted by how often it is expected (FGD's "typical pods").
#[derive(Debug, Clone, PartialEq)]
pub struct Typical {
    pub need: Need,
    pub weight: f64,
}

/// Typical shapes with the same GPU need and models, by CPU then memory.
#[derive(Debug, Clone, PartialEq)]
struct Group {
    gpu: GpuNeed,
    models: Vec<u32>,
    /// (CPU, memory, weight), sorted by CPU.
    members: Vec<(u32, u64, f64)>,
    weight: f64,
}

/// The expected task shapes, as the scores use them.
#[derive(Debug, Clone, Default)]
struct Expect {
    /// gpushare's groups (weights: count x GPUs).
    groups: Vec<Group>,
    /// FGD's groups (weights: count).
    groups_fgd: Vec<Group>,
    /// The expected MPS task sizes: (GPU memory MiB, expected count).
    mps_sizes: Vec<(u64, u32)>,
    /// gpushare's planned sharing patterns of those sizes, per GPU memory size
    /// (shares differ between GPUs of different memory).
    plans: Vec<(u64, Plan)>,
    /// FGD's weight of CPU-only shapes: they see every free GPU as fragmented.
    fgd_cpu_only: f64,
    /// CPU the expected GPU tasks need per thousandth of a GPU (0: unknown).
    cpu_per_milli: f64,
    /// gpushare's expected demand constrained to GPU models: (allowed models,
    /// share of the expected GPU demand), one entry per distinct model set.
    model_sets: Vec<(Vec<u32>, f64)>,
}

/// Group shapes by GPU need and models, weights normalised to sum to 1.
fn groups(typical: &[Typical], scale: impl Fn(&Need) -> f64) -> Vec<Group> {
    let total: f64 = typical.iter().map(|t| t.weight * scale(&t.need)).sum();
    let mut groups: Vec<Group> = Vec::new();
    for t in typical {
        let w = t.weight * scale(&t.need) / total.max(f64::MIN_POSITIVE);
        if t.need.gpu == GpuNeed::None || w <= 0.0 {
            continue;
        }
        let m = (t.need.cpu, t.need.memory_mib, w);
        match groups
            .iter_mut()
            .find(|g| g.gpu == t.need.gpu && g.models == t.need.models)
        {
            Some(g) => {
                g.members.push(m);
                g.weight += w;
            }
            None => groups.push(Group {
                gpu: t.need.gpu,
                models: t.need.models.clone(),
                members: vec![m],
                weight: w,
            }),
        }
    }
    for g in &mut groups {
        g.members.sort_by_key(|m| (m.0, m.1));
    }
    groups
}

/// Where [`Cluster::place_one`] put a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Index of the host in the cluster.
    pub host: usize,
    /// GPU indices (as the host reports them).
    pub gpus: Vec<u32>,
}

/// A light copy of one GPU's free capacity, for scoring hypothetical states.
#[derive(Debug, Clone, Copy)]
struct Gv {
    free_mem: u64,
    free_compute: u32,
    idle: bool,
    shareable: bool,
    milli: f64,
}

impl Gv {
    const ZERO: Gv = Gv {
        free_mem: 0,
        free_compute: 0,
        idle: false,
        shareable: false,
        milli: 0.0,
    };
}

/// Candidate GPU sets are kept on the stack for hosts with up to this many GPUs
/// (larger hosts are scored on their first `MAX_SET` GPUs).
const MAX_SET: usize = 16;

/// A small set of GPU positions on one host.
#[derive(Debug, Clone, Copy)]
struct Set {
    len: u8,
    at: [u8; MAX_SET],
}

impl Set {
    const EMPTY: Set = Set {
        len: 0,
        at: [0; MAX_SET],
    };
    fn push(&mut self, i: usize) {
        if usize::from(self.len) < MAX_SET {
            self.at[usize::from(self.len)] = i as u8;
            self.len += 1;
        }
    }
    fn as_slice(&self) -> &[u8] {
        &self.at[..usize::from(self.len)]
    }
}

#[derive(Default, Debug, Clone)]
struct Interner {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.names.len() as u32;
        self.ids.insert(s.to_string(), i);
        self.names.push(s.to_string());
        i
    }
}

/// A host's best candidate for one shape under one policy, valid while the
/// host's version is unchanged (NaN score: nothing fits there).
#[derive(Debug, Clone, Copy)]
struct Memo {
    version: u32,
    policy: Policy,
    score: f64,
    set: Set,
}

type ShapeKey = (u32, u64, GpuNeed, u32, u32, bool, Vec<u32>, Vec<u32>);

/// Weight of the CPU-stranded GPU capacity in gpushare's score (per thousandth).
const STRAND_WEIGHT: f64 = 1.0;
/// Weight of the packing tie-break in gpushare's score (per thousandth).
const PACK_WEIGHT: f64 = 1e-3;
/// Cost in gpushare's score of taking a shared GPU off the planned patterns:
/// as much as a whole GPU (1000 thousandths) of fragmentation growth.
const PLAN_WEIGHT: f64 = 1000.0;
/// Weight of the GPU-model scarcity price in gpushare's score (per thousandth).
const SCARCITY_WEIGHT: f64 = 2.0;

/// Hosts and their load; the scoring policies; the typical task shapes.
#[derive(Debug, Clone)]
pub struct Cluster {
    hosts: Vec<HostState>,
    /// Per host: bumped whenever the host changes (0 = never valid).
    versions: Vec<u32>,
    /// Per shape, per host: the last scored candidate.
    memo: Vec<Vec<Memo>>,
    shapes: HashMap<ShapeKey, u32>,
    expect: Expect,
    /// Per host: free GPU thousandths as last refreshed; per model id: their sum.
    host_free: Vec<f64>,
    model_free: Vec<f64>,
    pools: Interner,
    types: Interner,
    models: Interner,
    services: Interner,
    rng: ChaCha8Rng,
}

impl Cluster {
    pub fn new(seed: u64) -> Cluster {
        Cluster {
            hosts: Vec::new(),
            versions: Vec::new(),
            memo: Vec::new(),
            shapes: HashMap::new(),
            expect: Expect::default(),
            host_free: Vec::new(),
            model_free: Vec::new(),
            pools: Interner::default(),
            types: Interner::default(),
            models: Interner::default(),
            services: Interner::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Restart the seeded rng (random baseline, FGD tie-breaks).
    pub fn reseed(&mut self, seed: u64) {
        self.rng = ChaCha8Rng::seed_from_u64(seed);
    }

    /// Add an existing host with its current load. Returns its index.
    pub fn add_host(&mut self, h: &HostLoad) -> usize {
        let model = h.gpus.first().map(|g| g.model.as_str()).unwrap_or("");
        let mut services = Vec::with_capacity(h.services.len());
        for s in &h.services {
            services.push(self.services.id(s));
        }
        let host = HostState {
            host: HostRef::Existing { id: h.id.clone() },
            pool: self.pools.id(&h.pool),
            instance_type: self.types.id(&h.instance_type),
            model: self.models.id(model),
            gpus: h.gpus.iter().map(gpu_state).collect(),
            cpu_total: h.cpu_units,
            cpu_free: i64::from(h.cpu_units) - i64::from(h.used_cpu_units),
            memory_total: h.memory_mib,
            memory_free: h.memory_mib as i64 - h.used_memory_mib as i64,
            accepting: h.accepting,
            mps_ok: h.mps_ok,
            services,
            tasks: h
                .gpus
                .iter()
                .map(|g| g.tasks)
                .sum::<u32>()
                .max(u32::from(!h.services.is_empty())),
            frag: 0.0,
            frag_fgd: 0.0,
        };
        self.push(host)
    }

    /// Add an empty new host of a pool (the `ordinal`-th opened). Returns its index.
    pub fn add_new_host(&mut self, pool: &PoolSpec, ordinal: u32) -> usize {
        let s = &pool.shape;
        let host = HostState {
            host: HostRef::New {
                pool: pool.name.clone(),
                ordinal,
            },
            pool: self.pools.id(&pool.name),
            instance_type: self.types.id(&s.instance_type),
            model: self.models.id(&s.gpu_model),
            gpus: (0..s.gpu_count)
                .map(|i| GpuState {
                    index: i,
                    memory_mib: s.gpu_memory_mib,
                    used_memory_mib: 0,
                    used_compute: 0,
                    mode: GpuMode::Idle,
                    tasks: 0,
                    held: Some([0; patterns::MAX_HELD]),
                })
                .collect(),
            cpu_total: s.cpu_units,
            cpu_free: i64::from(s.cpu_units),
            memory_total: s.memory_mib,
            memory_free: s.memory_mib as i64,
            accepting: true,
            mps_ok: pool.mps_enabled,
            services: Vec::new(),
            tasks: 0,
            frag: 0.0,
            frag_fgd: 0.0,
        };
        self.push(host)
    }

    fn push(&mut self, host: HostState) -> usize {
        self.hosts.push(host);
        self.versions.push(1);
        self.host_free.push(0.0);
        self.plan_gpus_of(self.hosts.len() - 1);
        self.refresh(self.hosts.len() - 1);
        self.hosts.len() - 1
    }

    /// Compile a request against this cluster's names.
    pub fn compile(&mut self, r: &Request) -> Need {
        let gpu = match r.shape.gpu {
            TaskGpu::None => GpuNeed::None,
            TaskGpu::Whole { count } => GpuNeed::Whole(count),
            TaskGpu::Mps {
                memory_mib,
                compute_percent,
                ..
            } => GpuNeed::Mps {
                memory_mib,
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
        }
    }

    /// Set the expected task shapes (weights need not sum to 1) used by the
    /// fragmentation-based policies, and refresh every host's cached fragmentation.
    pub fn set_typical(&mut self, typical: Vec<Typical>) {
        // GPU shares of MPS shapes are relative to the largest GPU in the cluster.
        let gpu_ref = self
            .hosts
            .iter()
            .flat_map(|h| h.gpus.iter().map(|g| g.memory_mib))
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let units = |n: &Need| match n.gpu {
            GpuNeed::None => 0.0,
            GpuNeed::Whole(k) => f64::from(k),
            GpuNeed::Mps { memory_mib, .. } => memory_mib as f64 / gpu_ref,
        };
        // CPU per GPU thousandth that the expected tasks bring (CPU-only ones included:
        // they take CPU from GPU hosts too).
        let (cpu, milli) = typical.iter().fold((0.0, 0.0), |(c, m), t| {
            (
                c + t.weight * f64::from(t.need.cpu),
                m + t.weight * 1000.0 * units(&t.need),
            )
        });
        self.expect.cpu_per_milli = if milli > 0.0 { cpu / milli } else { 0.0 };
        // FGD weighs shapes by count; gpushare by the GPU capacity they bring
        // (count x GPUs), so rare many-GPU shapes count as much as the GPUs they want.
        self.expect.groups_fgd = groups(&typical, |_| 1.0);
        let all: f64 = typical.iter().map(|t| t.weight).sum();
        let cpu_only: f64 = typical
            .iter()
            .filter(|t| t.need.gpu == GpuNeed::None)
            .map(|t| t.weight)
            .sum();
        self.expect.fgd_cpu_only = if all > 0.0 { cpu_only / all } else { 0.0 };
        self.expect.groups = groups(&typical, units);
        // Demand that only some GPU models can take, by model set.
        let mut sets: Vec<(Vec<u32>, f64)> = Vec::new();
        for g in &self.expect.groups {
            if g.models.is_empty() {
                continue;
            }
            let mut ms = g.models.clone();
            ms.sort_unstable();
            ms.dedup();
            match sets.iter_mut().find(|s| s.0 == ms) {
                Some(s) => s.1 += g.weight,
                None => sets.push((ms, g.weight)),
            }
        }
        self.expect.model_sets = sets;
        // The expected MPS sizes, planned for the GPUs of every memory size present.
        self.expect.mps_sizes = typical
            .iter()
            .filter_map(|t| match t.need.gpu {
                GpuNeed::Mps { memory_mib, .. } => {
                    Some((memory_mib, t.weight.round().max(1.0) as u32))
                }
                _ => None,
            })
            .collect();
        self.expect.plans.clear();
        for i in 0..self.hosts.len() {
            self.plan_gpus_of(i);
        }
        for i in 0..self.hosts.len() {
            self.refresh(i);
        }
    }

    /// The hosts, in the order they were added.
    pub fn hosts(&self) -> &[HostState] {
        &self.hosts
    }

    /// Drop the most recently added host (the engine's probe of a new host that did not help).
    pub fn pop_host(&mut self) -> Option<HostState> {
        self.versions.pop();
        for m in &mut self.memo {
            m.truncate(self.versions.len());
        }
        let h = self.hosts.pop()?;
        if let Some(f) = self.host_free.pop() {
            if let Some(m) = self.model_free.get_mut(h.model as usize) {
                *m -= f;
            }
        }
        Some(h)
    }

    /// Plan the expected MPS sizes for the GPU memory sizes of host `i` not planned yet.
    fn plan_gpus_of(&mut self, i: usize) {
        if self.expect.mps_sizes.is_empty() {
            return;
        }
        for g in &self.hosts[i].gpus {
            let mib = g.memory_mib;
            if self.expect.plans.iter().any(|(m, _)| *m == mib) {
                continue;
            }
            // Equal shares are merged by the plan.
            let shares: Vec<(u16, u32)> = (self.expect.mps_sizes.iter())
                .filter(|&&(mem, _)| mem <= mib)
                .map(|&(mem, c)| (share(mem, mib), c))
                .collect();
            self.expect.plans.push((mib, Plan::new(&shares)));
        }
    }

    fn refresh(&mut self, i: usize) {
        self.versions[i] = self.versions[i].wrapping_add(1).max(1);
        let h = &self.hosts[i];
        let gv = views(&h.gpus);
        let f = frag_of(&self.expect.groups, h, &gv, h.cpu_free, h.memory_free, true);
        let g = frag_of(
            &self.expect.groups_fgd,
            h,
            &gv,
            h.cpu_free,
            h.memory_free,
            false,
        );
        let free = if h.accepting { h.gpu_milli_free() } else { 0.0 };
        let model = h.model as usize;
        if self.model_free.len() <= model {
            self.model_free.resize(model + 1, 0.0);
        }
        self.model_free[model] += free - self.host_free[i];
        self.host_free[i] = free;
        self.hosts[i].frag = f;
        self.hosts[i].frag_fgd = g;
    }

    /// Typical shapes from a list of needs: each distinct shape weighted by its count.
    pub fn typical_from(needs: &[Need]) -> Vec<Typical> {
        let mut out: Vec<Typical> = Vec::new();
        for n in needs {
            match out.iter_mut().find(|t| same_shape(&t.need, n)) {
                Some(t) => t.weight += 1.0,
                None => out.push(Typical {
                    need: n.clone(),
                    weight: 1.0,
                }),
            }
        }
        out
    }

    /// Whether `n` may go on host `i` whatever its free CPU, memory and GPUs.
    pub(super) fn admits(&self, i: usize, n: &Need) -> bool {
        host_admits(&self.hosts[i], n)
    }

    /// Whether `n` fits on host `i` at all.
    pub fn fits(&self, i: usize, n: &Need) -> bool {
        let h = &self.hosts[i];
        host_ok(h, n)
            && match n.gpu {
                GpuNeed::None => true,
                GpuNeed::Whole(k) => {
                    h.gpus.iter().filter(|g| g.mode == GpuMode::Idle).count() as u32 >= k
                }
                GpuNeed::Mps {
                    memory_mib,
                    compute,
                } => h.gpus.iter().any(|g| mps_fits(g, memory_mib, compute)),
            }
    }

    /// Choose where `n` goes under `policy` without changing anything (the
    /// random baseline draws from the cluster's seeded rng). Ties go to the
    /// first host in order, and on a host to the first GPU.
    pub fn choose(&mut self, n: &Need, policy: Policy) -> Option<Placed> {
        let mut best: Option<(f64, usize, Set)> = None;
        let mut seen_feasible = 0u32;
        let prices = if policy == Policy::Gpushare && n.gpu != GpuNeed::None {
            self.model_prices()
        } else {
            Vec::new()
        };
        let expect = &self.expect;
        let shape = n.shape as usize;
        if self.memo.len() <= shape {
            self.memo.resize(shape + 1, Vec::new());
        }
        let memo = &mut self.memo[shape];
        if memo.len() < self.hosts.len() {
            memo.resize(
                self.hosts.len(),
                Memo {
                    version: 0,
                    policy,
                    score: f64::NAN,
                    set: Set::EMPTY,
                },
            );
        }
        for (hi, h) in self.hosts.iter().enumerate() {
            let m = &mut memo[hi];
            let (score, set) =
                if m.version == self.versions[hi] && m.policy == policy && policy != Policy::Random
                {
                    (m.score, m.set)
                } else {
                    let (score, set) = if host_ok(h, n) {
                        best_on_host(expect, h, n, policy).unwrap_or((f64::NAN, Set::EMPTY))
                    } else {
                        (f64::NAN, Set::EMPTY)
                    };
                    *m = Memo {
                        version: self.versions[hi],
                        policy,
                        score,
                        set,
                    };
                    (score, set)
                };
            if score.is_nan() {
                continue;
            }
            // gpushare: the scarcity price of the host's GPU model for the GPU taken.
            let score = match prices.get(h.model as usize) {
                Some(&p) if p > 0.0 => {
                    let mib = h.gpus.first().map_or(1, |g| g.memory_mib);
                    score + SCARCITY_WEIGHT * p * n.gpu_milli(mib) as f64
                }
                _ => score,
            };
            if policy == Policy::FirstFit {
                best = Some((score, hi, set));
                break;
            }
            if policy == Policy::Random {
                seen_feasible += 1;
                if self.rng.gen_range(0..seen_feasible) == 0 {
                    best = Some((score, hi, set));
                }
                continue;
            }
            if best.as_ref().is_none_or(|(b, _, _)| score < *b - 1e-9) {
                best = Some((score, hi, set));
            }
        }
        best.map(|(_, hi, set)| Placed {
            host: hi,
            gpus: set
                .as_slice()
                .iter()
                .map(|&g| self.hosts[hi].gpus[usize::from(g)].index)
                .collect(),
        })
    }

    /// gpushare's scarcity price per GPU model id: for each set of models that
    /// some expected demand is limited to, that demand's share divided by the
    /// set's share of the free GPU capacity, summed over the sets holding the
    /// model. Free capacity on a model others depend on is worth keeping for
    /// them. Empty when no expected demand is limited to models.
    fn model_prices(&self) -> Vec<f64> {
        if self.expect.model_sets.is_empty() {
            return Vec::new();
        }
        let total: f64 = self.model_free.iter().sum();
        let mut prices = vec![0.0; self.model_free.len()];
        if total <= 0.0 {
            return prices;
        }
        for (ms, w) in &self.expect.model_sets {
            let free: f64 = ms
                .iter()
                .filter_map(|&m| self.model_free.get(m as usize))
                .sum();
            let p = w * total / free.max(1.0);
            for &m in ms {
                if let Some(x) = prices.get_mut(m as usize) {
                    *x += p;
                }
            }
        }
        prices
    }

    /// Choose and commit. `None` when nothing fits (nothing changes).
    pub fn place_one(&mut self, n: &Need, policy: Policy) -> Option<Placed> {
        let p = self.choose(n, policy)?;
        self.commit(p.host, n, &p.gpus);
        Some(p)
    }

    /// Record `n` on host `host`, GPUs `gpus` (indices as reported by the host).
    pub fn commit(&mut self, host: usize, n: &Need, gpus: &[u32]) {
        let h = &mut self.hosts[host];
        h.cpu_free -= i64::from(n.cpu);
        h.memory_free -= n.memory_mib as i64;
        h.tasks += 1;
        if !h.services.contains(&n.service) {
            h.services.push(n.service);
        }
        for g in h.gpus.iter_mut().filter(|g| gpus.contains(&g.index)) {
            g.tasks += 1;
            match n.gpu {
                GpuNeed::Whole(_) => g.mode = GpuMode::Dedicated,
                GpuNeed::Mps {
                    memory_mib,
                    compute,
                } => {
                    g.mode = GpuMode::Mps;
                    g.used_memory_mib += memory_mib;
                    g.used_compute += compute;
                    let size = share(memory_mib, g.memory_mib);
                    g.held = g.held.and_then(|h| patterns::with(&h, size));
                }
                GpuNeed::None => {}
            }
        }
        self.refresh(host);
    }

    /// Name of an interned pool, instance type or model id.
    pub fn model_name(&self, id: u32) -> &str {
        self.models
            .names
            .get(id as usize)
            .map(String::as_str)
            .unwrap_or("")
    }
    pub fn pool_id(&self, name: &str) -> Option<u32> {
        self.pools.ids.get(name).copied()
    }
}

/// `memory_mib` of a GPU with `gpu_memory_mib` in thousandths of it, rounded up.
fn milli_of(memory_mib: u64, gpu_memory_mib: u64) -> u64 {
    (memory_mib * 1000).div_ceil(gpu_memory_mib.max(1))
}

/// An MPS task's share of a GPU as the sharing plan counts it (1..=999).
fn share(memory_mib: u64, gpu_memory_mib: u64) -> u16 {
    milli_of(memory_mib, gpu_memory_mib).clamp(1, 999) as u16
}

/// 1 when putting a task of `memory_mib` on `g` takes it off the plan (its
/// tasks would no longer be part of any planned pattern), else 0. GPUs whose
/// tasks are unknown, and sizes the plan does not know, are never off plan.
fn off_plan(plans: &[(u64, Plan)], g: &GpuState, memory_mib: u64) -> f64 {
    let Some((_, plan)) = plans.iter().find(|(m, _)| *m == g.memory_mib) else {
        return 0.0;
    };
    if plan.is_empty() || g.mode == GpuMode::Idle {
        return 0.0;
    }
    let size = share(memory_mib, g.memory_mib);
    match g.held {
        Some(h) if plan.knows(size) && plan.on_plan(&h) => match patterns::with(&h, size) {
            Some(next) if plan.on_plan(&next) => 0.0,
            _ => 1.0,
        },
        _ => 0.0,
    }
}

/// Lower is better.
fn score(expect: &Expect, h: &HostState, n: &Need, set: &[u8], policy: Policy) -> f64 {
    let mut buf = [Gv::ZERO; MAX_SET];
    let mut heap: Vec<Gv>;
    let gv: &mut [Gv] = if h.gpus.len() <= MAX_SET {
        for (b, g) in buf.iter_mut().zip(&h.gpus) {
            *b = g.view();
        }
        &mut buf[..h.gpus.len()]
    } else {
        heap = views(&h.gpus);
        &mut heap[..]
    };
    for &g in set {
        match n.gpu {
            GpuNeed::Whole(_) => {
                gv[usize::from(g)] = Gv {
                    free_mem: 0,
                    free_compute: 0,
                    idle: false,
                    shareable: false,
                    milli: 0.0,
                };
            }
            GpuNeed::Mps {
                memory_mib,
                compute,
            } => {
                let total = h.gpus[usize::from(g)].memory_mib.max(1);
                let v = &mut gv[usize::from(g)];
                v.free_mem -= memory_mib;
                v.free_compute -= compute;
                v.idle = false;
                v.milli = 1000.0 * v.free_mem as f64 / total as f64;
            }
            GpuNeed::None => {}
        }
    }
    let cpu_after = h.cpu_free - i64::from(n.cpu);
    let mem_after = h.memory_free - n.memory_mib as i64;
    let gpu_free_after: f64 = gv.iter().map(|g| g.milli).sum();
    let gpu_total = h.gpu_milli_total().max(1.0);
    let chosen_free_after: f64 = set.iter().map(|&g| gv[usize::from(g)].milli).sum();
    match policy {
        Policy::Fgd | Policy::FgdExact => {
            // The growth of the host's fragmentation; CPU-only typical pods count
            // all free GPU capacity as fragmented (the simulator's XL/XR cases).
            let growth = frag_of(&expect.groups_fgd, h, gv, cpu_after, mem_after, false)
                - h.frag_fgd
                + expect.fgd_cpu_only * (gpu_free_after - h.gpu_milli_free());
            if policy == Policy::Fgd {
                // The simulator's integer node score (higher is better there).
                -(100.0 / (1.0 + (growth / 1000.0).exp())).floor()
            } else {
                growth
            }
        }
        Policy::Gpushare => {
            // Fragmentation gradient (with host memory in the fit test) ...
            let delta = frag_of(&expect.groups, h, gv, cpu_after, mem_after, true) - h.frag;
            let cpu_per_milli = expect.cpu_per_milli;
            // ... plus the growth of GPU capacity stranded by the host's CPU: GPUs
            // whose share of the host's free CPU is below what the expected tasks
            // need per GPU can be used by nobody ...
            let strand = |gpu_free: f64, cpu_free: i64| {
                if cpu_per_milli > 0.0 {
                    (gpu_free - cpu_free.max(0) as f64 / cpu_per_milli).max(0.0)
                } else {
                    0.0
                }
            };
            let stranded =
                strand(gpu_free_after, cpu_after) - strand(h.gpu_milli_free(), h.cpu_free);
            // ... plus the plan: taking a shared GPU off its planned patterns ...
            let off_plan = match n.gpu {
                GpuNeed::Mps { memory_mib, .. } => set
                    .iter()
                    .map(|&g| off_plan(&expect.plans, &h.gpus[usize::from(g)], memory_mib))
                    .sum(),
                _ => 0.0,
            };
            // ... and a small packing tie-break: the fuller GPU, then the fuller host.
            PLAN_WEIGHT * off_plan
                + delta
                + STRAND_WEIGHT * stranded
                + PACK_WEIGHT * (chosen_free_after + gpu_free_after / gpu_total)
        }
        Policy::BestFit => {
            cpu_after as f64 / f64::from(h.cpu_total.max(1))
                + gpu_free_after / gpu_total
                + 1e-6 * chosen_free_after
        }
        Policy::GpuPacking => {
            let used_host = !h.is_empty();
            let tier = match n.gpu {
                GpuNeed::Mps { .. } => {
                    if set
                        .iter()
                        .any(|&g| h.gpus[usize::from(g)].mode == GpuMode::Mps)
                    {
                        0.0
                    } else if used_host {
                        1.0
                    } else {
                        2.0
                    }
                }
                _ => {
                    if used_host {
                        1.0
                    } else {
                        2.0
                    }
                }
            };
            tier * 1e7 + chosen_free_after * 1e3 + gpu_free_after
        }
        Policy::DotProduct => {
            let cpu_t = f64::from(h.cpu_total.max(1));
            let req_gpu = match n.gpu {
                GpuNeed::None => 0.0,
                _ => h.gpu_milli_free() - gpu_free_after,
            };
            (h.cpu_free as f64 / cpu_t) * (f64::from(n.cpu) / cpu_t)
                + (h.gpu_milli_free() / gpu_total) * (req_gpu / gpu_total)
                + 1e-6 * chosen_free_after
        }
        Policy::EcsBinpack => {
            let mem_left: u64 = gv.iter().map(|g| g.free_mem).sum();
            mem_left as f64 + 1e-3 * chosen_free_after + 1e-9 * cpu_after as f64
        }
        Policy::Spread => {
            let same = if h.services.contains(&n.service) {
                1.0
            } else {
                0.0
            };
            same * 1e9 + f64::from(h.tasks) * 1e6 - chosen_free_after
        }
        Policy::Random | Policy::FirstFit => 0.0,
    }
}

/// FGD's fragmentation of a (hypothetical) host state: for each typical shape,
/// the GPU capacity (thousandths) it could not use, weighted by its frequency.
/// A shape that cannot be placed on the host at all (model, CPU, GPUs) sees
/// all free GPU capacity as fragmented; otherwise the GPUs too small for it.
/// `with_memory` adds host memory to the fit test (gpushare; FGD checks CPU only).
fn frag_of(
    groups: &[Group],
    h: &HostState,
    gv: &[Gv],
    cpu_free: i64,
    mem_free: i64,
    with_memory: bool,
) -> f64 {
    let total: f64 = gv.iter().map(|g| g.milli).sum();
    if total <= 0.0 {
        return 0.0;
    }
    let mut f = 0.0;
    for grp in groups {
        // Weight of the group's shapes that fit the host's CPU (and memory).
        let mut fit_w = 0.0;
        if grp.models.is_empty() || grp.models.contains(&h.model) {
            for &(cpu, mem, w) in &grp.members {
                if i64::from(cpu) > cpu_free {
                    break;
                }
                if !with_memory || mem as i64 <= mem_free {
                    fit_w += w;
                }
            }
        }
        f += grp.weight * total;
        if fit_w <= 0.0 {
            continue;
        }
        let unusable = match grp.gpu {
            GpuNeed::None => 0.0,
            GpuNeed::Whole(k) => {
                let idle = gv.iter().filter(|g| g.idle).count() as u32;
                if idle < k {
                    total
                } else {
                    gv.iter().filter(|g| !g.idle).map(|g| g.milli).sum()
                }
            }
            GpuNeed::Mps {
                memory_mib,
                compute,
            } => {
                let mut can = false;
                let mut s = 0.0;
                for g in gv {
                    if h.mps_ok
                        && g.shareable
                        && g.free_mem >= memory_mib
                        && g.free_compute >= compute
                    {
                        can = true;
                    } else {
                        s += g.milli;
                    }
                }
                if can {
                    s
                } else {
                    total
                }
            }
        };
        // Shapes that fit see only the unusable GPUs as fragmented.
        f -= fit_w * (total - unusable);
    }
    f
}

/// The host-level checks shared by every policy (everything except the GPUs).
fn host_ok(h: &HostState, n: &Need) -> bool {
    i64::from(n.cpu) <= h.cpu_free && n.memory_mib as i64 <= h.memory_free && host_admits(h, n)
}

/// [`host_ok`] without the host's free CPU and memory: whether `n` may go
/// there at all (accepting, pool, model, instance type, distinct host, MPS).
fn host_admits(h: &HostState, n: &Need) -> bool {
    h.accepting
        && h.pool == n.pool
        && (n.models.is_empty() || n.models.contains(&h.model))
        && (n.instance_types.is_empty() || n.instance_types.contains(&h.instance_type))
        && !(n.distinct_host && h.services.contains(&n.service))
        && (!matches!(n.gpu, GpuNeed::Mps { .. }) || h.mps_ok)
}

/// The best candidate GPU set on one host (NaN score: none fits).
fn best_on_host(expect: &Expect, h: &HostState, n: &Need, policy: Policy) -> Option<(f64, Set)> {
    let mut sets: [Set; MAX_SET] = [Set::EMPTY; MAX_SET];
    let mut nsets = 0;
    match n.gpu {
        GpuNeed::None => nsets = 1,
        GpuNeed::Whole(k) => {
            let mut s = Set::EMPTY;
            for (gi, g) in h.gpus.iter().enumerate() {
                if s.len as u32 == k {
                    break;
                }
                if g.mode == GpuMode::Idle {
                    s.push(gi);
                }
            }
            if s.len as u32 == k {
                sets[0] = s;
                nsets = 1;
            }
        }
        GpuNeed::Mps {
            memory_mib,
            compute,
        } => {
            // One candidate per distinct GPU load.
            let mut seen: [(u64, u32, Option<Held>); MAX_SET] = [(0, 0, None); MAX_SET];
            for (gi, g) in h.gpus.iter().enumerate() {
                if nsets < MAX_SET && mps_fits(g, memory_mib, compute) {
                    let key = (g.used_memory_mib, g.used_compute, g.held);
                    if !seen[..nsets].contains(&key) {
                        seen[nsets] = key;
                        sets[nsets].push(gi);
                        nsets += 1;
                    }
                }
            }
        }
    }
    if nsets == 0 {
        return None;
    }
    if matches!(policy, Policy::FirstFit | Policy::Random) {
        return Some((0.0, sets[0]));
    }
    let mut best: Option<(f64, Set)> = None;
    for set in &sets[..nsets] {
        let s = score(expect, h, n, set.as_slice(), policy);
        if best.as_ref().is_none_or(|(b, _)| s < *b - 1e-9) {
            best = Some((s, *set));
        }
    }
    best
}

fn same_shape(a: &Need, b: &Need) -> bool {
    a.cpu == b.cpu
        && a.memory_mib == b.memory_mib
        && a.gpu == b.gpu
        && a.models == b.models
        && a.pool == b.pool
        && a.instance_types == b.instance_types
}

/// Whether an MPS task of `memory_mib` reserving `compute` percent fits GPU `g`.
/// A task that reserves nothing is placed by memory alone, even on a GPU whose
/// reserved compute passes 100 (reservations turned on over running tasks).
pub(super) fn mps_fits(g: &GpuState, memory_mib: u64, compute: u32) -> bool {
    g.mode != GpuMode::Dedicated
        && g.memory_mib.saturating_sub(g.used_memory_mib) >= memory_mib
        && (compute == 0 || g.used_compute + compute <= 100)
}

fn gpu_state(g: &GpuLoad) -> GpuState {
    GpuState {
        index: g.index,
        memory_mib: g.memory_mib,
        used_memory_mib: g.used_memory_mib,
        used_compute: g.used_compute_percent,
        mode: g.mode,
        tasks: g.tasks,
        held: (g.mode == GpuMode::Idle).then_some([0; patterns::MAX_HELD]),
    }
}

fn views(gpus: &[GpuState]) -> Vec<Gv> {
    gpus.iter().map(GpuState::view).collect()
}
