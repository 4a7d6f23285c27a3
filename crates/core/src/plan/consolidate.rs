//! Consolidation (`options.consolidate`): moving running tasks off the least loaded
//! hosts onto the others of their pool, bounded by `max_moves`, so emptied hosts retire.

use super::reasons::MoveReason;
use super::types::Move;
use super::{is_live_task, occupies, Planner};
use crate::model::{HostState, PlacementStrategy, StoreState, Task, TaskGpu, TaskState};
use crate::placement::{self, Assignment, HostRef, PlacementInput, Request};
use std::collections::{BTreeMap, BTreeSet, HashMap};

impl<'a> Planner<'a> {
    /// Move tasks off the least loaded hosts onto the other hosts of their pool,
    /// at most `max_moves` moves, never opening a host.
    pub(super) fn consolidate(&mut self) {
        let mut budget = self.options.max_moves as usize;
        let pools = self.pool_min_sizes();
        // Hosts receiving tasks in this plan: never emptied again in the same plan.
        let mut planned: BTreeSet<String> = self
            .out
            .starts
            .iter()
            .map(|s| s.task.host.clone())
            .chain(self.out.moves.iter().map(|m| m.to.host.clone()))
            .collect();
        // Each host's tasks, indexed once for every pool and again only after a host
        // is emptied (a failed try changes nothing): not every task scanned per pool
        // or per candidate (issue 52: 40 pools x 40,000 tasks on a re-plan).
        let mut on_host = occupying_by_host(&self.tasks);
        for (pool, min_size) in pools {
            if self.is_registered_pool(&pool) {
                continue; // its hosts are never retired: emptying one saves nothing
            }
            let budget_left =
                self.consolidate_pool(&pool, min_size, &mut budget, &mut planned, &mut on_host);
            if !budget_left {
                return;
            }
        }
    }

    /// Empty the pool's hosts one at a time, the least loaded first, while it keeps
    /// more than `min_size` (at least one) hosts with tasks. False when the move
    /// budget is spent.
    fn consolidate_pool(
        &mut self,
        pool: &str,
        min_size: u32,
        budget: &mut usize,
        planned: &mut BTreeSet<String>,
        on_host: &mut BTreeMap<String, Vec<String>>,
    ) -> bool {
        let mut tried: BTreeSet<String> = BTreeSet::new();
        loop {
            if *budget == 0 {
                return false;
            }
            let Some((cand, others)) =
                self.next_to_empty(pool, min_size, *budget, planned, &mut tried, on_host)
            else {
                return true;
            };
            let movers = on_host.get(cand.as_str()).map_or(&[][..], Vec::as_slice);
            if let Some(assignments) = self.place_elsewhere(pool, &cand, &others, movers) {
                self.record_moves(&cand, assignments, budget, planned);
                *on_host = occupying_by_host(&self.tasks);
            }
        }
    }

    /// The next host of the pool to try emptying (the one with the fewest tasks, at
    /// most `budget`, not receiving tasks in this plan and not tried before), marked
    /// as tried, with the other hosts that keep tasks (the targets). None when the
    /// pool is down to its minimum or no host is left to try.
    fn next_to_empty(
        &self,
        pool: &str,
        min_size: u32,
        budget: usize,
        planned: &BTreeSet<String>,
        tried: &mut BTreeSet<String>,
        on_host: &BTreeMap<String, Vec<String>>,
    ) -> Option<(String, Vec<String>)> {
        let counts: HashMap<&str, usize> =
            on_host.iter().map(|(h, v)| (h.as_str(), v.len())).collect();
        let members = self.pool_members(pool, false);
        let nonempty = members
            .iter()
            .filter(|h| counts.get(h.id.as_str()).copied().unwrap_or(0) > 0)
            .count();
        if nonempty <= (min_size as usize).max(1) {
            return None;
        }
        let mut cands: Vec<(usize, &str)> = members
            .iter()
            .map(|h| {
                (
                    counts.get(h.id.as_str()).copied().unwrap_or(0),
                    h.id.as_str(),
                )
            })
            .filter(|(n, id)| {
                *n > 0 && *n <= budget && !planned.contains(*id) && !tried.contains(*id)
            })
            .collect();
        cands.sort();
        let &(_, cand) = cands.first()?;
        let cand = cand.to_string();
        tried.insert(cand.clone());
        // Targets: the other hosts that keep tasks (empty ones are retired).
        let others: Vec<String> = members
            .iter()
            .filter(|h| h.id != cand && counts.get(h.id.as_str()).is_some_and(|n| *n > 0))
            .map(|h| h.id.clone())
            .collect();
        Some((cand, others))
    }

    /// Where every task on `cand` (`ids`, those holding resources there) would go
    /// among `others` (the pool's hosts frozen: no host opens). None when a task there
    /// is not live yet (a task this plan starts is not moved again) or when not all of
    /// them fit on existing hosts.
    fn place_elsewhere(
        &self,
        pool: &str,
        cand: &str,
        others: &[String],
        ids: &[String],
    ) -> Option<Vec<Assignment>> {
        let movers: Vec<&Task> = ids.iter().filter_map(|id| self.tasks.get(id)).collect();
        debug_assert!(movers.iter().all(|t| t.host == cand && occupies(t)));
        let live_tasks = &self.live.state.tasks;
        if movers
            .iter()
            .any(|t| !is_live_task(t) || !live_tasks.contains_key(&t.id))
        {
            return None;
        }
        let requests: Vec<Request> = movers
            .iter()
            .map(|t| {
                let svc = self.desired.services.get(&t.service);
                Request {
                    key: t.id.clone(),
                    service: t.service.clone(),
                    pool: pool.to_string(),
                    shape: t.shape,
                    strategy: svc.map_or(PlacementStrategy::Binpack, |s| s.placement_strategy),
                    distinct_host: svc.is_some_and(|s| s.distinct_host),
                    instance_types: svc.map_or_else(Vec::new, |s| s.instance_types.clone()),
                    gpu_models: vec![],
                    reserve_compute: self.desired.reserves_compute(&t.service, pool),
                    host_ports: self.fixed_ports(&t.family, t.revision),
                }
            })
            .collect();
        let input = PlacementInput {
            pools: self.pool_specs(others, true),
            hosts: self.host_loads(others),
            requests,
            seed: self.desired.settings.seed,
        };
        let outcome = placement::place(&input);
        let all_existing = outcome
            .assignments
            .iter()
            .all(|a| matches!(a.host, HostRef::Existing { .. }));
        if !outcome.unplaced.is_empty()
            || outcome.assignments.len() != movers.len()
            || !all_existing
        {
            return None;
        }
        Some(outcome.assignments)
    }

    /// The moves off `cand`: each task replaced by a new pending one where the
    /// placement put it, one move of the budget each.
    fn record_moves(
        &mut self,
        cand: &str,
        assignments: Vec<Assignment>,
        budget: &mut usize,
        planned: &mut BTreeSet<String>,
    ) {
        for a in assignments {
            let HostRef::Existing { id: to_host } = a.host else {
                continue;
            };
            let Some(old) = self.tasks.remove(&a.key) else {
                continue;
            };
            let id = self.new_task_id(&old.service);
            let mut to = Task {
                id: id.clone(),
                host: to_host,
                gpus: a.gpus,
                state: TaskState::Pending,
                ..old.clone()
            };
            if self.give_ports(&mut to).is_err() {
                // No port left on that host: the task stays where it is.
                self.tasks.insert(old.id.clone(), old);
                continue;
            }
            self.tasks.insert(id, to.clone());
            planned.insert(to.host.clone());
            self.out.moves.push(Move {
                from_task: old.id,
                to,
                reason: MoveReason::Consolidate {
                    host: cand.to_string(),
                }
                .to_string(),
                hold: false,
                at_once: false,
                healthy_after_seconds: self
                    .desired
                    .services
                    .get(&old.service)
                    .map_or(crate::model::DEFAULT_MIN_HEALTHY_SECONDS, |s| {
                        s.deployment.min_healthy_seconds
                    }),
            });
            *budget -= 1;
        }
    }
}

/// The ids of the tasks holding resources on each host ([`occupies`]), in id order.
fn occupying_by_host(tasks: &BTreeMap<String, Task>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in tasks.values().filter(|t| occupies(t)) {
        out.entry(t.host.clone()).or_default().push(t.id.clone());
    }
    out
}

/// What one host holds or has free, summed: GPU memory, CPU units, memory.
#[derive(Clone, Copy, Default)]
struct Room {
    gpu_memory_mib: u64,
    cpu_units: u64,
    memory_mib: u64,
}

impl Room {
    fn covers(&self, need: &Room) -> bool {
        self.gpu_memory_mib >= need.gpu_memory_mib
            && self.cpu_units >= need.cpu_units
            && self.memory_mib >= need.memory_mib
    }
}

/// Whether consolidating `after` could retire a host: in some launched pool with
/// more than `min_size` (at least one) hosts holding tasks, the other hosts' free
/// room, summed, covers what its least loaded host holds. A cheap necessary test
/// (fragmentation may still stop it) before the planner is run to find out.
pub(super) fn worth_trying(after: &StoreState, min_sizes: &BTreeMap<String, u32>) -> bool {
    let mut used: HashMap<&str, Room> = HashMap::new();
    for t in after.tasks.values().filter(|t| occupies(t)) {
        let u = used.entry(t.host.as_str()).or_default();
        u.gpu_memory_mib += match t.shape.gpu {
            TaskGpu::Whole { count } => {
                let per = after
                    .hosts
                    .get(&t.host)
                    .and_then(|h| h.gpus.first())
                    .map_or(0, |g| g.memory_mib);
                per * u64::from(count)
            }
            _ => t.gpu_memory_mib(),
        };
        u.cpu_units += u64::from(t.shape.cpu_units);
        u.memory_mib += t.shape.memory_mib;
    }
    let mut pools: BTreeMap<&str, Vec<(Room, Room)>> = BTreeMap::new();
    for h in after.hosts.values() {
        if h.is_registered() || h.gpu_instance.is_some() || h.state != HostState::Running {
            continue;
        }
        let Some(u) = used.get(h.id.as_str()) else {
            continue;
        };
        let cap = Room {
            gpu_memory_mib: h.gpus.iter().map(|g| g.memory_mib).sum(),
            cpu_units: u64::from(h.cpu_units),
            memory_mib: h.memory_mib,
        };
        let free = Room {
            gpu_memory_mib: cap.gpu_memory_mib.saturating_sub(u.gpu_memory_mib),
            cpu_units: cap.cpu_units.saturating_sub(u.cpu_units),
            memory_mib: cap.memory_mib.saturating_sub(u.memory_mib),
        };
        pools
            .entry(h.capacity_provider.as_str())
            .or_default()
            .push((*u, free));
    }
    pools.into_iter().any(|(pool, hosts)| {
        let keep = min_sizes.get(pool).copied().unwrap_or(0).max(1) as usize;
        if hosts.len() <= keep {
            return false;
        }
        let total = hosts.iter().fold(Room::default(), |a, (_, f)| Room {
            gpu_memory_mib: a.gpu_memory_mib + f.gpu_memory_mib,
            cpu_units: a.cpu_units + f.cpu_units,
            memory_mib: a.memory_mib + f.memory_mib,
        });
        hosts.iter().any(|(u, f)| {
            let others = Room {
                gpu_memory_mib: total.gpu_memory_mib - f.gpu_memory_mib,
                cpu_units: total.cpu_units - f.cpu_units,
                memory_mib: total.memory_mib - f.memory_mib,
            };
            others.covers(u)
        })
    })
}
