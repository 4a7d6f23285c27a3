//! What a fleet costs per hour, now and after a plan.

use super::types::{Cost, Pricing, Sharing};
use super::{host_is_up, is_live_task};
use crate::catalog;
use crate::catalog::PriceBook;
use crate::model::{applied_pool, CapacityProvider, Host, Market, StoreState, Task, TaskGpu};
use std::collections::{BTreeMap, BTreeSet};

/// The hourly price gpushare counts for a host from the built-in table: the
/// catalogue's On-Demand price; for a Spot host an upper bound, its `max_price`, else
/// the On-Demand price (EC2's default Spot maximum). `None` when unknown (a Spot host
/// without `max_price` of a type the catalogue prices not).
pub fn host_price(h: &Host) -> Option<f64> {
    host_price_with(&PriceBook::table(), h).map(|p| p.per_hour)
}

/// A host's hourly price and whether it is an upper bound rather than a price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostPrice {
    pub per_hour: f64,
    /// A Spot host counted at its `max_price`, else the On-Demand price, because
    /// the book has no Spot price for it.
    pub bound: bool,
}

/// The hourly price of a host from `book`: On-Demand from the book; a Spot host at
/// EC2's current Spot price where the book has one (capped by its `max_price`),
/// else at the upper bound [`host_price`] counts.
pub fn host_price_with(book: &PriceBook, h: &Host) -> Option<HostPrice> {
    let on_demand = book.on_demand(&h.instance_type);
    match h.market {
        Market::OnDemand => on_demand.map(|per_hour| HostPrice {
            per_hour,
            bound: false,
        }),
        Market::Spot => match book.spot(&h.instance_type, h.zone.as_deref()) {
            Some(spot) => Some(HostPrice {
                per_hour: h.max_price.map_or(spot, |m| m.min(spot)),
                bound: false,
            }),
            None => h.max_price.or(on_demand).map(|per_hour| HostPrice {
                per_hour,
                bound: true,
            }),
        },
    }
}

/// What a host costs per hour in `state`: a registered host what its pool declares
/// (`host_hourly_cost`, as the pool is recorded there; 0 when unset), any other
/// [`host_price`].
pub fn host_price_in(state: &StoreState, h: &Host) -> Option<f64> {
    host_price_in_book(&PriceBook::table(), state, h).map(|p| p.per_hour)
}

/// [`host_price_in`] with the prices of `book`.
pub fn host_price_in_book(book: &PriceBook, state: &StoreState, h: &Host) -> Option<HostPrice> {
    if h.is_registered() {
        let per_hour = applied_pool(state, &h.capacity_provider).map_or(0.0, |(_, c)| c);
        return Some(HostPrice {
            per_hour,
            bound: false,
        });
    }
    host_price_with(book, h)
}

/// Hourly price of the hosts that are up, how many Spot hosts are priced at an
/// upper bound, and how many at EC2's current Spot price; those of unknown price go
/// to `unpriced`.
fn price_sum<'s>(
    book: &PriceBook,
    state: &'s StoreState,
    unpriced: &mut BTreeSet<&'s str>,
) -> (f64, u32, u32) {
    let mut total = 0.0;
    let (mut bound, mut spot_priced) = (0, 0);
    for h in state.hosts.values().filter(|h| host_is_up(h)) {
        match host_price_in_book(book, state, h) {
            Some(p) => {
                total += p.per_hour;
                if p.bound {
                    bound += 1;
                } else if h.market == Market::Spot && !h.is_registered() {
                    spot_priced += 1;
                }
            }
            None => {
                unpriced.insert(h.id.as_str());
            }
        }
    }
    (total, bound, spot_priced)
}

/// Cost per hour of `live` (now) and `after`, what sharing saves on the MPS tasks
/// after, and the pools a smaller instance type would hold for less.
pub fn cost(
    live: &StoreState,
    after: &StoreState,
    pools: &BTreeMap<String, CapacityProvider>,
    prices: Option<&PriceBook>,
) -> Cost {
    let table = PriceBook::table();
    let book = prices.unwrap_or(&table);
    let mut c = Cost::default();
    let mut unpriced: BTreeSet<&str> = BTreeSet::new();
    let (now_spot, after_spot);
    (c.now_per_hour, c.spot_hosts_now, now_spot) = price_sum(book, live, &mut unpriced);
    (c.after_per_hour, c.spot_hosts_after, after_spot) = price_sum(book, after, &mut unpriced);
    c.spot_priced_hosts = now_spot.max(after_spot);
    c.unpriced_hosts = unpriced.len() as u32;
    let registered = pools.values().filter(|p| p.is_registered()).count();
    c.pricing = match registered {
        0 => Pricing::Cloud,
        n if n == pools.len() => Pricing::Registered,
        _ => Pricing::Mixed,
    };
    c.sharing = sharing(book, after);
    c.prices = prices.cloned();
    c.right_sizing = super::rightsize::right_sizing(after, pools);
    c
}

/// A host's price per GPU: its price over its GPU count (`None`: unknown price, or
/// no GPU).
fn price_per_gpu(book: &PriceBook, state: &StoreState, h: &Host) -> Option<f64> {
    let gpus = catalog::lookup(&h.instance_type)
        .map(|t| t.gpu_count)
        .filter(|n| *n > 0)
        .unwrap_or(h.gpus.len() as u32);
    if gpus == 0 {
        return None;
    }
    // A registered host costs what its pool declares.
    host_price_in_book(book, state, h).map(|p| p.per_hour / f64::from(gpus))
}

/// What task `t` of host `h` would cost alone: the cheapest instance type of the
/// host's GPU model whose one GPU, vCPUs and memory hold the task, at the book's
/// On-Demand price; on a Spot host scaled by what the host's own price is of its
/// type's On-Demand price (so a Spot fleet compares with Spot). `None` (the caller
/// counts a GPU of `h` instead) for a registered host, a type the catalogue does
/// not know, or no type that holds the task.
fn alone_price(book: &PriceBook, h: &Host, host_per_hour: f64, t: &Task) -> Option<f64> {
    if h.is_registered() {
        return None;
    }
    let model = catalog::lookup(&h.instance_type)?.gpu_model;
    let needs = catalog::Needs {
        gpu_memory_mib: t.gpu_memory_mib(),
        cpu_units: t.shape.cpu_units,
        memory_mib: t.shape.memory_mib,
    };
    let (_, on_demand) = catalog::cheapest_holding(model, &needs, |c| book.on_demand(c.name))?;
    match h.market {
        Market::OnDemand => Some(on_demand),
        Market::Spot => {
            let own = book.on_demand(&h.instance_type).filter(|p| *p > 0.0)?;
            Some(on_demand * host_per_hour / own)
        }
    }
}

/// The MPS tasks of `after` on the GPUs that hold them (their share of their hosts'
/// price), against each task alone on the cheapest instance type that holds it
/// ([`alone_price`]). `None` without MPS tasks (on hosts of known price).
fn sharing(book: &PriceBook, after: &StoreState) -> Option<Sharing> {
    let mut s = Sharing::default();
    let mut gpus: BTreeSet<(&str, u32)> = BTreeSet::new();
    for t in after.tasks.values().filter(|t| is_live_task(t)) {
        if !matches!(t.shape.gpu, TaskGpu::Mps { .. }) {
            continue;
        }
        let Some(h) = after.hosts.get(&t.host).filter(|h| host_is_up(h)) else {
            continue;
        };
        let Some(p) = price_per_gpu(book, after, h) else {
            continue;
        };
        let host_per_hour = host_price_in_book(book, after, h).map_or(0.0, |x| x.per_hour);
        s.mps_tasks += 1;
        s.alone_per_hour += alone_price(book, h, host_per_hour, t).unwrap_or(p);
        for g in &t.gpus {
            if gpus.insert((h.id.as_str(), *g)) {
                s.mps_gpus += 1;
                s.shared_per_hour += p;
            }
        }
    }
    (s.mps_tasks > 0).then_some(s)
}
