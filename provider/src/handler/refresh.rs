//! A pool whose hosts are still rolling to its settings (docs/refresh.md): its plan
//! is an update with `host_ids`, `desired_size` and `hourly_cost` unknown, so that
//! each `terraform apply` runs the engine and rolls the next batch, and a warning
//! lists the hosts to refresh.

use super::Handler;
use crate::bridge::desired_from_state;
use crate::cty::Value;
use crate::diag::Diag;
use crate::plan_scope::{narrowed, scope_pools};
use crate::resource::addr_of;
use gpushare_core::model::{Desired, Live, ResourceKind};
use gpushare_engine::pass::{Prepare, Prepared, ScopeError, Scoped};

impl Handler {
    /// For an unchanged pool: a warning listing its hosts to refresh when the planner
    /// would drain some now; `None` when nothing rolls now (none outdated, or the
    /// refresh is halted or waits).
    pub(super) async fn rollout_check(&self, planned: &Value) -> Option<Diag> {
        let backend = self.backend().ok()?;
        let addr = addr_of(ResourceKind::CapacityProvider, planned)?;
        // The store's applied resources, narrowed to this pool's.
        let scope = |given: &Desired, live: &mut Live| -> Result<Scoped, ScopeError> {
            let desired = desired_from_state(&live.state, &given.settings)
                .map_err(|d| format!("{}: {}", d.summary, d.detail))?;
            let pools = scope_pools(&desired, &addr);
            let (desired, narrowed_live) = narrowed(&desired, live, &addr, &pools);
            *live = narrowed_live;
            Ok(Scoped {
                desired,
                notes: vec![],
            })
        };
        let given = Desired {
            settings: backend.settings.clone(),
            ..Desired::default()
        };
        let Prepared { plan, live, .. } = backend
            .reconciler
            .prepare(&given, Prepare::to_check(&scope))
            .await
            .ok()?;
        let r = plan.refreshes.iter().find(|r| r.pool == addr.name)?;
        if r.now.is_empty() {
            return None;
        }
        Some(Diag::warning(
            format!("Hosts to refresh in {addr}"),
            format!(
                "{}\n{}\nEach apply rolls one batch; host_ids is known after it.",
                gpushare_core::render::refresh_line(r),
                gpushare_core::render::placement_text(&plan, &live.state, 40)
            ),
        ))
    }
}

/// Mark the pool's computed attributes that the rollout changes unknown.
pub(super) fn rolling(planned: &mut Value) {
    if let Value::Map(m) = planned {
        for a in ["host_ids", "desired_size", "hourly_cost"] {
            m.insert(a.to_string(), Value::unknown());
        }
    }
}
