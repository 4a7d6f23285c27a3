//! The planner fixtures now live in gpushare-testkit (`gpushare_testkit::plan`). This
//! file stays only for crates/cli/benches/console.rs, which includes it by `#[path]`
//! until the console moves into its own crate (issue 53); then it goes.

pub use gpushare_testkit::plan::{empty_live, live_after, mps_td, plan_ok, pool, service, settle};
