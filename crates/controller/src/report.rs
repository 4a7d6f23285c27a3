//! What one pass reports, and the status record written from it.

use crate::error::{PassError, SourceError};
use gpushare_core::model::{StoreState, TaskUsageRow};
use gpushare_core::plan::HeldPool;
use gpushare_core::render;
use gpushare_engine::store::{PassOutcomeKind, StatusRecord};

/// What one pass did, for the status record, the exit code and the log.
#[derive(Debug)]
pub struct PassReport {
    pub outcome: PassOutcomeKind,
    pub summary: Option<String>,
    pub commit: Option<String>,
    pub digest: Option<String>,
    /// A newer commit refused (invalid), or a fetch that failed, while the last good
    /// configuration was reconciled.
    pub source_error: Option<SourceError>,
    /// The fleet after the pass and its hourly cost (for the metrics).
    pub fleet: StoreState,
    pub hourly_cost: f64,
    /// Pools whose silent hosts the disruption budget held back (for the metrics).
    pub held_pools: Vec<HeldPool>,
    /// Each task's GPU use as its agent reported it (for the metrics).
    pub usage: Vec<TaskUsageRow>,
}

/// What the status record of a pass says besides the pass's own result.
pub(crate) struct RecordBase<'a> {
    pub(crate) pass: u64,
    pub(crate) started: jiff::Timestamp,
    pub(crate) finished: jiff::Timestamp,
    pub(crate) source: String,
    pub(crate) converged_digest: Option<String>,
    pub(crate) drift_corrections: u64,
    pub(crate) holder: &'a str,
    /// The last good commit (named by a failed pass).
    pub(crate) last_good: Option<String>,
}

/// The status record of a pass.
pub(crate) fn record(base: RecordBase<'_>, result: &Result<PassReport, PassError>) -> StatusRecord {
    let RecordBase {
        pass,
        started,
        finished,
        source,
        converged_digest,
        drift_corrections,
        holder,
        last_good,
    } = base;
    let base = StatusRecord {
        pass,
        started_at: started.to_string(),
        finished_at: finished.to_string(),
        source,
        commit: None,
        config_digest: None,
        converged_digest,
        outcome: PassOutcomeKind::Failed,
        summary: None,
        error: None,
        drift_corrections,
        health: vec![],
        deployments: vec![],
        holder: holder.to_string(),
    };
    match result {
        Ok(r) => StatusRecord {
            commit: r.commit.clone(),
            config_digest: r.digest.clone(),
            outcome: r.outcome,
            summary: r.summary.clone(),
            error: r.source_error.as_ref().map(|e| e.message.clone()),
            health: render::health_lines(&r.fleet),
            deployments: render::deployment_lines(&r.fleet),
            ..base
        },
        Err(e) => StatusRecord {
            commit: last_good,
            error: Some(e.message()),
            ..base
        },
    }
}
