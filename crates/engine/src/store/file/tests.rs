use super::*;
use gpushare_core::model::{MpsHealth, TaskState};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::Arc;

fn state(serial: u64, cluster: &str) -> StoreState {
    StoreState {
        serial,
        cluster: cluster.into(),
        ..StoreState::default()
    }
}

#[tokio::test]
async fn empty_store_loads_serial_zero_and_commits_compare_and_swap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path().join("nested/.gpushare")).expect("open");
    assert_eq!(
        s.load().await.expect("load"),
        StoreState {
            store_id: s.store_id().to_string(),
            ..StoreState::default()
        }
    );
    s.commit(0, &state(1, "a")).await.expect("first commit");
    assert_eq!(s.load().await.expect("load").cluster, "a");
    // A writer that read serial 0 lost the race: its commit is refused and changes nothing.
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
    assert_eq!(
        s.load().await.expect("load"),
        StoreState {
            store_id: s.store_id().to_string(),
            ..state(1, "a")
        }
    );
    s.commit(1, &state(2, "b")).await.expect("second commit");
    assert_eq!(s.load().await.expect("load").serial, 2);
}

#[tokio::test]
async fn a_store_takes_over_another_identity_for_good_and_refuses_a_bad_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = FileStore::open(dir.path().join("a")).expect("open");
    let b = FileStore::open(dir.path().join("b")).expect("open");
    let clone = b.clone();
    b.adopt_identity(&a.store_id()).await.expect("adopt");
    assert_eq!(
        clone.load().await.expect("load").store_id,
        a.store_id(),
        "clones share it"
    );
    let reopened = FileStore::open(dir.path().join("b")).expect("reopen");
    assert_eq!(reopened.store_id(), a.store_id(), "kept on disk");
    let e = b.adopt_identity("../x").await.expect_err("not an id");
    assert!(matches!(e, StoreError::InvalidStoreId { .. }), "{e:?}");
    assert_eq!(b.store_id(), a.store_id(), "a refused id changes nothing");
}

#[tokio::test]
async fn a_store_gets_a_random_id_once_and_loads_it_into_old_states() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = FileStore::open(dir.path().join("a")).expect("open");
    let b = FileStore::open(dir.path().join("b")).expect("open");
    assert_eq!(a.store_id().len(), 16);
    assert!(a.store_id().chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a.store_id(), b.store_id(), "each store its own id");
    // Reopening keeps it.
    let again = FileStore::open(dir.path().join("a")).expect("reopen");
    assert_eq!(again.store_id(), a.store_id());
    // Migration: a state.json written before store identity (no field) loads with it.
    std::fs::write(
        dir.path().join("a").join(STATE),
        br#"{"serial": 4, "cluster": "c", "resources": {}, "revisions": {}, "hosts": {}, "tasks": {}}"#,
    )
    .expect("write");
    let st = again.load().await.expect("load");
    assert_eq!(
        (st.serial, st.store_id.as_str()),
        (4, a.store_id().as_str())
    );
    // A committed state carries it; the file stays the authority.
    again.commit(4, &state(5, "c")).await.expect("commit");
    assert_eq!(again.load().await.expect("load").store_id, a.store_id());
    // A damaged identity is an error naming the file, not a new identity.
    std::fs::write(dir.path().join("b").join(STORE_ID), b"not/an id").expect("write");
    let e = FileStore::open(dir.path().join("b")).expect_err("bad id");
    assert!(
        matches!(&e, StoreError::InvalidStoreId { path, .. } if path.ends_with("store-id")),
        "{e:?}"
    );
}

/// Several threads open one fresh directory at once: all see the same id.
#[test]
fn concurrent_openers_agree_on_one_store_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = Arc::new(dir.path().join("fresh"));
    std::fs::create_dir_all(path.as_path()).expect("mkdir");
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let path = Arc::clone(&path);
            std::thread::spawn(move || {
                FileStore::open(path.as_path())
                    .expect("open")
                    .store_id()
                    .to_string()
            })
        })
        .collect();
    let ids: std::collections::BTreeSet<String> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
}

#[tokio::test]
async fn corrupt_files_are_errors_naming_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    std::fs::write(dir.path().join(STATE), b"{ not json").expect("write");
    let e = s.load().await.expect_err("corrupt state");
    assert!(
        matches!(&e, StoreError::Corrupt { path, .. } if path.ends_with("state.json")),
        "{e:?}"
    );
    assert!(e.to_string().contains("state.json"), "{e}");
    std::fs::write(dir.path().join(JOURNAL), b"[]").expect("write");
    let e = s.read_journal().await.expect_err("corrupt journal");
    assert!(e.to_string().contains("journal.json"), "{e}");
}

/// Regression (issue 30, repros 2 and 3): a report is taken only for the host whose
/// file holds it, and one that does not parse stands for its own host alone: the other
/// hosts' reports are still read (one bad file used to fail every plan of the cluster).
#[tokio::test]
async fn a_forged_or_corrupt_report_counts_only_against_its_own_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    let good = HostReport {
        host_id: "h-c".into(),
        at: 5,
        ..HostReport::default()
    };
    s.put_report(&good).await.expect("put");
    std::fs::write(dir.path().join(REPORTS).join("h-1.json"), b"not json").expect("write");
    // Host h-a writes its own file with another host's id inside.
    let forged = HostReport {
        host_id: "h-b".into(),
        at: 9,
        mps_health: MpsHealth::Impaired,
        health: Default::default(),
        ..HostReport::default()
    };
    std::fs::write(
        dir.path().join(REPORTS).join("h-a.json"),
        serde_json::to_vec(&forged).expect("json"),
    )
    .expect("write");
    let got = s.reports().await.expect("one bad report fails no read");
    let by_host: BTreeMap<&str, &HostReport> =
        got.iter().map(|r| (r.host_id.as_str(), r)).collect();
    assert_eq!(by_host.len(), 3, "{got:?}");
    assert_eq!(by_host["h-c"], &good);
    let why = by_host["h-1"].unreadable.as_deref().expect("h-1 flagged");
    assert!(why.contains("does not parse"), "{why}");
    let why = by_host["h-a"].unreadable.as_deref().expect("h-a flagged");
    assert!(why.contains("names host \"h-b\""), "{why}");
    assert_eq!(by_host["h-a"].mps_health, MpsHealth::default());
    assert!(
        !by_host.contains_key("h-b"),
        "the forged report counts for h-b"
    );
}

#[tokio::test]
async fn reports_round_trip_and_bad_host_ids_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    let r = |id: &str, at| HostReport {
        logs: None,
        address: None,
        host_id: id.into(),
        at,
        mps_health: MpsHealth::Healthy,
        health: Default::default(),
        gpus: vec![],
        tasks: BTreeMap::from([("t-1".to_string(), TaskState::Running)]),
        agent_version: String::new(),
        mps_error: None,
        mps_failures: 0,
        task_details: BTreeMap::new(),
        agent_at: None,
        unreadable: None,
    };
    s.put_report(&r("h-b", 2)).await.expect("put");
    s.put_report(&r("h-a", 1)).await.expect("put");
    s.put_report(&r("h-a", 3)).await.expect("overwrite");
    let got = s.reports().await.expect("reports");
    assert_eq!(got, vec![r("h-a", 3), r("h-b", 2)]);
    s.delete_report("h-a").await.expect("delete");
    s.delete_report("h-a").await.expect("delete again");
    assert_eq!(s.reports().await.expect("reports"), vec![r("h-b", 2)]);
    for bad in ["../escape", ".hidden", "", "a/b"] {
        assert!(
            matches!(
                s.put_report(&r(bad, 1)).await,
                Err(StoreError::InvalidKey { .. })
            ),
            "{bad:?}"
        );
    }
    // Many at once (the local fleet's round, issue 52): new and replaced reports,
    // read back as written, no temporary file left; a bad host id writes nothing.
    s.put_reports(&[r("h-a", 4), r("h-b", 5), r("h-c", 6)])
        .await
        .expect("put many");
    assert_eq!(
        s.reports().await.expect("reports"),
        vec![r("h-a", 4), r("h-b", 5), r("h-c", 6)]
    );
    assert!(matches!(
        s.put_reports(&[r("h-a", 7), r("../escape", 7)]).await,
        Err(StoreError::InvalidKey { .. })
    ));
    assert_eq!(s.reports().await.expect("reports")[0], r("h-a", 4));
    s.put_reports(&[]).await.expect("nothing to write");
    // A host's own file counts only when it is later than its batch entry; deleting
    // the host's report removes both.
    s.put_report(&r("h-b", 1))
        .await
        .expect("an earlier own report");
    s.put_report(&r("h-c", 9))
        .await
        .expect("a later own report");
    assert_eq!(
        s.reports().await.expect("reports"),
        vec![r("h-a", 4), r("h-b", 5), r("h-c", 9)]
    );
    s.delete_report("h-b").await.expect("delete");
    assert_eq!(
        s.reports().await.expect("reports"),
        vec![r("h-a", 4), r("h-c", 9)]
    );
    let temps: Vec<String> = std::fs::read_dir(dir.path().join("reports"))
        .expect("the reports directory")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(temps.is_empty(), "temporary files left: {temps:?}");
}

#[tokio::test]
async fn the_status_record_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    assert_eq!(s.status().await.expect("status"), None);
    let rec = StatusRecord {
        pass: 3,
        started_at: "2026-01-01T00:00:00Z".into(),
        finished_at: "2026-01-01T00:00:01Z".into(),
        source: "file:///repo@main".into(),
        commit: Some("ab".repeat(20)),
        config_digest: None,
        converged_digest: None,
        outcome: super::super::PassOutcomeKind::DriftCorrected,
        summary: Some("1 to start".into()),
        error: None,
        drift_corrections: 1,
        health: vec![],
        deployments: vec!["service.s: deployment s/2 of revision 2 FAILED".into()],
        holder: "gpushare reconcile".into(),
    };
    s.put_status(&rec).await.expect("put");
    assert_eq!(s.status().await.expect("status"), Some(rec));
    std::fs::write(dir.path().join(STATUS), b"{").expect("write");
    let e = s.status().await.expect_err("corrupt");
    assert!(e.to_string().contains("status.json"), "{e}");
}

#[tokio::test]
async fn journal_write_read_clear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    assert_eq!(s.read_journal().await.expect("read"), None);
    s.clear_journal().await.expect("clearing nothing is fine");
    let plan: gpushare_core::plan::Plan = serde_json::from_value(serde_json::json!({
        "format_version": "1.0", "cluster": "c", "base_serial": 0, "destroy": false,
        "resource_changes": [], "registrations": [], "launches": [], "retirements": [],
        "starts": [], "stops": [], "moves": [], "unplaced": [], "strays": [],
        "after": StoreState::default(), "cost": gpushare_core::plan::Cost::default(),
    }))
    .expect("plan");
    let mut j = Journal {
        plan,
        done: 3,
        holder: "test".into(),
    };
    s.write_journal(&j).await.expect("write");
    assert_eq!(s.read_journal().await.expect("read"), Some(j.clone()));
    j.done = 7;
    s.advance_journal(&j).await.expect("advance");
    assert_eq!(
        s.read_journal().await.expect("read").map(|j| j.done),
        Some(7)
    );
    // A new journal starts from its own position, not the last one's.
    j.done = 0;
    s.write_journal(&j).await.expect("write");
    assert_eq!(
        s.read_journal().await.expect("read").map(|j| j.done),
        Some(0)
    );
    s.advance_journal(&j).await.expect("advance");
    s.clear_journal().await.expect("clear");
    assert_eq!(s.read_journal().await.expect("read"), None);
    // A position left without its journal (a crash while clearing) means nothing.
    std::fs::write(dir.path().join(JOURNAL_DONE), br#"{"done": 9}"#).expect("write");
    assert_eq!(s.read_journal().await.expect("read"), None);
    s.write_journal(&j).await.expect("write");
    assert_eq!(
        s.read_journal().await.expect("read").map(|j| j.done),
        Some(0)
    );
}

/// The holder writes its record just after taking the lock: a waiter that gives up in
/// that moment still names it (CI once saw "an unknown process" there).
#[tokio::test]
async fn a_waiter_giving_up_as_the_holder_writes_its_record_names_the_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    let g = s
        .lock("gpushare apply", Duration::from_secs(1))
        .await
        .expect("lock");
    let info = s.lock_info().expect("info").expect("record written");
    // Take the record away as if the holder were between flock and its write, and put
    // it back a moment later.
    let info_path = dir.path().join(LOCK_INFO);
    let saved = std::fs::read(&info_path).expect("read record");
    std::fs::remove_file(&info_path).expect("remove record");
    let writer = {
        let info_path = info_path.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            std::fs::write(&info_path, saved).expect("write record");
        })
    };
    let other = FileStore::open(dir.path()).expect("open");
    let e = other
        .lock("gpushare state rm", Duration::ZERO)
        .await
        .err()
        .expect("locked");
    writer.join().expect("writer");
    match &e {
        StoreError::Locked { holder, since, .. } => {
            assert!(holder.contains("gpushare apply"), "{holder}");
            assert_eq!(since, &info.since);
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    g.release().await.expect("release");
}

/// Loads of an unchanged state.json are served from memory; any change to the file
/// (another handle's commit, an edit in place) is read anew.
#[tokio::test]
async fn a_changed_state_file_is_always_read_anew() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = FileStore::open(dir.path()).expect("open");
    let b = FileStore::open(dir.path()).expect("open");
    a.commit(0, &state(1, "one")).await.expect("commit");
    assert_eq!(a.load().await.expect("load").cluster, "one");
    assert_eq!(a.load().await.expect("load again").cluster, "one");
    b.commit(1, &state(2, "two"))
        .await
        .expect("commit by another handle");
    assert_eq!(a.load().await.expect("load").cluster, "two");
    // Edited in place, same length: seen too.
    let path = dir.path().join(STATE);
    let text = std::fs::read_to_string(&path).expect("read");
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&path, text.replace("\"two\"", "\"six\"")).expect("edit");
    assert_eq!(a.load().await.expect("load").cluster, "six");
    // Removed: an empty store again.
    std::fs::remove_file(&path).expect("remove");
    assert_eq!(a.load().await.expect("load").serial, 0);
}

/// A shared load hands out the state it read last while `state.json` and the store's
/// identity are unchanged (no copy), and reads anew after a commit or an adoption.
#[tokio::test]
async fn a_shared_load_is_the_same_state_until_the_store_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = FileStore::open(dir.path().join("a")).expect("open");
    let other = FileStore::open(dir.path().join("other")).expect("open");
    a.commit(0, &state(1, "one")).await.expect("commit");
    let first = a.load_shared().await.expect("load");
    let again = a.load_shared().await.expect("load again");
    assert!(
        Arc::ptr_eq(&first, &again),
        "an unchanged store is not read twice"
    );
    assert_eq!(
        (first.serial, first.store_id.as_str()),
        (1, a.store_id().as_str())
    );
    assert_eq!(a.load().await.expect("owned load"), *first);
    a.commit(1, &state(2, "two")).await.expect("commit");
    let after = a.load_shared().await.expect("load after commit");
    assert_eq!((after.serial, after.cluster.as_str()), (2, "two"));
    a.adopt_identity(&other.store_id()).await.expect("adopt");
    let adopted = a.load_shared().await.expect("load after adoption");
    assert_eq!(
        adopted.store_id,
        other.store_id(),
        "the new identity, not the kept state's"
    );
    assert_eq!(
        first.serial, 1,
        "a state handed out earlier is never changed"
    );
}

/// Several threads, each with its own runtime and store handle, increment a
/// counter through compare-and-swap commits: no update is lost.
#[test]
fn concurrent_threads_never_lose_an_update() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = Arc::new(dir.path().to_path_buf());
    let threads: Vec<_> = (0..4)
        .map(|n| {
            let path = Arc::clone(&path);
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async {
                    let s = FileStore::open(path.as_path()).expect("open");
                    let mut conflicts = 0;
                    for _ in 0..25 {
                        loop {
                            let mut st = s.load().await.expect("load");
                            let expected = st.serial;
                            st.serial += 1;
                            st.cluster = format!("writer-{n}");
                            match s.commit(expected, &st).await {
                                Ok(()) => break,
                                Err(StoreError::Conflict { .. }) => conflicts += 1,
                                Err(e) => panic!("{e}"),
                            }
                        }
                    }
                    conflicts
                })
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let s = FileStore::open(path.as_path()).expect("open");
    assert_eq!(rt.block_on(s.load()).expect("load").serial, 100);
}

const CHILD_DIR_ENV: &str = "GPUSHARE_TEST_LOCK_CHILD_DIR";

/// Run by `a_killed_holder_leaves_no_stale_lock` in a child process: take the
/// lock, say so, and hold it until killed.
#[tokio::test]
#[ignore = "helper process for a_killed_holder_leaves_no_stale_lock; that test runs it"]
async fn child_process_holding_the_lock() {
    let dir = std::env::var(CHILD_DIR_ENV).expect("run by the parent test");
    let s = FileStore::open(dir).expect("open");
    let _g = s
        .lock("child holder", Duration::from_secs(5))
        .await
        .expect("lock");
    println!("LOCKED");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test]
async fn a_killed_holder_leaves_no_stale_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let mut child = std::process::Command::new(exe)
        .args([
            "--exact",
            "store::file::tests::child_process_holding_the_lock",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_ENV, dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let locked = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("LOCKED"));
    assert!(locked, "the child never took the lock");
    let s = FileStore::open(dir.path()).expect("open");
    let e = s
        .lock("parent", Duration::from_millis(150))
        .await
        .err()
        .expect("held by the child");
    assert!(
        e.to_string().contains(&format!("pid {}", child.id())),
        "{e}"
    );
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    // The record is left behind, but the OS lock died with the child.
    assert_eq!(
        s.lock_info().expect("info").map(|i| i.pid),
        Some(child.id())
    );
    let g = s
        .lock("parent", Duration::from_secs(5))
        .await
        .expect("free after the holder died");
    assert_eq!(
        s.lock_info().expect("info").map(|i| i.command),
        Some("parent".to_string())
    );
    g.release().await.expect("release");
}

/// A store with a snapshot (serial 1) and a log holding serials 2 and 3.
async fn store_with_log(dir: &std::path::Path, cluster: &str) -> FileStore {
    let s = FileStore::open(dir).expect("open");
    s.commit(0, &state(1, cluster)).await.expect("snapshot");
    let mut st = state(1, cluster);
    for (serial, family) in [(2, "f"), (3, "g")] {
        let old = st.clone();
        st.serial = serial;
        st.revisions.insert(family.into(), vec![]);
        s.commit_changes(serial - 1, &ChangeSet::diff(&old, &st))
            .await
            .expect("logged");
    }
    assert!(dir.join(log::LOG).exists(), "the commits went to the log");
    s
}

/// Copy the directory `from` to `to` as `how` does it (new inodes, the same bytes).
fn copy_dir(from: &std::path::Path, to: &std::path::Path, how: &str) {
    let ok = match how {
        "cp -r" => std::process::Command::new("cp")
            .args(["-r"])
            .arg(from)
            .arg(to)
            .status(),
        "cp -a" => std::process::Command::new("cp")
            .args(["-a"])
            .arg(from)
            .arg(to)
            .status(),
        "tar" => {
            let archive = to.with_extension("tar");
            let packed = std::process::Command::new("tar")
                .arg("-cf")
                .arg(&archive)
                .arg("-C")
                .arg(from)
                .arg(".")
                .status()
                .expect("tar");
            assert!(packed.success());
            std::fs::create_dir_all(to).expect("mkdir");
            std::process::Command::new("tar")
                .arg("-xf")
                .arg(&archive)
                .arg("-C")
                .arg(to)
                .status()
        }
        // What rsync does: each file written anew, then renamed into place.
        _ => {
            std::fs::create_dir_all(to).expect("mkdir");
            for e in std::fs::read_dir(from).expect("read_dir").flatten() {
                if e.path().is_file() {
                    let tmp = to.join(format!(".{}.tmp", e.file_name().to_string_lossy()));
                    std::fs::write(&tmp, std::fs::read(e.path()).expect("read")).expect("write");
                    std::fs::rename(&tmp, to.join(e.file_name())).expect("rename");
                }
            }
            Ok(std::process::ExitStatus::default())
        }
    };
    assert!(ok.expect(how).success(), "{how}");
}

/// Issue 45 item 1, regression: a copied, restored or rsynced store forgot its log
/// (the log named the snapshot's inode) and loaded as serial 1, so `plan` launched
/// the whole fleet again. A copy is recognised by the snapshot's serial and content.
#[tokio::test]
async fn a_copied_store_keeps_its_log() {
    for how in ["cp -r", "cp -a", "tar", "rsync"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let original = store_with_log(&dir.path().join("orig"), "c").await;
        let want = original.load().await.expect("load");
        let copy_path = dir.path().join("copy");
        copy_dir(&dir.path().join("orig"), &copy_path, how);
        let copy = FileStore::open(&copy_path).expect("open the copy");
        let got = copy.load().await.expect("load the copy");
        assert_eq!(got.serial, 3, "{how}");
        assert_eq!(got.revisions, want.revisions, "{how}");
        // The copy goes on: a commit on it extends its log.
        let mut next = got.clone();
        next.serial = 4;
        next.revisions.insert("h".into(), vec![]);
        copy.commit_changes(3, &ChangeSet::diff(&got, &next))
            .await
            .expect("commit on the copy");
        let again = FileStore::open(&copy_path).expect("reopen");
        assert_eq!(again.load().await.expect("load").serial, 4, "{how}");
    }
}

/// A log that extends another snapshot than the one beside it is an error that says
/// what happened and how to recover, never an empty (or older) state.
#[tokio::test]
async fn a_log_of_another_snapshot_is_an_error_not_an_empty_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    store_with_log(&dir.path().join("a"), "a").await;
    store_with_log(&dir.path().join("b"), "b").await;
    // b's snapshot (serial 1, cluster b) with a's log (extending a's serial 1).
    std::fs::copy(
        dir.path().join("a").join(log::LOG),
        dir.path().join("b").join(log::LOG),
    )
    .expect("copy the log");
    let b = FileStore::open(dir.path().join("b")).expect("open");
    let e = b.load().await.expect_err("a foreign log");
    assert!(
        matches!(
            &e,
            StoreError::ForeignLog {
                content_differs: true,
                log_snapshot_serial: 1,
                snapshot_serial: 1,
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("Restore state.json and state.log from the same copy"),
        "{text}"
    );

    // A snapshot older than the one the log extends: an error too.
    let c = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(c.path()).expect("open");
    s.commit(0, &state(1, "c")).await.expect("snapshot");
    let log_text = std::fs::read_to_string(dir.path().join("a").join(log::LOG)).expect("log");
    let mut lines: Vec<String> = log_text.lines().map(str::to_string).collect();
    let header = r#"{"snapshot_inode":1,"snapshot_serial":7}"#;
    lines[0] = format!("{} {header}", log::checksum(header.as_bytes()));
    std::fs::write(c.path().join(log::LOG), lines.join("\n") + "\n").expect("write");
    let s = FileStore::open(c.path()).expect("open");
    let e = s.load().await.expect_err("a log of a newer snapshot");
    assert!(
        matches!(
            &e,
            StoreError::ForeignLog {
                log_snapshot_serial: 7,
                snapshot_serial: 1,
                ..
            }
        ),
        "{e:?}"
    );
}

/// A log written before the header recorded the snapshot's checksum is taken by its
/// serial when the inode differs (a copy of an older store).
#[tokio::test]
async fn an_old_log_without_a_checksum_is_taken_by_its_serial() {
    let dir = tempfile::tempdir().expect("tempdir");
    store_with_log(&dir.path().join("orig"), "c").await;
    let log_path = dir.path().join("orig").join(log::LOG);
    let text = std::fs::read_to_string(&log_path).expect("log");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let header = r#"{"snapshot_inode":1,"snapshot_serial":1}"#;
    lines[0] = format!("{} {header}", log::checksum(header.as_bytes()));
    std::fs::write(&log_path, lines.join("\n") + "\n").expect("write");
    copy_dir(&dir.path().join("orig"), &dir.path().join("copy"), "cp -r");
    let copy = FileStore::open(dir.path().join("copy")).expect("open");
    assert_eq!(copy.load().await.expect("load").serial, 3);
}
