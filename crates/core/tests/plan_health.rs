//! The planner acting on the agents' health checks (`Host::health`): an impaired
//! host replaced start-before-stop within `max_draining_percent`, an impaired GPU
//! emptied and closed, `auto_repair = false` keeping everything and saying so.

use gpushare_core::model::*;
use gpushare_core::plan::{Options, Plan};
use gpushare_testkit::plan::*;

fn apply(d: &Desired, live: &Live) -> (Plan, Live) {
    let p = plan_ok(d, live, &Options::default());
    let next = settle(live_after(&p, live.observed_at + 10));
    (p, next)
}

/// Every check ok on every host of `live` (what a healthy agent reports).
fn all_ok(live: &mut Live) {
    for h in live.state.hosts.values_mut() {
        for k in [
            CheckKind::MpsDaemon,
            CheckKind::Gpus,
            CheckKind::ContainerRuntime,
        ] {
            h.health.set(k, CheckStatus::Ok, None, 1);
        }
        for g in &h.gpus {
            h.health.set_gpu(g.index, CheckStatus::Ok, None, 1);
        }
    }
}

fn tasks_on<'a>(live: &'a Live, host: &str) -> Vec<&'a Task> {
    live.state
        .tasks
        .values()
        .filter(|t| t.host == host)
        .collect()
}

#[test]
fn a_host_with_an_impaired_check_is_replaced_start_before_stop_naming_the_check() {
    for (check, why) in [
        (CheckKind::Gpus, "GPU 0 lost (0 of 1 GPUs answer)"),
        (
            CheckKind::ContainerRuntime,
            "docker: the Docker Engine did not answer a ping within 5 s",
        ),
        (CheckKind::DeepDiagnostic, "dcgmi diag -r 1 failed"),
    ] {
        let (_, mut live) = apply(&one_service("g6.xlarge", 4), &empty_live());
        all_ok(&mut live);
        let sick = live.state.hosts.keys().next().unwrap().clone();
        live.state.hosts.get_mut(&sick).unwrap().health.set(
            check,
            CheckStatus::Impaired,
            Some(why.into()),
            5,
        );
        let p = plan_ok(&one_service("g6.xlarge", 4), &live, &Options::default());
        let on_sick = tasks_on(&live, &sick);
        assert!(!on_sick.is_empty());
        assert_eq!(p.moves.len(), on_sick.len(), "{check}: {p:?}");
        let want = format!("health check {check} impaired ({why})");
        assert!(
            p.moves
                .iter()
                .all(|m| m.to.host != sick && m.reason == want),
            "{check}: {:?}",
            p.moves
        );
        assert_eq!(p.retirements.len(), 1);
        assert_eq!(p.retirements[0].host_id, sick);
        assert_eq!(p.retirements[0].reason, want);
    }
}

#[test]
fn statuses_other_than_impaired_change_nothing() {
    let (_, mut live) = apply(&one_service("g6.xlarge", 4), &empty_live());
    all_ok(&mut live);
    for (i, h) in live.state.hosts.values_mut().enumerate() {
        let s = if i % 2 == 0 {
            CheckStatus::Initializing
        } else {
            CheckStatus::InsufficientData
        };
        h.health.set(CheckKind::Gpus, s, Some("NVML".into()), 5);
        h.health.set_gpu(0, s, None, 5);
    }
    let p = plan_ok(&one_service("g6.xlarge", 4), &live, &Options::default());
    assert!(p.is_empty(), "{p:?}");
}

#[test]
fn impaired_hosts_drain_within_max_draining_percent() {
    let (_, mut live) = apply(&one_service("g6.xlarge", 8), &empty_live());
    all_ok(&mut live);
    for h in live.state.hosts.values_mut() {
        h.health.set(
            CheckKind::ContainerRuntime,
            CheckStatus::Impaired,
            Some("x".into()),
            5,
        );
    }
    let mut d = one_service("g6.xlarge", 8);
    d.capacity_providers
        .get_mut("l4")
        .unwrap()
        .max_draining_percent = 50;
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.retirements.len(), 2, "50% of 4 hosts");
    assert_eq!(
        p.notes
            .iter()
            .filter(|n| n.contains("max_draining_percent") && n.contains("container_runtime"))
            .count(),
        2,
        "{:?}",
        p.notes
    );
}

#[test]
fn an_impaired_gpu_of_a_healthy_host_is_emptied_and_takes_no_new_task() {
    // One g6.12xlarge (4 x L4, two 8 GiB tasks per GPU): 8 tasks fill it.
    let (_, mut live) = apply(&one_service("g6.12xlarge", 6), &empty_live());
    all_ok(&mut live);
    let host = live.state.hosts.keys().next().unwrap().clone();
    let bad = live.state.tasks.values().next().unwrap().gpus[0];
    let on_bad: Vec<String> = live
        .state
        .tasks
        .values()
        .filter(|t| t.gpus.contains(&bad))
        .map(|t| t.id.clone())
        .collect();
    assert!(!on_bad.is_empty());
    live.state.hosts.get_mut(&host).unwrap().health.set_gpu(
        bad,
        CheckStatus::Impaired,
        Some("Xid 48 (double-bit ECC error)".into()),
        5,
    );
    // Two more tasks at once: none may land on the bad GPU.
    let d = one_service("g6.12xlarge", 8);
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.retirements.is_empty(), "the host is kept: {p:?}");
    let moved: Vec<&str> = p.moves.iter().map(|m| m.from_task.as_str()).collect();
    assert_eq!(moved.len(), on_bad.len(), "{:?}", p.moves);
    for m in &p.moves {
        assert!(on_bad.contains(&m.from_task));
        assert!(!(m.to.host == host && m.to.gpus.contains(&bad)), "{m:?}");
        assert_eq!(
            m.reason,
            format!("GPU {bad} of host {host} impaired: Xid 48 (double-bit ECC error)")
        );
    }
    for s in &p.starts {
        assert!(
            !(s.task.host == host && s.task.gpus.contains(&bad)),
            "{s:?}"
        );
    }
    // Once moved, the next plan leaves the GPU empty and does nothing more.
    let mut next = settle(live_after(&p, live.observed_at + 10));
    for t in next.state.tasks.values_mut() {
        t.state = TaskState::Running;
    }
    assert!(next
        .state
        .tasks
        .values()
        .all(|t| !(t.host == host && t.gpus.contains(&bad))));
    let again = plan_ok(&d, &next, &Options::default());
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn auto_repair_false_keeps_every_host_and_task_and_says_so() {
    let (_, mut live) = apply(&one_service("g6.12xlarge", 6), &empty_live());
    all_ok(&mut live);
    let host = live.state.hosts.keys().next().unwrap().clone();
    let h = live.state.hosts.get_mut(&host).unwrap();
    h.health.set_gpu(
        1,
        CheckStatus::Impaired,
        Some("row remapping failed".into()),
        5,
    );
    let mut d = one_service("g6.12xlarge", 6);
    d.capacity_providers.get_mut("l4").unwrap().auto_repair = false;
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.moves.is_empty() && p.retirements.is_empty(), "{p:?}");
    assert!(
        p.notes.iter().any(|n| n.contains(&host)
            && n.contains("GPU 1 impaired: row remapping failed")
            && n.contains("auto_repair = false")),
        "{:?}",
        p.notes
    );
    // Now the whole host: MPS daemon and gpus impaired. Still kept, and closed.
    let h = live.state.hosts.get_mut(&host).unwrap();
    h.mps_health = MpsHealth::Impaired;
    h.health.set(
        CheckKind::MpsDaemon,
        CheckStatus::Impaired,
        Some("3 failed probes".into()),
        6,
    );
    h.health.set(
        CheckKind::Gpus,
        CheckStatus::Impaired,
        Some("GPU 1 lost".into()),
        6,
    );
    let mut more = d.clone();
    more.services.get_mut("embedder").unwrap().desired_count = 8;
    let p = plan_ok(&more, &live, &Options::default());
    assert!(p.moves.is_empty() && p.retirements.is_empty(), "{p:?}");
    assert_eq!(p.starts.len(), 2);
    assert!(
        p.starts.iter().all(|s| s.task.host != host),
        "closed: {:?}",
        p.starts
    );
    assert!(p
        .notes
        .iter()
        .any(|n| n.contains("mps_daemon impaired") && n.contains("gpus impaired")));
    // The same with auto_repair on: replaced, the MPS check's words as before.
    let mut on = more.clone();
    on.capacity_providers.get_mut("l4").unwrap().auto_repair = true;
    let p = plan_ok(&on, &live, &Options::default());
    assert_eq!(p.retirements.len(), 1);
    assert_eq!(p.retirements[0].reason, "MPS daemon impaired");
}

#[test]
fn a_replace_asked_by_hand_still_replaces_in_a_pool_that_does_not_repair() {
    // `-replace` marks the host MPS-impaired without an agent check saying so.
    let (_, mut live) = apply(&one_service("g6.xlarge", 4), &empty_live());
    let host = live.state.hosts.keys().next().unwrap().clone();
    live.state.hosts.get_mut(&host).unwrap().mps_health = MpsHealth::Impaired;
    let mut d = one_service("g6.xlarge", 4);
    d.capacity_providers.get_mut("l4").unwrap().auto_repair = false;
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.retirements.len(), 1, "{p:?}");
}
