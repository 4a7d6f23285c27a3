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
