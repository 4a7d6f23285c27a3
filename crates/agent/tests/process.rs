//! The process runtime with real processes: start, adopt after a restart (never a
//! second copy), stop (SIGTERM, grace, SIGKILL), exit codes, the environment.

use gpushare_testkit_engine::agent as support;

use gpushare_agent::{
    ContainerSpec, ContainerState, LaunchSpec, ProcessRuntime, Runtime, RuntimeError, TaskVerdict,
};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;
use support::eventually;

fn spec(task: &str, containers: Vec<(&str, Vec<&str>, bool)>) -> LaunchSpec {
    LaunchSpec {
        task_id: task.into(),
        containers: containers
            .into_iter()
            .map(|(name, cmd, essential)| ContainerSpec {
                name: name.into(),
                image: "unused".into(),
                command: cmd.into_iter().map(String::from).collect(),
                env: BTreeMap::from([
                    ("GPUSHARE_TASK_ID".to_string(), task.to_string()),
                    (
                        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(),
                        "0=2048M".to_string(),
                    ),
                ]),
                cpu_units: 0,
                memory_mib: 0,
                essential,
                gpus: vec![],
                mps_pipe_dir: None,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The record of `task` as the runtime wrote it: a SHA-256 line, then the JSON.
fn record_path(root: &Path, task: &str) -> std::path::PathBuf {
    root.join("records").join(task).join("task.json")
}

fn record(root: &Path, task: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(record_path(root, task)).expect("record");
    let (_, body) = text.split_once('\n').expect("digest line");
    serde_json::from_str(body).expect("record JSON")
}

/// Write `record` back under a correct digest, as only the runtime should.
fn reseal(root: &Path, task: &str, record: &serde_json::Value) {
    use sha2::Digest;
    let body = serde_json::to_string_pretty(record).expect("json");
    let sum = hex::encode(sha2::Sha256::digest(body.as_bytes()));
    std::fs::write(record_path(root, task), format!("{sum}\n{body}")).expect("write record");
}

fn process_field(root: &Path, task: &str, container: &str, field: &str) -> u32 {
    let rec = record(root, task);
    let c = rec["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == container)
        .expect("container");
    c["process"][field]
        .as_u64()
        .expect("number")
        .try_into()
        .expect("u32")
}

fn pid_of(root: &Path, task: &str, container: &str) -> u32 {
    process_field(root, task, container, "pid")
}

fn pgid_of(root: &Path, task: &str, container: &str) -> u32 {
    process_field(root, task, container, "pgid")
}

/// The fields of `/proc/<pid>/stat` after the command name (the state first), when
/// the process exists.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(
        s[s.rfind(')')? + 1..]
            .split_whitespace()
            .map(String::from)
            .collect(),
    )
}

/// Live processes in a process group (zombies aside).
fn group_members(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| alive(*pid))
        .filter(|pid| stat_fields(*pid).is_some_and(|f| f.get(2) == Some(&pgid.to_string())))
        .collect()
}

fn alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|s| s != "Z" && s != "X"))
}

#[tokio::test]
async fn start_adopt_after_restart_and_stop() {
    let d = tempfile::tempdir().expect("tempdir");
    let rt = ProcessRuntime::open(d.path(), "c1", "h-1").expect("open");
    // One agent per state directory and host.
    let e = ProcessRuntime::open(d.path(), "c1", "h-1")
        .err()
        .expect("locked");
    assert!(matches!(e, RuntimeError::Locked { .. }), "{e:?}");

    let s = spec(
        "t-1",
        vec![
            ("main", vec!["sleep", "300"], true),
            (
                "env",
                vec!["sh", "-c", "env > env.txt; exec sleep 300"],
                false,
            ),
        ],
    );
    rt.start(&s).await.expect("start");
    let root = rt.root().to_path_buf();
    let pid = pid_of(&root, "t-1", "main");
    assert!(alive(pid));
    let listed = rt.list().await.expect("list");
    assert_eq!(listed["t-1"].verdict(), TaskVerdict::Running);

    // The task sees its environment, and not the agent's.
    let env_file = root.join("work/t-1/env/env.txt");
    let env = eventually(10, || {
        std::fs::read_to_string(&env_file)
            .ok()
            .filter(|s| s.contains("GPUSHARE_TASK_ID"))
    })
    .await
    .expect("env written");
    assert!(
        env.lines()
            .any(|l| l == "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M"),
        "{env}"
    );
    assert!(env.lines().any(|l| l == "GPUSHARE_TASK_ID=t-1"), "{env}");
    // No GPU placed: CUDA sees none.
    assert!(env.lines().any(|l| l == "CUDA_VISIBLE_DEVICES="), "{env}");
    assert!(
        !env.contains("CARGO_"),
        "the agent's environment leaked: {env}"
    );

    // A new runtime instance (a restarted agent) adopts the running task...
    drop(rt);
    let rt = ProcessRuntime::open(d.path(), "c1", "h-1").expect("reopen");
    let listed = rt.list().await.expect("list");
    assert_eq!(listed["t-1"].verdict(), TaskVerdict::Running);
    // ...and refuses a second copy.
    let e = rt.start(&s).await.expect_err("second copy");
    assert!(matches!(e, RuntimeError::AlreadyRunning { .. }), "{e:?}");
    assert_eq!(
        pid_of(&root, "t-1", "main"),
        pid,
        "the first copy is untouched"
    );
    assert!(alive(pid));

    // Stop: SIGTERM reaches the whole process group; the record goes.
    let pgid = pgid_of(&root, "t-1", "main");
    rt.stop("t-1", Duration::from_secs(5)).await.expect("stop");
    assert!(!alive(pid), "process {pid} still alive after stop");
    assert_eq!(group_members(pgid), Vec::<u32>::new());
    assert!(rt.list().await.expect("list").is_empty());
    // Stopping what is not there is fine.
    rt.stop("t-1", Duration::from_secs(1))
        .await
        .expect("stop again");
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_after_the_grace() {
    let d = tempfile::tempdir().expect("tempdir");
    let rt = ProcessRuntime::open(d.path(), "c1", "h-1").expect("open");
    rt.start(&spec(
        "t-stubborn",
        vec![(
            "main",
            vec!["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
            true,
        )],
    ))
    .await
    .expect("start");
    let pid = pid_of(rt.root(), "t-stubborn", "main");
    let pgid = pgid_of(rt.root(), "t-stubborn", "main");
    // Let the shell install its trap.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(group_members(pgid).len() >= 2, "wrapper and command run");
    rt.stop("t-stubborn", Duration::from_millis(500))
        .await
        .expect("stop");
    assert!(!alive(pid));
    // The command ignores SIGTERM: only the SIGKILL after the grace ends it.
    assert_eq!(
        group_members(pgid),
        Vec::<u32>::new(),
        "SIGKILL after the grace period"
    );
}

#[tokio::test]
async fn exit_codes_are_reported_and_commands_are_required() {
    let d = tempfile::tempdir().expect("tempdir");
    let rt = ProcessRuntime::open(d.path(), "c1", "h-1").expect("open");
    rt.start(&spec(
        "t-exit",
        vec![("main", vec!["sh", "-c", "exit 3"], true)],
    ))
    .await
    .expect("start");
    let mut verdict = None;
    for _ in 0..200 {
        let v = rt.list().await.expect("list")["t-exit"].verdict();
        if v != TaskVerdict::Running {
            verdict = Some(v);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        verdict,
        Some(TaskVerdict::Exited {
            container: "main".into(),
            code: Some(3)
        })
    );
    let listed = rt.list().await.expect("list");
    assert_eq!(
        listed["t-exit"].containers["main"].state,
        ContainerState::Exited { code: Some(3) }
    );

    // A missing program exits 127, as from a shell.
    rt.start(&spec(
        "t-missing",
        vec![("main", vec!["/nonexistent/program"], true)],
    ))
    .await
    .expect("start");
    let code = eventually(10, || {
        let dir = rt.root().join("records/t-missing/main/status");
        std::fs::read_to_string(dir)
            .ok()
            .map(|s| s.trim().to_string())
    })
    .await;
    assert_eq!(code.as_deref(), Some("127"));

    let e = rt
        .start(&spec("t-nocmd", vec![("main", vec![], true)]))
        .await
        .expect_err("no command");
    assert!(matches!(e, RuntimeError::NoCommand { .. }), "{e:?}");
    assert!(
        !rt.list().await.expect("list").contains_key("t-nocmd"),
        "nothing left behind"
    );
}

/// The live `sleep 3000` processes whose environment marks them as task `task`'s:
/// the copies of a task running `exec sleep 3000`, whoever started them.
fn copies_of(task: &str) -> Vec<u32> {
    let marker = format!("GPUSHARE_TASK_ID={task}");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| alive(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x003000\x00")
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == marker.as_bytes()))
        })
        .collect()
}

/// Repro 6 of issue 30, through the agent loop: a task that writes `pid` in its
/// working directory (as `echo $$ > pid` does) made the runtime lose it (the record
/// was its working directory): the next pass called it failed and forgot it without
/// killing it, the one after started it again, and copies piled up after every
/// backoff. Now the task works in a directory of its own: after many passes and
/// several backoffs, exactly one copy runs and it is reported running.
#[tokio::test]
async fn a_task_writing_pid_in_its_working_directory_runs_once() {
    use gpushare_agent::{Agent, AgentConfig, StaticInventory};
    use gpushare_core::model::{GpuInfo, TaskState};
    use gpushare_engine::store::{FileStore, Store};
    use std::sync::Arc;
    use support::{container, revision, state, task, write_state};

    let d = tempfile::tempdir().expect("tempdir");
    let state_dir = d.path().join("agent");
    let store_dir = d.path().join("store");
    let rev = revision(
        "dup",
        1,
        vec![container(
            "main",
            // The pause lets the start finish first, so the task's writes land
            // last. It writes `pid` (the repro) and every name the runtime keeps in
            // a record, here and one level up.
            &[
                "sh",
                "-c",
                "sleep 0.3; for f in pid status ../task.json; do echo $$ > $f; done; exec sleep 3000",
            ],
        )],
    );
    write_state(
        &store_dir,
        &state(
            "c1",
            &["h-1"],
            vec![rev.clone()],
            vec![task("t-dup", &rev, "h-1", vec![])],
        ),
    );
    let store: Arc<dyn Store> = Arc::new(FileStore::open(&store_dir).expect("store"));
    let rt = Arc::new(ProcessRuntime::open(&state_dir, "c1", "h-1").expect("runtime"));
    let mut config = AgentConfig::new("c1", "h-1");
    config.stop_grace = Duration::from_secs(1);
    config.restart_backoff = Duration::from_millis(100);
    config.restart_backoff_max = Duration::from_millis(200);
    let inv = Arc::new(StaticInventory(vec![GpuInfo::new(0, "l4", 23034)]));
    let mut agent = Agent::new(config, store.clone(), rt.clone(), inv);
    // Twenty passes over two seconds: ten times the longest backoff.
    for _ in 0..20 {
        agent.pass().await.expect("pass");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let copies = copies_of("t-dup");
    let r = store.reports().await.expect("reports").remove(0);
    let t = r.task_details["t-dup"].clone();
    rt.stop("t-dup", Duration::from_secs(1))
        .await
        .expect("stop");
    let left = copies_of("t-dup");
    // Whatever happened, leave no process behind.
    for pid in &left {
        // SAFETY: kill(2) on a pid this test just found carrying the task's marker.
        unsafe {
            libc::kill(*pid as i32, libc::SIGKILL);
        }
    }
    assert_eq!(copies.len(), 1, "copies of the task run: {copies:?}");
    assert_eq!(t.state, TaskState::Running, "{t:?}");
    assert_eq!(t.restarts, 0, "{t:?}");
    assert_eq!(left, Vec::<u32>::new(), "stop ends the task");
}

/// Repro 5 of issue 30: after the task's process group is killed (as the OOM killer
/// would) its pid may be taken by an unrelated program. Waiting for a real pid reuse
/// is not possible unprivileged (the pid range cannot be narrowed), so the test
/// starts an unrelated program and points the task's record at its pid and group,
/// keeping the task's own start time: exactly what a reused pid looks like. Neither
/// listing nor stopping the task may signal it.
#[tokio::test]
async fn a_reused_pid_is_never_signalled() {
    let d = tempfile::tempdir().expect("tempdir");
    let rt = ProcessRuntime::open(d.path(), "c1", "h-1").expect("open");
    rt.start(&spec("t-reuse", vec![("main", vec!["sleep", "300"], true)]))
        .await
        .expect("start");
    let root = rt.root().to_path_buf();
    let pgid = pgid_of(&root, "t-reuse", "main");
    // The OOM killer ends the whole group.
    // SAFETY: kill(2) on the group this test's runtime just started.
    unsafe {
        libc::kill(-(pgid as i32), libc::SIGKILL);
    }
    assert!(
        eventually(10, || group_members(pgid).is_empty().then_some(()))
            .await
            .is_some(),
        "the group dies"
    );
    // An unrelated program, in a group of its own, takes the pid. A real reuse
    // needs the pid range to wrap around, so it starts at a later clock tick than
    // the task did: the pause makes sure the forged record cannot match it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut stranger = std::process::Command::new("sleep")
        .arg("300")
        .process_group(0)
        .spawn()
        .expect("spawn the unrelated program");
    let stranger_pid = stranger.id();
    let recorded_start = record(&root, "t-reuse")["containers"][0]["process"]["start_time"]
        .as_u64()
        .expect("start time");
    assert_ne!(
        stat_fields(stranger_pid).and_then(|f| f.get(19).cloned()),
        Some(recorded_start.to_string()),
        "the unrelated program started later"
    );
    forge_pid(&rt, "t-reuse", "main", stranger_pid);

    let listed = rt.list().await.expect("list");
    let verdict = listed["t-reuse"].verdict();
    rt.stop("t-reuse", Duration::from_secs(1))
        .await
        .expect("stop");
    let untouched = stranger.try_wait().expect("try_wait").is_none();
    let _ = stranger.kill();
    let _ = stranger.wait();
    assert!(untouched, "the unrelated program was signalled");
    assert!(
        matches!(verdict, TaskVerdict::Exited { code: None, .. }),
        "the task is not taken for running: {verdict:?}"
    );
}

/// Point the record of `task`'s `container` at `pid` (as its process and group),
/// keeping the recorded start time, under a correct digest: what the record of a
/// reused pid looks like.
fn forge_pid(rt: &ProcessRuntime, task: &str, container: &str, pid: u32) {
    let mut rec = record(rt.root(), task);
    for c in rec["containers"].as_array_mut().expect("containers") {
        if c["name"] == container {
            c["process"]["pid"] = pid.into();
            c["process"]["pgid"] = pid.into();
        }
    }
    reseal(rt.root(), task, &rec);
}

/// A record that cannot be read (damaged, or edited without its digest) does not
/// make the task dead: a restarted agent's runtime finds the task by the markers in
/// its processes' environment, lists it (with no known container: the agent sees an
/// unfinished start), and a start stops that copy before starting one, never two.
#[tokio::test]
async fn a_task_with_an_unreadable_record_is_found_and_never_duplicated() {
    let d = tempfile::tempdir().expect("tempdir");
    let rt = ProcessRuntime::open(d.path(), "c1", "h-1").expect("open");
    let s = spec(
        "t-lost",
        vec![("main", vec!["sh", "-c", "exec sleep 3000"], true)],
    );
    rt.start(&s).await.expect("start");
    let root = rt.root().to_path_buf();
    let first = eventually(10, || {
        let c = copies_of("t-lost");
        (c.len() == 1).then_some(c)
    })
    .await
    .expect("one copy runs");
    // An edit without the digest: the record is unreadable.
    let path = record_path(&root, "t-lost");
    let text = std::fs::read_to_string(&path).expect("record");
    std::fs::write(&path, text.replace("\"main\"", "\"other\"")).expect("edit");

    drop(rt);
    let rt = ProcessRuntime::open(d.path(), "c1", "h-1").expect("reopen");
    let listed = rt.list().await.expect("list");
    let found = listed.get("t-lost").map(|o| o.verdict());
    assert_eq!(copies_of("t-lost"), first, "listing touches nothing");
    let started = rt.start(&s).await;
    let copies = eventually(10, || {
        let c = copies_of("t-lost");
        (c.len() == 1 && c != first).then_some(c)
    })
    .await;
    let now = copies_of("t-lost");
    rt.stop("t-lost", Duration::from_secs(1))
        .await
        .expect("stop");
    for pid in copies_of("t-lost") {
        // SAFETY: kill(2) on a pid this test just found carrying the task's marker.
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
    assert_eq!(
        found,
        Some(TaskVerdict::Starting),
        "the task is found by its marker"
    );
    started.expect("start");
    assert!(
        copies.is_some(),
        "the unaccounted copy is replaced by exactly one: {first:?} then {now:?}"
    );
}

/// The process runtime runs health checks itself, with ECS's rules: a check that
/// keeps failing makes its container (and, essential, its task) UNHEALTHY after
/// `retries` runs; in its `start_period` the same failures leave it UNKNOWN; a
/// passing one is HEALTHY. One check interval is 5 s (ECS's least).
#[tokio::test]
async fn health_checks_run_by_the_process_runtime() {
    use gpushare_core::model::{ContainerHealthCheck, HealthStatus};
    let d = tempfile::tempdir().expect("tempdir");
    let rt = ProcessRuntime::open(d.path(), "c1", "h-1").expect("open");
    let check = |cmd: &str, start_period: u32| ContainerHealthCheck {
        command: vec!["CMD-SHELL".into(), cmd.into()],
        interval: 5,
        timeout: 2,
        retries: 1,
        start_period,
    };
    let cases = [
        ("t-sick", check("exit 1", 0), HealthStatus::Unhealthy),
        ("t-loading", check("exit 1", 300), HealthStatus::Unknown),
        // The check sees the task's port variable, as the task does.
        (
            "t-well",
            check("test \"$GPUSHARE_PORT_HTTP\" = 40000", 0),
            HealthStatus::Healthy,
        ),
    ];
    for (task, hc, _) in &cases {
        let mut s = spec(task, vec![("main", vec!["sleep", "60"], true)]);
        s.containers[0].health_check = Some(hc.clone());
        s.containers[0]
            .env
            .insert("GPUSHARE_PORT_HTTP".into(), "40000".into());
        rt.start(&s).await.expect("start");
    }
    // Health starts UNKNOWN, before the first check.
    let listed = rt.list().await.expect("list");
    assert_eq!(listed["t-sick"].health(), Some(HealthStatus::Unknown));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let listed = rt.list().await.expect("list");
        let got: Vec<Option<HealthStatus>> =
            cases.iter().map(|(t, _, _)| listed[*t].health()).collect();
        let want: Vec<Option<HealthStatus>> = cases.iter().map(|(_, _, h)| Some(*h)).collect();
        if got == want {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after 30 s the health is {got:?}, want {want:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    for (task, _, _) in &cases {
        rt.stop(task, std::time::Duration::from_secs(1))
            .await
            .expect("stop");
    }
}
