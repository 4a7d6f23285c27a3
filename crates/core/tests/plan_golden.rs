//! Golden files of rendered plans (`tests/golden/*.txt`).
//! Regenerate with `EXPECTORATE=overwrite cargo test -p gpushare-core --test plan_golden`.

use gpushare_core::model::*;
use gpushare_core::plan::{Options, Plan};
use gpushare_core::render::{self, RenderOptions};
use gpushare_testkit::plan::*;

fn golden(name: &str, actual: &str) {
    expectorate::assert_contents(format!("tests/golden/{name}"), actual);
}

fn text(p: &Plan, live: &Live) -> String {
    render::plan_text(
        p,
        &live.state,
        &RenderOptions {
            color: false,
            verbose: false,
        },
    )
}

/// The quickstart fleet with `n` embedders, applied and reporting.
fn running(n: u32) -> Live {
    let p = plan_ok(&quickstart(n), &empty_live(), &Options::default());
    settle(live_after(&p, 2_000))
}

#[test]
fn create_from_empty() {
    let live = empty_live();
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    let t = text(&p, &live);
    assert!(!t.contains('\x1b'), "no colour unless asked");
    golden("create_from_empty.txt", &t);
    let json = serde_json::to_string_pretty(&render::show_json(&p.after)).unwrap() + "\n";
    golden("create_from_empty.show.json", &json);
}

#[test]
fn create_from_empty_in_colour() {
    let live = empty_live();
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    let t = render::plan_text(
        &p,
        &live.state,
        &RenderOptions {
            color: true,
            verbose: false,
        },
    );
    assert!(t.contains("\x1b[32m+\x1b[0m"));
    golden("create_from_empty.color.txt", &t);
}

#[test]
fn scale_up() {
    let live = running(2);
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    golden("scale_up.txt", &text(&p, &live));
}

#[test]
fn scale_down() {
    let live = running(6);
    let p = plan_ok(&quickstart(2), &live, &Options::default());
    golden("scale_down.txt", &text(&p, &live));
}

#[test]
fn replace_pool_instance_type() {
    let live = running(2);
    let mut d = quickstart(2);
    d.capacity_providers.get_mut("a10g").unwrap().instance_type = "g5.2xlarge".into();
    d.capacity_providers
        .get_mut("a10g")
        .unwrap()
        .root_volume
        .size_gib = 200;
    d.capacity_providers
        .get_mut("a10g")
        .unwrap()
        .tags
        .insert("team".into(), "ml".into());
    let p = plan_ok(&d, &live, &Options::default());
    golden("replace.txt", &text(&p, &live));
}

#[test]
fn update_in_place_with_new_revision() {
    let live = running(4);
    let mut d = quickstart(4);
    let c = &mut d.task_definitions.get_mut("embedder").unwrap().containers[0];
    c.image = "ghcr.io/example/embedder:1.5".into();
    c.command = vec!["serve".into(), "--port".into(), "8080".into()];
    d.services.get_mut("reranker").unwrap().placement_strategy = PlacementStrategy::Spread;
    let p = plan_ok(&d, &live, &Options::default());
    golden("update_in_place.txt", &text(&p, &live));
}

#[test]
fn unplaced() {
    let live = empty_live();
    let mut d = quickstart(2);
    d.task_definitions
        .insert("llm".into(), whole_td("ghcr.io/example/llm:0.9", 2));
    d.capacity_providers.get_mut("l4").unwrap().max_size = 1;
    d.services.get_mut("embedder").unwrap().desired_count = 20;
    let p = plan_ok(&d, &live, &Options::default());
    assert!(!p.unplaced.is_empty());
    golden("unplaced.txt", &text(&p, &live));
}

#[test]
fn destroy() {
    let live = running(3);
    let p = plan_ok(
        &quickstart(3),
        &live,
        &Options {
            destroy: true,
            ..Options::default()
        },
    );
    golden("destroy.txt", &text(&p, &live));
}

#[test]
fn impaired_host_replacement() {
    let mut live = running(6);
    let sick = live
        .state
        .hosts
        .values_mut()
        .find(|h| h.capacity_provider == "l4")
        .unwrap();
    sick.mps_health = MpsHealth::Impaired;
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    golden("impaired_host.txt", &text(&p, &live));
}

/// Where compute caps used to block packing: by default (caps are limits, as in
/// ECS) the mixed fleet takes the 4 GPUs its memory needs; with the pool's
/// `reserve_compute` it takes 6 (see plan_compute.rs for the hand count).
#[test]
fn compute_caps_pack_by_memory_unless_reserved() {
    let live = empty_live();
    let p = plan_ok(&mixed_caps(false), &live, &Options::default());
    golden("compute_caps_default.txt", &text(&p, &live));
    let p = plan_ok(&mixed_caps(true), &live, &Options::default());
    golden("compute_caps_reserved.txt", &text(&p, &live));
}

#[test]
fn no_changes() {
    let live = running(6);
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    assert!(p.is_empty());
    golden("no_changes.txt", &text(&p, &live));
}

/// The quickstart with its L4 pool on Spot (at most $2.50 an hour per host).
fn quickstart_spot(n: u32, max_price: Option<&str>) -> Desired {
    let mut d = quickstart(n);
    let l4 = d.capacity_providers.get_mut("l4").unwrap();
    l4.market = Market::Spot;
    l4.max_price = max_price.map(str::to_string);
    d
}

/// gpushare knows no Spot prices: a Spot host counts at its max_price, else at the
/// on-demand price, and the cost line says the sums are upper bounds.
#[test]
fn spot_pool_cost_is_an_upper_bound() {
    let live = empty_live();
    let p = plan_ok(&quickstart_spot(6, Some("2.5")), &live, &Options::default());
    let t = text(&p, &live);
    let l4_hosts = p
        .launches
        .iter()
        .filter(|l| l.host.capacity_provider == "l4")
        .count();
    assert!(l4_hosts > 0);
    assert!(p
        .launches
        .iter()
        .all(|l| (l.host.market == Market::Spot) == (l.host.capacity_provider == "l4")));
    assert_eq!(p.cost.spot_hosts_after as usize, l4_hosts);
    assert_eq!(p.cost.spot_hosts_now, 0);
    assert!(t.contains("now $0.00, after at most $"), "{t}");
    let a10g = gpushare_core::catalog::lookup("g5.xlarge")
        .and_then(|t| t.price_per_hour)
        .unwrap();
    let want = a10g * (p.launches.len() - l4_hosts) as f64 + 2.5 * l4_hosts as f64;
    assert!((p.cost.after_per_hour - want).abs() < 1e-9, "{:?}", p.cost);
    assert!(t.contains("after at most $"), "{t}");
    golden("spot_create.txt", &t);

    // No max_price: EC2's default Spot maximum, the on-demand price.
    let od = plan_ok(&quickstart(6), &live, &Options::default());
    let spot = plan_ok(&quickstart_spot(6, None), &live, &Options::default());
    assert_eq!(od.cost.after_per_hour, spot.cost.after_per_hour);
    assert_eq!(od.cost.spot_hosts_after, 0);
    assert!(!render::cost_line(&od).contains("at most"));
    assert!(render::cost_line(&spot).contains("at most"));
}

/// Turning a running on-demand pool to Spot replaces its hosts, a few at a time.
#[test]
fn switching_a_pool_to_spot_replaces_its_hosts() {
    let live = running(6);
    let p = plan_ok(&quickstart_spot(6, None), &live, &Options::default());
    assert!(p
        .retirements
        .iter()
        .any(|r| r.reason.contains("market on_demand replaced by spot")));
    assert!(p.launches.iter().all(|l| l.host.market == Market::Spot));
    assert!(!p.launches.is_empty());
    golden("spot_switch.txt", &text(&p, &live));
}

/// An interrupted Spot host is a terminated instance to observe: the next plan
/// launches a replacement in its pool and places its tasks there again.
#[test]
fn an_interrupted_spot_host_is_replaced_and_its_tasks_placed_again() {
    let d = quickstart_spot(6, Some("2.5"));
    let p = plan_ok(&d, &empty_live(), &Options::default());
    let mut live = settle(live_after(&p, 2_000));
    let gone = live
        .state
        .hosts
        .values()
        .find(|h| h.capacity_provider == "l4")
        .map(|h| h.id.clone())
        .unwrap();
    let on_it: Vec<String> = live
        .state
        .tasks
        .values()
        .filter(|t| t.host == gone)
        .map(|t| t.service.clone())
        .collect();
    assert!(!on_it.is_empty());
    // What observe makes of it: the host terminated, its tasks failed.
    live.state.hosts.get_mut(&gone).unwrap().state = HostState::Terminated;
    for t in live.state.tasks.values_mut().filter(|t| t.host == gone) {
        t.state = TaskState::Failed;
    }
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.launches.len(), 1, "{:?}", p.launches);
    let new = &p.launches[0].host;
    assert_eq!(
        (new.capacity_provider.as_str(), new.market),
        ("l4", Market::Spot)
    );
    let mut placed: Vec<String> = p
        .starts
        .iter()
        .filter(|s| s.task.host == new.id)
        .map(|s| s.task.service.clone())
        .collect();
    let mut want = on_it.clone();
    placed.sort();
    want.sort();
    assert_eq!(placed, want);
    golden("spot_interrupted.txt", &text(&p, &live));
}

/// A host launched as one of the pool's fallback `instance_types` stays; when its
/// type leaves the list it is replaced.
#[test]
fn a_host_of_a_fallback_instance_type_stays_while_the_type_is_listed() {
    let mut d = quickstart(6);
    d.capacity_providers.get_mut("l4").unwrap().instance_types = vec!["g6.24xlarge".into()];
    let p = plan_ok(&d, &empty_live(), &Options::default());
    let mut live = settle(live_after(&p, 2_000));
    let fell_back = live
        .state
        .hosts
        .values_mut()
        .find(|h| h.capacity_provider == "l4")
        .unwrap();
    fell_back.instance_type = "g6.24xlarge".into();
    let id = fell_back.id.clone();
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.is_empty(), "{}", text(&p, &live));
    d.capacity_providers.get_mut("l4").unwrap().instance_types = vec![];
    let p = plan_ok(&d, &live, &Options::default());
    assert!(
        p.retirements.iter().any(|r| r.host_id == id
            && r.reason
                .contains("instance type g6.24xlarge replaced by g6.12xlarge")),
        "{}",
        text(&p, &live)
    );
}

/// With the cloud's facts, the plan fixes each launch: spread over the pool's zones,
/// skipping a zone that refused the instance type lately, and shows where.
#[test]
fn launches_fixed_from_the_clouds_facts() {
    use gpushare_core::facts::{CapacityRefusal, CloudFacts, PoolFacts, SubnetFact};
    let d = quickstart(40);
    let mut live = empty_live();
    live.facts = CloudFacts {
        pools: d
            .capacity_providers
            .keys()
            .map(|name| {
                let subnets = ["a", "b", "c"]
                    .iter()
                    .map(|z| SubnetFact {
                        id: format!("subnet-{z}"),
                        zone: format!("us-east-1{z}"),
                    })
                    .collect();
                let facts = PoolFacts {
                    image_id: "ami-0abc".into(),
                    subnets,
                    instance: None,
                    root_device: None,
                };
                (name.clone(), facts)
            })
            .collect(),
        prices: None,
    };
    // The l4 pool's g6.12xlarge found no capacity in us-east-1a a minute ago.
    live.state.capacity_refusals = vec![CapacityRefusal {
        instance_type: "g6.12xlarge".into(),
        subnet: Some("subnet-a".into()),
        zone: Some("us-east-1a".into()),
        at: live.observed_at - 60,
    }];
    let p = plan_ok(&d, &live, &Options::default());
    let zones = |pool: &str| -> Vec<String> {
        p.launches
            .iter()
            .filter(|l| l.host.capacity_provider == pool)
            .map(|l| l.host.zone.clone().unwrap_or_default())
            .collect()
    };
    assert_eq!(
        zones("l4"),
        ["us-east-1b", "us-east-1c", "us-east-1b", "us-east-1c"]
    );
    assert_eq!(zones("a10g"), ["us-east-1a"]);
    for l in &p.launches {
        assert_eq!(l.host.image_id.as_deref(), Some("ami-0abc"));
        assert_eq!(
            l.host.subnet.as_deref().map(|s| &s[7..]),
            l.host.zone.as_deref().map(|z| &z[9..])
        );
    }
    // The same inputs give the same plan.
    assert_eq!(p, plan_ok(&d, &live, &Options::default()));
    golden("launches_fixed.txt", &text(&p, &live));
}

/// Issue 28: two whole-GPU training tasks on g5.12xlarge hosts printed "one GPU per
/// task $4.02 (sharing costs 182% more)", though no GPU is shared there: the gap was
/// the pool's instance size. The saving is now on the MPS tasks alone, and the size
/// is a right-sizing hint of its own.
#[test]
fn whole_gpu_tasks_share_nothing_and_a_large_type_gets_a_right_sizing_hint() {
    let mut d = quickstart(0);
    d.services.clear();
    d.task_definitions.clear();
    d.capacity_providers.clear();
    d.capacity_providers
        .insert("train".into(), pool("g5.12xlarge", 0, 4));
    d.task_definitions
        .insert("trainer".into(), whole_td("ghcr.io/example/trainer:1", 1));
    d.services
        .insert("trainer".into(), service("trainer", "train", 2));
    let live = empty_live();
    let p = plan_ok(&d, &live, &Options::default());
    let t = text(&p, &live);
    assert_eq!(p.cost.sharing, None, "no MPS task: nothing shared");
    let line = render::cost_line(&p);
    assert!(line.contains("no GPU shared (no MPS tasks)"), "{line}");
    assert!(!line.contains("sharing costs") && !line.contains("one GPU per task"));
    let price = |ty: &str| {
        gpushare_core::catalog::lookup(ty)
            .and_then(|t| t.price_per_hour)
            .unwrap()
    };
    assert_eq!(p.cost.right_sizing.len(), 1, "{:?}", p.cost.right_sizing);
    let r = &p.cost.right_sizing[0];
    assert_eq!(
        (r.pool.as_str(), r.instance_type.as_str(), r.hosts),
        ("train", "g5.12xlarge", 1)
    );
    // One A10G each: two g5.xlarge hosts, the cheapest way to hold two whole GPUs.
    assert_eq!(
        (r.suggested_type.as_str(), r.suggested_hosts),
        ("g5.xlarge", 2)
    );
    assert!((r.suggested_per_hour - 2.0 * price("g5.xlarge")).abs() < 1e-9);
    assert!((r.per_hour - price("g5.12xlarge")).abs() < 1e-9);
    golden("whole_gpus_large_type.txt", &t);

    // The pool on the type the hint names: no hint any more.
    d.capacity_providers
        .insert("train".into(), pool("g5.xlarge", 0, 4));
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.cost.right_sizing.is_empty(), "{:?}", p.cost.right_sizing);
    assert!(render::right_sizing_lines(&p).is_empty());
}

/// The sharing figure compares the MPS tasks on the GPUs they share with one GPU
/// each alone on the cheapest instance type that holds it; the whole-GPU task of
/// the quickstart is left out of it.
#[test]
fn sharing_saving_counts_the_mps_tasks_against_each_alone_on_its_cheapest_type() {
    let live = empty_live();
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    let s = p.cost.sharing.clone().expect("MPS tasks");
    let mps: Vec<_> = p
        .after
        .tasks
        .values()
        .filter(|t| matches!(t.shape.gpu, TaskGpu::Mps { .. }))
        .collect();
    assert_eq!(s.mps_tasks as usize, mps.len());
    let gpus: std::collections::BTreeSet<_> =
        mps.iter().map(|t| (t.host.clone(), t.gpus[0])).collect();
    assert_eq!(s.mps_gpus as usize, gpus.len());
    // The l4 pool: g6.12xlarge, four GPUs.
    let per_gpu = gpushare_core::catalog::lookup("g6.12xlarge")
        .and_then(|t| t.price_per_hour)
        .unwrap()
        / 4.0;
    assert!((s.shared_per_hour - per_gpu * gpus.len() as f64).abs() < 1e-9);
    // The baseline: each MPS task alone on the cheapest L4 type that holds it; the
    // quickstart's MPS tasks all fit a g6.xlarge (4 vCPUs, 16 GiB, one L4).
    let small = gpushare_core::catalog::lookup("g6.xlarge").unwrap();
    assert!(mps
        .iter()
        .all(|t| t.shape.cpu_units <= small.cpu_units() && t.shape.memory_mib <= small.memory_mib));
    let alone = small.price_per_hour.unwrap() * mps.len() as f64;
    assert!((s.alone_per_hour - alone).abs() < 1e-9, "{s:?}");
    let want = (1.0 - s.shared_per_hour / alone) * 100.0;
    assert!((s.saving_percent() - want).abs() < 1e-9);
    assert!(render::cost_line(&p).contains(&format!("(saves {want:.0}%)")));

    // A pool's min_size counts: twelve hosts kept up cost more on any type.
    let mut d = quickstart(6);
    d.capacity_providers
        .insert("l4".into(), pool("g6.12xlarge", 12, 12));
    let p = plan_ok(&d, &live, &Options::default());
    assert!(
        p.cost
            .right_sizing
            .iter()
            .all(|r| r.pool != "l4"
                || (r.suggested_hosts >= 12 && r.suggested_per_hour < r.per_hour)),
        "{:?}",
        p.cost.right_sizing
    );
}

/// Issue 52: the plan of a fleet of more than `PICTURE_MAX_HOSTS` hosts sums the fleet
/// up per pool instead of a line per GPU; `verbose` prints the picture anyway; a small
/// fleet's plan is unchanged (the goldens above).
#[test]
fn a_large_fleet_is_summed_up_unless_verbose() {
    let mut d = quickstart(6);
    d.capacity_providers
        .insert("big".into(), pool("g6.xlarge", 0, 1000));
    d.task_definitions
        .insert("whole".into(), whole_td("ghcr.io/example/whole:1", 1));
    let hosts = render::PICTURE_MAX_HOSTS as u32 + 5;
    d.services
        .insert("whole".into(), service("whole", "big", hosts));
    let live = empty_live();
    let p = plan_ok(&d, &live, &Options::default());
    let summary = text(&p, &live);
    let gpu_lines = |t: &str| t.lines().filter(|l| l.contains(" GPU0 ")).count();
    assert_eq!(gpu_lines(&summary), 0, "no picture: {summary}");
    assert!(
        summary.contains(&format!(
            "  big: {hosts} x g6.xlarge, {hosts} GPUs, {hosts} tasks"
        )),
        "{summary}"
    );
    assert!(summary.contains("`gpushare plan --verbose`"), "{summary}");
    let verbose = render::plan_text(
        &p,
        &live.state,
        &RenderOptions {
            color: false,
            verbose: true,
        },
    );
    assert!(
        gpu_lines(&verbose) > hosts as usize,
        "the picture: {verbose}"
    );
    assert!(!verbose.contains("`gpushare plan --verbose`"));
}
