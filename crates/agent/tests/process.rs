//! The process runtime with real processes: start, adopt after a restart (never a
//! second copy), stop (SIGTERM, grace, SIGKILL), exit codes, the environment.

mod support;

use gpushare_agent::{
    ContainerSpec, ContainerState, LaunchSpec, ProcessRuntime, Runtime, RuntimeError, TaskVerdict,
};
use std::collections::BTreeMap;
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
            })
            .collect(),
    }
}

fn pid_of(root: &Path, task: &str, container: &str) -> u32 {
    let text = std::fs::read_to_string(root.join("tasks").join(task).join(container).join("pid"))
        .expect("pid file");
    text.split_whitespace()
        .next()
        .expect("pid")
        .parse()
        .expect("number")
}

fn pgid_of(root: &Path, task: &str, container: &str) -> u32 {
    let text = std::fs::read_to_string(root.join("tasks").join(task).join(container).join("pid"))
        .expect("pid file");
    text.split_whitespace()
        .nth(1)
        .expect("pgid")
        .parse()
        .expect("number")
}

/// Live processes in a process group (zombies aside).
fn group_members(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| {
                    let f: Vec<&str> = s[s.rfind(')').expect(")") + 1..]
                        .split_whitespace()
                        .collect();
                    f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" && f[0] != "X"
                })
                .unwrap_or(false)
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s[s.rfind(')').expect(")") + 1..]
                .split_whitespace()
                .next()
                .unwrap_or("");
            state != "Z" && state != "X"
        })
        .unwrap_or(false)
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
    let env_file = root.join("tasks/t-1/env/env.txt");
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
        let dir = rt.root().join("tasks/t-missing/main/status");
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
