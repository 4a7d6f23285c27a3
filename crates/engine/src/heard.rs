//! What this process heard from the hosts' agents, whatever the store could record
//! (issue 44): a controller serving the agent API notes when each host's report
//! arrived, before it writes it to the store. A pass raises each host's last
//! heartbeat to that time, so a store that could not take the reports (down, frozen,
//! its report leases expired meanwhile) does not make healthy hosts look silent.
//!
//! Only this process's own contacts count: with several replicas serving the agent
//! API, the leader knows of the agents connected to it (the others' reports reach it
//! through the store as before).

use gpushare_core::model::Live;
use std::collections::HashMap;
use std::sync::Mutex;

/// Only hosts heard from within this long before an outage began (or this
/// controller started) are excused for it (seconds): a host long dead before it is
/// still judged silent, even when the store stalls again and again.
pub const EXCUSE_HORIZON: u64 = 600;

/// When each host's agent was last heard from (seconds since the epoch).
#[derive(Debug, Default)]
pub struct HeardFrom {
    at: Mutex<HashMap<String, u64>>,
    /// When this process started listening: a host last heard before it (through
    /// the store) counts as heard then, since its agent could not reach this
    /// process before (a controller restarted during a store outage; issue 44).
    started_at: u64,
}

impl HeardFrom {
    /// A record for a process that starts serving the agents at `now`.
    pub fn new(now: u64) -> HeardFrom {
        HeardFrom {
            at: Mutex::default(),
            started_at: now,
        }
    }

    /// Note that `host`'s agent was heard from at `at`.
    pub fn heard(&self, host: &str, at: u64) {
        let mut map = gpushare_core::util::lock(&self.at);
        let e = map.entry(host.to_string()).or_insert(at);
        *e = (*e).max(at);
    }

    /// When `host` was last heard from, if it was.
    pub fn last(&self, host: &str) -> Option<u64> {
        gpushare_core::util::lock(&self.at).get(host).copied()
    }

    /// Raise each host's last heartbeat in `live` to when it was last heard from
    /// (never past `live.observed_at`), and forget hosts no longer in the fleet.
    pub fn raise(&self, live: &mut Live) {
        let mut map = gpushare_core::util::lock(&self.at);
        map.retain(|id, _| live.state.hosts.contains_key(id));
        let started = self.started_at.min(live.observed_at);
        for h in live.state.hosts.values_mut() {
            if let Some(at) = map.get(&h.id).map(|a| (*a).min(live.observed_at)) {
                if h.last_heartbeat.is_none_or(|hb| hb < at) {
                    h.last_heartbeat = Some(at);
                }
            }
            // Heard before this process started (and not long before): heard then.
            if let Some(hb) = h
                .last_heartbeat
                .filter(|hb| *hb < started && hb.saturating_add(EXCUSE_HORIZON) >= started)
            {
                tracing::debug!(host = %h.id, heartbeat = hb, started, "last heard before this controller started: counted as heard then");
                h.last_heartbeat = Some(started);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HeardFrom;
    use gpushare_core::model::{Host, Live};

    fn host(id: &str, hb: Option<u64>) -> Host {
        let mut h: Host = serde_json::from_value(serde_json::json!({
            "id": id, "capacity_provider": "p", "instance_type": "g6.xlarge",
            "state": "running", "gpus": [], "cpu_units": 0, "memory_mib": 0,
            "launch_token": "", "launched_at": 0
        }))
        .expect("host");
        h.last_heartbeat = hb;
        h
    }

    #[test]
    fn a_host_heard_from_counts_as_heard_whatever_the_store_recorded() {
        let heard = HeardFrom::default();
        let mut live = Live {
            observed_at: 100,
            ..Default::default()
        };
        for h in [host("a", Some(10)), host("b", None), host("c", Some(95))] {
            live.state.hosts.insert(h.id.clone(), h);
        }
        heard.heard("a", 90);
        heard.heard("a", 80); // an older one does not lower it
        heard.heard("b", 99);
        heard.heard("c", 50);
        heard.heard("gone", 99);
        heard.raise(&mut live);
        let hb = |id: &str| live.state.hosts[id].last_heartbeat;
        assert_eq!((hb("a"), hb("b"), hb("c")), (Some(90), Some(99), Some(95)));
        assert_eq!(
            heard.last("gone"),
            None,
            "hosts out of the fleet are forgotten"
        );
    }

    /// A controller that just started has heard from no agent yet: a host last heard
    /// (through the store) before it started counts as heard at its start, unless
    /// that was more than the excuse horizon before.
    #[test]
    fn hosts_heard_before_the_controller_started_count_as_heard_at_its_start() {
        let started = 10_000;
        let heard = HeardFrom::new(started);
        let mut live = Live {
            observed_at: started + 5,
            ..Default::default()
        };
        for h in [
            host("during-outage", Some(started - 30)),
            host("long-dead", Some(0)),
            host("never", None),
        ] {
            live.state.hosts.insert(h.id.clone(), h);
        }
        heard.raise(&mut live);
        let hb = |id: &str| live.state.hosts[id].last_heartbeat;
        assert_eq!(hb("during-outage"), Some(started));
        assert_eq!(hb("long-dead"), Some(0));
        assert_eq!(hb("never"), None);
    }
}
