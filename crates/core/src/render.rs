//! Rendering of plans and fleets: Terraform-style text, the fleet picture, JSON.
//!
//! Pure functions of their inputs. Colours (ANSI) only when asked for: the CLI
//! decides (a terminal, and no `NO_COLOR`).

use crate::model::{CloudHost, Host, Market, StoreState, SENSITIVE, SENSITIVE_CHANGED};
use crate::plan::{Action, AttrChange, Plan, ResourceChange};
use crate::schema::{self, Block};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

mod cost;
mod deployments;
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
        resource_change(&mut out, rc, &pt);
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

fn resource_change(out: &mut String, rc: &ResourceChange, pt: &Paint) {
    let (sym, color, verb) = match rc.action {
        Action::Create => ("  +", GREEN, "will be created"),
        Action::Update => ("  ~", YELLOW, "will be updated in place"),
        Action::Delete => ("  -", RED, "will be destroyed"),
        Action::Replace => ("-/+", RED, "must be replaced"),
    };
    let blocks = &schema::schema(rc.addr.kind).blocks;
    let _ = writeln!(out, "  {}", pt.p(BOLD, &format!("# {} {verb}", rc.addr)));
    let _ = writeln!(
        out,
        "{} {} {:?} {{",
        pt.p(color, sym),
        rc.addr.kind.as_str(),
        rc.addr.name
    );
    // Nulls are not shown on create and destroy (they are "not set"), nor a registered
    // pool's launch settings unless they change (its hosts join by themselves).
    let registered = rc.addr.kind == crate::model::ResourceKind::CapacityProvider
        && [&rc.before, &rc.after]
            .into_iter()
            .flatten()
            .any(crate::model::is_registered_attrs);
    let shown: Vec<&AttrChange> = rc
        .changes
        .iter()
        .filter(|c| {
            !matches!(
                (&c.before, &c.after),
                (None | Some(Value::Null), None | Some(Value::Null))
            )
        })
        .filter(|c| {
            !registered
                || !crate::model::LAUNCH_ONLY_ATTRIBUTES.contains(&c.name.as_str())
                || matches!((&c.before, &c.after), (Some(b), Some(a)) if a != b)
        })
        .collect();
    let width = shown
        .iter()
        .filter(|c| !is_multiline(c, blocks))
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0);
    for c in shown {
        attr_change(out, c, blocks, width, pt);
    }
    let _ = writeln!(out, "    }}");
    let _ = writeln!(out);
}

/// Compact JSON for short values; `None` for values shown over several lines.
fn short(v: &Value) -> Option<String> {
    let s = inline(v);
    let simple = !matches!(v, Value::Array(_) | Value::Object(_)) || s.len() <= 48;
    (simple && !s.contains("\\n")).then_some(s)
}

/// A value on one line: JSON scalars, `["a", "b"]`, `{ "k" = "v" }`.
fn inline(v: &Value) -> String {
    match v {
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(inline).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) if m.is_empty() => "{}".to_string(),
        Value::Object(m) => {
            let kv: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{} = {}", Value::String(k.clone()), inline(v)))
                .collect();
            format!("{{ {} }}", kv.join(", "))
        }
        // Redacted secrets read as Terraform shows them: `(sensitive)`, unquoted.
        Value::String(s) if s == SENSITIVE || s == SENSITIVE_CHANGED => s.clone(),
        other => other.to_string(),
    }
}

fn is_multiline(c: &AttrChange, blocks: &[Block]) -> bool {
    blocks.iter().any(|b| b.name == c.name)
        || c.before.as_ref().is_some_and(|v| short(v).is_none())
        || c.after.as_ref().is_some_and(|v| short(v).is_none())
}

/// `name = value` lines, HCL-like: blocks (from the schema) as `name "label" { ... }`,
/// long lists and maps over several lines, nulls left out. Two spaces per level.
fn hcl_lines(out: &mut Vec<String>, name: &str, v: &Value, blocks: &[Block], indent: usize) {
    let pad = " ".repeat(indent);
    if v.is_null() {
        return;
    }
    if let Some(b) = blocks.iter().find(|b| b.name == name) {
        let items: Vec<&Value> = match v {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for item in items {
            let label = b
                .label
                .as_ref()
                .and_then(|l| item.get(l))
                .map(|l| format!(" {l}"))
                .unwrap_or_default();
            out.push(format!("{pad}{name}{label} {{"));
            if let Value::Object(m) = item {
                let width = m
                    .iter()
                    .filter(|(k, v)| {
                        !v.is_null()
                            && Some(*k) != b.label.as_ref()
                            && !b.blocks.iter().any(|x| &x.name == *k)
                    })
                    .filter(|(_, v)| short(v).is_some())
                    .map(|(k, _)| k.len())
                    .max()
                    .unwrap_or(0);
                for (k, v) in m {
                    if Some(k) == b.label.as_ref() {
                        continue;
                    }
                    if short(v).is_some() && !b.blocks.iter().any(|x| &x.name == k) {
                        if !v.is_null() {
                            out.push(format!("{pad}  {k:<width$} = {}", inline(v)));
                        }
                    } else {
                        hcl_lines(out, k, v, &b.blocks, indent + 2);
                    }
                }
            }
            out.push(format!("{pad}}}"));
        }
        return;
    }
    match v {
        Value::Array(items) if short(v).is_none() => {
            out.push(format!("{pad}{name} = ["));
            for i in items {
                out.push(format!("{pad}  {},", inline(i)));
            }
            out.push(format!("{pad}]"));
        }
        Value::Object(m) if short(v).is_none() => {
            out.push(format!("{pad}{name} = {{"));
            for (k, v) in m {
                out.push(format!(
                    "{pad}  {} = {}",
                    Value::String(k.clone()),
                    inline(v)
                ));
            }
            out.push(format!("{pad}}}"));
        }
        _ => out.push(format!("{pad}{name} = {}", inline(v))),
    }
}

fn attr_change(out: &mut String, c: &AttrChange, blocks: &[Block], width: usize, pt: &Paint) {
    let forces = if c.forces_replacement {
        format!(" {}", pt.p(RED, "# forces replacement"))
    } else {
        String::new()
    };
    let (sym, color) = match (&c.before, &c.after) {
        (None, Some(_)) => ("+", GREEN),
        (Some(_), None) => ("-", RED),
        _ => ("~", YELLOW),
    };
    if !is_multiline(c, blocks) {
        let b = c
            .before
            .as_ref()
            .and_then(short)
            .unwrap_or_else(|| "null".into());
        let a = c
            .after
            .as_ref()
            .and_then(short)
            .unwrap_or_else(|| "null".into());
        let value = match (&c.before, &c.after) {
            (None, Some(_)) => a,
            (Some(_), None) => b,
            _ => format!("{b} -> {a}"),
        };
        let _ = writeln!(
            out,
            "      {} {:<width$} = {value}{forces}",
            pt.p(color, sym),
            c.name
        );
        return;
    }
    let lines = |v: &Option<Value>| {
        let mut l = vec![];
        if let Some(v) = v {
            hcl_lines(&mut l, &c.name, v, blocks, 0);
        }
        l
    };
    let (b, a) = (lines(&c.before), lines(&c.after));
    let (b, a): (Vec<&str>, Vec<&str>) = (
        b.iter().map(String::as_str).collect(),
        a.iter().map(String::as_str).collect(),
    );
    let diff = similar::TextDiff::configure().diff_slices(&b, &a);
    let mut forces = forces;
    let groups = diff.grouped_ops(3);
    for (i, group) in groups.iter().enumerate() {
        // "..." wherever unchanged lines are left out.
        let starts_at = group.first().map_or(0, |op| op.new_range().start);
        if i > 0 || starts_at > 0 {
            let _ = writeln!(out, "        {}", pt.p(DIM, "..."));
        }
        for op in group {
            for change in diff.iter_changes(op) {
                let line = change.value();
                let _ = match change.tag() {
                    similar::ChangeTag::Delete => writeln!(
                        out,
                        "      {} {line}{}",
                        pt.p(RED, "-"),
                        std::mem::take(&mut forces)
                    ),
                    similar::ChangeTag::Insert => writeln!(
                        out,
                        "      {} {line}{}",
                        pt.p(GREEN, "+"),
                        std::mem::take(&mut forces)
                    ),
                    // The unchanged header of a changed block reads `~ name {`.
                    similar::ChangeTag::Equal if change.old_index() == Some(0) => {
                        writeln!(out, "      {} {line}", pt.p(YELLOW, "~"))
                    }
                    similar::ChangeTag::Equal => writeln!(out, "        {line}"),
                };
            }
        }
    }
    let ends_at = groups
        .last()
        .and_then(|g| g.last())
        .map_or(0, |op| op.new_range().end);
    if !groups.is_empty() && ends_at < a.len() {
        let _ = writeln!(out, "        {}", pt.p(DIM, "..."));
    }
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
