//! observe -> plan (the real planner) -> apply -> agents, on the file store and the
//! local fleet: converge, re-plan to nothing, scale by the delta, replace a host
//! whose MPS daemon is down, survive a crash mid-apply, destroy.

mod common;

use gpushare_core::model::{Desired, HostState, Live, MpsHealth, StoreState};
use gpushare_core::plan::{self, Options, Plan};
use gpushare_engine::apply::{
    self, ApplyContext, ApplyError, ApplyReport, Failpoint, FailpointWhen, MoveWait,
};
use gpushare_engine::cloud::{Cloud, CloudError, Fault, LaunchRequest, LocalCloud};
use gpushare_engine::observe::observe;
use gpushare_engine::store::{FileStore, Store};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const CLUSTER: &str = "pipeline";

fn desired(embedders: u32, rerankers: u32) -> Desired {
    let mps =
        |memory: u64, pct: u8| json!({ "mps": { "memory": memory, "max_compute_percent": pct } });
    serde_json::from_value(json!({
        "settings": { "cluster": CLUSTER, "seed": 7 },
        "capacity_providers": { "l4": { "instance_type": "g6.12xlarge", "min_size": 0, "max_size": 4 } },
        "gpu_instances": {},
        "task_definitions": {
            "embedder": { "container": [{ "name": "server", "image": "embedder:1.4", "cpu": 2048, "memory": 4096, "gpu": mps(4096, 20) }] },
            "reranker": { "container": [{ "name": "server", "image": "reranker:2.0", "cpu": 2048, "memory": 8192, "gpu": mps(6144, 25) }] },
        },
        "services": {
            "embedder": { "task_definition": "embedder", "capacity_provider": "l4", "desired_count": embedders },
            "reranker": { "task_definition": "reranker", "capacity_provider": "l4", "desired_count": rerankers },
        },
    }))
    .expect("desired")
}

struct Env {
    _dir: tempfile::TempDir,
    store: FileStore,
    cloud: LocalCloud,
    now: u64,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let state_dir = dir.path().join(".gpushare");
        let store = FileStore::open(&state_dir).expect("store");
        let cloud = LocalCloud::open(&state_dir).expect("cloud");
        Env {
            _dir: dir,
            store,
            cloud,
            now: 1_000,
        }
    }

    /// What `gpushare plan` does: agents report, observe, gather the cloud's launch
    /// facts, plan.
    async fn plan(&mut self, d: &Desired, options: &Options) -> (Live, Plan) {
        self.now += 60;
        common::agents_round(&self.store, &self.cloud, self.now).await;
        let mut live = observe(&self.store, &self.cloud, CLUSTER, self.now)
            .await
            .expect("observe");
        live.facts = self
            .cloud
            .gather(&d.capacity_providers)
            .await
            .expect("gather");
        let p = plan::plan(d, &live, options).expect("plan");
        (live, p)
    }

    fn ctx(&self) -> ApplyContext<'_> {
        let mut ctx = ApplyContext::new(&self.store, &self.cloud);
        ctx.lock_timeout = Duration::from_secs(2);
        ctx
    }

    async fn apply(&mut self, d: &Desired, options: &Options) -> (Plan, ApplyReport) {
        let (_, p) = self.plan(d, options).await;
        let report = apply::apply(&p, &self.ctx()).await.expect("apply");
        (p, report)
    }

    /// What the reconcile loop does after an apply: the agents start the placed
    /// tasks, and a pass once they are healthy records the services' deployments
    /// COMPLETED (and changes nothing else).
    async fn settle(&mut self, d: &Desired) {
        self.plan(d, &opts()).await;
        let (p, _) = self.apply(d, &opts()).await;
        let completed = p
            .deployments
            .iter()
            .all(|u| u.record.state == gpushare_core::model::DeploymentState::Completed);
        assert!(
            completed && !p.deployments.is_empty() && p.starts.is_empty() && p.stops.is_empty(),
            "{p:?}"
        );
    }

    async fn state(&self) -> StoreState {
        self.store.load().await.expect("load")
    }

    /// Host ids of the instances the fleet still runs (checked free of duplicates).
    fn running_instances(&self) -> BTreeSet<String> {
        let all = self.cloud.instances().expect("fleet");
        let running: Vec<String> = all
            .into_iter()
            .filter(|i| i.state != HostState::Terminated)
            .map(|i| i.host_id)
            .collect();
        let unique: BTreeSet<String> = running.iter().cloned().collect();
        assert_eq!(
            unique.len(),
            running.len(),
            "a host runs twice: {running:?}"
        );
        unique
    }

    /// The store and the fleet agree: every stored host runs, nothing else runs.
    async fn assert_consistent(&self) {
        let st = self.state().await;
        let stored: BTreeSet<String> = st.hosts.keys().cloned().collect();
        assert_eq!(
            stored,
            self.running_instances(),
            "store hosts vs running instances"
        );
        for t in st.tasks.values() {
            assert!(
                st.hosts.contains_key(&t.host),
                "task {} on unknown host {}",
                t.id,
                t.host
            );
        }
    }
}

fn count(st: &StoreState, service: &str) -> usize {
    st.tasks.values().filter(|t| t.service == service).count()
}

fn opts() -> Options {
    Options {
        heartbeat_timeout_seconds: 300,
        ..Options::default()
    }
}

#[tokio::test]
async fn converges_then_plans_nothing_then_scales_by_the_delta() {
    let mut env = Env::new();
    let d = desired(6, 2);
    let (p, report) = env.apply(&d, &opts()).await;
    assert!(!p.launches.is_empty() && p.starts.len() == 8, "{p:?}");
    assert_eq!(report.changed_steps, p.steps().len());
    env.assert_consistent().await;
    let st = env.state().await;
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (6, 2));

    let (live, again) = env.plan(&d, &opts()).await;
    assert!(again.is_empty(), "second plan should be empty: {again:?}");
    common::assert_all_running_and_healthy(&live);

    let d9 = desired(9, 2);
    let (p, _) = env.apply(&d9, &opts()).await;
    assert_eq!(
        (
            p.starts.len(),
            p.stops.len(),
            p.moves.len(),
            p.retirements.len()
        ),
        (3, 0, 0, 0)
    );
    let st = env.state().await;
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (9, 2));
    env.assert_consistent().await;
    assert!(env.plan(&d9, &opts()).await.1.is_empty());
}

#[tokio::test]
async fn a_host_whose_mps_daemon_is_down_is_replaced_start_before_stop() {
    let mut env = Env::new();
    let d = desired(6, 2);
    env.apply(&d, &opts()).await;
    env.settle(&d).await;
    let before = env.state().await;
    let sick = before.tasks.values().next().expect("a task").host.clone();
    let on_sick = before.tasks.values().filter(|t| t.host == sick).count();
    env.cloud
        .inject_fault(CLUSTER, &sick, Fault::MpsDown)
        .expect("fault");

    // The host's agent probes once a round: two failures are not yet impaired.
    for failures in 1..=2 {
        let (live, p) = env.plan(&d, &opts()).await;
        let h = &live.state.hosts[&sick];
        assert_eq!(
            h.mps_health,
            MpsHealth::Healthy,
            "after {failures} failures"
        );
        assert!(p.is_empty(), "after {failures} failures: {p:?}");
    }
    let (live, p) = env.plan(&d, &opts()).await;
    assert_eq!(live.state.hosts[&sick].mps_health, MpsHealth::Impaired);
    assert_eq!(
        p.moves.len(),
        on_sick,
        "every task on the sick host moves: {p:?}"
    );
    assert!(p.moves.iter().all(|m| m.to.host != sick));
    assert_eq!(
        p.retirements
            .iter()
            .map(|r| r.host_id.as_str())
            .collect::<Vec<_>>(),
        [sick.as_str()]
    );
    apply::apply(&p, &env.ctx()).await.expect("apply");

    let st = env.state().await;
    assert!(!st.hosts.contains_key(&sick));
    assert!(st.tasks.values().all(|t| t.host != sick));
    assert_eq!(
        (count(&st, "embedder"), count(&st, "reranker")),
        (6, 2),
        "no task lost"
    );
    env.assert_consistent().await;
    let (live, again) = env.plan(&d, &opts()).await;
    assert!(again.is_empty(), "{again:?}");
    common::assert_all_running_and_healthy(&live);
}

/// A crash in the middle of a planner-made apply, at each point of the launch step
/// and of a start step; the CLI's order (resume, observe, plan, apply) then finishes
/// the job and the next plan is empty.
#[tokio::test]
async fn a_crash_mid_apply_is_finished_by_the_next_run() {
    for when in [
        FailpointWhen::BeforeCommit,
        FailpointWhen::AfterCommit,
        FailpointWhen::AfterStep,
    ] {
        for at_launch in [true, false] {
            let mut env = Env::new();
            let d = desired(6, 2);
            let (_, p) = env.plan(&d, &opts()).await;
            let steps = p.steps();
            let step = if at_launch {
                steps
                    .iter()
                    .position(|s| matches!(s, plan::Step::Launch(_)))
                    .expect("a launch")
                    + 1
            } else {
                steps.len() - 1
            };
            let mut ctx = env.ctx();
            ctx.hooks.failpoint = Some(Failpoint { when, step });
            match apply::apply(&p, &ctx).await {
                Err(ApplyError::Failpoint { .. }) => {}
                other => panic!("{when:?}:{step}: expected the failpoint, got {other:?}"),
            }
            assert!(apply::resume(&env.ctx()).await.expect("resume").is_some());
            env.assert_consistent().await;
            let (_, p) = env.plan(&d, &opts()).await;
            assert!(p.is_empty(), "{when:?}:{step}: {p:?}");
            let st = env.state().await;
            assert_eq!(
                (count(&st, "embedder"), count(&st, "reranker")),
                (6, 2),
                "{when:?}:{step}"
            );
        }
    }
}

#[tokio::test]
async fn destroy_terminates_every_host() {
    let mut env = Env::new();
    let d = desired(4, 1);
    env.apply(&d, &opts()).await;
    assert!(!env.running_instances().is_empty());
    let destroy = Options {
        destroy: true,
        ..opts()
    };
    env.apply(&d, &destroy).await;
    let st = env.state().await;
    assert!(
        st.hosts.is_empty() && st.tasks.is_empty() && st.resources.is_empty(),
        "{st:?}"
    );
    assert!(env.running_instances().is_empty());
    assert!(env.store.reports().await.expect("reports").is_empty());
    assert!(env.plan(&d, &destroy).await.1.is_empty());
}

/// A host whose agent falls silent keeps its last heartbeat; once that is older
/// than the heartbeat timeout the host is replaced, its tasks moved.
#[tokio::test]
async fn a_silent_host_is_replaced_after_the_heartbeat_timeout() {
    let mut env = Env::new();
    let d = desired(6, 2);
    env.apply(&d, &opts()).await;
    env.settle(&d).await;
    let st = env.state().await;
    let silent = st.tasks.values().next().expect("a task").host.clone();
    env.cloud
        .inject_fault(CLUSTER, &silent, Fault::Silent)
        .expect("fault");

    // Within the timeout: nothing to do.
    let (live, p) = env.plan(&d, &opts()).await;
    let beat = live.state.hosts[&silent]
        .last_heartbeat
        .expect("reported before");
    assert!(beat < live.observed_at);
    assert!(p.is_empty(), "{p:?}");

    env.now += opts().heartbeat_timeout_seconds;
    let (_, p) = env.plan(&d, &opts()).await;
    assert_eq!(
        p.retirements
            .iter()
            .map(|r| r.host_id.as_str())
            .collect::<Vec<_>>(),
        [silent.as_str()],
        "{p:?}"
    );
    apply::apply(&p, &env.ctx()).await.expect("apply");
    let st = env.state().await;
    assert!(!st.hosts.contains_key(&silent));
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (6, 2));
    env.assert_consistent().await;
    assert!(env.plan(&d, &opts()).await.1.is_empty());
}

/// A sick host's tasks moved, with apply waiting for the successors ([`MoveWait`]).
/// Returns the environment (at the plan), the plan and the moves' (old, new) ids.
async fn sick_host_plan() -> (Env, Desired, Plan) {
    let mut env = Env::new();
    let d = desired(6, 2);
    env.apply(&d, &opts()).await;
    env.plan(&d, &opts()).await; // the agents start the placed tasks
    let sick = env
        .state()
        .await
        .tasks
        .values()
        .next()
        .expect("a task")
        .host
        .clone();
    env.cloud
        .inject_fault(CLUSTER, &sick, Fault::MpsDown)
        .expect("fault");
    let mut p = Plan::default();
    for _ in 0..3 {
        p = env.plan(&d, &opts()).await.1;
    }
    assert!(!p.moves.is_empty(), "the impaired host's tasks move: {p:?}");
    (env, d, p)
}

/// Start before stop: apply records every successor, keeps the old tasks while the
/// successors are not reported running, and removes the old tasks only once the
/// agents report them running.
#[tokio::test]
async fn a_move_stops_the_old_task_only_after_its_successor_is_reported_running() {
    let (env, _, p) = sick_host_plan().await;
    let pairs: Vec<(String, String)> = p
        .moves
        .iter()
        .map(|m| (m.from_task.clone(), m.to.id.clone()))
        .collect();
    let mut ctx = env.ctx();
    ctx.moves = MoveWait {
        timeout: Duration::from_secs(30),
        poll: Duration::from_millis(20),
        agents: None,
        ..MoveWait::NONE
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let applying = async {
        let r = apply::apply(&p, &ctx).await.expect("apply");
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        r
    };
    let agents = async {
        // Wait until apply has recorded every successor.
        loop {
            let st = env.state().await;
            if pairs.iter().all(|(_, new)| st.tasks.contains_key(new)) {
                assert!(
                    pairs.iter().all(|(old, _)| st.tasks.contains_key(old)),
                    "an old task stopped before its successor ran: {:?}",
                    st.tasks.keys().collect::<Vec<_>>()
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Nobody reported the successors running: apply is still waiting.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !done.load(std::sync::atomic::Ordering::SeqCst),
            "apply finished before any agent reported the successors running"
        );
        let st = env.state().await;
        assert!(pairs.iter().all(|(old, _)| st.tasks.contains_key(old)));
        // The agents start the successors and report.
        common::agents_round(&env.store, &env.cloud, env.now + 1).await;
    };
    let (report, ()) = tokio::join!(applying, agents);
    assert!(report.unconfirmed.is_empty(), "{report:?}");
    let st = env.state().await;
    for (old, new) in &pairs {
        assert!(!st.tasks.contains_key(old), "old task {old} still recorded");
        assert!(st.tasks.contains_key(new), "successor {new} lost");
    }
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (6, 2));
    env.assert_consistent().await;
}

/// A successor that no agent reports running does not hold apply up for ever, and a
/// timeout never stops the old task: after the move timeout both are kept (the next
/// plan decides from the agents' reports) and the apply says so.
#[tokio::test]
async fn a_move_whose_successor_never_runs_keeps_the_old_task_and_says_so() {
    let (env, _, p) = sick_host_plan().await;
    let mut ctx = env.ctx();
    ctx.moves = MoveWait {
        timeout: Duration::from_millis(300),
        poll: Duration::from_millis(20),
        agents: None,
        ..MoveWait::NONE
    };
    let report = apply::apply(&p, &ctx).await.expect("apply");
    assert_eq!(report.unconfirmed.len(), p.moves.len(), "{report:?}");
    let st = env.state().await;
    assert!(p
        .moves
        .iter()
        .all(|m| st.tasks.contains_key(&m.from_task) && st.tasks.contains_key(&m.to.id)));
    env.assert_consistent().await;
}

/// Interrupted while it waits for the successors: both tasks stay recorded and the
/// journal is kept; the next run waits again and finishes the moves.
#[tokio::test]
async fn an_apply_interrupted_while_waiting_for_moves_is_finished_by_the_next_run() {
    let (env, _, p) = sick_host_plan().await;
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let mut ctx = env.ctx();
    ctx.cancel = Some(&cancel);
    ctx.moves = MoveWait {
        timeout: Duration::from_secs(30),
        poll: Duration::from_millis(20),
        agents: None,
        ..MoveWait::NONE
    };
    let interrupt = async {
        loop {
            let st = env.state().await;
            if p.moves.iter().all(|m| st.tasks.contains_key(&m.to.id)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let (result, ()) = tokio::join!(apply::apply(&p, &ctx), interrupt);
    assert!(
        matches!(result, Err(ApplyError::Cancelled { .. })),
        "{result:?}"
    );
    let st = env.state().await;
    assert!(p
        .moves
        .iter()
        .all(|m| st.tasks.contains_key(&m.from_task) && st.tasks.contains_key(&m.to.id)));

    // The next run finishes the journal: the agents report, the old tasks go.
    let mut ctx = env.ctx();
    ctx.moves = MoveWait {
        timeout: Duration::from_secs(30),
        poll: Duration::from_millis(20),
        agents: None,
        ..MoveWait::NONE
    };
    let agents = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        common::agents_round(&env.store, &env.cloud, env.now + 1).await;
    };
    let (resumed, ()) = tokio::join!(apply::resume(&ctx), agents);
    let resumed = resumed.expect("resume").expect("a journal was left");
    assert!(resumed.unconfirmed.is_empty(), "{resumed:?}");
    let st = env.state().await;
    assert!(p
        .moves
        .iter()
        .all(|m| !st.tasks.contains_key(&m.from_task) && st.tasks.contains_key(&m.to.id)));
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (6, 2));
    env.assert_consistent().await;
}

/// Two embedders on a pool of at least three hosts, with zone local-1b out of capacity.
fn three_hosts_and_local_1b_full() -> (Env, Desired) {
    let env = Env::new();
    let mut d = desired(2, 0);
    if let Some(p) = d.capacity_providers.get_mut("l4") {
        p.min_size = 3;
    }
    env.cloud
        .set_zone_full("local-1b", true)
        .expect("full zone");
    (env, d)
}

/// Gather, then plan: every launch is fixed in the plan (zone, subnet, image) and
/// carried out exactly; a zone without capacity fails its launch, is recorded in the
/// state, and the next plan launches elsewhere, with no duplicate instance. (The
/// local fleet's "full zone" is a simulated shortage: EC2's InsufficientInstanceCapacity
/// is tested against moto in the ec2 crate.)
#[tokio::test]
async fn a_zone_without_capacity_is_recorded_and_the_next_plan_launches_elsewhere() {
    let (mut env, d) = three_hosts_and_local_1b_full();
    let p = env.plan(&d, &opts()).await.1;
    let fixed: Vec<(Option<String>, Option<String>, Option<String>)> = p
        .launches
        .iter()
        .map(|l| {
            (
                l.host.zone.clone(),
                l.host.subnet.clone(),
                l.host.image_id.clone(),
            )
        })
        .collect();
    let zone = |z: &str| {
        (
            Some(format!("local-{z}")),
            Some(format!("subnet-local-{z}")),
            Some("ami-local-gpu".to_string()),
        )
    };
    assert_eq!(fixed, [zone("1a"), zone("1b"), zone("1c")]);

    // The launch into local-1b is refused: the step fails, the refusal is recorded,
    // what was launched before it is kept, and no journal is left to redo it.
    match apply::apply(&p, &env.ctx()).await {
        Err(ApplyError::CapacityRefused { source, .. }) => {
            assert!(source.to_string().contains("local-1b"), "{source}")
        }
        other => panic!("expected CapacityRefused, got {other:?}"),
    }
    let st = env.state().await;
    assert_eq!(st.capacity_refusals.len(), 1, "{:?}", st.capacity_refusals);
    assert_eq!(st.capacity_refusals[0].zone.as_deref(), Some("local-1b"));
    assert_eq!(
        st.hosts.len(),
        1,
        "the host launched before the refusal is kept"
    );
    assert!(env.store.read_journal().await.expect("journal").is_none());
    env.assert_consistent().await;

    // The next plan avoids local-1b for the while the refusal counts.
    let p = env.plan(&d, &opts()).await.1;
    let zones: Vec<_> = p
        .launches
        .iter()
        .map(|l| l.host.zone.clone().unwrap_or_default())
        .collect();
    assert_eq!(zones, ["local-1c", "local-1a"]);
    apply::apply(&p, &env.ctx()).await.expect("apply elsewhere");
    env.assert_consistent().await;
    let st = env.state().await;
    assert_eq!(st.hosts.len(), 3);
    assert!(st
        .hosts
        .values()
        .all(|h| h.zone.as_deref() != Some("local-1b")));
    // Each host runs where the plan put it.
    let instances = env.cloud.instances().expect("fleet");
    for h in st.hosts.values() {
        let i = instances
            .iter()
            .find(|i| i.host_id == h.id)
            .expect("instance");
        assert_eq!(Some(&i.zone), h.zone.as_ref(), "{}", h.id);
    }
}

/// A cloud that launches a wave side by side, as EC2 does (`launch_many`): every
/// launch of the wave was already under way when one failed, so every one has a
/// result. The local fleet underneath.
struct SideBySide<'a>(&'a LocalCloud);

#[async_trait::async_trait]
impl Cloud for SideBySide<'_> {
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    async fn gather(
        &self,
        pools: &std::collections::BTreeMap<String, gpushare_core::model::CapacityProvider>,
    ) -> Result<gpushare_core::facts::CloudFacts, CloudError> {
        self.0.gather(pools).await
    }
    async fn list_hosts(
        &self,
        cluster: &str,
    ) -> Result<Vec<gpushare_core::model::CloudHost>, CloudError> {
        self.0.list_hosts(cluster).await
    }
    async fn launch(
        &self,
        req: &LaunchRequest<'_>,
    ) -> Result<gpushare_core::model::CloudHost, CloudError> {
        self.0.launch(req).await
    }
    async fn launch_many(
        &self,
        reqs: &[LaunchRequest<'_>],
    ) -> Vec<Result<gpushare_core::model::CloudHost, CloudError>> {
        let mut out = Vec::new();
        for req in reqs {
            out.push(self.0.launch(req).await);
        }
        out
    }
    async fn terminate(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError> {
        self.0.terminate(cluster, store_id, instance_id).await
    }
    async fn claim(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError> {
        self.0.claim(cluster, store_id, instance_id).await
    }
    async fn preflight(&self, requests: &[LaunchRequest<'_>]) -> Result<(), CloudError> {
        self.0.preflight(requests).await
    }
}

/// A wave launched side by side in which the middle launch meets no capacity: the
/// hosts launched before it and after it are both recorded (none is left running
/// unknown to the state), the refusal is recorded, and the next plan launches only
/// the one host still missing, elsewhere.
#[tokio::test]
async fn launches_that_finish_after_a_failed_one_in_a_wave_are_recorded() {
    let (mut env, d) = three_hosts_and_local_1b_full();
    let p = env.plan(&d, &opts()).await.1;
    let zones: Vec<_> = p.launches.iter().map(|l| l.host.zone.clone()).collect();
    let zone = |z: &str| Some(format!("local-{z}"));
    assert_eq!(zones, [zone("1a"), zone("1b"), zone("1c")]);
    let cloud = SideBySide(&env.cloud);
    let mut ctx = ApplyContext::new(&env.store, &cloud);
    ctx.lock_timeout = Duration::from_secs(2);
    match apply::apply(&p, &ctx).await {
        Err(ApplyError::CapacityRefused { source, .. }) => {
            assert!(source.to_string().contains("local-1b"), "{source}")
        }
        other => panic!("expected CapacityRefused, got {other:?}"),
    }
    let st = env.state().await;
    let mut recorded: Vec<_> = st.hosts.values().map(|h| h.zone.clone()).collect();
    recorded.sort();
    assert_eq!(
        recorded,
        [zone("1a"), zone("1c")],
        "both launches around the refusal"
    );
    assert_eq!(st.capacity_refusals.len(), 1, "{:?}", st.capacity_refusals);
    assert!(env.store.read_journal().await.expect("journal").is_none());
    env.assert_consistent().await;

    let p = env.plan(&d, &opts()).await.1;
    assert_eq!(
        p.launches.len(),
        1,
        "only the refused host is launched again"
    );
    assert_ne!(p.launches[0].host.zone, zone("1b"));
    apply::apply(&p, &env.ctx()).await.expect("apply elsewhere");
    env.assert_consistent().await;
    assert_eq!(env.state().await.hosts.len(), 3);
    assert_eq!(env.running_instances().len(), 3, "no duplicate instance");
}

/// The local fleet with a scheduled event on one instance, as EC2's
/// DescribeInstanceStatus lists one; it records the instances it is asked about.
struct WithEvent<'a> {
    cloud: &'a LocalCloud,
    instance: String,
    asked: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Cloud for WithEvent<'_> {
    fn kind(&self) -> &'static str {
        self.cloud.kind()
    }
    async fn list_hosts(
        &self,
        cluster: &str,
    ) -> Result<Vec<gpushare_core::model::CloudHost>, CloudError> {
        self.cloud.list_hosts(cluster).await
    }
    async fn launch(
        &self,
        req: &LaunchRequest<'_>,
    ) -> Result<gpushare_core::model::CloudHost, CloudError> {
        self.cloud.launch(req).await
    }
    async fn terminate(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError> {
        self.cloud.terminate(cluster, store_id, instance_id).await
    }
    async fn scheduled_events(
        &self,
        instance_ids: &[String],
    ) -> Result<std::collections::BTreeMap<String, gpushare_core::model::HostNotice>, CloudError>
    {
        self.asked
            .lock()
            .expect("lock")
            .extend(instance_ids.iter().cloned());
        let notice = gpushare_core::model::HostNotice::scheduled(
            "2026-12-09T09:00:00.000Z".into(),
            "instance-retirement".into(),
            "degraded hardware",
            "ec2",
        );
        Ok(instance_ids
            .iter()
            .filter(|i| **i == self.instance)
            .map(|i| (i.clone(), notice.clone()))
            .collect())
    }
}

/// A host whose agent is silent cannot report EC2's notice: observe reads the
/// cloud's scheduled events for it (and for no host that reports), and the plan
/// drains it at once, long before the heartbeat timeout would.
#[tokio::test]
async fn a_silent_hosts_scheduled_event_drains_it_before_its_heartbeat_timeout() {
    let mut env = Env::new();
    let d = desired(6, 2);
    env.apply(&d, &opts()).await;
    env.settle(&d).await;
    let st = env.state().await;
    let silent = st.tasks.values().next().expect("a task").host.clone();
    let instance = st.hosts[&silent].instance_id.clone().expect("launched");
    env.cloud
        .inject_fault(CLUSTER, &silent, Fault::Silent)
        .expect("fault");
    // Silent for 60 s, within the 300 s timeout: the local fleet alone says nothing.
    assert!(env.plan(&d, &opts()).await.1.is_empty());

    env.now += 60;
    common::agents_round(&env.store, &env.cloud, env.now).await;
    let cloud = WithEvent {
        cloud: &env.cloud,
        instance: instance.clone(),
        asked: Default::default(),
    };
    let mut live = observe(&env.store, &cloud, CLUSTER, env.now)
        .await
        .expect("observe");
    assert_eq!(*cloud.asked.lock().expect("lock"), [instance]);
    live.facts = env
        .cloud
        .gather(&d.capacity_providers)
        .await
        .expect("gather");
    let p = plan::plan(&d, &live, &opts()).expect("plan");
    let retired: Vec<&str> = p.retirements.iter().map(|r| r.host_id.as_str()).collect();
    assert_eq!(retired, [silent.as_str()], "{p:?}");
    let why = "scheduled instance event at 2026-12-09T09:00:00.000Z (instance-retirement: degraded hardware; from ec2)";
    assert!(
        !p.moves.is_empty() && p.moves.iter().all(|m| m.reason == why),
        "{:?}",
        p.moves
    );
}
