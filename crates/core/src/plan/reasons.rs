//! Why the planner does what it does, typed. The public plan records reasons as
//! text (`Stop::reason`, `Retire::reason`, `Move::reason`, `Unplaced::reason`); the
//! steps decide with these enums and turn them into that text, through `Display`,
//! only where a plan record is built, so the text reads as it always has.
//!
//! A leaf module: it knows the model and nothing of the planner's steps.

use crate::model::{Hold, HostNotice, HostState, Market};
use std::fmt;

/// Why an active host is drained (its tasks moved, then it is retired), or kept but
/// closed to new tasks while its replacement waits (`max_draining_percent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DrainReason {
    /// Its `capacity_provider` is no longer declared.
    PoolRemoved { pool: String },
    /// It is the host of a `gpu_instance` that is no longer declared.
    GpuInstanceRemoved { name: String },
    /// Its `gpu_instance` now asks for another pool or instance type.
    GpuInstanceReplaced { name: String },
    /// Another kept host already stands for its `gpu_instance` (one host per resource).
    GpuInstanceDuplicate { name: String },
    /// The host is unwell or out of date: drained within `max_draining_percent`.
    Sick(Sickness),
    /// Launched with settings its pool no longer has (`changes`, as plan text):
    /// drained by a rolling refresh (`plan/refresh.rs`).
    Outdated { changes: String },
    /// Not the host: GPU `gpu` of it is impaired (its health: `reason`); only the
    /// tasks on that GPU move (see `plan/health.rs`).
    GpuImpaired {
        host: String,
        gpu: u32,
        reason: String,
    },
    /// The operator's `gpushare host drain|remove` (see `plan/registered.rs`).
    Held(Hold),
    /// EC2 gave notice that it ends or disturbs the host (a Spot interruption, a
    /// scheduled event): drained at once, start before stop while the notice lasts.
    Notice(HostNotice),
}

impl fmt::Display for DrainReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DrainReason::PoolRemoved { pool } => write!(f, "capacity_provider.{pool} is removed"),
            DrainReason::GpuInstanceRemoved { name } => write!(f, "gpu_instance.{name} is removed"),
            DrainReason::GpuInstanceReplaced { name } => {
                write!(f, "gpu_instance.{name} is replaced")
            }
            DrainReason::GpuInstanceDuplicate { name } => {
                write!(f, "gpu_instance.{name} already has a host")
            }
            DrainReason::Sick(s) => s.fmt(f),
            DrainReason::Outdated { changes } => write!(f, "refresh: {changes}"),
            DrainReason::GpuImpaired { host, gpu, reason } => {
                write!(f, "GPU {gpu} of host {host} impaired: {reason}")
            }
            DrainReason::Held(h) => f.write_str(hold_text(*h)),
            DrainReason::Notice(n) => n.fmt(f),
        }
    }
}

/// Why a host is held by the operator, as a drain reason's text.
fn hold_text(hold: Hold) -> &'static str {
    match hold {
        Hold::Cordoned => "cordoned by the operator",
        Hold::Drain => "drained by the operator (gpushare host drain)",
        Hold::Remove => "removed by the operator (gpushare host remove)",
    }
}

/// What ails a host whose pool and resource are still declared. Such hosts are
/// drained a few at a time (`max_draining_percent`), in [`SickRank`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sickness {
    /// Already draining (an earlier plan began it).
    Draining,
    /// Its MPS daemon failed its probes.
    MpsImpaired,
    /// A health check of its agent failed (`checks`: each failed check with its
    /// reason, as `HostHealth::impaired_summary` words it).
    HealthImpaired { checks: String },
    /// Its agent last reported `seconds` ago, beyond `heartbeat_timeout_seconds`.
    Silent { seconds: u64 },
    /// Its agent never reported, `seconds` after launch, beyond `boot_grace_seconds`.
    NeverReported { seconds: u64 },
    /// Of an instance type its pool no longer allows.
    InstanceTypeReplaced { from: String, to: String },
    /// Bought on a market its pool no longer uses.
    MarketReplaced { from: Market, to: Market },
}

impl Sickness {
    pub(super) fn rank(&self) -> SickRank {
        match self {
            Sickness::Draining => SickRank::Draining,
            Sickness::MpsImpaired | Sickness::HealthImpaired { .. } => SickRank::Impaired,
            Sickness::Silent { .. } | Sickness::NeverReported { .. } => SickRank::Silent,
            Sickness::InstanceTypeReplaced { .. } | Sickness::MarketReplaced { .. } => {
                SickRank::Outdated
            }
        }
    }
}

impl fmt::Display for Sickness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sickness::Draining => f.write_str("draining"),
            Sickness::MpsImpaired => f.write_str("MPS daemon impaired"),
            Sickness::HealthImpaired { checks } => write!(f, "health check {checks}"),
            Sickness::Silent { seconds } => write!(f, "silent: no agent report for {seconds} s"),
            Sickness::NeverReported { seconds } => {
                write!(
                    f,
                    "silent: no agent report since its launch {seconds} s ago"
                )
            }
            Sickness::InstanceTypeReplaced { from, to } => {
                write!(f, "instance type {from} replaced by {to}")
            }
            Sickness::MarketReplaced { from, to } => {
                write!(f, "market {} replaced by {}", from.as_str(), to.as_str())
            }
        }
    }
}

/// The order in which a pool's sick hosts (those with tasks) are drained when
/// `max_draining_percent` allows only some: first ranks first, then by host id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SickRank {
    /// Already draining: it goes on whatever the limit (stopping halfway would
    /// strand its tasks), and counts against the limit first.
    Draining,
    /// MPS impaired, or another health check failed: its tasks are failing now.
    Impaired,
    /// Silent or never reported: its tasks may be running unobserved.
    Silent,
    /// Of a replaced instance type or market: healthy, replaced at leisure.
    Outdated,
}

/// Why a host record is retired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RetireReason {
    /// The cloud terminated its instance without gpushare.
    TerminatedOutside,
    /// The cloud is shutting its instance down without gpushare.
    ShuttingDownOutside,
    /// Drained, and none of its tasks are left.
    Drained(DrainReason),
    /// Empty, and its pool has `min_size` hosts without it.
    Empty { pool: String, min_size: u32 },
    /// `destroy` removes everything.
    Destroy,
}

impl RetireReason {
    /// The reason for a host record the cloud already ended, `None` for a host that is up.
    pub(super) fn ended_outside(state: HostState) -> Option<RetireReason> {
        match state {
            HostState::Terminated => Some(RetireReason::TerminatedOutside),
            HostState::ShuttingDown => Some(RetireReason::ShuttingDownOutside),
            HostState::Pending | HostState::Running | HostState::Draining => None,
        }
    }
}

impl fmt::Display for RetireReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetireReason::TerminatedOutside => f.write_str("terminated outside gpushare"),
            RetireReason::ShuttingDownOutside => f.write_str("shutting down outside gpushare"),
            RetireReason::Drained(why) => why.fmt(f),
            RetireReason::Empty { pool, min_size } => {
                write!(
                    f,
                    "empty (capacity_provider.{pool} min_size {min_size} is met)"
                )
            }
            RetireReason::Destroy => f.write_str("destroy"),
        }
    }
}

/// Why a task of a service is replaced by one of the service as declared now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ReplaceReason {
    /// The service now runs another task definition.
    TaskDefinition { from: String, to: String },
    /// Its task definition has a newer revision.
    Revision { from: u32, to: u32 },
    /// The service now runs in another pool.
    CapacityProvider { to: String },
}

impl fmt::Display for ReplaceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplaceReason::TaskDefinition { from, to } => {
                write!(f, "task definition {from} -> {to}")
            }
            ReplaceReason::Revision { from, to } => write!(f, "revision {from} -> {to}"),
            ReplaceReason::CapacityProvider { to } => write!(f, "capacity provider -> {to}"),
        }
    }
}

/// The old task a new one takes over from (apply starts the new one first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Replaces {
    /// The same task elsewhere: its host is drained (a [`crate::plan::Move`]).
    Move { task_id: String, why: DrainReason },
    /// A task as the service is declared now (a start, then a stop of the old one).
    Replace { task_id: String, why: ReplaceReason },
}

impl Replaces {
    /// The running task taken over.
    pub(super) fn task_id(&self) -> &str {
        match self {
            Replaces::Move { task_id, .. } | Replaces::Replace { task_id, .. } => task_id,
        }
    }
}

/// Why a task record is stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StopReason {
    /// It failed on its own: the record is cleared (the service starts another).
    Failed { host: String },
    /// It runs, but its health check says UNHEALTHY: replaced, as ECS's service
    /// scheduler replaces a task that fails its container health checks.
    Unhealthy { host: String, why: String },
    /// It stopped on its own: the record is cleared (the service starts another).
    Stopped { host: String },
    /// Its host is no longer up.
    HostGone { host: String },
    /// Its service is no longer declared.
    ServiceRemoved { service: String },
    /// Its service runs more tasks than `desired_count`.
    ScaledDown {
        service: String,
        from: usize,
        to: usize,
    },
    /// Task `by` replaces it (started before it stops).
    Replaced { by: String, why: ReplaceReason },
    /// Its service has its count without it (`why`: what it was leaving for).
    Surplus { service: String, why: String },
    /// `destroy` removes everything.
    Destroy,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Failed { host } => write!(f, "it failed on {host}"),
            StopReason::Unhealthy { host, why } => write!(f, "{why} on {host}"),
            StopReason::Stopped { host } => write!(f, "it stopped on {host}"),
            StopReason::HostGone { host } => write!(f, "its host {host} is gone"),
            StopReason::ServiceRemoved { service } => write!(f, "service.{service} is removed"),
            StopReason::ScaledDown { service, from, to } => {
                write!(f, "service.{service} scales from {from} to {to}")
            }
            StopReason::Replaced { by, why } => write!(f, "replaced by {by} ({why})"),
            StopReason::Surplus { service, why } => {
                write!(f, "service.{service} has its tasks without it ({why})")
            }
            StopReason::Destroy => f.write_str("destroy"),
        }
    }
}

/// Why a running task moves to another host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum MoveReason {
    /// Its host is drained.
    Drained(DrainReason),
    /// Consolidation empties `host` so that it can be retired.
    Consolidate { host: String },
}

impl fmt::Display for MoveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoveReason::Drained(why) => why.fmt(f),
            MoveReason::Consolidate { host } => write!(f, "consolidate: empty host {host}"),
        }
    }
}

/// Why the placement engine's outcome holds no host for a wanted task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum UnplacedCause {
    /// The engine found no room; its own words, with the hosts it would have
    /// opened named by the ids this plan gives them.
    Refused(String),
    /// The engine named a host the planner does not know (an engine bug).
    UnknownHost,
    /// The engine neither placed nor refused the task (an engine bug).
    NoAnswer,
}

impl fmt::Display for UnplacedCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnplacedCause::Refused(why) => f.write_str(why),
            UnplacedCause::UnknownHost => {
                f.write_str("the placement engine chose a host that does not exist")
            }
            UnplacedCause::NoAnswer => f.write_str("the placement engine gave no answer"),
        }
    }
}

/// Why a wanted task is left unplaced. When it was to take over from an old task,
/// the reason says so first: that task stays where it is, on a host that may be sick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UnplacedReason {
    pub(super) takeover: Option<Replaces>,
    pub(super) cause: UnplacedCause,
}

impl fmt::Display for UnplacedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cause = &self.cause;
        match &self.takeover {
            None => cause.fmt(f),
            Some(Replaces::Move { task_id, why }) => {
                write!(
                    f,
                    "moving {task_id} cannot go anywhere else ({why}): {cause}"
                )
            }
            Some(Replaces::Replace { task_id, why }) => {
                write!(
                    f,
                    "replacing {task_id} cannot go anywhere else ({why}): {cause}"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_order_as_drained() {
        assert!(SickRank::Draining < SickRank::Impaired);
        assert!(SickRank::Impaired < SickRank::Silent);
        assert!(SickRank::Silent < SickRank::Outdated);
    }

    #[test]
    fn reasons_read_as_plan_text() {
        let why = DrainReason::Sick(Sickness::Silent { seconds: 300 });
        assert_eq!(why.to_string(), "silent: no agent report for 300 s");
        assert_eq!(
            RetireReason::Drained(why.clone()).to_string(),
            "silent: no agent report for 300 s"
        );
        let u = UnplacedReason {
            takeover: Some(Replaces::Move {
                task_id: "t-a".into(),
                why,
            }),
            cause: UnplacedCause::NoAnswer,
        };
        assert_eq!(
            u.to_string(),
            "moving t-a cannot go anywhere else (silent: no agent report for 300 s): the placement engine gave no answer"
        );
        let s = StopReason::Replaced {
            by: "t-b".into(),
            why: ReplaceReason::Revision { from: 1, to: 2 },
        };
        assert_eq!(s.to_string(), "replaced by t-b (revision 1 -> 2)");
        assert_eq!(
            Sickness::MarketReplaced {
                from: Market::OnDemand,
                to: Market::Spot
            }
            .to_string(),
            "market on_demand replaced by spot"
        );
    }
}
