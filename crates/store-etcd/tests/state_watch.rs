//! `Store::watch_state` on a real etcd: the whole state, then each commit's change,
//! small commits and staged (large) ones alike, including one whose writer died
//! after the flip and the next commit that finishes its copy. A copy of the state
//! kept from the events alone always equals a fresh read.

use gpushare_testkit_engine::etcd as common;

use common::{big_state, Etcd};
use gpushare_core::model::StoreState;
use gpushare_engine::store::{StateEvent, StateEvents, Store};
use gpushare_store_etcd::{EtcdOptions, Failpoint};
use std::time::Duration;

fn tiny() -> EtcdOptions {
    EtcdOptions {
        max_txn_ops: 4,
        commit_ttl: Duration::from_secs(4),
        ..EtcdOptions::default()
    }
}

/// Apply events to `mirror` until it is at `serial`; returns how many changes came.
async fn follow_to(events: &mut StateEvents, mirror: &mut StoreState, serial: u64) -> usize {
    let mut changes = 0;
    while mirror.serial != serial {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("an event in time")
            .expect("the watch is open")
            .expect("no error");
        match ev {
            StateEvent::Whole(s) => *mirror = StoreState::clone(&s),
            StateEvent::Change(c) => {
                changes += 1;
                mirror.serial = c.serial;
                mirror.cluster = c.cluster;
                for (id, h) in c.hosts {
                    match h {
                        Some(h) => mirror.hosts.insert(id, h),
                        None => mirror.hosts.remove(&id),
                    };
                }
                for (id, t) in c.tasks {
                    match t {
                        Some(t) => mirror.tasks.insert(id, t),
                        None => mirror.tasks.remove(&id),
                    };
                }
                for (f, r) in c.revisions {
                    match r {
                        Some(r) => mirror.revisions.insert(f, r),
                        None => mirror.revisions.remove(&f),
                    };
                }
            }
        }
    }
    changes
}

async fn assert_same(store: &dyn Store, mirror: &StoreState) {
    let fresh = store.load().await.expect("load");
    assert_eq!(fresh.serial, mirror.serial);
    assert_eq!(fresh.cluster, mirror.cluster);
    assert_eq!(fresh.hosts, mirror.hosts);
    assert_eq!(fresh.tasks, mirror.tasks);
    assert_eq!(fresh.revisions, mirror.revisions);
}

#[tokio::test]
async fn a_state_watch_follows_small_and_staged_commits() {
    let etcd = Etcd::start().await;
    let s = etcd.store("sw").await;
    let mut events = s.watch_state().await.expect("watch").expect("etcd has one");
    let mut mirror = StoreState {
        serial: u64::MAX,
        ..StoreState::default()
    };
    follow_to(&mut events, &mut mirror, 0).await;
    assert!(mirror.tasks.is_empty());

    // A small commit, then one that changes one task and removes another.
    let mut st = big_state(1, 3, 9);
    st.cluster = "c".into();
    s.commit(0, &st).await.expect("commit");
    follow_to(&mut events, &mut mirror, 1).await;
    assert_same(&s, &mirror).await;
    st.serial = 2;
    st.tasks.get_mut("t-000000").expect("t0").host = "h-00002".into();
    st.tasks.remove("t-000001");
    s.commit(1, &st).await.expect("commit");
    follow_to(&mut events, &mut mirror, 2).await;
    assert_same(&s, &mirror).await;

    // A staged commit whose writer dies after the flip: the change is seen at the
    // flip; the next writer's commit (which finishes the copy) is seen whole.
    let big = etcd.store_with("sw", tiny()).await;
    let mut st = big.load().await.expect("load");
    st.serial = 3;
    for t in st.tasks.values_mut() {
        t.host = "h-00001".into();
    }
    st.hosts.remove("h-00000");
    big.set_failpoint(Some(Failpoint::AfterFlip));
    big.commit(2, &st).await.expect("flipped");
    follow_to(&mut events, &mut mirror, 3).await;
    assert_same(&s, &mirror).await;
    let next = etcd.store_with("sw", tiny()).await;
    let mut st = next.load().await.expect("load");
    st.serial = 4;
    for t in st.tasks.values_mut().take(5) {
        t.host = "h-00002".into();
    }
    next.commit(3, &st)
        .await
        .expect("commit after the dead writer");
    follow_to(&mut events, &mut mirror, 4).await;
    assert_same(&s, &mirror).await;
    // A whole staged commit, finished by its writer.
    let mut st = next.load().await.expect("load");
    st.serial = 5;
    st.tasks.clear();
    next.commit(4, &st).await.expect("staged commit");
    follow_to(&mut events, &mut mirror, 5).await;
    assert_same(&s, &mirror).await;
    // The copy and the finish that follow the flip change nothing more.
    let quiet = tokio::time::timeout(Duration::from_millis(500), events.recv()).await;
    assert!(
        quiet.is_err(),
        "a change after the last commit: {:?}",
        quiet.ok().flatten().map(|e| e.map(|e| match e {
            StateEvent::Whole(_) => "whole".to_string(),
            StateEvent::Change(c) => format!("{c:?}"),
        }))
    );
}
