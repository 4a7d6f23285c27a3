//! What the console remembers between observations, in memory only and bounded:
//! the last reports it saw of each host (its probe history), the last reconcile
//! passes it saw in the store's status record, and each service's GPU use over the
//! last hour (one point a minute). Lost when the console stops; a host or service
//! gone from the state is forgotten.

use crate::snapshot::Snapshot;
use gpushare_core::model::MpsHealth;
use gpushare_engine::store::StatusRecord;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// Reports kept per host.
pub const PROBES_PER_HOST: usize = 20;
/// Passes kept.
pub const PASSES: usize = 20;
/// Usage points kept per service: one a minute for an hour.
pub const USAGE_POINTS: usize = 60;

/// A service's GPU use in one minute, as its agents last reported it in that minute.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UsagePoint {
    /// The minute (seconds since the Unix epoch / 60).
    pub minute: u64,
    /// GPU memory its tasks' processes hold, MiB, summed over its tasks.
    pub used_mib: u64,
    /// SM percent averaged over its tasks with a sample (`None`: none had one).
    pub sm_percent: Option<f64>,
    /// Tasks with a usage sample.
    pub tasks: usize,
}

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
    usage: BTreeMap<String, VecDeque<UsagePoint>>,
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
        self.record_usage(snap);
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

    /// Each service's use now (its tasks' usage samples in the reports), as the
    /// point of this minute: a later observation in the same minute replaces it.
    fn record_usage(&mut self, snap: &Snapshot) {
        let minute = snap.observed_at / 60;
        let mut now: BTreeMap<&str, (u64, f64, usize, usize)> = BTreeMap::new();
        for r in snap.reports.iter().filter(|r| r.unreadable.is_none()) {
            for (id, st) in &r.task_details {
                let (Some(t), Some(u)) = (snap.state.tasks.get(id), &st.usage) else {
                    continue;
                };
                let e = now.entry(t.service.as_str()).or_default();
                e.0 = e.0.saturating_add(u.gpu_memory_mib);
                if let Some(sm) = u.sm_percent {
                    e.1 += f64::from(sm);
                    e.2 += 1;
                }
                e.3 += 1;
            }
        }
        for (service, (used_mib, sm, with_sm, tasks)) in now {
            let point = UsagePoint {
                minute,
                used_mib,
                sm_percent: (with_sm > 0).then(|| sm / with_sm as f64),
                tasks,
            };
            let seen = self.usage.entry(service.to_string()).or_default();
            match seen.back_mut() {
                Some(p) if p.minute == minute => *p = point,
                _ => seen.push_back(point),
            }
        }
        let oldest = minute.saturating_sub(USAGE_POINTS as u64 - 1);
        for seen in self.usage.values_mut() {
            while seen
                .front()
                .is_some_and(|p| p.minute < oldest || seen.len() > USAGE_POINTS)
            {
                seen.pop_front();
            }
        }
        let services: std::collections::BTreeSet<&str> = snap
            .state
            .tasks
            .values()
            .map(|t| t.service.as_str())
            .collect();
        self.usage
            .retain(|s, seen| services.contains(s.as_str()) && !seen.is_empty());
    }

    /// A service's use over the last hour, oldest first.
    pub fn usage(&self, service: &str) -> Vec<UsagePoint> {
        self.usage
            .get(service)
            .map(|p| p.iter().cloned().collect())
            .unwrap_or_default()
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
