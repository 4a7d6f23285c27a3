//! What `gpushare evaluate` prints: the machines read, each workload's observations
//! and proposal, the packed fleet (the planner's, drawn as `gpushare show` draws a
//! fleet) and its cost per hour beside today's.

use super::fleet::Proposed;
use super::proposal::{Proposal, Today, Workload};
use super::samples::Machine;
use gpushare_core::catalog::cheapest_with_model;
use gpushare_core::render::{cost_line, fleet_picture, RenderOptions};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Today's cost per hour and GPUs: each GPU in use today at the price per GPU of the
/// catalogue's cheapest instance type of its model (the type the pools are proposed in).
pub fn today_cost(today: &Today) -> (f64, u32) {
    let mut per_hour = 0.0;
    let mut gpus = 0;
    for (model, n) in today {
        if let Some(t) = cheapest_with_model(model) {
            per_hour +=
                t.price_per_hour.unwrap_or(0.0) / f64::from(t.gpu_count.max(1)) * f64::from(*n);
        }
        gpus += n;
    }
    (per_hour, gpus)
}

/// The whole text.
pub fn text(
    machines: &[Machine],
    workloads: &[Workload],
    today: &Today,
    proposed: &Proposed,
    headroom: f64,
) -> String {
    let mut out = String::new();
    machines_text(&mut out, machines);
    let _ = writeln!(out, "\nWorkloads (headroom x{headroom}):");
    for w in workloads {
        workload_text(&mut out, w);
    }
    fleet_text(&mut out, today, proposed);
    out
}

fn machines_text(out: &mut String, machines: &[Machine]) {
    let samples: usize = machines.iter().map(|m| m.samples).sum();
    let _ = writeln!(
        out,
        "Read {} machine(s), {samples} nvidia-smi sample(s):",
        machines.len()
    );
    for m in machines {
        let mut gpus: BTreeMap<&str, usize> = BTreeMap::new();
        for g in &m.gpus {
            *gpus.entry(g.name.as_str()).or_default() += 1;
        }
        let gpus = if gpus.is_empty() {
            "GPUs not listed".to_string()
        } else {
            gpus.iter()
                .map(|(n, c)| format!("{c} x {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let pids: std::collections::BTreeSet<u32> = m.procs.iter().map(|p| p.pid).collect();
        let _ = writeln!(
            out,
            "  {}: {gpus}; {} sample(s), {} process(es), {} pmon row(s)",
            m.name,
            m.samples,
            pids.len(),
            m.pmon.len()
        );
    }
}

fn workload_text(out: &mut String, w: &Workload) {
    let machines: Vec<&str> = w.machines.iter().map(String::as_str).collect();
    let _ = writeln!(
        out,
        "  {}: {} process(es) at once on {} ({}), {} sample row(s)",
        w.name,
        w.processes,
        machines.join(", "),
        w.model,
        w.rows
    );
    let mem = w.memory.map_or("no memory sample".to_string(), |m| {
        format!("memory peak {} MiB, p95 {} MiB", m.peak, m.p95)
    });
    let sm = w.sm.map_or("no SM sample (pmon)".to_string(), |s| {
        format!("SM peak {}%, p95 {}% ({} pmon samples)", s.peak, s.p95, s.n)
    });
    let _ = writeln!(out, "    seen: {mem}; {sm}");
    match &w.proposal {
        Proposal::Mps {
            memory_mib,
            max_compute_percent,
            cap_reason,
        } => {
            let cap = max_compute_percent.map_or("no compute cap".to_string(), |p| {
                format!("max_compute_percent {p}")
            });
            let _ = writeln!(
                out,
                "    proposal: MPS share, memory {memory_mib} MiB, {cap} ({cap_reason})"
            );
        }
        Proposal::Dedicated { reason } => {
            let _ = writeln!(out, "    proposal: a dedicated GPU: {reason}");
        }
    }
}

fn fleet_text(out: &mut String, today: &Today, proposed: &Proposed) {
    let plan = &proposed.plan;
    let _ = writeln!(
        out,
        "\nPacked fleet (the planner of `gpushare plan`, on an empty fleet):"
    );
    let mut types: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for h in plan.after.hosts.values() {
        *types
            .entry((h.capacity_provider.as_str(), h.instance_type.as_str()))
            .or_default() += 1;
    }
    for ((pool, ty), n) in &types {
        let _ = writeln!(out, "  pool {pool}: {n} x {ty}");
    }
    out.push_str(&fleet_picture(
        &plan.after,
        &RenderOptions {
            color: false,
            verbose: false,
        },
    ));
    for u in &plan.unplaced {
        let _ = writeln!(out, "  not placed: a task of {}: {}", u.service, u.reason);
    }
    let (today, today_gpus) = today_cost(today);
    let after = plan.cost.after_per_hour;
    let gpus: usize = plan.after.hosts.values().map(|h| h.gpus.len()).sum();
    let saving = today - after;
    let percent = if today > 0.0 {
        saving / today * 100.0
    } else {
        0.0
    };
    let _ = writeln!(
        out,
        "\nToday:         {today_gpus} GPU(s) in use, ${today:.2} per hour\n\
         With gpushare: {gpus} GPU(s) on {} host(s), ${after:.2} per hour\n\
         Saving:        ${saving:.2} per hour ({percent:.0}%), ${:.0} per 30-day month",
        plan.after.hosts.len(),
        saving * 24.0 * 30.0
    );
    let _ = writeln!(
        out,
        "(gpushare plan on the written configuration says: {})",
        cost_line(plan)
    );
}
