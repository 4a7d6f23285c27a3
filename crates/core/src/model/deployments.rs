//! A service's deployments as the store records them: which revision it rolls out,
//! how far it got, and whether its circuit breaker stopped it (docs/deployments.md).

use serde::{Deserialize, Serialize};
use std::fmt;

/// `deployment { ... }` of a service: how a new revision replaces its running tasks,
/// with ECS's rolling-update bounds (docs/deployments.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployment {
    /// Tasks allowed above `desired_count` during a deployment, in percent of it
    /// (ECS's `maximumPercent` is 100 plus this).
    #[serde(default = "default_max_surge")]
    pub max_surge_percent: u32,
    /// Healthy tasks never fewer than this percent of `desired_count` during a
    /// deployment (ECS's `minimumHealthyPercent`).
    #[serde(default = "default_min_healthy")]
    pub min_healthy_percent: u32,
    /// A task with no health check counts as healthy once its agent has reported it
    /// running, without a restart, for this many seconds.
    #[serde(default = "default_min_healthy_seconds")]
    pub min_healthy_seconds: u64,
    /// ECS's deployment circuit breaker; `None`: off (a failing deployment keeps
    /// trying, with backoff, and still never goes below `min_healthy_percent`).
    #[serde(default)]
    pub circuit_breaker: Option<CircuitBreaker>,
}

/// `circuit_breaker { enable, rollback }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CircuitBreaker {
    #[serde(default = "default_true")]
    pub enable: bool,
    #[serde(default)]
    pub rollback: bool,
}

fn default_true() -> bool {
    true
}

/// Default [`Deployment::min_healthy_seconds`].
pub const DEFAULT_MIN_HEALTHY_SECONDS: u64 = 10;

fn default_min_healthy_seconds() -> u64 {
    DEFAULT_MIN_HEALTHY_SECONDS
}

fn default_max_surge() -> u32 {
    100
}
fn default_min_healthy() -> u32 {
    100
}

impl Default for Deployment {
    fn default() -> Self {
        Self {
            max_surge_percent: default_max_surge(),
            min_healthy_percent: default_min_healthy(),
            min_healthy_seconds: DEFAULT_MIN_HEALTHY_SECONDS,
            circuit_breaker: None,
        }
    }
}

impl Deployment {
    /// The fewest healthy tasks a deployment of `desired` keeps: ECS rounds up.
    pub fn min_healthy(&self, desired: u32) -> u32 {
        (u64::from(desired) * u64::from(self.min_healthy_percent)).div_ceil(100) as u32
    }

    /// The most tasks (pending or running) during a deployment of `desired`: the
    /// surge rounds up (as Kubernetes' `maxSurge`; ECS rounds `maximumPercent` down,
    /// which leaves a one-task service with a 50 % surge unable to deploy).
    pub fn max_running(&self, desired: u32) -> u32 {
        let surge = (u64::from(desired) * u64::from(self.max_surge_percent)).div_ceil(100);
        desired.saturating_add(surge as u32)
    }

    /// Whether the circuit breaker is on, and with rollback.
    pub fn breaker(&self) -> Option<CircuitBreaker> {
        self.circuit_breaker.filter(|c| c.enable)
    }
}

/// ECS's circuit-breaker threshold: failed task starts a deployment of `desired`
/// tasks may have before it is marked FAILED, `min(max(ceil(0.5 x desired), 3), 200)`.
pub fn failure_threshold(desired: u32) -> u32 {
    desired.div_ceil(2).clamp(3, 200)
}

/// Where a deployment stands, with ECS's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeploymentState {
    /// Tasks of the revision are being started, or old ones wait for them to be healthy.
    InProgress,
    /// `desired_count` healthy tasks of the revision run, and none of another.
    Completed,
    /// The circuit breaker tripped: no more tasks of the revision are started; the
    /// tasks that run keep running.
    Failed,
    /// The circuit breaker tripped and the service went back to `previous`.
    RolledBack,
}

impl DeploymentState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentState::InProgress => "IN_PROGRESS",
            DeploymentState::Completed => "COMPLETED",
            DeploymentState::Failed => "FAILED",
            DeploymentState::RolledBack => "ROLLED_BACK",
        }
    }

    /// Whether the circuit breaker stopped it (FAILED or ROLLED_BACK).
    pub fn is_failed(self) -> bool {
        matches!(self, DeploymentState::Failed | DeploymentState::RolledBack)
    }
}

impl fmt::Display for DeploymentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The last deployment of a service, kept with the service's applied record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentRecord {
    /// `<service>/<n>`, n counting the service's deployments from 1.
    pub id: String,
    /// The task definition family and the revision rolled out.
    pub family: String,
    pub revision: u32,
    pub state: DeploymentState,
    /// The revision the service ran, complete, before this deployment: where a
    /// rollback returns (`None` for a service's first deployment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<u32>,
    /// Tasks of the revision that failed to start or stopped failing, counted
    /// against the circuit breaker's threshold.
    #[serde(default)]
    pub failed_tasks: u32,
    /// Healthy and pending tasks of the revision when the record was last written.
    #[serde(default)]
    pub healthy_tasks: u32,
    #[serde(default)]
    pub pending_tasks: u32,
    /// Seconds since the Unix epoch (the planner's observation time).
    pub started_at: u64,
    pub updated_at: u64,
    /// Why it failed, or the last task failure it counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl DeploymentRecord {
    /// Whether the deployment is done: every live task of the service (`judged`, each
    /// with whether it is healthy) runs its revision, and `desired` of them are healthy.
    pub fn is_done<'t>(
        &self,
        judged: impl IntoIterator<Item = (&'t super::Task, bool)>,
        desired: u32,
    ) -> bool {
        let mut healthy = 0u32;
        for (t, ok) in judged {
            if t.family != self.family || t.revision != self.revision {
                return false;
            }
            healthy += u32::from(ok);
        }
        healthy >= desired
    }

    /// The sequence number of its id (`<service>/<n>`), 0 when it has none.
    pub fn number(&self) -> u64 {
        self.id
            .rsplit('/')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

/// A plan step: write `record` as service `service`'s deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeploymentUpdate {
    pub service: String,
    pub record: DeploymentRecord,
}

/// How one service stands now: its tasks counted and its deployment as judged now
/// (`show`, `show --json`, the metrics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceStatus {
    pub service: String,
    pub desired: u32,
    /// Tasks pending or running.
    pub running: u32,
    /// Of those, running without a restart for the deployment's `min_healthy_seconds`.
    pub healthy: u32,
    /// Of those, not healthy yet.
    pub pending: u32,
    /// The revisions its tasks run, oldest first.
    pub revisions: Vec<u32>,
    /// Its last deployment; an IN_PROGRESS one that is done reads COMPLETED.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentRecord>,
}

/// Every applied service's status in `st` (health from its agents' reports,
/// `task_status`, at `now`: [`super::task_healthy`]). One pass over the tasks.
pub fn service_status(
    st: &super::StoreState,
    task_status: &std::collections::BTreeMap<String, super::TaskStatus>,
    now: u64,
) -> Vec<ServiceStatus> {
    use super::{HostState, ResourceKind, Task, TaskState};
    let mut by_service: std::collections::BTreeMap<&str, Vec<&Task>> = Default::default();
    for t in st
        .tasks
        .values()
        .filter(|t| matches!(t.state, TaskState::Pending | TaskState::Running))
    {
        by_service.entry(t.service.as_str()).or_default().push(t);
    }
    let host_up = |t: &Task| {
        st.hosts.get(&t.host).is_some_and(|h| {
            matches!(
                h.state,
                HostState::Pending | HostState::Running | HostState::Draining
            )
        })
    };
    let services = st
        .resources
        .iter()
        .filter(|(a, _)| a.kind == ResourceKind::Service);
    services
        .map(|(addr, r)| {
            let desired = r
                .attrs
                .get("desired_count")
                .and_then(serde_json::Value::as_u64);
            let mut desired = u32::try_from(desired.unwrap_or(0)).unwrap_or(u32::MAX);
            // An auto-scaled service runs its scaled count (docs/autoscaling.md).
            let scaled = r.attrs.get("auto_scaling").is_some_and(|a| !a.is_null());
            if let Some(s) = r.scaling.as_ref().filter(|_| scaled) {
                desired = s.count;
            }
            let min_seconds = r
                .attrs
                .pointer("/deployment/min_healthy_seconds")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(super::DEFAULT_MIN_HEALTHY_SECONDS);
            let tasks = by_service
                .get(addr.name.as_str())
                .map_or(&[][..], Vec::as_slice);
            let judged: Vec<(&Task, bool)> = tasks
                .iter()
                .map(|t| {
                    let ok = host_up(t)
                        && super::task_healthy(t.state, task_status.get(&t.id), now, min_seconds);
                    (*t, ok)
                })
                .collect();
            let healthy = judged.iter().filter(|(_, ok)| *ok).count() as u32;
            let revisions: std::collections::BTreeSet<u32> =
                tasks.iter().map(|t| t.revision).collect();
            let deployment = r.deployment.clone().map(|mut d| {
                if d.state == DeploymentState::InProgress
                    && d.is_done(judged.iter().copied(), desired)
                {
                    d.state = DeploymentState::Completed;
                }
                d
            });
            ServiceStatus {
                service: addr.name.clone(),
                desired,
                running: tasks.len() as u32,
                healthy,
                pending: tasks.len() as u32 - healthy,
                revisions: revisions.into_iter().collect(),
                deployment,
            }
        })
        .collect()
}
