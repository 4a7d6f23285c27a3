//! A service's deployments as the store records them: which revision it rolls out,
//! how far it got, and whether its circuit breaker stopped it (docs/deployments.md).

use serde::{Deserialize, Serialize};
use std::fmt;

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
/// `task_status`, at `now`; a task whose host reports no detail counts once running).
pub fn service_status(
    st: &super::StoreState,
    task_status: &std::collections::BTreeMap<String, super::TaskStatus>,
    now: u64,
) -> Vec<ServiceStatus> {
    use super::{HostState, ResourceKind, TaskState};
    let mut out = vec![];
    for (addr, r) in st
        .resources
        .iter()
        .filter(|(a, _)| a.kind == ResourceKind::Service)
    {
        let desired = r
            .attrs
            .get("desired_count")
            .and_then(serde_json::Value::as_u64);
        let min_healthy_seconds = r
            .attrs
            .pointer("/deployment/min_healthy_seconds")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(super::DEFAULT_MIN_HEALTHY_SECONDS);
        let mut s = ServiceStatus {
            service: addr.name.clone(),
            desired: desired.unwrap_or(0) as u32,
            running: 0,
            healthy: 0,
            pending: 0,
            revisions: vec![],
            deployment: r.deployment.clone(),
        };
        let mut others = false;
        for t in st.tasks.values().filter(|t| {
            t.service == addr.name && matches!(t.state, TaskState::Pending | TaskState::Running)
        }) {
            s.running += 1;
            if !s.revisions.contains(&t.revision) {
                s.revisions.push(t.revision);
            }
            if let Some(d) = &s.deployment {
                others |= t.revision != d.revision || t.family != d.family;
            }
            let host_up = st.hosts.get(&t.host).is_some_and(|h| {
                matches!(
                    h.state,
                    HostState::Pending | HostState::Running | HostState::Draining
                )
            });
            let healthy = t.state == TaskState::Running
                && host_up
                && task_status.get(&t.id).is_none_or(|x| {
                    x.state == TaskState::Running
                        && now.saturating_sub(x.since) >= min_healthy_seconds
                });
            if healthy {
                s.healthy += 1;
            } else {
                s.pending += 1;
            }
        }
        s.revisions.sort();
        if let Some(d) = s.deployment.as_mut() {
            if d.state == DeploymentState::InProgress && !others && s.healthy >= s.desired {
                d.state = DeploymentState::Completed;
            }
        }
        out.push(s);
    }
    out
}
