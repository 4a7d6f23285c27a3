//! How the controller gets a reconciler for a configuration's settings: the caller
//! decides (its planner overrides, test hooks, the agent API it serves beside it).

use crate::error::BoxError;
use gpushare_core::model::Desired;
use gpushare_engine::reconcile::Reconciler;
use std::path::Path;

/// Opens the engine's [`Reconciler`] for a configuration. Called at the first pass and
/// again only when the configuration's settings change.
#[async_trait::async_trait]
pub trait OpenReconciler: Send + Sync {
    /// The reconciler for `desired`'s settings; relative store paths are taken from
    /// `base` (the controller's directory: with a git source the checkout changes
    /// every commit, the state stays).
    async fn open(&self, desired: &Desired, base: &Path) -> Result<Reconciler, BoxError>;
}

/// The backends the settings name (`gpushare_backends::open`), with no planner
/// overrides or hooks.
pub struct OpenBackends {
    /// Who holds the state lock while a pass applies.
    pub holder: String,
}

#[async_trait::async_trait]
impl OpenReconciler for OpenBackends {
    async fn open(&self, desired: &Desired, base: &Path) -> Result<Reconciler, BoxError> {
        let backends = gpushare_backends::open(&desired.settings, base).await?;
        Ok(Reconciler::new(backends, self.holder.clone()))
    }
}
