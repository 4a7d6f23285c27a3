//! What apply tells its caller: [`ProgressEvent`]s as it goes, then an
//! [`ApplyReport`] or an [`ApplyError`] (with the [`StepError`] of a failed step).

use super::hooks::Failpoint;
use crate::cloud::CloudError;
use crate::store::StoreError;

/// What `apply` reports as it goes (the CLI draws a progress display from these).
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressEvent {
    /// Finishing a journal left by an interrupted apply.
    Resuming { done: usize, total: usize },
    /// Step `index` (1-based) of `total` begins.
    StepStarted {
        index: usize,
        total: usize,
        description: String,
    },
    /// Step `index` finished; `changed` is false when it had already been done.
    StepDone {
        index: usize,
        total: usize,
        description: String,
        changed: bool,
    },
    /// Something worth a line of its own while apply runs (e.g. waiting for moved
    /// tasks' successors to run, or giving up on one).
    Note(String),
    /// Every step of the plan is done.
    Finished { total: usize, serial: u64 },
}

/// What an apply did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ApplyReport {
    /// Steps of an interrupted earlier apply finished first (0 if none).
    pub resumed_steps: usize,
    /// Steps carried out (this plan and any resumed one) that changed something.
    pub changed_steps: usize,
    /// Steps found already done (idempotent re-runs).
    pub skipped_steps: usize,
    /// Host ids launched (or found launched by their token).
    pub launched: Vec<String>,
    /// The store serial at the end.
    pub serial: u64,
    /// Replacements (moves, and a deployment's stops) whose successor was not
    /// healthy within the move timeout: the old task keeps running beside its
    /// successor and the next plan decides from the agents' reports, as
    /// `task OLD -> NEW on HOST`. A timeout never stops a healthy task.
    pub unconfirmed: Vec<String>,
    /// Of those, the successors their agents reported failed (`task NEW on HOST:
    /// REASON`): the next plan clears them and counts them against the service's
    /// deployment (its circuit breaker).
    pub failed_successors: Vec<String>,
    /// Hosts retired although their agent had not reported their tasks stopped within
    /// the move timeout (`HOST (N task(s) still reported running)`).
    pub retired_unconfirmed: Vec<String>,
    /// Refresh moves whose successor was not reported running in time: the old task
    /// was kept and the successor dropped, as `task OLD -> NEW on HOST`.
    pub moves_held: Vec<String>,
    /// Refreshed hosts kept because tasks are left on them (their moves were held).
    pub kept_hosts: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("taking the state lock of {location}")]
    Lock {
        location: String,
        #[source]
        source: StoreError,
    },
    #[error("the plan is stale: it was made from state serial {plan_serial} but the state is at serial {store_serial}; run plan again")]
    Stale { plan_serial: u64, store_serial: u64 },
    #[error("finished an interrupted apply ({steps} steps left of an earlier plan); this plan was made before that and is stale: run plan again")]
    ResumedEarlierPlan { steps: usize },
    #[error(
        "the plan is for cluster {plan:?} but the state in {location} belongs to cluster {state:?}"
    )]
    WrongCluster {
        plan: String,
        state: String,
        location: String,
    },
    #[error("the plan was made from the state store with id {plan}, but the store {location} has id {state}; run plan again")]
    WrongStore {
        plan: String,
        state: String,
        location: String,
    },
    #[error("step {index} of {total} ({description}) failed")]
    Step {
        index: usize,
        total: usize,
        description: String,
        #[source]
        source: StepError,
    },
    #[error("{operation} ({location})")]
    Store {
        operation: &'static str,
        location: String,
        #[source]
        source: StoreError,
    },
    #[error("cancelled after step {done} of {total}; run apply again to finish")]
    Cancelled { done: usize, total: usize },
    #[error("failpoint {failpoint:?} reached (simulated crash)")]
    Failpoint { failpoint: Failpoint },
    #[error("adopting instance {instance_id} (launched before store identity) as this store's")]
    Adopt {
        instance_id: String,
        #[source]
        source: CloudError,
    },
    /// A launch the plan fixed found no capacity where planned. The refusal is
    /// recorded in the state and the rest of the plan dropped (the steps before it are
    /// kept): the next plan places the host elsewhere.
    #[error("step {index} of {total} ({description}): the cloud has no capacity there; the refusal is recorded and the steps after it were not carried out: plan again and the host is placed in another subnet or zone")]
    CapacityRefused {
        index: usize,
        total: usize,
        description: String,
        #[source]
        source: CloudError,
    },
    #[error("checking the plan's launches before starting (nothing was changed)")]
    Preflight {
        #[source]
        source: StepError,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("cloud call failed")]
    Cloud(#[source] CloudError),
    #[error("committing the state failed")]
    Store(#[source] StoreError),
    #[error("load balancer call failed")]
    Balancer(#[source] crate::balancer::BalancerError),
    #[error("the launched host could not be given a join token")]
    Join(#[source] crate::join::JoinError),
    /// The cloud launched (or had launched, by launch token) another instance type or
    /// zone than planned: the plan is not rewritten to match.
    #[error("host {host} was planned as {planned} but the cloud has it as {got}: the plan is not rewritten; plan again")]
    NotAsPlanned {
        host: String,
        planned: String,
        got: String,
    },
    /// A retire of a host that still has tasks (the plan stops them first).
    #[error("host {host} still has tasks ({}): a plan stops a host's tasks before it retires the host; plan again", tasks.join(", "))]
    RetireWithTasks { host: String, tasks: Vec<String> },
}
