//! The in-process agents of a simulated fleet ([`HostAgents`]): what apply's moves
//! and the reconciler run between steps and passes. Below both, so neither imports
//! the other for it.

use crate::store::Store;
use std::sync::Arc;

/// The agents of a simulated fleet, run in-process: each round, the agent of every
/// simulated host runs one pass (the host agent's own code, with a simulated runtime
/// and stand-in GPUs and MPS daemon) and writes its host's report. Implemented by the
/// agent crate (`gpushare_agent::SimFleet`), which depends on this one.
#[async_trait::async_trait]
pub trait HostAgents: Send + Sync {
    /// One round at `now` (seconds since the Unix epoch); returns the hosts that reported.
    async fn round(
        &self,
        store: &Arc<dyn Store>,
        now: u64,
    ) -> Result<Vec<String>, Box<dyn std::error::Error + Send + Sync>>;
}
