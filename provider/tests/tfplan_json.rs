//! `gpushare show -json PLANFILE` against a real consumer of Terraform's JSON plan
//! representation: Terraform's own `terraform show -json` of the same configuration
//! planned through this provider. Both plans are read the way a policy tool reads
//! them (`resource_changes[]`: address, type, name, provider, actions, `after`) and
//! compared field by field.
//!
//! What is compared: the set of addresses with their type, name, provider and
//! actions; `planned_values` addresses; and every attribute that both `after`
//! objects hold as a known, non-null value (gpushare writes attributes left at
//! their default with the default's value where the provider plans null, and
//! leaves out the computed ones, which Terraform marks unknown: see
//! `gpushare_core::tfplan`).

mod tfwork;

use gpushare_core::model::ResourceKind;
use gpushare_core::schema::schema;
use serde_json::Value;
use std::collections::BTreeMap;
use tfwork::Workdir;

/// The comparison's fleet, in both faces: every resource's documented example
/// (`schemas/<kind>.json`'s `terraform_example` and `example`, the same resources by
/// design), so the test also keeps the two sets of examples in step.
fn main_tf() -> String {
    let mut out = "terraform {\n  required_providers {\n    gpushare = { source = \"gpushare/gpushare\" }\n  }\n}\n\nprovider \"gpushare\" {\n  cluster   = \"tfjson\"\n  state_dir = \".gpushare\"\n}\n".to_string();
    for k in ResourceKind::ALL {
        out.push('\n');
        out.push_str(&schema(k).terraform_example.clone());
    }
    out
}

fn main_hcl() -> String {
    let mut out = "gpushare {\n  cluster = \"tfjson\"\n}\n".to_string();
    for k in ResourceKind::ALL {
        out.push('\n');
        out.push_str(&schema(k).example);
    }
    out
}

/// `terraform show -json` of a saved plan of [`main_tf`].
fn terraform_plan() -> Value {
    let w = Workdir::new(&main_tf());
    w.ok(&["plan", "-out=tfplan", "-no-color"]);
    serde_json::from_str(&w.ok(&["show", "-json", "tfplan"])).expect("terraform's JSON")
}

/// `gpushare show -json` of a saved plan of [`main_hcl`].
fn gpushare_plan() -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("main.hcl"), main_hcl()).expect("config");
    gpushare_testkit::gp(dir.path(), &["plan", "-out=p"])
        .run()
        .expect_code(0);
    let shown = gpushare_testkit::gp(dir.path(), &["show", "-json", "p"]).run();
    shown.expect_code(0);
    let v = shown.json();
    (dir, v)
}

/// address -> resource change.
fn by_address(plan: &Value) -> BTreeMap<String, Value> {
    plan["resource_changes"]
        .as_array()
        .expect("resource_changes")
        .iter()
        .map(|rc| {
            (
                rc["address"].as_str().expect("address").to_string(),
                rc.clone(),
            )
        })
        .collect()
}

/// Every value both hold (null in either: not compared); numbers numerically.
/// Returns the paths compared.
fn compare(path: &str, ours: &Value, theirs: &Value, compared: &mut Vec<String>) {
    match (ours, theirs) {
        (Value::Null, _) | (_, Value::Null) => {}
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                if let Some(w) = b.get(k) {
                    compare(&format!("{path}.{k}"), v, w, compared);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{path}: {ours} vs {theirs}");
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                compare(&format!("{path}[{i}]"), v, w, compared);
            }
        }
        (Value::Number(a), Value::Number(b)) => {
            assert_eq!(a.as_f64(), b.as_f64(), "{path}");
            compared.push(path.to_string());
        }
        _ => {
            assert_eq!(ours, theirs, "{path}");
            compared.push(path.to_string());
        }
    }
}

#[test]
fn show_json_of_a_saved_plan_reads_like_terraforms_own() {
    let tf = terraform_plan();
    let (_dir, gs) = gpushare_plan();

    assert_eq!(
        gs["format_version"]
            .as_str()
            .and_then(|v| v.split('.').next()),
        tf["format_version"]
            .as_str()
            .and_then(|v| v.split('.').next()),
        "same major format version"
    );
    let (ours, theirs) = (by_address(&gs), by_address(&tf));
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "the same resources"
    );
    let mut compared = Vec::new();
    for (addr, rc) in &ours {
        let t = &theirs[addr];
        for field in ["mode", "type", "name", "provider_name"] {
            assert_eq!(rc[field], t[field], "{addr}.{field}");
        }
        assert_eq!(rc["change"]["actions"], t["change"]["actions"], "{addr}");
        assert_eq!(rc["change"]["before"], t["change"]["before"], "{addr}");
        compare(
            addr,
            &rc["change"]["after"],
            &t["change"]["after"],
            &mut compared,
        );
    }
    // The comparison is not vacuous: the attributes a policy looks at were compared.
    for path in [
        "gpushare_capacity_provider.l4.instance_type",
        "gpushare_capacity_provider.l4.max_size",
        "gpushare_capacity_provider.l4.tags.team",
        "gpushare_service.embedder.desired_count",
        "gpushare_service.embedder.placement_strategy",
        "gpushare_service.embedder.deployment.max_surge_percent",
        "gpushare_gpu_instance.reserved_1.availability_zone",
        "gpushare_capacity_provider.l4.mps.default_active_thread_percentage",
        "gpushare_task_definition.embedder.container[0].gpu.mps.memory",
        "gpushare_task_definition.embedder.container[0].name",
        "gpushare_task_definition.embedder.container[0].env.MODEL",
    ] {
        assert!(
            compared.iter().any(|c| c == path),
            "{path} not compared; compared: {compared:?}"
        );
    }
    let planned = |p: &Value| -> Vec<String> {
        let mut v: Vec<String> = p["planned_values"]["root_module"]["resources"]
            .as_array()
            .expect("planned_values")
            .iter()
            .map(|r| r["address"].as_str().expect("address").to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(planned(&gs), planned(&tf));
    // What only gpushare knows is beside it: the hosts and where every task lands.
    let launches = gs["gpushare"]["launches"].as_array().map_or(0, Vec::len);
    assert!(launches >= 1, "{:#}", gs["gpushare"]);
    // Every task of the example service is placed (desired_count = 6), and the
    // example job's first runs (parallelism = 5).
    assert_eq!(
        gs["gpushare"]["starts"].as_array().map(Vec::len),
        Some(6 + 5)
    );
}

/// The messages of a `plan -json` stream (one JSON object per line).
fn messages(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON message ({e}): {l}"))
        })
        .collect()
}

/// What a consumer of Terraform's machine-readable UI reads from a plan stream: per
/// address, its `planned_change` message (without the timestamp), and the
/// `change_summary` message's text and counts.
fn ui_reading(stream: &[Value]) -> (BTreeMap<String, Value>, Value) {
    let mut changes = BTreeMap::new();
    let mut summary = Value::Null;
    for m in stream {
        let mut m = m.clone();
        if let Value::Object(o) = &mut m {
            o.remove("@timestamp");
            o.remove("@module");
        }
        match m["type"].as_str() {
            Some("planned_change") => {
                let addr = m["change"]["resource"]["addr"]
                    .as_str()
                    .expect("addr")
                    .to_string();
                changes.insert(addr, m);
            }
            Some("change_summary") => summary = m,
            _ => {}
        }
    }
    (changes, summary)
}

/// `gpushare plan -json` and the real `terraform plan -json` through the provider, on
/// the same fleet from nothing (creates) and after an apply with a changed service
/// count (update) and pool instance type (replace), and `-destroy` (delete): the same `planned_change`
/// messages and the same `change_summary`, read as a consumer of Terraform's stream
/// reads them; gpushare's own plan travels in a `gpushare_plan` message.
#[test]
fn plan_json_streams_the_messages_terraform_streams() {
    // Without the gpu_instance (its zone is not one of the local fleet's), for the apply.
    let kinds: Vec<ResourceKind> = ResourceKind::ALL
        .into_iter()
        .filter(|k| *k != ResourceKind::GpuInstance)
        .collect();
    let face = |head: &str, f: &dyn Fn(ResourceKind) -> String| {
        let mut out = head.to_string();
        for k in &kinds {
            out.push('\n');
            out.push_str(&f(*k));
        }
        out
    };
    let tf_head = "terraform {\n  required_providers {\n    gpushare = { source = \"gpushare/gpushare\" }\n  }\n}\n\nprovider \"gpushare\" {\n  cluster   = \"tfui\"\n  state_dir = \".gpushare\"\n}\n";
    let tf_src = face(tf_head, &|k| schema(k).terraform_example.clone());
    let hcl_src = face("gpushare {\n  cluster = \"tfui\"\n}\n", &|k| {
        schema(k).example.clone()
    });
    let edit = |s: &str| {
        s.replace("desired_count      = 6", "desired_count      = 4")
            .replace("\"g6.12xlarge\"", "\"g6.xlarge\"")
    };

    let w = Workdir::new(&tf_src);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("main.hcl"), &hcl_src).expect("config");
    let gp_stream = |extra: &[&str]| {
        let mut args = vec!["plan", "-json"];
        args.extend_from_slice(extra);
        let r = gpushare_testkit::gp(dir.path(), &args).run();
        r.expect_code(0);
        // Every line is one message, and the first says which UI version it speaks.
        let stream = r.messages();
        assert_eq!(stream[0]["type"], "version", "{stream:#?}");
        assert_eq!(stream[0]["ui"], "1.2");
        assert!(
            stream.iter().any(
                |m| m["type"] == "gpushare_plan" && m["gpushare"]["format_version"].is_string()
            ),
            "{stream:#?}"
        );
        stream
    };
    let tf_stream = |extra: &[&str]| {
        let mut args = vec!["plan", "-json"];
        args.extend_from_slice(extra);
        messages(&w.ok(&args))
    };

    for phase in [
        "from nothing",
        "after an update and a replacement",
        "destroy",
    ] {
        let extra: &[&str] = if phase == "destroy" {
            &["-destroy"]
        } else {
            &[]
        };
        let (theirs, their_summary) = ui_reading(&tf_stream(extra));
        let (ours, our_summary) = ui_reading(&gp_stream(extra));
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            theirs.keys().collect::<Vec<_>>(),
            "{phase}: the same resources change"
        );
        for (addr, m) in &ours {
            assert_eq!(m, &theirs[addr], "{phase}: {addr}");
        }
        assert_eq!(our_summary, their_summary, "{phase}: the summary");
        assert!(
            !their_summary.is_null(),
            "{phase}: terraform wrote a summary"
        );

        if phase == "from nothing" {
            let actions: Vec<&Value> = ours.values().map(|m| &m["change"]["action"]).collect();
            assert!(actions.iter().all(|a| *a == "create"), "{actions:?}");
            w.ok(&["apply", "-auto-approve", "-no-color"]);
            gpushare_testkit::gp(dir.path(), &["apply", "-auto-approve"])
                .run()
                .expect_code(0);
            std::fs::write(w.path().join("main.tf"), edit(&tf_src)).expect("edit");
            std::fs::write(dir.path().join("main.hcl"), edit(&hcl_src)).expect("edit");
        } else if phase == "destroy" {
            // The pool, the task definition and the service and job that use them.
            assert_eq!(ours.len(), 4, "{ours:#?}");
            for m in ours.values() {
                assert_eq!(m["change"]["action"], "delete", "{m:#}");
            }
        } else {
            let action = |a: &str| ours[a]["change"]["action"].as_str().map(str::to_string);
            assert_eq!(
                action("gpushare_service.embedder").as_deref(),
                Some("update")
            );
            assert_eq!(
                action("gpushare_capacity_provider.l4").as_deref(),
                Some("replace")
            );
        }
    }
}
