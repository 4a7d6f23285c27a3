//! Where an agent reads its host's assignment and writes its report: the store
//! itself (`gpushare agent --store`, the local fleet's in-process agents), or the
//! controller's agent API (`gpushare agent --server`, gpushare-agent-api), which
//! sends the host only its own view.

use async_trait::async_trait;
use gpushare_core::model::{HostReport, StoreState};
use gpushare_engine::store::{Store, StoreError};
use std::sync::Arc;

#[async_trait]
pub trait Link: Send + Sync {
    /// Where it reads and writes, for messages.
    fn location(&self) -> String;
    /// The state holding at least this host, its tasks and their revisions.
    async fn assignment(&self) -> Result<Arc<StoreState>, StoreError>;
    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError>;
}

/// The store as a link: the whole state, read as it is kept.
pub struct StoreLink(pub Arc<dyn Store>);

#[async_trait]
impl Link for StoreLink {
    fn location(&self) -> String {
        self.0.location()
    }
    async fn assignment(&self) -> Result<Arc<StoreState>, StoreError> {
        self.0.load_shared().await
    }
    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError> {
        self.0.put_report(report).await
    }
}

/// One host's share of a state read once for many agents (the local fleet's round:
/// [`StoreState::host_shares`]), with reports written to the store.
pub struct ShareLink {
    pub share: Arc<StoreState>,
    pub store: Arc<dyn Store>,
}

#[async_trait]
impl Link for ShareLink {
    fn location(&self) -> String {
        self.store.location()
    }
    async fn assignment(&self) -> Result<Arc<StoreState>, StoreError> {
        Ok(Arc::clone(&self.share))
    }
    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError> {
        self.store.put_report(report).await
    }
}
