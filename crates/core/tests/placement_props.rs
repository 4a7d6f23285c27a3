//! Property tests of the placement engine: over random fleets and requests, every
//! outcome is checked against the rules by an independent re-simulation.

use gpushare_core::model::{GpuMode, PlacementStrategy, TaskGpu, TaskShape};
use gpushare_core::placement::{
    place, GpuLoad, HostLoad, HostRef, InstanceShape, PlacementInput, PlacementOutcome, PoolSpec,
    Request,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const MODELS: [&str; 2] = ["A10G", "L4"];

fn shape(i: usize) -> InstanceShape {
    // Two instance types per pool name parity, small enough to fill up.
    let (t, model, gpus, mem) = [
        ("g5.2xlarge", "A10G", 1, 24576),
        ("g5.12xlarge", "A10G", 4, 24576),
        ("g6.xlarge", "L4", 1, 23034),
        ("g6.12xlarge", "L4", 4, 23034),
    ][i % 4];
    InstanceShape {
        instance_type: t.into(),
        gpu_model: model.into(),
        gpu_count: gpus,
        gpu_memory_mib: mem,
        cpu_units: 4096 * gpus,
        memory_mib: 16384 * u64::from(gpus),
        price_per_hour: None,
    }
}

prop_compose! {
    fn gpu_load(index: u32, model: &'static str, mem: u64)(kind in 0..4u8, used in 0..mem, compute in 0..=100u32) -> GpuLoad {
        match kind {
            0 | 1 => GpuLoad { clients: 1, max_clients: 48, index, model: model.into(), memory_mib: mem, used_memory_mib: 0, used_compute_percent: 0, mode: GpuMode::Idle, tasks: 0 },
            2 => GpuLoad { clients: 1, max_clients: 48, index, model: model.into(), memory_mib: mem, used_memory_mib: used, used_compute_percent: compute, mode: GpuMode::Mps, tasks: 1 },
            _ => GpuLoad { clients: 1, max_clients: 48, index, model: model.into(), memory_mib: mem, used_memory_mib: 0, used_compute_percent: 0, mode: GpuMode::Dedicated, tasks: 1 },
        }
    }
}

fn host_strategy(i: usize) -> impl Strategy<Value = HostLoad> {
    (
        0..4usize,
        0..2usize,
        any::<bool>(),
        any::<bool>(),
        0..=100u32,
        0..=100u64,
        prop::collection::vec(any::<u8>(), 0..3),
    )
        .prop_flat_map(
            move |(si, pool, accepting, mps_ok, cpu_pct, mem_pct, svc)| {
                let s = shape(si);
                let model: &'static str = if s.gpu_model == "A10G" {
                    MODELS[0]
                } else {
                    MODELS[1]
                };
                let gpus: Vec<_> = (0..s.gpu_count)
                    .map(|g| gpu_load(g, model, s.gpu_memory_mib))
                    .collect();
                gpus.prop_map(move |gpus| HostLoad {
                    host_ports: Vec::new(),
                    id: format!("h-{i}"),
                    pool: format!("p{pool}"),
                    instance_type: s.instance_type.clone(),
                    zone: None,
                    gpus,
                    cpu_units: s.cpu_units,
                    used_cpu_units: s.cpu_units * cpu_pct / 100,
                    memory_mib: s.memory_mib,
                    used_memory_mib: s.memory_mib * mem_pct / 100,
                    accepting: accepting || i.is_multiple_of(2),
                    mps_ok: mps_ok || i.is_multiple_of(3),
                    services: svc.iter().map(|x| format!("s{}", x % 3)).collect(),
                })
            },
        )
}

fn request_strategy(i: usize) -> impl Strategy<Value = Request> {
    (
        0..3u8,
        1..30000u64,
        0..=100u8,
        1..5u32,
        0..9000u32,
        0..40000u64,
        0..2usize,
        0..3u8,
        0..4u8,
        any::<bool>(),
    )
        .prop_map(
            move |(kind, mem, compute, count, cpu, memory, pool, svc, cons, spread)| {
                // distinct_host is a property of the service (as in ECS): service s0 has it.
                let distinct = svc == 0;
                let gpu = match kind {
                    0 => TaskGpu::None,
                    1 => TaskGpu::Whole { count },
                    _ => TaskGpu::Mps {
                        clients: 1,
                        memory_mib: mem,
                        compute_percent: compute,
                        capped: compute > 0,
                    },
                };
                Request {
                    host_ports: Vec::new(),
                    key: format!("t-{i}"),
                    service: format!("s{svc}"),
                    pool: format!("p{pool}"),
                    shape: TaskShape {
                        cpu_units: cpu,
                        memory_mib: memory,
                        gpu,
                    },
                    strategy: if spread {
                        PlacementStrategy::Spread
                    } else {
                        PlacementStrategy::Binpack
                    },
                    distinct_host: distinct,
                    instance_types: if cons == 1 {
                        vec!["g5.12xlarge".into(), "g6.12xlarge".into()]
                    } else {
                        vec![]
                    },
                    gpu_models: if cons == 2 { vec!["L4".into()] } else { vec![] },
                    // Services s0 and s1 reserve compute, s2 only caps it (the default).
                    reserve_compute: svc != 2,
                }
            },
        )
}

fn input_strategy() -> impl Strategy<Value = PlacementInput> {
    (
        0..6usize,
        0..25usize,
        0..4usize,
        0..4usize,
        0..3u32,
        0..6u32,
        any::<u64>(),
    )
        .prop_flat_map(|(nh, nr, s0, s1, min, extra, seed)| {
            let hosts: Vec<_> = (0..nh).map(host_strategy).collect();
            let reqs: Vec<_> = (0..nr).map(request_strategy).collect();
            (hosts, reqs).prop_map(move |(hosts, requests)| PlacementInput {
                pools: vec![
                    PoolSpec {
                        max_clients: 48,
                        name: "p0".into(),
                        shape: shape(s0),
                        min_size: min,
                        max_size: min + extra,
                        mps_enabled: true,
                    },
                    PoolSpec {
                        max_clients: 48,
                        name: "p1".into(),
                        shape: shape(s1),
                        min_size: 0,
                        max_size: extra,
                        mps_enabled: s1 % 2 == 0,
                    },
                ],
                hosts,
                requests,
                seed,
            })
        })
}

/// A host as the checker sees it: the input's load, or an empty host of a pool.
struct Check {
    pool: String,
    instance_type: String,
    gpus: Vec<GpuLoad>,
    cpu_free: i64,
    mem_free: i64,
    accepting: bool,
    mps_ok: bool,
    services: Vec<String>,
    whole_taken: BTreeSet<u32>,
}

#[allow(
    clippy::too_many_lines,
    reason = "the placement invariants, one after another"
)]
fn check(input: &PlacementInput, out: &PlacementOutcome) -> Result<(), TestCaseError> {
    let mut hosts: BTreeMap<HostRef, Check> = BTreeMap::new();
    for h in &input.hosts {
        hosts.insert(
            HostRef::Existing { id: h.id.clone() },
            Check {
                pool: h.pool.clone(),
                instance_type: h.instance_type.clone(),
                gpus: h.gpus.clone(),
                cpu_free: i64::from(h.cpu_units) - i64::from(h.used_cpu_units),
                mem_free: h.memory_mib as i64 - h.used_memory_mib as i64,
                accepting: h.accepting,
                mps_ok: h.mps_ok,
                services: h.services.clone(),
                whole_taken: BTreeSet::new(),
            },
        );
    }
    for (pool, n) in &out.new_hosts {
        let spec = input.pools.iter().find(|p| &p.name == pool);
        prop_assert!(spec.is_some(), "new hosts in unknown pool {pool}");
        let spec = spec.unwrap();
        let existing = input.hosts.iter().filter(|h| &h.pool == pool).count() as u32;
        prop_assert!(
            existing + n <= spec.max_size.max(spec.min_size),
            "pool {pool}: {existing} + {n} new > max_size {}",
            spec.max_size
        );
        for o in 0..*n {
            let s = &spec.shape;
            hosts.insert(
                HostRef::New {
                    pool: pool.clone(),
                    ordinal: o,
                },
                Check {
                    pool: pool.clone(),
                    instance_type: s.instance_type.clone(),
                    gpus: (0..s.gpu_count)
                        .map(|i| GpuLoad {
                            clients: 1,
                            max_clients: 48,
                            index: i,
                            model: s.gpu_model.clone(),
                            memory_mib: s.gpu_memory_mib,
                            used_memory_mib: 0,
                            used_compute_percent: 0,
                            mode: GpuMode::Idle,
                            tasks: 0,
                        })
                        .collect(),
                    cpu_free: i64::from(s.cpu_units),
                    mem_free: s.memory_mib as i64,
                    accepting: true,
                    mps_ok: spec.mps_enabled,
                    services: vec![],
                    whole_taken: BTreeSet::new(),
                },
            );
        }
    }
    // Every request exactly once, assigned or unplaced.
    let mut seen = BTreeSet::new();
    for a in &out.assignments {
        prop_assert!(seen.insert(a.key.clone()), "{} assigned twice", a.key);
    }
    for u in &out.unplaced {
        prop_assert!(
            seen.insert(u.key.clone()),
            "{} both placed and unplaced",
            u.key
        );
        prop_assert!(!u.reason.is_empty());
    }
    prop_assert_eq!(seen.len(), input.requests.len());
    let by_key: BTreeMap<&str, &Request> =
        input.requests.iter().map(|r| (r.key.as_str(), r)).collect();
    for a in &out.assignments {
        let r = by_key[a.key.as_str()];
        let h = hosts.get_mut(&a.host);
        prop_assert!(h.is_some(), "{} on unknown host {:?}", a.key, a.host);
        let h = h.unwrap();
        prop_assert!(h.accepting, "{} on a host that accepts nothing", a.key);
        prop_assert_eq!(&h.pool, &r.pool);
        prop_assert!(r.instance_types.is_empty() || r.instance_types.contains(&h.instance_type));
        prop_assert!(
            r.gpu_models.is_empty()
                || h.gpus
                    .first()
                    .is_some_and(|g| r.gpu_models.contains(&g.model))
        );
        prop_assert!(
            !(r.distinct_host && h.services.contains(&r.service)),
            "distinct_host broken for {}",
            a.key
        );
        h.services.push(r.service.clone());
        h.cpu_free -= i64::from(r.shape.cpu_units);
        h.mem_free -= r.shape.memory_mib as i64;
        prop_assert!(
            h.cpu_free >= 0 && h.mem_free >= 0,
            "host CPU or memory over for {}",
            a.key
        );
        match r.shape.gpu {
            TaskGpu::None => prop_assert!(a.gpus.is_empty()),
            TaskGpu::Whole { count } => {
                let distinct: BTreeSet<u32> = a.gpus.iter().copied().collect();
                prop_assert_eq!(distinct.len() as u32, count);
                for g in &a.gpus {
                    let gpu = h.gpus.iter_mut().find(|x| x.index == *g);
                    prop_assert!(gpu.is_some());
                    let gpu = gpu.unwrap();
                    prop_assert_eq!(
                        gpu.mode,
                        GpuMode::Idle,
                        "whole GPU {} of {} not idle",
                        g,
                        a.key
                    );
                    gpu.mode = GpuMode::Dedicated;
                    h.whole_taken.insert(*g);
                }
            }
            TaskGpu::Mps {
                memory_mib,
                compute_percent,
                ..
            } => {
                prop_assert!(h.mps_ok, "MPS task {} on a host without MPS", a.key);
                prop_assert_eq!(a.gpus.len(), 1);
                let gpu = h.gpus.iter_mut().find(|x| x.index == a.gpus[0]);
                prop_assert!(gpu.is_some());
                let gpu = gpu.unwrap();
                prop_assert!(
                    gpu.mode != GpuMode::Dedicated,
                    "MPS task {} on a dedicated GPU",
                    a.key
                );
                gpu.mode = GpuMode::Mps;
                gpu.used_memory_mib += memory_mib;
                prop_assert!(
                    gpu.used_memory_mib <= gpu.memory_mib,
                    "GPU memory over for {}",
                    a.key
                );
                // Only reserved shares add up; a cap that is not reserved takes nothing.
                if r.reserve_compute {
                    gpu.used_compute_percent += u32::from(compute_percent);
                    prop_assert!(
                        gpu.used_compute_percent <= 100 || u32::from(compute_percent) == 0,
                        "GPU compute over for {}",
                        a.key
                    );
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_outcome_obeys_the_rules(input in input_strategy()) {
        let out = place(&input);
        check(&input, &out)?;
    }

    #[test]
    fn deterministic_for_a_seed(input in input_strategy()) {
        prop_assert_eq!(place(&input), place(&input));
    }

    #[test]
    fn new_hosts_only_when_nothing_existing_fits(input in input_strategy()) {
        // Every new host beyond min_size carries at least one task.
        let out = place(&input);
        for (pool, n) in &out.new_hosts {
            let spec = input.pools.iter().find(|p| &p.name == pool).unwrap();
            let existing = input.hosts.iter().filter(|h| &h.pool == pool).count() as u32;
            let free_min = spec.min_size.saturating_sub(existing);
            for o in free_min..*n {
                let href = HostRef::New { pool: pool.clone(), ordinal: o };
                prop_assert!(out.assignments.iter().any(|a| a.host == href), "new host {:?} opened for nothing", href);
            }
        }
    }
}

/// Binpack MPS tasks only, small enough that several share a GPU, on hosts of
/// one pool whose CPU binds: batch placement completes GPUs and moves completed
/// GPUs to hosts with room for all of their tasks.
fn packed_input_strategy() -> impl Strategy<Value = PlacementInput> {
    input_strategy()
        .prop_flat_map(|input| {
            let n = input.requests.len();
            let shapes = prop::collection::vec((1..8_000u64, 0..=30u8, 0..3000u32, 0..8192u64), n);
            (Just(input), shapes)
        })
        .prop_map(|(mut input, shapes)| {
            for h in &mut input.hosts {
                h.pool = "p0".into();
                h.accepting = true;
                h.mps_ok = true;
            }
            for (r, (gpu_memory, compute, cpu, memory)) in input.requests.iter_mut().zip(shapes) {
                r.pool = "p0".into();
                r.shape = TaskShape {
                    cpu_units: cpu,
                    memory_mib: memory,
                    gpu: TaskGpu::Mps {
                        clients: 1,
                        memory_mib: gpu_memory,
                        compute_percent: compute,
                        capped: compute > 0,
                    },
                };
                r.strategy = PlacementStrategy::Binpack;
            }
            input
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn packed_gpus_obey_the_rules(input in packed_input_strategy()) {
        let out = place(&input);
        check(&input, &out)?;
        prop_assert_eq!(out, place(&input));
    }
}
