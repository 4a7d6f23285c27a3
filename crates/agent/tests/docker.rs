//! The docker runtime against this machine's Docker Engine (`docker info` must
//! answer; nothing here is skipped without it). The image is built locally from
//! Debian's static busybox (there is no registry). Containers run with network
//! mode `none`; the engine has no NVIDIA runtime, so the GPU is selected by
//! `NVIDIA_VISIBLE_DEVICES` only (no DeviceRequest), and read back with inspect.

use gpushare_testkit_engine::agent as support;

use bollard::query_parameters::InspectContainerOptions;
use gpushare_agent::runtime::docker::container_name;
use gpushare_agent::{
    launch_spec, ContainerState, DockerOptions, DockerRuntime, Runtime, RuntimeError, TaskVerdict,
};
use gpushare_core::model::{GpuInfo, GpuSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;
use support::*;

fn opts() -> DockerOptions {
    DockerOptions {
        network_mode: Some("none".into()),
        gpu_device_request: false,
        pull_missing: false,
        publish_address: None,
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn gpus() -> Vec<GpuInfo> {
    (0..2)
        .map(|i| GpuInfo {
            uuid: Some(format!("GPU-0000000{i}-test")),
            ..GpuInfo::new(i, "l4", 23034)
        })
        .collect()
}

async fn inspect(rt: &DockerRuntime, name: &str) -> bollard::models::ContainerInspectResponse {
    rt.client()
        .inspect_container(name, None::<InspectContainerOptions>)
        .await
        .expect("inspect")
}

fn env_set(i: &bollard::models::ContainerInspectResponse) -> BTreeSet<String> {
    i.config
        .as_ref()
        .and_then(|c| c.env.clone())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// Removes every container of a test cluster, also when the test fails.
struct Cleanup(String);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let out = std::process::Command::new("docker")
            .args([
                "ps",
                "-aq",
                "--filter",
                &format!("label=gpushare.cluster={}", self.0),
            ])
            .output();
        if let Ok(out) = out {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", id])
                    .output();
            }
        }
    }
}

async fn connect(cluster: &str) -> DockerRuntime {
    DockerRuntime::connect(cluster, "h-1", opts())
        .await
        .expect("the Docker Engine must answer (docker info)")
}

/// The test image, a runtime of a fresh cluster (its containers removed at the
/// end) and an MPS pipe directory in a temporary directory.
async fn mps_setup() -> (
    String,
    Cleanup,
    DockerRuntime,
    tempfile::TempDir,
    std::path::PathBuf,
) {
    ensure_test_image();
    let cluster = unique("gs-test");
    let cleanup = Cleanup(cluster.clone());
    let rt = connect(&cluster).await;
    let d = tempfile::tempdir().expect("tempdir");
    let pipe = d.path().join("pipe");
    std::fs::create_dir_all(&pipe).expect("pipe dir");
    (cluster, cleanup, rt, d, pipe)
}

#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "both GPU modes' container settings, setting by setting"
)]
async fn mps_and_whole_gpu_containers_carry_exactly_the_right_settings() {
    let (cluster, _cleanup, rt, _d, pipe) = mps_setup().await;

    // An MPS task: a capped container and an uncapped one.
    let rev = revision(
        "infer",
        1,
        vec![
            {
                let mut c = container("main", &["sleep", "300"]);
                c.gpu = mps(2048, Some(30));
                c.cpu = 512;
                c.memory = 128;
                c.env.insert("MODEL".into(), "small".into());
                c
            },
            {
                let mut c = container("side", &["sleep", "300"]);
                c.gpu = mps(1024, None);
                c.essential = false;
                c
            },
        ],
    );
    let t = task("t-mps-1", &rev, "h-1", vec![1]);
    // A task cannot override gpushare's limits: a store holding a container that sets
    // the memory limit itself, or forges a second value of it through a key with `=`
    // (Config.Env would hold both, the container's environment only the forged one),
    // gets no launch spec, so nothing of it reaches the engine.
    for key in [
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=99999M,1",
    ] {
        let mut forged = rev.clone();
        forged.spec.containers[0]
            .env
            .insert(key.into(), "0=99999M".into());
        assert!(
            launch_spec(&t, &forged, &gpus(), None, &pipe).is_err(),
            "{key} was accepted"
        );
    }
    let spec = launch_spec(&t, &rev, &gpus(), None, &pipe).expect("spec");
    rt.start(&spec).await.expect("start");

    let p = pipe.display().to_string();
    let main = inspect(&rt, &container_name("t-mps-1", "main")).await;
    let expected: BTreeSet<String> = [
        "MODEL=small".to_string(),
        "GPUSHARE_TASK_ID=t-mps-1".into(),
        format!("CUDA_MPS_PIPE_DIRECTORY={p}"),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M".into(),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30".into(),
        "NVIDIA_VISIBLE_DEVICES=GPU-00000001-test".into(),
    ]
    .into();
    assert_eq!(env_set(&main), expected);
    let labels: BTreeMap<String, String> = main
        .config
        .as_ref()
        .and_then(|c| c.labels.clone())
        .unwrap_or_default()
        .into_iter()
        .collect();
    let want_labels: BTreeMap<String, String> = [
        ("gpushare.cluster", cluster.as_str()),
        ("gpushare.host", "h-1"),
        ("gpushare.task", "t-mps-1"),
        ("gpushare.container", "main"),
        ("gpushare.essential", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(labels, want_labels);
    let hc = main.host_config.clone().expect("host config");
    assert_eq!(hc.ipc_mode.as_deref(), Some("host"));
    assert_eq!(hc.binds, Some(vec![format!("{p}:{p}")]));
    assert_eq!(hc.cpu_shares, Some(512));
    assert_eq!(hc.memory, Some(128 * 1024 * 1024));
    assert_eq!(hc.network_mode.as_deref(), Some("none"));
    assert_eq!(hc.device_requests.clone().unwrap_or_default().len(), 0);
    assert_eq!(main.state.as_ref().and_then(|s| s.running), Some(true));
    let mounts = main.mounts.clone().unwrap_or_default();
    assert!(
        mounts
            .iter()
            .any(|m| m.source.as_deref() == Some(p.as_str())
                && m.destination.as_deref() == Some(p.as_str())),
        "pipe directory mounted: {mounts:?}"
    );

    // The uncapped container gets no thread percentage.
    let side = inspect(&rt, &container_name("t-mps-1", "side")).await;
    let env = env_set(&side);
    assert!(
        env.contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M"),
        "{env:?}"
    );
    assert!(
        !env.iter()
            .any(|e| e.starts_with("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")),
        "{env:?}"
    );
    assert_eq!(
        side.config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get("gpushare.essential"))
            .map(String::as_str),
        Some("false")
    );

    // A whole-GPU task: its GPUs by UUID, no MPS variables, no pipe, no host IPC.
    let rev = revision(
        "train",
        1,
        vec![{
            let mut c = container("main", &["sleep", "300"]);
            c.gpu = Some(GpuSpec {
                count: Some(2),
                mps: None,
            });
            c
        }],
    );
    let t = task("t-whole-1", &rev, "h-1", vec![0, 1]);
    let spec = launch_spec(&t, &rev, &gpus(), None, &pipe).expect("spec");
    rt.start(&spec).await.expect("start whole");
    let whole = inspect(&rt, &container_name("t-whole-1", "main")).await;
    let expected: BTreeSet<String> = [
        "GPUSHARE_TASK_ID=t-whole-1".to_string(),
        "NVIDIA_VISIBLE_DEVICES=GPU-00000000-test,GPU-00000001-test".into(),
    ]
    .into();
    assert_eq!(env_set(&whole), expected);
    let hc = whole.host_config.clone().expect("host config");
    assert_ne!(hc.ipc_mode.as_deref(), Some("host"));
    assert_eq!(hc.binds.clone().unwrap_or_default().len(), 0);

    // A new runtime instance (a restarted agent) adopts both tasks by label.
    drop(rt);
    let rt = connect(&cluster).await;
    let listed = rt.list().await.expect("list");
    assert_eq!(
        listed.keys().cloned().collect::<Vec<_>>(),
        vec!["t-mps-1", "t-whole-1"]
    );
    assert_eq!(listed["t-mps-1"].verdict(), TaskVerdict::Running);
    assert_eq!(listed["t-mps-1"].containers.len(), 2);
    // Another host's runtime sees none of them.
    let other = DockerRuntime::connect(&cluster, "h-2", opts())
        .await
        .expect("connect");
    assert!(other.list().await.expect("list").is_empty());

    // Stop: SIGTERM, a grace, SIGKILL (busybox sleep as PID 1 ignores SIGTERM), removed.
    rt.stop("t-mps-1", Duration::from_secs(1))
        .await
        .expect("stop");
    let listed = rt.list().await.expect("list");
    assert!(!listed.contains_key("t-mps-1"));
    assert!(listed.contains_key("t-whole-1"));
    let gone = rt
        .client()
        .inspect_container(
            &container_name("t-mps-1", "main"),
            None::<InspectContainerOptions>,
        )
        .await;
    assert!(gone.is_err(), "container removed");
    rt.stop("t-whole-1", Duration::from_secs(1))
        .await
        .expect("stop");
    assert!(rt.list().await.expect("list").is_empty());
}

#[tokio::test]
async fn exit_codes_and_missing_images_are_reported() {
    ensure_test_image();
    let cluster = unique("gs-exit");
    let _cleanup = Cleanup(cluster.clone());
    let rt = connect(&cluster).await;
    let rev = revision("job", 1, vec![container("main", &["sh", "-c", "exit 7"])]);
    let t = task("t-exit", &rev, "h-1", vec![]);
    let spec = launch_spec(&t, &rev, &[], None, Path::new("/unused")).expect("spec");
    // A CPU-only container is hidden from every GPU.
    assert_eq!(spec.containers[0].env["NVIDIA_VISIBLE_DEVICES"], "void");
    rt.start(&spec).await.expect("start");
    let mut found = None;
    for _ in 0..200 {
        let listed = rt.list().await.expect("list");
        if let Some(TaskVerdict::Exited { container, code }) =
            listed.get("t-exit").map(|t| t.verdict())
        {
            found = Some((container, code));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(found, Some(("main".to_string(), Some(7))));
    let listed = rt.list().await.expect("list");
    assert_eq!(
        listed["t-exit"].containers["main"].state,
        ContainerState::Exited { code: Some(7) }
    );
    rt.stop("t-exit", Duration::from_secs(1))
        .await
        .expect("stop");

    let mut c = container("main", &["sleep", "1"]);
    c.image = "gpushare-test-missing:none".into();
    let rev = revision("ghost", 1, vec![c]);
    let t = task("t-ghost", &rev, "h-1", vec![]);
    let spec = launch_spec(&t, &rev, &[], None, Path::new("/unused")).expect("spec");
    let e = rt.start(&spec).await.expect_err("no such image");
    assert!(matches!(e, RuntimeError::ImageMissing { .. }), "{e:?}");
    assert!(e.to_string().contains("gpushare-test-missing:none"), "{e}");
    assert!(
        rt.list().await.expect("list").is_empty(),
        "nothing left behind"
    );
}

/// The agent loop over docker: starts the task once; a restarted agent (new agent,
/// new runtime) adopts it; a container left created by an interrupted start is
/// cleaned up and the task started again.
#[tokio::test]
async fn the_agent_adopts_docker_tasks_and_redoes_an_interrupted_start() {
    use bollard::query_parameters::CreateContainerOptions;
    use gpushare_agent::{Agent, AgentConfig, StaticInventory};
    use gpushare_engine::store::{FileStore, Store};
    use std::sync::Arc;

    ensure_test_image();
    let cluster = unique("gs-agent");
    let _cleanup = Cleanup(cluster.clone());
    let d = tempfile::tempdir().expect("tempdir");
    let web = revision("web", 1, vec![container("main", &["sleep", "300"])]);
    write_state(
        d.path(),
        &state(
            &cluster,
            &["h-1"],
            vec![web.clone()],
            vec![task("t-web", &web, "h-1", vec![])],
        ),
    );
    let store: Arc<dyn Store> = Arc::new(FileStore::open(d.path()).expect("store"));
    let mut cfg = AgentConfig::new(&cluster, "h-1");
    cfg.stop_grace = Duration::from_secs(1);
    let agent = |cfg: AgentConfig, rt: DockerRuntime| {
        Agent::new(
            cfg,
            store.clone(),
            Arc::new(rt),
            Arc::new(StaticInventory(gpus())),
        )
    };
    let mut a = agent(cfg.clone(), connect(&cluster).await);
    assert_eq!(
        a.pass().await.expect("pass").started,
        vec!["t-web".to_string()]
    );
    let mut b = agent(cfg.clone(), connect(&cluster).await);
    let s = b.pass().await.expect("pass");
    assert!(s.started.is_empty(), "a second copy: {s:?}");
    assert_eq!(s.running, 1);
    let rt = connect(&cluster).await;
    assert_eq!(rt.list().await.expect("list")["t-web"].containers.len(), 1);

    let spec = launch_spec(
        &task("t-web", &web, "h-1", vec![]),
        &web,
        &[],
        None,
        Path::new("/unused"),
    )
    .expect("spec");
    // Starting it again (a second agent on the host) leaves the running copy alone.
    let id = inspect(&rt, &container_name("t-web", "main")).await.id;
    let e = rt.start(&spec).await.expect_err("second copy");
    assert!(matches!(e, RuntimeError::AlreadyRunning { .. }), "{e:?}");
    let again = inspect(&rt, &container_name("t-web", "main")).await;
    assert_eq!(again.id, id);
    assert_eq!(again.state.and_then(|s| s.running), Some(true));

    // An interrupted start: the container exists, created but never started.
    rt.stop("t-web", Duration::from_secs(1))
        .await
        .expect("stop");
    rt.client()
        .create_container(
            Some(CreateContainerOptions {
                name: Some(container_name("t-web", "main")),
                ..Default::default()
            }),
            rt.create_body("t-web", spec.network_mode, &spec.containers[0]),
        )
        .await
        .expect("create");
    let mut c = agent(cfg.clone(), connect(&cluster).await);
    let s = c.pass().await.expect("pass");
    assert!(s.started.is_empty());
    assert!(
        rt.list().await.expect("list").is_empty(),
        "the stale container is removed"
    );
    let s = c.pass().await.expect("pass");
    assert_eq!(s.started, vec!["t-web".to_string()]);
    assert_eq!(
        rt.list().await.expect("list")["t-web"].verdict(),
        TaskVerdict::Running
    );
    rt.stop("t-web", Duration::from_secs(1))
        .await
        .expect("stop");
}

/// The serving settings reach the engine (issue 47): the planner's host port
/// published on the publish address, the health check (its verdict read back as the
/// task's health), a host-path and a task-scoped volume mounted, shared memory,
/// ulimits, init, user, working directory, entry point, labels and stop timeout;
/// stopping the task removes its task-scoped volume.
#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "one container's settings, checked setting by setting"
)]
async fn serving_settings_reach_the_engine_and_health_is_read_back() {
    use gpushare_core::model::{
        ContainerHealthCheck, HealthStatus, MountPoint, PortMapping, Protocol, TaskPort, Ulimit,
        Volume,
    };
    ensure_test_image();
    let cluster = unique("gs-serve");
    let _cleanup = Cleanup(cluster.clone());
    let rt = DockerRuntime::connect(
        &cluster,
        "h-1",
        DockerOptions {
            network_mode: None,
            publish_address: Some("127.0.0.1".into()),
            ..opts()
        },
    )
    .await
    .expect("the Docker Engine must answer (docker info)");
    let models = tempfile::tempdir().expect("tempdir");
    let mut rev = revision(
        "web",
        1,
        vec![{
            let mut c = container("server", &["sleep", "300"]);
            c.entry_point = vec!["/bin/busybox".into()];
            c.port_mappings = vec![PortMapping {
                name: Some("http".into()),
                container_port: 8080,
                host_port: 0,
                protocol: Protocol::Tcp,
            }];
            c.health_check = Some(ContainerHealthCheck {
                command: vec!["CMD-SHELL".into(), "test -d /models".into()],
                interval: 5,
                timeout: 2,
                retries: 1,
                start_period: 0,
            });
            c.mount_points = vec![
                MountPoint {
                    source_volume: "models".into(),
                    container_path: "/models".into(),
                    read_only: true,
                },
                MountPoint {
                    source_volume: "scratch".into(),
                    container_path: "/scratch".into(),
                    read_only: false,
                },
            ];
            c.shared_memory_size = Some(256);
            c.ulimits = vec![Ulimit {
                name: "nofile".into(),
                soft: 1024,
                hard: 2048,
            }];
            c.init_process_enabled = true;
            c.stop_timeout = Some(3);
            c.user = Some("1000:1000".into());
            c.working_directory = Some("/tmp".into());
            c.docker_labels = [("team".to_string(), "search".to_string())].into();
            c
        }],
    );
    rev.spec.volumes = vec![
        Volume {
            name: "models".into(),
            host_path: Some(models.path().display().to_string()),
            docker_volume: None,
        },
        Volume {
            name: "scratch".into(),
            host_path: None,
            docker_volume: None,
        },
    ];
    let mut t = task("t-serve-1", &rev, "h-1", vec![]);
    t.ports = vec![TaskPort {
        container: "server".into(),
        name: Some("http".into()),
        container_port: 8080,
        host_port: 41999,
        protocol: Protocol::Tcp,
    }];
    let spec = launch_spec(&t, &rev, &gpus(), None, Path::new("/unused")).expect("spec");
    rt.start(&spec).await.expect("start");
    let i = inspect(&rt, &container_name("t-serve-1", "server")).await;
    let host = i.host_config.clone().expect("host config");
    let bound = host
        .port_bindings
        .clone()
        .and_then(|b| b.get("8080/tcp").cloned().flatten())
        .expect("8080/tcp is published");
    assert_eq!(bound[0].host_port.as_deref(), Some("41999"));
    assert_eq!(bound[0].host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(host.shm_size, Some(256 * 1024 * 1024));
    assert_eq!(host.init, Some(true));
    let ulimit = &host.ulimits.clone().expect("ulimits")[0];
    assert_eq!(
        (ulimit.name.as_deref(), ulimit.soft, ulimit.hard),
        (Some("nofile"), Some(1024), Some(2048))
    );
    let mounts = host.mounts.clone().expect("mounts");
    assert_eq!(mounts.len(), 2, "{mounts:?}");
    assert_eq!(mounts[0].read_only, Some(true));
    assert_eq!(
        mounts[0].source.as_deref(),
        Some(models.path().display().to_string().as_str())
    );
    let config = i.config.clone().expect("config");
    assert_eq!(config.user.as_deref(), Some("1000:1000"));
    assert_eq!(config.working_dir.as_deref(), Some("/tmp"));
    assert_eq!(config.entrypoint, Some(vec!["/bin/busybox".to_string()]));
    assert_eq!(config.stop_timeout, Some(3));
    let labels = config.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("search"));
    let env = config.env.clone().unwrap_or_default();
    assert!(
        env.contains(&"GPUSHARE_PORT_HTTP=41999".to_string()),
        "{env:?}"
    );
    let hc = config.healthcheck.clone().expect("healthcheck");
    assert_eq!(
        hc.test,
        Some(vec!["CMD-SHELL".to_string(), "test -d /models".to_string()])
    );
    assert_eq!(hc.interval, Some(5_000_000_000));

    // The engine's verdict comes back as the task's health.
    assert_eq!(
        rt.list().await.expect("list")["t-serve-1"].health(),
        Some(HealthStatus::Unknown)
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let h = rt.list().await.expect("list")["t-serve-1"].health();
        if h == Some(HealthStatus::Healthy) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after 30 s the task's health is {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let scratch = format!("gpushare-{}-scratch", "t-serve-1");
    let vol = std::process::Command::new("docker")
        .args(["volume", "inspect", &scratch])
        .output()
        .expect("docker volume inspect");
    assert!(vol.status.success(), "the task's scratch volume exists");
    rt.stop("t-serve-1", Duration::from_secs(1))
        .await
        .expect("stop");
    let vol = std::process::Command::new("docker")
        .args(["volume", "inspect", &scratch])
        .output()
        .expect("docker volume inspect");
    assert!(
        !vol.status.success(),
        "the task's scratch volume is removed with it"
    );
}

/// One user per MPS server (issue 50 item 3): with the pool's `mps { user = 1000 }`
/// the MPS container really runs as uid 1000 (read from the engine and from the
/// container's main process), the CPU container beside it as its image says; a
/// task declaring another user gets no spec, so nothing of it reaches the engine.
#[tokio::test]
async fn mps_containers_run_as_the_pools_mps_user() {
    use gpushare_agent::launch::run_as_mps_user;
    let (_cluster, _cleanup, rt, _d, pipe) = mps_setup().await;
    let rev = revision(
        "infer",
        1,
        vec![
            {
                let mut c = container("main", &["sleep", "300"]);
                c.gpu = mps(1024, None);
                c
            },
            container("cpu", &["sleep", "300"]),
        ],
    );
    let t = task("t-user-1", &rev, "h-1", vec![0]);
    let mut spec = launch_spec(&t, &rev, &gpus(), None, &pipe).expect("spec");
    run_as_mps_user(&mut spec, Some(1000)).expect("one user");
    rt.start(&spec).await.expect("start");
    let uid_of = |i: &bollard::models::ContainerInspectResponse| {
        let pid = i.state.as_ref().and_then(|s| s.pid).expect("running pid");
        let status =
            std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process's status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|u| u.split_whitespace().next())
            .map(str::to_string)
            .expect("Uid line")
    };
    let main = inspect(&rt, &container_name("t-user-1", "main")).await;
    assert_eq!(
        main.config.as_ref().and_then(|c| c.user.as_deref()),
        Some("1000")
    );
    assert_eq!(uid_of(&main), "1000");
    let cpu = inspect(&rt, &container_name("t-user-1", "cpu")).await;
    assert_eq!(uid_of(&cpu), "0", "the test image runs as root");

    let mut other = rev.clone();
    other.spec.containers[0].user = Some("0".into());
    let t2 = task("t-user-2", &other, "h-1", vec![0]);
    let mut spec = launch_spec(&t2, &other, &gpus(), None, &pipe).expect("spec");
    let e = run_as_mps_user(&mut spec, Some(1000)).expect_err("refused");
    assert!(e.to_string().contains("runs as user \"0\""), "{e}");
    rt.stop("t-user-1", Duration::from_secs(1))
        .await
        .expect("stop");
}
