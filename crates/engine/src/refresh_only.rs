//! `-refresh-only`: what the observed fleet changes in the recorded state (hosts'
//! state, instance, zone, MPS health and heartbeat; tasks' states), as lines to show
//! and as the state to record. No resource is planned or changed; every face that
//! offers a refresh (the CLI's `plan|apply -refresh-only`) shares these.

use gpushare_core::model::{Live, StoreState};

/// `-refresh-only`: one line per difference between the recorded state and the
/// observed one (host state, instance id, zone, MPS health; task states), and the
/// strays. Empty: the state is up to date.
pub fn refresh_changes(recorded: &StoreState, live: &Live) -> Vec<String> {
    let mut out = vec![];
    for (id, h) in &live.state.hosts {
        let Some(old) = recorded.hosts.get(id) else {
            continue;
        };
        if old.state != h.state {
            out.push(format!("host.{id}: state {:?} -> {:?}", old.state, h.state));
        }
        if old.instance_id != h.instance_id {
            out.push(format!(
                "host.{id}: instance {} -> {}",
                old.instance_id.as_deref().unwrap_or("(none)"),
                h.instance_id.as_deref().unwrap_or("(none)")
            ));
        }
        if old.zone != h.zone {
            out.push(format!(
                "host.{id}: zone {} -> {}",
                old.zone.as_deref().unwrap_or("(none)"),
                h.zone.as_deref().unwrap_or("(none)")
            ));
        }
        if old.mps_health != h.mps_health {
            out.push(format!(
                "host.{id}: MPS {:?} -> {:?}",
                old.mps_health, h.mps_health
            ));
        }
    }
    for (id, t) in &live.state.tasks {
        if let Some(old) = recorded.tasks.get(id) {
            if old.state != t.state {
                out.push(format!("task.{id}: {:?} -> {:?}", old.state, t.state));
            }
        }
    }
    for s in &live.strays {
        out.push(format!(
            "instance {} ({}, host id {}) runs for this cluster but the state does not know it \
             (adopt it with gpushare import capacity_provider.POOL {})",
            s.instance_id, s.instance_type, s.host_id, s.instance_id
        ));
    }
    out
}

/// The state `-refresh-only` apply records: the observed hosts and tasks over the
/// recorded state (serial + 1). Hosts observed terminated stay recorded as such.
pub fn refreshed_state(recorded: &StoreState, live: &Live) -> StoreState {
    let mut next = recorded.clone();
    for (id, h) in &live.state.hosts {
        if let Some(r) = next.hosts.get_mut(id) {
            r.state = h.state;
            r.instance_id = h.instance_id.clone();
            r.zone = h.zone.clone();
            r.mps_health = h.mps_health;
            r.last_heartbeat = h.last_heartbeat;
        }
    }
    for (id, t) in &live.state.tasks {
        if let Some(r) = next.tasks.get_mut(id) {
            r.state = t.state;
        }
    }
    next.serial = recorded.serial + 1;
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare_core::model::{HostState, MpsHealth};
    use gpushare_testkit::model::host;

    #[test]
    fn the_observed_hosts_go_over_the_recorded_ones_and_unknown_ones_stay_out() {
        let mut recorded = StoreState {
            serial: 7,
            ..StoreState::default()
        };
        recorded
            .hosts
            .insert("h-1".into(), host("h-1").state(HostState::Pending).build());
        let mut live = Live::default();
        let seen = host("h-1")
            .state(HostState::Running)
            .instance_id("i-1")
            .mps_health(MpsHealth::Impaired)
            .build();
        live.state.hosts.insert("h-1".into(), seen);
        live.state
            .hosts
            .insert("h-2".into(), host("h-2").state(HostState::Running).build());
        let lines = refresh_changes(&recorded, &live);
        assert!(
            lines.contains(&"host.h-1: state Pending -> Running".to_string()),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"host.h-1: instance (none) -> i-1".to_string()),
            "{lines:?}"
        );
        assert!(lines.iter().all(|l| !l.contains("h-2")), "{lines:?}");
        let next = refreshed_state(&recorded, &live);
        assert_eq!(next.serial, 8);
        assert_eq!(next.hosts["h-1"].state, HostState::Running);
        assert_eq!(next.hosts["h-1"].mps_health, MpsHealth::Impaired);
        assert!(!next.hosts.contains_key("h-2"), "a stray is not recorded");
        assert!(refresh_changes(&next, &live).is_empty(), "up to date after");
    }
}
