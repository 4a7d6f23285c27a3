//! What a placed task becomes on this host: the revision it runs, read from the
//! store's state, and the launch spec a runtime starts (each container's environment,
//! its GPUs by UUID, its limits); the agent loop ([`crate::agent`]) calls these.

use crate::runtime::{ContainerSpec, LaunchSpec, Mount, MountSource};
use gpushare_core::model::{
    Container, GpuInfo, Revision, StoreState, Task, TaskDefinition, TaskGpu, VolumeScope,
};
use std::path::{Path, PathBuf};

/// A task assignment the agent cannot carry out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentError {
    #[error("malformed assignment: task {task} names revision {revision} of task definition {family}, which the store does not have")]
    RevisionMissing {
        task: String,
        family: String,
        revision: u32,
    },
    #[error("task {task} is placed on GPU {index}, which this host does not have{}", inventory.as_ref().map(|e| format!(" (inventory: {e})")).unwrap_or_default())]
    GpuMissing {
        task: String,
        index: u32,
        inventory: Option<String>,
    },
    /// A container's environment names a variable the agent owns (or no valid name at
    /// all): the loader and the provider refuse these, so the store was written by
    /// something else; nothing of the task is started.
    #[error("refused assignment: container {container} of task {task}: {problem}")]
    ForbiddenEnv {
        task: String,
        container: String,
        problem: String,
    },
    #[error("malformed assignment: task {task} needs {need} GPU(s) but is placed on {placed}")]
    GpuCount {
        task: String,
        need: usize,
        placed: usize,
    },
    /// One user per MPS server (the pool's `mps { user }`): a client of another user
    /// would wait until the GPU's other clients are done.
    #[error("refused: container {container} of task {task} runs as user {declared:?}, but this host's MPS containers run as user {user} (the pool's mps.user: an MPS server serves one user; declare user = \"{user}\" or leave it out)")]
    MpsUser {
        task: String,
        container: String,
        declared: String,
        user: u32,
    },
}

/// One user per MPS server (issue 50): with `user` set (the pool's `mps { user }`),
/// every MPS container of `spec` runs as that user id. A container that declares
/// another user (another uid, or a name the agent cannot compare) is refused, and
/// nothing of the task starts; one that declares `UID` or `UID:GID` keeps it.
pub fn run_as_mps_user(spec: &mut LaunchSpec, user: Option<u32>) -> Result<(), AssignmentError> {
    let Some(user) = user else {
        return Ok(());
    };
    let mps = |c: &ContainerSpec| c.mps_pipe_dir.is_some();
    if let Some(c) = spec.containers.iter().filter(|c| mps(c)).find(|c| {
        c.user
            .as_deref()
            .is_some_and(|u| u.split(':').next() != Some(user.to_string().as_str()))
    }) {
        return Err(AssignmentError::MpsUser {
            task: spec.task_id.clone(),
            container: c.name.clone(),
            declared: c.user.clone().unwrap_or_default(),
            user,
        });
    }
    for c in spec.containers.iter_mut().filter(|c| mps(c)) {
        c.user.get_or_insert_with(|| user.to_string());
    }
    Ok(())
}

/// The revision a task runs.
pub fn revision_of<'a>(
    state: &'a StoreState,
    task: &Task,
) -> Result<&'a Revision, AssignmentError> {
    state
        .revisions
        .get(&task.family)
        .and_then(|revs| revs.iter().find(|r| r.revision == task.revision))
        .ok_or_else(|| AssignmentError::RevisionMissing {
            task: task.id.clone(),
            family: task.family.clone(),
            revision: task.revision,
        })
}

/// Turn a placed task into what a runtime starts: each container's environment as
/// the task sees it (see docs/agent.md), its GPUs by UUID, its limits.
pub fn launch_spec(
    task: &Task,
    revision: &Revision,
    gpus: &[GpuInfo],
    inventory_error: Option<&str>,
    pipe_dir: &Path,
) -> Result<LaunchSpec, AssignmentError> {
    let gpu_id = |index: u32| -> Result<String, AssignmentError> {
        let g =
            gpus.iter()
                .find(|g| g.index == index)
                .ok_or_else(|| AssignmentError::GpuMissing {
                    task: task.id.clone(),
                    index,
                    inventory: inventory_error.map(str::to_string),
                })?;
        Ok(g.uuid.clone().unwrap_or_else(|| g.index.to_string()))
    };
    let containers = &revision.spec.containers;
    // Every container's names are checked before any is turned into a spec, so a
    // refused task starts nothing; the variables the agent owns are then written
    // over the task's own, into a map (one value per name).
    check_env_names(task, containers)?;
    let need = gpus_needed(task, containers);
    if need > 0 && task.gpus.len() < need {
        return Err(AssignmentError::GpuCount {
            task: task.id.clone(),
            need,
            placed: task.gpus.len(),
        });
    }
    let mut next_whole = 0usize;
    let mut out = Vec::with_capacity(containers.len());
    for c in containers {
        let mut env = c.environment();
        env.insert("GPUSHARE_TASK_ID".into(), task.id.clone());
        // An indexed job's run: its index and the job's completions (issue 51).
        if let Some(run) = &task.job {
            env.extend(run.environment());
        }
        let mut ids = Vec::new();
        let mut pipe = None;
        match &c.gpu {
            Some(g) if g.mps.is_some() => {
                let share = g.mps.as_ref();
                let id = gpu_id(task.gpus[0])?;
                // MPS limits each client process: a container of N processes gives
                // each memory / N, so that together they stay within its memory.
                let memory = share
                    .map(|m| m.memory / u64::from(m.processes.max(1)))
                    .unwrap_or(0);
                env.insert(
                    "CUDA_MPS_PIPE_DIRECTORY".into(),
                    pipe_dir.display().to_string(),
                );
                env.insert(
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(),
                    format!("0={memory}M"),
                );
                if let Some(p) = share.and_then(|m| m.max_compute_percent) {
                    env.insert("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), p.to_string());
                }
                env.insert("NVIDIA_VISIBLE_DEVICES".into(), id.clone());
                ids.push(id);
                pipe = Some(PathBuf::from(pipe_dir));
            }
            Some(g) if g.count.unwrap_or(0) > 0 => {
                let n = g.count.unwrap_or(0) as usize;
                for &index in &task.gpus[next_whole..next_whole + n] {
                    ids.push(gpu_id(index)?);
                }
                next_whole += n;
                env.insert("NVIDIA_VISIBLE_DEVICES".into(), ids.join(","));
            }
            _ => {
                // No GPU: hide them all, even from images that ask for `all`.
                env.insert("NVIDIA_VISIBLE_DEVICES".into(), "void".into());
            }
        }
        let ports: Vec<_> = task
            .ports
            .iter()
            .filter(|p| p.container == c.name)
            .cloned()
            .collect();
        for p in &ports {
            env.insert(port_env_name(&p.label()), p.host_port.to_string());
        }
        out.push(ContainerSpec {
            name: c.name.clone(),
            image: c.image.clone(),
            command: c.command.clone(),
            env,
            cpu_units: c.cpu,
            memory_mib: c.memory,
            essential: c.essential,
            gpus: ids,
            mps_pipe_dir: pipe,
            entry_point: c.entry_point.clone(),
            ports,
            health_check: c.health_check.clone(),
            mounts: mounts_of(task, &revision.spec, c),
            shm_mib: c.shared_memory_size,
            ulimits: c.ulimits.clone(),
            init: c.init_process_enabled,
            stop_timeout: c.stop_timeout,
            user: c.user.clone(),
            working_dir: c.working_directory.clone(),
            labels: c.docker_labels.clone(),
        });
    }
    Ok(LaunchSpec {
        task_id: task.id.clone(),
        network_mode: revision.spec.network_mode,
        containers: out,
    })
}

/// The variable that tells a container the host port of its port `label`:
/// `GPUSHARE_PORT_HTTP` for a port named `http` (the process runtime's tasks,
/// which share the host's network, listen there).
pub fn port_env_name(label: &str) -> String {
    let up: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("GPUSHARE_PORT_{up}")
}

/// The mounts of container `c`: each mount point with its volume (a task-scoped
/// Docker volume is named after the task, so two tasks never share it).
fn mounts_of(task: &Task, td: &TaskDefinition, c: &Container) -> Vec<Mount> {
    c.mount_points
        .iter()
        .filter_map(|m| {
            let v = td.volumes.iter().find(|v| v.name == m.source_volume)?;
            let source = match (&v.host_path, &v.docker_volume) {
                (Some(p), _) => MountSource::HostPath(p.clone()),
                (None, Some(d)) => MountSource::Volume {
                    name: match d.scope {
                        VolumeScope::Shared => v.name.clone(),
                        VolumeScope::Task => format!("{}-{}", task.id, v.name),
                    },
                    driver: d.driver.clone(),
                    driver_opts: d.driver_opts.clone(),
                    labels: d.labels.clone(),
                    task_scoped: d.scope == VolumeScope::Task,
                },
                (None, None) => MountSource::Volume {
                    name: format!("{}-{}", task.id, v.name),
                    driver: None,
                    driver_opts: Default::default(),
                    labels: Default::default(),
                    task_scoped: true,
                },
            };
            Some(Mount {
                source,
                target: m.container_path.clone(),
                read_only: m.read_only,
            })
        })
        .collect()
}

/// Refuse the task if a container's environment names a variable the agent owns
/// (or no valid name at all).
fn check_env_names(task: &Task, containers: &[Container]) -> Result<(), AssignmentError> {
    for c in containers {
        let names = c.env.keys().chain(c.secret_env.keys());
        if let Some(problem) = names
            .into_iter()
            .find_map(|k| gpushare_core::envname::name_issue(k))
        {
            return Err(AssignmentError::ForbiddenEnv {
                task: task.id.clone(),
                container: c.name.clone(),
                problem,
            });
        }
    }
    Ok(())
}

/// How many of its placed GPUs the task uses: its containers' whole GPUs, else one
/// for MPS (a container's share or the task's shape), else none.
fn gpus_needed(task: &Task, containers: &[Container]) -> usize {
    let whole_need: usize = containers
        .iter()
        .filter_map(|c| c.gpu.as_ref().and_then(|g| g.count))
        .map(|n| n as usize)
        .sum();
    let any_mps = containers
        .iter()
        .any(|c| c.gpu.as_ref().is_some_and(|g| g.mps.is_some()));
    if whole_need > 0 {
        whole_need
    } else if any_mps || matches!(task.shape.gpu, TaskGpu::Mps { .. }) {
        1
    } else {
        0
    }
}

/// Whether the task runs under MPS (its shape, or any container asking for a share).
pub(crate) fn is_mps(task: &Task, revision: &Revision) -> bool {
    matches!(task.shape.gpu, TaskGpu::Mps { .. })
        || revision
            .spec
            .containers
            .iter()
            .any(|c| c.gpu.as_ref().is_some_and(|g| g.mps.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare_core::model::{Container, GpuSpec, MpsShare, TaskDefinition, TaskState};
    use std::collections::BTreeMap;

    fn c(name: &str, gpu: Option<GpuSpec>) -> Container {
        Container {
            name: name.into(),
            image: "img".into(),
            command: vec!["run".into()],
            env: BTreeMap::from([("MODEL".to_string(), "bge-small".to_string())]),
            secret_env: BTreeMap::new(),
            cpu: 0,
            memory: 0,
            gpu,
            essential: true,
            ..Default::default()
        }
    }

    fn rev(containers: Vec<Container>) -> Revision {
        Revision {
            family: "f".into(),
            revision: 1,
            spec: TaskDefinition {
                containers,
                ..Default::default()
            },
        }
    }

    fn task(r: &Revision, gpus: Vec<u32>) -> Task {
        Task {
            ports: Vec::new(),
            id: "t".into(),
            service: "s".into(),
            family: "f".into(),
            revision: 1,
            host: "h".into(),
            gpus,
            shape: r.spec.shape().unwrap_or_default(),
            state: TaskState::Pending,
            job: None,
            scrape: None,
        }
    }

    fn inv(n: u32) -> Vec<GpuInfo> {
        (0..n)
            .map(|i| GpuInfo {
                uuid: Some(format!("GPU-{i}")),
                ..GpuInfo::new(i, "l4", 23034)
            })
            .collect()
    }

    #[test]
    fn whole_gpus_are_split_between_containers_in_order() {
        let whole = |n| {
            Some(GpuSpec {
                count: Some(n),
                mps: None,
            })
        };
        let r = rev(vec![c("a", whole(1)), c("cpu", None), c("b", whole(2))]);
        let s = launch_spec(&task(&r, vec![3, 1, 2]), &r, &inv(4), None, Path::new("/p"))
            .expect("spec");
        let vis = |i: usize| s.containers[i].env["NVIDIA_VISIBLE_DEVICES"].clone();
        assert_eq!(vis(0), "GPU-3");
        assert_eq!(vis(1), "void");
        assert_eq!(vis(2), "GPU-1,GPU-2");
        assert_eq!(s.containers[2].gpus, vec!["GPU-1", "GPU-2"]);
        // A whole GPU gets no MPS settings; the task's own variables are kept.
        assert!(!s.containers[0]
            .env
            .keys()
            .any(|k| k.starts_with("CUDA_MPS_")));
        assert_eq!(s.containers[0].env["MODEL"], "bge-small");
        assert_eq!(s.containers[0].mps_pipe_dir, None);
    }

    #[test]
    fn mps_containers_run_as_the_pools_mps_user_and_another_user_is_refused() {
        let share = || {
            Some(GpuSpec {
                count: None,
                mps: Some(MpsShare {
                    processes: 1,
                    memory: 1024,
                    max_compute_percent: None,
                }),
            })
        };
        let with_user = |name: &str, user: Option<&str>| Container {
            user: user.map(str::to_string),
            ..c(name, share())
        };
        let spec = |cs: Vec<Container>| {
            let r = rev(cs);
            launch_spec(&task(&r, vec![0]), &r, &inv(1), None, Path::new("/p")).expect("spec")
        };
        // Unset: each container keeps what it declares.
        let mut s = spec(vec![with_user("a", Some("app")), c("cpu", None)]);
        run_as_mps_user(&mut s, None).expect("no rule");
        assert_eq!(s.containers[0].user.as_deref(), Some("app"));
        // Set: the MPS containers run as the pool's user; a CPU container is left alone;
        // a container declaring the same uid (with a group) keeps its group.
        let mut s = spec(vec![
            with_user("a", None),
            c("cpu", None),
            with_user("b", Some("1000:1000")),
        ]);
        run_as_mps_user(&mut s, Some(1000)).expect("one user");
        let users: Vec<Option<&str>> = s.containers.iter().map(|c| c.user.as_deref()).collect();
        assert_eq!(users, [Some("1000"), None, Some("1000:1000")]);
        // Another uid, or a name, is refused with the reason; the spec is untouched.
        for other in ["0", "app"] {
            let mut s = spec(vec![with_user("a", None), with_user("b", Some(other))]);
            let e = run_as_mps_user(&mut s, Some(1000)).expect_err("refused");
            let text = e.to_string();
            assert!(
                text.contains(&format!("container b of task t runs as user {other:?}"))
                    && text.contains("pool's mps.user"),
                "{text}"
            );
            assert_eq!(s.containers[0].user, None);
        }
    }

    #[test]
    fn an_uncapped_mps_container_gets_no_thread_percentage() {
        let r = rev(vec![c(
            "a",
            Some(GpuSpec {
                count: None,
                mps: Some(MpsShare {
                    processes: 1,
                    memory: 512,
                    max_compute_percent: None,
                }),
            }),
        )]);
        let s = launch_spec(&task(&r, vec![0]), &r, &inv(1), None, Path::new("/p")).expect("spec");
        let env = &s.containers[0].env;
        assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=512M");
        assert_eq!(env["CUDA_MPS_PIPE_DIRECTORY"], "/p");
        assert!(!env.contains_key("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
        assert_eq!(
            s.containers[0].mps_pipe_dir.as_deref(),
            Some(Path::new("/p"))
        );
    }

    /// MPS limits each client process: a container of several processes gives each
    /// an equal part of its memory (issue 50).
    #[test]
    fn a_container_of_several_processes_splits_its_memory_limit() {
        let r = rev(vec![c(
            "a",
            Some(GpuSpec {
                count: None,
                mps: Some(MpsShare {
                    processes: 4,
                    memory: 8192,
                    max_compute_percent: None,
                }),
            }),
        )]);
        let s = launch_spec(&task(&r, vec![0]), &r, &inv(1), None, Path::new("/p")).expect("spec");
        assert_eq!(
            s.containers[0].env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"],
            "0=2048M"
        );
    }

    #[test]
    fn missing_gpus_are_clear_errors() {
        let mps = Some(GpuSpec {
            count: None,
            mps: Some(MpsShare {
                processes: 1,
                memory: 512,
                max_compute_percent: Some(10),
            }),
        });
        let r = rev(vec![c("a", mps)]);
        let e = launch_spec(&task(&r, vec![]), &r, &inv(1), None, Path::new("/p"))
            .expect_err("not placed on a GPU");
        assert!(
            matches!(
                e,
                AssignmentError::GpuCount {
                    need: 1,
                    placed: 0,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = launch_spec(
            &task(&r, vec![5]),
            &r,
            &[],
            Some("NVML is not available"),
            Path::new("/p"),
        )
        .expect_err("GPU 5 absent");
        assert!(
            e.to_string().contains("GPU 5") && e.to_string().contains("NVML"),
            "{e}"
        );
    }

    /// Regression (issue 30, item 1): a store written by something other than the
    /// loader or the provider (a hand edit, a hostile writer) names variables the agent
    /// owns, or keys that a shell or `/proc/1/environ` reads as a second value of one;
    /// the agent starts nothing of that task.
    #[test]
    fn a_task_cannot_set_the_variables_the_agent_owns() {
        use gpushare_core::model::Secret;
        let mps = Some(GpuSpec {
            count: None,
            mps: Some(MpsShare {
                processes: 1,
                memory: 512,
                max_compute_percent: Some(10),
            }),
        });
        let forged = [
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=99999M,1",
            "CUDA_VISIBLE_DEVICES=0,1,2,3,",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES",
            "GPUSHARE_TASK_ID",
        ];
        for key in forged {
            for secret in [false, true] {
                let mut bad = c("b", mps.clone());
                if secret {
                    bad.secret_env
                        .insert(key.to_string(), Secret::new("0M".to_string()));
                } else {
                    bad.env.insert(key.to_string(), "0M".to_string());
                }
                // The refused container is the second: the first is not started either.
                let r = rev(vec![c("a", None), bad]);
                let e = launch_spec(&task(&r, vec![0]), &r, &inv(1), None, Path::new("/p"))
                    .expect_err(key);
                match &e {
                    AssignmentError::ForbiddenEnv { container, .. } => assert_eq!(container, "b"),
                    other => panic!("{key}: {other:?}"),
                }
            }
        }
    }
}
