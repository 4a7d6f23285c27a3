//! Helpers shared by the agent tests (and the API, CLI and end-to-end tests that run
//! agents): a store state with hosts, revisions and tasks; the stand-in
//! MPS control program; the locally built busybox image.

use gpushare_core::model::{
    Container, GpuInfo, GpuSpec, Host, HostState, MpsHealth, MpsShare, Revision, StoreState, Task,
    TaskDefinition, TaskGpu, TaskShape, TaskState,
};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn host(id: &str) -> Host {
    Host {
        log_request: None,
        id: id.into(),
        instance_id: Some(format!("i-{id}")),
        capacity_provider: "pool".into(),
        gpu_instance: None,
        instance_type: "g6.xlarge".into(),
        zone: None,
        state: HostState::Running,
        mps_health: MpsHealth::Unknown,
        health: Default::default(),
        gpus: vec![GpuInfo::new(0, "l4", 23034)],
        cpu_units: 4096,
        memory_mib: 16384,
        launch_token: format!("tok-{id}"),
        last_heartbeat: None,
        launched_at: None,
        subnet: None,
        image_id: None,
        launch: None,
        market: Default::default(),
        max_price: None,
        registration: None,
        hold: None,
    }
}

pub fn container(name: &str, command: &[&str]) -> Container {
    Container {
        name: name.into(),
        image: "gpushare-test-busybox:latest".into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        cpu: 256,
        memory: 64,
        gpu: None,
        essential: true,
        ..Default::default()
    }
}

pub fn mps(memory: u64, cap: Option<u8>) -> Option<GpuSpec> {
    Some(GpuSpec {
        count: None,
        mps: Some(MpsShare {
            processes: 1,
            memory,
            max_compute_percent: cap,
        }),
    })
}

pub fn revision(family: &str, rev: u32, containers: Vec<Container>) -> Revision {
    Revision {
        family: family.into(),
        revision: rev,
        spec: TaskDefinition {
            containers,
            ..Default::default()
        },
    }
}

pub fn task(id: &str, rev: &Revision, host: &str, gpus: Vec<u32>) -> Task {
    let shape = rev.spec.shape().unwrap_or(TaskShape {
        cpu_units: 0,
        memory_mib: 0,
        gpu: TaskGpu::None,
    });
    Task {
        ports: Vec::new(),
        id: id.into(),
        service: rev.family.clone(),
        family: rev.family.clone(),
        revision: rev.revision,
        host: host.into(),
        gpus,
        shape,
        state: TaskState::Pending,
        job: None,
        scrape: None,
    }
}

pub fn state(
    cluster: &str,
    hosts: &[&str],
    revisions: Vec<Revision>,
    tasks: Vec<Task>,
) -> StoreState {
    let mut revs: BTreeMap<String, Vec<Revision>> = BTreeMap::new();
    for r in revisions {
        revs.entry(r.family.clone()).or_default().push(r);
    }
    StoreState {
        serial: 1,
        cluster: cluster.into(),
        store_id: String::new(),
        resources: BTreeMap::new(),
        revisions: revs,
        hosts: hosts.iter().map(|h| (h.to_string(), host(h))).collect(),
        tasks: tasks.into_iter().map(|t| (t.id.clone(), t)).collect(),
        capacity_refusals: vec![],
    }
}

/// Write `state` as the file store's state.json (what `apply` would have committed).
pub fn write_state(store_dir: &Path, state: &StoreState) {
    std::fs::create_dir_all(store_dir).expect("store dir");
    let tmp = store_dir.join("state.json.tmp-test");
    std::fs::write(&tmp, serde_json::to_vec_pretty(state).expect("json")).expect("write state");
    std::fs::rename(&tmp, store_dir.join("state.json")).expect("rename state");
}

/// A stand-in for `nvidia-cuda-mps-control`: there is no GPU (and so no MPS daemon)
/// on the test machines. Its answer is whatever `<dir>/mode` says: `ok` (prints a
/// thread percentage), `error` (exits 1), `hang` (sleeps past any timeout). It
/// checks the protocol the real program needs: the pipe directory in its
/// environment and the command on stdin.
pub struct StandInMps {
    pub program: PathBuf,
    pub pipe_dir: PathBuf,
    mode: PathBuf,
    pub calls: PathBuf,
}

impl StandInMps {
    pub fn new(dir: &Path) -> StandInMps {
        let pipe_dir = dir.join("pipe");
        std::fs::create_dir_all(&pipe_dir).expect("pipe dir");
        let mode = dir.join("mode");
        let calls = dir.join("calls");
        let program = dir.join("nvidia-cuda-mps-control");
        let script = format!(
            r#"#!/bin/sh
echo call >> '{calls}'
read -r line
if [ "$line" != "get_default_active_thread_percentage" ]; then echo "unexpected command: $line" >&2; exit 2; fi
if [ "$CUDA_MPS_PIPE_DIRECTORY" != '{pipe}' ]; then echo "wrong pipe directory: $CUDA_MPS_PIPE_DIRECTORY" >&2; exit 2; fi
case "$(cat '{mode}')" in
  ok) echo 100.0 ;;
  error) echo "Cannot find MPS control daemon process" >&2; exit 1 ;;
  hang) exec sleep 60 ;;
  *) echo "bad mode" >&2; exit 3 ;;
esac
"#,
            calls = calls.display(),
            pipe = pipe_dir.display(),
            mode = mode.display()
        );
        std::fs::write(&program, script).expect("write stand-in");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let s = StandInMps {
            program,
            pipe_dir,
            mode,
            calls,
        };
        s.set("ok");
        s
    }

    pub fn set(&self, mode: &str) {
        std::fs::write(&self.mode, mode).expect("write mode");
    }

    pub fn calls(&self) -> usize {
        std::fs::read_to_string(&self.calls)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

pub const TEST_IMAGE: &str = "gpushare-test-busybox:latest";

/// Build the test image once per machine (idempotent): Debian's static busybox
/// and its applet links, imported with `docker import` (there is no registry).
pub fn ensure_test_image() {
    let have = Command::new("docker")
        .args(["image", "inspect", TEST_IMAGE])
        .output()
        .expect("run docker (is the docker CLI installed?)");
    if have.status.success() {
        return;
    }
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.exists(),
        "/bin/busybox is missing: install Debian's busybox-static (apt-get install -y busybox-static)"
    );
    let root = tempfile::tempdir().expect("tempdir");
    let bin = root.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::copy(busybox, bin.join("busybox")).expect("copy busybox");
    for applet in [
        "sh", "sleep", "echo", "cat", "env", "true", "false", "ls", "test",
    ] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("symlink");
    }
    let tar = root.path().join("rootfs.tar");
    let st = Command::new("tar")
        .arg("-C")
        .arg(root.path())
        .arg("-cf")
        .arg(&tar)
        .arg("bin")
        .status()
        .expect("tar");
    assert!(st.success(), "tar failed");
    let out = Command::new("docker")
        .arg("import")
        .arg(&tar)
        .arg(TEST_IMAGE)
        .output()
        .expect("docker import");
    assert!(
        out.status.success(),
        "docker import failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Poll `f` every 50 ms until it returns Some, for at most `secs` seconds.
pub async fn eventually<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
