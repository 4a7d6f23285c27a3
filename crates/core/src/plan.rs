//! The planner: `plan(&Desired, &Live, &Options) -> Plan`, pure.
//!
//! A [`Plan`] fixes every choice (ids of new hosts and tasks, launch tokens, the
//! GPU each task goes to) so that applying it decides nothing. Its steps are
//! listed in the order `apply` carries them out; each step is idempotent so a
//! crashed apply can be resumed by running the same plan again.

use crate::model::*;
use crate::placement::Unplaced;
use serde::{Deserialize, Serialize};

mod consolidate;
mod cost;
mod hosts;
mod types;

pub use cost::*;
pub use types::*;

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
//    `heartbeat_timeout_seconds` at `observed_at`; a host that never reported is
//    not counted silent), already draining, or of an instance type its pool no
//    longer has. Sick hosts with tasks are drained at most
//    `max(1, hosts * max_draining_percent / 100)` per pool at once (hosts already
//    draining count first); the others wait, taking no new tasks (a note says so).
//    Records of hosts terminated (or shutting down) outside gpushare are
//    dropped with a retirement; their tasks count as gone.
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

use crate::catalog;
use crate::placement::{self, GpuLoad, HostLoad, HostRef, PlacementInput, PoolSpec, Request};
use crate::schema;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Compute the plan. Pure: no I/O, no clock, deterministic for `desired.settings.seed`.
pub fn plan(desired: &Desired, live: &Live, options: &Options) -> Result<Plan, PlanError> {
    let mut p = Planner::new(desired, live, options);
    p.resource_changes();
    if options.destroy {
        p.destroy();
    } else {
        p.validate()?;
        p.instance_facts_notes();
        p.registrations();
        p.hosts_and_tasks();
    }
    Ok(p.finish())
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
    #[error("{addr}: the containers' GPU needs do not make a valid task")]
    Shape {
        addr: ResourceAddr,
        #[source]
        source: ShapeError,
    },
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

/// The engine names hosts it opens `new POOL host #N`; use their planned ids.
fn name_new_hosts(reason: &str, ids: &BTreeMap<(String, u32), String>) -> String {
    let mut r = reason.to_string();
    if r.contains(" host #") {
        // Highest ordinals first, so that `#1` does not eat the start of `#12`.
        for ((pool, ordinal), id) in ids.iter().rev() {
            r = r.replace(&format!("new {pool} host #{ordinal}"), id);
        }
    }
    r
}

/// Number of tasks occupying each host.
fn task_counts(tasks: &BTreeMap<String, Task>) -> HashMap<&str, usize> {
    let mut m: HashMap<&str, usize> = HashMap::new();
    for t in tasks.values().filter(|t| occupies(t)) {
        *m.entry(t.host.as_str()).or_default() += 1;
    }
    m
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

/// A task to start (new, a replacement, or the new half of a move), before placement.
struct Want {
    id: String,
    service: String,
    family: String,
    revision: u32,
    shape: TaskShape,
    pool: String,
    strategy: PlacementStrategy,
    distinct_host: bool,
    instance_types: Vec<String>,
    /// The service or its pool reserves compute (`reserve_compute`).
    reserve_compute: bool,
    replaces: Option<Replaces>,
}

enum ReplaceKind {
    Move,
    Replace,
}

struct Replaces {
    task_id: String,
    kind: ReplaceKind,
    reason: String,
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
    drained: BTreeMap<String, String>,
    /// Hosts kept but taking no new tasks.
    closed: BTreeSet<String>,
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
                unplaced: vec![],
                strays: live.strays.clone(),
                foreign: live.foreign.clone(),
                adopted: live.adopted.clone(),
                after: StoreState::default(),
                cost: Cost::default(),
                notes: adoption_notes(live),
            },
            tasks: live.state.tasks.clone(),
            hosts: live.state.hosts.clone(),
            drained: BTreeMap::new(),
            closed: BTreeSet::new(),
            cluster,
            base,
        }
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

    fn validate(&self) -> Result<(), PlanError> {
        let d = self.desired;
        for (name, cp) in &d.capacity_providers {
            let addr = ResourceAddr::new(ResourceKind::CapacityProvider, name);
            check_instance_type(&addr, &cp.instance_type)?;
            for t in &cp.instance_types {
                check_instance_type(&addr, t)?;
            }
            if let Some(i) = crate::pool::launch_option_issues(
                &addr.to_string(),
                &cp.instance_type,
                &cp.instance_types,
                cp.market,
                cp.max_price.as_deref(),
            )
            .into_iter()
            .next()
            {
                return Err(PlanError::Invalid {
                    addr,
                    message: format!("{}: {}", i.attribute, i.summary),
                });
            }
            if cp.min_size > cp.max_size {
                return Err(PlanError::Invalid {
                    addr,
                    message: format!(
                        "min_size {} is larger than max_size {}",
                        cp.min_size, cp.max_size
                    ),
                });
            }
        }
        for (name, gi) in &d.gpu_instances {
            let addr = ResourceAddr::new(ResourceKind::GpuInstance, name);
            if !d.capacity_providers.contains_key(&gi.capacity_provider) {
                return Err(PlanError::MissingReference {
                    addr,
                    attr: "capacity_provider",
                    target: ResourceAddr::new(
                        ResourceKind::CapacityProvider,
                        &gi.capacity_provider,
                    ),
                });
            }
            if let Some(t) = &gi.instance_type {
                check_instance_type(&addr, t)?;
            }
        }
        for (name, td) in &d.task_definitions {
            let addr = ResourceAddr::new(ResourceKind::TaskDefinition, name);
            if td.containers.is_empty() {
                return Err(PlanError::Invalid {
                    addr,
                    message: "a task definition needs at least one container".into(),
                });
            }
            td.shape()
                .map_err(|source| PlanError::Shape { addr, source })?;
        }
        for (name, s) in &d.services {
            let addr = ResourceAddr::new(ResourceKind::Service, name);
            if !d.task_definitions.contains_key(&s.task_definition) {
                return Err(PlanError::MissingReference {
                    addr,
                    attr: "task_definition",
                    target: ResourceAddr::new(ResourceKind::TaskDefinition, &s.task_definition),
                });
            }
            if !d.capacity_providers.contains_key(&s.capacity_provider) {
                return Err(PlanError::MissingReference {
                    addr,
                    attr: "capacity_provider",
                    target: ResourceAddr::new(ResourceKind::CapacityProvider, &s.capacity_provider),
                });
            }
            for t in &s.instance_types {
                check_instance_type(&addr, t)?;
            }
        }
        Ok(())
    }

    fn resource_changes(&mut self) {
        let desired = if self.options.destroy {
            BTreeMap::new()
        } else {
            self.desired.resources()
        };
        let live = &self.live.state.resources;
        let addrs: BTreeSet<&ResourceAddr> = desired.keys().chain(live.keys()).collect();
        for addr in addrs {
            let after = desired.get(addr);
            let before = live.get(addr).map(|r| &r.attrs);
            if let Some(rc) = diff_resource(addr, before, after) {
                self.out.resource_changes.push(rc);
            }
        }
        if !self.options.destroy {
            self.out.after.resources = desired
                .into_iter()
                .map(|(a, attrs)| (a, AppliedResource { attrs }))
                .collect();
        }
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
            self.out.stops.push(Stop {
                task_id: t.id.clone(),
                reason: "destroy".into(),
            });
        }
        for h in self.live.state.hosts.values().filter(|h| host_is_up(h)) {
            self.out.retirements.push(Retire {
                host_id: h.id.clone(),
                reason: "destroy".into(),
            });
        }
    }

    fn hosts_and_tasks(&mut self) {
        let live: &'a StoreState = &self.live.state;
        let counts = task_counts(&live.tasks);

        // --- 3. Sort hosts into kept and drained. -------------------------
        // Records of hosts the cloud already ended: dropped (their tasks are replaced below).
        for h in live.hosts.values() {
            if matches!(h.state, HostState::Terminated | HostState::ShuttingDown) {
                let state = if h.state == HostState::Terminated {
                    "terminated"
                } else {
                    "shutting down"
                };
                self.retire(&h.id, format!("{state} outside gpushare"));
            }
        }
        // gpu_instance -> its kept host id.
        let mut pinned_kept: BTreeMap<String, String> = BTreeMap::new();
        // pool -> [(rank, host id, reason)]
        let mut sick: BTreeMap<String, Vec<(u8, String, String)>> = BTreeMap::new();
        let mut pool_sizes: BTreeMap<&str, usize> = BTreeMap::new();
        for h in live.hosts.values().filter(|h| host_is_up(h)) {
            *pool_sizes.entry(h.capacity_provider.as_str()).or_default() += 1;
            let pool = self.desired.capacity_providers.get(&h.capacity_provider);
            let Some(pool) = pool else {
                self.drained.insert(
                    h.id.clone(),
                    format!("capacity_provider.{} is removed", h.capacity_provider),
                );
                continue;
            };
            if let Some(gi_name) = &h.gpu_instance {
                match self.desired.gpu_instances.get(gi_name) {
                    None => {
                        self.drained
                            .insert(h.id.clone(), format!("gpu_instance.{gi_name} is removed"));
                        continue;
                    }
                    Some(gi) => {
                        let want_type = gi.instance_type.as_deref().unwrap_or(&pool.instance_type);
                        if gi.capacity_provider != h.capacity_provider
                            || want_type != h.instance_type
                        {
                            self.drained.insert(
                                h.id.clone(),
                                format!("gpu_instance.{gi_name} is replaced"),
                            );
                            continue;
                        }
                        if pinned_kept.contains_key(gi_name) {
                            self.drained.insert(
                                h.id.clone(),
                                format!("gpu_instance.{gi_name} already has a host"),
                            );
                            continue;
                        }
                    }
                }
            }
            let boot_grace = self.options.boot_grace_seconds;
            let silent_for = match (self.options.heartbeat_timeout_seconds, h.last_heartbeat) {
                (t, Some(hb)) if t > 0 && self.live.observed_at.saturating_sub(hb) > t => Some(
                    format!("no agent report for {} s", self.live.observed_at - hb),
                ),
                // Never reported: silent once the boot grace since its launch is over.
                (_, None)
                    if boot_grace > 0
                        && h.state == HostState::Running
                        && h.launched_at.is_some_and(|l| {
                            self.live.observed_at.saturating_sub(l) > boot_grace
                        }) =>
                {
                    Some(format!(
                        "no agent report since its launch {} s ago",
                        self.live
                            .observed_at
                            .saturating_sub(h.launched_at.unwrap_or(0))
                    ))
                }
                _ => None,
            };
            let reason = if h.state == HostState::Draining {
                Some((0, "draining".to_string()))
            } else if h.mps_health == MpsHealth::Impaired {
                Some((1, "MPS daemon impaired".to_string()))
            } else if let Some(s) = silent_for {
                Some((2, format!("silent: {s}")))
            } else if h.gpu_instance.is_none() && !pool.allows_type(&h.instance_type) {
                Some((
                    3,
                    format!(
                        "instance type {} replaced by {}",
                        h.instance_type, pool.instance_type
                    ),
                ))
            } else if h.market != pool.market {
                Some((
                    3,
                    format!(
                        "market {} replaced by {}",
                        h.market.as_str(),
                        pool.market.as_str()
                    ),
                ))
            } else {
                None
            };
            if let Some((rank, why)) = reason {
                if counts.get(h.id.as_str()).copied().unwrap_or(0) == 0 {
                    // Nothing to move: retire it at once.
                    self.drained.insert(h.id.clone(), why);
                } else {
                    sick.entry(h.capacity_provider.clone()).or_default().push((
                        rank,
                        h.id.clone(),
                        why,
                    ));
                }
                continue;
            }
            if let Some(gi_name) = &h.gpu_instance {
                pinned_kept.insert(gi_name.clone(), h.id.clone());
            }
        }
        for (pool, mut list) in sick {
            list.sort();
            let pct = self
                .desired
                .capacity_providers
                .get(&pool)
                .map_or(100, |p| usize::from(p.max_draining_percent));
            let limit = (pool_sizes.get(pool.as_str()).copied().unwrap_or(0) * pct / 100).max(1);
            let mut n = 0;
            for (rank, id, why) in list {
                if rank == 0 || n < limit {
                    n += 1;
                    self.drained.insert(id, why);
                } else {
                    self.out.notes.push(format!("host {id} ({why}) waits for its replacement: capacity_provider.{pool} allows {limit} host(s) draining at once (max_draining_percent)"));
                    // A pinned host that waits keeps its place: no second host for its resource yet.
                    if let Some(gi) = live.hosts.get(&id).and_then(|h| h.gpu_instance.clone()) {
                        pinned_kept.entry(gi).or_insert_with(|| id.clone());
                    }
                    self.closed.insert(id);
                }
            }
        }

        // Pinned hosts to launch.
        for (gi_name, gi) in &self.desired.gpu_instances {
            if pinned_kept.contains_key(gi_name) {
                continue;
            }
            let pool = &self.desired.capacity_providers[&gi.capacity_provider];
            let itype = gi.instance_type.as_deref().unwrap_or(&pool.instance_type);
            let Some(it) = catalog::lookup(itype) else {
                continue;
            };
            let id = self.new_host_id(&gi.capacity_provider);
            let mut host = self.host_record(&id, &gi.capacity_provider, it, Some(gi_name.clone()));
            if host.zone.is_none() {
                host.zone = gi.availability_zone.clone();
            }
            self.out.launches.push(Launch { host: host.clone() });
            self.hosts.insert(id.clone(), host);
            pinned_kept.insert(gi_name.clone(), id.clone());
        }

        // --- 4. Services. --------------------------------------------------
        // Records of tasks that ended on their own are cleared (the service, which
        // no longer counts them, starts replacements below).
        for t in live.tasks.values() {
            let why = match t.state {
                TaskState::Failed => "it failed",
                TaskState::Stopped => "it stopped",
                _ => continue,
            };
            self.out.stops.push(Stop {
                task_id: t.id.clone(),
                reason: format!("{why} on {}", t.host),
            });
        }
        let mut by_service: BTreeMap<&str, Vec<(&Task, &Host)>> = BTreeMap::new();
        for t in live.tasks.values().filter(|t| is_live_task(t)) {
            match live.hosts.get(&t.host) {
                Some(h) if host_is_up(h) => by_service
                    .entry(t.service.as_str())
                    .or_default()
                    .push((t, h)),
                _ => self.out.stops.push(Stop {
                    task_id: t.id.clone(),
                    reason: format!("its host {} is gone", t.host),
                }),
            }
        }
        let mut wants: Vec<Want> = vec![];
        for (sname, tasks) in &by_service {
            if !self.desired.services.contains_key(*sname) {
                for (t, _) in tasks {
                    self.out.stops.push(Stop {
                        task_id: t.id.clone(),
                        reason: format!("service.{sname} is removed"),
                    });
                }
            }
        }
        for (sname, svc) in &self.desired.services {
            let Some(&(revision, shape)) = self.targets.get(&svc.task_definition) else {
                continue;
            };
            let tasks = by_service.get(sname.as_str()).cloned().unwrap_or_default();
            let class = |t: &Task, h: &Host| -> u8 {
                if self.drained.contains_key(&t.host) {
                    0
                } else if t.family != svc.task_definition
                    || t.revision != revision
                    || h.capacity_provider != svc.capacity_provider
                {
                    1
                } else {
                    2
                }
            };
            let desired_count = svc.desired_count as usize;
            let mut sorted: Vec<(u8, usize, &Task)> =
                tasks.iter().map(|(t, h)| (class(t, h), 0, *t)).collect();
            // The order only matters when some task stops or is replaced.
            if sorted.len() > desired_count || sorted.iter().any(|x| x.0 < 2) {
                for x in &mut sorted {
                    x.1 = counts.get(x.2.host.as_str()).copied().unwrap_or(0);
                }
                sorted.sort_by(|a, b| {
                    (a.0, a.1, &a.2.host, &a.2.id).cmp(&(b.0, b.1, &b.2.host, &b.2.id))
                });
            }
            let n = sorted.len();
            let keep_from = n.saturating_sub(desired_count);
            for (_, _, t) in &sorted[..keep_from] {
                self.out.stops.push(Stop {
                    task_id: t.id.clone(),
                    reason: format!("service.{sname} scales from {n} to {desired_count}"),
                });
            }
            let kept = &sorted[keep_from..];
            let dep = &svc.deployment;
            let batch = if dep.max_surge_percent > 0 {
                (desired_count * dep.max_surge_percent as usize / 100).max(1)
            } else {
                let healthy = (desired_count * dep.min_healthy_percent as usize).div_ceil(100);
                desired_count.saturating_sub(healthy).max(1)
            };
            let mut replaced = 0usize;
            let mut todo: Vec<Option<Replaces>> = vec![];
            for (class, _, t) in kept {
                match class {
                    0 => todo.push(Some(Replaces {
                        task_id: t.id.clone(),
                        kind: ReplaceKind::Move,
                        reason: self.drained[&t.host].clone(),
                    })),
                    1 if replaced < batch => {
                        replaced += 1;
                        let reason = if t.family != svc.task_definition {
                            format!("task definition {} -> {}", t.family, svc.task_definition)
                        } else if t.revision != revision {
                            format!("revision {} -> {}", t.revision, revision)
                        } else {
                            format!("capacity provider -> {}", svc.capacity_provider)
                        };
                        todo.push(Some(Replaces {
                            task_id: t.id.clone(),
                            kind: ReplaceKind::Replace,
                            reason,
                        }));
                    }
                    1 => {}
                    _ => {}
                }
            }
            let outdated_left = kept.iter().filter(|k| k.0 == 1).count() - replaced;
            if outdated_left > 0 {
                self.out.notes.push(format!("service.{sname}: {outdated_left} task(s) on an old revision wait for the next plan (deployment allows {batch} replacement(s) at once)"));
            }
            for _ in kept.len()..desired_count {
                todo.push(None);
            }
            for replaces in todo {
                let id = self.new_task_id(sname);
                wants.push(Want {
                    id,
                    service: sname.clone(),
                    family: svc.task_definition.clone(),
                    revision,
                    shape,
                    pool: svc.capacity_provider.clone(),
                    strategy: svc.placement_strategy,
                    distinct_host: svc.distinct_host,
                    instance_types: svc.instance_types.clone(),
                    reserve_compute: self.desired.reserves_compute(sname, &svc.capacity_provider),
                    replaces,
                });
            }
        }

        // --- 5. Placement. -------------------------------------------------
        if !wants.is_empty() {
            let kept_hosts: Vec<String> = self
                .hosts
                .values()
                .filter(|h| host_is_up(h) && !self.drained.contains_key(&h.id))
                .map(|h| h.id.clone())
                .collect();
            let input = PlacementInput {
                pools: self.pool_specs(&kept_hosts, false),
                hosts: self.host_loads(&kept_hosts),
                requests: wants.iter().map(want_request).collect(),
                seed: self.desired.settings.seed,
            };
            let outcome = placement::place(&input);
            let new_ids = self.open_new_hosts(&outcome);
            let by_key: BTreeMap<&str, &placement::Assignment> = outcome
                .assignments
                .iter()
                .map(|a| (a.key.as_str(), a))
                .collect();
            let unplaced: BTreeMap<&str, &placement::Unplaced> = outcome
                .unplaced
                .iter()
                .map(|u| (u.key.as_str(), u))
                .collect();
            for w in wants {
                // The host each assignment names, when the engine named one we know.
                let placed = by_key.get(w.id.as_str()).and_then(|a| {
                    let host = match &a.host {
                        HostRef::Existing { id } => self.hosts.contains_key(id).then(|| id.clone()),
                        HostRef::New { pool, ordinal } => {
                            new_ids.get(&(pool.clone(), *ordinal)).cloned()
                        }
                    };
                    host.map(|h| (h, a.gpus.clone()))
                });
                let Some((host, gpus)) = placed else {
                    let reason = match (
                        unplaced.get(w.id.as_str()),
                        by_key.contains_key(w.id.as_str()),
                    ) {
                        (Some(u), _) => name_new_hosts(&u.reason, &new_ids),
                        (None, true) => {
                            "the placement engine chose a host that does not exist".to_string()
                        }
                        (None, false) => "the placement engine gave no answer".to_string(),
                    };
                    let reason = match &w.replaces {
                        Some(r) => format!(
                            "{} {} cannot go anywhere else ({}): {reason}",
                            match r.kind {
                                ReplaceKind::Move => "moving",
                                ReplaceKind::Replace => "replacing",
                            },
                            r.task_id,
                            r.reason
                        ),
                        None => reason,
                    };
                    self.out.unplaced.push(placement::Unplaced {
                        key: w.id.clone(),
                        service: w.service.clone(),
                        reason,
                    });
                    continue;
                };
                let task = Task {
                    id: w.id.clone(),
                    service: w.service.clone(),
                    family: w.family.clone(),
                    revision: w.revision,
                    host,
                    gpus,
                    shape: w.shape,
                    state: TaskState::Pending,
                };
                self.tasks.insert(task.id.clone(), task.clone());
                match w.replaces {
                    None => self.out.starts.push(Start { task }),
                    Some(Replaces {
                        task_id,
                        kind: ReplaceKind::Replace,
                        reason,
                    }) => {
                        self.out.starts.push(Start { task: task.clone() });
                        self.tasks.remove(&task_id);
                        self.out.stops.push(Stop {
                            task_id,
                            reason: format!("replaced by {} ({reason})", task.id),
                        });
                    }
                    Some(Replaces {
                        task_id,
                        kind: ReplaceKind::Move,
                        reason,
                    }) => {
                        self.tasks.remove(&task_id);
                        self.out.moves.push(Move {
                            from_task: task_id,
                            to: task,
                            reason,
                        });
                    }
                }
            }
        }
        for s in &self.out.stops {
            self.tasks.remove(&s.task_id);
        }

        // --- 6. Consolidation. --------------------------------------------
        if self.options.consolidate && self.options.max_moves > 0 {
            self.consolidate();
        }

        // --- 7. Retire drained and empty hosts; top up to min_size. --------
        let counts = task_counts(&self.tasks);
        let mut empty: BTreeSet<String> = self
            .hosts
            .keys()
            .filter(|id| !counts.contains_key(id.as_str()))
            .cloned()
            .collect();
        let drained: Vec<(String, String, usize)> = self
            .drained
            .iter()
            .map(|(a, b)| {
                (
                    a.clone(),
                    b.clone(),
                    counts.get(a.as_str()).copied().unwrap_or(0),
                )
            })
            .collect();
        drop(counts);
        for (id, why, left) in drained {
            if left == 0 {
                self.retire(&id, why);
            } else {
                self.out.notes.push(format!("host {id} ({why}) keeps {left} task(s) that could not move; it is retired once they do"));
            }
        }
        let pools = self.pool_min_sizes();
        for (pool, min_size) in pools {
            let mut members = self.pool_members(&pool, true);
            members.sort_by(|a, b| {
                let pa = a.state != HostState::Pending;
                let pb = b.state != HostState::Pending;
                (pa, std::cmp::Reverse(&a.id)).cmp(&(pb, std::cmp::Reverse(&b.id)))
            });
            let mut size = members.len();
            let idle: Vec<String> = members
                .iter()
                .filter(|h| empty.contains(&h.id))
                .map(|h| h.id.clone())
                .collect();
            for id in idle {
                if size <= min_size as usize {
                    break;
                }
                size -= 1;
                empty.remove(&id);
                self.retire(
                    &id,
                    format!("empty (capacity_provider.{pool} min_size {min_size} is met)"),
                );
            }
            let max_size = self.desired.capacity_providers[&pool].max_size as usize;
            if size > max_size {
                self.out.notes.push(format!(
                    "capacity_provider.{pool} keeps {size} hosts with tasks, above its max_size {max_size}: \
                     lower the services' desired_count or plan with consolidation to empty some"
                ));
            }
            while size < min_size as usize {
                size += 1;
                let Some(it) =
                    catalog::lookup(&self.desired.capacity_providers[&pool].instance_type)
                else {
                    break;
                };
                let id = self.new_host_id(&pool);
                let host = self.host_record(&id, &pool, it, None);
                self.out.launches.push(Launch { host: host.clone() });
                self.hosts.insert(id, host);
            }
        }
    }

    /// (pool, min_size) of every desired pool.
    fn pool_min_sizes(&self) -> Vec<(String, u32)> {
        self.desired
            .capacity_providers
            .iter()
            .map(|(n, p)| (n.clone(), p.min_size))
            .collect()
    }

    /// The up, unpinned, not drained hosts of `pool` (with `closed`: also those taking no new tasks).
    fn pool_members(&self, pool: &str, closed: bool) -> Vec<&Host> {
        self.hosts
            .values()
            .filter(|h| {
                host_is_up(h)
                    && h.capacity_provider == pool
                    && h.gpu_instance.is_none()
                    && !self.drained.contains_key(&h.id)
                    && (closed || !self.closed.contains(&h.id))
            })
            .collect()
    }

    fn retire(&mut self, id: &str, reason: String) {
        self.hosts.remove(id);
        // A host launched by this same plan is simply not launched.
        if let Some(i) = self.out.launches.iter().position(|l| l.host.id == id) {
            self.out.launches.remove(i);
            return;
        }
        self.out.retirements.push(Retire {
            host_id: id.to_string(),
            reason,
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
                host_load(h, tasks, accepting, mps_ok, |t| {
                    self.desired
                        .reserves_compute(&t.service, &h.capacity_provider)
                })
            })
            .collect()
    }

    fn finish(mut self) -> Plan {
        // As apply leaves it: stopped tasks and retired hosts gone, with whatever
        // was still recorded on a retired host.
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
        self.out.after.serial = self.base + 1;
        self.out.after.cluster = self.cluster.clone();
        self.out.after.store_id = self.live.state.store_id.clone();
        self.out.after.revisions = revisions;
        self.out.after.hosts = self.hosts;
        self.out.after.tasks = self.tasks;
        self.out.cost = cost(&self.live.state, &self.out.after);
        self.out
    }
}

fn check_instance_type(addr: &ResourceAddr, t: &str) -> Result<(), PlanError> {
    catalog::require(t)
        .map(|_| ())
        .map_err(|e| PlanError::UnknownInstanceType {
            addr: addr.clone(),
            instance_type: e.name,
            suggestions: e.close.into_iter().map(String::from).collect(),
        })
}

fn want_request(w: &Want) -> Request {
    Request {
        key: w.id.clone(),
        service: w.service.clone(),
        pool: w.pool.clone(),
        shape: w.shape,
        strategy: w.strategy,
        distinct_host: w.distinct_host,
        instance_types: w.instance_types.clone(),
        gpu_models: vec![],
        reserve_compute: w.reserve_compute,
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
        })
        .collect();
    let mut used_cpu = 0u32;
    let mut used_mem = 0u64;
    let mut services: Vec<String> = vec![];
    for t in tasks {
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
                    ..
                } => {
                    if g.mode == GpuMode::Idle {
                        g.mode = GpuMode::Mps;
                    }
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
    }
}

fn diff_resource(
    addr: &ResourceAddr,
    before: Option<&serde_json::Value>,
    after: Option<&serde_json::Value>,
) -> Option<ResourceChange> {
    let obj =
        |v: Option<&serde_json::Value>| v.and_then(|v| v.as_object()).cloned().unwrap_or_default();
    let (b, a) = (obj(before), obj(after));
    let action = match (before, after) {
        (None, None) => return None,
        (None, Some(_)) => Action::Create,
        (Some(_), None) => Action::Delete,
        (Some(x), Some(y)) if x == y => return None,
        _ => Action::Update,
    };
    let mut keys: Vec<&String> = a.keys().collect();
    keys.extend(b.keys().filter(|k| !a.contains_key(*k)));
    let mut changes = vec![];
    for k in keys {
        let (bv, av) = (b.get(k), a.get(k));
        if bv == av {
            continue;
        }
        let forces = action == Action::Update && schema::forces_replacement(addr.kind, k);
        // Secrets are compared above and shown redacted (changed ones marked).
        let mut after = av.cloned();
        if let (Some(a), Some(b)) = (after.as_mut(), bv) {
            crate::model::redact_pair(b, a);
        } else if let Some(a) = after.as_mut() {
            crate::model::redact(a);
        }
        let mut before = bv.cloned();
        if let Some(b) = before.as_mut() {
            crate::model::redact(b);
        }
        changes.push(AttrChange {
            name: k.clone(),
            before,
            after,
            forces_replacement: forces,
        });
    }
    if action == Action::Update && changes.is_empty() {
        return None;
    }
    let action = if changes.iter().any(|c| c.forces_replacement) {
        Action::Replace
    } else {
        action
    };
    Some(ResourceChange {
        addr: addr.clone(),
        action,
        before: before.cloned(),
        after: after.cloned(),
        changes,
    })
}
