//! Saved plans: `plan --out FILE` then `apply FILE`; a plan whose state or
//! configuration moved on is refused as stale (exit 1, clear message).

use gpushare_tests::{example, gp};

#[test]
fn a_saved_plan_applies_once() {
    let d = example("quickstart");
    let file = d.path().join("p.plan.json");
    let f = file.to_str().expect("utf-8");
    gp(d.path(), &["plan", "--out", f]).run().expect_code(0);
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
    assert!(
        saved["format_version"].is_string()
            && saved["config_hash"].is_string()
            && saved["plan"].is_object()
    );
    let r = gp(d.path(), &["apply", f]).run();
    r.expect_code(0);
    assert!(r.stdout.contains("Apply complete!"), "{}", r.stdout);
    gp(d.path(), &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);
    // Applying the same plan again: the state has moved on.
    let again = gp(d.path(), &["apply", f]).run();
    again.expect_code(1);
    assert!(again.stderr.contains("stale"), "{}", again.stderr);
}

#[test]
fn a_plan_made_before_another_apply_is_stale() {
    let d = example("quickstart");
    let file = d.path().join("old.plan.json");
    let f = file.to_str().expect("utf-8");
    gp(d.path(), &["plan", "--out", f]).run().expect_code(0);
    gp(d.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let state = gpushare_tests::file_store_files(&d.path().join(".gpushare"));
    let r = gp(d.path(), &["apply", f]).run();
    r.expect_code(1);
    assert!(
        r.stderr.contains("stale") && r.stderr.contains("serial"),
        "{}",
        r.stderr
    );
    assert_eq!(
        gpushare_tests::file_store_files(&d.path().join(".gpushare")),
        state,
        "a refused plan changed the state"
    );
}

#[test]
fn a_plan_whose_configuration_changed_is_stale() {
    let d = example("quickstart");
    let file = d.path().join("p.plan.json");
    let f = file.to_str().expect("utf-8");
    gp(d.path(), &["plan", "--out", f]).run().expect_code(0);
    let main = d.path().join("main.hcl");
    let text = std::fs::read_to_string(&main).expect("read");
    std::fs::write(
        &main,
        text.replace("desired_count     = 4", "desired_count     = 5"),
    )
    .expect("write");
    let r = gp(d.path(), &["apply", f]).run();
    r.expect_code(1);
    assert!(
        r.stderr.contains("stale") && r.stderr.contains("configuration"),
        "{}",
        r.stderr
    );
    assert!(
        !d.path().join(".gpushare/state.json").exists(),
        "a refused plan wrote state"
    );
}
