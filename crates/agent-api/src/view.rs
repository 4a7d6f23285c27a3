//! Per-host views of the state, kept up to date from the changes of the state.
//!
//! A host's view is a [`StoreState`] holding only that host (its volatile fields,
//! heartbeat and MPS health, cleared), its tasks and the task-definition revisions
//! they run: what the agent's loop needs, and no other host's task or secret. Its
//! version is a digest of its JSON, so equal views have equal versions on every
//! replica and across restarts: a reconnecting agent says which it has, and an
//! unchanged view is not sent again.
//!
//! The [`Model`] holds the parts of the state views are made of, with the tasks
//! indexed by host and the hosts by the families they run, so that a change tells
//! which hosts' views it touches without looking at any other host.

use gpushare_core::model::{Host, MpsHealth, Revision, StoreState, Task};
use gpushare_engine::store::StateChange;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

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
    pub(crate) fn removed() -> HostView {
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

/// Every host's view of `state` (all at once: tests and tools; the server keeps a
/// [`Model`]).
pub fn host_views(state: &StoreState) -> HashMap<String, HostView> {
    let mut m = Model::default();
    m.load(state);
    state
        .hosts
        .keys()
        .map(|id| (id.clone(), m.view(id)))
        .collect()
}

/// A host as its view shows it: what the agent reports (heartbeat, MPS health)
/// left out, so a report changes no view.
fn steady(mut h: Host) -> Host {
    h.last_heartbeat = None;
    h.mps_health = MpsHealth::default();
    h
}

/// The parts of the state that views are made of, indexed by host.
#[derive(Debug, Default)]
pub struct Model {
    serial: u64,
    cluster: String,
    hosts: HashMap<String, Host>,
    tasks: HashMap<String, Task>,
    revisions: HashMap<String, Vec<Revision>>,
    /// host -> its tasks' ids.
    by_host: HashMap<String, BTreeSet<String>>,
    /// family -> host -> how many of its tasks run a revision of that family.
    family_hosts: HashMap<String, HashMap<String, usize>>,
}

/// The hosts whose view a change may have changed (`all`: every one, the cluster
/// name changed).
#[derive(Debug, Default)]
pub struct Dirty {
    pub all: bool,
    pub hosts: HashSet<String>,
}

impl Dirty {
    pub fn is_empty(&self) -> bool {
        !self.all && self.hosts.is_empty()
    }

    pub fn contains(&self, host: &str) -> bool {
        self.all || self.hosts.contains(host)
    }
}

impl Model {
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// The host as recorded in the fleet (`None`: not in it).
    pub fn host(&self, id: &str) -> Option<&Host> {
        self.hosts.get(id)
    }

    /// Take in a whole state: only what differs from the model is changed.
    pub fn load(&mut self, state: &StoreState) -> Dirty {
        let mut d = self.header(state.serial, &state.cluster);
        let gone: Vec<String> = self
            .tasks
            .keys()
            .filter(|id| !state.tasks.contains_key(*id))
            .cloned()
            .collect();
        for id in gone {
            self.set_task(&id, None, &mut d);
        }
        for (id, t) in &state.tasks {
            if self.tasks.get(id) != Some(t) {
                self.set_task(id, Some(t.clone()), &mut d);
            }
        }
        let gone: Vec<String> = self
            .hosts
            .keys()
            .filter(|id| !state.hosts.contains_key(*id))
            .cloned()
            .collect();
        for id in gone {
            self.set_host(&id, None, &mut d);
        }
        for (id, h) in &state.hosts {
            self.set_host(id, Some(h.clone()), &mut d);
        }
        let gone: Vec<String> = self
            .revisions
            .keys()
            .filter(|f| !state.revisions.contains_key(*f))
            .cloned()
            .collect();
        for f in gone {
            self.set_revisions(&f, None, &mut d);
        }
        for (f, r) in &state.revisions {
            if self.revisions.get(f) != Some(r) {
                self.set_revisions(f, Some(r.clone()), &mut d);
            }
        }
        d
    }

    /// Take in one commit's change.
    pub fn apply(&mut self, c: StateChange) -> Dirty {
        let mut d = self.header(c.serial, &c.cluster);
        for (id, t) in c.tasks {
            self.set_task(&id, t, &mut d);
        }
        for (id, h) in c.hosts {
            self.set_host(&id, h, &mut d);
        }
        for (f, r) in c.revisions {
            self.set_revisions(&f, r, &mut d);
        }
        d
    }

    fn header(&mut self, serial: u64, cluster: &str) -> Dirty {
        self.serial = serial;
        let mut d = Dirty::default();
        if self.cluster != cluster {
            self.cluster = cluster.to_string();
            d.all = true;
        }
        d
    }

    fn set_task(&mut self, id: &str, task: Option<Task>, d: &mut Dirty) {
        if self.tasks.get(id) == task.as_ref() {
            return;
        }
        if let Some(old) = self.tasks.remove(id) {
            if let Some(ids) = self.by_host.get_mut(&old.host) {
                ids.remove(id);
                if ids.is_empty() {
                    self.by_host.remove(&old.host);
                }
            }
            if let Some(hosts) = self.family_hosts.get_mut(&old.family) {
                if let Some(n) = hosts.get_mut(&old.host) {
                    *n -= 1;
                    if *n == 0 {
                        hosts.remove(&old.host);
                    }
                }
                if hosts.is_empty() {
                    self.family_hosts.remove(&old.family);
                }
            }
            d.hosts.insert(old.host);
        }
        if let Some(t) = task {
            self.by_host
                .entry(t.host.clone())
                .or_default()
                .insert(id.to_string());
            *self
                .family_hosts
                .entry(t.family.clone())
                .or_default()
                .entry(t.host.clone())
                .or_default() += 1;
            d.hosts.insert(t.host.clone());
            self.tasks.insert(id.to_string(), t);
        }
    }

    fn set_host(&mut self, id: &str, host: Option<Host>, d: &mut Dirty) {
        let host = host.map(steady);
        if self.hosts.get(id) == host.as_ref() {
            return;
        }
        match host {
            Some(h) => self.hosts.insert(id.to_string(), h),
            None => self.hosts.remove(id),
        };
        d.hosts.insert(id.to_string());
    }

    fn set_revisions(&mut self, family: &str, revs: Option<Vec<Revision>>, d: &mut Dirty) {
        if self.revisions.get(family) == revs.as_ref() {
            return;
        }
        match revs {
            Some(r) => self.revisions.insert(family.to_string(), r),
            None => self.revisions.remove(family),
        };
        if let Some(hosts) = self.family_hosts.get(family) {
            d.hosts.extend(hosts.keys().cloned());
        }
    }

    /// `host_id`'s view (the removed one when it is not in the fleet).
    pub fn view(&self, host_id: &str) -> HostView {
        let Some(h) = self.hosts.get(host_id) else {
            return HostView::removed();
        };
        let mut view = StoreState {
            cluster: self.cluster.clone(),
            ..StoreState::default()
        };
        view.hosts.insert(host_id.to_string(), h.clone());
        let mut runs: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
        for id in self.by_host.get(host_id).into_iter().flatten() {
            if let Some(t) = self.tasks.get(id) {
                runs.entry(t.family.as_str())
                    .or_default()
                    .insert(t.revision);
                view.tasks.insert(id.clone(), t.clone());
            }
        }
        for (family, revisions) in runs {
            let mine: Vec<Revision> = self
                .revisions
                .get(family)
                .into_iter()
                .flatten()
                .filter(|r| revisions.contains(&r.revision))
                .cloned()
                .collect();
            if !mine.is_empty() {
                view.revisions.insert(family.to_string(), mine);
            }
        }
        // A state serialises to JSON (its maps are keyed by strings).
        let json = serde_json::to_vec(&view).unwrap_or_default();
        HostView::of(&json, false, json.clone())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use gpushare_core::model::{
        Host, HostState, Revision, TaskDefinition, TaskGpu, TaskShape, TaskState,
    };

    fn host(id: &str) -> Host {
        Host {
            log_request: None,
            id: id.into(),
            instance_id: None,
            capacity_provider: "pool".into(),
            gpu_instance: None,
            instance_type: "g6.xlarge".into(),
            zone: None,
            subnet: None,
            image_id: None,
            launch: None,
            state: HostState::Running,
            mps_health: MpsHealth::Unknown,
            health: Default::default(),
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

    pub(crate) fn task(id: &str, family: &str, host: &str) -> Task {
        Task {
            ports: Vec::new(),
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
            job: None,
            scrape: None,
        }
    }

    pub(crate) fn state() -> StoreState {
        let rev = |f: &str| Revision {
            family: f.into(),
            revision: 1,
            spec: TaskDefinition {
                containers: vec![],
                ..Default::default()
            },
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
}
