//! Helpers shared by the engine's integration tests.

use gpushare_core::model::{Live, MpsHealth, TaskState};

/// Every task reported running and every host's MPS daemon healthy.
pub fn assert_all_running_and_healthy(live: &Live) {
    for t in live.state.tasks.values() {
        assert_eq!(t.state, TaskState::Running, "task {}", t.id);
    }
    for h in live.state.hosts.values() {
        assert_eq!(h.mps_health, MpsHealth::Healthy, "host {}", h.id);
    }
}

/// One round of the local fleet's in-process agents (the host agent's own loop, as
/// the backends factory wires it for `gpushare plan` and `apply`) at `now`.
pub async fn agents_round(
    store: &gpushare_engine::store::FileStore,
    cloud: &gpushare_engine::cloud::LocalCloud,
    now: u64,
) -> Vec<String> {
    let store: std::sync::Arc<dyn gpushare_engine::store::Store> =
        std::sync::Arc::new(store.clone());
    gpushare_agent::SimFleet::new(std::sync::Arc::new(cloud.clone()))
        .run_round(&store, now)
        .await
        .expect("the simulated hosts' agents ran")
}
