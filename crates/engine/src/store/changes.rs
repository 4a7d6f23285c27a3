//! What one commit changes ([`ChangeSet`]): the records written or deleted by key,
//! so a commit costs what it changes (see [`super::Store::commit_changes`]).

use gpushare_core::facts::CapacityRefusal;
use gpushare_core::model::{AppliedResource, Host, ResourceAddr, Revision, StoreState, Task};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The change from one serial of the state to the next: every record written
/// (`Some`) or deleted (`None`) by key, and the small fields every commit carries
/// whole (serial, cluster, capacity refusals). Applied to the state at
/// `serial - 1`, it gives the state at `serial` ([`ChangeSet::apply_to`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangeSet {
    /// The serial of the state after the change.
    pub serial: u64,
    pub cluster: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_refusals: Vec<CapacityRefusal>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<ResourceAddr, Option<AppliedResource>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub revisions: BTreeMap<String, Option<Vec<Revision>>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, Option<Host>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tasks: BTreeMap<String, Option<Task>>,
}

impl ChangeSet {
    /// The change from `old` to `new` (`serial` and the whole fields from `new`): a
    /// comparison of every record, for writers of whole states.
    pub fn diff(old: &StoreState, new: &StoreState) -> ChangeSet {
        ChangeSet {
            serial: new.serial,
            cluster: new.cluster.clone(),
            capacity_refusals: new.capacity_refusals.clone(),
            resources: diff_map(&old.resources, &new.resources),
            revisions: diff_map(&old.revisions, &new.revisions),
            hosts: diff_map(&old.hosts, &new.hosts),
            tasks: diff_map(&old.tasks, &new.tasks),
        }
    }

    /// Apply the change to `state` (at `serial - 1`; not checked here).
    pub fn apply_to(&self, state: &mut StoreState) {
        self.clone().apply_into(state);
    }

    /// [`ChangeSet::apply_to`], moving the records into `state` instead of copying
    /// them (a reader replaying change sets it decoded owns them).
    pub fn apply_into(self, state: &mut StoreState) {
        state.serial = self.serial;
        state.cluster = self.cluster;
        state.capacity_refusals = self.capacity_refusals;
        apply_map(&mut state.resources, self.resources);
        apply_map(&mut state.revisions, self.revisions);
        apply_map(&mut state.hosts, self.hosts);
        apply_map(&mut state.tasks, self.tasks);
    }

    /// The JSON size of the records of `state` (at `serial - 1`) that it replaces or
    /// deletes: the bytes it supersedes where that state was written down.
    pub fn superseded_bytes(&self, state: &StoreState) -> u64 {
        fn held<K: Ord, V: Serialize, W>(map: &BTreeMap<K, V>, changes: &BTreeMap<K, W>) -> u64 {
            changes
                .keys()
                .filter_map(|k| map.get(k))
                .map(json_len)
                .sum()
        }
        held(&state.resources, &self.resources)
            + held(&state.revisions, &self.revisions)
            + held(&state.hosts, &self.hosts)
            + held(&state.tasks, &self.tasks)
    }

    /// How many records it writes or deletes.
    pub fn len(&self) -> usize {
        self.resources.len() + self.revisions.len() + self.hosts.len() + self.tasks.len()
    }

    /// Whether it writes or deletes no record (it may still change the serial, the
    /// cluster name or the capacity refusals).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn diff_map<K: Ord + Clone, V: Clone + PartialEq>(
    old: &BTreeMap<K, V>,
    new: &BTreeMap<K, V>,
) -> BTreeMap<K, Option<V>> {
    let mut out = BTreeMap::new();
    for (k, v) in new {
        if old.get(k) != Some(v) {
            out.insert(k.clone(), Some(v.clone()));
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(k.clone(), None);
        }
    }
    out
}

/// The length of `value`'s JSON, counted as it is written (nothing is kept). The
/// model's records always serialise; one that did not would count nothing.
fn json_len<T: Serialize>(value: &T) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len() as u64;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

fn apply_map<K: Ord, V>(map: &mut BTreeMap<K, V>, changes: BTreeMap<K, Option<V>>) {
    for (k, v) in changes {
        match v {
            Some(v) => {
                map.insert(k, v);
            }
            None => {
                map.remove(&k);
            }
        }
    }
}

/// The keys a writer has touched since its last commit (written or deleted: the
/// state tells which), kept where the state is changed, so a commit is made from
/// them without comparing whole states ([`ChangedKeys::changes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangedKeys {
    pub resources: BTreeSet<ResourceAddr>,
    pub revisions: BTreeSet<String>,
    pub hosts: BTreeSet<String>,
    pub tasks: BTreeSet<String>,
}

impl ChangedKeys {
    /// Whether no record was touched.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
            && self.revisions.is_empty()
            && self.hosts.is_empty()
            && self.tasks.is_empty()
    }

    /// The change set that takes the last committed state to `state` (at
    /// `state.serial`), given that only these keys were touched since.
    pub fn changes(&self, state: &StoreState) -> ChangeSet {
        fn pick<K: Ord + Clone, V: Clone>(
            keys: &BTreeSet<K>,
            map: &BTreeMap<K, V>,
        ) -> BTreeMap<K, Option<V>> {
            keys.iter()
                .map(|k| (k.clone(), map.get(k).cloned()))
                .collect()
        }
        ChangeSet {
            serial: state.serial,
            cluster: state.cluster.clone(),
            capacity_refusals: state.capacity_refusals.clone(),
            resources: pick(&self.resources, &state.resources),
            revisions: pick(&self.revisions, &state.revisions),
            hosts: pick(&self.hosts, &state.hosts),
            tasks: pick(&self.tasks, &state.tasks),
        }
    }

    pub fn clear(&mut self) {
        *self = ChangedKeys::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, host: &str) -> Task {
        Task {
            ports: Vec::new(),
            id: id.into(),
            service: "s".into(),
            family: "f".into(),
            revision: 1,
            host: host.into(),
            gpus: vec![0],
            shape: gpushare_core::model::TaskShape::default(),
            state: gpushare_core::model::TaskState::Pending,
            job: None,
            scrape: None,
        }
    }

    #[test]
    fn a_diff_applied_to_the_old_state_gives_the_new_one() {
        let mut old = StoreState {
            serial: 4,
            cluster: "c".into(),
            ..StoreState::default()
        };
        old.tasks.insert("t-1".into(), task("t-1", "h-1"));
        old.tasks.insert("t-2".into(), task("t-2", "h-1"));
        let mut new = old.clone();
        new.serial = 5;
        new.tasks.remove("t-1");
        new.tasks.insert("t-2".into(), task("t-2", "h-2"));
        new.tasks.insert("t-3".into(), task("t-3", "h-2"));
        let d = ChangeSet::diff(&old, &new);
        assert_eq!(d.tasks.len(), 3, "{d:?}");
        assert_eq!(d.tasks["t-1"], None);
        let mut got = old.clone();
        d.apply_to(&mut got);
        assert_eq!(got, new);
        // t-1 deleted and t-2 rewritten supersede records of the old state; t-3 is new.
        let json = |t: &Task| serde_json::to_vec(t).expect("json").len() as u64;
        assert_eq!(
            d.superseded_bytes(&old),
            json(&old.tasks["t-1"]) + json(&old.tasks["t-2"])
        );
        assert_eq!(d.superseded_bytes(&StoreState::default()), 0);
        // Unchanged records are not in it.
        assert!(ChangeSet::diff(&new, &new).is_empty());
    }

    #[test]
    fn changed_keys_pick_writes_and_deletes_from_the_state() {
        let mut st = StoreState::default();
        st.tasks.insert("t-1".into(), task("t-1", "h-1"));
        let mut keys = ChangedKeys::default();
        keys.tasks.insert("t-1".into());
        keys.tasks.insert("t-gone".into());
        let c = keys.changes(&st);
        assert_eq!(c.tasks["t-1"], Some(task("t-1", "h-1")));
        assert_eq!(c.tasks["t-gone"], None);
        assert_eq!(c.len(), 2);
    }
}
