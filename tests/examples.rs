//! Every example under examples/ applies cleanly on the local default, converges
//! (a second plan is empty) and shows the packing its comments promise.

use gpushare_tests::{applied, arr, example, example_names, gp, show_json};

/// Tasks each example asks for (the sum of its services' desired_count).
fn expected_tasks(name: &str) -> Option<usize> {
    match name {
        "quickstart" => Some(6 + 4 + 2),
        "spread" => Some(3 + 2),
        "mixed" => Some(1 + 5 + 3),
        // Two service tasks and the job's first five runs (the local fleet's
        // stand-in runtime runs them until stopped).
        "sweep" => Some(2 + 5),
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
        gp(d.path(), &["plan", "--detailed-exitcode"])
            .run()
            .expect_code(0);
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
