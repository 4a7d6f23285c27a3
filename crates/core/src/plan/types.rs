//! What a plan is made of: its options, resource changes, steps and cost.

use super::refresh::PoolRefresh;
use crate::model::{
    CapacityProvider, CloudHost, Host, HostState, ResourceAddr, StoreState, Task, TaskDefinition,
};
pub use crate::model::{DEFAULT_BOOT_GRACE_SECONDS, DEFAULT_HEARTBEAT_TIMEOUT_SECONDS};
use crate::placement::Unplaced;
use serde::{Deserialize, Serialize};

/// Planner options. [`Options::default`] is what every face of gpushare plans with
/// (the CLI, the reconcile loop and the Terraform provider); the CLI's flags change it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// Plan the removal of everything (`destroy`).
    pub destroy: bool,
    /// Allow moving running tasks to reduce the number of hosts (bounded by `max_moves`).
    pub consolidate: bool,
    pub max_moves: u32,
    /// Seconds after which a host with no agent report counts as silent (0 = never).
    pub heartbeat_timeout_seconds: u64,
    /// Seconds after its launch within which a host's agent must first report, or the
    /// host counts as silent (0 = never).
    #[serde(default)]
    pub boot_grace_seconds: u64,
}

/// How a host's agent is silent ([`Options::silence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Silence {
    /// Its last report is this many seconds old, beyond the heartbeat timeout.
    NoReportFor(u64),
    /// It never reported, this many seconds after its launch (or join), beyond the boot grace.
    NeverReported(u64),
}

impl Options {
    /// Whether `h` is silent at `now`: its last agent report is older than the
    /// heartbeat timeout, or, never having reported, the boot grace since its launch
    /// is over (a host with no launch time is given the benefit). The planner drains
    /// such a host; the metrics label a registered one `silent`.
    pub fn silence(&self, h: &Host, now: u64) -> Option<Silence> {
        let timeout = self.heartbeat_timeout_seconds;
        let boot_grace = self.boot_grace_seconds;
        match (h.last_heartbeat, h.launched_at) {
            (Some(hb), _) if timeout > 0 && now.saturating_sub(hb) > timeout => {
                Some(Silence::NoReportFor(now - hb))
            }
            (None, Some(launched))
                if boot_grace > 0
                    && h.state == HostState::Running
                    && now.saturating_sub(launched) > boot_grace =>
            {
                Some(Silence::NeverReported(now.saturating_sub(launched)))
            }
            _ => None,
        }
    }
}

/// Default [`Options::max_moves`].
pub const DEFAULT_MAX_MOVES: u32 = 10;

impl Options {
    /// The options the `gpushare` (or provider) block's settings give: heartbeat
    /// timeout, boot grace and consolidation; `destroy` off, `max_moves` its default.
    /// Every caller plans with these; the CLI's flags override them for one run.
    pub fn from_settings(settings: &crate::model::Settings) -> Options {
        Options {
            consolidate: settings.consolidate,
            heartbeat_timeout_seconds: settings.heartbeat_timeout_seconds,
            boot_grace_seconds: settings.boot_grace_seconds,
            ..Options::default()
        }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            destroy: false,
            consolidate: false,
            max_moves: DEFAULT_MAX_MOVES,
            heartbeat_timeout_seconds: DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
            boot_grace_seconds: DEFAULT_BOOT_GRACE_SECONDS,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Create,
    Update,
    /// Delete then create (`-/+`), because an attribute forces replacement.
    Replace,
    Delete,
}

/// One resource attribute that changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttrChange {
    pub name: String,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
    pub forces_replacement: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceChange {
    pub addr: ResourceAddr,
    pub action: Action,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
    /// Changed attributes (all of them for create and delete).
    pub changes: Vec<AttrChange>,
}

/// A new task-definition revision to register.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    pub family: String,
    pub revision: u32,
    pub spec: TaskDefinition,
}

/// A host to launch: everything the cloud needs, fixed by the plan, so that apply
/// looks nothing up and the cloud chooses nothing (the blueprint rule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The full record as it will be stored (state `Pending`, no instance id yet):
    /// the instance type, image (`image_id`), subnet and zone the cloud launches.
    pub host: Host,
    /// The pool's settings as planned: what the launch is configured with (security
    /// groups, instance profile, key, root volume, metadata options, market and
    /// `max_price`, tags) and the user data's inputs (MPS, agent, `user_data`).
    pub pool: CapacityProvider,
    /// The device name of the image's root volume (EC2: DescribeImages at gather);
    /// `None` where the cloud has no such thing (the local fleet) or gave no facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device: Option<String>,
    /// Where the launch's type, image, subnet and zone came from.
    pub basis: LaunchBasis,
}

/// What the planner fixed a launch from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchBasis {
    /// The cloud's facts gathered for the pool (`Live::facts`).
    Facts,
    /// The configuration alone: the cloud gave no facts for the pool (the pool's
    /// `image`, its first subnet not refused lately, no zone; the plan notes it).
    Configuration,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Retire {
    pub host_id: String,
    pub reason: String,
    /// Retire the host only when no task is left on it (a refreshed host whose moved
    /// tasks' successors were not reported running keeps them, and stays).
    #[serde(default, skip_serializing_if = "is_false")]
    pub if_empty: bool,
}

/// A task to start: the full record as it will be stored (state `Pending`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Start {
    pub task: Task,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stop {
    pub task_id: String,
    pub reason: String,
    /// A deployment's replacement: the task stops only once this successor is
    /// healthy; until then it keeps running (apply waits for it, at most the move
    /// timeout, and otherwise leaves both for the next plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_healthy: Option<Successor>,
}

impl Stop {
    /// A stop carried out at once.
    pub fn now(task_id: impl Into<String>, reason: impl Into<String>) -> Stop {
        Stop {
            task_id: task_id.into(),
            reason: reason.into(),
            after_healthy: None,
        }
    }
}

/// When a target change is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetWhen {
    /// At once: a task healthy now, or one that stops at once.
    Now,
    /// A task this plan starts: registered once it is healthy (reported running,
    /// without a restart, for this many seconds), by the apply that waits for it.
    AfterHealthy { healthy_after_seconds: u64 },
    /// A task that stops once its successor is healthy: deregistered only then,
    /// after the successor's own registration is healthy in the target group.
    WithStop,
}

/// Registering a task with a service's ELBv2 target group, or deregistering it.
/// A deregistration is waited out (the group's deregistration delay, connection
/// draining) before the task's stop is carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetChange {
    pub service: String,
    pub task_id: String,
    pub host: String,
    pub target_group_arn: String,
    pub target_type: crate::model::TargetType,
    /// The host port of the load balancer's container port.
    pub port: u16,
    /// The target's id (instance id or address); `None` until apply resolves it, for
    /// a task on a host this plan launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_id: Option<String>,
    pub when: TargetWhen,
    /// A deregistration's wait at most (the group's `deregistration_delay`).
    #[serde(default)]
    pub drain_seconds: u64,
}

impl TargetChange {
    /// The target, when its id is known.
    pub fn target(&self) -> Option<crate::model::Target> {
        Some(crate::model::Target {
            id: self.target_id.clone()?,
            port: self.port,
        })
    }

    /// `web:i-0abc:32768`-like text: the group's name and the target.
    pub fn what(&self) -> String {
        let group = crate::model::group_name(&self.target_group_arn);
        match self.target() {
            Some(t) => format!("{group} {t} (task {})", self.task_id),
            None => format!(
                "{group} {}:{} (task {})",
                self.host, self.port, self.task_id
            ),
        }
    }
}

/// The new task an old one waits for before it stops, and when it counts as healthy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Successor {
    pub task_id: String,
    pub host: String,
    /// Healthy: reported running, without a restart, for this many seconds (the
    /// service's `deployment { min_healthy_seconds }`).
    pub healthy_after_seconds: u64,
}

/// A running task moved elsewhere: the new task is started before the old one stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Move {
    pub from_task: String,
    pub to: Task,
    pub reason: String,
    /// A refresh's move: when its successor is not healthy within the move timeout,
    /// the old task is kept and the successor dropped (its host's retirement waits).
    /// Other moves keep both for the next plan to decide from the agents' reports.
    /// A timeout never stops a healthy task.
    #[serde(default, skip_serializing_if = "is_false")]
    pub hold: bool,
    /// The old task is not serving (its host is silent, or it is not healthy): it
    /// stops as soon as the successor is recorded, without waiting.
    #[serde(default, skip_serializing_if = "is_false")]
    pub at_once: bool,
    /// The successor counts as healthy once reported running, without a restart, for
    /// this many seconds (the service's `deployment { min_healthy_seconds }`).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub healthy_after_seconds: u64,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// Cost per hour in USD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Cost {
    pub now_per_hour: f64,
    pub after_per_hour: f64,
    /// What sharing saves on the MPS tasks alone, after the plan (`None`: no MPS
    /// task on a host of known price). Whole-GPU and CPU-only tasks share nothing
    /// and are not in it; nor is the size of the pools' instance types (see
    /// `right_sizing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<Sharing>,
    /// Pools a smaller instance type of the same GPU would hold for less, after the
    /// plan (the catalogue's On-Demand prices): hints, never planned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub right_sizing: Vec<RightSizing>,
    /// Services whose measured GPU memory stays far below or near what they declare.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<UsageHint>,
    /// What `--consolidate` would do, on a plan that changes nothing and was made
    /// without it: the moves, the hosts retired and what that saves per hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation: Option<ConsolidationHint>,
    /// Which pools are priced how: `Registered` when every pool is registered
    /// (priced at its `host_hourly_cost`, not at any cloud's prices), `Mixed` when
    /// some are.
    #[serde(default, skip_serializing_if = "Pricing::is_cloud")]
    pub pricing: Pricing,
    /// Hosts whose price is unknown (left out of the sums).
    pub unpriced_hosts: u32,
    /// Spot hosts in the `now` sum counted at an upper bound: its `max_price`, else
    /// the On-Demand price (EC2's default Spot maximum), where the prices hold no
    /// current Spot price for it; a sum with any of them is an upper bound.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spot_hosts_now: u32,
    /// The same for the `after` sum.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spot_hosts_after: u32,
    /// Spot hosts counted at EC2's current Spot price (the most of now and after).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spot_priced_hosts: u32,
    /// The prices the figures use (`None`: the built-in table, for a cloud without
    /// regions such as the local fleet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<crate::catalog::PriceBook>,
}

/// How the pools of a plan are priced ([`Cost::pricing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pricing {
    /// Every pool is launched: the cloud's prices (or the built-in table).
    #[default]
    Cloud,
    /// Some pools are registered, priced at their `host_hourly_cost`.
    Mixed,
    /// Every pool is registered.
    Registered,
}

impl Pricing {
    fn is_cloud(&self) -> bool {
        *self == Pricing::Cloud
    }
}

/// What the same plan with `consolidate` would do ([`Cost::consolidation`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsolidationHint {
    pub moves: u32,
    pub retire: u32,
    pub saves_per_hour: f64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The MPS tasks after a plan, on the GPUs that hold them (the host's price over its
/// GPU count, per GPU), against each task alone on the cheapest instance type that
/// holds it ([`Sharing::alone_per_hour`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Sharing {
    /// Live MPS tasks on hosts of known price.
    pub mps_tasks: u32,
    /// The GPUs holding them.
    pub mps_gpus: u32,
    /// Those GPUs' share of their hosts' price.
    pub shared_per_hour: f64,
    /// Each MPS task alone on the cheapest instance type of its GPU model that
    /// holds it (its GPU memory, CPU and memory), at the book's price; on a
    /// registered or Spot host, or a type the catalogue does not know, one GPU of
    /// its own host at that host's price per GPU.
    pub alone_per_hour: f64,
}

impl Sharing {
    /// The saving in percent (0 when there is nothing to compare).
    pub fn saving_percent(&self) -> f64 {
        if self.alone_per_hour > 0.0 {
            (1.0 - self.shared_per_hour / self.alone_per_hour) * 100.0
        } else {
            0.0
        }
    }
}

/// A pool whose tasks, after the plan, a smaller instance type of the same GPU
/// would hold for less (an estimate: the tasks' GPUs, CPU and memory packed first
/// fit decreasing onto hosts of that type; MPS tasks keep the GPUs they share).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RightSizing {
    pub pool: String,
    /// The pool's instance type and its hosts that are up after the plan.
    pub instance_type: String,
    pub hosts: u32,
    pub per_hour: f64,
    /// The smaller type, how many of it would hold the same tasks, and their price.
    pub suggested_type: String,
    pub suggested_hosts: u32,
    pub suggested_per_hour: f64,
}

/// A service whose tasks' measured GPU memory stays far below (or near) what they
/// declare for MPS (issue 49 item 4): a hint, never planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageHint {
    pub service: String,
    pub pool: String,
    /// Running tasks with a usage sample, and the shortest time one has run.
    pub tasks_measured: u32,
    pub window_seconds: u64,
    /// The most GPU memory any of them held since it started, and what each declares.
    pub peak_mib: u64,
    pub declared_mib: u64,
    /// The MPS memory to declare instead (the peak with headroom, rounded up); `None`
    /// when the peak is near the declared memory (raise it, rather).
    pub suggested_mib: Option<u64>,
    /// With the suggested memory: the pool's tasks packed on its instance type use
    /// this many GPUs and hosts instead of these, and save this much per hour.
    pub gpus_now: u32,
    pub gpus_after: u32,
    pub hosts_freed: u32,
    pub saves_per_hour: f64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One step of an apply, in order. Each is idempotent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "step")]
// A launch carries its whole host record (launch settings, health, registration): far
// larger than the other steps, but a plan holds few launches and steps are serialised
// as they are, so they are not boxed.
#[allow(clippy::large_enum_variant)]
pub enum Step {
    Register(Registration),
    /// Record a service's deployment (its state, failures, rollback target).
    Deployment(crate::model::DeploymentUpdate),
    /// Record a service's auto scaling (its count, the breach timers).
    Scaling(crate::model::ScalingUpdate),
    /// Record a job's progress (its attempts; issue 51).
    Job(crate::model::JobUpdate),
    PutResource {
        addr: ResourceAddr,
        attrs: serde_json::Value,
    },
    Launch(Launch),
    Start(Start),
    /// Start `to` then stop `from_task`.
    Move(Move),
    Stop(Stop),
    /// Register a task with a target group (ELBv2 RegisterTargets).
    RegisterTarget(TargetChange),
    /// Deregister a task from a target group and wait out the connection draining
    /// (ELBv2 DeregisterTargets), before the task stops.
    DeregisterTarget(TargetChange),
    Retire(Retire),
    DeleteResource {
        addr: ResourceAddr,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Plan {
    pub format_version: String,
    pub cluster: String,
    /// The store serial this plan was made from; applying it against another serial is refused (stale).
    pub base_serial: u64,
    pub destroy: bool,
    pub resource_changes: Vec<ResourceChange>,
    pub registrations: Vec<Registration>,
    pub launches: Vec<Launch>,
    pub retirements: Vec<Retire>,
    pub starts: Vec<Start>,
    pub stops: Vec<Stop>,
    pub moves: Vec<Move>,
    /// Services' deployment records this plan writes (a new deployment, a failure
    /// counted, the circuit breaker tripped, a deployment completed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployments: Vec<crate::model::DeploymentUpdate>,
    /// Services' auto scaling records this plan writes: a count changed (with its
    /// reason) or a breach of the target that began or ended (docs/autoscaling.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scaling: Vec<crate::model::ScalingUpdate>,
    /// Jobs' progress records this plan writes (attempts started, ended; issue 51).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<crate::model::JobUpdate>,
    /// Tasks registered with their services' target groups (load balancers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_registrations: Vec<TargetChange>,
    /// Tasks deregistered from their services' target groups before they stop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_deregistrations: Vec<TargetChange>,
    pub unplaced: Vec<Unplaced>,
    /// Instances tagged with this cluster that the store does not know (reported, never deleted).
    pub strays: Vec<CloudHost>,
    /// Instances of this cluster that belong to another state store (their
    /// `gpushare:store-id` tag differs): reported, never touched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<CloudHost>,
    /// Instances without a store-id tag (launched before store identity) adopted by
    /// this store; apply tags each with the store's id (`Cloud::claim`), once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adopted: Vec<CloudHost>,
    /// The fleet as it will be after the plan (hosts and tasks), for the picture and `show`.
    pub after: StoreState,
    pub cost: Cost,
    /// Things the user should know that are not changes (e.g. a sick host whose
    /// replacement waits for `max_draining_percent`).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Pools whose hosts roll to new launch settings: what this plan drains, what
    /// waits, and whether the refresh is halted (docs/refresh.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refreshes: Vec<PoolRefresh>,
    /// Pools whose silent hosts are not replaced: more than
    /// `unhealthy_threshold_percent` of their hosts are silent or impaired at once
    /// (the disruption budget, issue 44). `show`, the console and the metric
    /// `gpushare_reconcile_replacements_held` say so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_pools: Vec<HeldPool>,
}

/// A pool whose silent hosts the disruption budget holds back (see
/// [`Plan::held_pools`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldPool {
    pub pool: String,
    /// Its hosts silent (not replaced) and impaired (still replaced) at once.
    pub silent: usize,
    pub impaired: usize,
    /// Its hosts up.
    pub size: usize,
    pub threshold_percent: usize,
}

impl HeldPool {
    /// One line: what is held, why, and what a person may do.
    pub fn text(&self) -> String {
        format!(
            "capacity_provider.{}: {} of its {} hosts are silent or impaired at once (more than unhealthy_threshold_percent = {}); its {} silent host(s) are not replaced (a mass silence is more likely a control-plane, store or network fault than the hosts'); they take no new tasks until their agents report again; `gpushare host replace HOST` replaces one, `gpushare host drain HOST` moves its tasks",
            self.pool,
            self.silent + self.impaired,
            self.size,
            self.threshold_percent,
            self.silent
        )
    }
}

impl Plan {
    /// True when applying would change nothing.
    pub fn is_empty(&self) -> bool {
        self.resource_changes.is_empty()
            && self.registrations.is_empty()
            && self.launches.is_empty()
            && self.retirements.is_empty()
            && self.starts.is_empty()
            && self.stops.is_empty()
            && self.moves.is_empty()
            && self.deployments.is_empty()
            && self.scaling.is_empty()
            && self.jobs.is_empty()
            && self.target_registrations.is_empty()
            && self.target_deregistrations.is_empty()
            && self.adopted.is_empty()
    }

    /// Whether the plan only records deployments (one COMPLETED, failures counted)
    /// or auto scaling's timers (a breach of a target that began or ended): a rollout
    /// or a scaling going on, which a fleet's drift check does not count as a change
    /// (`plan --detailed-exitcode`, `reconcile --drift-only`, docs/deployments.md).
    pub fn records_only(&self) -> bool {
        (!self.deployments.is_empty() || !self.scaling.is_empty() || !self.jobs.is_empty())
            && self
                .steps()
                .iter()
                .all(|s| matches!(s, Step::Deployment(_) | Step::Scaling(_) | Step::Job(_)))
    }

    /// The steps `apply` carries out, in order.
    pub fn steps(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        steps.extend(self.registrations.iter().cloned().map(Step::Register));
        for rc in &self.resource_changes {
            if let (Action::Create | Action::Update | Action::Replace, Some(after)) =
                (rc.action, &rc.after)
            {
                steps.push(Step::PutResource {
                    addr: rc.addr.clone(),
                    attrs: after.clone(),
                });
            }
        }
        steps.extend(self.deployments.iter().cloned().map(Step::Deployment));
        steps.extend(self.scaling.iter().cloned().map(Step::Scaling));
        steps.extend(self.jobs.iter().cloned().map(Step::Job));
        steps.extend(self.launches.iter().cloned().map(Step::Launch));
        steps.extend(self.starts.iter().cloned().map(Step::Start));
        let now = |c: &&TargetChange| c.when == TargetWhen::Now;
        // Healthy tasks join their target groups first; a task that stops at once
        // leaves its groups (and drains) just before its stop.
        let (reg_now, reg_later): (Vec<&TargetChange>, Vec<&TargetChange>) =
            self.target_registrations.iter().partition(now);
        let (dereg_now, dereg_later): (Vec<&TargetChange>, Vec<&TargetChange>) =
            self.target_deregistrations.iter().partition(now);
        steps.extend(reg_now.into_iter().cloned().map(Step::RegisterTarget));
        steps.extend(dereg_now.into_iter().cloned().map(Step::DeregisterTarget));
        let (at_once, gated): (Vec<&Stop>, Vec<&Stop>) =
            self.stops.iter().partition(|s| s.after_healthy.is_none());
        steps.extend(at_once.into_iter().cloned().map(Step::Stop));
        // Then everything that waits for healthy new tasks, which apply carries out
        // together after one wait: the new tasks' registrations, the old tasks'
        // deregistrations, the moves and the stops that wait for successors.
        steps.extend(reg_later.into_iter().cloned().map(Step::RegisterTarget));
        steps.extend(dereg_later.into_iter().cloned().map(Step::DeregisterTarget));
        steps.extend(self.moves.iter().cloned().map(Step::Move));
        steps.extend(gated.into_iter().cloned().map(Step::Stop));
        steps.extend(self.retirements.iter().cloned().map(Step::Retire));
        for rc in &self.resource_changes {
            if rc.action == Action::Delete {
                steps.push(Step::DeleteResource {
                    addr: rc.addr.clone(),
                });
            }
        }
        steps
    }
}
