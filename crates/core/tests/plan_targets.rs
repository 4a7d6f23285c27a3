//! Load balancers in the plan (issue 48): healthy tasks are registered with their
//! service's target group, a task that stops is deregistered first (and drains), a
//! deployment's old task leaves the group only with its stop, after its successor
//! joined; strays on this fleet's hosts are deregistered, others never touched.

use gpushare_core::model::*;
use gpushare_core::plan::{Options, Plan, Step, TargetWhen};
use gpushare_testkit::plan::*;

const ARN: &str =
    "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/web/0123456789abcdef";

fn web(image: &str) -> TaskDefinition {
    let mut c = container("web", image, None);
    c.cpu = 1024;
    c.memory = 512;
    c.port_mappings = vec![PortMapping {
        name: Some("http".into()),
        container_port: 8080,
        host_port: 0,
        protocol: Protocol::Tcp,
    }];
    TaskDefinition {
        containers: vec![c],
        network_mode: NetworkMode::Bridge,
        ..Default::default()
    }
}

fn fleet(count: u32, image: &str) -> Desired {
    let mut d = inference();
    let mut p = pool("g6.12xlarge", 0, 3);
    p.host_port_range = Some("40000-40099".into());
    d.capacity_providers.insert("l4".into(), p);
    d.task_definitions.insert("web".into(), web(image));
    let mut s = service("web", "l4", count);
    s.load_balancers = vec![LoadBalancer {
        target_group_arn: ARN.into(),
        container_name: "web".into(),
        container_port: 8080,
    }];
    s.deployment.min_healthy_seconds = 0;
    d.services.insert("web".into(), s);
    d
}

/// The fleet after `p`, every task running, the group as observed holding `targets`.
fn running(p: &Plan, targets: Vec<(Target, &str)>) -> Live {
    let mut live = settle(live_after(p, 2_000));
    live.target_groups.insert(ARN.into(), group(targets));
    live
}

fn group(targets: Vec<(Target, &str)>) -> TargetGroupObs {
    TargetGroupObs {
        target_type: TargetType::Instance,
        deregistration_delay_seconds: 45,
        targets: targets
            .into_iter()
            .map(|(target, state)| ObservedTarget {
                target,
                state: state.into(),
                reason: None,
            })
            .collect(),
        error: None,
    }
}

/// `d` placed and running, every task a healthy target of the group.
fn registered_fleet(d: &Desired) -> Live {
    let first = plan_ok(d, &empty_live(), &Options::default());
    let mut live = running(&first, vec![]);
    let registered = targets_of(&live)
        .into_iter()
        .map(|t| (t, "healthy"))
        .collect();
    live.target_groups.insert(ARN.into(), group(registered));
    live
}

/// Each running task's target (its host's instance id and its host port).
fn targets_of(live: &Live) -> Vec<Target> {
    live.state
        .tasks
        .values()
        .map(|t| Target {
            id: live.state.hosts[&t.host]
                .instance_id
                .clone()
                .expect("instance id"),
            port: t.ports[0].host_port,
        })
        .collect()
}

#[test]
fn healthy_tasks_are_registered_and_a_registered_fleet_plans_nothing() {
    let d = fleet(3, "web:1");
    let first = plan_ok(&d, &empty_live(), &Options::default());
    // New tasks join once healthy, by the apply that starts them.
    assert_eq!(first.target_registrations.len(), 3);
    assert!(first
        .target_registrations
        .iter()
        .all(|c| matches!(c.when, TargetWhen::AfterHealthy { .. }) && c.port >= 40000));
    // Running and not yet targets: registered at once, with instance id and port.
    let live = running(&first, vec![]);
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(
        p.target_registrations.len(),
        3,
        "{:#?}",
        p.target_registrations
    );
    let mut want = targets_of(&live);
    let mut got: Vec<Target> = p
        .target_registrations
        .iter()
        .map(|c| {
            assert_eq!(c.when, TargetWhen::Now);
            c.target().expect("resolved")
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    assert!(!p.is_empty());
    // Registered (healthy or still in its initial checks): nothing to do.
    let mut live = live;
    let registered = targets_of(&live)
        .into_iter()
        .map(|t| (t, "initial"))
        .collect();
    live.target_groups.insert(ARN.into(), group(registered));
    let again = plan_ok(&d, &live, &Options::default());
    assert!(again.is_empty(), "{again:#?}");
}

#[test]
fn scale_in_deregisters_and_drains_before_each_stop() {
    let d = fleet(3, "web:1");
    let live = registered_fleet(&d);
    let mut d1 = d.clone();
    d1.services.get_mut("web").expect("web").desired_count = 1;
    let p = plan_ok(&d1, &live, &Options::default());
    assert_eq!(p.stops.len(), 2);
    assert_eq!(p.target_deregistrations.len(), 2);
    let steps = p.steps();
    for s in &p.stops {
        let dereg = steps
            .iter()
            .position(|st| matches!(st, Step::DeregisterTarget(c) if c.task_id == s.task_id))
            .expect("deregistered");
        let stop = steps
            .iter()
            .position(|st| matches!(st, Step::Stop(x) if x.task_id == s.task_id))
            .expect("stopped");
        assert!(dereg < stop, "deregistration after the stop: {steps:#?}");
    }
    for c in &p.target_deregistrations {
        assert_eq!((c.when, c.drain_seconds), (TargetWhen::Now, 45));
    }
    let text = gpushare_core::render::plan_text(&p, &live.state, &Default::default());
    assert!(text.contains("Load balancers (target groups):"), "{text}");
    assert!(text.contains("drain (at most 45 s), then stop"), "{text}");
}

#[test]
fn a_deployment_swaps_targets_with_the_stops_that_wait_for_successors() {
    let d = fleet(2, "web:1");
    let live = registered_fleet(&d);
    let p = plan_ok(&fleet(2, "web:2"), &live, &Options::default());
    assert_eq!(p.starts.len(), 2, "{p:#?}");
    assert!(p.stops.iter().all(|s| s.after_healthy.is_some()));
    assert_eq!(p.target_registrations.len(), 2);
    assert!(p
        .target_registrations
        .iter()
        .all(|c| matches!(c.when, TargetWhen::AfterHealthy { .. })));
    assert_eq!(p.target_deregistrations.len(), 2);
    assert!(p
        .target_deregistrations
        .iter()
        .all(|c| c.when == TargetWhen::WithStop));
    // Registrations, deregistrations and the gated stops form one run, in that order.
    let steps = p.steps();
    let first_reg = steps
        .iter()
        .position(|s| matches!(s, Step::RegisterTarget(_)))
        .expect("registration");
    let kinds: Vec<&str> = steps[first_reg..]
        .iter()
        .map(|s| match s {
            Step::RegisterTarget(_) => "register",
            Step::DeregisterTarget(_) => "deregister",
            Step::Stop(_) => "stop",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "register",
            "register",
            "deregister",
            "deregister",
            "stop",
            "stop"
        ]
    );
}

#[test]
fn an_unreadable_group_registers_nothing_but_still_deregisters_before_a_stop() {
    let d = fleet(2, "web:1");
    let first = plan_ok(&d, &empty_live(), &Options::default());
    let mut live = running(&first, vec![]);
    live.target_groups.insert(
        ARN.into(),
        TargetGroupObs {
            error: Some("AccessDenied".into()),
            ..TargetGroupObs::default()
        },
    );
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.target_registrations.is_empty());
    assert!(
        p.notes.iter().any(|n| n.contains("could not be read")),
        "{:?}",
        p.notes
    );
    let mut d1 = d.clone();
    d1.services.get_mut("web").expect("web").desired_count = 1;
    let p = plan_ok(&d1, &live, &Options::default());
    assert_eq!(p.stops.len(), 1);
    assert_eq!(p.target_deregistrations.len(), 1);
    assert_eq!(p.target_deregistrations[0].task_id, p.stops[0].task_id);
}

#[test]
fn strays_on_our_hosts_are_deregistered_and_others_left_alone() {
    let d = fleet(1, "web:1");
    let first = plan_ok(&d, &empty_live(), &Options::default());
    let live0 = running(&first, vec![]);
    let ours = targets_of(&live0).remove(0);
    let stray = Target {
        id: ours.id.clone(),
        port: 40050,
    };
    let foreign = Target {
        id: "i-0ffffffffffffffff".into(),
        port: 80,
    };
    let mut live = live0;
    live.target_groups.insert(
        ARN.into(),
        group(vec![
            (ours.clone(), "healthy"),
            (stray.clone(), "healthy"),
            (foreign, "healthy"),
        ]),
    );
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.target_registrations.is_empty());
    let gone: Vec<Target> = p
        .target_deregistrations
        .iter()
        .filter_map(|c| c.target())
        .collect();
    assert_eq!(gone, vec![stray]);
    // Destroy deregisters every task of the service before it stops.
    let destroy = plan_ok(
        &d,
        &live,
        &Options {
            destroy: true,
            ..Options::default()
        },
    );
    let gone: Vec<Target> = destroy
        .target_deregistrations
        .iter()
        .filter_map(|c| c.target())
        .collect();
    assert!(gone.contains(&ours), "{gone:?}");
    let task = destroy
        .target_deregistrations
        .iter()
        .find(|c| c.target() == Some(ours.clone()))
        .expect("the task's deregistration");
    assert!(
        destroy.stops.iter().any(|s| s.task_id == task.task_id),
        "the deregistration names the task that stops: {task:?}"
    );
}
