//! `gpushare agent` as real processes: three agents (one per host id) with the
//! process runtime against one file store whose state.json this test writes, as
//! `apply` would. The MPS control program is a stand-in script (there is no GPU,
//! so no MPS daemon, on the test machines); the GPU inventory is a file.

use gpushare_testkit::procstat;
// The file store read through the engine, as the end-to-end tests' support reads it.
use gpushare_core::model::{HostReport, StoreState, TaskState};
use gpushare_testkit_engine::agent as support;
use gpushare_testkit_engine::file_store;
use procstat::{cpu_ticks, rss_kib};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;
// Live `sleep` processes started for a task, from the process list.
use gpushare_testkit::task_copies as copies;

const BIN: &str = env!("CARGO_BIN_EXE_gpushare");

struct Fleet {
    dir: PathBuf,
    store: PathBuf,
    state_dir: PathBuf,
    mps: StandInMps,
    inventory: PathBuf,
    agents: BTreeMap<String, Child>,
}

impl Fleet {
    fn new(dir: &Path) -> Fleet {
        let inventory = dir.join("gpus.json");
        std::fs::write(
            &inventory,
            r#"[{"index":0,"model":"l4","memory_mib":23034,"uuid":"GPU-e2e-0","compute_mode":"exclusive_process"}]"#,
        )
        .expect("inventory");
        Fleet {
            dir: dir.to_path_buf(),
            store: dir.join("store"),
            state_dir: dir.join("agent-state"),
            mps: StandInMps::new(&dir.join("mps")),
            inventory,
            agents: BTreeMap::new(),
        }
    }

    fn args(&self, host: &str) -> Vec<String> {
        [
            "agent",
            "--store",
            &format!("file://{}", self.store.display()),
            "--cluster",
            "e2e",
            "--host-id",
            host,
            "--runtime",
            "process",
            "--interval",
            "1",
            "--state-dir",
            &self.state_dir.display().to_string(),
            "--mps-control",
            &self.mps.program.display().to_string(),
            "--mps-pipe-dir",
            &self.mps.pipe_dir.display().to_string(),
            "--inventory-file",
            &self.inventory.display().to_string(),
            "--stop-grace",
            "1",
            "--restart-backoff",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn spawn(&mut self, host: &str) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("agent-{host}.log")))
            .expect("log file");
        let child = Command::new(BIN)
            .args(self.args(host))
            .env("GPUSHARE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn gpushare agent");
        self.agents.insert(host.to_string(), child);
    }

    fn reports(&self) -> BTreeMap<String, HostReport> {
        file_store::file_store_reports(&self.store)
            .into_iter()
            .map(|r| (r.host_id.clone(), r))
            .collect()
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for h in self.agents.keys() {
            let log = std::fs::read_to_string(self.dir.join(format!("agent-{h}.log")))
                .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            s.push_str(&format!(
                "--- {h}\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        s
    }

    /// Wait (bounded) until every task of `want` is reported in `state` by its host.
    fn wait_reported(&self, want: &BTreeMap<String, String>, state: TaskState, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let reports = self.reports();
            let missing: Vec<&String> = want
                .iter()
                .filter(|(task, host)| {
                    reports.get(*host).and_then(|r| r.tasks.get(*task)) != Some(&state)
                })
                .map(|(t, _)| t)
                .collect();
            if missing.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not {state:?} after {secs} s: {missing:?}\nreports: {reports:#?}\nlogs:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in self.agents.values_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Whatever the agents left running.
        for pgid in task_groups(&self.state_dir) {
            // SAFETY: kill(2) on a process group this test's agents started.
            unsafe {
                libc::kill(-(pgid as i32), libc::SIGKILL);
            }
        }
    }
}

/// The process groups in the process runtime's task records (`task.json`: a digest
/// line, then the record).
fn task_groups(state_dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    let mut stack = vec![state_dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "task.json") {
                let record: Option<serde_json::Value> = std::fs::read_to_string(&p)
                    .ok()
                    .and_then(|s| s.split_once('\n').map(|(_, body)| body.to_string()))
                    .and_then(|body| serde_json::from_str(&body).ok());
                let containers = record
                    .as_ref()
                    .and_then(|r| r["containers"].as_array().cloned())
                    .unwrap_or_default();
                out.extend(
                    containers
                        .iter()
                        .filter_map(|c| c["process"]["pgid"].as_u64())
                        .filter_map(|g| u32::try_from(g).ok()),
                );
            }
        }
    }
    out
}

fn write(fleet: &Fleet, st: &StoreState) {
    write_state(&fleet.store, st);
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario of agent processes, step by step"
)]
fn agents_run_every_task_once_and_a_killed_agent_adopts_its_tasks() {
    let d = tempfile::tempdir().expect("tempdir");
    let mut fleet = Fleet::new(d.path());
    let cpu = revision("cpu", 1, vec![container("main", &["sleep", "300"])]);
    let infer = revision(
        "infer",
        1,
        vec![{
            let mut c = container("main", &["sh", "-c", "env > env.txt; exec sleep 300"]);
            c.gpu = mps(2048, Some(25));
            c
        }],
    );
    let hosts = ["h-1", "h-2", "h-3"];
    let mut tasks = Vec::new();
    let mut want = BTreeMap::new();
    for (i, h) in hosts.iter().enumerate() {
        let n = i + 1;
        tasks.push(task(&format!("e2e-cpu-{n}"), &cpu, h, vec![]));
        tasks.push(task(&format!("e2e-mps-{n}"), &infer, h, vec![0]));
        want.insert(format!("e2e-cpu-{n}"), h.to_string());
        want.insert(format!("e2e-mps-{n}"), h.to_string());
    }
    let mut st = state("e2e", &hosts, vec![cpu, infer], tasks);
    write(&fleet, &st);
    for h in hosts {
        fleet.spawn(h);
    }
    fleet.wait_reported(&want, TaskState::Running, 60);
    for task in want.keys() {
        assert_eq!(copies(task), 1, "{task} runs exactly once");
    }

    // The reports: heartbeat, agent version, GPU inventory, MPS health.
    let reports = fleet.reports();
    for h in hosts {
        let r = &reports[h];
        assert_eq!(
            r.mps_health,
            gpushare_core::model::MpsHealth::Healthy,
            "{r:?}"
        );
        assert!(!r.agent_version.is_empty());
        assert_eq!(r.gpus[0].uuid.as_deref(), Some("GPU-e2e-0"));
        assert_eq!(r.gpus[0].compute_mode.as_deref(), Some("exclusive_process"));
    }
    // The environment an MPS task sees.
    let env_file = fleet.state_dir.join("e2e/h-1/work/e2e-mps-1/main/env.txt");
    let env = std::fs::read_to_string(&env_file).expect("env.txt");
    let pipe = fleet.mps.pipe_dir.display().to_string();
    for line in [
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M".to_string(),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25".into(),
        format!("CUDA_MPS_PIPE_DIRECTORY={pipe}"),
        "NVIDIA_VISIBLE_DEVICES=GPU-e2e-0".into(),
        "CUDA_VISIBLE_DEVICES=GPU-e2e-0".into(),
        "GPUSHARE_TASK_ID=e2e-mps-1".into(),
    ] {
        assert!(env.lines().any(|l| l == line), "{line} missing from\n{env}");
    }

    // A second agent for a host already served is refused (it would start copies).
    let out = Command::new(BIN)
        .args(fleet.args("h-2"))
        .arg("--once")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another agent"), "{err}");

    // SIGKILL h-1's agent, then restart it: it adopts its tasks, starts no copy.
    // The task's record (its process: pid, group, start time).
    let record_file = fleet.state_dir.join("e2e/h-1/records/e2e-cpu-1/task.json");
    let record_before = std::fs::read_to_string(&record_file).expect("record");
    let before = fleet.reports()["h-1"].at;
    let mut old = fleet.agents.remove("h-1").expect("h-1");
    old.kill().expect("SIGKILL");
    old.wait().expect("reaped");
    // The tasks outlive their agent.
    assert_eq!(copies("e2e-cpu-1"), 1);
    assert_eq!(copies("e2e-mps-1"), 1);
    fleet.spawn("h-1");
    let deadline = Instant::now() + Duration::from_secs(30);
    while fleet.reports()["h-1"].at <= before + 1 {
        assert!(
            Instant::now() < deadline,
            "the restarted agent does not report\n{}",
            fleet.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    fleet.wait_reported(&want, TaskState::Running, 30);
    assert_eq!(
        std::fs::read_to_string(&record_file).expect("record"),
        record_before,
        "adopted, not restarted"
    );
    for task in want.keys() {
        assert_eq!(
            copies(task),
            1,
            "{task} runs exactly once after the restart"
        );
    }

    // The daemon stops answering on every host: three failed probes make it impaired.
    fleet.mps.set("error");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = fleet.reports();
        if hosts
            .iter()
            .all(|h| r[*h].mps_health == gpushare_core::model::MpsHealth::Impaired)
        {
            assert!(r["h-1"]
                .mps_error
                .as_deref()
                .unwrap_or("")
                .contains("Cannot find MPS"));
            break;
        }
        assert!(Instant::now() < deadline, "not impaired: {r:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    fleet.mps.set("ok");

    // Everything is stopped: the agents stop their processes.
    st.serial += 1;
    for t in st.tasks.values_mut() {
        t.state = TaskState::Stopping;
    }
    write(&fleet, &st);
    fleet.wait_reported(&want, TaskState::Stopped, 30);
    for task in want.keys() {
        assert_eq!(copies(task), 0, "{task} stopped");
    }

    // SIGTERM ends an agent cleanly.
    for (h, c) in fleet.agents.iter_mut() {
        // SAFETY: kill(2) on a child this test started.
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        let status = c.wait().expect("wait");
        assert!(status.success(), "agent {h} exited with {status}");
    }
    fleet.agents.clear();
}

#[test]
fn bad_flags_and_unknown_hosts_are_clear_errors() {
    let d = tempfile::tempdir().expect("tempdir");
    let fleet = Fleet::new(d.path());
    let web = revision("web", 1, vec![container("main", &["sleep", "300"])]);
    write(
        &fleet,
        &state(
            "e2e",
            &["h-1"],
            vec![web.clone()],
            vec![task("e2e-bad-1", &web, "h-1", vec![])],
        ),
    );

    let run = |args: Vec<String>| {
        let out = Command::new(BIN).args(args).output().expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let mut args = fleet.args("h-1");
    let i = args.iter().position(|a| a == "process").expect("runtime");
    args[i] = "podman".into();
    let (code, err) = run(args);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("unknown runtime") && err.contains("podman"),
        "{err}"
    );

    let mut args = fleet.args("h-nope");
    args.push("--once".into());
    let (code, err) = run(args);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("h-nope") && err.contains("not in the store"),
        "{err}"
    );
    assert_eq!(copies("e2e-bad-1"), 0, "nothing started");

    let mut args = fleet.args("h-1");
    let i = args
        .iter()
        .position(|a| a.starts_with("file://"))
        .expect("store");
    args[i] = "etcd://127.0.0.1:1".into();
    args.push("--once".into());
    let (code, err) = run(args);
    assert_eq!(code, Some(1));
    assert!(err.contains("etcd://127.0.0.1:1"), "{err}");
    assert_eq!(copies("e2e-bad-1"), 0, "nothing started");
}

/// A benchmark, not a timed test (run by hand: `cargo test -p gpushare
/// --no-default-features --test agent_processes -- --ignored --nocapture`): 20
/// agents, 200 tasks (process runtime, interval 1 s); prints the time from the
/// state being written to every task reported running, and the agents' CPU and
/// memory at idle.
#[test]
#[ignore = "a benchmark printing figures for the closing note (20 agent processes, about a minute); run by hand"]
fn bench_20_agents_200_tasks() {
    let d = tempfile::tempdir().expect("tempdir");
    let mut fleet = Fleet::new(d.path());
    let cpu = revision("cpu", 1, vec![container("main", &["sleep", "600"])]);
    let hosts: Vec<String> = (1..=20).map(|i| format!("h-{i}")).collect();
    let host_refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let mut tasks = Vec::new();
    let mut want = BTreeMap::new();
    for i in 0..200 {
        let h = &hosts[i % 20];
        let id = format!("bench-{i}");
        tasks.push(task(&id, &cpu, h, vec![]));
        want.insert(id, h.clone());
    }
    // Agents first (reporting an empty host), then the assignment, as after apply.
    write(&fleet, &state("e2e", &host_refs, vec![cpu.clone()], vec![]));
    for h in &hosts {
        fleet.spawn(h);
    }
    std::thread::sleep(Duration::from_secs(3));
    let t0 = Instant::now();
    let mut st = state("e2e", &host_refs, vec![cpu], tasks);
    st.serial = 2;
    write(&fleet, &st);
    fleet.wait_reported(&want, TaskState::Running, 120);
    let converge = t0.elapsed();
    std::thread::sleep(Duration::from_secs(4));
    let pids: Vec<u32> = fleet.agents.values().map(|c| c.id()).collect();
    let before: u64 = pids.iter().map(|p| cpu_ticks(*p)).sum();
    let window = Duration::from_secs(20);
    std::thread::sleep(window);
    let after: u64 = pids.iter().map(|p| cpu_ticks(*p)).sum();
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let cpu_pct = (after - before) as f64 / hz / window.as_secs_f64() * 100.0 / pids.len() as f64;
    let rss: Vec<u64> = pids.iter().map(|p| rss_kib(*p)).collect();
    println!(
        "20 agents, 200 tasks: all reported running {:.1} s after the state was written; \
         idle CPU per agent {cpu_pct:.2} % of one core (interval 1 s); RSS per agent {} - {} KiB",
        converge.as_secs_f64(),
        rss.iter().min().unwrap_or(&0),
        rss.iter().max().unwrap_or(&0)
    );
    for task in want.keys() {
        assert_eq!(copies(task), 1, "{task}");
    }
}
