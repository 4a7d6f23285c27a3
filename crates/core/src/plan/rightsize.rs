//! Right-sizing hints: a pool whose tasks, after the plan, a smaller instance type of
//! the same GPU would hold for less. A hint beside the cost line, never planned.

use super::types::RightSizing;
use super::{host_is_up, is_live_task};
use crate::catalog;
use crate::model::{CapacityProvider, Host, Market, StoreState, Task, TaskGpu};
use std::collections::{BTreeMap, HashMap};

/// What one host must hold of a pool's tasks: whole GPUs, CPU units, memory. An MPS
/// GPU is one item with the CPU and memory of all its tasks (they keep sharing it).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Item {
    gpus: u32,
    cpu_units: u32,
    memory_mib: u64,
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
        let items = items(tasks_of.get(pool).map_or(&[], Vec::as_slice));
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
                let n = first_fit(&items, t)?.max(spec.min_size);
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

/// A pool's live tasks as items: each whole-GPU or CPU-only task, and each GPU
/// its MPS tasks share.
fn items(tasks: &[&Task]) -> Vec<Item> {
    let mut mps: BTreeMap<(&str, u32), Item> = BTreeMap::new();
    let mut items = vec![];
    for t in tasks {
        match t.shape.gpu {
            TaskGpu::Mps { .. } => {
                let g = t.gpus.first().copied().unwrap_or(0);
                let i = mps.entry((t.host.as_str(), g)).or_insert(Item {
                    gpus: 1,
                    cpu_units: 0,
                    memory_mib: 0,
                });
                i.cpu_units += t.shape.cpu_units;
                i.memory_mib += t.shape.memory_mib;
            }
            TaskGpu::Whole { count } => items.push(Item {
                gpus: count,
                cpu_units: t.shape.cpu_units,
                memory_mib: t.shape.memory_mib,
            }),
            TaskGpu::None => items.push(Item {
                gpus: 0,
                cpu_units: t.shape.cpu_units,
                memory_mib: t.shape.memory_mib,
            }),
        }
    }
    items.extend(mps.into_values());
    items
}

/// How many hosts of type `t` hold `items`, packed first fit decreasing (`None`: an
/// item fits no host of that type).
fn first_fit(items: &[Item], t: &catalog::InstanceType) -> Option<u32> {
    let room = Item {
        gpus: t.gpu_count,
        cpu_units: t.cpu_units(),
        memory_mib: t.memory_mib,
    };
    let fits = |free: &Item, i: &Item| {
        i.gpus <= free.gpus && i.cpu_units <= free.cpu_units && i.memory_mib <= free.memory_mib
    };
    let mut sorted = items.to_vec();
    sorted.sort_by(|a, b| b.cmp(a));
    let mut hosts: Vec<Item> = vec![];
    for i in &sorted {
        if !fits(&room, i) {
            return None;
        }
        let free = match hosts.iter_mut().find(|f| fits(f, i)) {
            Some(f) => f,
            None => {
                hosts.push(room);
                hosts.last_mut()?
            }
        };
        free.gpus -= i.gpus;
        free.cpu_units -= i.cpu_units;
        free.memory_mib -= i.memory_mib;
    }
    Some(hosts.len() as u32)
}
