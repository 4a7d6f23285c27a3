//! gpushare's planned sharing patterns: a shared GPU is kept on a path to one
//! of the patterns that a good offline packing of the expected MPS sizes uses
//! (worked out by hand below).

mod placement_support;

use gpushare_core::model::TaskGpu;
use gpushare_core::placement::{Cluster, Need, Policy, Typical};

fn mps(c: &mut Cluster, memory_mib: u64) -> Need {
    let gpu = TaskGpu::Mps {
        clients: 1,
        memory_mib,
        compute_percent: 0,
        capped: false,
    };
    c.compile(&placement_support::request(gpu, &[]))
}

/// Two hosts with one idle 1000-MiB GPU each; host 0's GPU then takes a 650.
/// Expected sizes 650 x 1, 320 x 1, 230 x `n230`: the plan packs 650 + 320
/// (the best completion of 650 within 350) and the 230s together.
fn cluster(n230: f64) -> Cluster {
    cluster_with(n230, 1000)
}

/// As [`cluster`], host 1's GPU having `b_mib` MiB.
fn cluster_with(n230: f64, b_mib: u64) -> Cluster {
    let mut c = Cluster::new(1);
    for (id, mib) in [("a", 1000), ("b", b_mib)] {
        let gpu = placement_support::idle_gpu(0, "L4", mib);
        c.add_host(&placement_support::host(id, "t", vec![gpu]));
    }
    let mut typical = Vec::new();
    for (size, weight) in [(650, 1.0), (320, 1.0), (230, n230)] {
        if weight > 0.0 {
            let need = mps(&mut c, size);
            typical.push(Typical { need, weight });
        }
    }
    c.set_typical(typical);
    let big = mps(&mut c, 650);
    c.commit(0, &big, &[0]);
    c
}

#[test]
fn a_task_does_not_take_a_gpu_off_plan_while_an_idle_gpu_is_free() {
    let mut c = cluster(4.0);
    // 650 + 230 is no planned pattern: the 230 opens host 1's idle GPU ...
    let n = mps(&mut c, 230);
    assert_eq!(c.choose(&n, Policy::Gpushare).expect("fits").host, 1);
    // ... while a 320 completes the planned 650 + 320 on host 0.
    let n = mps(&mut c, 320);
    assert_eq!(c.choose(&n, Policy::Gpushare).expect("fits").host, 0);
}

#[test]
fn sizes_the_plan_does_not_know_pack_as_before() {
    // Without 230s in the expectation the plan says nothing about them, and
    // the fragmentation gradient fills host 0's GPU (the idle one stays whole).
    let mut c = cluster(0.0);
    let n = mps(&mut c, 230);
    assert_eq!(c.choose(&n, Policy::Gpushare).expect("fits").host, 0);
}

#[test]
fn off_plan_is_a_preference_not_a_limit() {
    // The first 230 opens host 1 (as above).
    let mut c = cluster(4.0);
    let n = mps(&mut c, 230);
    let p = c.choose(&n, Policy::Gpushare).expect("fits");
    c.commit(p.host, &n, &p.gpus);
    let m = mps(&mut c, 230);
    // Host 1 now holds one 230 (on plan: 230 x 4); a second 230 joins it.
    assert_eq!(c.choose(&m, Policy::Gpushare).expect("fits").host, 1);
    let mut filled = c.clone();
    for _ in 0..3 {
        let p = filled.choose(&m, Policy::Gpushare).expect("fits");
        filled.commit(p.host, &m, &p.gpus);
    }
    // Host 1 holds 4 x 230 = 920: the next 230 only fits beside the 650.
    assert_eq!(filled.choose(&m, Policy::Gpushare).expect("fits").host, 0);
}

#[test]
fn each_gpu_memory_size_has_its_own_plan() {
    // Host 1's GPU has 2000 MiB: on it the sizes are other shares (325, 160,
    // 115), but host 0's 1000-MiB GPU is judged by the 1000-MiB plan: 650 + 230
    // is off plan there, so the 230 goes to host 1 ...
    let mut c = cluster_with(4.0, 2000);
    let n = mps(&mut c, 230);
    assert_eq!(c.choose(&n, Policy::Gpushare).expect("fits").host, 1);
    // ... where without 230s in the expectation it fills host 0.
    let mut c = cluster_with(0.0, 2000);
    let n = mps(&mut c, 230);
    assert_eq!(c.choose(&n, Policy::Gpushare).expect("fits").host, 0);
}
