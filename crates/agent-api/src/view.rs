//! Per-host views of the state, and the fan-out: one poll of the store per serving
//! process turns each new state into every host's view, and only the hosts whose
//! view changed are woken.
//!
//! A host's view is a [`StoreState`] holding only that host (its volatile fields,
//! heartbeat and MPS health, cleared), its tasks and the task-definition revisions
//! they run: what the agent's loop needs, and no other host's task or secret. Its
//! version is a digest of its JSON, so equal views have equal versions on every
//! replica and across restarts: a reconnecting agent says which it has, and an
//! unchanged view is not sent again.

use gpushare_core::model::{MpsHealth, StoreState, Task};
use gpushare_engine::store::Store;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// One host's view, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostView {
    /// Never 0 (0 means "none" in a resume point).
    pub version: u64,
    /// The host is not in the fleet.
    pub removed: bool,
    /// The view's JSON (empty when removed).
    pub json: Arc<Vec<u8>>,
}

impl HostView {
    fn removed() -> HostView {
        HostView::of(b"removed", true, Vec::new())
    }

    fn of(digest_input: &[u8], removed: bool, json: Vec<u8>) -> HostView {
        let d = Sha256::digest(digest_input);
        let mut v = [0u8; 8];
        v.copy_from_slice(&d[..8]);
        HostView {
            version: u64::from_be_bytes(v).max(1),
            removed,
            json: Arc::new(json),
        }
    }
}

/// Every host's view of `state`.
pub fn host_views(state: &StoreState) -> HashMap<String, HostView> {
    let mut by_host: BTreeMap<&str, Vec<&Task>> = BTreeMap::new();
    for t in state.tasks.values() {
        by_host.entry(t.host.as_str()).or_default().push(t);
    }
    state
        .hosts
        .keys()
        .map(|id| {
            let tasks = by_host.get(id.as_str()).map_or(&[][..], Vec::as_slice);
            (id.clone(), view_of(state, id, tasks))
        })
        .collect()
}

fn view_of(state: &StoreState, host_id: &str, tasks: &[&Task]) -> HostView {
    let mut view = StoreState {
        cluster: state.cluster.clone(),
        ..StoreState::default()
    };
    if let Some(h) = state.hosts.get(host_id) {
        let mut h = h.clone();
        h.last_heartbeat = None;
        h.mps_health = MpsHealth::default();
        view.hosts.insert(host_id.to_string(), h);
    }
    let runs: BTreeSet<(&str, u32)> = tasks
        .iter()
        .map(|t| (t.family.as_str(), t.revision))
        .collect();
    for (family, revs) in &state.revisions {
        let mine: Vec<_> = revs
            .iter()
            .filter(|r| runs.contains(&(family.as_str(), r.revision)))
            .cloned()
            .collect();
        if !mine.is_empty() {
            view.revisions.insert(family.clone(), mine);
        }
    }
    for t in tasks {
        view.tasks.insert(t.id.clone(), (*t).clone());
    }
    // A state serialises to JSON (its maps are keyed by strings).
    let json = serde_json::to_vec(&view).unwrap_or_default();
    HostView::of(&json, false, json.clone())
}

/// The fan-out of one serving process: the latest view of every host, each behind a
/// watch channel that its streams subscribe to.
#[derive(Clone, Default)]
pub struct Hub {
    inner: Arc<Mutex<HubInner>>,
}

#[derive(Default)]
struct HubInner {
    /// The last state seen, `None` before the first load.
    state: Option<Arc<StoreState>>,
    views: HashMap<String, watch::Sender<HostView>>,
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HubInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The state last seen (for joins: is the host in the fleet?).
    pub fn state(&self) -> Option<Arc<StoreState>> {
        self.lock().state.clone()
    }

    /// Take in a new state: hosts whose view changed are woken (a host gone from the
    /// fleet gets the removed view). Returns how many were.
    pub fn update(&self, state: Arc<StoreState>) -> usize {
        let mut inner = self.lock();
        if inner
            .state
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &state) || **s == *state)
        {
            return 0;
        }
        let mut views = host_views(&state);
        let mut woken = 0;
        for (host, tx) in &inner.views {
            let next = views.remove(host).unwrap_or_else(HostView::removed);
            if tx.borrow().version != next.version {
                tx.send_replace(next);
                woken += 1;
            }
        }
        for (host, view) in views {
            inner.views.insert(host, watch::channel(view).0);
        }
        // Channels of hosts long gone and unwatched are dropped.
        inner
            .views
            .retain(|h, tx| state.hosts.contains_key(h) || tx.receiver_count() > 0);
        inner.state = Some(state);
        woken
    }

    /// A receiver of `host`'s view; `None` before the first state was loaded.
    pub fn subscribe(&self, host: &str) -> Option<watch::Receiver<HostView>> {
        let mut inner = self.lock();
        inner.state.as_ref()?;
        Some(
            inner
                .views
                .entry(host.to_string())
                .or_insert_with(|| watch::channel(HostView::removed()).0)
                .subscribe(),
        )
    }

    /// Poll `store` every `interval` (its kept state is reused while unchanged) and
    /// update; runs until the task is dropped. Errors are logged; the views stay.
    pub async fn follow(self, store: Arc<dyn Store>, interval: Duration) {
        let mut ready = false;
        loop {
            match store.load_shared().await {
                Ok(state) => {
                    let woken = self.update(state);
                    if woken > 0 {
                        tracing::debug!(woken, "agent API: host views changed");
                    }
                    if !ready {
                        ready = true;
                        tracing::info!(store = %store.location(), "agent API: following the state");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %gpushare_agent::error_chain(&e), "agent API: cannot read the state; hosts keep their last view")
                }
            }
            tokio::time::sleep(interval).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare_core::model::{
        Host, HostState, Revision, TaskDefinition, TaskGpu, TaskShape, TaskState,
    };

    fn host(id: &str) -> Host {
        Host {
            id: id.into(),
            instance_id: None,
            capacity_provider: "pool".into(),
            gpu_instance: None,
            instance_type: "g6.xlarge".into(),
            zone: None,
            subnet: None,
            image_id: None,
            state: HostState::Running,
            mps_health: MpsHealth::Unknown,
            gpus: vec![],
            cpu_units: 4096,
            memory_mib: 16384,
            launch_token: String::new(),
            last_heartbeat: None,
            launched_at: None,
            market: Default::default(),
            max_price: None,
            registration: None,
            hold: None,
        }
    }

    fn task(id: &str, family: &str, host: &str) -> Task {
        Task {
            id: id.into(),
            service: family.into(),
            family: family.into(),
            revision: 1,
            host: host.into(),
            gpus: vec![],
            shape: TaskShape {
                cpu_units: 0,
                memory_mib: 0,
                gpu: TaskGpu::None,
            },
            state: TaskState::Pending,
        }
    }

    fn state() -> StoreState {
        let rev = |f: &str| Revision {
            family: f.into(),
            revision: 1,
            spec: TaskDefinition { containers: vec![] },
        };
        let mut st = StoreState {
            cluster: "c".into(),
            ..StoreState::default()
        };
        for h in ["h-a", "h-b"] {
            st.hosts.insert(h.into(), host(h));
        }
        for (t, f, h) in [("t-1", "one", "h-a"), ("t-2", "two", "h-b")] {
            st.tasks.insert(t.into(), task(t, f, h));
            st.revisions.insert(f.into(), vec![rev(f)]);
        }
        st
    }

    #[test]
    fn a_view_holds_its_host_only_and_ignores_heartbeats() {
        let st = state();
        let views = host_views(&st);
        let a: StoreState = serde_json::from_slice(&views["h-a"].json).expect("json");
        assert_eq!(a.hosts.keys().collect::<Vec<_>>(), vec!["h-a"]);
        assert_eq!(a.tasks.keys().collect::<Vec<_>>(), vec!["t-1"]);
        assert_eq!(a.revisions.keys().collect::<Vec<_>>(), vec!["one"]);
        // A heartbeat or MPS verdict recorded for the host changes no view; a task does.
        let mut beat = st.clone();
        beat.serial += 1;
        if let Some(h) = beat.hosts.get_mut("h-a") {
            h.last_heartbeat = Some(12);
            h.mps_health = MpsHealth::Healthy;
        }
        assert_eq!(host_views(&beat)["h-a"].version, views["h-a"].version);
        let mut moved = st.clone();
        moved.tasks.insert("t-3".into(), task("t-3", "two", "h-a"));
        let after = host_views(&moved);
        assert_ne!(after["h-a"].version, views["h-a"].version);
        assert_eq!(after["h-b"].version, views["h-b"].version);
    }

    #[test]
    fn the_hub_wakes_only_changed_hosts_and_tells_a_removed_one() {
        let hub = Hub::default();
        assert!(
            hub.subscribe("h-a").is_none(),
            "nothing before the first state"
        );
        hub.update(Arc::new(state()));
        let mut a = hub.subscribe("h-a").expect("a");
        let mut b = hub.subscribe("h-b").expect("b");
        a.mark_unchanged();
        b.mark_unchanged();
        let mut st = state();
        st.tasks.insert("t-3".into(), task("t-3", "one", "h-a"));
        assert_eq!(hub.update(Arc::new(st.clone())), 1);
        assert!(a.has_changed().expect("open") && !b.has_changed().expect("open"));
        st.hosts.remove("h-b");
        st.tasks.remove("t-2");
        hub.update(Arc::new(st));
        assert!(b.has_changed().expect("open") && b.borrow_and_update().removed);
    }
}
