//! `gpushare reconcile --once`: one level-triggered pass (observe, plan, apply).

use gpushare_tests::{arr, example, gp, replace_config, show_json};

#[test]
fn one_pass_converges_and_the_next_finds_nothing_to_do() {
    let d = example("spread");
    let r = gp(d.path(), &["reconcile", "--once"]).run();
    r.expect_code(0);
    assert!(r.stdout.contains("applied"), "{}", r.stdout);
    assert_eq!(arr(&show_json(d.path()), "tasks").len(), 5);
    let r = gp(d.path(), &["reconcile", "--once"]).run();
    r.expect_code(0);
    assert!(r.stdout.contains("no changes"), "{}", r.stdout);
}

#[test]
fn a_failed_pass_with_once_exits_1() {
    let d = example("spread");
    replace_config(d.path(), "service \"x\" {\n");
    gp(d.path(), &["reconcile", "--once"]).run().expect_code(1);
}
