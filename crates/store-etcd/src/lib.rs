//! The `etcd` store: gpushare's system of record in an etcd v3 cluster, for fleets,
//! for agents on other machines and for several reconcilers.
//!
//! `store = "etcd://host:2379[,host2:2379,...]/prefix"` (default prefix `gpushare`; use one
//! prefix per cluster, e.g. `/gpushare/prod`). Under `<prefix>/`:
//!
//! | key | value |
//! | --- | --- |
//! | `state/meta` | `{"format":1,"serial":N,"cluster":"…","staged":null}`, and the recent `capacity_refusals` when there are any |
//! | `state/d/res/<kind.name>` | one applied resource |
//! | `state/d/rev/<family>` | the revisions of one task-definition family |
//! | `state/d/host/<host id>` | one host |
//! | `state/d/task/<task id>` | one task (agents watch these) |
//! | `state/stage/<token>/<res\|rev\|host\|task>/<id>` | a large commit's staged values (empty: deleted) |
//! | `commit` | the claim of a large commit in progress (leased) |
//! | `journal/head`, `journal/plan/<id>/<n>`, `journal/done` | the apply journal, in chunks |
//! | `lock` | the apply lock, naming its holder (leased) |
//! | `leader` | the leading reconciler (leased; [`EtcdStore::campaign`]) |
//! | `report/<host id>` | an agent's report (leased: the heartbeat) |
//! | `status` | the last reconcile pass's status record (`gpushare status`) |
//! | `record/<name>` | the controller's records: the agent API's CA and join tokens |
//!
//! docs/etcd.md has the whole design, the RBAC roles, TLS and operations.
//!
//! # Commits
//! A commit compares and swaps on the state it was computed from, and writes only the
//! keys that changed (plus `state/meta`, which carries the serial): a change set's keys
//! ([`Store::commit_changes`], what apply commits), or for a whole state the keys that
//! differ from the ones stored. The guard is
//! "`state/meta` is at the revision the writer read, and no large commit is claimed"
//! (after reading a large commit's unfinished copy: "no key under `state/` changed
//! since", an etcd range compare), so a writer that lost the race gets
//! [`StoreError::Conflict`] and has written nothing.
//!
//! A change that fits in one transaction (at most [`EtcdOptions::max_txn_ops`]
//! operations and [`EtcdOptions::max_txn_bytes`] bytes; etcd 3.4 refuses more than 128
//! operations or 1.5 MiB by default) is that one transaction. A larger one (the first
//! commit of a 10,000-task state) is staged:
//! 1. claim `commit` (leased, kept alive) under the same guard;
//! 2. write every changed value under `state/stage/<token>/` in as many transactions as
//!    needed, each guarded by the claim: readers ignore these keys;
//! 3. flip: one small transaction sets `state/meta` to the new serial with
//!    `staged: <token>`. From this revision on, readers see the stored keys overlaid
//!    with the staged ones, which is exactly the new state;
//! 4. copy the staged values into `state/d/` (chunked, guarded by the claim), then one
//!    transaction clears `staged`, deletes `state/stage/` and the claim.
//!
//! A writer that dies before the flip leaves only ignored staged keys (the next commit
//! deletes them); one that dies after it leaves a committed state that every reader
//! already sees whole, and the next commit rewrites whatever the copy had not reached
//! (it diffs against the keys as stored). Nothing relies on etcd's history, so
//! compaction never breaks a load.

use async_trait::async_trait;
use client::Client;
use gpushare_core::model::{HostReport, StoreState};
use gpushare_core::util::lock;
use gpushare_engine::store::{
    Journal, Leader, LockGuard, StateEvents, StatusRecord, Store, StoreError,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod apply_lock;
mod auth_records;
mod call;
mod changes;
pub mod client;
mod commit;
mod connect;
mod error;
mod identity;
mod journal;
mod keys;
mod leader;
mod lease;
mod report;
mod snapshot;
mod state_watch;
mod url;
mod watch;

use snapshot::Snapshot;

pub use apply_lock::EtcdLockInfo;
pub use error::{EtcdOpError, OpenError};
pub use leader::Leadership;
pub use url::{
    CredentialsError, EtcdOptions, EtcdUrl, Secret, UrlError, DEFAULT_PORT, DEFAULT_PREFIX,
};
pub use url::{ENV_CACERT, ENV_CERT, ENV_KEY, ENV_PASSWORD, ENV_USERNAME};
pub use watch::AssignmentWatch;

/// What this handle has written of the state and the journal, for measuring what an
/// apply step costs etcd ([`EtcdStore::write_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Successful write transactions.
    pub txns: u64,
    /// Keys put.
    pub puts: u64,
    /// Keys (or, for a prefix, ranges) deleted.
    pub deletes: u64,
    /// Bytes of keys and values put.
    pub bytes: u64,
}

/// The `etcd` store. Cheap to clone (clones share the connection and caches).
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    url: EtcdUrl,
    location: String,
    opts: EtcdOptions,
    /// The last snapshot this handle read or wrote (commits diff against it).
    cache: Mutex<Option<Arc<Snapshot>>>,
    /// The state this handle last loaded, with the mod revision of `state/meta` it was
    /// read at (see [`EtcdStore::unchanged_state`]).
    loaded: Mutex<Option<(i64, Arc<StoreState>)>>,
    /// Report leases by host id.
    report_leases: Mutex<HashMap<String, i64>>,
    /// The id and head revision of the journal this handle last wrote or read.
    journal_id: Mutex<Option<(String, i64)>>,
    #[doc(hidden)]
    failpoint: Mutex<Option<Failpoint>>,
    stats: Mutex<WriteStats>,
    /// This store's identity; empty when these credentials may not read it (an agent's).
    store_id: Mutex<String>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("location", &self.inner.location)
            .finish_non_exhaustive()
    }
}

/// Test hook: stop a large commit at a point, as if its writer died there (the claim
/// is left to expire). Not for production use.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// After the values are staged, before the flip.
    BeforeFlip,
    /// After the flip, before any staged value is copied.
    AfterFlip,
}

impl EtcdStore {
    /// The parsed URL (endpoints and prefix).
    pub fn url(&self) -> &EtcdUrl {
        &self.inner.url
    }

    /// What this handle has written of the state and journal so far (take the
    /// difference around an operation to measure it).
    pub fn write_stats(&self) -> WriteStats {
        *lock(&self.inner.stats)
    }

    #[doc(hidden)]
    pub fn set_failpoint(&self, f: Option<Failpoint>) {
        *lock(&self.inner.failpoint) = f;
    }
}

#[async_trait]
impl Store for EtcdStore {
    fn location(&self) -> String {
        self.inner.location.clone()
    }

    async fn load(&self) -> Result<StoreState, StoreError> {
        let shared = self.load_shared().await?;
        Ok(StoreState::clone(&shared))
    }

    async fn load_shared(&self) -> Result<Arc<StoreState>, StoreError> {
        let store_id = self.store_id();
        let state = match self.unchanged_state().await? {
            Some(state) => state,
            None => {
                let (s, mut state) = self.read_snapshot().await?;
                state.store_id = store_id.clone();
                let state = Arc::new(state);
                self.remember_loaded(&s, &state);
                *lock(&self.inner.cache) = Some(s);
                state
            }
        };
        if state.store_id == store_id {
            return Ok(state);
        }
        // The identity changed since (an adoption): the kept state names the old one.
        let mut state = StoreState::clone(&state);
        state.store_id = store_id;
        Ok(Arc::new(state))
    }

    async fn commit(&self, expected_serial: u64, state: &StoreState) -> Result<(), StoreError> {
        self.commit_state(expected_serial, state).await
    }

    async fn commit_changes(
        &self,
        expected_serial: u64,
        changes: &gpushare_engine::store::ChangeSet,
    ) -> Result<(), StoreError> {
        self.commit_change_set(expected_serial, changes).await
    }

    async fn lock(
        &self,
        holder: &str,
        timeout: Duration,
    ) -> Result<Box<dyn LockGuard>, StoreError> {
        self.take_lock(holder, timeout).await
    }

    async fn read_journal(&self) -> Result<Option<Journal>, StoreError> {
        self.get_journal().await
    }

    async fn write_journal(&self, journal: &Journal) -> Result<(), StoreError> {
        self.put_journal(journal).await
    }

    async fn advance_journal(&self, journal: &Journal) -> Result<(), StoreError> {
        self.put_journal_position(journal).await
    }

    async fn clear_journal(&self) -> Result<(), StoreError> {
        self.delete_journal().await
    }

    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError> {
        self.put_leased_report(report).await
    }

    async fn put_reports(&self, reports: &[HostReport]) -> Result<(), StoreError> {
        self.put_leased_reports(reports).await
    }

    async fn reports(&self) -> Result<Vec<HostReport>, StoreError> {
        self.get_reports().await
    }

    async fn delete_report(&self, host_id: &str) -> Result<(), StoreError> {
        self.delete_leased_report(host_id).await
    }

    async fn adopt_identity(&self, id: &str) -> Result<(), StoreError> {
        self.put_store_id(id).await
    }

    async fn put_status(&self, status: &StatusRecord) -> Result<(), StoreError> {
        self.put_status_record(status).await
    }

    async fn get_record(
        &self,
        name: &str,
    ) -> Result<Option<gpushare_engine::store::Record>, StoreError> {
        self.get_auth_record(name).await
    }

    async fn put_record(&self, name: &str, value: &str, expected: u64) -> Result<u64, StoreError> {
        self.put_auth_record(name, value, expected).await
    }

    async fn watch_state(&self) -> Result<Option<StateEvents>, StoreError> {
        Ok(Some(self.spawn_state_watch()))
    }

    async fn status(&self) -> Result<Option<StatusRecord>, StoreError> {
        self.get_status_record().await
    }

    async fn campaign(
        &self,
        candidate: &str,
        timeout: Option<Duration>,
    ) -> Result<Option<Box<dyn Leader>>, StoreError> {
        let l = EtcdStore::campaign(self, candidate, timeout).await?;
        Ok(Some(Box::new(l)))
    }

    async fn leader(&self) -> Result<Option<String>, StoreError> {
        Ok(EtcdStore::leader(self).await?.map(|i| i.to_string()))
    }
}

fn unique_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{nanos:x}-{:x}-{:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn user_name() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "unknown-user".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn diff_lists_changed_and_removed_keys() {
        let a: BTreeMap<String, Vec<u8>> = [
            ("task/a".into(), b"1".to_vec()),
            ("task/b".into(), b"2".to_vec()),
        ]
        .into();
        let b: BTreeMap<String, Vec<u8>> = [
            ("task/a".into(), b"1".to_vec()),
            ("task/c".into(), b"3".to_vec()),
        ]
        .into();
        let d = EtcdStore::diff(&a, &b);
        assert_eq!(d, vec![("task/c", Some(&b"3"[..])), ("task/b", None)]);
    }
}
