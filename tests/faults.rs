//! `gpushare debug fault HOST mps-down` on the local cloud: the next plan replaces
//! that host start-before-stop (launch, move its tasks, retire it), and applying it
//! converges.

use gpushare_tests::{applied, arr, gp, plan_json, show_json};

#[test]
fn an_mps_down_host_is_replaced_and_its_tasks_moved() {
    let d = applied("quickstart");
    let show = show_json(d.path());
    let sick = arr(&show, "hosts")
        .iter()
        .find(|h| h["capacity_provider"] == "l4")
        .expect("an l4 host")["id"]
        .as_str()
        .expect("id")
        .to_string();
    let sick_tasks: Vec<String> = arr(&show, "tasks")
        .iter()
        .filter(|t| t["host"] == sick.as_str())
        .map(|t| t["id"].as_str().expect("id").to_string())
        .collect();
    assert!(!sick_tasks.is_empty());

    let r = gp(d.path(), &["debug", "fault", &sick, "mps-down"]).run();
    r.expect_code(0);
    assert!(r.stdout.contains(&sick), "{}", r.stdout);

    // The host's agent probes the daemon once a round (each plan runs one): two
    // failures in a row are not yet impaired, the third is.
    for _ in 0..2 {
        gp(d.path(), &["plan", "--detailed-exitcode"])
            .run()
            .expect_code(0);
    }

    gp(d.path(), &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(2);
    let p = plan_json(d.path(), &[]);
    assert!(
        !arr(&p, "launches").is_empty(),
        "no replacement host: {p:#}"
    );
    let retired: Vec<&str> = arr(&p, "retirements")
        .iter()
        .filter_map(|r| r["host_id"].as_str())
        .collect();
    assert_eq!(retired, vec![sick.as_str()], "{p:#}");
    let mut moved: Vec<String> = arr(&p, "moves")
        .iter()
        .map(|m| m["from_task"].as_str().expect("from_task").to_string())
        .collect();
    moved.sort();
    let mut want = sick_tasks.clone();
    want.sort();
    assert_eq!(
        moved, want,
        "every task of the sick host moves, and only those: {p:#}"
    );
    assert!(arr(&p, "moves")
        .iter()
        .all(|m| m["to"]["host"] != sick.as_str()));

    gp(d.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let after = show_json(d.path());
    assert!(
        arr(&after, "hosts")
            .iter()
            .all(|h| h["id"] != sick.as_str()),
        "the sick host is still there: {after:#}"
    );
    assert_eq!(arr(&after, "tasks").len(), 12);
    assert!(arr(&after, "tasks")
        .iter()
        .all(|t| t["state"] == "running" && t["host"] != sick.as_str()));
    gp(d.path(), &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);
}

#[test]
fn debug_fault_names_an_unknown_host() {
    let d = applied("quickstart");
    let r = gp(d.path(), &["debug", "fault", "h-nope", "mps-down"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("h-nope"), "{}", r.stderr);
}
