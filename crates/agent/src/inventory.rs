//! The host's GPUs: NVML on a GPU host, a JSON file as the stand-in for tests and
//! for the local fleet.

use gpushare_core::model::GpuInfo;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
    #[error("the GPU inventory file {path} is not a JSON list of GPUs ({{\"index\", \"model\", \"memory_mib\", \"uuid\"?, \"compute_mode\"?}})")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Where the agent learns which GPUs its host has.
pub trait Inventory: Send + Sync {
    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError>;
}

/// A fixed list of GPUs given in code (the simulated fleet).
#[derive(Debug, Clone, Default)]
pub struct StaticInventory(pub Vec<GpuInfo>);

impl Inventory for StaticInventory {
    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError> {
        Ok(self.0.clone())
    }
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
        let text = std::fs::read_to_string(&self.path).map_err(|source| InventoryError::Read {
            path: self.path.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| InventoryError::Parse {
            path: self.path.clone(),
            source,
        })
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
}

impl NvmlInventory {
    pub fn new() -> NvmlInventory {
        NvmlInventory::default()
    }

    pub fn with_library(path: impl Into<PathBuf>) -> NvmlInventory {
        NvmlInventory {
            library: Some(path.into()),
            nvml: Mutex::new(None),
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

fn compute_mode_name(mode: nvml_wrapper::enum_wrappers::device::ComputeMode) -> &'static str {
    use nvml_wrapper::enum_wrappers::device::ComputeMode;
    match mode {
        ComputeMode::Default => "default",
        ComputeMode::ExclusiveThread => "exclusive_thread",
        ComputeMode::Prohibited => "prohibited",
        ComputeMode::ExclusiveProcess => "exclusive_process",
    }
}

impl Inventory for NvmlInventory {
    fn gpus(&self) -> Result<Vec<GpuInfo>, InventoryError> {
        // A poisoned lock only means another call panicked; the handle is still usable.
        let mut guard = self.nvml.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(self.init()?);
        }
        let Some(nvml) = guard.as_ref() else {
            return Ok(Vec::new());
        };
        let nv = |what: &str| {
            let what = what.to_string();
            move |source| InventoryError::Nvml { what, source }
        };
        let count = nvml.device_count().map_err(nv("count the GPUs"))?;
        let mut out = Vec::with_capacity(count as usize);
        for index in 0..count {
            let dev = nvml
                .device_by_index(index)
                .map_err(nv(&format!("open GPU {index}")))?;
            let model = dev
                .name()
                .map_err(nv(&format!("read GPU {index}'s name")))?;
            let memory = dev
                .memory_info()
                .map_err(nv(&format!("read GPU {index}'s memory")))?;
            let uuid = dev
                .uuid()
                .map_err(nv(&format!("read GPU {index}'s UUID")))?;
            let compute_mode = dev.compute_mode().ok().map(compute_mode_name);
            out.push(GpuInfo {
                index,
                model,
                memory_mib: memory.total / (1024 * 1024),
                uuid: Some(uuid),
                compute_mode: compute_mode.map(str::to_string),
            });
        }
        Ok(out)
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
