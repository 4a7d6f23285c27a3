//! Reading the state: every `state/` key at one etcd revision ([`Snapshot`]), and
//! the state's encoding as one key per resource, revision family, host and task.

use crate::error::{is_compacted, Message};
use crate::keys::{Meta, DATA, META, META_FORMAT, STATE};
use crate::EtcdStore;
use gpushare_core::model::{AppliedResource, Host, Revision, StoreState, Task};
use gpushare_core::util::lock;
use gpushare_engine::store::StoreError;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The stored state as read at one etcd revision.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    /// The etcd revision it was read at.
    pub(crate) revision: i64,
    pub(crate) meta: Option<Meta>,
    /// `state/meta`'s mod revision (0: absent).
    pub(crate) meta_revision: i64,
    /// `state/d/` as stored: relative key (`task/t-1`) -> value.
    pub(crate) stored: BTreeMap<String, Vec<u8>>,
    /// Whether any `state/stage/` key exists (left by a writer, finished or not).
    pub(crate) has_stage: bool,
}

impl Snapshot {
    pub(crate) fn serial(&self) -> u64 {
        self.meta.as_ref().map_or(0, |m| m.serial)
    }
}

impl EtcdStore {
    /// The state this handle loaded last, when `state/meta` still has the mod revision
    /// it was read at (one read of one key instead of every key of the state, and no
    /// decoding: a plan of 10,000 tasks loads the state several times). Every change of
    /// the logical state writes `state/meta` (a small commit; a large commit's flip and
    /// finish; see [`EtcdStore::guard`]); a state read while a large commit's copy was
    /// unfinished is never kept ([`EtcdStore::remember_loaded`]).
    pub(crate) async fn unchanged_state(&self) -> Result<Option<Arc<StoreState>>, StoreError> {
        let Some(revision) = lock(&self.inner.loaded).as_ref().map(|(r, _)| *r) else {
            return Ok(None);
        };
        let now = self.get_one(META).await?.map(|kv| kv.mod_revision);
        if now != Some(revision) {
            return Ok(None);
        }
        Ok(lock(&self.inner.loaded)
            .as_ref()
            .filter(|(r, _)| *r == revision)
            .map(|(_, st)| Arc::clone(st)))
    }

    /// Keep `state` (read as `s`) for [`EtcdStore::unchanged_state`]: only a state
    /// whose meta key exists and names no staged commit, or the empty state (never
    /// taken as unchanged, but this handle's commits bring it forward in place).
    pub(crate) fn remember_loaded(&self, s: &Snapshot, state: &Arc<StoreState>) {
        let empty = s.meta.is_none() && s.stored.is_empty() && !s.has_stage;
        let whole =
            empty || (s.meta_revision > 0 && s.meta.as_ref().is_some_and(|m| m.staged.is_none()));
        *lock(&self.inner.loaded) = whole.then(|| (s.meta_revision, Arc::clone(state)));
    }

    /// Read the whole state at one revision.
    pub(crate) async fn read_snapshot(&self) -> Result<(Arc<Snapshot>, StoreState), StoreError> {
        let mut last_err = None;
        for _ in 0..3 {
            match self.read_snapshot_once().await {
                Ok(s) => return Ok(s),
                // The revision of the first page was compacted before the last: read again.
                Err(e) if is_compacted(&e) => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| {
            self.unreachable("reading the state".into(), Message("compacted".into()))
        }))
    }

    pub(crate) async fn read_snapshot_once(
        &self,
    ) -> Result<(Arc<Snapshot>, StoreState), StoreError> {
        let (revision, kvs) = self.range(STATE, 0).await?;
        let mut meta = None;
        let mut meta_revision = 0;
        let mut stored = BTreeMap::new();
        let mut staged: BTreeMap<String, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
        for kv in kvs {
            let Some(rel) = self.rel(&kv.key, STATE) else {
                continue;
            };
            if rel == "meta" {
                meta_revision = kv.mod_revision;
                meta = Some(
                    serde_json::from_slice::<Meta>(&kv.value).map_err(|e| self.corrupt(META, e))?,
                );
            } else if let Some(r) = rel.strip_prefix("d/") {
                stored.insert(r.to_string(), kv.value.to_vec());
            } else if let Some(r) = rel.strip_prefix("stage/") {
                if let Some((token, r)) = r.split_once('/') {
                    staged
                        .entry(token.to_string())
                        .or_default()
                        .insert(r.to_string(), kv.value.to_vec());
                }
            }
        }
        let has_stage = !staged.is_empty();
        let mut logical = stored.clone();
        if let Some(token) = meta.as_ref().and_then(|m| m.staged.as_ref()) {
            for (r, v) in staged.remove(token).unwrap_or_default() {
                if v.is_empty() {
                    logical.remove(&r);
                } else {
                    logical.insert(r, v);
                }
            }
        }
        let state = match &meta {
            None if logical.is_empty() => StoreState::default(),
            None => {
                return Err(self.corrupt_msg(
                    META,
                    "state keys exist but the meta key that gives their serial is missing".into(),
                ))
            }
            Some(m) => {
                if m.format != META_FORMAT {
                    return Err(self.corrupt_msg(
                        META,
                        format!(
                            "format {} is not one this build reads ({META_FORMAT})",
                            m.format
                        ),
                    ));
                }
                self.decode(m, &logical)?
            }
        };
        let snap = Snapshot {
            revision,
            meta,
            meta_revision,
            stored,
            has_stage,
        };
        Ok((Arc::new(snap), state))
    }

    pub(crate) fn decode(
        &self,
        meta: &Meta,
        kvs: &BTreeMap<String, Vec<u8>>,
    ) -> Result<StoreState, StoreError> {
        let mut st = StoreState {
            serial: meta.serial,
            cluster: meta.cluster.clone(),
            capacity_refusals: meta.capacity_refusals.clone(),
            ..StoreState::default()
        };
        for (rel, v) in kvs {
            let path = format!("{DATA}{rel}");
            let bad = |e| self.corrupt(&path, e);
            if let Some(addr) = rel.strip_prefix("res/") {
                let addr = addr
                    .parse()
                    .map_err(|m: String| self.corrupt_msg(&path, m))?;
                st.resources.insert(
                    addr,
                    serde_json::from_slice::<AppliedResource>(v).map_err(bad)?,
                );
            } else if let Some(f) = rel.strip_prefix("rev/") {
                st.revisions.insert(
                    f.to_string(),
                    serde_json::from_slice::<Vec<Revision>>(v).map_err(bad)?,
                );
            } else if let Some(id) = rel.strip_prefix("host/") {
                st.hosts.insert(
                    id.to_string(),
                    serde_json::from_slice::<Host>(v).map_err(bad)?,
                );
            } else if let Some(id) = rel.strip_prefix("task/") {
                st.tasks.insert(
                    id.to_string(),
                    serde_json::from_slice::<Task>(v).map_err(bad)?,
                );
            } else {
                return Err(self.corrupt_msg(&path, "not a key this build knows".into()));
            }
        }
        Ok(st)
    }

    /// The state's keys under `state/d/` and their values.
    pub(crate) fn encode(&self, st: &StoreState) -> Result<BTreeMap<String, Vec<u8>>, StoreError> {
        let mut out = BTreeMap::new();
        let mut put = |rel: String, v: serde_json::Result<Vec<u8>>| -> Result<(), StoreError> {
            let v = self.value(&rel, v)?;
            out.insert(rel, v);
            Ok(())
        };
        for (a, r) in &st.resources {
            put(format!("res/{a}"), serde_json::to_vec(r))?;
        }
        for (f, r) in &st.revisions {
            put(format!("rev/{f}"), serde_json::to_vec(r))?;
        }
        for (id, h) in &st.hosts {
            put(format!("host/{id}"), serde_json::to_vec(h))?;
        }
        for (id, t) in &st.tasks {
            put(format!("task/{id}"), serde_json::to_vec(t))?;
        }
        Ok(out)
    }

    /// The value of key `rel` (under `state/d/`), refused when one request could not
    /// carry it.
    pub(crate) fn value(
        &self,
        rel: &str,
        v: serde_json::Result<Vec<u8>>,
    ) -> Result<Vec<u8>, StoreError> {
        let limit = self.inner.opts.max_txn_bytes.saturating_sub(1024);
        let v = v.map_err(|e| self.corrupt(&format!("{DATA}{rel}"), e))?;
        if v.len() > limit {
            return Err(StoreError::Io {
                path: format!("{}/{DATA}{rel}", self.inner.location),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "a value of {} bytes is over the {limit} bytes one etcd request may carry",
                        v.len()
                    ),
                ),
            });
        }
        Ok(v)
    }
}
