//! The controller's records (the agent API's CA and join tokens) in both stores (the
//! file store and a real etcd): absent until written, written compare-and-swap on
//! their version (a stale writer is refused and changes nothing), seen by a second
//! handle, and a bad name refused.

use gpushare_engine::store::{FileStore, Store, StoreError};
use gpushare_store_etcd::{EtcdOptions, EtcdStore};

async fn contract(a: &dyn Store, b: &dyn Store) {
    assert_eq!(a.get_record("agent-ca").await.expect("get"), None);
    let v1 = a.put_record("agent-ca", "one", 0).await.expect("create");
    assert!(v1 > 0);
    // A second creator lost the race.
    match b.put_record("agent-ca", "two", 0).await {
        Err(StoreError::RecordConflict {
            expected: 0, found, ..
        }) => assert_eq!(found, v1),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let seen = b
        .get_record("agent-ca")
        .await
        .expect("get")
        .expect("written");
    assert_eq!((seen.value.as_str(), seen.version), ("one", v1));
    let v2 = b.put_record("agent-ca", "two", v1).await.expect("update");
    assert!(v2 > v1);
    // The first handle's version is stale now.
    assert!(matches!(
        a.put_record("agent-ca", "three", v1).await,
        Err(StoreError::RecordConflict { .. })
    ));
    let seen = a
        .get_record("agent-ca")
        .await
        .expect("get")
        .expect("written");
    assert_eq!((seen.value.as_str(), seen.version), ("two", v2));
    assert!(matches!(
        a.put_record("../state", "x", 0).await,
        Err(StoreError::InvalidKey { .. })
    ));
}

#[tokio::test]
async fn the_file_store_keeps_records_compare_and_swap_in_private_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let a = FileStore::open(dir.path()).expect("open");
    let b = FileStore::open(dir.path()).expect("open");
    contract(&a, &b).await;
    let mode = std::fs::metadata(dir.path().join("records/agent-ca.json"))
        .expect("record file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn the_etcd_store_keeps_records_compare_and_swap() {
    let etcd = gpushare_testkit::EtcdProcess::start();
    let a = EtcdStore::open(&etcd.url("records"), EtcdOptions::default())
        .await
        .expect("open");
    let b = EtcdStore::open(&etcd.url("records"), EtcdOptions::default())
        .await
        .expect("open");
    contract(&a, &b).await;
}
