//! MPS client bounds in the planner (issue 50): an MPS server takes a bounded number
//! of client processes per GPU, so the planner puts no more MPS processes on one GPU
//! than its pool's `mps { max_clients }`, counts a container's `processes`, and says
//! why tasks that fit by memory went elsewhere.

use gpushare_core::model::*;
use gpushare_core::plan::Options;
use gpushare_testkit::plan::*;
use std::collections::BTreeMap;

fn fleet(tasks: u32, processes: u32, max_clients: u32) -> Desired {
    let mut d = one_service("g6.xlarge", tasks);
    let pool = d.capacity_providers.values_mut().next().expect("pool");
    pool.mps.max_clients = max_clients;
    pool.max_size = 4;
    let td = d.task_definitions.values_mut().next().expect("td");
    for c in &mut td.containers {
        c.cpu = 16;
        c.memory = 64;
        if let Some(m) = c.gpu.as_mut().and_then(|g| g.mps.as_mut()) {
            m.memory = 256;
            m.processes = processes;
        }
    }
    d
}

/// Tasks per (host, GPU) of the plan's starts.
fn per_gpu(p: &gpushare_core::plan::Plan) -> BTreeMap<(String, u32), u32> {
    let mut m = BTreeMap::new();
    for s in &p.starts {
        *m.entry((s.task.host.clone(), s.task.gpus[0])).or_default() += 1;
    }
    m
}

#[test]
fn sixty_small_tasks_use_two_gpus_under_48_clients_and_the_plan_says_why() {
    let d = fleet(60, 1, 48);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(p.starts.len(), 60, "{:?}", p.unplaced);
    let gpus = per_gpu(&p);
    assert_eq!(gpus.len(), 2, "{gpus:?}");
    assert!(gpus.values().all(|&n| n <= 48), "{gpus:?}");
    assert!(
        p.notes
            .iter()
            .any(|n| n.contains("holds 48 MPS clients, its pool's mps.max_clients")),
        "{:?}",
        p.notes
    );
    // Without the bound (memory alone: 88 fit on one L4) they share one GPU.
    let one = plan_ok(&fleet(60, 1, 128), &empty_live(), &Options::default());
    assert_eq!(per_gpu(&one).len(), 1);
}

#[test]
fn a_containers_processes_count_as_clients() {
    // 4 processes per task: 12 tasks fill 48 clients.
    let p = plan_ok(&fleet(13, 4, 48), &empty_live(), &Options::default());
    let gpus = per_gpu(&p);
    assert_eq!(gpus.values().copied().max(), Some(12), "{gpus:?}");
    assert_eq!(gpus.len(), 2);
}

#[test]
fn a_pool_that_cannot_grow_says_the_client_bound_stops_the_task() {
    let mut d = fleet(50, 1, 48);
    d.capacity_providers
        .values_mut()
        .next()
        .expect("pool")
        .max_size = 1;
    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(p.starts.len(), 48);
    assert_eq!(p.unplaced.len(), 2);
    assert!(
        p.unplaced[0]
            .reason
            .contains("MPS clients (mps.max_clients"),
        "{}",
        p.unplaced[0].reason
    );
}
