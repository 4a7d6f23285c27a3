//! Load balancers in a plan (issue 48): which tasks join their services' ELBv2
//! target groups and which leave them, as ECS does it.
//!
//! - A task that is healthy and not a target of its service's group is registered
//!   at once; a task this plan starts is registered once healthy, by the apply that
//!   waits for it ([`TargetWhen::AfterHealthy`]).
//! - A task that stops is deregistered first, and its stop waits out the group's
//!   deregistration delay. A task that stops once its successor is healthy (a
//!   deployment, a move) is deregistered only then, after its successor's own
//!   registration is healthy in the group ([`TargetWhen::WithStop`]): the group
//!   never has fewer healthy targets than the deployment keeps healthy tasks.
//! - A target on one of this fleet's hosts that no task of the service stands for
//!   (a task stopped by a crash, a `load_balancer` block removed) is deregistered;
//!   targets elsewhere are never touched.
//! - A group that could not be read registers nothing; every stop of its service's
//!   tasks is still preceded by a deregistration, which apply resolves when it runs.

use super::types::{Plan, TargetChange, TargetWhen};
use crate::model::{
    task_healthy, task_port, task_target, Desired, Live, LoadBalancer, ResourceKind, Target,
    TargetGroupObs, TargetType, Task,
};
use std::collections::{BTreeMap, BTreeSet};

/// The load balancers of every service the plan deals with: the desired ones, and
/// those of services as applied (a removed block, a deleted service, destroy).
/// Service -> (desired load balancers, applied ones no longer desired).
type ServiceGroups = BTreeMap<String, (Vec<LoadBalancer>, Vec<LoadBalancer>)>;

fn service_groups(desired: &Desired, live: &Live, destroy: bool) -> ServiceGroups {
    let mut out = ServiceGroups::new();
    if !destroy {
        for (name, svc) in &desired.services {
            if !svc.load_balancers.is_empty() {
                out.entry(name.clone()).or_default().0 = svc.load_balancers.clone();
            }
        }
    }
    for (addr, r) in &live.state.resources {
        if addr.kind != ResourceKind::Service {
            continue;
        }
        let applied: Vec<LoadBalancer> = r
            .attrs
            .get("load_balancer")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        let entry = out.entry(addr.name.clone()).or_default();
        for lb in applied {
            let kept = entry
                .0
                .iter()
                .any(|d| d.target_group_arn == lb.target_group_arn);
            if !kept && !entry.1.contains(&lb) {
                entry.1.push(lb);
            }
        }
    }
    out.retain(|_, (d, r)| !d.is_empty() || !r.is_empty());
    out
}

/// The ARNs of every target group `plan` needs to see: observe reads these.
pub fn groups_to_observe(desired: &Desired, live_state: &crate::model::StoreState) -> Vec<String> {
    let live = Live {
        state: live_state.clone(),
        ..Live::default()
    };
    let mut arns: BTreeSet<String> = BTreeSet::new();
    for (d, r) in service_groups(desired, &live, false).into_values() {
        arns.extend(d.into_iter().chain(r).map(|lb| lb.target_group_arn));
    }
    arns.into_iter().collect()
}

/// How a task leaves the fleet in this plan.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leaving {
    Now,
    WithSuccessor,
}

/// Add the plan's target registrations and deregistrations (module docs).
pub(super) fn plan_targets(desired: &Desired, live: &Live, plan: &mut Plan) {
    let groups = service_groups(desired, live, plan.destroy);
    if groups.is_empty() {
        return;
    }
    let mut leaving: BTreeMap<&str, Leaving> = BTreeMap::new();
    for s in &plan.stops {
        let how = match s.after_healthy {
            Some(_) => Leaving::WithSuccessor,
            None => Leaving::Now,
        };
        leaving.insert(s.task_id.as_str(), how);
    }
    for m in &plan.moves {
        leaving.insert(m.from_task.as_str(), Leaving::WithSuccessor);
    }
    let launched: BTreeSet<&str> = plan.launches.iter().map(|l| l.host.id.as_str()).collect();
    let started: Vec<&Task> = plan
        .starts
        .iter()
        .map(|s| &s.task)
        .chain(plan.moves.iter().map(|m| &m.to))
        .collect();
    // Each service's tasks, and those this plan starts, by service: one pass over
    // the tasks, not one per service with a load balancer (issue 52).
    let mut by_service: BTreeMap<&str, Vec<&Task>> = BTreeMap::new();
    for t in live.state.tasks.values() {
        by_service.entry(t.service.as_str()).or_default().push(t);
    }
    let mut started_by_service: BTreeMap<&str, Vec<&Task>> = BTreeMap::new();
    for t in started {
        started_by_service
            .entry(t.service.as_str())
            .or_default()
            .push(t);
    }
    let mut out = Changes::default();
    for (service, (lbs, removed)) in &groups {
        let healthy_after = desired
            .services
            .get(service)
            .map_or(0, |s| s.deployment.min_healthy_seconds);
        let ctx = ServiceCtx {
            service,
            tasks: by_service.get(service.as_str()).map_or(&[], Vec::as_slice),
            live,
            leaving: &leaving,
            healthy_after,
        };
        for lb in lbs {
            let obs = live.target_groups.get(&lb.target_group_arn);
            ctx.current_tasks(lb, obs, &mut out);
            let started = started_by_service.get(service.as_str());
            for t in started.into_iter().flatten() {
                ctx.started_task(lb, obs, t, launched.contains(t.host.as_str()), &mut out);
            }
        }
        for lb in removed {
            ctx.left_group(lb, live.target_groups.get(&lb.target_group_arn), &mut out);
        }
    }
    plan.notes.extend(out.notes);
    plan.target_registrations = out.register;
    plan.target_deregistrations = out.deregister;
}

#[derive(Default)]
struct Changes {
    register: Vec<TargetChange>,
    deregister: Vec<TargetChange>,
    notes: Vec<String>,
}

struct ServiceCtx<'a> {
    service: &'a str,
    /// The service's tasks in the state, in id order.
    tasks: &'a [&'a Task],
    live: &'a Live,
    leaving: &'a BTreeMap<&'a str, Leaving>,
    healthy_after: u64,
}

impl ServiceCtx<'_> {
    fn change(
        &self,
        lb: &LoadBalancer,
        target_type: TargetType,
        task: &Task,
        (port, target_id): (u16, Option<String>),
        when: TargetWhen,
        drain_seconds: u64,
    ) -> TargetChange {
        TargetChange {
            service: self.service.to_string(),
            task_id: task.id.clone(),
            host: task.host.clone(),
            target_group_arn: lb.target_group_arn.clone(),
            target_type,
            port,
            target_id,
            when,
            drain_seconds,
        }
    }

    /// The service's tasks as they run now: register the healthy ones that are not
    /// targets, deregister the leaving ones that are, and the group's strays.
    fn current_tasks(&self, lb: &LoadBalancer, obs: Option<&TargetGroupObs>, out: &mut Changes) {
        let readable = obs.filter(|o| o.error.is_none());
        if let Some(o) = obs.and_then(|o| o.error.as_deref()) {
            out.notes.push(format!(
                "service.{}: target group {} could not be read ({o}): no task is registered with it; stops still deregister first",
                self.service,
                lb.group_name()
            ));
        }
        let live = self.live;
        let mut standing: BTreeSet<Target> = BTreeSet::new();
        let drain = readable.map_or(0, |o| o.deregistration_delay_seconds);
        for (task, ttype, target, registered) in self.tasks_in(lb, readable) {
            match (self.leaving.get(task.id.as_str()), &target) {
                (Some(how), _) => {
                    let when = match how {
                        Leaving::Now => TargetWhen::Now,
                        Leaving::WithSuccessor => TargetWhen::WithStop,
                    };
                    if readable.is_none() || registered {
                        let port = task_port(lb, task).unwrap_or(0);
                        let id = target.as_ref().ok().map(|t| t.id.clone());
                        out.deregister
                            .push(self.change(lb, ttype, task, (port, id), when, drain));
                    }
                }
                (None, Ok(t)) => {
                    standing.insert(t.clone());
                    let healthy = task_healthy(
                        task.state,
                        live.task_status.get(&task.id),
                        live.observed_at,
                        self.healthy_after,
                    );
                    if readable.is_some() && healthy && !registered {
                        let id = (t.port, Some(t.id.clone()));
                        let c = self.change(lb, ttype, task, id, TargetWhen::Now, 0);
                        out.register.push(c);
                    }
                }
                (None, Err(why)) => out.notes.push(format!(
                    "service.{}: {why}: not registered with target group {}",
                    self.service,
                    lb.group_name()
                )),
            }
        }
        if let Some(o) = readable {
            self.strays(lb, o, Some(&standing), out);
        }
    }

    /// The service's tasks with, for each, the group's target type, its target
    /// (or why it has none) and whether the group lists it as registered.
    fn tasks_in<'t>(
        &'t self,
        lb: &'t LoadBalancer,
        readable: Option<&'t TargetGroupObs>,
    ) -> impl Iterator<Item = (&'t Task, TargetType, Result<Target, String>, bool)> + 't {
        let live = self.live;
        self.tasks.iter().copied().map(move |task| {
            let host = live.state.hosts.get(&task.host);
            let ttype = readable.map_or_else(|| guess_type(host), |o| o.target_type);
            let target = task_target(lb, ttype, task, host, &live.host_addresses);
            let registered = target.as_ref().is_ok_and(|t| {
                readable
                    .and_then(|o| o.find(t))
                    .is_some_and(|o| o.is_registered())
            });
            (task, ttype, target, registered)
        })
    }

    /// A group the service no longer names (its block removed, the service
    /// deleted, destroy): every task of the service that is a target of it leaves
    /// it at once (before any stop), and so do its strays.
    fn left_group(&self, lb: &LoadBalancer, obs: Option<&TargetGroupObs>, out: &mut Changes) {
        let readable = obs.filter(|o| o.error.is_none());
        let drain = readable.map_or(0, |o| o.deregistration_delay_seconds);
        for (task, ttype, target, registered) in self.tasks_in(lb, readable) {
            if readable.is_none() || registered {
                let port = task_port(lb, task).unwrap_or(0);
                let id = target.ok().map(|t| t.id);
                out.deregister.push(self.change(
                    lb,
                    ttype,
                    task,
                    (port, id),
                    TargetWhen::Now,
                    drain,
                ));
            }
        }
        if let Some(o) = readable {
            self.strays(lb, o, None, out);
        }
    }

    /// A task this plan starts: registered once healthy.
    fn started_task(
        &self,
        lb: &LoadBalancer,
        obs: Option<&TargetGroupObs>,
        task: &Task,
        on_new_host: bool,
        out: &mut Changes,
    ) {
        let live = self.live;
        let host = live.state.hosts.get(&task.host);
        let ttype = obs
            .filter(|o| o.error.is_none())
            .map_or_else(|| guess_type(host), |o| o.target_type);
        let when = TargetWhen::AfterHealthy {
            healthy_after_seconds: self.healthy_after,
        };
        match task_target(lb, ttype, task, host, &live.host_addresses) {
            Ok(t) => {
                let c = self.change(lb, ttype, task, (t.port, Some(t.id)), when, 0);
                out.register.push(c);
            }
            // Its host's instance id or address is not known yet: apply resolves it.
            Err(_) if on_new_host || host.is_some() => {
                match task_port(lb, task) {
                    Some(port) => out.register.push(self.change(lb, ttype, task, (port, None), when, 0)),
                    None => out.notes.push(format!(
                        "service.{}: task {} publishes no port {} of container {:?}: not registered with target group {}",
                        self.service, task.id, lb.container_port, lb.container_name, lb.group_name()
                    )),
                }
            }
            Err(why) => out.notes.push(format!(
                "service.{}: {why}: not registered with target group {}",
                self.service,
                lb.group_name()
            )),
        }
    }

    /// Targets of the group on this fleet's hosts that no standing task of the
    /// service stands for (`standing`; `None`: none does): deregistered at once.
    fn strays(
        &self,
        lb: &LoadBalancer,
        obs: &TargetGroupObs,
        standing: Option<&BTreeSet<Target>>,
        out: &mut Changes,
    ) {
        if obs.error.is_some() {
            return;
        }
        let live = self.live;
        let ours: BTreeMap<&str, &str> = live
            .state
            .hosts
            .values()
            .filter_map(|h| Some((h.instance_id.as_deref()?, h.id.as_str())))
            .chain(
                live.host_addresses
                    .iter()
                    .map(|(h, a)| (a.as_str(), h.as_str())),
            )
            .collect();
        let leaving_targets: BTreeSet<(String, u16)> = out
            .deregister
            .iter()
            .filter(|c| c.target_group_arn == lb.target_group_arn)
            .filter_map(|c| Some((c.target_id.clone()?, c.port)))
            .collect();
        for t in obs.targets.iter().filter(|t| t.is_registered()) {
            let Some(host) = ours.get(t.target.id.as_str()) else {
                continue;
            };
            if standing.is_some_and(|s| s.contains(&t.target))
                || leaving_targets.contains(&(t.target.id.clone(), t.target.port))
            {
                continue;
            }
            out.deregister.push(TargetChange {
                service: self.service.to_string(),
                task_id: String::new(),
                host: host.to_string(),
                target_group_arn: lb.target_group_arn.clone(),
                target_type: obs.target_type,
                port: t.target.port,
                target_id: Some(t.target.id.clone()),
                when: TargetWhen::Now,
                drain_seconds: obs.deregistration_delay_seconds,
            });
        }
    }
}

/// A group's type when it could not be read: by the host (an EC2 instance, or not).
fn guess_type(host: Option<&crate::model::Host>) -> TargetType {
    match host.and_then(|h| h.instance_id.as_ref()) {
        Some(_) => TargetType::Instance,
        None => TargetType::Ip,
    }
}
