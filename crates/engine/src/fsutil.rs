//! Small file-system helpers shared by the file store and the local fleet:
//! atomic replacement of a file, OS advisory locks, and a clock for lock records.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replace `path` with `bytes` atomically: write a temporary file in the same
/// directory, fsync it, rename it over `path`, then fsync the directory. A reader
/// sees either the old content or the new one, never a mix, even after a crash.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        // Best effort: a leftover temp file is harmless (names start with a dot and are skipped).
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Create `path` with `bytes` unless it exists, never replacing it: the content
/// goes to a temporary file (fsynced) that is then hard-linked to `path`, which fails
/// when `path` exists, so a concurrent creator's file is never clobbered and no
/// reader sees a half-written file. Returns whether this call created it.
pub(crate) fn create_once(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => {
                sync_dir(dir)?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    })();
    // The temporary name goes in every case (best effort: leftovers are skipped and
    // removed by `remove_stale_temps`).
    let _ = std::fs::remove_file(&tmp);
    result
}

/// Remove the temporary files (`.NAME.PID.N.tmp`) that writers killed half-way
/// through [`write_atomic`] left in `dir`, when their process is gone. Only where
/// `/proc` tells which processes live; best effort (errors are ignored).
pub(crate) fn remove_stale_temps(dir: &Path) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = temp_file_pid(&name) else {
            continue;
        };
        if pid != std::process::id() && !proc.join(pid.to_string()).exists() {
            tracing::debug!(file = %entry.path().display(), pid, "removing a temporary file left by a dead writer");
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The writer's pid in a temporary file name `.NAME.PID.N.tmp`.
fn temp_file_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut parts = rest.rsplitn(3, '.');
    let _counter: u64 = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    parts.next().filter(|n| !n.is_empty())?;
    Some(pid)
}

/// Remove `path` (no error if it is already gone) and fsync its directory.
pub(crate) fn remove_durably(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(parent_dir(path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// fsync a directory so a rename or removal in it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The content of `path`, or `None` when it does not exist.
pub(crate) fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// An exclusive OS advisory lock (flock) on a file, released when dropped or when
/// the process dies, so a killed process never leaves a stale lock behind.
#[derive(Debug)]
pub(crate) struct FileLock {
    file: File,
}

impl FileLock {
    fn open(path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
    }

    /// Wait for the lock (for short critical sections).
    pub(crate) fn exclusive(path: &Path) -> io::Result<FileLock> {
        let file = Self::open(path)?;
        fs2::FileExt::lock_exclusive(&file)?;
        Ok(FileLock { file })
    }

    /// Take the lock if it is free; `None` when someone else holds it.
    pub(crate) fn try_exclusive(path: &Path) -> io::Result<Option<FileLock>> {
        let file = Self::open(path)?;
        match fs2::FileExt::try_lock_exclusive(&file) {
            Ok(()) => Ok(Some(FileLock { file })),
            Err(e)
                if e.kind() == fs2::lock_contended_error().kind()
                    || e.kind() == io::ErrorKind::WouldBlock =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the file releases the lock anyway; unlocking first is just tidy.
        let _ = fs2::FileExt::unlock(&self.file);
    }
}

/// Seconds since the Unix epoch (0 if the clock is before 1970).
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the Unix epoch (UTC).
pub(crate) fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// This machine's host name (best effort).
pub(crate) fn hostname() -> String {
    for p in ["/proc/sys/kernel/hostname", "/etc/hostname"] {
        if let Ok(s) = std::fs::read_to_string(p) {
            let s = s.trim();
            if !s.is_empty() {
                return s.to_string();
            }
        }
    }
    std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown-host".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_999_999), "2026-11-30T00:53:19Z");
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("x.json");
        write_atomic(&p, b"one").expect("write");
        write_atomic(&p, b"two").expect("write");
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x.json")]);
        remove_durably(&p).expect("remove");
        remove_durably(&p).expect("remove twice is fine");
        assert_eq!(read_optional(&p).expect("read"), None);
    }

    #[test]
    fn create_once_never_replaces_an_existing_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("store-id");
        assert!(create_once(&p, b"first").expect("create"));
        assert!(!create_once(&p, b"second").expect("exists"));
        assert_eq!(std::fs::read(&p).expect("read"), b"first");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("store-id")]);
    }

    #[test]
    fn stale_temp_files_of_dead_writers_are_removed() {
        assert_eq!(temp_file_pid(".state.json.123.7.tmp"), Some(123));
        assert_eq!(temp_file_pid(".state.json.x.7.tmp"), None);
        assert_eq!(temp_file_pid("state.json"), None);
        let dir = tempfile::tempdir().expect("tempdir");
        // A pid far above any pid_max: no such process.
        let dead = dir.path().join(".state.json.4294967295.0.tmp");
        let mine = dir
            .path()
            .join(format!(".state.json.{}.0.tmp", std::process::id()));
        let other = dir.path().join("state.json");
        for p in [&dead, &mine, &other] {
            std::fs::write(p, b"x").expect("write");
        }
        remove_stale_temps(dir.path());
        assert_eq!(!dead.exists(), Path::new("/proc/self").exists());
        assert!(mine.exists() && other.exists());
    }

    #[test]
    fn try_lock_sees_a_held_lock_until_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("lock");
        let held = FileLock::try_exclusive(&p).expect("io").expect("free");
        assert!(FileLock::try_exclusive(&p).expect("io").is_none());
        drop(held);
        assert!(FileLock::try_exclusive(&p).expect("io").is_some());
    }
}
