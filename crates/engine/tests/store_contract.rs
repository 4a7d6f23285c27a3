//! The commit contract both stores keep (the file store and a real etcd), checked
//! once for each with two handles on one store, as two processes would hold them:
//! change-set commits compare and swap on the serial (a stale one is refused and
//! writes nothing), each handle sees the other's commits, whole-state commits and
//! change sets mix, a fresh handle loads what was committed, and the journal round
//! trips. The file store's own format (its log: torn lines, compaction, states
//! written before the log) is checked after.

use gpushare_core::model::{
    AppliedResource, Host, ResourceAddr, ResourceKind, StoreState, Task, TaskShape, TaskState,
};
use gpushare_engine::store::{ChangeSet, FileStore, Journal, Store, StoreError};
use gpushare_store_etcd::{EtcdOptions, EtcdStore};

fn task(id: &str, host: &str) -> Task {
    Task {
        ports: Vec::new(),
        id: id.into(),
        service: "web".into(),
        family: "web".into(),
        revision: 1,
        host: host.into(),
        gpus: vec![0],
        shape: TaskShape::default(),
        state: TaskState::Pending,
        job: None,
        scrape: None,
    }
}

fn host(id: &str) -> Host {
    serde_json::from_value(serde_json::json!({
        "id": id, "capacity_provider": "pool", "instance_type": "g6.12xlarge",
        "state": "running", "gpus": [], "cpu_units": 48, "memory_mib": 196608,
        "launch_token": format!("tok-{id}")
    }))
    .expect("a host from JSON")
}

/// The first change: a resource, a host and two tasks.
fn first() -> ChangeSet {
    let mut c = ChangeSet {
        serial: 1,
        cluster: "c1".into(),
        ..ChangeSet::default()
    };
    c.resources.insert(
        ResourceAddr::new(ResourceKind::Service, "web".to_string()),
        Some(AppliedResource::new(
            serde_json::json!({"desired_count": 2}),
        )),
    );
    c.hosts.insert("h-1".into(), Some(host("h-1")));
    c.tasks.insert("t-1".into(), Some(task("t-1", "h-1")));
    c.tasks.insert("t-2".into(), Some(task("t-2", "h-1")));
    c
}

/// `state` as `store` loads it: with its identity.
async fn expect(store: &dyn Store, state: &StoreState) {
    let mut want = state.clone();
    let got = store.load().await.expect("load");
    want.store_id = got.store_id.clone();
    assert_eq!(got, want, "{}", store.location());
}

async fn contract(a: &dyn Store, b: &dyn Store, fresh: &dyn Store) {
    let mut model = StoreState::default();
    expect(a, &model).await;
    // A change set from serial 0.
    a.commit_changes(0, &first()).await.expect("first commit");
    first().apply_to(&mut model);
    expect(b, &model).await;
    // The same base again: refused, nothing written.
    let mut stale = first();
    stale.tasks.insert("t-9".into(), Some(task("t-9", "h-1")));
    match a.commit_changes(0, &stale).await {
        Err(StoreError::Conflict { expected, found }) => assert_eq!((expected, found), (0, 1)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    match a.commit_changes(1, &stale).await {
        Err(StoreError::BadSerial { expected, given }) => assert_eq!((expected, given), (1, 1)),
        other => panic!("expected a bad serial, got {other:?}"),
    }
    expect(b, &model).await;
    // The other handle deletes one task and changes another; the first sees it.
    let mut second = ChangeSet {
        serial: 2,
        cluster: "c1".into(),
        ..ChangeSet::default()
    };
    second.tasks.insert("t-1".into(), None);
    second.tasks.insert("t-2".into(), Some(task("t-2", "h-2")));
    second.hosts.insert("h-2".into(), Some(host("h-2")));
    b.commit_changes(1, &second).await.expect("second commit");
    second.apply_to(&mut model);
    expect(a, &model).await;
    // The first handle's cached base is stale now: its commit over 1 is refused.
    assert!(matches!(
        a.commit_changes(1, &second).await,
        Err(StoreError::Conflict { found: 2, .. })
    ));
    // A whole state over change sets, then change sets over it.
    let mut whole = a.load().await.expect("load");
    whole.serial = 3;
    whole.hosts.remove("h-1");
    whole.tasks.insert("t-3".into(), task("t-3", "h-2"));
    a.commit(2, &whole).await.expect("whole commit");
    model = whole.clone();
    expect(b, &model).await;
    for serial in 4..40u64 {
        let mut c = ChangeSet {
            serial,
            cluster: "c1".into(),
            ..ChangeSet::default()
        };
        let id = format!("t-{serial}");
        c.tasks.insert(id.clone(), Some(task(&id, "h-2")));
        c.tasks.insert(format!("t-{}", serial - 1), None);
        let by: &dyn Store = if serial % 2 == 0 { a } else { b };
        by.commit_changes(serial - 1, &c).await.expect("commit");
        c.apply_to(&mut model);
    }
    expect(a, &model).await;
    expect(b, &model).await;
    // A handle opened after all this (a new process) loads the same.
    expect(fresh, &model).await;
    // The journal.
    assert_eq!(a.read_journal().await.expect("read"), None);
    let mut j = Journal {
        plan: gpushare_core::plan::Plan::default(),
        done: 0,
        holder: "gpushare apply".into(),
    };
    a.write_journal(&j).await.expect("write");
    j.done = 3;
    a.advance_journal(&j).await.expect("advance");
    assert_eq!(b.read_journal().await.expect("read"), Some(j));
    b.clear_journal().await.expect("clear");
    assert_eq!(a.read_journal().await.expect("read"), None);
}

#[tokio::test]
async fn the_file_store_keeps_the_commit_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = FileStore::open(dir.path()).expect("open");
    let b = FileStore::open(dir.path()).expect("open");
    // Opened before anything was written: it must still see everything afterwards.
    let fresh = FileStore::open(dir.path()).expect("open");
    contract(&a, &b, &fresh).await;
    let reopened = FileStore::open(dir.path()).expect("open");
    assert_eq!(reopened.load().await.expect("load").serial, 39);
}

#[tokio::test]
async fn the_etcd_store_keeps_the_commit_contract() {
    let etcd = gpushare_testkit::EtcdProcess::start();
    let open = || async {
        EtcdStore::open(&etcd.url("contract"), EtcdOptions::default())
            .await
            .expect("open the etcd store")
    };
    let (a, b, fresh) = (open().await, open().await, open().await);
    contract(&a, &b, &fresh).await;
    let reopened = open().await;
    assert_eq!(reopened.load().await.expect("load").serial, 39);
}

/// Two commits through one handle: serial 2 with t-1 and t-2.
async fn two_commits(s: &FileStore) -> StoreState {
    s.commit_changes(0, &first()).await.expect("commit 1");
    let mut c = ChangeSet {
        serial: 2,
        cluster: "c1".into(),
        ..ChangeSet::default()
    };
    c.tasks.insert("t-3".into(), Some(task("t-3", "h-1")));
    s.commit_changes(1, &c).await.expect("commit 2");
    s.load().await.expect("load")
}

#[tokio::test]
async fn a_torn_last_line_of_the_file_log_is_not_applied_and_is_cut_off() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    let state = two_commits(&s).await;
    let log = dir.path().join("state.log");
    assert!(log.exists(), "the second commit appends to the log");
    // A crash in the middle of an append: part of a line, no newline.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("open log");
    f.write_all(b"0123456789abcdef {\"serial\":3,\"clu")
        .expect("tear");
    drop(f);
    let other = FileStore::open(dir.path()).expect("open");
    assert_eq!(other.load().await.expect("load"), state);
    let mut c = ChangeSet {
        serial: 3,
        cluster: "c1".into(),
        ..ChangeSet::default()
    };
    c.tasks.insert("t-1".into(), None);
    other
        .commit_changes(2, &c)
        .await
        .expect("commit over a torn line");
    let text = std::fs::read_to_string(&log).expect("read log");
    assert!(
        !text.contains("\"clu\n") && !text.contains("{\"serial\":3,\"clu0"),
        "{text}"
    );
    let after = FileStore::open(dir.path())
        .expect("open")
        .load()
        .await
        .expect("load");
    assert_eq!(after.serial, 3);
    assert!(!after.tasks.contains_key("t-1") && after.tasks.contains_key("t-3"));
}

#[tokio::test]
async fn a_damaged_line_before_the_last_is_an_error_naming_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    two_commits(&s).await;
    let mut c = ChangeSet {
        serial: 3,
        cluster: "c1".into(),
        ..ChangeSet::default()
    };
    c.tasks.insert("t-4".into(), Some(task("t-4", "h-1")));
    s.commit_changes(2, &c).await.expect("commit 3");
    let log = dir.path().join("state.log");
    let text = std::fs::read_to_string(&log).expect("read");
    // Change one character inside the second line (the first change set).
    let at = text.find('\n').expect("header line") + 30;
    let mut bytes = text.into_bytes();
    bytes[at] = if bytes[at] == b'x' { b'y' } else { b'x' };
    std::fs::write(&log, bytes).expect("write");
    let e = FileStore::open(dir.path())
        .expect("open")
        .load()
        .await
        .expect_err("a damaged log is an error");
    assert!(
        matches!(&e, StoreError::Malformed { path, .. } if path.ends_with("state.log")),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_state_written_before_the_log_loads_and_its_first_commit_starts_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut old = StoreState {
        serial: 5,
        cluster: "c1".into(),
        ..StoreState::default()
    };
    old.tasks.insert("t-1".into(), task("t-1", "h-1"));
    std::fs::write(
        dir.path().join("state.json"),
        serde_json::to_vec_pretty(&old).expect("json"),
    )
    .expect("write an old state.json");
    let s = FileStore::open(dir.path()).expect("open");
    let loaded = s.load().await.expect("load");
    assert_eq!((loaded.serial, loaded.tasks.len()), (5, 1));
    let mut c = ChangeSet {
        serial: 6,
        cluster: "c1".into(),
        ..ChangeSet::default()
    };
    c.tasks.insert("t-2".into(), Some(task("t-2", "h-1")));
    s.commit_changes(5, &c).await.expect("commit");
    let before = std::fs::read(dir.path().join("state.json")).expect("read");
    assert_eq!(
        serde_json::from_slice::<StoreState>(&before)
            .expect("parse")
            .serial,
        5,
        "the snapshot is not rewritten by a small commit"
    );
    let after = FileStore::open(dir.path())
        .expect("open")
        .load()
        .await
        .expect("load");
    assert_eq!((after.serial, after.tasks.len()), (6, 2));
}

/// A change set at `serial` that writes the resource `big`, 5 MiB of `fill` (more
/// than the file store's fold threshold, 4 MiB), or deletes it (`None`).
fn big(serial: u64, fill: Option<&str>) -> ChangeSet {
    let mut c = ChangeSet {
        serial,
        cluster: "c1".into(),
        ..ChangeSet::default()
    };
    c.resources.insert(
        ResourceAddr::new(ResourceKind::Service, "big".to_string()),
        fill.map(|fill| AppliedResource::new(serde_json::json!({ "blob": fill.repeat(5 << 20) }))),
    );
    c
}

#[tokio::test]
async fn a_log_mostly_superseded_is_folded_into_the_snapshot_and_one_that_adds_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    two_commits(&s).await;
    let snapshot_len = || {
        std::fs::metadata(dir.path().join("state.json"))
            .expect("stat")
            .len()
    };
    let before = snapshot_len();
    // A record larger than the fold threshold (4 MiB), written three times. Only
    // added, a load reads each record once either way, so it stays in the log.
    s.commit_changes(2, &big(3, Some("x")))
        .await
        .expect("commit");
    assert!(dir.path().join("state.log").exists(), "not folded");
    assert_eq!(snapshot_len(), before, "the snapshot is not rewritten");
    // Rewritten twice: two of the three copies are superseded, more than half of what
    // a load would read.
    s.commit_changes(3, &big(4, Some("y")))
        .await
        .expect("commit");
    s.commit_changes(4, &big(5, Some("z")))
        .await
        .expect("commit");
    assert!(!dir.path().join("state.log").exists(), "folded");
    let snap: StoreState =
        serde_json::from_slice(&std::fs::read(dir.path().join("state.json")).expect("read"))
            .expect("parse");
    assert_eq!(
        (snap.serial, snap.tasks.len(), snap.resources.len()),
        (5, 3, 2)
    );
    let after = FileStore::open(dir.path())
        .expect("open")
        .load()
        .await
        .expect("load");
    assert_eq!(after, s.load().await.expect("load"));
    assert_eq!(
        after.resources[&ResourceAddr::new(ResourceKind::Service, "big".to_string())].attrs["blob"]
            .as_str()
            .map(|b| &b[..1]),
        Some("z")
    );
}

#[tokio::test]
async fn a_log_whose_records_were_deleted_is_folded_into_the_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    two_commits(&s).await;
    s.commit_changes(2, &big(3, Some("x")))
        .await
        .expect("commit");
    assert!(dir.path().join("state.log").exists(), "not folded");
    // The delete's line is small, but what it supersedes is not.
    s.commit_changes(3, &big(4, None)).await.expect("commit");
    assert!(!dir.path().join("state.log").exists(), "folded");
    let snap_len = std::fs::metadata(dir.path().join("state.json"))
        .expect("stat")
        .len();
    assert!(
        snap_len < 1 << 20,
        "the snapshot holds no blob: {snap_len} bytes"
    );
    let after = FileStore::open(dir.path())
        .expect("open")
        .load()
        .await
        .expect("load");
    assert_eq!((after.serial, after.resources.len()), (4, 1));
    assert_eq!(after, s.load().await.expect("load"));
}
