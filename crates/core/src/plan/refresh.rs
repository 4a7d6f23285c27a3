//! Rolling host refresh (a part of step 3, triage): the pool's outdated hosts (see
//! [`LaunchRecord`]), a batch of them drained per plan, after the sick ones and
//! within `max_draining_percent` (and `refresh { min_healthy_percent }`), emptiest
//! first; the others wait, taking no new tasks. The refresh stops (keeps every old
//! host, accepting tasks) while a host launched with the pool's current settings is
//! impaired or silent, and waits while one is still booting or `refresh {
//! pause_seconds }` since the newest one's launch has not passed. See docs/refresh.md.

use super::reasons::DrainReason;
use super::{host_is_up, task_counts, Planner};
use crate::model::{
    CapacityProvider, Desired, Host, LaunchRecord, MpsHealth, ResourceAddr, ResourceKind,
    SettingChange, StoreState,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// A pool's rollout as this plan leaves it (`Plan::refreshes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRefresh {
    pub pool: String,
    /// The pool's `max_draining_percent`.
    pub max_draining_percent: u8,
    /// Hosts drained for the refresh by this plan (their tasks move, then they retire).
    pub now: Vec<OutdatedHost>,
    /// Outdated hosts left for later plans (they take no new tasks meanwhile,
    /// unless the refresh is halted).
    pub later: Vec<OutdatedHost>,
    /// Why the refresh stopped: a host with the pool's current settings is impaired
    /// or silent. Every old host is kept (and takes tasks) until the settings change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<String>,
    /// Why no host is drained by this plan although the refresh goes on (a new host
    /// is booting, a pause, sick hosts first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// One outdated host and what differs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutdatedHost {
    pub host_id: String,
    /// Tasks on the host when planned.
    pub tasks: usize,
    pub changes: Vec<SettingChange>,
}

impl OutdatedHost {
    /// `image ami-a -> ami-b, key_name (none) -> ops`.
    pub fn changes_text(&self) -> String {
        changes_text(&self.changes)
    }
}

pub(super) fn changes_text(changes: &[SettingChange]) -> String {
    changes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The settings of host `h` that differ from those `pool` launches with now (empty:
/// up to date). A host planned before launch settings were recorded is compared by
/// what it does record: its image (when both name one) and its subnet.
pub fn outdated_settings(h: &Host, pool: &CapacityProvider) -> Vec<SettingChange> {
    let now = LaunchRecord::of(pool);
    let mut changes = match &h.launch {
        Some(rec) => rec.differences(&now),
        None => match (&h.image_id, &pool.image) {
            (Some(had), Some(want)) if had != want => vec![SettingChange {
                name: "image".into(),
                from: Some(had.clone()),
                to: want.clone(),
            }],
            _ => vec![],
        },
    };
    if let Some(s) = &h.subnet {
        if !pool.subnets.is_empty() && !pool.subnets.contains(s) {
            changes.push(SettingChange {
                name: "subnet".into(),
                from: Some(s.clone()),
                to: format!("one of {}", pool.subnets.join(", ")),
            });
        }
    }
    changes
}

/// The hosts of `state` that are outdated against their pool as applied (the pool's
/// record in the state: what the rollout converges on), by pool: what `show` lists
/// while a refresh rolls. A pool whose record does not read is skipped.
pub fn outdated_hosts(state: &StoreState) -> Vec<(String, OutdatedHost)> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for t in state.tasks.values() {
        *counts.entry(t.host.as_str()).or_default() += 1;
    }
    let mut out = vec![];
    for h in state.hosts.values().filter(|h| h.state.is_active()) {
        let addr = ResourceAddr::new(ResourceKind::CapacityProvider, h.capacity_provider.clone());
        let Some(pool) = state
            .resources
            .get(&addr)
            .and_then(|r| serde_json::from_value::<CapacityProvider>(r.attrs.clone()).ok())
        else {
            continue;
        };
        let changes = outdated_settings(h, &pool);
        if !changes.is_empty() {
            out.push((
                h.capacity_provider.clone(),
                OutdatedHost {
                    host_id: h.id.clone(),
                    tasks: counts.get(h.id.as_str()).copied().unwrap_or(0),
                    changes,
                },
            ));
        }
    }
    out
}

impl<'a> Planner<'a> {
    /// `h` as an outdated host of its pool, `None` when up to date (or its pool is gone).
    pub(super) fn outdated(&self, h: &Host, counts: &HashMap<&str, usize>) -> Option<OutdatedHost> {
        let pool = self.desired.capacity_providers.get(&h.capacity_provider)?;
        let changes = outdated_settings(h, pool);
        (!changes.is_empty()).then(|| OutdatedHost {
            host_id: h.id.clone(),
            tasks: counts.get(h.id.as_str()).copied().unwrap_or(0),
            changes,
        })
    }

    /// Roll pool `pool`: drain a batch of `outdated` (its kept hosts whose settings
    /// differ) within the limits, close the others to new tasks; or keep them all when
    /// the refresh is halted or waits. `size`: the pool's up hosts; `pinned_kept`
    /// gets the pinned hosts kept.
    pub(super) fn refresh_pool(
        &mut self,
        pool_name: &str,
        mut outdated: Vec<OutdatedHost>,
        size: usize,
        pinned_kept: &mut BTreeMap<String, String>,
    ) {
        let desired: &'a Desired = self.desired;
        let Some(pool) = desired.capacity_providers.get(pool_name) else {
            return;
        };
        // New hosts still booting stay, even empty (a held move leaves them so).
        for h in self.refreshed_hosts(pool_name, pool) {
            if h.last_heartbeat.is_none() {
                self.held.insert(h.id.clone());
            }
        }
        // Emptiest first, then by id.
        outdated.sort_by(|a, b| (a.tasks, &a.host_id).cmp(&(b.tasks, &b.host_id)));
        let halted = self.refresh_halted(pool_name, pool);
        let waiting = if halted.is_some() {
            None
        } else {
            self.refresh_waits(pool_name, pool, size, outdated.len())
        };
        let batch = if halted.is_some() || waiting.is_some() {
            0
        } else {
            self.refresh_batch(pool_name, pool, size, outdated.len())
        };
        let later = outdated.split_off(batch.min(outdated.len()));
        for o in &outdated {
            self.drained.insert(
                o.host_id.clone(),
                DrainReason::Outdated {
                    changes: o.changes_text(),
                },
            );
        }
        for o in &later {
            if halted.is_none() {
                self.closed.insert(o.host_id.clone());
            }
            let gi = self
                .live
                .state
                .hosts
                .get(&o.host_id)
                .and_then(|h| h.gpu_instance.clone());
            if let Some(gi) = gi {
                pinned_kept.entry(gi).or_insert_with(|| o.host_id.clone());
            }
        }
        if let Some(why) = &halted {
            self.out.notes.push(format!(
                "capacity_provider.{pool_name}: the refresh is halted ({why}); {} outdated host(s) are kept and take tasks; revert the pool's settings to roll back, or fix them to go on",
                later.len()
            ));
        }
        self.out.refreshes.push(PoolRefresh {
            pool: pool_name.to_string(),
            max_draining_percent: pool.max_draining_percent,
            now: outdated,
            later,
            halted,
            waiting,
        });
    }

    /// Hosts of `pool_name` launched with its current settings that are up (the
    /// rollout's new hosts), by id.
    fn refreshed_hosts(&self, pool_name: &str, pool: &CapacityProvider) -> Vec<&'a Host> {
        let live: &'a StoreState = &self.live.state;
        live.hosts
            .values()
            .filter(|h| {
                host_is_up(h)
                    && h.capacity_provider == pool_name
                    && h.launch.is_some()
                    && outdated_settings(h, pool).is_empty()
            })
            .collect()
    }

    /// Why the refresh of `pool` stops: one of its new hosts is impaired or silent
    /// (never reported within the boot grace, or no report for the heartbeat
    /// timeout). Its empty failed hosts are kept rather than retired, so that the
    /// refresh does not launch more of them.
    fn refresh_halted(&mut self, pool_name: &str, pool: &CapacityProvider) -> Option<String> {
        let mut failed = vec![];
        for h in self.refreshed_hosts(pool_name, pool) {
            let why = if h.mps_health == MpsHealth::Impaired {
                Some("MPS daemon impaired".to_string())
            } else {
                self.silence(h).map(|s| s.to_string())
            };
            if let Some(why) = why {
                failed.push((h.id.clone(), why));
            }
        }
        let (first, why) = failed.first()?;
        let text = format!(
            "new host {first} with the pool's current settings: {why}{}",
            match failed.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            }
        );
        let counts = task_counts(&self.live.state.tasks);
        for (id, _) in &failed {
            if !counts.contains_key(id.as_str()) {
                // Kept, empty and closed, so that the refresh launches no more hosts
                // with settings that fail (and none of its tasks goes there).
                self.drained.remove(id);
                self.held.insert(id.clone());
                self.closed.insert(id.clone());
                self.out.notes.push(format!(
                    "host {id} is kept, taking no tasks, while the refresh of capacity_provider.{pool_name} is halted"
                ));
            }
        }
        Some(text)
    }

    /// Why the refresh of `pool` drains nothing now although it goes on.
    fn refresh_waits(
        &self,
        pool_name: &str,
        pool: &CapacityProvider,
        size: usize,
        outdated: usize,
    ) -> Option<String> {
        let fresh = self.refreshed_hosts(pool_name, pool);
        let booting: Vec<&Host> = fresh
            .iter()
            .copied()
            .filter(|h| h.last_heartbeat.is_none())
            .collect();
        if let Some(h) = booting.first() {
            return Some(format!(
                "new host {} has not reported yet (boot grace {} s)",
                h.id, self.options.boot_grace_seconds
            ));
        }
        let waiting_sick = self.closed.iter().any(|id| {
            self.live
                .state
                .hosts
                .get(id)
                .is_some_and(|h| h.capacity_provider == pool_name)
        });
        if waiting_sick {
            return Some("sick hosts are replaced first".to_string());
        }
        let r = &pool.refresh;
        if r.pause_seconds == 0 || fresh.is_empty() {
            return None;
        }
        if !r.checkpoints.is_empty() {
            let done = size.saturating_sub(outdated);
            let at_checkpoint = r
                .checkpoints
                .iter()
                .any(|cp| done == (size * usize::from(*cp)).div_ceil(100));
            if !at_checkpoint {
                return None;
            }
        }
        let newest = fresh.iter().filter_map(|h| h.launched_at).max()?;
        let until = newest + r.pause_seconds;
        (self.live.observed_at < until).then(|| {
            format!(
                "paused for refresh.pause_seconds {} until {} s after the newest host's launch ({} s left)",
                r.pause_seconds,
                r.pause_seconds,
                until - self.live.observed_at
            )
        })
    }

    /// How many outdated hosts of `pool` this plan drains: `max_draining_percent` of
    /// its hosts (at least one), no more than `refresh.min_healthy_percent` leaves
    /// (at least one), less the hosts of the pool already drained by this plan, and
    /// not past the next checkpoint.
    fn refresh_batch(
        &self,
        pool_name: &str,
        pool: &CapacityProvider,
        size: usize,
        outdated: usize,
    ) -> usize {
        let mut limit = (size * usize::from(pool.max_draining_percent) / 100).max(1);
        let healthy = (size * usize::from(pool.refresh.min_healthy_percent)).div_ceil(100);
        limit = limit.min(size.saturating_sub(healthy).max(1));
        // The pool's hosts this plan drained that still have tasks: one pass over the
        // tasks, not a scan of every task per drained host (issue 52).
        let mut drained: std::collections::BTreeSet<&str> = self
            .drained
            .keys()
            .filter(|id| {
                self.live
                    .state
                    .hosts
                    .get(*id)
                    .is_some_and(|h| h.capacity_provider == pool_name)
            })
            .map(String::as_str)
            .collect();
        let mut busy = 0;
        for t in self.live.state.tasks.values() {
            if drained.is_empty() {
                break;
            }
            if drained.remove(t.host.as_str()) {
                busy += 1;
            }
        }
        let mut batch = limit.saturating_sub(busy);
        let done = size.saturating_sub(outdated);
        if let Some(next) = pool
            .refresh
            .checkpoints
            .iter()
            .map(|cp| (size * usize::from(*cp)).div_ceil(100))
            .filter(|n| *n > done)
            .min()
        {
            batch = batch.min(next - done);
        }
        batch
    }
}
