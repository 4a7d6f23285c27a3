//! The tokens of launched hosts ([`StoreIssuer`]): apply mints one per launch, bound to
//! the new host id, single-use, for the host's user data (engine's
//! [`JoinIssuer`](gpushare_engine::join::JoinIssuer)).

use crate::pki::ClusterCa;
use crate::tokens::{self, TokenScope};
use async_trait::async_trait;
use gpushare_engine::join::{JoinError, JoinIssuer};
use gpushare_engine::store::Store;
use std::time::Duration;

/// Mints join tokens in the store the controller serves: the cluster CA (made on first
/// use) and the tokens' book are the same records `gpushare token create` uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreIssuer;

#[async_trait]
impl JoinIssuer for StoreIssuer {
    async fn issue(
        &self,
        store: &dyn Store,
        cluster: &str,
        host_id: &str,
        _pool: &str,
        ttl: Duration,
        now: u64,
    ) -> Result<(String, String), JoinError> {
        let fail = |source: Box<dyn std::error::Error + Send + Sync>| JoinError {
            host_id: host_id.to_string(),
            source,
        };
        let ca = ClusterCa::load_or_create(store, cluster)
            .await
            .map_err(|e| fail(Box::new(e)))?;
        // Bound to the host id alone: the host is recorded in the fleet only after its
        // launch, and the id already fixes its pool.
        let scope = TokenScope {
            pool: None,
            host_id: Some(host_id.to_string()),
            ttl,
            uses: 1,
        };
        let (token, info) = tokens::create(store, &scope, now)
            .await
            .map_err(|e| fail(Box::new(e)))?;
        tracing::info!(host = %host_id, token_id = %info.id, expires_at = info.expires_at, "minted the launched host's join token");
        Ok((token, ca.hash()))
    }
}
