//! The host's GPUs: NVML on a GPU host, a JSON file as the stand-in for tests and
//! for the local fleet. Each read also gives the GPUs' health facts
//! ([`Inventory::scan`]; judged in [`crate::health`]).

use crate::health::{GpuFacts, GpuProcess, GpuScan};
use gpushare_core::model::GpuInfo;
use gpushare_core::util::lock;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("NVML is not available ({library}): is the NVIDIA driver installed?")]
    NvmlUnavailable {
        library: String,
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    #[error("NVML failed to {what}")]
    Nvml {
        what: String,
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    #[error("cannot read the GPU inventory file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the GPU inventory file {path} is not a JSON list of GPUs ({{\"index\", \"model\", \"memory_mib\", \"uuid\"?, \"compute_mode\"?, \"health\"?: {{\"lost\", \"xids\", \"ecc_uncorrectable\", \"retired_pages_pending\", \"row_remap_failed\"}}, \"processes\"?, \"mps_processes\"?: [{{\"pid\", \"used_memory_mib\", \"sm_percent\"?}}]}})")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Where the agent learns which GPUs its host has.
pub trait Inventory: Send + Sync {
    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError>;

    /// The GPUs with their health facts (default: [`Inventory::gpus`], nothing wrong).
    fn scan(&self) -> Result<GpuScan, InventoryError> {
        Ok(GpuScan {
            gpus: self.gpus()?,
            ..GpuScan::default()
        })
    }
}

/// A fixed list of GPUs given in code.
#[derive(Debug, Clone, Default)]
pub struct StaticInventory(pub Vec<GpuInfo>);

impl Inventory for StaticInventory {
    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError> {
        Ok(self.0.clone())
    }
}

/// A fixed read of the GPUs with their health facts, given in code (the local
/// fleet's simulated hosts, with their injected GPU faults).
#[derive(Debug, Clone, Default)]
pub struct StaticScan(pub GpuScan);

impl Inventory for StaticScan {
    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError> {
        Ok(self.0.gpus.clone())
    }

    fn scan(&self) -> Result<GpuScan, InventoryError> {
        Ok(self.0.clone())
    }
}

/// One GPU in the inventory file: a [`GpuInfo`] and, optionally, its health facts.
#[derive(Deserialize)]
struct FileGpu {
    #[serde(flatten)]
    info: GpuInfo,
    #[serde(default)]
    health: Option<GpuFacts>,
    /// The compute processes on it (pid, memory, SM percent): the stand-in for
    /// NVML's process listing.
    #[serde(default)]
    processes: Vec<GpuProcess>,
    /// Its MPS clients: the stand-in for NVML's MPS listing
    /// (`nvmlDeviceGetMPSComputeRunningProcesses`), merged with `processes`.
    #[serde(default)]
    mps_processes: Vec<GpuProcess>,
}

/// Reads a JSON list of [`GpuInfo`] on every call, so a test can change it between passes.
#[derive(Debug, Clone)]
pub struct FileInventory {
    path: PathBuf,
}

impl FileInventory {
    pub fn new(path: impl Into<PathBuf>) -> FileInventory {
        FileInventory { path: path.into() }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Inventory for FileInventory {
    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError> {
        Ok(self.scan()?.gpus)
    }

    /// The GPUs of the file; an entry whose `health` says `lost` stands for a GPU
    /// NVML lists but cannot read: it is left out of the GPUs, its facts kept.
    fn scan(&self) -> Result<GpuScan, InventoryError> {
        let text = std::fs::read_to_string(&self.path).map_err(|source| InventoryError::Read {
            path: self.path.clone(),
            source,
        })?;
        let list: Vec<FileGpu> =
            serde_json::from_str(&text).map_err(|source| InventoryError::Parse {
                path: self.path.clone(),
                source,
            })?;
        let mut scan = GpuScan::default();
        for mut g in list {
            let compute = std::mem::take(&mut g.processes);
            let mps = std::mem::take(&mut g.mps_processes);
            for mut p in crate::health::merge_processes(compute, mps) {
                p.gpu = g.info.index;
                scan.processes.push(p);
            }
            if let Some(mut f) = g.health {
                f.index = g.info.index;
                if !f.lost {
                    scan.gpus.push(g.info);
                }
                scan.facts.push(f);
            } else {
                scan.gpus.push(g.info);
            }
        }
        Ok(scan)
    }
}

/// The GPUs as NVML sees them. The library (`libnvidia-ml.so.1`) is loaded at run
/// time, on the first call, and kept; without it every call returns
/// [`InventoryError::NvmlUnavailable`], so the agent still runs (and reports no GPUs).
#[derive(Default)]
pub struct NvmlInventory {
    /// Library path override (default: the loader's search for `libnvidia-ml.so.1`).
    library: Option<PathBuf>,
    nvml: Mutex<Option<nvml_wrapper::Nvml>>,
    /// The raw library again, for what nvml-wrapper does not wrap (row remapping).
    raw: Mutex<Option<Arc<nvml_wrapper_sys::bindings::NvmlLib>>>,
    /// Critical Xid events seen since the first read (see [`crate::health::nvml`]).
    xids: crate::health::nvml::XidLog,
    watcher: OnceLock<()>,
}

impl NvmlInventory {
    pub fn new() -> NvmlInventory {
        NvmlInventory::default()
    }

    pub fn with_library(path: impl Into<PathBuf>) -> NvmlInventory {
        NvmlInventory {
            library: Some(path.into()),
            ..NvmlInventory::default()
        }
    }

    fn library_name(&self) -> String {
        self.library
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "libnvidia-ml.so.1".to_string())
    }

    fn init(&self) -> Result<nvml_wrapper::Nvml, InventoryError> {
        let mut builder = nvml_wrapper::Nvml::builder();
        if let Some(lib) = &self.library {
            builder.lib_path(lib.as_os_str());
        }
        builder
            .init()
            .map_err(|source| InventoryError::NvmlUnavailable {
                library: self.library_name(),
                source,
            })
    }
}

impl NvmlInventory {
    /// The raw library, loaded once (`None` when it cannot be: row remapping is then
    /// not read).
    fn raw(&self) -> Option<Arc<nvml_wrapper_sys::bindings::NvmlLib>> {
        let mut guard = lock(&self.raw);
        if guard.is_none() {
            // SAFETY: loading the NVIDIA management library runs no code of ours;
            // the same library nvml-wrapper has loaded and initialised.
            match unsafe { nvml_wrapper_sys::bindings::NvmlLib::new(self.library_name()) } {
                Ok(lib) => *guard = Some(Arc::new(lib)),
                Err(e) => tracing::debug!(error = %e, "NVML loaded raw: not available"),
            }
        }
        guard.clone()
    }
}

impl Inventory for NvmlInventory {
    /// The GPUs and their health facts (see [`crate::health::nvml`]); the Xid watcher
    /// starts on the first read that finds NVML.
    fn scan(&self) -> Result<GpuScan, InventoryError> {
        let mut guard = lock(&self.nvml);
        if guard.is_none() {
            *guard = Some(self.init()?);
        }
        let Some(nvml) = guard.as_ref() else {
            return Ok(GpuScan::default());
        };
        self.watcher.get_or_init(|| {
            crate::health::nvml::watch_xids(self.library.clone(), self.xids.clone())
        });
        let raw = self.raw();
        crate::health::nvml::scan(nvml, raw.as_deref(), &self.xids).map_err(|source| {
            InventoryError::Nvml {
                what: "read the GPUs and their health".into(),
                source,
            }
        })
    }

    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError> {
        Ok(self.scan()?.gpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_inventory_reads_a_list_and_names_the_file_when_it_cannot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("gpus.json");
        let inv = FileInventory::new(&path);
        let e = inv.gpus().expect_err("missing file");
        assert!(e.to_string().contains("gpus.json"), "{e}");
        std::fs::write(&path, r#"[{"index":0,"model":"l4","memory_mib":23034,"uuid":"GPU-aaa"},{"index":1,"model":"l4","memory_mib":23034}]"#)
            .expect("write");
        let gpus = inv.gpus().expect("reads");
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].uuid.as_deref(), Some("GPU-aaa"));
        assert_eq!(gpus[1].uuid, None);
        std::fs::write(&path, "{").expect("write");
        assert!(matches!(inv.gpus(), Err(InventoryError::Parse { .. })));
    }

    #[test]
    fn the_inventory_file_carries_each_gpus_health_facts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("gpus.json");
        std::fs::write(
            &path,
            r#"[{"index":0,"model":"l4","memory_mib":23034},
                {"index":1,"model":"l4","memory_mib":23034,"health":{"xids":[48],"ecc_uncorrectable":2}},
                {"index":2,"model":"l4","memory_mib":23034,"health":{"lost":true}}]"#,
        )
        .expect("write");
        let scan = FileInventory::new(&path).scan().expect("reads");
        let listed: Vec<u32> = scan.gpus.iter().map(|g| g.index).collect();
        assert_eq!(listed, [0, 1], "a lost GPU is not listed");
        assert_eq!(scan.facts.len(), 2);
        assert_eq!(
            (scan.facts[0].index, scan.facts[0].xids.clone()),
            (1, vec![48])
        );
        assert_eq!(scan.facts[0].ecc_uncorrectable, 2);
        assert!(scan.facts[1].lost && scan.facts[1].index == 2);
        // A misspelt fact is an error naming the file, not a healthy GPU.
        std::fs::write(
            &path,
            r#"[{"index":0,"model":"l4","memory_mib":23034,"health":{"xid":[79]}}]"#,
        )
        .expect("write");
        let e = FileInventory::new(&path).scan().expect_err("unknown field");
        assert!(e.to_string().contains("gpus.json"), "{e}");
    }

    /// No GPU here: the inventory file stands in for NVML's two process listings
    /// (compute processes and MPS clients) that the NVML path merges the same way.
    #[test]
    fn mps_clients_are_merged_with_the_compute_processes_once_per_pid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("gpus.json");
        std::fs::write(
            &path,
            r#"[{"index":0,"model":"l4","memory_mib":23034,
                 "processes":[{"pid":10,"used_memory_mib":300},{"pid":11,"used_memory_mib":100,"sm_percent":5}],
                 "mps_processes":[{"pid":11,"used_memory_mib":120},{"pid":12,"used_memory_mib":900,"sm_percent":40}]},
                {"index":1,"model":"l4","memory_mib":23034,
                 "mps_processes":[{"pid":11,"used_memory_mib":50}]}]"#,
        )
        .expect("write");
        let scan = FileInventory::new(&path).scan().expect("reads");
        let got: Vec<(u32, u32, u64, Option<u32>)> = scan
            .processes
            .iter()
            .map(|p| (p.gpu, p.pid, p.used_memory_mib, p.sm_percent))
            .collect();
        assert_eq!(
            got,
            [
                (0, 10, 300, None),
                (0, 11, 120, Some(5)),
                (0, 12, 900, Some(40)),
                // The same pid on another GPU is another allocation.
                (1, 11, 50, None),
            ]
        );
    }

    #[test]
    fn nvml_without_the_library_is_a_clear_error() {
        let inv = NvmlInventory::with_library("/nonexistent/libnvidia-ml.so.1");
        let e = inv.gpus().expect_err("no NVML here");
        assert!(matches!(e, InventoryError::NvmlUnavailable { .. }), "{e:?}");
        assert!(
            e.to_string().contains("/nonexistent/libnvidia-ml.so.1"),
            "{e}"
        );
    }
}
