//! `gpushare plan --show-user-data` prints, for every host the plan launches, the
//! cloud-init script it would boot with on EC2 (issue 5: "shown in the plan on
//! request"), rendered by the EC2 backend's one template.

use gpushare_tests::{example, gp, plan_json, snapshot};

#[test]
fn plan_shows_the_mps_bootstrap_of_every_planned_launch() {
    let d = example("quickstart");
    let launches = plan_json(d.path(), &[])["launches"]
        .as_array()
        .expect("plan --json lists launches")
        .len();
    assert!(launches > 0, "the quickstart plan launches hosts");

    let before = snapshot(d.path());
    let r = gp(d.path(), &["plan", "--show-user-data"]).run();
    r.expect_code(0);
    let out = &r.stdout;
    assert_eq!(
        out.matches("# user data of host ").count(),
        launches,
        "one script per launch:\n{out}"
    );
    for want in [
        "nvidia-cuda-mps-control -f",
        "EXCLUSIVE_PROCESS",
        "CUDA_MPS_PIPE_DIRECTORY",
        "agent --server https://controller.invalid:7443 --ca-hash sha256:",
        "GPUSHARE_JOIN_TOKEN=",
    ] {
        assert!(
            out.matches(want).count() >= launches,
            "every script has {want:?}:\n{out}"
        );
    }
    assert!(out.contains("placeholder"), "{out}");
    // Showing the scripts changes nothing (no token is minted for a preview).
    assert_eq!(before, snapshot(d.path()));
}

#[test]
fn show_user_data_and_json_do_not_mix() {
    let d = example("quickstart");
    gp(d.path(), &["plan", "--json", "--show-user-data"])
        .run()
        .expect_code(1);
}
