//! The host's health checks, ECS-style (docs/agent.md): `mps_daemon`, `gpus` (and
//! each GPU), `container_runtime` and, when the pool asks for it, the first-boot
//! `deep_diagnostic`. Each has a status (`ok`, `impaired`, `insufficient_data`,
//! `initializing`), a reason and the time of its last change, in the report's
//! [`HostHealth`]; the planner replaces an impaired host and moves the tasks off an
//! impaired GPU.
//!
//! The decisions are here, pure and unit-tested: [`judge_gpus`] turns raw
//! [`GpuFacts`] into statuses. Reading the facts is elsewhere and kept small: NVML in
//! [`nvml`] (not exercised without a GPU), the inventory file stand-in in
//! `inventory.rs`, the local fleet's injected faults in `sim_fleet.rs`.

use crate::mps::MpsHealthTracker;
use gpushare_core::model::{CheckKind, CheckStatus, GpuInfo, HostHealth, MpsHealth};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

pub mod deep;
pub mod nvml;

pub use deep::DeepCheck;

/// The Xid events that impair a GPU (NVML's critical-Xid event set delivers them;
/// the inventory stand-in lists them). Application errors (13, 31, 43, 45, 68, 109)
/// are left out, as the NVIDIA device plugin leaves them out: they end one
/// process, not the GPU. Sources: NVIDIA's Xid catalogue
/// (docs.nvidia.com/deploy/xid-errors), its GPU memory error management guide
/// (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt), the device plugin's list of
/// application Xids (NVIDIA/k8s-device-plugin, `internal/rm/health.go`).
pub const CRITICAL_XIDS: [(u64, &str); 10] = [
    (48, "double-bit ECC error"),
    (
        63,
        "ECC page retirement or row remapping recorded: reset the GPU",
    ),
    (64, "ECC page retirement or row remapping failed"),
    (74, "NVLink error"),
    (79, "GPU has fallen off the bus"),
    (92, "high single-bit ECC error rate"),
    (94, "contained ECC error"),
    (95, "uncontained ECC error"),
    (119, "GSP RPC timeout"),
    (120, "GSP error"),
];

/// Xid 79: the GPU is lost to the host, which impairs the host, not only the GPU.
pub const XID_FALLEN_OFF_THE_BUS: u64 = 79;

/// What Xid `code` means when it impairs a GPU; `None` for the others.
pub fn critical_xid(code: u64) -> Option<&'static str> {
    CRITICAL_XIDS
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, what)| *what)
}

/// Raw health facts of one GPU, as NVML (or a stand-in) reads them: no verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuFacts {
    /// The GPU index (in the inventory file: taken from the GPU entry).
    #[serde(skip)]
    pub index: u32,
    /// NVML answers `GPU_IS_LOST` for it (or the stand-in says so).
    pub lost: bool,
    /// Xid events seen since the agent started (every code; [`CRITICAL_XIDS`] decide).
    pub xids: Vec<u64>,
    /// Uncorrectable ECC errors since the driver loaded (volatile counter).
    pub ecc_uncorrectable: u64,
    /// Pages waiting to be retired (needs a GPU reset).
    pub retired_pages_pending: bool,
    /// A row remapping failed (the GPU should be replaced).
    pub row_remap_failed: bool,
    /// The MPS server serving it is in a fault state (why), from the daemon
    /// ([`crate::mps::MpsProbe::server_faults`]), not from the inventory.
    #[serde(skip)]
    pub mps_server_fault: Option<String>,
}

/// The GPUs and their facts, as one read of the inventory gives them. A GPU in
/// `facts` but not in `gpus` is one that NVML lists but cannot read (lost).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuScan {
    pub gpus: Vec<GpuInfo>,
    pub facts: Vec<GpuFacts>,
    /// The compute processes on the GPUs (MPS clients included) and what each uses.
    pub processes: Vec<GpuProcess>,
}

/// A process on a GPU, as NVML lists it (or the inventory file gives it).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
pub struct GpuProcess {
    /// The GPU's index (filled from the GPU it is listed under).
    #[serde(default)]
    pub gpu: u32,
    pub pid: u32,
    /// GPU memory it holds, MiB.
    #[serde(default)]
    pub used_memory_mib: u64,
    /// Its SM utilisation over the last sample, percent.
    #[serde(default)]
    pub sm_percent: Option<u32>,
}

/// One GPU's processes from NVML's two listings: the compute processes
/// (`nvmlDeviceGetComputeRunningProcesses`) and, under MPS, the MPS clients
/// (`nvmlDeviceGetMPSComputeRunningProcesses`). A pid in both is counted once: its
/// memory the larger of the two readings (the same allocation seen twice, never
/// two), its SM sample the one given. In the order first seen.
pub fn merge_processes(compute: Vec<GpuProcess>, mps: Vec<GpuProcess>) -> Vec<GpuProcess> {
    let mut out: Vec<GpuProcess> = Vec::with_capacity(compute.len() + mps.len());
    for p in compute.into_iter().chain(mps) {
        match out.iter_mut().find(|q| q.gpu == p.gpu && q.pid == p.pid) {
            Some(q) => {
                q.used_memory_mib = q.used_memory_mib.max(p.used_memory_mib);
                q.sm_percent = q.sm_percent.or(p.sm_percent);
            }
            None => out.push(p),
        }
    }
    out
}

/// The verdict on the GPUs: the host's `gpus` check and each GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuVerdict {
    pub status: CheckStatus,
    pub reason: Option<String>,
    /// (index, status, reason) for every expected or present GPU.
    pub gpus: Vec<(u32, CheckStatus, Option<String>)>,
}

/// Judge the GPUs: `expected` is how many the host should have (its instance type,
/// or the most this agent has seen). A GPU is impaired when it is lost (NVML cannot
/// reach it, or it is missing from the inventory), had a critical Xid, has
/// uncorrectable ECC errors, pages pending retirement, a failed row remapping, or
/// when the MPS server serving it is in a fault state.
/// The host's `gpus` check is impaired when a GPU is lost (missing, `GPU_IS_LOST`
/// or Xid 79): a host with a GPU off the bus needs a reboot or a replacement. Any
/// other fault impairs only its GPU (its tasks move; the check stays `ok` and says so).
pub fn judge_gpus(expected: usize, scan: &GpuScan) -> GpuVerdict {
    let present: BTreeSet<u32> = scan.gpus.iter().map(|g| g.index).collect();
    let top = scan
        .gpus
        .iter()
        .map(|g| g.index + 1)
        .chain(scan.facts.iter().map(|f| f.index + 1))
        .max()
        .unwrap_or(0)
        .max(u32::try_from(expected).unwrap_or(u32::MAX));
    let mut lost: Vec<u32> = vec![];
    let mut impaired: Vec<u32> = vec![];
    let mut gpus = vec![];
    for index in 0..top {
        let facts = scan.facts.iter().find(|f| f.index == index);
        let mut why: Vec<String> = vec![];
        let mut is_lost = false;
        if facts.is_some_and(|f| f.lost) {
            is_lost = true;
            why.push("lost: NVML cannot reach it".into());
        } else if !present.contains(&index) {
            is_lost = true;
            why.push(format!(
                "missing: the inventory lists {} of {expected} GPUs",
                present.len()
            ));
        }
        if let Some(f) = facts {
            let mut seen: Vec<u64> = f.xids.clone();
            seen.sort_unstable();
            seen.dedup();
            for code in seen {
                if let Some(what) = critical_xid(code) {
                    if code == XID_FALLEN_OFF_THE_BUS {
                        is_lost = true;
                    }
                    why.push(format!("Xid {code} ({what})"));
                }
            }
            if f.ecc_uncorrectable > 0 {
                why.push(format!(
                    "{} uncorrectable ECC error(s) since the driver loaded",
                    f.ecc_uncorrectable
                ));
            }
            if f.retired_pages_pending {
                why.push("pages pending retirement (the GPU needs a reset)".into());
            }
            if f.row_remap_failed {
                why.push("row remapping failed".into());
            }
            if let Some(fault) = &f.mps_server_fault {
                why.push(fault.clone());
            }
        }
        if is_lost {
            lost.push(index);
        }
        if why.is_empty() {
            gpus.push((index, CheckStatus::Ok, None));
        } else {
            impaired.push(index);
            gpus.push((index, CheckStatus::Impaired, Some(why.join(", "))));
        }
    }
    let list = |v: &[u32]| {
        v.iter()
            .map(|i| format!("GPU {i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (status, reason) = if !lost.is_empty() {
        (
            CheckStatus::Impaired,
            Some(format!(
                "{} lost ({} of {} GPUs answer)",
                list(&lost),
                top as usize - lost.len(),
                top
            )),
        )
    } else if !impaired.is_empty() {
        (
            CheckStatus::Ok,
            Some(format!(
                "{} impaired: its tasks move and it takes no new ones",
                list(&impaired)
            )),
        )
    } else {
        (CheckStatus::Ok, None)
    };
    GpuVerdict {
        status,
        reason,
        gpus,
    }
}

/// The `mps_daemon` check from the MPS probe tracker (`None`: MPS is off on this
/// host, the check is not reported).
pub fn mps_check(
    health: MpsHealth,
    tracker: &MpsHealthTracker,
) -> Option<(CheckStatus, Option<String>)> {
    let err = tracker.last_error().map(str::to_string);
    match health {
        MpsHealth::Disabled => None,
        MpsHealth::Healthy => Some((CheckStatus::Ok, None)),
        MpsHealth::Impaired => Some((
            CheckStatus::Impaired,
            Some(format!(
                "{} failed probes in a row{}",
                tracker.failures_in_a_row(),
                err.map(|e| format!(": {e}")).unwrap_or_default()
            )),
        )),
        // Not decided yet: failed once or twice since the agent started.
        MpsHealth::Unknown => Some((CheckStatus::Initializing, err)),
    }
}

/// A host's health as the agent keeps it between passes: the checks with their
/// last change, and the most GPUs seen (the expected count when the instance type
/// does not say).
#[derive(Debug, Clone, Default)]
pub struct HealthBook {
    pub health: HostHealth,
    most_gpus: usize,
}

impl HealthBook {
    /// Carry on from a report's health (`since` kept for unchanged statuses).
    pub fn resume(health: &HostHealth) -> HealthBook {
        HealthBook {
            most_gpus: health.gpus.len(),
            health: health.clone(),
        }
    }

    pub fn set(&mut self, kind: CheckKind, status: CheckStatus, reason: Option<String>, now: u64) {
        self.health.set(kind, status, reason, now);
    }

    pub fn status(&self, kind: CheckKind) -> Option<CheckStatus> {
        self.health.check(kind).map(|c| c.status)
    }

    /// Record a read of the GPUs: `expected` from the instance type (`None`: unknown,
    /// the most GPUs this agent has seen stand in), or the read's error.
    pub fn record_gpus(&mut self, expected: Option<usize>, scan: Result<&GpuScan, &str>, now: u64) {
        let scan = match scan {
            Ok(s) => s,
            Err(e) => {
                self.set(
                    CheckKind::Gpus,
                    CheckStatus::InsufficientData,
                    Some(format!("cannot read the GPUs: {e}")),
                    now,
                );
                return;
            }
        };
        self.most_gpus = self.most_gpus.max(scan.gpus.len());
        let expected = expected.unwrap_or(self.most_gpus);
        let v = judge_gpus(expected, scan);
        self.set(CheckKind::Gpus, v.status, v.reason, now);
        let judged: BTreeSet<u32> = v.gpus.iter().map(|(i, _, _)| *i).collect();
        self.health.gpus.retain(|g| judged.contains(&g.index));
        for (index, status, reason) in v.gpus {
            self.health.set_gpu(index, status, reason, now);
        }
    }
}

#[cfg(test)]
mod tests;
