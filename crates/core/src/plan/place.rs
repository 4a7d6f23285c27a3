//! Step 5, placement: the wanted tasks placed in one call to the engine, onto the
//! kept hosts and the new hosts it opens; each placed task becomes a start, a
//! replacement or a move, each other an unplaced entry saying why.

use super::reasons::{MoveReason, Replaces, StopReason, UnplacedCause, UnplacedReason};
use super::services::Want;
use super::types::{Move, Start, Stop, Successor};
use super::{host_is_up, Planner};
use crate::model::{Task, TaskState};
use crate::placement::{self, HostRef, PlacementInput, Request};
use std::collections::BTreeMap;

impl<'a> Planner<'a> {
    /// Place `wants` on the kept hosts (their load from every task that occupies
    /// room, including those this plan stops: apply starts before it stops, so
    /// freed room is only used by the next plan) and on new hosts. Drained hosts
    /// are left out, so their replacements may exceed `max_size` for a while.
    pub(super) fn place(&mut self, wants: Vec<Want>) {
        if wants.is_empty() {
            return;
        }
        let kept_hosts: Vec<String> = self
            .hosts
            .values()
            .filter(|h| host_is_up(h) && !self.drained.contains_key(&h.id))
            .map(|h| h.id.clone())
            .collect();
        let input = PlacementInput {
            pools: self.pool_specs(&kept_hosts, false),
            hosts: self.host_loads(&kept_hosts),
            requests: wants.iter().map(want_request).collect(),
            seed: self.desired.settings.seed,
        };
        let outcome = placement::place(&input);
        let new_ids = self.open_new_hosts(&outcome);
        let by_key: BTreeMap<&str, &placement::Assignment> = outcome
            .assignments
            .iter()
            .map(|a| (a.key.as_str(), a))
            .collect();
        let unplaced: BTreeMap<&str, &placement::Unplaced> = outcome
            .unplaced
            .iter()
            .map(|u| (u.key.as_str(), u))
            .collect();
        for w in wants {
            // The host each assignment names, when the engine named one we know.
            let placed = by_key.get(w.id.as_str()).and_then(|a| {
                let host = match &a.host {
                    HostRef::Existing { id } => self.hosts.contains_key(id).then(|| id.clone()),
                    HostRef::New { pool, ordinal } => {
                        new_ids.get(&(pool.clone(), *ordinal)).cloned()
                    }
                };
                host.map(|h| (h, a.gpus.clone()))
            });
            let Some((host, gpus)) = placed else {
                let cause = match unplaced.get(w.id.as_str()) {
                    Some(u) => UnplacedCause::Refused(name_new_hosts(&u.reason, &new_ids)),
                    None if by_key.contains_key(w.id.as_str()) => UnplacedCause::UnknownHost,
                    None => UnplacedCause::NoAnswer,
                };
                let replaces = w.replaces.as_ref().map(|r| r.task_id().to_string());
                let reason = UnplacedReason {
                    takeover: w.replaces,
                    cause,
                };
                let reason = self.unplaced_hint(&w.pool, reason.to_string());
                self.out.unplaced.push(placement::Unplaced {
                    key: w.id,
                    service: w.service,
                    reason,
                    replaces,
                });
                continue;
            };
            self.take_place(w, host, gpus);
        }
        self.note_client_bound();
    }

    /// A note for each GPU this plan starts MPS tasks on that its pool's
    /// `mps { max_clients }` fills before its memory (issue 50): why tasks that
    /// would fit by memory go to another GPU or host.
    fn note_client_bound(&mut self) {
        let touched: std::collections::BTreeSet<(&str, u32)> = self
            .out
            .starts
            .iter()
            .filter(|s| matches!(s.task.shape.gpu, crate::model::TaskGpu::Mps { .. }))
            .filter_map(|s| Some((s.task.host.as_str(), *s.task.gpus.first()?)))
            .collect();
        // Clients and memory of each touched GPU, in one pass over the tasks (not a
        // scan of every task per GPU: issue 52).
        let mut load: BTreeMap<(&str, u32), (u32, u64)> =
            touched.iter().map(|k| (*k, (0, 0))).collect();
        for t in self.tasks.values() {
            let Some(gpu) = t.gpus.first() else { continue };
            let Some((clients, memory)) = load.get_mut(&(t.host.as_str(), *gpu)) else {
                continue;
            };
            if let crate::model::TaskGpu::Mps {
                memory_mib,
                clients: c,
                ..
            } = t.shape.gpu
            {
                *clients += c.max(1);
                *memory += memory_mib;
            }
        }
        let mut notes = Vec::new();
        for ((host, gpu), (clients, memory)) in load {
            let Some(h) = self.hosts.get(host) else {
                continue;
            };
            let Some(pool) = self.desired.capacity_providers.get(&h.capacity_provider) else {
                continue;
            };
            let total = h
                .gpus
                .iter()
                .find(|g| g.index == gpu)
                .map_or(0, |g| g.memory_mib);
            if clients >= pool.mps.max_clients && memory < total {
                notes.push(format!(
                    "{host} GPU {gpu} holds {clients} MPS clients, its pool's mps.max_clients, with {} MiB of memory left: further MPS tasks go to other GPUs",
                    total - memory
                ));
            }
        }
        self.out.notes.extend(notes);
    }

    /// Record wanted task `w`, placed on GPUs `gpus` of `host`: a start, and for a
    /// takeover the stop of the task it replaces, or the move of the task it moves.
    fn take_place(&mut self, w: Want, host: String, gpus: Vec<u32>) {
        let scrape = w
            .job
            .is_none()
            .then(|| self.desired.services.get(&w.service))
            .flatten()
            .and_then(|s| s.auto_scaling.as_ref()?.scrape());
        let mut task = Task {
            id: w.id,
            service: w.service,
            family: w.family,
            revision: w.revision,
            host,
            gpus,
            shape: w.shape,
            state: TaskState::Pending,
            ports: Vec::new(),
            scrape,
            job: w.job.clone(),
        };
        if let Err(why) = self.give_ports(&mut task) {
            let replaces = w.replaces.as_ref().map(|r| r.task_id().to_string());
            let reason = UnplacedReason {
                takeover: w.replaces,
                cause: UnplacedCause::Refused(why),
            };
            self.out.unplaced.push(placement::Unplaced {
                key: task.id,
                service: task.service,
                reason: reason.to_string(),
                replaces,
            });
            return;
        }
        self.tasks.insert(task.id.clone(), task.clone());
        match w.replaces {
            None => self.out.starts.push(Start { task }),
            Some(Replaces::Replace { task_id, why }) => {
                self.out.starts.push(Start { task: task.clone() });
                self.tasks.remove(&task_id);
                let after_healthy = (!w.at_once).then(|| Successor {
                    task_id: task.id.clone(),
                    host: task.host.clone(),
                    healthy_after_seconds: w.healthy_after_seconds,
                });
                self.out.stops.push(Stop {
                    task_id,
                    reason: StopReason::Replaced { by: task.id, why }.to_string(),
                    after_healthy,
                });
            }
            Some(Replaces::Move { task_id, why }) => {
                self.tasks.remove(&task_id);
                let hold = matches!(why, super::reasons::DrainReason::Outdated { .. });
                self.out.moves.push(Move {
                    from_task: task_id,
                    to: task,
                    reason: MoveReason::Drained(why).to_string(),
                    hold,
                    at_once: w.at_once,
                    healthy_after_seconds: w.healthy_after_seconds,
                });
            }
        }
    }
}

fn want_request(w: &Want) -> Request {
    Request {
        key: w.id.clone(),
        service: w.service.clone(),
        pool: w.pool.clone(),
        shape: w.shape,
        strategy: w.strategy,
        distinct_host: w.distinct_host,
        instance_types: w.instance_types.clone(),
        gpu_models: vec![],
        reserve_compute: w.reserve_compute,
        host_ports: w.host_ports.clone(),
    }
}

/// The engine names hosts it opens `new POOL host #N`; use their planned ids.
fn name_new_hosts(reason: &str, ids: &BTreeMap<(String, u32), String>) -> String {
    let mut r = reason.to_string();
    if r.contains(" host #") {
        // Highest ordinals first, so that `#1` does not eat the start of `#12`.
        for ((pool, ordinal), id) in ids.iter().rev() {
            r = r.replace(&format!("new {pool} host #{ordinal}"), id);
        }
    }
    r
}
