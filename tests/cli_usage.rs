//! The binary's usage surface: help, version, and usage errors (exit 1, never 2,
//! which is reserved for "changes present").

use gpushare_tests::gp;

#[test]
fn help_lists_every_command_and_exits_0() {
    let d = tempfile::tempdir().expect("tempdir");
    let r = gp(d.path(), &["--help"]).run();
    r.expect_code(0);
    for cmd in [
        "validate",
        "fmt",
        "plan",
        "apply",
        "destroy",
        "show",
        "state",
        "reconcile",
        "status",
        "debug",
        "agent",
        "import-ecs",
        "evaluate",
    ] {
        assert!(
            r.stdout.contains(cmd),
            "help does not mention {cmd}:\n{}",
            r.stdout
        );
    }
    gp(d.path(), &["--version"]).run().expect_code(0);
}

#[test]
fn usage_errors_exit_1_not_2() {
    let d = tempfile::tempdir().expect("tempdir");
    let r = gp(d.path(), &["frobnicate"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("frobnicate"), "{}", r.stderr);
    let r = gp(d.path(), &["plan", "-var", "no-equals-sign"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("NAME=VALUE"), "{}", r.stderr);
    gp(d.path(), &["debug", "fault", "h-1", "melt"])
        .run()
        .expect_code(1);
}
