//! FGD as its simulator scores it (`fgd`): the fragmentation growth becomes the
//! integer `int(100 x sigmoid(-growth / 1000))`, and equal integers go to the
//! first host; `fgd-exact` compares the growth itself. Worked out by hand below.

mod placement_support;

use gpushare_core::model::{GpuMode, TaskGpu};
use gpushare_core::placement::{Cluster, GpuLoad, HostLoad, Policy, Request, Typical};

/// A host with one GPU of 1000 MiB, `used` of it taken by MPS tasks.
fn host(id: &str, used: u64) -> HostLoad {
    let gpu = GpuLoad {
        clients: 1,
        max_clients: 48,
        index: 0,
        model: "L4".into(),
        memory_mib: 1000,
        used_memory_mib: used,
        used_compute_percent: 0,
        mode: if used > 0 {
            GpuMode::Mps
        } else {
            GpuMode::Idle
        },
        tasks: u32::from(used > 0),
    };
    placement_support::host(id, "t", vec![gpu])
}

fn mps(memory_mib: u64) -> Request {
    let gpu = TaskGpu::Mps {
        clients: 1,
        memory_mib,
        compute_percent: 0,
        capped: false,
    };
    placement_support::request(gpu, &[])
}

/// Host 0 has an idle GPU, host 1 a GPU with `gap` MiB free; the only typical
/// shape wants 500. A task of `gap` on host 0 leaves 1000 - gap >= 500 free:
/// no fragment before or after, growth 0, integer score int(100 x 0.5) = 50.
/// On host 1 it fills the gap, which was all fragment (too small for 500):
/// growth -gap, integer score int(100 x sigmoid(gap / 1000)).
fn choose(gap: u64, policy: Policy) -> usize {
    let mut c = Cluster::new(1);
    c.add_host(&host("a", 0));
    c.add_host(&host("b", 1000 - gap));
    let typical = c.compile(&mps(500));
    c.set_typical(vec![Typical {
        need: typical,
        weight: 1.0,
    }]);
    let n = c.compile(&mps(gap));
    c.choose(&n, policy).expect("fits").host
}

#[test]
fn exact_fgd_takes_any_fragment_reduction() {
    assert_eq!(choose(30, Policy::FgdExact), 1, "growth -30 < 0");
    assert_eq!(choose(100, Policy::FgdExact), 1, "growth -100 < 0");
}

#[test]
fn the_simulators_integer_score_ties_small_differences_to_the_first_host() {
    // gap 30: int(100 x sigmoid(0.03)) = int(50.75) = 50, the same as host 0: first host.
    assert_eq!(choose(30, Policy::Fgd), 0);
    // gap 100: int(100 x sigmoid(0.1)) = int(52.50) = 52 > 50: host 1.
    assert_eq!(choose(100, Policy::Fgd), 1);
}
