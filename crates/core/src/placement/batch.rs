//! [`place`]: the planner's batch placement over a [`Cluster`].

use super::explain::explain;
use super::fill;
use super::input::{PlacementInput, PoolSpec, Request};
use super::need::{GpuNeed, Need, Typical};
use super::outcome::{Assignment, PlacementOutcome, Unplaced};
use super::policies::Policy;
use super::remaining::Remaining;
use super::score::Placed;
use super::state::{mps_fits, Cluster};
use crate::model::{GpuMode, TaskGpu};
use std::collections::BTreeMap;

/// At most this many distinct task shapes steer the fragmentation score.
const MAX_TYPICAL: usize = 32;

pub(super) fn place(input: &PlacementInput) -> PlacementOutcome {
    let mut cluster = Cluster::new(input.seed);
    for h in &input.hosts {
        cluster.add_host(h);
    }
    let mut opened: BTreeMap<String, u32> = BTreeMap::new();
    let existing = existing_per_pool(input);
    // Pools below min_size get their missing hosts up front (they exist anyway).
    for p in &input.pools {
        let have = existing.get(p.name.as_str()).copied().unwrap_or(0);
        for _ in have..p.min_size {
            open_host(&mut cluster, &mut opened, p);
        }
    }
    let needs: Vec<Need> = input.requests.iter().map(|r| cluster.compile(r)).collect();
    let mut typical = Typical::from_needs(&needs);
    typical.sort_by(|a, b| b.weight.total_cmp(&a.weight));
    typical.truncate(MAX_TYPICAL);
    cluster.set_typical(typical);

    let order = hardest_first(&needs);
    let mut batch = Batch::new(input, &needs, &order, existing);
    let mut done: Vec<Option<(usize, Vec<u32>)>> = vec![None; needs.len()];
    let mut unplaced: Vec<Option<String>> = vec![None; needs.len()];
    for (pos, &i) in order.iter().enumerate() {
        if done[i].is_some() {
            continue;
        }
        let r = &input.requests[i];
        let n = &needs[i];
        let policy = Policy::for_strategy(r.strategy);
        let placed = match cluster.choose(n, policy) {
            Some(p) => Some(p),
            None => try_new_host(&mut cluster, &mut opened, &batch, r, n, policy),
        };
        let Some(p) = placed else {
            let size = batch.pool_size(&opened, &r.pool);
            unplaced[i] = Some(explain(&cluster, input, size, r, n));
            continue;
        };
        let opens_gpu = matches!(n.gpu, GpuNeed::Mps { .. })
            && p.gpus.first().is_some_and(|g| {
                cluster.hosts()[p.host]
                    .gpus
                    .iter()
                    .any(|s| s.index == *g && s.mode == GpuMode::Idle)
            });
        if opens_gpu && policy == Policy::Gpushare {
            open_gpu(&mut cluster, &mut batch, pos, &mut done, i, p);
        } else {
            cluster.commit(p.host, n, &p.gpus);
            done[i] = Some((p.host, p.gpus));
        }
    }
    let mut out = PlacementOutcome {
        new_hosts: opened,
        ..PlacementOutcome::default()
    };
    for (i, r) in input.requests.iter().enumerate() {
        match (&done[i], &unplaced[i]) {
            (Some((h, gpus)), _) => out.assignments.push(Assignment {
                key: r.key.clone(),
                host: cluster.hosts()[*h].host.clone(),
                gpus: gpus.clone(),
            }),
            (None, reason) => out.unplaced.push(Unplaced {
                replaces: None,
                key: r.key.clone(),
                service: r.service.clone(),
                reason: reason.clone().unwrap_or_else(|| "not placed".to_string()),
            }),
        }
    }
    out
}

/// Request indices, hardest first: whole-GPU tasks by GPU count, then MPS tasks
/// by GPU memory and compute, then CPU-only tasks by CPU and memory; constrained
/// tasks before free ones of the same size; input order breaks ties.
pub fn hardest_first(needs: &[Need]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..needs.len()).collect();
    order.sort_by_key(|&i| {
        let n = &needs[i];
        let (class, a, b) = match n.gpu {
            GpuNeed::Whole(k) => (0u8, u64::from(k), 0u64),
            GpuNeed::Mps {
                memory_mib,
                compute,
                ..
            } => (1, memory_mib, u64::from(compute)),
            GpuNeed::None => (2, u64::from(n.cpu), n.memory_mib),
        };
        (
            class,
            std::cmp::Reverse(a),
            std::cmp::Reverse(b),
            std::cmp::Reverse(n.cpu),
            std::cmp::Reverse(n.memory_mib),
            i,
        )
    });
    order
}

fn open_host(cluster: &mut Cluster, opened: &mut BTreeMap<String, u32>, p: &PoolSpec) -> usize {
    let ord = opened.get(&p.name).copied().unwrap_or(0);
    opened.insert(p.name.clone(), ord + 1);
    cluster.add_new_host(p, ord)
}

/// The hosts of the input per pool.
fn existing_per_pool(input: &PlacementInput) -> BTreeMap<&str, u32> {
    let mut m: BTreeMap<&str, u32> = BTreeMap::new();
    for h in &input.hosts {
        *m.entry(h.pool.as_str()).or_default() += 1;
    }
    m
}

/// Open a host in the request's pool when below max_size and an empty one fits.
fn try_new_host(
    cluster: &mut Cluster,
    opened: &mut BTreeMap<String, u32>,
    batch: &Batch,
    r: &Request,
    n: &Need,
    policy: Policy,
) -> Option<Placed> {
    let pool = batch.input.pools.iter().find(|p| p.name == r.pool)?;
    if batch.pool_size(opened, &pool.name) >= pool.max_size {
        return None;
    }
    let ord = opened.get(&pool.name).copied().unwrap_or(0);
    let idx = cluster.add_new_host(pool, ord);
    if !cluster.fits(idx, n) {
        cluster.pop_host();
        return None;
    }
    opened.insert(pool.name.clone(), ord + 1);
    cluster.choose(n, policy)
}

/// The requests as GPU completion sees them.
struct Batch<'a> {
    input: &'a PlacementInput,
    needs: &'a [Need],
    /// The requests that may complete a GPU (MPS tasks under `binpack`), by
    /// pool and shape, not placed yet.
    remaining: Remaining,
    /// The input's hosts per pool.
    existing: BTreeMap<&'a str, u32>,
}

impl<'a> Batch<'a> {
    fn new(
        input: &'a PlacementInput,
        needs: &'a [Need],
        order: &[usize],
        existing: BTreeMap<&'a str, u32>,
    ) -> Batch<'a> {
        // An MPS task under `binpack` may complete a GPU of its pool.
        let fills = |j: usize| {
            Policy::for_strategy(input.requests[j].strategy) == Policy::Gpushare
                && matches!(needs[j].gpu, GpuNeed::Mps { .. })
        };
        let remaining = Remaining::new(needs, order, fills);
        Batch {
            input,
            needs,
            remaining,
            existing,
        }
    }

    /// Hosts of `pool`: the input's and those opened so far.
    fn pool_size(&self, opened: &BTreeMap<String, u32>, pool: &str) -> u32 {
        self.existing.get(pool).copied().unwrap_or(0) + opened.get(pool).copied().unwrap_or(0)
    }
}

/// MPS task `i` opens GPU `p` under `binpack`: the GPU is completed at once with
/// the remaining MPS tasks whose GPU memory fills it best (bin completion), and
/// placed as one unit. When the host chosen for task `i` lacks the CPU or memory
/// for the whole set, the set goes where gpushare places a task of the set's sum,
/// so that the host does not cut the completion short; where no host takes the
/// set, task `i` stays where it was chosen and the GPU is completed with what
/// that host still fits.
fn open_gpu(
    cluster: &mut Cluster,
    batch: &mut Batch,
    pos: usize,
    done: &mut [Option<(usize, Vec<u32>)>],
    i: usize,
    p: Placed,
) {
    let Some(&gpu) = p.gpus.first() else {
        return;
    };
    let needs = batch.needs;
    let seed = &needs[i];
    let gap = gpu_free(cluster, p.host, gpu).saturating_sub(mps_memory(seed));
    // The remaining tasks of the pool of task `i` that the host admits.
    let candidates = batch.remaining.candidates(
        needs,
        seed.pool,
        gap,
        pos,
        |j| done[j].is_some(),
        |n| cluster.admits(p.host, n),
    );
    let fill = fill::best_fill(needs, &candidates, gap);
    let set = [&[i], &fill[..]].concat();
    let target = if fill.is_empty() || fits_together(cluster, needs, p.host, gpu, &set) {
        Some((p.host, gpu))
    } else {
        relocate(cluster, batch, &set)
    };
    let Some((host, gpu)) = target else {
        cluster.commit(p.host, seed, &p.gpus);
        done[i] = Some((p.host, p.gpus));
        complete_gpu(cluster, batch, pos, done, p.host, gpu);
        return;
    };
    cluster.commit(host, seed, &[gpu]);
    done[i] = Some((host, vec![gpu]));
    let complete = commit_on_gpu(cluster, needs, done, host, gpu, &fill);
    if !complete || host != p.host {
        complete_gpu(cluster, batch, pos, done, host, gpu);
    }
}

/// Where gpushare puts a task of the set's summed demand, if every task of the
/// set fits there together.
fn relocate(cluster: &mut Cluster, batch: &Batch, set: &[usize]) -> Option<(usize, u32)> {
    let needs = batch.needs;
    let seed = &batch.input.requests[*set.first()?];
    let (mut cpu, mut memory, mut gpu_memory, mut compute) = (0u32, 0u64, 0u64, 0u32);
    let mut clients = 0u32;
    for &j in set {
        let GpuNeed::Mps {
            memory_mib,
            compute: c,
            clients: k,
        } = needs[j].gpu
        else {
            return None;
        };
        clients = clients.checked_add(k)?;
        cpu = cpu.checked_add(needs[j].cpu)?;
        memory = memory.checked_add(needs[j].memory_mib)?;
        gpu_memory = gpu_memory.checked_add(memory_mib)?;
        compute = compute.checked_add(c)?;
    }
    let bundle = Request {
        key: String::new(),
        shape: crate::model::TaskShape {
            cpu_units: cpu,
            memory_mib: memory,
            gpu: TaskGpu::Mps {
                memory_mib: gpu_memory,
                compute_percent: u8::try_from(compute).ok().filter(|&c| c <= 100)?,
                capped: true,
                clients,
            },
        },
        // `compute` already holds only the reserved shares of the set.
        reserve_compute: true,
        ..seed.clone()
    };
    let need = cluster.compile(&bundle);
    let to = cluster.choose(&need, Policy::Gpushare)?;
    let gpu = *to.gpus.first()?;
    let ok = set.iter().all(|&j| cluster.admits(to.host, &needs[j]))
        && fits_together(cluster, needs, to.host, gpu, set);
    ok.then_some((to.host, gpu))
}

/// Whether the MPS tasks of `set` fit host `host`, GPU `gpu` all together.
fn fits_together(cluster: &Cluster, needs: &[Need], host: usize, gpu: u32, set: &[usize]) -> bool {
    let h = &cluster.hosts()[host];
    let Some(g) = h.gpus.iter().find(|s| s.index == gpu) else {
        return false;
    };
    let (mut cpu, mut memory, mut gpu_memory, mut compute) = (0i64, 0i64, 0u64, 0u32);
    let mut clients = 0u32;
    for &j in set {
        let n = &needs[j];
        let GpuNeed::Mps {
            memory_mib,
            compute: c,
            clients: k,
        } = n.gpu
        else {
            return false;
        };
        clients = clients.saturating_add(k);
        if !cluster.fits(host, n) {
            return false;
        }
        cpu += i64::from(n.cpu);
        memory = memory.saturating_add(i64::try_from(n.memory_mib).unwrap_or(i64::MAX));
        gpu_memory += memory_mib;
        compute += c;
    }
    g.mode != GpuMode::Dedicated
        && cpu <= h.cpu_free
        && memory <= h.memory_free
        && gpu_memory <= g.memory_mib.saturating_sub(g.used_memory_mib)
        && (compute == 0 || g.used_compute + compute <= 100)
        && g.clients.saturating_add(clients) <= g.max_clients
}

/// Bin completion: fill what is left of GPU `gpu` on host `host` with the subset
/// of the remaining MPS tasks (after position `pos`) that fit the host and fill it best.
fn complete_gpu(
    cluster: &mut Cluster,
    batch: &mut Batch,
    pos: usize,
    done: &mut [Option<(usize, Vec<u32>)>],
    host: usize,
    gpu: u32,
) {
    let gap = gpu_free(cluster, host, gpu);
    if gap == 0 {
        return;
    }
    let needs = batch.needs;
    // Any task that may complete a GPU and fits the host (so one of its pool).
    let pool = cluster.hosts()[host].pool;
    let candidates = batch.remaining.candidates(
        needs,
        pool,
        gap,
        pos,
        |j| done[j].is_some(),
        |n| cluster.fits(host, n),
    );
    let fill = fill::best_fill(needs, &candidates, gap);
    commit_on_gpu(cluster, needs, done, host, gpu, &fill);
}

/// Commit each task of `set` that still fits GPU `gpu` of host `host`, in order.
/// Whether all of them did.
fn commit_on_gpu(
    cluster: &mut Cluster,
    needs: &[Need],
    done: &mut [Option<(usize, Vec<u32>)>],
    host: usize,
    gpu: u32,
    set: &[usize],
) -> bool {
    let mut all = true;
    for &j in set {
        let n = &needs[j];
        let fits_gpu = cluster.hosts()[host].gpus.iter().any(|s| {
            s.index == gpu
                && matches!(n.gpu, GpuNeed::Mps { memory_mib, compute, clients } if mps_fits(s, memory_mib, compute, clients))
        });
        if fits_gpu && cluster.fits(host, n) {
            cluster.commit(host, n, &[gpu]);
            done[j] = Some((host, vec![gpu]));
        } else {
            all = false;
        }
    }
    all
}

/// Free memory of GPU `gpu` on host `host` (0 when there is no such GPU).
fn gpu_free(cluster: &Cluster, host: usize, gpu: u32) -> u64 {
    cluster.hosts()[host]
        .gpus
        .iter()
        .find(|s| s.index == gpu)
        .map_or(0, |g| g.memory_mib.saturating_sub(g.used_memory_mib))
}

/// GPU memory of an MPS need (`u64::MAX` for any other, so that it never fills a gap).
fn mps_memory(n: &Need) -> u64 {
    match n.gpu {
        GpuNeed::Mps { memory_mib, .. } => memory_mib,
        _ => u64::MAX,
    }
}
