//! Keeping an etcd lease alive from a background task while something is held.

use etcd_client::Client;
use std::time::Duration;

/// Keeps lease `id` alive until dropped (or until the lease is found expired).
/// Dropping it stops the keep-alive; the lease then expires after its TTL unless
/// revoked.
#[derive(Debug)]
pub(crate) struct KeepAlive {
    pub(crate) id: i64,
    task: tokio::task::JoinHandle<()>,
}

impl KeepAlive {
    pub(crate) fn spawn(client: Client, id: i64, ttl: Duration, what: String) -> KeepAlive {
        let task = tokio::spawn(keep_alive_loop(client, id, ttl, what));
        KeepAlive { id, task }
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

async fn keep_alive_loop(mut client: Client, id: i64, ttl: Duration, what: String) {
    // Refresh three times per TTL, so one lost round trip does not lose the lease.
    let every = (ttl / 3).max(Duration::from_millis(300));
    let mut stream = None;
    loop {
        tokio::time::sleep(every).await;
        if stream.is_none() {
            match client.lease_keep_alive(id).await {
                Ok(s) => stream = Some(s),
                Err(e) => {
                    tracing::warn!(lease = id, %what, error = %e, "cannot refresh the lease; retrying");
                    continue;
                }
            }
        }
        let Some((keeper, responses)) = stream.as_mut() else {
            continue;
        };
        let sent = keeper.keep_alive().await;
        let answer = match sent {
            Ok(()) => tokio::time::timeout(every, responses.message()).await,
            Err(e) => {
                tracing::warn!(lease = id, %what, error = %e, "lease refresh failed; reconnecting");
                stream = None;
                continue;
            }
        };
        match answer {
            Ok(Ok(Some(r))) if r.ttl() > 0 => {
                tracing::trace!(lease = id, %what, ttl = r.ttl(), "lease refreshed");
            }
            Ok(Ok(Some(_))) => {
                tracing::error!(lease = id, %what, "the lease expired: what it held is lost");
                return;
            }
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                tracing::warn!(lease = id, %what, "no answer to a lease refresh; reconnecting");
                stream = None;
            }
        }
    }
}
