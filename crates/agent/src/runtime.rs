//! What runs a task's containers: Docker on hosts, child processes for local runs and
//! tests, nothing at all for the simulated fleet. One trait, three runtimes.

use async_trait::async_trait;
use gpushare_core::model::{ContainerHealthCheck, HealthStatus, NetworkMode, TaskPort, Ulimit};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub mod docker;
pub mod process;
pub mod sim;

pub use docker::{DockerOptions, DockerRuntime};
pub use process::ProcessRuntime;
pub use sim::SimRuntime;

/// Label keys (docker) and record fields (process) that mark what this agent started.
pub const LABEL_CLUSTER: &str = "gpushare.cluster";
pub const LABEL_HOST: &str = "gpushare.host";
pub const LABEL_TASK: &str = "gpushare.task";
pub const LABEL_CONTAINER: &str = "gpushare.container";
pub const LABEL_ESSENTIAL: &str = "gpushare.essential";

/// One container of a task, ready to run: the environment is complete (the task
/// definition's own variables, then gpushare's, which win).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// CPU units (1024 = one vCPU); 0 = no limit.
    pub cpu_units: u32,
    /// MiB of host memory; 0 = no limit.
    pub memory_mib: u64,
    pub essential: bool,
    /// The GPUs the container sees, by UUID (or index where the inventory has no UUID).
    pub gpus: Vec<String>,
    /// Set for an MPS client: the daemon's pipe directory (mounted, IPC shared with the host).
    pub mps_pipe_dir: Option<PathBuf>,
    /// Replaces the image's entry point (empty: the image's).
    pub entry_point: Vec<String>,
    /// Ports published on the host (bridge mode; in host mode they are the host's own).
    pub ports: Vec<TaskPort>,
    pub health_check: Option<ContainerHealthCheck>,
    pub mounts: Vec<Mount>,
    /// MiB of `/dev/shm`.
    pub shm_mib: Option<u64>,
    pub ulimits: Vec<Ulimit>,
    pub init: bool,
    /// Seconds between SIGTERM and SIGKILL (unset: the agent's grace).
    pub stop_timeout: Option<u32>,
    pub user: Option<String>,
    pub working_dir: Option<String>,
    /// The task definition's `docker_labels`.
    pub labels: BTreeMap<String, String>,
}

/// What a mount point mounts.
#[derive(Debug, Clone, PartialEq)]
pub enum MountSource {
    /// A host directory or file, bind-mounted.
    HostPath(String),
    /// A Docker named volume (`name` as the engine knows it).
    Volume {
        name: String,
        driver: Option<String>,
        driver_opts: BTreeMap<String, String>,
        labels: BTreeMap<String, String>,
        /// Made for this task and removed with it.
        task_scoped: bool,
    },
}

/// A volume mounted into a container.
#[derive(Debug, Clone, PartialEq)]
pub struct Mount {
    pub source: MountSource,
    pub target: String,
    pub read_only: bool,
}

/// A task as the agent asks a runtime to start it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LaunchSpec {
    pub task_id: String,
    pub network_mode: NetworkMode,
    pub containers: Vec<ContainerSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    /// Created or starting, not yet running.
    Created,
    Running,
    /// Exited; the code is unknown when the process vanished without leaving one.
    Exited {
        code: Option<i64>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedContainer {
    pub essential: bool,
    pub state: ContainerState,
    /// Its health check's verdict; `None` when it has no check.
    pub health: Option<HealthStatus>,
}

/// A task this agent started, as its runtime sees it now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObservedTask {
    pub containers: BTreeMap<String, ObservedContainer>,
}

/// What the containers say about the task as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskVerdict {
    /// Every essential container runs.
    Running,
    /// Some container is not running yet, none has exited.
    Starting,
    /// An essential container exited: the task is over.
    Exited {
        container: String,
        code: Option<i64>,
    },
}

impl ObservedTask {
    /// The task's health by ECS's rule (the essential containers with a check
    /// decide); `None` when no essential container has a check.
    pub fn health(&self) -> Option<HealthStatus> {
        let checked = self
            .containers
            .values()
            .any(|c| c.essential && c.health.is_some());
        checked.then(|| {
            HealthStatus::of_task(self.containers.values().map(|c| {
                (
                    c.essential,
                    c.health.is_some(),
                    c.health.unwrap_or_default(),
                )
            }))
        })
    }

    pub fn verdict(&self) -> TaskVerdict {
        let mut starting = false;
        for (name, c) in &self.containers {
            match c.state {
                ContainerState::Exited { code } if c.essential => {
                    return TaskVerdict::Exited {
                        container: name.clone(),
                        code,
                    }
                }
                ContainerState::Created if c.essential => starting = true,
                _ => {}
            }
        }
        if starting || self.containers.is_empty() {
            TaskVerdict::Starting
        } else {
            TaskVerdict::Running
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("image {image:?} of container {container} (task {task}) is not on this host{}", pull.as_ref().map(|e| format!(" and could not be pulled: {e}")).unwrap_or_default())]
    ImageMissing {
        task: String,
        container: String,
        image: String,
        pull: Option<String>,
    },
    #[error("docker: cannot {op}")]
    Docker {
        op: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("cannot reach the Docker Engine")]
    DockerUnreachable {
        #[source]
        source: bollard::errors::Error,
    },
    #[error("I/O error on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("container {container} of task {task} has no command to run (the process runtime runs `command`, not the image)")]
    NoCommand { task: String, container: String },
    #[error("cannot start container {container} of task {task}")]
    Spawn {
        task: String,
        container: String,
        #[source]
        source: std::io::Error,
    },
    #[error("task {task} is already running here; refusing to start a second copy")]
    AlreadyRunning { task: String },
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("another agent holds {path} (one agent per host and state directory)")]
    Locked { path: PathBuf },
    #[error("the Docker Engine did not answer a ping within {seconds} s")]
    DockerTimeout { seconds: u64 },
    #[error("the runtime is down (injected fault)")]
    SimulatedDown,
}

/// Runs tasks for one cluster and host. Implementations find what they started
/// before a restart (labels, pid files) so an agent never starts a task twice.
#[async_trait]
pub trait Runtime: Send + Sync {
    fn name(&self) -> &'static str;
    /// Every task this runtime started for this cluster and host, running or exited.
    async fn list(&self) -> Result<BTreeMap<String, ObservedTask>, RuntimeError>;
    /// Start all of a task's containers (none is left behind on error).
    async fn start(&self, spec: &LaunchSpec) -> Result<(), RuntimeError>;
    /// Stop a task (SIGTERM, `grace`, then SIGKILL) and forget it: its containers
    /// or records are removed. No error when it is not there.
    async fn stop(&self, task_id: &str, grace: Duration) -> Result<(), RuntimeError>;
    /// The last `tail` lines of one container's output, stdout and stderr (as the
    /// runtime keeps them: Docker's log, the process runtime's files). Empty when the
    /// runtime keeps none (the simulated fleet).
    async fn logs(
        &self,
        _task_id: &str,
        _container: &str,
        _tail: u32,
    ) -> Result<String, RuntimeError> {
        Ok(String::new())
    }
    /// The task each of `pids` belongs to, where it is one of this runtime's (the
    /// GPU's compute processes mapped to tasks: docker by the container's cgroup,
    /// the process runtime by the task's process group or marker). Empty when the
    /// runtime cannot tell (the simulated fleet).
    async fn tasks_of_pids(&self, _pids: &[u32]) -> BTreeMap<u32, String> {
        BTreeMap::new()
    }
    /// Whether the runtime works (the `container_runtime` health check): the Docker
    /// Engine answers a ping in time; the process runtime's state directory is writable.
    async fn health(&self) -> Result<(), RuntimeError> {
        Ok(())
    }
}

/// Characters allowed in a container or file name; the rest become '_'.
pub(crate) fn safe_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
