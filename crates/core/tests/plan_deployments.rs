//! Deployments within ECS's bounds: a new revision replaces healthy tasks only once
//! its own tasks are healthy, never takes healthy tasks below `min_healthy_percent`
//! nor running tasks above `max_surge_percent`, and the circuit breaker stops (or
//! rolls back) a revision whose tasks keep failing (docs/deployments.md).

use gpushare_core::model::*;
use gpushare_core::plan::{plan, Options, Plan};
use gpushare_testkit::plan::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// What apply leaves when the successors it started are not healthy in time: new
/// tasks running (since `now`, so not yet healthy), stops at once carried out, the
/// stops that wait for a healthy successor not (the old tasks keep running). With
/// `healthy`, the successors were healthy and every stop was carried out.
fn carry_out(p: &Plan, live: &Live, healthy: bool) -> Live {
    let now = live.observed_at + 5;
    let mut st = live.state.clone();
    st.serial += 1;
    for r in &p.registrations {
        st.revisions
            .entry(r.family.clone())
            .or_default()
            .push(Revision {
                family: r.family.clone(),
                revision: r.revision,
                spec: r.spec.clone(),
            });
    }
    st.resources = p.after.resources.clone();
    for (id, h) in &p.after.hosts {
        st.hosts.entry(id.clone()).or_insert_with(|| h.clone());
    }
    let mut status = live.task_status.clone();
    let since = if healthy {
        now.saturating_sub(3_600)
    } else {
        now
    };
    let mut add = |st: &mut StoreState, t: &Task| {
        let mut t = t.clone();
        t.state = TaskState::Running;
        status.insert(
            t.id.clone(),
            TaskStatus {
                last_output: None,
                usage: None,
                state: TaskState::Running,
                reason: None,
                exit_code: None,
                since,
                restarts: 0,
                health: None,
                container_health: Default::default(),
                started_at: None,
            },
        );
        st.tasks.insert(t.id.clone(), t);
    };
    for s in &p.starts {
        add(&mut st, &s.task);
    }
    for m in &p.moves {
        add(&mut st, &m.to);
        if m.at_once || healthy {
            st.tasks.remove(&m.from_task);
        }
    }
    for s in &p.stops {
        if s.after_healthy.is_none() || healthy {
            st.tasks.remove(&s.task_id);
        }
    }
    // What the agents report; a deployment's record is only what the plans wrote.
    let mut next = settle_reports(Live {
        state: st,
        observed_at: now,
        task_status: status,
        ..Live::default()
    });
    for h in next.state.hosts.values_mut() {
        h.last_heartbeat = Some(now);
    }
    next
}

/// Every task of revision `rev` reported failed by its agent.
fn fail_revision(mut live: Live, rev: u32) -> Live {
    for t in live.state.tasks.values_mut().filter(|t| t.revision == rev) {
        t.state = TaskState::Failed;
        if let Some(s) = live.task_status.get_mut(&t.id) {
            s.state = TaskState::Failed;
            s.reason = Some("essential container main exited with code 1".into());
        }
    }
    live
}

/// A running fleet of `n` healthy tasks of revision 1, and the configuration moved
/// to revision 2 (a new image).
fn rolled(n: u32, min: u32, surge: u32) -> (Desired, Live) {
    let d1 = one_service("g6.12xlarge", n);
    let p = plan_ok(&d1, &empty_live(), &Options::default());
    let live = settle(live_after(&p, 1_000));
    let mut d = d1.clone();
    d.task_definitions.get_mut("embedder").unwrap().containers[0].image = "img:2".into();
    let dep = &mut d.services.get_mut("embedder").unwrap().deployment;
    dep.min_healthy_percent = min;
    dep.max_surge_percent = surge;
    (d, live)
}

/// `d` with the service's container image `image` (a new revision).
fn with_image(d: &Desired, image: &str) -> Desired {
    let mut d = d.clone();
    d.task_definitions
        .get_mut("embedder")
        .expect("the task definition")
        .containers[0]
        .image = image.into();
    d
}

/// `d`'s service with the circuit breaker on (and `rollback`).
fn with_breaker(d: &mut Desired, rollback: bool) {
    d.services
        .get_mut("embedder")
        .expect("the service")
        .deployment
        .circuit_breaker = Some(CircuitBreaker {
        enable: true,
        rollback,
    });
}

fn revisions(live: &Live) -> Vec<u32> {
    let mut v: Vec<u32> = live.state.tasks.values().map(|t| t.revision).collect();
    v.sort();
    v
}

fn deployment(p: &Plan) -> &DeploymentRecord {
    p.after
        .deployment("embedder")
        .expect("the plan records the service's deployment")
}

#[test]
fn old_tasks_stop_only_once_their_successors_are_healthy() {
    let (d, live) = rolled(2, 100, 100);
    let p1 = plan_ok(&d, &live, &Options::default());
    assert_eq!(p1.starts.len(), 2);
    assert_eq!(p1.stops.len(), 2);
    assert!(
        p1.stops.iter().all(|s| s.after_healthy.is_some()),
        "healthy old tasks wait for healthy successors: {:?}",
        p1.stops
    );
    let rec = deployment(&p1);
    assert_eq!(
        (rec.revision, rec.state, rec.previous),
        (2, DeploymentState::InProgress, Some(1))
    );
    // The successors are not healthy in time: both revisions run, and the next plan
    // neither stops the old tasks nor starts more.
    let live2 = carry_out(&p1, &live, false);
    assert_eq!(revisions(&live2), vec![1, 1, 2, 2]);
    let p2 = plan_ok(&d, &live2, &Options::default());
    assert!(p2.stops.is_empty() && p2.starts.is_empty(), "{p2:?}");
    // Once they are healthy, the old tasks go.
    let mut live3 = live2.clone();
    live3.observed_at += 60;
    for h in live3.state.hosts.values_mut() {
        h.last_heartbeat = Some(live3.observed_at);
    }
    let p3 = plan_ok(&d, &live3, &Options::default());
    let stopped: BTreeSet<u32> = p3
        .stops
        .iter()
        .map(|s| live3.state.tasks[&s.task_id].revision)
        .collect();
    assert_eq!(p3.stops.len(), 2, "{p3:?}");
    assert_eq!(stopped, [1].into());
    assert!(p3.starts.is_empty());
}

#[test]
fn failing_successors_trip_the_circuit_breaker_and_the_old_tasks_keep_running() {
    let (mut d, live) = rolled(2, 100, 100);
    with_breaker(&mut d, false);
    let p1 = plan_ok(&d, &live, &Options::default());
    let live2 = fail_revision(carry_out(&p1, &live, false), 2);
    // Two failures of a threshold of 3: cleared, counted, two more started.
    let p2 = plan_ok(&d, &live2, &Options::default());
    assert_eq!(deployment(&p2).failed_tasks, 2);
    assert_eq!(deployment(&p2).state, DeploymentState::InProgress);
    assert_eq!(p2.starts.len(), 2);
    assert!(p2
        .stops
        .iter()
        .filter(|s| s.after_healthy.is_none())
        .all(|s| live2.state.tasks[&s.task_id].revision == 2));
    let live3 = fail_revision(carry_out(&p2, &live2, false), 2);
    let p3 = plan_ok(&d, &live3, &Options::default());
    let rec = deployment(&p3);
    assert_eq!(rec.state, DeploymentState::Failed, "{rec:?}");
    assert_eq!(rec.failed_tasks, 4);
    assert!(
        rec.reason.as_deref().unwrap().contains("circuit breaker"),
        "{rec:?}"
    );
    assert!(
        p3.starts.is_empty(),
        "a failed deployment starts nothing: {p3:?}"
    );
    assert!(p3
        .stops
        .iter()
        .all(|s| s.after_healthy.is_none() && live3.state.tasks[&s.task_id].revision == 2));
    // From then on: the two old tasks run, no plan touches them.
    let live4 = carry_out(&p3, &live3, false);
    assert_eq!(revisions(&live4), vec![1, 1]);
    let p4 = plan_ok(&d, &live4, &Options::default());
    assert!(p4.is_empty(), "{p4:?}");
    assert!(
        p4.notes.iter().any(|n| n.contains("FAILED")),
        "{:?}",
        p4.notes
    );
    // A new revision deploys again.
    let fixed = with_image(&d, "img:3");
    let p5 = plan_ok(&fixed, &live4, &Options::default());
    assert_eq!(p5.starts.len(), 2);
    let rec = deployment(&p5);
    assert_eq!(
        (rec.revision, rec.previous, rec.state),
        (3, Some(1), DeploymentState::InProgress)
    );
}

#[test]
fn with_rollback_the_service_returns_to_the_last_completed_revision() {
    let (mut d, live) = rolled(4, 50, 0);
    with_breaker(&mut d, true);
    // min 50 / surge 0: two old tasks stop at once to make room for two new ones.
    let p1 = plan_ok(&d, &live, &Options::default());
    assert_eq!(p1.starts.len(), 2, "{p1:?}");
    assert_eq!(
        p1.stops
            .iter()
            .filter(|s| s.after_healthy.is_none())
            .count(),
        2
    );
    let live2 = fail_revision(carry_out(&p1, &live, false), 2);
    let p2 = plan_ok(&d, &live2, &Options::default());
    let live3 = fail_revision(carry_out(&p2, &live2, false), 2);
    let p3 = plan_ok(&d, &live3, &Options::default());
    let rec = deployment(&p3);
    assert_eq!(rec.state, DeploymentState::RolledBack, "{rec:?}");
    // The missing tasks come back at revision 1, no new registration.
    assert!(p3.registrations.is_empty());
    assert_eq!(p3.starts.len(), 2, "{p3:?}");
    assert!(p3.starts.iter().all(|s| s.task.revision == 1));
    let live4 = carry_out(&p3, &live3, true);
    assert_eq!(revisions(&live4), vec![1, 1, 1, 1]);
    assert!(plan_ok(&d, &live4, &Options::default()).is_empty());
}

/// Review regression: a rollout that can start nothing (here a retry waiting for its
/// backoff, no circuit breaker) stopped a healthy old task "to make room" for a
/// successor it then did not start. It stops nothing, and says why it waits.
#[test]
fn a_rollout_that_cannot_start_its_successors_stops_nothing() {
    let (d, mut live) = rolled(2, 50, 0);
    let spec = d.task_definitions["embedder"].clone();
    live.state
        .revisions
        .get_mut("embedder")
        .expect("revision 1")
        .push(Revision {
            family: "embedder".into(),
            revision: 2,
            spec,
        });
    let addr = ResourceAddr::new(ResourceKind::Service, "embedder");
    live.state
        .resources
        .get_mut(&addr)
        .expect("service")
        .deployment = Some(DeploymentRecord {
        id: "embedder/1".into(),
        family: "embedder".into(),
        revision: 2,
        state: DeploymentState::InProgress,
        previous: Some(1),
        failed_tasks: 1,
        healthy_tasks: 0,
        pending_tasks: 0,
        started_at: live.observed_at,
        updated_at: live.observed_at,
        reason: Some("exited with code 1".into()),
    });
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.stops.is_empty() && p.starts.is_empty(), "{p:?}");
    assert!(
        p.notes.iter().any(|n| n.contains("start again in")),
        "{:?}",
        p.notes
    );
}

#[test]
fn min_zero_surge_zero_replaces_every_task_at_once() {
    let (d, live) = rolled(2, 0, 0);
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.starts.len(), 2);
    assert_eq!(p.stops.len(), 2);
    assert!(p.stops.iter().all(|s| s.after_healthy.is_none()));
}

#[test]
fn min_100_surge_100_starts_every_successor_beside_the_old_tasks() {
    let (d, live) = rolled(4, 100, 100);
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.starts.len(), 4);
    assert!(p.stops.iter().all(|s| s.after_healthy.is_some()));
}

#[test]
fn a_task_without_the_health_detail_of_an_agent_counts_once_running() {
    // Unhealthy old tasks (running for a moment) are replaced at once.
    let (d, mut live) = rolled(2, 100, 100);
    for t in live.state.tasks.values() {
        live.task_status.insert(
            t.id.clone(),
            TaskStatus {
                last_output: None,
                usage: None,
                state: TaskState::Running,
                reason: None,
                exit_code: None,
                since: live.observed_at,
                restarts: 1,
                health: None,
                container_health: Default::default(),
                started_at: None,
            },
        );
    }
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.starts.len(), 2);
    assert!(
        p.stops.iter().all(|s| s.after_healthy.is_none()),
        "{:?}",
        p.stops
    );
}

/// The counts a plan leaves right after apply, before any successor is healthy.
fn right_after(p: &Plan, live: &Live, d: &Desired) -> (usize, usize) {
    let svc = &d.services["embedder"];
    let stopped_now: BTreeSet<&str> = p
        .stops
        .iter()
        .filter(|s| s.after_healthy.is_none())
        .map(|s| s.task_id.as_str())
        .chain(
            p.moves
                .iter()
                .filter(|m| m.at_once)
                .map(|m| m.from_task.as_str()),
        )
        .collect();
    let kept: Vec<&Task> = live
        .state
        .tasks
        .values()
        .filter(|t| matches!(t.state, TaskState::Running | TaskState::Pending))
        .filter(|t| !stopped_now.contains(t.id.as_str()))
        .collect();
    let healthy = kept
        .iter()
        .filter(|t| {
            t.state == TaskState::Running
                && live.task_status.get(&t.id).is_none_or(|s| {
                    live.observed_at - s.since >= svc.deployment.min_healthy_seconds
                })
        })
        .count();
    (healthy, kept.len() + p.starts.len() + p.moves.len())
}

fn healthy_before(live: &Live, d: &Desired) -> usize {
    let empty = Plan::default();
    right_after(&empty, live, d).0
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Over random service sizes, bounds, successors left by earlier applies and
    /// unhealthy tasks: no plan of a rollout takes healthy tasks below
    /// `min_healthy_percent` of `desired_count` (or below what was healthy, when a
    /// failure already did), nor running tasks above `max_surge_percent` (or above
    /// what ran).
    #[test]
    fn rollouts_stay_within_the_bounds(
        n in 1u32..9,
        min in prop_oneof![Just(0u32), Just(50), Just(75), Just(100)],
        surge in prop_oneof![Just(0u32), Just(25), Just(50), Just(100), Just(200)],
        rounds in 1usize..5,
        healthy_mask in any::<u32>(),
        fail_mask in any::<u32>(),
    ) {
        let (mut d, mut live) = rolled(n, min, surge);
        if fail_mask & 1 == 1 {
            d.services.get_mut("embedder").unwrap().deployment.circuit_breaker =
                Some(CircuitBreaker { enable: true, rollback: healthy_mask & 1 == 1 });
        }
        prop_assume!(d.services["embedder"].deployment.max_running(n) > d.services["embedder"].deployment.min_healthy(n));
        let dep = d.services["embedder"].deployment.clone();
        for round in 0..rounds {
            let p = match plan(&d, &live, &Options::default()) {
                Ok(p) => p,
                Err(e) => panic!("{e}"),
            };
            let before_healthy = healthy_before(&live, &d);
            let before_running = right_after(&Plan::default(), &live, &d).1;
            let (healthy, running) = right_after(&p, &live, &d);
            prop_assert!(
                healthy >= before_healthy.min(dep.min_healthy(n) as usize),
                "round {round}: {healthy} healthy after, {before_healthy} before, min {}: {p:?}",
                dep.min_healthy(n)
            );
            prop_assert!(
                running <= before_running.max(dep.max_running(n) as usize),
                "round {round}: {running} running after, {before_running} before, max {}",
                dep.max_running(n)
            );
            // Successors become healthy or fail at random.
            let ok = healthy_mask & (1 << round) != 0;
            live = carry_out(&p, &live, ok);
            if fail_mask & (1 << round) != 0 {
                live = fail_revision(live, 2);
            }
        }
    }
}

/// Issue 43: a new service's tasks are its first deployment, recorded as ECS
/// records a new service's: IN_PROGRESS with nothing before it, then COMPLETED,
/// written by the plan that finds it done (and only once).
#[test]
fn a_new_service_is_its_first_deployment_and_completed_is_written() {
    let d = one_service("g6.12xlarge", 2);
    let p1 = plan_ok(&d, &empty_live(), &Options::default());
    let rec = deployment(&p1);
    assert_eq!(
        (rec.id.as_str(), rec.revision, rec.state, rec.previous),
        ("embedder/1", 1, DeploymentState::InProgress, None)
    );
    // Running, not healthy yet: nothing to write.
    let live2 = carry_out(&p1, &empty_live(), false);
    let p2 = plan_ok(&d, &live2, &Options::default());
    assert!(p2.is_empty(), "{p2:?}");
    assert_eq!(
        live2.state.deployment("embedder").map(|r| r.state),
        Some(DeploymentState::InProgress)
    );
    // Healthy: the plan writes COMPLETED with the counts, and nothing else.
    let mut live3 = live2.clone();
    live3.observed_at += 60;
    for h in live3.state.hosts.values_mut() {
        h.last_heartbeat = Some(live3.observed_at);
    }
    let p3 = plan_ok(&d, &live3, &Options::default());
    let rec = deployment(&p3);
    assert_eq!(rec.state, DeploymentState::Completed, "{rec:?}");
    assert_eq!((rec.healthy_tasks, rec.pending_tasks), (2, 0));
    assert_eq!(rec.updated_at, live3.observed_at);
    assert!(p3.starts.is_empty() && p3.stops.is_empty(), "{p3:?}");
    assert_eq!(p3.deployments.len(), 1);
    // Only a record: no change to the fleet for a drift check.
    assert!(p3.records_only() && !p1.records_only());
    let mut live4 = live3.clone();
    live4.state.resources = p3.after.resources.clone();
    assert!(plan_ok(&d, &live4, &Options::default()).is_empty());
    // A COMPLETED deployment counts no later failure: a task that fails is replaced,
    // no new deployment begins.
    let one = live4.state.tasks.keys().next().cloned().expect("a task");
    live4.state.tasks.get_mut(&one).expect("task").state = TaskState::Failed;
    let p5 = plan_ok(&d, &live4, &Options::default());
    assert_eq!(p5.starts.len(), 1, "{p5:?}");
    assert!(p5.deployments.is_empty(), "{:?}", p5.deployments);
}

/// Issue 43: the failures of a service's first tasks count against its circuit
/// breaker, as in ECS; FAILED starts no more of them, and with rollback on there
/// is nothing to go back to, which the reason says.
#[test]
fn a_first_deployment_whose_tasks_keep_failing_trips_the_circuit_breaker() {
    let mut d = one_service("g6.12xlarge", 2);
    with_breaker(&mut d, true);
    let p1 = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(p1.starts.len(), 2);
    let live2 = fail_revision(carry_out(&p1, &empty_live(), false), 1);
    let p2 = plan_ok(&d, &live2, &Options::default());
    let rec = deployment(&p2);
    assert_eq!(
        (rec.state, rec.failed_tasks),
        (DeploymentState::InProgress, 2)
    );
    assert_eq!(p2.starts.len(), 2, "{p2:?}");
    let live3 = fail_revision(carry_out(&p2, &live2, false), 1);
    let p3 = plan_ok(&d, &live3, &Options::default());
    let rec = deployment(&p3);
    assert_eq!(rec.state, DeploymentState::Failed, "{rec:?}");
    assert_eq!((rec.id.as_str(), rec.previous), ("embedder/1", None));
    assert_eq!(rec.failed_tasks, 4);
    let why = rec.reason.as_deref().unwrap_or_default();
    assert!(
        why.contains("circuit breaker") && why.contains("nothing to roll back to"),
        "{why}"
    );
    assert!(
        p3.starts.is_empty(),
        "a failed deployment starts nothing: {p3:?}"
    );
    assert!(
        p3.notes.iter().any(|n| n.contains("FAILED")),
        "{:?}",
        p3.notes
    );
    // Later plans start nothing either (the empty host retires), until a new
    // revision is registered.
    let live4 = carry_out(&p3, &live3, false);
    let p4 = plan_ok(&d, &live4, &Options::default());
    assert!(
        p4.starts.is_empty() && p4.stops.is_empty() && p4.deployments.is_empty(),
        "{p4:?}"
    );
    let fixed = with_image(&d, "img:2");
    let p5 = plan_ok(&fixed, &live4, &Options::default());
    assert_eq!(p5.starts.len(), 2, "{p5:?}");
    let rec = deployment(&p5);
    assert_eq!(
        (rec.id.as_str(), rec.revision, rec.state, rec.previous),
        ("embedder/2", 2, DeploymentState::InProgress, None)
    );
}

/// A deployment's UNHEALTHY tasks (their health check failed) are stopped and count
/// as failed tasks of the deployment, as in ECS.
#[test]
fn tasks_stopped_for_failing_their_health_check_count_against_the_breaker() {
    let (mut d, live) = rolled(2, 100, 100);
    with_breaker(&mut d, false);
    let p1 = plan_ok(&d, &live, &Options::default());
    let mut live2 = carry_out(&p1, &live, false);
    for t in live2.state.tasks.values().filter(|t| t.revision == 2) {
        let s = live2.task_status.get_mut(&t.id).expect("status");
        s.health = Some(HealthStatus::Unhealthy);
        s.container_health = [("main".to_string(), HealthStatus::Unhealthy)].into();
    }
    let p2 = plan_ok(&d, &live2, &Options::default());
    let rec = deployment(&p2);
    assert_eq!(rec.failed_tasks, 2, "{rec:?}");
    assert!(
        rec.reason
            .as_deref()
            .is_some_and(|r| r.contains("failed its health check (UNHEALTHY)")),
        "{rec:?}"
    );
    let stopped: BTreeSet<u32> = p2
        .stops
        .iter()
        .filter(|s| s.after_healthy.is_none())
        .map(|s| live2.state.tasks[&s.task_id].revision)
        .collect();
    assert_eq!(stopped, [2].into(), "{:?}", p2.stops);
    assert!(
        p2.stops
            .iter()
            .all(|s| live2.state.tasks[&s.task_id].revision == 2 || s.after_healthy.is_some()),
        "no old task stops without a healthy successor: {:?}",
        p2.stops
    );
}
