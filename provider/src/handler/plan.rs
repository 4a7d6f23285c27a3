//! PlanResourceChange: the values Terraform plans (arguments, computed attributes
//! unknown where they may change, replacement paths), and the plan-time check that
//! runs gpushare's planner on the store's desired set with the change, narrowed to
//! the pools it can touch.

use super::{arguments_differ, refresh, unknown_kind, Handler, NotPlanned, Planned};
use crate::bridge::{desired_from_state, overlay, put};
use crate::cty::Value;
use crate::diag::{attr_path, has_errors, Diag, PathStep};
use crate::plan_scope::{narrowed, neighbourhood, scope_pools};
use crate::resource::{self, addr_of, canonical, model_json};
use crate::schema;
use gpushare_core::model::{Desired, Live, ResourceAddr, ResourceKind};
use gpushare_core::schema as core_schema;
use gpushare_engine::pass::{Prepare, Prepared, ScopeError, Scoped};
use gpushare_engine::reconcile::ReconcileError;
use std::collections::BTreeSet;

impl Handler {
    /// Plans the values (see [`Handler::plan_values`]); when those are fine and the change is
    /// wholly known, also runs gpushare's planner on the store's desired set with this change,
    /// as apply will: its errors for this resource, and tasks of this service it could not
    /// place, show at plan time.
    pub async fn plan_resource_change(
        &self,
        type_name: &str,
        prior: &Value,
        proposed: &Value,
        config: &Value,
    ) -> Planned {
        if type_name == schema::JOIN_TOKEN {
            return self.join_token_plan(prior, proposed, config);
        }
        let mut p = self.plan_values(type_name, prior, proposed, config);
        if let (false, Some(kind)) = (has_errors(&p.diags), schema::resource_kind(type_name)) {
            // Only a change is checked: an unchanged resource is what the store already has.
            if !proposed.is_null()
                && (prior.is_null() || arguments_differ(core_schema::schema(kind), prior, proposed))
            {
                p.diags
                    .extend(self.engine_plan_check(kind, &p.planned, false).await);
            } else if proposed.is_null() && !prior.is_null() {
                // A destroy (Terraform asks with `plan_destroy`): what removing it
                // does to the fleet, counted with what this run removed before.
                p.diags
                    .extend(self.engine_plan_check(kind, prior, true).await);
            } else if kind == ResourceKind::CapacityProvider && !proposed.is_null() {
                // Its hosts still roll: plan an update so that apply rolls the next batch.
                if let Some(w) = self.rollout_check(&p.planned).await {
                    refresh::rolling(&mut p.planned);
                    p.diags.push(w);
                }
            }
        }
        p
    }

    /// The engine's plan of a change (`planned`; with `removing`, the removal of the
    /// resource `planned` was): tasks that cannot be placed and the fleet-change
    /// warning.
    async fn engine_plan_check(
        &self,
        kind: ResourceKind,
        planned: &Value,
        removing: bool,
    ) -> Vec<Diag> {
        let (Ok(backend), Some(addr)) = (self.backend(), addr_of(kind, planned)) else {
            return vec![];
        };
        let attrs = if removing {
            None
        } else {
            let Some(a) = model_json(core_schema::schema(kind), planned, true)
                .ok()
                .and_then(|j| canonical(kind, &j))
            else {
                return vec![];
            };
            Some(a)
        };
        let _one_at_a_time = self.plan_checks.lock().await;
        let pools = std::sync::Mutex::new(BTreeSet::new());
        let scope = |given: &Desired, live: &mut Live| -> Result<Scoped, ScopeError> {
            let (desired, p) = self.check_scope(given, live, (&addr, attrs.as_ref()), planned)?;
            *gpushare_core::util::lock(&pools) = p;
            Ok(Scoped {
                desired,
                notes: vec![],
            })
        };
        let given = Desired {
            settings: backend.settings.clone(),
            ..Desired::default()
        };
        let prepared = backend
            .reconciler
            .prepare(&given, Prepare::to_check(&scope))
            .await;
        let pools = std::mem::take(&mut *gpushare_core::util::lock(&pools));
        match prepared {
            Err(ReconcileError::Desired(e)) => e.downcast::<NotPlanned>().map_or(vec![], |n| n.0),
            Err(ReconcileError::Plan(e)) if *e.addr() == addr && !removing => {
                vec![Diag::from_error("gpushare cannot plan this change", &e)]
            }
            Err(_) => vec![],
            Ok(Prepared { plan, live, .. }) => {
                backend.learn_prices(&plan);
                plan.unplaced
                    .iter()
                    .filter(|u| kind == ResourceKind::Service && u.service == addr.name)
                    .map(|u| {
                        Diag::warning("Task not placed", format!("{}: {}", u.key, u.reason))
                            .at(attr_path(&["desired_count"]))
                    })
                    .chain(
                        self.fleet_warnings
                            .warning(&addr, &pools, &plan, &live.state),
                    )
                    .collect()
            }
        }
    }

    /// The plan-time check's scope: the store's applied resources with what this run
    /// planned and the change (`addr` = `attrs`), narrowed to the pools the change
    /// can touch (`live` with it), and those pools; `planned` is the change's value.
    /// [`NotPlanned`] when the check
    /// does not plan (errors across resources found first, a reference this run
    /// has not planned yet).
    fn check_scope(
        &self,
        given: &Desired,
        live: &mut Live,
        (addr, attrs): (&ResourceAddr, Option<&serde_json::Value>),
        planned: &Value,
    ) -> Result<(Desired, BTreeSet<String>), NotPlanned> {
        let mut desired =
            desired_from_state(&live.state, &given.settings).map_err(|_| NotPlanned(vec![]))?;
        // What this run planned for other resources overrides the store's, and what
        // it removed is gone. The run keeps them as the model has them: read once,
        // not once per later resource (a plan of many resources read the run
        // quadratically).
        {
            let mut run = gpushare_core::util::lock(&self.planned_run);
            let mut removed = gpushare_core::util::lock(&self.removed_run);
            match attrs {
                Some(a) => {
                    put(&mut run, addr, a).map_err(|_| NotPlanned(vec![]))?;
                    removed.remove(addr);
                }
                None => {
                    removed.insert(addr.clone());
                }
            }
            overlay(&mut desired, &run);
            if attrs.is_none() {
                // The pools it touches are those it touched while it was there.
                let pools = scope_pools(&desired, addr);
                removed.iter().for_each(|r| {
                    desired.remove(r);
                });
                let (desired, narrowed_live) = narrowed(&desired, live, addr, &pools);
                *live = narrowed_live;
                return Ok((desired, pools));
            }
            removed.iter().for_each(|r| {
                desired.remove(r);
            });
        }
        if !desired.references_resolve(addr) {
            // A referenced resource this run has not planned (a reference by a literal
            // name, unordered by Terraform): apply checks it then.
            return Err(NotPlanned(vec![]));
        }
        // The checks across resources are about a service or gpu_instance and what it
        // references: validate just those (with and without the change), so a plan
        // of many resources does not validate the whole set once per resource.
        if let Some((with, without)) = neighbourhood(&desired, addr) {
            let cross = resource::cross_validation(addr, planned, &with, &without);
            if has_errors(&cross) {
                return Err(NotPlanned(cross));
            }
        }
        // Placement interacts only within a pool: plan the pools this change can touch,
        // with their services and task definitions, hosts and tasks, not the whole set
        // (one planner run per resource over everything made a plan quadratic).
        let pools = scope_pools(&desired, addr);
        let (desired, narrowed_live) = narrowed(&desired, live, addr, &pools);
        *live = narrowed_live;
        Ok((desired, pools))
    }

    /// PlanResourceChange on the values alone: arguments as configured, computed
    /// attributes unknown where they may change (exact `id`), replacement paths.
    pub fn plan_values(
        &self,
        type_name: &str,
        prior: &Value,
        proposed: &Value,
        config: &Value,
    ) -> Planned {
        let Some(kind) = schema::resource_kind(type_name) else {
            return Planned {
                planned: proposed.clone(),
                requires_replace: vec![],
                diags: vec![unknown_kind(type_name)],
            };
        };
        if proposed.is_null() {
            return Planned {
                planned: Value::Null,
                requires_replace: vec![],
                diags: vec![],
            };
        }
        let s = core_schema::schema(kind);
        let diags = resource::validate(kind, config);
        let name = proposed.attr("name").cloned().unwrap_or(Value::Null);
        let id = match &name {
            Value::String(_) => name.clone(),
            _ => Value::unknown(),
        };
        let mut planned = proposed.clone();
        let mut requires_replace = Vec::new();
        let computed_only: Vec<&str> = s
            .attributes
            .iter()
            .filter(|a| a.is_computed_only())
            .map(|a| a.name.as_str())
            .collect();
        if let Value::Map(m) = &mut planned {
            if prior.is_null() {
                for a in &computed_only {
                    m.insert((*a).to_string(), Value::unknown());
                }
                m.insert("id".into(), id);
            } else {
                let changed = arguments_differ(s, prior, proposed);
                for a in s
                    .attributes
                    .iter()
                    .filter(|a| a.forces_replacement)
                    .map(|a| &a.name)
                    .chain(
                        s.blocks
                            .iter()
                            .filter(|b| b.forces_replacement)
                            .map(|b| &b.name),
                    )
                {
                    if prior.attr(a) != proposed.attr(a) {
                        requires_replace.push(vec![PathStep::Attr(a.clone())]);
                    }
                }
                if changed {
                    for a in computed_only.iter().filter(|a| **a != "id") {
                        m.insert((*a).to_string(), Value::unknown());
                    }
                    m.insert("id".into(), id);
                }
            }
        }
        Planned {
            planned,
            requires_replace,
            diags,
        }
    }
}
