//! Property tests of the planner over random fleets and services.

use gpushare_core::model::*;
use gpushare_core::plan::{plan, Action, Options, Plan};
use gpushare_testkit::plan::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

const TYPES: [&str; 5] = [
    "g6.12xlarge",
    "g5.xlarge",
    "g4dn.12xlarge",
    "g6e.xlarge",
    "g6.2xlarge",
];

#[derive(Debug, Clone)]
enum Need {
    Mps(u64, Option<u8>),
    Whole(u32),
    CpuOnly,
}

fn need() -> impl Strategy<Value = Need> {
    prop_oneof![
        4 => (256u64..12_000, prop::option::of(5u8..60)).prop_map(|(m, p)| Need::Mps(m, p)),
        1 => (1u32..3).prop_map(Need::Whole),
        1 => Just(Need::CpuOnly),
    ]
}

fn td(n: &Need, image: &str) -> TaskDefinition {
    let mut t = match n {
        Need::Mps(m, p) => mps_td(image, *m, *p),
        Need::Whole(c) => whole_td(image, *c),
        Need::CpuOnly => mps_td(image, 1, None),
    };
    if let Need::CpuOnly = n {
        t.containers[0].gpu = None;
    }
    t.containers[0].cpu = 1024;
    t.containers[0].memory = 2048;
    t
}

#[derive(Debug, Clone)]
struct Fleet {
    pools: Vec<(usize, u32, u32)>,
    tds: Vec<Need>,
    services: Vec<(usize, usize, u32, bool, bool)>,
    /// Bit `i` (0-1): pool `p{i}` sets `reserve_compute`; bit `2 + i`: service `s{i}` does.
    reserve: u8,
    seed: u64,
}

fn fleet() -> impl Strategy<Value = Fleet> {
    (
        prop::collection::vec((0..TYPES.len(), 0u32..2, 1u32..8), 1..3),
        prop::collection::vec(need(), 1..4),
        prop::collection::vec(
            (0usize..8, 0usize..8, 0u32..14, any::<bool>(), any::<bool>()),
            1..5,
        ),
        any::<u64>(),
        any::<u8>(),
    )
        .prop_map(|(pools, tds, services, seed, reserve)| Fleet {
            pools,
            tds,
            services,
            reserve,
            seed,
        })
}

fn desired(f: &Fleet) -> Desired {
    let mut d = Desired {
        settings: Settings {
            cluster: "prop".into(),
            seed: f.seed,
            ..Settings::default()
        },
        ..Desired::default()
    };
    for (i, (t, min, max)) in f.pools.iter().enumerate() {
        let mut p = pool(TYPES[*t], *min, (*max).max(*min));
        p.reserve_compute = f.reserve & (1 << i) != 0;
        d.capacity_providers.insert(format!("p{i}"), p);
    }
    for (i, n) in f.tds.iter().enumerate() {
        d.task_definitions.insert(format!("td{i}"), td(n, "img:1"));
    }
    for (i, (t, p, count, spread, distinct)) in f.services.iter().enumerate() {
        let mut s = service(
            &format!("td{}", t % f.tds.len()),
            &format!("p{}", p % f.pools.len()),
            *count,
        );
        if *spread {
            s.placement_strategy = PlacementStrategy::Spread;
        }
        s.distinct_host = *distinct;
        s.reserve_compute = f.reserve & (1 << (2 + i)) != 0;
        d.services.insert(format!("s{i}"), s);
    }
    d
}

fn live0() -> Live {
    Live {
        state: StoreState {
            cluster: "prop".into(),
            ..StoreState::default()
        },
        strays: vec![],
        observed_at: 1_000,
        facts: Default::default(),
        ..Live::default()
    }
}

fn must(d: &Desired, live: &Live, o: &Options) -> Plan {
    plan(d, live, o).expect("generated configurations are valid")
}

/// No GPU over its memory or its reserved compute (the caps of the tasks whose
/// service or pool sets `reserve_compute`, as `s` records them), MPS and dedicated
/// never on one GPU, a dedicated GPU holds one task, CPU and memory respected,
/// every task on a known host.
fn check_fleet(s: &StoreState) -> Result<(), TestCaseError> {
    let mut gpu: BTreeMap<(&str, u32), (u64, u32, u32, u32)> = BTreeMap::new(); // mem, compute, mps, whole
    let mut host: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for t in s
        .tasks
        .values()
        .filter(|t| matches!(t.state, TaskState::Pending | TaskState::Running))
    {
        let h = s.hosts.get(&t.host);
        prop_assert!(h.is_some(), "task {} on unknown host {}", t.id, t.host);
        let e = host.entry(t.host.as_str()).or_default();
        e.0 += u64::from(t.shape.cpu_units);
        e.1 += t.shape.memory_mib;
        for g in &t.gpus {
            let e = gpu.entry((t.host.as_str(), *g)).or_default();
            match t.shape.gpu {
                TaskGpu::Mps {
                    memory_mib,
                    compute_percent,
                    ..
                } => {
                    e.0 += memory_mib;
                    let pool = h.map_or("", |h| h.capacity_provider.as_str());
                    if s.reserves_compute(&t.service, pool) {
                        e.1 += u32::from(compute_percent);
                    }
                    e.2 += 1;
                }
                TaskGpu::Whole { .. } => e.3 += 1,
                TaskGpu::None => prop_assert!(false, "CPU-only task {} holds a GPU", t.id),
            }
        }
        match t.shape.gpu {
            TaskGpu::Whole { count } => prop_assert_eq!(t.gpus.len() as u32, count),
            TaskGpu::Mps { .. } => prop_assert_eq!(t.gpus.len(), 1),
            TaskGpu::None => {}
        }
    }
    for ((h, g), (mem, compute, mps, whole)) in gpu {
        let hh = &s.hosts[h];
        let info = hh.gpus.iter().find(|x| x.index == g);
        prop_assert!(info.is_some(), "GPU {g} not on {h}");
        prop_assert!(
            mem <= info.map_or(0, |i| i.memory_mib),
            "GPU {g} of {h} over its memory"
        );
        prop_assert!(compute <= 100, "GPU {g} of {h} over 100% reserved compute");
        prop_assert!(
            !(mps > 0 && whole > 0),
            "GPU {g} of {h} mixes MPS and dedicated"
        );
        prop_assert!(whole <= 1, "dedicated GPU {g} of {h} holds {whole} tasks");
    }
    for (h, (cpu, mem)) in host {
        let hh = &s.hosts[h];
        prop_assert!(cpu <= u64::from(hh.cpu_units), "{h} over its CPU");
        prop_assert!(mem <= hh.memory_mib, "{h} over its memory");
    }
    Ok(())
}

fn count_of(s: &StoreState, service: &str) -> usize {
    s.tasks
        .values()
        .filter(|t| {
            t.service == service && matches!(t.state, TaskState::Pending | TaskState::Running)
        })
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn deterministic_for_a_seed(f in fleet()) {
        let d = desired(&f);
        let a = serde_json::to_string(&must(&d, &live0(), &Options::default())).unwrap();
        let b = serde_json::to_string(&must(&d, &live0(), &Options::default())).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn after_is_a_valid_fleet_and_replanning_it_is_empty(f in fleet()) {
        let d = desired(&f);
        let p = must(&d, &live0(), &Options::default());
        check_fleet(&p.after)?;
        for (name, s) in &d.services {
            let unplaced = p.unplaced.iter().filter(|u| &u.service == name).count();
            prop_assert_eq!(count_of(&p.after, name) + unplaced, s.desired_count as usize);
        }
        // Re-plan from the state as planned, and from it as the agents report it once running.
        for live in [live_after(&p, 2_000), settle(live_after(&p, 2_000))] {
            let q = must(&d, &live, &Options::default());
            prop_assert!(q.is_empty(), "re-plan not empty: {}", gpushare_core::render::summary_line(&q));
        }
    }

    #[test]
    fn changing_only_desired_count_plans_only_the_delta(f in fleet(), new_counts in prop::collection::vec(0u32..14, 5)) {
        let d = desired(&f);
        let p = must(&d, &live0(), &Options::default());
        let live = settle(live_after(&p, 2_000));
        let mut d2 = d.clone();
        for (i, s) in d2.services.values_mut().enumerate() {
            s.desired_count = new_counts[i];
        }
        let q = must(&d2, &live, &Options::default());
        prop_assert!(q.registrations.is_empty());
        prop_assert!(q.moves.is_empty(), "a running task moved without cause");
        for rc in &q.resource_changes {
            prop_assert_eq!(rc.action, Action::Update);
            prop_assert_eq!(rc.changes.len(), 1);
            prop_assert_eq!(&rc.changes[0].name, "desired_count");
        }
        for (name, s) in &d2.services {
            let before = count_of(&live.state, name);
            let want = s.desired_count as usize;
            let starts = q.starts.iter().filter(|x| &x.task.service == name).count();
            let unplaced = q.unplaced.iter().filter(|u| &u.service == name).count();
            let stops = q.stops.iter().filter(|x| live.state.tasks[&x.task_id].service == *name).count();
            prop_assert_eq!(starts + unplaced, want.saturating_sub(before), "service {}", name);
            prop_assert_eq!(stops, before.saturating_sub(want), "service {}", name);
        }
        // Every running task that is not stopped stays where it is.
        for t in live.state.tasks.values() {
            if q.stops.iter().all(|s| s.task_id != t.id) {
                let a = q.after.tasks.get(&t.id);
                prop_assert!(a.is_some_and(|a| a.host == t.host && a.gpus == t.gpus), "task {} moved", t.id);
            }
        }
        check_fleet(&q.after)?;
    }

    #[test]
    fn no_running_task_moves_without_cause_even_when_consolidating_is_off(f in fleet(), sick in any::<prop::sample::Index>()) {
        let d = desired(&f);
        let p = must(&d, &live0(), &Options::default());
        let mut live = settle(live_after(&p, 2_000));
        let ids: Vec<String> = live.state.hosts.keys().cloned().collect();
        prop_assume!(!ids.is_empty());
        let sick_id = ids[sick.index(ids.len())].clone();
        live.state.hosts.get_mut(&sick_id).unwrap().mps_health = MpsHealth::Impaired;
        let q = must(&d, &live, &Options::default());
        for m in &q.moves {
            prop_assert_eq!(&live.state.tasks[&m.from_task].host, &sick_id, "moved a task off a healthy host");
        }
        for s in &q.stops {
            prop_assert!(false, "stopped {} ({}) with nothing changed", s.task_id, s.reason);
        }
        // The sick host is retired once all its tasks moved, and nothing lands on it.
        let left = q.after.tasks.values().filter(|t| t.host == sick_id).count();
        prop_assert_eq!(q.retirements.iter().any(|r| r.host_id == sick_id), left == 0);
        prop_assert!(q.starts.iter().all(|s| s.task.host != sick_id));
        check_fleet(&q.after)?;
    }

    #[test]
    fn destroy_then_replan_is_empty(f in fleet()) {
        let d = desired(&f);
        let p = must(&d, &live0(), &Options::default());
        let live = settle(live_after(&p, 2_000));
        let o = Options { destroy: true, ..Options::default() };
        let q = must(&d, &live, &o);
        prop_assert!(q.after.tasks.values().all(|t| !matches!(t.state, TaskState::Pending | TaskState::Running)));
        prop_assert!(q.after.hosts.is_empty());
        prop_assert!(q.after.resources.is_empty());
        let r = must(&d, &live_after(&q, 3_000), &o);
        prop_assert!(r.is_empty());
    }

    #[test]
    fn consolidation_stays_within_max_moves_and_never_grows_the_fleet(f in fleet(), max_moves in 0u32..6) {
        let d = desired(&f);
        let p = must(&d, &live0(), &Options::default());
        let live = settle(live_after(&p, 2_000));
        let o = Options { consolidate: true, max_moves, ..Options::default() };
        let q = must(&d, &live, &o);
        prop_assert!(q.moves.len() <= max_moves as usize);
        prop_assert!(q.launches.is_empty() && q.starts.is_empty() && q.stops.is_empty());
        for m in &q.moves {
            let from = live.state.tasks.get(&m.from_task);
            prop_assert!(from.is_some_and(|t| t.state == TaskState::Running && t.host != m.to.host));
        }
        prop_assert!(q.after.hosts.len() <= live.state.hosts.len());
        if !q.moves.is_empty() {
            prop_assert!(!q.retirements.is_empty(), "moves that empty no host");
        }
        check_fleet(&q.after)?;
    }
}
