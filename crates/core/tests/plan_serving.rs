//! Host ports in the plan (issue 47): dynamic ports assigned by the planner from
//! the pool's range, deterministically and before apply; fixed host ports (and
//! host-mode ports) as a placement resource, so two tasks holding one port never
//! share a host, and the task that finds no host says why.

use gpushare_core::model::*;
use gpushare_core::plan::Options;
use gpushare_testkit::plan::*;
use std::collections::BTreeSet;

/// A CPU-only web task of 1 vCPU with one port mapping.
fn web(container_port: u16, host_port: u16, mode: NetworkMode) -> TaskDefinition {
    let mut c = container("web", "web:1", None);
    c.cpu = 1024;
    c.memory = 512;
    c.port_mappings = vec![PortMapping {
        name: Some("http".into()),
        container_port,
        host_port,
        protocol: Protocol::Tcp,
    }];
    TaskDefinition {
        containers: vec![c],
        network_mode: mode,
        ..Default::default()
    }
}

fn fleet(td: TaskDefinition, count: u32, max_size: u32) -> Desired {
    let mut d = Desired {
        settings: Settings {
            cluster: "inference".into(),
            seed: 7,
            ..Settings::default()
        },
        ..Desired::default()
    };
    let mut p = pool("g6.12xlarge", 0, max_size);
    p.host_port_range = Some("40000-40009".into());
    d.capacity_providers.insert("l4".into(), p);
    d.task_definitions.insert("web".into(), td);
    d.services.insert("web".into(), service("web", "l4", count));
    d
}

#[test]
fn dynamic_ports_are_assigned_in_the_plan_lowest_free_first() {
    let d = fleet(web(8080, 0, NetworkMode::Bridge), 3, 1);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(p.starts.len(), 3);
    let mut ports: Vec<u16> = p
        .starts
        .iter()
        .map(|s| {
            assert_eq!(s.task.ports.len(), 1, "{:?}", s.task);
            let port = &s.task.ports[0];
            assert_eq!(port.container_port, 8080);
            assert_eq!(port.name.as_deref(), Some("http"));
            port.host_port
        })
        .collect();
    ports.sort();
    // One host (binpack), three distinct ports from the pool's range.
    assert_eq!(ports, vec![40000, 40001, 40002]);
    // The plan is deterministic.
    let again = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(again.starts, p.starts);

    // One more task later takes the next free port; the running ones keep theirs.
    let live = settle(live_after(&p, 2_000));
    let mut d4 = d.clone();
    d4.services.get_mut("web").expect("web").desired_count = 4;
    let p4 = plan_ok(&d4, &live, &Options::default());
    assert_eq!(p4.starts.len(), 1);
    assert_eq!(p4.starts[0].task.ports[0].host_port, 40003);
}

#[test]
fn a_fixed_host_port_is_held_by_one_task_per_host() {
    let d = fleet(web(8080, 80, NetworkMode::Bridge), 3, 3);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(p.starts.len(), 3);
    let hosts: BTreeSet<&str> = p.starts.iter().map(|s| s.task.host.as_str()).collect();
    assert_eq!(hosts.len(), 3, "three tasks on port 80 need three hosts");
    assert!(p.starts.iter().all(|s| s.task.ports[0].host_port == 80));
}

#[test]
fn host_mode_ports_are_placement_resources_and_the_unplaced_task_says_why() {
    let d = fleet(web(8080, 0, NetworkMode::Host), 3, 2);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(p.starts.len(), 2);
    assert!(p.starts.iter().all(|s| s.task.ports[0].host_port == 8080));
    assert_eq!(p.unplaced.len(), 1, "{:?}", p.unplaced);
    let why = &p.unplaced[0].reason;
    assert!(
        why.contains("host port 8080/tcp"),
        "the reason names the port: {why}"
    );
}

#[test]
fn an_exhausted_range_leaves_the_task_unplaced_with_its_reason() {
    let mut d = fleet(web(8080, 0, NetworkMode::Bridge), 12, 1);
    d.capacity_providers
        .get_mut("l4")
        .expect("pool")
        .host_port_range = Some("40000-40009".into());
    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(p.starts.len(), 10);
    assert_eq!(p.unplaced.len(), 2);
    assert!(
        p.unplaced[0]
            .reason
            .contains("no free host port left in 40000-40009"),
        "{}",
        p.unplaced[0].reason
    );
}

#[test]
fn a_replacement_never_takes_the_port_of_the_task_it_replaces() {
    let d = fleet(web(8080, 0, NetworkMode::Bridge), 2, 1);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    let mut live = settle(live_after(&p, 2_000));
    live.observed_at = 2_030;
    // A new revision: replacements start while the old tasks still run.
    let mut d2 = d.clone();
    d2.task_definitions.get_mut("web").expect("web").containers[0].image = "web:2".into();
    let p2 = plan_ok(&d2, &live, &Options::default());
    assert!(!p2.starts.is_empty());
    let old: BTreeSet<u16> = live
        .state
        .tasks
        .values()
        .map(|t| t.ports[0].host_port)
        .collect();
    for s in &p2.starts {
        assert!(
            !old.contains(&s.task.ports[0].host_port),
            "{:?} reuses a port of a running task",
            s.task.ports
        );
    }
}

fn status(health: Option<HealthStatus>, container: Option<(&str, HealthStatus)>) -> TaskStatus {
    TaskStatus {
        last_output: None,
        usage: None,
        state: TaskState::Running,
        reason: None,
        exit_code: None,
        since: 1_000,
        restarts: 0,
        health,
        container_health: container
            .map(|(c, h)| [(c.to_string(), h)].into())
            .unwrap_or_default(),
        started_at: None,
    }
}

#[test]
fn an_unhealthy_task_is_replaced_and_a_starting_one_is_kept() {
    let d = fleet(web(8080, 0, NetworkMode::Bridge), 2, 1);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    let mut live = settle(live_after(&p, 2_000));
    live.observed_at = 2_030;
    let ids: Vec<String> = live.state.tasks.keys().cloned().collect();
    live.task_status.insert(
        ids[0].clone(),
        status(
            Some(HealthStatus::Unhealthy),
            Some(("web", HealthStatus::Unhealthy)),
        ),
    );
    // In its start period: UNKNOWN, neither replaced nor counted healthy.
    live.task_status.insert(
        ids[1].clone(),
        status(
            Some(HealthStatus::Unknown),
            Some(("web", HealthStatus::Unknown)),
        ),
    );
    let p2 = plan_ok(&d, &live, &Options::default());
    let stopped: Vec<&str> = p2.stops.iter().map(|s| s.task_id.as_str()).collect();
    assert_eq!(stopped, vec![ids[0].as_str()], "{:?}", p2.stops);
    assert!(
        p2.stops[0]
            .reason
            .contains("container web failed its health check (UNHEALTHY)"),
        "{}",
        p2.stops[0].reason
    );
    assert_eq!(p2.starts.len(), 1, "one replacement");
    assert!(!task_healthy(
        TaskState::Running,
        live.task_status.get(&ids[1]),
        live.observed_at,
        0
    ));
    let healthy = status(Some(HealthStatus::Healthy), None);
    assert!(task_healthy(TaskState::Running, Some(&healthy), 1_000, 600));
}
