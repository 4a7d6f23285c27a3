//! Keeping an etcd lease alive from a background task while something is held.

use crate::client::{Client, KeyValue};
use crate::client::{Compare, CompareOp, DeleteRangeRequest, PutRequest, RangeRequest, TxnRequest};
use gpushare_engine::store::StoreError;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Keeps lease `id` alive until dropped, and says when it is lost (found expired, or
/// not refreshed for a whole TTL, after which etcd has expired it). Dropping it stops
/// the keep-alive; the lease then expires after its TTL unless revoked.
#[derive(Debug)]
pub(crate) struct KeepAlive {
    pub(crate) id: i64,
    task: tokio::task::JoinHandle<()>,
    alive: watch::Receiver<bool>,
}

impl KeepAlive {
    pub(crate) fn spawn(client: Client, id: i64, ttl: Duration, what: String) -> KeepAlive {
        let (tx, alive) = watch::channel(true);
        let task = tokio::spawn(keep_alive_loop(client, id, ttl, what, tx));
        KeepAlive { id, task, alive }
    }

    /// Whether the lease is still held.
    pub(crate) fn is_alive(&self) -> bool {
        *self.alive.borrow()
    }

    /// Resolves once the lease is lost.
    pub(crate) async fn lost(&self) {
        let mut rx = self.alive.clone();
        // An error means the keep-alive task ended, which it only does when lost.
        let _ = rx.wait_for(|alive| !alive).await;
    }

    /// Stop refreshing without revoking (a crash, as far as etcd can tell).
    pub(crate) fn abandon(self) {
        self.task.abort();
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn keep_alive_loop(
    client: Client,
    id: i64,
    ttl: Duration,
    what: String,
    alive: watch::Sender<bool>,
) {
    // Refresh three times per TTL, so one lost round trip does not lose the lease.
    let every = (ttl / 3).max(Duration::from_millis(300));
    let mut last_ok = Instant::now();
    let mut stream = None;
    loop {
        tokio::time::sleep(every).await;
        if last_ok.elapsed() >= ttl {
            tracing::error!(lease = id, %what, "the lease was not refreshed for its whole TTL: what it held is lost");
            let _ = alive.send(false);
            return;
        }
        if stream.is_none() {
            match client.lease_keep_alive(id).await {
                Ok(s) => stream = Some(s),
                Err(e) => {
                    tracing::warn!(lease = id, %what, error = %e, "cannot refresh the lease; retrying");
                    continue;
                }
            }
        }
        let Some(keeper) = stream.as_mut() else {
            continue;
        };
        let answer = tokio::time::timeout(every, keeper.keep_alive()).await;
        match answer {
            Ok(Ok(ttl)) if ttl > 0 => {
                last_ok = Instant::now();
                tracing::trace!(lease = id, %what, ttl, "lease refreshed");
            }
            Ok(Ok(_)) => {
                tracing::error!(lease = id, %what, "the lease expired: what it held is lost");
                let _ = alive.send(false);
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(lease = id, %what, error = %e, "lease refresh failed; reconnecting");
                stream = None;
            }
            Err(_) => {
                tracing::warn!(lease = id, %what, "no answer to a lease refresh; reconnecting");
                stream = None;
            }
        }
    }
}

impl crate::EtcdStore {
    /// Grant a lease of `ttl` (at least 2 s) and keep it alive in the background until
    /// the returned [`KeepAlive`] is dropped; `granting` names the call in an error,
    /// `what` the lease in the keep-alive's logs.
    pub(crate) async fn kept_lease(
        &self,
        ttl: Duration,
        granting: &str,
        what: String,
    ) -> Result<KeepAlive, StoreError> {
        let secs = ttl.as_secs().max(2) as i64;
        let grant = self
            .call(
                || granting.to_string(),
                |c| async move { c.lease_grant(secs).await },
            )
            .await?;
        Ok(KeepAlive::spawn(
            self.inner.client.clone(),
            grant.id,
            ttl,
            what,
        ))
    }

    /// Give up something held under `keep`'s lease (a lock released, a leadership
    /// resigned): delete key `rel` while it is still under that lease, then revoke the
    /// lease. `what` names the call in an error. Nothing to do when `keep` is gone.
    pub(crate) async fn end_leased(
        &self,
        rel: &str,
        keep: Option<KeepAlive>,
        what: &str,
    ) -> Result<(), StoreError> {
        let Some(keep) = keep else {
            return Ok(());
        };
        let id = keep.id;
        drop(keep);
        let key = self.key(rel);
        let txn = TxnRequest::when(vec![Compare::lease(key.clone(), CompareOp::Equal, id)])
            .and_then(vec![DeleteRangeRequest::new(key).into()]);
        let r = self.txn(|| what.to_string(), txn).await;
        self.revoke(id).await;
        r.map(|_| ())
    }

    /// What a holder dropped without giving up does: stop the keep-alive and revoke
    /// the lease in the background when a runtime is there; otherwise the lease (and
    /// the key under it) expires after its TTL.
    pub(crate) fn revoke_in_background(&self, keep: Option<KeepAlive>) {
        let Some(keep) = keep else {
            return;
        };
        let id = keep.id;
        drop(keep);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let store = self.clone();
            rt.spawn(async move { store.revoke(id).await });
        }
    }

    /// One attempt to hold key `rel` under `lease` (the state lock, the leadership):
    /// put `value` there if the key is absent. `Ok(None)`: held now, or already by this
    /// very lease (a repeated call whose first answer was lost); `Ok(Some(kv))`: held
    /// by someone else, as `kv`. `what` names the call in an error.
    pub(crate) async fn try_hold(
        &self,
        rel: &str,
        value: &[u8],
        lease: i64,
        what: &str,
    ) -> Result<Option<KeyValue>, StoreError> {
        let key = self.key(rel);
        let txn = TxnRequest::when(vec![Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then(vec![PutRequest::new(key.clone(), value.to_vec())
                .lease(lease)
                .into()])
            .or_else(vec![RangeRequest::new(key).into()]);
        let resp = self.txn(|| what.to_string(), txn).await?;
        if resp.succeeded {
            return Ok(None);
        }
        let current = resp.ranges().find_map(|g| g.kvs.first()).cloned();
        Ok(current.filter(|kv| kv.lease != lease))
    }
}

/// `StoreError::Locked` naming the holder that `current` records (a lock record, a
/// leader's record), or `nobody` when it names none.
pub(crate) fn held_by(current: Option<&KeyValue>, nobody: &str, waited: Duration) -> StoreError {
    let info = current.and_then(|kv| serde_json::from_slice::<crate::EtcdLockInfo>(&kv.value).ok());
    StoreError::Locked {
        holder: info
            .as_ref()
            .map_or_else(|| nobody.to_string(), |i| i.to_string()),
        since: info.map_or_else(|| "unknown".to_string(), |i| i.since),
        waited_seconds: waited.as_secs(),
    }
}
