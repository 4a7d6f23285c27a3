//! The file store read through the engine's own `FileStore` (for the end-to-end tests
//! and the gpushare crate's tests, which run the binary and look at what it stored).

use std::path::Path;

/// The host reports the file store in `store` holds, read through the store itself
/// (`FileStore::reports`: finished reports only; an agent writing its report leaves a
/// complete temporary file beside the old one until the rename, and reading that too
/// counted the host's tasks twice, a rare failure of tests/agents_e2e.rs).
pub fn file_store_reports(store: &Path) -> Vec<gpushare_core::model::HostReport> {
    use gpushare_engine::store::Store as _;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the store");
    let s = gpushare_engine::store::FileStore::open(store).expect("open the file store");
    runtime
        .block_on(s.reports())
        .expect("read the host reports")
}

/// The state the file store in `store` holds, as JSON, read through the store itself
/// (`state.json` is a snapshot; the commits since are in `state.log`). `None` when
/// nothing was ever committed.
pub fn file_store_state(store: &Path) -> Option<serde_json::Value> {
    use gpushare_engine::store::Store as _;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the store");
    let s = gpushare_engine::store::FileStore::open(store).expect("open the file store");
    let state = runtime.block_on(s.load()).expect("load the state");
    (state.serial > 0).then(|| serde_json::to_value(&state).expect("state as JSON"))
}

/// The file store's state files as stored (`state.json`, then `state.log` when there
/// is one): unchanged exactly when nothing was committed.
pub fn file_store_files(store: &Path) -> Vec<u8> {
    let mut out = std::fs::read(store.join("state.json")).expect("state.json");
    if let Ok(log) = std::fs::read(store.join("state.log")) {
        out.extend_from_slice(&log);
    }
    out
}
