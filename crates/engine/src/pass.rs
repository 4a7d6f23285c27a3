//! One pass API, the way every face of gpushare runs a reconcile pass:
//!
//! 1. [`Reconciler::prepare`] (desired, [`Prepare`]) -> [`Prepared`] (the desired
//!    state as scoped, the live world, the plan): finish an interrupted apply
//!    (when asked), let the local fleet's in-process agents report, observe, gather
//!    the cloud's launch facts, scope (the CLI's `-target`/`-replace`, the
//!    provider's store-built desired set), plan with the settings' planner options.
//! 2. [`Reconciler::execute`] ([`Prepared`], [`Policy`]) -> [`PassOutcome`]: apply;
//!    a plan that went stale while it was made, or a launch the cloud refused for
//!    lack of capacity, is prepared and applied again as the policy allows; after an
//!    apply the in-process agents run a round (start what was placed, report).
//!
//! Between the two a caller may show the plan and ask (CLI `apply`), save it (CLI
//! `plan -out`), or only report it (`--drift-only`, the provider's plan-time check).
//! A reviewed plan (a saved plan, a plan the user confirmed) is executed with
//! [`Policy::REVIEWED`]: what was reviewed is applied or refused, never re-planned.
//! [`Reconciler::pass`] is the two back to back (the GitOps loop).
//!
//! Where each decision is made: the scope decides what is planned towards; the pure
//! planner (`gpushare_core::plan`) decides every change; `execute` only decides
//! whether to plan again (the policy); apply carries the plan out step by step.

use crate::apply::{ApplyError, ApplyReport};
use crate::reconcile::{PassOutcome, ReconcileError, Reconciler, Run};
use gpushare_core::model::{Desired, Live};
use gpushare_core::plan::Plan;
use std::sync::atomic::Ordering;

/// An error a [`Scope`] returns (the pass wraps it in [`ReconcileError::Desired`]).
pub type ScopeError = Box<dyn std::error::Error + Send + Sync>;

/// What a pass plans towards, made from the configuration it is given and the
/// world it observed. The CLI's `-target` narrows the configuration and
/// `-replace` marks hosts in the world; the Terraform provider plans towards the
/// store's applied resources with the one being changed, narrowed to the pools it
/// touches.
pub trait Scope: Sync {
    /// The configuration to plan towards, and the notes the plan carries; may
    /// change `live` (hosts marked for replacement, the world narrowed).
    fn scope(&self, desired: &Desired, live: &mut Live) -> Result<Scoped, ScopeError>;
}

/// What a [`Scope`] made: the configuration to plan towards and notes for the plan.
#[derive(Debug, Clone, Default)]
pub struct Scoped {
    pub desired: Desired,
    pub notes: Vec<String>,
}

/// The whole configuration, as given.
#[derive(Debug, Clone, Copy, Default)]
pub struct Whole;

impl Scope for Whole {
    fn scope(&self, desired: &Desired, _: &mut Live) -> Result<Scoped, ScopeError> {
        Ok(Scoped {
            desired: desired.clone(),
            notes: vec![],
        })
    }
}

/// Every resource as the store last recorded it applied, whatever the configuration
/// says now (which gives only the settings): a pass that must roll out no unapplied
/// edit, as `gpushare run` placing a one-off job's runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct AsApplied;

impl Scope for AsApplied {
    fn scope(&self, desired: &Desired, live: &mut Live) -> Result<Scoped, ScopeError> {
        Ok(Scoped {
            desired: desired.as_applied(&live.state)?,
            notes: vec![
                "planned from the resources as last applied: configuration changes wait for `gpushare apply`"
                    .to_string(),
            ],
        })
    }
}

impl<F> Scope for F
where
    F: Fn(&Desired, &mut Live) -> Result<Scoped, ScopeError> + Sync,
{
    fn scope(&self, desired: &Desired, live: &mut Live) -> Result<Scoped, ScopeError> {
        self(desired, live)
    }
}

/// How [`Reconciler::prepare`] prepares a pass.
#[derive(Clone, Copy)]
pub struct Prepare<'a> {
    pub scope: &'a dyn Scope,
    /// Plan the removal of everything (no launch facts are gathered).
    pub destroy: bool,
    /// Finish an interrupted apply first, so the plan starts from where it left off
    /// (callers that apply). Callers that only plan leave the journal to the next apply.
    pub resume: bool,
    /// Let the local fleet's in-process agents run a round before observing (as real
    /// agents would have reported). Off for a quick check that changes nothing.
    pub agents: bool,
    /// Gather the cloud's launch facts (images, subnets, zones), so the plan fixes
    /// every launch. Off for a check that never launches (and never with `destroy`).
    pub gather: bool,
    /// Progress and cancellation of the resumed apply.
    pub run: Run<'a>,
}

impl<'a> Prepare<'a> {
    /// For a pass that applies: resume, agents, observe, gather, scope, plan.
    pub fn to_apply(scope: &'a dyn Scope) -> Prepare<'a> {
        Prepare {
            scope,
            destroy: false,
            resume: true,
            agents: true,
            gather: true,
            run: Run::default(),
        }
    }

    /// For a plan that is shown, saved or reported (`plan`, `--drift-only`): as
    /// [`Prepare::to_apply`] without finishing an interrupted apply.
    pub fn to_show(scope: &'a dyn Scope) -> Prepare<'a> {
        Prepare {
            resume: false,
            ..Prepare::to_apply(scope)
        }
    }

    /// For a quick check that changes nothing and launches nothing (the provider's
    /// plan-time check): observe and plan only.
    pub fn to_check(scope: &'a dyn Scope) -> Prepare<'a> {
        Prepare {
            agents: false,
            gather: false,
            ..Prepare::to_show(scope)
        }
    }

    pub fn destroying(self, destroy: bool) -> Prepare<'a> {
        Prepare { destroy, ..self }
    }

    pub fn with_run(self, run: Run<'a>) -> Prepare<'a> {
        Prepare { run, ..self }
    }
}

/// A prepared pass: what [`Reconciler::prepare`] made, for [`Reconciler::execute`].
pub struct Prepared<'a> {
    /// The configuration the plan goes towards (as scoped).
    pub desired: Desired,
    /// The world the plan was made from.
    pub live: Live,
    pub plan: Plan,
    /// The interrupted apply finished first, if there was one.
    pub resumed: Option<ApplyReport>,
    /// How to prepare again (stale plan, capacity refused); `None`: a reviewed plan
    /// from elsewhere (a saved plan), applied as it is or refused.
    again: Option<(&'a Desired, Prepare<'a>)>,
}

impl<'a> Prepared<'a> {
    /// A plan reviewed elsewhere (a saved plan) and the configuration it was made
    /// from: `execute` applies it as it is, or refuses it when it is stale.
    pub fn reviewed(desired: Desired, plan: Plan) -> Prepared<'a> {
        Prepared {
            desired,
            live: Live::default(),
            plan,
            resumed: None,
            again: None,
        }
    }
}

/// When [`Reconciler::execute`] plans again instead of failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How many times to plan again when the state moved on under the plan.
    pub stale_retries: u32,
    /// How many times to plan again after a launch found no capacity where the plan
    /// put it (each plan avoids the zones refused so far).
    pub refusal_retries: u32,
}

impl Policy {
    /// A plan someone reviewed: applied as it is, or the error reported (no re-plan).
    pub const REVIEWED: Policy = Policy {
        stale_retries: 0,
        refusal_retries: 0,
    };
}

impl Reconciler {
    /// The retry policy of an unattended pass ([`Reconciler::pass`]): the stale and
    /// capacity-refusal retries this reconciler was built with.
    pub fn policy(&self) -> Policy {
        Policy {
            stale_retries: self.stale_retries,
            refusal_retries: self.refusal_retries,
        }
    }

    /// Prepare a pass towards `desired`: see the module docs.
    pub async fn prepare<'a>(
        &self,
        desired: &'a Desired,
        how: Prepare<'a>,
    ) -> Result<Prepared<'a>, ReconcileError> {
        let mut resumed = None;
        if how.resume {
            resumed = self.resume(desired, how.run).await?;
            if let Some(r) = &resumed {
                tracing::info!(steps = r.changed_steps, "finished an interrupted apply");
            }
        }
        let mut prepared = self.plan_pass(desired, how).await?;
        prepared.resumed = resumed;
        Ok(prepared)
    }

    /// Read the target groups of `desired`'s services (and of those `live`
    /// records) into `live.target_groups`; nothing when no service has a
    /// `load_balancer`. A group that cannot be read is recorded with its error.
    pub async fn observe_target_groups(&self, desired: &Desired, live: &mut Live) {
        let groups = gpushare_core::plan::groups_to_observe(desired, &live.state);
        if !groups.is_empty() {
            live.target_groups =
                crate::balancer::observe_groups(self.backends().balancer.as_deref(), &groups).await;
        }
    }

    /// Observe, gather, scope and plan (no resume).
    async fn plan_pass<'a>(
        &self,
        desired: &'a Desired,
        how: Prepare<'a>,
    ) -> Result<Prepared<'a>, ReconcileError> {
        if how.agents {
            self.run_agents().await?;
        }
        let mut live = self.observe_only(&desired.settings.cluster).await?;
        let scoped = how
            .scope
            .scope(desired, &mut live)
            .map_err(ReconcileError::Desired)?;
        if how.gather && !how.destroy {
            self.gather(&scoped.desired, &mut live).await?;
        }
        self.observe_target_groups(&scoped.desired, &mut live).await;
        let mut plan = self.plan(&scoped.desired, &live, how.destroy)?;
        plan.notes.extend(scoped.notes);
        Ok(Prepared {
            desired: scoped.desired,
            live,
            plan,
            resumed: None,
            again: Some((desired, how)),
        })
    }

    /// Carry out a prepared pass: see the module docs. An empty plan applies
    /// nothing (and runs no agents' round).
    pub async fn execute(
        &self,
        mut prepared: Prepared<'_>,
        policy: Policy,
        run: Run<'_>,
    ) -> Result<PassOutcome, ReconcileError> {
        let mut stale_left = policy.stale_retries;
        let mut refusals_left = policy.refusal_retries;
        let resumed = prepared.resumed.take();
        loop {
            if prepared.plan.is_empty() {
                return Ok(PassOutcome {
                    resumed,
                    live: prepared.live,
                    plan: prepared.plan,
                    applied: None,
                    agents: None,
                });
            }
            if run.cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                return Err(ReconcileError::Cancelled);
            }
            let err = match self.apply(&prepared.desired, &prepared.plan, run).await {
                Ok(report) => {
                    tracing::info!(
                        serial = report.serial,
                        changed = report.changed_steps,
                        "applied"
                    );
                    // The local fleet's agents start what was placed, as real agents would.
                    let agents = self.run_agents().await.err();
                    return Ok(PassOutcome {
                        resumed,
                        live: prepared.live,
                        plan: prepared.plan,
                        applied: Some(report),
                        agents,
                    });
                }
                Err(e) => e,
            };
            let again = match (&err, prepared.again) {
                (ReconcileError::Apply(e), Some(again))
                    if retry(e, &mut stale_left, &mut refusals_left) =>
                {
                    again
                }
                _ => return Err(err),
            };
            prepared = self.plan_pass(again.0, again.1).await?;
        }
    }

    /// One unattended pass towards `desired` (the GitOps loop): prepare to apply the
    /// whole configuration, then execute with this reconciler's retry policy.
    pub async fn pass(
        &self,
        desired: &Desired,
        run: Run<'_>,
    ) -> Result<PassOutcome, ReconcileError> {
        let prepared = self
            .prepare(desired, Prepare::to_apply(&Whole).with_run(run))
            .await?;
        self.execute(prepared, self.policy(), run).await
    }
}

/// Whether `e` is one the policy plans again after (counting it down).
fn retry(e: &ApplyError, stale_left: &mut u32, refusals_left: &mut u32) -> bool {
    let left = match e {
        ApplyError::Stale { .. } | ApplyError::ResumedEarlierPlan { .. } => stale_left,
        ApplyError::CapacityRefused { .. } => refusals_left,
        _ => return false,
    };
    if *left == 0 {
        return false;
    }
    *left -= 1;
    match e {
        ApplyError::CapacityRefused { .. } => {
            tracing::warn!(error = %e, "a launch found no capacity; planning again around it")
        }
        _ => tracing::info!("the state moved on while planning; planning again"),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::LocalCloud;
    use crate::reconcile::{Backends, PlannerOverrides};
    use crate::store::{FileStore, Store};
    use std::sync::Arc;

    fn reconciler(dir: &std::path::Path) -> Reconciler {
        let store: Arc<dyn Store> = Arc::new(FileStore::open(dir).expect("store"));
        let local = Arc::new(LocalCloud::open(dir).expect("cloud"));
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
        Reconciler::new(backends, "pass test")
    }

    fn desired(min_size: u32) -> Desired {
        serde_json::from_value(serde_json::json!({
            "settings": { "cluster": "c" },
            "capacity_providers": { "l4": { "instance_type": "g6.xlarge", "min_size": min_size, "max_size": 4 } },
            "gpu_instances": {}, "task_definitions": {}, "services": {},
        }))
        .expect("desired")
    }

    /// A reviewed plan is applied as it is or refused when the state moved on; an
    /// unattended pass plans again instead (here: finds nothing left to do).
    #[tokio::test]
    async fn a_stale_plan_is_refused_when_reviewed_and_planned_again_otherwise() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = reconciler(dir.path());
        let d = desired(1);
        let show = Prepare::to_show(&Whole);
        let first = r.prepare(&d, show).await.expect("prepare");
        let second = r.prepare(&d, show).await.expect("prepare");
        assert_eq!(first.plan.launches.len(), 1);
        let done = r
            .execute(second, Policy::REVIEWED, Run::default())
            .await
            .expect("the first plan applied applies");
        assert!(done.applied.is_some());
        let err = r
            .execute(first, Policy::REVIEWED, Run::default())
            .await
            .expect_err("a reviewed plan made before that apply is stale");
        assert!(
            matches!(err, ReconcileError::Apply(ApplyError::Stale { .. })),
            "{err:?}"
        );

        let d2 = desired(2);
        let late = r.prepare(&d2, show).await.expect("prepare");
        let early = r.prepare(&d2, show).await.expect("prepare");
        r.execute(early, Policy::REVIEWED, Run::default())
            .await
            .expect("applies");
        let again = Policy {
            stale_retries: 1,
            refusal_retries: 0,
        };
        let out = r
            .execute(late, again, Run::default())
            .await
            .expect("planned again from the new state");
        assert!(out.plan.is_empty(), "{:?}", out.plan.launches);
        assert!(out.applied.is_none());
    }

    /// The scope decides what is planned towards and adds its notes to the plan.
    #[tokio::test]
    async fn the_scope_narrows_what_is_planned_and_notes_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = reconciler(dir.path());
        let d = desired(2);
        let halve = |d: &Desired, _: &mut Live| -> Result<Scoped, ScopeError> {
            let mut d = d.clone();
            for p in d.capacity_providers.values_mut() {
                p.min_size = 1;
            }
            Ok(Scoped {
                desired: d,
                notes: vec!["scoped".into()],
            })
        };
        let p = r
            .prepare(&d, Prepare::to_check(&halve))
            .await
            .expect("prepare");
        assert_eq!(p.plan.launches.len(), 1);
        assert_eq!(p.desired.capacity_providers["l4"].min_size, 1);
        assert!(
            p.plan.notes.iter().any(|n| n == "scoped"),
            "{:?}",
            p.plan.notes
        );
        let refuse = |_: &Desired, _: &mut Live| -> Result<Scoped, ScopeError> {
            Err("no such target".into())
        };
        let err = r
            .prepare(&d, Prepare::to_check(&refuse))
            .await
            .err()
            .expect("a scope error fails the pass");
        assert!(matches!(err, ReconcileError::Desired(_)) && !err.is_transient());
    }

    /// Every caller plans with the settings' options; the CLI's flags override them.
    #[test]
    fn planner_options_come_from_the_settings_with_overrides_on_top() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut d = desired(1);
        d.settings.heartbeat_timeout_seconds = 30;
        d.settings.boot_grace_seconds = 90;
        d.settings.consolidate = true;
        let o = reconciler(dir.path()).options_for(&d);
        assert_eq!(
            (
                o.heartbeat_timeout_seconds,
                o.boot_grace_seconds,
                o.consolidate
            ),
            (30, 90, true)
        );
        let r = reconciler(dir.path()).with_overrides(PlannerOverrides {
            heartbeat_timeout_seconds: Some(5),
            ..PlannerOverrides::default()
        });
        let o = r.options_for(&d);
        assert_eq!((o.heartbeat_timeout_seconds, o.boot_grace_seconds), (5, 90));
    }
}
