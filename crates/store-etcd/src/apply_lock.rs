//! The apply lock: `<prefix>/lock`, a leased key naming its holder ([`EtcdLockInfo`]),
//! taken with a create-if-absent transaction and waited for up to the caller's
//! timeout; released by deleting it while it is still ours, or left to expire with its
//! lease when the holder dies.

use crate::keys::{LOCK, LOCK_POLL};
use crate::lease::{held_by, KeepAlive};
use crate::{user_name, EtcdStore};
use async_trait::async_trait;
use gpushare_core::util::{hostname, unix_now};
use gpushare_engine::fsutil::rfc3339;
use gpushare_engine::store::{LockGuard, StoreError};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Who holds the apply lock, as written to `<prefix>/lock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdLockInfo {
    pub user: String,
    pub hostname: String,
    pub pid: u32,
    /// What the holder is doing, e.g. `gpushare apply`.
    pub command: String,
    /// RFC 3339, UTC.
    pub since: String,
}

impl std::fmt::Display for EtcdLockInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} (user {}, pid {} on {})",
            self.command, self.user, self.pid, self.hostname
        )
    }
}

impl EtcdStore {
    /// Who holds the apply lock now, if anyone.
    pub async fn lock_info(&self) -> Result<Option<EtcdLockInfo>, StoreError> {
        match self.get_one(LOCK).await? {
            None => Ok(None),
            Some(kv) => serde_json::from_slice(&kv.value)
                .map(Some)
                .map_err(|e| self.corrupt(LOCK, e)),
        }
    }

    /// [`Store::lock`](gpushare_engine::store::Store::lock): take the apply lock as `holder`,
    /// waiting up to `timeout`.
    pub(crate) async fn take_lock(
        &self,
        holder: &str,
        timeout: Duration,
    ) -> Result<Box<dyn LockGuard>, StoreError> {
        let ttl = self.inner.opts.lock_ttl;
        let keep = self
            .kept_lease(
                ttl,
                "granting the lock's lease",
                format!("lock held by {holder:?}"),
            )
            .await?;
        let lease = keep.id;
        let guard = EtcdLockGuard {
            store: self.clone(),
            keep: Some(keep),
        };
        let info = EtcdLockInfo {
            user: user_name(),
            hostname: hostname(),
            pid: std::process::id(),
            command: holder.to_string(),
            since: rfc3339(unix_now()),
        };
        let bytes = serde_json::to_vec(&info).map_err(|e| self.corrupt(LOCK, e))?;
        let started = Instant::now();
        loop {
            let current = self
                .try_hold(LOCK, &bytes, lease, "taking the lock")
                .await?;
            if current.is_none() {
                tracing::debug!(holder, store = %self.inner.location, "took the state lock");
                return Ok(Box::new(guard));
            }
            let waited = started.elapsed();
            if waited >= timeout {
                drop(guard);
                return Err(held_by(current.as_ref(), "an unknown process", waited));
            }
            tokio::time::sleep(LOCK_POLL.min(timeout - waited)).await;
        }
    }
}

struct EtcdLockGuard {
    store: EtcdStore,
    keep: Option<KeepAlive>,
}

#[async_trait]
impl LockGuard for EtcdLockGuard {
    async fn release(mut self: Box<Self>) -> Result<(), StoreError> {
        let keep = self.keep.take();
        let r = self
            .store
            .end_leased(LOCK, keep, "releasing the lock")
            .await;
        tracing::debug!(store = %self.store.inner.location, "released the state lock");
        r
    }
}

impl Drop for EtcdLockGuard {
    fn drop(&mut self) {
        // Dropped without release.
        self.store.revoke_in_background(self.keep.take());
    }
}
