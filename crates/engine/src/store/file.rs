//! The `file` store: a directory (by default `<config dir>/.gpushare/`) holding
//!
//! - `state.json`: the [`StoreState`], replaced atomically, compare-and-swap on its serial;
//! - `journal.json`: the apply in progress, if any;
//! - `reports/<host>.json`: each agent's latest report;
//! - `lock` (an OS advisory lock, released by the kernel when its holder dies) and
//!   `lock.json` naming the holder (pid, host name, command, since).
//!
//! Every write goes through a temporary file in the same directory, fsync, rename
//! and a directory fsync, so a crash leaves either the old or the new content.

use super::{Journal, LockGuard, Store, StoreError};
use crate::fsutil::{self, FileLock};
use async_trait::async_trait;
use gpushare_core::model::{HostReport, StoreState};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const STATE: &str = "state.json";
const JOURNAL: &str = "journal.json";
const REPORTS: &str = "reports";
const LOCK: &str = "lock";
const LOCK_INFO: &str = "lock.json";
/// Serialises compare-and-swap commits between processes (held for microseconds).
const CAS_LOCK: &str = "state.lock";
/// How often a waiting `lock` call retries.
const LOCK_POLL: Duration = Duration::from_millis(50);

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
        write!(f, "{:?} (pid {} on {})", self.command, self.pid, self.hostname)
    }
}

/// The `file` store. Cheap to clone; every call reads or writes the directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// Open (creating if needed) the store directory `dir`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<FileStore, StoreError> {
        let dir = dir.into();
        let reports = dir.join(REPORTS);
        std::fs::create_dir_all(&reports).map_err(|source| io_err(&reports, source))?;
        Ok(FileStore { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Who holds the lock according to `lock.json` (it may be stale when nobody holds the OS lock).
    pub fn lock_info(&self) -> Result<Option<LockInfo>, StoreError> {
        read_json(&self.dir.join(LOCK_INFO))
    }

    fn report_path(&self, host_id: &str) -> Result<PathBuf, StoreError> {
        let ok = !host_id.is_empty()
            && !host_id.starts_with('.')
            && host_id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            return Err(StoreError::InvalidKey { what: "host id", key: host_id.to_string() });
        }
        Ok(self.dir.join(REPORTS).join(format!("{host_id}.json")))
    }

    fn load_sync(&self) -> Result<StoreState, StoreError> {
        Ok(read_json(&self.dir.join(STATE))?.unwrap_or_default())
    }
}

fn io_err(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io { path: path.display().to_string(), source }
}

/// Parse a JSON file; `None` when it does not exist; errors name the path.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    match fsutil::read_optional(path).map_err(|source| io_err(path, source))? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Corrupt { path: path.display().to_string(), source }),
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|source| StoreError::Corrupt { path: path.display().to_string(), source })?;
    fsutil::write_atomic(path, &bytes).map_err(|source| io_err(path, source))
}

/// The held lock: the OS lock on `lock` plus the `lock.json` record.
struct FileLockGuard {
    lock: Option<FileLock>,
    info_path: PathBuf,
}

#[async_trait]
impl LockGuard for FileLockGuard {
    async fn release(mut self: Box<Self>) -> Result<(), StoreError> {
        // Remove the record while still holding the lock, so nobody else's record is removed.
        let r = fsutil::remove_durably(&self.info_path).map_err(|source| io_err(&self.info_path, source));
        self.lock.take();
        r
    }
}

#[async_trait]
impl Store for FileStore {
    fn location(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    async fn load(&self) -> Result<StoreState, StoreError> {
        self.load_sync()
    }

    async fn commit(&self, expected_serial: u64, state: &StoreState) -> Result<(), StoreError> {
        if state.serial != expected_serial + 1 {
            return Err(StoreError::BadSerial { expected: expected_serial, given: state.serial });
        }
        let cas_path = self.dir.join(CAS_LOCK);
        let _cas = FileLock::exclusive(&cas_path).map_err(|source| io_err(&cas_path, source))?;
        let found = self.load_sync()?.serial;
        if found != expected_serial {
            return Err(StoreError::Conflict { expected: expected_serial, found });
        }
        write_json(&self.dir.join(STATE), state)?;
        tracing::debug!(serial = state.serial, store = %self.location(), "committed state");
        Ok(())
    }

    async fn lock(&self, holder: &str, timeout: Duration) -> Result<Box<dyn LockGuard>, StoreError> {
        let lock_path = self.dir.join(LOCK);
        let info_path = self.dir.join(LOCK_INFO);
        let started = Instant::now();
        loop {
            if let Some(lock) = FileLock::try_exclusive(&lock_path).map_err(|source| io_err(&lock_path, source))? {
                let now = fsutil::unix_now();
                let info = LockInfo {
                    pid: std::process::id(),
                    hostname: fsutil::hostname(),
                    command: holder.to_string(),
                    since: fsutil::rfc3339(now),
                };
                write_json(&info_path, &info)?;
                tracing::debug!(holder, store = %self.location(), "took the state lock");
                return Ok(Box::new(FileLockGuard { lock: Some(lock), info_path }));
            }
            let waited = started.elapsed();
            if waited >= timeout {
                // The record may be missing or half-way replaced: name what we can.
                let info = read_json::<LockInfo>(&info_path).ok().flatten();
                return Err(StoreError::Locked {
                    holder: info.as_ref().map_or_else(|| "an unknown process".to_string(), |i| i.to_string()),
                    since: info.map_or_else(|| "unknown".to_string(), |i| i.since),
                    waited_seconds: waited.as_secs(),
                });
            }
            tokio::time::sleep(LOCK_POLL.min(timeout - waited)).await;
        }
    }

    async fn read_journal(&self) -> Result<Option<Journal>, StoreError> {
        read_json(&self.dir.join(JOURNAL))
    }

    async fn write_journal(&self, journal: &Journal) -> Result<(), StoreError> {
        write_json(&self.dir.join(JOURNAL), journal)
    }

    async fn clear_journal(&self) -> Result<(), StoreError> {
        let p = self.dir.join(JOURNAL);
        fsutil::remove_durably(&p).map_err(|source| io_err(&p, source))
    }

    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError> {
        write_json(&self.report_path(&report.host_id)?, report)
    }

    async fn reports(&self) -> Result<Vec<HostReport>, StoreError> {
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

    async fn delete_report(&self, host_id: &str) -> Result<(), StoreError> {
        let p = self.report_path(host_id)?;
        fsutil::remove_durably(&p).map_err(|source| io_err(&p, source))
    }
}
