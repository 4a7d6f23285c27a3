//! The fan-out of one serving process: one watch of the state (etcd) or one poll
//! (the file store) keeps a [`Model`]; each change recomputes the views of the hosts
//! it touched that someone watches, and wakes only those whose view changed. Hosts
//! nobody watches have no view kept; nothing is sent to a host whose view did not
//! change. The certificate revocations ([`crate::revoke`]) are followed beside it.

use crate::revoke::{self, Revocations};
use crate::view::{Dirty, HostView, Model};
use gpushare_core::model::{Host, StoreState};
use gpushare_engine::store::{StateEvent, Store};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The latest view of every watched host, each behind a watch channel its streams
/// subscribe to, and the revocations.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Mutex<HubInner>>,
    revocations: watch::Sender<Arc<Revocations>>,
    /// Whether a state was taken in yet (for calls that wait for it).
    loaded: watch::Sender<bool>,
}

impl Default for Hub {
    fn default() -> Hub {
        Hub {
            inner: Arc::default(),
            revocations: watch::channel(Arc::new(Revocations::default())).0,
            loaded: watch::channel(false).0,
        }
    }
}

#[derive(Default)]
struct HubInner {
    /// Whether a state was taken in yet.
    loaded: bool,
    model: Model,
    views: HashMap<String, watch::Sender<HostView>>,
}

impl HubInner {
    /// Wake the watched hosts of `d` whose view changed; forget unwatched views.
    fn wake(&mut self, d: &Dirty) -> usize {
        let mut woken = 0;
        let mut send = |host: &str, tx: &watch::Sender<HostView>, model: &Model| {
            let next = model.view(host);
            if tx.borrow().version != next.version {
                tx.send_replace(next);
                woken += 1;
            }
        };
        if d.all {
            for (host, tx) in &self.views {
                send(host, tx, &self.model);
            }
        } else {
            for host in &d.hosts {
                if let Some(tx) = self.views.get(host) {
                    send(host, tx, &self.model);
                }
            }
        }
        self.views.retain(|_, tx| tx.receiver_count() > 0);
        woken
    }
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HubInner> {
        gpushare_core::util::lock(&self.inner)
    }

    /// Whether the state was read yet.
    pub fn loaded(&self) -> bool {
        self.lock().loaded
    }

    /// The host as recorded in the fleet: `None` before the first state was read,
    /// `Some(None)` for a host not in the fleet.
    pub fn host(&self, id: &str) -> Option<Option<Host>> {
        let inner = self.lock();
        inner.loaded.then(|| inner.model.host(id).cloned())
    }

    /// Wait (up to `timeout`) until the first state was taken in; whether it was.
    pub async fn wait_loaded(&self, timeout: Duration) -> bool {
        let mut rx = self.loaded.subscribe();
        let loaded = tokio::time::timeout(timeout, rx.wait_for(|l| *l))
            .await
            .is_ok_and(|r| r.is_ok());
        loaded
    }

    /// Take in a whole state. Returns how many watched hosts were woken.
    pub fn update(&self, state: &StoreState) -> usize {
        let mut inner = self.lock();
        let d = inner.model.load(state);
        inner.loaded = true;
        let woken = inner.wake(&d);
        drop(inner);
        self.loaded
            .send_if_modified(|l| !std::mem::replace(l, true));
        woken
    }

    /// Take in one commit's change. Returns how many watched hosts were woken.
    pub fn apply(&self, change: gpushare_engine::store::StateChange) -> usize {
        let mut inner = self.lock();
        let d = inner.model.apply(change);
        inner.wake(&d)
    }

    /// A receiver of `host`'s view; `None` before the first state was read.
    pub fn subscribe(&self, host: &str) -> Option<watch::Receiver<HostView>> {
        let mut inner = self.lock();
        if !inner.loaded {
            return None;
        }
        if let Some(tx) = inner.views.get(host) {
            return Some(tx.subscribe());
        }
        let (tx, rx) = watch::channel(inner.model.view(host));
        inner.views.insert(host.to_string(), tx);
        Some(rx)
    }

    /// The revocations last read, and a receiver woken when they change.
    pub fn revocations(&self) -> watch::Receiver<Arc<Revocations>> {
        self.revocations.subscribe()
    }

    /// Take in the revocations read from the store.
    pub fn set_revocations(&self, r: Revocations) {
        self.revocations.send_if_modified(|now| {
            let changed = **now != r;
            if changed {
                *now = Arc::new(r);
            }
            changed
        });
    }

    /// Follow `store`'s state (its watch, or a poll every `interval` when it has
    /// none) and its revocations (a read every `interval`) until the task is
    /// dropped. Errors are logged; the views stay.
    pub async fn follow(self, store: Arc<dyn Store>, interval: Duration) {
        tokio::join!(
            self.clone().follow_state(Arc::clone(&store), interval),
            self.follow_revocations(store, interval)
        );
    }

    async fn follow_revocations(self, store: Arc<dyn Store>, interval: Duration) {
        loop {
            match revoke::load(store.as_ref()).await {
                Ok(r) => self.set_revocations(r),
                Err(e) => {
                    tracing::warn!(error = %gpushare_agent::error_chain(&e), "agent API: cannot read the certificate revocations; keeping the last ones")
                }
            }
            tokio::time::sleep(interval).await;
        }
    }

    async fn follow_state(self, store: Arc<dyn Store>, interval: Duration) {
        loop {
            match store.watch_state().await {
                Ok(Some(mut events)) => {
                    tracing::info!(store = %store.location(), "agent API: watching the state");
                    while let Some(ev) = events.recv().await {
                        let woken = match ev {
                            Ok(StateEvent::Whole(state)) => self.update(&state),
                            Ok(StateEvent::Change(c)) => self.apply(c),
                            Err(e) => {
                                tracing::warn!(error = %gpushare_agent::error_chain(&e), "agent API: the state watch failed; hosts keep their last view");
                                0
                            }
                        };
                        if woken > 0 {
                            tracing::debug!(woken, "agent API: host views changed");
                        }
                    }
                }
                Ok(None) => return self.poll(store, interval).await,
                Err(e) => {
                    tracing::warn!(error = %gpushare_agent::error_chain(&e), "agent API: cannot watch the state; hosts keep their last view")
                }
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// Poll `store` every `interval` (its kept state is reused while unchanged, and
    /// an unchanged one is not looked at again).
    async fn poll(self, store: Arc<dyn Store>, interval: Duration) {
        let mut last: Option<Arc<StoreState>> = None;
        loop {
            match store.load_shared().await {
                Ok(state) => {
                    if !last.as_ref().is_some_and(|l| Arc::ptr_eq(l, &state)) {
                        if last.is_none() {
                            tracing::info!(store = %store.location(), "agent API: following the state");
                        }
                        let woken = self.update(&state);
                        if woken > 0 {
                            tracing::debug!(woken, "agent API: host views changed");
                        }
                        last = Some(state);
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
    use crate::view::tests::{state, task};

    #[test]
    fn the_hub_wakes_only_changed_hosts_and_tells_a_removed_one() {
        let hub = Hub::default();
        assert!(
            hub.subscribe("h-a").is_none(),
            "nothing before the first state"
        );
        hub.update(&state());
        let mut a = hub.subscribe("h-a").expect("a");
        let mut b = hub.subscribe("h-b").expect("b");
        a.mark_unchanged();
        b.mark_unchanged();
        let mut st = state();
        st.tasks.insert("t-3".into(), task("t-3", "one", "h-a"));
        assert_eq!(hub.update(&st), 1);
        assert!(a.has_changed().expect("open") && !b.has_changed().expect("open"));
        st.hosts.remove("h-b");
        st.tasks.remove("t-2");
        hub.update(&st);
        assert!(b.has_changed().expect("open") && b.borrow_and_update().removed);
    }

    #[test]
    fn a_change_wakes_the_hosts_it_touches_and_matches_a_whole_read() {
        use gpushare_engine::store::StateChange;
        let hub = Hub::default();
        hub.update(&state());
        let mut a = hub.subscribe("h-a").expect("a");
        let mut b = hub.subscribe("h-b").expect("b");
        a.mark_unchanged();
        b.mark_unchanged();
        // t-2 moves from h-b to h-a: both views change, as a whole read says.
        let mut moved = task("t-2", "two", "h-a");
        moved.revision = 1;
        let mut st = state();
        st.serial = 1;
        st.tasks.insert("t-2".into(), moved.clone());
        let c = StateChange {
            serial: 1,
            cluster: "c".into(),
            tasks: vec![("t-2".into(), Some(moved))],
            ..StateChange::default()
        };
        assert_eq!(hub.apply(c), 2);
        let whole = crate::view::host_views(&st);
        assert_eq!(a.borrow_and_update().version, whole["h-a"].version);
        assert_eq!(b.borrow_and_update().version, whole["h-b"].version);
        // A change of a family's revisions wakes the hosts running it, only them.
        let mut revs = st.revisions["one"].clone();
        revs[0].spec.containers.clear();
        revs.push(revs[0].clone());
        revs[1].revision = 2;
        let c = StateChange {
            serial: 2,
            cluster: "c".into(),
            revisions: vec![("one".into(), Some(revs))],
            ..StateChange::default()
        };
        // (h-a runs revision 1 only: its view, and so the stream, stays as it was.)
        assert_eq!(hub.apply(c), 0);
        assert!(!b.has_changed().expect("open"));
        // A heartbeat changes nothing.
        let mut h = st.hosts["h-a"].clone();
        h.last_heartbeat = Some(99);
        let c = StateChange {
            serial: 3,
            cluster: "c".into(),
            hosts: vec![("h-a".into(), Some(h))],
            ..StateChange::default()
        };
        assert_eq!(hub.apply(c), 0);
    }
}
