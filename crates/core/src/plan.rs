//! The planner: `plan(&Desired, &Live, &Options) -> Plan`, pure.
//!
//! A [`Plan`] fixes every choice (ids of new hosts and tasks, launch tokens, the
//! GPU each task goes to) so that applying it decides nothing. Its steps are
//! listed in the order `apply` carries them out; each step is idempotent so a
//! crashed apply can be resumed by running the same plan again.

use crate::model::{
    Desired, GpuMode, Host, HostState, Live, MpsHealth, ResourceAddr, Revision, ShapeError,
    StoreState, Task, TaskGpu, TaskShape, TaskState, FORMAT_VERSION,
};

mod consolidate;
mod cost;
mod deploy;
mod diff;
mod health;
mod hosts;
mod jobs;
mod place;
mod pools;
mod ports;
mod reasons;
mod refresh;
mod registered;
mod rightsize;
mod scaling;
mod services;
mod targets;
mod triage;
mod types;
mod validate;

pub use cost::{cost, host_price, host_price_in, host_price_in_book, host_price_with, HostPrice};
pub use deploy::retry_backoff_seconds;
pub use refresh::{outdated_hosts, outdated_settings, OutdatedHost, PoolRefresh};
pub use targets::groups_to_observe;
pub use types::{
    Action, AttrChange, ConsolidationHint, Cost, HeldPool, Launch, LaunchBasis, Move, Options,
    Plan, Pricing, Registration, ResourceChange, Retire, RightSizing, Sharing, Silence, Start,
    Step, Stop, Successor, TargetChange, TargetWhen, UsageHint, DEFAULT_BOOT_GRACE_SECONDS,
    DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, DEFAULT_MAX_MOVES,
};

// ---------------------------------------------------------------------------
// The planner
// ---------------------------------------------------------------------------
//
// What it does, in order (all of it deterministic for `settings.seed`):
//
// 1. Resource changes: `desired.resources()` against `live.state.resources`,
//    attribute by attribute (top-level keys); `Replace` when a changed attribute
//    forces replacement (`schema::forces_replacement`).
// 2. Registrations: a family whose desired spec differs from its latest
//    registered revision registers revision N+1 (the first is 1).
// 3. Hosts: the active hosts (pending, running, draining) are sorted into kept
//    and drained. A host is drained (its tasks moved, start before stop, then it
//    is retired) when its pool or `gpu_instance` resource is gone, or when it is
//    sick: MPS impaired, silent (last heartbeat older than
//    `heartbeat_timeout_seconds` at `observed_at`; a host that never reported
//    counts silent once `boot_grace_seconds` since its launch are over), already
//    draining, or of an instance type or market its pool no longer has; or any
//    health check of its agent is impaired (`plan/health.rs`: an impaired GPU
//    alone moves its tasks and takes no new ones; `auto_repair = false` keeps every
//    host and notes it). Sick hosts
//    with tasks are drained at most
//    `max(1, hosts * max_draining_percent / 100)` per pool at once (hosts already
//    draining count first); the others wait, taking no new tasks (a note says so).
//    Records of hosts terminated (or shutting down) outside gpushare are
//    dropped with a retirement; their tasks count as gone.
// 3b. Auto scaling (`plan/scaling.rs`): each service with `auto_scaling` gets its
//    count from its scaling record (a new record starts at `desired_count`), held
//    to `min_count ..= max_count`; when the metric averaged over its healthy tasks'
//    fresh usage samples has been above (below) the target for the scale-out
//    (scale-in) cooldown it becomes `ceil(count * metric / target)`, within the
//    bounds (no scale-in during a deployment). The steps below see that count as
//    the service's `desired_count`.
// 4. Services: records of failed or stopped tasks are cleared (a stop step);
//    tasks are counted per service (pending or running, on an active host);
//    tasks whose host is gone are stopped. Too many: the extras stop, first
//    those on drained hosts, then those on an old revision, then the rest,
//    always from the host with the fewest tasks first so hosts empty out. Tasks on drained hosts move. Tasks on an old
//    revision, another family or another pool are replaced (start the new one,
//    then stop the old), at most B per plan where
//    B = max(1, desired_count * max_surge_percent / 100), or, when
//    max_surge_percent is 0, B = max(1, desired_count - ceil(desired_count *
//    min_healthy_percent / 100)). Apply always starts before it stops, so a
//    replacement never lowers the number of healthy tasks; the rest of an
//    oversized rollout is replaced by the next plan. Too few: new tasks start.
// 5. Placement: one call to `placement::place` with the kept hosts (their load
//    from every non-stopped task, including those this plan stops: apply starts
//    before it stops, so freed room is only used by the next plan). Drained hosts
//    are left out, so their replacements may exceed `max_size` for a while.
//    `gpu_instance` hosts (one pinned host per resource) count towards neither
//    `min_size` nor `max_size` of their pool: the limits given to the engine are
//    raised by the number of pinned hosts it sees.
// 6. With `options.consolidate`, running tasks are moved off the least loaded
//    hosts onto the others (never onto new hosts), at most `max_moves` moves.
// 7. Pools: empty hosts beyond `min_size` are retired, "newest" first (hosts carry
//    no launch time, so: pending ones first, then by id, descending); pools below
//    `min_size` launch empty hosts; a pool left above `max_size` by hosts that keep
//    tasks gets a note (nothing running is moved for it without `consolidate`).
//    A pinned `gpu_instance` host is never retired for being empty; it is
//    replaced like any other when sick, and retired when its resource goes.
// 8. `after`: the store state once applied, and the cost.
//
// Where each step lives: 1 in `plan/diff.rs`; the checks before 2 in
// `plan/validate.rs`; 3 in `plan/triage.rs`; 4 in `plan/services.rs`; 5 in
// `plan/place.rs` (new hosts, and hosts and pools as the engine sees them, in
// `plan/hosts.rs`); 6 in `plan/consolidate.rs`; 7 in `plan/pools.rs`; 8 in
// `finish` below and `plan/cost.rs`. The steps decide with the typed reasons of
// `plan/reasons.rs`, which become the plan's text where its records are built.

use crate::placement::{GpuLoad, HostLoad};
use reasons::{DrainReason, RetireReason, StopReason};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Compute the plan. Pure: no I/O, no clock, deterministic for `desired.settings.seed`.
pub fn plan(desired: &Desired, live: &Live, options: &Options) -> Result<Plan, PlanError> {
    // The one-off jobs the state records (`gpushare run`) are planned as declared.
    let with_one_offs = crate::model::with_one_off_jobs(desired, &live.state)?;
    let desired = with_one_offs.as_ref().unwrap_or(desired);
    // The configuration with the auto-scaled services' counts (step 3b), once decided.
    let scaled: Option<Desired>;
    let mut p = Planner::new(desired, live, options);
    p.resource_changes();
    if options.destroy {
        p.destroy();
    } else {
        p.validate()?;
        p.validate_jobs()?;
        p.instance_facts_notes();
        p.registrations();
        scaled = p.auto_scaling();
        if let Some(d) = scaled.as_ref() {
            p.desired = d;
        }
        p.hosts_and_tasks();
    }
    let mut out = p.finish();
    targets::plan_targets(desired, live, &mut out);
    consolidation_hint(desired, live, options, &mut out)?;
    Ok(out)
}

/// On a plan that changes nothing and was made without `consolidate`: what the same
/// plan with it would move, retire and save, when it would retire a host (run only
/// where [`consolidate::worth_trying`] finds room enough).
fn consolidation_hint(
    desired: &Desired,
    live: &Live,
    options: &Options,
    out: &mut Plan,
) -> Result<(), PlanError> {
    if options.destroy || options.consolidate || options.max_moves == 0 || !out.is_empty() {
        return Ok(());
    }
    let min_sizes = desired
        .capacity_providers
        .iter()
        .map(|(n, p)| (n.clone(), p.min_size))
        .collect();
    if !consolidate::worth_trying(&out.after, &min_sizes) {
        return Ok(());
    }
    let with = plan(
        desired,
        live,
        &Options {
            consolidate: true,
            ..options.clone()
        },
    )?;
    let saves = out.cost.after_per_hour - with.cost.after_per_hour;
    if !with.retirements.is_empty() && saves >= 0.005 {
        out.cost.consolidation = Some(ConsolidationHint {
            moves: with.moves.len() as u32,
            retire: with.retirements.len() as u32,
            saves_per_hour: saves,
        });
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("{addr}: unknown instance type {instance_type:?} (close matches: {})", suggestions.join(", "))]
    UnknownInstanceType {
        addr: ResourceAddr,
        instance_type: String,
        suggestions: Vec<String>,
    },
    #[error("{addr}: {attr} names {target}, which is not declared")]
    MissingReference {
        addr: ResourceAddr,
        attr: &'static str,
        target: ResourceAddr,
    },
    #[error("{addr}: {message}")]
    Invalid { addr: ResourceAddr, message: String },
    /// A record of the state the plan needs does not read: planning without it
    /// would stop what it runs, so nothing is planned.
    #[error("{}; fix the record (or remove it with `gpushare state rm {}`) and plan again", .0, .0.addr)]
    UnreadableRecord(#[from] crate::model::UnreadableRecord),
    #[error("{addr}: the containers' GPU needs do not make a valid task")]
    Shape {
        addr: ResourceAddr,
        #[source]
        source: ShapeError,
    },
}

impl PlanError {
    /// The resource the error is about (every variant has one): callers decide by it
    /// (the Terraform provider reports an error on the resource it names), never by
    /// the message's text.
    pub fn addr(&self) -> &ResourceAddr {
        match self {
            PlanError::UnknownInstanceType { addr, .. }
            | PlanError::MissingReference { addr, .. }
            | PlanError::Invalid { addr, .. }
            | PlanError::Shape { addr, .. } => addr,
            PlanError::UnreadableRecord(r) => &r.addr,
        }
    }
}

/// Stable hex digest of `parts` (separated so that ("ab","c") != ("a","bc")).
fn digest_hex(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0x1f]);
    }
    hex::encode(h.finalize())
}

/// The idempotency token of a host's launch: hex sha256 of (cluster, store id,
/// host id), so that two stores planning the same host id (same cluster, serial and
/// seed) never share a token. With an empty store id (a store without identity) it
/// is the token of before store identity, hex sha256 of (cluster, host id).
pub fn launch_token(cluster: &str, store_id: &str, host_id: &str) -> String {
    if store_id.is_empty() {
        digest_hex(&[cluster, host_id])
    } else {
        digest_hex(&[cluster, store_id, host_id])
    }
}

/// One note per instance adopted without a store-id tag (see `Live::adopted`).
fn adoption_notes(live: &Live) -> Vec<String> {
    live.adopted
        .iter()
        .map(|c| {
            format!(
                "instance {} (host {}) has no gpushare:store-id tag (launched before store identity): adopted by this state store; apply tags it with store id {}",
                c.instance_id,
                c.host_id,
                if live.state.store_id.is_empty() { "none" } else { &live.state.store_id }
            )
        })
        .collect()
}

/// The next unused id for `name`: `make(ordinal)` for ordinals counted per name,
/// skipping ids already taken (hash prefixes can collide in large fleets).
fn next_id<V>(
    ordinals: &mut BTreeMap<String, u64>,
    existing: &BTreeMap<String, V>,
    used: &mut BTreeSet<String>,
    name: &str,
    make: impl Fn(&str) -> String,
) -> String {
    loop {
        let n = ordinals.entry(name.to_string()).or_insert(0);
        let id = make(&n.to_string());
        *n += 1;
        if !existing.contains_key(&id) && used.insert(id.clone()) {
            return id;
        }
    }
}

/// Number of tasks occupying each host.
fn task_counts(tasks: &BTreeMap<String, Task>) -> HashMap<&str, usize> {
    let mut m: HashMap<&str, usize> = HashMap::new();
    for t in tasks.values().filter(|t| occupies(t)) {
        *m.entry(t.host.as_str()).or_default() += 1;
    }
    m
}

/// The live tasks of `state` ([`is_live_task`]) by service, in id order: one pass.
fn live_tasks_by_service(state: &StoreState) -> BTreeMap<&str, Vec<&Task>> {
    let mut out: BTreeMap<&str, Vec<&Task>> = BTreeMap::new();
    for t in state.tasks.values().filter(|t| is_live_task(t)) {
        out.entry(t.service.as_str()).or_default().push(t);
    }
    out
}

/// Tasks that hold resources on their host and count for their service.
fn is_live_task(t: &Task) -> bool {
    matches!(t.state, TaskState::Pending | TaskState::Running)
}

/// Tasks that occupy room on their host (a stopping task still holds its memory).
fn occupies(t: &Task) -> bool {
    matches!(
        t.state,
        TaskState::Pending | TaskState::Running | TaskState::Stopping
    )
}

fn host_is_up(h: &Host) -> bool {
    matches!(
        h.state,
        HostState::Pending | HostState::Running | HostState::Draining
    )
}

struct Planner<'a> {
    desired: &'a Desired,
    live: &'a Live,
    options: &'a Options,
    cluster: String,
    base: u64,
    seed: String,
    /// Ids this plan hands out (beside those of `live`, which are never reused).
    used_host_ids: BTreeSet<String>,
    used_task_ids: BTreeSet<String>,
    host_ordinal: BTreeMap<String, u64>,
    task_ordinal: BTreeMap<String, u64>,
    /// Target (family -> revision, shape).
    targets: BTreeMap<String, (u32, TaskShape)>,
    out: Plan,
    /// The tasks as they will be (id -> task).
    tasks: BTreeMap<String, Task>,
    /// The hosts as they will be.
    hosts: BTreeMap<String, Host>,
    /// Drained hosts and why.
    drained: BTreeMap<String, DrainReason>,
    /// Hosts kept but taking no new tasks.
    closed: BTreeSet<String>,
    /// Hosts kept even when empty beyond `min_size`: a refresh's new hosts while it
    /// waits for them or is halted by them (`plan/refresh.rs`).
    held: BTreeSet<String>,
    /// Host -> the host ports held there (built when a task first needs ports).
    port_use: Option<BTreeMap<String, BTreeSet<crate::model::HostPortKey>>>,
    /// Service -> its live tasks in `live` (in id order), built once: judging each
    /// service's deployment scanned every task per service (issue 52).
    live_by_service: BTreeMap<&'a str, Vec<&'a Task>>,
}

impl<'a> Planner<'a> {
    fn new(desired: &'a Desired, live: &'a Live, options: &'a Options) -> Self {
        let cluster = if desired.settings.cluster.is_empty() {
            live.state.cluster.clone()
        } else {
            desired.settings.cluster.clone()
        };
        let base = live.state.serial;
        Planner {
            desired,
            live,
            options,
            seed: desired.settings.seed.to_string(),
            used_host_ids: BTreeSet::new(),
            used_task_ids: BTreeSet::new(),
            host_ordinal: BTreeMap::new(),
            task_ordinal: BTreeMap::new(),
            targets: BTreeMap::new(),
            out: Plan {
                format_version: FORMAT_VERSION.to_string(),
                cluster: cluster.clone(),
                base_serial: base,
                destroy: options.destroy,
                resource_changes: vec![],
                registrations: vec![],
                launches: vec![],
                retirements: vec![],
                starts: vec![],
                stops: vec![],
                moves: vec![],
                deployments: vec![],
                scaling: vec![],
                jobs: vec![],
                target_registrations: vec![],
                target_deregistrations: vec![],
                unplaced: vec![],
                strays: live.strays.clone(),
                foreign: live.foreign.clone(),
                adopted: live.adopted.clone(),
                after: StoreState::default(),
                cost: Cost::default(),
                notes: adoption_notes(live),
                refreshes: vec![],
                held_pools: vec![],
            },
            tasks: live.state.tasks.clone(),
            hosts: live.state.hosts.clone(),
            drained: BTreeMap::new(),
            closed: BTreeSet::new(),
            held: BTreeSet::new(),
            port_use: None,
            live_by_service: live_tasks_by_service(&live.state),
            cluster,
            base,
        }
    }

    /// The live tasks of service `sname` in `live`, in id order.
    fn live_tasks_of(&self, sname: &str) -> &[&'a Task] {
        self.live_by_service.get(sname).map_or(&[], Vec::as_slice)
    }

    fn new_host_id(&mut self, pool: &str) -> String {
        let (base, cluster, seed) = (self.base.to_string(), &self.cluster, &self.seed);
        next_id(
            &mut self.host_ordinal,
            &self.live.state.hosts,
            &mut self.used_host_ids,
            pool,
            |ord| {
                format!(
                    "h-{pool}-{}",
                    &digest_hex(&[cluster, pool, &base, ord, seed])[..6]
                )
            },
        )
    }

    fn new_task_id(&mut self, service: &str) -> String {
        let (base, cluster, seed) = (self.base.to_string(), &self.cluster, &self.seed);
        next_id(
            &mut self.task_ordinal,
            &self.live.state.tasks,
            &mut self.used_task_ids,
            service,
            |ord| {
                format!(
                    "t-{service}-{}",
                    &digest_hex(&[cluster, service, &base, ord, seed])[..8]
                )
            },
        )
    }

    fn registrations(&mut self) {
        for (family, spec) in &self.desired.task_definitions {
            let latest = self
                .live
                .state
                .revisions
                .get(family)
                .and_then(|v| v.iter().max_by_key(|r| r.revision));
            let revision = match latest {
                Some(r) if &r.spec == spec => r.revision,
                Some(r) => r.revision + 1,
                None => 1,
            };
            if latest.map(|r| r.revision) != Some(revision) {
                self.out.registrations.push(Registration {
                    family: family.clone(),
                    revision,
                    spec: spec.clone(),
                });
            }
            // Validated: the shape exists.
            if let Ok(shape) = spec.shape() {
                self.targets.insert(family.clone(), (revision, shape));
            }
        }
    }

    fn destroy(&mut self) {
        for t in self.live.state.tasks.values().filter(|t| is_live_task(t)) {
            self.out
                .stops
                .push(Stop::now(t.id.clone(), StopReason::Destroy.to_string()));
        }
        for h in self.live.state.hosts.values().filter(|h| host_is_up(h)) {
            self.out.retirements.push(Retire {
                host_id: h.id.clone(),
                reason: RetireReason::Destroy.to_string(),
                if_empty: false,
            });
        }
    }

    /// Steps 3 to 7 (see the list at the top): which hosts stay, what each service
    /// keeps, stops and wants, where the wanted tasks go, consolidation, and the
    /// pools sized to their limits. Each step leaves its decisions in `self`
    /// (`drained`, `closed`, `tasks`, `hosts`, `out`) for the next.
    fn hosts_and_tasks(&mut self) {
        // Tasks per host as observed: for the draining limits and the order tasks stop in.
        let counts = task_counts(&self.live.state.tasks);
        self.report_unrepaired();
        self.triage(&counts);
        let wants = self.services(&counts);
        // Jobs' runs go in the room the services leave, unless a job's priority
        // puts them first (`plan/jobs.rs`).
        let (jobs_first, jobs_later) = self.jobs();
        self.place(jobs_first);
        self.place(wants);
        self.place(jobs_later);
        self.record_job_starts();
        // What this plan stops is gone for consolidation and the pools.
        for s in &self.out.stops {
            self.tasks.remove(&s.task_id);
        }
        if self.options.consolidate && self.options.max_moves > 0 {
            self.consolidate();
        }
        self.pools();
    }

    fn retire(&mut self, id: &str, reason: RetireReason) {
        self.hosts.remove(id);
        // A host launched by this same plan is simply not launched.
        if let Some(i) = self.out.launches.iter().position(|l| l.host.id == id) {
            self.out.launches.remove(i);
            return;
        }
        // A drained host is retired only once its tasks moved (apply keeps it, and
        // them, when a successor was not healthy in time: a timeout never stops a
        // healthy task).
        let if_empty = matches!(reason, RetireReason::Drained(_));
        self.out.retirements.push(Retire {
            host_id: id.to_string(),
            reason: reason.to_string(),
            if_empty,
        });
    }

    fn host_loads(&self, ids: &[String]) -> Vec<HostLoad> {
        let wanted: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        let mut on_host: BTreeMap<&str, Vec<&Task>> = BTreeMap::new();
        for t in self
            .tasks
            .values()
            .filter(|t| occupies(t) && wanted.contains(t.host.as_str()))
        {
            on_host.entry(t.host.as_str()).or_default().push(t);
        }
        ids.iter()
            .filter_map(|id| self.hosts.get(id))
            .map(|h| {
                let tasks = on_host.get(h.id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
                let pool_mps = self
                    .desired
                    .capacity_providers
                    .get(&h.capacity_provider)
                    .is_none_or(|p| p.mps.enabled);
                let accepting = !self.closed.contains(&h.id)
                    && !self.drained.contains_key(&h.id)
                    && h.state != HostState::Draining;
                let mps_ok =
                    pool_mps && !matches!(h.mps_health, MpsHealth::Impaired | MpsHealth::Disabled);
                let mut load = host_load(h, tasks, accepting, mps_ok, |t| {
                    self.desired
                        .reserves_compute(&t.service, &h.capacity_provider)
                });
                if let Some(p) = self.desired.capacity_providers.get(&h.capacity_provider) {
                    for g in &mut load.gpus {
                        g.max_clients = p.mps.max_clients;
                    }
                }
                health::without_impaired_gpus(load, &h.health)
            })
            .collect()
    }

    fn finish(mut self) -> Plan {
        self.stop_tasks_of_retired();
        // As apply leaves it: stopped tasks and retired hosts gone.
        let stopped: BTreeSet<&str> = self.out.stops.iter().map(|s| s.task_id.as_str()).collect();
        let retired: BTreeSet<&str> = self
            .out
            .retirements
            .iter()
            .map(|r| r.host_id.as_str())
            .collect();
        self.tasks
            .retain(|id, t| !stopped.contains(id.as_str()) && !retired.contains(t.host.as_str()));
        self.hosts.retain(|id, _| !retired.contains(id.as_str()));
        let mut revisions = self.live.state.revisions.clone();
        for r in &self.out.registrations {
            revisions
                .entry(r.family.clone())
                .or_default()
                .push(Revision {
                    family: r.family.clone(),
                    revision: r.revision,
                    spec: r.spec.clone(),
                });
        }
        // Deployment records: as recorded, or as this plan writes them.
        for (addr, r) in self.out.after.resources.iter_mut() {
            if addr.kind == crate::model::ResourceKind::Service {
                r.deployment = self
                    .out
                    .deployments
                    .iter()
                    .find(|d| d.service == addr.name)
                    .map(|d| d.record.clone())
                    .or_else(|| self.live.state.deployment(&addr.name).cloned());
                r.scaling = self
                    .out
                    .scaling
                    .iter()
                    .find(|s| s.service == addr.name)
                    .map(|s| s.record.clone())
                    .or_else(|| self.live.state.scaling(&addr.name).cloned());
            }
            if addr.kind == crate::model::ResourceKind::Job {
                r.job = self
                    .out
                    .jobs
                    .iter()
                    .find(|u| u.job == addr.name)
                    .map(|u| u.record.clone())
                    .or_else(|| self.live.state.job(&addr.name).cloned());
            }
        }
        self.out.after.serial = self.base + 1;
        self.out.after.cluster = self.cluster.clone();
        self.out.after.store_id = self.live.state.store_id.clone();
        self.out.after.revisions = revisions;
        self.out.after.hosts = self.hosts;
        self.out.after.tasks = self.tasks;
        self.out.cost = cost(
            &self.live.state,
            &self.out.after,
            &self.desired.capacity_providers,
            self.live.facts.prices.as_ref(),
        );
        self.out.cost.usage = rightsize::usage_hints(
            &self.out.after,
            &self.live.task_status,
            &self.desired.capacity_providers,
            self.live.observed_at,
        );
        self.out
    }
}

/// The load of `host` given the tasks on it. A task's compute cap counts in its
/// GPU's `used_compute_percent` only when `reserves(task)` (its service or pool
/// sets `reserve_compute`); other caps are limits the host enforces, not shares.
pub fn host_load(
    host: &Host,
    tasks: &[&Task],
    accepting: bool,
    mps_ok: bool,
    reserves: impl Fn(&Task) -> bool,
) -> HostLoad {
    let mut gpus: Vec<GpuLoad> = host
        .gpus
        .iter()
        .map(|g| GpuLoad {
            index: g.index,
            model: g.model.clone(),
            memory_mib: g.memory_mib,
            used_memory_mib: 0,
            used_compute_percent: 0,
            mode: GpuMode::Idle,
            tasks: 0,
            clients: 0,
            max_clients: crate::model::DEFAULT_MPS_MAX_CLIENTS,
        })
        .collect();
    let mut used_cpu = 0u32;
    let mut used_mem = 0u64;
    let mut services: Vec<String> = vec![];
    let mut host_ports: Vec<crate::model::HostPortKey> = vec![];
    for t in tasks {
        host_ports.extend(t.ports.iter().map(|p| (p.protocol, p.host_port)));
        used_cpu += t.shape.cpu_units;
        used_mem += t.shape.memory_mib;
        if !services.contains(&t.service) {
            services.push(t.service.clone());
        }
        for g in gpus.iter_mut().filter(|g| t.gpus.contains(&g.index)) {
            g.tasks += 1;
            match t.shape.gpu {
                TaskGpu::Whole { .. } => g.mode = GpuMode::Dedicated,
                TaskGpu::Mps {
                    memory_mib,
                    compute_percent,
                    clients,
                    ..
                } => {
                    if g.mode == GpuMode::Idle {
                        g.mode = GpuMode::Mps;
                    }
                    g.clients += clients.max(1);
                    g.used_memory_mib += memory_mib;
                    if reserves(t) {
                        g.used_compute_percent += u32::from(compute_percent);
                    }
                }
                TaskGpu::None => {}
            }
        }
    }
    services.sort();
    HostLoad {
        id: host.id.clone(),
        pool: host.capacity_provider.clone(),
        instance_type: host.instance_type.clone(),
        zone: host.zone.clone(),
        gpus,
        cpu_units: host.cpu_units,
        used_cpu_units: used_cpu,
        memory_mib: host.memory_mib,
        used_memory_mib: used_mem,
        accepting,
        mps_ok,
        services,
        host_ports,
    }
}
