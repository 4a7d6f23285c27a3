//! What the pages show: a snapshot of the fleet (read from the store and the cloud,
//! never written) and the view of each page made from it. Pure functions of the
//! snapshot, so a page shows what one observation saw.

use crate::history::History;
pub use crate::snapshot::Snapshot;
use crate::svg;

use gpushare_core::model::{Host, TaskState};
use gpushare_core::render::{self, RenderOptions};
use gpushare_engine::store::PassOutcomeKind;
use minijinja::context;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
struct Totals {
    hosts: usize,
    gpus: usize,
    memory_mib: u64,
    allocated_mib: u64,
    free_mib: u64,
    tasks_running: usize,
    tasks_pending: usize,
    hourly_cost: Option<String>,
    /// What sharing saves on the MPS tasks alone (percent), after the plan.
    sharing_saves: Option<String>,
}

#[derive(Serialize)]
struct HostLine {
    id: String,
    pool: String,
    instance_type: String,
    state: String,
    mps: String,
    report_age: Option<u64>,
    alarm: bool,
    status: String,
    price: Option<String>,
    gpus: usize,
    tasks: usize,
}

/// The common parts of every page.
fn base(snap: &Snapshot, page: &str, version: u64) -> minijinja::Value {
    context! {
        page => page,
        version => version,
        cluster => &snap.state.cluster,
        serial => snap.state.serial,
        observed_at => jiff::Timestamp::from_second(i64::try_from(snap.observed_at).unwrap_or(0)).map(|t| t.to_string()).unwrap_or_default(),
        plan_error => snap.plan.as_ref().err(),
        commit => &snap.commit,
    }
}

/// The common context with a page's own values added.
fn with_base(base: minijinja::Value, page: minijinja::Value) -> minijinja::Value {
    minijinja::value::merge_maps([base, page])
}

fn render_page(name: &str, ctx: minijinja::Value) -> Result<String, minijinja::Error> {
    crate::render::templates().get_template(name)?.render(ctx)
}

/// The Jobs page: a line per job with its progress (docs/jobs.md).
pub fn jobs(snap: &Snapshot, version: u64) -> Result<String, minijinja::Error> {
    let jobs = gpushare_core::model::job_status(&snap.state);
    render_page(
        "jobs.html",
        with_base(base(snap, "jobs", version), context! { jobs => jobs }),
    )
}

/// A job's page: each index with its attempts. `None` for a job the state has no
/// progress of.
pub fn job(snap: &Snapshot, name: &str, version: u64) -> Option<Result<String, minijinja::Error>> {
    let job = gpushare_core::model::job_status(&snap.state)
        .into_iter()
        .find(|j| j.name == name)?;
    Some(render_page(
        "job.html",
        with_base(base(snap, "jobs", version), context! { job => job }),
    ))
}

/// A host's price per hour as the plans count it: a registered host at its pool's
/// `host_hourly_cost`, any other at the built-in table's price of its type (the
/// same function as the plan's cost line).
fn price(state: &gpushare_core::model::StoreState, h: &Host) -> Option<String> {
    gpushare_core::plan::host_price_in(state, h).map(|p| format!("${p:.3}"))
}

/// The Fleet page: totals, the picture, a line per host.
pub fn fleet(snap: &Snapshot, version: u64) -> Result<String, minijinja::Error> {
    let ages = svg::report_ages(&snap.reports, snap.observed_at);
    let mut totals = Totals {
        hosts: 0,
        gpus: 0,
        memory_mib: 0,
        allocated_mib: 0,
        free_mib: 0,
        tasks_running: 0,
        tasks_pending: 0,
        hourly_cost: None,
        sharing_saves: None,
    };
    // Tasks that hold room, counted per host once (not a scan of every task per host).
    let mut on_host: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for t in snap.state.tasks.values().filter(|t| render::occupying(t)) {
        *on_host.entry(t.host.as_str()).or_default() += 1;
    }
    let mut hosts = vec![];
    for (h, _, gpus) in render::fleet_usage(&snap.state)
        .into_iter()
        .filter(|(h, _, _)| render::shown(h))
    {
        totals.hosts += 1;
        totals.gpus += gpus.len();
        for g in &gpus {
            totals.memory_mib += g.memory_mib;
            totals.allocated_mib += g.allocated_memory_mib;
        }
        let age = ages.get(h.id.as_str()).copied();
        let (status, alarm) = svg::host_status(h.state, h.mps_health, age);
        hosts.push(HostLine {
            id: h.id.clone(),
            pool: h.capacity_provider.clone(),
            instance_type: h.instance_type.clone(),
            state: format!("{:?}", h.state).to_lowercase(),
            mps: format!("{:?}", h.mps_health).to_lowercase(),
            report_age: age,
            alarm,
            status,
            price: price(&snap.state, h),
            gpus: gpus.len(),
            tasks: on_host.get(h.id.as_str()).copied().unwrap_or(0),
        });
    }
    hosts.sort_by(|a, b| (&a.pool, &a.id).cmp(&(&b.pool, &b.id)));
    totals.free_mib = totals.memory_mib.saturating_sub(totals.allocated_mib);
    for t in snap.state.tasks.values() {
        match t.state {
            TaskState::Running => totals.tasks_running += 1,
            TaskState::Pending => totals.tasks_pending += 1,
            _ => {}
        }
    }
    let cost_line = snap.plan.as_ref().ok().map(render::cost_line);
    let hints = snap
        .plan
        .as_ref()
        .map(render::right_sizing_lines)
        .unwrap_or_default();
    // The disruption budget holding silent hosts back (issue 44).
    let held: Vec<String> = snap
        .plan
        .as_ref()
        .map(|p| p.held_pools.iter().map(|h| h.text()).collect())
        .unwrap_or_default();
    if let Ok(p) = &snap.plan {
        totals.hourly_cost = Some(format!("${:.2}", p.cost.now_per_hour));
        totals.sharing_saves = p.cost.sharing.as_ref().map(|s| {
            format!(
                "{:.0}% ({} on {})",
                s.saving_percent(),
                gpushare_core::util::count(s.mps_tasks as usize, "MPS task", "MPS tasks"),
                gpushare_core::util::count(s.mps_gpus as usize, "GPU", "GPUs")
            )
        });
    }
    let picture = svg::fleet_svg(&snap.state, &snap.reports, snap.observed_at)?;
    render_page(
        "fleet.html",
        with_base(
            base(snap, "fleet", version),
            context! {
                totals => totals,
                hosts => hosts,
                cost_line => cost_line,
                hints => hints,
                held => held,
                // Rendered by its own auto-escaping template.
                picture => minijinja::Value::from_safe_string(picture),
            },
        ),
    )
}

#[derive(Serialize)]
struct ServiceLine {
    name: String,
    pool: String,
    task_definition: String,
    images: Vec<String>,
    desired: Option<u32>,
    running: usize,
    pending: usize,
    other: usize,
    /// Tasks the planner cannot place, with its reason for each group.
    unplaced: Vec<(String, usize)>,
    restarts: u32,
    exit_codes: Vec<String>,
    /// Agents' reasons for its tasks that are not running.
    reasons: Vec<(String, String)>,
    /// Where its tasks answer: (task, `address:port` or the host, port name, ready, health).
    endpoints: Vec<(String, String, String, bool, String)>,
    /// Healthy tasks (running, and healthy by their check or `min_healthy_seconds`).
    healthy: Option<u32>,
    /// Its last deployment, as `show --json` gives it.
    deployment: Option<gpushare_core::model::DeploymentRecord>,
    /// Its GPU memory use over the last hour (an SVG sparkline; numbers only).
    sparkline: Option<minijinja::Value>,
}

/// The Services page: per service, desired, running, pending with the planner's reason.
pub fn services(
    snap: &Snapshot,
    history: &History,
    version: u64,
) -> Result<String, minijinja::Error> {
    let mut lines: BTreeMap<String, ServiceLine> = BTreeMap::new();
    let blank = |name: &str| ServiceLine {
        name: name.to_string(),
        pool: String::new(),
        task_definition: String::new(),
        images: vec![],
        desired: None,
        running: 0,
        pending: 0,
        other: 0,
        unplaced: vec![],
        restarts: 0,
        exit_codes: vec![],
        reasons: vec![],
        endpoints: vec![],
        healthy: None,
        deployment: None,
        sparkline: None,
    };
    if let Some(d) = &snap.desired {
        for (name, s) in &d.services {
            let mut l = blank(name);
            l.pool = s.capacity_provider.clone();
            l.task_definition = s.task_definition.clone();
            l.desired = Some(s.desired_count);
            l.images = d
                .task_definitions
                .get(&s.task_definition)
                .map(|td| td.containers.iter().map(|c| c.image.clone()).collect())
                .unwrap_or_default();
            lines.insert(name.clone(), l);
        }
    }
    let details: BTreeMap<&str, &gpushare_core::model::TaskStatus> = snap
        .reports
        .iter()
        .flat_map(|r| r.task_details.iter().map(|(id, d)| (id.as_str(), d)))
        .collect();
    for t in snap.state.tasks.values() {
        let l = lines
            .entry(t.service.clone())
            .or_insert_with(|| blank(&t.service));
        if l.task_definition.is_empty() {
            l.task_definition = t.family.clone();
        }
        match t.state {
            TaskState::Running => l.running += 1,
            TaskState::Pending => l.pending += 1,
            _ => l.other += 1,
        }
        if let Some(d) = details.get(t.id.as_str()) {
            l.restarts += d.restarts;
            if let Some(c) = d.exit_code {
                l.exit_codes.push(format!("{}: {c}", t.id));
            }
            if t.state != TaskState::Running {
                if let Some(r) = &d.reason {
                    l.reasons.push((t.id.clone(), r.clone()));
                }
            }
        }
    }
    for e in snap.endpoints() {
        let l = lines
            .entry(e.service.clone())
            .or_insert_with(|| blank(&e.service));
        let at = e
            .target()
            .unwrap_or_else(|| format!("{}:{} (no address yet)", e.host, e.host_port));
        let mut health = e.health.map_or("-", |h| h.as_str()).to_string();
        for (group, state) in &e.target_health {
            health.push_str(&format!("; target group {group}: {state}"));
        }
        l.endpoints.push((e.task, at, e.port, e.ready, health));
    }
    for st in snap.services() {
        let l = lines
            .entry(st.service.clone())
            .or_insert_with(|| blank(&st.service));
        l.healthy = Some(st.healthy);
        l.deployment = st.deployment;
    }
    if let Ok(p) = &snap.plan {
        let mut groups: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for u in &p.unplaced {
            *groups
                .entry((u.service.as_str(), u.reason.as_str()))
                .or_default() += 1;
        }
        for ((service, reason), n) in groups {
            let l = lines
                .entry(service.to_string())
                .or_insert_with(|| blank(service));
            l.unplaced.push((reason.to_string(), n));
        }
    }
    for l in lines.values_mut() {
        let points = history.usage(&l.name);
        l.sparkline =
            svg::sparkline(&points, snap.observed_at / 60).map(minijinja::Value::from_safe_string);
    }
    render_page(
        "services.html",
        with_base(
            base(snap, "services", version),
            context! { services => lines.into_values().collect::<Vec<_>>() },
        ),
    )
}

#[derive(Serialize)]
struct TaskLine {
    id: String,
    service: String,
    gpus: String,
    state: String,
    gpu_memory_mib: u64,
    max_compute_percent: Option<u8>,
    reason: Option<String>,
    restarts: u32,
    exit_code: Option<i64>,
}

/// A host's page: launch settings, reported inventory, tasks with state and reason.
/// None when the state has no such host.
pub fn host(
    snap: &Snapshot,
    history: &History,
    id: &str,
    version: u64,
) -> Option<Result<String, minijinja::Error>> {
    let h = snap.state.hosts.get(id)?;
    let report = snap.reports.iter().find(|r| r.host_id == h.id);
    let age = report
        .filter(|r| r.unreadable.is_none())
        .map(|r| snap.observed_at.saturating_sub(r.at));
    let (status, alarm) = svg::host_status(h.state, h.mps_health, age);
    let tasks: Vec<TaskLine> = snap
        .tasks_on(&h.id)
        .map(|t| {
            let d = report.and_then(|r| r.task_details.get(&t.id));
            TaskLine {
                id: t.id.clone(),
                service: t.service.clone(),
                gpus: t
                    .gpus
                    .iter()
                    .map(|g| format!("GPU{g}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                state: format!("{:?}", t.state).to_lowercase(),
                gpu_memory_mib: t.gpu_memory_mib(),
                max_compute_percent: t.max_compute_percent(),
                reason: d.and_then(|d| d.reason.clone()),
                restarts: d.map(|d| d.restarts).unwrap_or(0),
                exit_code: d.and_then(|d| d.exit_code),
            }
        })
        .collect();
    let launched = h
        .launched_at
        .and_then(|s| jiff::Timestamp::from_second(i64::try_from(s).ok()?).ok())
        .map(|t| t.to_string());
    // The picture of this host alone (its tasks, not a copy of the whole fleet).
    let one = gpushare_core::model::StoreState {
        serial: snap.state.serial,
        cluster: snap.state.cluster.clone(),
        store_id: snap.state.store_id.clone(),
        // What says whether a service reserves compute on its GPUs.
        resources: snap.state.resources.clone(),
        hosts: [(h.id.clone(), h.clone())].into(),
        tasks: snap
            .tasks_on(&h.id)
            .map(|t| (t.id.clone(), t.clone()))
            .collect(),
        ..Default::default()
    };
    let picture = match svg::fleet_svg(&one, &snap.reports, snap.observed_at) {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    Some(render_page(
        "host.html",
        with_base(
            base(snap, "host", version),
            context! {
                host => context! {
                    id => &h.id,
                    pool => &h.capacity_provider,
                    gpu_instance => &h.gpu_instance,
                    // A registered host that gave no type is recorded as "registered".
                    instance_type => if h.instance_type == gpushare_core::REGISTERED_TYPE {
                        ""
                    } else {
                        h.instance_type.as_str()
                    },
                    instance_id => &h.instance_id,
                    zone => &h.zone,
                    subnet => &h.subnet,
                    image_id => &h.image_id,
                    market => h.market.as_str().replace('_', "-"),
                    max_price => h.max_price,
                    launched_at => launched,
                    state => format!("{:?}", h.state).to_lowercase(),
                    price => price(&snap.state, h),
                    registered => h.is_registered(),
                    status => status,
                    alarm => alarm,
                },
                report => report.map(|r| context! {
                    age => age,
                    unreadable => &r.unreadable,
                    mps_health => format!("{:?}", r.mps_health).to_lowercase(),
                    mps_error => &r.mps_error,
                    mps_failures => r.mps_failures,
                    agent_version => &r.agent_version,
                    gpus => &r.gpus,
                }),
                pool => pool_settings(snap, &h.capacity_provider),
                probes => probe_lines(history, &h.id),
                probes_kept => crate::history::PROBES_PER_HOST,
                tasks => tasks,
                picture => minijinja::Value::from_safe_string(picture),
            },
        ),
    ))
}

#[derive(Serialize)]
struct ProbeLine {
    at: String,
    heartbeat_age: u64,
    mps: String,
    failures: u32,
    error: Option<String>,
    alarm: bool,
}

/// A host's reports the console has seen, newest first.
fn probe_lines(history: &History, host: &str) -> Vec<ProbeLine> {
    history
        .probes(host)
        .into_iter()
        .map(|p| ProbeLine {
            at: time(p.at),
            heartbeat_age: p.heartbeat_age,
            mps: format!("{:?}", p.mps_health).to_lowercase(),
            failures: p.mps_failures,
            error: p.mps_error,
            alarm: p.mps_health == gpushare_core::model::MpsHealth::Impaired || p.mps_failures > 0,
        })
        .collect()
}

/// Seconds since the Unix epoch as an RFC 3339 time ("" when out of range).
fn time(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The launch settings of a host's pool, as the configuration declares them now
/// (None when the pool is not in the configuration).
fn pool_settings(snap: &Snapshot, pool: &str) -> Option<minijinja::Value> {
    let p = snap.desired.as_ref()?.capacity_providers.get(pool)?;
    Some(context! {
        registered => p.is_registered(),
        host_hourly_cost => p.registered_host_cost(),
        instance_type => &p.instance_type,
        fallback_types => &p.instance_types,
        market => p.market.as_str().replace('_', "-"),
        size => format!("{} to {}", p.min_size, p.max_size),
        image => &p.image,
        subnets => &p.subnets,
        security_groups => &p.security_groups,
        instance_profile => &p.instance_profile,
        mps_enabled => p.mps.enabled,
        mps_threads => p.mps.default_active_thread_percentage,
        mps_pipe => &p.mps.pipe_directory,
        imds_v2 => p.metadata_options.http_tokens_required,
        hop_limit => p.metadata_options.http_put_response_hop_limit,
        root_volume => format!(
            "{} GiB {}{}",
            p.root_volume.size_gib,
            p.root_volume.volume_type,
            if p.root_volume.encrypted { ", encrypted" } else { "" }
        ),
    })
}

#[derive(Serialize)]
struct PassLine {
    pass: u64,
    holder: String,
    started_at: String,
    /// Seconds, from the record's start and finish times.
    duration: Option<String>,
    outcome: String,
    commit: Option<String>,
    summary: Option<String>,
    error: Option<String>,
    alarm: bool,
}

/// The passes the console has seen, newest first.
fn pass_lines(history: &History) -> Vec<PassLine> {
    history
        .passes()
        .into_iter()
        .map(|s| {
            let parse = |t: &str| t.parse::<jiff::Timestamp>().ok();
            let duration = match (parse(&s.started_at), parse(&s.finished_at)) {
                (Some(a), Some(b)) => {
                    let ms = b.as_millisecond().saturating_sub(a.as_millisecond());
                    Some(if ms < 1000 {
                        format!("{ms} ms")
                    } else {
                        format!("{:.1} s", ms as f64 / 1000.0)
                    })
                }
                _ => None,
            };
            PassLine {
                pass: s.pass,
                holder: s.holder.clone(),
                started_at: s.started_at.clone(),
                duration,
                outcome: s.outcome.as_str().replace('_', " "),
                commit: s
                    .commit
                    .as_deref()
                    .map(|c| c.get(..12).unwrap_or(c).to_string()),
                summary: s.summary.clone(),
                error: s.error.clone(),
                alarm: matches!(
                    s.outcome,
                    PassOutcomeKind::Failed | PassOutcomeKind::DriftDetected
                ),
            }
        })
        .collect()
}

/// The Plan page: the plan `gpushare plan` prints, as text; the configuration's
/// commit (git sources); the last passes the console has seen.
pub fn plan(snap: &Snapshot, history: &History, version: u64) -> Result<String, minijinja::Error> {
    let (text, summary) = match &snap.plan {
        Ok(p) => (
            Some(render::plan_text(p, &snap.state, &RenderOptions::default())),
            Some(render::summary_line(p)),
        ),
        Err(_) => (None, None),
    };
    let status = snap.status.as_ref().map(|s| {
        context! {
            source => &s.source,
            commit => &s.commit,
            pass => s.pass,
            holder => &s.holder,
            finished_at => &s.finished_at,
            outcome => s.outcome.as_str().replace('_', " "),
        }
    });
    render_page(
        "plan.html",
        with_base(
            base(snap, "plan", version),
            context! {
                text => text,
                summary => summary,
                status => status,
                passes => pass_lines(history),
                passes_kept => crate::history::PASSES,
            },
        ),
    )
}

/// The login page (off loopback, without a token yet).
/// The page served before the first observation (or while observing fails): it
/// loads itself again every second, so a browser opened early ends on the page asked.
pub fn waiting(why: &str) -> Result<String, minijinja::Error> {
    render_page("waiting.html", context! { why => why })
}

pub fn login(failed: bool) -> Result<String, minijinja::Error> {
    render_page("login.html", context! { failed => failed })
}
