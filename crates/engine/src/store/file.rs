//! The `file` store: a directory (by default `<config dir>/.gpushare/`) holding
//!
//! - `state.json`: the [`StoreState`], replaced atomically, compare-and-swap on its serial;
//! - `journal.json`: the apply in progress, if any, and `journal-done.json`, how far
//!   it has got (so advancing it does not rewrite the whole plan);
//! - `reports/<host>.json`: each agent's latest report;
//! - `store-id`: the store's identity (16 random hex characters), made when the
//!   directory is first opened and never replaced; `load` puts it in
//!   [`StoreState::store_id`] (so a `state.json` written before store identity gets it);
//! - `status.json`: the last reconcile pass's [`StatusRecord`];
//! - `lock` (an OS advisory lock, released by the kernel when its holder dies) and
//!   `lock.json` naming the holder (pid, host name, command, since).
//!
//! Every write goes through a temporary file in the same directory, fsync, rename
//! and a directory fsync, so a crash leaves either the old or the new content.

use super::{Journal, LockGuard, StatusRecord, Store, StoreError};
use crate::fsutil::{self, FileLock};
use async_trait::async_trait;
use gpushare_core::model::{HostReport, StoreState};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const STATE: &str = "state.json";
const JOURNAL: &str = "journal.json";
/// How far the journal's plan has got, written after every step or batch (small,
/// unlike the journal, which holds the whole plan).
const JOURNAL_DONE: &str = "journal-done.json";
const REPORTS: &str = "reports";
const LOCK: &str = "lock";
/// The store's identity (see [`StoreState::store_id`]).
const STORE_ID: &str = "store-id";
const LOCK_INFO: &str = "lock.json";
/// Serialises compare-and-swap commits between processes (held for microseconds).
const CAS_LOCK: &str = "state.lock";
/// How often a waiting `lock` call retries.
const LOCK_POLL: Duration = Duration::from_millis(50);
/// How long a waiter that gives up keeps trying while the lock is held without a holder's record.
const LOCK_RECORD_GRACE: Duration = Duration::from_secs(1);

/// Who holds the lock, as written to `lock.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    pub pid: u32,
    pub hostname: String,
    /// What the holder is doing, e.g. `gpushare apply`.
    pub command: String,
    /// RFC 3339, UTC.
    pub since: String,
}

impl std::fmt::Display for LockInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} (pid {} on {})",
            self.command, self.pid, self.hostname
        )
    }
}

/// The `file` store. Cheap to clone; every call reads or writes the directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    /// Shared by the clones; changed only by `adopt_identity`.
    store_id: std::sync::Arc<std::sync::Mutex<String>>,
    /// The state last read, with the identity of the file it was read from: a load of
    /// an unchanged `state.json` is a clone instead of a parse (the Terraform provider
    /// loads once per resource of a plan). Shared by the clones.
    loaded: std::sync::Arc<std::sync::Mutex<Option<(FileStamp, StoreState)>>>,
}

/// What tells one `state.json` from another: every write replaces the file (a new
/// inode), and an edit in place changes its length or modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    inode: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            inode: m.ino(),
            len: m.len(),
            modified: m.modified().ok(),
        })
    }
}

impl FileStore {
    /// Open (creating if needed) the store directory `dir`, and its identity: the
    /// `store-id` file is made with a fresh random id the first time (never
    /// replacing one a concurrent opener made first).
    pub fn open(dir: impl Into<PathBuf>) -> Result<FileStore, StoreError> {
        let dir = dir.into();
        let reports = dir.join(REPORTS);
        fsutil::create_private_dir(&dir).map_err(|source| io_err(&dir, source))?;
        fsutil::create_private_dir(&reports).map_err(|source| io_err(&reports, source))?;
        fsutil::remove_stale_temps(&dir);
        fsutil::remove_stale_temps(&reports);
        let store_id = ensure_store_id(&dir.join(STORE_ID))?;
        Ok(FileStore {
            dir,
            store_id: std::sync::Arc::new(std::sync::Mutex::new(store_id)),
            loaded: Default::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The store's identity (the content of `store-id`).
    pub fn store_id(&self) -> String {
        self.store_id
            .lock()
            .map(|id| id.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    /// Who holds the lock according to `lock.json` (it may be stale when nobody holds the OS lock).
    pub fn lock_info(&self) -> Result<Option<LockInfo>, StoreError> {
        read_json(&self.dir.join(LOCK_INFO))
    }

    fn report_path(&self, host_id: &str) -> Result<PathBuf, StoreError> {
        if !gpushare_core::ids::valid_id(host_id) {
            return Err(StoreError::InvalidKey {
                what: "host id",
                key: host_id.to_string(),
            });
        }
        Ok(self.dir.join(REPORTS).join(format!("{host_id}.json")))
    }

    /// Run `f` with a clone of this store on tokio's blocking threads
    /// ([`fsutil::off_thread`]): every call of the [`Store`] impl does its file I/O so.
    async fn off_thread<T: Send + 'static>(
        &self,
        f: impl FnOnce(&FileStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let this = self.clone();
        fsutil::off_thread(move || f(&this))
            .await
            .map_err(|source| io_err(&self.dir, source))?
    }

    fn load_sync(&self) -> Result<StoreState, StoreError> {
        let path = self.dir.join(STATE);
        // Taken before the read: a file replaced in between is read anew next time.
        let stamp = FileStamp::of(&path);
        let cached = match (&stamp, self.loaded.lock()) {
            (Some(stamp), Ok(loaded)) => loaded
                .as_ref()
                .filter(|(s, _)| s == stamp)
                .map(|(_, st)| st.clone()),
            _ => None,
        };
        let mut state: StoreState = match cached {
            Some(st) => st,
            None => {
                let st: StoreState = read_json(&path)?.unwrap_or_default();
                if let (Some(stamp), Ok(mut loaded)) = (stamp, self.loaded.lock()) {
                    *loaded = Some((stamp, st.clone()));
                }
                st
            }
        };
        let store_id = self.store_id();
        if !state.store_id.is_empty() && state.store_id != store_id {
            tracing::warn!(recorded = %state.store_id, store_id = %store_id, store = %self.location(), "state.json names another store id than the store-id file; the file wins");
        }
        state.store_id = store_id;
        Ok(state)
    }
}

/// Read the store id at `path`, creating it with a fresh random id when absent.
fn ensure_store_id(path: &Path) -> Result<String, StoreError> {
    let fresh = super::new_store_id();
    if fsutil::create_once(path, fresh.as_bytes()).map_err(|source| io_err(path, source))? {
        tracing::info!(store_id = %fresh, path = %path.display(), "created the store's identity");
    }
    let bytes = std::fs::read(path).map_err(|source| io_err(path, source))?;
    let found = String::from_utf8_lossy(&bytes).trim().to_string();
    if !super::valid_store_id(&found) {
        return Err(StoreError::InvalidStoreId {
            path: path.display().to_string(),
            found: found.chars().take(80).collect(),
        });
    }
    Ok(found)
}

fn io_err(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Parse a JSON file; `None` when it does not exist; errors name the path.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
) -> Result<Option<T>, StoreError> {
    match fsutil::read_optional(path).map_err(|source| io_err(path, source))? {
        None => Ok(None),
        Some(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| StoreError::Corrupt {
                    path: path.display().to_string(),
                    source,
                })
        }
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    write_bytes(path, &json_bytes(path, value)?)
}

/// `value` as the JSON `path` will hold (serialised before the write goes off thread).
fn json_bytes<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec_pretty(value).map_err(|source| StoreError::Corrupt {
        path: path.display().to_string(),
        source,
    })
}

fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    fsutil::write_atomic(path, bytes).map_err(|source| io_err(path, source))
}

/// The one field of `state.json` a commit checks.
#[derive(Debug, Deserialize)]
struct SerialOnly {
    #[serde(default)]
    serial: u64,
}

/// The content of `journal-done.json`.
#[derive(Debug, Serialize, Deserialize)]
struct JournalDone {
    done: usize,
}

/// The held lock: the OS lock on `lock` plus the `lock.json` record.
struct FileLockGuard {
    lock: Option<FileLock>,
    info_path: PathBuf,
}

#[async_trait]
impl LockGuard for FileLockGuard {
    async fn release(mut self: Box<Self>) -> Result<(), StoreError> {
        let (lock, info_path) = (self.lock.take(), self.info_path.clone());
        fsutil::off_thread(move || {
            // Remove the record while still holding the lock, so nobody else's record is removed.
            let r = fsutil::remove_durably(&info_path).map_err(|source| io_err(&info_path, source));
            drop(lock);
            r
        })
        .await
        .map_err(|source| io_err(&self.info_path, source))?
    }
}

#[async_trait]
impl Store for FileStore {
    fn location(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    async fn load(&self) -> Result<StoreState, StoreError> {
        self.off_thread(FileStore::load_sync).await
    }

    async fn adopt_identity(&self, id: &str) -> Result<(), StoreError> {
        let path = self.dir.join(STORE_ID);
        if !super::valid_store_id(id) {
            return Err(StoreError::InvalidStoreId {
                path: path.display().to_string(),
                found: id.chars().take(80).collect(),
            });
        }
        let bytes = id.as_bytes().to_vec();
        self.off_thread(move |_| write_bytes(&path, &bytes)).await?;
        tracing::info!(store = %self.location(), store_id = %id, "the store took over another store's identity");
        match self.store_id.lock() {
            Ok(mut mine) => *mine = id.to_string(),
            Err(poisoned) => *poisoned.into_inner() = id.to_string(),
        }
        Ok(())
    }

    async fn commit(&self, expected_serial: u64, state: &StoreState) -> Result<(), StoreError> {
        if state.serial != expected_serial + 1 {
            return Err(StoreError::BadSerial {
                expected: expected_serial,
                given: state.serial,
            });
        }
        let bytes = json_bytes(&self.dir.join(STATE), state)?;
        self.off_thread(move |store| {
            let cas_path = store.dir.join(CAS_LOCK);
            let _cas =
                FileLock::exclusive(&cas_path).map_err(|source| io_err(&cas_path, source))?;
            // Only the serial is needed: skip building the rest of the state.
            let found = read_json::<SerialOnly>(&store.dir.join(STATE))?.map_or(0, |s| s.serial);
            if found != expected_serial {
                return Err(StoreError::Conflict {
                    expected: expected_serial,
                    found,
                });
            }
            write_bytes(&store.dir.join(STATE), &bytes)
        })
        .await?;
        tracing::debug!(serial = state.serial, store = %self.location(), "committed state");
        Ok(())
    }

    async fn lock(
        &self,
        holder: &str,
        timeout: Duration,
    ) -> Result<Box<dyn LockGuard>, StoreError> {
        let lock_path = self.dir.join(LOCK);
        let info_path = self.dir.join(LOCK_INFO);
        let started = Instant::now();
        loop {
            let (lp, ip, who) = (lock_path.clone(), info_path.clone(), holder.to_string());
            let taken = self
                .off_thread(move |_| {
                    let Some(lock) =
                        FileLock::try_exclusive(&lp).map_err(|source| io_err(&lp, source))?
                    else {
                        return Ok(None);
                    };
                    let info = LockInfo {
                        pid: std::process::id(),
                        hostname: fsutil::hostname(),
                        command: who,
                        since: fsutil::rfc3339(fsutil::unix_now()),
                    };
                    write_json(&ip, &info)?;
                    Ok(Some(lock))
                })
                .await?;
            if let Some(lock) = taken {
                tracing::debug!(holder, store = %self.location(), "took the state lock");
                return Ok(Box::new(FileLockGuard {
                    lock: Some(lock),
                    info_path,
                }));
            }
            let waited = started.elapsed();
            if waited >= timeout {
                // The holder writes its record just after taking the lock and removes it
                // just before letting go: a lock without a record is (almost always) one of
                // those moments, so give it a little longer to settle either way.
                let ip = info_path.clone();
                let info = self
                    .off_thread(move |_| Ok(read_json::<LockInfo>(&ip).ok().flatten()))
                    .await?;
                if info.is_none() && waited < timeout.saturating_add(LOCK_RECORD_GRACE) {
                    tokio::time::sleep(LOCK_POLL).await;
                    continue;
                }
                return Err(StoreError::Locked {
                    holder: info
                        .as_ref()
                        .map_or_else(|| "an unknown process".to_string(), |i| i.to_string()),
                    since: info.map_or_else(|| "unknown".to_string(), |i| i.since),
                    waited_seconds: waited.as_secs(),
                });
            }
            tokio::time::sleep(LOCK_POLL.min(timeout - waited)).await;
        }
    }

    async fn read_journal(&self) -> Result<Option<Journal>, StoreError> {
        self.off_thread(|store| {
            let Some(mut journal) = read_json::<Journal>(&store.dir.join(JOURNAL))? else {
                return Ok(None);
            };
            if let Some(p) = read_json::<JournalDone>(&store.dir.join(JOURNAL_DONE))? {
                journal.done = journal.done.max(p.done);
            }
            Ok(Some(journal))
        })
        .await
    }

    async fn write_journal(&self, journal: &Journal) -> Result<(), StoreError> {
        let bytes = json_bytes(&self.dir.join(JOURNAL), journal)?;
        self.off_thread(move |store| {
            // A position left by an earlier journal must not apply to this one.
            let done = store.dir.join(JOURNAL_DONE);
            fsutil::remove_durably(&done).map_err(|source| io_err(&done, source))?;
            write_bytes(&store.dir.join(JOURNAL), &bytes)
        })
        .await
    }

    async fn advance_journal(&self, journal: &Journal) -> Result<(), StoreError> {
        let done = JournalDone { done: journal.done };
        self.off_thread(move |store| write_json(&store.dir.join(JOURNAL_DONE), &done))
            .await
    }

    async fn clear_journal(&self) -> Result<(), StoreError> {
        self.off_thread(|store| {
            // The journal first: without it, a left-over position means nothing.
            for name in [JOURNAL, JOURNAL_DONE] {
                let p = store.dir.join(name);
                fsutil::remove_durably(&p).map_err(|source| io_err(&p, source))?;
            }
            Ok(())
        })
        .await
    }

    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError> {
        let path = self.report_path(&report.host_id)?;
        let bytes = json_bytes(&path, report)?;
        self.off_thread(move |_| write_bytes(&path, &bytes)).await
    }

    async fn reports(&self) -> Result<Vec<HostReport>, StoreError> {
        self.off_thread(FileStore::reports_sync).await
    }

    async fn delete_report(&self, host_id: &str) -> Result<(), StoreError> {
        let p = self.report_path(host_id)?;
        self.off_thread(move |_| fsutil::remove_durably(&p).map_err(|source| io_err(&p, source)))
            .await
    }

    async fn put_status(&self, status: &StatusRecord) -> Result<(), StoreError> {
        let path = self.dir.join(STATUS);
        let bytes = json_bytes(&path, status)?;
        self.off_thread(move |_| write_bytes(&path, &bytes)).await
    }

    async fn status(&self) -> Result<Option<StatusRecord>, StoreError> {
        self.off_thread(|store| read_json(&store.dir.join(STATUS)))
            .await
    }
}

impl FileStore {
    fn reports_sync(&self) -> Result<Vec<HostReport>, StoreError> {
        let dir = self.dir.join(REPORTS);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(io_err(&dir, source)),
        };
        let mut paths = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| io_err(&dir, source))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && name.ends_with(".json") {
                paths.push(entry.path());
            }
        }
        paths.sort();
        let mut out = Vec::with_capacity(paths.len());
        for p in paths {
            // A report removed between listing and reading is simply gone.
            if let Some(r) = read_json::<HostReport>(&p)? {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// The last reconcile pass's status record.
const STATUS: &str = "status.json";

#[cfg(test)]
mod tests {
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
        std::fs::write(dir.path().join(REPORTS).join("h-1.json"), b"").expect("write");
        let e = s.reports().await.expect_err("corrupt report");
        assert!(e.to_string().contains("h-1.json"), "{e}");
    }

    #[tokio::test]
    async fn reports_round_trip_and_bad_host_ids_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = FileStore::open(dir.path()).expect("open");
        let r = |id: &str, at| HostReport {
            host_id: id.into(),
            at,
            mps_health: MpsHealth::Healthy,
            gpus: vec![],
            tasks: BTreeMap::from([("t-1".to_string(), TaskState::Running)]),
            agent_version: String::new(),
            mps_error: None,
            mps_failures: 0,
            task_details: BTreeMap::new(),
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

    #[tokio::test]
    async fn lock_times_out_naming_the_holder_and_is_free_after_release_or_drop() {
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
        // A second handle (as another process would have) waits, then names the holder.
        let other = FileStore::open(dir.path()).expect("open");
        let e = other
            .lock("gpushare plan", Duration::from_millis(120))
            .await
            .err()
            .expect("locked");
        match &e {
            StoreError::Locked { holder, since, .. } => {
                assert!(
                    holder.contains("gpushare apply")
                        && holder.contains(&std::process::id().to_string()),
                    "{holder}"
                );
                assert_eq!(since, &info.since);
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        g.release().await.expect("release");
        assert_eq!(s.lock_info().expect("info"), None);
        let g2 = other
            .lock("gpushare plan", Duration::from_millis(120))
            .await
            .expect("free after release");
        // Dropped without release (a panicking holder): the OS lock goes with it.
        drop(g2);
        other
            .lock("third", Duration::from_millis(120))
            .await
            .expect("free after drop")
            .release()
            .await
            .expect("release");
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
}
