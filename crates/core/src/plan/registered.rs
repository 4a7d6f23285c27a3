//! Registered pools and holds: hosts gpushare does not launch (they joined a
//! `hosts = "registered"` pool with a pool token) and the operator's holds on any
//! host (`gpushare host cordon|drain|remove`).
//!
//! What differs from a launched pool, and only here:
//! - a registered pool is never sized: nothing is launched for it (no `min_size`,
//!   no new host for a task that does not fit: the task is unplaced, with a hint to
//!   add a host) and none of its hosts is retired for being empty;
//! - a sick registered host (MPS impaired, silent) cannot be replaced: its tasks
//!   are moved within `max_draining_percent` like a launched host's, but the host
//!   stays, taking no task, until its agent reports healthy again; then it is used
//!   again;
//! - a held host: `cordoned` takes no new tasks (nothing moves), `drain` moves its
//!   tasks (start before stop) and keeps it cordoned, `remove` moves its tasks, then
//!   retires it (a registered host's record is removed, so its agent stops and the
//!   agent API refuses it; a launched host is terminated).

use super::reasons::{DrainReason, Sickness};
use super::Planner;
use crate::model::{CapacityProvider, Hold, Host, MpsHealth};

impl<'a> Planner<'a> {
    /// Whether `pool` is declared as a registered pool.
    pub(super) fn is_registered_pool(&self, pool: &str) -> bool {
        self.desired
            .capacity_providers
            .get(pool)
            .is_some_and(CapacityProvider::is_registered)
    }

    /// The verdict on a held host (drained now, whatever `max_draining_percent`:
    /// the operator asked), `None` for one that is not held so (a cordoned host is
    /// judged as any other, then closed by [`Planner::close_cordoned`]).
    pub(super) fn held_drain(&self, h: &Host) -> Option<DrainReason> {
        match h.hold? {
            Hold::Drain => Some(DrainReason::Held(Hold::Drain)),
            Hold::Remove => Some(DrainReason::Held(Hold::Remove)),
            Hold::Cordoned => None,
        }
    }

    /// What ails a registered host: only what its agent says (MPS impaired) or
    /// its silence; instance types and markets are the launch's business.
    pub(super) fn registered_sickness(&self, h: &Host) -> Option<Sickness> {
        if h.mps_health == MpsHealth::Impaired {
            Some(Sickness::MpsImpaired)
        } else {
            self.silence(h)
        }
    }

    /// Close a kept, cordoned host to new tasks.
    pub(super) fn close_cordoned(&mut self, h: &Host) {
        if h.hold == Some(Hold::Cordoned) {
            self.closed.insert(h.id.clone());
        }
    }

    /// Whether a drained host left empty stays instead of being retired: a
    /// registered host that is sick (it waits to be healthy again) and any host the
    /// operator drained (it stays cordoned). A note says why it stays.
    pub(super) fn keeps_drained(&mut self, id: &str, why: &DrainReason, left: usize) -> bool {
        let Some(h) = self.hosts.get(id) else {
            return false;
        };
        let stays = match why {
            DrainReason::Held(Hold::Drain) => {
                format!("host {id} is drained by the operator: it stays, taking no tasks, until `gpushare host uncordon {id}`")
            }
            DrainReason::Sick(s) if h.is_registered() => format!(
                "host {id} ({s}) is a registered host of capacity_provider.{}: gpushare cannot replace it; it stays cordoned, taking no tasks, until its agent reports healthy",
                h.capacity_provider
            ),
            _ => return false,
        };
        let text = if left == 0 {
            stays
        } else {
            format!("{stays}; {left} task(s) could not move yet")
        };
        self.out.notes.push(text);
        true
    }

    /// The note of a registered pool (its size is the hosts that joined).
    pub(super) fn registered_pool_note(&mut self, pool: &str) {
        let members = self.pool_members(pool, true).len();
        if members == 0 {
            self.out.notes.push(format!(
                "capacity_provider.{pool} is a registered pool with no host yet: join one with `gpushare token create --pool {pool}`, then `gpushare host setup` on the server (docs/own-hosts.md)"
            ));
        }
    }

    /// The hint added to the reason of a task left unplaced in a registered pool.
    pub(super) fn unplaced_hint(&self, pool: &str, reason: String) -> String {
        if !self.is_registered_pool(pool) {
            return reason;
        }
        let reason = if reason.contains("no capacity provider") {
            let held: Vec<String> = self
                .hosts
                .values()
                .filter(|h| h.capacity_provider == pool && super::host_is_up(h))
                .map(|h| format!("{} {}", h.id, not_taking_why(h)))
                .collect();
            let now = if held.is_empty() {
                format!("pool {pool} has no host")
            } else {
                format!(
                    "no host of pool {pool} takes new tasks now ({})",
                    held.join(", ")
                )
            };
            reason.replace(
                &format!("no capacity provider {pool:?} and no host in it"),
                &now,
            )
        } else {
            reason
        };
        format!(
            "{reason}; capacity_provider.{pool} is a registered pool (gpushare launches no host for it): add a host with `gpushare token create --pool {pool}` and `gpushare host setup`"
        )
    }
}

/// Why a host of a registered pool takes no new tasks, in the plan's words.
fn not_taking_why(h: &Host) -> &'static str {
    match (h.mps_health, h.hold) {
        (MpsHealth::Impaired, _) => "is impaired",
        (_, Some(Hold::Remove)) => "is being removed",
        (_, Some(Hold::Drain)) => "is drained",
        (_, Some(Hold::Cordoned)) => "is cordoned",
        _ if h.state == crate::model::HostState::Draining => "is draining",
        _ => "takes no tasks now",
    }
}
