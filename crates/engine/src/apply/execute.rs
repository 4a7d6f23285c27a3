//! Carrying out one step against the state (and the cloud, for launches and retires).

use super::report::{ApplyReport, StepError};
use super::ApplyContext;
use gpushare_core::model::{
    AppliedResource, HostState, ResourceAddr, ResourceKind, Revision, StoreState,
};
use gpushare_core::plan::Step;

/// Carry out one step against `state` (changed in place); returns whether it changed
/// anything. Idempotent: a step whose effect is already in `state` changes nothing.
pub(super) async fn execute(
    ctx: &ApplyContext<'_>,
    cluster: &str,
    step: &Step,
    state: &mut StoreState,
    report: &mut ApplyReport,
) -> Result<bool, StepError> {
    let changed = match step {
        Step::Register(r) => {
            let revs = state.revisions.entry(r.family.clone()).or_default();
            let new = !revs.iter().any(|x| x.revision == r.revision);
            if new {
                revs.push(Revision {
                    family: r.family.clone(),
                    revision: r.revision,
                    spec: r.spec.clone(),
                });
                revs.sort_by_key(|x| x.revision);
            }
            new
        }
        Step::PutResource { addr, attrs } => {
            // A service's deployment record stays with it when its attributes change.
            let new = AppliedResource {
                attrs: attrs.clone(),
                deployment: state.resources.get(addr).and_then(|r| r.deployment.clone()),
                scaling: state.resources.get(addr).and_then(|r| r.scaling.clone()),
                job: state.resources.get(addr).and_then(|r| r.job.clone()),
                one_off: state.resources.get(addr).is_some_and(|r| r.one_off),
            };
            state.resources.insert(addr.clone(), new.clone()).as_ref() != Some(&new)
        }
        Step::Deployment(d) => {
            set_record(state, ResourceKind::Service, &d.service, &d.record, |r| {
                &mut r.deployment
            })
        }
        Step::Scaling(u) => {
            let mut changed = false;
            for c in &u.scrapes {
                if let Some(t) = state.tasks.get_mut(&c.task) {
                    if t.scrape != c.scrape {
                        t.scrape = c.scrape.clone();
                        changed = true;
                    }
                }
            }
            let recorded = set_record(state, ResourceKind::Service, &u.service, &u.record, |r| {
                &mut r.scaling
            });
            recorded || changed
        }
        Step::Job(u) => set_record(state, ResourceKind::Job, &u.job, &u.record, |r| &mut r.job),
        // `run_journal` sends every launch to `JournalRun::launches` (a wave), never here.
        Step::Launch(_) => unreachable!("a launch is carried out in a wave (apply/launches.rs)"),
        Step::Start(s) => insert_task(state, &s.task),
        Step::Move(m) => {
            let started = insert_task(state, &m.to);
            state.tasks.remove(&m.from_task).is_some() || started
        }
        Step::Stop(s) => state.tasks.remove(&s.task_id).is_some(),
        Step::Retire(r) if r.if_empty && state.tasks.values().any(|t| t.host == r.host_id) => {
            tracing::warn!(host = %r.host_id, "a refreshed host still has tasks (their successors did not run): kept");
            report.kept_hosts.push(r.host_id.clone());
            false
        }
        Step::Retire(r) => {
            let mut changed = false;
            if let Some(host) = state.hosts.get(&r.host_id) {
                let left: Vec<String> = state
                    .tasks
                    .values()
                    .filter(|t| t.host == r.host_id)
                    .map(|t| t.id.clone())
                    .collect();
                if !left.is_empty() {
                    return Err(StepError::RetireWithTasks {
                        host: r.host_id.clone(),
                        tasks: left,
                    });
                }
                if let Some(instance) = &host.instance_id {
                    if host.state != HostState::Terminated {
                        ctx.cloud
                            .terminate(cluster, &state.store_id, instance)
                            .await
                            .map_err(StepError::Cloud)?;
                    }
                }
                state.hosts.remove(&r.host_id);
                changed = true;
            }
            ctx.store
                .delete_report(&r.host_id)
                .await
                .map_err(StepError::Store)?;
            changed
        }
        Step::DeleteResource { addr } => state.resources.remove(addr).is_some(),
        // `run_journal` sends every target step to `JournalRun::targets` (a run), never here.
        Step::RegisterTarget(_) | Step::DeregisterTarget(_) => {
            unreachable!("a target step is carried out in a run (apply/targets.rs)")
        }
    };
    Ok(changed)
}

/// Set `record` in the slot `slot` picks of service `service`'s applied resource
/// (its deployment or scaling record); whether that changed anything.
fn set_record<T: PartialEq + Clone>(
    state: &mut StoreState,
    kind: ResourceKind,
    name: &str,
    record: &T,
    slot: impl Fn(&mut AppliedResource) -> &mut Option<T>,
) -> bool {
    let addr = ResourceAddr::new(kind, name.to_string());
    match state.resources.get_mut(&addr).map(slot) {
        Some(s) if s.as_ref() != Some(record) => {
            *s = Some(record.clone());
            true
        }
        _ => false,
    }
}

/// The planned host as launched: its instance id and state from the cloud, its zone
/// where the plan left it to the cloud (the default network). Another instance
/// type or zone than planned fails the step: the cloud executes the plan, it never
/// substitutes a choice.
pub(super) fn as_planned(
    planned: &gpushare_core::model::Host,
    got: gpushare_core::model::CloudHost,
    now: Option<u64>,
) -> Result<gpushare_core::model::Host, StepError> {
    let mismatch = |what: &str, planned_v: &str, got_v: &str| StepError::NotAsPlanned {
        host: planned.id.clone(),
        planned: format!("{what} {planned_v}"),
        got: format!("{what} {got_v}"),
    };
    if !got.instance_type.is_empty() && got.instance_type != planned.instance_type {
        return Err(mismatch(
            "instance type",
            &planned.instance_type,
            &got.instance_type,
        ));
    }
    if let (Some(p), Some(g)) = (&planned.zone, &got.zone) {
        if p != g {
            return Err(mismatch("zone", p, g));
        }
    }
    let mut host = planned.clone();
    host.instance_id = Some(got.instance_id);
    host.zone = host.zone.or(got.zone);
    host.state = got.state;
    host.launched_at = now;
    Ok(host)
}

/// Record a task (state `Pending`: the agent starts it) unless its id is already known.
pub(super) fn insert_task(state: &mut StoreState, task: &gpushare_core::model::Task) -> bool {
    if state.tasks.contains_key(&task.id) {
        return false;
    }
    state.tasks.insert(task.id.clone(), task.clone());
    true
}
