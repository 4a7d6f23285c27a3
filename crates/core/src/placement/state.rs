//! A [`Cluster`] of hosts whose GPUs, CPU and memory are tracked as tasks are
//! committed. What the scores read of a host (its fragmentation, its free GPU
//! capacity per model) is kept up to date here, and each change bumps the
//! host's version, so that choosing a host for one task (`score.rs`) rescores
//! only the hosts that changed.
//!
//! Both [`super::place`] (the planner's entry point) and the openb benchmark
//! (`gpushare-bench`) drive this code, so every policy is measured through
//! the same feasibility rules.

use super::expect::Expect;
use super::fgd::{frag_of, GpuView};
use super::input::{GpuLoad, HostLoad, PoolSpec, Request};
use super::need::{GpuNeed, Names, Need, Typical};
use super::outcome::HostRef;
use super::sharing::{self, share, Held};
use crate::model::{GpuMode, HostPortKey};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// One GPU of a host in the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuState {
    pub index: u32,
    pub memory_mib: u64,
    pub used_memory_mib: u64,
    pub used_compute: u32,
    pub mode: GpuMode,
    pub tasks: u32,
    /// MPS client processes on it, and the most its MPS server takes.
    pub clients: u32,
    pub max_clients: u32,
    /// The MPS task sizes (thousandths) this GPU holds, when known (GPUs
    /// that were idle when the cluster was built); `None`: unknown or too many.
    pub(super) held: Option<Held>,
}

impl GpuState {
    pub(super) fn view(&self) -> GpuView {
        let free_mem = match self.mode {
            GpuMode::Dedicated => 0,
            _ => self.memory_mib.saturating_sub(self.used_memory_mib),
        };
        GpuView {
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
pub struct ClusterHost {
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
    /// Host ports held by its tasks.
    pub(super) ports: std::collections::BTreeSet<HostPortKey>,
    pub tasks: u32,
    /// Fragmentation of the current state against the cluster's typical shapes
    /// (gpushare's measure, with host memory; and FGD's, CPU only).
    pub(super) frag: f64,
    pub(super) frag_fgd: f64,
}

impl ClusterHost {
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

/// Candidate GPU sets are kept on the stack for hosts with up to this many GPUs
/// (larger hosts are scored on their first `MAX_SET` GPUs).
pub(super) const MAX_SET: usize = 16;

/// A small set of GPU positions on one host.
#[derive(Debug, Clone, Copy)]
pub(super) struct Set {
    pub(super) len: u8,
    at: [u8; MAX_SET],
}

impl Set {
    pub(super) const EMPTY: Set = Set {
        len: 0,
        at: [0; MAX_SET],
    };
    pub(super) fn push(&mut self, i: usize) {
        if usize::from(self.len) < MAX_SET {
            self.at[usize::from(self.len)] = i as u8;
            self.len += 1;
        }
    }
    pub(super) fn as_slice(&self) -> &[u8] {
        &self.at[..usize::from(self.len)]
    }
}

/// A host's best candidate for one shape under one scorer, valid while the
/// host's version is unchanged (NaN score: nothing fits there).
#[derive(Debug, Clone, Copy)]
pub(super) struct Memo {
    pub(super) version: u32,
    /// The scorer, as its position in [`Cluster::scorer_id`]'s list.
    pub(super) scorer: u32,
    pub(super) score: f64,
    pub(super) set: Set,
}

/// Hosts and their load; the typical task shapes; the memo of per-host scores.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub(super) hosts: Vec<ClusterHost>,
    /// Per host: a new number whenever the host changes, from `last_version`
    /// (never reused, so a memo entry left by a popped host never matches).
    pub(super) versions: Vec<u32>,
    last_version: u32,
    /// Per pool id: its hosts' indices, ascending (a task only goes to hosts of
    /// its pool, so choosing a host scans these alone).
    pub(super) by_pool: Vec<Vec<usize>>,
    /// Per shape, per host of the shape's pool (at its position in `by_pool`):
    /// the last scored candidate.
    pub(super) memo: Vec<Vec<Memo>>,
    /// The names of the scorers seen, numbered for the memo.
    scorers: Vec<&'static str>,
    pub(super) expect: Expect,
    /// Per host: free GPU thousandths as last refreshed; per model id: their sum.
    host_free: Vec<f64>,
    pub(super) model_free: Vec<f64>,
    names: Names,
    pub(super) rng: ChaCha8Rng,
}

impl Cluster {
    pub fn new(seed: u64) -> Cluster {
        Cluster {
            hosts: Vec::new(),
            versions: Vec::new(),
            last_version: 0,
            by_pool: Vec::new(),
            memo: Vec::new(),
            scorers: Vec::new(),
            expect: Expect::default(),
            host_free: Vec::new(),
            model_free: Vec::new(),
            names: Names::default(),
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
            services.push(self.names.services.id(s));
        }
        let host = ClusterHost {
            host: HostRef::Existing { id: h.id.clone() },
            pool: self.names.pools.id(&h.pool),
            instance_type: self.names.types.id(&h.instance_type),
            model: self.names.models.id(model),
            gpus: h.gpus.iter().map(gpu_state).collect(),
            cpu_total: h.cpu_units,
            cpu_free: i64::from(h.cpu_units) - i64::from(h.used_cpu_units),
            memory_total: h.memory_mib,
            memory_free: h.memory_mib as i64 - h.used_memory_mib as i64,
            accepting: h.accepting,
            mps_ok: h.mps_ok,
            services,
            ports: h.host_ports.iter().copied().collect(),
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
        let host = ClusterHost {
            host: HostRef::New {
                pool: pool.name.clone(),
                ordinal,
            },
            pool: self.names.pools.id(&pool.name),
            instance_type: self.names.types.id(&s.instance_type),
            model: self.names.models.id(&s.gpu_model),
            gpus: (0..s.gpu_count)
                .map(|i| GpuState {
                    index: i,
                    memory_mib: s.gpu_memory_mib,
                    used_memory_mib: 0,
                    used_compute: 0,
                    mode: GpuMode::Idle,
                    tasks: 0,
                    clients: 0,
                    max_clients: pool.max_clients,
                    held: Some([0; sharing::MAX_HELD]),
                })
                .collect(),
            cpu_total: s.cpu_units,
            cpu_free: i64::from(s.cpu_units),
            memory_total: s.memory_mib,
            memory_free: s.memory_mib as i64,
            accepting: true,
            mps_ok: pool.mps_enabled,
            services: Vec::new(),
            ports: Default::default(),
            tasks: 0,
            frag: 0.0,
            frag_fgd: 0.0,
        };
        self.push(host)
    }

    fn push(&mut self, host: ClusterHost) -> usize {
        let (i, pool) = (self.hosts.len(), host.pool as usize);
        if self.by_pool.len() <= pool {
            self.by_pool.resize(pool + 1, Vec::new());
        }
        self.by_pool[pool].push(i);
        self.hosts.push(host);
        self.versions.push(0);
        self.host_free.push(0.0);
        self.plan_gpus_of(i);
        self.refresh(i);
        i
    }

    /// Compile a request against this cluster's names.
    pub fn compile(&mut self, r: &Request) -> Need {
        self.names.compile(r)
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
        self.expect = Expect::new(&typical, gpu_ref);
        for i in 0..self.hosts.len() {
            self.plan_gpus_of(i);
        }
        for i in 0..self.hosts.len() {
            self.refresh(i);
        }
    }

    /// The hosts, in the order they were added.
    pub fn hosts(&self) -> &[ClusterHost] {
        &self.hosts
    }

    /// Drop the most recently added host (the engine's probe of a new host that did not help).
    pub fn pop_host(&mut self) -> Option<ClusterHost> {
        let h = self.hosts.pop()?;
        self.versions.pop();
        if let Some(list) = self.by_pool.get_mut(h.pool as usize) {
            list.pop();
        }
        if let Some(f) = self.host_free.pop() {
            if let Some(m) = self.model_free.get_mut(h.model as usize) {
                *m -= f;
            }
        }
        Some(h)
    }

    /// Plan the expected MPS sizes for the GPU memory sizes of host `i` not planned yet.
    fn plan_gpus_of(&mut self, i: usize) {
        for g in &self.hosts[i].gpus {
            self.expect.plan_for(g.memory_mib);
        }
    }

    fn refresh(&mut self, i: usize) {
        self.last_version = self.last_version.wrapping_add(1).max(1);
        self.versions[i] = self.last_version;
        let h = &self.hosts[i];
        let gv = views(&h.gpus);
        let (model, mps_ok) = (h.model, h.mps_ok);
        let groups = &self.expect.groups;
        let f = frag_of(groups, model, mps_ok, &gv, h.cpu_free, h.memory_free, true);
        let groups = &self.expect.groups_fgd;
        let g = frag_of(groups, model, mps_ok, &gv, h.cpu_free, h.memory_free, false);
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

    /// The memo's number for the scorer named `name`.
    pub(super) fn scorer_id(&mut self, name: &'static str) -> u32 {
        match self.scorers.iter().position(|&s| s == name) {
            Some(i) => i as u32,
            None => {
                self.scorers.push(name);
                self.scorers.len() as u32 - 1
            }
        }
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
                    clients,
                } => h
                    .gpus
                    .iter()
                    .any(|g| mps_fits(g, memory_mib, compute, clients)),
            }
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
        h.ports.extend(n.ports.iter().copied());
        for g in h.gpus.iter_mut().filter(|g| gpus.contains(&g.index)) {
            g.tasks += 1;
            match n.gpu {
                GpuNeed::Whole(_) => g.mode = GpuMode::Dedicated,
                GpuNeed::Mps {
                    memory_mib,
                    compute,
                    clients,
                } => {
                    g.mode = GpuMode::Mps;
                    g.used_memory_mib += memory_mib;
                    g.used_compute += compute;
                    g.clients += clients;
                    let size = share(memory_mib, g.memory_mib);
                    g.held = g.held.and_then(|h| sharing::with(&h, size));
                }
                GpuNeed::None => {}
            }
        }
        self.refresh(host);
    }

    pub fn pool_id(&self, name: &str) -> Option<u32> {
        self.names.pools.ids.get(name).copied()
    }
}

/// The host-level checks shared by every policy (everything except the GPUs).
pub(super) fn host_ok(h: &ClusterHost, n: &Need) -> bool {
    i64::from(n.cpu) <= h.cpu_free && n.memory_mib as i64 <= h.memory_free && host_admits(h, n)
}

/// [`host_ok`] without the host's free CPU and memory: whether `n` may go
/// there at all (accepting, pool, model, instance type, distinct host, MPS).
fn host_admits(h: &ClusterHost, n: &Need) -> bool {
    h.accepting
        && h.pool == n.pool
        && (n.models.is_empty() || n.models.contains(&h.model))
        && (n.instance_types.is_empty() || n.instance_types.contains(&h.instance_type))
        && !(n.distinct_host && h.services.contains(&n.service))
        && !n.port_taken(&h.ports)
        && (!matches!(n.gpu, GpuNeed::Mps { .. }) || h.mps_ok)
}

/// Whether an MPS task of `memory_mib` reserving `compute` percent fits GPU `g`.
/// A task that reserves nothing is placed by memory alone, even on a GPU whose
/// reserved compute passes 100 (reservations turned on over running tasks).
pub(super) fn mps_fits(g: &GpuState, memory_mib: u64, compute: u32, clients: u32) -> bool {
    g.mode != GpuMode::Dedicated
        && g.memory_mib.saturating_sub(g.used_memory_mib) >= memory_mib
        && (compute == 0 || g.used_compute + compute <= 100)
        && g.clients + clients <= g.max_clients
}

fn gpu_state(g: &GpuLoad) -> GpuState {
    GpuState {
        index: g.index,
        memory_mib: g.memory_mib,
        used_memory_mib: g.used_memory_mib,
        used_compute: g.used_compute_percent,
        mode: g.mode,
        tasks: g.tasks,
        clients: g.clients,
        max_clients: g.max_clients,
        held: (g.mode == GpuMode::Idle).then_some([0; sharing::MAX_HELD]),
    }
}

pub(super) fn views(gpus: &[GpuState]) -> Vec<GpuView> {
    gpus.iter().map(GpuState::view).collect()
}
