//! The JSON documents (`plan -json`, `show -json`), the fleet's GPU usage they and
//! the metrics share, and the agents' status lines.

use super::fleet::{occupying, shown};
use super::{counts, summary_line};
use crate::model::{
    CheckStatus, GpuHealth, GpuMode, Host, HostHealth, HostReport, HostState, ResourceAddr,
    ResourceKind, StoreState, Task, TaskState, FORMAT_VERSION,
};
use crate::plan::{host_load, Plan};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The plan as one JSON document: the plan itself (with `format_version`), a
/// `summary` of the counts, and the ordered `steps` apply runs.
pub fn plan_json(plan: &Plan) -> Value {
    let mut v = serde_json::to_value(plan).unwrap_or_else(|_| json!({}));
    let c = counts(plan);
    if let Value::Object(m) = &mut v {
        m.insert(
            "summary".into(),
            json!({
                "empty": plan.is_empty(),
                "add": c.add, "change": c.change, "destroy": c.destroy,
                "register": c.register,
                "launch": c.launch, "retire": c.retire,
                "place": c.place, "move": c.moves, "stop": c.stop,
                "line": summary_line(plan),
            }),
        );
        let book = plan.cost.prices.clone().unwrap_or_default();
        m.insert("prices_as_of".into(), json!(book.as_of));
        m.insert(
            "prices".into(),
            json!({"region": book.region, "source": book.source, "label": book.label()}),
        );
        m.insert(
            "steps".into(),
            serde_json::to_value(plan.steps()).unwrap_or_else(|_| json!([])),
        );
    }
    // Resources, registrations and steps hold secret values (the changes are redacted already).
    crate::model::redact(&mut v);
    v
}

/// The live fleet as JSON: `format_version`, `hosts[]` (with per-GPU mode,
/// allocated memory and tasks) and `tasks[]`. A GPU's `allocated_compute_percent`
/// is the compute reserved there: the sum of the `max_compute_percent` of its tasks
/// whose service or pool sets `reserve_compute` (as last applied); the caps of other
/// tasks are limits the host enforces, not reservations, and count 0.
/// `compute_cap_percent` is the sum of the caps of all its tasks, reserved or not
/// (it may pass 100 when caps are not reserved).
/// One GPU of a host as the fleet uses it (what `show --json` prints per GPU and the
/// GitOps controller's metrics count): its mode, the memory its tasks hold (all of it
/// for a dedicated GPU), the compute reserved and the sum of the caps.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuUsage {
    pub index: u32,
    pub model: String,
    pub memory_mib: u64,
    pub mode: GpuMode,
    pub allocated_memory_mib: u64,
    pub allocated_compute_percent: u32,
    pub compute_cap_percent: u32,
    pub tasks: Vec<String>,
    /// The GPU's health as its agent last reported it (absent: not reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<GpuHealth>,
}

/// Every host of `state` with the usage of each of its GPUs (tasks that occupy a
/// GPU: see [`show_json`]), and the host's load.
pub fn fleet_usage(state: &StoreState) -> Vec<(&Host, crate::placement::HostLoad, Vec<GpuUsage>)> {
    let on_host = state.tasks_by_host(occupying);
    state
        .hosts
        .values()
        .map(|h| {
            let tasks = on_host.get(h.id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            let load = host_load(h, tasks, true, true, |t| {
                state.reserves_compute(&t.service, &h.capacity_provider)
            });
            let gpus = load
                .gpus
                .iter()
                .map(|g| {
                    let on_gpu: Vec<&&Task> =
                        tasks.iter().filter(|t| t.gpus.contains(&g.index)).collect();
                    GpuUsage {
                        index: g.index,
                        model: g.model.clone(),
                        memory_mib: g.memory_mib,
                        mode: g.mode,
                        allocated_memory_mib: if g.mode == GpuMode::Dedicated {
                            g.memory_mib
                        } else {
                            g.used_memory_mib
                        },
                        allocated_compute_percent: g.used_compute_percent,
                        compute_cap_percent: on_gpu
                            .iter()
                            .filter_map(|t| t.max_compute_percent())
                            .map(u32::from)
                            .sum(),
                        tasks: on_gpu.iter().map(|t| t.id.clone()).collect(),
                        health: h.health.gpu(g.index).cloned(),
                    }
                })
                .collect();
            (h, load, gpus)
        })
        .collect()
}

pub fn show_json(state: &StoreState) -> Value {
    let hosts: Vec<Value> = fleet_usage(state)
        .into_iter()
        .map(|(h, load, gpus)| {
            json!({
                "id": h.id,
                "instance_id": h.instance_id,
                "capacity_provider": h.capacity_provider,
                "gpu_instance": h.gpu_instance,
                "instance_type": h.instance_type,
                "zone": h.zone,
                "subnet": h.subnet,
                "image_id": h.image_id,
                "state": h.state,
                "mps_health": h.mps_health,
                "health": health_json(&h.health),
                "last_heartbeat": h.last_heartbeat,
                // Registered hosts joined by themselves (docs/own-hosts.md); holds are
                // `gpushare host cordon|drain|remove`.
                "source": if h.is_registered() { "registered" } else { "launched" },
                "hold": h.hold,
                "registration": h.registration.as_ref().map(|r| json!({
                    "hostname": r.hostname,
                    "joined_at": r.joined_at,
                })),
                "cpu_units": h.cpu_units,
                "allocated_cpu_units": load.used_cpu_units,
                "memory_mib": h.memory_mib,
                "allocated_memory_mib": load.used_memory_mib,
                "gpus": gpus,
            })
        })
        .collect();
    let tasks: Vec<Value> = state
        .tasks
        .values()
        .map(|t| {
            let mut v = json!({
                "id": t.id,
                "service": t.service,
                "family": t.family,
                "revision": t.revision,
                "host": t.host,
                "gpu": t.gpus.first(),
                "gpus": t.gpus,
                "state": t.state,
                "gpu_memory_mib": t.gpu_memory_mib(),
                "max_compute_percent": t.max_compute_percent(),
                "cpu_units": t.shape.cpu_units,
                "memory_mib": t.shape.memory_mib,
            });
            // A job's run names its job, index and attempt (issue 51).
            if let Some(run) = &t.job {
                v["job"] = json!(run);
            }
            v
        })
        .collect();
    let mut out = json!({
        "format_version": FORMAT_VERSION,
        "cluster": state.cluster,
        "serial": state.serial,
        "hosts": hosts,
        "tasks": tasks,
    });
    // Hosts a rolling refresh still has to replace (only while there are some).
    let outdated = crate::plan::outdated_hosts(state);
    if !outdated.is_empty() {
        out["outdated_hosts"] = Value::Array(
            outdated
                .iter()
                .map(|(pool, o)| {
                    json!({ "pool": pool, "host": o.host_id, "tasks": o.tasks, "changes": o.changes })
                })
                .collect(),
        );
    }
    out
}

/// One line per impaired host and GPU of the hosts that are up (the status record's
/// `health`), saying whether its pool repairs it: `host h-1 (pool a10g): gpus
/// impaired: GPU 1 lost (...); replaced (auto_repair)`.
pub fn health_lines(state: &StoreState) -> Vec<String> {
    let mut out = vec![];
    for h in state.hosts.values().filter(|h| {
        matches!(
            h.state,
            HostState::Pending | HostState::Running | HostState::Draining
        )
    }) {
        let summary = h.health.impaired_summary();
        if summary.is_empty() {
            continue;
        }
        let repairs = state
            .resources
            .get(&ResourceAddr::new(
                ResourceKind::CapacityProvider,
                h.capacity_provider.clone(),
            ))
            .and_then(|r| r.attrs.get("auto_repair"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        out.push(format!(
            "host {} (capacity_provider.{}): {summary}; {}",
            h.id,
            h.capacity_provider,
            if repairs {
                "repaired (auto_repair)"
            } else {
                "kept and reported (auto_repair = false)"
            }
        ));
    }
    out
}

/// A host's health for `show --json`: the overall status (`null` when no check was
/// reported), each check and each GPU with status, reason and last change.
fn health_json(h: &HostHealth) -> Value {
    json!({
        "status": h.overall(),
        "checks": h.checks,
        "gpus": h.gpus,
    })
}

/// What `show` adds below the fleet picture: per active host, what its agent last
/// reported (heartbeat age at `now`, MPS health and the last probe error, GPUs by
/// UUID, agent version, or that it never reported), and every task that is not
/// running with its state and the agent's reason.
pub fn agent_status(state: &StoreState, reports: &[HostReport], now: u64) -> String {
    let by_host: BTreeMap<&str, &HostReport> =
        reports.iter().map(|r| (r.host_id.as_str(), r)).collect();
    let mut out = String::new();
    let hosts: Vec<&Host> = state.hosts.values().filter(|h| shown(h)).collect();
    if hosts.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\nAgents:");
    for h in &hosts {
        let Some(r) = by_host.get(h.id.as_str()) else {
            let _ = writeln!(out, "  {}: no agent has reported yet", h.id);
            continue;
        };
        if let Some(why) = &r.unreadable {
            let _ = writeln!(
                out,
                "  {}: report not taken (the host counts as silent): {why}",
                h.id
            );
            continue;
        }
        let mut line = format!(
            "  {}: heartbeat {} s ago, MPS {}",
            h.id,
            now.saturating_sub(r.at),
            format!("{:?}", r.mps_health).to_lowercase()
        );
        if r.mps_failures > 0 {
            let _ = write!(line, " ({} failed probes in a row)", r.mps_failures);
        }
        if let Some(e) = &r.mps_error {
            let _ = write!(line, ", last probe: {e}");
        }
        if !r.agent_version.is_empty() {
            let _ = write!(line, ", agent {}", r.agent_version);
        }
        if let (_, Some(why)) = crate::model::clamp_inventory(&h.instance_type, &r.gpus) {
            let _ = write!(line, "; inventory not trusted: {why}");
        }
        let _ = writeln!(out, "{line}");
        if let Some(overall) = r.health.overall() {
            let checks: Vec<String> = r
                .health
                .checks
                .iter()
                .map(|c| match &c.reason {
                    Some(why) if c.status != CheckStatus::Ok => {
                        format!("{} {} ({why})", c.check, c.status)
                    }
                    _ => format!("{} {}", c.check, c.status),
                })
                .collect();
            let _ = writeln!(out, "    health {overall}: {}", checks.join(", "));
        }
        for g in &r.gpus {
            let _ = writeln!(
                out,
                "    GPU{} {} {} MiB{}{}",
                g.index,
                g.model,
                g.memory_mib,
                g.uuid
                    .as_deref()
                    .map(|u| format!(" {u}"))
                    .unwrap_or_default(),
                g.compute_mode
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            );
        }
        // GPUs the inventory no longer lists (lost) still have their health line.
        for g in r.health.gpus.iter().filter(|g| g.status != CheckStatus::Ok) {
            let _ = writeln!(
                out,
                "    GPU{} health {}{}",
                g.index,
                g.status,
                g.reason
                    .as_deref()
                    .map(|w| format!(": {w}"))
                    .unwrap_or_default()
            );
        }
    }
    not_running_text(&mut out, state, &by_host);
    out
}

/// "Tasks not running": each task that is not running, with its agent's reason,
/// restarts and last output.
fn not_running_text(out: &mut String, state: &StoreState, by_host: &BTreeMap<&str, &HostReport>) {
    let not_running: Vec<&Task> = state
        .tasks
        .values()
        .filter(|t| t.state != TaskState::Running)
        .collect();
    if !not_running.is_empty() {
        let _ = writeln!(out, "\nTasks not running:");
        for t in not_running {
            let detail = by_host
                .get(t.host.as_str())
                .and_then(|r| r.task_details.get(&t.id));
            let mut line = format!(
                "  {} ({} on {}): {}",
                t.id,
                t.service,
                t.host,
                format!("{:?}", t.state).to_lowercase()
            );
            if let Some(d) = detail {
                if let Some(reason) = &d.reason {
                    let _ = write!(line, ": {reason}");
                }
                if d.restarts > 0 {
                    let _ = write!(line, " (restarted {} times)", d.restarts);
                }
            }
            let _ = writeln!(out, "{line}");
            // Its last output, so a task that keeps failing says why (gpushare logs
            // shows more while it runs).
            if let Some(o) = detail.and_then(|d| d.last_output.as_deref()) {
                let _ = writeln!(out, "    last output:");
                let lines: Vec<&str> = o.lines().collect();
                for l in &lines[lines.len().saturating_sub(10)..] {
                    let _ = writeln!(out, "    | {l}");
                }
            }
        }
    }
}
