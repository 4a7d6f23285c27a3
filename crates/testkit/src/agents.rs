//! Host agents as real processes, for the end-to-end tests of a local fleet whose
//! agents are external (`local_agents = "external"`): one `gpushare agent` per host,
//! each with its log in `DIR/agent-HOST.log`, and the stand-ins a machine without a
//! GPU needs: an MPS control program that answers like a healthy daemon (a script)
//! and a GPU inventory file (one L4). tests/agents_e2e.rs and tests/jobs_e2e.rs
//! build their fleets on it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The agent processes of one test, by host id. Dropping it kills them and every
/// process their process runtime started below `runtime_dir`.
pub struct AgentProcesses {
    /// The test's directory: the configuration, the file store (`.gpushare`), logs.
    pub dir: PathBuf,
    /// Where the agents' process runtimes keep their tasks (`DIR/agent-runtime`).
    pub runtime_dir: PathBuf,
    /// The stand-in `nvidia-cuda-mps-control`.
    pub mps: PathBuf,
    pub pipe_dir: PathBuf,
    /// The GPU inventory every host shares unless it has its own ([`Self::inventory_of`]).
    pub inventory: PathBuf,
    pub running: BTreeMap<String, Child>,
}

/// How to start one agent: beside the flags every agent of these tests gets.
pub struct AgentSpawn<'a> {
    /// How it reaches its assignment (`--store ... --cluster ... --host-id ...`, or
    /// nothing when `env` carries its boot environment).
    pub link: &'a [&'a str],
    /// Its environment beside the test's (a runtime's settings, a host's user data).
    pub env: &'a [(String, String)],
    /// `process` or `docker`.
    pub runtime: &'a str,
    /// Its `--state-dir`.
    pub state_dir: &'a Path,
    /// Its `--inventory-file`.
    pub inventory: &'a Path,
}

impl AgentProcesses {
    /// The stand-ins in `dir/mps` and `dir/gpus.json` (one L4 whose UUID is `gpu_uuid`).
    pub fn new(dir: &Path, gpu_uuid: &str) -> AgentProcesses {
        let pipe_dir = dir.join("mps").join("pipe");
        std::fs::create_dir_all(&pipe_dir).expect("pipe dir");
        let mps = dir.join("mps").join("nvidia-cuda-mps-control");
        std::fs::write(
            &mps,
            "#!/bin/sh\nread -r line\n[ \"$line\" = get_default_active_thread_percentage ] || exit 2\necho 100.0\n",
        )
        .expect("stand-in MPS control");
        chmod_755(&mps);
        let inventory = dir.join("gpus.json");
        std::fs::write(
            &inventory,
            format!(r#"[{{"index":0,"model":"l4","memory_mib":22888,"uuid":"{gpu_uuid}"}}]"#),
        )
        .expect("inventory");
        AgentProcesses {
            dir: dir.to_path_buf(),
            runtime_dir: dir.join("agent-runtime"),
            mps,
            pipe_dir,
            inventory,
            running: BTreeMap::new(),
        }
    }

    /// Host `id`'s own inventory file (`gpus-<id>.json`, a copy of the shared one
    /// made on first use), so that a test can give one host's GPUs facts of its own.
    pub fn inventory_of(&self, id: &str) -> PathBuf {
        let own = self.dir.join(format!("gpus-{id}.json"));
        if !own.exists() {
            std::fs::copy(&self.inventory, &own).expect("host inventory");
        }
        own
    }

    /// The file store of the test's directory, as `--store` takes it.
    pub fn store_url(&self) -> String {
        format!("file://{}", self.dir.join(".gpushare").display())
    }

    /// Start `gpushare agent` for host `id`: one pass a second, a 1 s stop grace,
    /// the stand-in MPS control program, its log in `DIR/agent-ID.log`.
    pub fn spawn(&mut self, id: &str, how: AgentSpawn<'_>) {
        let log =
            std::fs::File::create(self.dir.join(format!("agent-{id}.log"))).expect("agent log");
        let child = Command::new(crate::gpushare_bin())
            .arg("agent")
            .args(how.link)
            .envs(how.env.iter().map(|(k, v)| (k, v)))
            .args(["--runtime", how.runtime, "--interval", "1"])
            .arg("--state-dir")
            .arg(how.state_dir)
            .arg("--mps-control")
            .arg(&self.mps)
            .arg("--mps-pipe-dir")
            .arg(&self.pipe_dir)
            .arg("--inventory-file")
            .arg(how.inventory)
            .args(["--stop-grace", "1"])
            .env("GPUSHARE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawning gpushare agent");
        self.running.insert(id.to_string(), child);
    }

    /// SIGKILL host `host`'s agent (its tasks keep running).
    pub fn kill(&mut self, host: &str) {
        let mut c = self.running.remove(host).expect("an agent for the host");
        c.kill().expect("SIGKILL");
        let _ = c.wait();
    }

    /// The logs of the running agents, each under a `--- HOST` line.
    pub fn logs(&self) -> String {
        agent_logs(&self.dir, self.running.keys())
    }
}

/// The logs `DIR/agent-HOST.log` of `hosts`' agents, each under a `--- HOST` line.
pub fn agent_logs<'a>(dir: &Path, hosts: impl IntoIterator<Item = &'a String>) -> String {
    hosts
        .into_iter()
        .map(|h| {
            let log =
                std::fs::read_to_string(dir.join(format!("agent-{h}.log"))).unwrap_or_default();
            format!("--- {h}\n{log}")
        })
        .collect()
}

impl Drop for AgentProcesses {
    fn drop(&mut self) {
        for c in self.running.values_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The tasks the agents started (a killed agent's included: a retired
        // simulated host does not take its processes with it).
        kill_task_groups(&self.runtime_dir);
    }
}

/// SIGKILL the process group of every container the process runtime recorded below
/// `root`.
pub fn kill_task_groups(root: &Path) {
    for (_, pgid, _) in crate::process_runtime_records(root) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status();
    }
}

/// `chmod 755 path`: a script a test wrote, made executable.
pub fn chmod_755(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod 755");
}
