//! Small file-system helpers shared by the file store, the local fleet and the CLI's
//! files (saved plans, `fmt`): atomic replacement of a file through a private
//! temporary file, OS advisory locks on files opened without following symlinks,
//! and a clock for lock records.
//!
//! Files made here are private (0600) unless told to keep an existing file's mode;
//! temporary files have unique names (`.NAME.PID.RANDOM.tmp`, created with
//! `O_CREAT|O_EXCL`), so nothing planted at a predictable name is ever written through.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of the files the store and the CLI write (they may hold secrets).
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// Mode of the store's directories.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// A fresh temporary file beside `path` (same directory, so a rename is atomic),
/// named `.NAME.PID.RANDOM.tmp` and created exclusively with mode 0600.
fn temp_beside(path: &Path) -> io::Result<tempfile::NamedTempFile> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    tempfile::Builder::new()
        .prefix(&format!(".{name}.{}.", std::process::id()))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))
        .tempfile_in(parent_dir(path))
}

/// Replace `path` with `bytes` atomically: write a private temporary file in the
/// same directory, fsync it, rename it over `path` (a symlink at `path` is replaced,
/// never followed), then fsync the directory. A reader sees either the old content or
/// the new one, never a mix, even after a crash. The new file is 0600.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_mode(path, bytes, PRIVATE_FILE_MODE)
}

/// [`write_atomic`] keeping the permission bits `path` has now (0600 when it does
/// not exist): for files the user owns, such as configuration rewritten by `fmt`.
pub fn write_atomic_keeping_mode(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mode = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => m.permissions().mode() & 0o7777,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => PRIVATE_FILE_MODE,
        Err(e) => return Err(e),
    };
    write_atomic_mode(path, bytes, mode)
}

fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut tmp = temp_beside(path)?;
    tmp.write_all(bytes)?;
    if mode != PRIVATE_FILE_MODE {
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    tmp.as_file().sync_all()?;
    // On error the temporary file is removed when `PersistError` drops it.
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(parent_dir(path))
}

/// Create `path` with `bytes` unless it exists, never replacing it: the content
/// goes to a private temporary file (fsynced) that is then linked to `path`, which
/// fails when `path` exists, so a concurrent creator's file is never clobbered and no
/// reader sees a half-written file. Returns whether this call created it.
pub(crate) fn create_once(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let mut tmp = temp_beside(path)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    match tmp.persist_noclobber(path) {
        Ok(_) => {
            sync_dir(parent_dir(path))?;
            Ok(true)
        }
        Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e.error),
    }
}

/// Create `dir` (and its parents) if needed; a directory this call creates gets mode
/// 0700. An existing one that others can read is tightened to 0700 (it holds the
/// state, which may hold secrets), with a log line saying so.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))?;
                tracing::info!(dir = %dir.display(), from = format!("{mode:o}"), "made the store directory private (0700)");
            }
            Ok(())
        }
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a directory", dir.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(PRIVATE_DIR_MODE)
            .create(dir),
        Err(e) => Err(e),
    }
}

/// Remove the temporary files (`.NAME.PID.RANDOM.tmp`) that writers killed half-way
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

/// The writer's pid in a temporary file name `.NAME.PID.RANDOM.tmp`.
fn temp_file_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut parts = rest.rsplitn(3, '.');
    parts.next().filter(|r| !r.is_empty())?;
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
    /// Opens (creating, 0600) the lock file; a symlink at `path` is refused
    /// (`O_NOFOLLOW`), so a planted link cannot make the lock create or touch another file.
    fn open(path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(PRIVATE_FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    }

    /// Wait for the lock (for short critical sections).
    pub(crate) fn exclusive(path: &Path) -> io::Result<FileLock> {
        let file = Self::open(path)?;
        file.lock()?;
        Ok(FileLock { file })
    }

    /// Take the lock if it is free; `None` when someone else holds it.
    pub(crate) fn try_exclusive(path: &Path) -> io::Result<Option<FileLock>> {
        let file = Self::open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(FileLock { file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the file releases the lock anyway; unlocking first is just tidy.
        let _ = self.file.unlock();
    }
}

/// Run `f` (blocking file I/O: reads, fsync'd writes, flock) on tokio's blocking
/// threads and wait for it, so the file store and the local fleet never stall an async
/// worker (the provider answers StopProvider while an apply writes). A task that
/// panicked or was cancelled comes back as an I/O error.
pub(crate) async fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(format!("a file I/O task failed: {e}")))
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the Unix epoch (UTC).
pub fn rfc3339(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .unwrap_or(jiff::Timestamp::MAX)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
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
        assert_eq!(temp_file_pid(".state.json.123.Ab3xYz.tmp"), Some(123));
        assert_eq!(temp_file_pid(".state.json.x.7.tmp"), None);
        assert_eq!(temp_file_pid(".state.json.123..tmp"), None);
        assert_eq!(temp_file_pid("state.json"), None);
        let dir = tempfile::tempdir().expect("tempdir");
        // A pid far above any pid_max: no such process.
        let dead = dir.path().join(".state.json.4294967295.q1w2e3.tmp");
        let mine = dir
            .path()
            .join(format!(".state.json.{}.q1w2e3.tmp", std::process::id()));
        let other = dir.path().join("state.json");
        for p in [&dead, &mine, &other] {
            std::fs::write(p, b"x").expect("write");
        }
        remove_stale_temps(dir.path());
        assert_eq!(!dead.exists(), Path::new("/proc/self").exists());
        assert!(mine.exists() && other.exists());
    }

    #[test]
    fn written_files_are_private_and_fmt_style_writes_keep_the_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("state.json");
        write_atomic(&p, b"{}").expect("write");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&p), 0o600);
        let user = dir.path().join("main.hcl");
        std::fs::write(&user, b"x").expect("write");
        std::fs::set_permissions(&user, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        write_atomic_keeping_mode(&user, b"y").expect("write");
        assert_eq!(mode(&user), 0o640);
        assert_eq!(std::fs::read(&user).expect("read"), b"y");
        let fresh = dir.path().join("new.hcl");
        write_atomic_keeping_mode(&fresh, b"z").expect("write");
        assert_eq!(mode(&fresh), 0o600);
    }

    #[test]
    fn a_planted_symlink_is_replaced_never_written_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").expect("write");
        let p = dir.path().join("plan.json");
        std::os::unix::fs::symlink(&victim, &p).expect("symlink");
        write_atomic(&p, b"plan").expect("write");
        assert_eq!(std::fs::read(&victim).expect("read"), b"precious");
        assert!(std::fs::symlink_metadata(&p).expect("stat").is_file());
        // A lock file planted as a symlink is refused, its target untouched.
        let lock = dir.path().join("lock");
        std::os::unix::fs::symlink(&victim, &lock).expect("symlink");
        assert!(FileLock::try_exclusive(&lock).is_err());
        assert_eq!(std::fs::read(&victim).expect("read"), b"precious");
    }

    #[test]
    fn a_store_directory_is_made_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fresh = dir.path().join("a/b");
        create_private_dir(&fresh).expect("mkdir");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&fresh), 0o700);
        let open = dir.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        create_private_dir(&open).expect("tighten");
        assert_eq!(mode(&open), 0o700);
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
