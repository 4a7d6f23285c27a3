//! `gpushare destroy` and `gpushare state list`: destroy stops every task, retires
//! every host (terminated in the cloud too) and forgets every resource.

use gpushare_tests::{applied, arr, gp, live_fleet_instances, show_json};

#[test]
fn state_list_then_destroy_everything() {
    let d = applied("mixed");
    let r = gp(d.path(), &["state", "list"]).run();
    r.expect_code(0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    for want in [
        "capacity_provider.a10g",
        "service.finetune",
        "task_definition.ocr",
    ] {
        assert!(
            lines.contains(&want),
            "state list lacks {want}:\n{}",
            r.stdout
        );
    }
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("task.")).count(),
        9,
        "{}",
        r.stdout
    );
    assert!(lines.iter().any(|l| l.starts_with("host.")), "{}", r.stdout);

    gp(d.path(), &["plan", "--destroy", "--detailed-exitcode"])
        .run()
        .expect_code(2);
    let r = gp(d.path(), &["destroy", "--auto-approve"]).run();
    r.expect_code(0);
    assert!(r.stdout.contains("Destroy complete!"), "{}", r.stdout);
    let show = show_json(d.path());
    assert!(
        arr(&show, "hosts").is_empty() && arr(&show, "tasks").is_empty(),
        "{show:#}"
    );
    assert!(
        live_fleet_instances(d.path()).is_empty(),
        "instances left running in the cloud"
    );
    let r = gp(d.path(), &["state", "list"]).run();
    r.expect_code(0);
    assert_eq!(r.stdout.trim(), "", "state not empty after destroy");
    gp(d.path(), &["plan", "--destroy", "--detailed-exitcode"])
        .run()
        .expect_code(0);
}
