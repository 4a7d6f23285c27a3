//! The engine's pipeline (observe -> the real planner -> journalled apply -> agents)
//! with the etcd store and the local simulated fleet: what the engine's file-store
//! pipeline tests expect, against a real etcd.

mod common;

use common::Etcd;
use gpushare_core::model::{Desired, HostState, StoreState};
use gpushare_core::plan::{self, Options, Plan};
use gpushare_engine::apply::{
    self, ApplyContext, ApplyError, Failpoint, FailpointWhen, ProgressEvent,
};
use gpushare_engine::cloud::{Cloud, LocalCloud};
use gpushare_engine::observe::observe;
use gpushare_engine::store::Store;
use gpushare_store_etcd::{EtcdOptions, EtcdStore};
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

fn opts() -> Options {
    Options {
        heartbeat_timeout_seconds: 300,
        ..Options::default()
    }
}

/// One round of the local fleet's agents (the host agent's own loop, in-process).
async fn agents_round(store: &EtcdStore, cloud: &LocalCloud, now: u64) {
    let store: std::sync::Arc<dyn gpushare_engine::store::Store> =
        std::sync::Arc::new(store.clone());
    gpushare_agent::SimFleet::new(std::sync::Arc::new(cloud.clone()))
        .run_round(&store, now)
        .await
        .expect("agents");
}

struct Env {
    _dir: tempfile::TempDir,
    store: EtcdStore,
    cloud: LocalCloud,
    now: u64,
}

impl Env {
    async fn new(etcd: &Etcd, prefix: &str) -> Env {
        Env::with_store(etcd.store(prefix).await)
    }

    fn with_store(store: EtcdStore) -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let cloud = LocalCloud::open(dir.path().join("fleet")).expect("cloud");
        Env {
            _dir: dir,
            store,
            cloud,
            now: 1_000,
        }
    }

    async fn plan(&mut self, d: &Desired) -> Plan {
        self.now += 60;
        agents_round(&self.store, &self.cloud, self.now).await;
        let mut live = observe(&self.store, &self.cloud, CLUSTER, self.now)
            .await
            .expect("observe");
        live.facts = self
            .cloud
            .gather(&d.capacity_providers)
            .await
            .expect("gather");
        plan::plan(d, &live, &opts()).expect("plan")
    }

    fn ctx(&self) -> ApplyContext<'_> {
        let mut ctx = ApplyContext::new(&self.store, &self.cloud);
        ctx.lock_timeout = Duration::from_secs(5);
        ctx
    }

    async fn state(&self) -> StoreState {
        self.store.load().await.expect("load")
    }

    /// The store and the fleet agree, and no host runs twice.
    async fn assert_consistent(&self) {
        let st = self.state().await;
        let running: Vec<String> = self
            .cloud
            .instances()
            .expect("fleet")
            .into_iter()
            .filter(|i| i.state != HostState::Terminated)
            .map(|i| i.host_id)
            .collect();
        let unique: BTreeSet<String> = running.iter().cloned().collect();
        assert_eq!(unique.len(), running.len(), "a host runs twice");
        let stored: BTreeSet<String> = st.hosts.keys().cloned().collect();
        assert_eq!(stored, unique, "store hosts vs running instances");
        for t in st.tasks.values() {
            assert!(
                st.hosts.contains_key(&t.host),
                "task {} on unknown host",
                t.id
            );
        }
    }
}

fn count(st: &StoreState, service: &str) -> usize {
    st.tasks.values().filter(|t| t.service == service).count()
}

/// The one place the apply's crash simulation is set (the engine's hook).
fn set_failpoint(ctx: &mut ApplyContext<'_>, fp: Failpoint) {
    ctx.hooks.failpoint = Some(fp);
}

#[tokio::test]
async fn converges_plans_nothing_scales_and_destroys_on_etcd() {
    let etcd = Etcd::start().await;
    let mut env = Env::new(&etcd, "quickstart").await;
    let d = desired(6, 2);
    let p = env.plan(&d).await;
    assert!(!p.launches.is_empty() && p.starts.len() == 8, "{p:?}");
    let report = apply::apply(&p, &env.ctx()).await.expect("apply");
    assert_eq!(report.changed_steps, p.steps().len());
    env.assert_consistent().await;
    let st = env.state().await;
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (6, 2));
    assert!(env.plan(&d).await.is_empty(), "second plan is empty");
    assert_eq!(
        env.store.reports().await.expect("reports").len(),
        st.hosts.len(),
        "every host's agent reported into etcd"
    );

    let d9 = desired(9, 2);
    let p = env.plan(&d9).await;
    assert_eq!((p.starts.len(), p.stops.len(), p.moves.len()), (3, 0, 0));
    apply::apply(&p, &env.ctx()).await.expect("apply");
    let st = env.state().await;
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (9, 2));
    env.assert_consistent().await;
    assert!(env.plan(&d9).await.is_empty());

    let destroy = Options {
        destroy: true,
        ..opts()
    };
    env.now += 60;
    agents_round(&env.store, &env.cloud, env.now).await;
    let live = observe(&env.store, &env.cloud, CLUSTER, env.now)
        .await
        .expect("observe");
    let p = plan::plan(&d9, &live, &destroy).expect("plan");
    apply::apply(&p, &env.ctx()).await.expect("destroy");
    let st = env.state().await;
    assert!(st.hosts.is_empty() && st.tasks.is_empty(), "{st:?}");
    assert!(env.store.reports().await.expect("reports").is_empty());
    assert_eq!(env.store.read_journal().await.expect("journal"), None);
}

/// A crash at each point of a launch step and of a start step leaves a journal in
/// etcd; a fresh handle (another machine) resumes it, and the next plan is empty.
#[tokio::test]
async fn a_crash_mid_apply_is_finished_from_another_handle() {
    let etcd = Etcd::start().await;
    let mut n = 0;
    for when in [
        FailpointWhen::BeforeCommit,
        FailpointWhen::AfterCommit,
        FailpointWhen::AfterStep,
    ] {
        for at_launch in [true, false] {
            n += 1;
            let prefix = format!("crash-{n}");
            let mut env = Env::new(&etcd, &prefix).await;
            let d = desired(6, 2);
            let p = env.plan(&d).await;
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
            set_failpoint(&mut ctx, Failpoint { when, step });
            match apply::apply(&p, &ctx).await {
                Err(ApplyError::Failpoint { .. }) => {}
                other => panic!("{when:?}:{step}: expected the failpoint, got {other:?}"),
            }
            // Another machine: a new connection to the same prefix.
            env.store = etcd.store(&prefix).await;
            assert!(
                env.store.read_journal().await.expect("journal").is_some(),
                "{when:?}:{step}: the journal is in etcd"
            );
            assert!(apply::resume(&env.ctx()).await.expect("resume").is_some());
            env.assert_consistent().await;
            assert!(env.plan(&d).await.is_empty(), "{when:?}:{step}");
            let st = env.state().await;
            assert_eq!(
                (count(&st, "embedder"), count(&st, "reranker")),
                (6, 2),
                "{when:?}:{step}"
            );
        }
    }
}

/// etcd is killed in the middle of an apply: the apply stops with an error and the
/// journal intact; once etcd is back, the same handle reconnects, the next run finishes
/// the journal, and the fleet has no duplicate host or task.
#[tokio::test]
async fn etcd_lost_mid_apply_stops_it_and_the_next_run_finishes_it() {
    let mut etcd = Etcd::start().await;
    let opts = EtcdOptions {
        request_timeout: Duration::from_secs(3),
        lock_ttl: Duration::from_secs(2),
        ..EtcdOptions::default()
    };
    let mut env = Env::with_store(etcd.store_with("lost", opts).await);
    let d = desired(6, 2);
    let p = env.plan(&d).await;
    let total = p.steps().len();
    assert!(total >= 4, "{total}");
    let server = etcd.process();
    let kill_at = total / 2;
    let on_progress = move |e: &ProgressEvent| {
        if let ProgressEvent::StepStarted { index, .. } = e {
            if *index == kill_at {
                server.kill();
            }
        }
    };
    let mut ctx = env.ctx();
    ctx.progress = Some(&on_progress);
    let e = apply::apply(&p, &ctx).await.expect_err("etcd went away");
    assert!(
        format!("{e:?}").contains("Unreachable"),
        "the apply stops on the lost store: {e:?}"
    );
    etcd.restart().await;
    let journal = env
        .store
        .read_journal()
        .await
        .expect("the same handle reconnects")
        .expect("the journal is intact");
    assert!(journal.done < total, "{} of {total}", journal.done);
    let mut ctx = env.ctx();
    ctx.lock_timeout = Duration::from_secs(30);
    assert!(apply::resume(&ctx).await.expect("resume").is_some());
    env.assert_consistent().await;
    assert!(env.plan(&d).await.is_empty());
    let st = env.state().await;
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (6, 2));
    assert_eq!(env.store.read_journal().await.expect("journal"), None);
}

/// A 3-member cluster loses a member (SIGKILL) in the middle of an apply: the apply
/// carries on against the other two and finishes.
#[tokio::test]
async fn a_3_member_cluster_losing_a_member_mid_apply_finishes_it() {
    let cluster = common::EtcdCluster::start(3).await;
    let store = EtcdStore::open(&cluster.url("ha"), EtcdOptions::default())
        .await
        .expect("open the cluster");
    let mut env = Env::with_store(store);
    let d = desired(6, 2);
    let p = env.plan(&d).await;
    let total = p.steps().len();
    let first = cluster.members[0].clone();
    let kill_at = total / 2;
    let on_progress = move |e: &ProgressEvent| {
        if let ProgressEvent::StepStarted { index, .. } = e {
            if *index == kill_at {
                // The first member named in the URL, whichever role it has.
                first.kill();
            }
        }
    };
    let mut ctx = env.ctx();
    ctx.progress = Some(&on_progress);
    let report = apply::apply(&p, &ctx).await.expect("the apply finishes");
    assert_eq!(report.changed_steps, total);
    assert!(
        cluster.members[0].exited(),
        "the member was killed mid-apply"
    );
    env.assert_consistent().await;
    assert!(env.plan(&d).await.is_empty());
    let st = env.state().await;
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (6, 2));
}
