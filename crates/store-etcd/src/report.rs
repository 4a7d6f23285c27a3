//! Agents' reports (`report/<host id>`, each under its own lease: writing it or
//! refreshing the lease is the agent's heartbeat, and a silent agent's report expires)
//! and the last reconcile pass's status record (`status`).

use crate::client::{DeleteRangeRequest, PutRequest};
use crate::error::is_lease_not_found;
use crate::keys::{REPORTS, STATUS};
use crate::EtcdStore;
use gpushare_core::model::HostReport;
use gpushare_core::util::lock;
use gpushare_engine::store::{StatusRecord, StoreError};

/// How many report writes `put_leased_reports` keeps in flight at once.
const REPORT_WRITES_IN_FLIGHT: usize = 64;

impl EtcdStore {
    pub(crate) fn report_rel(host_id: &str) -> Result<String, StoreError> {
        if !gpushare_core::ids::valid_id(host_id) {
            return Err(StoreError::InvalidKey {
                what: "host id",
                key: host_id.to_string(),
            });
        }
        Ok(format!("{REPORTS}{host_id}"))
    }

    async fn report_lease(&self, host_id: &str, fresh: bool) -> Result<i64, StoreError> {
        if !fresh {
            if let Some(id) = lock(&self.inner.report_leases).get(host_id) {
                return Ok(*id);
            }
        }
        let ttl = self.inner.opts.report_ttl.as_secs().max(2) as i64;
        let g = self
            .call(
                || format!("granting {host_id}'s report lease"),
                |c| async move { c.lease_grant(ttl).await },
            )
            .await?;
        lock(&self.inner.report_leases).insert(host_id.to_string(), g.id);
        Ok(g.id)
    }

    /// Heartbeat: refresh the lease of `host_id`'s report (written by this handle's
    /// `put_report`), so it does not expire. `Ok(false)` when there is no live report
    /// lease (never written here, or expired): write the report again.
    pub async fn keep_report_alive(&self, host_id: &str) -> Result<bool, StoreError> {
        let Some(id) = lock(&self.inner.report_leases).get(host_id).copied() else {
            return Ok(false);
        };
        let refreshed = self
            .call(
                || format!("refreshing {host_id}'s report lease"),
                |c| async move { c.lease_keep_alive(id).await?.keep_alive().await },
            )
            .await;
        let ttl = match refreshed {
            Ok(ttl) => ttl,
            // Expired (and reported as an error rather than a zero TTL).
            Err(e) if is_lease_not_found(&e) => 0,
            Err(e) => return Err(e),
        };
        if ttl <= 0 {
            lock(&self.inner.report_leases).remove(host_id);
        }
        Ok(ttl > 0)
    }

    /// [`Store::put_report`](gpushare_engine::store::Store::put_report): write the report under the
    /// host's lease (a new lease if it expired) and refresh it.
    pub(crate) async fn put_leased_report(&self, report: &HostReport) -> Result<(), StoreError> {
        let rel = Self::report_rel(&report.host_id)?;
        let bytes = serde_json::to_vec(report).map_err(|e| self.corrupt(&rel, e))?;
        let key = self.key(&rel);
        let mut fresh = false;
        loop {
            let lease = self.report_lease(&report.host_id, fresh).await?;
            let r = self
                .call(
                    || format!("writing {rel}"),
                    |c| {
                        let req = PutRequest::new(key.clone(), bytes.clone()).lease(lease);
                        async move { c.put(req).await }
                    },
                )
                .await;
            match r {
                Ok(_) => break,
                // The lease expired (the agent was away longer than its TTL): a new one.
                Err(e) if !fresh && is_lease_not_found(&e) => fresh = true,
                Err(e) => return Err(e),
            }
        }
        // Writing is a heartbeat too: restart the lease's TTL.
        self.keep_report_alive(&report.host_id).await?;
        Ok(())
    }

    /// [`Store::put_reports`](gpushare_engine::store::Store::put_reports): the
    /// reports written [`REPORT_WRITES_IN_FLIGHT`] at a time (etcd commits the
    /// writes in flight together), instead of one round trip after another.
    pub(crate) async fn put_leased_reports(
        &self,
        reports: &[HostReport],
    ) -> Result<(), StoreError> {
        for chunk in reports.chunks(REPORT_WRITES_IN_FLIGHT) {
            let mut writes = Vec::with_capacity(chunk.len());
            for r in chunk {
                writes.push(self.put_leased_report(r));
            }
            futures_util::future::try_join_all(writes).await?;
        }
        Ok(())
    }

    /// [`Store::reports`](gpushare_engine::store::Store::reports).
    pub(crate) async fn get_reports(&self) -> Result<Vec<HostReport>, StoreError> {
        let (_, kvs) = self.range(REPORTS, 0).await?;
        let mut out = Vec::with_capacity(kvs.len());
        for kv in kvs {
            let rel = String::from_utf8_lossy(&kv.key).into_owned();
            let rel = rel
                .strip_prefix(&format!("{}/", self.inner.url.prefix))
                .unwrap_or(&rel)
                .to_string();
            let host = rel.strip_prefix(REPORTS).unwrap_or(&rel);
            let r = HostReport::from_stored(host, &kv.value);
            if let Some(why) = &r.unreadable {
                tracing::warn!(key = %rel, "report not taken: {why}");
            }
            out.push(r);
        }
        Ok(out)
    }

    /// [`Store::delete_report`](gpushare_engine::store::Store::delete_report): delete the report
    /// and revoke its lease.
    pub(crate) async fn delete_leased_report(&self, host_id: &str) -> Result<(), StoreError> {
        let rel = Self::report_rel(host_id)?;
        let key = self.key(&rel);
        self.call(
            || format!("deleting {rel}"),
            |c| {
                let req = DeleteRangeRequest::new(key.clone());
                async move { c.delete(req).await }
            },
        )
        .await?;
        let lease = lock(&self.inner.report_leases).remove(host_id);
        if let Some(id) = lease {
            self.revoke(id).await;
        }
        Ok(())
    }

    /// [`Store::put_status`](gpushare_engine::store::Store::put_status).
    pub(crate) async fn put_status_record(&self, status: &StatusRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(status).map_err(|e| self.corrupt(STATUS, e))?;
        let key = self.key(STATUS);
        self.call(
            || format!("writing {STATUS}"),
            |c| {
                let req = PutRequest::new(key.clone(), bytes.clone());
                async move { c.put(req).await }
            },
        )
        .await?;
        Ok(())
    }

    /// [`Store::status`](gpushare_engine::store::Store::status).
    pub(crate) async fn get_status_record(&self) -> Result<Option<StatusRecord>, StoreError> {
        match self.get_one(STATUS).await? {
            None => Ok(None),
            Some(kv) => serde_json::from_slice(&kv.value)
                .map(Some)
                .map_err(|e| self.corrupt(STATUS, e)),
        }
    }
}
