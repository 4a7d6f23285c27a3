//! Deployments: which revision each service rolls towards, its deployment record
//! (a new deployment, failures counted, the circuit breaker, rollback), and whether
//! a task counts as healthy (docs/deployments.md).

use super::Planner;
use crate::model::{
    failure_threshold, task_healthy, DeploymentRecord, DeploymentState, DeploymentUpdate, Service,
    Task, TaskShape,
};
use std::collections::BTreeSet;

/// What a service rolls towards in this plan.
pub(super) struct Rollout {
    /// The revision new tasks run, and its shape; `None`: start nothing (a failed
    /// deployment with nothing to go back to, or a retry waiting for its backoff).
    pub(super) target: Option<(u32, TaskShape)>,
    /// Revisions whose tasks are kept as they are (not replaced).
    pub(super) accepted: BTreeSet<u32>,
}

/// The longest wait before a failing deployment without a circuit breaker starts
/// new tasks again.
const MAX_RETRY_BACKOFF_SECONDS: u64 = 300;

/// How long a deployment without a circuit breaker waits after `failed` failed task
/// starts before it starts new ones: 10 s doubled per failure, at most 5 minutes.
pub fn retry_backoff_seconds(failed: u32) -> u64 {
    if failed == 0 {
        return 0;
    }
    10u64
        .saturating_mul(1u64 << failed.saturating_sub(1).min(16))
        .min(MAX_RETRY_BACKOFF_SECONDS)
}

impl<'a> Planner<'a> {
    /// Whether task `t` of `svc` is healthy at `observed_at`: running on a host that
    /// reports, and (when its agent reports the detail) running without a restart for
    /// the deployment's `min_healthy_seconds`. A task that reports no detail counts
    /// once running (agents from before the detail).
    pub(super) fn is_healthy(&self, t: &Task, svc: &Service) -> bool {
        let Some(h) = self.live.state.hosts.get(&t.host) else {
            return false;
        };
        super::host_is_up(h)
            && self.silence(h).is_none()
            && task_healthy(
                t.state,
                self.live.task_status.get(&t.id),
                self.live.observed_at,
                svc.deployment.min_healthy_seconds,
            )
    }

    /// The rollout of service `sname` (its live tasks: `tasks`), and the deployment
    /// record this plan writes for it, if any (a new deployment, a service's first
    /// included; failed starts counted, the circuit breaker tripped; COMPLETED). `failed`: its tasks this plan clears as
    /// failed, with the last reason.
    pub(super) fn rollout(
        &mut self,
        sname: &str,
        svc: &Service,
        tasks: &[&Task],
        failed: &[(u32, String)],
    ) -> Option<Rollout> {
        let &(revision, shape) = self.targets.get(&svc.task_definition)?;
        let family = &svc.task_definition;
        let now = self.live.observed_at;
        let recorded = self.live.state.deployment(sname);
        let current = recorded.filter(|r| &r.family == family && r.revision == revision);
        let mut record = match current {
            Some(r) => r.clone(),
            None => {
                // A new deployment when tasks of another revision run, or when the
                // service has none to run yet (its first deployment, as a new
                // service's in ECS).
                let others: BTreeSet<(&str, u32)> = tasks
                    .iter()
                    .filter(|t| &t.family != family || t.revision != revision)
                    .map(|t| (t.family.as_str(), t.revision))
                    .collect();
                let first = tasks.is_empty() && svc.desired_count > 0;
                if others.is_empty() && !first {
                    return Some(Rollout::to(revision, shape));
                }
                let previous = match (others.iter().next(), others.len()) {
                    (Some((f, r)), 1) if f == family => Some(*r),
                    _ => recorded.and_then(|r| self.last_completed(sname, svc, r)),
                };
                let record = DeploymentRecord {
                    id: format!("{sname}/{}", recorded.map_or(0, |r| r.number()) + 1),
                    family: family.clone(),
                    revision,
                    state: DeploymentState::InProgress,
                    previous,
                    failed_tasks: 0,
                    healthy_tasks: 0,
                    pending_tasks: 0,
                    started_at: now,
                    updated_at: now,
                    reason: None,
                };
                self.record_deployment(sname, svc, tasks, record.clone());
                record
            }
        };
        let failed_here: Vec<&(u32, String)> =
            failed.iter().filter(|(r, _)| *r == revision).collect();
        if record.state == DeploymentState::InProgress && !failed_here.is_empty() {
            record.failed_tasks += failed_here.len() as u32;
            record.updated_at = now;
            record.reason = failed_here.last().map(|(_, why)| why.clone());
            let threshold = failure_threshold(svc.desired_count);
            if let Some(b) = svc.deployment.breaker() {
                if record.failed_tasks >= threshold {
                    let back = b.rollback && record.previous.is_some();
                    record.state = if back {
                        DeploymentState::RolledBack
                    } else {
                        DeploymentState::Failed
                    };
                    let nothing_before = match record.previous {
                        Some(_) => "",
                        None => "; no earlier revision of the service completed, nothing to roll back to",
                    };
                    record.reason = Some(format!(
                        "circuit breaker: {} task(s) of revision {revision} failed (threshold {threshold}); last: {}{nothing_before}",
                        record.failed_tasks,
                        record.reason.as_deref().unwrap_or("failed")
                    ));
                }
            }
            self.record_deployment(sname, svc, tasks, record.clone());
        }
        // Done: COMPLETED is written (ECS's deployment state), and stays until the
        // next revision's deployment.
        if record.state == DeploymentState::InProgress
            && self.deployment_complete(sname, svc, &record)
        {
            record.state = DeploymentState::Completed;
            record.updated_at = now;
            self.record_deployment(sname, svc, tasks, record.clone());
        }
        Some(self.rollout_of(sname, svc, &record, (revision, shape)))
    }

    /// What `record` (the deployment of `latest`) lets service `sname` do now.
    fn rollout_of(
        &mut self,
        sname: &str,
        svc: &Service,
        record: &DeploymentRecord,
        latest: (u32, TaskShape),
    ) -> Rollout {
        let previous = record
            .previous
            .and_then(|p| self.revision_shape(&svc.task_definition, p).map(|s| (p, s)));
        match record.state {
            DeploymentState::InProgress | DeploymentState::Completed => {
                let ready_at = record.updated_at + retry_backoff_seconds(record.failed_tasks);
                if svc.deployment.breaker().is_none()
                    && record.state == DeploymentState::InProgress
                    && self.live.observed_at < ready_at
                {
                    self.out.notes.push(format!(
                        "service.{sname}: deployment {} has {} failed task(s) of revision {}; new tasks start again in {} s (no circuit breaker)",
                        record.id,
                        record.failed_tasks,
                        record.revision,
                        ready_at - self.live.observed_at
                    ));
                    let mut r = Rollout::to(latest.0, latest.1);
                    r.target = None;
                    return r;
                }
                Rollout::to(latest.0, latest.1)
            }
            DeploymentState::Failed => {
                self.out.notes.push(format!(
                    "service.{sname}: deployment {} of revision {} FAILED ({}); its running tasks are kept, no new ones of it start; register a new revision to deploy again",
                    record.id,
                    record.revision,
                    record.reason.as_deref().unwrap_or("circuit breaker")
                ));
                let mut accepted: BTreeSet<u32> = [latest.0].into();
                accepted.extend(record.previous);
                Rollout {
                    target: previous,
                    accepted,
                }
            }
            DeploymentState::RolledBack => match previous {
                Some((p, shape)) => {
                    self.out.notes.push(format!(
                        "service.{sname}: deployment {} of revision {} was ROLLED_BACK to revision {p} ({})",
                        record.id,
                        record.revision,
                        record.reason.as_deref().unwrap_or("circuit breaker")
                    ));
                    Rollout::to(p, shape)
                }
                None => Rollout::to(latest.0, latest.1),
            },
        }
    }

    /// The revision service `sname` last ran complete, judging by its record `r`.
    fn last_completed(&self, sname: &str, svc: &Service, r: &DeploymentRecord) -> Option<u32> {
        if r.state.is_failed() {
            return r.previous;
        }
        let complete = self.deployment_complete(sname, svc, r);
        if complete || r.state == DeploymentState::Completed {
            Some(r.revision)
        } else {
            r.previous
        }
    }

    /// Whether service `sname` runs `desired_count` healthy tasks of `r`'s revision
    /// and none of another.
    pub(super) fn deployment_complete(
        &self,
        sname: &str,
        svc: &Service,
        r: &DeploymentRecord,
    ) -> bool {
        let judged = self
            .live_tasks_of(sname)
            .iter()
            .map(|t| (*t, self.is_healthy(t, svc)));
        r.is_done(judged, svc.desired_count)
    }

    /// The shape of revision `revision` of `family`, as registered.
    fn revision_shape(&self, family: &str, revision: u32) -> Option<TaskShape> {
        self.live
            .state
            .revisions
            .get(family)?
            .iter()
            .find(|r| r.revision == revision)
            .and_then(|r| r.spec.shape().ok())
    }

    /// Write `record` as the service's deployment in this plan, with its counts.
    fn record_deployment(
        &mut self,
        sname: &str,
        svc: &Service,
        tasks: &[&Task],
        mut record: DeploymentRecord,
    ) {
        let of_it = tasks
            .iter()
            .filter(|t| t.family == record.family && t.revision == record.revision);
        let (mut healthy, mut pending) = (0u32, 0u32);
        for t in of_it {
            if self.is_healthy(t, svc) {
                healthy += 1;
            } else {
                pending += 1;
            }
        }
        record.healthy_tasks = healthy;
        record.pending_tasks = pending;
        self.out.deployments.retain(|d| d.service != sname);
        self.out.deployments.push(DeploymentUpdate {
            service: sname.to_string(),
            record,
        });
    }
}

impl Rollout {
    fn to(revision: u32, shape: TaskShape) -> Rollout {
        Rollout {
            target: Some((revision, shape)),
            accepted: [revision].into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_backoff_doubles_up_to_five_minutes() {
        assert_eq!(retry_backoff_seconds(0), 0);
        assert_eq!(retry_backoff_seconds(1), 10);
        assert_eq!(retry_backoff_seconds(2), 20);
        assert_eq!(retry_backoff_seconds(5), 160);
        assert_eq!(retry_backoff_seconds(6), 300);
        assert_eq!(retry_backoff_seconds(1000), 300);
    }
}
