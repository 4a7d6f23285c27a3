//! Every exit code of the CLI (0 success / no changes, 1 error, 2 changes present
//! with --detailed-exitcode) and the JSON outputs (`format_version` everywhere).

use gpushare_tests::{arr, example, gp, show_json};

#[test]
fn exit_0_1_and_2() {
    let d = example("quickstart");
    gp(d.path(), &["validate"]).run().expect_code(0);
    gp(d.path(), &["plan"]).run().expect_code(0);
    gp(d.path(), &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(2);
    let missing = d.path().join("nope");
    let r = gp(d.path(), &["plan", missing.to_str().expect("utf-8")]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
    let empty = tempfile::tempdir().expect("tempdir");
    let r = gp(empty.path(), &["plan"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("no configuration files"), "{}", r.stderr);
    gp(d.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    gp(d.path(), &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);
}

#[test]
fn apply_without_auto_approve_refuses_when_stdin_is_not_a_terminal() {
    let d = example("quickstart");
    let r = gp(d.path(), &["apply"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("--auto-approve"), "{}", r.stderr);
    assert!(
        !d.path().join(".gpushare").join("state.json").exists(),
        "a refused apply wrote state"
    );
    gp(d.path(), &["destroy"]).run().expect_code(0); // nothing to destroy: no question asked
}

#[test]
fn json_outputs_parse_and_carry_format_version() {
    let d = example("quickstart");
    let v = gp(d.path(), &["validate", "--json"]).run();
    v.expect_code(0);
    let v = v.json();
    assert_eq!(v["valid"], true);
    assert!(v["format_version"].is_string());

    let p = gp(d.path(), &["plan", "--json"]).run();
    p.expect_code(0);
    assert!(p.plan_doc()["format_version"].is_string());

    let a = gp(d.path(), &["apply", "--auto-approve", "--json"]).run();
    a.expect_code(0);
    let a = a.json();
    assert!(a["format_version"].is_string(), "{a:#}");
    assert!(a["plan"]["format_version"].is_string(), "{a:#}");

    let s = show_json(d.path());
    assert!(s["format_version"].is_string());
    let hosts = arr(&s, "hosts");
    assert!(!hosts.is_empty());
    for h in hosts {
        for k in [
            "id",
            "capacity_provider",
            "instance_type",
            "state",
            "mps_health",
            "gpus",
        ] {
            assert!(!h[k].is_null(), "host lacks {k}: {h:#}");
        }
        for g in arr(h, "gpus") {
            for k in [
                "index",
                "model",
                "memory_mib",
                "mode",
                "allocated_memory_mib",
                "tasks",
            ] {
                assert!(!g[k].is_null(), "gpu lacks {k}: {g:#}");
            }
            let used: u64 = s["tasks"]
                .as_array()
                .expect("tasks")
                .iter()
                .filter(|t| t["host"] == h["id"] && t["gpu"] == g["index"])
                .map(|t| t["gpu_memory_mib"].as_u64().unwrap_or(0))
                .sum();
            assert_eq!(
                g["allocated_memory_mib"].as_u64(),
                Some(used),
                "allocation disagrees with the tasks: {g:#}"
            );
            assert!(
                used <= g["memory_mib"].as_u64().expect("memory_mib"),
                "GPU over its memory: {g:#}"
            );
        }
    }
    let tasks = arr(&s, "tasks");
    assert_eq!(tasks.len(), 12);
    for t in tasks {
        for k in [
            "id",
            "service",
            "revision",
            "host",
            "gpu",
            "state",
            "gpu_memory_mib",
        ] {
            assert!(!t[k].is_null(), "task lacks {k}: {t:#}");
        }
        assert!(
            t.get("max_compute_percent").is_some(),
            "task lacks max_compute_percent: {t:#}"
        );
    }
}

#[test]
fn invalid_configuration_in_validate_json() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        d.path().join("main.hcl"),
        "capacity_provider \"x\" {\n  instance_type = \"g6.13xlarge\"\n  max_size = 1\n}\n",
    )
    .expect("write");
    let r = gp(d.path(), &["validate", "--json"]).run();
    r.expect_code(1);
    let v = r.json();
    assert_eq!(v["valid"], false);
    assert!(v["error_count"].as_u64().unwrap_or(0) >= 1, "{v:#}");
    let diag = &arr(&v, "diagnostics")[0];
    assert_eq!(diag["severity"], "error");
    assert!(diag["range"]["start"]["line"].as_u64().is_some(), "{v:#}");
}
