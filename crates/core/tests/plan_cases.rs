//! The planner's rules, one scenario each: pinned hosts, pool sizes, rollouts,
//! sick hosts, consolidation, removals.

use gpushare_core::model::*;
use gpushare_core::plan::{Move, Options, Plan};
use gpushare_testkit::plan::*;

/// Plan, then apply it the way agents would report it.
fn apply(d: &Desired, live: &Live, o: &Options) -> (Plan, Live) {
    let p = plan_ok(d, live, o);
    let next = settle(live_after(&p, live.observed_at + 10));
    (p, next)
}

/// One pool of single-GPU L4 hosts and one MPS service of `n` tasks of 8 GiB (two per GPU).
fn small_fleet(n: u32) -> Desired {
    one_service("g6.xlarge", n)
}

fn up_hosts(live: &Live) -> usize {
    live.state
        .hosts
        .values()
        .filter(|h| h.state.is_active())
        .count()
}

#[test]
fn gpu_instance_gets_one_pinned_host_outside_max_size() {
    let mut d = small_fleet(4);
    d.capacity_providers.get_mut("l4").unwrap().max_size = 2;
    d.gpu_instances.insert(
        "reserved".into(),
        GpuInstance {
            capacity_provider: "l4".into(),
            instance_type: Some("g6.2xlarge".into()),
            availability_zone: Some("us-east-1a".into()),
            tags: Default::default(),
        },
    );
    let (p, live) = apply(&d, &empty_live(), &Options::default());
    let pinned: Vec<&Host> = p
        .after
        .hosts
        .values()
        .filter(|h| h.gpu_instance.as_deref() == Some("reserved"))
        .collect();
    assert_eq!(pinned.len(), 1);
    assert_eq!(pinned[0].instance_type, "g6.2xlarge");
    assert_eq!(pinned[0].zone.as_deref(), Some("us-east-1a"));
    // 4 tasks, two per GPU: the pinned host and one pool host carry them; the pool stays within max_size.
    assert!(p.unplaced.is_empty(), "{:?}", p.unplaced);
    let pool_hosts = p
        .after
        .hosts
        .values()
        .filter(|h| h.gpu_instance.is_none())
        .count();
    assert!(pool_hosts <= 2);
    assert!(plan_ok(&d, &live, &Options::default()).is_empty());

    // With no task at all, the pinned host stays; removing the resource retires it.
    let mut idle = d.clone();
    idle.services.get_mut("embedder").unwrap().desired_count = 0;
    let (q, live2) = apply(&idle, &live, &Options::default());
    assert!(q.retirements.iter().all(|r| r.host_id != pinned[0].id));
    assert!(live2.state.hosts.contains_key(&pinned[0].id));
    idle.gpu_instances.clear();
    let r = plan_ok(&idle, &live2, &Options::default());
    assert!(r
        .retirements
        .iter()
        .any(|x| x.host_id == pinned[0].id && x.reason.contains("gpu_instance.reserved")));
}

#[test]
fn min_size_launches_idle_hosts_and_lowering_it_retires_them() {
    let mut d = small_fleet(0);
    d.capacity_providers.get_mut("l4").unwrap().min_size = 2;
    let (p, live) = apply(&d, &empty_live(), &Options::default());
    assert_eq!(p.launches.len(), 2);
    assert!(plan_ok(&d, &live, &Options::default()).is_empty());
    d.capacity_providers.get_mut("l4").unwrap().min_size = 0;
    let q = plan_ok(&d, &live, &Options::default());
    assert_eq!(q.retirements.len(), 2);
    assert!(q.after.hosts.is_empty());
}

#[test]
fn scale_down_empties_the_emptiest_host_and_retires_it() {
    let (_, live) = apply(&small_fleet(5), &empty_live(), &Options::default());
    assert_eq!(up_hosts(&live), 3); // 2 + 2 + 1
    let q = plan_ok(&small_fleet(4), &live, &Options::default());
    assert_eq!(q.stops.len(), 1);
    let stopped = &live.state.tasks[&q.stops[0].task_id];
    let alone = live
        .state
        .tasks
        .values()
        .filter(|t| t.host == stopped.host)
        .count();
    assert_eq!(alone, 1, "the task alone on its host is the one stopped");
    assert_eq!(q.retirements.len(), 1);
    assert_eq!(q.retirements[0].host_id, stopped.host);
}

#[test]
fn rollout_respects_max_surge_and_finishes_over_plans() {
    let (_, mut live) = apply(&small_fleet(4), &empty_live(), &Options::default());
    let mut d = small_fleet(4);
    d.task_definitions.get_mut("embedder").unwrap().containers[0].image = "img:2".into();
    d.services
        .get_mut("embedder")
        .unwrap()
        .deployment
        .max_surge_percent = 50;
    let mut replaced = 0;
    for round in 0..3 {
        let (p, next) = apply(&d, &live, &Options::default());
        if round == 0 {
            assert_eq!(p.registrations.len(), 1);
            assert_eq!(p.registrations[0].revision, 2);
        }
        if p.is_empty() {
            break;
        }
        assert!(p.starts.len() <= 2, "at most 50% of 4 started at once");
        assert_eq!(p.starts.len(), p.stops.len());
        assert!(p.starts.iter().all(|s| s.task.revision == 2));
        replaced += p.starts.len();
        live = next;
    }
    assert_eq!(replaced, 4);
    assert!(live.state.tasks.values().all(|t| t.revision == 2));
    assert!(plan_ok(&d, &live, &Options::default()).is_empty());
}

#[test]
fn silent_host_is_replaced_start_before_stop() {
    let (_, mut live) = apply(&small_fleet(4), &empty_live(), &Options::default());
    let quiet = live.state.hosts.keys().next().unwrap().clone();
    live.observed_at = 10_000;
    for h in live.state.hosts.values_mut() {
        h.last_heartbeat = Some(if h.id == quiet { 1_000 } else { 9_990 });
    }
    // The default timeout (120 s) applies.
    let p = plan_ok(&small_fleet(4), &live, &Options::default());
    let on_quiet: Vec<&Task> = live
        .state
        .tasks
        .values()
        .filter(|t| t.host == quiet)
        .collect();
    assert_eq!(p.moves.len(), on_quiet.len());
    assert!(p
        .moves
        .iter()
        .all(|m| m.to.host != quiet && m.reason.contains("silent")));
    assert_eq!(p.retirements.len(), 1);
    assert_eq!(p.retirements[0].host_id, quiet);
    // With the timeout off (0) nothing happens.
    let off = Options {
        heartbeat_timeout_seconds: 0,
        ..Options::default()
    };
    assert!(plan_ok(&small_fleet(4), &live, &off).is_empty());
}

#[test]
fn a_host_whose_agent_never_reports_within_the_boot_grace_is_replaced() {
    let (_, mut live) = apply(&small_fleet(4), &empty_live(), &Options::default());
    let mute = live.state.hosts.keys().next().unwrap().clone();
    for h in live.state.hosts.values_mut() {
        h.launched_at = Some(1_000);
        h.last_heartbeat = if h.id == mute { None } else { Some(1_590) };
    }
    // Within the grace (10 minutes by default): waiting for the agent is normal.
    live.observed_at = 1_500;
    assert!(plan_ok(&small_fleet(4), &live, &Options::default()).is_empty());
    // Past it, the host that never reported is replaced; the others report on time.
    live.observed_at = 1_650;
    for h in live.state.hosts.values_mut() {
        if h.id != mute {
            h.last_heartbeat = Some(1_640);
        }
    }
    let p = plan_ok(&small_fleet(4), &live, &Options::default());
    assert_eq!(p.retirements.len(), 1, "{p:?}");
    assert_eq!(p.retirements[0].host_id, mute);
    assert!(
        p.moves
            .iter()
            .all(|m| m.to.host != mute && m.reason.contains("since its launch")),
        "{:?}",
        p.moves
    );
    // A host recorded without a launch time (launched before this was recorded) is not judged.
    live.state.hosts.get_mut(&mute).unwrap().launched_at = None;
    assert!(plan_ok(&small_fleet(4), &live, &Options::default()).is_empty());
}

#[test]
fn at_most_max_draining_percent_of_a_pool_is_replaced_at_once() {
    let (_, mut live) = apply(&small_fleet(8), &empty_live(), &Options::default());
    assert_eq!(up_hosts(&live), 4);
    for h in live.state.hosts.values_mut() {
        h.mps_health = MpsHealth::Impaired;
    }
    let mut d = small_fleet(8);
    d.capacity_providers
        .get_mut("l4")
        .unwrap()
        .max_draining_percent = 50;
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.retirements.len(), 2, "50% of 4 hosts");
    assert_eq!(p.moves.len(), 4);
    assert_eq!(
        p.notes
            .iter()
            .filter(|n| n.contains("max_draining_percent"))
            .count(),
        2
    );
    // Nothing new lands on a sick host that waits.
    let waiting: Vec<&String> = live
        .state
        .hosts
        .keys()
        .filter(|id| !p.retirements.iter().any(|r| &r.host_id == *id))
        .collect();
    assert!(p.moves.iter().all(|m| !waiting.contains(&&m.to.host)));
}

#[test]
fn consolidation_moves_tasks_off_light_hosts_within_max_moves() {
    let mut d = small_fleet(4);
    d.services.get_mut("embedder").unwrap().distinct_host = true;
    let (_, live) = apply(&d, &empty_live(), &Options::default());
    assert_eq!(up_hosts(&live), 4);
    d.services.get_mut("embedder").unwrap().distinct_host = false;
    let (p, _) = apply(&d, &live, &Options::default());
    assert!(
        p.moves.is_empty(),
        "no consolidation unless asked: {:?}",
        p.moves
    );
    let o = Options {
        consolidate: true,
        max_moves: 1,
        ..Options::default()
    };
    let q = plan_ok(&d, &live, &o);
    assert_eq!(q.moves.len(), 1);
    assert_eq!(q.retirements.len(), 1);
    let o = Options {
        consolidate: true,
        max_moves: 10,
        ..Options::default()
    };
    let r = plan_ok(&d, &live, &o);
    assert_eq!(r.moves.len(), 2);
    assert_eq!(r.retirements.len(), 2);
    assert_eq!(r.after.hosts.len(), 2);
    assert!(r.moves.iter().all(|m| m.reason.starts_with("consolidate")));
}

/// A plan that changes nothing says what `--consolidate` would save (issue 45): the
/// figures are those of the same plan with consolidation, and a packed fleet gets
/// no such line.
#[test]
fn a_no_changes_plan_names_what_consolidation_would_save() {
    let mut d = small_fleet(4);
    d.services.get_mut("embedder").unwrap().distinct_host = true;
    let (_, live) = apply(&d, &empty_live(), &Options::default());
    d.services.get_mut("embedder").unwrap().distinct_host = false;
    let (_, live) = apply(&d, &live, &Options::default());
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.is_empty(), "{p:?}");
    let hint = p.cost.consolidation.clone().expect("a consolidation hint");
    let with = plan_ok(
        &d,
        &live,
        &Options {
            consolidate: true,
            ..Options::default()
        },
    );
    assert_eq!(hint.moves as usize, with.moves.len());
    assert_eq!(hint.retire as usize, with.retirements.len());
    assert!(hint.retire >= 1);
    let saves = p.cost.after_per_hour - with.cost.after_per_hour;
    assert!((hint.saves_per_hour - saves).abs() < 1e-9);
    let line = gpushare_core::render::summary_line(&p);
    assert!(
        line.starts_with("No changes.") && line.contains(&format!("saving ${saves:.2} per hour")),
        "{line}"
    );
    // Once consolidated, nothing is left to save: no hint.
    let (_, packed) = apply(
        &d,
        &live,
        &Options {
            consolidate: true,
            ..Options::default()
        },
    );
    let p = plan_ok(&d, &packed, &Options::default());
    assert!(
        p.is_empty() && p.cost.consolidation.is_none(),
        "{:?}",
        p.cost
    );
}

#[test]
fn removed_service_and_pool_are_emptied_and_retired() {
    let mut d = small_fleet(2);
    d.capacity_providers
        .insert("a10g".into(), pool("g5.xlarge", 0, 2));
    d.task_definitions
        .insert("llm".into(), whole_td("llm:1", 1));
    d.services.insert("llm".into(), service("llm", "a10g", 1));
    let (_, live) = apply(&d, &empty_live(), &Options::default());
    d.services.remove("llm");
    d.capacity_providers.remove("a10g");
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.stops.len(), 1);
    assert!(p.stops[0].reason.contains("service.llm"));
    assert_eq!(p.retirements.len(), 1);
    assert!(p.after.hosts.values().all(|h| h.capacity_provider == "l4"));
    let deleted: Vec<String> = p
        .resource_changes
        .iter()
        .map(|c| c.addr.to_string())
        .collect();
    assert_eq!(deleted, ["capacity_provider.a10g", "service.llm"]);
}

#[test]
fn service_moved_to_another_pool_is_replaced_there() {
    let mut d = small_fleet(2);
    d.capacity_providers
        .insert("l4big".into(), pool("g6.12xlarge", 0, 2));
    let (_, live) = apply(&d, &empty_live(), &Options::default());
    d.services.get_mut("embedder").unwrap().capacity_provider = "l4big".into();
    let (p, live2) = apply(&d, &live, &Options::default());
    assert_eq!(p.starts.len(), 2);
    assert_eq!(p.stops.len(), 2);
    assert!(p
        .starts
        .iter()
        .all(|s| p.after.hosts[&s.task.host].capacity_provider == "l4big"));
    assert!(p
        .retirements
        .iter()
        .all(|r| live.state.hosts[&r.host_id].capacity_provider == "l4"));
    assert!(plan_ok(&d, &live2, &Options::default()).is_empty());
}

#[test]
fn tasks_on_a_vanished_host_are_stopped_and_replaced() {
    let (_, mut live) = apply(&small_fleet(2), &empty_live(), &Options::default());
    let gone = live.state.hosts.keys().next().unwrap().clone();
    live.state.hosts.get_mut(&gone).unwrap().state = HostState::Terminated;
    let p = plan_ok(&small_fleet(2), &live, &Options::default());
    let lost = live.state.tasks.values().filter(|t| t.host == gone).count();
    assert_eq!(p.stops.len(), lost);
    assert!(p.stops.iter().all(|s| s.reason.contains("gone")));
    assert_eq!(p.starts.len(), lost);
    assert!(p.starts.iter().all(|s| s.task.host != gone));
    // The record of the terminated host is dropped.
    assert_eq!(p.retirements.len(), 1);
    assert_eq!(p.retirements[0].host_id, gone);
    assert!(!p.after.hosts.contains_key(&gone));
}

#[test]
fn strays_are_reported_never_retired() {
    let mut live = empty_live();
    live.strays.push(CloudHost {
        instance_id: "i-0abc".into(),
        host_id: "h-l4-ffffff".into(),
        capacity_provider: "l4".into(),
        instance_type: "g6.xlarge".into(),
        zone: None,
        state: HostState::Running,
        launch_token: "x".into(),
        store_id: None,
    });
    let p = plan_ok(&small_fleet(1), &live, &Options::default());
    assert_eq!(p.strays.len(), 1);
    assert!(p.retirements.is_empty());
    let text = gpushare_core::render::plan_text(&p, &live.state, &Default::default());
    assert!(text.contains("i-0abc"), "{text}");
}

#[test]
fn host_ids_and_launch_tokens_are_derived_from_cluster_serial_and_seed() {
    let a = plan_ok(&small_fleet(3), &empty_live(), &Options::default());
    let mut other = small_fleet(3);
    other.settings.seed = 4;
    let b = plan_ok(&other, &empty_live(), &Options::default());
    let ids = |p: &Plan| {
        p.launches
            .iter()
            .map(|l| l.host.id.clone())
            .collect::<Vec<_>>()
    };
    assert_ne!(ids(&a), ids(&b));
    for l in &a.launches {
        assert!(l.host.id.starts_with("h-l4-") && l.host.id.len() == "h-l4-".len() + 6);
        assert_eq!(
            l.host.launch_token,
            gpushare_core::plan::launch_token("inference", "", &l.host.id)
        );
        assert_eq!(l.host.launch_token.len(), 64);
    }
    for s in &a.starts {
        assert!(s.task.id.starts_with("t-embedder-") && s.task.id.len() == "t-embedder-".len() + 8);
    }
}

/// Regression (issue 15, store takeover): two stores of one cluster name plan the
/// same host ids, but their launch tokens differ by store id; without a store id the
/// token is the one of before store identity.
#[test]
fn launch_tokens_mix_in_the_store_id_and_stay_unchanged_without_one() {
    use gpushare_core::plan::launch_token;
    assert_eq!(
        launch_token("inference", "", "h-l4-abcdef"),
        // sha256 of "inference" 0x1f "h-l4-abcdef" 0x1f, as before store identity.
        "16d8d723d59897ea10c9c28721f613607a4bb881c6c4ed588073d00d0afe3de5"
    );
    let legacy = launch_token("inference", "", "h-l4-abcdef");
    let a = launch_token("inference", "0123456789abcdef", "h-l4-abcdef");
    let b = launch_token("inference", "fedcba9876543210", "h-l4-abcdef");
    assert_ne!(a, legacy);
    assert_ne!(a, b);
    assert_eq!(a.len(), 64);

    let mut team_a = empty_live();
    team_a.state.store_id = "0123456789abcdef".into();
    let mut team_b = empty_live();
    team_b.state.store_id = "fedcba9876543210".into();
    let pa = plan_ok(&small_fleet(2), &team_a, &Options::default());
    let pb = plan_ok(&small_fleet(2), &team_b, &Options::default());
    let ids = |p: &Plan| {
        p.launches
            .iter()
            .map(|l| l.host.id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&pa), ids(&pb), "host ids may coincide");
    for (la, lb) in pa.launches.iter().zip(&pb.launches) {
        assert_eq!(
            la.host.launch_token,
            launch_token("inference", "0123456789abcdef", &la.host.id)
        );
        assert_ne!(la.host.launch_token, lb.host.launch_token);
    }
    assert_eq!(pa.after.store_id, "0123456789abcdef");
}

#[test]
fn another_stores_instances_are_named_in_the_plan_and_never_touched() {
    let mut live = empty_live();
    live.state.store_id = "aaaaaaaaaaaaaaaa".into();
    live.foreign.push(CloudHost {
        instance_id: "i-0f0f".into(),
        host_id: "h-l4-ffffff".into(),
        capacity_provider: "l4".into(),
        instance_type: "g6.xlarge".into(),
        zone: None,
        state: HostState::Running,
        launch_token: "x".into(),
        store_id: Some("bbbbbbbbbbbbbbbb".into()),
    });
    let p = plan_ok(&small_fleet(1), &live, &Options::default());
    assert_eq!(p.foreign.len(), 1);
    assert!(p.strays.is_empty());
    assert!(p.retirements.is_empty());
    let text = gpushare_core::render::plan_text(&p, &live.state, &Default::default());
    assert!(
        text.contains("instance i-0f0f")
            && text.contains(
                "belongs to another state store (store id bbbbbbbbbbbbbbbb): not touched"
            ),
        "{text}"
    );
    let d = plan_ok(
        &small_fleet(1),
        &live,
        &Options {
            destroy: true,
            ..Options::default()
        },
    );
    assert!(
        d.retirements.is_empty(),
        "destroy touches only its own hosts"
    );
    assert_eq!(d.foreign.len(), 1);
}

#[test]
fn an_untagged_instance_adopted_by_observe_gets_a_note() {
    let mut live = empty_live();
    live.state.store_id = "aaaaaaaaaaaaaaaa".into();
    live.adopted.push(CloudHost {
        instance_id: "i-0old".into(),
        host_id: "h-l4-000001".into(),
        capacity_provider: "l4".into(),
        instance_type: "g6.xlarge".into(),
        zone: None,
        state: HostState::Running,
        launch_token: "x".into(),
        store_id: None,
    });
    let p = plan_ok(&small_fleet(1), &live, &Options::default());
    assert!(
        p.notes.iter().any(|n| n.contains("i-0old")
            && n.contains("no gpushare:store-id tag")
            && n.contains("aaaaaaaaaaaaaaaa")),
        "{:?}",
        p.notes
    );
}

#[test]
fn a_sick_pinned_host_waiting_its_turn_gets_no_second_host() {
    let mut d = small_fleet(4);
    d.gpu_instances.insert(
        "reserved".into(),
        GpuInstance {
            capacity_provider: "l4".into(),
            instance_type: None,
            availability_zone: None,
            tags: Default::default(),
        },
    );
    let (_, mut live) = apply(&d, &empty_live(), &Options::default());
    assert!(live.state.hosts.len() >= 2);
    for h in live.state.hosts.values_mut() {
        h.mps_health = MpsHealth::Impaired;
    }
    let (p, live2) = apply(&d, &live, &Options::default());
    assert!(
        !p.notes.is_empty(),
        "some sick host waits (max_draining_percent 25)"
    );
    let pinned = |l: &Live| {
        l.state
            .hosts
            .values()
            .filter(|h| h.gpu_instance.is_some())
            .count()
    };
    assert_eq!(pinned(&live2), 1);
    // Every plan until the fleet is healthy keeps exactly one pinned host.
    let mut live = live2;
    for _ in 0..6 {
        let (_, next) = apply(&d, &live, &Options::default());
        assert_eq!(pinned(&next), 1);
        live = next;
    }
    assert!(live
        .state
        .hosts
        .values()
        .all(|h| h.mps_health == MpsHealth::Healthy));
    assert!(plan_ok(&d, &live, &Options::default()).is_empty());
}

#[test]
fn a_failed_task_is_cleared_and_replaced() {
    let (_, mut live) = apply(&small_fleet(3), &empty_live(), &Options::default());
    let failed = live.state.tasks.keys().next().unwrap().clone();
    live.state.tasks.get_mut(&failed).unwrap().state = TaskState::Failed;
    let (p, next) = apply(&small_fleet(3), &live, &Options::default());
    assert_eq!(p.stops.len(), 1);
    assert_eq!(p.stops[0].task_id, failed);
    assert!(p.stops[0].reason.starts_with("it failed"));
    assert_eq!(p.starts.len(), 1);
    assert!(plan_ok(&small_fleet(3), &next, &Options::default()).is_empty());
}

/// EC2's own figures for the pool's instance type (gathered facts) override the
/// catalogue's for new hosts: a GPU the cloud reports with 40 GiB takes four 8 GiB
/// tasks, not two, and the plan says why.
#[test]
fn the_clouds_instance_figures_override_the_catalogues() {
    use gpushare_core::facts::{CloudFacts, InstanceFacts, PoolFacts};
    let d = small_fleet(8);
    let catalogue = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(
        catalogue.launches.len(),
        4,
        "two 8 GiB tasks per 22888 MiB L4"
    );
    let mut live = empty_live();
    live.facts = CloudFacts {
        pools: [(
            "l4".to_string(),
            PoolFacts {
                image_id: "ami-1".into(),
                subnets: vec![],
                instance: Some(InstanceFacts {
                    instance_type: "g6.xlarge".into(),
                    gpu_count: 1,
                    gpu_memory_mib: 40_960,
                    vcpus: 8,
                    memory_mib: 32_768,
                }),
                root_device: None,
            },
        )]
        .into(),
        prices: None,
    };
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.launches.len(), 2, "four per 40 GiB GPU");
    let h = &p.launches[0].host;
    assert_eq!(
        (h.gpus[0].memory_mib, h.cpu_units, h.memory_mib),
        (40_960, 8 * 1024, 32_768)
    );
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("40960 MiB per GPU (catalogue: 22888)")),
        "{:?}",
        p.notes
    );
    // Figures for another type (a stale gather) are not used.
    if let Some(f) = live
        .facts
        .pools
        .get_mut("l4")
        .and_then(|p| p.instance.as_mut())
    {
        f.instance_type = "g6.2xlarge".into();
    }
    assert_eq!(plan_ok(&d, &live, &Options::default()).launches.len(), 4);
}

/// A host retired with a task record still on it (here a failed task, which destroy's
/// own stops pass over): the plan stops the record before it retires the host, so
/// apply never retires a host with tasks (it refuses to).
#[test]
fn a_retired_hosts_tasks_are_stopped_before_its_retire() {
    let d = small_fleet(2);
    let (_, mut live) = apply(&d, &empty_live(), &Options::default());
    let t = live.state.tasks.values_mut().next().expect("a task");
    t.state = TaskState::Failed;
    let (failed, host) = (t.id.clone(), t.host.clone());
    let p = plan_ok(
        &d,
        &live,
        &Options {
            destroy: true,
            ..Options::default()
        },
    );
    let steps = p.steps();
    let stop = steps
        .iter()
        .position(|s| matches!(s, gpushare_core::plan::Step::Stop(s) if s.task_id == failed))
        .expect("the failed task's record is stopped");
    let retire = steps
        .iter()
        .position(|s| matches!(s, gpushare_core::plan::Step::Retire(r) if r.host_id == host))
        .expect("its host is retired");
    assert!(stop < retire, "stop {stop} before retire {retire}");
    assert_eq!(p.after.tasks.len(), 0);
}

/// Without the cloud's facts the plan still fixes every launch, from the
/// configuration: the pool's image, its subnets spread in order, and it says so.
#[test]
fn without_facts_launches_are_fixed_from_the_configuration() {
    let mut d = small_fleet(6);
    let pool = d.capacity_providers.get_mut("l4").expect("pool");
    pool.image = Some("ami-cfg".into());
    pool.subnets = vec!["subnet-x".into(), "subnet-y".into()];
    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert!(p.launches.len() >= 2, "{}", p.launches.len());
    for l in &p.launches {
        assert_eq!(l.basis, gpushare_core::plan::LaunchBasis::Configuration);
        assert_eq!(l.host.image_id.as_deref(), Some("ami-cfg"));
        assert_eq!(l.pool, d.capacity_providers["l4"]);
        assert_eq!(l.root_device, None);
    }
    let subnets: Vec<_> = p
        .launches
        .iter()
        .map(|l| l.host.subnet.clone().expect("a subnet"))
        .collect();
    assert_eq!(subnets[..2], ["subnet-x", "subnet-y"]);
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("capacity_provider.l4: the cloud gave no launch facts")),
        "{:?}",
        p.notes
    );
}

/// Issue 44: when more than `unhealthy_threshold_percent` of a pool's hosts are
/// silent at once (a store outage, a controller cut off, a network fault), none is
/// replaced for being silent and the plan says why; one silent host of four still is.
#[test]
fn a_mass_silence_replaces_no_host_but_one_silent_host_is_replaced() {
    let (_, live) = apply(&small_fleet(8), &empty_live(), &Options::default());
    assert_eq!(up_hosts(&live), 4);
    let ids: Vec<String> = live.state.hosts.keys().cloned().collect();
    let silence = |quiet: &[String]| {
        let mut l = live.clone();
        l.observed_at = 10_000;
        for h in l.state.hosts.values_mut() {
            h.last_heartbeat = Some(if quiet.contains(&h.id) { 1_000 } else { 9_990 });
        }
        l
    };
    let three = silence(&ids[..3]);
    let p = plan_ok(&small_fleet(8), &three, &Options::default());
    assert!(
        p.moves.is_empty() && p.retirements.is_empty() && p.launches.is_empty(),
        "{p:?}"
    );
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("3 of its 4 hosts are silent or impaired")),
        "{:?}",
        p.notes
    );
    let one = silence(&ids[..1]);
    let p = plan_ok(&small_fleet(8), &one, &Options::default());
    assert_eq!(p.retirements.len(), 1, "{p:?}");
    assert_eq!(p.retirements[0].host_id, ids[0]);
    assert!(!p.moves.is_empty());
    // A small pool's dead host is replaced whatever the share (the budget holds from 3
    // hosts up): one silent host of one.
    let (_, small) = apply(&small_fleet(2), &empty_live(), &Options::default());
    let mut small = small;
    small.observed_at = 10_000;
    for h in small.state.hosts.values_mut() {
        h.last_heartbeat = Some(1_000);
    }
    let p = plan_ok(&small_fleet(2), &small, &Options::default());
    assert_eq!(p.retirements.len(), 1, "{p:?}");
    // The budget off (100): three silent hosts are replaced as before.
    let mut off = small_fleet(8);
    off.capacity_providers
        .get_mut("l4")
        .unwrap()
        .unhealthy_threshold_percent = 100;
    let p = plan_ok(&off, &three, &Options::default());
    assert!(!p.retirements.is_empty(), "{p:?}");
    // `gpushare host replace` (a Remove hold) forces one past the budget: its tasks
    // start elsewhere and it is retired. (Two silent hosts of four are then no more
    // than the threshold's half, so the budget lets the plan replace another; the
    // third stays while one is draining, max_draining_percent.)
    let mut forced = three.clone();
    forced.state.hosts.get_mut(&ids[0]).expect("host").hold = Some(Hold::Remove);
    let p = plan_ok(&small_fleet(8), &forced, &Options::default());
    let retired: Vec<&str> = p.retirements.iter().map(|r| r.host_id.as_str()).collect();
    assert!(retired.contains(&ids[0].as_str()), "{p:?}");
    assert!(retired.len() < 3, "{p:?}");
    assert!(!p.moves.is_empty(), "{p:?}");
}

#[test]
fn a_spot_notice_drains_its_host_at_once_and_starts_a_replacement() {
    let mut d = small_fleet(8);
    d.capacity_providers
        .get_mut("l4")
        .expect("pool")
        .max_draining_percent = 25;
    let (_, mut live) = apply(&d, &empty_live(), &Options::default());
    assert_eq!(up_hosts(&live), 4);
    let ids: Vec<String> = live.state.hosts.keys().cloned().collect();
    // One host impaired takes the pool's whole draining budget (one host of four);
    // the noticed host is drained beside it all the same.
    live.state.hosts.get_mut(&ids[0]).expect("host").mps_health = MpsHealth::Impaired;
    live.state
        .hosts
        .get_mut(&ids[1])
        .expect("host")
        .health
        .notice = Some(HostNotice {
        kind: NoticeKind::SpotInterruption,
        at: "2026-12-07T18:20:00Z".into(),
        detail: Some("terminate".into()),
        source: "imds".into(),
    });
    let p = plan_ok(&d, &live, &Options::default());
    let retired: Vec<&str> = p.retirements.iter().map(|r| r.host_id.as_str()).collect();
    assert!(retired.contains(&ids[1].as_str()), "{p:?}");
    assert!(retired.contains(&ids[0].as_str()), "{p:?}");
    // The noticed host's tasks move (start before stop) onto a host launched now,
    // and the plan says why.
    let from_noticed: Vec<&Move> = p
        .moves
        .iter()
        .filter(|m| {
            live.state
                .tasks
                .get(&m.from_task)
                .is_some_and(|t| t.host == ids[1])
        })
        .collect();
    assert_eq!(from_noticed.len(), 2, "{:?}", p.moves);
    assert!(from_noticed.iter().all(|m| m.reason
        == "Spot interruption notice at 2026-12-07T18:20:00Z (terminate; from imds)"
        && m.to.host != ids[1]));
    assert!(!p.launches.is_empty(), "{p:?}");
    // Without the notice, the budget holds the second host back.
    live.state
        .hosts
        .get_mut(&ids[1])
        .expect("host")
        .health
        .notice = None;
    let p = plan_ok(&d, &live, &Options::default());
    assert!(!p.retirements.iter().any(|r| r.host_id == ids[1]), "{p:?}");
}
