//! The etcd store against a real etcd (Debian's etcd-server, started per test).

use common::Anonymous as _;
use gpushare_testkit_engine::etcd as common;

use common::{big_state, empty_plan, task, Etcd};
use gpushare_core::model::{HostReport, MpsHealth, StoreState, TaskState};
use gpushare_engine::store::{Journal, Store, StoreError};
use gpushare_store_etcd::client::PutRequest;
use gpushare_store_etcd::{EtcdOptions, EtcdStore, Failpoint, OpenError};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::time::{Duration, Instant};

fn state(serial: u64, cluster: &str) -> StoreState {
    StoreState {
        serial,
        cluster: cluster.into(),
        ..StoreState::default()
    }
}

/// Options that make the staged (large) commit path run on small states.
fn tiny_txns() -> EtcdOptions {
    EtcdOptions {
        max_txn_ops: 8,
        commit_ttl: Duration::from_secs(4),
        ..EtcdOptions::default()
    }
}

/// Store identity (the security issue's rule: launch tokens and instance tags carry
/// it, so two stores of one cluster name never touch each other's instances).
#[tokio::test]
async fn a_store_gets_one_random_identity_that_every_handle_loads() {
    let etcd = Etcd::start().await;
    let (a, b) = tokio::join!(etcd.store("ident"), etcd.store("ident"));
    let id = a.store_id();
    assert_eq!(id.len(), 16, "{id:?}");
    assert_eq!(b.store_id(), id, "concurrent first opens agree");
    assert_eq!(a.load().await.expect("load").store_id, id);
    let again = etcd.store("ident").await;
    assert_eq!(again.load().await.expect("load").store_id, id);
    let other = etcd.store("other-team").await;
    assert_ne!(other.store_id(), id, "another prefix is another store");
}

/// Capacity refusals (issue 14's gather-then-plan) are part of the state: committed,
/// loaded by another handle, on the small and the staged commit path alike.
#[tokio::test]
async fn capacity_refusals_round_trip_with_the_state() {
    let etcd = Etcd::start().await;
    let refusal = gpushare_core::facts::CapacityRefusal {
        instance_type: "g6.xlarge".into(),
        subnet: Some("subnet-b".into()),
        zone: Some("us-east-1b".into()),
        at: 1_700_000_000,
    };
    for (name, opts) in [("small", EtcdOptions::default()), ("staged", tiny_txns())] {
        let s = etcd.store_with(name, opts.clone()).await;
        let mut st = big_state(1, 4, 20);
        st.capacity_refusals = vec![refusal.clone()];
        s.commit(0, &st).await.expect("commit");
        let loaded = etcd
            .store_with(name, opts)
            .await
            .load()
            .await
            .expect("load");
        assert_eq!(loaded.capacity_refusals, vec![refusal.clone()], "{name}");
        assert_eq!(loaded.anon(), st, "{name}");
    }
}

#[tokio::test]
async fn empty_store_loads_serial_zero_and_commits_compare_and_swap() {
    let etcd = Etcd::start().await;
    let s = etcd.store("gpushare/a").await;
    assert_eq!(s.location(), etcd.url("gpushare/a"));
    assert_eq!(s.load().await.expect("load").anon(), StoreState::default());
    s.commit(0, &state(1, "a")).await.expect("first commit");
    assert_eq!(s.load().await.expect("load").cluster, "a");
    match s.commit(0, &state(1, "b")).await {
        Err(StoreError::Conflict {
            expected: 0,
            found: 1,
        }) => {}
        other => panic!("expected a conflict, got {other:?}"),
    }
    match s.commit(1, &state(5, "b")).await {
        Err(StoreError::BadSerial {
            expected: 1,
            given: 5,
        }) => {}
        other => panic!("expected BadSerial, got {other:?}"),
    }
    assert_eq!(s.load().await.expect("load").anon(), state(1, "a"));
    s.commit(1, &state(2, "b")).await.expect("second commit");
    // Another handle (another process, as far as etcd knows) sees it; other prefixes don't.
    let other = etcd.store("gpushare/a").await;
    assert_eq!(other.load().await.expect("load").serial, 2);
    let elsewhere = etcd.store("gpushare/b").await;
    assert_eq!(elsewhere.load().await.expect("load").serial, 0);
}

/// Two writers read the same serial; the one that commits second loses, and nothing
/// of its state is written, on both the one-transaction and the staged path.
#[tokio::test]
async fn a_writer_that_lost_the_race_gets_a_conflict_and_writes_nothing() {
    let etcd = Etcd::start().await;
    for (prefix, opts) in [("small", EtcdOptions::default()), ("staged", tiny_txns())] {
        let a = etcd.store_with(prefix, opts.clone()).await;
        let b = etcd.store_with(prefix, opts).await;
        a.commit(0, &big_state(1, 5, 40)).await.expect("seed");
        let mut sa = a.load().await.expect("load a");
        let mut sb = b.load().await.expect("load b");
        sa.serial = 2;
        sb.serial = 2;
        // a: every task moves to host 0; b: every task is stopped and 10 are removed.
        for t in sa.tasks.values_mut() {
            t.host = "h-00000".into();
        }
        for t in sb.tasks.values_mut() {
            t.state = TaskState::Stopped;
        }
        for i in 0..10 {
            sb.tasks.remove(&format!("t-{i:06}"));
        }
        a.commit(1, &sa).await.expect("a wins");
        match b.commit(1, &sb).await {
            Err(StoreError::Conflict {
                expected: 1,
                found: 2,
            }) => {}
            other => panic!("{prefix}: expected a conflict, got {other:?}"),
        }
        let fresh = etcd.store(prefix).await;
        assert_eq!(
            fresh.load().await.expect("load").anon(),
            sa.clone().anon(),
            "{prefix}"
        );
        assert_eq!(
            etcd.count(&format!("{prefix}/state/d/task/")).await,
            40,
            "{prefix}: no half write"
        );
        assert_eq!(etcd.count(&format!("{prefix}/state/stage/")).await, 0);
        assert_eq!(etcd.count(&format!("{prefix}/commit")).await, 0);
    }
}

/// Writers on their own connections increment the serial through compare-and-swap: no
/// update is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_never_lose_an_update() {
    let etcd = Etcd::start().await;
    let mut handles = Vec::new();
    for n in 0..4 {
        let s = etcd.store("race").await;
        handles.push(tokio::spawn(async move {
            let mut conflicts = 0;
            for _ in 0..10 {
                loop {
                    let mut st = s.load().await.expect("load");
                    let expected = st.serial;
                    st.serial += 1;
                    st.cluster = format!("writer-{n}");
                    let t = task(st.serial as usize, 3);
                    st.tasks.insert(t.id.clone(), t);
                    match s.commit(expected, &st).await {
                        Ok(()) => break,
                        Err(StoreError::Conflict { .. }) => conflicts += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            conflicts
        }));
    }
    for h in handles {
        h.await.expect("writer");
    }
    let st = etcd.store("race").await.load().await.expect("load");
    assert_eq!(st.serial, 40);
    assert_eq!(st.tasks.len(), 40, "every writer's task is there");
}

/// Writers racing with large (staged) commits: each waits for the other's claim or
/// loses with a conflict; no update is lost and nothing staged is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_large_commits_never_lose_an_update() {
    let etcd = Etcd::start().await;
    let mut handles = Vec::new();
    for n in 0..3 {
        let s = etcd.store_with("race-big", tiny_txns()).await;
        handles.push(tokio::spawn(async move {
            for _ in 0..3 {
                loop {
                    let mut st = s.load().await.expect("load");
                    let expected = st.serial;
                    st.serial += 1;
                    // Every task rewritten: far more keys than one transaction takes.
                    st.tasks.clear();
                    for i in 0..30 {
                        let mut t = task(i, 3);
                        t.service = format!("writer-{n}-serial-{}", st.serial);
                        st.tasks.insert(t.id.clone(), t);
                    }
                    match s.commit(expected, &st).await {
                        Ok(()) => break,
                        Err(StoreError::Conflict { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("writer");
    }
    let st = etcd.store("race-big").await.load().await.expect("load");
    assert_eq!(st.serial, 9);
    let services: std::collections::BTreeSet<_> = st.tasks.values().map(|t| &t.service).collect();
    assert_eq!(services.len(), 1, "one commit's tasks, whole: {services:?}");
    assert_eq!(etcd.count("race-big/state/stage/").await, 0);
    assert_eq!(etcd.count("race-big/commit").await, 0);
}

/// A writer that dies while staging a large commit leaves the state as it was; the
/// next writer waits for its claim to expire and commits.
#[tokio::test]
async fn a_large_commit_that_dies_before_the_flip_changes_nothing() {
    let etcd = Etcd::start().await;
    let a = etcd.store_with("crash1", tiny_txns()).await;
    let before = big_state(1, 4, 30);
    a.commit(0, &before).await.expect("seed");
    a.set_failpoint(Some(Failpoint::BeforeFlip));
    let mut next = before.clone();
    next.serial = 2;
    next.tasks.clear();
    a.commit(1, &next).await.expect_err("died before the flip");
    assert!(
        etcd.count("crash1/state/stage/").await > 0,
        "staged keys left"
    );
    let b = etcd.store_with("crash1", tiny_txns()).await;
    assert_eq!(
        b.load().await.expect("load").anon(),
        before,
        "nothing visible"
    );
    let mut other = before.clone();
    other.serial = 2;
    other.cluster = "b".into();
    b.commit(1, &other)
        .await
        .expect("commits after the claim expires");
    assert_eq!(
        etcd.store("crash1")
            .await
            .load()
            .await
            .expect("load")
            .anon(),
        other
    );
    assert_eq!(etcd.count("crash1/state/stage/").await, 0, "stage cleaned");
}

/// A writer that dies after the flip has committed: every reader sees the new state
/// whole, and the next commit finishes the copy.
#[tokio::test]
async fn a_large_commit_that_dies_after_the_flip_is_committed_and_finished_by_the_next() {
    let etcd = Etcd::start().await;
    let a = etcd.store_with("crash2", tiny_txns()).await;
    let before = big_state(1, 4, 30);
    a.commit(0, &before).await.expect("seed");
    a.set_failpoint(Some(Failpoint::AfterFlip));
    let mut next = big_state(2, 3, 25);
    for t in next.tasks.values_mut() {
        t.state = TaskState::Pending;
    }
    a.commit(1, &next).await.expect("committed at the flip");
    let b = etcd.store_with("crash2", tiny_txns()).await;
    assert_eq!(
        b.load().await.expect("load").anon(),
        next,
        "the overlay is the new state"
    );
    let mut then = next.clone();
    then.serial = 3;
    then.tasks.remove("t-000001");
    b.commit(2, &then).await.expect("next commit");
    assert_eq!(
        etcd.store("crash2")
            .await
            .load()
            .await
            .expect("load")
            .anon(),
        then
    );
    assert_eq!(etcd.count("crash2/state/stage/").await, 0);
    assert_eq!(etcd.count("crash2/state/d/task/").await, 24);
    assert_eq!(etcd.count("crash2/state/d/host/").await, 3);
}

/// A load of a state whose `state/meta` did not change is served from the handle's
/// memory (shown by a value changed behind the store's back, which only a fresh handle
/// sees); every commit, small, large, or large and interrupted after its flip, is read
/// anew by the next load.
#[tokio::test]
async fn an_unchanged_state_loads_from_memory_and_every_commit_is_read_anew() {
    let etcd = Etcd::start().await;
    let a = etcd.store_with("cached", tiny_txns()).await;
    let b = etcd.store_with("cached", tiny_txns()).await;
    let s1 = big_state(1, 4, 30);
    a.commit(0, &s1).await.expect("large commit");
    assert_eq!(b.load().await.expect("load").anon(), s1);

    // Behind the store's back (no meta write): b keeps what it read, a new handle reads it.
    let mut edited = s1.tasks["t-000001"].clone();
    edited.state = TaskState::Failed;
    let raw = etcd.client().await;
    raw.put(PutRequest::new(
        "cached/state/d/task/t-000001",
        serde_json::to_vec(&edited).expect("json"),
    ))
    .await
    .expect("raw put");
    assert_eq!(
        b.load().await.expect("load").anon(),
        s1,
        "served from memory"
    );
    let shared = b.load_shared().await.expect("shared load");
    assert!(
        std::sync::Arc::ptr_eq(&shared, &b.load_shared().await.expect("again")),
        "a shared load of an unchanged state is the kept one, not a copy"
    );
    assert_eq!(shared.store_id, b.store_id());
    let fresh = etcd.store_with("cached", tiny_txns()).await;
    assert_eq!(
        fresh.load().await.expect("load").tasks["t-000001"].state,
        TaskState::Failed
    );
    let seen = fresh.load().await.expect("load");

    // A small commit.
    let mut s2 = seen.anon();
    s2.serial = 2;
    s2.cluster = "small".into();
    a.commit(1, &s2).await.expect("small commit");
    assert_eq!(b.load().await.expect("load").anon(), s2);

    // A large one.
    let mut s3 = big_state(3, 3, 25);
    s3.cluster = "large".into();
    a.commit(2, &s3).await.expect("large commit");
    assert_eq!(b.load().await.expect("load").anon(), s3);

    // A large one whose writer dies after the flip, then the commit that finishes it.
    a.set_failpoint(Some(Failpoint::AfterFlip));
    let s4 = big_state(4, 2, 20);
    a.commit(3, &s4).await.expect("committed at the flip");
    assert_eq!(b.load().await.expect("load").anon(), s4);
    let mut s5 = s4.clone();
    s5.serial = 5;
    s5.tasks.remove("t-000002");
    fresh.commit(4, &s5).await.expect("finishing commit");
    assert_eq!(b.load().await.expect("load").anon(), s5);
    assert_eq!(b.load().await.expect("load").anon(), s5);
}

/// 10,000 tasks on 2,000 hosts round-trip through an etcd with default limits
/// (1.5 MiB requests, 128 operations per transaction).
#[tokio::test]
async fn a_10k_task_state_round_trips() {
    let etcd = Etcd::start().await;
    let s = etcd.store("big").await;
    let st = big_state(1, 2_000, 10_000);
    let t = Instant::now();
    s.commit(0, &st).await.expect("commit 10k");
    let commit_ms = t.elapsed().as_millis();
    let reader = etcd.store("big").await;
    let t = Instant::now();
    let loaded = reader.load().await.expect("load 10k");
    let load_ms = t.elapsed().as_millis();
    assert_eq!(loaded.clone().anon(), st);
    // An apply step: a few tasks change, one host goes.
    let mut step = loaded.clone();
    step.serial = 2;
    for i in 0..20 {
        if let Some(t) = step.tasks.get_mut(&format!("t-{i:06}")) {
            t.state = TaskState::Stopped;
        }
    }
    step.hosts.remove("h-01999");
    let step_bytes: usize = (0..20)
        .map(|i| {
            serde_json::to_vec(&step.tasks[&format!("t-{i:06}")])
                .expect("json")
                .len()
        })
        .sum();
    let before = reader.write_stats();
    let t = Instant::now();
    reader.commit(1, &step).await.expect("commit a step");
    let step_ms = t.elapsed().as_millis();
    let w = reader.write_stats();
    let (txns, puts, deletes, bytes) = (
        w.txns - before.txns,
        w.puts - before.puts,
        w.deletes - before.deletes,
        w.bytes - before.bytes,
    );
    assert_eq!(
        (txns, puts, deletes),
        (1, 21, 1),
        "one transaction: 20 tasks and the meta key put, one host deleted"
    );
    let first = s.write_stats();
    assert!(
        first.txns > 100 && first.puts >= 2 * 12_020,
        "staged then copied: {first:?}"
    );
    assert_eq!(s.load().await.expect("load").anon(), step.clone().anon());
    assert_eq!(etcd.count("big/state/d/task/").await, 10_000);
    // The same on the file store, for the ratio.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = gpushare_engine::store::FileStore::open(dir.path()).expect("file store");
    let t = Instant::now();
    file.commit(0, &st).await.expect("file commit");
    let file_commit_ms = t.elapsed().as_millis();
    let t = Instant::now();
    file.load().await.expect("file load");
    let file_load_ms = t.elapsed().as_millis();
    let t = Instant::now();
    file.commit(1, &step).await.expect("file step");
    let file_step_ms = t.elapsed().as_millis();
    eprintln!(
        "10k tasks / 2k hosts: etcd first commit {commit_ms} ms ({} txns, {} keys, {} bytes), load {load_ms} ms, \
         step commit {step_ms} ms ({txns} txn, {puts} puts, {deletes} delete, {bytes} bytes; {step_bytes} bytes of task values); \
         file store: {file_commit_ms} ms, {file_load_ms} ms, {file_step_ms} ms",
        first.txns, first.puts, first.bytes
    );
}

#[tokio::test]
async fn journal_write_read_advance_clear_including_one_over_the_request_limit() {
    let etcd = Etcd::start().await;
    let s = etcd.store("journal").await;
    assert_eq!(s.read_journal().await.expect("read"), None);
    s.clear_journal().await.expect("clearing nothing is fine");
    let mut j = Journal {
        plan: empty_plan(StoreState::default()),
        done: 3,
        holder: "test".into(),
    };
    s.write_journal(&j).await.expect("write");
    assert_eq!(s.read_journal().await.expect("read"), Some(j.clone()));
    j.done = 7;
    s.advance_journal(&j).await.expect("advance");
    let other = etcd.store("journal").await;
    assert_eq!(
        other.read_journal().await.expect("read").map(|j| j.done),
        Some(7),
        "another machine finishes it from where it got"
    );
    j.done = 0;
    s.write_journal(&j).await.expect("write");
    assert_eq!(
        other.read_journal().await.expect("read").map(|j| j.done),
        Some(0),
        "a new journal starts from its own position"
    );
    s.clear_journal().await.expect("clear");
    assert_eq!(s.read_journal().await.expect("read"), None);
    // A plan whose JSON is several MiB (its `after` holds 10,000 tasks).
    let big = Journal {
        plan: empty_plan(big_state(1, 2_000, 10_000)),
        done: 1,
        holder: "big".into(),
    };
    let bytes = serde_json::to_vec(&big).expect("json").len();
    assert!(bytes > 3 * 1024 * 1024, "{bytes}");
    s.write_journal(&big).await.expect("write big");
    let mut big2 = big.clone();
    big2.done = 2;
    other
        .advance_journal(&big2)
        .await
        .expect("advance from another handle");
    assert_eq!(s.read_journal().await.expect("read"), Some(big2));
    // A position is never written to another apply's journal.
    let third = etcd.store("journal").await;
    let mut stranger = big.clone();
    stranger.holder = "someone else".into();
    let e = third
        .advance_journal(&stranger)
        .await
        .expect_err("not this apply's journal");
    assert!(e.to_string().contains("journal/head"), "{e}");
    assert_eq!(
        s.read_journal().await.expect("read").map(|j| j.done),
        Some(2)
    );
    s.clear_journal().await.expect("clear");
    assert_eq!(etcd.count("journal/journal/").await, 0);
}

const CHILD_URL_ENV: &str = "GPUSHARE_TEST_ETCD_LOCK_CHILD_URL";

/// Leases short enough for tests to see them expire, long enough that a loaded
/// machine still refreshes them in time.
fn short_leases() -> EtcdOptions {
    EtcdOptions {
        lock_ttl: Duration::from_secs(3),
        report_ttl: Duration::from_secs(3),
        ..EtcdOptions::default()
    }
}

/// Run by `a_killed_holder_s_lock_expires_with_its_lease` in a child process.
#[tokio::test]
#[ignore = "helper process for a_killed_holder_s_lock_expires_with_its_lease; that test runs it"]
async fn child_process_holding_the_lock() {
    let url = std::env::var(CHILD_URL_ENV).expect("run by the parent test");
    let s = EtcdStore::open(&url, short_leases()).await.expect("open");
    let _g = s
        .lock("child holder", Duration::from_secs(5))
        .await
        .expect("lock");
    println!("LOCKED");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

/// Kills the child when dropped, so a failing test leaves no process behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_killed_holder_s_lock_expires_with_its_lease() {
    let etcd = Etcd::start().await;
    let exe = std::env::current_exe().expect("test binary");
    let child = std::process::Command::new(exe)
        .args([
            "--exact",
            "child_process_holding_the_lock",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_URL_ENV, etcd.url("lock"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut child = KillOnDrop(child);
    let pid = child.0.id();
    let stdout = child.0.stdout.take().expect("stdout");
    let locked = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("LOCKED"));
    assert!(locked, "the child never took the lock");
    let s = etcd.store_with("lock", short_leases()).await;
    // Held past its TTL: the child keeps its lease alive.
    let e = s
        .lock("parent", Duration::from_secs(4))
        .await
        .err()
        .expect("held by the child");
    assert!(e.to_string().contains(&format!("pid {pid}")), "{e}");
    drop(child); // kill -9
    let g = s
        .lock("parent", Duration::from_secs(30))
        .await
        .expect("free once the dead holder's lease expired");
    assert_eq!(
        s.lock_info().await.expect("info").map(|i| i.command),
        Some("parent".to_string())
    );
    g.release().await.expect("release");
}

fn report(id: &str, at: u64) -> HostReport {
    HostReport {
        host_id: id.into(),
        at,
        mps_health: MpsHealth::Healthy,
        health: Default::default(),
        gpus: vec![],
        tasks: BTreeMap::from([("t-1".to_string(), TaskState::Running)]),
        ..HostReport::default()
    }
}

#[tokio::test]
async fn reports_round_trip_expire_with_their_lease_and_bad_host_ids_are_refused() {
    let etcd = Etcd::start().await;
    let s = etcd.store_with("reports", short_leases()).await;
    s.put_report(&report("h-b", 2)).await.expect("put");
    s.put_report(&report("h-a", 1)).await.expect("put");
    s.put_report(&report("h-a", 3)).await.expect("overwrite");
    let got = s.reports().await.expect("reports");
    assert_eq!(got, vec![report("h-a", 3), report("h-b", 2)]);
    s.delete_report("h-a").await.expect("delete");
    s.delete_report("h-a").await.expect("delete again");
    assert_eq!(s.reports().await.expect("reports"), vec![report("h-b", 2)]);
    for bad in ["../escape", ".hidden", "", "a/b"] {
        assert!(
            matches!(
                s.put_report(&report(bad, 1)).await,
                Err(StoreError::InvalidKey { .. })
            ),
            "{bad:?}"
        );
    }
    // Heartbeats keep h-b's report past its TTL ...
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        assert!(s.keep_report_alive("h-b").await.expect("heartbeat"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(s.reports().await.expect("reports").len(), 1);
    // ... and without them it expires: the host falls silent.
    let started = Instant::now();
    loop {
        if s.reports().await.expect("reports").is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the report outlived its lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!s.keep_report_alive("h-b").await.expect("heartbeat"));
    // Reporting again after expiry takes a new lease.
    s.put_report(&report("h-b", 9))
        .await
        .expect("put after expiry");
    assert_eq!(s.reports().await.expect("reports"), vec![report("h-b", 9)]);
}

/// Issue 52: a round's reports written at once (more than are kept in flight), each
/// under its host's lease like one written alone.
#[tokio::test]
async fn many_reports_are_written_at_once() {
    let etcd = Etcd::start().await;
    let s = etcd.store("batch").await;
    let many: Vec<HostReport> = (0..150).map(|i| report(&format!("h-{i:03}"), i)).collect();
    s.put_reports(&many).await.expect("put many");
    assert_eq!(s.reports().await.expect("reports"), many);
    let again: Vec<HostReport> = many
        .iter()
        .map(|r| report(&r.host_id, r.at + 1000))
        .collect();
    s.put_reports(&again).await.expect("overwrite many");
    assert_eq!(s.reports().await.expect("reports"), again);
    assert!(s.keep_report_alive("h-149").await.expect("heartbeat"));
    assert!(matches!(
        s.put_reports(&[report("../escape", 1)]).await,
        Err(StoreError::InvalidKey { .. })
    ));
}

/// Regression (issue 30, repros 2 and 3): with per-host etcd roles a host can write only
/// `report/<its id>`, but any `host_id` inside it; such a report, or one that does not
/// parse, counts only against the host whose key holds it, and the cluster's other
/// reports are still read.
#[tokio::test]
async fn a_forged_or_corrupt_report_counts_only_against_its_own_host() {
    let etcd = Etcd::start().await;
    let s = etcd.store("forged").await;
    s.put_report(&report("h-c", 4)).await.expect("put");
    let c = etcd.client().await;
    let forged = HostReport {
        mps_health: MpsHealth::Impaired,
        health: Default::default(),
        ..report("h-b", 9)
    };
    let json = serde_json::to_vec(&forged).expect("json");
    c.put(PutRequest::new("forged/report/h-a", json))
        .await
        .expect("put forged");
    c.put(PutRequest::new("forged/report/h-1", "not json"))
        .await
        .expect("put corrupt");
    let got = s.reports().await.expect("one bad report fails no read");
    let by_host: BTreeMap<&str, &HostReport> =
        got.iter().map(|r| (r.host_id.as_str(), r)).collect();
    assert_eq!(by_host.len(), 3, "{got:?}");
    assert_eq!(by_host["h-c"], &report("h-c", 4));
    let why = by_host["h-a"].unreadable.as_deref().expect("h-a flagged");
    assert!(why.contains("names host \"h-b\""), "{why}");
    let why = by_host["h-1"].unreadable.as_deref().expect("h-1 flagged");
    assert!(why.contains("does not parse"), "{why}");
    assert!(!by_host.contains_key("h-b"));
}

#[tokio::test]
async fn agents_watch_their_assignments() {
    let etcd = Etcd::start().await;
    let s = etcd.store("watch").await;
    let mut w = s.watch_assignments("h-00001").await.expect("watch");
    let first = w.next().await.expect("item").expect("ok");
    assert!(first.is_empty());
    let mut st = big_state(1, 3, 9);
    s.commit(0, &st).await.expect("commit");
    let mine = w.next().await.expect("item").expect("ok");
    let want: Vec<_> = st
        .tasks
        .values()
        .filter(|t| t.host == "h-00001")
        .cloned()
        .collect();
    assert_eq!(mine, want);
    assert_eq!(mine.len(), 3);
    // A change to another host's task is not news; a change to ours is.
    st.serial = 2;
    st.tasks.get_mut("t-000000").expect("t0").state = TaskState::Stopped;
    s.commit(1, &st).await.expect("commit");
    st.serial = 3;
    st.tasks.remove("t-000001");
    s.commit(2, &st).await.expect("commit");
    let mine = w.next().await.expect("item").expect("ok");
    assert_eq!(mine.len(), 2);
    assert!(mine
        .iter()
        .all(|t| t.host == "h-00001" && t.id != "t-000001"));

    // Large (staged) commits: the change is seen at the flip, even when the writer
    // dies before copying, and the next commit's copy is not news.
    let tiny = || EtcdOptions {
        max_txn_ops: 4,
        ..tiny_txns()
    };
    let big = etcd.store_with("watch", tiny()).await;
    let mut st = big.load().await.expect("load");
    st.serial = 4;
    for t in st.tasks.values_mut() {
        t.host = "h-00001".into();
    }
    big.set_failpoint(Some(Failpoint::AfterFlip));
    big.commit(3, &st).await.expect("flipped");
    let mine = w.next().await.expect("item").expect("ok");
    assert_eq!(mine.len(), 8, "every task now on h-00001");
    assert_eq!(
        etcd.count("watch/commit").await,
        1,
        "the writer died holding its claim"
    );
    let next = etcd.store_with("watch", tiny()).await;
    let mut st = next.load().await.expect("load");
    st.serial = 5;
    for t in st.tasks.values_mut().take(5) {
        t.host = "h-00002".into();
    }
    next.commit(4, &st)
        .await
        .expect("commit after the dead writer");
    let mine = w.next().await.expect("item").expect("ok");
    let want: Vec<_> = st
        .tasks
        .values()
        .filter(|t| t.host == "h-00001")
        .cloned()
        .collect();
    assert_eq!(mine, want);
    assert_eq!(mine.len(), 3);
}

#[tokio::test]
async fn an_unreachable_store_is_an_error_naming_the_url() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let url = format!("etcd://127.0.0.1:{port}/nobody");
    let opts = EtcdOptions {
        connect_timeout: Duration::from_millis(500),
        ..EtcdOptions::default()
    };
    match EtcdStore::open(&url, opts).await {
        Err(OpenError::Store(e @ StoreError::Unreachable { .. })) => {
            assert!(e.to_string().contains(&url), "{e}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    // A bad URL is refused before any connection, naming it.
    let e = EtcdStore::open("etcd://h:x/p", EtcdOptions::default())
        .await
        .expect_err("bad url");
    assert!(e.to_string().contains("etcd://h:x/p"), "{e}");
}

/// etcd stopped under an open store: operations fail as Unreachable, bounded.
#[tokio::test]
async fn etcd_lost_under_an_open_store_is_unreachable() {
    let etcd = Etcd::start().await;
    let s = etcd
        .store_with(
            "lost",
            EtcdOptions {
                request_timeout: Duration::from_secs(2),
                ..EtcdOptions::default()
            },
        )
        .await;
    s.commit(0, &state(1, "x")).await.expect("commit");
    let url = etcd.url("lost");
    drop(etcd);
    let e = s.load().await.expect_err("etcd is gone");
    assert!(
        matches!(e, StoreError::Unreachable { .. }) && e.to_string().contains(&url),
        "{e:?}"
    );
}

#[tokio::test]
async fn corrupt_values_are_errors_naming_the_key() {
    let etcd = Etcd::start().await;
    let s = etcd.store("corrupt").await;
    s.commit(0, &big_state(1, 2, 4)).await.expect("commit");
    let c = etcd.client().await;
    c.put(PutRequest::new(
        "corrupt/state/d/task/t-000001",
        "{ not json",
    ))
    .await
    .expect("put");
    let e = s.load().await.expect_err("corrupt task");
    assert!(
        matches!(&e, StoreError::Corrupt { path, .. } if path.ends_with("state/d/task/t-000001")),
        "{e:?}"
    );
    assert!(e.to_string().contains(&etcd.url("corrupt")), "{e}");
    c.put(PutRequest::new("corrupt/journal/head", "[]"))
        .await
        .expect("put");
    let e = s.read_journal().await.expect_err("corrupt journal");
    assert!(e.to_string().contains("journal/head"), "{e}");
    // A corrupt report is the one exception: it counts against its own host only
    // (a_forged_or_corrupt_report_counts_only_against_its_own_host).
}

/// Reconcilers' leadership: one leader at a time, named to the others; a standby
/// takes over when the leader resigns or dies (lease expiry), and a leader whose lease
/// is gone is told.
#[tokio::test]
async fn one_leader_at_a_time_and_a_standby_takes_over_when_it_dies() {
    let etcd = Etcd::start().await;
    let a = etcd.store_with("lead", short_leases()).await;
    let b = etcd.store_with("lead", short_leases()).await;
    let la = a
        .campaign("gpushare reconcile A", Some(Duration::from_secs(1)))
        .await
        .expect("A leads");
    assert!(la.is_leader());
    let e = b
        .campaign("gpushare reconcile B", Some(Duration::from_millis(300)))
        .await
        .expect_err("B waits");
    assert!(
        matches!(&e, StoreError::Locked { holder, .. } if holder.contains("reconcile A")),
        "{e:?}"
    );
    assert_eq!(
        b.leader().await.expect("leader").map(|i| i.command),
        Some("gpushare reconcile A".to_string())
    );
    // A standby waiting without a limit takes over when A resigns.
    let standby = tokio::spawn(async move { b.campaign("gpushare reconcile B", None).await });
    la.resign().await.expect("resign");
    let lb = standby.await.expect("join").expect("B leads");
    assert_eq!(
        a.leader().await.expect("leader").map(|i| i.command),
        Some("gpushare reconcile B".to_string())
    );
    // B dies (stops refreshing without resigning): A takes over once its lease expires.
    lb.abandon();
    let la = a
        .campaign("gpushare reconcile A", Some(Duration::from_secs(30)))
        .await
        .expect("A takes over");
    // A's lease revoked behind its back: A is told it no longer leads.
    let c = etcd.client().await;
    let kv = c
        .get("lead/leader")
        .await
        .expect("get")
        .expect("leader key");
    c.lease_revoke(kv.lease).await.expect("revoke");
    tokio::time::timeout(Duration::from_secs(30), la.lost())
        .await
        .expect("the loss is noticed");
    assert!(!la.is_leader());
    assert_eq!(a.leader().await.expect("leader"), None);
}

/// The reconcile status record: one key under the prefix, replaced by each pass.
#[tokio::test]
async fn the_status_record_is_one_key_replaced_by_each_pass() {
    use gpushare_engine::store::{PassOutcomeKind, StatusRecord};
    let etcd = Etcd::start().await;
    let s = etcd.store("status").await;
    assert_eq!(s.status().await.expect("status"), None);
    let mut rec = StatusRecord {
        pass: 1,
        started_at: "2026-01-01T00:00:00Z".into(),
        finished_at: "2026-01-01T00:00:01Z".into(),
        source: "file:///repo@main".into(),
        commit: Some("ab".repeat(20)),
        config_digest: Some("cd".repeat(32)),
        converged_digest: Some("cd".repeat(32)),
        outcome: PassOutcomeKind::Applied,
        summary: Some("2 to start".into()),
        error: None,
        drift_corrections: 0,
        health: vec![],
        deployments: vec!["service.s: deployment s/2 of revision 2 FAILED".into()],
        holder: "gpushare reconcile".into(),
    };
    s.put_status(&rec).await.expect("put");
    rec.pass = 2;
    rec.outcome = PassOutcomeKind::Failed;
    rec.error = Some("observing the fleet: store unreachable".into());
    s.put_status(&rec).await.expect("put again");
    assert_eq!(s.status().await.expect("status"), Some(rec.clone()));
    let other = etcd.store("status").await;
    assert_eq!(other.status().await.expect("status"), Some(rec));
}

/// The store's own etcd client against a real etcd: every request shape it offers
/// (the store itself uses most of them; this pins each one to etcd's answers).
#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "every request shape of the client, in turn"
)]
async fn the_client_speaks_etcds_protocol() {
    use gpushare_store_etcd::client::{
        prefix_end, Compare, CompareOp, DeleteRangeRequest, RangeRequest, TxnRequest,
        WatchCreateRequest, WatchResponse, WatchStream,
    };
    let etcd = Etcd::start().await;
    let c = etcd.client().await;
    let first = c.put(PutRequest::new("c/a", "1")).await.expect("put");
    assert!(first.prev_kv.is_none());
    let first_rev = first.header.expect("header").revision;
    let second = c
        .put(PutRequest::new("c/a", "2").prev_kv())
        .await
        .expect("put");
    assert_eq!(second.prev_kv.expect("prev kv").value, b"1");
    for (k, v) in [("c/b", "3"), ("d", "x")] {
        c.put(PutRequest::new(k, v)).await.expect("put");
    }

    // Reads: a prefix, a page, keys only, a count, an old revision.
    let all = c
        .range(RangeRequest::new("c/").prefix())
        .await
        .expect("range");
    let keys: Vec<&[u8]> = all.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(keys, [&b"c/a"[..], b"c/b"]);
    assert_eq!((all.count, all.more), (2, false));
    assert_eq!(all.kvs[0].version, 2);
    let page = c
        .range(RangeRequest::new("c/").prefix().limit(1))
        .await
        .expect("page");
    assert_eq!((page.kvs.len(), page.more, page.count), (1, true, 2));
    let bare = c
        .range(RangeRequest::new("c/").prefix().keys_only())
        .await
        .expect("keys");
    assert!(bare.kvs.iter().all(|kv| kv.value.is_empty()) && bare.kvs.len() == 2);
    let counted = c
        .range(RangeRequest::new("c/").prefix().count_only())
        .await
        .expect("count");
    assert_eq!((counted.kvs.len(), counted.count), (0, 2));
    let old = c
        .range(RangeRequest::new("c/a").at(first_rev))
        .await
        .expect("old");
    assert_eq!(old.kvs[0].value, b"1");

    // A transaction: compares hold, then one fails and its reads answer.
    let guarded = |version| {
        TxnRequest::when(vec![
            Compare::version("c/a", CompareOp::Equal, version),
            Compare::mod_revision("c/", CompareOp::Greater, 0).with_range(prefix_end(b"c/")),
        ])
        .and_then(vec![PutRequest::new("c/c", "4").into()])
        .or_else(vec![RangeRequest::new("c/a").into()])
    };
    let won = c.txn(guarded(2)).await.expect("txn");
    assert!(won.succeeded && won.revision() > first_rev);
    let lost = c.txn(guarded(1)).await.expect("txn");
    assert!(!lost.succeeded);
    assert_eq!(lost.ranges().next().expect("read").kvs[0].value, b"2");

    // A lease: a key under it, refreshed, then revoked with its key.
    let lease = c.lease_grant(30).await.expect("grant");
    assert_eq!(lease.ttl, 30);
    c.put(PutRequest::new("c/leased", "l").lease(lease.id))
        .await
        .expect("leased put");
    let held = c
        .txn(TxnRequest::when(vec![Compare::lease(
            "c/leased",
            CompareOp::Equal,
            lease.id,
        )]))
        .await
        .expect("lease compare");
    assert!(held.succeeded);
    let mut keeper = c.lease_keep_alive(lease.id).await.expect("keep-alive");
    assert!(keeper.keep_alive().await.expect("refresh") > 0);
    assert!(keeper.keep_alive().await.expect("refresh again") > 0);
    c.lease_revoke(lease.id).await.expect("revoke");
    assert_eq!(c.get("c/leased").await.expect("get"), None);
    assert_eq!(
        keeper.keep_alive().await.expect("refresh a revoked lease"),
        0
    );

    // A watch from the first put on: the history, then a progress notice, then new
    // deletes.
    let mut w = c
        .watch(WatchCreateRequest {
            key: b"c/".to_vec(),
            range_end: prefix_end(b"c/"),
            start_revision: first_rev,
            ..WatchCreateRequest::default()
        })
        .await
        .expect("watch");
    async fn answer(w: &mut WatchStream) -> WatchResponse {
        tokio::time::timeout(Duration::from_secs(10), w.message())
            .await
            .expect("an answer in time")
            .expect("no error")
            .expect("the stream goes on")
    }
    let mut events = Vec::new();
    while events.len() < 6 {
        let r = answer(&mut w).await;
        assert!(!r.canceled, "{r:?}");
        events.extend(r.events);
    }
    let seen: Vec<(&[u8], bool)> = events
        .iter()
        .map(|e| (e.kv.as_ref().expect("kv").key.as_slice(), e.is_delete()))
        .collect();
    assert_eq!(
        seen,
        [
            (&b"c/a"[..], false),
            (b"c/a", false),
            (b"c/b", false),
            (b"c/c", false),
            (b"c/leased", false),
            (b"c/leased", true),
        ]
    );
    w.request_progress().await.expect("progress request");
    let progress = answer(&mut w).await;
    assert!(progress.events.is_empty() && !progress.canceled);
    let deleted = c
        .delete(DeleteRangeRequest::new("c/").prefix())
        .await
        .expect("delete");
    assert_eq!(deleted.deleted, 3);
    let gone = answer(&mut w).await;
    assert_eq!(gone.events.len(), 3);
    assert!(gone.events.iter().all(|e| e.is_delete()));
    assert_eq!(c.get("d").await.expect("get").expect("d").value, b"x");
}
