//! Step 7, pools: drained hosts retired once empty, empty hosts beyond `min_size`
//! retired, pools below `min_size` topped up, and a note for a pool left above
//! `max_size` by hosts that keep tasks.

use super::reasons::{DrainReason, RetireReason};
use super::{host_is_up, task_counts, Planner};
use crate::catalog;
use crate::model::{CapacityProvider, Desired, Host, HostState};
use std::collections::BTreeSet;

impl<'a> Planner<'a> {
    /// Retire the drained hosts left empty and size every pool to its limits.
    pub(super) fn pools(&mut self) {
        let (empty, drained) = {
            let counts = task_counts(&self.tasks);
            let empty: BTreeSet<String> = self
                .hosts
                .keys()
                .filter(|id| !counts.contains_key(id.as_str()))
                .cloned()
                .collect();
            let drained: Vec<(String, DrainReason, usize)> = self
                .drained
                .iter()
                .map(|(id, why)| {
                    let left = counts.get(id.as_str()).copied().unwrap_or(0);
                    (id.clone(), why.clone(), left)
                })
                .collect();
            (empty, drained)
        };
        for (id, why, left) in drained {
            if self.keeps_drained(&id, &why, left) {
                continue;
            }
            if left == 0 {
                self.retire(&id, RetireReason::Drained(why));
            } else {
                self.out.notes.push(format!("host {id} ({why}) keeps {left} task(s) that could not move; it is retired once they do"));
            }
        }
        let desired: &'a Desired = self.desired;
        for (pool, cp) in &desired.capacity_providers {
            self.size_pool(pool, cp, &empty);
        }
    }

    /// Retire `pool`'s empty hosts (among `empty`) beyond `min_size`, "newest"
    /// first (hosts carry no launch time, so: pending ones first, then by id,
    /// descending); note a pool left above `max_size`; launch empty hosts up to
    /// `min_size`. Pinned hosts are no members: never retired for being empty.
    fn size_pool(&mut self, pool: &str, cp: &CapacityProvider, empty: &BTreeSet<String>) {
        if cp.is_registered() {
            self.registered_pool_note(pool);
            return;
        }
        let min_size = cp.min_size;
        let mut members = self.pool_members(pool, true);
        members.sort_by(|a, b| {
            let pa = a.state != HostState::Pending;
            let pb = b.state != HostState::Pending;
            (pa, std::cmp::Reverse(&a.id)).cmp(&(pb, std::cmp::Reverse(&b.id)))
        });
        let mut size = members.len();
        let idle: Vec<String> = members
            .iter()
            .filter(|h| empty.contains(&h.id) && !self.held.contains(&h.id))
            .map(|h| h.id.clone())
            .collect();
        for id in idle {
            if size <= min_size as usize {
                break;
            }
            size -= 1;
            self.retire(
                &id,
                RetireReason::Empty {
                    pool: pool.to_string(),
                    min_size,
                },
            );
        }
        let max_size = cp.max_size as usize;
        if size > max_size {
            self.out.notes.push(format!(
                "capacity_provider.{pool} keeps {size} hosts with tasks, above its max_size {max_size}: \
                 lower the services' desired_count or plan with consolidation to empty some"
            ));
        }
        while size < min_size as usize {
            size += 1;
            let Some(it) = catalog::lookup(&cp.instance_type) else {
                break;
            };
            let id = self.new_host_id(pool);
            let host = self.host_record(&id, pool, it, None);
            self.out.launches.extend(self.launch_of(&host));
            self.hosts.insert(id, host);
        }
    }

    /// (pool, min_size) of every desired pool.
    pub(super) fn pool_min_sizes(&self) -> Vec<(String, u32)> {
        self.desired
            .capacity_providers
            .iter()
            .map(|(n, p)| (n.clone(), p.min_size))
            .collect()
    }

    /// The up, unpinned, not drained hosts of `pool` (with `closed`: also those taking no new tasks).
    pub(super) fn pool_members(&self, pool: &str, closed: bool) -> Vec<&Host> {
        self.hosts
            .values()
            .filter(|h| {
                host_is_up(h)
                    && h.capacity_provider == pool
                    && h.gpu_instance.is_none()
                    && !self.drained.contains_key(&h.id)
                    && (closed || !self.closed.contains(&h.id))
            })
            .collect()
    }
}
