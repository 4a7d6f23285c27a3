//! The data plane end to end, with real processes: a local fleet whose hosts' agents
//! are external (`local_agents = "external"`), so each host runs a real
//! `gpushare agent` process with the process runtime (every task a real `sleep`).
//! `apply` places the tasks; the agents start them and report; `show` shows the
//! heartbeats, GPUs and task states. Then one agent is killed with SIGKILL: after the
//! silent threshold `gpushare reconcile --once` replaces its host start-before-stop,
//! and every task runs again elsewhere, none lost or run twice (counted from the
//! agents' reports). A host whose certificate is revoked stops its tasks and joins
//! again with a new token.
//!
//! Stand-ins, because the test machines have no GPU: the MPS control program is a
//! script that answers like a healthy daemon, and the GPU inventory is a file.

use gpushare_core::model::TaskState;
use gpushare_tests::agents::{AgentProcesses, AgentSpawn};
use gpushare_tests::{arr, gp, show_json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
gpushare {
  cluster      = "agents"
  cloud        = "local"
  local_agents = "external"
}

# One L4 per host: two 8 GiB shares fit on one GPU.
capacity_provider "l4" {
  instance_type = "g6.xlarge"
  max_size      = 4
}

task_definition "worker" {
  container "main" {
    image   = "unused-by-the-process-runtime"
    command = ["sleep", "600"]
    cpu     = 1024
    memory  = 1024
    gpu {
      mps {
        memory = 8192
      }
    }
  }
}

service "worker" {
  task_definition   = "worker"
  capacity_provider = "l4"
  desired_count     = 4
}
"#;

/// The agents of one test: one `gpushare agent` process per host id (the testkit's
/// [`AgentProcesses`], which it derefs to), with this file's ways to start them.
struct Agents {
    procs: AgentProcesses,
    store: PathBuf,
    /// Host id -> (runtime, environment) of its agent instead of the process runtime.
    runtimes: BTreeMap<String, (String, Vec<(String, String)>)>,
}

impl std::ops::Deref for Agents {
    type Target = AgentProcesses;
    fn deref(&self) -> &AgentProcesses {
        &self.procs
    }
}

impl std::ops::DerefMut for Agents {
    fn deref_mut(&mut self) -> &mut AgentProcesses {
        &mut self.procs
    }
}

impl Agents {
    fn new(dir: &Path) -> Agents {
        Agents {
            procs: AgentProcesses::new(dir, "GPU-e2e-0"),
            store: dir.join(".gpushare"),
            runtimes: BTreeMap::new(),
        }
    }

    /// Start an agent for every host of the state that has none yet (reading the
    /// store directly).
    fn start_missing(&mut self) {
        let show = show_json(&self.dir);
        for h in arr(&show, "hosts") {
            let id = h["id"].as_str().expect("host id").to_string();
            if h["state"] == "terminated" || self.running.contains_key(&id) {
                continue;
            }
            let store = format!("file://{}", self.store.display());
            let link = ["--store", &store, "--cluster", "agents", "--host-id", &id];
            let state_dir = self.runtime_dir.clone();
            self.spawn(&id, &link, &state_dir);
        }
    }

    /// Boot every host of the state that has no agent yet the way a real machine
    /// boots: with nothing but its user data (`gpushare debug user-data HOST`: the
    /// controller's address, the host's single-use join token, the CA hash, its id),
    /// handed to the agent as its environment. No token is made by hand.
    fn boot_missing(&mut self) {
        let show = show_json(&self.dir);
        for h in arr(&show, "hosts") {
            let id = h["id"].as_str().expect("host id").to_string();
            if h["state"] == "terminated" || self.running.contains_key(&id) {
                continue;
            }
            let r = gp(&self.dir, &["debug", "user-data", &id]).run();
            r.expect_code(0);
            let env: Vec<(String, String)> = r
                .stdout
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                names,
                [
                    "GPUSHARE_SERVER",
                    "GPUSHARE_JOIN_TOKEN",
                    "GPUSHARE_CA_HASH",
                    "GPUSHARE_HOST_ID"
                ],
                "{}",
                r.stdout
            );
            let state_dir = self.runtime_dir.join(&id);
            self.spawn_with_env(&id, &[], &env, &state_dir);
        }
    }

    /// Start `gpushare agent` for host `id` with `link` (how it reaches its
    /// assignment) and the flags every agent of these tests gets; `log` names its log.
    fn spawn(&mut self, id: &str, link: &[&str], state_dir: &Path) {
        self.spawn_with_env(id, link, &[], state_dir);
    }

    /// [`Agents::spawn`] with `boot_env` set for the agent (a host's user data).
    fn spawn_with_env(
        &mut self,
        id: &str,
        link: &[&str],
        boot_env: &[(String, String)],
        state_dir: &Path,
    ) {
        let (runtime, mut env) = self
            .runtimes
            .get(id)
            .cloned()
            .unwrap_or_else(|| ("process".to_string(), vec![]));
        env.extend_from_slice(boot_env);
        let inventory = self.inventory_of(id);
        let how = AgentSpawn {
            link,
            env: &env,
            runtime: &runtime,
            state_dir,
            inventory: &inventory,
        };
        self.procs.spawn(id, how);
    }

    /// Task id -> reporting host, for the tasks reported running by live agents.
    fn running_tasks(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for r in gpushare_tests::file_store_reports(&self.store) {
            if !self.running.contains_key(&r.host_id) {
                continue;
            }
            for (id, state) in &r.tasks {
                if *state == TaskState::Running {
                    out.push((id.clone(), r.host_id.clone()));
                }
            }
        }
        out
    }

    /// The ids of the tasks the agents report running.
    fn alive_tasks(&self) -> BTreeSet<String> {
        self.running_tasks().into_iter().map(|(t, _)| t).collect()
    }

    /// Wait (bounded) until the live agents report exactly the tasks `want` running.
    fn wait_running(&self, want: &BTreeSet<String>, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let running = self.running_tasks();
            let ids: BTreeSet<String> = running.iter().map(|(t, _)| t.clone()).collect();
            if ids == *want && running.len() == want.len() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "after {secs} s the agents report running {running:?}, want {want:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Make the hosts' inventory files list each task of `uses` (task id -> (MiB,
    /// SM percent)) as a compute process on GPU 0, by its recorded pid (the stand-in
    /// for NVML's process listing); other hosts' files list none.
    fn set_gpu_use(&self, uses: &BTreeMap<String, (u64, u64)>) {
        let pids = self.task_pids();
        let host_of: BTreeMap<String, String> = arr(&show_json(&self.dir), "tasks")
            .iter()
            .filter_map(|t| {
                Some((
                    t["id"].as_str()?.to_string(),
                    t["host"].as_str()?.to_string(),
                ))
            })
            .collect();
        let mut per_host: BTreeMap<String, Vec<serde_json::Value>> = self
            .running
            .keys()
            .map(|h| (h.clone(), Vec::new()))
            .collect();
        for (task, (mib, sm)) in uses {
            let (Some(host), Some(pid)) =
                (host_of.get(task), pids.get(task).and_then(|p| p.first()))
            else {
                continue;
            };
            per_host
                .entry(host.clone())
                .or_default()
                .push(serde_json::json!({
                    "pid": pid, "used_memory_mib": mib, "sm_percent": sm,
                }));
        }
        for (host, procs) in per_host {
            let path = self.inventory_of(&host);
            let mut gpus: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&path).expect("inventory")).expect("json");
            gpus[0]["processes"] = serde_json::Value::Array(procs);
            std::fs::write(&path, serde_json::to_vec(&gpus).expect("json")).expect("write");
        }
    }

    /// Each task's recorded processes (the wrapper's, in the task's group), as the
    /// process runtime recorded them.
    fn task_pids(&self) -> BTreeMap<String, Vec<u64>> {
        let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (task, _, pid) in self.task_records() {
            out.entry(task).or_default().push(pid);
        }
        out
    }

    /// The process groups the process runtime recorded (its `task.json` records).
    fn task_groups(&self) -> Vec<String> {
        self.task_records()
            .into_iter()
            .map(|(_, pgid, _)| pgid.to_string())
            .collect()
    }

    /// (task, process group, process) of every container the process runtime recorded.
    fn task_records(&self) -> Vec<(String, u64, u64)> {
        gpushare_tests::process_runtime_records(&self.runtime_dir)
    }
}

/// The service's tasks in the state that are meant to run.
fn wanted_tasks(dir: &Path) -> BTreeSet<String> {
    arr(&show_json(dir), "tasks")
        .iter()
        .filter(|t| t["state"] == "pending" || t["state"] == "running")
        .map(|t| t["id"].as_str().expect("task id").to_string())
        .collect()
}

/// `gpushare reconcile`, one pass with a 3 s heartbeat timeout.
fn reconcile_args() -> [&'static str; 6] {
    [
        "reconcile",
        "--once",
        "--interval",
        "1",
        "--heartbeat-timeout",
        "3",
    ]
}

/// One `gpushare reconcile` pass; its summary says `what`.
fn reconcile_once(dir: &Path, what: &str) {
    let r = gp(dir, &reconcile_args()).run();
    r.expect_code(0);
    assert!(r.stdout.contains(what), "{}{}", r.stdout, r.stderr);
}

#[test]
fn external_agents_run_every_task_and_a_killed_agents_host_is_replaced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("main.hcl"), CONFIG).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);

    // Nothing runs until the hosts' agents do: `show` says the tasks are pending.
    let show = show_json(dir);
    assert_eq!(arr(&show, "hosts").len(), 2, "{show:#}");
    assert!(
        arr(&show, "tasks").iter().all(|t| t["state"] == "pending"),
        "{show:#}"
    );

    let mut agents = Agents::new(dir);
    agents.start_missing();
    let want = wanted_tasks(dir);
    assert_eq!(want.len(), 4);
    agents.wait_running(&want, 60);

    // `show` reads the agents' reports: heartbeats, GPU inventory, task states.
    let show = show_json(dir);
    for h in arr(&show, "hosts") {
        assert!(h["last_heartbeat"].as_u64().is_some(), "{h:#}");
        assert_eq!(h["mps_health"], "healthy", "{h:#}");
        assert_eq!(h["gpus"][0]["memory_mib"], 22888, "{h:#}");
    }
    assert!(
        arr(&show, "tasks").iter().all(|t| t["state"] == "running"),
        "{show:#}"
    );
    let text = gp(dir, &["show"]).run();
    text.expect_code(0);
    assert!(text.stdout.contains("heartbeat"), "{}", text.stdout);

    // Kill one host's agent: its heartbeat stops.
    let victim = agents.running_tasks()[0].1.clone();
    let moved: BTreeSet<String> = agents
        .running_tasks()
        .into_iter()
        .filter(|(_, h)| *h == victim)
        .map(|(t, _)| t)
        .collect();
    agents.kill(&victim);
    std::thread::sleep(Duration::from_secs(4));
    // The pass launches a replacement host and waits, start before stop, for the
    // moved tasks to be reported running before it stops the old ones and retires
    // the silent host; as on a real fleet, the new host's agent starts while it waits.
    let mut pass = gp(dir, &reconcile_args()).spawn();
    let status = wait_starting_agents(&mut pass, &mut agents);
    // The moment the pass returns, every task it wants is already reported running:
    // the moves waited for their successors.
    let running_at_return: BTreeSet<String> =
        agents.running_tasks().into_iter().map(|(t, _)| t).collect();
    let out = pass.wait_with_output().expect("reconcile output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        status.success() && stdout.contains("applied"),
        "{stdout}{stderr}"
    );
    assert!(
        wanted_tasks(dir).is_subset(&running_at_return),
        "reconcile returned before the moved tasks ran: running {running_at_return:?}, want {:?}\n{stdout}{stderr}",
        wanted_tasks(dir)
    );

    // The silent host is retired; its tasks were re-placed on a new host.
    let show = show_json(dir);
    let hosts: Vec<&str> = arr(&show, "hosts")
        .iter()
        .filter_map(|h| h["id"].as_str())
        .collect();
    assert!(!hosts.contains(&victim.as_str()), "{show:#}");
    assert_eq!(hosts.len(), 2, "one host replaced, not more: {show:#}");
    let want_after = wanted_tasks(dir);
    assert_eq!(want_after.len(), 4, "no task lost: {show:#}");
    assert!(
        want_after.is_disjoint(&moved),
        "the silent host's tasks got new ids on their new host: {moved:?} {want_after:?}"
    );

    // The new host's agent starts; every task runs exactly once.
    agents.start_missing();
    agents.wait_running(&want_after, 60);
    let per_task: BTreeMap<String, usize> =
        agents
            .running_tasks()
            .into_iter()
            .fold(BTreeMap::new(), |mut m, (t, _)| {
                *m.entry(t).or_insert(0) += 1;
                m
            });
    assert!(per_task.values().all(|n| *n == 1), "{per_task:?}");
    // The service's first deployment is done: the next pass writes it COMPLETED
    // (the rollout going on, not drift); after that, converged, nothing to do.
    let r = gp(dir, &reconcile_args()).run();
    r.expect_code(0);
    assert!(
        r.stdout.contains("applied")
            && r.stderr.contains(
                "ok record deployment worker/1 of service.worker (revision 1): COMPLETED"
            ),
        "{}{}",
        r.stdout,
        r.stderr
    );
    reconcile_once(dir, "no changes");
}

/// A controller serving the agent API on the configuration in `dir` (`gpushare
/// serve` or `gpushare reconcile` with `--agent-listen 127.0.0.1:0`): its address and
/// CA hash (from the line that announces them), its log.
struct Serve {
    child: Child,
    url: String,
    ca_hash: String,
    log: PathBuf,
}

impl Serve {
    fn start(dir: &Path, command: &[&str]) -> Serve {
        Serve::start_on(dir, command, "127.0.0.1:0")
    }

    /// [`Serve::start`] on `listen`.
    fn start_on(dir: &Path, command: &[&str], listen: &str) -> Serve {
        Serve::launch(dir, command, listen, None)
    }

    /// [`Serve::start`] under a limit of `nofile` open files (`ulimit -n`).
    fn start_limited(dir: &Path, command: &[&str], nofile: u64) -> Serve {
        Serve::launch(dir, command, "127.0.0.1:0", Some(nofile))
    }

    fn launch(dir: &Path, command: &[&str], listen: &str, nofile: Option<u64>) -> Serve {
        use std::io::BufRead;
        let log = dir.join(format!("{}.log", command[0]));
        let mut args = command.to_vec();
        args.extend(["--agent-listen", listen]);
        let mut cmd = gp(dir, &args).env("GPUSHARE_LOG", "info");
        if let Some(n) = nofile {
            cmd = cmd.nofile(n);
        }
        let mut child = cmd.spawn_with(
            Stdio::piped(),
            std::fs::File::create(&log).expect("serve log"),
        );
        let stdout = child.stdout.take().expect("serve stdout");
        // "<command>: agent API of cluster "agents" on https://127.0.0.1:PORT (CA sha256:...)"
        let mut lines = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok);
        let line = lines
            .find(|l| l.contains("agent API of cluster"))
            .unwrap_or_else(|| {
                panic!(
                    "{command:?} announced no agent API: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        // The rest is read and dropped, so that the controller never writes to a closed pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let port = line
            .split("https://127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        let ca_hash = line
            .split("(CA ")
            .nth(1)
            .map(|r| r.trim().trim_end_matches(')').to_string())
            .unwrap_or_else(|| panic!("no CA hash in {line:?}"));
        Serve {
            child,
            url: format!("https://localhost:{port}"),
            ca_hash,
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `gpushare token create` in `dir` with `extra` flags: the token.
fn token(dir: &Path, extra: &[&str]) -> String {
    let mut args = vec!["token", "create", "--json"];
    args.extend_from_slice(extra);
    let r = gp(dir, &args).run();
    r.expect_code(0);
    r.json()["token"].as_str().expect("token").to_string()
}

/// `gpushare agent --server` for a host that may not join: it exits 1 saying `why`.
fn refused_join(serve: &Serve, dir: &Path, token: &str, host: &str, why: &str) {
    let r = gp(
        dir,
        &[
            "agent",
            "--server",
            &serve.url,
            "--ca-hash",
            &serve.ca_hash,
            "--join",
            token,
            "--host-id",
            host,
            "--runtime",
            "process",
            "--state-dir",
            &dir.join(format!("refused-{why}")).display().to_string(),
        ],
    )
    .run();
    r.expect_code(1);
    assert!(r.stderr.contains(why), "{}", r.stderr);
}

/// Every task process of the runtime, counted from the process list.
fn copies_of(tasks: &BTreeSet<String>) -> BTreeMap<String, usize> {
    tasks
        .iter()
        .map(|t| (t.clone(), gpushare_tests::task_copies(t)))
        .collect()
}

#[test]
fn agents_join_with_tokens_through_the_agent_api_and_stop_their_tasks_on_destroy() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // Its own service name: task ids (and so the process list) apart from the other
    // test's, which may run at the same time.
    let config = CONFIG.replace("service \"worker\"", "service \"joined\"");
    std::fs::write(dir.join("main.hcl"), &config).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let show = show_json(dir);
    let hosts: Vec<String> = arr(&show, "hosts")
        .iter()
        .map(|h| h["id"].as_str().expect("host id").to_string())
        .collect();
    assert_eq!(hosts.len(), 2, "{show:#}");

    let serve = Serve::start(dir, &["serve"]);
    // One host joins with a pool token (naming itself), the other with a token
    // bound to its host id (naming nothing: the token says who it is).
    let pool_token = token(dir, &["--pool", "l4"]);
    let bound_token = token(dir, &["--host-id", &hosts[1], "--ttl", "10m"]);
    let mut agents = Agents::new(dir);
    let agent_dir = |h: &str| dir.join("agent-runtime").join(h);
    let link = |token: &str, host: Option<&str>| {
        let mut v = vec![
            "--server".to_string(),
            serve.url.clone(),
            "--ca-hash".to_string(),
            serve.ca_hash.clone(),
            "--join".to_string(),
            token.to_string(),
        ];
        if let Some(h) = host {
            v.extend(["--host-id".to_string(), h.to_string()]);
        }
        v
    };
    for (host, args) in [
        (&hosts[0], link(&pool_token, Some(&hosts[0]))),
        (&hosts[1], link(&bound_token, None)),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        agents.spawn(host, &args, &agent_dir(host));
    }
    let want = wanted_tasks(dir);
    assert_eq!(want.len(), 4);
    agents.wait_running(&want, 60);
    // Every task runs exactly once (the process list, not the reports).
    let copies = copies_of(&want);
    assert!(copies.values().all(|n| *n == 1), "{copies:?}");
    // `gpushare logs` reaches an agent that reads only its own view through the
    // agent API: the request on its host's record is in that view, the answer in its
    // report (a `sleep` writes nothing, so the answer is empty, and it comes).
    let some_task = want.iter().next().expect("a task").clone();
    let logs = gp(dir, &["logs", &some_task, "--wait", "20"]).run();
    assert_eq!(
        logs.code,
        0,
        "{}{}\n{}",
        logs.stdout,
        logs.stderr,
        agents.logs()
    );
    assert_eq!(logs.stdout, "", "{}", logs.stdout);
    // Each agent reports the address it reaches the controller from (what
    // `gpushare endpoints` names): here a loopback address.
    for h in &hosts {
        let address = report_of(&agents.store, h).and_then(|r| r.address);
        let ip: std::net::IpAddr = address
            .as_deref()
            .unwrap_or_default()
            .parse()
            .unwrap_or_else(|_| panic!("host {h} reports no address: {address:?}"));
        assert!(ip.is_loopback(), "{ip}");
    }
    // Each host keeps its key and certificate, private.
    for h in &hosts {
        for f in ["host.key", "host.crt", "identity.json"] {
            let p = agent_dir(h).join("agent-api").join(f);
            let mode = std::fs::metadata(&p)
                .expect("identity file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{}", p.display());
        }
    }

    // Refused: the used-up pool token, an expired token, another cluster's token.
    refused_join(&serve, dir, &pool_token, &hosts[0], "used up");
    let expired = token(dir, &["--pool", "l4", "--ttl", "1s"]);
    std::thread::sleep(Duration::from_secs(2));
    refused_join(&serve, dir, &expired, &hosts[0], "expired");
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).expect("other dir");
    std::fs::write(
        other.join("main.hcl"),
        config.replace("cluster      = \"agents\"", "cluster      = \"other\""),
    )
    .expect("other config");
    let foreign = token(&other, &["--pool", "l4"]);
    refused_join(&serve, dir, &foreign, &hosts[0], "unknown");
    // The controller logged each refusal, without the token.
    let log = serve.log();
    assert_eq!(log.matches("join refused").count(), 3, "{log}");
    for t in [&pool_token, &bound_token, &expired, &foreign] {
        let secret = t.split('.').nth(1).expect("secret");
        assert!(!log.contains(secret), "a token in the log:\n{log}");
    }

    // The controller goes away: the agents keep their tasks; it comes back on the
    // same address and they reconnect (what follows needs their new streams).
    let port = serve.url.rsplit(':').next().expect("port").to_string();
    drop(serve);
    std::thread::sleep(Duration::from_secs(3));
    let copies = copies_of(&want);
    assert!(copies.values().all(|n| *n == 1), "tasks kept: {copies:?}");
    let _serve = Serve::start_on(dir, &["serve"], &format!("127.0.0.1:{port}"));

    // Destroy: the hosts leave the fleet and their agents stop every task.
    gp(dir, &["destroy", "--auto-approve"]).run().expect_code(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let copies = copies_of(&want);
        if copies.values().all(|n| *n == 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "task processes left after destroy: {copies:?}\n{}",
            agents.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_revoked_hosts_agent_stops_its_tasks_and_the_host_joins_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let config = CONFIG
        .replace("service \"worker\"", "service \"revoked\"")
        .replace("desired_count     = 4", "desired_count     = 2");
    std::fs::write(dir.join("main.hcl"), &config).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let host = arr(&show_json(dir), "hosts")[0]["id"]
        .as_str()
        .expect("host id")
        .to_string();
    let serve = Serve::start(dir, &["serve"]);
    let mut agents = Agents::new(dir);
    let state_dir = dir.join("agent-runtime").join(&host);
    let start = |agents: &mut Agents, token: &str| {
        let link = [
            "--server",
            &serve.url,
            "--ca-hash",
            &serve.ca_hash,
            "--join",
            token,
        ];
        agents.spawn(&host, &link, &state_dir);
    };
    start(&mut agents, &token(dir, &["--host-id", &host]));
    let want = wanted_tasks(dir);
    assert_eq!(want.len(), 2);
    agents.wait_running(&want, 60);

    // The host's certificate is revoked (stolen, say): its agent is told the host is
    // removed and stops every task; its stream is refused (and its reports: api.rs).
    let r = gp(dir, &["host", "revoke", &host]).run();
    r.expect_code(0);
    assert!(r.stdout.contains("Revoked"), "{}", r.stdout);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !copies_of(&want).values().all(|n| *n == 0) {
        assert!(
            Instant::now() < deadline,
            "tasks still running after the revocation: {:?}\n{}",
            copies_of(&want),
            agents.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !serve
        .log()
        .contains("assignment refused: the certificate is revoked")
    {
        assert!(
            Instant::now() < deadline,
            "no refusal logged:\n{}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The host joins again with a new token: a fresh certificate works, the tasks run.
    agents.kill(&host);
    std::fs::remove_dir_all(state_dir.join("agent-api")).expect("forget the identity");
    start(&mut agents, &token(dir, &["--host-id", &host]));
    // (The process list, not the reports: the last one taken said "running".)
    let deadline = Instant::now() + Duration::from_secs(60);
    while !copies_of(&want).values().all(|n| *n == 1) {
        assert!(
            Instant::now() < deadline,
            "tasks not running once after joining again: {:?}\n{}",
            copies_of(&want),
            agents.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_reconcile_replica_serves_the_agent_api() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let config = CONFIG
        .replace("service \"worker\"", "service \"replica\"")
        .replace("desired_count     = 4", "desired_count     = 1");
    std::fs::write(dir.join("main.hcl"), &config).expect("config");
    let controller = Serve::start(dir, &["reconcile", "--interval", "1"]);
    // The first pass launches the host; its agent joins the replica's API.
    let deadline = Instant::now() + Duration::from_secs(60);
    let host = loop {
        let show = show_json(dir);
        if let Some(h) = arr(&show, "hosts").first() {
            break h["id"].as_str().expect("host id").to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no host launched: {}",
            controller.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let token = token(dir, &["--host-id", &host]);
    let mut agents = Agents::new(dir);
    let state_dir = dir.join("agent-runtime").join(&host);
    let link = [
        "--server",
        &controller.url,
        "--ca-hash",
        &controller.ca_hash,
        "--join",
        &token,
    ];
    agents.spawn(&host, &link, &state_dir);
    let want = wanted_tasks(dir);
    assert_eq!(want.len(), 1);
    agents.wait_running(&want, 60);
    let copies = copies_of(&want);
    assert!(copies.values().all(|n| *n == 1), "{copies:?}");
}

/// Issue 46, done-when: 2,000 idle connections that show no certificate (from 40
/// addresses, held open) to a `gpushare reconcile --agent-listen` under `ulimit -n
/// 1024` left it failing every pass ("Too many open files"), `/healthz` silent. Now
/// the controller keeps passing, its probes answer, and it holds a fixed number of
/// descriptors (the anonymous slots and its own), whatever the connections.
#[test]
fn two_thousand_idle_connections_leave_the_controller_passing_and_answering() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // No service: each pass reads the configuration and the store, and changes nothing.
    let config = CONFIG.split("service \"worker\"").next().expect("config");
    std::fs::write(dir.join("main.hcl"), config).expect("config");
    let ops = free_port();
    let listen = format!("127.0.0.1:{ops}");
    let controller = Serve::start_limited(
        dir,
        &["reconcile", "--interval", "1", "--listen", &listen],
        1024,
    );
    let pid = controller.child.id();
    let get = |path: &str| http_get(ops, path);
    let deadline = Instant::now() + Duration::from_secs(60);
    while get("/readyz").0 != 200 {
        assert!(
            Instant::now() < deadline,
            "never ready: {}",
            controller.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let port = controller
        .url
        .rsplit(':')
        .next()
        .expect("agent API port")
        .to_string();
    let mut flood = Command::new("python3")
        .args(["-c", FLOOD, &port, "2000", "40", "25"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 runs the flood");
    let mut said = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(flood.stdout.take().expect("flood stdout")),
        &mut said,
    )
    .expect("the flood says how many it connected");
    assert!(said.starts_with("connected 2000"), "flood: {said:?}");
    let passes_before = passes(&get("/metrics").1);
    let mut most_fds = 0;
    for _ in 0..12 {
        let (code, body) = get("/healthz");
        assert_eq!((code, body.trim()), (200, "ok"), "{}", controller.log());
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0);
        most_fds = most_fds.max(fds);
        std::thread::sleep(Duration::from_secs(1));
    }
    assert_eq!(get("/readyz").0, 200, "{}", controller.log());
    let passes_during = passes(&get("/metrics").1) - passes_before;
    let _ = flood.kill();
    let _ = flood.wait();
    assert!(
        passes_during >= 5,
        "{passes_during} passes in 12 s under the flood\n{}",
        controller.log()
    );
    assert!(
        most_fds < 512,
        "the controller held {most_fds} descriptors under the flood"
    );
    let log = controller.log();
    assert!(!log.contains("Too many open files"), "{log}");
}

/// Opens N connections to 127.0.0.1:PORT from ADDRS source addresses (127.0.1.x),
/// says "connected N" and holds them SECS seconds, sending nothing.
const FLOOD: &str = r#"
import resource, socket, sys, time
port, n, addrs, secs = (int(a) for a in sys.argv[1:5])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = n + 64
if hard != resource.RLIM_INFINITY and hard < want:
    sys.exit(f"this test needs {want} open files; the hard limit is {hard}")
resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
held = []
for i in range(n):
    s = socket.socket()
    s.bind((f"127.0.1.{i % addrs + 1}", 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    held.append(s)
print(f"connected {len(held)}", flush=True)
time.sleep(secs)
"#;

/// `GET path` on the operations endpoint at 127.0.0.1:`port`: status and body
/// (0 when it does not answer within 3 s).
fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(3),
    ) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .is_err()
    {
        return (0, String::new());
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (code, body.to_string())
}

/// The passes the metrics count, every outcome.
fn passes(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("gpushare_reconcile_passes_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

// ---------------------------------------------------------------------------
// Health checks (issue 31) with real agents: a GPU's health facts in a host's
// inventory file (the stand-in for NVML, as there is no GPU here) and a docker
// runtime pointed at a socket that does not answer.
// ---------------------------------------------------------------------------

/// Host `id`'s last report, read from the file store.
fn report_of(store: &Path, id: &str) -> Option<gpushare_core::model::HostReport> {
    gpushare_tests::file_store_reports(store)
        .into_iter()
        .find(|r| r.host_id == id)
}

/// Wait (bounded) until host `id` reports check `check` (or GPU `gpu`) impaired.
fn wait_impaired(
    agents: &Agents,
    id: &str,
    check: Option<gpushare_core::model::CheckKind>,
    gpu: Option<u32>,
) {
    use gpushare_core::model::CheckStatus;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = report_of(&agents.store, id);
        let seen = r.as_ref().is_some_and(|r| {
            check.is_none_or(|k| {
                r.health
                    .check(k)
                    .is_some_and(|c| c.status == CheckStatus::Impaired)
            }) && gpu.is_none_or(|g| r.health.gpu_impaired(g))
        });
        if seen {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "host {id} never reported {check:?} / GPU {gpu:?} impaired: {:?}\n{}",
            r.map(|r| r.health),
            agents.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Wait (bounded) for the reconcile `pass` to end, starting the agents of the hosts
/// it launches meanwhile (as on a real fleet, while its moves wait for them).
fn wait_starting_agents(pass: &mut Child, agents: &mut Agents) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = pass.try_wait().expect("waiting for reconcile") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "reconcile did not finish\n{}",
            agents.logs()
        );
        agents.start_missing();
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One `gpushare reconcile --once` pass while the agents of new hosts are started
/// (the moves wait for their successors); returns its stdout.
fn reconcile_with_agents(dir: &Path, agents: &mut Agents) -> String {
    let mut pass = gp(dir, &reconcile_args()).spawn();
    let status = wait_starting_agents(&mut pass, agents);
    let out = pass.wait_with_output().expect("reconcile output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The hosts of `dir` that are up.
fn up_host_ids(dir: &Path) -> BTreeSet<String> {
    arr(&show_json(dir), "hosts")
        .iter()
        .filter(|h| h["state"] == "running" || h["state"] == "pending")
        .map(|h| h["id"].as_str().expect("id").to_string())
        .collect()
}

#[test]
fn external_agents_report_health_and_impaired_hosts_are_replaced() {
    use gpushare_core::model::CheckKind;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("main.hcl"), CONFIG).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let mut agents = Agents::new(dir);
    agents.start_missing();
    agents.wait_running(&wanted_tasks(dir), 60);
    // Every check ran once: ok, per host and per GPU, in `show --json`.
    for h in arr(&show_json(dir), "hosts") {
        assert_eq!(h["health"]["status"], "ok", "{h:#}");
        let checks: Vec<&str> = arr(&h["health"], "checks")
            .iter()
            .filter_map(|c| c["check"].as_str())
            .collect();
        assert_eq!(checks, ["mps_daemon", "gpus", "container_runtime"], "{h:#}");
        assert_eq!(h["gpus"][0]["health"]["status"], "ok", "{h:#}");
    }

    // 1. The GPU of one host falls off the bus (Xid 79): the host is replaced.
    let hosts = up_host_ids(dir);
    let victim = hosts.iter().next().expect("a host").clone();
    std::fs::write(
        agents.inventory_of(&victim),
        r#"[{"index":0,"model":"l4","memory_mib":22888,"uuid":"GPU-e2e-0","health":{"xids":[79]}}]"#,
    )
    .expect("inventory");
    wait_impaired(&agents, &victim, Some(CheckKind::Gpus), Some(0));
    let out = reconcile_with_agents(dir, &mut agents);
    assert!(out.contains("1 host to retire"), "{out}");
    let now_up = up_host_ids(dir);
    assert!(!now_up.contains(&victim), "{victim} still up: {now_up:?}");
    let want = wanted_tasks(dir);
    assert_eq!(want.len(), 4);
    agents.wait_running(&want, 60);
    assert!(agents.running_tasks().iter().all(|(_, h)| *h != victim));

    // 2. Another host's agent restarted with the docker runtime pointed at a socket
    //    that accepts and never answers: container_runtime impaired, host replaced.
    let dead = dir.join("dead-docker.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&dead).expect("dead socket");
    let target = now_up
        .iter()
        .find(|h| agents.running.contains_key(*h) && **h != victim)
        .expect("another host")
        .clone();
    agents.kill(&target);
    agents.runtimes.insert(
        target.clone(),
        (
            "docker".into(),
            vec![("DOCKER_HOST".into(), format!("unix://{}", dead.display()))],
        ),
    );
    agents.start_missing();
    wait_impaired(&agents, &target, Some(CheckKind::ContainerRuntime), None);
    let r = report_of(&agents.store, &target).expect("report");
    let why = r
        .health
        .check(CheckKind::ContainerRuntime)
        .and_then(|c| c.reason.clone())
        .unwrap_or_default();
    assert!(why.contains("did not answer a ping within 5 s"), "{why}");
    let out = reconcile_with_agents(dir, &mut agents);
    assert!(out.contains("1 host to retire"), "{out}");
    assert!(!up_host_ids(dir).contains(&target));
    agents.wait_running(&wanted_tasks(dir), 60);
    assert!(agents.running_tasks().iter().all(|(_, h)| *h != target));
}

#[test]
fn with_auto_repair_off_an_impaired_gpu_is_reported_and_kept() {
    use gpushare_core::model::CheckKind;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let config = CONFIG.replace(
        "  max_size      = 4\n",
        "  max_size      = 4\n  auto_repair   = false\n",
    );
    assert!(config.contains("auto_repair"));
    std::fs::write(dir.join("main.hcl"), config).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let mut agents = Agents::new(dir);
    agents.start_missing();
    let want = wanted_tasks(dir);
    agents.wait_running(&want, 60);
    let before: BTreeSet<(String, String)> = agents.running_tasks().into_iter().collect();
    let host = before.iter().next().expect("a task").1.clone();
    std::fs::write(
        agents.inventory_of(&host),
        r#"[{"index":0,"model":"l4","memory_mib":22888,"uuid":"GPU-e2e-0","health":{"ecc_uncorrectable":3,"retired_pages_pending":true}}]"#,
    )
    .expect("inventory");
    wait_impaired(&agents, &host, None, Some(0));
    let r = gp(dir, &reconcile_args()).run();
    r.expect_code(0);
    assert!(r.stdout.contains("no changes"), "{}{}", r.stdout, r.stderr);
    let after: BTreeSet<(String, String)> = agents.running_tasks().into_iter().collect();
    assert_eq!(after, before, "nothing moved");
    // Reported: show (text and JSON) and the status record.
    let show = show_json(dir);
    let h = arr(&show, "hosts")
        .iter()
        .find(|h| h["id"] == host.as_str())
        .expect("kept");
    let g = &h["gpus"][0]["health"];
    assert_eq!(g["status"], "impaired", "{h:#}");
    assert!(
        g["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("3 uncorrectable ECC error(s)")
            && g["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("pages pending retirement"),
        "{g:#}"
    );
    assert_eq!(
        report_of(&agents.store, &host)
            .and_then(|r| r.health.check(CheckKind::Gpus).map(|c| c.status)),
        Some(gpushare_core::model::CheckStatus::Ok),
        "a GPU fault other than a lost GPU impairs the GPU, not the host"
    );
    let text = gp(dir, &["show"]).run();
    text.expect_code(0);
    assert!(
        text.stdout.contains("GPU0 health impaired"),
        "{}",
        text.stdout
    );
    let status = gp(dir, &["status"]).run();
    status.expect_code(0);
    assert!(
        status.stdout.contains(&format!(
            "host {host} (capacity_provider.l4): GPU 0 impaired"
        )) && status
            .stdout
            .contains("kept and reported (auto_repair = false)"),
        "{}",
        status.stdout
    );
}

/// A free loopback port (bound, then released) for a controller whose address the
/// configuration must name before it starts.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[test]
fn launched_hosts_and_their_replacement_join_with_the_token_in_their_user_data() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let port = free_port();
    let config = CONFIG
        .replace("service \"worker\"", "service \"booted\"")
        .replace(
            "local_agents = \"external\"",
            &format!(
                "local_agents = \"external\"\n  controller_address = \"https://localhost:{port}\""
            ),
        );
    std::fs::write(dir.join("main.hcl"), &config).expect("config");
    let serve = Serve::start_on(dir, &["serve"], &format!("127.0.0.1:{port}"));
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);

    // Each launch minted a single-use token bound to its host: no token by hand.
    let tokens = gp(dir, &["token", "list", "--json"]).run();
    tokens.expect_code(0);
    let hosts: Vec<String> = arr(&show_json(dir), "hosts")
        .iter()
        .map(|h| h["id"].as_str().expect("host id").to_string())
        .collect();
    assert_eq!(hosts.len(), 2);
    for h in &hosts {
        assert!(
            tokens.stdout.contains(h.as_str()),
            "a token bound to {h}: {}",
            tokens.stdout
        );
    }

    let mut agents = Agents::new(dir);
    agents.boot_missing();
    let want = wanted_tasks(dir);
    assert_eq!(want.len(), 4);
    agents.wait_running(&want, 60);
    assert!(copies_of(&want).values().all(|n| *n == 1));
    // The tokens are spent: the same user data cannot join a second machine.
    let used = gp(dir, &["debug", "user-data", &hosts[0]]).run();
    let token = used
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("GPUSHARE_JOIN_TOKEN="))
        .expect("token line")
        .to_string();
    refused_join(&serve, dir, &token, &hosts[0], "used up");

    // A host goes silent: the planner replaces it, and the replacement joins from its
    // own user data while the pass waits for the moved tasks to run.
    let victim = agents.running_tasks()[0].1.clone();
    agents.kill(&victim);
    std::thread::sleep(Duration::from_secs(4));
    let mut pass = gp(dir, &reconcile_args()).spawn();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = pass.try_wait().expect("waiting for reconcile") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "reconcile did not finish\n{}",
            agents.logs()
        );
        agents.boot_missing();
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = pass.wait_with_output().expect("reconcile output");
    assert!(
        status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let after: Vec<String> = arr(&show_json(dir), "hosts")
        .iter()
        .map(|h| h["id"].as_str().expect("host id").to_string())
        .collect();
    assert!(
        !after.contains(&victim),
        "the silent host is retired: {after:?}"
    );
    assert_eq!(after.len(), 2, "{after:?}");
    let want_after = wanted_tasks(dir);
    assert_eq!(want_after.len(), 4);
    agents.wait_running(&want_after, 60);
    // Every wanted task runs exactly once, counted from the process list (the killed
    // agent's old processes are the victim's, stopped by nobody: they are not wanted).
    let copies = copies_of(&want_after);
    assert!(copies.values().all(|n| *n == 1), "{copies:?}");
    let log = serve.log();
    assert!(
        !log.contains(token.split('.').nth(1).expect("secret")),
        "{log}"
    );
}

/// A service of 2 tasks on one host for the deployment test; `COMMAND` is the
/// container's command, `CHECK` its health check (or nothing: [`no_check`]). `min_healthy_seconds = 5` is longer than the agents' 1 s
/// pass, so a container that exits at once is seen failed before it could count.
const DEPLOY_CONFIG: &str = r#"
gpushare {
  cluster              = "agents"
  cloud                = "local"
  local_agents         = "external"
  move_timeout_seconds = 60
}

capacity_provider "l4" {
  instance_type = "g6.xlarge"
  max_size      = 2
}

task_definition "worker" {
  container "main" {
    image   = "unused-by-the-process-runtime"
    command = COMMAND
    CHECK
    cpu     = 512
    memory  = 256
    gpu {
      mps {
        memory = 4096
      }
    }
  }
}

service "worker" {
  task_definition   = "worker"
  capacity_provider = "l4"
  desired_count     = 2
  deployment {
    min_healthy_seconds = 5
    circuit_breaker {
      enable = true
    }
  }
}
"#;

/// [`DEPLOY_CONFIG`] with `command` and no health check.
fn no_check(command: &str) -> String {
    DEPLOY_CONFIG
        .replace("COMMAND", command)
        .replace("    CHECK\n", "")
}

/// The deployment record of service `service` in the file store of `dir`.
fn deployment_of(dir: &Path, service: &str) -> Option<serde_json::Value> {
    let state = gpushare_tests::file_store_state(&dir.join(".gpushare"))?;
    state["resources"]
        .as_object()?
        .iter()
        .find(|(k, _)| k.as_str() == format!("service.{service}"))
        .and_then(|(_, r)| r.get("deployment").cloned())
}

/// Apply the configuration in `dir` (2 tasks) and start its agents: the agents, the
/// tasks once running, and the process groups the agents started for them.
fn two_running(dir: &Path) -> (Agents, BTreeSet<String>, Vec<String>) {
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let mut agents = Agents::new(dir);
    agents.start_missing();
    let old = wanted_tasks(dir);
    assert_eq!(old.len(), 2);
    agents.wait_running(&old, 30);
    let groups = agents.task_groups();
    (agents, old, groups)
}

/// `gpushare reconcile --once` passes (at most 6, 2 s apart) until service
/// `worker`'s deployment is FAILED: its record, and what the passes printed.
fn passes_until_failed(dir: &Path) -> (serde_json::Value, String) {
    let mut passes = String::new();
    for _ in 0..6 {
        let pass = gp(dir, &reconcile_args()).run();
        passes.push_str(&pass.stdout);
        let state = deployment_of(dir, "worker");
        if state.as_ref().is_some_and(|d| d["state"] == "FAILED") {
            return (state.unwrap_or_default(), passes);
        }
        assert!(
            pass.code == 0 || pass.code == 1,
            "{}{}",
            pass.stdout,
            pass.stderr
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let last = deployment_of(dir, "worker").expect("a deployment record");
    (last, passes)
}

/// After a bad revision 2's apply: reconcile passes until the circuit breaker marks
/// service `worker`'s deployment FAILED (revision 2 from 1, at least 3 failed
/// tasks); a pass after that changes nothing, the old tasks `old` still run, in
/// the same process groups `groups`, and `show` says FAILED. Returns the record.
fn failed_keeping(
    dir: &Path,
    agents: &Agents,
    old: &BTreeSet<String>,
    groups: &[String],
) -> serde_json::Value {
    let (d, passes) = passes_until_failed(dir);
    assert_eq!(d["state"], "FAILED", "{d}\n{passes}");
    assert_eq!(d["revision"], 2, "{d}");
    assert_eq!(d["previous"], 1, "{d}");
    assert!(d["failed_tasks"].as_u64().unwrap_or(0) >= 3, "{d}");
    gp(dir, &reconcile_args()).run().expect_code(0);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        old.is_subset(&agents.alive_tasks()),
        "{:?}",
        agents.running_tasks()
    );
    let still: BTreeSet<String> = agents.task_groups().into_iter().collect();
    for g in groups {
        assert!(
            still.contains(g),
            "process group {g} of an old task is gone"
        );
        let up = Command::new("kill")
            .args(["-0", "--", &format!("-{g}")])
            .status()
            .expect("kill -0");
        assert!(
            up.success(),
            "process group {g} of an old task no longer runs"
        );
    }
    let shown = gp(dir, &["show"]).run();
    assert!(
        shown
            .stdout
            .contains("deployment worker/2 of revision 2 FAILED"),
        "{}",
        shown.stdout
    );
    d
}

/// Issue 43's scenario, regression: a new revision whose container exits at once used
/// to stop both running tasks in the same apply. Now the apply keeps them, exits 1
/// naming the failed successors, the circuit breaker marks the deployment FAILED on a
/// later pass, and no pass stops the old tasks (the same processes keep running).
#[test]
fn a_revision_whose_container_exits_at_once_never_stops_the_running_tasks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let write =
        |command: &str| std::fs::write(dir.join("main.hcl"), no_check(command)).expect("config");
    write(r#"["sleep", "600"]"#);
    let (agents, old, groups) = two_running(dir);
    // Healthy: running for min_healthy_seconds.
    std::thread::sleep(Duration::from_secs(6));

    write(r#"["sh", "-c", "exit 3"]"#);
    let r = gp(dir, &["apply", "--auto-approve"]).run();
    assert_eq!(r.code, 1, "{}{}\n{}", r.stdout, r.stderr, agents.logs());
    assert!(r.stderr.contains("not confirmed"), "{}", r.stderr);
    assert!(r.stderr.contains("exited with code 3"), "{}", r.stderr);
    assert!(
        r.stdout.contains("replaced once the new task is healthy"),
        "{}",
        r.stdout
    );
    assert!(
        old.is_subset(&agents.alive_tasks()),
        "{:?}",
        agents.running_tasks()
    );

    // Later passes: the failures are counted and the breaker trips (threshold 3).
    failed_keeping(dir, &agents, &old, &groups);
    let show = gp(dir, &["plan"]).run();
    assert!(show.stdout.contains("FAILED"), "{}", show.stdout);
    // The loop's status record, and `show`, name the failed deployment.
    let status = gp(dir, &["status"]).run();
    assert!(
        status.stdout.contains("deployments:")
            && status.stdout.contains("worker/2 of revision 2 FAILED"),
        "{}",
        status.stdout
    );
}

/// [`DEPLOY_CONFIG`] whose tasks run `sleep 600` with the health check `line`
/// (`CMD-SHELL`, every 5 s, one failure makes it UNHEALTHY).
fn with_check(line: &str) -> String {
    let check = format!(
        "health_check {{\n      command  = [\"CMD-SHELL\", \"{line}\"]\n      interval = 5\n      retries  = 1\n    }}"
    );
    DEPLOY_CONFIG
        .replace("COMMAND", r#"["sleep", "600"]"#)
        .replace("CHECK", &check)
}

/// `show --json`'s status of service `service`.
fn service_status(dir: &Path, service: &str) -> serde_json::Value {
    arr(&show_json(dir), "services")
        .iter()
        .find(|s| s["service"] == service)
        .cloned()
        .unwrap_or_else(|| panic!("no service {service} in show --json"))
}

/// Issue 43: a revision whose health check never passes does not replace a running
/// revision. Revision 1's check passes (`true`); revision 2's never does (`exit 1`):
/// its tasks run but turn UNHEALTHY. The apply keeps the old tasks and exits 1 naming
/// the deployment; the reconcile passes stop the UNHEALTHY tasks, count each as a
/// failed task of the deployment (as ECS does), and the circuit breaker marks it
/// FAILED; the old tasks' processes keep running and no later plan stops them.
#[test]
fn a_revision_whose_health_check_never_passes_never_replaces_the_running_tasks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("main.hcl"), with_check("true")).expect("config");
    let (agents, old, groups) = two_running(dir);
    // Healthy by their check (the first runs 5 s after the start).
    let deadline = Instant::now() + Duration::from_secs(60);
    while service_status(dir, "worker")["healthy"] != 2 {
        assert!(
            Instant::now() < deadline,
            "revision 1 never healthy: {}\n{}",
            service_status(dir, "worker"),
            agents.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    std::fs::write(dir.join("main.hcl"), with_check("exit 1")).expect("config");
    let r = gp(dir, &["apply", "--auto-approve"]).run();
    assert_eq!(r.code, 1, "{}{}\n{}", r.stdout, r.stderr, agents.logs());
    assert!(r.stderr.contains("not confirmed"), "{}", r.stderr);
    assert!(
        r.stderr.contains("failed its health check (UNHEALTHY)"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("deployment worker/2 of service.worker (revision 2)"),
        "{}",
        r.stderr
    );
    assert!(
        old.is_subset(&agents.alive_tasks()),
        "{:?}",
        agents.running_tasks()
    );

    // Later passes stop the UNHEALTHY tasks and count them (threshold 3).
    let d = failed_keeping(dir, &agents, &old, &groups);
    // The tasks run `sleep 600`: every failure counted is a failed health check.
    assert!(
        d["reason"]
            .as_str()
            .is_some_and(|r| r.contains("circuit breaker")
                && r.contains("container main failed its health check (UNHEALTHY)")),
        "{d}"
    );

    // Later passes change nothing: the same processes still run, no plan stops them.
    gp(dir, &reconcile_args()).run().expect_code(0);
    let plan = gp(dir, &["plan"]).run();
    for id in &old {
        assert!(
            !plan.stdout.contains(&format!("stop {id}")),
            "{}",
            plan.stdout
        );
    }
    assert!(plan.stdout.contains("FAILED"), "{}", plan.stdout);
    assert_eq!(wanted_tasks(dir), old);
    let status = service_status(dir, "worker");
    assert_eq!(status["deployment"]["state"], "FAILED", "{status}");
    assert_eq!(status["healthy"], 2, "{status}");
}

/// Send `signal` (`STOP`, `CONT`) to host `id`'s agent process.
fn signal_agent(agents: &Agents, id: &str, signal: &str) {
    let pid = agents.running[id].id();
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(ok.success(), "kill -{signal} {pid}");
}

/// Issue 44's disruption budget with real agents: three of four hosts' agents frozen
/// at once (SIGSTOP: as a store outage or a cut-off controller looks) replaces none
/// and the plan says why; one frozen agent of four is replaced as before.
#[test]
fn freezing_most_agents_of_a_pool_replaces_none_but_one_frozen_agent_is_replaced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // The 3 s heartbeat timeout in the configuration too, for `show`.
    let config = CONFIG
        .replace("desired_count     = 4", "desired_count     = 8")
        .replace("max_size      = 4", "max_size      = 6")
        .replace(
            "local_agents = \"external\"",
            "local_agents = \"external\"\n  heartbeat_timeout_seconds = 3",
        );
    std::fs::write(dir.join("main.hcl"), config).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let mut agents = Agents::new(dir);
    agents.start_missing();
    agents.wait_running(&wanted_tasks(dir), 60);
    let hosts: Vec<String> = up_host_ids(dir).into_iter().collect();
    assert_eq!(hosts.len(), 4, "two 8 GiB tasks per L4 host");

    for h in &hosts[..3] {
        signal_agent(&agents, h, "STOP");
    }
    std::thread::sleep(Duration::from_secs(5)); // past the 3 s heartbeat timeout
    let plan = gp(dir, &["plan", "--heartbeat-timeout", "3"]).run();
    let pass = gp(dir, &reconcile_args()).run();
    let show = gp(dir, &["show"]).run();
    let held = show_json(dir)["held_pools"].clone();
    for h in &hosts[..3] {
        signal_agent(&agents, h, "CONT");
    }
    // `show` says it too (the console's fleet page and a metric do, from the plan).
    assert!(
        show.stdout
            .contains("Replacements held: capacity_provider.l4: 3 of its 4 hosts"),
        "{}{}",
        show.stdout,
        show.stderr
    );
    assert_eq!(
        (held[0]["pool"].as_str(), held[0]["silent"].as_u64()),
        (Some("l4"), Some(3)),
        "{held}"
    );
    assert!(
        plan.stdout
            .contains("3 of its 4 hosts are silent or impaired")
            && plan.stdout.contains("not replaced"),
        "{}{}",
        plan.stdout,
        plan.stderr
    );
    assert!(
        pass.stdout.contains("no changes"),
        "{}{}",
        pass.stdout,
        pass.stderr
    );
    assert_eq!(
        up_host_ids(dir),
        hosts.iter().cloned().collect::<BTreeSet<_>>(),
        "no host replaced"
    );

    // Once they report again, one frozen agent of four is replaced.
    std::thread::sleep(Duration::from_secs(2));
    signal_agent(&agents, &hosts[0], "STOP");
    std::thread::sleep(Duration::from_secs(5));
    let out = reconcile_with_agents(dir, &mut agents);
    signal_agent(&agents, &hosts[0], "CONT");
    let up = up_host_ids(dir);
    assert!(
        !up.contains(&hosts[0]),
        "the frozen host is replaced: {out}"
    );
    assert_eq!(up.len(), 4, "{out}");
}

/// Issue 44, done-when: a `gpushare reconcile --agent-listen` loop on an etcd store
/// with two hosts of real agents (joined from their user data); etcd is frozen
/// (SIGSTOP) for four heartbeat timeouts (4 s) and resumed. The agents kept talking to the
/// controller, but their reports could not be written: before, the controller then
/// judged the hosts silent, launched replacements and stopped healthy tasks. Now the
/// same hosts and the very same task processes are there afterwards.
#[test]
fn a_frozen_etcd_store_replaces_no_host_and_stops_no_task() {
    frozen_store_scenario("frozen", false);
}

/// Issue 44: the same, with the controller killed during the outage and started
/// after it (its agent API on the same address): it has heard from no agent yet, so
/// a host last heard before it started counts as heard at its start; the agents
/// reach it and report; nothing is replaced.
#[test]
fn a_controller_restarted_during_a_store_outage_replaces_nothing() {
    frozen_store_scenario("restarted", true);
}

/// Two hosts of real agents on an etcd store under a reconcile loop; etcd frozen
/// for four heartbeat timeouts (the controller killed halfway and started after,
/// with `restart`); afterwards the same hosts and the same task processes.
fn frozen_store_scenario(service: &str, restart: bool) {
    let mut lab = EtcdLoop::start(
        service,
        4,
        "heartbeat_timeout_seconds = 4\n  move_timeout_seconds = 10",
    );
    let want = lab.wait_tasks(4);
    let dir = lab.tmp.path().to_path_buf();
    // A few passes with every host reporting.
    std::thread::sleep(Duration::from_secs(4));
    let hosts = up_host_ids(&dir);
    assert_eq!(hosts.len(), 2, "{hosts:?}");
    let mut groups = lab.agents.task_groups();
    groups.sort();

    lab.freeze_and(Duration::from_secs(16), |lab| {
        if restart {
            let _ = lab.controller.child.kill();
            let _ = lab.controller.child.wait();
        }
    });
    if restart {
        lab.start_controller();
    }
    // Passes after the outage (each reads the store again).
    std::thread::sleep(Duration::from_secs(15));

    let log = lab.controller.log();
    // No replacement launched (it would be up, pending or running), none retired.
    assert_eq!(up_host_ids(&dir), hosts, "{log}");
    let mut after = lab.agents.task_groups();
    after.sort();
    assert_eq!(after, groups, "the same task processes");
    assert_eq!(wanted_tasks(&dir), want);
    let copies = copies_of(&want);
    assert!(
        copies.values().all(|n| *n == 1),
        "{copies:?}\n{log}\n{}",
        lab.agents.logs()
    );
}

/// A `gpushare reconcile --agent-listen --interval 1` on a fresh etcd store, serving
/// `service` of `count` tasks (4 per 2 hosts) with `settings` in the gpushare block,
/// and the agents of its hosts booted from their user data.
struct EtcdLoop {
    // Dropped in this order: the agents, the controller, etcd, the directory.
    agents: Agents,
    controller: Serve,
    etcd: gpushare_tests::EtcdProcess,
    tmp: tempfile::TempDir,
    /// The controller's agent API port (the configuration's controller_address).
    port: u16,
}

impl EtcdLoop {
    fn start(service: &str, count: u32, settings: &str) -> EtcdLoop {
        let etcd = gpushare_tests::EtcdProcess::start();
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let port = free_port();
        let config = CONFIG
            .replace("service \"worker\"", &format!("service \"{service}\""))
            .replace("desired_count     = 4", &format!("desired_count     = {count}"))
            .replace(
                "local_agents = \"external\"",
                &format!(
                    "local_agents = \"external\"\n  store = \"{}\"\n  controller_address = \"https://localhost:{port}\"\n  {settings}",
                    etcd.url(service)
                ),
            );
        std::fs::write(dir.join("main.hcl"), &config).expect("config");
        let controller = Serve::start_on(
            dir,
            &["reconcile", "--interval", "1"],
            &format!("127.0.0.1:{port}"),
        );
        let agents = Agents::new(dir);
        EtcdLoop {
            agents,
            controller,
            etcd,
            tmp,
            port,
        }
    }

    /// A new controller process in place of the current one (killed already or now).
    fn start_controller(&mut self) {
        self.controller = Serve::start_on(
            self.tmp.path(),
            &["reconcile", "--interval", "1"],
            &format!("127.0.0.1:{}", self.port),
        );
    }

    /// Boot the hosts until `n` wanted tasks run, one process each; their ids.
    fn wait_tasks(&mut self, n: usize) -> BTreeSet<String> {
        let dir = self.tmp.path().to_path_buf();
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            self.agents.boot_missing();
            let want = wanted_tasks(&dir);
            if want.len() == n && copies_of(&want).values().all(|c| *c == 1) {
                return want;
            }
            assert!(
                Instant::now() < deadline,
                "the tasks never ran: {want:?}\n{}\n{}",
                self.controller.log(),
                self.agents.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Freeze etcd (SIGSTOP) for `d`, then resume it.
    fn freeze(&mut self, d: Duration) {
        self.freeze_and(d, |_| {});
    }

    /// [`EtcdLoop::freeze`], doing `during` halfway through the freeze.
    fn freeze_and(&mut self, d: Duration, during: impl FnOnce(&mut EtcdLoop)) {
        let pid = self.etcd.pid().to_string();
        let signal = |sig: &str| {
            let ok = Command::new("kill")
                .args([sig, &pid])
                .status()
                .expect("kill");
            assert!(ok.success(), "kill {sig} etcd");
        };
        signal("-STOP");
        std::thread::sleep(d / 2);
        during(self);
        std::thread::sleep(d / 2);
        signal("-CONT");
    }
}

/// Issue 44: a controller that loses the store stops acting. A pass waiting (at most
/// 60 s) for a moved task to be healthy on a new host whose agent never comes, when
/// etcd freezes long enough for the leadership lease to expire: the pass stops after
/// its current step (the journal left for the next leader) rather than acting on as
/// the leader it no longer is; the old task runs on.
#[test]
fn a_controller_that_loses_its_leadership_mid_pass_stops_acting() {
    let mut lab = EtcdLoop::start(
        "leader",
        1,
        "heartbeat_timeout_seconds = 30\n  move_timeout_seconds = 60",
    );
    let want = lab.wait_tasks(1);
    let dir = lab.tmp.path().to_path_buf();
    let host = up_host_ids(&dir).into_iter().next().expect("a host");
    // Drain it: the next pass launches a host (no agent boots on it) and waits for
    // the moved task there.
    gp(&dir, &["host", "drain", &host]).run().expect_code(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !lab.controller.log().contains("to be reported healthy") {
        assert!(
            Instant::now() < deadline,
            "no move waited\n{}",
            lab.controller.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    lab.freeze(Duration::from_secs(12));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lab
        .controller
        .log()
        .contains("leadership lost during the pass")
    {
        assert!(
            Instant::now() < deadline,
            "the pass went on without the leadership\n{}",
            lab.controller.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let copies = copies_of(&want);
    assert!(
        copies.values().all(|n| *n == 1),
        "the old task runs on: {copies:?}"
    );
}

/// Issue 49, done-when: two agents whose inventory files give the GPUs' compute
/// processes (the stand-in for NVML's listing: pid, memory, SM percent). Each agent
/// maps the processes to its tasks (the process runtime's process groups) and
/// reports their use; `show`, `show --json` and the controller's `/metrics` give
/// each task's used and peak GPU memory and SM percent, and the peak stays when the
/// use goes down.
#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, step by step"
)]
fn agents_report_each_tasks_gpu_use_and_show_and_metrics_give_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let config = CONFIG.replace("service \"worker\"", "service \"usage\"");
    std::fs::write(dir.join("main.hcl"), &config).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let mut agents = Agents::new(dir);
    agents.start_missing();
    let want = wanted_tasks(dir);
    assert_eq!(want.len(), 4);
    agents.wait_running(&want, 60);
    let host_of: BTreeMap<String, String> = arr(&show_json(dir), "tasks")
        .iter()
        .map(|t| {
            (
                t["id"].as_str().expect("id").to_string(),
                t["host"].as_str().expect("host").to_string(),
            )
        })
        .collect();
    // Task i holds 1000 + 100 i MiB at 10 i percent SM.
    let tasks: Vec<&String> = want.iter().collect();
    let write = |scale: u64| {
        let uses = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let i = i as u64;
                ((*t).clone(), ((1000 + 100 * i) * scale, 10 * i))
            })
            .collect();
        agents.set_gpu_use(&uses);
    };
    let used = |show: &serde_json::Value| -> BTreeMap<String, (u64, u64, u64)> {
        show["task_usage"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["task"].as_str().unwrap_or_default().to_string(),
                    (
                        r["gpu_memory_mib"].as_u64().unwrap_or(0),
                        r["peak_gpu_memory_mib"].as_u64().unwrap_or(0),
                        r["sm_percent"].as_u64().unwrap_or(999),
                    ),
                )
            })
            .collect()
    };
    let wait_for = |want: &BTreeMap<String, (u64, u64, u64)>| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = used(&show_json(dir));
            if got == *want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "task usage {got:?}, want {want:?}\n{}",
                agents.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let expect = |now: u64, peak: u64| -> BTreeMap<String, (u64, u64, u64)> {
        tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let i = i as u64;
                (
                    (*t).clone(),
                    ((1000 + 100 * i) * now, (1000 + 100 * i) * peak, 10 * i),
                )
            })
            .collect()
    };
    write(2);
    wait_for(&expect(2, 2));
    // Down again: the peak stays.
    write(1);
    wait_for(&expect(1, 2));
    let text = gp(dir, &["show"]).run();
    assert!(
        text.stdout.contains(&format!(
            "{} (service usage, host {}): 1000 MiB used, peak 2000 MiB of 8192 MiB declared, SM 0%",
            tasks[0], host_of[tasks[0]]
        )),
        "{}",
        text.stdout
    );

    // The controller's metrics.
    let ops = free_port();
    let listen = format!("127.0.0.1:{ops}");
    let log = std::fs::File::create(dir.join("reconcile.log")).expect("log");
    let mut controller = gp(dir, &["reconcile", "--interval", "1", "--listen", &listen])
        .spawn_with(Stdio::null(), log);
    let line = format!(
        "gpushare_task_gpu_memory_peak_bytes{{service=\"usage\",task=\"{}\",host=\"{}\",gpu=\"0\"}} {}",
        tasks[1],
        host_of[tasks[1]],
        2200u64 * 1024 * 1024
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let (_, body) = http_get(ops, "/metrics");
        if body.contains(&line) {
            break body;
        }
        if Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let _ = controller.kill();
    let _ = controller.wait();
    assert!(metrics.contains(&line), "{line} not in\n{metrics}");
    assert!(
        metrics.contains(&format!(
            "gpushare_task_gpu_sm_percent{{service=\"usage\",task=\"{}\",host=\"{}\",gpu=\"0\"}} 10",
            tasks[1], host_of[tasks[1]]
        )),
        "{metrics}"
    );
}

/// Issue 49 item 3, end to end: a service of 2 tasks with a target of
/// `gpu_sm_percent = 70` (cooldowns 2 s) on real agents whose inventory files give
/// its tasks' SM use. At 90 it scales out (ceil(2 x 90 / 70) = 3) once the breach
/// lasted the cooldown, the plan saying why; it stays at `max_count` (3) while the
/// use stays high; at 20 it scales back in to `min_count`.
#[test]
fn a_service_scales_out_at_90_and_in_at_20_on_its_tasks_reported_sm_use() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let config = CONFIG
        .replace("service \"worker\"", "service \"scaled\"")
        .replace(
            "desired_count     = 4\n}",
            "desired_count     = 2\n  auto_scaling {\n    min_count = 1\n    max_count = 3\n    scale_out_cooldown = 2\n    scale_in_cooldown = 2\n    target {\n      metric = \"gpu_sm_percent\"\n      value  = 70\n    }\n  }\n}",
        );
    assert!(config.contains("auto_scaling"), "{config}");
    std::fs::write(dir.join("main.hcl"), &config).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let mut agents = Agents::new(dir);
    agents.start_missing();
    agents.wait_running(&wanted_tasks(dir), 60);
    let sm_all = |agents: &Agents, sm: u64| {
        let uses = wanted_tasks(dir)
            .into_iter()
            .map(|t| (t, (1000, sm)))
            .collect();
        agents.set_gpu_use(&uses);
    };
    let until = |agents: &mut Agents, sm: u64, count: usize| -> String {
        passes_until_count(dir, agents, count, 3, &|a: &Agents| sm_all(a, sm))
    };
    let out = until(&mut agents, 90, 3);
    assert!(
        scaled_with(&out, 2, 3, "gpu_sm_percent 90 > target 70"),
        "{out}"
    );
    // The pass that scaled says applied: scaling is no drift.
    assert!(!out.contains("drift corrected"), "{out}");
    // Still at 90: it would want ceil(3 x 90 / 70) = 4, max_count holds it at 3.
    for _ in 0..3 {
        sm_all(&agents, 90);
        std::thread::sleep(Duration::from_millis(1500));
        let pass = reconcile_with_agents(dir, &mut agents);
        assert!(!pass.contains("3 -> 4"), "{pass}");
        assert_eq!(wanted_tasks(dir).len(), 3, "{pass}");
    }
    let out = until(&mut agents, 20, 1);
    assert!(
        scaled_with(&out, 3, 1, "gpu_sm_percent 20 < target 70"),
        "{out}"
    );
}

/// Issue 49: a service that tracks a Prometheus metric of its tasks' own endpoint,
/// `vllm:num_requests_waiting = 5` on the port named `http`. Each task is a real
/// HTTP server (`python3 -m http.server` on the host port the planner assigned,
/// `GPUSHARE_PORT_HTTP`) serving a metrics file the test rewrites; the real agent
/// (process runtime) scrapes it each pass. At 9 waiting it scales out (ceil(2 x 9 /
/// 5) = 4, capped at max_count 3) once the breach lasted the 2 s cooldown; at 1 it
/// scales back in to min_count 1; each change in a plan with its reason. The tasks
/// need no GPU (no stand-in is involved in what is measured here); one host holds
/// them all, so their host ports never meet on this machine's loopback.
#[test]
fn a_service_scales_on_a_prometheus_metric_its_tasks_serve() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let www = dir.join("www");
    std::fs::create_dir_all(&www).expect("www");
    let waiting = |n: u32| {
        let page = format!(
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name=\"bge\"}} {n}.0\nvllm:num_requests_running{{model_name=\"bge\"}} 50.0\n"
        );
        // Written whole, then renamed: a scrape never reads half a page.
        std::fs::write(www.join("metrics.new"), page).expect("metrics");
        std::fs::rename(www.join("metrics.new"), www.join("metrics")).expect("rename");
    };
    waiting(9);
    let config = format!(
        r#"
gpushare {{
  cluster      = "agents"
  cloud        = "local"
  local_agents = "external"
}}

capacity_provider "cpu" {{
  instance_type   = "g6.xlarge"
  max_size        = 1
  host_port_range = "{lo}-{hi}"
}}

task_definition "server" {{
  container "main" {{
    image   = "unused-by-the-process-runtime"
    command = ["sh", "-c", "exec python3 -m http.server --bind 127.0.0.1 --directory {www} $GPUSHARE_PORT_HTTP"]
    cpu     = 256
    memory  = 128
    port_mapping {{
      name           = "http"
      container_port = 8000
    }}
  }}
}}

service "scaled" {{
  task_definition   = "server"
  capacity_provider = "cpu"
  desired_count     = 2
  auto_scaling {{
    min_count          = 1
    max_count          = 3
    scale_out_cooldown = 2
    scale_in_cooldown  = 2
    target {{
      metric = "vllm:num_requests_waiting"
      port   = "http"
      value  = 5
    }}
  }}
}}
"#,
        lo = free_port_range().0,
        hi = free_port_range().1,
        www = www.display(),
    );
    std::fs::write(dir.join("main.hcl"), &config).expect("config");
    gp(dir, &["validate"]).run().expect_code(0);
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let mut agents = Agents::new(dir);
    agents.start_missing();
    agents.wait_running(&wanted_tasks(dir), 60);
    let until = |agents: &mut Agents, count: usize| -> String {
        passes_until_count(dir, agents, count, 3, &|_: &Agents| {})
    };
    let out = until(&mut agents, 3);
    assert!(
        scaled_with(&out, 2, 3, "vllm:num_requests_waiting 9 > target 5 for"),
        "{out}"
    );
    assert!(out.contains("capped at max_count 3"), "{out}");
    // Every running task reports the value its agent scraped from its endpoint.
    let reports = gpushare_tests::file_store_reports(&agents.store);
    let samples: Vec<f64> = reports
        .iter()
        .flat_map(|r| r.task_details.values())
        .filter_map(|s| s.usage.as_ref()?.endpoint.as_ref())
        .filter(|e| e.metric == "vllm:num_requests_waiting")
        .map(|e| e.value)
        .collect();
    assert!(
        !samples.is_empty() && samples.iter().all(|v| *v == 9.0),
        "{samples:?}"
    );
    waiting(1);
    let out = until(&mut agents, 1);
    assert!(
        scaled_with(&out, 3, 1, "vllm:num_requests_waiting 1 < target 5 for"),
        "{out}"
    );
}

/// Reconcile passes until the service of `dir` has `count` tasks running (never
/// more than `max` wanted), `before_pass` run before each; the plans (with their
/// reasons: reconcile prints only its summary) and the passes' output.
fn passes_until_count(
    dir: &Path,
    agents: &mut Agents,
    count: usize,
    max: usize,
    before_pass: &dyn Fn(&Agents),
) -> String {
    let mut out = String::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        agents.start_missing();
        let want = wanted_tasks(dir);
        assert!(want.len() <= max, "beyond max_count: {want:?}\n{out}");
        if want.len() == count && agents.alive_tasks() == want {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "not {count} tasks: {want:?}\n{out}\n{}",
            agents.logs()
        );
        before_pass(agents);
        std::thread::sleep(Duration::from_millis(1500));
        out.push_str(&gp(dir, &["plan", "--heartbeat-timeout", "3"]).run().stdout);
        out.push_str(&reconcile_with_agents(dir, agents));
        // The plan above may be made just before the cooldown ends and the pass's
        // own plan just after: the change's reason is also in the scaling record
        // that plan wrote.
        let state = gpushare_tests::file_store_state(&agents.store).unwrap_or_default();
        scaling_records(&state, &mut out);
    }
}

/// `scaling record: COUNT tasks: REASON` for each scaling record in `v` (a state's JSON).
fn scaling_records(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(m) => {
            if let Some(r) = m.get("scaling") {
                if let (Some(c), Some(why)) = (r["count"].as_u64(), r["reason"].as_str()) {
                    out.push_str(&format!("scaling record: {c} tasks: {why}\n"));
                }
            }
            m.values().for_each(|x| scaling_records(x, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| scaling_records(x, out)),
        _ => {}
    }
}

/// Whether `out` shows the change to `to` tasks with a reason starting `why`: in a
/// plan (`service.scaled: FROM -> TO tasks: WHY`) or in the record it wrote.
fn scaled_with(out: &str, from: u32, to: u32, why: &str) -> bool {
    out.contains(&format!("service.scaled: {from} -> {to} tasks: {why}"))
        || out.contains(&format!("scaling record: {to} tasks: {why}"))
}

/// A range of 10 host ports free on loopback now (the tasks bind them).
fn free_port_range() -> (u16, u16) {
    static RANGE: std::sync::OnceLock<(u16, u16)> = std::sync::OnceLock::new();
    *RANGE.get_or_init(|| {
        for lo in (42000..60000).step_by(50) {
            let free = (lo..lo + 10).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
            if free {
                return (lo, lo + 9);
            }
        }
        panic!("no 10 free ports on loopback");
    })
}

/// Issue 43's rollout bound, from the agents' own reports: a good revision rolls
/// through a 10-task service with min_healthy_percent 100 and max_surge_percent 100,
/// and at no moment sampled while the apply runs do the agents report fewer than 10
/// healthy tasks (running without a restart for `min_healthy_seconds`).
#[test]
fn a_good_revision_rolls_through_ten_tasks_and_never_has_fewer_than_ten_healthy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let config = |command: &str| {
        no_check(command)
            .replace("desired_count     = 2", "desired_count     = 10")
            .replace("max_size      = 2", "max_size      = 4")
            .replace("min_healthy_seconds = 5", "min_healthy_seconds = 2")
            .replace("memory  = 256", "memory  = 512")
            .replace("cpu     = 512", "cpu     = 256")
            .replace("memory = 4096", "memory = 2048")
    };
    std::fs::write(dir.join("main.hcl"), config(r#"["sleep", "600"]"#)).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let mut agents = Agents::new(dir);
    agents.start_missing();
    let old = wanted_tasks(dir);
    assert_eq!(old.len(), 10);
    agents.wait_running(&old, 60);
    std::thread::sleep(Duration::from_secs(3));

    let healthy_now = |agents: &Agents| -> usize {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        gpushare_tests::file_store_reports(&agents.store)
            .iter()
            .filter(|r| agents.running.contains_key(&r.host_id))
            .flat_map(|r| r.task_details.values())
            .filter(|s| s.state == TaskState::Running && now.saturating_sub(s.since) >= 2)
            .count()
    };
    assert_eq!(healthy_now(&agents), 10);
    std::fs::write(dir.join("main.hcl"), config(r#"["sleep", "601"]"#)).expect("config");
    let mut apply = gp(dir, &["apply", "--auto-approve"]).spawn();
    let mut fewest = usize::MAX;
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        agents.start_missing();
        fewest = fewest.min(healthy_now(&agents));
        if let Some(s) = apply.try_wait().expect("apply") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the apply did not finish\n{}",
            agents.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = apply.wait_with_output().expect("output");
    assert!(
        status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The agents stop the old tasks on their next pass: sample a little longer.
    for _ in 0..20 {
        fewest = fewest.min(healthy_now(&agents));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        fewest >= 10,
        "{fewest} healthy tasks at one moment of the rollout"
    );
    let now = wanted_tasks(dir);
    assert_eq!(now.len(), 10);
    assert!(now.is_disjoint(&old), "every task replaced");
    let revs: BTreeSet<u64> = arr(&show_json(dir), "tasks")
        .iter()
        .filter_map(|t| t["revision"].as_u64())
        .collect();
    assert_eq!(revs, [2].into());
}

/// A stand-in for EC2's instance metadata service (IMDSv2) on loopback: a session
/// token for `PUT /latest/api/token`, then, with that token only, no Spot action
/// (404) until [`ImdsStandIn::interrupt`], and no scheduled event (`[]`).
struct ImdsStandIn {
    url: String,
    action: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl ImdsStandIn {
    fn start() -> ImdsStandIn {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("IMDS stand-in");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let action = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
        let shared = action.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().map_while(Result::ok) {
                let mut reader = BufReader::new(&conn);
                let mut head = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push(line.trim_end().to_string());
                }
                let first = head.first().cloned().unwrap_or_default();
                let has = |h: &str| head.iter().any(|l| l.eq_ignore_ascii_case(h));
                let authorised = has("X-aws-ec2-metadata-token: e2e-token");
                let (status, body) = match first.split(' ').take(2).collect::<Vec<_>>()[..] {
                    ["PUT", "/latest/api/token"]
                        if head.iter().any(|l| {
                            l.to_ascii_lowercase()
                                .starts_with("x-aws-ec2-metadata-token-ttl-seconds:")
                        }) =>
                    {
                        ("200 OK", "e2e-token".to_string())
                    }
                    [_, _] if !authorised => ("401 Unauthorized", String::new()),
                    ["GET", "/latest/meta-data/spot/instance-action"] => {
                        match shared.lock().expect("lock").clone() {
                            Some(doc) => ("200 OK", doc),
                            None => ("404 Not Found", "Not Found".to_string()),
                        }
                    }
                    ["GET", "/latest/meta-data/events/maintenance/scheduled"] => {
                        ("200 OK", "[]".to_string())
                    }
                    _ => ("404 Not Found", "Not Found".to_string()),
                };
                let mut w = &conn;
                let _ = write!(
                    w,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        ImdsStandIn { url, action }
    }

    /// From now on, EC2 says the Spot instance is terminated at `time`.
    fn interrupt(&self, time: &str) {
        *self.action.lock().expect("lock") =
            Some(format!(r#"{{"action": "terminate", "time": "{time}"}}"#));
    }
}

#[test]
fn a_spot_notice_gets_its_hosts_tasks_running_on_a_replacement_in_the_same_pass() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("main.hcl"), CONFIG).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let hosts = up_host_ids(dir);
    assert_eq!(hosts.len(), 2);
    // One host's agent watches the stand-in instance metadata (as launched hosts'
    // agents watch EC2's); the other watches none.
    let victim = hosts.iter().next().expect("a host").clone();
    let imds = ImdsStandIn::start();
    let mut agents = Agents::new(dir);
    agents.runtimes.insert(
        victim.clone(),
        (
            "process".into(),
            vec![("GPUSHARE_IMDS_URL".into(), imds.url.clone())],
        ),
    );
    agents.start_missing();
    agents.wait_running(&wanted_tasks(dir), 60);
    let moved: BTreeSet<String> = agents
        .running_tasks()
        .into_iter()
        .filter(|(_, h)| *h == victim)
        .map(|(t, _)| t)
        .collect();
    assert_eq!(moved.len(), 2, "{:?}", agents.running_tasks());

    // EC2 gives the two-minute notice: the agent reports it.
    let at = "2026-12-07T19:00:00Z";
    imds.interrupt(at);
    let deadline = Instant::now() + Duration::from_secs(60);
    while report_of(&agents.store, &victim).is_none_or(|r| r.health.notice.is_none()) {
        assert!(
            Instant::now() < deadline,
            "no notice reported\n{}",
            agents.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The plan drains it at once, saying why, and starts its tasks elsewhere first.
    let plan = gp(dir, &["plan"]).run();
    let why = format!("Spot interruption notice at {at} (terminate; from imds)");
    assert!(
        plan.stdout.contains(&why) && plan.stdout.contains("launch"),
        "{}{}",
        plan.stdout,
        plan.stderr
    );
    // One pass: the replacement is launched, its agent starts, the moved tasks run
    // there, and only then are the old ones stopped and the noticed host retired;
    // its agent kept reporting all along (the instance is not gone).
    let mut pass = gp(dir, &reconcile_args()).spawn();
    let status = wait_starting_agents(&mut pass, &mut agents);
    let running_at_return: BTreeSet<String> = agents
        .running_tasks()
        .into_iter()
        .filter(|(_, h)| *h != victim)
        .map(|(t, _)| t)
        .collect();
    let out = pass.wait_with_output().expect("reconcile output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status.success() && text.contains("applied"), "{text}");
    let want = wanted_tasks(dir);
    assert_eq!(want.len(), 4, "{text}");
    assert!(
        want.is_subset(&running_at_return),
        "the pass returned before the moved tasks ran elsewhere: {running_at_return:?}, want {want:?}\n{text}"
    );
    assert!(want.is_disjoint(&moved), "{want:?} {moved:?}");
    assert!(!up_host_ids(dir).contains(&victim), "{text}");
}
