//! The `file` store: a directory (by default `<config dir>/.gpushare/`) holding
//!
//! - `state.json` and `state.log`: the [`StoreState`] as a snapshot replaced atomically
//!   and the change sets committed since, appended (see [`log`]), compare-and-swap on
//!   the serial;
//! - `journal.json`: the apply in progress, if any, and `journal-done.json`, how far
//!   it has got (so advancing it does not rewrite the whole plan);
//! - `reports/<host>.json`: each agent's latest report;
//! - `store-id`: the store's identity (16 random hex characters), made when the
//!   directory is first opened and never replaced; `load` puts it in
//!   [`StoreState::store_id`] (so a `state.json` written before store identity gets it);
//! - `status.json`: the last reconcile pass's [`StatusRecord`];
//! - `records/<name>.json`: the controller's records ([`Store::get_record`]);
//! - `lock` (an OS advisory lock, released by the kernel when its holder dies) and
//!   `lock.json` naming the holder (pid, host name, command, since).
//!
//! Every write goes through a temporary file in the same directory, fsync, rename
//! and a directory fsync, so a crash leaves either the old or the new content.

use super::{ChangeSet, Journal, LockGuard, Record, StatusRecord, Store, StoreError};
use crate::fsutil::{self, FileLock};
use async_trait::async_trait;
use gpushare_core::model::{HostReport, StoreState};
use gpushare_core::util::{hostname, lock, unix_now};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
    /// What this handle has read of `state.json` and `state.log`, and the state they
    /// make ([`log::Cursor`]): a load of an unchanged store is a clone instead of a
    /// parse, and a shared load not even that (the Terraform provider loads once per
    /// resource of a plan); after other writers' commits only the lines they appended
    /// are read. Shared by the clones.
    cursor: std::sync::Arc<std::sync::Mutex<Option<log::Cursor>>>,
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
            cursor: Default::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The store's identity (the content of `store-id`).
    pub fn store_id(&self) -> String {
        lock(&self.store_id).clone()
    }

    /// Who holds the lock according to `lock.json` (it may be stale when nobody holds the OS lock).
    pub fn lock_info(&self) -> Result<Option<LockInfo>, StoreError> {
        read_json(&self.dir.join(LOCK_INFO))
    }

    fn report_path(&self, host_id: &str) -> Result<PathBuf, StoreError> {
        self.keyed_path(REPORTS, "host id", host_id)
    }

    /// `<under>/<key>.json`, for a `key` that is a valid id (never a path).
    fn keyed_path(
        &self,
        under: &str,
        what: &'static str,
        key: &str,
    ) -> Result<PathBuf, StoreError> {
        if !gpushare_core::ids::valid_id(key) {
            return Err(StoreError::InvalidKey {
                what,
                key: key.to_string(),
            });
        }
        Ok(self.dir.join(under).join(format!("{key}.json")))
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

    /// The cursor, locked (a poisoned lock is taken over: the cursor is re-checked
    /// against the files on every use).
    fn cursor(&self) -> std::sync::MutexGuard<'_, Option<log::Cursor>> {
        lock(&self.cursor)
    }

    fn load_sync(&self) -> Result<std::sync::Arc<StoreState>, StoreError> {
        let store_id = self.store_id();
        let mut cursor = self.cursor();
        self.sync_cursor(&mut cursor, true)?;
        let state = cursor.as_mut().and_then(|c| c.state.as_mut());
        let Some(state) = state else {
            return Err(StoreError::Malformed {
                path: self.dir.join(STATE).display().to_string(),
                reason: "no state after reading it".into(),
            });
        };
        if state.store_id != store_id {
            std::sync::Arc::make_mut(state).store_id = store_id;
        }
        Ok(std::sync::Arc::clone(state))
    }

    /// [`Store::commit_changes`], under the commit lock.
    fn commit_changes_sync(&self, expected: u64, changes: &ChangeSet) -> Result<(), StoreError> {
        let cas_path = self.dir.join(CAS_LOCK);
        let _cas = FileLock::exclusive(&cas_path).map_err(|source| io_err(&cas_path, source))?;
        let mut cursor = self.cursor();
        self.sync_cursor(&mut cursor, false)?;
        let Some(c) = cursor.as_mut() else {
            return Err(StoreError::Malformed {
                path: self.dir.join(STATE).display().to_string(),
                reason: "no state after reading it".into(),
            });
        };
        if c.serial != expected {
            return Err(StoreError::Conflict {
                expected,
                found: c.serial,
            });
        }
        if FileStamp::of(&self.dir.join(STATE)).is_some() {
            return self.append(c, changes);
        }
        // No snapshot yet: the first commit writes one.
        self.sync_cursor(&mut cursor, true)?;
        let mut state = cursor
            .as_ref()
            .and_then(|c| c.state.as_deref())
            .cloned()
            .unwrap_or_default();
        changes.apply_to(&mut state);
        *cursor = Some(self.write_snapshot(std::sync::Arc::new(state))?);
        Ok(())
    }

    /// [`Store::commit`], under the commit lock: the state is written as the new snapshot.
    fn commit_whole_sync(&self, expected: u64, state: StoreState) -> Result<(), StoreError> {
        let cas_path = self.dir.join(CAS_LOCK);
        let _cas = FileLock::exclusive(&cas_path).map_err(|source| io_err(&cas_path, source))?;
        let mut cursor = self.cursor();
        self.sync_cursor(&mut cursor, false)?;
        let found = cursor.as_ref().map_or(0, |c| c.serial);
        if found != expected {
            return Err(StoreError::Conflict { expected, found });
        }
        *cursor = None; // a failed write leaves it to be read again
        let mut state = state;
        state.store_id = self.store_id();
        *cursor = Some(self.write_snapshot(std::sync::Arc::new(state))?);
        Ok(())
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
/// Compact, not indented: the snapshot and the journal of a fleet of 40,000 tasks are
/// tens of megabytes, and indenting them was a sixth of an apply's time (docs/
/// benchmarks.md); `gpushare state pull` prints the state indented for people.
fn json_bytes<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|source| StoreError::Corrupt {
        path: path.display().to_string(),
        source,
    })
}

fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    fsutil::write_atomic(path, bytes).map_err(|source| io_err(path, source))
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
        let shared = self.load_shared().await?;
        Ok(StoreState::clone(&shared))
    }

    async fn load_shared(&self) -> Result<std::sync::Arc<StoreState>, StoreError> {
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
        *lock(&self.store_id) = id.to_string();
        Ok(())
    }

    async fn commit(&self, expected_serial: u64, state: &StoreState) -> Result<(), StoreError> {
        super::check_next_serial(expected_serial, state.serial)?;
        let state = state.clone();
        let serial = state.serial;
        self.off_thread(move |store| store.commit_whole_sync(expected_serial, state))
            .await?;
        tracing::debug!(serial, store = %self.location(), "committed state");
        Ok(())
    }

    async fn commit_changes(
        &self,
        expected_serial: u64,
        changes: &ChangeSet,
    ) -> Result<(), StoreError> {
        super::check_next_serial(expected_serial, changes.serial)?;
        let changes = changes.clone();
        let (serial, records) = (changes.serial, changes.len());
        self.off_thread(move |store| store.commit_changes_sync(expected_serial, &changes))
            .await?;
        tracing::debug!(serial, records, store = %self.location(), "committed changes");
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
                        hostname: hostname(),
                        command: who,
                        since: fsutil::rfc3339(unix_now()),
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

    async fn put_reports(&self, reports: &[HostReport]) -> Result<(), StoreError> {
        for r in reports {
            self.report_path(&r.host_id)?;
        }
        if reports.is_empty() {
            return Ok(());
        }
        let reports = reports.to_vec();
        self.off_thread(move |store| store.put_reports_sync(reports))
            .await
    }

    async fn reports(&self) -> Result<Vec<HostReport>, StoreError> {
        self.off_thread(FileStore::reports_sync).await
    }

    async fn delete_report(&self, host_id: &str) -> Result<(), StoreError> {
        let p = self.report_path(host_id)?;
        let host = host_id.to_string();
        self.off_thread(move |store| {
            fsutil::remove_durably(&p).map_err(|source| io_err(&p, source))?;
            store.edit_report_batch(|batch| batch.remove(&host).is_some())
        })
        .await
    }

    async fn get_record(&self, name: &str) -> Result<Option<Record>, StoreError> {
        let name = name.to_string();
        self.off_thread(move |store| store.get_record_sync(&name))
            .await
    }

    async fn put_record(&self, name: &str, value: &str, expected: u64) -> Result<u64, StoreError> {
        let (name, value) = (name.to_string(), value.to_string());
        self.off_thread(move |store| store.put_record_sync(&name, value, expected))
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
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(self.read_report_batch()?.into_values().collect())
            }
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
        let mut out: BTreeMap<String, HostReport> = self.read_report_batch()?;
        for p in paths {
            let Some(host) = p.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
                continue;
            };
            // A report removed between listing and reading is simply gone.
            let Some(bytes) = fsutil::read_optional(&p).map_err(|source| io_err(&p, source))?
            else {
                continue;
            };
            let r = HostReport::from_stored(&host, &bytes);
            if let Some(why) = &r.unreadable {
                tracing::warn!(path = %p.display(), "report not taken: {why}");
            }
            // A host's own file and its entry in the batch: the later report counts
            // (an unreadable file never hides a readable batch entry).
            match out.get(&host) {
                Some(b) if r.unreadable.is_some() || b.at > r.at => {}
                _ => {
                    out.insert(host, r);
                }
            }
        }
        Ok(out.into_values().collect())
    }

    /// The reports written together ([`Store::put_reports`]), by host.
    fn read_report_batch(&self) -> Result<BTreeMap<String, HostReport>, StoreError> {
        let path = self.dir.join(REPORT_BATCH);
        let Some(bytes) = fsutil::read_optional(&path).map_err(|source| io_err(&path, source))?
        else {
            return Ok(BTreeMap::new());
        };
        let batch: BTreeMap<String, HostReport> =
            serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt {
                path: path.display().to_string(),
                source,
            })?;
        Ok(batch
            .into_iter()
            .map(|(host, r)| {
                let r = HostReport::stored_under(&host, r);
                if let Some(why) = &r.unreadable {
                    tracing::warn!(path = %path.display(), "report not taken: {why}");
                }
                (host, r)
            })
            .collect())
    }

    /// Change the batch of reports under its lock with `edit` (which says whether it
    /// changed anything), and write it back (atomically, one fsync) if so.
    fn edit_report_batch(
        &self,
        edit: impl FnOnce(&mut BTreeMap<String, HostReport>) -> bool,
    ) -> Result<(), StoreError> {
        let lock = self.dir.join(REPORT_BATCH_LOCK);
        let _held = FileLock::exclusive(&lock).map_err(|source| io_err(&lock, source))?;
        let mut batch = self.read_report_batch()?;
        if !edit(&mut batch) {
            return Ok(());
        }
        let path = self.dir.join(REPORT_BATCH);
        let bytes = json_bytes(&path, &batch)?;
        write_bytes(&path, &bytes)
    }

    /// [`Store::put_reports`]: every report into the batch file, one write.
    fn put_reports_sync(&self, reports: Vec<HostReport>) -> Result<(), StoreError> {
        self.edit_report_batch(|batch| {
            for r in reports {
                batch.insert(r.host_id.clone(), r);
            }
            true
        })
    }
}

/// The reports written together by [`Store::put_reports`] (the local fleet's round:
/// one file written once per round instead of a file per host, issue 52), by host.
/// A host's own `reports/<host>.json` (`put_report`) counts instead when it is later.
const REPORT_BATCH: &str = "reports-batch.json";
/// The lock of the batch's read-modify-write.
const REPORT_BATCH_LOCK: &str = "reports-batch.lock";

/// The last reconcile pass's status record.
const STATUS: &str = "status.json";

mod log;
mod records;

#[cfg(test)]
mod tests;
