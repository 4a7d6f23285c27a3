//! Several "hosts" on one machine, as Docker containers on a private network: a
//! controller (`gpushare reconcile` or `gpushare serve` with `--agent-listen`) and
//! hosts each running the real `gpushare agent --server ...` with the process runtime.
//! The test plays the cloud's hypervisor: [`Lab::boot_host`] starts a container for a
//! host id the planner launched.
//!
//! The image is built here, with no registry: the test build of `gpushare`, every
//! shared library `ldd` lists for it (and the loader), Debian's static busybox (its
//! applets are the hosts' shell, `sleep`, `ps`...) and a stand-in for
//! `nvidia-cuda-mps-control` (there is no GPU here: it answers like a healthy daemon),
//! put in a tarball and `docker import`ed, tagged by the binary's SHA-256 so the tests
//! of one build share it. The GPU inventory is a file per host (no NVML either).
//!
//! Everything a [`Lab`] starts (containers, its network) is removed when it is
//! dropped, also when the test panics. Containers carry the label
//! `gpushare-test=hosts` (`docker rm -f $(docker ps -aq -f label=gpushare-test=hosts)`
//! after a killed test run).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where the binary is in the image.
pub const IMAGE_BIN: &str = "/usr/local/bin/gpushare";
/// Where etcd is in the image.
pub const ETCD_BIN: &str = "/usr/local/bin/etcd";
/// The port the controller serves the agent API on, inside the network.
pub const AGENT_PORT: u16 = 7443;
/// The name hosts dial the controller by (a network alias; in the server certificate).
pub const CONTROLLER_NAME: &str = "controller";
/// The label on everything a lab starts.
pub const LABEL: &str = "gpushare-test=hosts";
/// The stand-in MPS daemon's pipe directory in the image.
const PIPE_DIR: &str = "/run/gpushare-mps/pipe";
/// The stand-in for `nvidia-cuda-mps-control` in the image.
const MPS_CONTROL: &str = "/usr/local/bin/nvidia-cuda-mps-control";
/// While this file exists in a host, its stand-in MPS control does not answer.
const MPS_BROKEN: &str = "/run/gpushare-mps/broken";
/// The agents' state directory in a host container.
pub const AGENT_STATE_DIR: &str = "/var/lib/gpushare-agent";

mod image;
pub use image::ensure_image;

/// `docker ARGS`: its output (spawning docker failing panics).
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("running docker {args:?} ({e}): these tests need the Docker Engine and its CLI")
        })
}

/// `docker ARGS`, which must succeed: its stdout.
#[track_caller]
pub fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A task process found on a host: its pid (in the host's namespace), process group
/// and task id (`GPUSHARE_TASK_ID` in its environment).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TaskProcess {
    pub pid: u32,
    pub pgid: u32,
    pub task: String,
}

/// Lists the live (not zombie) processes carrying a task id, run in the host's own
/// process namespace with its busybox: "pid pgid task" lines.
const TASK_PS: &str = r#"for d in /proc/[0-9]*; do
  s=$(cat "$d/stat" 2>/dev/null) || continue
  rest=${s##*) }
  set -- $rest
  [ "$1" = Z ] && continue
  t=$(tr '\0' '\n' < "$d/environ" 2>/dev/null | grep '^GPUSHARE_TASK_ID=' | head -n 1)
  [ -n "$t" ] && echo "${d#/proc/} $3 ${t#GPUSHARE_TASK_ID=}"
done; true"#;

/// One container the lab started.
#[derive(Debug, Clone)]
pub struct Container {
    /// Its Docker name.
    pub name: String,
}

/// A controller container and what hosts need to reach it.
#[derive(Debug, Clone)]
pub struct Controller {
    pub container: Container,
    /// `https://controller:7443`.
    pub url: String,
    /// `sha256:...` of the cluster CA.
    pub ca_hash: String,
}

/// The runtime settings of the hosts' agents.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// `--interval` seconds.
    pub interval: u32,
    /// `--stop-grace` seconds.
    pub stop_grace: u32,
    /// The GPU inventory: `(model, memory MiB)` per GPU.
    pub gpus: Vec<(String, u64)>,
}

impl Default for AgentSettings {
    fn default() -> AgentSettings {
        AgentSettings {
            interval: 1,
            stop_grace: 1,
            gpus: vec![("l4".into(), 22888)],
        }
    }
}

/// A private network with a controller and hosts; everything removed on drop.
pub struct Lab {
    /// The configuration directory (mounted at the same path in the controller).
    pub dir: PathBuf,
    pub image: String,
    pub network: String,
    prefix: String,
    pub agents: AgentSettings,
    containers: Mutex<BTreeSet<String>>,
    /// Host id -> container, for the hosts booted.
    hosts: Mutex<BTreeMap<String, Container>>,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Lab {
    /// A lab for the configuration in `dir`: the image (built if needed) and a
    /// private network of its own.
    pub fn new(dir: &Path) -> Lab {
        let image = ensure_image().to_string();
        remove_leftovers();
        let prefix = format!(
            "gpushare-hosts-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let network = format!("{prefix}-net");
        docker_ok(&[
            "network", "create", "--label", LABEL, "--driver", "bridge", &network,
        ]);
        Lab {
            dir: dir.to_path_buf(),
            image,
            network,
            prefix,
            agents: AgentSettings::default(),
            containers: Mutex::new(BTreeSet::new()),
            hosts: Mutex::new(BTreeMap::new()),
        }
    }

    fn track(&self, name: &str) {
        self.containers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name.to_string());
    }

    /// `docker run -d` on the lab's network of the image with `args` (docker's
    /// options, then the image's command after `--`); the container.
    pub fn run(&self, suffix: &str, docker_args: &[&str], command: &[&str]) -> Container {
        let name = format!("{}-{suffix}", self.prefix);
        self.track(&name);
        let mut args = vec![
            "run",
            "-d",
            "--name",
            &name,
            "--label",
            LABEL,
            "--network",
            &self.network,
            "--hostname",
            suffix,
            "--env",
            "GPUSHARE_LOG=info",
            "--env",
            "NO_COLOR=1",
        ];
        args.extend_from_slice(docker_args);
        args.push(&self.image);
        args.extend_from_slice(command);
        docker_ok(&args);
        Container { name }
    }

    /// Start the controller: `gpushare COMMAND... DIR --agent-listen 0.0.0.0:7443
    /// --agent-name controller` (e.g. `["reconcile", "--interval", "1"]` or
    /// `["serve"]`), the configuration directory mounted at its own path; waits until
    /// it announces the agent API.
    pub fn start_controller(&self, command: &[&str]) -> Controller {
        let dir = self.dir.display().to_string();
        let mount = format!("{dir}:{dir}");
        let listen = format!("0.0.0.0:{AGENT_PORT}");
        let mut cmd = vec![IMAGE_BIN];
        cmd.extend_from_slice(command);
        cmd.extend([
            dir.as_str(),
            "--agent-listen",
            &listen,
            "--agent-name",
            CONTROLLER_NAME,
        ]);
        let container = self.run(
            "controller",
            &["--network-alias", CONTROLLER_NAME, "-v", &mount, "-w", &dir],
            &cmd,
        );
        let ca_hash = self.wait_announced(&container);
        Controller {
            container,
            url: format!("https://{CONTROLLER_NAME}:{AGENT_PORT}"),
            ca_hash,
        }
    }

    /// Wait until `controller` says it serves the agent API: the CA hash it names.
    fn wait_announced(&self, c: &Container) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (out, err) = self.logs(c);
            // "<command>: agent API of cluster "c" on https://0.0.0.0:7443 (CA sha256:...)"
            // The newest announcement (a restarted container keeps its old output).
            if let Some(line) = out
                .lines()
                .rev()
                .find(|l| l.contains("agent API of cluster"))
            {
                return line
                    .split("(CA ")
                    .nth(1)
                    .map(|r| r.trim().trim_end_matches(')').to_string())
                    .unwrap_or_else(|| panic!("no CA hash in {line:?}"));
            }
            assert!(
                Instant::now() < deadline && self.running(c),
                "the controller announced no agent API:\n{out}\n--- stderr:\n{err}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Start a one-member etcd on the lab's network: the store URL (`etcd://IP:2379/
    /// PREFIX`, the container's address on the lab's network, which this machine and
    /// the controller both reach) once it accepts connections.
    pub fn start_etcd(&self, prefix: &str) -> String {
        let c = self.run(
            "etcd",
            &[],
            &[
                ETCD_BIN,
                "--name",
                "lab",
                "--data-dir",
                "/tmp/etcd",
                "--listen-client-urls",
                "http://0.0.0.0:2379",
                "--advertise-client-urls",
                "http://127.0.0.1:2379",
                "--listen-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-advertise-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-cluster",
                "lab=http://127.0.0.1:2380",
            ],
        );
        let format = format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            self.network
        );
        let ip = docker_ok(&["inspect", "-f", &format, &c.name])
            .trim()
            .to_string();
        let addr: std::net::SocketAddr = format!("{ip}:2379")
            .parse()
            .unwrap_or_else(|e| panic!("etcd's address {ip:?}: {e}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
            assert!(
                Instant::now() < deadline && self.running(&c),
                "etcd did not listen on {addr}: {}",
                self.logs(&c).1
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        format!("etcd://{addr}/{prefix}")
    }

    /// Kill the controller (SIGKILL: no graceful anything).
    pub fn kill(&self, c: &Container) {
        docker_ok(&["kill", &c.name]);
    }

    /// Start a killed controller again, same command and address; waits until it
    /// serves. Its output since: everything after `before` bytes of its log.
    pub fn restart_controller(&self, c: &Controller) {
        let before = self
            .logs(&c.container)
            .0
            .matches("agent API of cluster")
            .count();
        docker_ok(&["start", &c.container.name]);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self
            .logs(&c.container)
            .0
            .matches("agent API of cluster")
            .count()
            <= before
        {
            assert!(
                Instant::now() < deadline,
                "the restarted controller announced no agent API:\n{}",
                self.logs(&c.container).1
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let hash = self.wait_announced(&c.container);
        assert_eq!(hash, c.ca_hash, "the CA changed across a restart");
    }

    /// A host's boot environment, as `docker run --env-file` lines: the controller's
    /// address, a join token and the CA hash, the host id. ONE place says how a host
    /// boots: with the user data its launch gave it (`gpushare debug user-data HOST`:
    /// a single-use token minted for it, when the configuration names a
    /// `controller_address`), else with a pool token made for it (`gpushare token
    /// create --pool`) and its host id, as an operator would hand it over.
    pub fn boot_env(&self, controller: &Controller, host: &str) -> String {
        let user_data = crate::gp(&self.dir, &["debug", "user-data", host]).run();
        if user_data.code == 0 {
            assert!(
                user_data
                    .stdout
                    .contains(&format!("GPUSHARE_SERVER={}\n", controller.url))
                    && user_data
                        .stdout
                        .contains(&format!("GPUSHARE_CA_HASH={}\n", controller.ca_hash)),
                "the user data names another controller than {} ({}):\n{}",
                controller.url,
                controller.ca_hash,
                user_data.stdout
            );
            return user_data.stdout;
        }
        let show = crate::show_json(&self.dir);
        let pool = crate::arr(&show, "hosts")
            .iter()
            .find(|h| h["id"] == host)
            .and_then(|h| h["capacity_provider"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("host {host} is not in the fleet: {show:#}"));
        let token = self.token(&["--pool", &pool]);
        format!(
            "GPUSHARE_SERVER={}\nGPUSHARE_JOIN_TOKEN={token}\nGPUSHARE_CA_HASH={}\nGPUSHARE_HOST_ID={host}\n",
            controller.url, controller.ca_hash
        )
    }

    /// `gpushare token create --json EXTRA` in the lab's directory: the token.
    pub fn token(&self, extra: &[&str]) -> String {
        token_in(&self.dir, extra)
    }

    /// Boot a container for planner host `host`: its boot environment
    /// ([`Lab::boot_env`]) and the agent's runtime flags.
    pub fn boot_host(&self, controller: &Controller, host: &str) -> Container {
        let env = self.boot_env(controller, host);
        self.start_host(host, &env, &[])
    }

    /// Start a host container `name` running `gpushare agent` with the environment
    /// `env_file` (lines `K=V`: the host id is `GPUSHARE_HOST_ID` there), the runtime
    /// flags of [`AgentSettings`] and `extra` agent arguments.
    pub fn start_host(&self, name: &str, env_file: &str, extra: &[&str]) -> Container {
        self.start_host_with(name, env_file, &[], extra)
    }

    /// [`Lab::start_host`] with more `docker run` options (mounts...).
    pub fn start_host_with(
        &self,
        name: &str,
        env_file: &str,
        docker_args: &[&str],
        extra: &[&str],
    ) -> Container {
        let host = name;
        let files = self.dir.join(format!(".lab-{host}"));
        std::fs::create_dir_all(&files).expect("host files");
        let env_path = files.join("boot.env");
        std::fs::write(&env_path, env_file).expect("env file");
        let inventory: Vec<String> = self
            .agents
            .gpus
            .iter()
            .enumerate()
            .map(|(i, (model, mib))| {
                format!(
                    r#"{{"index":{i},"model":"{model}","memory_mib":{mib},"uuid":"GPU-{host}-{i}"}}"#
                )
            })
            .collect();
        let inv_path = files.join("gpus.json");
        std::fs::write(&inv_path, format!("[{}]", inventory.join(","))).expect("inventory");
        let inv_mount = format!("{}:/etc/gpushare/gpus.json:ro", inv_path.display());
        let env_arg = env_path.display().to_string();
        let interval = self.agents.interval.to_string();
        let grace = self.agents.stop_grace.to_string();
        let mut cmd = vec![
            IMAGE_BIN,
            "agent",
            "--runtime",
            "process",
            "--interval",
            &interval,
            "--stop-grace",
            &grace,
            "--state-dir",
            AGENT_STATE_DIR,
            "--mps-control",
            MPS_CONTROL,
            "--mps-pipe-dir",
            PIPE_DIR,
            "--inventory-file",
            "/etc/gpushare/gpus.json",
        ];
        cmd.extend_from_slice(extra);
        let mut opts = vec!["--env-file", &env_arg, "-v", &inv_mount];
        opts.extend_from_slice(docker_args);
        let c = self.run(host, &opts, &cmd);
        self.hosts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(host.to_string(), c.clone());
        c
    }

    /// The host containers booted, by host id.
    pub fn hosts(&self) -> BTreeMap<String, Container> {
        self.hosts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The hypervisor's round: boot a container for every host of the fleet (`show
    /// --json`, not terminated) that has none yet. The hosts booted.
    pub fn boot_new_hosts(&self, controller: &Controller) -> Vec<String> {
        let show = crate::show_json(&self.dir);
        let have = self.hosts();
        let mut booted = Vec::new();
        for h in crate::arr(&show, "hosts") {
            let id = h["id"].as_str().expect("host id").to_string();
            if h["state"] == "terminated" || have.contains_key(&id) {
                continue;
            }
            self.boot_host(controller, &id);
            booted.push(id);
        }
        booted
    }

    /// Cut `c` off the lab's network.
    pub fn disconnect(&self, c: &Container) {
        docker_ok(&["network", "disconnect", &self.network, &c.name]);
    }

    /// Put `c` back on the lab's network.
    pub fn reconnect(&self, c: &Container) {
        docker_ok(&["network", "connect", &self.network, &c.name]);
    }

    /// The pid (in this machine's namespace) of the container's first process: the
    /// agent of a host, the controller.
    pub fn main_pid(&self, c: &Container) -> u32 {
        docker_ok(&["inspect", "-f", "{{.State.Pid}}", &c.name])
            .trim()
            .parse()
            .expect("a pid")
    }

    /// Freeze the host's agent alone (SIGSTOP; its tasks keep running).
    pub fn stop_agent(&self, c: &Container) {
        signal(self.main_pid(c), "STOP");
    }

    /// Let a frozen agent run again (SIGCONT).
    pub fn cont_agent(&self, c: &Container) {
        signal(self.main_pid(c), "CONT");
    }

    /// Freeze the whole host, tasks included (`docker pause`).
    pub fn pause(&self, c: &Container) {
        docker_ok(&["pause", &c.name]);
    }

    /// Thaw a paused host (`docker unpause`).
    pub fn unpause(&self, c: &Container) {
        docker_ok(&["unpause", &c.name]);
    }

    /// Whether `c` runs.
    pub fn running(&self, c: &Container) -> bool {
        docker(&["inspect", "-f", "{{.State.Running}}", &c.name])
            .stdout
            .starts_with(b"true")
    }

    /// The exit code of a stopped container (None while it runs).
    pub fn exit_code(&self, c: &Container) -> Option<i32> {
        if self.running(c) {
            return None;
        }
        docker_ok(&["inspect", "-f", "{{.State.ExitCode}}", &c.name])
            .trim()
            .parse()
            .ok()
    }

    /// Its stdout and stderr so far.
    pub fn logs(&self, c: &Container) -> (String, String) {
        let out = docker(&["logs", &c.name]);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Every host's agent log, for failure messages.
    pub fn host_logs(&self) -> String {
        self.hosts()
            .iter()
            .map(|(h, c)| format!("--- {h}\n{}", self.logs(c).1))
            .collect()
    }

    /// The task processes running on host container `c`, from its own process list
    /// (`/proc` inside it; not from any report or state). A paused host cannot be
    /// listed.
    pub fn task_processes(&self, c: &Container) -> Vec<TaskProcess> {
        let out = docker_ok(&["exec", &c.name, "sh", "-c", TASK_PS]);
        let mut v: Vec<TaskProcess> = out
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                Some(TaskProcess {
                    pid: f.next()?.parse().ok()?,
                    pgid: f.next()?.parse().ok()?,
                    task: f.next()?.to_string(),
                })
            })
            .collect();
        v.sort();
        v
    }

    /// Per running host: task id -> how many copies run there (a copy is a process
    /// group carrying the task id; the shell wrapper and its command are one copy).
    pub fn copies_by_host(&self) -> BTreeMap<String, BTreeMap<String, usize>> {
        let mut out = BTreeMap::new();
        for (h, c) in self.hosts() {
            if !self.running(&c) {
                continue;
            }
            let groups: BTreeSet<(String, u32)> = self
                .task_processes(&c)
                .into_iter()
                .map(|p| (p.task, p.pgid))
                .collect();
            let mut per: BTreeMap<String, usize> = BTreeMap::new();
            for (t, _) in groups {
                *per.entry(t).or_insert(0) += 1;
            }
            out.insert(h, per);
        }
        out
    }

    /// Task id -> copies running on all hosts together.
    pub fn copies(&self) -> BTreeMap<String, usize> {
        let mut all = BTreeMap::new();
        for per in self.copies_by_host().into_values() {
            for (t, n) in per {
                *all.entry(t).or_insert(0) += n;
            }
        }
        all
    }

    /// Wait (bounded) until the hosts' process lists show exactly `want`, each task
    /// once; `tick` runs every round (e.g. [`Lab::boot_new_hosts`]).
    pub fn wait_exactly_once(&self, want: &BTreeSet<String>, secs: u64, mut tick: impl FnMut()) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            tick();
            let copies = self.copies();
            let ids: BTreeSet<String> = copies.keys().cloned().collect();
            if ids == *want && copies.values().all(|n| *n == 1) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "after {secs} s the hosts run {:?}, want each of {want:?} once\n{}",
                self.copies_by_host(),
                self.host_logs()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Make host `c`'s stand-in MPS control answer like a healthy daemon again
    /// (`true`) or stop answering (`false`), as a crashed MPS daemon would.
    pub fn set_mps_answering(&self, c: &Container, answering: bool) {
        let cmd = if answering {
            format!("rm -f {MPS_BROKEN}")
        } else {
            format!("touch {MPS_BROKEN}")
        };
        docker_ok(&["exec", &c.name, "sh", "-c", &cmd]);
    }

    /// Remove one container now.
    pub fn remove(&self, c: &Container) {
        let _ = docker(&["rm", "-f", &c.name]);
        self.containers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&c.name);
        self.hosts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, h| h.name != c.name);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let names: Vec<String> = self
            .containers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        if !names.is_empty() {
            // A paused container cannot be removed: thaw first.
            for n in &names {
                let _ = docker(&["unpause", n]);
            }
            let mut args = vec!["rm", "-f", "-v"];
            args.extend(names.iter().map(String::as_str));
            let _ = docker(&args);
        }
        let _ = docker(&["network", "rm", &self.network]);
    }
}

/// Remove what labs of test processes that no longer run left behind (a run killed
/// before its `Drop`): containers and networks named `gpushare-hosts-<pid>-...`
/// whose pid is gone. Once per test process.
fn remove_leftovers() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let dead = |name: &str| {
            name.strip_prefix("gpushare-hosts-")
                .and_then(|r| r.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        };
        let filter = format!("label={LABEL}");
        let names = docker_ok(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"]);
        let gone: Vec<&str> = names.lines().filter(|n| dead(n)).collect();
        for n in &gone {
            let _ = docker(&["unpause", n]);
            let _ = docker(&["rm", "-f", "-v", n]);
        }
        let nets = docker_ok(&[
            "network",
            "ls",
            "--filter",
            &filter,
            "--format",
            "{{.Name}}",
        ]);
        for n in nets.lines().filter(|n| dead(n)) {
            let _ = docker(&["network", "rm", n]);
        }
    });
}

fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(st.success(), "kill -{sig} {pid}");
}

/// `gpushare token create --json EXTRA` in `dir`: the token.
pub fn token_in(dir: &Path, extra: &[&str]) -> String {
    let mut args = vec!["token", "create", "--json"];
    args.extend_from_slice(extra);
    let r = crate::gp(dir, &args).run();
    r.expect_code(0);
    r.json()["token"].as_str().expect("token").to_string()
}
