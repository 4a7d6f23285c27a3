//! Leadership among several reconcilers of one cluster: a leased `<prefix>/leader` key
//! naming the leader. Only the leader plans and applies; a standby that campaigns takes
//! over once the leader resigns or its lease expires (it died or lost etcd).

use crate::apply_lock::EtcdLockInfo;
use crate::client::WatchCreateRequest;
use crate::lease::{held_by, KeepAlive};
use crate::{user_name, EtcdStore};
use gpushare_core::util::{hostname, unix_now};
use gpushare_engine::fsutil::rfc3339;
use gpushare_engine::store::{Leader, StoreError};
use std::time::{Duration, Instant};

pub(crate) const LEADER: &str = "leader";

/// This process leads the cluster's reconcilers while this is alive and
/// [`Leadership::is_leader`] says so.
#[derive(Debug)]
pub struct Leadership {
    store: EtcdStore,
    keep: Option<KeepAlive>,
    info: EtcdLockInfo,
}

impl Leadership {
    /// Still the leader (the lease has not been lost).
    pub fn is_leader(&self) -> bool {
        self.keep.as_ref().is_some_and(KeepAlive::is_alive)
    }

    /// Resolves when leadership is lost (the lease expired or could not be refreshed
    /// for a whole TTL): stop planning and applying at once.
    pub async fn lost(&self) {
        if let Some(k) = &self.keep {
            k.lost().await;
        }
    }

    /// Who this leadership names.
    pub fn info(&self) -> &EtcdLockInfo {
        &self.info
    }

    /// Step down now, so a standby takes over at once.
    pub async fn resign(mut self) -> Result<(), StoreError> {
        let keep = self.keep.take();
        self.store
            .end_leased(LEADER, keep, "resigning leadership")
            .await
    }

    /// Test hook: stop refreshing without resigning, as a killed leader would.
    #[doc(hidden)]
    pub fn abandon(mut self) {
        if let Some(k) = self.keep.take() {
            k.abandon();
        }
    }
}

#[async_trait::async_trait]
impl Leader for Leadership {
    fn is_leader(&self) -> bool {
        Leadership::is_leader(self)
    }
    async fn lost(&self) {
        Leadership::lost(self).await
    }
    async fn resign(self: Box<Self>) -> Result<(), StoreError> {
        Leadership::resign(*self).await
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.store.revoke_in_background(self.keep.take());
    }
}

impl EtcdStore {
    /// Become the leader of this prefix's reconcilers, waiting while another is
    /// (`timeout` `None`: as long as it takes). A standby takes over within the
    /// leader's lease TTL (`lock_ttl`) after the leader dies. On timeout,
    /// `StoreError::Locked` names the leader.
    pub async fn campaign(
        &self,
        candidate: &str,
        timeout: Option<Duration>,
    ) -> Result<Leadership, StoreError> {
        let ttl = self.inner.opts.lock_ttl;
        let keep = self
            .kept_lease(
                ttl,
                "granting the leader's lease",
                format!("leadership of {candidate:?}"),
            )
            .await?;
        let lease = keep.id;
        let mut leadership = Leadership {
            store: self.clone(),
            keep: Some(keep),
            info: EtcdLockInfo {
                user: user_name(),
                hostname: hostname(),
                pid: std::process::id(),
                command: candidate.to_string(),
                since: rfc3339(unix_now()),
            },
        };
        let bytes = serde_json::to_vec(&leadership.info).map_err(|e| self.corrupt(LEADER, e))?;
        let key = self.key(LEADER);
        let started = Instant::now();
        loop {
            let current = self
                .try_hold(LEADER, &bytes, lease, "campaigning for leadership")
                .await?;
            if current.is_none() {
                leadership.info.since = rfc3339(unix_now());
                tracing::info!(candidate, store = %self.inner.location, "leading the cluster's reconcilers");
                return Ok(leadership);
            }
            let waited = started.elapsed();
            if timeout.is_some_and(|limit| waited >= limit) {
                drop(leadership);
                return Err(held_by(current.as_ref(), "an unknown leader", waited));
            }
            // Wait for the leader's key to go (resigned or expired), or the timeout.
            let remaining = timeout.map(|l| l.saturating_sub(waited));
            let from = current.map_or(0, |kv| kv.mod_revision + 1);
            self.wait_for_delete(&key, from, remaining).await;
        }
    }

    /// Who leads this prefix's reconcilers now, if anyone (for `show`).
    pub async fn leader(&self) -> Result<Option<EtcdLockInfo>, StoreError> {
        match self.get_one(LEADER).await? {
            None => Ok(None),
            Some(kv) => serde_json::from_slice(&kv.value)
                .map(Some)
                .map_err(|e| self.corrupt(LEADER, e)),
        }
    }

    /// Until `key` is deleted at or after revision `from`, or `limit` passes (a failed
    /// watch falls back to a short sleep: the caller looks again).
    async fn wait_for_delete(&self, key: &str, from: i64, limit: Option<Duration>) {
        let limit = limit.unwrap_or(Duration::from_secs(3600));
        let c = &self.inner.client;
        let wait = async {
            let create = WatchCreateRequest {
                key: key.into(),
                start_revision: from.max(1),
                ..WatchCreateRequest::default()
            };
            let Ok(mut stream) = c.watch(create).await else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                return;
            };
            loop {
                match stream.message().await {
                    Ok(Some(resp)) => {
                        if resp.canceled || resp.events.iter().any(|e| e.is_delete()) {
                            return;
                        }
                    }
                    _ => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        return;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(limit, wait).await;
    }
}
