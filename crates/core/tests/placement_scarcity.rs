//! gpushare's GPU-model scarcity price: a task that any model can run keeps off
//! the model that the expected constrained demand depends on, even where the
//! fragmentation gradient alone would put it there (worked out by hand below).

mod placement_support;

use gpushare_core::model::TaskGpu;
use gpushare_core::placement::{Cluster, HostLoad, Policy, Request, Typical};
use placement_support::request;

fn host(id: &str, model: &str, gpus: u32) -> HostLoad {
    let gpus = (0..gpus)
        .map(|index| placement_support::idle_gpu(index, model, 1000))
        .collect();
    placement_support::host(id, &format!("t-{model}"), gpus)
}

fn whole(count: u32, models: &[&str]) -> Request {
    request(TaskGpu::Whole { count }, models)
}

/// Host 0: one A10G GPU; host 1: four L4 GPUs. Expected: one 4-GPU task (any
/// model, weight 4 GPUs) and ten 1-GPU tasks that need an A10G (weight 10 GPUs).
/// For a 1-GPU task of any model, the gradient alone favours host 0 (x 14 / 1000:
/// host 0 loses the 4-GPU shape's fragment, -4; host 1 loses A10G fragment -10
/// and gains 4-GPU fragment on 3 GPUs, +12). The A10G price (10/14 of demand on
/// 1000 of 5000 free thousandths: 50/14 per thousandth) outweighs it: host 1.
fn cluster(constrained: bool) -> (Cluster, gpushare_core::placement::Need) {
    let mut c = Cluster::new(7);
    c.add_host(&host("a", "A10G", 1));
    c.add_host(&host("b", "L4", 4));
    let four = c.compile(&whole(4, &[]));
    let one_a10g = c.compile(&whole(1, if constrained { &["A10G"] } else { &[] }));
    c.set_typical(vec![
        Typical {
            need: four,
            weight: 1.0,
        },
        Typical {
            need: one_a10g,
            weight: 10.0,
        },
    ]);
    let any = c.compile(&whole(1, &[]));
    (c, any)
}

#[test]
fn a_flexible_task_keeps_off_the_model_constrained_demand_needs() {
    let (mut c, any) = cluster(true);
    let p = c.choose(&any, Policy::Gpushare).expect("fits");
    assert_eq!(
        p.host, 1,
        "the L4 host, keeping the only A10G for its demand"
    );
    // A task constrained to A10G still goes there.
    let a10g = c.compile(&whole(1, &["A10G"]));
    assert_eq!(c.choose(&a10g, Policy::Gpushare).expect("fits").host, 0);
}

#[test]
fn without_constrained_demand_the_gradient_decides() {
    // Same hosts, the ten 1-GPU tasks may use any model: no price, and the
    // gradient keeps the 4 L4 GPUs whole for the 4-GPU shape (host 0).
    let (mut c, any) = cluster(false);
    assert_eq!(c.choose(&any, Policy::Gpushare).expect("fits").host, 0);
}
