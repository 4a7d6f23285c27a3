//! The fleet as an SVG picture: every pool, its hosts and a bar per GPU split by the
//! tasks on it by memory, coloured by service. One renderer for the console's fleet
//! page and `gpushare show --svg FILE`; the numbers are `show --json`'s
//! ([`render::fleet_usage`]).

use gpushare_core::model::{GpuMode, HostReport, HostState, MpsHealth, StoreState};
use gpushare_core::render;
use serde::Serialize;
use std::collections::BTreeMap;

/// Width of the picture, and where a GPU's bar starts and how long it is.
const WIDTH: u32 = 1000;
const BAR_X: u32 = 170;
const BAR_W: u32 = 520;
const ROW: u32 = 24;

#[derive(Serialize)]
pub(crate) struct Picture {
    width: u32,
    height: u32,
    pools: Vec<PoolRows>,
    empty: bool,
}

#[derive(Serialize)]
struct PoolRows {
    name: String,
    y: u32,
    hosts: Vec<HostRows>,
}

#[derive(Serialize)]
struct HostRows {
    id: String,
    instance_type: String,
    y: u32,
    /// Health and lifecycle words: "MPS impaired", "draining", "report 3 s ago".
    status: String,
    /// Drawn in red (MPS impaired, silent, draining, shutting down).
    alarm: bool,
    gpus: Vec<GpuRow>,
    cpu_only: Vec<String>,
}

#[derive(Serialize)]
struct GpuRow {
    index: u32,
    model: String,
    mode: &'static str,
    y: u32,
    memory_mib: u64,
    allocated_mib: u64,
    free_mib: u64,
    compute_reserved: u32,
    compute_caps: u32,
    /// GPU memory its tasks' processes hold, as their agents reported (`None`: no
    /// task of it reported its use).
    used_mib: Option<u64>,
    segments: Vec<Segment>,
}

#[derive(Serialize)]
struct Segment {
    task: String,
    service: String,
    memory_mib: u64,
    cap: Option<u8>,
    x: u32,
    w: u32,
    /// What its processes hold on this GPU, as its agent reported (`None`: not
    /// reported), and its width on the bar (drawn inside the declared segment).
    used_mib: Option<u64>,
    used_w: u32,
    color: String,
}

/// A stable colour per service (its name hashed to a hue).
pub(crate) fn service_color(service: &str) -> String {
    // FNV-1a: stable across runs and builds.
    let mut h: u32 = 0x811c_9dc5;
    for b in service.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("hsl({} 55% 52%)", h % 360)
}

/// How a host's health reads: its words and whether they are an alarm. `age` is
/// seconds since its agent last reported (None: never).
pub(crate) fn host_status(state: HostState, mps: MpsHealth, age: Option<u64>) -> (String, bool) {
    let mut words = vec![];
    let mut alarm = false;
    if state != HostState::Running {
        words.push(format!("{state:?}").to_lowercase());
        alarm |= matches!(state, HostState::Draining | HostState::ShuttingDown);
    }
    match mps {
        MpsHealth::Impaired => {
            words.push("MPS impaired".to_string());
            alarm = true;
        }
        MpsHealth::Healthy => words.push("MPS ok".to_string()),
        MpsHealth::Unknown => words.push("MPS unknown".to_string()),
        MpsHealth::Disabled => words.push("MPS off".to_string()),
    }
    match age {
        Some(a) => words.push(format!("report {a} s ago")),
        None => words.push("no report yet".to_string()),
    }
    (words.join(", "), alarm)
}

/// Seconds since each host's agent last reported, at `now` (unreadable reports do
/// not count as reports).
pub(crate) fn report_ages(reports: &[HostReport], now: u64) -> BTreeMap<&str, u64> {
    reports
        .iter()
        .filter(|r| r.unreadable.is_none())
        .map(|r| (r.host_id.as_str(), now.saturating_sub(r.at)))
        .collect()
}

pub(crate) fn mode_word(m: GpuMode) -> &'static str {
    match m {
        GpuMode::Idle => "idle",
        GpuMode::Mps => "mps",
        GpuMode::Dedicated => "dedicated",
    }
}

/// The picture's geometry and words for `state` (hosts that are up, by pool).
pub(crate) fn picture(state: &StoreState, reports: &[HostReport], now: u64) -> Picture {
    let ages = report_ages(reports, now);
    let used = used_per_gpu(state, reports);
    // CPU-only tasks per host, gathered once.
    let mut cpu_only: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for t in state
        .tasks
        .values()
        .filter(|t| t.gpus.is_empty() && render::occupying(t))
    {
        cpu_only
            .entry(t.host.as_str())
            .or_default()
            .push(t.id.clone());
    }
    let mut pools: BTreeMap<&str, Vec<HostRows>> = BTreeMap::new();
    let mut usage = render::fleet_usage(state);
    usage.sort_by(|a, b| (&a.0.capacity_provider, &a.0.id).cmp(&(&b.0.capacity_provider, &b.0.id)));
    for (h, _, gpus) in usage.into_iter().filter(|(h, _, _)| render::shown(h)) {
        let (status, alarm) = host_status(h.state, h.mps_health, ages.get(h.id.as_str()).copied());
        let gpus = gpus
            .into_iter()
            .map(|g| {
                let mut x = BAR_X;
                let segments = g
                    .tasks
                    .iter()
                    .filter_map(|id| state.tasks.get(id))
                    .map(|t| {
                        let memory_mib = if g.mode == GpuMode::Dedicated {
                            g.memory_mib
                        } else {
                            t.gpu_memory_mib()
                        };
                        let w = scale(memory_mib, g.memory_mib);
                        let used_mib = used.get(t.id.as_str()).copied();
                        let s = Segment {
                            task: t.id.clone(),
                            service: t.service.clone(),
                            memory_mib,
                            cap: t.max_compute_percent(),
                            x,
                            w,
                            used_mib,
                            used_w: used_mib.map_or(0, |u| scale(u, g.memory_mib).min(w)),
                            color: service_color(&t.service),
                        };
                        x += w;
                        s
                    })
                    .collect::<Vec<Segment>>();
                let reported = segments.iter().filter_map(|s| s.used_mib);
                let used_mib = reported.clone().next().map(|_| reported.sum());
                GpuRow {
                    index: g.index,
                    model: g.model,
                    mode: mode_word(g.mode),
                    y: 0,
                    memory_mib: g.memory_mib,
                    allocated_mib: g.allocated_memory_mib,
                    free_mib: g.memory_mib.saturating_sub(g.allocated_memory_mib),
                    compute_reserved: g.allocated_compute_percent,
                    compute_caps: g.compute_cap_percent,
                    used_mib,
                    segments,
                }
            })
            .collect();
        let cpu_only = cpu_only.remove(h.id.as_str()).unwrap_or_default();
        pools
            .entry(h.capacity_provider.as_str())
            .or_default()
            .push(HostRows {
                id: h.id.clone(),
                instance_type: h.instance_type.clone(),
                y: 0,
                status,
                alarm,
                gpus,
                cpu_only,
            });
    }
    // Lay the rows out top to bottom.
    let mut y = 8;
    let pools: Vec<PoolRows> = pools
        .into_iter()
        .map(|(name, mut hosts)| {
            let pool_y = y + 16;
            y += ROW + 4;
            for h in &mut hosts {
                h.y = y + 16;
                y += ROW;
                for g in &mut h.gpus {
                    g.y = y;
                    y += ROW;
                }
                if !h.cpu_only.is_empty() || h.gpus.is_empty() {
                    y += ROW;
                }
                y += 6;
            }
            PoolRows {
                name: name.to_string(),
                y: pool_y,
                hosts,
            }
        })
        .collect();
    Picture {
        width: WIDTH,
        height: y.max(40) + 8,
        empty: pools.is_empty(),
        pools,
    }
}

/// Task id -> the GPU memory its processes hold on each of its GPUs, MiB (its
/// agent's last usage sample, spread evenly over its GPUs).
fn used_per_gpu<'s>(state: &StoreState, reports: &'s [HostReport]) -> BTreeMap<&'s str, u64> {
    let mut out = BTreeMap::new();
    for r in reports.iter().filter(|r| r.unreadable.is_none()) {
        for (id, st) in &r.task_details {
            let (Some(t), Some(u)) = (state.tasks.get(id), &st.usage) else {
                continue;
            };
            let gpus = t.gpus.len().max(1) as u64;
            out.insert(id.as_str(), u.gpu_memory_mib / gpus);
        }
    }
    out
}

/// Sparkline size: two pixels a minute for an hour.
const SPARK_W: u64 = 2 * crate::history::USAGE_POINTS as u64;
const SPARK_H: u64 = 24;

/// A service's GPU memory use over the last hour as a small SVG line (one point a
/// minute, `now_minute` at the right end, scaled to its peak); `None` without points.
/// Only numbers go into it.
pub(crate) fn sparkline(points: &[crate::history::UsagePoint], now_minute: u64) -> Option<String> {
    let last = points.last()?;
    let peak = points.iter().map(|p| p.used_mib).max().unwrap_or(0);
    let span = crate::history::USAGE_POINTS as u64 - 1;
    let xy: Vec<String> = points
        .iter()
        .map(|p| {
            let ago = now_minute.saturating_sub(p.minute).min(span);
            let x = (span - ago) * SPARK_W / span;
            let y = SPARK_H - 2 - p.used_mib * (SPARK_H - 4) / peak.max(1);
            format!("{x},{y}")
        })
        .collect();
    let sm = last
        .sm_percent
        .map_or(String::new(), |v| format!(", SM {v:.0}% on average"));
    Some(format!(
        r##"<svg class="sparkline" xmlns="http://www.w3.org/2000/svg" width="{SPARK_W}" height="{SPARK_H}" viewBox="0 0 {SPARK_W} {SPARK_H}" data-points="{n}" data-used="{used}" data-peak="{peak}"><title>GPU memory used, last hour: {used} MiB now over {tasks} task(s), peak {peak} MiB{sm}</title><rect width="100%" height="100%" fill="#f5f7f8"/><polyline fill="none" stroke="#37474f" stroke-width="1.5" points="{line}"/></svg>"##,
        n = points.len(),
        used = last.used_mib,
        tasks = last.tasks,
        line = xy.join(" "),
    ))
}

/// `memory` of `total` as a width on the bar (at least 1 px for any memory).
fn scale(memory: u64, total: u64) -> u32 {
    if total == 0 {
        return 0;
    }
    let w = (memory.min(total) as f64 / total as f64 * f64::from(BAR_W)).round() as u32;
    w.max(u32::from(memory > 0))
}

/// The picture as an SVG document (auto-escaped: every name is text).
pub fn fleet_svg(
    state: &StoreState,
    reports: &[HostReport],
    now: u64,
) -> Result<String, minijinja::Error> {
    let env = crate::render::templates();
    let tmpl = env.get_template("fleet.svg")?;
    tmpl.render(minijinja::context! { p => picture(state, reports, now), bar_x => BAR_X, bar_w => BAR_W, text_x => BAR_X + BAR_W + 10 })
}
