//! Serving end to end (issue 47), with real agents and the real Docker Engine: a
//! service of 3 tasks, each a busybox HTTP server in a container with a dynamic
//! `port_mapping` and a health check. The plan shows the host ports before apply;
//! each host's agent (`gpushare agent --runtime docker`) publishes its task's port on
//! the host's own loopback address (three "hosts" on one machine: 127.0.0.11-13);
//! every endpoint `gpushare endpoints --json` lists answers HTTP with its task's id.
//! Then one task's health check is made to fail: its agent reports it UNHEALTHY,
//! and the next apply replaces it. `gpushare logs` shows a task's output from its
//! host's agent, with the docker runtime here and the process runtime in the second
//! test.
//!
//! Stand-in, because the test machines have no GPU: the GPU inventory is a file
//! (the tasks need no GPU, so no MPS daemon is asked: `--no-mps`). The image is
//! built locally from Debian's static busybox (there is no registry). Everything the
//! test starts (agents, containers) is removed when it ends, also on failure.

use gpushare_testkit_engine::agent as agent_support;

use gpushare_tests::gp;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
gpushare {
  cluster      = "CLUSTER"
  cloud        = "local"
  local_agents = "external"
}

capacity_provider "web" {
  instance_type   = "g6.xlarge"
  max_size        = 3
  host_port_range = "41000-41009"
}

task_definition "web" {
  container "server" {
    image   = "IMAGE"
    command = ["/bin/busybox", "sh", "-c", "busybox mkdir -p /www && echo \"$GPUSHARE_TASK_ID\" > /www/index.html && echo \"serving $GPUSHARE_TASK_ID\" && exec busybox httpd -f -v -p 8080 -h /www"]
    cpu     = 256
    memory  = 64

    port_mapping {
      name           = "http"
      container_port = 8080
    }

    health_check {
      command  = ["CMD-SHELL", "test ! -e /www/sick && busybox wget -q -O /dev/null http://127.0.0.1:8080/"]
      interval = 5
      retries  = 1
    }
  }
}

service "web" {
  task_definition   = "web"
  capacity_provider = "web"
  desired_count     = 3
  distinct_host     = true
}
"#;

/// The agents of the test, one per host, and what they started: removed on drop.
struct Fleet {
    dir: PathBuf,
    cluster: String,
    agents: BTreeMap<String, Child>,
    /// `docker`, or `process` (whose tasks' process groups are killed on drop).
    runtime: &'static str,
}

impl Fleet {
    /// Start an agent with the docker runtime for every host of the state that has
    /// none, each publishing on its own loopback address.
    fn start_agents(&mut self) {
        let show = gpushare_tests::show_json(&self.dir);
        for h in gpushare_tests::arr(&show, "hosts") {
            let id = h["id"].as_str().expect("host id").to_string();
            if h["state"] == "terminated" || self.agents.contains_key(&id) {
                continue;
            }
            let address = format!("127.0.0.{}", 11 + self.agents.len());
            let child = gpushare_tests::local_agent(&self.dir, &self.cluster, &id, &address)
                .args(["--runtime", self.runtime, "--no-pull"])
                .args(["--publish-address", &address])
                .spawn()
                .expect("spawning gpushare agent");
            self.agents.insert(id, child);
        }
    }

    fn logs(&self) -> String {
        gpushare_tests::agents::agent_logs(&self.dir, self.agents.keys())
    }

    fn endpoints(&self) -> Vec<serde_json::Value> {
        let r = gp(&self.dir, &["endpoints", "web", "--json"]).run();
        r.expect_code(0);
        let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("endpoints JSON");
        v["endpoints"].as_array().cloned().unwrap_or_default()
    }

    /// Wait (bounded) until `f` holds for the endpoints; they are returned.
    fn wait_endpoints(
        &self,
        what: &str,
        secs: u64,
        f: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let e = self.endpoints();
            if f(&e) {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "after {secs} s, not {what}: {e:#?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in self.agents.values_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The process runtime's tasks: every process carrying one of the tasks' ids.
        if self.runtime == "process" {
            let show = gpushare_tests::show_json(&self.dir);
            for t in gpushare_tests::arr(&show, "tasks") {
                if let Some(id) = t["id"].as_str() {
                    gpushare_tests::kill_task_processes(id);
                }
            }
        }
        let filter = format!("label=gpushare.cluster={}", self.cluster);
        let ids = Command::new("docker")
            .args(["ps", "-aq", "--filter", &filter])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for id in ids.split_whitespace() {
            let _ = Command::new("docker")
                .args(["rm", "-f", "-v", id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// `GET /` from `target`: the response body.
fn http_get(target: &str) -> String {
    let mut s = std::net::TcpStream::connect(target)
        .unwrap_or_else(|e| panic!("connecting to the endpoint {target}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")
        .expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    out.split_once("\r\n\r\n")
        .map_or(String::new(), |(_, body)| body.trim().to_string())
}

fn ready(e: &[serde_json::Value]) -> usize {
    e.iter().filter(|e| e["ready"] == true).count()
}

#[test]
fn three_tasks_answer_on_their_planned_endpoints_and_an_unhealthy_one_is_replaced() {
    agent_support::ensure_test_image();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let cluster = format!("serving-{}", std::process::id());
    std::fs::write(
        dir.join("main.hcl"),
        CONFIG
            .replace("CLUSTER", &cluster)
            .replace("IMAGE", agent_support::TEST_IMAGE),
    )
    .expect("config");
    let mut fleet = Fleet {
        dir: dir.to_path_buf(),
        cluster,
        agents: BTreeMap::new(),
        runtime: "docker",
    };

    // The plan names every task's host port before anything runs.
    let plan = gp(dir, &["plan"]).run();
    plan.expect_code(0);
    let shown: Vec<&str> = plan
        .stdout
        .lines()
        .filter(|l| l.contains("host ports:"))
        .collect();
    assert_eq!(shown.len(), 1, "{}", plan.stdout);
    assert_eq!(
        shown[0].matches(":41000 (http)").count(),
        3,
        "{}",
        plan.stdout
    );

    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    fleet.start_agents();
    assert_eq!(fleet.agents.len(), 3, "one task per host (distinct_host)");
    let endpoints = fleet.wait_endpoints("3 ready endpoints", 60, |e| ready(e) == 3);

    // Every listed endpoint answers, with its own task's id.
    let mut answered = BTreeSet::new();
    for e in &endpoints {
        let target = format!(
            "{}:{}",
            e["address"].as_str().expect("address"),
            e["host_port"]
        );
        assert_eq!(e["health"], "HEALTHY", "{e}");
        let body = http_get(&target);
        assert_eq!(body, e["task"].as_str().expect("task"), "from {target}");
        answered.insert(body);
    }
    assert_eq!(answered.len(), 3);
    // Each task's output, from its host's agent (Docker's log of the container).
    let first = endpoints[0]["task"].as_str().expect("task");
    let logs = gp(dir, &["logs", first, "--tail", "50"]).run();
    logs.expect_code(0);
    assert!(
        logs.stdout.contains(&format!("serving {first}")),
        "{}{}",
        logs.stdout,
        logs.stderr
    );
    let missing = gp(dir, &["logs", "t-web-nope"]).run();
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("no task \"t-web-nope\""),
        "{}",
        missing.stderr
    );

    // The same, as Prometheus' HTTP service discovery.
    let sd = gp(dir, &["endpoints", "--prometheus"]).run();
    sd.expect_code(0);
    let sd: serde_json::Value = serde_json::from_str(&sd.stdout).expect("sd JSON");
    assert_eq!(sd[0]["targets"].as_array().map(Vec::len), Some(3), "{sd}");

    // The service's first deployment is done: the next pass records it COMPLETED
    // (as the reconcile loop does), so a later failure is not the deployment's.
    let done = gp(dir, &["apply", "--auto-approve"]).run();
    done.expect_code(0);
    assert!(show_services(dir).contains("COMPLETED"), "{}", done.stdout);

    // One task's check fails from now on: UNHEALTHY, then replaced by the next apply.
    let sick = endpoints[0]["task"].as_str().expect("task").to_string();
    let container = format!("gpushare-{sick}-server");
    let out = Command::new("docker")
        .args(["exec", &container, "/bin/busybox", "touch", "/www/sick"])
        .output()
        .expect("docker exec");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fleet.wait_endpoints("the sick task UNHEALTHY", 60, |e| {
        e.iter()
            .any(|e| e["task"] == sick.as_str() && e["health"] == "UNHEALTHY")
    });
    let apply = gp(dir, &["apply", "--auto-approve"]).run();
    apply.expect_code(0);
    assert!(
        apply.stdout.contains("failed its health check (UNHEALTHY)"),
        "{}",
        apply.stdout
    );
    let after = fleet.wait_endpoints("3 ready endpoints without the sick task", 60, |e| {
        ready(e) == 3 && e.iter().all(|e| e["task"] != sick.as_str())
    });
    for e in &after {
        let target = format!(
            "{}:{}",
            e["address"].as_str().expect("address"),
            e["host_port"]
        );
        assert_eq!(http_get(&target), e["task"].as_str().expect("task"));
    }
    let gone = Command::new("docker")
        .args(["inspect", &container])
        .output()
        .expect("docker inspect");
    assert!(
        !gone.status.success(),
        "the sick task's container was removed"
    );
}

const PROCESS_CONFIG: &str = r#"
gpushare {
  cluster      = "CLUSTER"
  cloud        = "local"
  local_agents = "external"
}

capacity_provider "web" {
  instance_type = "g6.xlarge"
  max_size      = 1
}

task_definition "talker" {
  container "main" {
    image   = "unused-by-the-process-runtime"
    command = ["sh", "-c", "echo hello from $GPUSHARE_TASK_ID; i=0; while true; do i=$((i+1)); echo line $i; sleep 1; done"]
    cpu     = 256
    memory  = 64
  }
}

service "talker" {
  task_definition   = "talker"
  capacity_provider = "web"
  desired_count     = 1
}
"#;

/// `gpushare logs` with the process runtime: the task's output (its files under
/// the agent's state directory) by request through the store, and `--follow`
/// printing each new line once.
#[test]
fn logs_show_a_process_tasks_output_and_follow_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let cluster = format!("logs-{}", std::process::id());
    std::fs::write(
        dir.join("main.hcl"),
        PROCESS_CONFIG.replace("CLUSTER", &cluster),
    )
    .expect("config");
    let mut fleet = Fleet {
        dir: dir.to_path_buf(),
        cluster,
        agents: BTreeMap::new(),
        runtime: "process",
    };
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    fleet.start_agents();
    let show = gpushare_tests::show_json(dir);
    let task = gpushare_tests::arr(&show, "tasks")[0]["id"]
        .as_str()
        .expect("task id")
        .to_string();
    // The agent starts the task on its first pass; its output follows.
    let deadline = Instant::now() + Duration::from_secs(30);
    let logs = loop {
        let r = gp(dir, &["logs", &task, "--tail", "1000", "--wait", "10"]).run();
        if r.code == 0 && r.stdout.contains("line 3") {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "{}{}\n{}",
            r.stdout,
            r.stderr,
            fleet.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        logs.stdout.starts_with(&format!("hello from {task}\n")),
        "{}",
        logs.stdout
    );
    let tail = gp(dir, &["logs", &task, "--tail", "2"]).run();
    tail.expect_code(0);
    assert_eq!(tail.stdout.lines().count(), 2, "{}", tail.stdout);
    let wrong = gp(dir, &["logs", &task, "--container", "side"]).run();
    assert_eq!(wrong.code, 1);
    assert!(
        wrong.stderr.contains("has no container \"side\""),
        "{}",
        wrong.stderr
    );

    // --follow: new lines as they come, each once, in order.
    let mut follow = Command::new(gpushare_tests::gpushare_bin())
        .args(["logs", &task, "--follow", "--tail", "3"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("gpushare logs --follow");
    std::thread::sleep(Duration::from_secs(8));
    let _ = follow.kill();
    let out = follow.wait_with_output().expect("output");
    let numbers: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("line ")?.parse().ok())
        .collect();
    assert!(numbers.len() >= 6, "{numbers:?}");
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "each line once, in order: {numbers:?}"
    );
}

/// `gpushare show --json`'s services, as text.
fn show_services(dir: &Path) -> String {
    gpushare_tests::show_json(dir)["services"].to_string()
}
