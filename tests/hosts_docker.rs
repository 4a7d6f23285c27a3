//! Tests across "hosts": Docker containers on a private network, one controller
//! (`gpushare reconcile` or `gpushare serve` with `--agent-listen`, over a file store
//! in the configuration directory mounted in) and hosts that each run the real
//! `gpushare agent --server ...` with the process runtime, joined with join tokens
//! through the agent API. The local fleet with `local_agents = "external"` plans the
//! hosts; the test plays the hypervisor and boots a container for each host the
//! planner launches. Task copies are counted from the hosts' own process lists
//! (`/proc` in each container), never from the state or the reports.
//!
//! Stand-ins, because the test machines have no GPU: each host's GPU inventory is a
//! file and its MPS control program a script that answers like a healthy daemon
//! (crates/testkit/src/docker_hosts.rs). Needs the Docker Engine, `ldd` and Debian's
//! busybox-static; a machine without them fails these tests.

use gpushare_tests::docker_hosts::{token_in, Container, Controller, Lab, AGENT_STATE_DIR};
use gpushare_tests::{arr, gp, show_json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One L4 per host (g6.xlarge), two 8 GiB shares per GPU: four tasks on two hosts.
const PAIR: &str = r#"
gpushare {
  cluster              = "hosts"
  cloud                = "local"
  local_agents         = "external"
  move_timeout_seconds = 30
  # Launched hosts (and replacements) boot with a token minted for them at launch.
  controller_address   = "https://controller:7443"
}

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

/// The quickstart's L4 services (examples/quickstart) with `sleep` for commands:
/// six embedders (4 GiB shares) and four rerankers (6 GiB) need three L4 hosts.
const QUICKSTART: &str = r#"
gpushare {
  cluster      = "quickstart"
  cloud        = "local"
  local_agents = "external"
}

capacity_provider "l4" {
  instance_type = "g6.4xlarge"
  min_size      = 0
  max_size      = 4
}

task_definition "embedder" {
  container "server" {
    image   = "ghcr.io/example/embedder:1.4"
    command = ["sleep", "600"]
    cpu     = 2048
    memory  = 4096
    env = {
      MAX_BATCH = "64"
    }
    gpu {
      mps {
        memory              = 4096
        max_compute_percent = 15
      }
    }
  }
}

task_definition "reranker" {
  container "server" {
    image   = "ghcr.io/example/reranker:2.0"
    command = ["sleep", "600"]
    cpu     = 2048
    memory  = 8192
    gpu {
      mps {
        memory              = 6144
        max_compute_percent = 25
      }
    }
  }
}

service "embedder" {
  task_definition    = task_definition.embedder
  capacity_provider  = capacity_provider.l4
  desired_count      = 6
  placement_strategy = "binpack"
}

service "reranker" {
  task_definition   = task_definition.reranker
  capacity_provider = capacity_provider.l4
  desired_count     = 4
}
"#;

fn write_config(dir: &Path, text: &str) {
    std::fs::write(dir.join("main.hcl"), text).expect("config");
}

/// The tasks of the state that are meant to run.
fn wanted_tasks(dir: &Path) -> BTreeSet<String> {
    arr(&show_json(dir), "tasks")
        .iter()
        .filter(|t| t["state"] == "pending" || t["state"] == "running")
        .map(|t| t["id"].as_str().expect("task id").to_string())
        .collect()
}

/// The hosts of the state that are not terminated.
fn fleet(dir: &Path) -> BTreeSet<String> {
    arr(&show_json(dir), "hosts")
        .iter()
        .filter(|h| h["state"] != "terminated")
        .map(|h| h["id"].as_str().expect("host id").to_string())
        .collect()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Poll `f` (every 500 ms, at most `secs`) until it returns Some; `what` says what
/// is awaited when it does not.
#[track_caller]
fn eventually<T>(secs: u64, what: impl Fn() -> String, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "after {secs} s: {}", what());
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Start a `reconcile` controller on `lab` and boot hosts for every host it
/// launches until `hosts` hosts run every wanted task exactly once.
fn reconciled_fleet(lab: &Lab, extra: &[&str], hosts: usize) -> (Controller, BTreeSet<String>) {
    let mut cmd = vec!["reconcile", "--interval", "1"];
    cmd.extend_from_slice(extra);
    let controller = lab.start_controller(&cmd);
    eventually(
        90,
        || {
            format!(
                "{hosts} hosts launched\n{}",
                lab.logs(&controller.container).1
            )
        },
        || {
            lab.boot_new_hosts(&controller);
            (lab.hosts().len() >= hosts).then_some(())
        },
    );
    let want = wanted_tasks(&lab.dir);
    lab.wait_exactly_once(&want, 90, || {
        lab.boot_new_hosts(&controller);
    });
    assert_eq!(lab.hosts().len(), hosts, "{:?}", lab.hosts());
    (controller, want)
}

/// A fleet applied by hand (`gpushare apply` here) and served by `gpushare serve`
/// in a container; a host booted for each host and every task running once.
fn served_fleet(lab: &Lab) -> (Controller, BTreeSet<String>) {
    gp(&lab.dir, &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let controller = lab.start_controller(&["serve"]);
    lab.boot_new_hosts(&controller);
    let want = wanted_tasks(&lab.dir);
    lab.wait_exactly_once(&want, 90, || {});
    (controller, want)
}

#[test]
fn three_hosts_join_with_pool_tokens_and_run_the_quickstart_on_an_etcd_store() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let lab = Lab::new(tmp.path());
    // The store is an etcd member on the lab's network (the controller's system of
    // record: the hosts are not given its address, only the controller's).
    let store = lab.start_etcd("quickstart");
    write_config(
        tmp.path(),
        &QUICKSTART.replace(
            "local_agents = \"external\"",
            &format!("local_agents = \"external\"\n  store        = \"{store}\""),
        ),
    );
    let (controller, want) = reconciled_fleet(&lab, &[], 3);
    assert_eq!(want.len(), 10, "six embedders and four rerankers");
    assert!(
        !tmp.path().join(".gpushare").join("state.json").exists(),
        "the state is in etcd, not in a file store"
    );

    // Each host joined with a pool token of its own (one use each): all are used up.
    let list = gp(tmp.path(), &["token", "list", "--json"]).run();
    list.expect_code(0);
    let tokens = list.json()["tokens"].as_array().expect("tokens").clone();
    assert_eq!(tokens.len(), 3, "{tokens:#?}");
    assert!(
        tokens
            .iter()
            .all(|t| t["pool"] == "l4" && t["uses_left"] == 0),
        "{tokens:#?}"
    );
    let log = lab.logs(&controller.container).1;
    assert_eq!(log.matches("agent API: host joined").count(), 3, "{log}");

    // Each host runs exactly the tasks the state places on it (its process list).
    let by_host = lab.copies_by_host();
    let show = show_json(tmp.path());
    for t in arr(&show, "tasks") {
        let (id, host) = (
            t["id"].as_str().expect("id"),
            t["host"].as_str().expect("host"),
        );
        assert_eq!(
            by_host.get(host).and_then(|m| m.get(id)),
            Some(&1),
            "task {id} does not run on its host {host}: {by_host:?}"
        );
    }
    // The agents' reports reach `show` through the controller.
    let show = eventually(
        30,
        || format!("every task reported running: {:#}", show_json(tmp.path())),
        || {
            let show = show_json(tmp.path());
            arr(&show, "tasks")
                .iter()
                .all(|t| t["state"] == "running")
                .then_some(show)
        },
    );
    let hosts = arr(&show, "hosts");
    assert_eq!(hosts.len(), 3, "{show:#}");
    for h in hosts {
        assert!(h["last_heartbeat"].as_u64().is_some(), "{h:#}");
        assert_eq!(h["mps_health"], "healthy", "{h:#}");
        assert_eq!(h["gpus"][0]["memory_mib"], 22888, "{h:#}");
    }
}

#[test]
fn a_cut_off_host_is_replaced_and_stops_the_moved_tasks_when_it_is_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write_config(tmp.path(), PAIR);
    let lab = Lab::new(tmp.path());
    let (controller, want) = reconciled_fleet(&lab, &["--heartbeat-timeout", "5"], 2);
    assert_eq!(want.len(), 4);

    let by_host = lab.copies_by_host();
    let (victim, moved) = by_host
        .iter()
        .find(|(_, tasks)| !tasks.is_empty())
        .map(|(h, tasks)| (h.clone(), tasks.keys().cloned().collect::<BTreeSet<_>>()))
        .expect("a host with tasks");
    let victim_c: Container = lab.hosts()[&victim].clone();
    lab.disconnect(&victim_c);

    // The reconcile loop declares it silent, launches a replacement (booted here, as
    // a hypervisor would), moves its tasks there (new ids) and retires it.
    let want_after = eventually(
        120,
        || {
            format!(
                "{victim} retired and its tasks moved: {:#}\n--- controller:\n{}\n{}",
                show_json(tmp.path()),
                lab.logs(&controller.container).1,
                lab.host_logs()
            )
        },
        || {
            lab.boot_new_hosts(&controller);
            let want = wanted_tasks(tmp.path());
            (!fleet(tmp.path()).contains(&victim) && want.len() == 4 && want.is_disjoint(&moved))
                .then_some(want)
        },
    );
    assert_eq!(lab.hosts().len(), 3, "one replacement, not more");
    // Cut off, the victim's agent keeps what it ran (it cannot know it moved).
    let kept = lab.copies_by_host()[&victim].clone();
    assert_eq!(
        kept.keys().cloned().collect::<BTreeSet<_>>(),
        moved,
        "the cut-off host's tasks keep running"
    );

    // Back on the network: its agent learns its host left the fleet and stops them;
    // every task then runs exactly once, on the other hosts.
    lab.reconnect(&victim_c);
    lab.wait_exactly_once(&want_after, 60, || {});
    assert!(
        lab.copies_by_host()[&victim].is_empty(),
        "{:?}",
        lab.copies_by_host()
    );
    // Converged: it stays so (the reconcile loop does not move anything back).
    std::thread::sleep(Duration::from_secs(3));
    lab.wait_exactly_once(&want_after, 1, || {});
    assert_eq!(wanted_tasks(tmp.path()), want_after);
}

#[test]
fn agents_keep_their_tasks_while_the_controller_is_down_and_reconnect() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write_config(tmp.path(), PAIR);
    let lab = Lab::new(tmp.path());
    let (controller, want) = reconciled_fleet(&lab, &[], 2);
    let pids = |lab: &Lab| -> BTreeMap<String, Vec<_>> {
        lab.hosts()
            .iter()
            .map(|(h, c)| (h.clone(), lab.task_processes(c)))
            .collect()
    };
    let before = pids(&lab);

    lab.kill(&controller.container);
    std::thread::sleep(Duration::from_secs(4));
    // Nothing restarted, nothing stopped: the same processes, same pids.
    assert_eq!(
        pids(&lab),
        before,
        "the tasks changed without the controller"
    );

    let restarted_at = unix_now();
    lab.restart_controller(&controller);
    // The agents report again through the restarted controller...
    eventually(
        60,
        || {
            format!(
                "fresh heartbeats after the restart: {:#}\n{}",
                show_json(tmp.path()),
                lab.host_logs()
            )
        },
        || {
            let show = show_json(tmp.path());
            arr(&show, "hosts")
                .iter()
                .all(|h| {
                    h["last_heartbeat"]
                        .as_u64()
                        .is_some_and(|t| t > restarted_at)
                })
                .then_some(())
        },
    );
    assert_eq!(pids(&lab), before, "the reconnect restarted tasks");
    // ...and follow its assignments again: a scale-in reaches them through the new
    // streams, and the other tasks keep their processes.
    write_config(
        tmp.path(),
        &PAIR.replace("desired_count     = 4", "desired_count     = 3"),
    );
    let want_after = eventually(
        60,
        || format!("three tasks wanted: {:#}", show_json(tmp.path())),
        || {
            let w = wanted_tasks(tmp.path());
            (w.len() == 3).then_some(w)
        },
    );
    assert!(want_after.is_subset(&want));
    lab.wait_exactly_once(&want_after, 60, || {});
    let after = pids(&lab);
    for (host, procs) in &after {
        let kept: Vec<_> = before[host]
            .iter()
            .filter(|p| want_after.contains(&p.task))
            .cloned()
            .collect();
        assert_eq!(procs, &kept, "host {host}: the kept tasks kept their pids");
    }
}

#[test]
fn scale_in_and_destroy_leave_no_task_running_even_past_a_frozen_agent() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write_config(tmp.path(), PAIR);
    let lab = Lab::new(tmp.path());
    let (_controller, want) = served_fleet(&lab);
    assert_eq!(want.len(), 4);
    let hosts = lab.hosts();
    assert_eq!(hosts.len(), 2);

    // Scale-in while one host's agent is frozen (SIGSTOP: its tasks run on, it
    // neither stops them nor reports).
    let (first, second) = {
        let mut it = hosts.values();
        (
            it.next().expect("a host").clone(),
            it.next().expect("a host").clone(),
        )
    };
    let ran_on_first: BTreeSet<String> = lab
        .task_processes(&first)
        .into_iter()
        .map(|p| p.task)
        .collect();
    lab.stop_agent(&first);
    write_config(
        tmp.path(),
        &PAIR.replace("desired_count     = 4", "desired_count     = 1"),
    );
    gp(tmp.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let want_after = wanted_tasks(tmp.path());
    assert_eq!(want_after.len(), 1);
    // The apply is over, and the frozen host still runs every task it ran (three of
    // the four stop, so at least one of them is its): only its agent stops them.
    let still: BTreeSet<String> = lab
        .task_processes(&first)
        .into_iter()
        .map(|p| p.task)
        .collect();
    assert_eq!(still, ran_on_first, "a frozen agent stopped nothing");
    assert!(!ran_on_first.is_subset(&want_after));
    lab.cont_agent(&first);
    lab.wait_exactly_once(&want_after, 60, || {});

    // Destroy while the other host is frozen whole (`docker pause`: its agent and
    // its tasks), then thawed.
    lab.pause(&second);
    gp(tmp.path(), &["destroy", "--auto-approve"])
        .run()
        .expect_code(0);
    assert!(fleet(tmp.path()).is_empty());
    lab.unpause(&second);
    lab.wait_exactly_once(&BTreeSet::new(), 60, || {});
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, step by step"
)]
fn refused_joins_and_a_borrowed_certificate_are_logged_without_the_token() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write_config(tmp.path(), PAIR);
    let lab = Lab::new(tmp.path());
    let (controller, want) = served_fleet(&lab);
    let hosts = lab.hosts();
    let ids: Vec<String> = hosts.keys().cloned().collect();
    let (a, b) = (&ids[0], &ids[1]);

    // A host booting with `env`: it must exit 1 saying `why`.
    let refused = |name: &str, env: String, why: &str| {
        let c = lab.start_host(name, &env, &[]);
        let code = eventually(
            60,
            || format!("{name} to exit: {}", lab.logs(&c).1),
            || lab.exit_code(&c),
        );
        let log = lab.logs(&c).1;
        assert_eq!(code, 1, "{name}: {log}");
        assert!(log.contains(why), "{name} should say {why:?}: {log}");
    };
    let env = |token: &str, host: &str| {
        format!(
            "GPUSHARE_SERVER={}\nGPUSHARE_JOIN_TOKEN={token}\nGPUSHARE_CA_HASH={}\nGPUSHARE_HOST_ID={host}\n",
            controller.url, controller.ca_hash
        )
    };
    // The token host `a` joined with, used again.
    let boot = std::fs::read_to_string(tmp.path().join(format!(".lab-{a}")).join("boot.env"))
        .expect("a's boot environment");
    let used = boot
        .lines()
        .find_map(|l| l.strip_prefix("GPUSHARE_JOIN_TOKEN="))
        .expect("a token")
        .to_string();
    refused("reused", env(&used, a), "used up");
    let expired = lab.token(&["--pool", "l4", "--ttl", "1s"]);
    std::thread::sleep(Duration::from_secs(2));
    refused("expired", env(&expired, a), "expired");
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).expect("other dir");
    write_config(
        &other,
        &PAIR.replace(
            "cluster              = \"hosts\"",
            "cluster              = \"other\"",
        ),
    );
    let foreign = token_in(&other, &["--pool", "l4"]);
    refused("foreign", env(&foreign, a), "unknown");

    // A host that presents host a's certificate (its agent-api directory copied)
    // while asking for host b's assignment: the controller refuses, and b's tasks
    // run nowhere but on b.
    let stolen = tmp.path().join("stolen");
    std::fs::create_dir_all(&stolen).expect("stolen dir");
    gpushare_tests::docker_hosts::docker_ok(&[
        "cp",
        &format!("{}:{AGENT_STATE_DIR}/agent-api", hosts[a].name),
        &stolen.display().to_string(),
    ]);
    let identity = stolen.join("agent-api").join("identity.json");
    let text = std::fs::read_to_string(&identity).expect("identity.json");
    std::fs::write(&identity, text.replace(a.as_str(), b.as_str())).expect("edit identity");
    let mount = format!(
        "{}:{AGENT_STATE_DIR}/agent-api",
        stolen.join("agent-api").display()
    );
    let impostor_env = format!(
        "GPUSHARE_SERVER={}\nGPUSHARE_CA_HASH={}\nGPUSHARE_HOST_ID={b}\n",
        controller.url, controller.ca_hash
    );
    let impostor = lab.start_host_with("impostor", &impostor_env, &["-v", &mount], &[]);
    // Until the controller says no, or the impostor runs something.
    let (refusal, procs) = eventually(
        30,
        || {
            format!(
                "the controller refuses the impostor: {}",
                lab.logs(&controller.container).1
            )
        },
        || {
            let refusal = lab
                .logs(&controller.container)
                .1
                .contains("refused another host's assignment");
            let procs = lab.task_processes(&impostor);
            (refusal || !procs.is_empty()).then_some((refusal, procs))
        },
    );
    assert!(
        procs.is_empty(),
        "the impostor runs {procs:?}: {}",
        lab.logs(&impostor).1
    );
    assert!(refusal);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        lab.task_processes(&impostor).is_empty(),
        "{}",
        lab.logs(&impostor).1
    );
    lab.wait_exactly_once(&want, 5, || {});

    // Every refusal is in the controller's log, never a token.
    let log = lab.logs(&controller.container).1;
    assert_eq!(log.matches("join refused").count(), 3, "{log}");
    let boots: Vec<String> = ids
        .iter()
        .map(|h| {
            std::fs::read_to_string(tmp.path().join(format!(".lab-{h}")).join("boot.env"))
                .expect("boot env")
        })
        .collect();
    let mut tokens = vec![used.clone(), expired, foreign];
    tokens.extend(boots.iter().filter_map(|b| {
        b.lines()
            .find_map(|l| l.strip_prefix("GPUSHARE_JOIN_TOKEN="))
            .map(str::to_string)
    }));
    for t in &tokens {
        let secret = t.split('.').nth(1).expect("a token's secret");
        assert!(
            !log.contains(secret),
            "a token in the controller's log:\n{log}"
        );
        let out = lab.logs(&controller.container).0;
        assert!(
            !out.contains(secret),
            "a token in the controller's output:\n{out}"
        );
    }
}
