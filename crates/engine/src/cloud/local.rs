//! The `local` cloud: the embedded default, a simulated fleet kept in
//! `<dir>/local-fleet.json` (replaced atomically, changed under an OS lock on
//! `<dir>/local-fleet.lock`). Hosts are shaped by the GPU catalogue; launches are
//! idempotent by launch token; in-process agents ([`LocalCloud::run_agents`]) write
//! the reports a real agent would; faults can be injected per host.

use super::{Cloud, CloudError, LaunchRequest};
use crate::fsutil::{self, FileLock};
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use gpushare_core::catalog;
use gpushare_core::model::{CloudHost, GpuInfo, HostReport, HostState, MpsHealth, TaskGpu, TaskState};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const FLEET: &str = "local-fleet.json";
const FLEET_LOCK: &str = "local-fleet.lock";
/// Availability zones of the simulated region, handed out round-robin.
pub const ZONES: [&str; 3] = ["local-1a", "local-1b", "local-1c"];

/// A fault to inject into a simulated host (`gpushare debug fault HOST mps-down`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The MPS control daemon is down: the agent reports MPS impaired and starts no MPS task.
    MpsDown,
    /// The agent stops reporting (no heartbeat).
    Silent,
    /// Remove every injected fault.
    Clear,
}

impl std::str::FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mps-down" => Ok(Fault::MpsDown),
            "silent" => Ok(Fault::Silent),
            "clear" => Ok(Fault::Clear),
            other => Err(format!("unknown fault {other:?}: expected mps-down, silent or clear")),
        }
    }
}

/// One simulated instance, as kept in `local-fleet.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalInstance {
    pub instance_id: String,
    pub cluster: String,
    pub host_id: String,
    pub capacity_provider: String,
    pub instance_type: String,
    pub zone: String,
    pub state: HostState,
    pub launch_token: String,
    #[serde(default)]
    pub mps_down: bool,
    #[serde(default)]
    pub silent: bool,
}

impl LocalInstance {
    fn to_cloud_host(&self) -> CloudHost {
        CloudHost {
            instance_id: self.instance_id.clone(),
            host_id: self.host_id.clone(),
            capacity_provider: self.capacity_provider.clone(),
            instance_type: self.instance_type.clone(),
            zone: Some(self.zone.clone()),
            state: self.state,
            launch_token: self.launch_token.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Fleet {
    #[serde(default)]
    next_zone: usize,
    #[serde(default)]
    instances: Vec<LocalInstance>,
}

/// Errors of the in-process agents.
#[derive(Debug, thiserror::Error)]
pub enum RunAgentsError {
    #[error("reading the local fleet")]
    Cloud(#[source] CloudError),
    #[error("reading the state or writing a report to the store")]
    Store(#[source] StoreError),
}

/// The simulated fleet in one directory (usually the store directory).
#[derive(Debug, Clone)]
pub struct LocalCloud {
    dir: PathBuf,
}

impl LocalCloud {
    /// Open (creating the directory if needed) the fleet kept in `dir`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<LocalCloud, CloudError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| io_err(&dir, source))?;
        Ok(LocalCloud { dir })
    }

    pub fn fleet_path(&self) -> PathBuf {
        self.dir.join(FLEET)
    }

    /// Every instance of every cluster, in launch order (terminated ones included).
    pub fn instances(&self) -> Result<Vec<LocalInstance>, CloudError> {
        Ok(self.read()?.instances)
    }

    /// Inject (or clear) a fault on the host named by its gpushare host id or its instance id.
    pub fn inject_fault(&self, cluster: &str, host: &str, fault: Fault) -> Result<LocalInstance, CloudError> {
        self.update(|fleet| {
            let inst = fleet
                .instances
                .iter_mut()
                .find(|i| i.cluster == cluster && i.state != HostState::Terminated && (i.host_id == host || i.instance_id == host))
                .ok_or_else(|| CloudError::UnknownHost { cluster: cluster.to_string(), host: host.to_string() })?;
            match fault {
                Fault::MpsDown => inst.mps_down = true,
                Fault::Silent => inst.silent = true,
                Fault::Clear => {
                    inst.mps_down = false;
                    inst.silent = false;
                }
            }
            tracing::info!(host = %inst.host_id, instance = %inst.instance_id, ?fault, "injected fault");
            Ok(inst.clone())
        })
    }

    /// Run one round of the in-process agents: every running, non-silent host of the
    /// store's cluster writes a [`HostReport`] (heartbeat `now`, MPS health, GPU
    /// inventory from the catalogue, the state of every task assigned to it). A host
    /// whose MPS daemon is down reports MPS impaired and does not start pending MPS tasks.
    /// Returns the reports written.
    pub async fn run_agents(&self, store: &dyn Store, now: u64) -> Result<Vec<HostReport>, RunAgentsError> {
        let state = store.load().await.map_err(RunAgentsError::Store)?;
        let previous: BTreeMap<String, HostReport> =
            store.reports().await.map_err(RunAgentsError::Store)?.into_iter().map(|r| (r.host_id.clone(), r)).collect();
        let fleet = self.read().map_err(RunAgentsError::Cloud)?;
        let mut written = Vec::new();
        for inst in fleet.instances.iter().filter(|i| i.cluster == state.cluster) {
            if inst.state != HostState::Running || inst.silent {
                continue;
            }
            let prev = previous.get(&inst.host_id);
            let mut tasks = BTreeMap::new();
            for t in state.tasks.values().filter(|t| t.host == inst.host_id) {
                let was_running = prev.and_then(|r| r.tasks.get(&t.id)) == Some(&TaskState::Running);
                let s = match t.state {
                    TaskState::Stopping | TaskState::Stopped => TaskState::Stopped,
                    TaskState::Failed => TaskState::Failed,
                    // The agent refuses to start an MPS client while the daemon is down.
                    TaskState::Pending | TaskState::Running
                        if inst.mps_down && !was_running && matches!(t.shape.gpu, TaskGpu::Mps { .. }) =>
                    {
                        TaskState::Pending
                    }
                    TaskState::Pending | TaskState::Running => TaskState::Running,
                };
                tasks.insert(t.id.clone(), s);
            }
            let report = HostReport {
                host_id: inst.host_id.clone(),
                at: now,
                mps_health: if inst.mps_down { MpsHealth::Impaired } else { MpsHealth::Healthy },
                gpus: catalogue_gpus(&inst.instance_type),
                tasks,
            };
            store.put_report(&report).await.map_err(RunAgentsError::Store)?;
            written.push(report);
        }
        Ok(written)
    }

    fn read(&self) -> Result<Fleet, CloudError> {
        let path = self.fleet_path();
        match fsutil::read_optional(&path).map_err(|source| io_err(&path, source))? {
            None => Ok(Fleet::default()),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|source| CloudError::Corrupt { path: path.display().to_string(), source }),
        }
    }

    /// Read-modify-write the fleet file under its OS lock; written only when `f` succeeds.
    fn update<T>(&self, f: impl FnOnce(&mut Fleet) -> Result<T, CloudError>) -> Result<T, CloudError> {
        let lock_path = self.dir.join(FLEET_LOCK);
        let _lock = FileLock::exclusive(&lock_path).map_err(|source| io_err(&lock_path, source))?;
        let mut fleet = self.read()?;
        let out = f(&mut fleet)?;
        let path = self.fleet_path();
        let bytes = serde_json::to_vec_pretty(&fleet)
            .map_err(|source| CloudError::Corrupt { path: path.display().to_string(), source })?;
        fsutil::write_atomic(&path, &bytes).map_err(|source| io_err(&path, source))?;
        Ok(out)
    }
}

/// The GPUs of an instance type as the catalogue describes them (none if unknown).
pub fn catalogue_gpus(instance_type: &str) -> Vec<GpuInfo> {
    catalog::lookup(instance_type)
        .map(|t| {
            (0..t.gpu_count)
                .map(|index| GpuInfo { index, model: t.gpu_model.to_string(), memory_mib: t.gpu_memory_mib })
                .collect()
        })
        .unwrap_or_default()
}

/// Deterministic instance id for a launch token: `i-local-` and 17 hex digits.
fn instance_id(cluster: &str, launch_token: &str) -> String {
    let mut h = Sha256::new();
    h.update(cluster.as_bytes());
    h.update([0]);
    h.update(launch_token.as_bytes());
    let hex = hex::encode(h.finalize());
    format!("i-local-{}", &hex[..17])
}

fn io_err(path: &Path, source: std::io::Error) -> CloudError {
    CloudError::Io { path: path.display().to_string(), source }
}

#[async_trait]
impl Cloud for LocalCloud {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn list_hosts(&self, cluster: &str) -> Result<Vec<CloudHost>, CloudError> {
        Ok(self.read()?.instances.iter().filter(|i| i.cluster == cluster).map(LocalInstance::to_cloud_host).collect())
    }

    async fn launch(&self, req: &LaunchRequest<'_>) -> Result<CloudHost, CloudError> {
        let host = req.host;
        if host.launch_token.is_empty() {
            return Err(CloudError::InvalidRequest { host_id: host.id.clone(), message: "empty launch token".into() });
        }
        if catalog::lookup(&host.instance_type).is_none() {
            let close = catalog::close_matches(&host.instance_type, 3);
            return Err(CloudError::UnknownInstanceType {
                instance_type: host.instance_type.clone(),
                hint: if close.is_empty() { String::new() } else { format!("; did you mean {}?", close.join(", ")) },
            });
        }
        self.update(|fleet| {
            if let Some(existing) =
                fleet.instances.iter().find(|i| i.cluster == req.cluster && i.launch_token == host.launch_token)
            {
                tracing::debug!(host = %host.id, instance = %existing.instance_id, "launch token already used: returning its instance");
                return Ok(existing.to_cloud_host());
            }
            let zone = match &host.zone {
                Some(z) => z.clone(),
                None => {
                    let z = ZONES[fleet.next_zone % ZONES.len()].to_string();
                    fleet.next_zone = (fleet.next_zone + 1) % ZONES.len();
                    z
                }
            };
            let inst = LocalInstance {
                instance_id: instance_id(req.cluster, &host.launch_token),
                cluster: req.cluster.to_string(),
                host_id: host.id.clone(),
                capacity_provider: host.capacity_provider.clone(),
                instance_type: host.instance_type.clone(),
                zone,
                // The simulated host boots instantly.
                state: HostState::Running,
                launch_token: host.launch_token.clone(),
                mps_down: false,
                silent: false,
            };
            tracing::info!(host = %inst.host_id, instance = %inst.instance_id, zone = %inst.zone, "launched local host");
            fleet.instances.push(inst.clone());
            Ok(inst.to_cloud_host())
        })
    }

    async fn terminate(&self, cluster: &str, instance_id: &str) -> Result<(), CloudError> {
        self.update(|fleet| {
            match fleet.instances.iter_mut().find(|i| i.instance_id == instance_id) {
                None => Ok(()),
                Some(i) if i.cluster != cluster => Err(CloudError::InvalidRequest {
                    host_id: i.host_id.clone(),
                    message: format!("instance {instance_id} belongs to cluster {:?}, not {cluster:?}", i.cluster),
                }),
                Some(i) => {
                    if i.state != HostState::Terminated {
                        tracing::info!(host = %i.host_id, instance = %i.instance_id, "terminated local host");
                    }
                    i.state = HostState::Terminated;
                    Ok(())
                }
            }
        })
    }
}
