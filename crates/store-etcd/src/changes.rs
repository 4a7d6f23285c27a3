//! Committing a change set
//! ([`Store::commit_changes`](gpushare_engine::store::Store::commit_changes)): only the keys it
//! names are encoded and written, under the same guard as a whole-state commit, small or staged by
//! size; the handle's snapshot (and the state it last loaded) are brought forward in place, so the
//! next commit and load need not read the state again.

use super::commit::{Outcome, COMMIT_ATTEMPTS};
use crate::keys::{Meta, META_FORMAT};
use crate::snapshot::Snapshot;
use crate::EtcdStore;
use gpushare_core::util::lock;
use gpushare_engine::store::ChangeSet;
use gpushare_engine::store::StoreError;
use std::sync::Arc;
use std::time::Instant;

/// A change set as keys under `state/d/` and their values (`None`: deleted).
type Encoded = Vec<(String, Option<Vec<u8>>)>;

impl EtcdStore {
    pub(crate) async fn commit_change_set(
        &self,
        expected: u64,
        changes: &ChangeSet,
    ) -> Result<(), StoreError> {
        gpushare_engine::store::check_next_serial(expected, changes.serial)?;
        let encoded = self.encode_changes(changes)?;
        let meta = Meta {
            format: META_FORMAT,
            serial: changes.serial,
            cluster: changes.cluster.clone(),
            staged: None,
            capacity_refusals: changes.capacity_refusals.clone(),
        };
        let started = Instant::now();
        for attempt in 0..COMMIT_ATTEMPTS {
            let base = self.base(expected).await?;
            if base.serial() != expected {
                // A write of ours whose answer was lost may have landed.
                if attempt > 0 && base.serial() == changes.serial && landed(&base, &encoded) {
                    return Ok(());
                }
                return Err(StoreError::Conflict {
                    expected,
                    found: base.serial(),
                });
            }
            if base.meta.as_ref().is_some_and(|m| m.staged.is_some()) {
                // A large commit's copy is unfinished: the whole-state commit finishes it.
                drop(base);
                return self.commit_over_unfinished(expected, changes).await;
            }
            // Only what differs from the keys as stored (as a whole-state diff would).
            let ops: Vec<(&str, Option<&[u8]>)> = encoded
                .iter()
                .filter(|(k, v)| base.stored.get(k).map(Vec::as_slice) != v.as_deref())
                .map(|(k, v)| (k.as_str(), v.as_deref()))
                .collect();
            let bytes: usize = ops
                .iter()
                .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len) + self.inner.url.prefix.len() + 32)
                .sum();
            let small = ops.len() + 2 <= self.inner.opts.max_txn_ops
                && bytes + 4096 <= self.inner.opts.max_txn_bytes;
            let outcome = if small {
                self.commit_small(&base, &ops, &meta).await?
            } else {
                self.commit_staged(&base, &ops, &meta).await?
            };
            let base_meta_revision = base.meta_revision;
            drop(base);
            match outcome {
                Outcome::Done(revision) => {
                    self.advance_caches(
                        expected,
                        base_meta_revision,
                        revision,
                        &meta,
                        &encoded,
                        changes,
                    );
                    tracing::debug!(
                        serial = changes.serial,
                        keys_written = ops.len(),
                        staged = !small,
                        ms = started.elapsed().as_millis() as u64,
                        store = %self.inner.location,
                        "committed changes"
                    );
                    return Ok(());
                }
                Outcome::Unfinished => {
                    *lock(&self.inner.cache) = None;
                    return Ok(());
                }
                Outcome::Claimed => {
                    *lock(&self.inner.cache) = None;
                    self.wait_for_claim().await?;
                }
                Outcome::Moved => {
                    *lock(&self.inner.cache) = None;
                }
            }
        }
        let found = self.read_snapshot().await?.0.serial();
        Err(StoreError::Conflict { expected, found })
    }

    /// The state as stored (a large commit's copy unfinished) with `changes` applied,
    /// committed whole.
    async fn commit_over_unfinished(
        &self,
        expected: u64,
        changes: &ChangeSet,
    ) -> Result<(), StoreError> {
        let (_, mut state) = self.read_snapshot().await?;
        if state.serial != expected {
            return Err(StoreError::Conflict {
                expected,
                found: state.serial,
            });
        }
        changes.apply_to(&mut state);
        self.commit_state(expected, &state).await
    }

    /// After a commit at etcd revision `revision` over the snapshot of `expected`
    /// (whose meta was at `base_meta_revision`): the cached snapshot and the loaded
    /// state take the change in place when nothing else holds them, else are dropped.
    fn advance_caches(
        &self,
        expected: u64,
        base_meta_revision: i64,
        revision: i64,
        meta: &Meta,
        encoded: &Encoded,
        changes: &ChangeSet,
    ) {
        let mut cache = lock(&self.inner.cache);
        let mut snap = cache.take();
        if let Some(s) = snap
            .as_mut()
            .filter(|s| s.serial() == expected && s.meta_revision == base_meta_revision)
        {
            let s = Arc::make_mut(s);
            for (k, v) in encoded {
                match v {
                    Some(v) => {
                        s.stored.insert(k.clone(), v.clone());
                    }
                    None => {
                        s.stored.remove(k);
                    }
                }
            }
            s.revision = revision;
            s.meta = Some(meta.clone());
            s.meta_revision = revision;
            s.has_stage = false;
            *cache = snap;
        }
        drop(cache);
        let mut loaded = lock(&self.inner.loaded);
        let mut kept = loaded.take();
        if let Some((r, st)) = kept.as_mut().filter(|(r, _)| *r == base_meta_revision) {
            if let Some(state) = Arc::get_mut(st) {
                changes.apply_to(state);
                *r = revision;
                *loaded = kept;
            }
        }
    }

    /// The change set's keys and values.
    pub(crate) fn encode_changes(&self, c: &ChangeSet) -> Result<Encoded, StoreError> {
        let mut out = Vec::with_capacity(c.len());
        let mut put = |rel: String, v: Option<serde_json::Result<Vec<u8>>>| {
            let v = v.map(|v| self.value(&rel, v)).transpose()?;
            out.push((rel, v));
            Ok::<(), StoreError>(())
        };
        for (a, r) in &c.resources {
            put(format!("res/{a}"), r.as_ref().map(serde_json::to_vec))?;
        }
        for (f, r) in &c.revisions {
            put(format!("rev/{f}"), r.as_ref().map(serde_json::to_vec))?;
        }
        for (id, h) in &c.hosts {
            put(format!("host/{id}"), h.as_ref().map(serde_json::to_vec))?;
        }
        for (id, t) in &c.tasks {
            put(format!("task/{id}"), t.as_ref().map(serde_json::to_vec))?;
        }
        Ok(out)
    }
}

/// Whether `base` (read after a commit whose answer was lost) holds exactly `encoded`.
fn landed(base: &Snapshot, encoded: &Encoded) -> bool {
    base.meta.as_ref().is_some_and(|m| m.staged.is_none())
        && encoded
            .iter()
            .all(|(k, v)| base.stored.get(k).map(Vec::as_slice) == v.as_deref())
}
