//! The journalled apply against the real file store and local fleet (in a temp dir):
//! a plan applied once, crashes at every step and point then resumed, stale plans,
//! cancellation, the lock, and the shrinking steps (move, stop, retire, delete).

mod common;

use gpushare_core::model::{
    CapacityProvider, Host, HostState, ResourceAddr, StoreState, Task, TaskGpu, TaskShape,
    TaskState,
};
use gpushare_core::plan::Plan;
use gpushare_engine::apply::{
    self, ApplyContext, ApplyError, Failpoint, FailpointWhen, ProgressEvent,
};
use gpushare_engine::cloud::LocalCloud;
use gpushare_engine::observe::observe;
use gpushare_engine::store::{FileStore, Journal, Store};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const CLUSTER: &str = "inference";

struct Env {
    _dir: tempfile::TempDir,
    store: FileStore,
    cloud: LocalCloud,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path().join(".gpushare")).expect("store");
        let cloud = LocalCloud::open(dir.path().join(".gpushare")).expect("cloud");
        Env {
            _dir: dir,
            store,
            cloud,
        }
    }

    /// One commit per step (`max_batch` 1), so serials and journal positions are exact.
    fn ctx(&self) -> ApplyContext<'_> {
        self.ctx_batched(1)
    }

    fn ctx_batched(&self, max_batch: usize) -> ApplyContext<'_> {
        let mut ctx = ApplyContext::new(&self.store, &self.cloud);
        ctx.lock_timeout = Duration::from_millis(200);
        ctx.max_batch = max_batch;
        ctx
    }

    /// The stored state without the store's identity (random per store), so states
    /// of different test stores compare equal.
    async fn state(&self) -> StoreState {
        let mut st = self.store.load().await.expect("load");
        assert_eq!(
            st.store_id,
            self.store.store_id(),
            "load fills the store id"
        );
        st.store_id.clear();
        st
    }

    async fn journal_done(&self) -> Option<usize> {
        self.store
            .read_journal()
            .await
            .expect("journal")
            .map(|j| j.done)
    }

    fn instances(&self) -> usize {
        self.cloud.instances().expect("fleet").len()
    }
}

fn pool() -> CapacityProvider {
    serde_json::from_value(json!({ "instance_type": "g6.12xlarge", "min_size": 0, "max_size": 4 }))
        .expect("pool")
}

fn host(id: &str) -> Host {
    gpushare_testkit::model::host(id)
        .pool("l4")
        .instance_type("g6.12xlarge")
        .zone("local-1a")
        .launch_token(&format!("token-{CLUSTER}-{id}"))
        .build()
}

/// A planned launch of `host(id)`: its pool's settings with it, as the planner writes it.
fn launch(id: &str) -> Value {
    json!({ "host": host(id), "pool": pool(), "basis": "facts" })
}

fn task(id: &str, host: &str, gpu: u32) -> Task {
    Task {
        ports: Vec::new(),
        id: id.into(),
        service: "embedder".into(),
        family: "embedder".into(),
        revision: 1,
        host: host.into(),
        gpus: vec![gpu],
        shape: TaskShape {
            cpu_units: 2048,
            memory_mib: 4096,
            gpu: TaskGpu::Mps {
                clients: 1,
                memory_mib: 6144,
                compute_percent: 25,
                capped: true,
            },
        },
        state: TaskState::Pending,
        job: None,
        scrape: None,
    }
}

fn empty_plan(base_serial: u64) -> Value {
    json!({
        "format_version": "1.0", "cluster": CLUSTER, "base_serial": base_serial, "destroy": false,
        "resource_changes": [], "registrations": [], "launches": [], "retirements": [],
        "starts": [], "stops": [], "moves": [], "unplaced": [], "strays": [],
        "after": StoreState::default(), "cost": gpushare_core::plan::Cost::default(),
    })
}

fn to_plan(v: Value) -> Plan {
    serde_json::from_value(v).expect("plan")
}

fn create(addr: &str, after: Value) -> Value {
    json!({ "addr": addr, "action": "create", "before": null, "after": after, "changes": [] })
}

fn task_definition() -> Value {
    json!({ "container": [{
        "name": "server", "image": "ghcr.io/example/embedder:1.4", "cpu": 2048, "memory": 4096,
        "gpu": { "mps": { "memory": 6144, "max_compute_percent": 25 } }
    }]})
}

/// From an empty store: register, three resources, two hosts, five tasks (11 steps).
fn first_plan() -> Plan {
    let mut p = empty_plan(0);
    p["registrations"] =
        json!([{ "family": "embedder", "revision": 1, "spec": task_definition() }]);
    p["resource_changes"] = json!([
        create(
            "capacity_provider.l4",
            serde_json::to_value(pool()).expect("json")
        ),
        create("task_definition.embedder", task_definition()),
        create(
            "service.embedder",
            json!({ "task_definition": "embedder", "capacity_provider": "l4", "desired_count": 5 })
        ),
    ]);
    p["launches"] = json!([launch("h-1"), launch("h-2")]);
    let tasks = [
        task("t-1", "h-1", 0),
        task("t-2", "h-1", 0),
        task("t-3", "h-1", 1),
        task("t-4", "h-2", 0),
        task("t-5", "h-2", 0),
    ];
    p["starts"] = Value::Array(tasks.iter().map(|t| json!({ "task": t })).collect());
    to_plan(p)
}

/// Everything a crash must not duplicate or lose, in one comparable value.
#[derive(Debug, PartialEq)]
struct Summary {
    revisions: usize,
    /// `host=instance` for each stored host.
    hosts: Vec<String>,
    /// (task, host) for each stored task.
    tasks: Vec<(String, String)>,
    resources: Vec<String>,
    /// Instances in the local fleet file.
    instances: usize,
}

fn summary(state: &StoreState, env: &Env) -> Summary {
    Summary {
        revisions: state.revisions.get("embedder").map_or(0, Vec::len),
        hosts: state
            .hosts
            .values()
            .map(|h| format!("{}={}", h.id, h.instance_id.clone().unwrap_or_default()))
            .collect(),
        tasks: state
            .tasks
            .values()
            .map(|t| (t.id.clone(), t.host.clone()))
            .collect(),
        resources: state
            .resources
            .keys()
            .map(ResourceAddr::to_string)
            .collect(),
        instances: env.instances(),
    }
}

#[tokio::test]
async fn apply_creates_everything_once_and_an_empty_plan_changes_nothing() {
    let env = Env::new();
    let plan = first_plan();
    assert_eq!(plan.steps().len(), 11);
    let events = Mutex::new(Vec::new());
    let record = |e: &ProgressEvent| events.lock().expect("events").push(e.clone());
    let mut ctx = env.ctx();
    ctx.progress = Some(&record);
    let report = apply::apply(&plan, &ctx).await.expect("apply");
    assert_eq!(
        (
            report.changed_steps,
            report.skipped_steps,
            report.resumed_steps,
            report.serial
        ),
        (11, 0, 0, 11)
    );
    assert_eq!(report.launched, ["h-1", "h-2"]);

    let st = env.state().await;
    assert_eq!((st.serial, st.cluster.as_str()), (11, CLUSTER));
    assert_eq!(st.hosts.len(), 2);
    assert!(st.hosts.values().all(|h| h
        .instance_id
        .as_deref()
        .is_some_and(|i| i.starts_with("i-local-"))));
    assert!(st
        .hosts
        .values()
        .all(|h| h.state == HostState::Running && h.zone.is_some()));
    assert_eq!(st.tasks.len(), 5);
    assert!(st.tasks.values().all(|t| t.state == TaskState::Pending));
    assert_eq!(st.revisions["embedder"].len(), 1);
    assert_eq!(st.resources.len(), 3);
    assert_eq!(env.instances(), 2);
    assert_eq!(env.store.read_journal().await.expect("journal"), None);
    assert_eq!(
        env.store.lock_info().expect("lock record"),
        None,
        "the lock is released"
    );

    let events = events.into_inner().expect("events");
    let done: Vec<usize> = events
        .iter()
        .filter_map(|e| {
            if let ProgressEvent::StepDone { index, .. } = e {
                Some(*index)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(done, (1..=11).collect::<Vec<_>>());
    assert_eq!(
        events.last(),
        Some(&ProgressEvent::Finished {
            total: 11,
            serial: 11
        })
    );

    // The same plan again is stale (it was made from serial 0).
    match apply::apply(&plan, &env.ctx()).await {
        Err(ApplyError::Stale {
            plan_serial: 0,
            store_serial: 11,
        }) => {}
        other => panic!("expected Stale, got {other:?}"),
    }
    // An empty plan from the current serial changes nothing.
    let report = apply::apply(&to_plan(empty_plan(11)), &env.ctx())
        .await
        .expect("empty apply");
    assert_eq!((report.changed_steps, report.serial), (0, 11));
    assert_eq!(env.state().await, st);
    assert_eq!(env.instances(), 2);

    // Agents then observe: the tasks run, MPS is healthy, no strays.
    common::agents_round(&env.store, &env.cloud, 1000).await;
    let live = observe(&env.store, &env.cloud, CLUSTER, 1001)
        .await
        .expect("observe");
    assert!(live.strays.is_empty());
    common::assert_all_running_and_healthy(&live);
    assert!(live
        .state
        .hosts
        .values()
        .all(|h| h.last_heartbeat == Some(1000)));
}

/// The state with its serial zeroed (the number of commits depends on batching).
fn unserialed(mut st: StoreState) -> StoreState {
    st.serial = 0;
    st
}

/// Crash at every step, at every point of the step, with one commit per step and
/// with batched commits, then finish with `resume` (what `gpushare apply` does
/// first) or by applying the same plan again (the two alternate by step, to keep
/// the test short): the end state is that of an uninterrupted apply, with no
/// duplicate host or task.
#[tokio::test]
async fn a_crash_at_any_step_and_point_is_finished_without_duplicates() {
    let plan = first_plan();
    let total = plan.steps().len();
    for batch in [1, apply::DEFAULT_MAX_BATCH] {
        let reference = {
            let env = Env::new();
            apply::apply(&plan, &env.ctx_batched(batch))
                .await
                .expect("uninterrupted apply");
            let st = env.state().await;
            let sum = summary(&st, &env);
            (st, sum)
        };
        for when in [
            FailpointWhen::BeforeCommit,
            FailpointWhen::AfterCommit,
            FailpointWhen::AfterStep,
        ] {
            for step in 1..=total {
                let at = format!("batch {batch}, {when:?}:{step}");
                let resume_with_apply = step % 2 == 0;
                let env = Env::new();
                let mut ctx = env.ctx_batched(batch);
                ctx.hooks.failpoint = Some(Failpoint { when, step });
                match apply::apply(&plan, &ctx).await {
                    Err(ApplyError::Failpoint { .. }) => {}
                    other => panic!("{at}: expected the failpoint, got {other:?}"),
                }
                let journal = env
                    .store
                    .read_journal()
                    .await
                    .expect("journal")
                    .expect("a crash leaves the journal");
                let step_done = if when == FailpointWhen::AfterStep {
                    step
                } else {
                    step - 1
                };
                if batch == 1 {
                    assert_eq!(journal.done, step_done, "{at}");
                } else {
                    // The journal is at the end of the last batch flushed: before the
                    // batch holding the step, or (after-step) at that batch's end.
                    let ok = if when == FailpointWhen::AfterStep {
                        journal.done >= step
                    } else {
                        journal.done < step
                    };
                    assert!(ok, "{at}: journal at {}", journal.done);
                }
                // A crashed process holds no lock any more (here: the guard was dropped).
                let report = if resume_with_apply {
                    apply::apply(&plan, &env.ctx_batched(batch))
                        .await
                        .expect("apply again resumes its own journal")
                } else {
                    apply::resume(&env.ctx_batched(batch))
                        .await
                        .expect("resume")
                        .expect("there was a journal")
                };
                assert_eq!(report.resumed_steps, total - journal.done, "{at}");
                let st = env.state().await;
                assert_eq!(
                    summary(&st, &env),
                    reference.1,
                    "{at} resume_with_apply={resume_with_apply}"
                );
                if batch == 1 {
                    assert_eq!(st, reference.0, "{at}: same state, same serial");
                } else {
                    assert_eq!(
                        unserialed(st),
                        unserialed(reference.0.clone()),
                        "{at}: same state"
                    );
                }
                assert_eq!(env.store.read_journal().await.expect("journal"), None);
                assert_eq!(
                    apply::resume(&env.ctx()).await.expect("resume"),
                    None,
                    "nothing left to resume"
                );
            }
        }
    }
}

/// With the default batching, steps that only touch the store share one commit:
/// the same end state in fewer state writes, every step still reported done.
#[tokio::test]
async fn batched_commits_give_the_same_state_in_fewer_writes() {
    let one_by_one = Env::new();
    apply::apply(&first_plan(), &one_by_one.ctx())
        .await
        .expect("apply");
    let env = Env::new();
    let events = Mutex::new(Vec::new());
    let record = |e: &ProgressEvent| events.lock().expect("events").push(e.clone());
    let mut ctx = env.ctx_batched(apply::DEFAULT_MAX_BATCH);
    ctx.progress = Some(&record);
    let report = apply::apply(&first_plan(), &ctx).await.expect("apply");
    // register + 3 resources | launch h-1 and h-2 (one wave) | 5 starts
    assert_eq!((report.changed_steps, report.serial), (11, 3));
    assert_eq!(
        unserialed(env.state().await),
        unserialed(one_by_one.state().await)
    );
    let done: Vec<usize> = events
        .into_inner()
        .expect("events")
        .iter()
        .filter_map(|e| match e {
            ProgressEvent::StepDone { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(done, (1..=11).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_stale_plan_is_refused_and_changes_nothing() {
    let env = Env::new();
    let moved = StoreState {
        serial: 1,
        cluster: CLUSTER.into(),
        ..StoreState::default()
    };
    env.store
        .commit(0, &moved)
        .await
        .expect("someone else applied");
    let e = apply::apply(&first_plan(), &env.ctx())
        .await
        .expect_err("stale");
    assert!(
        matches!(
            e,
            ApplyError::Stale {
                plan_serial: 0,
                store_serial: 1
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("run plan again"), "{e}");
    assert_eq!(env.state().await, moved);
    assert_eq!(
        env.store.lock_info().expect("lock record"),
        None,
        "the lock is released on refusal too"
    );
    assert_eq!(env.instances(), 0);
    assert_eq!(env.store.read_journal().await.expect("journal"), None);
}

#[tokio::test]
async fn a_plan_for_another_cluster_is_refused() {
    let env = Env::new();
    let other = StoreState {
        serial: 1,
        cluster: "training".into(),
        ..StoreState::default()
    };
    env.store.commit(0, &other).await.expect("commit");
    let mut p = serde_json::to_value(first_plan()).expect("json");
    p["base_serial"] = json!(1);
    let e = apply::apply(&to_plan(p), &env.ctx())
        .await
        .expect_err("wrong cluster");
    assert!(matches!(e, ApplyError::WrongCluster { .. }), "{e:?}");
    assert_eq!(env.instances(), 0);
}

/// A plan made from another state store (its store id in `after`) is refused: it
/// carries that store's launch tokens.
#[tokio::test]
async fn a_plan_made_from_another_store_is_refused() {
    let env = Env::new();
    let mut p = serde_json::to_value(first_plan()).expect("json");
    p["after"]["store_id"] = json!("ffffffffffffffff");
    let e = apply::apply(&to_plan(p), &env.ctx())
        .await
        .expect_err("another store's plan");
    assert!(matches!(e, ApplyError::WrongStore { .. }), "{e:?}");
    assert!(e.to_string().contains("ffffffffffffffff"), "{e}");
    assert_eq!(env.instances(), 0);
    // Its own id (or none, as in plans made before store identity) is fine.
    let mut p = serde_json::to_value(first_plan()).expect("json");
    p["after"]["store_id"] = json!(env.store.store_id());
    apply::apply(&to_plan(p), &env.ctx()).await.expect("apply");
}

#[tokio::test]
async fn cancelling_stops_between_steps_and_the_next_run_finishes() {
    let env = Env::new();
    let cancel = AtomicBool::new(false);
    let stop_after_7 = |e: &ProgressEvent| {
        if let ProgressEvent::StepDone { index: 7, .. } = e {
            cancel.store(true, Ordering::SeqCst);
        }
    };
    let mut ctx = env.ctx();
    ctx.progress = Some(&stop_after_7);
    ctx.cancel = Some(&cancel);
    let e = apply::apply(&first_plan(), &ctx)
        .await
        .expect_err("cancelled");
    assert!(
        matches!(e, ApplyError::Cancelled { done: 7, total: 11 }),
        "{e:?}"
    );
    let st = env.state().await;
    assert_eq!((st.serial, st.hosts.len(), st.tasks.len()), (7, 2, 1));
    assert_eq!(env.journal_done().await, Some(7));
    let report = apply::resume(&env.ctx())
        .await
        .expect("resume")
        .expect("journal");
    assert_eq!((report.resumed_steps, report.changed_steps), (4, 4));
    let st = env.state().await;
    assert_eq!((st.serial, st.hosts.len(), st.tasks.len()), (11, 2, 5));
    assert_eq!(env.instances(), 2);
}

#[tokio::test]
async fn a_new_plan_after_a_crash_finishes_the_old_one_then_is_refused_as_stale() {
    let env = Env::new();
    let mut ctx = env.ctx();
    ctx.hooks.failpoint = Some(Failpoint {
        when: FailpointWhen::BeforeCommit,
        step: 6,
    });
    assert!(matches!(
        apply::apply(&first_plan(), &ctx).await,
        Err(ApplyError::Failpoint { .. })
    ));
    // A plan made from the crashed state (serial 5) does not know the journal's remaining work.
    let e = apply::apply(&to_plan(empty_plan(5)), &env.ctx())
        .await
        .expect_err("refused");
    assert!(
        matches!(e, ApplyError::ResumedEarlierPlan { steps: 6 }),
        "{e:?}"
    );
    let st = env.state().await;
    assert_eq!((st.serial, st.hosts.len(), st.tasks.len()), (11, 2, 5));
    assert_eq!(env.instances(), 2);
    assert_eq!(env.store.read_journal().await.expect("journal"), None);
}

#[tokio::test]
async fn a_held_lock_makes_apply_fail_naming_the_holder() {
    let env = Env::new();
    let guard = env
        .store
        .lock("gpushare reconcile", Duration::from_secs(1))
        .await
        .expect("lock");
    let e = apply::apply(&first_plan(), &env.ctx())
        .await
        .expect_err("locked");
    let msg = format!(
        "{e}: {}",
        std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    assert!(msg.contains("gpushare reconcile"), "{msg}");
    assert_eq!(env.instances(), 0);
    assert_eq!(env.state().await.serial, 0);
    guard.release().await.expect("release");
    apply::apply(&first_plan(), &env.ctx())
        .await
        .expect("free now");
}

/// Move, stop, retire and delete, from the state the first plan left.
#[tokio::test]
async fn shrinking_moves_stops_retires_and_deletes() {
    let env = Env::new();
    apply::apply(&first_plan(), &env.ctx())
        .await
        .expect("first apply");
    common::agents_round(&env.store, &env.cloud, 10).await;
    let h1_instance = env.state().await.hosts["h-1"]
        .instance_id
        .clone()
        .expect("launched");

    let mut p = empty_plan(11);
    p["moves"] = json!([
        { "from_task": "t-1", "to": task("t-6", "h-2", 1), "reason": "host retired" },
        { "from_task": "t-2", "to": task("t-7", "h-2", 1), "reason": "host retired" },
    ]);
    p["stops"] = json!([{ "task_id": "t-3", "reason": "desired_count lowered" }]);
    p["retirements"] = json!([{ "host_id": "h-1", "reason": "empty" }]);
    p["resource_changes"] = json!([{
        "addr": "service.embedder", "action": "delete", "before": {}, "after": null, "changes": []
    }]);
    let plan = to_plan(p);
    let kinds: Vec<String> = plan
        .steps()
        .iter()
        .map(|s| {
            serde_json::to_value(s).expect("json")["step"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    // Stops at once come before the moves (which wait for their successors).
    assert_eq!(kinds, ["stop", "move", "move", "retire", "delete_resource"]);
    let report = apply::apply(&plan, &env.ctx()).await.expect("apply");
    assert_eq!(report.changed_steps, 5);

    let st = env.state().await;
    let tasks: Vec<(&str, &str)> = st
        .tasks
        .values()
        .map(|t| (t.id.as_str(), t.host.as_str()))
        .collect();
    assert_eq!(
        tasks,
        [
            ("t-4", "h-2"),
            ("t-5", "h-2"),
            ("t-6", "h-2"),
            ("t-7", "h-2")
        ]
    );
    assert_eq!(st.hosts.keys().collect::<Vec<_>>(), ["h-2"]);
    assert!(!st
        .resources
        .contains_key(&"service.embedder".parse().expect("addr")));
    let h1 = env
        .cloud
        .instances()
        .expect("fleet")
        .into_iter()
        .find(|i| i.instance_id == h1_instance)
        .expect("kept");
    assert_eq!(h1.state, HostState::Terminated);
    let reports = env.store.reports().await.expect("reports");
    assert_eq!(
        reports
            .iter()
            .map(|r| r.host_id.as_str())
            .collect::<Vec<_>>(),
        ["h-2"],
        "the retired host's report is gone"
    );
    let live = observe(&env.store, &env.cloud, CLUSTER, 20)
        .await
        .expect("observe");
    assert!(live.strays.is_empty(), "a terminated instance is no stray");

    // Re-running every step of that plan from its start (as a resume would) changes nothing.
    let j = Journal {
        plan: plan.clone(),
        done: 0,
        holder: "test".into(),
    };
    env.store.write_journal(&j).await.expect("journal");
    let report = apply::resume(&env.ctx())
        .await
        .expect("resume")
        .expect("journal");
    assert_eq!((report.changed_steps, report.skipped_steps), (0, 5));
    assert_eq!(env.state().await, st);
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}

#[tokio::test]
async fn an_unknown_instance_type_fails_the_preflight_with_nothing_changed() {
    let env = Env::new();
    let mut p = serde_json::to_value(first_plan()).expect("json");
    p["launches"][1]["host"]["instance_type"] = json!("g6.13xlarge");
    let e = apply::apply(&to_plan(p), &env.ctx())
        .await
        .expect_err("unknown type");
    assert!(matches!(e, ApplyError::Preflight { .. }), "{e:?}");
    let msg = error_chain(&e);
    assert!(
        msg.contains("g6.13xlarge") && msg.contains("g6.12xlarge"),
        "{msg}"
    );
    assert_eq!(env.instances(), 0);
    assert_eq!(env.journal_done().await, None);
    assert_eq!(env.state().await, StoreState::default());
}

/// A launch that fails after the preflight (here the fleet file turns unreadable
/// as the step starts) stops the apply, names the step, and keeps the journal at
/// the last committed step; the next run finishes once the cause is gone.
#[tokio::test]
async fn a_failing_launch_stops_the_apply_with_the_step_named_and_keeps_the_journal() {
    let env = Env::new();
    let fleet = env.cloud.fleet_path();
    let saved = Mutex::new(None);
    let break_fleet = |e: &ProgressEvent| {
        if let ProgressEvent::StepStarted { index: 6, .. } = e {
            *saved.lock().expect("saved") = std::fs::read(&fleet).ok();
            std::fs::write(&fleet, b"not json").expect("write");
        }
    };
    let mut ctx = env.ctx();
    ctx.progress = Some(&break_fleet);
    let e = apply::apply(&first_plan(), &ctx)
        .await
        .expect_err("launch fails");
    let msg = error_chain(&e);
    assert!(
        msg.contains("step 6 of 11")
            && msg.contains("launch host h-2")
            && msg.contains("local-fleet.json"),
        "{msg}"
    );
    assert_eq!(env.journal_done().await, Some(5));
    assert_eq!(env.state().await.hosts.len(), 1);
    let saved = saved
        .into_inner()
        .expect("saved")
        .expect("fleet file existed");
    std::fs::write(&fleet, saved).expect("repair");
    let report = apply::resume(&env.ctx())
        .await
        .expect("resume")
        .expect("journal");
    assert_eq!(report.resumed_steps, 6);
    assert_eq!(env.instances(), 2);
    assert_eq!(env.state().await.tasks.len(), 5);
}

/// Two appliers (separate store and cloud handles on one directory, as two
/// processes would have) race to apply the same plan: the lock serialises them,
/// the second finds the serial moved and refuses; nothing is launched twice.
#[test]
fn two_concurrent_applies_of_one_plan_apply_it_once() {
    let env = Env::new();
    let dir = env.store.dir().to_path_buf();
    let plan = first_plan();
    let results: Vec<Result<apply::ApplyReport, ApplyError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let dir = dir.clone();
                let plan = plan.clone();
                s.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    rt.block_on(async {
                        let store = FileStore::open(&dir).expect("store");
                        let cloud = LocalCloud::open(&dir).expect("cloud");
                        let mut ctx = ApplyContext::new(&store, &cloud);
                        ctx.lock_timeout = Duration::from_secs(60);
                        apply::apply(&plan, &ctx).await
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let stale = results
        .iter()
        .filter(|r| matches!(r, Err(ApplyError::Stale { plan_serial: 0, .. })))
        .count();
    assert_eq!((ok, stale), (1, 1), "{results:?}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let st = rt.block_on(env.state());
    assert_eq!((st.hosts.len(), st.tasks.len()), (2, 5));
    assert_eq!(env.instances(), 2);
}

/// A retire of a host that still has tasks is an error naming them, and changes
/// nothing: the planner stops a host's tasks before it retires the host (apply used
/// to drop them silently).
#[tokio::test]
async fn a_retire_of_a_host_with_tasks_fails_and_keeps_them() {
    let env = Env::new();
    apply::apply(&first_plan(), &env.ctx())
        .await
        .expect("first apply");
    let before = env.state().await;
    let mut p = empty_plan(before.serial);
    p["retirements"] = json!([{ "host_id": "h-1", "reason": "empty" }]);
    let e = apply::apply(&to_plan(p), &env.ctx())
        .await
        .expect_err("h-1 still has tasks");
    let msg = error_chain(&e);
    assert!(
        msg.contains("host h-1 still has tasks (t-1, t-2, t-3)"),
        "{msg}"
    );
    let after = env.state().await;
    assert_eq!(after.hosts, before.hosts);
    assert_eq!(after.tasks, before.tasks);
    assert!(env
        .cloud
        .instances()
        .expect("fleet")
        .iter()
        .all(|i| i.state != HostState::Terminated));
}

/// The cloud launches what the plan fixed and nothing else: the zone the plan
/// names is the host's zone; no zone from the cloud replaces it.
#[tokio::test]
async fn a_launch_lands_where_the_plan_put_it() {
    let env = Env::new();
    let mut p = serde_json::to_value(first_plan()).expect("json");
    p["launches"][1]["host"]["zone"] = json!("local-1c");
    apply::apply(&to_plan(p), &env.ctx()).await.expect("apply");
    let st = env.state().await;
    assert_eq!(st.hosts["h-1"].zone.as_deref(), Some("local-1a"));
    assert_eq!(st.hosts["h-2"].zone.as_deref(), Some("local-1c"));
    let zones: Vec<String> = env
        .cloud
        .instances()
        .expect("fleet")
        .into_iter()
        .map(|i| i.zone)
        .collect();
    assert_eq!(zones, ["local-1a", "local-1c"]);
}

/// Issue 49: a scaling step that sets the scrape of tasks placed before their
/// service tracked a Prometheus metric writes it on those tasks in the store (what
/// their agents read), beside the service's scaling record; the others are untouched.
#[tokio::test]
async fn a_scaling_step_sets_the_scrape_of_running_tasks_in_the_store() {
    let env = Env::new();
    apply::apply(&first_plan(), &env.ctx())
        .await
        .expect("first apply");
    let scrape =
        json!({ "metric": "vllm:num_requests_waiting", "port": "http", "path": "/metrics" });
    let mut p = empty_plan(11);
    p["scaling"] = json!([{
        "service": "embedder",
        "record": { "count": 5, "desired_count": 5 },
        "scrapes": [{ "task": "t-1", "scrape": scrape }, { "task": "t-4", "scrape": scrape }],
    }]);
    let report = apply::apply(&to_plan(p), &env.ctx()).await.expect("apply");
    assert_eq!(report.changed_steps, 1);
    let st = env.state().await;
    let scraped: Vec<&str> = st
        .tasks
        .values()
        .filter(|t| {
            t.scrape
                .as_ref()
                .is_some_and(|s| s.metric == "vllm:num_requests_waiting" && s.port == "http")
        })
        .map(|t| t.id.as_str())
        .collect();
    assert_eq!(scraped, ["t-1", "t-4"]);
    assert_eq!(st.scaling("embedder").map(|r| r.count), Some(5));
}
