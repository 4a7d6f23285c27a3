//! The store conformance suite: observe -> plan (the real planner) -> journalled apply
//! -> agents, with the local simulated fleet, against any [`Store`]. Every store runs
//! the same tests: the engine's tests on the file store ([`FileStores`]) and the etcd
//! store's tests on a real etcd on loopback ([`EtcdStores`]), each through
//! [`store_conformance_suite!`](crate::store_conformance_suite), which writes one
//! `#[tokio::test]` per test of the suite.
//!
//! What it covers: converge, re-plan to nothing, scale by the delta; replace a host
//! whose MPS daemon is down or whose agent is silent; survive a crash mid-apply
//! (resumed from another handle on the store); destroy; moves that wait for their
//! successors; launches refused for capacity; a scheduled event of a silent host.

mod converge;
mod launches;
mod moves;

pub use converge::{
    a_crash_mid_apply_is_finished_by_the_next_run,
    a_host_whose_mps_daemon_is_down_is_replaced_start_before_stop,
    a_silent_host_is_replaced_after_the_heartbeat_timeout,
    converges_then_plans_nothing_then_scales_by_the_delta, destroy_terminates_every_host,
};
pub use launches::{
    a_silent_hosts_scheduled_event_drains_it_before_its_heartbeat_timeout,
    a_zone_without_capacity_is_recorded_and_the_next_plan_launches_elsewhere,
    launches_that_finish_after_a_failed_one_in_a_wave_are_recorded,
};
pub use moves::{
    a_move_stops_the_old_task_only_after_its_successor_is_reported_running,
    a_move_whose_successor_never_runs_keeps_the_old_task_and_says_so,
    an_apply_interrupted_while_waiting_for_moves_is_finished_by_the_next_run,
};

use crate::etcd::Etcd;
use gpushare_core::model::{Desired, HostState, Live, MpsHealth, StoreState, TaskState};
use gpushare_core::plan::{self, Options, Plan};
use gpushare_engine::apply::{self, ApplyContext, ApplyReport};
use gpushare_engine::cloud::{Cloud, LocalCloud};
use gpushare_engine::observe::observe;
use gpushare_engine::store::{FileStore, Store};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Writes one `#[tokio::test]` per test of the suite, each on a store factory made
/// by `$stores` (an expression, evaluated in each test's async body, `.await` allowed).
/// The calling crate needs `tokio` (with `macros`) among its dependencies.
#[macro_export]
macro_rules! store_conformance_suite {
    ($stores:expr) => {
        $crate::store_conformance_suite!(@tests $stores;
            converges_then_plans_nothing_then_scales_by_the_delta,
            a_host_whose_mps_daemon_is_down_is_replaced_start_before_stop,
            a_crash_mid_apply_is_finished_by_the_next_run,
            destroy_terminates_every_host,
            a_silent_host_is_replaced_after_the_heartbeat_timeout,
            a_move_stops_the_old_task_only_after_its_successor_is_reported_running,
            a_move_whose_successor_never_runs_keeps_the_old_task_and_says_so,
            an_apply_interrupted_while_waiting_for_moves_is_finished_by_the_next_run,
            a_zone_without_capacity_is_recorded_and_the_next_plan_launches_elsewhere,
            launches_that_finish_after_a_failed_one_in_a_wave_are_recorded,
            a_silent_hosts_scheduled_event_drains_it_before_its_heartbeat_timeout,
        );
    };
    (@tests $stores:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let stores = $stores;
                $crate::conformance::$name(&stores).await;
            }
        )*
    };
}

/// Makes the stores the suite runs on.
#[async_trait::async_trait]
pub trait StoreFactory: Send + Sync {
    /// A handle on the store named `name`, empty the first time the name is used;
    /// opening the same name again gives another handle on the same store (another
    /// machine, or the next run of the CLI).
    async fn open(&self, name: &str) -> Arc<dyn Store>;
}

/// File stores, each in its own directory below one temporary directory.
pub struct FileStores {
    root: tempfile::TempDir,
}

impl FileStores {
    pub fn new() -> FileStores {
        FileStores {
            root: tempfile::tempdir().expect("a directory for the file stores"),
        }
    }
}

impl Default for FileStores {
    fn default() -> Self {
        FileStores::new()
    }
}

#[async_trait::async_trait]
impl StoreFactory for FileStores {
    async fn open(&self, name: &str) -> Arc<dyn Store> {
        let dir = self.root.path().join(name).join(".gpushare");
        Arc::new(FileStore::open(&dir).expect("open the file store"))
    }
}

/// etcd stores, each under its own prefix of one real etcd on loopback.
pub struct EtcdStores {
    pub etcd: Etcd,
}

impl EtcdStores {
    /// Starts the etcd server (stopped when this is dropped).
    pub async fn start() -> EtcdStores {
        EtcdStores {
            etcd: Etcd::start().await,
        }
    }
}

#[async_trait::async_trait]
impl StoreFactory for EtcdStores {
    async fn open(&self, name: &str) -> Arc<dyn Store> {
        Arc::new(self.etcd.store(name).await)
    }
}

/// The cluster every test of the suite plans.
pub const CLUSTER: &str = "pipeline";

/// Embedders and rerankers sharing the GPUs of one pool of g6.12xlarge hosts by MPS.
pub fn desired(embedders: u32, rerankers: u32) -> Desired {
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

/// The planner's options of the suite: a 300 s heartbeat timeout.
pub fn opts() -> Options {
    Options {
        heartbeat_timeout_seconds: 300,
        ..Options::default()
    }
}

/// The tasks of `service` in `st`.
pub fn count(st: &StoreState, service: &str) -> usize {
    st.tasks.values().filter(|t| t.service == service).count()
}

/// Every task reported running and every host's MPS daemon healthy.
pub fn assert_all_running_and_healthy(live: &Live) {
    for t in live.state.tasks.values() {
        assert_eq!(t.state, TaskState::Running, "task {}", t.id);
    }
    for h in live.state.hosts.values() {
        assert_eq!(h.mps_health, MpsHealth::Healthy, "host {}", h.id);
    }
}

/// One round of the local fleet's in-process agents (the host agent's own loop, as
/// the backends factory wires it for `gpushare plan` and `apply`) at `now`: what each
/// did.
pub async fn agents_round(store: &Arc<dyn Store>, cloud: &LocalCloud, now: u64) -> Vec<String> {
    gpushare_agent::SimFleet::new(Arc::new(cloud.clone()))
        .run_round(store, now)
        .await
        .expect("the simulated hosts' agents ran")
}

/// A store, the local simulated fleet and the clock of one test.
pub struct Env {
    _dir: tempfile::TempDir,
    /// The store's name (for [`StoreFactory::open`]).
    pub name: String,
    pub store: Arc<dyn Store>,
    pub cloud: LocalCloud,
    pub now: u64,
}

impl Env {
    /// A fresh store from `stores` and an empty fleet.
    pub async fn new(stores: &dyn StoreFactory) -> Env {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("env-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let mut env = Env::with_store(stores.open(&name).await);
        env.name = name;
        env
    }

    /// `store` (opened by the caller) and an empty fleet.
    pub fn with_store(store: Arc<dyn Store>) -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let cloud = LocalCloud::open(dir.path().join("fleet")).expect("cloud");
        Env {
            _dir: dir,
            name: String::new(),
            store,
            cloud,
            now: 1_000,
        }
    }

    /// What `gpushare plan` does: agents report, observe, gather the cloud's launch
    /// facts, plan.
    pub async fn plan(&mut self, d: &Desired, options: &Options) -> (Live, Plan) {
        self.now += 60;
        agents_round(&self.store, &self.cloud, self.now).await;
        let mut live = observe(&*self.store, &self.cloud, CLUSTER, self.now)
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

    pub fn ctx(&self) -> ApplyContext<'_> {
        let mut ctx = ApplyContext::new(&*self.store, &self.cloud);
        ctx.lock_timeout = Duration::from_secs(5);
        ctx
    }

    /// Plan, then apply the plan.
    pub async fn apply(&mut self, d: &Desired, options: &Options) -> (Plan, ApplyReport) {
        let (_, p) = self.plan(d, options).await;
        let report = apply::apply(&p, &self.ctx()).await.expect("apply");
        (p, report)
    }

    /// What the reconcile loop does after an apply: the agents start the placed
    /// tasks, and a pass once they are healthy records the services' deployments
    /// COMPLETED (and changes nothing else).
    pub async fn settle(&mut self, d: &Desired) {
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

    /// Six embedders and two rerankers applied and settled: the desired state and the
    /// host of the first task (the one a test then makes sick or silent).
    pub async fn settled_fleet(&mut self) -> (Desired, String) {
        let d = desired(6, 2);
        self.apply(&d, &opts()).await;
        self.settle(&d).await;
        let st = self.state().await;
        let host = st.tasks.values().next().expect("a task").host.clone();
        (d, host)
    }

    pub async fn state(&self) -> StoreState {
        self.store.load().await.expect("load")
    }

    /// Host ids of the instances the fleet still runs (checked free of duplicates).
    pub fn running_instances(&self) -> BTreeSet<String> {
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
    pub async fn assert_consistent(&self) {
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
