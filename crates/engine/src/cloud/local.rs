//! The `local` cloud: the embedded default, a simulated fleet kept in
//! `<dir>/local-fleet.json` (replaced atomically, changed under an OS lock on
//! `<dir>/local-fleet.lock`). Hosts are shaped by the GPU catalogue; launches are
//! idempotent by launch token; faults can be injected per host (the MPS daemon down,
//! the agent silent, a GPU lost or failing, the container runtime down), for the stand-ins of the agents that run on the simulated hosts
//! (the host agent's own loop, `gpushare_agent::SimFleet`, wired in by the backends
//! factory).

use super::{check_ownership, Cloud, CloudError, LaunchRequest, Ownership};
use crate::fsutil::{self, FileLock};
use async_trait::async_trait;
use gpushare_core::catalog;
use gpushare_core::facts::{CloudFacts, PoolFacts, SubnetFact};
use gpushare_core::model::{CapacityProvider, CloudHost, GpuInfo, Host, HostState};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

const FLEET: &str = "local-fleet.json";
const FLEET_LOCK: &str = "local-fleet.lock";
/// Availability zones of the simulated region (its subnets' zones in the facts).
pub const ZONES: [&str; 3] = ["local-1a", "local-1b", "local-1c"];
/// The image id the simulated fleet's hosts boot when their pool names none.
pub const LOCAL_IMAGE: &str = "ami-local-gpu";

/// A fault to inject into a simulated host (`gpushare debug fault HOST mps-down`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The MPS control daemon is down: the agent reports MPS impaired and starts no MPS task.
    MpsDown,
    /// The agent stops reporting (no heartbeat).
    Silent,
    /// GPU `gpu` is lost (NVML answers GPU_IS_LOST): the host's `gpus` check is impaired.
    GpuLost { gpu: u32 },
    /// GPU `gpu` had Xid event `code`.
    Xid { gpu: u32, code: u64 },
    /// GPU `gpu` has an uncorrectable ECC error.
    Ecc { gpu: u32 },
    /// GPU `gpu` has pages pending retirement.
    PendingRetirement { gpu: u32 },
    /// A row remapping of GPU `gpu` failed.
    RowRemapFailure { gpu: u32 },
    /// The container runtime does not answer: `container_runtime` is impaired.
    RuntimeDown,
    /// Remove every injected fault.
    Clear,
}

impl std::str::FromStr for Fault {
    type Err = String;
    /// `mps-down`, `silent`, `runtime-down`, `clear`, or a GPU fault with its GPU
    /// index: `gpu-lost:1`, `xid:1:79`, `ecc:1`, `pending-retirement:1`,
    /// `row-remap-failure:1` (index 0 when left out; Xid 79 when left out).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.split(':');
        let name = parts.next().unwrap_or_default();
        let mut num = |what: &str, default: u64| -> Result<u64, String> {
            match parts.next() {
                None => Ok(default),
                Some(v) => v
                    .parse()
                    .map_err(|_| format!("fault {s:?}: {what} {v:?} is not a number")),
            }
        };
        let gpu =
            |v: u64| u32::try_from(v).map_err(|_| format!("fault {s:?}: GPU index too large"));
        Ok(match name {
            "mps-down" => Fault::MpsDown,
            "silent" => Fault::Silent,
            "runtime-down" => Fault::RuntimeDown,
            "clear" => Fault::Clear,
            "gpu-lost" => Fault::GpuLost { gpu: gpu(num("GPU index", 0)?)? },
            "xid" => {
                let g = gpu(num("GPU index", 0)?)?;
                Fault::Xid { gpu: g, code: num("Xid code", 79)? }
            }
            "ecc" => Fault::Ecc { gpu: gpu(num("GPU index", 0)?)? },
            "pending-retirement" => Fault::PendingRetirement { gpu: gpu(num("GPU index", 0)?)? },
            "row-remap-failure" => Fault::RowRemapFailure { gpu: gpu(num("GPU index", 0)?)? },
            other => {
                return Err(format!(
                    "unknown fault {other:?}: expected mps-down, silent, runtime-down, gpu-lost, xid, ecc, pending-retirement, row-remap-failure or clear"
                ))
            }
        })
    }
}

/// The injected health faults of one simulated GPU (what the host's agent reads
/// as its NVML facts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuFault {
    pub lost: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub xids: Vec<u64>,
    pub ecc_uncorrectable: u64,
    pub retired_pages_pending: bool,
    pub row_remap_failed: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
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
    /// The launching store's identity (`None`: launched before store identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_id: Option<String>,
    #[serde(default)]
    pub mps_down: bool,
    /// The host's agent does not run (no report, no heartbeat).
    #[serde(default)]
    pub silent: bool,
    /// The host's boot environment when it was launched with a join grant (the
    /// controller's address, its single-use join token, the CA hash, its host id, as
    /// env-file lines): what a real host finds in its user data. `gpushare debug
    /// user-data HOST` prints it, for whoever boots the host's agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// Injected GPU faults, by GPU index.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_faults: BTreeMap<u32, GpuFault>,
    /// The container runtime does not answer.
    #[serde(default, skip_serializing_if = "is_false")]
    pub runtime_down: bool,
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
            store_id: self.store_id.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Fleet {
    /// Zones that refuse launches for lack of capacity (a simulated shortage).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    full_zones: BTreeSet<String>,
    /// Images whose hosts never boot (a simulated bad image): launched silent.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    dead_images: BTreeSet<String>,
    #[serde(default)]
    instances: Vec<LocalInstance>,
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
        fsutil::remove_stale_temps(&dir);
        Ok(LocalCloud { dir })
    }

    pub fn fleet_path(&self) -> PathBuf {
        self.dir.join(FLEET)
    }

    /// Every instance of every cluster, in launch order (terminated ones included).
    pub fn instances(&self) -> Result<Vec<LocalInstance>, CloudError> {
        Ok(self.read()?.instances)
    }

    /// Simulate a capacity shortage: while `full`, launches into `zone` are refused
    /// with [`CloudError::InsufficientCapacity`], as EC2 answers
    /// InsufficientInstanceCapacity.
    pub fn set_zone_full(&self, zone: &str, full: bool) -> Result<(), CloudError> {
        self.update(|fleet| {
            if full {
                fleet.full_zones.insert(zone.to_string());
            } else {
                fleet.full_zones.remove(zone);
            }
            Ok(())
        })
    }

    /// Simulate a bad image: while `dead`, hosts launched with `image` never boot
    /// their agent (they are launched silent: no report, no heartbeat).
    pub fn set_image_dead(&self, image: &str, dead: bool) -> Result<(), CloudError> {
        self.update(|fleet| {
            if dead {
                fleet.dead_images.insert(image.to_string());
            } else {
                fleet.dead_images.remove(image);
            }
            Ok(())
        })
    }

    /// Inject (or clear) a fault on the host named by its gpushare host id or its instance id.
    pub fn inject_fault(
        &self,
        cluster: &str,
        host: &str,
        fault: Fault,
    ) -> Result<LocalInstance, CloudError> {
        self.update(|fleet| {
            let inst = fleet
                .instances
                .iter_mut()
                .find(|i| i.cluster == cluster && i.state != HostState::Terminated && (i.host_id == host || i.instance_id == host))
                .ok_or_else(|| CloudError::UnknownHost { cluster: cluster.to_string(), host: host.to_string() })?;
            match fault {
                Fault::MpsDown => inst.mps_down = true,
                Fault::Silent => inst.silent = true,
                Fault::RuntimeDown => inst.runtime_down = true,
                Fault::GpuLost { gpu } => inst.gpu_faults.entry(gpu).or_default().lost = true,
                Fault::Xid { gpu, code } => inst.gpu_faults.entry(gpu).or_default().xids.push(code),
                Fault::Ecc { gpu } => inst.gpu_faults.entry(gpu).or_default().ecc_uncorrectable += 1,
                Fault::PendingRetirement { gpu } => {
                    inst.gpu_faults.entry(gpu).or_default().retired_pages_pending = true
                }
                Fault::RowRemapFailure { gpu } => {
                    inst.gpu_faults.entry(gpu).or_default().row_remap_failed = true
                }
                Fault::Clear => {
                    inst.mps_down = false;
                    inst.silent = false;
                    inst.runtime_down = false;
                    inst.gpu_faults.clear();
                }
            }
            tracing::info!(host = %inst.host_id, instance = %inst.instance_id, ?fault, "injected fault");
            Ok(inst.clone())
        })
    }

    /// The boot environment a host of `cluster` (by host id or instance id) was
    /// launched with ([`LocalInstance::user_data`]); `None` when it was launched
    /// without a join grant (no `controller_address`).
    pub fn user_data(&self, cluster: &str, host: &str) -> Result<Option<String>, CloudError> {
        let fleet = self.read()?;
        fleet
            .instances
            .iter()
            .find(|i| {
                i.cluster == cluster
                    && i.state != HostState::Terminated
                    && (i.host_id == host || i.instance_id == host)
            })
            .map(|i| i.user_data.clone())
            .ok_or_else(|| CloudError::UnknownHost {
                cluster: cluster.to_string(),
                host: host.to_string(),
            })
    }

    /// Run `f` with a clone of this fleet on tokio's blocking threads
    /// ([`fsutil::off_thread`]): the [`Cloud`] impl reads and writes the fleet file so.
    async fn off_thread<T: Send + 'static>(
        &self,
        f: impl FnOnce(&LocalCloud) -> Result<T, CloudError> + Send + 'static,
    ) -> Result<T, CloudError> {
        let this = self.clone();
        fsutil::off_thread(move || f(&this))
            .await
            .map_err(|source| io_err(&self.dir, source))?
    }

    fn read(&self) -> Result<Fleet, CloudError> {
        let path = self.fleet_path();
        match fsutil::read_optional(&path).map_err(|source| io_err(&path, source))? {
            None => Ok(Fleet::default()),
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|source| CloudError::Corrupt {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// Read-modify-write the fleet file under its OS lock; written only when `f` succeeds.
    fn update<T>(
        &self,
        f: impl FnOnce(&mut Fleet) -> Result<T, CloudError>,
    ) -> Result<T, CloudError> {
        let lock_path = self.dir.join(FLEET_LOCK);
        let _lock = FileLock::exclusive(&lock_path).map_err(|source| io_err(&lock_path, source))?;
        let mut fleet = self.read()?;
        let before = fleet.clone();
        let out = f(&mut fleet)?;
        if fleet == before {
            return Ok(out);
        }
        let path = self.fleet_path();
        let bytes = serde_json::to_vec_pretty(&fleet).map_err(|source| CloudError::Corrupt {
            path: path.display().to_string(),
            source,
        })?;
        fsutil::write_atomic(&path, &bytes).map_err(|source| io_err(&path, source))?;
        Ok(out)
    }
}

/// The GPUs of an instance type as the catalogue describes them (none if unknown).
pub fn catalogue_gpus(instance_type: &str) -> Vec<GpuInfo> {
    catalog::lookup(instance_type)
        .map(|t| {
            (0..t.gpu_count)
                .map(|index| GpuInfo::new(index, t.gpu_model, t.gpu_memory_mib))
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

/// What the simulated cloud checks before launching: a launch token, a zone fixed by
/// the plan and a known instance type.
fn validate(req: &LaunchRequest<'_>) -> Result<(), CloudError> {
    let host = req.host;
    if host.launch_token.is_empty() {
        return Err(CloudError::InvalidRequest {
            host_id: host.id.clone(),
            message: "empty launch token".into(),
        });
    }
    if host.zone.is_none() {
        return Err(CloudError::InvalidRequest {
            host_id: host.id.clone(),
            message: "the plan names no zone: the local fleet launches only where the plan puts a host (plan again)".into(),
        });
    }
    if let Err(e) = catalog::require(&host.instance_type) {
        return Err(CloudError::UnknownInstanceType {
            hint: e.did_you_mean(),
            instance_type: e.name,
        });
    }
    Ok(())
}

/// A launch request as the fleet file's update needs it (owned: it runs on a
/// blocking thread).
struct OwnedLaunch {
    cluster: String,
    store_id: String,
    host: Host,
    pool_image: Option<String>,
    user_data: Option<String>,
}

impl OwnedLaunch {
    fn of(req: &LaunchRequest<'_>) -> Self {
        OwnedLaunch {
            cluster: req.cluster.to_string(),
            store_id: req.store_id.to_string(),
            host: req.host.clone(),
            pool_image: req.pool.image.clone(),
            user_data: req.join.map(|j| j.env_lines(&req.host.id)),
        }
    }
}

/// Launch each of `wave` in `fleet`, in order, up to and including the first error.
fn launch_wave(fleet: &mut Fleet, wave: &[OwnedLaunch]) -> Vec<Result<CloudHost, CloudError>> {
    let mut by_token: HashMap<(String, String), usize> = fleet
        .instances
        .iter()
        .enumerate()
        .map(|(n, i)| ((i.cluster.clone(), i.launch_token.clone()), n))
        .collect();
    let mut out = Vec::with_capacity(wave.len());
    for l in wave {
        let got = launch_one(fleet, &mut by_token, l);
        let failed = got.is_err();
        out.push(got);
        if failed {
            break;
        }
    }
    out
}

fn launch_one(
    fleet: &mut Fleet,
    by_token: &mut HashMap<(String, String), usize>,
    l: &OwnedLaunch,
) -> Result<CloudHost, CloudError> {
    let host = &l.host;
    let key = (l.cluster.clone(), host.launch_token.clone());
    if let Some(existing) = by_token.get(&key).map(|&n| &fleet.instances[n]) {
        if let Some(owner) = existing.store_id.as_deref().filter(|s| *s != l.store_id) {
            return Err(CloudError::ForeignInstance {
                instance_id: existing.instance_id.clone(),
                owner: owner.to_string(),
                action: "adopt",
            });
        }
        tracing::debug!(host = %host.id, instance = %existing.instance_id, "launch token already used: returning its instance");
        return Ok(existing.to_cloud_host());
    }
    if let Some(z) = host.zone.as_ref().filter(|z| fleet.full_zones.contains(*z)) {
        tracing::info!(host = %host.id, zone = %z, "no capacity in the zone (simulated shortage)");
        return Err(CloudError::InsufficientCapacity {
            pool: host.capacity_provider.clone(),
            instance_type: host.instance_type.clone(),
            place: Some(host.launch_place()),
        });
    }
    // Checked by `validate`: the plan names the zone.
    let zone = host.zone.clone().unwrap_or_default();
    let inst = LocalInstance {
        instance_id: instance_id(&l.cluster, &host.launch_token),
        cluster: l.cluster.clone(),
        host_id: host.id.clone(),
        capacity_provider: host.capacity_provider.clone(),
        instance_type: host.instance_type.clone(),
        zone,
        // The simulated host boots instantly.
        state: HostState::Running,
        launch_token: host.launch_token.clone(),
        store_id: Some(l.store_id.clone()).filter(|s| !s.is_empty()),
        mps_down: false,
        silent: host
            .image_id
            .as_ref()
            .or(l.pool_image.as_ref())
            .is_some_and(|i| fleet.dead_images.contains(i)),
        user_data: l.user_data.clone(),
        gpu_faults: BTreeMap::new(),
        runtime_down: false,
    };
    tracing::info!(host = %inst.host_id, instance = %inst.instance_id, zone = %inst.zone, "launched local host");
    let got = inst.to_cloud_host();
    by_token.insert(key, fleet.instances.len());
    fleet.instances.push(inst);
    Ok(got)
}

fn io_err(path: &Path, source: std::io::Error) -> CloudError {
    CloudError::Io {
        path: path.display().to_string(),
        source,
    }
}

#[async_trait]
impl Cloud for LocalCloud {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn list_hosts(&self, cluster: &str) -> Result<Vec<CloudHost>, CloudError> {
        let fleet = self.off_thread(LocalCloud::read).await?;
        Ok(fleet
            .instances
            .iter()
            .filter(|i| i.cluster == cluster)
            .map(LocalInstance::to_cloud_host)
            .collect())
    }

    async fn preflight(&self, requests: &[LaunchRequest<'_>]) -> Result<(), CloudError> {
        requests.iter().try_for_each(validate)
    }

    /// The simulated region's facts: the pool's image (or a stand-in id), and its
    /// subnets spread over the zones local-1a, -1b and -1c in order (three subnets
    /// `subnet-local-1a`... when the pool names none).
    async fn gather(
        &self,
        pools: &BTreeMap<String, CapacityProvider>,
    ) -> Result<CloudFacts, CloudError> {
        let facts = pools
            .iter()
            .map(|(name, pool)| {
                let subnets = if pool.subnets.is_empty() {
                    ZONES
                        .iter()
                        .map(|z| SubnetFact {
                            id: format!("subnet-{z}"),
                            zone: (*z).to_string(),
                        })
                        .collect()
                } else {
                    pool.subnets
                        .iter()
                        .zip(ZONES.iter().cycle())
                        .map(|(s, z)| SubnetFact {
                            id: s.clone(),
                            zone: (*z).to_string(),
                        })
                        .collect()
                };
                let pf = PoolFacts {
                    // The catalogue is the simulated region's own description.
                    instance: None,
                    root_device: None,
                    image_id: pool
                        .image
                        .clone()
                        .unwrap_or_else(|| LOCAL_IMAGE.to_string()),
                    subnets,
                };
                (name.clone(), pf)
            })
            .collect();
        Ok(CloudFacts {
            pools: facts,
            prices: None,
        })
    }

    async fn launch(&self, req: &LaunchRequest<'_>) -> Result<CloudHost, CloudError> {
        self.launch_many(std::slice::from_ref(req))
            .await
            .pop()
            .unwrap_or_else(|| {
                Err(CloudError::InvalidRequest {
                    host_id: req.host.id.clone(),
                    message: "the launch returned no result".into(),
                })
            })
    }

    /// The whole wave in one read-modify-write of the fleet file (a fleet of
    /// thousands of hosts is not rewritten once per host).
    async fn launch_many(&self, reqs: &[LaunchRequest<'_>]) -> Vec<Result<CloudHost, CloudError>> {
        let mut wave = Vec::with_capacity(reqs.len());
        let mut invalid = None;
        for req in reqs {
            if let Err(e) = validate(req) {
                invalid = Some(e);
                break;
            }
            wave.push(OwnedLaunch::of(req));
        }
        let mut out = if wave.is_empty() {
            Vec::new()
        } else {
            match self
                .off_thread(move |cloud| cloud.update(|fleet| Ok(launch_wave(fleet, &wave))))
                .await
            {
                Ok(out) => out,
                // The fleet file could not be read or written: nothing launched.
                Err(e) => return vec![Err(e)],
            }
        };
        if !out.last().is_some_and(Result::is_err) {
            out.extend(invalid.map(Err));
        }
        out
    }

    async fn claim(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError> {
        let (cluster, store_id, instance_id) = (
            cluster.to_string(),
            store_id.to_string(),
            instance_id.to_string(),
        );
        self.off_thread(move |cloud| {
            cloud.update(|fleet| {
                let (cluster, store_id, instance_id) =
                    (cluster.as_str(), store_id.as_str(), instance_id.as_str());
                let Some(i) = fleet
                    .instances
                    .iter_mut()
                    .find(|i| i.instance_id == instance_id)
                else {
                    return Ok(());
                };
                let tags = (Some(i.cluster.as_str()), i.store_id.as_deref());
                if check_ownership(instance_id, tags, (cluster, store_id), "adopt")?
                    == Ownership::Unclaimed
                {
                    i.store_id = Some(store_id.to_string());
                }
                Ok(())
            })
        })
        .await
    }

    async fn terminate(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError> {
        let (cluster, store_id, instance_id) = (
            cluster.to_string(),
            store_id.to_string(),
            instance_id.to_string(),
        );
        self.off_thread(move |cloud| cloud.update(|fleet| {
            let (cluster, store_id, instance_id) =
                    (cluster.as_str(), store_id.as_str(), instance_id.as_str());
            let Some(i) = fleet.instances.iter_mut().find(|i| i.instance_id == instance_id) else {
                return Ok(());
            };
            let tags = (Some(i.cluster.as_str()), i.store_id.as_deref());
            check_ownership(instance_id, tags, (cluster, store_id), "terminate")?;
            if i.state != HostState::Terminated {
                tracing::info!(host = %i.host_id, instance = %i.instance_id, "terminated local host");
            }
            i.state = HostState::Terminated;
            Ok(())
        }))
        .await
    }
}

#[cfg(test)]
mod tests;
