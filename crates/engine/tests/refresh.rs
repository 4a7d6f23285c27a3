//! Rolling host refresh end to end on the local fleet (issue 25): the reconcile pass
//! (observe, the real planner, apply with its move wait) with the file store and the
//! local fleet's in-process agents (the host agent's own loop, `SimFleet`), counting
//! running tasks from the agents' reports at every pass.

use gpushare_core::model::{Desired, HostReport, StoreState, TaskState};
use gpushare_core::plan::outdated_settings;
use gpushare_engine::agents::HostAgents;
use gpushare_engine::cloud::LocalCloud;
use gpushare_engine::reconcile::{Backends, PassOutcome, Reconciler, Run};
use gpushare_engine::store::{FileStore, Store};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const CLUSTER: &str = "refresh";

/// Six one-GPU hosts (`min_size` 6), `max_draining_percent` 34, one embedder task
/// per host; a moved task's successor is awaited at most 2 s.
fn desired(image: &str) -> Desired {
    serde_json::from_value(json!({
        "settings": { "cluster": CLUSTER, "seed": 7, "move_timeout_seconds": 2 },
        "capacity_providers": { "l4": {
            "instance_type": "g6.xlarge", "min_size": 6, "max_size": 12,
            "image": image, "max_draining_percent": 34 } },
        "gpu_instances": {},
        "task_definitions": {
            "embedder": { "container": [{ "name": "server", "image": "embedder:1.4", "cpu": 1024, "memory": 2048,
                "gpu": { "mps": { "memory": 6144 } } }] },
        },
        "services": {
            "embedder": { "task_definition": "embedder", "capacity_provider": "l4", "desired_count": 6, "distinct_host": true, "deployment": { "min_healthy_seconds": 0 } },
        },
    }))
    .expect("desired")
}

struct Env {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    cloud: Arc<LocalCloud>,
    r: Reconciler,
    clock: &'static AtomicU64,
}

impl Env {
    /// `now` reads `clock` (the reconciler takes a plain function).
    fn new(clock: &'static AtomicU64, now: fn() -> u64) -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let state_dir = dir.path().join(".gpushare");
        let store: Arc<dyn Store> = Arc::new(FileStore::open(&state_dir).expect("store"));
        let cloud = Arc::new(LocalCloud::open(&state_dir).expect("cloud"));
        let agents: Arc<dyn HostAgents> = Arc::new(gpushare_agent::SimFleet::new(cloud.clone()));
        let backends = Backends {
            store: store.clone(),
            cloud: cloud.clone(),
            local: Some(cloud.clone()),
            joins: None,
            state_dir: Some(state_dir),
            agents: Some(agents),
            consistency_window_seconds: 300,
            balancer: None,
        };
        let r = Reconciler::new(backends, "refresh test")
            .with_clock(now)
            .with_move_poll(Duration::from_millis(20));
        Env {
            _dir: dir,
            store,
            cloud,
            r,
            clock,
        }
    }

    /// One reconcile pass towards `d`, 60 s after the last (`advance` more).
    async fn pass(&self, d: &Desired, advance: u64) -> PassOutcome {
        self.clock.fetch_add(60 + advance, Ordering::SeqCst);
        self.r.pass(d, Run::default()).await.expect("pass")
    }

    async fn state(&self) -> StoreState {
        self.store.load().await.expect("load")
    }

    /// Tasks of the state that their host's agent reports running.
    async fn reported_running(&self) -> usize {
        let st = self.state().await;
        let reports: Vec<HostReport> = self.store.reports().await.expect("reports");
        st.tasks
            .values()
            .filter(|t| {
                reports
                    .iter()
                    .any(|r| r.host_id == t.host && r.tasks.get(&t.id) == Some(&TaskState::Running))
            })
            .count()
    }

    async fn outdated(&self, d: &Desired) -> Vec<String> {
        let pool = &d.capacity_providers["l4"];
        self.state()
            .await
            .hosts
            .values()
            .filter(|h| !outdated_settings(h, pool).is_empty())
            .map(|h| h.id.clone())
            .collect()
    }

    /// Converge on `d` from nothing: six hosts, six tasks reported running.
    async fn converge(&self, d: &Desired) {
        for _ in 0..4 {
            if !self.pass(d, 0).await.changed() {
                break;
            }
        }
        self.r.run_agents().await.expect("agents");
        assert_eq!(self.state().await.hosts.len(), 6);
        assert_eq!(self.reported_running().await, 6);
    }
}

static CLOCK_ROLL: AtomicU64 = AtomicU64::new(1_000_000);
static CLOCK_BAD: AtomicU64 = AtomicU64::new(1_000_000);

/// An image change on a 6-host pool with `max_draining_percent = 34`: three passes
/// of two hosts each; after every pass the agents report all six tasks running (a
/// move stops the old task only once its successor runs); the last leaves no host
/// outdated, and the next plans nothing. Reverting rolls back the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_change_rolls_six_hosts_two_at_a_time_and_every_task_keeps_running() {
    let env = Env::new(&CLOCK_ROLL, || CLOCK_ROLL.load(Ordering::SeqCst));
    env.converge(&desired("ami-a")).await;
    let d = desired("ami-b");
    let before: Vec<String> = env.state().await.hosts.keys().cloned().collect();
    for pass in 1..=3usize {
        let out = env.pass(&d, 0).await;
        let report = out.applied.as_ref().expect("applied");
        assert_eq!(out.plan.launches.len(), 2, "pass {pass}");
        assert_eq!(out.plan.moves.len(), 2, "pass {pass}");
        assert_eq!(out.plan.retirements.len(), 2, "pass {pass}");
        assert!(
            out.plan
                .retirements
                .iter()
                .all(|r| before.contains(&r.host_id)),
            "pass {pass}: only old hosts retire"
        );
        assert!(
            report.unconfirmed.is_empty() && report.moves_held.is_empty(),
            "{report:?}"
        );
        for l in &out.plan.launches {
            assert_eq!(l.host.image_id.as_deref(), Some("ami-b"));
        }
        env.r.run_agents().await.expect("agents");
        assert_eq!(env.reported_running().await, 6, "pass {pass}");
        assert_eq!(env.state().await.hosts.len(), 6, "pass {pass}");
        assert_eq!(env.outdated(&d).await.len(), 6 - 2 * pass, "pass {pass}");
        // `show` lists the same hosts, from the state alone (the pool as applied).
        let state = env.state().await;
        let listed = gpushare_core::plan::outdated_hosts(&state);
        assert_eq!(listed.len(), 6 - 2 * pass, "pass {pass}");
        assert!(
            listed
                .iter()
                .all(|(_, o)| o.changes_text() == "image ami-a -> ami-b"),
            "{listed:?}"
        );
        let json = gpushare_core::render::show_json(&state);
        assert_eq!(
            json.get("outdated_hosts")
                .and_then(|v| v.as_array())
                .map_or(0, Vec::len),
            6 - 2 * pass,
            "{json:#}"
        );
    }
    let out = env.pass(&d, 0).await;
    assert!(!out.changed(), "{:?}", out.plan);
    // Reverting the image rolls back the same way.
    let back = desired("ami-a");
    for pass in 1..=3usize {
        let out = env.pass(&back, 0).await;
        assert_eq!(out.plan.refreshes[0].now.len(), 2, "revert pass {pass}");
        env.r.run_agents().await.expect("agents");
        assert_eq!(env.reported_running().await, 6, "revert pass {pass}");
    }
    assert!(env.outdated(&back).await.is_empty());
    assert!(!env.pass(&back, 0).await.changed());
}

/// A new image whose hosts never boot (their agents never report): the first batch's
/// successors never run, so the moves are held (the old tasks keep running, the old
/// hosts are kept); the refresh waits while the new hosts boot and halts after their
/// boot grace, with every old host intact and every task running. Reverting the
/// image retires the failed hosts and leaves the old fleet as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_image_that_never_boots_stops_after_the_first_batch_with_the_old_hosts_intact() {
    let env = Env::new(&CLOCK_BAD, || CLOCK_BAD.load(Ordering::SeqCst));
    env.converge(&desired("ami-a")).await;
    let old: Vec<String> = env.state().await.hosts.keys().cloned().collect();
    env.cloud.set_image_dead("ami-bad", true).expect("fault");
    let d = desired("ami-bad");

    let out = env.pass(&d, 0).await;
    let report = out.applied.as_ref().expect("applied");
    assert_eq!(out.plan.launches.len(), 2);
    assert_eq!(report.moves_held.len(), 2, "{report:?}");
    assert_eq!(report.kept_hosts.len(), 2, "{report:?}");
    env.r.run_agents().await.expect("agents");
    let st = env.state().await;
    for id in &old {
        assert!(st.hosts.contains_key(id), "old host {id} kept");
    }
    assert_eq!(st.tasks.len(), 6);
    assert!(st.tasks.values().all(|t| old.contains(&t.host)));
    assert_eq!(env.reported_running().await, 6);

    // Within the boot grace: the refresh waits.
    let out = env.pass(&d, 0).await;
    assert!(!out.changed(), "{:?}", out.plan);
    assert!(out.plan.refreshes[0].waiting.is_some());
    // After it: halted, nothing drained or launched, the old hosts kept.
    let out = env.pass(&d, 600).await;
    assert!(!out.changed(), "{:?}", out.plan);
    let halted = out.plan.refreshes[0].halted.clone().expect("halted");
    assert!(
        halted.contains("no agent report since its launch"),
        "{halted}"
    );
    env.r.run_agents().await.expect("agents");
    assert_eq!(env.reported_running().await, 6);
    assert_eq!(env.state().await.hosts.len(), 8);

    // Reverting: the two failed hosts go; the six old ones stay, tasks untouched.
    let back = desired("ami-a");
    let out = env.pass(&back, 0).await;
    assert_eq!(out.plan.retirements.len(), 2, "{:?}", out.plan);
    assert!(out.plan.launches.is_empty() && out.plan.moves.is_empty());
    env.r.run_agents().await.expect("agents");
    let st = env.state().await;
    let mut ids: Vec<String> = st.hosts.keys().cloned().collect();
    ids.sort();
    let mut want = old.clone();
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(env.reported_running().await, 6);
    assert!(!env.pass(&back, 0).await.changed());
}
