//! Converge, scale, replace sick and silent hosts, finish a crashed apply, destroy.

use super::CLUSTER;
use super::{assert_all_running_and_healthy, count, desired, opts, Env, StoreFactory};
use gpushare_core::model::MpsHealth;
use gpushare_core::plan::{self, Options};
use gpushare_engine::apply::{self, ApplyError, Failpoint, FailpointWhen};
use gpushare_engine::cloud::Fault;

pub async fn converges_then_plans_nothing_then_scales_by_the_delta(stores: &dyn StoreFactory) {
    let mut env = Env::new(stores).await;
    let d = desired(6, 2);
    let (p, report) = env.apply(&d, &opts()).await;
    assert!(!p.launches.is_empty() && p.starts.len() == 8, "{p:?}");
    assert_eq!(report.changed_steps, p.steps().len());
    env.assert_consistent().await;
    let st = env.state().await;
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (6, 2));

    let (live, again) = env.plan(&d, &opts()).await;
    assert!(again.is_empty(), "second plan should be empty: {again:?}");
    assert_all_running_and_healthy(&live);
    assert_eq!(
        env.store.reports().await.expect("reports").len(),
        st.hosts.len(),
        "every host's agent reported into the store"
    );

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

pub async fn a_host_whose_mps_daemon_is_down_is_replaced_start_before_stop(
    stores: &dyn StoreFactory,
) {
    let mut env = Env::new(stores).await;
    let (d, sick) = env.settled_fleet().await;
    let before = env.state().await;
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
    assert_all_running_and_healthy(&live);
}

/// A crash in the middle of a planner-made apply, at each point of the launch step
/// and of a start step leaves a journal in the store; the CLI's order (resume,
/// observe, plan, apply), from a new handle on the store, then finishes the job and
/// the next plan is empty.
pub async fn a_crash_mid_apply_is_finished_by_the_next_run(stores: &dyn StoreFactory) {
    for when in [
        FailpointWhen::BeforeCommit,
        FailpointWhen::AfterCommit,
        FailpointWhen::AfterStep,
    ] {
        for at_launch in [true, false] {
            let mut env = Env::new(stores).await;
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
            // The next run is another process (or machine): a new handle on the store.
            env.store = stores.open(&env.name).await;
            assert!(
                env.store.read_journal().await.expect("journal").is_some(),
                "{when:?}:{step}: the journal is in the store"
            );
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

pub async fn destroy_terminates_every_host(stores: &dyn StoreFactory) {
    let mut env = Env::new(stores).await;
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
    assert_eq!(env.store.read_journal().await.expect("journal"), None);
    assert!(env.plan(&d, &destroy).await.1.is_empty());
}

/// A host whose agent falls silent keeps its last heartbeat; once that is older
/// than the heartbeat timeout the host is replaced, its tasks moved.
pub async fn a_silent_host_is_replaced_after_the_heartbeat_timeout(stores: &dyn StoreFactory) {
    let mut env = Env::new(stores).await;
    let (d, silent) = env.settled_fleet().await;
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
