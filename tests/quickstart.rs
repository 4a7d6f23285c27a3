//! Issue 2's "done when" on the quickstart: the README's first command applies it
//! and prints the plan, the fleet picture and the cost; a second plan is empty;
//! changing desired_count plans only the delta.

use gpushare_tests::{applied, arr, example, gp, plan_json, show_json, test_stores, TestStore};

/// Against the file store and against a real etcd (the same checks).
#[test]
fn apply_prints_plan_picture_and_cost_then_converges() {
    for store in test_stores() {
        apply_prints_plan_picture_and_cost_then_converges_on(&store);
    }
}

fn apply_prints_plan_picture_and_cost_then_converges_on(store: &TestStore) {
    let d = example("quickstart");
    store.use_in(d.path(), "quickstart");
    let r = gp(d.path(), &["apply", "--auto-approve"]).run();
    r.expect_code(0);
    let out = &r.stdout;
    for want in [
        "+ create",
        "capacity_provider.l4",
        "service.embedder",
        "Plan:",
        "GPU0",
        "MiB",
        "$",
    ] {
        assert!(out.contains(want), "apply output lacks {want:?}:\n{out}");
    }
    // Progress: one line per step on stderr.
    assert!(
        r.stderr.lines().filter(|l| l.starts_with('[')).count() >= 10,
        "{}",
        r.stderr
    );
    // The state is where the configuration says: a file, or etcd (and no file).
    let state_file = d.path().join(".gpushare").join("state.json");
    assert_eq!(
        state_file.is_file(),
        matches!(store, TestStore::File),
        "{}: state.json",
        store.name()
    );
    let pulled = gp(d.path(), &["state", "pull"]).run();
    pulled.expect_code(0);
    assert_eq!(
        pulled.json()["tasks"].as_object().map(|t| t.len()),
        Some(12)
    );

    let again = gp(d.path(), &["plan", "--detailed-exitcode"]).run();
    again.expect_code(0);
    // And applying again changes nothing.
    let before = show_json(d.path());
    gp(d.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    assert_eq!(arr(&before, "tasks"), arr(&show_json(d.path()), "tasks"));
}

fn services_of(list: &[serde_json::Value], key: &str) -> Vec<String> {
    list.iter()
        .map(|s| s[key]["service"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn changing_desired_count_plans_only_the_delta() {
    let d = applied("quickstart");
    let tasks_before: Vec<serde_json::Value> = arr(&show_json(d.path()), "tasks").clone();

    // Scale up: two more embedders, placed on existing GPUs; nothing else changes.
    gp(
        d.path(),
        &["plan", "--detailed-exitcode", "-var", "embedder_replicas=8"],
    )
    .run()
    .expect_code(2);
    let p = plan_json(d.path(), &["-var", "embedder_replicas=8"]);
    assert_eq!(
        services_of(arr(&p, "starts"), "task"),
        vec!["embedder"; 2],
        "{p:#}"
    );
    for key in ["stops", "moves", "retirements", "registrations"] {
        assert!(arr(&p, key).is_empty(), "{key} in a pure scale-up: {p:#}");
    }
    let changes = arr(&p, "resource_changes");
    assert_eq!(changes.len(), 1, "{p:#}");
    assert_eq!(changes[0]["addr"], "service.embedder");
    assert_eq!(changes[0]["action"], "update");

    gp(
        d.path(),
        &["apply", "--auto-approve", "-var", "embedder_replicas=8"],
    )
    .run()
    .expect_code(0);
    gp(
        d.path(),
        &["plan", "--detailed-exitcode", "-var", "embedder_replicas=8"],
    )
    .run()
    .expect_code(0);
    let after = show_json(d.path());
    // The tasks that ran before still run, where they ran.
    for t in &tasks_before {
        assert!(
            arr(&after, "tasks")
                .iter()
                .any(|a| a["id"] == t["id"] && a["host"] == t["host"] && a["gpu"] == t["gpu"]),
            "task moved: {t:#}"
        );
    }

    // Scale down to 3: five embedder stops and nothing else.
    let p = plan_json(d.path(), &["-var", "embedder_replicas=3"]);
    assert_eq!(arr(&p, "stops").len(), 5, "{p:#}");
    assert!(
        arr(&p, "starts").is_empty() && arr(&p, "moves").is_empty(),
        "{p:#}"
    );
    let embedder_ids: Vec<&str> = arr(&after, "tasks")
        .iter()
        .filter(|t| t["service"] == "embedder")
        .filter_map(|t| t["id"].as_str())
        .collect();
    for s in arr(&p, "stops") {
        let id = s["task_id"].as_str().expect("task_id");
        assert!(
            embedder_ids.contains(&id),
            "stops a task that is not an embedder: {id}"
        );
    }
}

/// Issue 45 item 1, regression: a configuration copied with its `.gpushare/` (`cp -r`,
/// a restored backup, an rsync) planned the whole fleet again (the state log was
/// skipped for its new inode), which on EC2 launches a second fleet. The copy now
/// plans no change, and `show` in it lists every service with its tasks.
#[test]
fn a_copied_configuration_with_its_state_plans_no_change() {
    let d = example("quickstart");
    gp(d.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    // A second apply makes the state log hold commits beyond the snapshot.
    gp(
        d.path(),
        &["apply", "--auto-approve", "-var", "embedder_replicas=7"],
    )
    .run()
    .expect_code(0);
    let copy = tempfile::tempdir().expect("tempdir");
    let target = copy.path().join("quickstart");
    let cp = std::process::Command::new("cp")
        .arg("-r")
        .arg(d.path())
        .arg(&target)
        .status()
        .expect("cp");
    assert!(cp.success());
    let plan = gp(
        &target,
        &["plan", "--detailed-exitcode", "-var", "embedder_replicas=7"],
    )
    .run();
    assert_eq!(plan.code, 0, "{}{}", plan.stdout, plan.stderr);
    let show = gp(&target, &["show", "--json"]).run();
    show.expect_code(0);
    let services = show.json()["services"].clone();
    let embedder = services
        .as_array()
        .and_then(|s| s.iter().find(|x| x["service"] == "embedder"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(embedder["desired"], 7, "{services}");
    assert_eq!(embedder["running"], 7, "{services}");
    let text = gp(&target, &["show"]).run();
    assert!(
        text.stdout.contains("embedder") && text.stdout.contains("7 desired, 7 running"),
        "{}",
        text.stdout
    );
}

/// Issue 45 item 5/6: README's "A real plan" is what the quickstart really plans
/// (its serial had gone stale): the block is compared with the output, line by line.
#[test]
fn the_readme_example_plan_is_the_real_one() {
    let readme = std::fs::read_to_string(gpushare_tests::workspace_root().join("README.md"))
        .expect("README.md");
    let block = readme
        .split("## A real plan")
        .nth(1)
        .and_then(|s| s.split("```text\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("README has the example plan");
    let d = example("quickstart");
    gp(d.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let r = gp(d.path(), &["plan", "-var", "embedder_replicas=8"]).run();
    r.expect_code(0);
    let real: Vec<&str> = r.stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    let shown: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        shown, real,
        "README's example plan differs from the real one"
    );
}
