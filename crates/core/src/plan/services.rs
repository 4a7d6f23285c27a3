//! Step 4, services: which of its tasks each service keeps, stops, moves and
//! replaces, and the tasks it wants started (new ones, replacements, the new
//! halves of moves), before placement.

use super::deploy::Rollout;
use super::reasons::{ReplaceReason, Replaces, StopReason};
use super::types::Stop;
use super::{host_is_up, is_live_task, Planner};
use crate::model::{
    unhealthy_reason, Desired, Host, PlacementStrategy, Service, StoreState, Task, TaskShape,
    TaskState,
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
    /// Host ports the task needs on any host (`Request::host_ports`).
    pub(super) host_ports: Vec<crate::model::HostPortKey>,
    pub(super) replaces: Option<Replaces>,
    /// The task it replaces is not serving (not healthy, or its host is silent): it
    /// stops as soon as this one is recorded. Otherwise it stops once this one is
    /// healthy (`healthy_after_seconds`).
    pub(super) at_once: bool,
    pub(super) healthy_after_seconds: u64,
    /// Set for a job's run (`plan/jobs.rs`).
    pub(super) job: Option<crate::model::JobRun>,
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
    /// Healthy now ([`Planner::is_healthy`]).
    healthy: bool,
    /// Tasks on its host (only counted when the order matters).
    load: usize,
    task: &'t Task,
    host: &'t Host,
}

impl<'a> Planner<'a> {
    /// Stop the tasks that end here (ended, host gone, service removed, scaled
    /// down) and return the tasks to start. `counts`: tasks per host now.
    pub(super) fn services(&mut self, counts: &HashMap<&str, usize>) -> Vec<Want> {
        let failed = self.clear_ended_tasks();
        let by_service = self.live_tasks_by_service();
        for (sname, tasks) in &by_service {
            if !self.desired.services.contains_key(*sname) {
                for (t, _) in tasks {
                    self.out.stops.push(Stop::now(
                        t.id.clone(),
                        StopReason::ServiceRemoved {
                            service: sname.to_string(),
                        }
                        .to_string(),
                    ));
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
            let failed = failed.get(sname.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            self.service_wants(sname, svc, tasks, failed, counts, &mut wants);
        }
        wants
    }

    /// Records of tasks that ended on their own are cleared (the service, which
    /// no longer counts them, starts replacements). Returns the failed ones per
    /// service: (revision, reason), for the deployments' circuit breakers.
    fn clear_ended_tasks(&mut self) -> BTreeMap<&'a str, Vec<(u32, String)>> {
        let live: &'a StoreState = &self.live.state;
        let mut failed: BTreeMap<&'a str, Vec<(u32, String)>> = BTreeMap::new();
        // A job's runs are `plan/jobs.rs`'s.
        for t in live.tasks.values().filter(|t| t.job.is_none()) {
            let host = t.host.clone();
            let why = match t.state {
                TaskState::Failed => {
                    // A task lost with its host (terminated, a Spot interruption) is
                    // the host's failure, not its revision's: no deployment counts it.
                    let host_lost = live.hosts.get(&t.host).is_none_or(|h| !host_is_up(h));
                    if !host_lost {
                        let reason = self
                            .live
                            .task_status
                            .get(&t.id)
                            .and_then(|s| s.reason.clone())
                            .unwrap_or_else(|| format!("task {} failed on {host}", t.id));
                        failed
                            .entry(t.service.as_str())
                            .or_default()
                            .push((t.revision, reason));
                    }
                    StopReason::Failed { host }
                }
                TaskState::Stopped => StopReason::Stopped { host },
                TaskState::Running => match unhealthy_reason(self.live.task_status.get(&t.id)) {
                    Some(why) => {
                        failed
                            .entry(t.service.as_str())
                            .or_default()
                            .push((t.revision, why.clone()));
                        // It stops now (its agent stops it before starting what
                        // this plan adds there), so its room is free to place in.
                        self.tasks.remove(&t.id);
                        StopReason::Unhealthy { host, why }
                    }
                    None => continue,
                },
                _ => continue,
            };
            self.out
                .stops
                .push(Stop::now(t.id.clone(), why.to_string()));
        }
        failed
    }

    /// The live tasks (pending or running) of each service with their host; those
    /// whose host is no longer up are stopped instead.
    fn live_tasks_by_service(&mut self) -> BTreeMap<&'a str, Vec<(&'a Task, &'a Host)>> {
        let live: &'a StoreState = &self.live.state;
        let mut by_service: BTreeMap<&str, Vec<(&Task, &Host)>> = BTreeMap::new();
        let ended = |t: &Task| unhealthy_reason(self.live.task_status.get(&t.id)).is_some();
        for t in live
            .tasks
            .values()
            .filter(|t| t.job.is_none() && is_live_task(t) && !ended(t))
        {
            match live.hosts.get(&t.host) {
                Some(h) if host_is_up(h) => by_service
                    .entry(t.service.as_str())
                    .or_default()
                    .push((t, h)),
                _ => self.out.stops.push(Stop::now(
                    t.id.clone(),
                    StopReason::HostGone {
                        host: t.host.clone(),
                    }
                    .to_string(),
                )),
            }
        }
        by_service
    }

    /// Service `sname`, whose live tasks are `tasks` (and whose tasks this plan
    /// clears as failed: `failed`): its rolling deployment within ECS's bounds.
    /// Current tasks beyond `desired_count` stop (unhealthy first). Each leaving task
    /// (on a drained host, or of another revision) is replaced: an unhealthy one at
    /// once (its successor started, it stopped), a healthy one once its successor is
    /// healthy, or at once while the healthy tasks stay at least
    /// `min_healthy_percent` of `desired_count` (to make room when the surge allows
    /// no more tasks). Tasks run never above `max_surge_percent` over `desired_count`.
    fn service_wants(
        &mut self,
        sname: &str,
        svc: &Service,
        tasks: &[(&'a Task, &'a Host)],
        failed: &[(u32, String)],
        counts: &HashMap<&str, usize>,
        wants: &mut Vec<Want>,
    ) {
        let plain: Vec<&Task> = tasks.iter().map(|(t, _)| *t).collect();
        let Some(rollout) = self.rollout(sname, svc, &plain, failed) else {
            return;
        };
        let desired_count = svc.desired_count as usize;
        let ranked = self.rank_tasks(svc, &rollout, tasks, counts);
        let (mut current, leaving): (Vec<&Ranked<'_>>, Vec<&Ranked<'_>>) =
            ranked.iter().partition(|r| r.class == TaskClass::Current);
        // 1. Current tasks beyond the count stop, the unhealthy first.
        if current.len() > desired_count {
            current.sort_by_key(|r| r.healthy);
            let n = ranked.len();
            for r in current.drain(..current.len() - desired_count) {
                self.out.stops.push(Stop::now(
                    r.task.id.clone(),
                    StopReason::ScaledDown {
                        service: sname.to_string(),
                        from: n,
                        to: desired_count,
                    }
                    .to_string(),
                ));
            }
        }
        // 2. The leaving tasks, within the bounds.
        let (healthy, unhealthy): (Vec<&Ranked<'_>>, Vec<&Ranked<'_>>) =
            leaving.iter().partition(|r| r.healthy);
        let dep = &svc.deployment;
        let healthy_now = current.iter().filter(|r| r.healthy).count() + healthy.len();
        let mut budget = healthy_now.saturating_sub(dep.min_healthy(svc.desired_count) as usize);
        let max_running = dep.max_running(svc.desired_count) as usize;
        let need = desired_count.saturating_sub(current.len());
        let mut room = max_running.saturating_sub(current.len() + healthy.len());
        // Healthy leaving tasks stopped first, to make room the surge does not give
        // (only when a successor can start: a rollout that starts nothing stops none).
        let stop_first = if rollout.target.is_some() && room < need {
            budget.min(need - room).min(healthy.len())
        } else {
            0
        };
        budget -= stop_first;
        room += stop_first;
        let starts = match rollout.target {
            Some(_) => need.min(room),
            None => 0,
        };
        // Successors: first those stopped to make room (the room is theirs), then the
        // healthy leaving tasks that stay (each stops once its successor is healthy),
        // then the unhealthy ones (they stop at once), then new tasks.
        let (first, stay) = healthy.split_at(stop_first);
        let for_first = starts.min(first.len());
        let gated = (starts - for_first).min(stay.len());
        let quick = (starts - for_first - gated).min(unhealthy.len());
        let mut todo: Vec<(Option<Replaces>, bool)> = vec![];
        for r in &first[..for_first] {
            todo.push((self.takeover(svc, &rollout, r), true));
        }
        for r in &stay[..gated] {
            todo.push((self.takeover(svc, &rollout, r), false));
        }
        for r in &unhealthy[..quick] {
            todo.push((self.takeover(svc, &rollout, r), true));
        }
        todo.extend((for_first + gated + quick..starts).map(|_| (None, true)));
        // Leaving tasks with no successor go only once the service has its count
        // without them (healthy ones while the budget lasts); the rest wait for a
        // later plan. Nothing is stopped for a rollout that cannot start its
        // replacements (a failed deployment, a retry waiting for its backoff).
        let enough = current.len() + starts >= desired_count;
        let mut waiting = 0usize;
        for r in &unhealthy[quick..] {
            if enough {
                self.stop_leaving(sname, r);
            } else {
                waiting += 1;
            }
        }
        for r in &stay[gated..] {
            if enough && budget > 0 {
                budget -= 1;
                self.stop_leaving(sname, r);
            } else {
                waiting += 1;
            }
        }
        if waiting > 0 {
            self.out.notes.push(format!(
                "service.{sname}: {waiting} task(s) to replace wait for the next plan (deployment: min_healthy_percent {}, max_surge_percent {}; {healthy_now} healthy now)",
                dep.min_healthy_percent, dep.max_surge_percent
            ));
        }
        if let Some(target) = rollout.target {
            self.push_wants(sname, svc, target, todo, wants);
        }
    }

    /// A wanted task of `svc` at `target` (revision, shape) for each of `todo` (what
    /// it takes over, and whether that stops at once).
    fn push_wants(
        &mut self,
        sname: &str,
        svc: &Service,
        (revision, shape): (u32, TaskShape),
        todo: Vec<(Option<Replaces>, bool)>,
        wants: &mut Vec<Want>,
    ) {
        for (replaces, at_once) in todo {
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
                host_ports: self.fixed_ports(&svc.task_definition, revision),
                replaces,
                at_once,
                healthy_after_seconds: svc.deployment.min_healthy_seconds,
                job: None,
            });
        }
    }

    /// What a successor of leaving task `r` takes over: a move off its drained host,
    /// or a replacement by the rollout's revision.
    fn takeover(&self, svc: &Service, rollout: &Rollout, r: &Ranked<'_>) -> Option<Replaces> {
        if r.class == TaskClass::OnDrainedHost {
            let why = self
                .drained
                .get(&r.task.host)
                .cloned()
                .or_else(|| self.gpu_move(r.task))?;
            return Some(Replaces::Move {
                task_id: r.task.id.clone(),
                why,
            });
        }
        replace_reason(r.task, r.host, svc, rollout).map(|why| Replaces::Replace {
            task_id: r.task.id.clone(),
            why,
        })
    }

    /// Stop leaving task `r` without a successor: the service has its count without it.
    fn stop_leaving(&mut self, sname: &str, r: &Ranked<'_>) {
        let why = match r.class {
            TaskClass::OnDrainedHost => self
                .drained
                .get(&r.task.host)
                .cloned()
                .or_else(|| self.gpu_move(r.task))
                .map(|d| d.to_string()),
            _ => None,
        };
        self.out.stops.push(Stop::now(
            r.task.id.clone(),
            StopReason::Surplus {
                service: sname.to_string(),
                why: why.unwrap_or_else(|| "an old revision".to_string()),
            }
            .to_string(),
        ));
    }

    /// `tasks` classed, in the order they are given up: by class, then from the
    /// host with the fewest tasks first (so hosts empty out), then by host and id.
    fn rank_tasks<'t>(
        &self,
        svc: &Service,
        rollout: &Rollout,
        tasks: &[(&'t Task, &'t Host)],
        counts: &HashMap<&str, usize>,
    ) -> Vec<Ranked<'t>> {
        let mut ranked: Vec<Ranked<'t>> = tasks
            .iter()
            .map(|&(task, host)| Ranked {
                class: if self.drained.contains_key(&task.host) || self.gpu_move(task).is_some() {
                    TaskClass::OnDrainedHost
                } else if replace_reason(task, host, svc, rollout).is_some() {
                    TaskClass::Outdated
                } else {
                    TaskClass::Current
                },
                healthy: self.is_healthy(task, svc),
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
}

/// Why task `t` on host `h` must be replaced to match service `svc` as `rollout`
/// deploys it; `None` when it matches (its revision is one the rollout keeps).
fn replace_reason(t: &Task, h: &Host, svc: &Service, rollout: &Rollout) -> Option<ReplaceReason> {
    let to = rollout
        .target
        .map(|(r, _)| r)
        .or_else(|| rollout.accepted.iter().next_back().copied())
        .unwrap_or(t.revision);
    if t.family != svc.task_definition {
        Some(ReplaceReason::TaskDefinition {
            from: t.family.clone(),
            to: svc.task_definition.clone(),
        })
    } else if !rollout.accepted.contains(&t.revision) {
        Some(ReplaceReason::Revision {
            from: t.revision,
            to,
        })
    } else if h.capacity_provider != svc.capacity_provider {
        Some(ReplaceReason::CapacityProvider {
            to: svc.capacity_provider.clone(),
        })
    } else {
        None
    }
}
