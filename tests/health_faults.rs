//! Host health on the local fleet (issue 31): GPU and runtime faults injected with
//! `gpushare debug fault` become the simulated agents' health facts (the stand-in
//! for NVML and the Docker Engine, as there is no GPU here). An impaired GPU of a
//! healthy host has its tasks moved to other GPUs and takes no new ones; a lost GPU
//! or a runtime that does not answer gets the host replaced start-before-stop; with
//! `auto_repair = false` nothing moves and the health is reported.

use gpushare_tests::{arr, gp, plan_json, replace_config, show_json};
use serde_json::Value;
use std::path::Path;

fn config(auto_repair: bool) -> String {
    format!(
        r#"
gpushare {{
  cluster = "health"
  cloud   = "local"
}}

# 4 x L4 per host: two 8 GiB shares per GPU.
capacity_provider "l4" {{
  instance_type = "g6.12xlarge"
  max_size      = 3
  auto_repair   = {auto_repair}
}}

task_definition "worker" {{
  container "main" {{
    image   = "ghcr.io/example/worker:1"
    command = ["serve"]
    cpu     = 1024
    memory  = 1024
    gpu {{
      mps {{
        memory = 8192
      }}
    }}
  }}
}}

service "worker" {{
  task_definition   = "worker"
  capacity_provider = "l4"
  desired_count     = 6
}}
"#
    )
}

fn host_of<'a>(show: &'a Value, id: &str) -> Option<&'a Value> {
    arr(show, "hosts").iter().find(|h| h["id"] == id)
}

fn up_hosts(show: &Value) -> Vec<String> {
    arr(show, "hosts")
        .iter()
        .filter(|h| h["state"] == "running" || h["state"] == "pending")
        .map(|h| h["id"].as_str().expect("id").to_string())
        .collect()
}

/// (task id, host, first GPU) of every task.
fn placements(show: &Value) -> Vec<(String, String, u64)> {
    arr(show, "tasks")
        .iter()
        .map(|t| {
            (
                t["id"].as_str().expect("id").to_string(),
                t["host"].as_str().expect("host").to_string(),
                t["gpu"].as_u64().expect("gpu"),
            )
        })
        .collect()
}

fn all_running(show: &Value, n: usize) {
    let tasks = arr(show, "tasks");
    assert_eq!(tasks.len(), n, "{show:#}");
    assert!(tasks.iter().all(|t| t["state"] == "running"), "{show:#}");
}

fn fault(dir: &Path, args: &[&str]) {
    let mut a = vec!["debug", "fault"];
    a.extend_from_slice(args);
    let r = gp(dir, &a).run();
    r.expect_code(0);
}

fn apply(dir: &Path) {
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
}

#[test]
fn gpu_and_runtime_faults_move_tasks_and_replace_hosts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    replace_config(dir, &config(true));
    apply(dir);
    let show = show_json(dir);
    let hosts = up_hosts(&show);
    assert_eq!(hosts.len(), 1, "{show:#}");
    let host = hosts[0].clone();
    // Every check ran once: the host is ok, per check and per GPU.
    let h = host_of(&show, &host).expect("host");
    assert_eq!(h["health"]["status"], "ok", "{h:#}");
    let checks: Vec<&str> = arr(&h["health"], "checks")
        .iter()
        .map(|c| c["check"].as_str().expect("check"))
        .collect();
    assert_eq!(checks, ["mps_daemon", "gpus", "container_runtime"], "{h:#}");
    assert!(
        arr(h, "gpus").iter().all(|g| g["health"]["status"] == "ok"),
        "{h:#}"
    );

    // 1. A critical Xid on a GPU with tasks: only that GPU's tasks move.
    let before = placements(&show);
    let bad = before[0].2;
    let on_bad: Vec<String> = before
        .iter()
        .filter(|(_, h, g)| *h == host && *g == bad)
        .map(|(t, _, _)| t.clone())
        .collect();
    fault(
        dir,
        &[&host, "xid", "--gpu", &bad.to_string(), "--xid", "48"],
    );
    let p = plan_json(dir, &[]);
    assert!(arr(&p, "retirements").is_empty(), "{p:#}");
    let moves = arr(&p, "moves");
    let mut moved: Vec<String> = moves
        .iter()
        .map(|m| m["from_task"].as_str().expect("from").to_string())
        .collect();
    moved.sort();
    let mut want = on_bad.clone();
    want.sort();
    assert_eq!(moved, want, "{p:#}");
    let why = format!("GPU {bad} of host {host} impaired: Xid 48 (double-bit ECC error)");
    assert!(moves.iter().all(|m| m["reason"] == why.as_str()), "{p:#}");
    apply(dir);
    let show = show_json(dir);
    all_running(&show, 6);
    assert!(
        placements(&show)
            .iter()
            .all(|(_, h, g)| !(*h == host && *g == bad)),
        "{show:#}"
    );
    let h = host_of(&show, &host).expect("kept");
    let g = &arr(h, "gpus")[bad as usize];
    assert_eq!(g["health"]["status"], "impaired", "{g:#}");
    assert!(
        g["health"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("Xid 48"),
        "{g:#}"
    );
    // The text view names it too.
    let text = gp(dir, &["show"]).run();
    text.expect_code(0);
    assert!(
        text.stdout
            .contains(&format!("GPU{bad} health impaired: Xid 48")),
        "{}",
        text.stdout
    );
    // Nothing more to do: the GPU stays empty.
    gp(dir, &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);

    // 2. A lost GPU: the host's gpus check is impaired; it is replaced.
    fault(dir, &[&host, "gpu-lost", "--gpu", "3"]);
    let p = plan_json(dir, &[]);
    assert_eq!(arr(&p, "launches").len(), 1, "{p:#}");
    let retired: Vec<&str> = arr(&p, "retirements")
        .iter()
        .filter_map(|r| r["host_id"].as_str())
        .collect();
    assert_eq!(retired, [host.as_str()], "{p:#}");
    assert_eq!(arr(&p, "moves").len(), 6, "{p:#}");
    assert!(
        arr(&p, "moves").iter().all(|m| m["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("health check gpus impaired (GPU 3 lost")),
        "{p:#}"
    );
    apply(dir);
    let show = show_json(dir);
    all_running(&show, 6);
    let hosts = up_hosts(&show);
    assert_eq!(hosts.len(), 1, "{show:#}");
    assert_ne!(hosts[0], host);
    let host = hosts[0].clone();

    // 3. The container runtime stops answering: replaced too.
    fault(dir, &[&host, "runtime-down"]);
    let p = plan_json(dir, &[]);
    let retired: Vec<&str> = arr(&p, "retirements")
        .iter()
        .filter_map(|r| r["host_id"].as_str())
        .collect();
    assert_eq!(retired, [host.as_str()], "{p:#}");
    assert!(
        arr(&p, "moves").iter().all(|m| m["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("health check container_runtime impaired")),
        "{p:#}"
    );
    apply(dir);
    let show = show_json(dir);
    all_running(&show, 6);
    assert!(!up_hosts(&show).contains(&host), "{show:#}");
    gp(dir, &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);
}

#[test]
fn auto_repair_off_moves_nothing_and_reports() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    replace_config(dir, &config(false));
    apply(dir);
    let show = show_json(dir);
    let host = up_hosts(&show)[0].clone();
    let before = placements(&show);
    fault(dir, &[&host, "ecc", "--gpu", "0"]);
    fault(dir, &[&host, "runtime-down"]);
    // Nothing to change: exit 0 with --detailed-exitcode; the plan notes the host.
    gp(dir, &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);
    let p = plan_json(dir, &[]);
    let notes: Vec<&str> = arr(&p, "notes").iter().filter_map(Value::as_str).collect();
    assert!(
        notes.iter().any(|n| n.contains(&host)
            && n.contains("container_runtime impaired")
            && n.contains("GPU 0 impaired: 1 uncorrectable ECC error(s)")
            && n.contains("auto_repair = false")),
        "{notes:?}"
    );
    apply(dir);
    let show = show_json(dir);
    assert_eq!(placements(&show), before, "nothing moved");
    let h = host_of(&show, &host).expect("kept");
    assert_eq!(h["health"]["status"], "impaired", "{h:#}");
    let rt = arr(&h["health"], "checks")
        .iter()
        .find(|c| c["check"] == "container_runtime")
        .expect("container_runtime check");
    assert_eq!(rt["status"], "impaired", "{rt:#}");
    assert!(rt["since"].as_u64().unwrap_or(0) > 0, "{rt:#}");
    assert_eq!(arr(h, "gpus")[0]["health"]["status"], "impaired", "{h:#}");
    // Clearing the faults makes the host ok again.
    fault(dir, &[&host, "clear"]);
    gp(dir, &["plan"]).run().expect_code(0);
    let show = show_json(dir);
    let h = host_of(&show, &host).expect("kept");
    assert_eq!(h["health"]["status"], "ok", "{h:#}");
}
