//! A real etcd server for the tests: Debian's `etcd-server` (`/usr/bin/etcd`, or
//! `GPUSHARE_ETCD_BIN`), started on free loopback ports with its own data directory and
//! killed when dropped. Missing etcd is a failure, never a skip.

use gpushare_core::model::{
    AppliedResource, Host, HostState, MpsHealth, StoreState, Task, TaskGpu, TaskShape, TaskState,
};
use gpushare_store_etcd::client::{Client, ClientConfig, RangeRequest};
use gpushare_store_etcd::{EtcdOptions, EtcdStore};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process that any thread (an apply's progress callback) can kill.
#[derive(Clone)]
pub struct Proc(std::sync::Arc<std::sync::Mutex<Child>>);

impl Proc {
    fn new(child: Child) -> Proc {
        Proc(std::sync::Arc::new(std::sync::Mutex::new(child)))
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Child> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// SIGKILL and reap.
    pub fn kill(&self) {
        let mut c = self.child();
        let _ = c.kill();
        let _ = c.wait();
    }

    pub fn exited(&self) -> bool {
        matches!(self.child().try_wait(), Ok(Some(_)))
    }
}

pub struct Etcd {
    child: Proc,
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// How it was started, to start it again on the same data and ports.
    command: Vec<std::ffi::OsString>,
    client: EtcdOptions,
}

pub use gpushare_testkit::etcd::{etcd_binary, free_port};

fn spawn(command: &[std::ffi::OsString], dir: &std::path::Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("etcd.log"))
        .expect("log file");
    Command::new(&command[0])
        .args(&command[1..])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", command[0]))
}

impl Etcd {
    /// Start a one-member etcd with default limits and wait until it answers.
    pub async fn start() -> Etcd {
        Etcd::start_with(&[]).await
    }

    pub async fn start_with(extra: &[&str]) -> Etcd {
        Etcd::start_full(extra, "http", EtcdOptions::default()).await
    }

    /// `scheme` "https" with the TLS flags in `extra`; `client` is how the readiness
    /// check connects.
    pub async fn start_full(extra: &[&str], scheme: &str, client: EtcdOptions) -> Etcd {
        let bin = etcd_binary();
        for _attempt in 0..3 {
            let dir = tempfile::tempdir().expect("tempdir");
            let (port, peer) = (free_port(), free_port());
            let client_url = format!("{scheme}://127.0.0.1:{port}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let mut command = gpushare_testkit::etcd::member_command(
                &bin,
                "default",
                &dir.path().join("data"),
                &client_url,
                &peer_url,
            );
            for flag in ["--logger", "zap", "--log-outputs", "stderr"] {
                command.push(flag.into());
            }
            command.extend(extra.iter().map(Into::into));
            let child = Proc::new(spawn(&command, dir.path()));
            let mut etcd = Etcd {
                child,
                dir,
                port,
                command,
                client: client.clone(),
            };
            if etcd.wait_ready(&client).await {
                return etcd;
            }
            let log = std::fs::read_to_string(etcd.dir.path().join("etcd.log")).unwrap_or_default();
            eprintln!("etcd did not come up (retrying on other ports); its log:\n{log}");
        }
        panic!("etcd ({}) did not start in three attempts", bin.display());
    }

    /// The server process, to kill it from anywhere.
    pub fn process(&self) -> Proc {
        self.child.clone()
    }

    /// SIGKILL the server (etcd lost).
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// Start it again on the same data directory and ports, and wait until it answers.
    pub async fn restart(&mut self) {
        self.kill();
        self.child = Proc::new(spawn(&self.command, self.dir.path()));
        let client = self.client.clone();
        assert!(self.wait_ready(&client).await, "etcd did not come back");
    }

    async fn wait_ready(&mut self, client: &EtcdOptions) -> bool {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if self.child.exited() {
                return false;
            }
            let opts = EtcdOptions {
                connect_timeout: Duration::from_millis(500),
                ..client.clone()
            };
            if EtcdStore::open(&self.url("ready"), opts).await.is_ok() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://127.0.0.1:{}/{prefix}", self.port)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub async fn store(&self, prefix: &str) -> EtcdStore {
        self.store_with(prefix, EtcdOptions::default()).await
    }

    pub async fn store_with(&self, prefix: &str, opts: EtcdOptions) -> EtcdStore {
        EtcdStore::open(&self.url(prefix), opts)
            .await
            .expect("open the etcd store")
    }

    /// A raw client, for looking at keys as stored.
    pub async fn client(&self) -> Client {
        Client::connect(ClientConfig::new([self.endpoint()]))
            .await
            .expect("raw client")
    }

    /// Number of keys under `prefix`.
    pub async fn count(&self, prefix: &str) -> i64 {
        self.client()
            .await
            .range(RangeRequest::new(prefix).prefix().count_only())
            .await
            .expect("count")
            .count
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.child.kill();
    }
}

pub fn host(i: usize) -> Host {
    gpushare_testkit::model::host(&format!("h-{i:05}"))
        .instance_id(&format!("i-{i:08x}"))
        .pool("gpu")
        .instance_type("g6.12xlarge")
        .zone("eu-west-1a")
        .state(HostState::Running)
        .mps_health(MpsHealth::Healthy)
        .launch_token(&format!("tok-{i:08}"))
        .last_heartbeat(1_700_000_000)
        .build()
}

pub fn task(i: usize, hosts: usize) -> Task {
    Task {
        ports: Vec::new(),
        id: format!("t-{i:06}"),
        service: format!("svc-{}", i % 50),
        family: format!("fam-{}", i % 50),
        revision: 1,
        host: format!("h-{:05}", i % hosts.max(1)),
        gpus: vec![(i % 4) as u32],
        shape: TaskShape {
            cpu_units: 1024,
            memory_mib: 4096,
            gpu: TaskGpu::Mps {
                clients: 1,
                memory_mib: 2048,
                compute_percent: 25,
                capped: true,
            },
        },
        state: TaskState::Running,
        job: None,
        scrape: None,
    }
}

/// A state with `hosts` hosts and `tasks` tasks, a few resources and revision families.
pub fn big_state(serial: u64, hosts: usize, tasks: usize) -> StoreState {
    let mut st = StoreState {
        serial,
        cluster: "big".into(),
        ..StoreState::default()
    };
    for i in 0..hosts {
        let h = host(i);
        st.hosts.insert(h.id.clone(), h);
    }
    for i in 0..tasks {
        let t = task(i, hosts);
        st.tasks.insert(t.id.clone(), t);
    }
    for i in 0..10 {
        st.resources.insert(
            format!("service.svc-{i}").parse().expect("addr"),
            AppliedResource::new(
                serde_json::json!({"desired_count": i, "name": format!("svc-{i}")}),
            ),
        );
        st.revisions.insert(format!("fam-{i}"), vec![]);
    }
    st
}

pub fn empty_plan(after: StoreState) -> gpushare_core::plan::Plan {
    serde_json::from_value(serde_json::json!({
        "format_version": "1.0", "cluster": "c", "base_serial": 0, "destroy": false,
        "resource_changes": [], "registrations": [], "launches": [], "retirements": [],
        "starts": [], "stops": [], "moves": [], "unplaced": [], "strays": [],
        "after": after, "cost": gpushare_core::plan::Cost::default(),
    }))
    .expect("plan")
}

/// A 3-member etcd cluster on loopback, each member with its own data directory.
pub struct EtcdCluster {
    pub members: Vec<Proc>,
    pub dir: tempfile::TempDir,
    pub ports: Vec<u16>,
}

impl EtcdCluster {
    pub async fn start(n: usize) -> EtcdCluster {
        let bin = etcd_binary();
        for _attempt in 0..3 {
            let dir = tempfile::tempdir().expect("tempdir");
            let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
            let initial = ports
                .iter()
                .enumerate()
                .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
                .collect::<Vec<_>>()
                .join(",");
            let mut members = Vec::new();
            for (i, (port, peer)) in ports.iter().enumerate() {
                let client_url = format!("http://127.0.0.1:{port}");
                let peer_url = format!("http://127.0.0.1:{peer}");
                let member_dir = dir.path().join(format!("m{i}"));
                std::fs::create_dir_all(&member_dir).expect("member dir");
                let mut command: Vec<std::ffi::OsString> = vec![bin.clone().into()];
                for (flag, value) in [
                    ("--name", format!("m{i}")),
                    ("--data-dir", member_dir.join("data").display().to_string()),
                    ("--listen-client-urls", client_url.clone()),
                    ("--advertise-client-urls", client_url.clone()),
                    ("--listen-peer-urls", peer_url.clone()),
                    ("--initial-advertise-peer-urls", peer_url.clone()),
                    ("--initial-cluster", initial.clone()),
                    ("--initial-cluster-state", "new".into()),
                    ("--initial-cluster-token", "gpushare-test".into()),
                    ("--logger", "zap".into()),
                    ("--log-outputs", "stderr".into()),
                ] {
                    command.push(flag.into());
                    command.push(value.into());
                }
                members.push(Proc::new(spawn(&command, &member_dir)));
            }
            let cluster = EtcdCluster {
                members,
                dir,
                ports: ports.iter().map(|(p, _)| *p).collect(),
            };
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(30) {
                let opts = EtcdOptions {
                    connect_timeout: Duration::from_millis(500),
                    ..EtcdOptions::default()
                };
                if EtcdStore::open(&cluster.url("ready"), opts).await.is_ok() {
                    return cluster;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            eprintln!("the etcd cluster did not come up; retrying on other ports");
        }
        panic!("a {n}-member etcd cluster did not start in three attempts");
    }

    pub fn url(&self, prefix: &str) -> String {
        let eps: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("etcd://{}/{prefix}", eps.join(","))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &self.members {
            m.kill();
        }
    }
}

/// A loaded state without its store identity, to compare with a state a test wrote
/// (the store fills `store_id` on every load; tests write states without one).
pub trait Anonymous {
    fn anon(self) -> Self;
}

impl Anonymous for StoreState {
    fn anon(mut self) -> Self {
        self.store_id.clear();
        self
    }
}
