//! The store's identity (`<prefix>/store-id`, see `StoreState::store_id`): made once
//! with create-if-absent when a store is first opened, or taken over from another
//! store by `state push` (`Store::adopt_identity`).

use crate::client::{Compare, CompareOp, PutRequest, RangeRequest, TxnRequest};
use crate::error::classify;
use crate::keys::STORE_ID;
use crate::EtcdStore;
use gpushare_core::util::lock;
use gpushare_engine::store::StoreError;

impl EtcdStore {
    /// The store's identity: read, or created once with a create-if-absent transaction
    /// (so concurrent first opens agree). Credentials that may neither read nor create
    /// it (an agent's, under the documented roles) get an empty id: agents never
    /// launch or terminate, which is all the id guards.
    pub(crate) async fn ensure_store_id(&self) -> Result<String, StoreError> {
        let key = self.key(STORE_ID);
        let fresh = gpushare_engine::store::new_store_id();
        let txn = TxnRequest::when(vec![Compare::create_revision(
            key.clone(),
            CompareOp::Equal,
            0,
        )])
        .and_then(vec![PutRequest::new(key.clone(), fresh.clone()).into()])
        .or_else(vec![RangeRequest::new(key.clone()).into()]);
        let resp = match self.inner.client.txn(txn).await {
            Ok(r) => r,
            Err(e) => {
                return match classify(&self.inner.location, "creating the store id".into(), e) {
                    StoreError::Io { source, .. }
                        if source.kind() == std::io::ErrorKind::PermissionDenied =>
                    {
                        tracing::debug!(store = %self.inner.location, "these credentials may not read the store id");
                        Ok(String::new())
                    }
                    other => Err(other),
                }
            }
        };
        if resp.succeeded {
            tracing::info!(store = %self.inner.location, store_id = %fresh, "created the store's identity");
            return Ok(fresh);
        }
        let found = resp
            .ranges()
            .find_map(|g| g.kvs.first())
            .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
            .unwrap_or_default();
        if !gpushare_engine::store::valid_store_id(&found) {
            return Err(StoreError::InvalidStoreId {
                path: format!("{} ({key})", self.inner.location),
                found,
            });
        }
        Ok(found)
    }

    /// This store's identity (empty for credentials that may not read it).
    pub fn store_id(&self) -> String {
        lock(&self.inner.store_id).clone()
    }

    /// [`Store::adopt_identity`](gpushare_engine::store::Store::adopt_identity): write `id` as this
    /// store's identity (after checking it is one).
    pub(crate) async fn put_store_id(&self, id: &str) -> Result<(), StoreError> {
        let key = self.key(STORE_ID);
        if !gpushare_engine::store::valid_store_id(id) {
            return Err(StoreError::InvalidStoreId {
                path: format!("{} ({key})", self.inner.location),
                found: id.chars().take(80).collect(),
            });
        }
        self.call(
            || "writing the store id".to_string(),
            |c| {
                let req = PutRequest::new(key.clone(), id);
                async move { c.put(req).await }
            },
        )
        .await?;
        tracing::info!(store = %self.inner.location, store_id = %id, "the store took over another store's identity");
        *lock(&self.inner.store_id) = id.to_string();
        Ok(())
    }
}
