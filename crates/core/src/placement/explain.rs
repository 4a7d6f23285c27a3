//! Why a task could not be placed: the nearest fit and what stopped it, in
//! the words the plan shows.

use super::input::{PlacementInput, PoolSpec, Request};
use super::need::{GpuNeed, Need};
use super::outcome::HostRef;
use super::state::Cluster;
use crate::model::{GpuMode, TaskGpu};

/// The nearest fit and what stopped it, e.g. "no GPU in pool a10g has 8192 MiB
/// free; largest free 6144 MiB on host h-2 GPU 1; pool at max_size 4".
/// `pool_size`: the hosts the request's pool has, opened ones included.
pub(super) fn explain(
    cluster: &Cluster,
    input: &PlacementInput,
    pool_size: u32,
    r: &Request,
    n: &Need,
) -> String {
    let pool = input.pools.iter().find(|p| p.name == r.pool);
    let hosts: Vec<usize> = (0..cluster.hosts().len())
        .filter(|&i| Some(cluster.hosts()[i].pool) == cluster.pool_id(&r.pool))
        .collect();
    if pool.is_none() && hosts.is_empty() {
        return format!("no capacity provider {:?} and no host in it", r.pool);
    }
    let any_accepting = hosts.iter().any(|&i| cluster.hosts()[i].accepting);
    let mut why = if any_accepting {
        first_blocker(cluster, &hosts, r, n)
            .unwrap_or_else(|| format!("no host in pool {} fits", r.pool))
    } else if hosts.is_empty() {
        format!("pool {} has no host", r.pool)
    } else {
        format!("no host in pool {} accepts tasks", r.pool)
    };
    if let Some(p) = pool {
        if pool_size >= p.max_size {
            why.push_str(&format!("; pool at max_size {}", p.max_size));
        } else if let Some(short) = empty_host_shortfall(p, r) {
            why.push_str(&format!(
                "; an empty {} host {short}",
                p.shape.instance_type
            ));
        }
    }
    why
}

/// What an empty host of the pool lacks for the request, if anything.
fn empty_host_shortfall(p: &PoolSpec, r: &Request) -> Option<String> {
    let s = &p.shape;
    if !r.instance_types.is_empty() && !r.instance_types.contains(&s.instance_type) {
        return Some(format!(
            "is not of instance type {}",
            r.instance_types.join(" or ")
        ));
    }
    if !r.gpu_models.is_empty() && !r.gpu_models.contains(&s.gpu_model) {
        return Some(format!(
            "has {} GPUs, not {}",
            s.gpu_model,
            r.gpu_models.join(" or ")
        ));
    }
    if r.shape.cpu_units > s.cpu_units {
        return Some(format!(
            "has {} CPU units, the task needs {}",
            s.cpu_units, r.shape.cpu_units
        ));
    }
    if r.shape.memory_mib > s.memory_mib {
        return Some(format!(
            "has {} MiB of memory, the task needs {}",
            s.memory_mib, r.shape.memory_mib
        ));
    }
    match r.shape.gpu {
        TaskGpu::Whole { count } if count > s.gpu_count => Some(format!(
            "has {} GPU{}, the task needs {count}",
            s.gpu_count,
            if s.gpu_count == 1 { "" } else { "s" }
        )),
        TaskGpu::Mps { .. } if !p.mps_enabled => Some("has MPS disabled".to_string()),
        TaskGpu::Mps { memory_mib, .. } if memory_mib > s.gpu_memory_mib => Some(format!(
            "has {} MiB per GPU, the task needs {memory_mib} MiB on one GPU",
            s.gpu_memory_mib
        )),
        _ => None,
    }
}

/// Keeps in `set` the hosts where the task's fixed host ports are free; when none
/// is left, says which ports.
fn ports_blocker(cluster: &Cluster, set: &mut Vec<usize>, r: &Request, n: &Need) -> Option<String> {
    if r.host_ports.is_empty() {
        return None;
    }
    set.retain(|&i| !n.port_taken(&cluster.hosts()[i].ports));
    if !set.is_empty() {
        return None;
    }
    let ports: Vec<String> = r
        .host_ports
        .iter()
        .map(|(proto, port)| format!("{port}/{proto}"))
        .collect();
    Some(format!(
        "every host in pool {} already has host port {} taken by another task",
        r.pool,
        ports.join(" or ")
    ))
}

fn first_blocker(cluster: &Cluster, hosts: &[usize], r: &Request, n: &Need) -> Option<String> {
    let pool = &r.pool;
    let hs = |i: usize| &cluster.hosts()[i];
    let mut set: Vec<usize> = hosts.iter().copied().filter(|&i| hs(i).accepting).collect();
    if set.is_empty() {
        return Some(format!("no host in pool {pool} accepts tasks"));
    }
    if !r.instance_types.is_empty() {
        set.retain(|&i| n.instance_types_allow(hs(i).instance_type));
        if set.is_empty() {
            return Some(format!(
                "no host in pool {pool} is of instance type {}",
                r.instance_types.join(" or ")
            ));
        }
    }
    if !r.gpu_models.is_empty() {
        set.retain(|&i| n.models_allow(hs(i).model));
        if set.is_empty() {
            return Some(format!(
                "no host in pool {pool} has GPU model {}",
                r.gpu_models.join(" or ")
            ));
        }
    }
    if r.distinct_host {
        set.retain(|&i| !n.blocks_host_with(hs(i).services()));
        if set.is_empty() {
            return Some(format!(
                "every host in pool {pool} already runs a task of service {} (distinct_host)",
                r.service
            ));
        }
    }
    if let Some(why) = ports_blocker(cluster, &mut set, r, n) {
        return Some(why);
    }
    if matches!(n.gpu, GpuNeed::Mps { .. }) {
        set.retain(|&i| hs(i).mps_ok);
        if set.is_empty() {
            return Some(format!("no host in pool {pool} has a healthy MPS daemon"));
        }
    }
    let most = |set: &[usize], f: &dyn Fn(usize) -> i64| {
        set.iter()
            .copied()
            .max_by_key(|&i| (f(i), std::cmp::Reverse(i)))
    };
    let cpu_ok: Vec<usize> = set
        .iter()
        .copied()
        .filter(|&i| hs(i).cpu_free >= i64::from(n.cpu))
        .collect();
    if cpu_ok.is_empty() {
        let b = most(&set, &|i| hs(i).cpu_free)?;
        return Some(format!(
            "no host in pool {pool} has {} CPU units free; most free {} on host {}",
            n.cpu,
            hs(b).cpu_free,
            host_name(&hs(b).host)
        ));
    }
    let mem_ok: Vec<usize> = cpu_ok
        .iter()
        .copied()
        .filter(|&i| hs(i).memory_free >= n.memory_mib as i64)
        .collect();
    if mem_ok.is_empty() {
        let b = most(&cpu_ok, &|i| hs(i).memory_free)?;
        return Some(format!(
            "no host in pool {pool} has {} MiB of memory free; most free {} MiB on host {}",
            n.memory_mib,
            hs(b).memory_free,
            host_name(&hs(b).host)
        ));
    }
    match n.gpu {
        GpuNeed::None => None,
        GpuNeed::Whole(k) => {
            let idle = |i: usize| {
                hs(i)
                    .gpus
                    .iter()
                    .filter(|g| g.mode == GpuMode::Idle)
                    .count() as i64
            };
            let b = most(&mem_ok, &idle)?;
            Some(format!(
                "no host in pool {pool} has {k} idle GPUs; most idle {} on host {}",
                idle(b),
                host_name(&hs(b).host)
            ))
        }
        GpuNeed::Mps {
            memory_mib,
            compute,
            clients,
        } => {
            if let Some(why) = clients_blocker(cluster, &mem_ok, pool, memory_mib, clients) {
                return Some(why);
            }
            let mut best: Option<(u64, usize, u32)> = None;
            for &i in &mem_ok {
                for g in hs(i).gpus.iter().filter(|g| g.mode != GpuMode::Dedicated) {
                    let free = g.memory_mib.saturating_sub(g.used_memory_mib);
                    if best.is_none_or(|(f, _, _)| free > f) {
                        best = Some((free, i, g.index));
                    }
                }
            }
            match best {
                None => Some(format!("no GPU in pool {pool} is free for MPS (all dedicated)")),
                Some((free, i, gi)) if free >= memory_mib => Some(format!("no GPU in pool {pool} with {memory_mib} MiB free has {compute}% compute left to reserve (reserve_compute); largest free {free} MiB on host {} GPU {gi}", host_name(&hs(i).host))),
                Some((free, i, gi)) => Some(format!("no GPU in pool {pool} has {memory_mib} MiB free; largest free {free} MiB on host {} GPU {gi}", host_name(&hs(i).host))),
            }
        }
    }
}

/// When a GPU has the memory but not the MPS client room: which bound stops it.
fn clients_blocker(
    cluster: &Cluster,
    hosts: &[usize],
    pool: &str,
    memory_mib: u64,
    clients: u32,
) -> Option<String> {
    let with_memory: Vec<&super::state::GpuState> = hosts
        .iter()
        .flat_map(|&i| cluster.hosts()[i].gpus.iter())
        .filter(|g| {
            g.mode != GpuMode::Dedicated
                && g.memory_mib.saturating_sub(g.used_memory_mib) >= memory_mib
        })
        .collect();
    let g = *with_memory.first()?;
    let all_full = with_memory
        .iter()
        .all(|g| g.clients + clients > g.max_clients);
    all_full.then(|| {
        format!(
            "every GPU in pool {pool} with {memory_mib} MiB free already serves {} of its {} MPS clients (mps.max_clients; the task needs {clients})",
            g.clients, g.max_clients
        )
    })
}

fn host_name(h: &HostRef) -> String {
    match h {
        HostRef::Existing { id } => id.clone(),
        HostRef::New { pool, ordinal } => format!("new {pool} host #{ordinal}"),
    }
}
