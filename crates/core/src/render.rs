//! Rendering of plans and fleets: Terraform-style text, the fleet picture, JSON.
//!
//! Pure functions of their inputs. Colours (ANSI) only when asked for: the CLI
//! decides (a terminal, and no `NO_COLOR`).

use crate::model::{CloudHost, Host, Market, StoreState};
use crate::plan::{Action, Plan};
use std::collections::BTreeMap;
use std::fmt::Write as _;

mod cost;
mod deployments;
mod diff;
mod fleet;
mod json;
mod refresh;
mod targets;

pub use cost::{cost_line, cost_text, prices_note, right_sizing_lines};
pub use deployments::{deployment_lines, services_text};
pub use fleet::{fleet_picture, fleet_summary, occupying, shown, PICTURE_MAX_HOSTS};
pub use json::{agent_status, fleet_usage, health_lines, plan_json, show_json, GpuUsage};
pub use refresh::pool_line as refresh_line;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenderOptions {
    pub color: bool,
    /// The plan's fleet picture whatever the fleet's size (`--verbose`); without it a
    /// fleet of more than [`PICTURE_MAX_HOSTS`] hosts is summed up per pool.
    pub verbose: bool,
}

const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const RED: &str = "\x1b[31m";
const CYAN: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

/// Width of the memory bar in the fleet picture.
const BAR: usize = 20;

struct Paint {
    on: bool,
}

impl Paint {
    fn p(&self, code: &str, s: &str) -> String {
        if self.on {
            format!("{code}{s}{RESET}")
        } else {
            s.to_string()
        }
    }
}

// ---------------------------------------------------------------------------
// Counts and the summary line
// ---------------------------------------------------------------------------

/// The numbers of the summary line (a replacement counts as one add and one destroy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub add: usize,
    pub change: usize,
    pub destroy: usize,
    pub launch: usize,
    pub place: usize,
    pub moves: usize,
    pub retire: usize,
    pub stop: usize,
    pub register: usize,
}

pub fn counts(plan: &Plan) -> Counts {
    let mut c = Counts::default();
    for rc in &plan.resource_changes {
        match rc.action {
            Action::Create => c.add += 1,
            Action::Update => c.change += 1,
            Action::Delete => c.destroy += 1,
            Action::Replace => {
                c.add += 1;
                c.destroy += 1;
            }
        }
    }
    c.launch = plan.launches.len();
    c.place = plan.starts.len();
    c.moves = plan.moves.len();
    c.retire = plan.retirements.len();
    c.stop = plan.stops.len();
    c.register = plan.registrations.len();
    c
}

/// `Plan: N to add, N to change, N to destroy; H hosts to launch, T tasks to place, M to move`
/// (then hosts to retire and tasks to stop, when there are any), or a no-changes line.
pub fn summary_line(plan: &Plan) -> String {
    if plan.is_empty() {
        let mut s = refresh::no_changes_line(plan)
            .unwrap_or_else(|| "No changes. The fleet matches the configuration.".to_string());
        if let Some(c) = &plan.cost.consolidation {
            let _ = write!(
                s,
                " With --consolidate: {} to move, {} to retire, saving ${:.2} per hour.",
                crate::util::count(c.moves as usize, "task", "tasks"),
                crate::util::count(c.retire as usize, "host", "hosts"),
                c.saves_per_hour
            );
        }
        return s;
    }
    let c = counts(plan);
    let mut s = format!(
        "Plan: {} to add, {} to change, {} to destroy; {} {} to launch, {} {} to place, {} to move",
        c.add,
        c.change,
        c.destroy,
        c.launch,
        plural(c.launch, "host", "hosts"),
        c.place,
        plural(c.place, "task", "tasks"),
        c.moves
    );
    if c.retire > 0 {
        let _ = write!(
            s,
            ", {} {} to retire",
            c.retire,
            plural(c.retire, "host", "hosts")
        );
    }
    if c.stop > 0 {
        let _ = write!(
            s,
            ", {} {} to stop",
            c.stop,
            plural(c.stop, "task", "tasks")
        );
    }
    let (reg, dereg) = (
        plan.target_registrations.len(),
        plan.target_deregistrations.len(),
    );
    if reg + dereg > 0 {
        let _ = write!(
            s,
            ", {reg} load balancer {} to register, {dereg} to deregister",
            plural(reg, "target", "targets")
        );
    }
    if !plan.adopted.is_empty() {
        let _ = write!(
            s,
            ", {} untagged {} to adopt",
            plan.adopted.len(),
            plural(plan.adopted.len(), "instance", "instances")
        );
    }
    s.push('.');
    s
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

// ---------------------------------------------------------------------------
// The text plan
// ---------------------------------------------------------------------------

/// One instance of another state store, as the plan and `show` name it.
pub fn foreign_line(f: &CloudHost) -> String {
    format!(
        "instance {} (host id {}, {}, {:?}) belongs to another state store (store id {}): not touched",
        f.instance_id,
        f.host_id,
        f.instance_type,
        f.state,
        f.store_id.as_deref().unwrap_or("none")
    )
}

/// Where a plan puts things, as plain text: the hosts to launch and retire and the
/// tasks to start, move and stop with their hosts and GPUs, and the hosts to refresh
/// (the "Hosts" and "Tasks" sections of [`plan_text`]), at most `max_lines` lines
/// (then a line saying how many more there are). Empty when the plan launches,
/// retires, starts, moves and stops nothing and no pool has hosts to refresh.
pub fn placement_text(plan: &Plan, live: &StoreState, max_lines: usize) -> String {
    let pt = Paint { on: false };
    let mut out = String::new();
    refresh::refresh_section(&mut out, plan, &pt);
    hosts_section(&mut out, plan, live, &pt);
    tasks_section(&mut out, plan, live, &pt);
    let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    if lines.len() <= max_lines {
        return lines.join("\n");
    }
    let mut kept = lines[..max_lines].join("\n");
    let _ = write!(kept, "\n... and {} more lines", lines.len() - max_lines);
    kept
}

/// The whole plan as text: resource changes, registrations, hosts, tasks,
/// unplaced tasks, strays, notes, the fleet after the plan, the summary and the cost.
pub fn plan_text(plan: &Plan, live: &StoreState, opts: &RenderOptions) -> String {
    let pt = Paint { on: opts.color };
    let mut out = String::new();
    plan_header(&mut out, plan, &pt);
    for rc in &plan.resource_changes {
        diff::resource_change(&mut out, rc, &pt);
    }
    registrations_section(&mut out, plan, &pt);
    refresh::refresh_section(&mut out, plan, &pt);
    hosts_section(&mut out, plan, live, &pt);
    tasks_section(&mut out, plan, live, &pt);
    targets::targets_section(&mut out, plan, &pt);
    unplaced_section(&mut out, plan, &pt);
    strays_section(&mut out, plan, &pt);
    foreign_section(&mut out, plan, &pt);
    for n in &plan.notes {
        let _ = writeln!(out, "{} {n}", pt.p(YELLOW, "Note:"));
    }
    if !plan.notes.is_empty() {
        let _ = writeln!(out);
    }
    let fleet = if plan.is_empty() {
        "Fleet:"
    } else {
        "Fleet after this plan:"
    };
    let _ = writeln!(out, "{}", pt.p(BOLD, fleet));
    let hosts = plan.after.hosts.values().filter(|h| shown(h)).count();
    if opts.verbose || hosts <= PICTURE_MAX_HOSTS {
        out.push_str(&fleet_picture(&plan.after, opts));
    } else {
        out.push_str(&fleet::fleet_summary(&plan.after));
    }
    let _ = writeln!(out);
    if !plan.is_empty() {
        let _ = writeln!(out, "{}", pt.p(BOLD, &summary_line(plan)));
    }
    let _ = writeln!(out, "{}", cost_text(plan));
    out
}

/// The plan's first lines: the summary of an empty plan, else what gpushare will do to
/// which cluster and the symbols.
fn plan_header(out: &mut String, plan: &Plan, pt: &Paint) {
    if plan.is_empty() {
        let _ = writeln!(out, "{}", pt.p(BOLD, &summary_line(plan)));
        let _ = writeln!(out);
        return;
    }
    let what = if plan.destroy {
        "destroy everything in"
    } else {
        "change"
    };
    let _ = writeln!(
        out,
        "gpushare will {what} cluster {:?} (state serial {}). Symbols:",
        plan.cluster, plan.base_serial
    );
    let _ = writeln!(
        out,
        "  {} create   {} update in place   {} destroy   {} destroy and then create replacement",
        pt.p(GREEN, "+"),
        pt.p(YELLOW, "~"),
        pt.p(RED, "-"),
        pt.p(RED, "-/+")
    );
    let _ = writeln!(out);
}

/// A titled list: the bold title, one line for each of `lines` (indented by two), a
/// blank line; nothing at all when there are no lines.
fn section(out: &mut String, pt: &Paint, title: &str, lines: impl IntoIterator<Item = String>) {
    let mut lines = lines.into_iter().peekable();
    if lines.peek().is_none() {
        return;
    }
    let _ = writeln!(out, "{}", pt.p(BOLD, title));
    for l in lines {
        let _ = writeln!(out, "  {l}");
    }
    let _ = writeln!(out);
}

/// The task definition revisions the plan registers.
fn registrations_section(out: &mut String, plan: &Plan, pt: &Paint) {
    let lines = plan
        .registrations
        .iter()
        .map(|r| format!("{} {} revision {}", pt.p(GREEN, "+"), r.family, r.revision));
    section(out, pt, "Task definition revisions to register:", lines);
}

/// The tasks that cannot be placed, counted by service and reason: new ones (not
/// started), and those that were to take over a running task (which keeps running
/// where it is).
fn unplaced_section(out: &mut String, plan: &Plan, pt: &Paint) {
    for (takeover, title) in [
        (false, "Tasks that cannot be placed (not started):"),
        (
            true,
            "Running tasks that cannot move or be replaced (they keep running where they are):",
        ),
    ] {
        let mut groups: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for u in plan
            .unplaced
            .iter()
            .filter(|u| u.replaces.is_some() == takeover)
        {
            *groups
                .entry((u.service.as_str(), u.reason.as_str()))
                .or_default() += 1;
        }
        let lines = groups.into_iter().map(|((service, reason), n)| {
            format!(
                "{} {service}: {n} {}: {reason}",
                pt.p(RED, "!"),
                plural(n, "task", "tasks")
            )
        });
        section(out, pt, title, lines);
    }
}

/// The instances tagged with this cluster that the state does not know.
fn strays_section(out: &mut String, plan: &Plan, pt: &Paint) {
    let lines = plan.strays.iter().map(|s| {
        format!(
            "{} {} host id {} pool {} {} {:?}",
            pt.p(YELLOW, "?"),
            s.instance_id,
            s.host_id,
            s.capacity_provider,
            s.instance_type,
            s.state
        )
    });
    section(
        out,
        pt,
        "Stray instances (tagged with this cluster, unknown to the state; not touched):",
        lines,
    );
}

/// The instances of another state store under the same cluster name.
fn foreign_section(out: &mut String, plan: &Plan, pt: &Paint) {
    let lines = plan
        .foreign
        .iter()
        .map(|f| format!("{} {}", pt.p(YELLOW, "#"), foreign_line(f)));
    section(
        out,
        pt,
        "Instances of another state store (same cluster name, another gpushare:store-id; not touched):",
        lines,
    );
}

/// ` spot` (with ` at most $P/h` when the pool sets max_price) for a Spot host.
fn market_note(h: &Host) -> String {
    match (h.market, h.max_price) {
        (Market::OnDemand, _) => String::new(),
        (Market::Spot, None) => " spot".into(),
        (Market::Spot, Some(p)) => format!(" spot (at most ${p:.2}/h)"),
    }
}

fn hosts_section(out: &mut String, plan: &Plan, live: &StoreState, pt: &Paint) {
    if !plan.launches.is_empty() {
        let _ = writeln!(out, "{}", pt.p(BOLD, "Hosts to launch:"));
        for l in &plan.launches {
            let h = &l.host;
            let pinned = h
                .gpu_instance
                .as_ref()
                .map(|g| format!(" as gpu_instance.{g}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {} {} {}{} in capacity_provider.{}{pinned} ({})",
                pt.p(GREEN, "+"),
                h.id,
                h.instance_type,
                market_note(h),
                h.capacity_provider,
                gpu_summary(h)
            );
            if let Some(image) = &h.image_id {
                let _ = writeln!(out, "      in {}, image {image}", h.launch_place());
            }
        }
        let _ = writeln!(out);
    }
    if !plan.retirements.is_empty() {
        let _ = writeln!(out, "{}", pt.p(BOLD, "Hosts to retire:"));
        for r in &plan.retirements {
            let ty = live
                .hosts
                .get(&r.host_id)
                .map(|h| format!(" {}", h.instance_type))
                .unwrap_or_default();
            let _ = writeln!(out, "  {} {}{ty}: {}", pt.p(RED, "-"), r.host_id, r.reason);
        }
        let _ = writeln!(out);
    }
}

fn gpu_summary(h: &Host) -> String {
    match h.gpus.first() {
        Some(g) => format!("{} x {} {} MiB", h.gpus.len(), g.model, g.memory_mib),
        None => "no GPU".to_string(),
    }
}

/// "h-1 GPU 0 x2, GPU 1; h-2 GPU 0" for a list of (host, gpus).
fn where_list<'a>(places: impl Iterator<Item = (&'a str, &'a [u32])>) -> String {
    let mut by_host: BTreeMap<&str, BTreeMap<String, usize>> = BTreeMap::new();
    for (host, gpus) in places {
        let key = if gpus.is_empty() {
            "no GPU".to_string()
        } else {
            gpus_text(gpus)
        };
        *by_host.entry(host).or_default().entry(key).or_default() += 1;
    }
    let by_host: Vec<String> = by_host
        .into_iter()
        .map(|(host, gpus)| {
            let list: Vec<String> = gpus
                .into_iter()
                .map(|(g, n)| if n > 1 { format!("{g} x{n}") } else { g })
                .collect();
            format!("{host} {}", list.join(", "))
        })
        .collect::<Vec<_>>();
    capped(&by_host, "; ", "hosts")
}

/// Lists longer than this are cut in the text plan (the JSON plan has everything).
const LIST_MAX: usize = 8;

/// The first [`LIST_MAX`] items joined with `sep`, then "and N more WHAT".
fn capped(items: &[String], sep: &str, what: &str) -> String {
    if items.len() <= LIST_MAX {
        return items.join(sep);
    }
    format!(
        "{}{sep}and {} more {what}",
        items[..LIST_MAX].join(sep),
        items.len() - LIST_MAX
    )
}

/// Tasks to start by (service, revision): each one's host and GPUs.
type StartsByRevision<'a> = BTreeMap<(&'a str, u32), Vec<(&'a str, &'a [u32])>>;

fn tasks_section(out: &mut String, plan: &Plan, live: &StoreState, pt: &Paint) {
    deployments::deployments_section(out, plan, pt);
    deployments::scaling_section(out, plan, pt);
    if plan.starts.is_empty() && plan.stops.is_empty() && plan.moves.is_empty() {
        return;
    }
    let _ = writeln!(out, "{}", pt.p(BOLD, "Tasks:"));
    // Starts, grouped by (service, revision).
    let mut starts: StartsByRevision = BTreeMap::new();
    let mut ports: BTreeMap<(&str, u32), Vec<String>> = BTreeMap::new();
    for s in &plan.starts {
        let key = (s.task.service.as_str(), s.task.revision);
        starts
            .entry(key)
            .or_default()
            .push((s.task.host.as_str(), &s.task.gpus));
        for p in &s.task.ports {
            ports.entry(key).or_default().push(format!(
                "{}:{} ({})",
                s.task.host,
                p.host_port,
                port_name(p)
            ));
        }
    }
    for ((service, rev), places) in starts {
        let _ = writeln!(
            out,
            "  {} {service}: start {} (rev {rev}) on {}",
            pt.p(GREEN, "+"),
            places.len(),
            where_list(places.into_iter())
        );
        if let Some(ports) = ports.get(&(service, rev)) {
            let _ = writeln!(out, "      host ports: {}", capped(ports, ", ", "ports"));
        }
    }
    // Moves, one line each, at most 3 * LIST_MAX lines.
    for m in plan.moves.iter().take(3 * LIST_MAX) {
        let from = live
            .tasks
            .get(&m.from_task)
            .map(|t| format!("{} {}", t.host, gpus_text(&t.gpus)))
            .unwrap_or_else(|| m.from_task.clone());
        let _ = writeln!(
            out,
            "  {} {}: move {} from {from} to {} {} (rev {}): {}",
            pt.p(CYAN, "->"),
            m.to.service,
            m.from_task,
            m.to.host,
            gpus_text(&m.to.gpus),
            m.to.revision,
            m.reason
        );
    }
    if plan.moves.len() > 3 * LIST_MAX {
        let _ = writeln!(
            out,
            "  {} ... and {} more moves",
            pt.p(CYAN, "->"),
            plan.moves.len() - 3 * LIST_MAX
        );
    }
    // Stops, grouped by (service, reason).
    let mut stops: BTreeMap<(String, &str), Vec<String>> = BTreeMap::new();
    for s in &plan.stops {
        let service = live
            .tasks
            .get(&s.task_id)
            .map_or_else(|| "?".to_string(), |t| t.service.clone());
        let reason = match (&s.after_healthy, s.reason.starts_with("replaced by ")) {
            (Some(_), _) => "replaced once the new task is healthy",
            (None, true) => "replaced",
            (None, false) => s.reason.as_str(),
        };
        stops
            .entry((service, reason))
            .or_default()
            .push(s.task_id.clone());
    }
    for ((service, reason), ids) in stops {
        let _ = writeln!(
            out,
            "  {} {service}: stop {} ({reason}): {}",
            pt.p(RED, "-"),
            ids.len(),
            capped(&ids, ", ", "tasks")
        );
    }
    let _ = writeln!(out);
}

/// A task port as the plan names it ([`crate::model::port_text`]).
fn port_name(p: &crate::model::TaskPort) -> String {
    crate::model::port_text(&p.label(), p.protocol)
}

fn gpus_text(gpus: &[u32]) -> String {
    if gpus.is_empty() {
        "(no GPU)".to_string()
    } else {
        format!(
            "GPU {}",
            gpus.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("+")
        )
    }
}
