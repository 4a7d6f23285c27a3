//! The lock contract both stores keep (the file store and a real etcd), checked once
//! for each with two handles on one store, as two processes would hold them: the
//! holder is named (command, pid and since) by a waiter that times out, and the lock
//! is free again after a release and after a guard is dropped without one (a
//! panicking holder). What each store records of its holder is checked here too;
//! the ways a store loses a holder (a killed process, an expired lease) are in each
//! store's own tests.

use gpushare_engine::store::{FileStore, LockGuard, Store, StoreError};
use gpushare_store_etcd::{EtcdOptions, EtcdStore};
use std::time::Duration;

/// `other` waits `locked_wait` for the lock `held` holds for "gpushare apply" (since
/// `since`) and is refused naming it; after the release it takes the lock within
/// `free_wait`, and again after dropping its guard without a release.
async fn contract(
    held: Box<dyn LockGuard>,
    since: &str,
    other: &dyn Store,
    locked_wait: Duration,
    free_wait: Duration,
) {
    let e = other
        .lock("gpushare plan", locked_wait)
        .await
        .err()
        .expect("locked");
    match &e {
        StoreError::Locked {
            holder, since: s, ..
        } => {
            assert!(
                holder.contains("gpushare apply")
                    && holder.contains(&std::process::id().to_string()),
                "{holder}"
            );
            assert_eq!(s, since);
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    held.release().await.expect("release");
    let g = other
        .lock("gpushare plan", free_wait)
        .await
        .expect("free after release");
    drop(g);
    other
        .lock("third", free_wait)
        .await
        .expect("free after drop")
        .release()
        .await
        .expect("release");
}

#[tokio::test]
async fn the_file_store_names_its_holder_and_frees_the_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    let g = s
        .lock("gpushare apply", Duration::from_secs(1))
        .await
        .expect("lock");
    let info = s.lock_info().expect("info").expect("record written");
    assert_eq!(
        (info.pid, info.command.as_str()),
        (std::process::id(), "gpushare apply")
    );
    // A dropped guard's OS lock goes with it at once: short waits.
    let other = FileStore::open(dir.path()).expect("open");
    let wait = Duration::from_millis(120);
    contract(g, &info.since, &other, wait, wait).await;
    assert_eq!(s.lock_info().expect("info"), None);
}

#[tokio::test]
async fn the_etcd_store_names_its_holder_and_frees_the_lock() {
    let etcd = gpushare_testkit::EtcdProcess::start();
    let open = || async {
        EtcdStore::open(&etcd.url("lock"), EtcdOptions::default())
            .await
            .expect("open the etcd store")
    };
    let s = open().await;
    let g = s
        .lock("gpushare apply", Duration::from_secs(1))
        .await
        .expect("lock");
    let info = s.lock_info().await.expect("info").expect("record written");
    assert_eq!(
        (info.pid, info.command.as_str()),
        (std::process::id(), "gpushare apply")
    );
    // A dropped guard's lease is revoked in the background: a longer wait for a free lock.
    let other = open().await;
    contract(
        g,
        &info.since,
        &other,
        Duration::from_millis(300),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(s.lock_info().await.expect("info"), None);
}
