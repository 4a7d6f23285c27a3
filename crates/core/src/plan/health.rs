//! The agents' health checks, as the planner acts on them (`Host::health`, see
//! `model/health.rs` and docs/agent.md):
//!
//! - a host any check reports impaired is sick ([`Sickness::HealthImpaired`]): it is
//!   drained and replaced like an MPS-impaired host, start-before-stop within the
//!   pool's `max_draining_percent`;
//! - an impaired GPU of a host that is not drained takes no new task (it is left out
//!   of the host's load given to the placement engine) and its tasks move
//!   ([`DrainReason::GpuImpaired`]), to another GPU or host;
//! - in a pool with `auto_repair = false` nothing is drained or moved for health:
//!   each impaired host and GPU is kept and named in a note; an impaired host takes
//!   no new tasks, an impaired GPU neither.
//!
//! Statuses other than `impaired` (`initializing`, `insufficient_data`) change nothing.

use super::reasons::{DrainReason, Sickness};
use super::{host_is_up, Planner};
use crate::model::{CapacityProvider, CheckKind, CheckStatus, Host, HostHealth, StoreState, Task};
use crate::placement::HostLoad;

impl<'a> Planner<'a> {
    /// The sickness of `h` (a host of `pool`) by its health checks: `None` when no
    /// check is impaired, or when the pool does not repair (`auto_repair = false`).
    pub(super) fn health_sickness(&self, h: &Host, pool: &CapacityProvider) -> Option<Sickness> {
        if !pool.auto_repair || h.health.impaired_checks().next().is_none() {
            return None;
        }
        Some(Sickness::HealthImpaired {
            checks: impaired_checks_text(&h.health),
        })
    }

    /// Whether `h`, MPS-impaired, is drained for it: always in a pool that repairs;
    /// with `auto_repair = false` only when its agent's `mps_daemon` check is not
    /// what says so (an agent from before the checks, or `-replace`, which plans a
    /// host as if its daemon were impaired).
    pub(super) fn repairs_mps(&self, h: &Host, pool: &CapacityProvider) -> bool {
        pool.auto_repair
            || h.health
                .check(CheckKind::MpsDaemon)
                .is_none_or(|c| c.status != CheckStatus::Impaired)
    }

    /// Whether the pool of `h` acts on health (`auto_repair`, true for a removed pool).
    fn repairs(&self, h: &Host) -> bool {
        self.desired
            .capacity_providers
            .get(&h.capacity_provider)
            .is_none_or(|p| p.auto_repair)
    }

    /// Pools with `auto_repair = false`: each up host with an impaired check or GPU
    /// is kept, with a note; a host with an impaired check is closed to new tasks.
    /// Run before triage.
    pub(super) fn report_unrepaired(&mut self) {
        let live: &'a StoreState = &self.live.state;
        for h in live.hosts.values().filter(|h| host_is_up(h)) {
            let Some(pool) = self.desired.capacity_providers.get(&h.capacity_provider) else {
                continue;
            };
            if pool.auto_repair {
                continue;
            }
            let summary = h.health.impaired_summary();
            if summary.is_empty() {
                continue;
            }
            if h.health.impaired_checks().next().is_some() {
                self.closed.insert(h.id.clone());
            }
            self.out.notes.push(format!(
                "host {} is kept ({summary}): capacity_provider.{} has auto_repair = false, so its health is only reported",
                h.id, h.capacity_provider
            ));
        }
    }

    /// Why task `t` moves off its GPU: the first impaired GPU it uses on a host that
    /// is up, not drained, in a pool that repairs. `None`: it stays.
    pub(super) fn gpu_move(&self, t: &Task) -> Option<DrainReason> {
        let h = self.live.state.hosts.get(&t.host)?;
        if !host_is_up(h) || self.drained.contains_key(&h.id) || !self.repairs(h) {
            return None;
        }
        let g = t.gpus.iter().find_map(|i| {
            h.health
                .gpu(*i)
                .filter(|g| g.status == CheckStatus::Impaired)
        })?;
        Some(DrainReason::GpuImpaired {
            host: h.id.clone(),
            gpu: g.index,
            reason: g.reason.clone().unwrap_or_else(|| "impaired".to_string()),
        })
    }
}

/// `gpus impaired (...)`-style words for the failed checks of `health`.
fn impaired_checks_text(health: &HostHealth) -> String {
    health
        .impaired_checks()
        .map(|c| match &c.reason {
            Some(r) => format!("{} impaired ({r})", c.check),
            None => format!("{} impaired", c.check),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `load` without the GPUs `health` reports impaired: the placement engine never
/// puts a task there.
pub(super) fn without_impaired_gpus(mut load: HostLoad, health: &HostHealth) -> HostLoad {
    load.gpus.retain(|g| !health.gpu_impaired(g.index));
    load
}
