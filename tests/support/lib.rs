//! The end-to-end tests' support: gpushare-testkit's (the binary as a process, a real
//! etcd, the Docker lab), re-exported so the tests name it as before, and the file
//! store read through the engine (`file_store`), which the testkit may not depend on.
//! No crate depends on this one (tests/architecture.rs, rule 3).

pub use gpushare_testkit::{
    agents, applied, arr, assert_distinct, docker_hosts, etcd, example, example_names, gp,
    gpushare_bin, kill_task_processes, live_fleet_instances, local_agent, plan_json,
    process_runtime_records, replace_config, show_json, snapshot, task_copies, test_stores,
    workspace_root, EtcdProcess, Gp, Run, TestStore,
};
pub use gpushare_testkit_engine::file_store::{
    file_store_files, file_store_reports, file_store_state,
};
