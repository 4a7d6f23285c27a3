//! [`Store::watch_state`](gpushare_engine::store::Store::watch_state) on etcd: one
//! read of every `state/` key, then one watch from just after that revision whose
//! events are applied to a copy of the keys. Each transaction's events become the
//! logical change it made (stored keys overlaid with a flipped large commit's staged
//! ones, as [`crate::snapshot`] reads them), so a serving process follows a 40,000-task
//! state for the cost of what each commit writes, not a whole read per commit.

use crate::client::{prefix_end, KeyValue, WatchCreateRequest};
use crate::keys::DATA;
use crate::keys::{Meta, META, META_FORMAT, STATE};
use crate::EtcdStore;
use gpushare_core::util::backoff_delays;
use gpushare_engine::store::{StateChange, StateEvent, StateEvents, StoreError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The raw `state/` keys: the meta, the stored values and every token's staged ones.
#[derive(Default)]
struct Keys {
    meta: Option<Meta>,
    /// `state/d/` relative key (`task/t-1`) -> value.
    stored: BTreeMap<String, Vec<u8>>,
    /// token -> relative key -> staged value (empty: deleted by that commit).
    staged: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

/// Where a `state/` key belongs.
enum Slot<'a> {
    Meta,
    Stored(&'a str),
    Staged(&'a str, &'a str),
}

fn slot(rel: &str) -> Option<Slot<'_>> {
    if rel == "meta" {
        return Some(Slot::Meta);
    }
    if let Some(r) = rel.strip_prefix("d/") {
        return Some(Slot::Stored(r));
    }
    let (token, r) = rel.strip_prefix("stage/")?.split_once('/')?;
    Some(Slot::Staged(token, r))
}

impl Keys {
    fn token(&self) -> Option<&str> {
        self.meta.as_ref().and_then(|m| m.staged.as_deref())
    }

    /// The logical value of `rel` (`None`: absent).
    fn logical(&self, rel: &str) -> Option<&[u8]> {
        if let Some(v) = self.token().and_then(|t| self.staged.get(t)?.get(rel)) {
            return (!v.is_empty()).then_some(v.as_slice());
        }
        self.stored.get(rel).map(Vec::as_slice)
    }

    fn apply(&mut self, store: &EtcdStore, kv: &KeyValue, deleted: bool) -> Result<(), StoreError> {
        let Some(rel) = store.rel(&kv.key, STATE) else {
            return Ok(());
        };
        match slot(rel) {
            Some(Slot::Meta) => {
                self.meta = if deleted {
                    None
                } else {
                    Some(serde_json::from_slice(&kv.value).map_err(|e| store.corrupt(META, e))?)
                };
            }
            Some(Slot::Stored(r)) => {
                if deleted {
                    self.stored.remove(r);
                } else {
                    self.stored.insert(r.to_string(), kv.value.to_vec());
                }
            }
            Some(Slot::Staged(token, r)) => {
                if deleted {
                    if let Some(m) = self.staged.get_mut(token) {
                        m.remove(r);
                        if m.is_empty() {
                            self.staged.remove(token);
                        }
                    }
                } else {
                    self.staged
                        .entry(token.to_string())
                        .or_default()
                        .insert(r.to_string(), kv.value.to_vec());
                }
            }
            None => {}
        }
        Ok(())
    }

    /// The relative keys whose logical value the events may change: the keys they
    /// touch, and every key staged under the token before or after them.
    fn touched(&self, store: &EtcdStore, events: &[(KeyValue, bool)]) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut tokens: BTreeSet<String> = self.token().map(str::to_string).into_iter().collect();
        for (kv, deleted) in events {
            match store.rel(&kv.key, STATE).and_then(slot) {
                Some(Slot::Stored(r)) | Some(Slot::Staged(_, r)) => {
                    out.insert(r.to_string());
                }
                Some(Slot::Meta) if !deleted => {
                    if let Ok(m) = serde_json::from_slice::<Meta>(&kv.value) {
                        tokens.extend(m.staged);
                    }
                }
                _ => {}
            }
        }
        for t in &tokens {
            out.extend(
                self.staged
                    .get(t)
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k.clone()),
            );
        }
        out
    }

    fn whole(&self, store: &EtcdStore) -> Result<gpushare_core::model::StoreState, StoreError> {
        let Some(meta) = &self.meta else {
            return Ok(Default::default());
        };
        if meta.format != META_FORMAT {
            return Err(store.corrupt_msg(
                META,
                format!(
                    "format {} is not one this build reads ({META_FORMAT})",
                    meta.format
                ),
            ));
        }
        let mut logical = self.stored.clone();
        if let Some(staged) = self.token().and_then(|t| self.staged.get(t)) {
            for (r, v) in staged {
                if v.is_empty() {
                    logical.remove(r);
                } else {
                    logical.insert(r.clone(), v.clone());
                }
            }
        }
        store.decode(meta, &logical)
    }
}

/// The change from `before` (the logical values of `keys` before) to `now`.
fn change(
    store: &EtcdStore,
    now: &Keys,
    before: BTreeMap<String, Option<Vec<u8>>>,
) -> Result<StateChange, StoreError> {
    let mut c = StateChange {
        serial: now.meta.as_ref().map_or(0, |m| m.serial),
        cluster: now
            .meta
            .as_ref()
            .map(|m| m.cluster.clone())
            .unwrap_or_default(),
        ..StateChange::default()
    };
    for (rel, old) in before {
        let new = now.logical(&rel);
        if new == old.as_deref() {
            continue;
        }
        let path = format!("{}{rel}", DATA);
        let bad = |e| store.corrupt(&path, e);
        if let Some(id) = rel.strip_prefix("host/") {
            let v = new.map(serde_json::from_slice).transpose().map_err(bad)?;
            c.hosts.push((id.to_string(), v));
        } else if let Some(id) = rel.strip_prefix("task/") {
            let v = new.map(serde_json::from_slice).transpose().map_err(bad)?;
            c.tasks.push((id.to_string(), v));
        } else if let Some(f) = rel.strip_prefix("rev/") {
            let v = new.map(serde_json::from_slice).transpose().map_err(bad)?;
            c.revisions.push((f.to_string(), v));
        }
    }
    Ok(c)
}

impl EtcdStore {
    pub(crate) fn spawn_state_watch(&self) -> StateEvents {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(run(self.clone(), tx));
        rx
    }
}

async fn read_keys(store: &EtcdStore) -> Result<(i64, Keys), StoreError> {
    let (rev, kvs) = store.range(STATE, 0).await?;
    let mut keys = Keys::default();
    for kv in &kvs {
        keys.apply(store, kv, false)?;
    }
    Ok((rev, keys))
}

async fn run(store: EtcdStore, tx: mpsc::Sender<Result<StateEvent, StoreError>>) {
    // 200 ms after the first failure, doubling up to 10 s (never reset).
    let mut waits = backoff_delays(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        match follow(&store, &tx).await {
            // The receiver is gone.
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(store = %store.inner.location, error = %e, "the state watch failed; reading again");
                if tx.send(Err(e)).await.is_err() {
                    return;
                }
            }
        }
        tokio::time::sleep(waits.next().unwrap_or(Duration::from_secs(10))).await;
    }
}

/// Read and watch until the watch breaks (an error) or the receiver is gone (`Ok`).
async fn follow(
    store: &EtcdStore,
    tx: &mpsc::Sender<Result<StateEvent, StoreError>>,
) -> Result<(), StoreError> {
    // Read, then watch from just after the revision read: no change is missed.
    let (rev, mut keys) = read_keys(store).await?;
    let mut whole = keys.whole(store)?;
    whole.store_id = store.store_id();
    if tx
        .send(Ok(StateEvent::Whole(Arc::new(whole))))
        .await
        .is_err()
    {
        return Ok(());
    }
    let key = store.key(STATE).into_bytes();
    let create = WatchCreateRequest {
        range_end: prefix_end(&key),
        key,
        start_revision: rev + 1,
        ..WatchCreateRequest::default()
    };
    let mut stream = store.inner.client.watch(create).await.map_err(|e| {
        crate::error::classify(&store.inner.location, "watching the state".into(), e)
    })?;
    let broken =
        |why: String| store.unreachable("watching the state".into(), crate::error::Message(why));
    loop {
        let resp = tokio::select! {
            r = stream.message() => r,
            _ = tx.closed() => return Ok(()),
        };
        let resp = match resp {
            Ok(Some(r)) => r,
            Ok(None) => return Err(broken("etcd ended the watch".into())),
            Err(e) => return Err(broken(e.to_string())),
        };
        if resp.canceled {
            return Err(broken(format!(
                "etcd cancelled the watch ({}; compacted at {})",
                resp.cancel_reason, resp.compact_revision
            )));
        }
        if resp.events.is_empty() {
            continue;
        }
        // Every event of one revision (one transaction) comes in one response.
        let events: Vec<(KeyValue, bool)> = resp
            .events
            .into_iter()
            .filter_map(|ev| {
                let deleted = ev.is_delete();
                ev.kv.map(|kv| (kv, deleted))
            })
            .collect();
        let before: BTreeMap<String, Option<Vec<u8>>> = keys
            .touched(store, &events)
            .into_iter()
            .map(|rel| {
                let v = keys.logical(&rel).map(<[u8]>::to_vec);
                (rel, v)
            })
            .collect();
        let serial = keys.meta.as_ref().map(|m| m.serial);
        for (kv, deleted) in &events {
            keys.apply(store, kv, *deleted)?;
        }
        let c = change(store, &keys, before)?;
        let moved = serial != keys.meta.as_ref().map(|m| m.serial);
        if (moved || !c.hosts.is_empty() || !c.tasks.is_empty() || !c.revisions.is_empty())
            && tx.send(Ok(StateEvent::Change(c))).await.is_err()
        {
            return Ok(());
        }
    }
}
