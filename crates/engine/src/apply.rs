//! `apply`: carry out a [`Plan`] step by step, journalled, so that a crash at any
//! point is finished by the next run without launching twice or losing a task.
//!
//! Protocol (the store lock is held throughout):
//! 1. A journal left by a crashed apply is finished first (from `journal.done`).
//!    If it was this very plan, that is all; otherwise the new plan was made before
//!    that work was finished and is refused ([`ApplyError::ResumedEarlierPlan`]:
//!    plan again). Call [`resume`] before observing and planning to finish such a
//!    journal up front.
//! 2. A plan whose `base_serial` is not the store's serial is refused ([`ApplyError::Stale`]).
//! 3. The cloud checks every launch of the plan ([`Cloud::preflight`]); a failure
//!    changes nothing.
//! 4. The journal is written, then each step of `plan.steps()` is carried out
//!    idempotently, the state committed (serial + 1) and `journal.done` advanced.
//!    Steps that only change the store are committed in batches of up to
//!    [`ApplyContext::max_batch`] (one state write and one journal write per batch,
//!    so a 10,000-task plan is not 10,000 rewrites of the state); a run of launches
//!    goes to the cloud as one wave of up to as many ([`Cloud::launch_many`]),
//!    committed right after the wave's cloud call; a retire is committed on its own,
//!    right after its cloud call. With `max_batch` 1 every step is its own commit.
//!    A run of target steps (load balancers) goes to ELBv2 together: a
//!    deregistration's stop is committed only after the target has drained.
//! 5. The journal is removed.
//!
//! Every step is idempotent against the state, so re-running a step whose effects
//! were committed but whose journal entry was not is harmless; launches are
//! idempotent in the cloud by launch token.
//!
//! # Failpoints and step delays (test hooks)
//! Test hooks reach apply only through [`ApplyContext::hooks`], set by the caller; the
//! engine reads no environment. The binaries build [`Hooks::from_env`] once at start-up:
//! `GPUSHARE_FAILPOINT=<point>:<N>` makes the process `abort()` at step N (1-based
//! position in `plan.steps()`), to test crash recovery with real processes:
//! - `before-commit:N`: after step N (and its cloud call) ran, before the commit of
//!   the batch holding it;
//! - `after-commit:N`: after that commit, before the journal records the batch;
//! - `after-step:N`: after the journal records it.
//!
//! In-process tests set [`Hooks::failpoint`] with [`Hooks::abort`] false, which returns
//! [`ApplyError::Failpoint`] at the same point without cleaning up (as a crash would).
//! `GPUSHARE_TEST_STEP_DELAY_MS=N` ([`Hooks::step_delay`]) pauses N ms before each
//! step, so tests can interrupt a real apply in the middle.

use crate::cloud::{Cloud, CloudError, LaunchRequest};
use crate::store::{ChangedKeys, Journal, Store, StoreError};
use gpushare_core::model::{Host, StoreState};
use gpushare_core::plan::{Plan, Step};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

mod execute;
mod hooks;
mod journal_run;
mod launches;
mod moves;
mod report;
mod targets;
pub use hooks::{Failpoint, FailpointWhen, Hooks, FAILPOINT_ENV, STEP_DELAY_ENV};
pub use moves::MoveWait;
pub use report::{ApplyError, ApplyReport, ProgressEvent, StepError};

/// Default [`ApplyContext::max_batch`].
pub const DEFAULT_MAX_BATCH: usize = 256;

/// Everything `apply` needs besides the plan.
pub struct ApplyContext<'a> {
    pub store: &'a dyn Store,
    pub cloud: &'a dyn Cloud,
    /// How launched hosts join the controller's agent API: each launch mints a
    /// single-use token bound to its host id for the host's user data. `None`: no
    /// `controller_address` (the local fleet's in-process agents); the ec2 cloud then
    /// refuses to launch.
    pub join: Option<crate::join::JoinLaunch<'a>>,
    /// Written to the lock record and the journal, e.g. `gpushare apply`.
    pub holder: &'a str,
    pub lock_timeout: Duration,
    pub progress: Option<&'a (dyn Fn(&ProgressEvent) + Send + Sync)>,
    /// Checked between steps: when set, apply stops, leaving a resumable journal.
    pub cancel: Option<&'a AtomicBool>,
    /// Test hooks (crash simulation, step delays); see the module docs.
    pub hooks: Hooks,
    /// The time recorded as a launched host's `launched_at` (seconds since the Unix
    /// epoch); `None` records none.
    pub now: Option<u64>,
    /// Most steps committed together. Steps that only change the store (register,
    /// write a resource, start, move, stop, delete) are committed in batches of up to
    /// this many, with one state write and one journal write per batch; launches go
    /// to the cloud in waves of up to this many, each committed right after its cloud
    /// call; a retire is always committed on its own, right after its cloud call. 1
    /// commits every step separately.
    pub max_batch: usize,
    /// Start before stop for moves ([`MoveWait::NONE`] unless set: the [`Reconciler`]
    /// sets it from the settings' `move_timeout_seconds`).
    ///
    /// [`Reconciler`]: crate::reconcile::Reconciler
    pub moves: MoveWait<'a>,
    /// How long a recorded capacity refusal counts (older ones are dropped when a new
    /// one is recorded): the settings' `capacity_refusal_seconds`.
    pub capacity_refusal_seconds: u64,
    /// The ELBv2 target groups the plan's target steps change (`None`: a target
    /// step fails, so no task stops while it may still be a target).
    pub balancer: Option<&'a dyn crate::balancer::TargetGroups>,
}

impl<'a> ApplyContext<'a> {
    pub fn new(store: &'a dyn Store, cloud: &'a dyn Cloud) -> Self {
        ApplyContext {
            store,
            cloud,
            join: None,
            holder: "gpushare apply",
            lock_timeout: Duration::from_secs(30),
            progress: None,
            cancel: None,
            hooks: Hooks::default(),
            now: None,
            max_batch: DEFAULT_MAX_BATCH,
            moves: MoveWait::NONE,
            capacity_refusal_seconds: gpushare_core::model::DEFAULT_CAPACITY_REFUSAL_SECONDS,
            balancer: None,
        }
    }

    fn emit(&self, e: ProgressEvent) {
        if let Some(p) = self.progress {
            p(&e);
        }
    }
}

/// One-line description of a step, for progress and errors.
pub fn describe(step: &Step) -> String {
    match step {
        Step::Register(r) => format!("register task definition {}:{}", r.family, r.revision),
        Step::PutResource { addr, .. } => format!("write {addr}"),
        Step::Deployment(d) => format!(
            "record deployment {} of service.{} (revision {}): {}",
            d.record.id, d.service, d.record.revision, d.record.state
        ),
        Step::Scaling(u) => match &u.change {
            Some(c) => format!("record auto scaling of {}", c.line(&u.service)),
            None => format!(
                "record auto scaling of service.{} ({} tasks)",
                u.service, u.record.count
            ),
        },
        Step::Job(u) => format!(
            "record progress of {}",
            gpushare_core::model::job_line(&u.job, &u.record, u32::MAX)
        ),
        Step::Launch(l) => format!(
            "launch host {} ({}, pool {})",
            l.host.id, l.host.instance_type, l.host.capacity_provider
        ),
        Step::Start(s) => format!(
            "start task {} of service {} on {}",
            s.task.id, s.task.service, s.task.host
        ),
        Step::Move(m) => format!("move task {} to {} on {}", m.from_task, m.to.id, m.to.host),
        Step::Stop(s) => match &s.after_healthy {
            Some(n) => format!("stop task {} once {} is healthy", s.task_id, n.task_id),
            None => format!("stop task {}", s.task_id),
        },
        Step::RegisterTarget(c) => match c.when {
            gpushare_core::plan::TargetWhen::Now => format!("register {}", c.what()),
            _ => format!("register {} once healthy", c.what()),
        },
        Step::DeregisterTarget(c) if c.task_id.is_empty() => {
            format!("deregister stray target {}", c.what())
        }
        Step::DeregisterTarget(c) => format!("deregister {} and drain", c.what()),
        Step::Retire(r) => format!("retire host {}", r.host_id),
        Step::DeleteResource { addr } => format!("delete {addr}"),
    }
}

/// Finish a journal left by an interrupted apply, if any. Returns `None` when there was none.
/// Call it before observing and planning, so the new plan sees the finished state.
pub async fn resume(ctx: &ApplyContext<'_>) -> Result<Option<ApplyReport>, ApplyError> {
    let guard = lock(ctx).await?;
    let out = resume_locked(ctx).await;
    release(ctx, guard, out).await
}

/// Apply `plan`. See the module docs for the protocol.
pub async fn apply(plan: &Plan, ctx: &ApplyContext<'_>) -> Result<ApplyReport, ApplyError> {
    let guard = lock(ctx).await?;
    let out = apply_locked(plan, ctx).await;
    release(ctx, guard, out).await
}

async fn resume_locked(ctx: &ApplyContext<'_>) -> Result<Option<ApplyReport>, ApplyError> {
    let Some(journal) = read_journal(ctx).await? else {
        return Ok(None);
    };
    let mut report = ApplyReport::default();
    run_journal(ctx, journal, &mut report, true).await?;
    Ok(Some(report))
}

async fn apply_locked(plan: &Plan, ctx: &ApplyContext<'_>) -> Result<ApplyReport, ApplyError> {
    let mut report = ApplyReport::default();
    if let Some(j) = read_journal(ctx).await? {
        let own = j.plan == *plan;
        let left = j.plan.steps().len().saturating_sub(j.done);
        run_journal(ctx, j, &mut report, true).await?;
        if own {
            return Ok(report);
        }
        return Err(ApplyError::ResumedEarlierPlan { steps: left });
    }
    let state = load(ctx).await?;
    if plan.base_serial != state.serial {
        return Err(ApplyError::Stale {
            plan_serial: plan.base_serial,
            store_serial: state.serial,
        });
    }
    check_cluster(ctx, plan, &state)?;
    preflight(ctx, plan, &state).await?;
    // Migration: instances launched before store identity become this store's
    // (tagged with its id; idempotent, so a crash here is finished by the next plan).
    for c in &plan.adopted {
        ctx.cloud
            .claim(&plan.cluster, &state.store_id, &c.instance_id)
            .await
            .map_err(|source| ApplyError::Adopt {
                instance_id: c.instance_id.clone(),
                source,
            })?;
        tracing::info!(instance_id = %c.instance_id, host = %c.host_id, store_id = %state.store_id, "adopted an instance launched before store identity");
    }
    if plan.steps().is_empty() {
        report.serial = state.serial;
        ctx.emit(ProgressEvent::Finished {
            total: 0,
            serial: state.serial,
        });
        return Ok(report);
    }
    let journal = Journal {
        plan: plan.clone(),
        done: 0,
        holder: ctx.holder.to_string(),
    };
    ctx.store
        .write_journal(&journal)
        .await
        .map_err(|source| store_err(ctx, "writing the journal", source))?;
    run_journal(ctx, journal, &mut report, false).await?;
    Ok(report)
}

async fn lock(ctx: &ApplyContext<'_>) -> Result<Box<dyn crate::store::LockGuard>, ApplyError> {
    ctx.store
        .lock(ctx.holder, ctx.lock_timeout)
        .await
        .map_err(|source| ApplyError::Lock {
            location: ctx.store.location(),
            source,
        })
}

/// Release the lock whatever `out` is; an error releasing it only surfaces when
/// `out` succeeded (the first error is the one that matters).
async fn release<T>(
    ctx: &ApplyContext<'_>,
    guard: Box<dyn crate::store::LockGuard>,
    out: Result<T, ApplyError>,
) -> Result<T, ApplyError> {
    let released = guard
        .release()
        .await
        .map_err(|source| store_err(ctx, "releasing the state lock", source));
    match (out, released) {
        (Ok(v), Ok(())) => Ok(v),
        (Ok(_), Err(e)) => Err(e),
        (Err(e), released) => {
            if let Err(r) = released {
                tracing::warn!(error = %r, "could not release the state lock after an error");
            }
            Err(e)
        }
    }
}

async fn read_journal(ctx: &ApplyContext<'_>) -> Result<Option<Journal>, ApplyError> {
    ctx.store
        .read_journal()
        .await
        .map_err(|source| store_err(ctx, "reading the journal", source))
}

async fn load(ctx: &ApplyContext<'_>) -> Result<StoreState, ApplyError> {
    ctx.store
        .load()
        .await
        .map_err(|source| store_err(ctx, "reading the state", source))
}

fn store_err(ctx: &ApplyContext<'_>, operation: &'static str, source: StoreError) -> ApplyError {
    ApplyError::Store {
        operation,
        location: ctx.store.location(),
        source,
    }
}

fn check_cluster(
    ctx: &ApplyContext<'_>,
    plan: &Plan,
    state: &StoreState,
) -> Result<(), ApplyError> {
    if !state.cluster.is_empty() && state.cluster != plan.cluster {
        return Err(ApplyError::WrongCluster {
            plan: plan.cluster.clone(),
            state: state.cluster.clone(),
            location: ctx.store.location(),
        });
    }
    // A plan made from another store (a saved plan copied over) carries that store's
    // launch tokens: refused, so it can never launch or retire in another's name.
    if !plan.after.store_id.is_empty()
        && !state.store_id.is_empty()
        && plan.after.store_id != state.store_id
    {
        return Err(ApplyError::WrongStore {
            plan: plan.after.store_id.clone(),
            state: state.store_id.clone(),
            location: ctx.store.location(),
        });
    }
    Ok(())
}

/// Fire the configured failpoint if it names a step in `steps`.
fn hit(
    ctx: &ApplyContext<'_>,
    when: FailpointWhen,
    steps: std::ops::RangeInclusive<usize>,
) -> Result<(), ApplyError> {
    let Some(f) = ctx.hooks.failpoint else {
        return Ok(());
    };
    if f.when != when || !steps.contains(&f.step) {
        return Ok(());
    }
    if ctx.hooks.abort {
        tracing::error!(failpoint = ?f, "failpoint reached: aborting the process (crash-test hook)");
        std::process::abort();
    }
    Err(ApplyError::Failpoint { failpoint: f })
}

/// One run through a journal's plan: the state as executed so far, the steps
/// executed but not yet committed, and the report being filled.
struct JournalRun<'c, 'a> {
    ctx: &'c ApplyContext<'a>,
    journal: Journal,
    total: usize,
    state: StoreState,
    committed_serial: u64,
    /// The records steps touched since the last commit: what the next commit writes.
    touched: ChangedKeys,
    /// The state as last committed, to check in debug builds that `touched` misses
    /// nothing (release builds never compare whole states).
    #[cfg(debug_assertions)]
    committed: StoreState,
    /// (index, description, changed) of each step executed since the last commit.
    batch: Vec<(usize, String, bool)>,
    report: &'c mut ApplyReport,
}

/// Run the journal's plan from `journal.done` to the end, then clear the journal.
async fn run_journal(
    ctx: &ApplyContext<'_>,
    journal: Journal,
    report: &mut ApplyReport,
    resuming: bool,
) -> Result<(), ApplyError> {
    let steps = journal.plan.steps();
    let mut i = journal.done;
    let mut run = JournalRun::open(ctx, journal, steps.len(), report, resuming).await?;
    while i < run.total {
        i = run.advance(&steps, i).await?;
    }
    run.finish().await
}

impl JournalRun<'_, '_> {
    /// A launch fixed by the plan was refused for lack of capacity (`source`): record
    /// the refusal in the state, commit, and drop the journal (the plan placed later
    /// steps on that host; the next plan places it elsewhere). Returns the error to
    /// report, or the store's error if the refusal could not be recorded (the journal
    /// is then kept, and the next run tries the launch again).
    async fn refused(
        &mut self,
        host: &Host,
        index: usize,
        description: String,
        source: CloudError,
    ) -> ApplyError {
        let ctx = self.ctx;
        let (instance_type, subnet, zone) = (&host.instance_type, &host.subnet, &host.zone);
        let now = ctx.now.unwrap_or_else(gpushare_core::util::unix_now);
        tracing::warn!(%instance_type, subnet = subnet.as_deref().unwrap_or("default"), zone = zone.as_deref().unwrap_or("-"), "no capacity where the plan launches: recording the refusal and dropping the rest of the plan");
        gpushare_core::facts::record_refusal(
            &mut self.state.capacity_refusals,
            gpushare_core::facts::CapacityRefusal {
                instance_type: instance_type.clone(),
                subnet: subnet.clone(),
                zone: zone.clone(),
                at: now,
            },
            now,
            ctx.capacity_refusal_seconds,
        );
        if let Err(e) = self.commit(index, description.clone()).await {
            return e;
        }
        if let Err(e) = ctx.store.clear_journal().await {
            return store_err(ctx, "clearing the journal", e);
        }
        ApplyError::CapacityRefused {
            index,
            total: self.total,
            description,
            source,
        }
    }

    /// Commit the state as executed so far (serial + 1) without advancing the journal;
    /// `index` and `description` name the step in an error.
    async fn commit(&mut self, index: usize, description: String) -> Result<(), ApplyError> {
        self.state.serial = self.committed_serial + 1;
        let changes = self.touched.changes(&self.state);
        #[cfg(debug_assertions)]
        {
            let mut check = self.committed.clone();
            changes.apply_to(&mut check);
            assert!(
                check == self.state,
                "apply's change set for serial {} misses a change (a step changed a record `touch` does not name): {:?}",
                self.state.serial,
                crate::store::ChangeSet::diff(&check, &self.state)
            );
        }
        if let Err(source) = self
            .ctx
            .store
            .commit_changes(self.committed_serial, &changes)
            .await
        {
            return Err(ApplyError::Step {
                index,
                total: self.total,
                description,
                source: StepError::Store(source),
            });
        }
        self.committed_serial = self.state.serial;
        self.touched.clear();
        #[cfg(debug_assertions)]
        {
            self.committed = self.state.clone();
        }
        Ok(())
    }
}

/// Where the run of steps from `i` that wait for healthy successors ends (moves, or
/// a deployment's stops that wait), when step `i` starts one; `None` when it does
/// not, or when nothing waits (`no_wait`: a zero move timeout).
fn waiting_run(steps: &[Step], i: usize, no_wait: bool) -> Option<usize> {
    use gpushare_core::plan::TargetWhen;
    let waits = |s: &Step| match s {
        Step::Move(_) => true,
        Step::Stop(s) => s.after_healthy.is_some(),
        Step::RegisterTarget(c) | Step::DeregisterTarget(c) => c.when != TargetWhen::Now,
        _ => false,
    };
    if no_wait || !waits(&steps[i]) {
        return None;
    }
    Some(
        steps[i..]
            .iter()
            .position(|s| !waits(s))
            .map_or(steps.len(), |n| i + n),
    )
}

/// Where the run of target steps from `i` ends, when step `i` starts one: those
/// carried out at once, or (when apply does not wait) any.
fn target_run(steps: &[Step], i: usize) -> Option<usize> {
    let kind = |s: &Step| match s {
        Step::RegisterTarget(_) => Some(true),
        Step::DeregisterTarget(_) => Some(false),
        _ => None,
    };
    let first = kind(&steps[i])?;
    Some(
        steps[i..]
            .iter()
            .position(|s| kind(s) != Some(first))
            .map_or(steps.len(), |n| i + n),
    )
}

/// Name the records `step` may change in `state` (before it runs) in `touched`.
fn touch(touched: &mut ChangedKeys, step: &Step, state: &StoreState) {
    match step {
        Step::Register(r) => {
            touched.revisions.insert(r.family.clone());
        }
        Step::PutResource { addr, .. } | Step::DeleteResource { addr } => {
            touched.resources.insert(addr.clone());
        }
        Step::Deployment(gpushare_core::model::DeploymentUpdate { service, .. }) => {
            touched
                .resources
                .insert(gpushare_core::model::ResourceAddr::new(
                    gpushare_core::model::ResourceKind::Service,
                    service.clone(),
                ));
        }
        Step::Scaling(u) => {
            touched
                .resources
                .insert(gpushare_core::model::ResourceAddr::new(
                    gpushare_core::model::ResourceKind::Service,
                    u.service.clone(),
                ));
            touched
                .tasks
                .extend(u.scrapes.iter().map(|c| c.task.clone()));
        }
        Step::Job(u) => {
            touched
                .resources
                .insert(gpushare_core::model::ResourceAddr::new(
                    gpushare_core::model::ResourceKind::Job,
                    u.job.clone(),
                ));
        }
        Step::Launch(l) => {
            touched.hosts.insert(l.host.id.clone());
        }
        Step::Start(s) => {
            touched.tasks.insert(s.task.id.clone());
        }
        Step::Move(m) => {
            touched.tasks.insert(m.to.id.clone());
            touched.tasks.insert(m.from_task.clone());
        }
        Step::Stop(s) => {
            touched.tasks.insert(s.task_id.clone());
        }
        // The load balancer's, not the state's.
        Step::RegisterTarget(_) | Step::DeregisterTarget(_) => {}
        Step::Retire(r) => {
            touched.hosts.insert(r.host_id.clone());
            // A retired host's tasks go with it.
            touched.tasks.extend(
                state
                    .tasks
                    .values()
                    .filter(|t| t.host == r.host_id)
                    .map(|t| t.id.clone()),
            );
        }
    }
}

/// Let the cloud check every launch of the plan before anything changes, so a bad
/// pool (instance type, image, subnets...) fails with nothing launched. Each launch
/// carries its pool's settings: nothing is looked up.
async fn preflight(
    ctx: &ApplyContext<'_>,
    plan: &Plan,
    state: &StoreState,
) -> Result<(), ApplyError> {
    if plan.launches.is_empty() {
        return Ok(());
    }
    // The size and the characters of the user data are checked with a token of the
    // real shape: tokens are minted only when a launch runs.
    let placeholder = ctx
        .join
        .map(|j| crate::join::JoinGrant::placeholder(j.server));
    let requests: Vec<LaunchRequest<'_>> = plan
        .launches
        .iter()
        .map(|l| LaunchRequest::of(&plan.cluster, l, placeholder.as_ref(), &state.store_id))
        .collect();
    ctx.cloud
        .preflight(&requests)
        .await
        .map_err(|source| ApplyError::Preflight {
            source: StepError::Cloud(source),
        })
}
