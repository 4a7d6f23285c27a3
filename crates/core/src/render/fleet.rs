//! The fleet picture: hosts, their GPUs as bars, and the tasks on them (`show`).

use super::{Paint, RenderOptions, BAR, CYAN, DIM, GREEN, RED, YELLOW};
use crate::model::{
    CheckKind, CheckStatus, GpuMode, Host, HostState, MpsHealth, StoreState, Task, TaskState,
};
use crate::placement::GpuLoad;
use crate::plan::host_load;
use crate::util::count;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A task that holds its GPUs and host resources (pending, running or stopping).
pub fn occupying(t: &Task) -> bool {
    matches!(
        t.state,
        TaskState::Pending | TaskState::Running | TaskState::Stopping
    )
}

/// A host that is up or on its way up or down (shown in the fleet picture).
pub fn shown(h: &Host) -> bool {
    matches!(
        h.state,
        HostState::Pending | HostState::Running | HostState::Draining | HostState::ShuttingDown
    )
}

/// One line per GPU of every host that is up:
/// `h-l4-1a2b3c g6.12xlarge  GPU0 l4 [#######.......] 14336/22888 MiB mps  embedder x2, reranker x1`.
pub fn fleet_picture(state: &StoreState, opts: &RenderOptions) -> String {
    let pt = Paint { on: opts.color };
    let mut out = String::new();
    let on_host = state.tasks_by_host(occupying);
    let mut hosts: Vec<&Host> = state.hosts.values().filter(|h| shown(h)).collect();
    hosts.sort_by(|a, b| (&a.capacity_provider, &a.id).cmp(&(&b.capacity_provider, &b.id)));
    if hosts.is_empty() {
        let _ = writeln!(out, "  (no hosts)");
        return out;
    }
    let w = Widths::of(&hosts);
    for h in hosts {
        let tasks = on_host.get(h.id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        host_lines(&mut out, state, h, tasks, &w, &pt);
    }
    out
}

/// The most hosts a plan prints the fleet picture of; a larger fleet gets
/// [`fleet_summary`] unless `RenderOptions::verbose` (as Terraform prints what
/// changes, not the whole infrastructure: issue 52).
pub const PICTURE_MAX_HOSTS: usize = 100;

/// The fleet in a few lines, for a plan of a fleet too large to picture: its totals,
/// then a line per pool (hosts by instance type, GPUs, tasks, GPU memory allocated).
pub fn fleet_summary(state: &StoreState) -> String {
    #[derive(Default)]
    struct Pool<'s> {
        types: BTreeMap<&'s str, usize>,
        hosts: usize,
        gpus: usize,
        tasks: usize,
        memory: u64,
        allocated: u64,
    }
    let mut pools: BTreeMap<&str, Pool> = BTreeMap::new();
    for (h, _, gpus) in super::fleet_usage(state)
        .into_iter()
        .filter(|(h, _, _)| shown(h))
    {
        let p = pools.entry(h.capacity_provider.as_str()).or_default();
        *p.types.entry(h.instance_type.as_str()).or_default() += 1;
        p.hosts += 1;
        p.gpus += gpus.len();
        for g in &gpus {
            p.memory += g.memory_mib;
            p.allocated += g.allocated_memory_mib;
        }
    }
    for t in state.tasks.values().filter(|t| occupying(t)) {
        if let Some(h) = state.hosts.get(&t.host).filter(|h| shown(h)) {
            if let Some(p) = pools.get_mut(h.capacity_provider.as_str()) {
                p.tasks += 1;
            }
        }
    }
    let sum = |f: fn(&Pool) -> usize| pools.values().map(f).sum::<usize>();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {} in {}, {}, {} (the picture of each host: `gpushare plan --verbose`, `gpushare show` or the web console)",
        count(sum(|p| p.hosts), "host", "hosts"),
        count(pools.len(), "pool", "pools"),
        count(sum(|p| p.gpus), "GPU", "GPUs"),
        count(sum(|p| p.tasks), "task", "tasks"),
    );
    for (name, p) in &pools {
        let types: Vec<String> = p.types.iter().map(|(t, n)| format!("{n} x {t}")).collect();
        let _ = writeln!(
            out,
            "  {name}: {}, {}, {}, {}/{} MiB of GPU memory allocated",
            types.join(" + "),
            count(p.gpus, "GPU", "GPUs"),
            count(p.tasks, "task", "tasks"),
            p.allocated,
            p.memory
        );
    }
    out
}

/// The column widths of the fleet picture, from the widest value of each column.
struct Widths {
    id: usize,
    ty: usize,
    model: usize,
    mem: usize,
}

impl Widths {
    fn of(hosts: &[&Host]) -> Widths {
        let gpus = || hosts.iter().flat_map(|h| h.gpus.iter());
        Widths {
            id: hosts.iter().map(|h| h.id.len()).max().unwrap_or(0),
            ty: hosts
                .iter()
                .map(|h| h.instance_type.len())
                .max()
                .unwrap_or(0),
            model: gpus().map(|g| g.model.len()).max().unwrap_or(0),
            mem: gpus()
                .map(|g| g.memory_mib.to_string().len())
                .max()
                .unwrap_or(1),
        }
    }
}

/// The lines of one host: one per GPU (the first with the host's id, type and status),
/// then one for the tasks that use no GPU (or for a host without GPUs).
fn host_lines(
    out: &mut String,
    state: &StoreState,
    h: &Host,
    tasks: &[&Task],
    w: &Widths,
    pt: &Paint,
) {
    let (id_w, ty_w, model_w, mem_w) = (w.id, w.ty, w.model, w.mem);
    let load = host_load(h, tasks, true, true, |t| {
        state.reserves_compute(&t.service, &h.capacity_provider)
    });
    let status = host_status(h, pt);
    for (i, g) in load.gpus.iter().enumerate() {
        let head = if i == 0 {
            format!("  {:<id_w$} {:<ty_w$}", h.id, h.instance_type)
        } else {
            format!("  {:<id_w$} {:<ty_w$}", "", "")
        };
        let names = task_names(tasks.iter().filter(|t| t.gpus.contains(&g.index)).copied());
        let (bar, used, mode) = gpu_bar(g, pt);
        // Compute reserved by tasks whose service or pool sets `reserve_compute`
        // (other caps are limits only and not shown as taken).
        let reserved = if g.used_compute_percent > 0 {
            format!("  ({}% compute reserved)", g.used_compute_percent)
        } else {
            String::new()
        };
        let line = format!(
            "{head}  GPU{} {:<model_w$} [{bar}] {used:>mem_w$}/{:<mem_w$} MiB {mode:<9} {names}{reserved}{}",
            g.index,
            g.model,
            g.memory_mib,
            if i == 0 { status.as_str() } else { "" }
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let cpu_only: Vec<&Task> = tasks
        .iter()
        .filter(|t| t.gpus.is_empty())
        .copied()
        .collect();
    if !cpu_only.is_empty() || h.gpus.is_empty() {
        let _ = writeln!(
            out,
            "  {:<id_w$} {:<ty_w$}  no GPU: {}",
            if h.gpus.is_empty() { h.id.as_str() } else { "" },
            if h.gpus.is_empty() {
                h.instance_type.as_str()
            } else {
                ""
            },
            task_names(cpu_only.into_iter())
        );
    }
}

/// `  (draining, MPS impaired, impaired: nvidia_smi, GPU1 impaired, registered)`, red
/// when the host is sick or draining, dim otherwise; empty for a healthy running host.
fn host_status(h: &Host, pt: &Paint) -> String {
    let mut status = vec![];
    if h.state != HostState::Running {
        status.push(format!("{:?}", h.state).to_lowercase());
    }
    if h.mps_health == MpsHealth::Impaired {
        status.push("MPS impaired".to_string());
    }
    let sick_checks: Vec<&str> = h
        .health
        .impaired_checks()
        .filter(|c| c.check != CheckKind::MpsDaemon)
        .map(|c| c.check.as_str())
        .collect();
    if !sick_checks.is_empty() {
        status.push(format!("impaired: {}", sick_checks.join(", ")));
    }
    let sick_gpus: Vec<String> = h
        .health
        .impaired_gpus()
        .map(|g| format!("GPU{}", g.index))
        .collect();
    if !sick_gpus.is_empty() {
        status.push(format!("{} impaired", sick_gpus.join(", ")));
    }
    if let Some(g) = &h.gpu_instance {
        status.push(format!("gpu_instance.{g}"));
    }
    if h.is_registered() {
        status.push("registered".to_string());
    }
    if let Some(hold) = h.hold {
        status.push(hold.as_str().to_string());
    }
    let status = if status.is_empty() {
        String::new()
    } else {
        format!("  ({})", status.join(", "))
    };
    if h.mps_health == MpsHealth::Impaired
        || h.state == HostState::Draining
        || h.health.overall() == Some(CheckStatus::Impaired)
        || h.health.impaired_gpus().next().is_some()
    {
        pt.p(RED, &status)
    } else {
        pt.p(DIM, &status)
    }
}

/// The bar of one GPU, the memory shown as used and the mode's name: `=` across for a
/// dedicated GPU, `#` for the memory MPS tasks take (green, yellow from 70 %, red from
/// 90 %), dots for an idle one.
fn gpu_bar(g: &GpuLoad, pt: &Paint) -> (String, u64, &'static str) {
    match g.mode {
        GpuMode::Dedicated => (pt.p(CYAN, &"=".repeat(BAR)), g.memory_mib, "dedicated"),
        GpuMode::Mps => {
            let filled = fill(g.used_memory_mib, g.memory_mib);
            let color = if g.used_memory_mib * 10 >= g.memory_mib * 9 {
                RED
            } else if g.used_memory_mib * 10 >= g.memory_mib * 7 {
                YELLOW
            } else {
                GREEN
            };
            (
                format!(
                    "{}{}",
                    pt.p(color, &"#".repeat(filled)),
                    ".".repeat(BAR - filled)
                ),
                g.used_memory_mib,
                "mps",
            )
        }
        GpuMode::Idle => (".".repeat(BAR), 0, "idle"),
    }
}

pub(crate) fn fill(used: u64, total: u64) -> usize {
    if total == 0 {
        return 0;
    }
    let f = ((used as f64 / total as f64) * BAR as f64).round() as usize;
    f.clamp(usize::from(used > 0), BAR)
}

/// "embedder x2, reranker x1".
pub(crate) fn task_names<'a>(tasks: impl Iterator<Item = &'a Task>) -> String {
    let mut n: BTreeMap<&str, usize> = BTreeMap::new();
    for t in tasks {
        *n.entry(t.service.as_str()).or_default() += 1;
    }
    n.into_iter()
        .map(|(s, k)| format!("{s} x{k}"))
        .collect::<Vec<_>>()
        .join(", ")
}
