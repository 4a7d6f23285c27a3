//! Right-sizing hints: a pool whose tasks, after the plan, a smaller instance type of
//! the same GPU would hold for less. A hint beside the cost line, never planned.

use super::types::{RightSizing, UsageHint};
use super::{host_is_up, is_live_task};
use crate::catalog;
use crate::model::{
    CapacityProvider, Host, Market, StoreState, Task, TaskGpu, TaskState, TaskStatus,
};
use std::collections::{BTreeMap, HashMap};

/// One task as the hint packs it: whole GPUs or an MPS share (GPU memory, the
/// compute it reserves, its client processes), CPU units and memory. MPS tasks are
/// packed one by one, not in the groups the plan gave them: a smaller type may
/// hold them in other groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Item {
    gpus: u32,
    gpu_memory_mib: u64,
    compute: u32,
    clients: u32,
    cpu_units: u32,
    memory_mib: u64,
}

/// What is left of one GPU of a host the hint opens.
#[derive(Clone, Copy)]
enum GpuRoom {
    Free,
    Whole,
    Mps {
        memory_mib: u64,
        compute: u32,
        clients: u32,
    },
}

/// What is left of one host the hint opens.
struct HostRoom {
    cpu_units: u32,
    memory_mib: u64,
    gpus: Vec<GpuRoom>,
}

/// The pools of `after` that a smaller type of the same GPU would hold for less, at
/// the catalogue's On-Demand prices. Pools left out: Spot ones, ones whose hosts are
/// of several types (a replacement under way) or of a type of unknown price, ones
/// without tasks. A pool's `min_size` (from `pools`) still counts.
pub(super) fn right_sizing(
    after: &StoreState,
    pools: &BTreeMap<String, CapacityProvider>,
) -> Vec<RightSizing> {
    let mut by_pool: BTreeMap<&str, Vec<&Host>> = BTreeMap::new();
    for h in after
        .hosts
        .values()
        .filter(|h| host_is_up(h) && h.gpu_instance.is_none())
    {
        by_pool
            .entry(h.capacity_provider.as_str())
            .or_default()
            .push(h);
    }
    // The live tasks of each pool's hosts, in one pass over the tasks.
    let pool_of: HashMap<&str, &str> = by_pool
        .iter()
        .flat_map(|(pool, hosts)| hosts.iter().map(move |h| (h.id.as_str(), *pool)))
        .collect();
    let mut tasks_of: HashMap<&str, Vec<&Task>> = HashMap::new();
    for t in after.tasks.values().filter(|t| is_live_task(t)) {
        if let Some(pool) = pool_of.get(t.host.as_str()) {
            tasks_of.entry(pool).or_default().push(t);
        }
    }
    let mut out = vec![];
    for (pool, hosts) in by_pool {
        let Some(spec) = pools.get(pool) else {
            continue;
        };
        if spec.market != Market::OnDemand || hosts.iter().any(|h| h.market != Market::OnDemand) {
            continue;
        }
        let ty = hosts[0].instance_type.as_str();
        if hosts.iter().any(|h| h.instance_type != ty) {
            continue;
        }
        let Some(current) = catalog::lookup(ty).filter(|t| !t.fractional) else {
            continue;
        };
        let Some(price) = current.price_per_hour else {
            continue;
        };
        let items = items(after, pool, tasks_of.get(pool).map_or(&[], Vec::as_slice));
        if items.is_empty() {
            continue;
        }
        let widest = items.iter().map(|i| i.gpus).max().unwrap_or(0);
        let per_hour = price * hosts.len() as f64;
        let best = catalog::INSTANCE_TYPES
            .iter()
            .filter(|t| {
                t.name != current.name
                    && t.gpu_model == current.gpu_model
                    && !t.fractional
                    && t.gpu_memory_mib >= current.gpu_memory_mib
                    && t.gpu_count >= widest
                    && t.price_per_hour.is_some_and(|p| p < price)
            })
            .filter_map(|t| {
                let n = first_fit(&items, t, spec.mps.max_clients)?
                    .0
                    .max(spec.min_size);
                Some((t, n, t.price_per_hour.unwrap_or(f64::MAX) * f64::from(n)))
            })
            .min_by(|a, b| a.2.total_cmp(&b.2).then(a.1.cmp(&b.1)));
        // A cent an hour or more: rounding is no hint.
        if let Some((t, n, cost)) = best.filter(|b| b.2 + 0.01 <= per_hour) {
            out.push(RightSizing {
                pool: pool.to_string(),
                instance_type: current.name.to_string(),
                hosts: hosts.len() as u32,
                per_hour,
                suggested_type: t.name.to_string(),
                suggested_hosts: n,
                suggested_per_hour: cost,
            });
        }
    }
    out
}

/// A pool's live tasks as items, one per task.
fn items(after: &StoreState, pool: &str, tasks: &[&Task]) -> Vec<Item> {
    tasks
        .iter()
        .map(|t| {
            let (gpus, gpu_memory_mib, compute, clients) = match t.shape.gpu {
                TaskGpu::Mps {
                    memory_mib,
                    compute_percent,
                    clients,
                    ..
                } => {
                    let reserved = after.reserves_compute(&t.service, pool);
                    let compute = if reserved {
                        u32::from(compute_percent)
                    } else {
                        0
                    };
                    (0, memory_mib, compute, clients)
                }
                TaskGpu::Whole { count } => (count, 0, 0, 0),
                TaskGpu::None => (0, 0, 0, 0),
            };
            Item {
                gpus,
                gpu_memory_mib,
                compute,
                clients,
                cpu_units: t.shape.cpu_units,
                memory_mib: t.shape.memory_mib,
            }
        })
        .collect()
}

impl HostRoom {
    fn new(t: &catalog::InstanceType) -> HostRoom {
        HostRoom {
            cpu_units: t.cpu_units(),
            memory_mib: t.memory_mib,
            gpus: vec![GpuRoom::Free; t.gpu_count as usize],
        }
    }

    /// Take `i` on this host if it fits (`gpu_memory`: one GPU's memory, `max_clients`:
    /// one GPU's MPS clients); an MPS task goes to the first GPU it fits, a shared one
    /// before a free one.
    fn take(&mut self, i: &Item, gpu_memory: u64, max_clients: u32) -> bool {
        if i.cpu_units > self.cpu_units || i.memory_mib > self.memory_mib {
            return false;
        }
        if i.gpus > 0 {
            let free: Vec<usize> = (0..self.gpus.len())
                .filter(|g| matches!(self.gpus[*g], GpuRoom::Free))
                .take(i.gpus as usize)
                .collect();
            if free.len() < i.gpus as usize {
                return false;
            }
            free.into_iter().for_each(|g| self.gpus[g] = GpuRoom::Whole);
        } else if i.gpu_memory_mib > 0 || i.clients > 0 {
            let fits = |g: &GpuRoom| match *g {
                GpuRoom::Mps {
                    memory_mib,
                    compute,
                    clients,
                } => i.gpu_memory_mib <= memory_mib && i.compute <= compute && i.clients <= clients,
                _ => false,
            };
            let slot = match self.gpus.iter().position(fits) {
                Some(g) => g,
                None => match self.gpus.iter().position(|g| matches!(g, GpuRoom::Free)) {
                    Some(g) => {
                        self.gpus[g] = GpuRoom::Mps {
                            memory_mib: gpu_memory,
                            compute: 100,
                            clients: max_clients,
                        };
                        if !fits(&self.gpus[g]) {
                            self.gpus[g] = GpuRoom::Free;
                            return false;
                        }
                        g
                    }
                    None => return false,
                },
            };
            if let GpuRoom::Mps {
                memory_mib,
                compute,
                clients,
            } = &mut self.gpus[slot]
            {
                *memory_mib -= i.gpu_memory_mib;
                *compute -= i.compute;
                *clients -= i.clients;
            }
        }
        self.cpu_units -= i.cpu_units;
        self.memory_mib -= i.memory_mib;
        true
    }
}

/// How many hosts of type `t` hold `items`, packed first fit decreasing, and how many
/// of their GPUs hold a task (`None`: an item fits no host of that type).
fn first_fit(items: &[Item], t: &catalog::InstanceType, max_clients: u32) -> Option<(u32, u32)> {
    let mut sorted = items.to_vec();
    sorted.sort_by(|a, b| b.cmp(a));
    let mut hosts: Vec<HostRoom> = vec![];
    // Where the last item went: the hosts before it refused that item, and a host's
    // room only shrinks, so an equal item (sorted, equal items come together) starts
    // its search there. Same packing as trying every host, without the scan of all
    // hosts per item (issue 52).
    let mut last: Option<(&Item, usize)> = None;
    for i in &sorted {
        let from = last.filter(|(prev, _)| *prev == i).map_or(0, |(_, at)| at);
        if let Some(at) =
            (from..hosts.len()).find(|&k| hosts[k].take(i, t.gpu_memory_mib, max_clients))
        {
            last = Some((i, at));
            continue;
        }
        let mut h = HostRoom::new(t);
        if !h.take(i, t.gpu_memory_mib, max_clients) {
            return None;
        }
        hosts.push(h);
        last = Some((i, hosts.len() - 1));
    }
    Some(counted(&hosts))
}

/// How many hosts, and how many of their GPUs hold a task.
fn counted(hosts: &[HostRoom]) -> (u32, u32) {
    let gpus = hosts
        .iter()
        .flat_map(|h| &h.gpus)
        .filter(|g| !matches!(g, GpuRoom::Free))
        .count();
    (hosts.len() as u32, gpus as u32)
}

/// How long a service's tasks must have run, measured, before their peak counts.
pub const USAGE_WINDOW_SECONDS: u64 = 3600;
/// A peak at or below this share of the declared memory gets a lower suggestion.
const LOW_SHARE: f64 = 0.5;
/// A peak at or above this share is near the limit.
const HIGH_SHARE: f64 = 0.95;
/// The suggested memory: the peak with this headroom (as `gpushare evaluate`'s default).
const HEADROOM: f64 = 1.2;

/// One running task's declared MPS memory, measured peak and since when it runs.
type Measured = (u64, u64, u64);

/// Right-sizing from use (issue 49 item 4): for each MPS service of a launched pool
/// whose running tasks have all reported their GPU use for at least
/// [`USAGE_WINDOW_SECONDS`], a hint when their peak stays far below what they declare
/// (with the GPUs, hosts and dollars a lower `memory` frees, packed as the
/// right-sizing hint packs), or near it.
pub(super) fn usage_hints(
    after: &StoreState,
    status: &BTreeMap<String, TaskStatus>,
    pools: &BTreeMap<String, CapacityProvider>,
    now: u64,
) -> Vec<UsageHint> {
    // Each service's running MPS tasks: (declared, peak, since) of the measured ones,
    // and whether any is not measured (then no hint).
    let mut by_service: BTreeMap<&str, (Vec<Measured>, bool)> = BTreeMap::new();
    for t in after
        .tasks
        .values()
        .filter(|t| t.state == TaskState::Running)
    {
        if !matches!(t.shape.gpu, TaskGpu::Mps { .. }) {
            continue;
        }
        let e = by_service.entry(t.service.as_str()).or_default();
        match status.get(&t.id).and_then(|s| Some((s, s.usage.as_ref()?))) {
            Some((s, u)) if s.state == TaskState::Running => {
                e.0.push((t.gpu_memory_mib(), u.peak_gpu_memory_mib, s.since))
            }
            _ => e.1 = true,
        }
    }
    let pool_of: HashMap<&str, &str> = after
        .tasks
        .values()
        .filter_map(|t| {
            Some((
                t.service.as_str(),
                after.hosts.get(&t.host)?.capacity_provider.as_str(),
            ))
        })
        .collect();
    let mut out = vec![];
    for (service, (measured, unmeasured)) in by_service {
        let Some(&(declared, _, _)) = measured.first() else {
            continue;
        };
        let window = measured
            .iter()
            .map(|m| now.saturating_sub(m.2))
            .min()
            .unwrap_or(0);
        if unmeasured || window < USAGE_WINDOW_SECONDS || declared == 0 {
            continue;
        }
        if measured.iter().any(|m| m.0 != declared) {
            continue; // a deployment between revisions: judged once it is done
        }
        let peak = measured.iter().map(|m| m.1).max().unwrap_or(0);
        let share = peak as f64 / declared as f64;
        let Some(pool) = pool_of.get(service).copied() else {
            continue;
        };
        let mut hint = UsageHint {
            service: service.to_string(),
            pool: pool.to_string(),
            tasks_measured: measured.len() as u32,
            window_seconds: window,
            peak_mib: peak,
            declared_mib: declared,
            suggested_mib: None,
            gpus_now: 0,
            gpus_after: 0,
            hosts_freed: 0,
            saves_per_hour: 0.0,
        };
        if share >= HIGH_SHARE {
            out.push(hint);
            continue;
        }
        let suggested = crate::pool::memory_with_headroom(peak.max(1), HEADROOM);
        if share > LOW_SHARE || suggested >= declared {
            continue;
        }
        hint.suggested_mib = Some(suggested);
        saving(after, pools, &mut hint);
        out.push(hint);
    }
    out
}

/// What lowering the service's memory to the suggestion frees: its pool's tasks
/// packed on the pool's instance type, as they declare now and as suggested.
fn saving(after: &StoreState, pools: &BTreeMap<String, CapacityProvider>, hint: &mut UsageHint) {
    let Some(spec) = pools.get(&hint.pool) else {
        return;
    };
    let Some(t) = catalog::lookup(&spec.instance_type).filter(|t| !t.fractional) else {
        return;
    };
    let tasks: Vec<&Task> = after
        .tasks
        .values()
        .filter(|x| {
            (x.state == TaskState::Running || x.state == TaskState::Pending)
                && after
                    .hosts
                    .get(&x.host)
                    .is_some_and(|h| h.capacity_provider == hint.pool && host_is_up(h))
        })
        .collect();
    let now_items = items(after, &hint.pool, &tasks);
    let lowered: Vec<Item> = tasks
        .iter()
        .zip(&now_items)
        .map(|(x, i)| match hint.suggested_mib {
            Some(m) if x.service == hint.service => Item {
                gpu_memory_mib: m,
                ..*i
            },
            _ => *i,
        })
        .collect();
    let (Some(now), Some(low)) = (
        first_fit(&now_items, t, spec.mps.max_clients),
        first_fit(&lowered, t, spec.mps.max_clients),
    ) else {
        return;
    };
    hint.gpus_now = now.1;
    hint.gpus_after = low.1;
    hint.hosts_freed = now.0.saturating_sub(low.0.max(spec.min_size));
    hint.saves_per_hour = f64::from(hint.hosts_freed) * t.price_per_hour.unwrap_or(0.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// First fit decreasing as it was written before issue 52: every host tried for
    /// every item.
    fn first_fit_every_host(
        items: &[Item],
        t: &catalog::InstanceType,
        max_clients: u32,
    ) -> Option<(u32, u32)> {
        let mut sorted = items.to_vec();
        sorted.sort_by(|a, b| b.cmp(a));
        let mut hosts: Vec<HostRoom> = vec![];
        for i in &sorted {
            if hosts
                .iter_mut()
                .any(|h| h.take(i, t.gpu_memory_mib, max_clients))
            {
                continue;
            }
            let mut h = HostRoom::new(t);
            if !h.take(i, t.gpu_memory_mib, max_clients) {
                return None;
            }
            hosts.push(h);
        }
        Some(counted(&hosts))
    }

    fn item() -> impl Strategy<Value = Item> {
        // Few distinct shapes, so that equal items come in runs as a pool's do.
        (0u32..3, 0usize..4, 0usize..3, 0usize..3).prop_map(|(kind, mem, cap, cpu)| {
            let (gpus, gpu_memory_mib, compute, clients) = match kind {
                0 => (0, [2048, 6144, 12288, 23034][mem], [100, 20, 50][cap], 1),
                1 => (1 + (mem as u32 % 2), 0, 0, 0),
                _ => (0, 0, 0, 0),
            };
            Item {
                gpus,
                gpu_memory_mib,
                compute,
                clients,
                cpu_units: [512, 4096, 16384][cpu],
                memory_mib: [1024, 8192, 65536][cpu],
            }
        })
    }

    proptest! {
        /// Starting an equal item's search where the last one went packs exactly as
        /// trying every host does.
        #[test]
        fn first_fit_packs_as_trying_every_host(
            items in proptest::collection::vec(item(), 0..300),
            ty in prop::sample::select(vec!["g6.xlarge", "g6.12xlarge", "g5.48xlarge"]),
            max_clients in 1u32..8,
        ) {
            let t = catalog::lookup(ty).expect("a catalogue type");
            prop_assert_eq!(
                first_fit(&items, t, max_clients),
                first_fit_every_host(&items, t, max_clients)
            );
        }
    }
}
