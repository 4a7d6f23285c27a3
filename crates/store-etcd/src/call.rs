//! Calling etcd: keys under the store's prefix, one call bounded by the request
//! timeout (retried on transient errors, re-authenticated once), transactions,
//! single-key and paged range reads, revoking a lease, and the tally of what was
//! written ([`WriteStats`](crate::WriteStats)).

use crate::client::{
    prefix_end, Client, ClientError, KeyValue, RangeRequest, TxnRequest, TxnResponse,
};
use crate::error::{classify, is_transient, TimedOut};
use crate::keys::page_limit;
use crate::EtcdStore;
use gpushare_core::util::{backoff_delays, lock};
use gpushare_engine::store::StoreError;
use std::future::Future;
use std::time::Duration;

impl EtcdStore {
    pub(crate) fn tally(&self, puts: usize, deletes: usize, bytes: usize) {
        let mut s = lock(&self.inner.stats);
        s.txns += 1;
        s.puts += puts as u64;
        s.deletes += deletes as u64;
        s.bytes += bytes as u64;
    }

    /// Puts, deletes and bytes of writing `changes` under `under`.
    pub(crate) fn measure(
        &self,
        under: &str,
        changes: &[(&str, Option<&[u8]>)],
    ) -> (usize, usize, usize) {
        let klen = self.inner.url.prefix.len() + 1 + under.len();
        changes
            .iter()
            .fold((0, 0, 0), |(p, d, b), (rel, v)| match v {
                Some(v) => (p + 1, d, b + klen + rel.len() + v.len()),
                None => (p, d + 1, b),
            })
    }

    pub(crate) fn key(&self, rel: &str) -> String {
        format!("{}/{}", self.inner.url.prefix, rel)
    }

    pub(crate) fn rel<'a>(&self, key: &'a [u8], under: &str) -> Option<&'a str> {
        let k = std::str::from_utf8(key).ok()?;
        k.strip_prefix(self.inner.url.prefix.as_str())?
            .strip_prefix('/')?
            .strip_prefix(under)
    }

    /// Run one etcd call, bounded by the request timeout, repeated on transient
    /// errors (the client itself authenticates again when a token expired).
    pub(crate) async fn call<T, F, Fut>(
        &self,
        what: impl Fn() -> String,
        f: F,
    ) -> Result<T, StoreError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let limit = self.inner.opts.request_timeout;
        let deadline = tokio::time::Instant::now() + limit;
        // 50 ms, doubling up to 500 ms, while the next wait still ends before the deadline.
        let mut waits =
            backoff_delays(Duration::from_millis(50), Duration::from_millis(500)).peekable();
        loop {
            match tokio::time::timeout_at(deadline, f(self.inner.client.clone())).await {
                Ok(Ok(v)) => return Ok(v),
                // A member went away or the cluster is electing a leader: try again (on
                // another member) until the deadline. Every call is safe to repeat: the
                // writes are guarded, and a guarded write that landed before its answer
                // was lost is recognised by its caller.
                Ok(Err(e))
                    if is_transient(&e)
                        && waits
                            .peek()
                            .is_some_and(|w| tokio::time::Instant::now() + *w < deadline) =>
                {
                    tracing::debug!(what = %what(), error = %e, "etcd call failed; retrying");
                    if let Some(wait) = waits.next() {
                        tokio::time::sleep(wait).await;
                    }
                }
                Ok(Err(e)) => return Err(classify(&self.inner.location, what(), e)),
                Err(_) => {
                    return Err(self.unreachable(
                        what(),
                        TimedOut {
                            seconds: limit.as_secs_f64(),
                        },
                    ))
                }
            }
        }
    }

    pub(crate) async fn txn(
        &self,
        what: impl Fn() -> String,
        txn: TxnRequest,
    ) -> Result<TxnResponse, StoreError> {
        self.call(what, |c| {
            let t = txn.clone();
            async move { c.txn(t).await }
        })
        .await
    }

    pub(crate) async fn get_one(&self, rel: &str) -> Result<Option<KeyValue>, StoreError> {
        let key = self.key(rel);
        self.call(
            || format!("reading {rel}"),
            |c| {
                let k = key.clone();
                async move { c.get(k).await }
            },
        )
        .await
    }

    /// Every key under `rel_prefix`, read in pages at one revision (`revision` 0: the
    /// latest). Returns the revision read at.
    pub(crate) async fn range(
        &self,
        rel_prefix: &str,
        revision: i64,
    ) -> Result<(i64, Vec<KeyValue>), StoreError> {
        let prefix = self.key(rel_prefix);
        let end = prefix_end(prefix.as_bytes());
        let mut start = prefix.into_bytes();
        let mut rev = revision;
        let mut out = Vec::new();
        let mut bytes = 0usize;
        loop {
            let req = RangeRequest::new(start.clone())
                .until(end.clone())
                .limit(page_limit(out.len(), bytes))
                .at(rev);
            let resp = self
                .call(
                    || format!("reading {rel_prefix}"),
                    |c| {
                        let r = req.clone();
                        async move { c.range(r).await }
                    },
                )
                .await?;
            if rev == 0 {
                rev = resp.revision();
            }
            if let Some(last) = resp.kvs.last() {
                start = last.key.clone();
                start.push(0);
            }
            bytes += resp
                .kvs
                .iter()
                .map(|kv| kv.key.len() + kv.value.len())
                .sum::<usize>();
            out.extend(resp.kvs);
            if !resp.more {
                return Ok((rev, out));
            }
        }
    }

    /// End a lease now (best effort, bounded): what it holds goes at once instead of
    /// after its TTL.
    pub(crate) async fn revoke(&self, id: i64) {
        let c = &self.inner.client;
        let limit = self.inner.opts.request_timeout.min(Duration::from_secs(5));
        if let Ok(Err(e)) = tokio::time::timeout(limit, c.lease_revoke(id)).await {
            tracing::debug!(lease = id, error = %e, "could not revoke a lease; it expires with its TTL");
        }
    }
}
