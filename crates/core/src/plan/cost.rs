//! What a fleet costs per hour, now and after a plan.

#[allow(unused_imports)]
use super::*;

/// The hourly price gpushare counts for a host: the catalogue's On-Demand price; for
/// a Spot host an upper bound, its `max_price`, else the On-Demand price (EC2's
/// default Spot maximum). `None` when unknown (a Spot host without `max_price` of a
/// type the catalogue prices not).
pub fn host_price(h: &Host) -> Option<f64> {
    let on_demand = catalog::lookup(&h.instance_type).and_then(|t| t.price_per_hour);
    match h.market {
        Market::OnDemand => on_demand,
        Market::Spot => h.max_price.or(on_demand),
    }
}

/// What a host costs per hour in `state`: a registered host what its pool declares
/// (`host_hourly_cost`, as the pool is recorded there; 0 when unset), any other
/// [`host_price`].
pub fn host_price_in(state: &StoreState, h: &Host) -> Option<f64> {
    if h.is_registered() {
        return Some(applied_pool(state, &h.capacity_provider).map_or(0.0, |(_, c)| c));
    }
    host_price(h)
}

/// Hourly price of the hosts that are up, and how many of them are Spot hosts
/// (priced at an upper bound); those of unknown price go to `unpriced`.
fn price_sum<'s>(state: &'s StoreState, unpriced: &mut BTreeSet<&'s str>) -> (f64, u32) {
    let mut total = 0.0;
    let mut spot = 0;
    for h in state.hosts.values().filter(|h| host_is_up(h)) {
        match host_price_in(state, h) {
            Some(p) => {
                total += p;
                if h.market == Market::Spot {
                    spot += 1;
                }
            }
            None => {
                unpriced.insert(h.id.as_str());
            }
        }
    }
    (total, spot)
}

/// Cost per hour of `live` (now) and `after`, what sharing saves on the MPS tasks
/// after, and the pools a smaller instance type would hold for less.
pub fn cost(
    live: &StoreState,
    after: &StoreState,
    pools: &BTreeMap<String, CapacityProvider>,
) -> Cost {
    let mut c = Cost::default();
    let mut unpriced: BTreeSet<&str> = BTreeSet::new();
    (c.now_per_hour, c.spot_hosts_now) = price_sum(live, &mut unpriced);
    (c.after_per_hour, c.spot_hosts_after) = price_sum(after, &mut unpriced);
    c.unpriced_hosts = unpriced.len() as u32;
    c.sharing = sharing(after);
    c.right_sizing = super::rightsize::right_sizing(after, pools);
    c
}

/// A host's price per GPU: its price over its GPU count (`None`: unknown price, or
/// no GPU).
fn price_per_gpu(state: &StoreState, h: &Host) -> Option<f64> {
    let gpus = catalog::lookup(&h.instance_type)
        .map(|t| t.gpu_count)
        .filter(|n| *n > 0)
        .unwrap_or(h.gpus.len() as u32);
    if gpus == 0 {
        return None;
    }
    // A registered host costs what its pool declares.
    host_price_in(state, h).map(|p| p / f64::from(gpus))
}

/// The MPS tasks of `after` on the GPUs that hold them, against one GPU each, at
/// the price per GPU of each task's host. `None` without MPS tasks (on hosts of
/// known price).
fn sharing(after: &StoreState) -> Option<Sharing> {
    let mut s = Sharing::default();
    let mut gpus: BTreeSet<(&str, u32)> = BTreeSet::new();
    for t in after.tasks.values().filter(|t| is_live_task(t)) {
        if !matches!(t.shape.gpu, TaskGpu::Mps { .. }) {
            continue;
        }
        let Some(h) = after.hosts.get(&t.host).filter(|h| host_is_up(h)) else {
            continue;
        };
        let Some(p) = price_per_gpu(after, h) else {
            continue;
        };
        s.mps_tasks += 1;
        s.one_gpu_each_per_hour += p;
        for g in &t.gpus {
            if gpus.insert((h.id.as_str(), *g)) {
                s.mps_gpus += 1;
                s.shared_per_hour += p;
            }
        }
    }
    (s.mps_tasks > 0).then_some(s)
}
