//! What the console remembers between observations, in memory only and bounded:
//! the last reports it saw of each host (its probe history) and the last reconcile
//! passes it saw in the store's status record. Lost when the console stops; a host
//! gone from the state is forgotten.

use super::snapshot::Snapshot;
use gpushare_core::model::MpsHealth;
use gpushare_engine::store::StatusRecord;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// Reports kept per host.
pub const PROBES_PER_HOST: usize = 20;
/// Passes kept.
pub const PASSES: usize = 20;

/// One report of a host's agent, as the console saw it.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    /// When the agent reported (seconds since the Unix epoch).
    pub at: u64,
    /// The report's age when the console first saw it (seconds).
    pub heartbeat_age: u64,
    pub mps_health: MpsHealth,
    /// Failed MPS probes in a row.
    pub mps_failures: u32,
    /// The last probe's error, when it failed.
    pub mps_error: Option<String>,
}

impl Probe {
    /// Whether `other` says the same of the daemon (its age aside).
    fn same_probe(&self, other: &Probe) -> bool {
        (self.mps_health, self.mps_failures, &self.mps_error)
            == (other.mps_health, other.mps_failures, &other.mps_error)
    }
}

#[derive(Default)]
pub struct History {
    probes: BTreeMap<String, VecDeque<Probe>>,
    passes: VecDeque<StatusRecord>,
}

impl History {
    /// Take in what `snap` shows that is new: a report whose time moved, a status
    /// record of another pass.
    pub fn record(&mut self, snap: &Snapshot) {
        for r in snap.reports.iter().filter(|r| r.unreadable.is_none()) {
            let seen = self.probes.entry(r.host_id.clone()).or_default();
            let probe = Probe {
                at: r.at,
                heartbeat_age: snap.observed_at.saturating_sub(r.at),
                mps_health: r.mps_health,
                mps_failures: r.mps_failures,
                mps_error: r.mps_error.clone(),
            };
            match seen.back_mut() {
                // The same report, seen again.
                Some(p) if p.at == r.at && p.same_probe(&probe) => continue,
                // Another report within the same second (times are in seconds):
                // the newer one stands for that second.
                Some(p) if p.at == r.at => *p = probe,
                _ => seen.push_back(probe),
            }
            while seen.len() > PROBES_PER_HOST {
                seen.pop_front();
            }
        }
        self.probes
            .retain(|id, _| snap.state.hosts.contains_key(id));
        if let Some(s) = &snap.status {
            let new = self.passes.back().is_none_or(|p| {
                (p.pass, &p.started_at, &p.holder) != (s.pass, &s.started_at, &s.holder)
            });
            if new {
                self.passes.push_back(s.clone());
                while self.passes.len() > PASSES {
                    self.passes.pop_front();
                }
            }
        }
    }

    /// A host's reports, newest first.
    pub fn probes(&self, host: &str) -> Vec<Probe> {
        self.probes
            .get(host)
            .map(|p| p.iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// The passes seen, newest first.
    pub fn passes(&self) -> Vec<StatusRecord> {
        self.passes.iter().rev().cloned().collect()
    }
}
