//! Jobs end to end (issue 51), with real processes: a local fleet whose hosts'
//! agents are external (`local_agents = "external"`), so each host runs a real
//! `gpushare agent` process with the process runtime, and every run of the job is a
//! real shell script. `gpushare reconcile --once` passes drive the job; the runs'
//! own output (an events file each run appends to) is what the tests count.
//!
//! Stand-ins, because the test machines have no GPU: the MPS control program is a
//! script that answers like a healthy daemon, and the GPU inventory is a file.

use gpushare_tests::agents::{chmod_755, kill_task_groups, AgentProcesses, AgentSpawn};
use gpushare_tests::{arr, gp, show_json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// One L4 (22888 MiB) per host: two 8 GiB runs fit on one GPU.
fn config(dir: &Path, completions: u32, parallelism: u32, service: bool) -> String {
    let service = if service {
        r#"
task_definition "server" {
  container "main" {
    image   = "unused-by-the-process-runtime"
    command = ["sleep", "600"]
    cpu     = 1024
    memory  = 512
    gpu {
      mps {
        memory = 8192
      }
    }
  }
}

service "server" {
  task_definition   = "server"
  capacity_provider = "l4"
  desired_count     = 1
}
"#
    } else {
        ""
    };
    format!(
        r#"
gpushare {{
  cluster      = "jobs"
  cloud        = "local"
  local_agents = "external"
}}

capacity_provider "l4" {{
  instance_type = "g6.xlarge"
  max_size      = 4
}}

task_definition "run" {{
  container "main" {{
    image   = "unused-by-the-process-runtime"
    command = ["/bin/sh", "{script}"]
    cpu     = 1024
    memory  = 512
    gpu {{
      mps {{
        memory = 8192
      }}
    }}
  }}
}}
{service}
job "sweep" {{
  task_definition   = "run"
  capacity_provider = "l4"
  completions       = {completions}
  parallelism       = {parallelism}
  max_retries       = 2
  indexed           = true
}}
"#,
        script = dir.join("run.sh").display()
    )
}

/// The run: it appends `start INDEX TASK` to the events file, works for a while,
/// then fails once for an odd index (a marker file remembers the failure) and
/// succeeds otherwise, appending `end INDEX TASK ok|fail`.
const RUN: &str = r#"#!/bin/sh
d="$(dirname "$0")"
i="$GPUSHARE_JOB_INDEX"
[ "$GPUSHARE_JOB_COMPLETIONS" -gt 0 ] || exit 9
echo "start $i $GPUSHARE_TASK_ID" >> "$d/events"
sleep 2
if [ $((i % 2)) -eq 1 ] && [ ! -e "$d/failed-$i" ]; then
  : > "$d/failed-$i"
  echo "end $i $GPUSHARE_TASK_ID fail" >> "$d/events"
  exit 3
fi
echo "end $i $GPUSHARE_TASK_ID ok" >> "$d/events"
"#;

/// One `gpushare agent` process per host, each with its own runtime directory.
struct Agents {
    procs: AgentProcesses,
    /// Hosts lost for good: never given an agent again.
    lost: BTreeSet<String>,
}

impl Agents {
    fn new(dir: &Path) -> Agents {
        Agents {
            procs: AgentProcesses::new(dir, "GPU-jobs-0"),
            lost: BTreeSet::new(),
        }
    }

    /// Start an agent for every host of the state that is up and has none.
    fn start_missing(&mut self) {
        let show = show_json(&self.procs.dir);
        for h in arr(&show, "hosts") {
            let id = h["id"].as_str().expect("host id").to_string();
            if h["state"] == "terminated"
                || self.procs.running.contains_key(&id)
                || self.lost.contains(&id)
            {
                continue;
            }
            let store = self.procs.store_url();
            let state_dir = self.runtime_dir(&id);
            let inventory = self.procs.inventory.clone();
            let how = AgentSpawn {
                link: &["--store", &store, "--cluster", "jobs", "--host-id", &id],
                env: &[],
                runtime: "process",
                state_dir: &state_dir,
                inventory: &inventory,
            };
            self.procs.spawn(&id, how);
        }
    }

    fn runtime_dir(&self, host: &str) -> PathBuf {
        self.procs.runtime_dir.join(host)
    }

    /// The host is lost: its agent and every process it started are killed.
    fn kill_host(&mut self, host: &str) {
        self.procs.kill(host);
        kill_task_groups(&self.runtime_dir(host));
        self.lost.insert(host.to_string());
    }

    fn logs(&self) -> String {
        self.procs.logs()
    }
}

/// One event a run wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    start: bool,
    index: u32,
    task: String,
    ok: bool,
}

fn events(dir: &Path) -> Vec<Event> {
    std::fs::read_to_string(dir.join("events"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(f.len() >= 3, "a torn event line: {l:?}");
            Event {
                start: f[0] == "start",
                index: f[1].parse().expect("index"),
                task: f[2].to_string(),
                ok: f.get(3) == Some(&"ok"),
            }
        })
        .collect()
}

/// `gpushare reconcile --once` (3 s heartbeat timeout), then agents for new hosts,
/// until `done(show)`; returns the last `show --json` and the most hosts seen up.
fn drive(
    dir: &Path,
    agents: &mut Agents,
    secs: u64,
    done: impl Fn(&serde_json::Value) -> bool,
) -> (serde_json::Value, usize) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut most_hosts = 0;
    loop {
        let r = gp(
            dir,
            &[
                "reconcile",
                "--once",
                "--interval",
                "1",
                "--heartbeat-timeout",
                "3",
            ],
        )
        .run();
        r.expect_code(0);
        agents.start_missing();
        let show = show_json(dir);
        most_hosts = most_hosts.max(up_hosts(&show).len());
        if done(&show) {
            return (show, most_hosts);
        }
        assert!(
            Instant::now() < deadline,
            "not done after {secs} s: {:#}\n{}\n{}",
            show["jobs"],
            r.stdout,
            agents.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn up_hosts(show: &serde_json::Value) -> BTreeSet<String> {
    arr(show, "hosts")
        .iter()
        .filter(|h| h["state"] != "terminated")
        .filter_map(|h| h["id"].as_str().map(str::to_string))
        .collect()
}

fn job_state(show: &serde_json::Value) -> &str {
    show["jobs"][0]["state"].as_str().unwrap_or("none")
}

/// Each index succeeded exactly once by the runs' own output, and no index started
/// again once it had succeeded; each run (task id) started once.
fn each_index_once(ev: &[Event], completions: u32) {
    let mut ok: BTreeMap<u32, usize> = BTreeMap::new();
    let mut starts: BTreeMap<&str, usize> = BTreeMap::new();
    for (n, e) in ev.iter().enumerate() {
        if e.start {
            *starts.entry(e.task.as_str()).or_default() += 1;
            assert!(
                !ev[..n]
                    .iter()
                    .any(|p| p.index == e.index && !p.start && p.ok),
                "index {} started again after it succeeded: {ev:#?}",
                e.index
            );
        } else if e.ok {
            *ok.entry(e.index).or_default() += 1;
        }
    }
    let want: BTreeMap<u32, usize> = (0..completions).map(|i| (i, 1)).collect();
    assert_eq!(ok, want, "succeeded per index: {ev:#?}");
    assert!(
        starts.values().all(|n| *n == 1),
        "a run was restarted: {starts:?}"
    );
}

/// The most runs that were between their start and their end at once.
fn most_at_once(ev: &[Event]) -> usize {
    let mut now: BTreeSet<&str> = BTreeSet::new();
    let mut most = 0;
    for e in ev {
        if e.start {
            now.insert(&e.task);
        } else {
            now.remove(e.task.as_str());
        }
        most = most.max(now.len());
    }
    most
}

fn setup(completions: u32, parallelism: u32, service: bool) -> (tempfile::TempDir, Agents) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("run.sh"), RUN).expect("run script");
    chmod_755(&dir.join("run.sh"));
    std::fs::write(
        dir.join("main.hcl"),
        config(dir, completions, parallelism, service),
    )
    .expect("config");
    let agents = Agents::new(dir);
    (tmp, agents)
}

#[test]
fn twenty_indexed_runs_five_at_once_odd_ones_fail_once_then_succeed() {
    let (tmp, mut agents) = setup(20, 5, false);
    let dir = tmp.path();
    let r = gp(dir, &["apply", "--auto-approve"]).run();
    r.expect_code(0);
    assert!(
        r.stdout
            .contains("job.sweep: 20 runs, 5 at once on 3 x g6.xlarge"),
        "{}",
        r.stdout
    );
    agents.start_missing();
    let (show, _) = drive(dir, &mut agents, 300, |s| job_state(s) != "running");
    let job = &show["jobs"][0];
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(job["succeeded"], 20, "{job:#}");
    // Each odd index failed once (exit 3) and then succeeded on its second attempt.
    for i in arr(job, "indexes") {
        let n = i["index"].as_u64().expect("index");
        let attempts = arr(i, "attempts");
        let outcomes: Vec<&str> = attempts
            .iter()
            .filter_map(|a| a["outcome"].as_str())
            .collect();
        if n % 2 == 1 {
            assert_eq!(outcomes, ["failed", "succeeded"], "{i:#}");
            assert_eq!(attempts[0]["exit_code"], 3, "{i:#}");
            assert!(attempts[0]["ended_at"].as_u64().is_some(), "{i:#}");
        } else {
            assert_eq!(outcomes, ["succeeded"], "{i:#}");
        }
        assert_eq!(attempts.last().expect("an attempt")["exit_code"], 0);
    }
    let ev = events(dir);
    each_index_once(&ev, 20);
    assert_eq!(ev.iter().filter(|e| e.start).count(), 30, "{ev:#?}");
    let most = most_at_once(&ev);
    assert!(most <= 5, "{most} runs at once: {ev:#?}");
    // The job's runs are gone and the pool shrinks back (min_size 0): no host left.
    let (show, _) = drive(dir, &mut agents, 60, |s| up_hosts(s).is_empty());
    assert!(arr(&show, "tasks").is_empty(), "{show:#}");
    // `gpushare job status` tells the same story.
    let st = gp(dir, &["job", "status", "sweep"]).run();
    st.expect_code(0);
    assert!(
        st.stdout
            .contains("job.sweep: SUCCEEDED, 20/20 succeeded, 0 running, 0 pending, 0 failed (10 failed attempt(s))"),
        "{}",
        st.stdout
    );
    // Nothing runs again: the finished job is converged.
    assert_eq!(ev.len(), events(dir).len());
}

#[test]
fn a_host_killed_mid_job_has_its_runs_retried_elsewhere_each_index_once() {
    let (tmp, mut agents) = setup(12, 4, false);
    let dir = tmp.path();
    // No failures of their own: only the lost host's runs are retried.
    for i in 0..12 {
        std::fs::write(dir.join(format!("failed-{i}")), "").expect("marker");
    }
    std::fs::write(dir.join("run.sh"), RUN.replace("sleep 2", "sleep 4")).expect("run script");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    agents.start_missing();
    // Wait until runs are going on two hosts, then lose one of them.
    let (show, _) = drive(dir, &mut agents, 60, |s| {
        !events(dir).is_empty()
            && arr(s, "tasks")
                .iter()
                .filter(|t| t["state"] == "running")
                .count()
                >= 2
    });
    let victim = arr(&show, "tasks")
        .iter()
        .find(|t| t["state"] == "running")
        .and_then(|t| t["host"].as_str())
        .expect("a running run")
        .to_string();
    let lost: BTreeSet<String> = arr(&show, "tasks")
        .iter()
        .filter(|t| t["host"] == victim.as_str())
        .filter_map(|t| t["id"].as_str().map(str::to_string))
        .collect();
    agents.kill_host(&victim);
    let (show, _) = drive(dir, &mut agents, 300, |s| job_state(s) != "running");
    let job = &show["jobs"][0];
    assert_eq!(job["state"], "succeeded", "{job:#}");
    // The lost runs are failed attempts that name the lost host; their indexes
    // succeeded on another host.
    let mut retried = 0;
    for i in arr(job, "indexes") {
        let attempts = arr(i, "attempts");
        if let Some(a) = attempts
            .iter()
            .find(|a| lost.contains(a["task_id"].as_str().unwrap_or_default()))
        {
            retried += 1;
            assert_eq!(a["outcome"], "failed", "{i:#}");
            let why = a["reason"].as_str().unwrap_or_default();
            assert!(why.contains(&victim), "{i:#}");
            let last = attempts.last().expect("an attempt");
            assert_eq!(last["outcome"], "succeeded", "{i:#}");
            assert_ne!(last["host"], victim.as_str(), "{i:#}");
        }
    }
    assert!(retried > 0, "no run of the lost host was retried: {job:#}");
    let ev = events(dir);
    // The killed runs never wrote their end; every index succeeded exactly once.
    let mut ok: BTreeMap<u32, usize> = BTreeMap::new();
    for e in ev.iter().filter(|e| !e.start && e.ok) {
        *ok.entry(e.index).or_default() += 1;
    }
    assert_eq!(ok.len(), 12, "{ev:#?}");
    assert!(ok.values().all(|n| *n == 1), "{ok:?}");
    assert!(!up_hosts(&show).contains(&victim), "{show:#}");
}

#[test]
fn a_service_and_a_job_share_a_pool_and_the_pool_shrinks_back_after_the_job() {
    let (tmp, mut agents) = setup(4, 3, true);
    let dir = tmp.path();
    for i in 0..4 {
        std::fs::write(dir.join(format!("failed-{i}")), "").expect("marker");
    }
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    let show = show_json(dir);
    let service_host = arr(&show, "tasks")
        .iter()
        .find(|t| t["service"] == "server")
        .and_then(|t| t["host"].as_str())
        .expect("the service's task")
        .to_string();
    // The first run goes in the room the service leaves on its GPU.
    let runs_there: Vec<&serde_json::Value> = arr(&show, "tasks")
        .iter()
        .filter(|t| t["service"] == "sweep" && t["host"] == service_host.as_str())
        .collect();
    assert_eq!(runs_there.len(), 1, "{show:#}");
    agents.start_missing();
    let (show, most) = drive(dir, &mut agents, 200, |s| job_state(s) != "running");
    assert_eq!(show["jobs"][0]["state"], "succeeded", "{:#}", show["jobs"]);
    assert!(most >= 2, "the pool grew for the job: {most}");
    // Once the runs are gone the pool is back to the service's one host.
    let (show, _) = drive(dir, &mut agents, 60, |s| up_hosts(s).len() == 1);
    assert_eq!(
        up_hosts(&show),
        BTreeSet::from([service_host.clone()]),
        "{show:#}"
    );
    let tasks = arr(&show, "tasks");
    assert_eq!(tasks.len(), 1, "{show:#}");
    assert_eq!(tasks[0]["service"], "server");
    each_index_once(&events(dir), 4);
}

/// A run that prints to stdout (and stderr when index 1 fails, once).
const LOUD_RUN: &str = r#"#!/bin/sh
d="$(dirname "$0")"
i="$GPUSHARE_JOB_INDEX"
echo "run $i begins"
echo "run $i is task $GPUSHARE_TASK_ID"
sleep 2
if [ "$i" = 1 ] && [ ! -e "$d/failed-1" ]; then
  : > "$d/failed-1"
  echo "run $i fails" >&2
  exit 3
fi
echo "run $i done"
"#;

/// The task id of attempt `n` (1-based) of the job's index `index`.
fn attempt_task(show: &serde_json::Value, index: usize, n: usize) -> String {
    let i = &arr(&show["jobs"][0], "indexes")[index];
    arr(i, "attempts")[n - 1]["task_id"]
        .as_str()
        .expect("task id")
        .to_string()
}

#[test]
fn job_logs_prints_what_each_attempt_of_an_index_printed() {
    let (tmp, mut agents) = setup(2, 2, false);
    let dir = tmp.path();
    std::fs::write(dir.join("run.sh"), LOUD_RUN).expect("run script");
    // One host stays (min_size 1), so its agent is there to answer after the job.
    let text = std::fs::read_to_string(dir.join("main.hcl")).expect("config");
    std::fs::write(
        dir.join("main.hcl"),
        text.replace("max_size      = 4", "min_size = 1\n  max_size = 4"),
    )
    .expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    agents.start_missing();
    // --follow on index 0 while it runs: it prints the run's lines and returns by
    // itself once the run has ended (the agent says so in its answer).
    let follow = gp(
        dir,
        &[
            "job", "logs", "sweep", "--index", "0", "--follow", "--wait", "60",
        ],
    )
    .spawn();
    let followed = wait_output(follow, 90, &agents);
    assert!(followed.status.success(), "{followed:?}");
    let out = String::from_utf8_lossy(&followed.stdout);
    assert!(out.contains("run 0 begins\n"), "{out}");
    assert!(out.contains("run 0 done\n"), "{out}");
    let (show, _) = drive(dir, &mut agents, 120, |s| job_state(s) != "running");
    assert_eq!(show["jobs"][0]["state"], "succeeded", "{:#}", show["jobs"]);
    // Index 1: its latest attempt (the second) by default, the failed one on asking.
    let logs = |extra: &[&str]| {
        let mut args = vec!["job", "logs", "sweep", "--index", "1", "--wait", "60"];
        args.extend_from_slice(extra);
        let r = gp(dir, &args).run();
        r.expect_code(0);
        r.stdout
    };
    let second = attempt_task(&show, 1, 2);
    let out = logs(&[]);
    assert_eq!(
        out,
        format!("run 1 begins\nrun 1 is task {second}\nrun 1 done\n"),
        "{}",
        agents.logs()
    );
    let first = attempt_task(&show, 1, 1);
    let out = logs(&["--attempt", "1"]);
    assert_eq!(
        out,
        format!("run 1 begins\nrun 1 is task {first}\nrun 1 fails\n")
    );
    assert_eq!(logs(&["--tail", "1"]), "run 1 done\n");
    // An attempt that never was: a clear refusal.
    let r = gp(
        dir,
        &["job", "logs", "sweep", "--index", "1", "--attempt", "7"],
    )
    .run();
    r.expect_code(1);
    assert!(
        r.stderr.contains("has no attempt 7 (its attempts: 1, 2)"),
        "{}",
        r.stderr
    );
}

/// The output of `child` once it has exited, which it must within `secs`.
fn wait_output(mut child: Child, secs: u64, agents: &Agents) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "still running after {secs} s: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                agents.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    child.wait_with_output().expect("output")
}

/// `child` (a `gpushare run --wait`) to its end, within `secs`, with an agent for
/// every host it launches meanwhile.
fn wait_with_agents(mut child: Child, agents: &mut Agents, secs: u64) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while child.try_wait().expect("try_wait").is_none() {
        agents.start_missing();
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "still running after {secs} s: {}{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                agents.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn gpushare_run_records_a_one_off_job_that_passes_keep_until_job_rm() {
    let (tmp, mut agents) = setup(1, 1, false);
    let dir = tmp.path();
    // No declared job: the configuration has the pool and the task definition only.
    let text = std::fs::read_to_string(dir.join("main.hcl")).expect("config");
    let cut = text.find("job \"sweep\"").expect("the job block");
    std::fs::write(dir.join("main.hcl"), &text[..cut]).expect("config");
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    // An edit of the runs' pool that is not applied yet: `run` plans from what was
    // applied, so the edit waits for `gpushare apply`.
    let edited = text[..cut].replace("max_size      = 4", "max_size      = 5");
    assert_ne!(edited, text[..cut], "the pool's max_size line");
    std::fs::write(dir.join("main.hcl"), edited).expect("config");
    let pool_max = |dir: &Path| {
        let r = gp(dir, &["state", "show", "capacity_provider.l4", "--json"]).run();
        r.expect_code(0);
        let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("state show --json");
        v["max_size"].as_u64()
    };
    // Index 1 fails (exit 3) and may not be retried: --wait exits 1.
    let bad = gp(
        dir,
        &["run", "run", "--count", "2", "--name", "bad", "--wait"],
    )
    .spawn();
    let out = wait_with_agents(bad, &mut agents, 180);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("job.bad failed"), "{stderr}");
    // Three runs, two at once, one retry each: they succeed.
    let args = [
        "run",
        "run",
        "--count",
        "3",
        "--parallelism",
        "2",
        "--max-retries",
        "1",
        "--name",
        "adhoc",
        "--wait",
    ];
    let good = gp(dir, &args).spawn();
    let out = wait_with_agents(good, &mut agents, 180);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("job.adhoc: SUCCEEDED, 3/3 succeeded"),
        "{stdout}"
    );
    let show = show_json(dir);
    let adhoc = arr(&show, "jobs")
        .iter()
        .find(|j| j["name"] == "adhoc")
        .expect("job.adhoc in show --json");
    let tasks: BTreeSet<&str> = arr(adhoc, "indexes")
        .iter()
        .flat_map(|i| arr(i, "attempts"))
        .filter(|a| a["outcome"] == "succeeded")
        .filter_map(|a| a["task_id"].as_str())
        .collect();
    // Each index succeeded once, by the runs' own output.
    let ok: Vec<u32> = events(dir)
        .iter()
        .filter(|e| !e.start && e.ok && tasks.contains(e.task.as_str()))
        .map(|e| e.index)
        .collect();
    assert_eq!(ok.len(), 3, "{ok:?}");
    assert_eq!(ok.iter().collect::<BTreeSet<_>>().len(), 3, "{ok:?}");
    assert_eq!(
        pool_max(dir),
        Some(4),
        "`gpushare run` applied the pool's edit"
    );
    // An apply of the configuration (which does not declare them) keeps both jobs,
    // and applies the edit.
    gp(dir, &["apply", "--auto-approve"]).run().expect_code(0);
    assert_eq!(pool_max(dir), Some(5));
    for (job, line) in [
        ("adhoc", "job.adhoc: SUCCEEDED, 3/3"),
        ("bad", "job.bad: FAILED, 1/2"),
    ] {
        let st = gp(dir, &["job", "status", job]).run();
        st.expect_code(0);
        assert!(st.stdout.starts_with(line), "{}", st.stdout);
    }
    // `job rm` removes a one-off job; a name the state does not hold is refused.
    gp(dir, &["job", "rm", "adhoc"]).run().expect_code(0);
    gp(dir, &["job", "status", "adhoc"]).run().expect_code(1);
    gp(dir, &["job", "rm", "adhoc"]).run().expect_code(1);
    gp(dir, &["job", "status", "bad"]).run().expect_code(0);
}
