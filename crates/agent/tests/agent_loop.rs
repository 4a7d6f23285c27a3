//! The agent loop against the file store, with the simulated and the process
//! runtimes: convergence, reports, bad input, an unreachable store, failed tasks
//! restarted with backoff.

use gpushare_testkit_engine::agent as support;

use async_trait::async_trait;
use gpushare_agent::{
    Agent, AgentConfig, AgentError, ProcessRuntime, Runtime, SimRuntime, StaticInventory,
};
use gpushare_core::model::{GpuInfo, HostReport, MpsHealth, StoreState, TaskState};
use gpushare_engine::store::{
    FileStore, Journal, LockGuard, Record, StatusRecord, Store, StoreError,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;

fn inv() -> Arc<StaticInventory> {
    Arc::new(StaticInventory(vec![GpuInfo {
        uuid: Some("GPU-aaaa".into()),
        ..GpuInfo::new(0, "l4", 23034)
    }]))
}

fn config(host: &str) -> AgentConfig {
    let mut c = AgentConfig::new("c1", host);
    c.stop_grace = Duration::from_secs(1);
    c.restart_backoff = Duration::from_millis(200);
    c.restart_backoff_max = Duration::from_secs(2);
    c
}

/// A store that can be switched off (unreachable), wrapping a file store.
struct Flaky {
    inner: FileStore,
    down: AtomicBool,
}

impl Flaky {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unreachable {
                location: "flaky://".into(),
                source: "connection refused".into(),
            })
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Store for Flaky {
    fn location(&self) -> String {
        "flaky://".into()
    }
    async fn load(&self) -> Result<StoreState, StoreError> {
        self.check()?;
        self.inner.load().await
    }
    async fn commit(&self, e: u64, s: &StoreState) -> Result<(), StoreError> {
        self.check()?;
        self.inner.commit(e, s).await
    }
    async fn adopt_identity(&self, id: &str) -> Result<(), StoreError> {
        self.check()?;
        self.inner.adopt_identity(id).await
    }
    async fn lock(&self, h: &str, t: Duration) -> Result<Box<dyn LockGuard>, StoreError> {
        self.inner.lock(h, t).await
    }
    async fn read_journal(&self) -> Result<Option<Journal>, StoreError> {
        self.inner.read_journal().await
    }
    async fn write_journal(&self, j: &Journal) -> Result<(), StoreError> {
        self.inner.write_journal(j).await
    }
    async fn clear_journal(&self) -> Result<(), StoreError> {
        self.inner.clear_journal().await
    }
    async fn get_record(&self, name: &str) -> Result<Option<Record>, StoreError> {
        self.inner.get_record(name).await
    }
    async fn put_record(&self, name: &str, value: &str, expected: u64) -> Result<u64, StoreError> {
        self.inner.put_record(name, value, expected).await
    }
    async fn put_report(&self, r: &HostReport) -> Result<(), StoreError> {
        self.check()?;
        self.inner.put_report(r).await
    }
    async fn reports(&self) -> Result<Vec<HostReport>, StoreError> {
        self.check()?;
        self.inner.reports().await
    }
    async fn put_status(&self, s: &StatusRecord) -> Result<(), StoreError> {
        self.check()?;
        self.inner.put_status(s).await
    }
    async fn status(&self) -> Result<Option<StatusRecord>, StoreError> {
        self.check()?;
        self.inner.status().await
    }
}

#[tokio::test]
async fn converges_reports_and_stops_what_is_no_longer_assigned() {
    let d = tempfile::tempdir().expect("tempdir");
    let web = revision("web", 1, vec![container("main", &["sleep", "60"])]);
    let mut st = state(
        "c1",
        &["h-1", "h-2"],
        vec![web.clone()],
        vec![
            task("t-1", &web, "h-1", vec![]),
            task("t-2", &web, "h-1", vec![]),
            task("t-3", &web, "h-2", vec![]),
        ],
    );
    write_state(d.path(), &st);
    let store: Arc<dyn Store> = Arc::new(FileStore::open(d.path()).expect("store"));
    let rt = Arc::new(SimRuntime::new());
    let mut agent = Agent::new(config("h-1"), store.clone(), rt.clone(), inv());
    let s = agent.pass().await.expect("pass");
    assert_eq!(s.started, vec!["t-1".to_string(), "t-2".into()]);
    let listed = rt.list().await.expect("list");
    assert_eq!(
        listed.keys().cloned().collect::<Vec<_>>(),
        vec!["t-1", "t-2"]
    );

    // Level-triggered: a second pass changes nothing.
    let s = agent.pass().await.expect("pass");
    assert!(s.started.is_empty() && s.stopped.is_empty());
    assert_eq!(s.running, 2);
    assert_eq!(rt.starts(), 2);

    let r = store.reports().await.expect("reports");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].host_id, "h-1");
    assert_eq!(r[0].mps_health, MpsHealth::Disabled);
    assert_eq!(
        r[0].tasks.len(),
        2,
        "only this host's tasks: {:?}",
        r[0].tasks
    );
    assert!(r[0].tasks.values().all(|s| *s == TaskState::Running));
    assert!(r[0].at > 0);

    // t-1 is stopping, t-2 moved away: both stop here.
    st.serial += 1;
    st.tasks.get_mut("t-1").expect("t-1").state = TaskState::Stopping;
    st.tasks.get_mut("t-2").expect("t-2").host = "h-2".into();
    write_state(d.path(), &st);
    let s = agent.pass().await.expect("pass");
    assert_eq!(s.stopped, vec!["t-1".to_string(), "t-2".into()]);
    assert!(rt.list().await.expect("list").is_empty());
    let r = &store.reports().await.expect("reports")[0];
    assert_eq!(r.tasks.get("t-1"), Some(&TaskState::Stopped));
    assert_eq!(r.tasks.get("t-2"), None, "no longer this host's");
}

#[tokio::test]
async fn unknown_host_malformed_assignment_and_unreachable_store_start_nothing() {
    let d = tempfile::tempdir().expect("tempdir");
    let web = revision("web", 1, vec![container("main", &["sleep", "60"])]);
    let mut bad = task("t-bad", &web, "h-1", vec![]);
    bad.revision = 7;
    let mut st = state(
        "c1",
        &["h-1"],
        vec![web.clone()],
        vec![task("t-ok", &web, "h-1", vec![]), bad],
    );
    write_state(d.path(), &st);
    let flaky = Arc::new(Flaky {
        inner: FileStore::open(d.path()).expect("store"),
        down: AtomicBool::new(false),
    });
    let store: Arc<dyn Store> = flaky.clone();

    // A host id the store does not know: a clear error, nothing started.
    let rt = Arc::new(SimRuntime::new());
    let mut stranger = Agent::new(config("h-nope"), store.clone(), rt.clone(), inv());
    let e = stranger.pass().await.expect_err("unknown host");
    assert!(matches!(e, AgentError::UnknownHost { .. }), "{e:?}");
    assert!(
        e.to_string().contains("h-nope") && e.to_string().contains("h-1"),
        "{e}"
    );
    assert_eq!(rt.starts(), 0);

    // The wrong cluster: refused too.
    let mut other = Agent::new(
        AgentConfig::new("c2", "h-1"),
        store.clone(),
        rt.clone(),
        inv(),
    );
    let e = other.pass().await.expect_err("wrong cluster");
    assert!(matches!(e, AgentError::ClusterMismatch { .. }), "{e:?}");
    assert_eq!(rt.starts(), 0);

    // A malformed assignment fails that task with a reason; the others start.
    let mut agent = Agent::new(config("h-1"), store.clone(), rt.clone(), inv());
    let s = agent.pass().await.expect("pass");
    assert_eq!(s.started, vec!["t-ok".to_string()]);
    let r = &store.reports().await.expect("reports")[0];
    let bad = &r.task_details["t-bad"];
    assert_eq!(bad.state, TaskState::Failed);
    assert!(
        bad.reason.as_deref().unwrap_or("").contains("revision 7"),
        "{bad:?}"
    );

    // The store goes away: the pass fails, the running task is kept.
    flaky.down.store(true, Ordering::SeqCst);
    st.serial += 1;
    st.tasks.clear();
    write_state(d.path(), &st);
    let e = agent.pass().await.expect_err("store down");
    assert!(matches!(e, AgentError::Store { .. }), "{e:?}");
    assert_eq!(
        rt.list().await.expect("list").len(),
        1,
        "t-ok keeps running"
    );
    // It comes back (with t-ok unassigned): the agent catches up.
    flaky.down.store(false, Ordering::SeqCst);
    let s = agent.pass().await.expect("pass");
    assert_eq!(s.stopped, vec!["t-ok".to_string()]);
}

#[tokio::test]
async fn a_failed_task_is_reported_with_its_exit_code_and_restarted_with_backoff() {
    let d = tempfile::tempdir().expect("tempdir");
    let state_dir = d.path().join("agent");
    let store_dir = d.path().join("store");
    let job = revision(
        "job",
        1,
        vec![container(
            "main",
            &[
                "sh",
                "-c",
                "echo loading model; echo 'no weights at /models' >&2; sleep 0.2; exit 1",
            ],
        )],
    );
    write_state(
        &store_dir,
        &state(
            "c1",
            &["h-1"],
            vec![job.clone()],
            vec![task("t-job", &job, "h-1", vec![])],
        ),
    );
    let store: Arc<dyn Store> = Arc::new(FileStore::open(&store_dir).expect("store"));
    let rt = Arc::new(ProcessRuntime::open(&state_dir, "c1", "h-1").expect("runtime"));
    let mut agent = Agent::new(config("h-1"), store.clone(), rt, inv());

    agent.pass().await.expect("first start");
    // Passes until the exit is seen.
    let mut failed = None;
    for _ in 0..100 {
        agent.pass().await.expect("pass");
        let r = store.reports().await.expect("reports").remove(0);
        let t = r.task_details["t-job"].clone();
        if t.state == TaskState::Failed {
            failed = Some(t);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failed = failed.expect("the task fails");
    assert_eq!(failed.exit_code, Some(1));
    assert!(
        failed
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("exited with code 1"),
        "{failed:?}"
    );
    // Its last output is kept with its status (for `show`): stdout, then stderr.
    assert_eq!(
        failed.last_output.as_deref(),
        Some("loading model\nno weights at /models\n"),
        "{failed:?}"
    );
    // Right after the failure the backoff holds the restart back (not a hot loop).
    let s = agent.pass().await.expect("pass");
    assert!(s.started.is_empty(), "restarted during the backoff: {s:?}");
    // After the backoff it is started again, and the restart is counted.
    let mut restarted = false;
    for _ in 0..100 {
        let s = agent.pass().await.expect("pass");
        if !s.started.is_empty() {
            restarted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(restarted, "restarted after the backoff");
    let r = store.reports().await.expect("reports").remove(0);
    assert_eq!(r.task_details["t-job"].restarts, 1);
}

/// A runtime whose starts all fail as a missing image does, counting the attempts.
#[derive(Default)]
struct NoImage {
    attempts: std::sync::atomic::AtomicU32,
}

#[async_trait]
impl Runtime for NoImage {
    fn name(&self) -> &'static str {
        "no-image"
    }
    async fn list(
        &self,
    ) -> Result<
        std::collections::BTreeMap<String, gpushare_agent::ObservedTask>,
        gpushare_agent::RuntimeError,
    > {
        Ok(Default::default())
    }
    async fn start(
        &self,
        spec: &gpushare_agent::LaunchSpec,
    ) -> Result<(), gpushare_agent::RuntimeError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        Err(gpushare_agent::RuntimeError::ImageMissing {
            task: spec.task_id.clone(),
            container: "main".into(),
            image: "ghost:1".into(),
            pull: Some("registry unreachable".into()),
        })
    }
    async fn stop(&self, _: &str, _: Duration) -> Result<(), gpushare_agent::RuntimeError> {
        Ok(())
    }
}

#[tokio::test]
async fn an_unrunnable_image_is_reported_and_retried_only_after_a_backoff() {
    let d = tempfile::tempdir().expect("tempdir");
    let job = revision("ghost", 1, vec![container("main", &["true"])]);
    write_state(
        d.path(),
        &state(
            "c1",
            &["h-1"],
            vec![job.clone()],
            vec![task("t-x", &job, "h-1", vec![])],
        ),
    );
    let store: Arc<dyn Store> = Arc::new(FileStore::open(d.path()).expect("store"));
    let rt = Arc::new(NoImage::default());
    let mut cfg = config("h-1");
    cfg.restart_backoff = Duration::from_secs(3600);
    let mut agent = Agent::new(cfg, store.clone(), rt.clone(), inv());
    for _ in 0..5 {
        agent.pass().await.expect("pass");
    }
    let r = store.reports().await.expect("reports").remove(0);
    let t = &r.task_details["t-x"];
    assert_eq!(t.state, TaskState::Failed);
    let reason = t.reason.as_deref().unwrap_or("");
    assert!(
        reason.contains("ghost:1") && reason.contains("not on this host"),
        "{reason}"
    );
    // Five passes, one attempt: the backoff holds the rest back.
    assert_eq!(rt.attempts.load(Ordering::SeqCst), 1);
}
