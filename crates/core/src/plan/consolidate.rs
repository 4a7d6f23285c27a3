//! Consolidation (`options.consolidate`): moving running tasks off the least loaded
//! hosts onto the others of their pool, bounded by `max_moves`, so emptied hosts retire.

use super::reasons::MoveReason;
use super::types::Move;
use super::{is_live_task, occupies, task_counts, Planner};
use crate::model::{PlacementStrategy, Task, TaskState};
use crate::placement::{self, Assignment, HostRef, PlacementInput, Request};
use std::collections::BTreeSet;

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
        for (pool, min_size) in pools {
            if self.is_registered_pool(&pool) {
                continue; // its hosts are never retired: emptying one saves nothing
            }
            if !self.consolidate_pool(&pool, min_size, &mut budget, &mut planned) {
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
    ) -> bool {
        let mut tried: BTreeSet<String> = BTreeSet::new();
        loop {
            if *budget == 0 {
                return false;
            }
            let Some((cand, others)) =
                self.next_to_empty(pool, min_size, *budget, planned, &mut tried)
            else {
                return true;
            };
            if let Some(assignments) = self.place_elsewhere(pool, &cand, &others) {
                self.record_moves(&cand, assignments, budget, planned);
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
    ) -> Option<(String, Vec<String>)> {
        let counts = task_counts(&self.tasks);
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

    /// Where every task on `cand` would go among `others` (the pool's hosts frozen:
    /// no host opens). None when a task there is not live yet (a task this plan starts
    /// is not moved again) or when not all of them fit on existing hosts.
    fn place_elsewhere(
        &self,
        pool: &str,
        cand: &str,
        others: &[String],
    ) -> Option<Vec<Assignment>> {
        let movers: Vec<&Task> = self
            .tasks
            .values()
            .filter(|t| t.host == cand && occupies(t))
            .collect();
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
