//! The docker runtime: one container per task container through the Docker Engine
//! API (bollard), labelled with cluster, host, task and container, so a restarted
//! agent finds what it started.

use super::{
    safe_name, ContainerSpec, ContainerState, LaunchSpec, MountSource, ObservedContainer,
    ObservedTask, Runtime, RuntimeError, LABEL_CLUSTER, LABEL_CONTAINER, LABEL_ESSENTIAL,
    LABEL_HOST, LABEL_TASK,
};
use async_trait::async_trait;
use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, ContainerSummaryStateEnum, DeviceRequest, HealthConfig, HostConfig, Mount,
    MountTypeEnum, MountVolumeOptions, MountVolumeOptionsDriverConfig, PortBinding,
    ResourcesUlimits,
};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, InspectContainerOptions, ListContainersOptions,
    ListVolumesOptions, LogsOptions, RemoveContainerOptions, RemoveVolumeOptions,
    StartContainerOptions, StopContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use gpushare_core::model::{CheckCommand, HealthStatus, NetworkMode};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// How the docker runtime creates containers.
#[derive(Debug, Clone)]
pub struct DockerOptions {
    /// `HostConfig.NetworkMode` (`None`: the engine's default bridge). Tests use `none`.
    pub network_mode: Option<String>,
    /// Also ask for the GPUs with a DeviceRequest (driver `nvidia`, by UUID). Needs the
    /// NVIDIA container runtime; without it, `NVIDIA_VISIBLE_DEVICES` alone selects the
    /// GPU for an engine whose default runtime is nvidia.
    pub gpu_device_request: bool,
    /// Pull an image that is not on the host before creating the container.
    pub pull_missing: bool,
    /// The host address published ports are bound to (`None`: every address). Hosts
    /// that share one engine (the tests' agents) each publish on their own.
    pub publish_address: Option<String>,
}

impl Default for DockerOptions {
    fn default() -> Self {
        DockerOptions {
            network_mode: None,
            gpu_device_request: false,
            pull_missing: true,
            publish_address: None,
        }
    }
}

pub struct DockerRuntime {
    docker: Docker,
    cluster: String,
    host: String,
    options: DockerOptions,
}

/// The name of a task container's docker container.
pub fn container_name(task_id: &str, container: &str) -> String {
    format!("gpushare-{}-{}", safe_name(task_id), safe_name(container))
}

/// The reference to pull: with no tag or digest the engine would pull every tag,
/// so `:latest` is made explicit, as `docker pull` does.
pub fn pull_reference(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

fn status_of(e: &DockerError) -> Option<u16> {
    match e {
        DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

fn docker_err(op: impl Into<String>) -> impl FnOnce(DockerError) -> RuntimeError {
    let op = op.into();
    move |source| RuntimeError::Docker { op, source }
}

impl DockerRuntime {
    /// Connect to the local engine (`DOCKER_HOST` or `/var/run/docker.sock`) and agree
    /// on the API version with it (when it answers within [`PING_TIMEOUT`]).
    pub async fn connect(
        cluster: &str,
        host: &str,
        options: DockerOptions,
    ) -> Result<DockerRuntime, RuntimeError> {
        let docker = Docker::connect_with_local_defaults()
            .map_err(|source| RuntimeError::DockerUnreachable { source })?;
        // An engine that does not answer now is not fatal: the agent runs, reports
        // `container_runtime` impaired, and the planner replaces the host.
        let docker = match tokio::time::timeout(PING_TIMEOUT, docker.clone().negotiate_version())
            .await
        {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the Docker Engine does not answer; the API version is not negotiated");
                docker
            }
            Err(_) => {
                tracing::warn!(
                    "the Docker Engine did not answer within {} s; the API version is not negotiated",
                    PING_TIMEOUT.as_secs()
                );
                docker
            }
        };
        Ok(DockerRuntime {
            docker,
            cluster: cluster.to_string(),
            host: host.to_string(),
            options,
        })
    }

    pub fn client(&self) -> &Docker {
        &self.docker
    }

    fn filters(&self, task: Option<&str>) -> HashMap<String, Vec<String>> {
        let mut labels = vec![
            format!("{LABEL_CLUSTER}={}", self.cluster),
            format!("{LABEL_HOST}={}", self.host),
        ];
        if let Some(t) = task {
            labels.push(format!("{LABEL_TASK}={t}"));
        }
        HashMap::from([("label".to_string(), labels)])
    }

    /// The container body for one task container of a task in network mode `mode`
    /// (pure; tested through inspect).
    pub fn create_body(
        &self,
        task_id: &str,
        mode: NetworkMode,
        c: &ContainerSpec,
    ) -> ContainerCreateBody {
        let mut labels: HashMap<String, String> = c
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.extend([
            (LABEL_CLUSTER.to_string(), self.cluster.clone()),
            (LABEL_HOST.to_string(), self.host.clone()),
            (LABEL_TASK.to_string(), task_id.to_string()),
            (LABEL_CONTAINER.to_string(), c.name.clone()),
            (LABEL_ESSENTIAL.to_string(), c.essential.to_string()),
        ]);
        if c.health_check.is_some() {
            labels.insert(LABEL_HEALTH.to_string(), "true".to_string());
        }
        if let Some(t) = c.stop_timeout {
            labels.insert(LABEL_STOP_TIMEOUT.to_string(), t.to_string());
        }
        let env = c.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut host = self.host_config(task_id, mode, c);
        if c.cpu_units > 0 {
            // CPU units are ECS's relative weight (1024 per vCPU), as in ECS: CpuShares.
            host.cpu_shares = Some(i64::from(c.cpu_units.max(2)));
        }
        if c.memory_mib > 0 {
            host.memory = i64::try_from(c.memory_mib.saturating_mul(1024 * 1024)).ok();
        }
        if self.options.gpu_device_request && !c.gpus.is_empty() {
            host.device_requests = Some(vec![DeviceRequest {
                driver: Some("nvidia".to_string()),
                device_ids: Some(c.gpus.clone()),
                capabilities: Some(vec![vec!["gpu".to_string()]]),
                ..Default::default()
            }]);
        }
        let exposed: HashMap<String, HashMap<(), ()>> = c
            .ports
            .iter()
            .map(|p| {
                (
                    format!("{}/{}", p.container_port, p.protocol),
                    HashMap::new(),
                )
            })
            .collect();
        ContainerCreateBody {
            image: Some(c.image.clone()),
            cmd: (!c.command.is_empty()).then(|| c.command.clone()),
            entrypoint: (!c.entry_point.is_empty()).then(|| c.entry_point.clone()),
            env: Some(env),
            labels: Some(labels),
            exposed_ports: (!exposed.is_empty()).then_some(exposed),
            healthcheck: c.health_check.as_ref().and_then(health_config),
            stop_timeout: c.stop_timeout.map(i64::from),
            user: c.user.clone(),
            working_dir: c.working_dir.clone(),
            host_config: Some(host),
            ..Default::default()
        }
    }

    /// The host side of a container: network and published ports, mounts (the MPS
    /// pipes, the task's volumes), shared memory, ulimits, init.
    fn host_config(&self, task_id: &str, mode: NetworkMode, c: &ContainerSpec) -> HostConfig {
        let network_mode = match mode {
            NetworkMode::Bridge => self.options.network_mode.clone(),
            NetworkMode::Host => Some("host".to_string()),
            NetworkMode::None => Some("none".to_string()),
        };
        let mut bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
        if mode == NetworkMode::Bridge {
            for p in &c.ports {
                bindings
                    .entry(format!("{}/{}", p.container_port, p.protocol))
                    .or_insert_with(|| Some(Vec::new()))
                    .get_or_insert_with(Vec::new)
                    .push(PortBinding {
                        host_ip: self.options.publish_address.clone(),
                        host_port: Some(p.host_port.to_string()),
                    });
            }
        }
        let mounts: Vec<Mount> = c.mounts.iter().map(|m| self.mount(task_id, m)).collect();
        let (mut binds, mut ipc_mode) = (None, None);
        if let Some(pipe) = &c.mps_pipe_dir {
            // The MPS daemon's pipes at the same path, IPC shared with the host.
            let p = pipe.display();
            binds = Some(vec![format!("{p}:{p}")]);
            ipc_mode = Some("host".to_string());
        }
        HostConfig {
            binds,
            network_mode,
            port_bindings: (!bindings.is_empty()).then_some(bindings),
            mounts: (!mounts.is_empty()).then_some(mounts),
            ipc_mode,
            shm_size: c
                .shm_mib
                .and_then(|m| i64::try_from(m.saturating_mul(1024 * 1024)).ok()),
            ulimits: (!c.ulimits.is_empty()).then(|| {
                c.ulimits
                    .iter()
                    .map(|u| ResourcesUlimits {
                        name: Some(u.name.clone()),
                        soft: Some(u.soft),
                        hard: Some(u.hard),
                    })
                    .collect()
            }),
            init: c.init.then_some(true),
            ..Default::default()
        }
    }

    /// One mount as the engine takes it. A task-scoped volume carries the task's
    /// labels (removed with the task); a shared one is named for the cluster.
    fn mount(&self, task_id: &str, m: &super::Mount) -> Mount {
        let (typ, source, volume_options) = match &m.source {
            MountSource::HostPath(p) => (MountTypeEnum::BIND, p.clone(), None),
            MountSource::Volume {
                name,
                driver,
                driver_opts,
                labels,
                task_scoped,
            } => {
                let mut labels: HashMap<String, String> =
                    labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                labels.insert(LABEL_CLUSTER.to_string(), self.cluster.clone());
                let name = if *task_scoped {
                    labels.insert(LABEL_HOST.to_string(), self.host.clone());
                    labels.insert(LABEL_TASK.to_string(), task_id.to_string());
                    format!("gpushare-{}", safe_name(name))
                } else {
                    format!("gpushare-{}-{}", safe_name(&self.cluster), safe_name(name))
                };
                let options = MountVolumeOptions {
                    labels: Some(labels),
                    driver_config: Some(MountVolumeOptionsDriverConfig {
                        name: driver.clone(),
                        options: (!driver_opts.is_empty()).then(|| {
                            driver_opts
                                .iter()
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect()
                        }),
                    }),
                    ..Default::default()
                };
                (MountTypeEnum::VOLUME, name, Some(options))
            }
        };
        Mount {
            target: Some(m.target.clone()),
            source: Some(source),
            typ: Some(typ),
            read_only: m.read_only.then_some(true),
            volume_options,
            ..Default::default()
        }
    }

    /// Remove the task-scoped volumes of `task_id` (its containers are gone).
    async fn remove_task_volumes(&self, task_id: &str) -> Result<(), RuntimeError> {
        let opts = ListVolumesOptions {
            filters: Some(self.filters(Some(task_id))),
        };
        let found = self
            .docker
            .list_volumes(Some(opts))
            .await
            .map_err(docker_err(format!("list the volumes of task {task_id}")))?;
        for v in found.volumes.unwrap_or_default() {
            match self
                .docker
                .remove_volume(&v.name, None::<RemoveVolumeOptions>)
                .await
            {
                Ok(()) => {}
                Err(e) if status_of(&e) == Some(404) => {}
                Err(e) => return Err(docker_err(format!("remove volume {}", v.name))(e)),
            }
        }
        Ok(())
    }

    async fn pull(&self, image: &str) -> Result<(), String> {
        let opts = CreateImageOptions {
            from_image: Some(pull_reference(image)),
            ..Default::default()
        };
        let mut stream = self.docker.create_image(Some(opts), None, None);
        while let Some(item) = stream.next().await {
            item.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn create_one(
        &self,
        task_id: &str,
        mode: NetworkMode,
        c: &ContainerSpec,
    ) -> Result<String, RuntimeError> {
        let name = container_name(task_id, &c.name);
        let opts = || CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        };
        let body = self.create_body(task_id, mode, c);
        let mut pulled = false;
        let mut replaced = false;
        loop {
            match self
                .docker
                .create_container(Some(opts()), body.clone())
                .await
            {
                Ok(r) => return Ok(r.id),
                Err(e) if status_of(&e) == Some(404) && e.to_string().contains("image") => {
                    if self.options.pull_missing && !pulled {
                        pulled = true;
                        tracing::info!(image = %c.image, "pulling a missing image");
                        if let Err(pull) = self.pull(&c.image).await {
                            return Err(RuntimeError::ImageMissing {
                                task: task_id.to_string(),
                                container: c.name.clone(),
                                image: c.image.clone(),
                                pull: Some(pull),
                            });
                        }
                        continue;
                    }
                    return Err(RuntimeError::ImageMissing {
                        task: task_id.to_string(),
                        container: c.name.clone(),
                        image: c.image.clone(),
                        pull: None,
                    });
                }
                Err(e) if status_of(&e) == Some(409) && !replaced => {
                    // The name is taken. A running container is another copy (a
                    // second agent on this host?): never touch it. Anything else is
                    // a leftover of an interrupted start: replace it.
                    let running = self
                        .docker
                        .inspect_container(&name, None::<InspectContainerOptions>)
                        .await
                        .ok()
                        .and_then(|i| i.state)
                        .and_then(|s| s.running)
                        .unwrap_or(false);
                    if running {
                        return Err(RuntimeError::AlreadyRunning {
                            task: task_id.to_string(),
                        });
                    }
                    replaced = true;
                    tracing::warn!(container = %name, "replacing a leftover container");
                    self.remove(&name).await?;
                }
                Err(e) => return Err(docker_err(format!("create container {name}"))(e)),
            }
        }
    }

    async fn remove(&self, name: &str) -> Result<(), RuntimeError> {
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match self.docker.remove_container(name, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(docker_err(format!("remove container {name}"))(e)),
        }
    }

    async fn exit_code(&self, id: &str) -> Option<i64> {
        self.docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
            .ok()
            .and_then(|i| i.state)
            .and_then(|s| s.exit_code)
    }
}

/// The id of the container whose cgroup holds `pid` (the 64 hex digits in
/// `/proc/PID/cgroup`: `.../docker-<id>.scope` or `/docker/<id>`), if any.
fn container_of_pid(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(container_id_in)
}

/// The container id a cgroup path names, if it names one.
fn container_id_in(line: &str) -> Option<String> {
    line.split(['/', '-', '.', ':'])
        .find(|part| part.len() == 64 && part.chars().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_string)
}

/// How long the `container_runtime` check waits for the Docker Engine's ping.
pub const PING_TIMEOUT: Duration = Duration::from_secs(5);

#[async_trait]
impl Runtime for DockerRuntime {
    fn name(&self) -> &'static str {
        "docker"
    }

    /// By each process's cgroup (the container id in `/proc/PID/cgroup`), then the
    /// container's task label; only this cluster's and host's containers count.
    async fn tasks_of_pids(&self, pids: &[u32]) -> BTreeMap<u32, String> {
        let mut by_container: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut out = BTreeMap::new();
        for pid in pids {
            let Some(id) = container_of_pid(*pid) else {
                continue;
            };
            if !by_container.contains_key(&id) {
                let labels = self
                    .docker
                    .inspect_container(&id, None::<InspectContainerOptions>)
                    .await
                    .ok()
                    .and_then(|i| i.config)
                    .and_then(|c| c.labels)
                    .unwrap_or_default();
                let ours = labels.get(LABEL_CLUSTER) == Some(&self.cluster)
                    && labels.get(LABEL_HOST) == Some(&self.host);
                let task = labels.get(LABEL_TASK).filter(|_| ours).cloned();
                by_container.insert(id.clone(), task);
            }
            if let Some(Some(task)) = by_container.get(&id) {
                out.insert(*pid, task.clone());
            }
        }
        out
    }

    async fn health(&self) -> Result<(), RuntimeError> {
        match tokio::time::timeout(PING_TIMEOUT, self.docker.ping()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(RuntimeError::DockerUnreachable { source }),
            Err(_) => Err(RuntimeError::DockerTimeout {
                seconds: PING_TIMEOUT.as_secs(),
            }),
        }
    }

    async fn logs(
        &self,
        task_id: &str,
        container: &str,
        tail: u32,
    ) -> Result<String, RuntimeError> {
        let name = container_name(task_id, container);
        let opts = LogsOptions {
            stdout: true,
            stderr: true,
            tail: tail.to_string(),
            ..Default::default()
        };
        let mut stream = self.docker.logs(&name, Some(opts));
        let mut out = String::new();
        while let Some(item) = stream.next().await {
            let item = item.map_err(docker_err(format!("read the log of container {name}")))?;
            out.push_str(&item.to_string());
        }
        Ok(out)
    }

    async fn list(&self) -> Result<BTreeMap<String, ObservedTask>, RuntimeError> {
        let opts = ListContainersOptions {
            all: true,
            filters: Some(self.filters(None)),
            ..Default::default()
        };
        let found = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(docker_err("list containers"))?;
        let mut out: BTreeMap<String, ObservedTask> = BTreeMap::new();
        for s in found {
            let labels = s.labels.clone().unwrap_or_default();
            let (Some(task), Some(container)) =
                (labels.get(LABEL_TASK), labels.get(LABEL_CONTAINER))
            else {
                continue;
            };
            let essential = labels
                .get(LABEL_ESSENTIAL)
                .map(|v| v != "false")
                .unwrap_or(true);
            let state = match s.state {
                Some(ContainerSummaryStateEnum::RUNNING)
                | Some(ContainerSummaryStateEnum::PAUSED)
                | Some(ContainerSummaryStateEnum::RESTARTING) => ContainerState::Running,
                Some(ContainerSummaryStateEnum::CREATED) => ContainerState::Created,
                _ => {
                    let code = match &s.id {
                        Some(id) => self.exit_code(id).await,
                        None => None,
                    };
                    ContainerState::Exited { code }
                }
            };
            let health = labels
                .contains_key(LABEL_HEALTH)
                .then(|| health_of_status(s.status.as_deref().unwrap_or("")));
            out.entry(task.clone()).or_default().containers.insert(
                container.clone(),
                ObservedContainer {
                    essential,
                    state,
                    health,
                },
            );
        }
        Ok(out)
    }

    async fn start(&self, spec: &LaunchSpec) -> Result<(), RuntimeError> {
        let mut created = Vec::new();
        let mut result = Ok(());
        for c in &spec.containers {
            match self.create_one(&spec.task_id, spec.network_mode, c).await {
                Ok(id) => created.push(id),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            for id in &created {
                if let Err(e) = self
                    .docker
                    .start_container(id, None::<StartContainerOptions>)
                    .await
                {
                    result = Err(docker_err(format!("start container {id}"))(e));
                    break;
                }
            }
        }
        if result.is_err() {
            for id in &created {
                let _ = self.remove(id).await;
            }
        } else {
            tracing::info!(task = %spec.task_id, containers = created.len(), "containers started");
        }
        result
    }

    async fn stop(&self, task_id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let opts = ListContainersOptions {
            all: true,
            filters: Some(self.filters(Some(task_id))),
            ..Default::default()
        };
        let found = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(docker_err(format!("list the containers of task {task_id}")))?;
        for s in found {
            let Some(id) = s.id else { continue };
            if matches!(
                s.state,
                Some(ContainerSummaryStateEnum::RUNNING)
                    | Some(ContainerSummaryStateEnum::PAUSED)
                    | Some(ContainerSummaryStateEnum::RESTARTING)
            ) {
                // The engine sends SIGTERM, waits `t` seconds (the container's
                // `stop_timeout`, else the agent's grace), then SIGKILL.
                let secs = s
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_STOP_TIMEOUT))
                    .and_then(|t| t.parse::<u64>().ok())
                    .unwrap_or(grace.as_secs());
                let opts = StopContainerOptions {
                    t: Some(i32::try_from(secs).unwrap_or(i32::MAX)),
                    ..Default::default()
                };
                match self.docker.stop_container(&id, Some(opts)).await {
                    Ok(()) => {}
                    Err(e) if matches!(status_of(&e), Some(304) | Some(404)) => {}
                    Err(e) => return Err(docker_err(format!("stop container {id}"))(e)),
                }
            }
            self.remove(&id).await?;
        }
        self.remove_task_volumes(task_id).await
    }
}

/// The label on a container with a health check (its health is read from its status).
pub const LABEL_HEALTH: &str = "gpushare.health-check";
/// The label holding a container's `stop_timeout` (seconds).
pub const LABEL_STOP_TIMEOUT: &str = "gpushare.stop-timeout";

/// Docker's health check as ECS defines it (seconds to nanoseconds); `None` for a
/// command that is neither CMD nor CMD-SHELL (refused at validate).
fn health_config(hc: &gpushare_core::model::ContainerHealthCheck) -> Option<HealthConfig> {
    let test = match hc.parsed()? {
        CheckCommand::Exec(args) => std::iter::once("CMD".to_string())
            .chain(args.iter().cloned())
            .collect(),
        CheckCommand::Shell(line) => vec!["CMD-SHELL".to_string(), line.to_string()],
    };
    let ns = |s: u32| i64::from(s) * 1_000_000_000;
    Some(HealthConfig {
        test: Some(test),
        interval: Some(ns(hc.interval)),
        timeout: Some(ns(hc.timeout)),
        retries: Some(i64::from(hc.retries)),
        // 0 means "inherit" to the engine: no start period is 1 ms.
        start_period: Some(ns(hc.start_period).max(1_000_000)),
        start_interval: None,
    })
}

/// A container's health from the status the engine lists it with (`Up 5 seconds
/// (healthy)`, `(unhealthy)`, `(health: starting)`).
pub fn health_of_status(status: &str) -> HealthStatus {
    if status.contains("(unhealthy)") {
        HealthStatus::Unhealthy
    } else if status.contains("(healthy)") {
        HealthStatus::Healthy
    } else {
        HealthStatus::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::{health_of_status, pull_reference};
    use gpushare_core::model::HealthStatus;

    #[test]
    fn health_is_read_from_the_listed_status() {
        assert_eq!(
            health_of_status("Up 3 seconds (healthy)"),
            HealthStatus::Healthy
        );
        assert_eq!(
            health_of_status("Up 9 seconds (unhealthy)"),
            HealthStatus::Unhealthy
        );
        assert_eq!(
            health_of_status("Up 1 second (health: starting)"),
            HealthStatus::Unknown
        );
        assert_eq!(
            health_of_status("Exited (1) 2 seconds ago"),
            HealthStatus::Unknown
        );
    }

    #[test]
    fn pulls_name_a_tag() {
        assert_eq!(pull_reference("busybox"), "busybox:latest");
        assert_eq!(
            pull_reference("registry:5000/team/app"),
            "registry:5000/team/app:latest"
        );
        assert_eq!(
            pull_reference("registry:5000/team/app:v2"),
            "registry:5000/team/app:v2"
        );
        assert_eq!(pull_reference("app@sha256:abcd"), "app@sha256:abcd");
    }

    /// The container id in a process's cgroup line (cgroup v2 with systemd, v1).
    #[test]
    fn a_process_cgroup_names_its_container() {
        let id = "4f1c0a9e2b7d8c3f6a5e1d0b9c8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a";
        for line in [
            format!("0::/system.slice/docker-{id}.scope"),
            format!("12:memory:/docker/{id}"),
        ] {
            assert_eq!(super::container_id_in(&line).as_deref(), Some(id), "{line}");
        }
        assert_eq!(
            super::container_id_in("0::/user.slice/user-1000.slice"),
            None
        );
    }
}
