//! The health checks of one agent pass (see [`crate::health`]): each check run and
//! recorded in the agent's [`crate::health::HealthBook`], in the order the pass
//! needs them.

use super::{error_chain, Agent};
use crate::health::deep::DeepVerdict;
use crate::health::{mps_check, GpuScan};
use crate::runtime::RuntimeError;
use gpushare_core::model::{CheckKind, CheckStatus, GpuInfo, StoreState};

impl Agent {
    /// Record the MPS probe's verdict (`mps_daemon`; absent when MPS is off).
    pub(super) fn check_mps(&mut self, now: u64) {
        match mps_check(self.mps_health(), &self.tracker) {
            Some((status, reason)) => self.book.set(CheckKind::MpsDaemon, status, reason, now),
            None => self
                .book
                .health
                .checks
                .retain(|c| c.check != CheckKind::MpsDaemon),
        }
    }

    /// Run the first-boot deep diagnostic once (when configured and not run yet,
    /// by this agent or an earlier run of it on this host).
    pub(super) async fn check_deep(&mut self, now: u64) {
        let Some(deep) = self.config.deep_check.clone() else {
            return;
        };
        if self
            .book
            .status(CheckKind::DeepDiagnostic)
            .is_some_and(|s| s != CheckStatus::Initializing)
        {
            return;
        }
        let verdict = match deep.recorded() {
            Some(v) => v,
            None => {
                tracing::info!(program = %deep.program.display(), "running the first-boot deep diagnostic");
                let (status, reason) = deep.run().await;
                tracing::info!(%status, reason = ?reason, "deep diagnostic done");
                let v = DeepVerdict {
                    status,
                    reason,
                    at: now,
                };
                deep.keep(&v);
                v
            }
        };
        self.book.set(
            CheckKind::DeepDiagnostic,
            verdict.status,
            verdict.reason,
            verdict.at,
        );
    }

    /// Whether the deep diagnostic lets tasks start: not configured, passed, or not
    /// possible here (no DCGM); `Err` says why not.
    pub(super) fn deep_gate(&self) -> Result<(), String> {
        if self.config.deep_check.is_none() {
            return Ok(());
        }
        match self.book.health.check(CheckKind::DeepDiagnostic) {
            Some(c) if matches!(c.status, CheckStatus::Ok | CheckStatus::InsufficientData) => {
                Ok(())
            }
            Some(c) => Err(format!(
                "the first-boot deep diagnostic is {}{}",
                c.status,
                c.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            )),
            None => Err("the first-boot deep diagnostic has not run".into()),
        }
    }

    /// Read the GPUs and record the `gpus` check (the expected count from this host's
    /// instance type in `state`). Returns the GPUs and the read's error.
    pub(super) fn check_gpus(
        &mut self,
        scan: Result<GpuScan, String>,
        state: &StoreState,
        now: u64,
    ) -> (Vec<GpuInfo>, Option<String>) {
        let expected = state
            .hosts
            .get(&self.config.host_id)
            .and_then(|h| gpushare_core::catalog::lookup(&h.instance_type))
            .map(|t| t.gpu_count as usize);
        match scan {
            Ok(scan) => {
                self.book.record_gpus(expected, Ok(&scan), now);
                (scan.gpus, None)
            }
            Err(e) => {
                self.book.record_gpus(expected, Err(&e), now);
                (Vec::new(), Some(e))
            }
        }
    }

    /// Ask the runtime whether it answers (`container_runtime`); its error when not.
    pub(super) async fn check_runtime(&mut self, now: u64) -> Option<RuntimeError> {
        let (status, reason, err) = match self.runtime.health().await {
            Ok(()) => (CheckStatus::Ok, None, None),
            Err(e) => {
                let why = error_chain(&e);
                tracing::warn!(runtime = self.runtime.name(), error = %why, "container runtime check failed");
                (
                    CheckStatus::Impaired,
                    Some(format!("{}: {why}", self.runtime.name())),
                    Some(e),
                )
            }
        };
        self.book
            .set(CheckKind::ContainerRuntime, status, reason, now);
        err
    }

    /// The runtime could not list its tasks: `container_runtime` is impaired.
    pub(super) fn runtime_failed(&mut self, why: String, now: u64) {
        self.book.set(
            CheckKind::ContainerRuntime,
            CheckStatus::Impaired,
            Some(format!("{}: {why}", self.runtime.name())),
            now,
        );
    }
}
