//! MPS health against a stand-in `nvidia-cuda-mps-control` (a shell script this
//! test writes: there is no GPU and no MPS daemon on the test machines). The
//! script checks the protocol (pipe directory in the environment, the command on
//! stdin) and answers as the test says: ok, error, or hang past the timeout.

use gpushare_testkit_engine::agent as support;

use gpushare_agent::{
    Agent, AgentConfig, MpsGate, MpsHealthTracker, MpsProbe, ProbeError, SimRuntime,
    StaticInventory,
};
use gpushare_core::model::{GpuInfo, MpsHealth, TaskState};
use gpushare_engine::store::{FileStore, Store};
use std::sync::Arc;
use std::time::Duration;
use support::*;

fn probe(s: &StandInMps) -> MpsProbe {
    MpsProbe::new(s.program.display().to_string(), &s.pipe_dir)
}

#[tokio::test]
async fn probe_reads_the_answer_and_reports_errors_and_hangs() {
    let d = tempfile::tempdir().expect("tempdir");
    let s = StandInMps::new(d.path());
    let p = probe(&s);
    assert_eq!(p.probe().await.expect("ok answer"), 100.0);

    s.set("error");
    let e = p.probe().await.expect_err("error answer");
    assert!(
        matches!(e, ProbeError::Failed { code: Some(1), .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("Cannot find MPS control daemon"),
        "{e}"
    );

    // The default 3 s timeout, as in the ECS agent: the hung program is killed.
    s.set("hang");
    assert_eq!(p.timeout, Duration::from_secs(3));
    let e = p.probe().await.expect_err("hang");
    assert!(matches!(e, ProbeError::Timeout { .. }), "{e:?}");

    // The program must get the pipe directory: a probe pointed elsewhere fails.
    s.set("ok");
    let other = d.path().join("other-pipe");
    std::fs::create_dir_all(&other).expect("mkdir");
    let wrong = MpsProbe::new(s.program.display().to_string(), &other);
    let e = wrong.probe().await.expect_err("wrong pipe dir");
    assert!(e.to_string().contains("wrong pipe directory"), "{e}");
}

#[tokio::test]
async fn a_missing_pipe_directory_or_program_fails_without_running_it() {
    let d = tempfile::tempdir().expect("tempdir");
    let s = StandInMps::new(d.path());
    let p = MpsProbe::new(
        s.program.display().to_string(),
        d.path().join("no-such-pipe"),
    );
    let e = p.probe().await.expect_err("no pipe dir");
    assert!(matches!(e, ProbeError::PipeDir { .. }), "{e:?}");
    assert_eq!(
        s.calls(),
        0,
        "the program must not run when the pipe directory is missing"
    );

    let p = MpsProbe::new(
        d.path().join("no-such-program").display().to_string(),
        &s.pipe_dir,
    );
    let e = p.probe().await.expect_err("no program");
    assert!(matches!(e, ProbeError::Spawn { .. }), "{e:?}");
}

#[tokio::test]
async fn three_failures_in_a_row_impair_and_one_success_heals() {
    let d = tempfile::tempdir().expect("tempdir");
    let s = StandInMps::new(d.path());
    let mut p = probe(&s);
    p.timeout = Duration::from_millis(300);
    let mut t = MpsHealthTracker::new();
    assert_eq!(t.health(), MpsHealth::Unknown);
    t.record(&p.probe().await);
    assert_eq!(t.health(), MpsHealth::Healthy);

    s.set("error");
    t.record(&p.probe().await);
    t.record(&p.probe().await);
    assert_eq!(
        t.health(),
        MpsHealth::Healthy,
        "two failures are not enough"
    );
    s.set("hang");
    t.record(&p.probe().await);
    assert_eq!(t.health(), MpsHealth::Impaired);
    assert!(t
        .last_error()
        .expect("error kept")
        .contains("did not answer"));

    s.set("ok");
    t.record(&p.probe().await);
    assert_eq!(t.health(), MpsHealth::Healthy);
    assert_eq!(t.last_error(), None);

    // A success in between resets the count.
    s.set("error");
    t.record(&p.probe().await);
    t.record(&p.probe().await);
    s.set("ok");
    t.record(&p.probe().await);
    s.set("error");
    t.record(&p.probe().await);
    t.record(&p.probe().await);
    assert_eq!(t.health(), MpsHealth::Healthy);
}

#[tokio::test]
async fn gate_probes_up_to_three_times() {
    let d = tempfile::tempdir().expect("tempdir");
    let s = StandInMps::new(d.path());
    let p = probe(&s);
    let gate = MpsGate {
        attempts: 3,
        within: Duration::from_millis(600),
    };
    let mut t = MpsHealthTracker::new();
    s.set("error");
    let before = s.calls();
    gate.check(&p, &mut t).await.expect_err("daemon down");
    assert_eq!(s.calls() - before, 3);
    assert_eq!(t.health(), MpsHealth::Impaired);
    s.set("ok");
    gate.check(&p, &mut t).await.expect("daemon up");
    assert_eq!(t.health(), MpsHealth::Healthy);
}

/// The agent refuses to start an MPS task while the daemon does not answer (a
/// client started without it would escape its memory limit), reports why, and
/// starts it once the daemon answers. A CPU-only task is not held back.
#[tokio::test]
async fn the_agent_gates_mps_tasks_on_the_daemon() {
    let d = tempfile::tempdir().expect("tempdir");
    let s = StandInMps::new(&d.path().join("mps"));
    let store_dir = d.path().join("store");
    let gpu_rev = revision(
        "infer",
        1,
        vec![{
            let mut c = container("main", &["sleep", "60"]);
            c.gpu = mps(2048, Some(40));
            c
        }],
    );
    let cpu_rev = revision("cpu", 1, vec![container("main", &["sleep", "60"])]);
    let st = state(
        "c1",
        &["h-1"],
        vec![gpu_rev.clone(), cpu_rev.clone()],
        vec![
            task("t-gpu", &gpu_rev, "h-1", vec![0]),
            task("t-cpu", &cpu_rev, "h-1", vec![]),
        ],
    );
    write_state(&store_dir, &st);
    let store: Arc<dyn Store> = Arc::new(FileStore::open(&store_dir).expect("store"));
    let runtime = Arc::new(SimRuntime::new());
    let mut cfg = AgentConfig::new("c1", "h-1");
    let mut p = probe(&s);
    p.timeout = Duration::from_millis(300);
    cfg.mps = Some(p);
    cfg.gate = MpsGate {
        attempts: 3,
        within: Duration::from_millis(600),
    };
    let inv = StaticInventory(vec![GpuInfo {
        uuid: Some("GPU-0000".into()),
        ..GpuInfo::new(0, "l4", 23034)
    }]);
    let mut agent = Agent::new(cfg, store.clone(), runtime.clone(), Arc::new(inv));

    s.set("error");
    let sum = agent.pass().await.expect("pass");
    assert_eq!(sum.started, vec!["t-cpu".to_string()]);
    let st = agent.task_status("t-gpu").expect("reported");
    assert_eq!(st.state, TaskState::Pending);
    let reason = st.reason.clone().expect("a reason");
    assert!(reason.contains("MPS daemon"), "{reason}");
    let reports = store.reports().await.expect("reports");
    assert_eq!(reports.len(), 1);
    let r = &reports[0];
    assert_eq!(
        r.mps_health,
        MpsHealth::Impaired,
        "1 pass probe + 3 gate probes failed"
    );
    assert!(
        r.mps_error
            .as_deref()
            .unwrap_or("")
            .contains("Cannot find MPS"),
        "{r:?}"
    );
    assert_eq!(r.task_details["t-gpu"].state, TaskState::Pending);
    assert_eq!(r.tasks["t-cpu"], TaskState::Running);
    assert_eq!(r.gpus[0].uuid.as_deref(), Some("GPU-0000"));
    assert_eq!(r.agent_version, gpushare_agent::AGENT_VERSION);

    s.set("ok");
    let sum = agent.pass().await.expect("pass");
    assert_eq!(sum.started, vec!["t-gpu".to_string()]);
    assert_eq!(agent.mps_health(), MpsHealth::Healthy);
    let r = &store.reports().await.expect("reports")[0];
    assert_eq!(r.mps_error, None);
    assert_eq!(r.tasks["t-gpu"], TaskState::Running);
    assert_eq!(runtime.starts(), 2);
}
