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

/// The agents of one test: one `gpushare agent` process per host id.
struct Agents {
    dir: PathBuf,
    store: PathBuf,
    runtime_dir: PathBuf,
    mps: PathBuf,
    pipe_dir: PathBuf,
    inventory: PathBuf,
    running: BTreeMap<String, Child>,
}

impl Agents {
    fn new(dir: &Path) -> Agents {
        let mps_dir = dir.join("mps");
        let pipe_dir = mps_dir.join("pipe");
        std::fs::create_dir_all(&pipe_dir).expect("pipe dir");
        let mps = mps_dir.join("nvidia-cuda-mps-control");
        std::fs::write(
            &mps,
            "#!/bin/sh\nread -r line\n[ \"$line\" = get_default_active_thread_percentage ] || exit 2\necho 100.0\n",
        )
        .expect("stand-in MPS control");
        Command::new("chmod")
            .args(["755", &mps.display().to_string()])
            .status()
            .expect("chmod");
        let inventory = dir.join("gpus.json");
        std::fs::write(
            &inventory,
            r#"[{"index":0,"model":"l4","memory_mib":22888,"uuid":"GPU-e2e-0"}]"#,
        )
        .expect("inventory");
        Agents {
            dir: dir.to_path_buf(),
            store: dir.join(".gpushare"),
            runtime_dir: dir.join("agent-runtime"),
            mps,
            pipe_dir,
            inventory,
            running: BTreeMap::new(),
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

    /// Start `gpushare agent` for host `id` with `link` (how it reaches its
    /// assignment) and the flags every agent of these tests gets; `log` names its log.
    fn spawn(&mut self, id: &str, link: &[&str], state_dir: &Path) {
        let log =
            std::fs::File::create(self.dir.join(format!("agent-{id}.log"))).expect("agent log");
        let child = Command::new(gpushare_tests::gpushare_bin())
            .arg("agent")
            .args(link)
            .args([
                "--runtime",
                "process",
                "--interval",
                "1",
                "--state-dir",
                &state_dir.display().to_string(),
                "--mps-control",
                &self.mps.display().to_string(),
                "--mps-pipe-dir",
                &self.pipe_dir.display().to_string(),
                "--inventory-file",
                &self.inventory.display().to_string(),
                "--stop-grace",
                "1",
            ])
            .env("GPUSHARE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawning gpushare agent");
        self.running.insert(id.to_string(), child);
    }

    fn kill(&mut self, host: &str) {
        let mut c = self.running.remove(host).expect("an agent for the host");
        c.kill().expect("SIGKILL");
        let _ = c.wait();
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

    fn logs(&self) -> String {
        self.running
            .keys()
            .map(|h| {
                let log = std::fs::read_to_string(self.dir.join(format!("agent-{h}.log")))
                    .unwrap_or_default();
                format!("--- {h}\n{log}")
            })
            .collect()
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

    /// The process groups the process runtime recorded (its pid files).
    fn task_groups(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![self.runtime_dir.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.file_name().is_some_and(|n| n == "pid") {
                    // "<pid> <process group> <start time>"
                    if let Some(pgid) = std::fs::read_to_string(&p)
                        .ok()
                        .and_then(|s| s.split_whitespace().nth(1).map(str::to_string))
                    {
                        out.push(pgid);
                    }
                }
            }
        }
        out
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for c in self.running.values_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The tasks the agents started (the killed agent's included: a retired
        // simulated host does not take its processes with it).
        for pgid in self.task_groups() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .stderr(Stdio::null())
                .status();
        }
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
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = pass.try_wait().expect("waiting for reconcile") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "reconcile did not finish
{}",
            agents.logs()
        );
        agents.start_missing();
        std::thread::sleep(Duration::from_millis(200));
    };
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
    // Converged: the next pass has nothing to do.
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
        use std::io::BufRead;
        let log = dir.join(format!("{}.log", command[0]));
        let mut args = command.to_vec();
        args.extend(["--agent-listen", listen]);
        let mut child = gp(dir, &args).env("GPUSHARE_LOG", "info").spawn_with(
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
