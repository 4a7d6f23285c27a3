//! Step 3, triage: the active hosts sorted into kept, drained and closed (kept but
//! taking no new tasks while their replacement waits), and the pinned hosts of
//! `gpu_instance` resources that have none launched.

use super::reasons::{DrainReason, RetireReason, SickRank, Sickness};
use super::types::{HeldPool, Silence};
use super::{host_is_up, Planner};
use crate::catalog;
use crate::model::{CapacityProvider, Desired, Host, HostState, MpsHealth, StoreState};
use std::collections::{BTreeMap, HashMap};

/// The fewest up hosts a pool has for its silent hosts to be held back by
/// `unhealthy_threshold_percent`: in a smaller pool one dead host is most of it, and
/// is replaced as before.
const MASS_SILENCE_MIN_HOSTS: usize = 3;

/// A sick host with tasks, waiting its turn to drain.
struct SickHost {
    rank: SickRank,
    id: String,
    why: Sickness,
}

/// What triage decides for one active host.
enum Verdict {
    Keep,
    /// Drained now, whatever the pool's `max_draining_percent`.
    Drain(DrainReason),
    /// Drained within the pool's `max_draining_percent` (at once when it has no tasks).
    Sick(Sickness),
}

impl<'a> Planner<'a> {
    /// Sort the active hosts into kept, drained (`self.drained`) and closed
    /// (`self.closed`); retire the records of hosts the cloud already ended; launch
    /// a host for each `gpu_instance` left without one. `counts`: tasks per host now.
    pub(super) fn triage(&mut self, counts: &HashMap<&str, usize>) {
        let live: &'a StoreState = &self.live.state;
        self.drop_ended_hosts();
        // gpu_instance -> its kept host id.
        let mut pinned_kept: BTreeMap<String, String> = BTreeMap::new();
        // pool -> its sick hosts with tasks.
        let mut sick: BTreeMap<String, Vec<SickHost>> = BTreeMap::new();
        let mut pool_sizes: BTreeMap<&str, usize> = BTreeMap::new();
        // pool -> its kept hosts launched with other settings than the pool's now.
        let mut outdated: BTreeMap<String, Vec<super::refresh::OutdatedHost>> = BTreeMap::new();
        let up: Vec<&'a Host> = live.hosts.values().filter(|h| host_is_up(h)).collect();
        let mut verdicts = Vec::with_capacity(up.len());
        for h in &up {
            *pool_sizes.entry(h.capacity_provider.as_str()).or_default() += 1;
            let v = self.verdict(h, &pinned_kept);
            if let (Verdict::Keep, Some(gi)) = (&v, &h.gpu_instance) {
                // As the loop below records them: a kept, up-to-date host is its
                // gpu_instance's own (hosts are seen in id order).
                if self.outdated(h, counts).is_none() {
                    pinned_kept.insert(gi.clone(), h.id.clone());
                }
            }
            verdicts.push(v);
        }
        pinned_kept.clear();
        let held_back = self.mass_silence(&up, &verdicts, &pool_sizes);
        for (h, verdict) in up.into_iter().zip(verdicts) {
            let verdict = match verdict {
                Verdict::Sick(why)
                    if held_back.contains(h.capacity_provider.as_str())
                        && why.rank() == SickRank::Silent =>
                {
                    // Kept, and closed to new tasks, until its reports come back.
                    self.closed.insert(h.id.clone());
                    continue;
                }
                v => v,
            };
            match verdict {
                Verdict::Drain(why) => {
                    self.drained.insert(h.id.clone(), why);
                }
                Verdict::Sick(why) if counts.get(h.id.as_str()).copied().unwrap_or(0) == 0 => {
                    // Nothing to move: retire it at once.
                    self.drained.insert(h.id.clone(), DrainReason::Sick(why));
                }
                Verdict::Sick(why) => {
                    sick.entry(h.capacity_provider.clone())
                        .or_default()
                        .push(SickHost {
                            rank: why.rank(),
                            id: h.id.clone(),
                            why,
                        });
                }
                Verdict::Keep => {
                    self.close_cordoned(h);
                    if let Some(o) = self.outdated(h, counts) {
                        // Rolled (or kept) by `refresh_pool` below.
                        outdated
                            .entry(h.capacity_provider.clone())
                            .or_default()
                            .push(o);
                        continue;
                    }
                    if let Some(gi_name) = &h.gpu_instance {
                        pinned_kept.insert(gi_name.clone(), h.id.clone());
                    }
                }
            }
        }
        for (pool, list) in sick {
            self.drain_sick(&pool, list, &pool_sizes, &mut pinned_kept);
        }
        for (pool, list) in outdated {
            let size = pool_sizes.get(pool.as_str()).copied().unwrap_or(0);
            self.refresh_pool(&pool, list, size, &mut pinned_kept);
        }
        self.launch_pinned(&pinned_kept);
    }

    /// The pools where more than `unhealthy_threshold_percent` of the up hosts are
    /// silent or impaired at once (`verdicts`, in the order of `up`): their silent
    /// hosts are not replaced (a note says why; impaired ones still are). A mass
    /// silence is more likely the control plane's, the store's or the network's fault
    /// than the hosts' own.
    fn mass_silence(
        &mut self,
        up: &[&Host],
        verdicts: &[Verdict],
        pool_sizes: &BTreeMap<&str, usize>,
    ) -> std::collections::BTreeSet<&'a str> {
        let mut unwell: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for (h, v) in up.iter().zip(verdicts) {
            if let Verdict::Sick(why) = v {
                let e = unwell.entry(h.capacity_provider.as_str()).or_default();
                match why.rank() {
                    SickRank::Silent => e.0 += 1,
                    SickRank::Impaired => e.1 += 1,
                    _ => {}
                }
            }
        }
        let mut held = std::collections::BTreeSet::new();
        for (pool, (silent, impaired)) in unwell {
            let size = pool_sizes.get(pool).copied().unwrap_or(0);
            let threshold = self
                .desired
                .capacity_providers
                .get(pool)
                .map_or(100, |p| usize::from(p.unhealthy_threshold_percent));
            // A small pool's dead host is still replaced: the budget holds from
            // MASS_SILENCE_MIN_HOSTS hosts up.
            if silent == 0
                || threshold >= 100
                || size < MASS_SILENCE_MIN_HOSTS
                || (silent + impaired) * 100 <= threshold * size
            {
                continue;
            }
            let Some((name, _)) = self.desired.capacity_providers.get_key_value(pool) else {
                continue;
            };
            let h = HeldPool {
                pool: pool.to_string(),
                silent,
                impaired,
                size,
                threshold_percent: threshold,
            };
            self.out.notes.push(h.text());
            self.out.held_pools.push(h);
            held.insert(name.as_str());
        }
        held
    }

    /// Records of hosts the cloud already ended: dropped (their tasks are replaced
    /// by the services step).
    fn drop_ended_hosts(&mut self) {
        let live: &'a StoreState = &self.live.state;
        for h in live.hosts.values() {
            if let Some(why) = RetireReason::ended_outside(h.state) {
                self.retire(&h.id, why);
            }
        }
    }

    /// Whether active host `h` is kept, drained or sick. `pinned_kept`: the
    /// `gpu_instance` resources that already kept a host (hosts are seen in id order).
    fn verdict(&self, h: &Host, pinned_kept: &BTreeMap<String, String>) -> Verdict {
        let Some(pool) = self.desired.capacity_providers.get(&h.capacity_provider) else {
            return Verdict::Drain(DrainReason::PoolRemoved {
                pool: h.capacity_provider.clone(),
            });
        };
        if let Some(gi_name) = &h.gpu_instance {
            let name = gi_name.clone();
            let Some(gi) = self.desired.gpu_instances.get(gi_name) else {
                return Verdict::Drain(DrainReason::GpuInstanceRemoved { name });
            };
            let want_type = gi.instance_type.as_deref().unwrap_or(&pool.instance_type);
            if gi.capacity_provider != h.capacity_provider || want_type != h.instance_type {
                return Verdict::Drain(DrainReason::GpuInstanceReplaced { name });
            }
            if pinned_kept.contains_key(gi_name) {
                return Verdict::Drain(DrainReason::GpuInstanceDuplicate { name });
            }
        }
        if let Some(why) = self.held_drain(h) {
            return Verdict::Drain(why);
        }
        if let Some(n) = &h.health.notice {
            // EC2 ends it soon, whatever the pool's draining budget.
            return Verdict::Drain(DrainReason::Notice(n.clone()));
        }
        let sick = if h.is_registered() {
            self.registered_sickness(h)
        } else {
            self.sickness(h, pool)
        };
        match sick {
            Some(why) => Verdict::Sick(why),
            None => Verdict::Keep,
        }
    }

    /// What ails `h`, a host of `pool`, if anything; the first that applies of
    /// draining, impaired (MPS, then the other health checks; not in a pool with
    /// `auto_repair = false`), silent, replaced instance type, replaced market.
    fn sickness(&self, h: &Host, pool: &CapacityProvider) -> Option<Sickness> {
        if h.state == HostState::Draining {
            Some(Sickness::Draining)
        } else if h.mps_health == MpsHealth::Impaired && self.repairs_mps(h, pool) {
            Some(Sickness::MpsImpaired)
        } else if let Some(s) = self.health_sickness(h, pool) {
            Some(s)
        } else if let Some(s) = self.silence(h) {
            Some(s)
        } else if h.gpu_instance.is_none() && !pool.allows_type(&h.instance_type) {
            Some(Sickness::InstanceTypeReplaced {
                from: h.instance_type.clone(),
                to: pool.instance_type.clone(),
            })
        } else if h.market != pool.market {
            Some(Sickness::MarketReplaced {
                from: h.market,
                to: pool.market,
            })
        } else {
            None
        }
    }

    /// `h` is silent at `observed_at` ([`Options::silence`](crate::plan::Options::silence)).
    pub(super) fn silence(&self, h: &Host) -> Option<Sickness> {
        self.options
            .silence(h, self.live.observed_at)
            .map(|s| match s {
                Silence::NoReportFor(seconds) => Sickness::Silent { seconds },
                Silence::NeverReported(seconds) => Sickness::NeverReported { seconds },
            })
    }

    /// Drain the sick hosts (with tasks) of `pool`, in rank then id order, at most
    /// `max(1, hosts * max_draining_percent / 100)` of them, those already draining
    /// always; the others are closed to new tasks, with a note.
    fn drain_sick(
        &mut self,
        pool: &str,
        mut list: Vec<SickHost>,
        pool_sizes: &BTreeMap<&str, usize>,
        pinned_kept: &mut BTreeMap<String, String>,
    ) {
        // Host ids are unique: (rank, id) orders the list completely.
        list.sort_by(|a, b| (a.rank, &a.id).cmp(&(b.rank, &b.id)));
        let pct = self
            .desired
            .capacity_providers
            .get(pool)
            .map_or(100, |p| usize::from(p.max_draining_percent));
        let limit = (pool_sizes.get(pool).copied().unwrap_or(0) * pct / 100).max(1);
        let mut n = 0;
        for SickHost { rank, id, why } in list {
            if rank == SickRank::Draining || n < limit {
                n += 1;
                self.drained.insert(id, DrainReason::Sick(why));
            } else {
                self.out.notes.push(format!("host {id} ({why}) waits for its replacement: capacity_provider.{pool} allows {limit} host(s) draining at once (max_draining_percent)"));
                // A pinned host that waits keeps its place: no second host for its resource yet.
                if let Some(gi) = self
                    .live
                    .state
                    .hosts
                    .get(&id)
                    .and_then(|h| h.gpu_instance.clone())
                {
                    pinned_kept.entry(gi).or_insert_with(|| id.clone());
                }
                self.closed.insert(id);
            }
        }
    }

    /// Launch a pinned host for each `gpu_instance` without a kept one.
    fn launch_pinned(&mut self, pinned_kept: &BTreeMap<String, String>) {
        let desired: &'a Desired = self.desired;
        for (gi_name, gi) in &desired.gpu_instances {
            if pinned_kept.contains_key(gi_name) {
                continue;
            }
            // Validated: the pool exists.
            let Some(pool) = desired
                .capacity_providers
                .get(&gi.capacity_provider)
                .filter(|p| !p.is_registered())
            else {
                continue;
            };
            let itype = gi.instance_type.as_deref().unwrap_or(&pool.instance_type);
            let Some(it) = catalog::lookup(itype) else {
                continue;
            };
            let id = self.new_host_id(&gi.capacity_provider);
            let mut host = self.host_record(&id, &gi.capacity_provider, it, Some(gi_name.clone()));
            if host.zone.is_none() {
                host.zone = gi.availability_zone.clone();
            }
            self.out.launches.extend(self.launch_of(&host));
            self.hosts.insert(id, host);
        }
    }
}
