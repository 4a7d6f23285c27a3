//! Moves that wait for their successors to be reported running.

use super::{agents_round, count, desired, opts, Env, StoreFactory, CLUSTER};
use gpushare_core::model::Desired;
use gpushare_core::plan::Plan;
use gpushare_engine::apply::{self, ApplyError, MoveWait};
use gpushare_engine::cloud::Fault;
use std::time::Duration;

/// Waiting up to `timeout` for the successors, polling the store every 20 ms (no
/// agent API: the test runs the agents' rounds itself).
fn polled(timeout: Duration) -> MoveWait<'static> {
    MoveWait {
        timeout,
        poll: Duration::from_millis(20),
        agents: None,
        ..MoveWait::NONE
    }
}

/// A sick host's tasks moved, with apply waiting for the successors ([`MoveWait`]).
/// Returns the environment (at the plan), the plan and the moves' (old, new) ids.
async fn sick_host_plan(stores: &dyn StoreFactory) -> (Env, Desired, Plan) {
    let mut env = Env::new(stores).await;
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
pub async fn a_move_stops_the_old_task_only_after_its_successor_is_reported_running(
    stores: &dyn StoreFactory,
) {
    let (env, _, p) = sick_host_plan(stores).await;
    let pairs: Vec<(String, String)> = p
        .moves
        .iter()
        .map(|m| (m.from_task.clone(), m.to.id.clone()))
        .collect();
    let mut ctx = env.ctx();
    ctx.moves = polled(Duration::from_secs(30));
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
        agents_round(&env.store, &env.cloud, env.now + 1).await;
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
pub async fn a_move_whose_successor_never_runs_keeps_the_old_task_and_says_so(
    stores: &dyn StoreFactory,
) {
    let (env, _, p) = sick_host_plan(stores).await;
    let mut ctx = env.ctx();
    ctx.moves = polled(Duration::from_millis(300));
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
pub async fn an_apply_interrupted_while_waiting_for_moves_is_finished_by_the_next_run(
    stores: &dyn StoreFactory,
) {
    let (env, _, p) = sick_host_plan(stores).await;
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let mut ctx = env.ctx();
    ctx.cancel = Some(&cancel);
    ctx.moves = polled(Duration::from_secs(30));
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
    ctx.moves = polled(Duration::from_secs(30));
    let agents = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        agents_round(&env.store, &env.cloud, env.now + 1).await;
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
