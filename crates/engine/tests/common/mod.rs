//! Helpers shared by the engine's integration tests (those of the store conformance
//! suite, on a file store).

pub use gpushare_testkit_engine::conformance::assert_all_running_and_healthy;

/// One round of the local fleet's in-process agents (the host agent's own loop, as
/// the backends factory wires it for `gpushare plan` and `apply`) at `now`.
pub async fn agents_round(
    store: &gpushare_engine::store::FileStore,
    cloud: &gpushare_engine::cloud::LocalCloud,
    now: u64,
) -> Vec<String> {
    let store: std::sync::Arc<dyn gpushare_engine::store::Store> =
        std::sync::Arc::new(store.clone());
    gpushare_testkit_engine::conformance::agents_round(&store, cloud, now).await
}
