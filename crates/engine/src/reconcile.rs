//! The reconciler: the backends one process works with, the planner options it
//! takes from the settings, and the phases of a pass (resume, observe, gather, plan,
//! apply). Callers do not assemble the phases: they run a pass through
//! [`crate::pass`] (`prepare`, then `execute`).
//!
//! [`Reconciler`] is long-lived: the CLI's `apply` and `reconcile`, and the Terraform
//! provider, build one from their [`Backends`] and keep it, so backends are opened
//! once and every caller plans with the options of its settings.

use crate::agents::HostAgents;
use crate::apply::{self, ApplyContext, ApplyError, ApplyReport, Hooks, MoveWait, ProgressEvent};
use crate::cloud::{Cloud, CloudError, LocalCloud};
use crate::observe::{self, ObserveError};
use crate::store::Store;
use gpushare_core::model::{Desired, Live, Settings};
use gpushare_core::plan::{self, Options, Plan, PlanError};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The store and the cloud one process works with (opened by the backends factory).
#[derive(Clone)]
pub struct Backends {
    pub store: Arc<dyn Store>,
    pub cloud: Arc<dyn Cloud>,
    /// Set when the cloud is the local simulated fleet: its agents run in-process and
    /// faults can be injected.
    pub local: Option<Arc<LocalCloud>>,
    /// Mints the join tokens of launched hosts (`None`: hosts cannot be given one, so
    /// the ec2 cloud cannot launch; the local fleet's in-process agents need none).
    pub joins: Option<Arc<dyn crate::join::JoinIssuer>>,
    /// The file store's directory (also the local fleet's), when the store is a directory.
    pub state_dir: Option<PathBuf>,
    /// The local fleet's in-process agents; `None` on a real cloud, or when the local
    /// fleet's agents run as processes of their own (`local_agents = "external"`).
    pub agents: Option<Arc<dyn HostAgents>>,
    /// How long after its recorded launch a host the cloud does not list yet is
    /// pending rather than gone (the settings' `consistency_window_seconds`).
    pub consistency_window_seconds: u64,
    /// The ELBv2 target groups services' tasks are registered with (`None`: this
    /// build or these settings have none; a service with a `load_balancer` then
    /// plans no registration and notes why).
    pub balancer: Option<Arc<dyn crate::balancer::TargetGroups>>,
}

/// Why a pass (or one of its phases) failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("finishing an interrupted apply")]
    Resume(#[source] ApplyError),
    #[error("running the local fleet's agents")]
    LocalAgents(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("observing the fleet")]
    Observe(#[source] ObserveError),
    #[error("gathering the {cloud} cloud's launch facts (images, subnets, zones)")]
    Gather {
        cloud: &'static str,
        #[source]
        source: CloudError,
    },
    /// The pass's scope could not make the configuration to plan towards (a
    /// `-target` that names nothing, the provider's desired set unreadable).
    #[error("scoping the desired configuration")]
    Desired(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("planning")]
    Plan(#[source] PlanError),
    #[error("applying the plan")]
    Apply(#[source] ApplyError),
    #[error("interrupted before applying")]
    Cancelled,
}

impl ReconcileError {
    /// Whether running the pass again later may succeed without anyone changing the
    /// configuration (store or cloud trouble, a lock held, a stale plan), as opposed to
    /// an error in what was asked (a plan error, an invalid configuration).
    pub fn is_transient(&self) -> bool {
        match self {
            ReconcileError::Plan(_) | ReconcileError::Desired(_) => false,
            ReconcileError::Gather { source, .. } => !source.is_permanent(),
            ReconcileError::Apply(e) | ReconcileError::Resume(e) => !apply_is_permanent(e),
            ReconcileError::LocalAgents(_)
            | ReconcileError::Observe(_)
            | ReconcileError::Cancelled => true,
        }
    }
}

/// Whether applying again cannot succeed until someone changes something: the plan
/// is for another cluster, or a cloud call refused for good (the instance is not
/// this cluster's or store's, the request is invalid).
fn apply_is_permanent(e: &ApplyError) -> bool {
    let cloud = match e {
        ApplyError::WrongCluster { .. } => return true,
        ApplyError::Adopt { source, .. } => source,
        ApplyError::Step {
            source: crate::apply::StepError::Cloud(source),
            ..
        }
        | ApplyError::Preflight {
            source: crate::apply::StepError::Cloud(source),
        } => source,
        _ => return false,
    };
    cloud.is_permanent()
}

/// The CLI's planner flags: each one given overrides the settings' value for the
/// process (`--consolidate`, `--heartbeat-timeout`, `--boot-grace`, `--max-moves`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlannerOverrides {
    pub consolidate: Option<bool>,
    pub max_moves: Option<u32>,
    pub heartbeat_timeout_seconds: Option<u64>,
    pub boot_grace_seconds: Option<u64>,
}

impl PlannerOverrides {
    /// The planner options of `settings` with these overrides (`destroy` off).
    pub fn options(&self, settings: &Settings) -> Options {
        let o = Options::from_settings(settings);
        Options {
            consolidate: self.consolidate.unwrap_or(o.consolidate),
            max_moves: self.max_moves.unwrap_or(o.max_moves),
            heartbeat_timeout_seconds: self
                .heartbeat_timeout_seconds
                .unwrap_or(o.heartbeat_timeout_seconds),
            boot_grace_seconds: self.boot_grace_seconds.unwrap_or(o.boot_grace_seconds),
            ..o
        }
    }
}

/// What one pass ([`Reconciler::execute`], [`Reconciler::pass`]) did.
#[derive(Debug)]
pub struct PassOutcome {
    /// The interrupted apply finished first, if there was one.
    pub resumed: Option<ApplyReport>,
    /// The world the (last) plan was made from.
    pub live: Live,
    /// The plan carried out (empty: nothing to do).
    pub plan: Plan,
    /// What the apply did (`None` when the plan was empty).
    pub applied: Option<ApplyReport>,
    /// Why the local fleet's agents' round after the apply failed (a warning: the
    /// apply is done; the next pass's round tries again).
    pub agents: Option<ReconcileError>,
}

impl PassOutcome {
    pub fn changed(&self) -> bool {
        !self.plan.is_empty()
    }
}

/// Per-call extras: how to report progress and when to stop.
#[derive(Clone, Copy, Default)]
pub struct Run<'a> {
    /// Checked between steps: when set, apply stops, leaving a resumable journal.
    pub cancel: Option<&'a AtomicBool>,
    pub progress: Option<&'a (dyn Fn(&ProgressEvent) + Send + Sync)>,
}

/// Shortest life of a launched host's join token, in seconds (when the boot grace is
/// off or shorter): ten minutes.
pub const MIN_JOIN_TTL: u64 = 600;

/// Default [`Reconciler::with_refusal_retries`]: a pool spread over three zones
/// tries each once in one pass.
pub const DEFAULT_REFUSAL_RETRIES: u32 = 3;

/// The reconcile pass with its backends, planner overrides and hooks.
pub struct Reconciler {
    backends: Backends,
    overrides: PlannerOverrides,
    holder: String,
    hooks: Hooks,
    pub(crate) stale_retries: u32,
    pub(crate) refusal_retries: u32,
    clock: fn() -> u64,
    move_poll: Duration,
    /// The store's last outage as this reconciler saw it (see [`Outage`]).
    outage: std::sync::Mutex<Outage>,
    /// What this process's agent API heard from the agents (see [`crate::heard`]).
    heard: Option<Arc<crate::heard::HeardFrom>>,
}

/// A read of the store that takes this long counts as an outage that ended when it
/// answered (a frozen or stalled store answers late rather than failing: its
/// reports, leases included, may meanwhile be gone or old).
/// Long enough that a busy machine's slow read is not one (a stall excuses every
/// host heard from before it, silent ones too).
pub const STORE_STALL: Duration = Duration::from_secs(10);

/// A store this reconciler could not read, and when it came back. Agents kept talking
/// to the controller while their reports could not be written, so the time the store
/// was unreachable does not count towards a host's silence: a host last heard before
/// the store came back counts as heard when it came back (issue 44).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    /// When a read of the store first failed, while it still fails.
    pub down_since: Option<u64>,
    /// When the store was read again after the last outage.
    pub back_at: Option<u64>,
    /// When the last outage began.
    pub began_at: Option<u64>,
}

pub use crate::heard::EXCUSE_HORIZON;

impl Outage {
    /// Record the outcome of a read of the store at `now` (`ok`: it was read).
    /// Returns true when this read ends an outage.
    pub fn read(&mut self, ok: bool, now: u64) -> bool {
        if !ok {
            self.down_since.get_or_insert(now);
            return false;
        }
        if let Some(began) = self.down_since.take() {
            self.back_at = Some(now);
            self.began_at = Some(began);
            return true;
        }
        false
    }

    /// Move heartbeats from before the store came back to when it came back, so the
    /// outage does not count towards silence (hosts heard from within
    /// [`EXCUSE_HORIZON`] before it began).
    pub fn excuse(&self, live: &mut Live) {
        let Some(back) = self.back_at else {
            return;
        };
        let began = self.began_at.unwrap_or(back);
        for h in live.state.hosts.values_mut() {
            if let Some(hb) = h
                .last_heartbeat
                .filter(|hb| *hb < back && hb.saturating_add(EXCUSE_HORIZON) >= began)
            {
                tracing::debug!(host = %h.id, heartbeat = hb, back, "heard from before the store came back: counted as heard then");
                h.last_heartbeat = Some(back);
            }
        }
    }
}

impl Reconciler {
    /// A reconciler over `backends`; `holder` names the process in the lock and the
    /// journal (e.g. `gpushare apply`). Planner options: those of the settings of
    /// the configuration each pass is given ([`Options::from_settings`]).
    pub fn new(backends: Backends, holder: impl Into<String>) -> Reconciler {
        Reconciler {
            backends,
            overrides: PlannerOverrides::default(),
            holder: holder.into(),
            hooks: Hooks::default(),
            stale_retries: 1,
            refusal_retries: DEFAULT_REFUSAL_RETRIES,
            clock: gpushare_core::util::unix_now,
            move_poll: Duration::from_secs(1),
            outage: std::sync::Mutex::new(Outage::default()),
            heard: None,
        }
    }

    /// Planner options that override the settings' (the CLI's flags); `destroy` is
    /// set per pass.
    pub fn with_overrides(mut self, overrides: PlannerOverrides) -> Reconciler {
        self.overrides = overrides;
        self
    }

    /// Count the agents' reports this process's agent API received (whether or
    /// not the store could take them) as heard (issue 44).
    pub fn with_heard(mut self, heard: Arc<crate::heard::HeardFrom>) -> Reconciler {
        self.heard = Some(heard);
        self
    }

    pub fn with_hooks(mut self, hooks: Hooks) -> Reconciler {
        self.hooks = hooks;
        self
    }

    /// How many times a pass plans again when the state moved on under it (default 1).
    pub fn with_stale_retries(mut self, n: u32) -> Reconciler {
        self.stale_retries = n;
        self
    }

    /// How many times a pass plans again after a launch found no capacity where the
    /// plan put it (default [`DEFAULT_REFUSAL_RETRIES`]; each plan avoids the zones
    /// refused so far). The CLI's `apply` of a reviewed plan does not retry: it reports.
    pub fn with_refusal_retries(mut self, n: u32) -> Reconciler {
        self.refusal_retries = n;
        self
    }

    /// How often apply reads the agents' reports while it waits for moved tasks'
    /// successors to run (default 1 s).
    pub fn with_move_poll(mut self, poll: Duration) -> Reconciler {
        self.move_poll = poll;
        self
    }

    /// The clock observe stamps `Live::observed_at` with (tests move time on).
    pub fn with_clock(mut self, clock: fn() -> u64) -> Reconciler {
        self.clock = clock;
        self
    }

    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    pub fn store(&self) -> &dyn Store {
        &*self.backends.store
    }

    /// The planner options a pass towards `desired` plans with: its settings', with
    /// this reconciler's overrides.
    pub fn options_for(&self, desired: &Desired) -> Options {
        self.overrides.options(&desired.settings)
    }

    pub fn now(&self) -> u64 {
        (self.clock)()
    }

    fn context<'a>(&'a self, desired: &'a Desired, run: Run<'a>) -> ApplyContext<'a> {
        let options = self.options_for(desired);
        let mut ctx = ApplyContext::new(&*self.backends.store, &*self.backends.cloud);
        ctx.balancer = self.backends.balancer.as_deref();
        ctx.join = match (&self.backends.joins, &desired.settings.controller_address) {
            (Some(issuer), Some(server)) => Some(crate::join::JoinLaunch {
                issuer: &**issuer,
                server,
                // A launched host's token is good for as long as it may take to boot.
                ttl: Duration::from_secs(options.boot_grace_seconds.max(MIN_JOIN_TTL)),
            }),
            _ => None,
        };
        ctx.holder = &self.holder;
        ctx.lock_timeout = Duration::from_secs(desired.settings.lock_timeout_seconds);
        ctx.progress = run.progress;
        ctx.cancel = run.cancel;
        ctx.hooks = self.hooks;
        ctx.now = Some(self.now());
        ctx.capacity_refusal_seconds = desired.settings.capacity_refusal_seconds;
        ctx.moves = MoveWait {
            timeout: Duration::from_secs(desired.settings.move_timeout_seconds),
            poll: self.move_poll,
            agents: self
                .backends
                .agents
                .as_ref()
                .map(|a| (&**a, &self.backends.store)),
            silent_after: Duration::from_secs(options.heartbeat_timeout_seconds),
        };
        ctx
    }

    /// Finish the journal of an interrupted apply, if there is one (a pass does it in
    /// [`Reconciler::prepare`]; `-refresh-only`, which does not plan, calls it itself).
    pub async fn resume(
        &self,
        desired: &Desired,
        run: Run<'_>,
    ) -> Result<Option<ApplyReport>, ReconcileError> {
        apply::resume(&self.context(desired, run))
            .await
            .map_err(ReconcileError::Resume)
    }

    /// Observe the live world for display or for recording it (`-refresh-only`, the
    /// fleet after an apply): on the local cloud the in-process agents run a round
    /// first. A pass observes in [`Reconciler::prepare`].
    pub async fn observe(&self, cluster: &str) -> Result<Live, ReconcileError> {
        self.run_agents().await?;
        self.observe_only(cluster).await
    }

    /// One round of the in-process agents, if this fleet has them.
    pub async fn run_agents(&self) -> Result<(), ReconcileError> {
        if let Some(agents) = &self.backends.agents {
            agents
                .round(&self.backends.store, self.now())
                .await
                .map_err(ReconcileError::LocalAgents)?;
        }
        Ok(())
    }

    /// Gather the cloud's launch facts for `desired`'s pools into `live`, so the plan
    /// fixes every launch (type, image, subnet, zone). Not needed to destroy.
    pub(crate) async fn gather(
        &self,
        desired: &Desired,
        live: &mut Live,
    ) -> Result<(), ReconcileError> {
        let cloud = &self.backends.cloud;
        live.facts = cloud
            .gather(&desired.capacity_providers)
            .await
            .map_err(|source| ReconcileError::Gather {
                cloud: cloud.kind(),
                source,
            })?;
        Ok(())
    }

    /// Observe without letting the local fleet's agents report first (`show`).
    pub async fn observe_only(&self, cluster: &str) -> Result<Live, ReconcileError> {
        let now = self.now();
        let started = std::time::Instant::now();
        let observed = observe::observe_within(
            &*self.backends.store,
            &*self.backends.cloud,
            cluster,
            now,
            self.backends.consistency_window_seconds,
        )
        .await;
        let store_failed = matches!(observed, Err(observe::ObserveError::Store { .. }));
        let took = started.elapsed();
        let mut outage = gpushare_core::util::lock(&self.outage);
        if !store_failed && took >= STORE_STALL {
            // A stall is an outage that ended when the store answered.
            outage.read(false, now);
            tracing::warn!(store = %self.backends.store.location(), took_s = took.as_secs(), "the store took long to answer: hosts are not judged silent for that time");
        }
        let down_since = outage.down_since;
        if outage.read(!store_failed, self.now()) {
            tracing::warn!(store = %self.backends.store.location(), ?down_since, "the store is readable again: hosts are not judged silent for the time it was not");
        }
        let mut live = observed.map_err(ReconcileError::Observe)?;
        if let Some(heard) = &self.heard {
            heard.raise(&mut live);
        }
        outage.excuse(&mut live);
        Ok(live)
    }

    /// The store's last outage as this reconciler saw it.
    pub fn outage(&self) -> Outage {
        *gpushare_core::util::lock(&self.outage)
    }

    /// Plan with this reconciler's options (`destroy` for this call).
    pub(crate) fn plan(
        &self,
        desired: &Desired,
        live: &Live,
        destroy: bool,
    ) -> Result<Plan, ReconcileError> {
        let options = Options {
            destroy,
            ..self.options_for(desired)
        };
        plan::plan(desired, live, &options).map_err(ReconcileError::Plan)
    }

    /// Apply a plan made from `desired`.
    pub(crate) async fn apply(
        &self,
        desired: &Desired,
        plan: &Plan,
        run: Run<'_>,
    ) -> Result<ApplyReport, ReconcileError> {
        apply::apply(plan, &self.context(desired, run))
            .await
            .map_err(ReconcileError::Apply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FileStore;
    use gpushare_core::facts::CapacityRefusal;

    /// Issue 44, regression: reports that could not be written while the store was
    /// frozen made healthy hosts silent once it came back. Heartbeats from before the
    /// store came back count as heard then; later silence counts again.
    #[test]
    fn an_outage_of_the_store_does_not_count_towards_silence() {
        let mut o = Outage::default();
        assert!(!o.read(true, 100), "no outage yet");
        assert!(!o.read(false, 110));
        assert!(!o.read(false, 125));
        assert_eq!(o.down_since, Some(110));
        assert!(o.read(true, 140), "the store is back");
        assert_eq!((o.down_since, o.back_at), (None, Some(140)));
        let mut live = Live::default();
        for (id, hb) in [
            ("quiet-during", Some(105)),
            ("fresh", Some(150)),
            ("never", None),
            ("dead-long-before", Some(0)),
        ] {
            let mut h = gpushare_testkit::model::host(id).build();
            h.last_heartbeat = hb;
            live.state.hosts.insert(id.into(), h);
        }
        o.excuse(&mut live);
        let hb = |id: &str| live.state.hosts[id].last_heartbeat;
        assert_eq!(hb("quiet-during"), Some(140));
        assert_eq!(hb("fresh"), Some(150));
        assert_eq!(hb("never"), None);
        // Heard last more than EXCUSE_HORIZON before the outage began: not excused.
        live.state
            .hosts
            .get_mut("dead-long-before")
            .expect("host")
            .last_heartbeat = Some(0);
        let mut late = o;
        late.began_at = Some(EXCUSE_HORIZON + 1);
        late.back_at = Some(EXCUSE_HORIZON + 50);
        late.excuse(&mut live);
        assert_eq!(live.state.hosts["dead-long-before"].last_heartbeat, Some(0));
    }

    /// The settings' `capacity_refusal_seconds` is what the reconciler plans with: a
    /// zone refused 100 s ago is avoided under the default (600 s) and tried again
    /// with a window of 60 s.
    #[tokio::test]
    async fn plans_use_the_settings_capacity_refusal_window() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).expect("store"));
        let local = Arc::new(LocalCloud::open(dir.path()).expect("cloud"));
        let backends = Backends {
            store,
            cloud: local.clone(),
            local: Some(local),
            joins: None,
            state_dir: None,
            agents: None,
            consistency_window_seconds: 300,
            balancer: None,
        };
        let r = Reconciler::new(backends, "test");
        let mut desired: Desired = serde_json::from_value(serde_json::json!({
            "settings": { "cluster": "c" },
            "capacity_providers": { "l4": { "instance_type": "g6.xlarge", "min_size": 1, "max_size": 2 } },
            "gpu_instances": {}, "task_definitions": {}, "services": {},
        }))
        .expect("desired");
        let mut live = r.observe_only("c").await.expect("observe");
        r.gather(&desired, &mut live).await.expect("gather");
        live.state.capacity_refusals = vec![CapacityRefusal {
            instance_type: "g6.xlarge".into(),
            subnet: Some("subnet-local-1a".into()),
            zone: Some("local-1a".into()),
            at: live.observed_at - 100,
        }];
        let zone = |d: &Desired| {
            let p = r.plan(d, &live, false).expect("plan");
            p.launches[0].host.zone.clone().expect("a zone")
        };
        assert_eq!(zone(&desired), "local-1b");
        desired.settings.capacity_refusal_seconds = 60;
        assert_eq!(zone(&desired), "local-1a");
    }
}
