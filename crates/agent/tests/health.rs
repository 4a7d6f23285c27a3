//! The agent's health checks in its loop, against the file store: the first-boot
//! deep diagnostic (a stand-in script for `dcgmi`, as DCGM needs a GPU) holds the
//! tasks back until it passes and runs once per host; a runtime that does not answer
//! still gets its host reported, `container_runtime` impaired; the process runtime's
//! check is its state directory taking a file.

use gpushare_testkit_engine::agent as support;

use gpushare_agent::{
    Agent, AgentConfig, AgentError, DeepCheck, ProcessRuntime, SimRuntime, StaticInventory,
};
use gpushare_core::model::{CheckKind, CheckStatus, GpuInfo, HostReport, TaskState};
use gpushare_engine::store::{FileStore, Store};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use support::*;

fn inv() -> Arc<StaticInventory> {
    Arc::new(StaticInventory(vec![GpuInfo::new(0, "l4", 23034)]))
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

/// A file store in `dir` whose host h-1 of cluster c1 has one task, t-1.
fn one_task_store(dir: &Path) -> Arc<dyn Store> {
    let web = revision("web", 1, vec![container("main", &["sleep", "60"])]);
    let st = state(
        "c1",
        &["h-1"],
        vec![web.clone()],
        vec![task("t-1", &web, "h-1", vec![])],
    );
    write_state(dir, &st);
    Arc::new(FileStore::open(dir).expect("store"))
}

async fn report(store: &Arc<dyn Store>, host: &str) -> HostReport {
    store
        .reports()
        .await
        .expect("reports")
        .into_iter()
        .find(|r| r.host_id == host)
        .expect("a report")
}

fn status(r: &HostReport, k: CheckKind) -> Option<CheckStatus> {
    r.health.check(k).map(|c| c.status)
}

#[tokio::test]
async fn the_deep_diagnostic_holds_tasks_back_until_it_passes_and_runs_once() {
    let d = tempfile::tempdir().expect("tempdir");
    let store = one_task_store(d.path());
    let runs = d.path().join("runs");
    let verdict = d.path().join("verdict");
    std::fs::write(&verdict, "1").expect("write");
    // Fails (exit 1) while `verdict` says 1; counts its runs.
    let dcgmi = script(
        d.path(),
        "dcgmi",
        &format!(
            "echo run >> {}\necho 'Diagnostic: Fail'\nexit $(cat {})",
            runs.display(),
            verdict.display()
        ),
    );
    let record = d.path().join("deep-diagnostic.json");
    let mut config = AgentConfig::new("c1", "h-1");
    config.deep_check = Some(DeepCheck {
        program: dcgmi.clone(),
        record: Some(record.clone()),
        ..DeepCheck::default()
    });
    let rt = Arc::new(SimRuntime::new());
    let mut agent = Agent::new(config.clone(), store.clone(), rt.clone(), inv());
    let s = agent.pass().await.expect("pass");
    assert!(s.started.is_empty(), "{s:?}");
    let r = report(&store, "h-1").await;
    assert_eq!(
        status(&r, CheckKind::DeepDiagnostic),
        Some(CheckStatus::Impaired)
    );
    assert_eq!(r.health.overall(), Some(CheckStatus::Impaired));
    let t = &r.task_details["t-1"];
    assert_eq!(t.state, TaskState::Pending);
    assert!(
        t.reason
            .as_deref()
            .unwrap_or_default()
            .contains("deep diagnostic is impaired"),
        "{t:?}"
    );
    // Run once per host: a second pass, and a restarted agent, do not run it again.
    agent.pass().await.expect("pass");
    let mut again = Agent::new(config.clone(), store.clone(), rt.clone(), inv());
    again.pass().await.expect("pass");
    assert_eq!(
        std::fs::read_to_string(&runs)
            .expect("runs")
            .lines()
            .count(),
        1
    );
    assert_eq!(rt.starts(), 0);

    // A host whose diagnostic passes starts its tasks.
    std::fs::remove_file(&record).expect("forget the verdict");
    std::fs::write(&verdict, "0").expect("write");
    let mut fresh = Agent::new(config, store.clone(), rt.clone(), inv());
    let s = fresh.pass().await.expect("pass");
    assert_eq!(s.started, ["t-1"]);
    let r = report(&store, "h-1").await;
    assert_eq!(status(&r, CheckKind::DeepDiagnostic), Some(CheckStatus::Ok));
    assert_eq!(
        status(&r, CheckKind::ContainerRuntime),
        Some(CheckStatus::Ok)
    );
    assert_eq!(status(&r, CheckKind::Gpus), Some(CheckStatus::Ok));
    // No MPS probe configured: no mps_daemon check.
    assert_eq!(status(&r, CheckKind::MpsDaemon), None);
    assert_eq!(r.health.overall(), Some(CheckStatus::Ok));
}

#[tokio::test]
async fn a_runtime_that_does_not_answer_is_reported_impaired_and_nothing_starts() {
    let d = tempfile::tempdir().expect("tempdir");
    let store = one_task_store(d.path());
    let rt = Arc::new(SimRuntime::new());
    rt.set_down(true);
    let mut agent = Agent::new(
        AgentConfig::new("c1", "h-1"),
        store.clone(),
        rt.clone(),
        inv(),
    );
    let e = agent.pass().await.expect_err("runtime down");
    assert!(matches!(e, AgentError::Runtime { .. }), "{e:?}");
    let r = report(&store, "h-1").await;
    assert_eq!(
        status(&r, CheckKind::ContainerRuntime),
        Some(CheckStatus::Impaired)
    );
    let since = r.health.check(CheckKind::ContainerRuntime).map(|c| c.since);
    assert_eq!(rt.starts(), 0);
    // Back: ok again, the change time moves, the task starts.
    rt.set_down(false);
    let s = agent.pass().await.expect("pass");
    assert_eq!(s.started, ["t-1"]);
    let r = report(&store, "h-1").await;
    assert_eq!(
        status(&r, CheckKind::ContainerRuntime),
        Some(CheckStatus::Ok)
    );
    assert!(r.health.check(CheckKind::ContainerRuntime).map(|c| c.since) >= since);
}

#[tokio::test]
async fn the_process_runtimes_check_is_its_state_directory_taking_a_file() {
    use gpushare_agent::Runtime;
    let d = tempfile::tempdir().expect("tempdir");
    let state_dir = d.path().join("state");
    let rt = ProcessRuntime::open(&state_dir, "c1", "h-1").expect("open");
    rt.health().await.expect("writable");
    // The directory gone (a disk unmounted under it): the probe file cannot be made,
    // root or not.
    let away = d.path().join("away");
    std::fs::rename(&state_dir, &away).expect("move away");
    let e = rt.health().await.expect_err("no state directory");
    assert!(e.to_string().contains(".health-probe"), "{e}");
    std::fs::rename(&away, &state_dir).expect("move back");
    rt.health().await.expect("writable again");
}

/// A stand-in `nvidia-cuda-mps-control` (no GPU here): answers the probe, lists one
/// server (pid 4242) and gives its state from the file `state`.
fn mps_stand_in(dir: &Path, state: &Path) -> PathBuf {
    script(
        dir,
        "nvidia-cuda-mps-control",
        &format!(
            "read -r line\ncase \"$line\" in\n  get_default_active_thread_percentage) echo 100.0 ;;\n  get_server_list) echo 4242 ;;\n  'get_server_status 4242') cat {} ;;\n  *) exit 2 ;;\nesac",
            state.display()
        ),
    )
}

/// The daemon's pipe directory, the server state file (ACTIVE) and the stand-in
/// control program reading it, in `dir`.
fn mps_setup(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let pipe = dir.join("pipe");
    std::fs::create_dir_all(&pipe).expect("pipe dir");
    let state = dir.join("server-state");
    std::fs::write(&state, "ACTIVE\n").expect("write");
    let control = mps_stand_in(dir, &state);
    (pipe, state, control)
}

#[tokio::test]
async fn a_faulted_mps_server_impairs_the_gpus_until_it_recovers() {
    let d = tempfile::tempdir().expect("tempdir");
    let store = one_task_store(d.path());
    let (pipe, state, control) = mps_setup(d.path());
    let mut config = AgentConfig::new("c1", "h-1");
    config.mps = Some(gpushare_agent::MpsProbe::new(
        control.display().to_string(),
        &pipe,
    ));
    let rt = Arc::new(SimRuntime::new());
    let mut agent = Agent::new(config, store.clone(), rt.clone(), inv());
    let gpu0 = |r: &HostReport| r.health.gpus.iter().find(|g| g.index == 0).cloned();

    agent.pass().await.expect("pass");
    let r = report(&store, "h-1").await;
    assert_eq!(status(&r, CheckKind::MpsDaemon), Some(CheckStatus::Ok));
    assert_eq!(gpu0(&r).map(|g| g.status), Some(CheckStatus::Ok), "{r:?}");

    // The server faults: the daemon still answers, the GPU is impaired (its tasks
    // move, it takes no new ones), the host is not.
    std::fs::write(&state, "FAULT\n").expect("write");
    agent.pass().await.expect("pass");
    let r = report(&store, "h-1").await;
    assert_eq!(status(&r, CheckKind::MpsDaemon), Some(CheckStatus::Ok));
    let g = gpu0(&r).expect("GPU 0");
    assert_eq!(g.status, CheckStatus::Impaired, "{g:?}");
    assert!(
        g.reason
            .as_deref()
            .is_some_and(|w| w.contains("MPS server 4242 is FAULT")),
        "{g:?}"
    );
    assert_eq!(status(&r, CheckKind::Gpus), Some(CheckStatus::Ok));

    // It recovers: the GPU is used again.
    std::fs::write(&state, "ACTIVE\n").expect("write");
    agent.pass().await.expect("pass");
    let r = report(&store, "h-1").await;
    assert_eq!(gpu0(&r).map(|g| g.status), Some(CheckStatus::Ok), "{r:?}");
}

/// The client probe (`--mps-client-probe`; a stand-in script here, no GPU): run on
/// each GPU as an MPS client; once it has failed three passes in a row on GPU 1,
/// only GPU 1 is impaired (its server refuses clients though the daemon and every
/// server state look fine), and the GPU is used again once the probe passes.
#[tokio::test]
async fn a_gpu_that_refuses_the_client_probe_is_impaired_alone() {
    let d = tempfile::tempdir().expect("tempdir");
    let store = one_task_store(d.path());
    let (pipe, _state, control) = mps_setup(d.path());
    let refuse = d.path().join("refuse");
    let client = script(
        d.path(),
        "mps-client",
        &format!(
            "[ -e {} ] && [ \"$CUDA_VISIBLE_DEVICES\" = GPU-b ] && {{ echo 'MPS client refused' >&2; exit 1; }}\nexit 0",
            refuse.display()
        ),
    );
    let mut probe = gpushare_agent::MpsProbe::new(control.display().to_string(), &pipe);
    probe.client_probe = Some(client.display().to_string());
    let mut config = AgentConfig::new("c1", "h-1");
    config.mps = Some(probe);
    let mut gpus = vec![GpuInfo::new(0, "l4", 23034), GpuInfo::new(1, "l4", 23034)];
    gpus[0].uuid = Some("GPU-a".into());
    gpus[1].uuid = Some("GPU-b".into());
    let rt = Arc::new(SimRuntime::new());
    let mut agent = Agent::new(config, store.clone(), rt, Arc::new(StaticInventory(gpus)));
    let gpu = |r: &HostReport, i: u32| {
        r.health
            .gpus
            .iter()
            .find(|g| g.index == i)
            .map(|g| (g.status, g.reason.clone().unwrap_or_default()))
    };

    agent.pass().await.expect("pass");
    let r = report(&store, "h-1").await;
    assert_eq!(gpu(&r, 1).map(|g| g.0), Some(CheckStatus::Ok), "{r:?}");

    std::fs::write(&refuse, "").expect("write");
    for _ in 1..gpushare_agent::mps::IMPAIRED_AFTER {
        agent.pass().await.expect("pass");
        let r = report(&store, "h-1").await;
        assert_eq!(
            gpu(&r, 1).map(|g| g.0),
            Some(CheckStatus::Ok),
            "one refusal is not yet a fault: {r:?}"
        );
    }
    agent.pass().await.expect("pass");
    let r = report(&store, "h-1").await;
    assert_eq!(gpu(&r, 0).map(|g| g.0), Some(CheckStatus::Ok), "{r:?}");
    let (gpu1, why) = gpu(&r, 1).expect("GPU 1");
    assert_eq!(gpu1, CheckStatus::Impaired, "{why}");
    assert!(
        why.contains("MPS client probe on GPU 1") && why.contains("MPS client refused"),
        "{why}"
    );
    assert_eq!(
        status(&r, CheckKind::MpsDaemon),
        Some(CheckStatus::Ok),
        "the daemon answers"
    );

    std::fs::remove_file(&refuse).expect("remove");
    agent.pass().await.expect("pass");
    let r = report(&store, "h-1").await;
    assert_eq!(gpu(&r, 1).map(|g| g.0), Some(CheckStatus::Ok), "{r:?}");
}
