//! Behaviour of the planner on small hand-built fleets.

use gpushare_core::model::*;
use gpushare_core::plan::{plan, Action, Options, PlanError};
use gpushare_testkit::plan::*;

#[test]
fn create_from_empty_places_every_task_and_replans_empty() {
    let d = quickstart(6);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(p.resource_changes.len(), 8);
    assert!(p
        .resource_changes
        .iter()
        .all(|c| c.action == Action::Create));
    assert_eq!(p.registrations.len(), 3);
    assert_eq!(p.starts.len(), 9);
    assert!(p.unplaced.is_empty(), "{:?}", p.unplaced);
    assert!(!p.launches.is_empty());
    for s in &p.starts {
        assert!(
            p.after.hosts.contains_key(&s.task.host),
            "task on a planned host"
        );
    }
    let again = plan_ok(&d, &settle(live_after(&p, 2_000)), &Options::default());
    assert!(again.is_empty(), "re-plan not empty: {again:#?}");
}

#[test]
fn same_inputs_same_plan_byte_for_byte() {
    let d = quickstart(6);
    let a = serde_json::to_string(&plan_ok(&d, &empty_live(), &Options::default())).unwrap();
    let b = serde_json::to_string(&plan_ok(&d, &empty_live(), &Options::default())).unwrap();
    assert_eq!(a, b);
}

#[test]
fn scale_up_plans_only_the_delta() {
    let d = quickstart(2);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    let live = settle(live_after(&p, 2_000));
    let d6 = quickstart(6);
    let q = plan_ok(&d6, &live, &Options::default());
    assert_eq!(q.starts.len(), 4);
    assert!(q.stops.is_empty() && q.moves.is_empty() && q.registrations.is_empty());
    assert_eq!(q.resource_changes.len(), 1);
    assert_eq!(q.resource_changes[0].action, Action::Update);
    assert_eq!(q.resource_changes[0].changes[0].name, "desired_count");
}

#[test]
fn unknown_pool_is_an_error_naming_the_service() {
    let mut d = quickstart(1);
    d.services.get_mut("llm").unwrap().capacity_provider = "h100".into();
    let e = plan(&d, &empty_live(), &Options::default()).unwrap_err();
    assert!(matches!(e, PlanError::MissingReference { .. }));
    assert!(e.to_string().starts_with("service.llm:"), "{e}");
    assert_eq!(e.addr().to_string(), "service.llm");
}

#[test]
fn unknown_instance_type_lists_close_matches() {
    let mut d = quickstart(1);
    d.capacity_providers.get_mut("l4").unwrap().instance_type = "g6.13xlarge".into();
    let e = plan(&d, &empty_live(), &Options::default()).unwrap_err();
    assert!(e.to_string().contains("g6.12xlarge"), "{e}");
    assert!(e.to_string().starts_with("capacity_provider.l4:"), "{e}");
    assert_eq!(e.addr().to_string(), "capacity_provider.l4");
    let _ = HostState::Running;
}

#[test]
fn long_lists_are_cut_in_the_text_plan_but_not_in_json() {
    let mut d = quickstart(0);
    d.capacity_providers.insert(
        "l4".into(),
        gpushare_testkit::plan::pool("g6.xlarge", 0, 50),
    );
    d.services.get_mut("embedder").unwrap().desired_count = 60;
    let live = empty_live();
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.starts.len(), 63);
    let text = gpushare_core::render::plan_text(&p, &live.state, &Default::default());
    let line = text
        .lines()
        .find(|l| l.contains("embedder: start 60"))
        .expect("a start line for the embedder");
    assert!(line.ends_with("more hosts"), "{line}");
    let json = gpushare_core::render::plan_json(&p);
    assert_eq!(json["starts"].as_array().map(Vec::len), Some(63));
    assert_eq!(json["format_version"], FORMAT_VERSION);
    assert_eq!(json["summary"]["place"], 63);
}

/// A change that makes a configuration invalid, and what the error must say.
type Case = (Box<dyn Fn(&mut Desired)>, &'static str);

#[test]
fn invalid_configurations_are_errors_naming_the_resource() {
    let cases: Vec<Case> = vec![
        (
            Box::new(|d| d.services.get_mut("llm").unwrap().task_definition = "gpt".into()),
            "service.llm: task_definition names task_definition.gpt",
        ),
        (
            Box::new(|d| d.capacity_providers.get_mut("l4").unwrap().min_size = 9),
            "capacity_provider.l4: min_size (9) is larger than max_size (4)",
        ),
        (
            Box::new(|d| {
                d.gpu_instances.insert(
                    "pinned".into(),
                    GpuInstance {
                        capacity_provider: "h100".into(),
                        instance_type: None,
                        availability_zone: None,
                        tags: Default::default(),
                    },
                );
            }),
            "gpu_instance.pinned: capacity_provider names capacity_provider.h100",
        ),
        (
            Box::new(|d| {
                let mut td = gpushare_testkit::plan::mps_td("x", 100, None);
                td.containers.push(gpushare_testkit::plan::container(
                    "side",
                    "y",
                    Some(GpuSpec {
                        count: Some(1),
                        mps: None,
                    }),
                ));
                d.task_definitions.insert("llm".into(), td);
            }),
            "task_definition.llm: the containers' GPU needs",
        ),
        (
            Box::new(|d| {
                d.services.get_mut("llm").unwrap().instance_types = vec!["p9.large".into()]
            }),
            "service.llm: unknown instance type \"p9.large\"",
        ),
    ];
    for (break_it, expected) in cases {
        let mut d = quickstart(1);
        break_it(&mut d);
        let e = plan(&d, &empty_live(), &Options::default()).expect_err(expected);
        assert!(e.to_string().starts_with(expected), "{e} / {expected}");
        // Destroy still works with a broken configuration.
        assert!(plan(
            &d,
            &empty_live(),
            &Options {
                destroy: true,
                ..Options::default()
            }
        )
        .is_ok());
    }
}

#[test]
fn show_json_has_the_documented_fields() {
    let p = plan_ok(&quickstart(2), &empty_live(), &Options::default());
    let v = gpushare_core::render::show_json(&p.after);
    assert_eq!(v["format_version"], FORMAT_VERSION);
    let host = &v["hosts"][0];
    for k in [
        "id",
        "capacity_provider",
        "instance_type",
        "state",
        "mps_health",
        "gpus",
    ] {
        assert!(host.get(k).is_some(), "hosts[].{k}");
    }
    let gpu = &host["gpus"][0];
    for k in [
        "index",
        "model",
        "memory_mib",
        "mode",
        "allocated_memory_mib",
        "tasks",
    ] {
        assert!(gpu.get(k).is_some(), "hosts[].gpus[].{k}");
    }
    let embedder = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["service"] == "embedder")
        .expect("an embedder task");
    for k in [
        "id",
        "service",
        "revision",
        "host",
        "gpu",
        "state",
        "gpu_memory_mib",
        "max_compute_percent",
    ] {
        assert!(embedder.get(k).is_some(), "tasks[].{k}");
    }
    assert_eq!(embedder["gpu_memory_mib"], 6144);
    assert_eq!(embedder["max_compute_percent"], 25);
    assert_eq!(embedder["state"], "pending");
    // The GPU that holds it lists it and counts its memory.
    let on = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|h| h["gpus"].as_array().unwrap().iter())
        .find(|g| g["tasks"].as_array().unwrap().contains(&embedder["id"]))
        .expect("its GPU");
    assert_eq!(on["mode"], "mps");
    assert!(on["allocated_memory_mib"].as_u64().unwrap() >= 6144);
}
