//! A server of your own joining a registered pool (issue 24), as a Docker container on
//! a private network: a fresh "host" with nothing but the `gpushare` binary, the
//! controller's address, its CA hash and a pool token joins with one command (`gpushare
//! agent`, the command `gpushare host setup` installs as a unit; the host id derived
//! from the container's host name) and runs the tasks the controller places on it.
//! Nothing is launched for the registered pool (the local cloud's own record of its
//! instances is checked). Task copies are counted from the host's process list.
//!
//! Stand-ins as in tests/hosts_docker.rs: the GPU inventory is a file and the MPS
//! control program a script (crates/testkit/src/docker_hosts.rs). Needs the Docker Engine.

use gpushare_tests::docker_hosts::{Controller, Lab};
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
    let env = join_env(&controller, &token);
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
    assert_eq!(launched(dir), 0, "the local cloud launched nothing");
}

/// Two services on a registered pool: `SMALL` is the small service's count.
const OPERATED: &str = include_str!("fixtures/own_hosts.hcl");

/// Two servers in containers join with one pool token; their GPUs differ (a 64 GiB
/// and a 16 GiB stand-in inventory), so the 20 GiB tasks go to the big one. Then,
/// with every task counted from the containers' own process lists: cordon moves
/// nothing; drain moves the small server's task to the big one and keeps it; a server
/// whose MPS daemon stops answering is emptied and kept, and used again once it
/// answers; `host remove` drains before it deregisters. Nothing is ever launched.
#[test]
fn two_servers_in_containers_are_cordoned_drained_impaired_and_removed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let write = |small: u32| {
        std::fs::write(
            dir.join("main.hcl"),
            OPERATED.replace("SMALL", &small.to_string()),
        )
        .expect("config")
    };
    write(2);
    let mut lab = Lab::new(dir);
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let controller = lab.start_controller(&["serve"]);
    let token = lab.token(&["--pool", "lab", "--uses", "2"]);
    let env = join_env(&controller, &token);
    lab.agents.gpus = vec![("l4".into(), 65536)];
    lab.start_host("gpu-a", &env, &[]);
    lab.agents.gpus = vec![("l4".into(), 16384)];
    let b = lab.start_host("gpu-b", &env, &[]);
    let joined = |s: &serde_json::Value| {
        ["gpu-a", "gpu-b"].iter().all(|id| {
            arr(s, "hosts").iter().any(|h| {
                h["id"] == *id && h["source"] == "registered" && h["last_heartbeat"].is_u64()
            })
        })
    };
    let show = wait_show(&lab, "both servers joined", joined);
    let b_memory = arr(&show, "hosts")
        .iter()
        .find(|h| h["id"] == "gpu-b")
        .map(|h| h["gpus"][0]["memory_mib"].clone());
    assert_eq!(b_memory, Some(serde_json::json!(16384)), "{show:#}");

    // Placed by the GPUs the servers reported: both big tasks on gpu-a, the small
    // ones spread (one on each). The cost line counts the two servers at 2.5 each.
    let out = apply(dir);
    assert!(out.contains("5.00"), "two servers at $2.50/h: {out}");
    wait_counts(&lab, &[("gpu-a", 3), ("gpu-b", 1)]);
    let on_a = lab.copies_by_host().remove("gpu-a").unwrap_or_default();
    let show = show_json(dir);
    let big_on_a = arr(&show, "tasks")
        .iter()
        .filter(|t| t["service"] == "ownbig" && on_a.contains_key(t["id"].as_str().unwrap_or("")))
        .count();
    assert_eq!(big_on_a, 2, "{show:#}");

    // Cordon: nothing moves.
    gp(dir, &["host", "cordon", "gpu-b"]).run().expect_code(0);
    let out = apply(dir);
    assert!(!out.contains("move"), "{out}");
    wait_counts(&lab, &[("gpu-a", 3), ("gpu-b", 1)]);

    // Drain: gpu-b's task moves to gpu-a; gpu-b stays, holding nothing.
    gp(dir, &["host", "drain", "gpu-b"]).run().expect_code(0);
    apply(dir);
    wait_counts(&lab, &[("gpu-a", 4)]);
    assert!(host_ids(dir).contains("gpu-b"), "a drained server stays");
    gp(dir, &["host", "uncordon", "gpu-b"]).run().expect_code(0);
    write(3);
    apply(dir);
    wait_counts(&lab, &[("gpu-a", 4), ("gpu-b", 1)]);

    // Its MPS daemon stops answering: impaired, its task moves, the server is kept
    // (it cannot be replaced) and used again once the daemon answers.
    lab.set_mps_answering(&b, false);
    wait_show(&lab, "gpu-b impaired", |s| {
        mps_health(s, "gpu-b") == "impaired"
    });
    apply(dir);
    wait_counts(&lab, &[("gpu-a", 5)]);
    assert!(
        host_ids(dir).contains("gpu-b"),
        "an impaired server is kept"
    );
    lab.set_mps_answering(&b, true);
    wait_show(&lab, "gpu-b healthy", |s| {
        mps_health(s, "gpu-b") == "healthy"
    });
    write(4);
    apply(dir);
    wait_counts(&lab, &[("gpu-a", 5), ("gpu-b", 1)]);

    // Remove: drained first (its task runs on gpu-a before it stops on gpu-b), then
    // deregistered.
    gp(dir, &["host", "remove", "gpu-b"]).run().expect_code(0);
    apply(dir);
    wait_counts(&lab, &[("gpu-a", 6)]);
    assert!(!host_ids(dir).contains("gpu-b"), "deregistered");

    // Nothing was launched for the registered pool.
    assert_eq!(launched(dir), 0, "the local cloud launched nothing");
}

/// What a server is given to join: the controller's address, its CA hash, the token
/// (no host id: the agent derives it from the host name, the container's).
fn join_env(controller: &Controller, token: &str) -> String {
    format!(
        "GPUSHARE_SERVER={}\nGPUSHARE_JOIN_TOKEN={token}\nGPUSHARE_CA_HASH={}\n",
        controller.url, controller.ca_hash
    )
}

/// How many instances the local cloud ever launched (its own record).
fn launched(dir: &std::path::Path) -> usize {
    let fleet = dir.join(".gpushare").join("local-fleet.json");
    std::fs::read_to_string(fleet)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["instances"].as_array().map(Vec::len))
        .unwrap_or(0)
}

fn apply(dir: &std::path::Path) -> String {
    let r = gp(dir, &["apply", "--auto-approve"]).run();
    assert_eq!(r.code, 0, "apply: {}\n{}", r.stderr, r.stdout);
    r.stdout
}

fn host_ids(dir: &std::path::Path) -> BTreeSet<String> {
    arr(&show_json(dir), "hosts")
        .iter()
        .filter_map(|h| h["id"].as_str().map(str::to_string))
        .collect()
}

fn mps_health(show: &serde_json::Value, id: &str) -> String {
    arr(show, "hosts")
        .iter()
        .find(|h| h["id"] == id)
        .and_then(|h| h["mps_health"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Wait (at most 90 s) until `show --json` satisfies `f`; that output.
fn wait_show(lab: &Lab, what: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let show = show_json(&lab.dir);
        if f(&show) {
            return show;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within 90 s\n{show:#}\n{}",
            lab.host_logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Wait (at most 90 s) until the containers' process lists show `want` tasks per
/// server (servers not named run none) and every task exactly once.
fn wait_counts(lab: &Lab, want: &[(&str, usize)]) {
    let want: std::collections::BTreeMap<String, usize> =
        want.iter().map(|(h, n)| (h.to_string(), *n)).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let by_host = lab.copies_by_host();
        let counts: std::collections::BTreeMap<String, usize> = by_host
            .iter()
            .map(|(h, per)| (h.clone(), per.len()))
            .filter(|(_, n)| *n > 0)
            .collect();
        let once = lab.copies().values().all(|n| *n == 1);
        if counts == want && once {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the servers run {by_host:?}, want {want:?} each once\n{}",
            lab.host_logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
