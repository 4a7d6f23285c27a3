//! What a compute cap means (`max_compute_percent`), worked out by hand.
//!
//! By default, as in ECS, a cap is a limit the host enforces
//! (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`), not a reservation: MPS tasks are placed
//! by GPU memory alone. With `reserve_compute = true` on the service or on its
//! pool, the caps of the reserving tasks on one GPU add up to at most 100.

mod placement_support;

use gpushare_core::model::*;
use gpushare_core::placement::{place, HostRef, PlacementInput};
use gpushare_core::plan::{Options, Plan};
use gpushare_core::render;
use gpushare_testkit::plan::*;
use std::collections::BTreeSet;

/// A one-GPU host (1000 MiB) and two tasks of 400 MiB capped at 60 %.
fn two_sixties(reserve_compute: bool) -> PlacementInput {
    let gpu = placement_support::idle_gpu(0, "L4", 1000);
    let mut requests = Vec::new();
    for key in ["a", "b"] {
        let mut r = placement_support::request(
            TaskGpu::Mps {
                clients: 1,
                memory_mib: 400,
                compute_percent: 60,
                capped: true,
            },
            &[],
        );
        r.key = key.into();
        r.reserve_compute = reserve_compute;
        requests.push(r);
    }
    PlacementInput {
        pools: vec![],
        hosts: vec![placement_support::host("h", "t", vec![gpu])],
        requests,
        seed: 1,
    }
}

#[test]
fn two_tasks_capped_at_60_share_a_gpu_unless_compute_is_reserved() {
    // Memory: 400 + 400 = 800 <= 1000, so by memory both fit the one GPU.
    let out = place(&two_sixties(false));
    assert!(out.unplaced.is_empty(), "{:?}", out.unplaced);
    assert_eq!(out.assignments.len(), 2);
    for a in &out.assignments {
        assert_eq!(a.host, HostRef::Existing { id: "h".into() });
        assert_eq!(a.gpus, vec![0]);
    }
    // Reserved: 60 + 60 = 120 > 100, so only one fits; no pool to grow.
    let out = place(&two_sixties(true));
    assert_eq!(out.assignments.len(), 1, "{out:?}");
    assert_eq!(out.unplaced.len(), 1);
    assert!(
        out.unplaced[0]
            .reason
            .contains("has 60% compute left to reserve (reserve_compute)"),
        "{}",
        out.unplaced[0].reason
    );
}

/// A GPU whose reserved compute already passes 100 (130: `reserve_compute` turned
/// on over tasks packed by memory) takes a task that reserves nothing, by memory,
/// and no task that reserves even 10 %.
#[test]
fn an_over_reserved_gpu_still_takes_tasks_that_reserve_nothing() {
    let mut gpu = placement_support::idle_gpu(0, "L4", 1000);
    gpu.mode = GpuMode::Mps;
    gpu.used_memory_mib = 600;
    gpu.used_compute_percent = 130;
    gpu.tasks = 3;
    let input = |reserve_compute: bool| {
        let mut r = placement_support::request(
            TaskGpu::Mps {
                clients: 1,
                memory_mib: 300,
                compute_percent: 10,
                capped: true,
            },
            &[],
        );
        r.key = "t".into();
        r.reserve_compute = reserve_compute;
        PlacementInput {
            pools: vec![],
            hosts: vec![placement_support::host("h", "t", vec![gpu.clone()])],
            requests: vec![r],
            seed: 1,
        }
    };
    let out = place(&input(false));
    assert_eq!(out.assignments.len(), 1, "{out:?}");
    assert_eq!(out.assignments[0].gpus, vec![0]);
    let out = place(&input(true));
    assert!(out.assignments.is_empty(), "{out:?}");
    assert_eq!(out.unplaced.len(), 1);
}

/// One pool of one-L4 hosts (g6.xlarge: 4 vCPUs, 16 GiB, 22888 MiB of GPU
/// memory) and a service of two tasks of 4096 MiB capped at 60 %, each 1 vCPU
/// and 2 GiB: two fit one host by CPU, memory and GPU memory.
fn sixties(service_reserves: bool, pool_reserves: bool) -> Desired {
    let mut d = Desired {
        settings: Settings {
            cluster: "inference".into(),
            seed: 7,
            ..Settings::default()
        },
        ..Desired::default()
    };
    let mut p = pool("g6.xlarge", 0, 2);
    p.reserve_compute = pool_reserves;
    d.capacity_providers.insert("l4".into(), p);
    let mut td = mps_td("ghcr.io/example/worker:1", 4096, Some(60));
    td.containers[0].cpu = 1024;
    td.containers[0].memory = 2048;
    d.task_definitions.insert("worker".into(), td);
    let mut s = service("worker", "l4", 2);
    s.reserve_compute = service_reserves;
    d.services.insert("worker".into(), s);
    d
}

/// The (host, GPU) pairs the plan's tasks run on.
fn gpus_used(p: &Plan) -> BTreeSet<(String, u32)> {
    p.after
        .tasks
        .values()
        .flat_map(|t| t.gpus.iter().map(|g| (t.host.clone(), *g)))
        .collect()
}

#[test]
fn the_planner_packs_two_60_percent_tasks_on_one_gpu_by_default() {
    let p = plan_ok(&sixties(false, false), &empty_live(), &Options::default());
    assert!(p.unplaced.is_empty(), "{:?}", p.unplaced);
    assert_eq!(p.launches.len(), 1);
    assert_eq!(gpus_used(&p).len(), 1);
    // Nothing is reserved: the GPU shows 0 % reserved and 120 % of caps.
    let show = render::show_json(&p.after);
    let gpu = &show["hosts"][0]["gpus"][0];
    assert_eq!(gpu["allocated_compute_percent"], 0);
    assert_eq!(gpu["compute_cap_percent"], 120);
}

#[test]
fn reserve_compute_on_the_service_or_the_pool_keeps_them_apart() {
    for (service_reserves, pool_reserves) in [(true, false), (false, true), (true, true)] {
        let d = sixties(service_reserves, pool_reserves);
        let p = plan_ok(&d, &empty_live(), &Options::default());
        let who = format!("service {service_reserves}, pool {pool_reserves}");
        assert!(p.unplaced.is_empty(), "{who}: {:?}", p.unplaced);
        assert_eq!(p.launches.len(), 2, "{who}");
        assert_eq!(gpus_used(&p).len(), 2, "{who}");
        let show = render::show_json(&p.after);
        for h in show["hosts"].as_array().expect("hosts") {
            assert_eq!(h["gpus"][0]["allocated_compute_percent"], 60, "{who}");
            assert_eq!(h["gpus"][0]["compute_cap_percent"], 60, "{who}");
        }
    }
    // At max_size 1 the second task cannot be placed, and the reason says why.
    let mut d = sixties(true, false);
    if let Some(p) = d.capacity_providers.get_mut("l4") {
        p.max_size = 1;
    }
    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(p.unplaced.len(), 1, "{:?}", p.unplaced);
    assert!(
        p.unplaced[0].reason.contains("compute"),
        "{}",
        p.unplaced[0].reason
    );
}

#[test]
fn memory_alone_decides_the_gpu_count_of_a_mixed_fleet_by_default() {
    let gpu_mib = gpushare_core::catalog::lookup("g6.12xlarge")
        .expect("g6.12xlarge is in the catalogue")
        .gpu_memory_mib;
    let d = mixed_caps(false);
    let total: u64 = d
        .services
        .values()
        .map(|s| {
            let td = &d.task_definitions[&s.task_definition];
            let m: u64 = td
                .containers
                .iter()
                .filter_map(|c| c.gpu.as_ref()?.mps.as_ref().map(|m| m.memory))
                .sum();
            m * u64::from(s.desired_count)
        })
        .sum();
    let by_memory = total.div_ceil(gpu_mib) as usize;
    assert_eq!(by_memory, 4);

    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert!(p.unplaced.is_empty(), "{:?}", p.unplaced);
    assert_eq!(gpus_used(&p).len(), by_memory);
    assert_eq!(p.launches.len(), 1);

    let p = plan_ok(&mixed_caps(true), &empty_live(), &Options::default());
    assert!(p.unplaced.is_empty(), "{:?}", p.unplaced);
    assert_eq!(gpus_used(&p).len(), 6);
    assert_eq!(p.launches.len(), 2);
    // Every GPU's reserved compute stays within 100.
    let show = render::show_json(&p.after);
    for h in show["hosts"].as_array().expect("hosts") {
        for g in h["gpus"].as_array().expect("gpus") {
            let c = g["allocated_compute_percent"].as_u64().expect("a number");
            assert!(c <= 100, "{g}");
        }
    }
}
