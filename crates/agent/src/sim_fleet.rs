//! The agents of the local simulated fleet: the host agent's own loop ([`Agent`]) run
//! in-process, one pass per simulated host per round, with stand-ins where a laptop
//! has no GPU: the catalogue's GPUs as inventory, a simulated MPS daemon that
//! `gpushare debug fault HOST mps-down` takes down, and a simulated runtime in which
//! tasks start at once and nothing runs. A host whose agent is made silent does not
//! report. Injected GPU faults (`gpu-lost`, `xid`, `ecc`, `pending-retirement`,
//! `row-remap-failure`) become its inventory's health facts, `runtime-down` a runtime
//! that does not answer. Nothing of a simulated host outlives a round but its report, so each
//! round's agent carries on from the host's last report (MPS verdict and failures in
//! a row, task states; the tasks it reported running are what its runtime runs).

use crate::agent::{revision_of, Agent, AgentConfig, AgentError};
use crate::health::{GpuFacts, GpuScan};
use crate::inventory::StaticScan;
use crate::mps::{MpsGate, MpsProbe, SimMps};
use crate::runtime::SimRuntime;
use async_trait::async_trait;
use gpushare_core::model::{HostReport, HostState, StoreState, TaskState};
use gpushare_engine::agents::HostAgents;
use gpushare_engine::cloud::{catalogue_gpus, CloudError, LocalCloud, LocalInstance};
use gpushare_engine::store::{Store, StoreError};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Why a round of the simulated fleet's agents failed.
#[derive(Debug, thiserror::Error)]
pub enum SimFleetError {
    #[error("reading the local fleet")]
    Fleet(#[source] CloudError),
    #[error("reading the state or the reports")]
    Store(#[source] StoreError),
    #[error("the agent of simulated host {host}")]
    Agent {
        host: String,
        #[source]
        source: AgentError,
    },
}

/// The in-process agents of a [`LocalCloud`].
pub struct SimFleet {
    cloud: Arc<LocalCloud>,
}

impl SimFleet {
    pub fn new(cloud: Arc<LocalCloud>) -> SimFleet {
        SimFleet { cloud }
    }

    /// One round: every running, non-silent simulated host of the store's cluster
    /// runs one agent pass at `now`; their reports are written together at the end
    /// (one batch: [`Store::put_reports`]). Returns the hosts that reported.
    pub async fn run_round(
        &self,
        store: &Arc<dyn Store>,
        now: u64,
    ) -> Result<Vec<String>, SimFleetError> {
        let state = store.load_shared().await.map_err(SimFleetError::Store)?;
        let last: BTreeMap<String, HostReport> = store
            .reports()
            .await
            .map_err(SimFleetError::Store)?
            .into_iter()
            .map(|r| (r.host_id.clone(), r))
            .collect();
        let instances = self.cloud.instances().map_err(SimFleetError::Fleet)?;
        // Each agent reads its host's share, split once (not every task per host).
        let mut shares = state.host_shares();
        let reports = Arc::new(std::sync::Mutex::new(Vec::new()));
        let location = store.location();
        let mut reported = Vec::new();
        let mut failed = None;
        for inst in instances.iter().filter(|i| {
            i.cluster == state.cluster
                && i.state == HostState::Running
                && !i.silent
                && state.hosts.contains_key(&i.host_id)
        }) {
            let link = Arc::new(crate::link::ShareLink {
                share: Arc::new(shares.remove(&inst.host_id).unwrap_or_default()),
                location: location.clone(),
                reports: Arc::clone(&reports),
            });
            let mut agent = simulated_agent(&state, inst, last.get(&inst.host_id), link, now);
            match agent.pass().await {
                Ok(_) => {}
                // Its report says so (container_runtime impaired); the round goes on.
                Err(AgentError::Runtime { .. }) if inst.runtime_down => {
                    tracing::info!(host = %inst.host_id, "simulated runtime down: reported impaired");
                }
                Err(source) => {
                    failed = Some(SimFleetError::Agent {
                        host: inst.host_id.clone(),
                        source,
                    });
                    break;
                }
            }
            reported.push(inst.host_id.clone());
        }
        // The reports of the hosts that ran, even when one failed (as each was written
        // at the end of its own pass before).
        let batch = std::mem::take(&mut *gpushare_core::util::lock(&reports));
        store
            .put_reports(&batch)
            .await
            .map_err(SimFleetError::Store)?;
        match failed {
            Some(e) => Err(e),
            None => Ok(reported),
        }
    }
}

/// The agent of simulated host `inst` for one pass: its simulated runtime runs what
/// its last report said was running, its MPS daemon and GPUs are the simulated ones
/// with the injected faults, and it carries on from that report.
fn simulated_agent(
    state: &StoreState,
    inst: &LocalInstance,
    last: Option<&HostReport>,
    link: Arc<crate::link::ShareLink>,
    now: u64,
) -> Agent {
    let before = running_before(state, last);
    let ends = simulated_run_ends(state, &before);
    let runtime = Arc::new(SimRuntime::running(before));
    for (task, container) in ends {
        runtime.exit(&task, &container, 0);
    }
    runtime.set_down(inst.runtime_down);
    let mut config = AgentConfig::new(&state.cluster, &inst.host_id);
    config.mps = Some(MpsProbe::simulated(SimMps::new(!inst.mps_down)));
    config.address = Some(simulated_address(&inst.host_id));
    // The simulated daemon answers at once: no pause between the gate's probes.
    config.gate = MpsGate {
        attempts: 3,
        within: Duration::from_millis(3),
    };
    let inventory = Arc::new(StaticScan(gpu_scan(inst)));
    let agent = Agent::with_link(config, link, runtime, inventory).with_clock(move || now);
    match last {
        Some(r) => agent.resume(r),
        None => agent,
    }
}

/// The simulated host's GPUs as its NVML would read them: the catalogue's GPUs of
/// its instance type, with the injected GPU faults as facts (a lost GPU is not listed).
fn gpu_scan(inst: &LocalInstance) -> GpuScan {
    let facts: Vec<GpuFacts> = inst
        .gpu_faults
        .iter()
        .map(|(index, f)| GpuFacts {
            index: *index,
            lost: f.lost,
            xids: f.xids.clone(),
            ecc_uncorrectable: f.ecc_uncorrectable,
            retired_pages_pending: f.retired_pages_pending,
            row_remap_failed: f.row_remap_failed,
            mps_server_fault: None,
        })
        .collect();
    let lost = |i: u32| facts.iter().any(|f| f.index == i && f.lost);
    GpuScan {
        gpus: catalogue_gpus(&inst.instance_type)
            .into_iter()
            .filter(|g| !lost(g.index))
            .collect(),
        facts,
        processes: vec![],
    }
}

/// What the simulated host ran at the end of the last round: the tasks its report
/// said were running that are still assigned to it, with their containers.
fn running_before(
    state: &StoreState,
    last: Option<&HostReport>,
) -> Vec<(String, Vec<(String, bool)>)> {
    let Some(last) = last else { return vec![] };
    last.tasks
        .iter()
        .filter(|(_, s)| **s == TaskState::Running)
        .filter_map(|(id, _)| {
            let task = state.tasks.get(id)?;
            let rev = revision_of(state, task).ok()?;
            let containers = rev
                .spec
                .containers
                .iter()
                .map(|c| (c.name.clone(), c.essential))
                .collect();
            Some((id.clone(), containers))
        })
        .collect()
}

/// The job runs among `running` (what the host ran at the end of the last round)
/// and the essential container that ends each: nothing runs on a simulated host, so
/// a job's run succeeds (exit 0) on the round after the one that started it, and a
/// job on the local fleet completes (docs/jobs.md). `expected_run_seconds` only
/// prices the job.
fn simulated_run_ends(
    state: &StoreState,
    running: &[(String, Vec<(String, bool)>)],
) -> Vec<(String, String)> {
    running
        .iter()
        .filter(|(id, _)| state.tasks.get(id).is_some_and(|t| t.job.is_some()))
        .filter_map(|(id, containers)| {
            let (name, _) = containers.iter().find(|(_, essential)| *essential)?;
            Some((id.clone(), name.clone()))
        })
        .collect()
}

#[async_trait]
impl HostAgents for SimFleet {
    async fn round(
        &self,
        store: &Arc<dyn Store>,
        now: u64,
    ) -> Result<Vec<String>, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.run_round(store, now).await?)
    }
}

/// A simulated host's address, as a cloud would give a private one: 10.x.y.z made
/// from its host id (deterministic). Nothing listens there: the local fleet's tasks
/// are simulated; it gives `gpushare endpoints` on the quickstart something to show.
pub fn simulated_address(host_id: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(host_id.as_bytes());
    format!("10.{}.{}.{}", d[0], d[1], d[2].max(1))
}
