//! The cost line under a plan and the right-sizing hints under it.

use super::plural;
use crate::plan::{Plan, Pricing, UsageHint};
use std::fmt::Write as _;

/// The cost line: now, after, and what sharing saves on the MPS tasks alone (those
/// tasks on the GPUs that hold them, against each task alone on the cheapest
/// instance type of its GPU that fits it). Whole-GPU tasks share nothing and are not in the
/// saving; a pool's instance size is the right-sizing hint's
/// ([`right_sizing_lines`]).
pub fn cost_line(plan: &Plan) -> String {
    let c = &plan.cost;
    // Spot hosts are counted at their max_price (else the On-Demand price): a sum
    // with any of them is an upper bound, and says so.
    let bound = |n: u32| if n > 0 { "at most " } else { "" };
    let (now, after) = (bound(c.spot_hosts_now), bound(c.spot_hosts_after));
    let book = c.prices.clone().unwrap_or_default();
    let spot_note = if c.spot_priced_hosts > 0 {
        "; Spot at EC2's current price"
    } else {
        ""
    };
    let prices = match c.pricing {
        Pricing::Cloud => book.label(),
        Pricing::Mixed => format!(
            "{}; registered hosts at their pool's host_hourly_cost",
            book.label()
        ),
        Pricing::Registered => "registered hosts at their pool's host_hourly_cost".to_string(),
    };
    let mut s = format!(
        "Cost per hour ({prices}{spot_note}): now {now}${:.2}, after {after}${:.2}",
        c.now_per_hour, c.after_per_hour,
    );
    match &c.sharing {
        Some(sh) => {
            let _ = write!(
                s,
                "; MPS sharing: {} {} on {} {} {after}${:.2}, each alone on the cheapest type that fits it {after}${:.2} (saves {:.0}%)",
                sh.mps_tasks,
                plural(sh.mps_tasks as usize, "task", "tasks"),
                sh.mps_gpus,
                plural(sh.mps_gpus as usize, "GPU", "GPUs"),
                sh.shared_per_hour,
                sh.alone_per_hour,
                sh.saving_percent()
            );
        }
        None => s.push_str("; no GPU shared (no MPS tasks)"),
    }
    if c.unpriced_hosts > 0 {
        let _ = write!(
            s,
            "; {} host(s) of unknown price left out",
            c.unpriced_hosts
        );
    }
    let spot = c.spot_hosts_now.max(c.spot_hosts_after);
    if spot > 0 {
        let _ = write!(
            s,
            "; Spot hosts counted at their max_price, else the on-demand price (Spot prices are not known)",
        );
    }
    s
}

/// The right-sizing hints: a line per pool whose tasks a smaller instance type of
/// the same GPU would hold for less (catalogue On-Demand prices; never planned).
pub fn right_sizing_lines(plan: &Plan) -> Vec<String> {
    let mut lines: Vec<String> = plan
        .cost
        .right_sizing
        .iter()
        .map(|r| {
            format!(
                "Right-sizing hint: pool {}'s tasks fit on {} x {} (${:.2} per hour) instead of {} x {} (${:.2}); GPUs, vCPUs and memory counted, min_size kept",
                r.pool,
                r.suggested_hosts,
                r.suggested_type,
                r.suggested_per_hour,
                r.hosts,
                r.instance_type,
                r.per_hour
            )
        })
        .collect();
    lines.extend(plan.cost.usage.iter().map(usage_line));
    lines
}

/// A right-sizing-from-use hint as a line (issue 49 item 4).
fn usage_line(u: &UsageHint) -> String {
    let gib = |m: u64| m as f64 / 1024.0;
    let hours = u.window_seconds as f64 / 3600.0;
    let seen = format!(
        "Right-sizing from use: service {}'s tasks peaked at {:.1} of {:.1} GiB GPU memory ({:.0}%) over {hours:.0} h ({} measured)",
        u.service,
        gib(u.peak_mib),
        gib(u.declared_mib),
        u.peak_mib as f64 * 100.0 / u.declared_mib.max(1) as f64,
        crate::util::count(u.tasks_measured as usize, "task", "tasks"),
    );
    match u.suggested_mib {
        None => format!(
            "{seen}: near its MPS memory limit; a larger memory avoids out-of-memory errors"
        ),
        Some(m) if u.hosts_freed > 0 => format!(
            "{seen}; memory = {m} packs pool {}'s tasks on {} instead of {} GPUs, {} fewer (${:.2} per hour)",
            u.pool,
            u.gpus_after,
            u.gpus_now,
            crate::util::count(u.hosts_freed as usize, "host", "hosts"),
            u.saves_per_hour
        ),
        Some(m) => format!(
            "{seen}; memory = {m} packs pool {}'s tasks on {} instead of {} GPUs (no host fewer yet)",
            u.pool, u.gpus_after, u.gpus_now
        ),
    }
}

/// Why the fleet's region has no regional prices, when the cloud said why.
pub fn prices_note(plan: &Plan) -> Option<String> {
    let book = plan.cost.prices.as_ref()?;
    let note = book.note.as_ref()?;
    Some(format!(
        "Prices: no regional prices for {} ({} table used): {note}",
        book.fleet_region.as_deref().unwrap_or(&book.region),
        book.region,
    ))
}

/// The cost line, why the prices are not regional (when known), and the
/// right-sizing hints, one a line.
pub fn cost_text(plan: &Plan) -> String {
    let mut lines = vec![cost_line(plan)];
    lines.extend(prices_note(plan));
    lines.extend(right_sizing_lines(plan));
    lines.join("\n")
}
