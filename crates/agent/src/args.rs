//! `gpushare agent`'s flags and the function that runs an agent from them.

use crate::agent::{Agent, AgentConfig, AgentError};
use crate::health::DeepCheck;
use crate::inventory::{FileInventory, Inventory, NvmlInventory};
use crate::mps::MpsProbe;
use crate::runtime::{DockerOptions, DockerRuntime, ProcessRuntime, Runtime};
use gpushare_engine::store::Store;
use std::future::Future;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Which runtime runs the tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    Docker,
    Process,
}

impl FromStr for RuntimeKind {
    type Err = AgentError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "docker" => Ok(RuntimeKind::Docker),
            "process" => Ok(RuntimeKind::Process),
            other => Err(AgentError::UnknownRuntime {
                name: other.to_string(),
            }),
        }
    }
}

fn parse_runtime(s: &str) -> Result<RuntimeKind, String> {
    s.parse().map_err(|e: AgentError| e.to_string())
}

/// Run this host's placed tasks and report the host, through the controller's agent
/// API (--server) or to the store directly (--store).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The controller's agent API (e.g. https://controller:7443): the host reads only
    /// its own assignment from it, with its own certificate (docs/agent.md).
    #[arg(
        long,
        env = "GPUSHARE_SERVER",
        value_name = "URL",
        conflicts_with = "store",
        requires = "ca_hash"
    )]
    pub server: Option<String>,
    /// First boot: the join token (`gpushare token create`), exchanged for the host's
    /// certificate, kept in --state-dir; later starts use that certificate.
    #[arg(
        long,
        env = "GPUSHARE_JOIN_TOKEN",
        value_name = "TOKEN",
        requires = "server",
        hide_env_values = true
    )]
    pub join: Option<String>,
    /// The cluster CA the server must present: sha256:<hex> (as `gpushare token create` prints it).
    #[arg(
        long,
        env = "GPUSHARE_CA_HASH",
        value_name = "sha256:HEX",
        requires = "server"
    )]
    pub ca_hash: Option<String>,
    /// The store holding the assignment (e.g. file:///srv/fleet/.gpushare).
    #[arg(
        long,
        env = "GPUSHARE_STORE",
        value_name = "URL",
        required_unless_present = "server"
    )]
    pub store: Option<String>,
    /// The cluster this host belongs to (with --server: checked against the controller's).
    #[arg(long, env = "GPUSHARE_CLUSTER", required_unless_present = "server")]
    pub cluster: Option<String>,
    /// This host's gpushare id (the planner's, e.g. h-l4-3f9a2c); with --server, the
    /// default is the host id the join token is bound to.
    #[arg(
        long,
        env = "GPUSHARE_HOST_ID",
        value_name = "ID",
        required_unless_present = "server"
    )]
    pub host_id: Option<String>,
    /// Joining a registered pool whose instance_type is a filter: the instance type
    /// this host is (e.g. g5.xlarge).
    #[arg(
        long,
        env = "GPUSHARE_INSTANCE_TYPE",
        value_name = "TYPE",
        requires = "join"
    )]
    pub instance_type: Option<String>,
    /// What runs the tasks: docker (containers) or process (the containers' commands as processes).
    #[arg(long, default_value = "docker", value_parser = parse_runtime)]
    pub runtime: RuntimeKind,
    /// Seconds between passes.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub interval: u64,
    /// Where the process runtime keeps its pid and status files.
    #[arg(long, default_value = "/var/lib/gpushare-agent", value_name = "DIR")]
    pub state_dir: PathBuf,
    /// The MPS control program (a path, or a name looked up on PATH).
    #[arg(
        long,
        default_value = "nvidia-cuda-mps-control",
        value_name = "PROGRAM"
    )]
    pub mps_control: String,
    /// The MPS daemon's pipe directory.
    #[arg(
        long,
        env = "CUDA_MPS_PIPE_DIRECTORY",
        default_value = "/run/gpushare-mps/pipe",
        value_name = "DIR"
    )]
    pub mps_pipe_dir: PathBuf,
    /// Run every MPS container as this user id (the pool's `mps { user }`): one user
    /// per MPS server; a container declaring another user is refused.
    #[arg(long, env = "GPUSHARE_MPS_USER", value_name = "UID")]
    pub mps_user: Option<u32>,
    /// A tiny CUDA program run on each GPU as an MPS client every pass
    /// (`CUDA_VISIBLE_DEVICES` set to that GPU): one on which it exits non-zero 3
    /// passes in a row is impaired (its MPS server refuses clients); a hang is not
    /// counted. None ships with gpushare: a program that
    /// creates a context and exits 0 (docs/agent.md).
    #[arg(long, value_name = "PROGRAM")]
    pub mps_client_probe: Option<String>,
    /// Seconds one MPS probe may take before the control program is killed.
    #[arg(long, default_value_t = 3, value_name = "SECS")]
    pub mps_timeout: u64,
    /// This host runs no MPS daemon: report MPS as disabled and start no MPS task.
    #[arg(long)]
    pub no_mps: bool,
    /// Read the GPUs from this JSON file (a list of {index, model, memory_mib, uuid,
    /// health?}) instead of NVML; `health` stands in for NVML's health facts (lost,
    /// xids, ecc_uncorrectable, retired_pages_pending, row_remap_failed).
    #[arg(long, value_name = "FILE")]
    pub inventory_file: Option<PathBuf>,
    /// Seconds between SIGTERM and SIGKILL when stopping a task.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub stop_grace: u64,
    /// Seconds before the first restart of a failed task (doubling per failure, up to 5 min).
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub restart_backoff: u64,
    /// Docker network mode of the containers (default: the engine's bridge).
    #[arg(long, value_name = "MODE")]
    pub docker_network: Option<String>,
    /// Also request the GPUs from the NVIDIA container runtime (a DeviceRequest by UUID).
    #[arg(long)]
    pub docker_gpu_request: bool,
    /// The address clients reach this host's published task ports at, reported to
    /// the controller for `gpushare endpoints` (default: the address this host
    /// reaches the controller from).
    #[arg(long, env = "GPUSHARE_HOST_ADDRESS", value_name = "ADDR")]
    pub address: Option<String>,
    /// Watch EC2's instance metadata service at this URL (http://HOST[:PORT]; on EC2
    /// http://169.254.169.254, as the user data of launched hosts sets it) for Spot
    /// interruption notices and scheduled events, and report them: the planner then
    /// drains the host at once. Not watched without it.
    #[arg(long, env = "GPUSHARE_IMDS_URL", value_name = "URL")]
    pub imds_url: Option<String>,
    /// Publish task ports on this host address only (default: every address).
    #[arg(long, env = "GPUSHARE_PUBLISH_ADDRESS", value_name = "ADDR")]
    pub publish_address: Option<String>,
    /// Never pull images; an image missing on the host fails its task.
    #[arg(long)]
    pub no_pull: bool,
    /// Run one pass and exit (status 1 if it failed).
    #[arg(long)]
    pub once: bool,
    /// Run the deep GPU diagnostic (`dcgmi diag -r 1`) once, before any task starts
    /// (the pool's `deep_check`); its verdict is kept in the state directory, so a
    /// restarted agent does not run it again.
    #[arg(long)]
    pub deep_check: bool,
    /// The deep diagnostic's program (given `diag -r 1`).
    #[arg(long, default_value = "dcgmi", value_name = "PROGRAM")]
    pub deep_check_program: PathBuf,
}

impl Args {
    /// The agent's settings for host `host_id` of `cluster`.
    pub fn config_for(&self, cluster: &str, host_id: &str) -> AgentConfig {
        let mut c = AgentConfig::new(cluster, host_id);
        if !self.no_mps {
            let mut p = MpsProbe::new(&self.mps_control, &self.mps_pipe_dir);
            p.timeout = Duration::from_secs(self.mps_timeout.max(1));
            p.client_probe = self.mps_client_probe.clone();
            c.mps = Some(p);
        }
        c.stop_grace = Duration::from_secs(self.stop_grace);
        c.address = self.address.clone().or_else(|| {
            self.server
                .as_deref()
                .and_then(crate::link::local_address_towards)
        });
        c.mps_user = self.mps_user;
        if let Some(a) = self
            .publish_address
            .as_deref()
            .filter(|a| !matches!(*a, "0.0.0.0" | "::" | "[::]"))
        {
            c.scrape_address = a.to_string();
        }
        c.imds = self.imds_url.as_deref().map(crate::imds::ImdsWatch::new);
        c.restart_backoff = Duration::from_secs(self.restart_backoff);
        c.restart_backoff_max = Duration::from_secs(300).max(c.restart_backoff);
        if self.deep_check {
            c.deep_check = Some(DeepCheck {
                program: self.deep_check_program.clone(),
                record: Some(self.state_dir.join("deep-diagnostic.json")),
                ..DeepCheck::default()
            });
        }
        c
    }

    /// The runtime for host `host_id` of `cluster`.
    pub async fn runtime_for(
        &self,
        cluster: &str,
        host_id: &str,
    ) -> Result<Arc<dyn Runtime>, AgentError> {
        Ok(match self.runtime {
            RuntimeKind::Docker => {
                let opts = DockerOptions {
                    network_mode: self.docker_network.clone(),
                    gpu_device_request: self.docker_gpu_request,
                    pull_missing: !self.no_pull,
                    publish_address: self.publish_address.clone(),
                };
                Arc::new(
                    DockerRuntime::connect(cluster, host_id, opts)
                        .await
                        .map_err(|source| AgentError::RuntimeSetup {
                            runtime: "docker",
                            source,
                        })?,
                )
            }
            RuntimeKind::Process => Arc::new(
                ProcessRuntime::open(&self.state_dir, cluster, host_id).map_err(|source| {
                    AgentError::RuntimeSetup {
                        runtime: "process",
                        source,
                    }
                })?,
            ),
        })
    }

    pub fn inventory(&self) -> Arc<dyn Inventory> {
        match &self.inventory_file {
            Some(f) => Arc::new(FileInventory::new(f)),
            None => Arc::new(NvmlInventory::new()),
        }
    }
}

/// Run an agent from its flags against an opened store until `shutdown` (or after
/// one pass with `--once`).
pub async fn run_agent(
    args: &Args,
    store: Arc<dyn Store>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let cluster = args.cluster.as_deref().unwrap_or_default();
    let host_id = args.host_id.as_deref().unwrap_or_default();
    let runtime = args.runtime_for(cluster, host_id).await?;
    tracing::info!(
        cluster,
        host = host_id,
        runtime = runtime.name(),
        store = %store.location(),
        "agent starting"
    );
    let mut agent = Agent::new(
        args.config_for(cluster, host_id),
        store,
        runtime,
        args.inventory(),
    );
    if args.once {
        agent.pass().await.map(|_| ())
    } else {
        agent
            .run(Duration::from_secs(args.interval.max(1)), shutdown)
            .await;
        Ok(())
    }
}
