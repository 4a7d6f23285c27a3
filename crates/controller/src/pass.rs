//! One pass of the controller: the configuration from the source, the reconciler,
//! the leadership, then the engine's pass (or, drift-only, observe and plan).

use crate::error::PassError;
use crate::events::Event;
use crate::report::PassReport;
use crate::source::{load_config, loaded, Loaded};
use crate::{Controller, SourceError};
use gpushare_core::model::{task_usage_rows, StoreState, TaskUsageRow};
use gpushare_core::plan::Plan;
use gpushare_core::render;
use gpushare_engine::pass::{Prepare, Prepared, Whole};
use gpushare_engine::reconcile::Reconciler;
use gpushare_engine::store::PassOutcomeKind;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What the engine's part of a pass found or did.
struct Done {
    outcome: PassOutcomeKind,
    plan: Plan,
    fleet: StoreState,
    hourly_cost: f64,
    usage: Vec<TaskUsageRow>,
}

impl Controller {
    /// One pass: the configuration from the source, then the engine's pass (or,
    /// drift-only, observe and plan).
    pub(crate) async fn reconcile_once(
        &mut self,
        cancel: &Arc<AtomicBool>,
    ) -> Result<PassReport, PassError> {
        let (loaded, source_error) = self.load(cancel).await?;
        self.observer.event(Event::Configuration {
            desired: &loaded.desired,
            commit: loaded.commit.as_deref(),
        });
        let r = self.reconciler(&loaded.desired).await?;
        if self.lead {
            self.lead_or_wait(&r, cancel).await?;
        }
        self.read_status(&r).await;
        let done = if self.policy.drift_only {
            self.drift_only(&r, &loaded).await?
        } else {
            self.apply(&r, &loaded, cancel).await?
        };
        Ok(PassReport {
            outcome: done.outcome,
            summary: Some(render::summary_line(&done.plan)),
            commit: loaded.commit,
            digest: Some(loaded.digest),
            source_error,
            fleet: done.fleet,
            hourly_cost: done.hourly_cost,
            held_pools: done.plan.held_pools,
            usage: done.usage,
        })
    }

    /// The configuration to reconcile, and the error of a newer one that could not
    /// be taken while the last good one is used (git).
    async fn load(
        &mut self,
        cancel: &Arc<AtomicBool>,
    ) -> Result<(Loaded, Option<SourceError>), PassError> {
        if self.source.is_git() {
            return self.load_git(cancel).await;
        }
        let (desired, warnings) =
            load_config(&self.source.dir, &self.source.load).map_err(PassError::Config)?;
        if !warnings.0.is_empty() {
            self.observer.event(Event::Warnings(&warnings));
        }
        let loaded = loaded(desired, None)?;
        self.last_good = Some(loaded.clone());
        Ok((loaded, None))
    }

    /// After a restart: the configuration the last run converged to, so a change
    /// found now is told apart as drift or as a new configuration (once).
    async fn read_status(&mut self, r: &Reconciler) {
        if self.status_read {
            return;
        }
        self.status_read = true;
        match r.store().status().await {
            Ok(Some(s)) => {
                self.converged_digest = s.converged_digest;
                self.drift_corrections = s.drift_corrections;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "could not read the last status record"),
        }
    }

    /// Observe and plan; a plan that changes anything is drift, reported, not applied.
    async fn drift_only(&self, r: &Reconciler, loaded: &Loaded) -> Result<Done, PassError> {
        let prepared = r
            .prepare(&loaded.desired, Prepare::to_show(&Whole))
            .await
            .map_err(PassError::pass)?;
        let journal = r
            .store()
            .read_journal()
            .await
            .map_err(|source| PassError::Store {
                what: "reading the apply journal",
                source,
            })?;
        if journal.is_some() {
            tracing::warn!("an interrupted apply left a journal; drift-only does not finish it");
        }
        let Prepared { plan, live, .. } = prepared;
        let usage = task_usage_rows(&live.state, &live.task_status);
        let hourly_cost = plan.cost.now_per_hour;
        let outcome = if plan.is_empty() || plan.records_only() {
            PassOutcomeKind::NoChanges
        } else {
            self.log_changes(
                "drift detected: the fleet differs from the configuration",
                &plan,
                loaded,
            );
            PassOutcomeKind::DriftDetected
        };
        Ok(Done {
            outcome,
            plan,
            fleet: live.state,
            hourly_cost,
            usage,
        })
    }

    /// The engine's pass; a change made while the configuration is the one last
    /// converged to corrects drift.
    async fn apply(
        &mut self,
        r: &Reconciler,
        loaded: &Loaded,
        cancel: &AtomicBool,
    ) -> Result<Done, PassError> {
        let unchanged = self.converged_digest.as_deref() == Some(loaded.digest.as_str());
        let outcome = self
            .pass_while_leading(r, &loaded.desired, cancel)
            .await
            .map_err(PassError::pass)?;
        let kind = if !outcome.changed() {
            PassOutcomeKind::NoChanges
        // A service's auto scaling changing its count is no drift: the
        // configuration asked for it.
        } else if unchanged
            && !outcome.plan.records_only()
            && !outcome.plan.scaling.iter().any(|u| u.change.is_some())
        {
            self.drift_corrections += 1;
            self.log_changes(
                "drift corrected: the fleet had drifted from the configuration",
                &outcome.plan,
                loaded,
            );
            PassOutcomeKind::DriftCorrected
        } else {
            PassOutcomeKind::Applied
        };
        self.converged_digest = Some(loaded.digest.clone());
        let usage = task_usage_rows(&outcome.plan.after, &outcome.live.task_status);
        Ok(Done {
            outcome: kind,
            hourly_cost: outcome.plan.cost.after_per_hour,
            fleet: outcome.plan.after.clone(),
            plan: outcome.plan,
            usage,
        })
    }

    /// Log what a plan would change (drift), one line per step, and tell the observer.
    fn log_changes(&self, what: &str, plan: &Plan, loaded: &Loaded) {
        let steps: Vec<String> = plan
            .steps()
            .iter()
            .map(gpushare_engine::apply::describe)
            .collect();
        tracing::warn!(
            commit = loaded.commit.as_deref().unwrap_or(""),
            summary = %render::summary_line(plan),
            changes = %steps.join("; "),
            "{what}"
        );
        self.observer.event(Event::Drift { steps: &steps });
    }
}
