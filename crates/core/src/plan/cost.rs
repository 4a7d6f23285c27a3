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

/// Cost per hour of `live` (now) and `after`, and of one GPU per task after.
pub fn cost(live: &StoreState, after: &StoreState) -> Cost {
    let mut c = Cost::default();
    let mut unpriced: BTreeSet<&str> = BTreeSet::new();
    (c.now_per_hour, c.spot_hosts_now) = price_sum(live, &mut unpriced);
    (c.after_per_hour, c.spot_hosts_after) = price_sum(after, &mut unpriced);
    c.unpriced_hosts = unpriced.len() as u32;
    let mut per_gpu_cache: HashMap<&str, Option<f64>> = HashMap::new();
    for t in after.tasks.values().filter(|t| is_live_task(t)) {
        let gpus = match t.shape.gpu {
            TaskGpu::None => continue,
            TaskGpu::Whole { count } => f64::from(count),
            TaskGpu::Mps { .. } => 1.0,
        };
        let Some(h) = after.hosts.get(&t.host) else {
            continue;
        };
        if h.is_registered() {
            // One GPU per task, at what one of the host's GPUs costs.
            let per_gpu = host_price_in(after, h).unwrap_or(0.0) / h.gpus.len().max(1) as f64;
            c.one_gpu_per_task_per_hour += gpus * per_gpu;
            continue;
        }
        let model = h
            .gpus
            .first()
            .map(|g| g.model.as_str())
            .or_else(|| catalog::lookup(&h.instance_type).map(|i| i.gpu_model));
        let Some(model) = model else { continue };
        let per_gpu = *per_gpu_cache.entry(model).or_insert_with(|| {
            catalog::cheapest_with_model(model)
                .and_then(|i| i.price_per_hour.map(|p| p / f64::from(i.gpu_count)))
        });
        if let Some(p) = per_gpu {
            c.one_gpu_per_task_per_hour += gpus * p;
        }
    }
    c
}
