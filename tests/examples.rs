//! Every example under examples/ applies cleanly on the local default, converges
//! (a second plan is empty) and shows the packing its comments promise.

use gpushare_tests::{applied, arr, example, example_names, gp, show_json};

/// Tasks each example asks for (the sum of its services' desired_count).
fn expected_tasks(name: &str) -> Option<usize> {
    match name {
        "quickstart" => Some(6 + 4 + 2),
        "spread" => Some(3 + 2),
        "mixed" => Some(1 + 5 + 3),
        // Two service tasks; the job's 20 runs ended (a simulated run succeeds on
        // the agents' round after the one that started it).
        "sweep" => Some(2),
        _ => None,
    }
}

#[test]
fn every_example_applies_and_converges() {
    let names = example_names();
    assert!(names.len() >= 3, "examples: {names:?}");
    for name in names {
        let d = example(&name);
        let r = gp(d.path(), &["apply", "--auto-approve"]).run();
        r.expect_code(0);
        assert!(r.stdout.contains("Apply complete!"), "{name}: {}", r.stdout);
        converge(d.path(), &name);
        let show = show_json(d.path());
        let tasks = arr(&show, "tasks");
        let want = expected_tasks(&name)
            .unwrap_or_else(|| panic!("add examples/{name} to expected_tasks"));
        assert_eq!(tasks.len(), want, "{name}: {show:#}");
        assert!(
            tasks.iter().all(|t| t["state"] == "running"),
            "{name}: not all running: {show:#}"
        );
    }
}

/// Apply again until a plan is empty: at once for services; a job's runs end and
/// the next ones start, pass after pass, until the job is done.
fn converge(dir: &std::path::Path, name: &str) {
    for _ in 0..30 {
        let r = gp(dir, &["plan", "--detailed-exitcode"]).run();
        if r.code == 0 {
            return;
        }
        r.expect_code(2);
        assert!(name == "sweep", "{name} does not converge: {}", r.stdout);
        gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    }
    panic!("{name} did not converge in 30 applies");
}

/// The local fleet's in-process agents end a job's runs (exit 0), so the sweep
/// example, applied on the embedded default, completes: 20 indexes succeeded, each
/// with one attempt, and the pool shrinks back to the service's host.
#[test]
fn the_sweep_example_completes_on_the_local_fleet() {
    let d = example("sweep");
    gp(d.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    converge(d.path(), "sweep");
    let st = gp(d.path(), &["job", "status", "sweep"]).run();
    st.expect_code(0);
    assert!(
        st.stdout.starts_with(
            "job.sweep: SUCCEEDED, 20/20 succeeded, 0 running, 0 pending, 0 failed (0 failed attempt(s))"
        ),
        "{}",
        st.stdout
    );
    let show = show_json(d.path());
    let job = &arr(&show, "jobs")[0];
    for i in arr(job, "indexes") {
        let attempts = arr(i, "attempts");
        assert_eq!(attempts.len(), 1, "{i:#}");
        assert_eq!(attempts[0]["exit_code"], 0, "{i:#}");
    }
    let up = arr(&show, "hosts")
        .iter()
        .filter(|h| h["state"] != "terminated")
        .count();
    assert_eq!(up, 1, "{show:#}");
}

#[test]
fn quickstart_packs_many_tasks_per_gpu() {
    let d = applied("quickstart");
    let show = show_json(d.path());
    let gpus_used: usize = arr(&show, "hosts")
        .iter()
        .flat_map(|h| arr(h, "gpus").iter())
        .filter(|g| !arr(g, "tasks").is_empty())
        .count();
    let tasks = arr(&show, "tasks").len();
    assert!(
        gpus_used * 2 <= tasks,
        "{tasks} tasks on {gpus_used} GPUs is not sharing: {show:#}"
    );
}

#[test]
fn spread_puts_each_detector_on_its_own_host() {
    let d = applied("spread");
    let show = show_json(d.path());
    let mut hosts: Vec<String> = arr(&show, "tasks")
        .iter()
        .filter(|t| t["service"] == "detector")
        .map(|t| t["host"].as_str().expect("host").to_string())
        .collect();
    assert_eq!(hosts.len(), 3);
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 3, "detectors share a host: {show:#}");
}

#[test]
fn mixed_keeps_dedicated_gpus_to_one_task() {
    let d = applied("mixed");
    let show = show_json(d.path());
    let mut dedicated = 0;
    for h in arr(&show, "hosts") {
        for g in arr(h, "gpus") {
            if g["mode"] == "dedicated" {
                dedicated += 1;
                assert_eq!(
                    arr(g, "tasks").len(),
                    1,
                    "a dedicated GPU with several tasks: {g:#}"
                );
            }
        }
    }
    assert_eq!(
        dedicated, 2,
        "the finetune task has two whole GPUs: {show:#}"
    );
}
