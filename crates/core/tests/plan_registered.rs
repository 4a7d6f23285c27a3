//! The planner on registered pools (issue 24): hosts that joined by themselves,
//! never launched, retired or terminated by gpushare; tasks placed by the GPUs
//! their agents reported; holds (cordon, drain, remove); sick registered hosts
//! drained and kept; the cost line counting their declared price.

use gpushare_core::model::*;
use gpushare_core::plan::{Options, Plan};
use gpushare_testkit::plan::*;

/// A registered host of pool `pool` that joined with `gpus` (MiB each), healthy.
fn joined(id: &str, pool: &str, gpus: &[u64], now: u64) -> Host {
    Host {
        log_request: None,
        id: id.into(),
        instance_id: None,
        capacity_provider: pool.into(),
        gpu_instance: None,
        instance_type: REGISTERED_TYPE.into(),
        zone: None,
        subnet: None,
        image_id: None,
        state: HostState::Running,
        mps_health: MpsHealth::Healthy,
        gpus: gpus
            .iter()
            .enumerate()
            .map(|(i, m)| GpuInfo::new(i as u32, "NVIDIA L4", *m))
            .collect(),
        cpu_units: 16 * 1024,
        memory_mib: 64 * 1024,
        launch_token: String::new(),
        last_heartbeat: Some(now),
        launched_at: Some(now - 100),
        market: Market::OnDemand,
        max_price: None,
        registration: Some(HostRegistration {
            key_sha256: format!("key-of-{id}"),
            joined_at: now - 100,
            hostname: id.into(),
        }),
        hold: None,
        health: Default::default(),
        launch: None,
    }
}

fn lab_pool(cost: Option<&str>) -> CapacityProvider {
    let mut p = pool("", 0, 0);
    p.hosts = HostSource::Registered;
    p.host_hourly_cost = cost.map(str::to_string);
    p
}

/// A fleet with registered pool `lab` (hosts `big` with one 40 GiB GPU and `small`
/// with one 16 GiB GPU) and a service of `n` MPS tasks of `mib` each.
fn lab(n: u32, mib: u64) -> (Desired, Live) {
    let mut d = Desired {
        settings: Settings {
            cluster: "inference".into(),
            seed: 7,
            ..Settings::default()
        },
        ..Desired::default()
    };
    d.capacity_providers
        .insert("lab".into(), lab_pool(Some("1.5")));
    d.task_definitions
        .insert("emb".into(), mps_td("ghcr.io/example/emb:1", mib, None));
    d.services.insert("emb".into(), service("emb", "lab", n));
    let mut live = empty_live();
    live.observed_at = 10_000;
    for h in [
        joined("big", "lab", &[40960], 10_000),
        joined("small", "lab", &[16384], 10_000),
    ] {
        live.state.hosts.insert(h.id.clone(), h);
    }
    // The pool as applied (what the agent API checks when a host joins).
    let first = plan_ok(&d, &live, &Options::default());
    live.state.resources = first.after.resources.clone();
    (d, live)
}

fn apply(d: &Desired, live: &Live) -> (Plan, Live) {
    let p = plan_ok(d, live, &Options::default());
    let next = settle(live_after(&p, live.observed_at + 10));
    (p, next)
}

fn on(live: &Live, host: &str) -> usize {
    live.state.tasks.values().filter(|t| t.host == host).count()
}

#[test]
fn tasks_go_to_the_hosts_that_joined_by_their_reported_gpu_memory() {
    // 20 GiB tasks: only the 40 GiB GPU holds them (two), whatever the catalogue says.
    let (d, live) = lab(3, 20480);
    let (p, live) = apply(&d, &live);
    assert!(
        p.launches.is_empty(),
        "nothing is launched for a registered pool"
    );
    assert!(p.retirements.is_empty());
    assert_eq!(on(&live, "big"), 2);
    assert_eq!(on(&live, "small"), 0);
    assert_eq!(p.unplaced.len(), 1, "{:?}", p.unplaced);
    let why = &p.unplaced[0].reason;
    assert!(
        why.contains("registered pool") && why.contains("gpushare host setup"),
        "{why}"
    );
    // 8 GiB tasks fit on both.
    let (d, live0) = lab(6, 8192);
    let (p, live) = apply(&d, &live0);
    assert!(p.unplaced.is_empty(), "{:?}", p.unplaced);
    assert_eq!(on(&live, "big") + on(&live, "small"), 6);
    assert_eq!(on(&live, "small"), 2, "16 GiB holds two 8 GiB tasks");
    // The next plan changes nothing, and never retires an empty registered host.
    let (d, mut live) = lab(1, 8192);
    live.state.tasks.clear();
    let (_, live) = apply(&d, &live);
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.retirements.is_empty() && p.launches.is_empty(), "{p:?}");
}

#[test]
fn registered_hosts_cost_what_the_pool_declares() {
    let (d, live) = lab(2, 8192);
    let p = plan_ok(&d, &live, &Options::default());
    assert!((p.cost.after_per_hour - 3.0).abs() < 1e-9, "{:?}", p.cost);
    assert_eq!(p.cost.unpriced_hosts, 0);
    // Two MPS tasks, alone on a registered host (no catalogue type to compare):
    // one GPU each at the declared 1.5 per GPU (one GPU per host): 3.0.
    let sharing = p.cost.sharing.as_ref().expect("MPS tasks are compared");
    assert!((sharing.alone_per_hour - 3.0).abs() < 1e-9, "{:?}", p.cost);
    let mut d0 = d.clone();
    d0.capacity_providers.insert("lab".into(), lab_pool(None));
    let p = plan_ok(&d0, &live, &Options::default());
    assert_eq!(p.cost.after_per_hour, 0.0, "unset: 0");
}

#[test]
fn cordon_moves_nothing_and_drain_moves_start_before_stop() {
    let (d, live) = lab(2, 8192);
    let (_, mut live) = apply(&d, &live);
    let busy = if on(&live, "big") > 0 { "big" } else { "small" };
    let other = if busy == "big" { "small" } else { "big" };
    let before = on(&live, busy);
    live.state.hosts.get_mut(busy).expect("host").hold = Some(Hold::Cordoned);
    let p = plan_ok(&d, &live, &Options::default());
    assert!(
        p.moves.is_empty() && p.stops.is_empty() && p.starts.is_empty(),
        "{p:?}"
    );
    // Drain: every task moves to the other host; the host stays, cordoned.
    live.state.hosts.get_mut(busy).expect("host").hold = Some(Hold::Drain);
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.moves.len(), before, "{p:?}");
    assert!(p.moves.iter().all(|m| m.to.host == other));
    assert!(p.retirements.is_empty());
    let (_, live) = (p.clone(), settle(live_after(&p, live.observed_at + 10)));
    assert_eq!(on(&live, busy), 0);
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.retirements.is_empty(), "a drained host stays: {p:?}");
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("drained by the operator")),
        "{:?}",
        p.notes
    );
}

#[test]
fn remove_drains_first_then_deregisters() {
    let (d, live) = lab(2, 8192);
    let (_, mut live) = apply(&d, &live);
    let busy = if on(&live, "big") > 0 { "big" } else { "small" };
    live.state.hosts.get_mut(busy).expect("host").hold = Some(Hold::Remove);
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.launches.is_empty(), "nothing replaces a registered host");
    // Its tasks move (each started before the old one stops), and only then, last
    // of the plan's steps, is the host deregistered.
    let steps = p.steps();
    let last_move = steps
        .iter()
        .rposition(|s| matches!(s, gpushare_core::plan::Step::Move(_)));
    let retire = steps
        .iter()
        .position(|s| matches!(s, gpushare_core::plan::Step::Retire(r) if r.host_id == busy));
    assert!(last_move.is_some() && retire.is_some(), "{p:?}");
    assert!(last_move < retire);
    assert!(p.moves.iter().all(|m| m.to.host != busy));
    let live = settle(live_after(&p, live.observed_at + 10));
    assert!(!live.state.hosts.contains_key(busy));
    assert_eq!(live.state.tasks.len(), 2, "every task still runs");
}

#[test]
fn an_impaired_registered_host_is_drained_kept_cordoned_and_used_again_when_healthy() {
    let (d, live) = lab(2, 8192);
    let (_, mut live) = apply(&d, &live);
    let busy = if on(&live, "big") > 0 { "big" } else { "small" };
    live.state.hosts.get_mut(busy).expect("host").mps_health = MpsHealth::Impaired;
    let p = plan_ok(&d, &live, &Options::default());
    assert!(!p.moves.is_empty(), "its tasks move: {p:?}");
    assert!(p.launches.is_empty() && p.retirements.is_empty());
    let mut live = settle(live_after(&p, live.observed_at + 10));
    live.state.hosts.get_mut(busy).expect("host").mps_health = MpsHealth::Impaired;
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.retirements.is_empty(), "kept: {p:?}");
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains(busy) && n.contains("until its agent reports healthy")),
        "{:?}",
        p.notes
    );
    // Healthy again: new tasks may go there.
    live.state.hosts.get_mut(busy).expect("host").mps_health = MpsHealth::Healthy;
    let mut d2 = d.clone();
    d2.services.get_mut("emb").expect("svc").desired_count = 6;
    let p = plan_ok(&d2, &live, &Options::default());
    assert!(p.starts.iter().any(|s| s.task.host == busy), "{p:?}");
}

#[test]
fn a_silent_registered_host_is_not_replaced() {
    let (d, live) = lab(2, 8192);
    let (_, mut live) = apply(&d, &live);
    live.observed_at += 1_000;
    let other_ok = live.observed_at;
    for h in live.state.hosts.values_mut() {
        h.last_heartbeat = Some(other_ok);
    }
    let busy = if on(&live, "big") > 0 { "big" } else { "small" };
    live.state.hosts.get_mut(busy).expect("host").last_heartbeat = Some(other_ok - 900);
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.launches.is_empty() && p.retirements.is_empty(), "{p:?}");
    assert!(!p.moves.is_empty());
}

#[test]
fn a_mixed_fleet_sizes_only_the_launched_pool() {
    let (mut d, live) = lab(2, 8192);
    d.capacity_providers
        .insert("l4".into(), pool("g6.xlarge", 1, 2));
    d.task_definitions
        .insert("llm".into(), whole_td("ghcr.io/example/llm:1", 1));
    d.services.insert("llm".into(), service("llm", "l4", 1));
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.launches.len(), 1, "{p:?}");
    assert_eq!(p.launches[0].host.capacity_provider, "l4");
    let live = settle(live_after(&p, live.observed_at + 10));
    assert!(p.cost.after_per_hour > 3.0, "the L4 host plus 2 x 1.5");
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.launches.is_empty() && p.retirements.is_empty(), "{p:?}");
}

/// Issue 45 item 4: a registered pool rendered as what it is. Its diff leaves out
/// the launch settings, the cost line names `host_hourly_cost`, and with its only
/// host impaired the plan names that host (not "no host") and lists the running
/// tasks that cannot move as running, not as "not started".
#[test]
fn a_registered_pool_is_shown_as_one_in_the_plan() {
    let (d, mut live) = lab(2, 8192);
    live.state.hosts.remove("small");
    let mut first = live.clone();
    first.state.resources.clear();
    let p = plan_ok(&d, &first, &Options::default());
    let text = gpushare_core::render::plan_text(&p, &first.state, &Default::default());
    let pool_diff = text
        .split("# capacity_provider.lab will be created")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .expect("the pool's diff");
    assert!(
        pool_diff.contains("hosts") && pool_diff.contains("host_hourly_cost"),
        "{pool_diff}"
    );
    for launch_only in [
        "max_size",
        "min_size",
        "subnets",
        "root_volume",
        "metadata_options",
    ] {
        assert!(
            !pool_diff.contains(launch_only),
            "{launch_only} in {pool_diff}"
        );
    }
    let cost = gpushare_core::render::cost_line(&p);
    assert!(
        cost.starts_with("Cost per hour (registered hosts at their pool's host_hourly_cost)"),
        "{cost}"
    );
    assert!(!cost.contains("us-east-1"), "{cost}");

    // Its only host impaired: the tasks cannot move; they keep running.
    let (_, mut live) = apply(&d, &live);
    assert_eq!(on(&live, "big"), 2);
    live.state.hosts.get_mut("big").expect("host").mps_health = MpsHealth::Impaired;
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.unplaced.len(), 2, "{p:?}");
    for u in &p.unplaced {
        assert!(u.replaces.is_some(), "{u:?}");
        assert!(
            u.reason
                .contains("no host of pool lab takes new tasks now (big is impaired)"),
            "{}",
            u.reason
        );
        assert!(!u.reason.contains("has no host"), "{}", u.reason);
    }
    let text = gpushare_core::render::plan_text(&p, &live.state, &Default::default());
    assert!(
        text.contains("Running tasks that cannot move or be replaced"),
        "{text}"
    );
    assert!(!text.contains("(not started)"), "{text}");
}
