//! A server of your own joining a registered pool (issue 24), as a Docker container on
//! a private network: a fresh "host" with nothing but the `gpushare` binary, the
//! controller's address, its CA hash and a pool token joins with one command (`gpushare
//! agent`, the command `gpushare host setup` installs as a unit; the host id derived
//! from the container's host name) and runs the tasks the controller places on it.
//! Nothing is launched for the registered pool (the local cloud's own record of its
//! instances is checked). Task copies are counted from the host's process list.
//!
//! Stand-ins as in tests/hosts_docker.rs: the GPU inventory is a file and the MPS
//! control program a script (tests/support/docker_hosts.rs). Needs the Docker Engine.

use gpushare_tests::docker_hosts::Lab;
use gpushare_tests::{arr, gp, show_json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
gpushare {
  cluster      = "ownlab"
  cloud        = "local"
  local_agents = "external"
}

capacity_provider "lab" {
  hosts = "registered"
}

task_definition "worker" {
  container "main" {
    image   = "unused-by-the-process-runtime"
    command = ["sleep", "600"]
    cpu     = 512
    memory  = 512
    gpu {
      mps {
        memory = 8192
      }
    }
  }
}

service "ownworker" {
  task_definition   = "worker"
  capacity_provider = "lab"
  desired_count     = 2
}
"#;

#[test]
fn a_fresh_host_with_only_the_binary_and_a_pool_token_joins_and_runs_its_tasks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("main.hcl"), CONFIG).expect("config");
    let lab = Lab::new(dir);
    // The pool is recorded; its tasks wait for a host.
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let controller = lab.start_controller(&["reconcile", "--interval", "1"]);
    let token = lab.token(&["--pool", "lab", "--uses", "2"]);
    // What the server is given: the controller's address, its CA hash, the token.
    // No host id: the agent derives it from the host name (the container's, "rack-7").
    let env = format!(
        "GPUSHARE_SERVER={}\nGPUSHARE_JOIN_TOKEN={token}\nGPUSHARE_CA_HASH={}\n",
        controller.url, controller.ca_hash
    );
    lab.start_host("rack-7", &env, &[]);
    let deadline = Instant::now() + Duration::from_secs(90);
    let want: BTreeSet<String> = loop {
        let show = show_json(dir);
        let placed: BTreeSet<String> = arr(&show, "tasks")
            .iter()
            .filter(|t| t["host"] == "rack-7")
            .map(|t| t["id"].as_str().expect("task id").to_string())
            .collect();
        let joined = arr(&show, "hosts")
            .iter()
            .any(|h| h["id"] == "rack-7" && h["source"] == "registered");
        if joined && placed.len() == 2 {
            break placed;
        }
        assert!(
            Instant::now() < deadline,
            "rack-7 did not join and get its tasks: {show:#}\n{}\n{}",
            lab.host_logs(),
            lab.logs(&controller.container).1
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    lab.wait_exactly_once(&want, 90, || {});
    // Nothing was launched for the registered pool.
    let fleet = dir.join(".gpushare").join("local-fleet.json");
    let launched = std::fs::read_to_string(&fleet)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["instances"].as_array().map(Vec::len))
        .unwrap_or(0);
    assert_eq!(launched, 0, "the local cloud launched nothing");
}
