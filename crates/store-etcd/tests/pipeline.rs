//! The engine's pipeline (observe -> the real planner -> journalled apply -> agents)
//! with the etcd store and the local simulated fleet: the store conformance suite
//! (gpushare_testkit_engine::conformance, which the file store runs too) on a real
//! etcd, and what only etcd can do: lose its server, or a member of a cluster, in the
//! middle of an apply.

use gpushare_engine::apply::{self, ProgressEvent};
use gpushare_store_etcd::{EtcdOptions, EtcdStore};
use gpushare_testkit_engine::conformance::{count, desired, opts, Env, EtcdStores};
use gpushare_testkit_engine::etcd::{Etcd, EtcdCluster};
use std::sync::Arc;
use std::time::Duration;

gpushare_testkit_engine::store_conformance_suite!(EtcdStores::start().await);

/// etcd is killed in the middle of an apply: the apply stops with an error and the
/// journal intact; once etcd is back, the same handle reconnects, the next run finishes
/// the journal, and the fleet has no duplicate host or task.
#[tokio::test]
async fn etcd_lost_mid_apply_stops_it_and_the_next_run_finishes_it() {
    let mut etcd = Etcd::start().await;
    let etcd_opts = EtcdOptions {
        request_timeout: Duration::from_secs(3),
        lock_ttl: Duration::from_secs(2),
        ..EtcdOptions::default()
    };
    let mut env = Env::with_store(Arc::new(etcd.store_with("lost", etcd_opts).await));
    let d = desired(6, 2);
    let p = env.plan(&d, &opts()).await.1;
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
    assert!(env.plan(&d, &opts()).await.1.is_empty());
    let st = env.state().await;
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (6, 2));
    assert_eq!(env.store.read_journal().await.expect("journal"), None);
}

/// A 3-member cluster loses a member (SIGKILL) in the middle of an apply: the apply
/// carries on against the other two and finishes.
#[tokio::test]
async fn a_3_member_cluster_losing_a_member_mid_apply_finishes_it() {
    let cluster = EtcdCluster::start(3).await;
    let store = EtcdStore::open(&cluster.url("ha"), EtcdOptions::default())
        .await
        .expect("open the cluster");
    let mut env = Env::with_store(Arc::new(store));
    let d = desired(6, 2);
    let p = env.plan(&d, &opts()).await.1;
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
    assert!(env.plan(&d, &opts()).await.1.is_empty());
    let st = env.state().await;
    assert_eq!((count(&st, "embedder"), count(&st, "reranker")), (6, 2));
}
