//! Step 4, services: which of its tasks each service keeps, stops, moves and
//! replaces, and the tasks it wants started (new ones, replacements, the new
//! halves of moves), before placement.

use super::reasons::{ReplaceReason, Replaces, StopReason};
use super::types::Stop;
use super::{host_is_up, is_live_task, Planner};
use crate::model::{
    Deployment, Desired, Host, PlacementStrategy, Service, StoreState, Task, TaskShape, TaskState,
};
use std::collections::{BTreeMap, HashMap};

/// A task to start (new, a replacement, or the new half of a move), before placement.
pub(super) struct Want {
    pub(super) id: String,
    pub(super) service: String,
    pub(super) family: String,
    pub(super) revision: u32,
    pub(super) shape: TaskShape,
    pub(super) pool: String,
    pub(super) strategy: PlacementStrategy,
    pub(super) distinct_host: bool,
    pub(super) instance_types: Vec<String>,
    /// The service or its pool reserves compute (`reserve_compute`).
    pub(super) reserve_compute: bool,
    pub(super) replaces: Option<Replaces>,
}

/// What becomes of a live task of a service, in the order its tasks are given up
/// when the service shrinks: first those on drained hosts, then the outdated, then
/// the current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum TaskClass {
    /// On a drained host, or on an impaired GPU (`plan/health.rs`): moves (the new
    /// half is placed, then the old one stops).
    OnDrainedHost,
    /// On an old revision, another task definition or another pool: replaced, at
    /// most a deployment batch per plan.
    Outdated,
    /// As the service is declared, on a kept host: stays.
    Current,
}

/// A live task of a service, classed, with the task count of its host.
struct Ranked<'t> {
    class: TaskClass,
    /// Tasks on its host (only counted when the order matters).
    load: usize,
    task: &'t Task,
    host: &'t Host,
}

impl<'a> Planner<'a> {
    /// Stop the tasks that end here (ended, host gone, service removed, scaled
    /// down) and return the tasks to start. `counts`: tasks per host now.
    pub(super) fn services(&mut self, counts: &HashMap<&str, usize>) -> Vec<Want> {
        self.clear_ended_tasks();
        let by_service = self.live_tasks_by_service();
        for (sname, tasks) in &by_service {
            if !self.desired.services.contains_key(*sname) {
                for (t, _) in tasks {
                    self.out.stops.push(Stop {
                        task_id: t.id.clone(),
                        reason: StopReason::ServiceRemoved {
                            service: sname.to_string(),
                        }
                        .to_string(),
                    });
                }
            }
        }
        let desired: &'a Desired = self.desired;
        let mut wants: Vec<Want> = vec![];
        for (sname, svc) in &desired.services {
            let tasks = by_service
                .get(sname.as_str())
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            self.service_wants(sname, svc, tasks, counts, &mut wants);
        }
        wants
    }

    /// Records of tasks that ended on their own are cleared (the service, which
    /// no longer counts them, starts replacements).
    fn clear_ended_tasks(&mut self) {
        let live: &'a StoreState = &self.live.state;
        for t in live.tasks.values() {
            let host = t.host.clone();
            let why = match t.state {
                TaskState::Failed => StopReason::Failed { host },
                TaskState::Stopped => StopReason::Stopped { host },
                _ => continue,
            };
            self.out.stops.push(Stop {
                task_id: t.id.clone(),
                reason: why.to_string(),
            });
        }
    }

    /// The live tasks (pending or running) of each service with their host; those
    /// whose host is no longer up are stopped instead.
    fn live_tasks_by_service(&mut self) -> BTreeMap<&'a str, Vec<(&'a Task, &'a Host)>> {
        let live: &'a StoreState = &self.live.state;
        let mut by_service: BTreeMap<&str, Vec<(&Task, &Host)>> = BTreeMap::new();
        for t in live.tasks.values().filter(|t| is_live_task(t)) {
            match live.hosts.get(&t.host) {
                Some(h) if host_is_up(h) => by_service
                    .entry(t.service.as_str())
                    .or_default()
                    .push((t, h)),
                _ => self.out.stops.push(Stop {
                    task_id: t.id.clone(),
                    reason: StopReason::HostGone {
                        host: t.host.clone(),
                    }
                    .to_string(),
                }),
            }
        }
        by_service
    }

    /// Service `sname`, whose live tasks are `tasks`: stop the extras, and want a
    /// task for each move, replacement (a batch at most) and missing task.
    fn service_wants(
        &mut self,
        sname: &str,
        svc: &Service,
        tasks: &[(&'a Task, &'a Host)],
        counts: &HashMap<&str, usize>,
        wants: &mut Vec<Want>,
    ) {
        let Some(&(revision, shape)) = self.targets.get(&svc.task_definition) else {
            return;
        };
        let desired_count = svc.desired_count as usize;
        let ranked = self.rank_tasks(svc, revision, tasks, counts);
        let n = ranked.len();
        let keep_from = n.saturating_sub(desired_count);
        for r in &ranked[..keep_from] {
            self.out.stops.push(Stop {
                task_id: r.task.id.clone(),
                reason: StopReason::ScaledDown {
                    service: sname.to_string(),
                    from: n,
                    to: desired_count,
                }
                .to_string(),
            });
        }
        let kept = &ranked[keep_from..];
        let mut todo = self.takeovers(sname, svc, revision, kept);
        todo.extend((kept.len()..desired_count).map(|_| None));
        for replaces in todo {
            let id = self.new_task_id(sname);
            wants.push(Want {
                id,
                service: sname.to_string(),
                family: svc.task_definition.clone(),
                revision,
                shape,
                pool: svc.capacity_provider.clone(),
                strategy: svc.placement_strategy,
                distinct_host: svc.distinct_host,
                instance_types: svc.instance_types.clone(),
                reserve_compute: self.desired.reserves_compute(sname, &svc.capacity_provider),
                replaces,
            });
        }
    }

    /// `tasks` classed, in the order they are given up: by class, then from the
    /// host with the fewest tasks first (so hosts empty out), then by host and id.
    fn rank_tasks<'t>(
        &self,
        svc: &Service,
        revision: u32,
        tasks: &[(&'t Task, &'t Host)],
        counts: &HashMap<&str, usize>,
    ) -> Vec<Ranked<'t>> {
        let mut ranked: Vec<Ranked<'t>> = tasks
            .iter()
            .map(|&(task, host)| Ranked {
                class: if self.drained.contains_key(&task.host) || self.gpu_move(task).is_some() {
                    TaskClass::OnDrainedHost
                } else if replace_reason(task, host, svc, revision).is_some() {
                    TaskClass::Outdated
                } else {
                    TaskClass::Current
                },
                load: 0,
                task,
                host,
            })
            .collect();
        // The order only matters when some task stops or is replaced.
        if ranked.len() > svc.desired_count as usize
            || ranked.iter().any(|r| r.class != TaskClass::Current)
        {
            for r in &mut ranked {
                r.load = counts.get(r.task.host.as_str()).copied().unwrap_or(0);
            }
            ranked.sort_by(|a, b| {
                (a.class, a.load, &a.task.host, &a.task.id).cmp(&(
                    b.class,
                    b.load,
                    &b.task.host,
                    &b.task.id,
                ))
            });
        }
        ranked
    }

    /// The old tasks among `kept` that new ones take over from: every task on a
    /// drained host (a move), and the outdated ones up to the deployment's batch
    /// (a replacement); a note counts the outdated ones left for the next plan.
    fn takeovers(
        &mut self,
        sname: &str,
        svc: &Service,
        revision: u32,
        kept: &[Ranked<'_>],
    ) -> Vec<Option<Replaces>> {
        let batch = deployment_batch(svc.desired_count as usize, &svc.deployment);
        let mut replaced = 0usize;
        let mut todo: Vec<Option<Replaces>> = vec![];
        for r in kept {
            match r.class {
                TaskClass::OnDrainedHost => {
                    let why = self
                        .drained
                        .get(&r.task.host)
                        .cloned()
                        .or_else(|| self.gpu_move(r.task));
                    if let Some(why) = why {
                        todo.push(Some(Replaces::Move {
                            task_id: r.task.id.clone(),
                            why,
                        }));
                    }
                }
                TaskClass::Outdated if replaced < batch => {
                    if let Some(why) = replace_reason(r.task, r.host, svc, revision) {
                        replaced += 1;
                        todo.push(Some(Replaces::Replace {
                            task_id: r.task.id.clone(),
                            why,
                        }));
                    }
                }
                TaskClass::Outdated | TaskClass::Current => {}
            }
        }
        let outdated_left = kept
            .iter()
            .filter(|r| r.class == TaskClass::Outdated)
            .count()
            - replaced;
        if outdated_left > 0 {
            self.out.notes.push(format!("service.{sname}: {outdated_left} task(s) on an old revision wait for the next plan (deployment allows {batch} replacement(s) at once)"));
        }
        todo
    }
}

/// Why task `t` on host `h` must be replaced to match service `svc` at `revision`
/// of its task definition; `None` when it matches.
fn replace_reason(t: &Task, h: &Host, svc: &Service, revision: u32) -> Option<ReplaceReason> {
    if t.family != svc.task_definition {
        Some(ReplaceReason::TaskDefinition {
            from: t.family.clone(),
            to: svc.task_definition.clone(),
        })
    } else if t.revision != revision {
        Some(ReplaceReason::Revision {
            from: t.revision,
            to: revision,
        })
    } else if h.capacity_provider != svc.capacity_provider {
        Some(ReplaceReason::CapacityProvider {
            to: svc.capacity_provider.clone(),
        })
    } else {
        None
    }
}

/// How many tasks one plan may replace: `max(1, desired_count * max_surge_percent
/// / 100)`, or with no surge, as many as `min_healthy_percent` leaves (at least one).
fn deployment_batch(desired_count: usize, dep: &Deployment) -> usize {
    if dep.max_surge_percent > 0 {
        (desired_count * dep.max_surge_percent as usize / 100).max(1)
    } else {
        let healthy = (desired_count * dep.min_healthy_percent as usize).div_ceil(100);
        desired_count.saturating_sub(healthy).max(1)
    }
}
