//! Batch placement completes a GPU as one unit: the host chosen for the task
//! that opens the GPU must not cut the completion short (worked out by hand).

mod placement_support;

use gpushare_core::model::TaskGpu;
use gpushare_core::placement::{place, HostLoad, HostRef, PlacementInput, Request};
use placement_support::{host, idle_gpu, request};
use std::collections::BTreeSet;

/// One idle 1000 MiB GPU and `cpu_units` of CPU.
fn small_host(id: &str, cpu_units: u32) -> HostLoad {
    HostLoad {
        cpu_units,
        ..host(id, "t", vec![idle_gpu(0, "L4", 1000)])
    }
}

/// 1000 CPU units and `memory_mib` of GPU memory (a tenth of it in compute).
fn mps(key: &str, memory_mib: u64) -> Request {
    Request {
        key: key.into(),
        ..request(
            TaskGpu::Mps {
                clients: 1,
                memory_mib,
                compute_percent: (memory_mib / 10) as u8,
                capped: true,
            },
            &[],
        )
    }
}

/// Host a: one 1000 MiB GPU, 2500 CPU units; host b: the same GPU, 8000 CPU
/// units. Tasks: A (500 MiB) and B, C (250 MiB each), 1000 CPU units each.
///
/// Optimum: one GPU, A + B + C = 1000 MiB and 3000 CPU units on host b.
///
/// The old completion: A goes first (largest) to host a (gpushare's score for A
/// alone: host a's idle GPU is partly stranded by its CPU, 1000 - 2500 / 3 per
/// thousandth = 167 thousandths, and A removes that; on host b nothing changes).
/// The GPU is then completed with B and C (each fits host a's 1500 CPU units
/// left on its own), but only B is committed (500 units left), and C opens
/// host b's GPU: two GPUs. Placing A + B + C as one unit, where all of it fits
/// (host b), uses one.
#[test]
fn a_completed_gpu_goes_where_the_host_fits_all_of_it() {
    let input = PlacementInput {
        pools: Vec::new(),
        hosts: vec![small_host("a", 2500), small_host("b", 8000)],
        requests: vec![mps("A", 500), mps("B", 250), mps("C", 250)],
        seed: 1,
    };
    let out = place(&input);
    assert!(out.unplaced.is_empty(), "{:?}", out.unplaced);
    let gpus: BTreeSet<(String, u32)> = out
        .assignments
        .iter()
        .flat_map(|a| {
            let host = match &a.host {
                HostRef::Existing { id } => id.clone(),
                HostRef::New { pool, ordinal } => format!("{pool}#{ordinal}"),
            };
            a.gpus.iter().map(move |g| (host.clone(), *g))
        })
        .collect();
    assert_eq!(
        gpus,
        BTreeSet::from([("b".to_string(), 0)]),
        "{:?}",
        out.assignments
    );
}

/// Where no host fits the completed GPU as a whole, the task that opens it stays
/// where gpushare chose and the GPU is completed with what that host still fits:
/// host a alone (2500 CPU units): A and B on its GPU, C unplaced.
#[test]
fn without_room_for_the_whole_set_the_chosen_host_keeps_what_fits() {
    let input = PlacementInput {
        pools: Vec::new(),
        hosts: vec![small_host("a", 2500)],
        requests: vec![mps("A", 500), mps("B", 250), mps("C", 250)],
        seed: 1,
    };
    let out = place(&input);
    let keys: Vec<&str> = out.assignments.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys, ["A", "B"]);
    assert_eq!(out.unplaced.len(), 1);
    assert_eq!(out.unplaced[0].key, "C");
}
