//! Reading the GPUs' health facts from NVML: kept small and free of decisions
//! ([`super::judge_gpus`] decides). Not exercised by the tests: it needs an NVIDIA
//! GPU and driver; the tests feed the same [`GpuFacts`] through the inventory file
//! and the local fleet's faults instead.
//!
//! - lost: opening or reading the device answers `GPU_IS_LOST`;
//! - Xid: a thread waits on an NVML event set registered for critical Xid errors on
//!   every GPU, from the first read on, and keeps every code seen (the agent's
//!   lifetime: "since the agent started");
//! - ECC: `nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)`;
//! - pending page retirement: `nvmlDeviceGetRetiredPagesPendingStatus`;
//! - failed row remapping: `nvmlDeviceGetRemappedRows` (`failureOccurred`), through
//!   nvml-wrapper-sys since nvml-wrapper does not wrap it;
//! - per-process use: the compute processes and the MPS clients
//!   (`nvmlDeviceGetMPSComputeRunningProcesses_v3`, raw too), merged by pid.
//!
//! A query the GPU does not support (`NOT_SUPPORTED`: no ECC, no row remapper)
//! counts as nothing wrong.

use super::{GpuFacts, GpuScan};
use gpushare_core::model::GpuInfo;
use gpushare_core::util::lock;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Xid codes seen per GPU index since the watcher started.
pub type XidLog = Arc<Mutex<BTreeMap<u32, Vec<u64>>>>;

/// Start the Xid watcher thread (its own NVML handle, `library` as the inventory
/// loads it); it ends when NVML fails to wait (logged).
pub fn watch_xids(library: Option<std::path::PathBuf>, log: XidLog) {
    let spawned = std::thread::Builder::new()
        .name("gpushare-xid".into())
        .spawn(move || {
            let mut builder = Nvml::builder();
            if let Some(lib) = &library {
                builder.lib_path(lib.as_os_str());
            }
            let nvml = match builder.init() {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "Xid watcher: NVML unavailable");
                    return;
                }
            };
            let Ok(mut set) = nvml.create_event_set() else {
                tracing::warn!("Xid watcher: cannot create an NVML event set");
                return;
            };
            let count = nvml.device_count().unwrap_or(0);
            for i in 0..count {
                let Ok(dev) = nvml.device_by_index(i) else {
                    continue;
                };
                set = match dev.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(gpu = i, error = %e.error, "Xid watcher: cannot register");
                        return;
                    }
                };
            }
            loop {
                match set.wait(5_000) {
                    Ok(ev) => {
                        let index = ev.device.index().unwrap_or(u32::MAX);
                        if let Some(XidError::Value(code)) = ev.event_data {
                            tracing::warn!(gpu = index, xid = code, "Xid event");
                            let mut l = lock(&log);
                            l.entry(index).or_default().push(code);
                        }
                    }
                    Err(NvmlError::Timeout) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "Xid watcher stops");
                        return;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the Xid watcher");
    }
}

fn supported<T: Default>(r: Result<T, NvmlError>) -> Result<T, NvmlError> {
    match r {
        Err(NvmlError::NotSupported) => Ok(T::default()),
        other => other,
    }
}

/// One GPU's inventory entry and facts; `Err(GpuLost)` is turned into a lost GPU by
/// the caller.
fn read_gpu(
    dev: &Device<'_>,
    index: u32,
    remap: Option<&nvml_wrapper_sys::bindings::NvmlLib>,
) -> Result<(GpuInfo, GpuFacts), NvmlError> {
    let memory = dev.memory_info()?;
    let info = GpuInfo {
        index,
        model: dev.name()?,
        memory_mib: memory.total / (1024 * 1024),
        uuid: Some(dev.uuid()?),
        compute_mode: dev
            .compute_mode()
            .ok()
            .map(|m| compute_mode_name(m).to_string()),
    };
    let facts = GpuFacts {
        index,
        ecc_uncorrectable: supported(
            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        )?,
        retired_pages_pending: supported(dev.are_pages_pending_retired())?,
        row_remap_failed: remap.is_some_and(|lib| row_remap_failed(lib, dev)),
        ..GpuFacts::default()
    };
    Ok((info, facts))
}

/// `nvmlDeviceGetRemappedRows`' `failureOccurred` (false when it cannot be read).
fn row_remap_failed(lib: &nvml_wrapper_sys::bindings::NvmlLib, dev: &Device<'_>) -> bool {
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    if lib.nvmlDeviceGetRemappedRows.is_err() {
        return false;
    }
    // SAFETY: the symbol was found; the device handle is valid while `dev` lives
    // (same library, already initialised by `Nvml`); the out-pointers are locals.
    let rc = unsafe {
        lib.nvmlDeviceGetRemappedRows(
            dev.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        )
    };
    rc == nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_SUCCESS && failure != 0
}

/// Every GPU NVML lists, with its facts (Xids from `xids`); a GPU NVML lists but
/// cannot read is lost (in `facts`, not in `gpus`).
pub fn scan(
    nvml: &Nvml,
    remap: Option<&nvml_wrapper_sys::bindings::NvmlLib>,
    xids: &XidLog,
) -> Result<GpuScan, NvmlError> {
    let count = nvml.device_count()?;
    let seen = lock(xids).clone();
    let mut out = GpuScan::default();
    for index in 0..count {
        if let Ok(dev) = nvml.device_by_index(index) {
            out.processes.extend(processes(&dev, index, remap));
        }
        let read = nvml
            .device_by_index(index)
            .and_then(|dev| read_gpu(&dev, index, remap));
        let mut facts = match read {
            Ok((info, facts)) => {
                out.gpus.push(info);
                facts
            }
            Err(NvmlError::GpuLost) => GpuFacts {
                index,
                lost: true,
                ..GpuFacts::default()
            },
            Err(e) => return Err(e),
        };
        facts.xids = seen.get(&index).cloned().unwrap_or_default();
        out.facts.push(facts);
    }
    Ok(out)
}

/// The compute processes on GPU `index` and, under MPS, its MPS clients
/// (`nvmlDeviceGetMPSComputeRunningProcesses_v3`, read through the raw library as
/// nvml-wrapper does not wrap it; merged by pid, [`super::merge_processes`]), with
/// the memory each holds and its SM utilisation over the last few seconds (NVML's
/// process samples; none where the driver keeps none).
fn processes(
    dev: &nvml_wrapper::Device<'_>,
    index: u32,
    raw: Option<&nvml_wrapper_sys::bindings::NvmlLib>,
) -> Vec<crate::health::GpuProcess> {
    let compute = dev.running_compute_processes().unwrap_or_default();
    let mps = raw.map(|lib| mps_processes(lib, dev)).unwrap_or_default();
    let since_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros().saturating_sub(5_000_000))
        .ok()
        .and_then(|us| u64::try_from(us).ok());
    let samples = dev.process_utilization_stats(since_us).unwrap_or_default();
    let of = |pid: u32, used_bytes: Option<u64>| crate::health::GpuProcess {
        gpu: index,
        pid,
        used_memory_mib: used_bytes.map_or(0, |b| b / (1024 * 1024)),
        sm_percent: samples
            .iter()
            .filter(|s| s.pid == pid)
            .max_by_key(|s| s.timestamp)
            .map(|s| s.sm_util),
    };
    let compute = compute
        .into_iter()
        .map(|p| {
            let used = match p.used_gpu_memory {
                nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => Some(b),
                nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => None,
            };
            of(p.pid, used)
        })
        .collect();
    let mps = mps.into_iter().map(|(pid, used)| of(pid, used)).collect();
    super::merge_processes(compute, mps)
}

/// NVML's "not available" memory reading (`NVML_VALUE_NOT_AVAILABLE`).
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;

/// The MPS clients on `dev`, pid and bytes used (none when the driver lacks the
/// call, MPS is off, or it fails: the compute listing is then all there is).
fn mps_processes(
    lib: &nvml_wrapper_sys::bindings::NvmlLib,
    dev: &Device<'_>,
) -> Vec<(u32, Option<u64>)> {
    use nvml_wrapper_sys::bindings::{nvmlProcessInfo_t, nvmlReturn_enum_NVML_SUCCESS};
    if lib.nvmlDeviceGetMPSComputeRunningProcesses_v3.is_err() {
        return Vec::new();
    }
    // Room for more clients than an MPS server takes (48 on Volta and later);
    // a call that finds more answers INSUFFICIENT_SIZE and none are read.
    let mut count: u32 = 64;
    let empty = nvmlProcessInfo_t {
        pid: 0,
        usedGpuMemory: 0,
        gpuInstanceId: 0,
        computeInstanceId: 0,
    };
    let mut infos = vec![empty; count as usize];
    // SAFETY: the symbol was found; the device handle is valid while `dev` lives
    // (same library, initialised by `Nvml`); `infos` holds `count` entries and NVML
    // writes at most `count`, then sets `count` to how many it wrote.
    let rc = unsafe {
        lib.nvmlDeviceGetMPSComputeRunningProcesses_v3(dev.handle(), &mut count, infos.as_mut_ptr())
    };
    if rc != nvmlReturn_enum_NVML_SUCCESS {
        return Vec::new();
    }
    infos.truncate(count as usize);
    infos
        .into_iter()
        .map(|p| {
            let used = (p.usedGpuMemory != VALUE_NOT_AVAILABLE).then_some(p.usedGpuMemory);
            (p.pid, used)
        })
        .collect()
}

/// NVML's compute mode as the inventory and reports name it.
fn compute_mode_name(mode: nvml_wrapper::enum_wrappers::device::ComputeMode) -> &'static str {
    use nvml_wrapper::enum_wrappers::device::ComputeMode;
    match mode {
        ComputeMode::Default => "default",
        ComputeMode::ExclusiveThread => "exclusive_thread",
        ComputeMode::Prohibited => "prohibited",
        ComputeMode::ExclusiveProcess => "exclusive_process",
    }
}
