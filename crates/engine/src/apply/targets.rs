//! Carrying out a plan's target steps (load balancers, issue 48): registrations,
//! and deregistrations waited out until the load balancer has drained the target
//! (at most the group's deregistration delay and a margin) before the task stops.

use super::report::{ProgressEvent, StepError};
use super::ApplyContext;
use crate::balancer::{drain_wait, BalancerError, TargetGroups};
use gpushare_core::model::{HostReport, StoreState, Target, TargetType};
use gpushare_core::plan::TargetChange;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

fn balancer<'a>(ctx: &ApplyContext<'a>) -> Result<&'a dyn TargetGroups, StepError> {
    ctx.balancer.ok_or_else(|| {
        StepError::Balancer(BalancerError::Unavailable {
            why: "this gpushare has no ELBv2 client".to_string(),
        })
    })
}

/// The target of `c`: as planned, or resolved now (a task on a host the plan
/// launched, a group that could not be read when planning): the group's type says
/// whether it is the host's instance id or its reported address. `None`: the host
/// has neither (it can never have been registered).
async fn resolve(
    ctx: &ApplyContext<'_>,
    state: &StoreState,
    reports: &mut Option<Vec<HostReport>>,
    c: &TargetChange,
) -> Result<Option<Target>, StepError> {
    if let Some(t) = c.target() {
        return Ok(Some(t));
    }
    if c.port == 0 {
        return Ok(None);
    }
    let obs = balancer(ctx)?
        .describe(&c.target_group_arn)
        .await
        .map_err(StepError::Balancer)?;
    let id = match obs.target_type {
        TargetType::Instance => state.hosts.get(&c.host).and_then(|h| h.instance_id.clone()),
        TargetType::Ip => {
            if reports.is_none() {
                *reports = Some(ctx.store.reports().await.map_err(StepError::Store)?);
            }
            reports
                .iter()
                .flatten()
                .find(|r| r.host_id == c.host && r.unreadable.is_none())
                .and_then(|r| r.address.clone())
        }
    };
    Ok(id.map(|id| Target { id, port: c.port }))
}

/// Resolve `changes` and group them by target group.
async fn by_group(
    ctx: &ApplyContext<'_>,
    state: &StoreState,
    changes: &[&TargetChange],
) -> Result<BTreeMap<String, Vec<Target>>, StepError> {
    let mut reports = None;
    let mut out: BTreeMap<String, Vec<Target>> = BTreeMap::new();
    for c in changes {
        match resolve(ctx, state, &mut reports, c).await? {
            Some(t) => out.entry(c.target_group_arn.clone()).or_default().push(t),
            None => {
                tracing::warn!(task = %c.task_id, host = %c.host, group = %c.target_group_arn, "no target id for the task (its host has no instance id or address): nothing to change")
            }
        }
    }
    Ok(out)
}

/// Register `changes` with their groups.
pub(super) async fn register(
    ctx: &ApplyContext<'_>,
    state: &StoreState,
    changes: &[&TargetChange],
) -> Result<(), StepError> {
    let lb = balancer(ctx)?;
    for (arn, targets) in by_group(ctx, state, changes).await? {
        lb.register(&arn, &targets)
            .await
            .map_err(StepError::Balancer)?;
        tracing::info!(group = %arn, targets = ?targets, "registered");
    }
    Ok(())
}

/// Deregister `changes` from their groups, then wait until the load balancer no
/// longer lists them (connection draining), at most the longest of their delays
/// and a margin; a target still draining after that is left to the load balancer
/// (its delay is over) and named in a note.
pub(super) async fn deregister_and_drain(
    ctx: &ApplyContext<'_>,
    state: &StoreState,
    changes: &[&TargetChange],
) -> Result<(), StepError> {
    let lb = balancer(ctx)?;
    let groups = by_group(ctx, state, changes).await?;
    // Only what the group still lists is deregistered (a resumed apply, a target
    // the load balancer dropped): ELBv2 may refuse a target it does not have.
    let listed = still_listed(lb, &groups).await?;
    for (arn, targets) in &groups {
        let targets: Vec<Target> = targets
            .iter()
            .filter(|t| listed.contains(&(arn.clone(), (*t).clone())))
            .cloned()
            .collect();
        if targets.is_empty() {
            continue;
        }
        lb.deregister(arn, &targets)
            .await
            .map_err(StepError::Balancer)?;
        tracing::info!(group = %arn, targets = ?targets, "deregistered; draining");
    }
    let longest = changes.iter().map(|c| c.drain_seconds).max().unwrap_or(0);
    let deadline = Instant::now() + drain_wait(longest);
    let mut noted = false;
    loop {
        let draining = still_listed(lb, &groups).await?;
        if draining.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                ?draining,
                "targets still draining after the deregistration delay: the tasks stop now"
            );
            ctx.emit(ProgressEvent::Note(format!(
                "{} target(s) still draining after the group's deregistration delay; their tasks stop now.",
                draining.len()
            )));
            return Ok(());
        }
        if !noted {
            ctx.emit(ProgressEvent::Note(format!(
                "Waiting for {} target(s) to drain (deregistration delay at most {longest} s) before their tasks stop",
                draining.len()
            )));
            noted = true;
        }
        tokio::time::sleep(ctx.moves.poll).await;
    }
}

/// The targets of `groups` the load balancer still lists (draining).
async fn still_listed(
    lb: &dyn TargetGroups,
    groups: &BTreeMap<String, Vec<Target>>,
) -> Result<BTreeSet<(String, Target)>, StepError> {
    let mut out = BTreeSet::new();
    for (arn, targets) in groups {
        let obs = lb.describe(arn).await.map_err(StepError::Balancer)?;
        for t in targets {
            if obs.find(t).is_some_and(|o| o.state != "unused") {
                out.insert((arn.clone(), t.clone()));
            }
        }
    }
    Ok(out)
}

/// Wait until every target of `changes` is reported `healthy` by its group, at
/// most `ctx.moves.timeout`; returns the task ids whose targets are not.
pub(super) async fn await_target_health(
    ctx: &ApplyContext<'_>,
    state: &StoreState,
    changes: &[&TargetChange],
) -> Result<BTreeSet<String>, StepError> {
    let lb = balancer(ctx)?;
    let mut reports = None;
    let mut pending: BTreeMap<String, (String, Target)> = BTreeMap::new();
    for c in changes {
        if let Some(t) = resolve(ctx, state, &mut reports, c).await? {
            pending.insert(
                format!("{}|{}", c.task_id, c.target_group_arn),
                (c.target_group_arn.clone(), t),
            );
        }
    }
    let deadline = Instant::now() + ctx.moves.timeout;
    loop {
        let mut groups: BTreeMap<&str, gpushare_core::model::TargetGroupObs> = BTreeMap::new();
        for (arn, _) in pending.values() {
            if !groups.contains_key(arn.as_str()) {
                let obs = lb.describe(arn).await.map_err(StepError::Balancer)?;
                groups.insert(arn, obs);
            }
        }
        let healthy: BTreeSet<String> = pending
            .iter()
            .filter(|(_, (arn, t))| {
                groups
                    .get(arn.as_str())
                    .and_then(|g| g.find(t))
                    .is_some_and(|o| o.state == "healthy")
            })
            .map(|(k, _)| k.clone())
            .collect();
        pending.retain(|k, _| !healthy.contains(k));
        if pending.is_empty() || Instant::now() >= deadline {
            return Ok(pending
                .keys()
                .filter_map(|k| k.split('|').next().map(str::to_string))
                .collect());
        }
        tokio::time::sleep(ctx.moves.poll).await;
    }
}

impl super::JournalRun<'_, '_> {
    /// Carry out a run of target steps (all registrations or all deregistrations;
    /// steps `offset + 1..`) with one call per group, then commit the journal.
    /// Registrations that wait for a healthy task reach here only when apply does
    /// not wait (a zero move timeout): the next plan registers the task once it is
    /// healthy.
    pub(super) async fn targets(
        &mut self,
        steps: &[gpushare_core::plan::Step],
        offset: usize,
    ) -> Result<(), super::ApplyError> {
        use gpushare_core::plan::{Step, TargetWhen};
        let ctx = self.ctx;
        let mut now: Vec<&TargetChange> = Vec::new();
        let mut register = true;
        for (n, step) in steps.iter().enumerate() {
            let index = offset + n + 1;
            let description = super::describe(step);
            ctx.emit(ProgressEvent::StepStarted {
                index,
                total: self.total,
                description: description.clone(),
            });
            let (c, changes) = match step {
                Step::RegisterTarget(c) => (c, c.when == TargetWhen::Now),
                Step::DeregisterTarget(c) => {
                    register = false;
                    (c, true)
                }
                _ => continue,
            };
            if changes {
                now.push(c);
            }
            self.batch.push((index, description, changes));
        }
        let done = if register {
            register_now(ctx, &self.state, &now).await
        } else {
            deregister_and_drain(ctx, &self.state, &now).await
        };
        if let Err(source) = done {
            let description = self.batch.first().map(|b| b.1.clone()).unwrap_or_default();
            self.batch.clear();
            return Err(super::ApplyError::Step {
                index: offset + 1,
                total: self.total,
                description,
                source,
            });
        }
        self.flush().await
    }
}

async fn register_now(
    ctx: &ApplyContext<'_>,
    state: &StoreState,
    changes: &[&TargetChange],
) -> Result<(), StepError> {
    if changes.is_empty() {
        return Ok(());
    }
    register(ctx, state, changes).await
}

/// A new task waited for: its id, its host, and when it counts healthy.
pub(super) type Awaited<'p> = (&'p str, &'p str, u64);

/// The target steps of a waiting run (apply/moves.rs): registrations of new tasks
/// once healthy, deregistrations of the old tasks that stop with them.
pub(super) struct RunTargets<'p> {
    /// (step index, description, change)
    register: Vec<(usize, String, &'p TargetChange)>,
    deregister: Vec<(usize, String, &'p TargetChange)>,
}

impl<'p> RunTargets<'p> {
    pub(super) fn of(steps: &'p [gpushare_core::plan::Step], offset: usize) -> RunTargets<'p> {
        use gpushare_core::plan::Step;
        let mut out = RunTargets {
            register: Vec::new(),
            deregister: Vec::new(),
        };
        for (n, step) in steps.iter().enumerate() {
            let entry = |c| (offset + n + 1, super::describe(step), c);
            match step {
                Step::RegisterTarget(c) => out.register.push(entry(c)),
                Step::DeregisterTarget(c) => out.deregister.push(entry(c)),
                _ => {}
            }
        }
        out
    }

    pub(super) fn is_empty(&self) -> bool {
        self.register.is_empty() && self.deregister.is_empty()
    }

    /// The new tasks whose registrations wait for them to be healthy.
    pub(super) fn awaited(&self) -> impl Iterator<Item = Awaited<'p>> + '_ {
        self.register.iter().filter_map(|(_, _, c)| match c.when {
            gpushare_core::plan::TargetWhen::AfterHealthy {
                healthy_after_seconds,
            } => Some((c.task_id.as_str(), c.host.as_str(), healthy_after_seconds)),
            _ => None,
        })
    }
}

impl super::JournalRun<'_, '_> {
    /// The load balancer's part of a waiting run, once the new tasks' health is
    /// known (`healthy`): register the healthy new tasks and wait until their groups
    /// report them healthy (at most the move timeout); then deregister, and drain,
    /// the old tasks of `stopping` (old, new) whose new task is in its groups (or
    /// has none). Returns the new tasks that are not healthy in their groups: the
    /// old tasks they replace keep running and stay registered.
    pub(super) async fn balance(
        &mut self,
        lb: &RunTargets<'_>,
        healthy: &BTreeSet<&str>,
        stopping: &[(&str, &str)],
    ) -> Result<BTreeSet<String>, super::ApplyError> {
        let ctx = self.ctx;
        let ready: Vec<&TargetChange> = lb
            .register
            .iter()
            .map(|(_, _, c)| *c)
            .filter(|c| healthy.contains(c.task_id.as_str()))
            .collect();
        let step_err = |index: usize, description: &str, source| super::ApplyError::Step {
            index,
            total: self.total,
            description: description.to_string(),
            source,
        };
        let mut out_of_group = BTreeSet::new();
        if let Some((index, description, _)) = lb.register.first() {
            register_now(ctx, &self.state, &ready)
                .await
                .map_err(|e| step_err(*index, description, e))?;
            if !ready.is_empty() {
                out_of_group = await_target_health(ctx, &self.state, &ready)
                    .await
                    .map_err(|e| step_err(*index, description, e))?;
            }
        }
        for (index, description, c) in &lb.register {
            let done = ready.contains(c) && !out_of_group.contains(&c.task_id);
            if ready.contains(c) && !done {
                ctx.emit(ProgressEvent::Note(format!(
                    "Task {} is not healthy in target group {} within {} s: the task it replaces keeps running and stays registered.",
                    c.task_id,
                    gpushare_core::model::group_name(&c.target_group_arn),
                    ctx.moves.timeout.as_secs()
                )));
            }
            self.batch.push((*index, description.clone(), done));
        }
        let leaving: BTreeSet<&str> = stopping
            .iter()
            .filter(|(_, new)| !out_of_group.contains(*new))
            .map(|(old, _)| *old)
            .collect();
        let going: Vec<&TargetChange> = lb
            .deregister
            .iter()
            .map(|(_, _, c)| *c)
            .filter(|c| leaving.contains(c.task_id.as_str()))
            .collect();
        if let Some((index, description, _)) = lb.deregister.first() {
            if !going.is_empty() {
                deregister_and_drain(ctx, &self.state, &going)
                    .await
                    .map_err(|e| step_err(*index, description, e))?;
            }
        }
        for (index, description, c) in &lb.deregister {
            self.batch
                .push((*index, description.clone(), going.contains(c)));
        }
        Ok(out_of_group)
    }
}
