//! A crash in the middle of `apply` (the engine's abort failpoint, and a real
//! `kill -9`): the next `apply` finishes the job with no duplicate hosts or tasks,
//! counted both in `show --json` and in the local cloud's own fleet file. Every case
//! runs against the file store and against a real etcd (the same test code).

use gpushare_tests::{
    arr, assert_distinct, example, gp, live_fleet_instances, plan_json, show_json, test_stores,
    TestStore,
};
use std::io::BufRead;
use std::path::Path;

/// 1-based position of the first launch step in `plan.steps()` (registrations, then
/// resource writes, then launches).
fn first_launch_step(dir: &Path) -> usize {
    let p = plan_json(dir, &[]);
    assert!(
        !arr(&p, "launches").is_empty(),
        "the plan launches nothing: {p:#}"
    );
    arr(&p, "registrations").len() + arr(&p, "resource_changes").len() + 1
}

/// After recovery: every host exactly once, in the state and in the cloud; every task once.
fn assert_converged_without_duplicates(dir: &Path) {
    let show = show_json(dir);
    let hosts = arr(&show, "hosts");
    let host_ids: Vec<String> = hosts
        .iter()
        .map(|h| h["id"].as_str().expect("id").to_string())
        .collect();
    assert_distinct("host ids", &host_ids);
    let fleet = live_fleet_instances(dir);
    assert_eq!(
        fleet.len(),
        hosts.len(),
        "cloud instances {fleet:#?} vs state hosts {host_ids:?}"
    );
    let fleet_hosts: Vec<String> = fleet
        .iter()
        .map(|i| i["host_id"].as_str().expect("host_id").to_string())
        .collect();
    assert_distinct("instances per host id", &fleet_hosts);
    let tasks = arr(&show, "tasks");
    assert_eq!(tasks.len(), 12, "{show:#}");
    let task_ids: Vec<String> = tasks
        .iter()
        .map(|t| t["id"].as_str().expect("id").to_string())
        .collect();
    assert_distinct("task ids", &task_ids);
    assert!(tasks.iter().all(|t| t["state"] == "running"), "{show:#}");
    gp(dir, &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);
}

fn crash_at(store: &TestStore, failpoint: &str, n: usize) {
    let d = example("quickstart");
    store.use_in(d.path(), &format!("crash-{n}"));
    let r = gp(d.path(), &["apply", "--auto-approve"])
        .env("GPUSHARE_FAILPOINT", failpoint)
        .run();
    let s = store.name();
    assert_ne!(
        r.code, 0,
        "{s} {failpoint}: apply did not crash:\n{}{}",
        r.stdout, r.stderr
    );
    let again = gp(d.path(), &["apply", "--auto-approve"]).run();
    again.expect_code(0);
    // The crashed apply left its journal in the store: the next one finished it first.
    assert!(
        again.stderr.contains("Resuming an interrupted apply"),
        "{s} {failpoint}: no journal was left behind:\n{}",
        again.stderr
    );
    assert_converged_without_duplicates(d.path());
}

#[test]
fn abort_after_a_step_is_finished_by_the_next_apply() {
    let d = example("quickstart");
    let launch = first_launch_step(d.path());
    let mut n = 0;
    for store in test_stores() {
        for fp in [
            format!("after-step:{launch}"),
            format!("before-commit:{launch}"),
            format!("after-commit:{}", launch + 2),
            "after-step:2".to_string(),
        ] {
            n += 1;
            crash_at(&store, &fp, n);
        }
    }
}

#[test]
fn kill_9_in_the_middle_of_apply() {
    for store in test_stores() {
        kill_9_against(&store);
    }
}

fn kill_9_against(store: &TestStore) {
    let d = example("quickstart");
    store.use_in(d.path(), "kill-9");
    let launch = first_launch_step(d.path());
    let mut child = gp(d.path(), &["apply", "--auto-approve"])
        .env("GPUSHARE_TEST_STEP_DELAY_MS", "100")
        .spawn();
    let stderr = child.stderr.take().expect("stderr");
    // Wait until the first host is launched and a task more, then kill -9.
    let target = format!("[{}/", launch + 1);
    let mut seen = Vec::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.expect("stderr line");
        let hit = line.starts_with(&target);
        seen.push(line);
        if hit {
            break;
        }
    }
    let killed = std::process::Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = child.wait().expect("wait");
    assert!(
        !status.success(),
        "apply finished before it was killed:\n{}",
        seen.join("\n")
    );
    let again = gp(d.path(), &["apply", "--auto-approve"]).run();
    again.expect_code(0);
    assert!(
        again.stderr.contains("Resuming an interrupted apply"),
        "{}: no journal after kill -9:\n{}\n{}",
        store.name(),
        seen.join("\n"),
        again.stderr
    );
    assert_converged_without_duplicates(d.path());
}
