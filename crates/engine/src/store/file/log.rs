//! The file store's state on disk: `state.json`, a snapshot (a whole [`StoreState`],
//! replaced atomically), and `state.log`, the change sets committed since, appended.
//!
//! `state.log` is lines of `<checksum> <json>`, the checksum being the first 16 hex
//! digits of the JSON's SHA-256. The first line names the snapshot the log extends
//! (its inode, serial and content checksum). A log whose snapshot was folded into a
//! newer one (a crash between the fold's two steps) is not applied; a copy of the
//! store (`cp -r`, rsync, a restored backup: new inodes, the same serial and content)
//! is applied as it is; a log of any other snapshot stops every read with
//! [`StoreError::ForeignLog`], never an empty state. Each
//! further line is one commit's [`ChangeSet`], serials consecutive. A commit appends
//! one line and fsyncs (a crash leaves at most a torn last line, which no reader
//! applies and the next commit cuts off); a new log is written whole and renamed into
//! place. When at least half of what a load reads (snapshot and log) is superseded
//! and the log is over [`FOLD_MIN`], the commit folds the log: it writes a new
//! snapshot and removes the log; a crash in between leaves a log naming the old
//! snapshot, which is then ignored. A log that only adds records (an apply of a new
//! fleet) is never folded: a load reads each record once either way, and folding it
//! would rewrite the whole state for nothing. What is superseded is estimated from
//! the state the handle holds: a line supersedes the JSON of each record of the state
//! that it replaces or deletes ([`ChangeSet::superseded_bytes`]); a line without
//! records (only the whole fields: serial, cluster, refusals, which replace the last
//! commit's) supersedes itself once the next is written, and is counted so at once.
//! A handle whose state a reader shares cannot tell and folds when the log outgrows
//! the snapshot. A store written before the log existed is just a snapshot: it loads
//! as it is, and its first change-set commit starts the log.
//!
//! Each handle keeps a [`Cursor`]: the snapshot it read, how far into the log, and the
//! state they make; a load of an unchanged store is a look at two files' metadata, and
//! a load after other writers' commits reads only the lines they appended.

use super::{io_err, read_json, FileStamp, FileStore, STATE};
use crate::fsutil;
use crate::store::{ChangeSet, Store, StoreError};
use gpushare_core::model::StoreState;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

pub(super) const LOG: &str = "state.log";
/// A log smaller than this is never folded into the snapshot.
pub(super) const FOLD_MIN: u64 = 4 << 20;

/// The first line of `state.log`: the snapshot it extends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Header {
    snapshot_inode: u64,
    snapshot_serial: u64,
    /// [`checksum`] of the snapshot's bytes (absent in logs written before it was
    /// recorded): tells a copy of the snapshot, whose inode differs, from another one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot_sum: Option<String>,
}

/// How a log's header stands to the snapshot beside it.
#[derive(Debug, PartialEq, Eq)]
enum Extends {
    /// The log extends this snapshot (or a copy of it): apply it.
    This,
    /// The snapshot is newer: the log was folded into it (ignored).
    Folded,
    /// Another snapshot: refuse.
    Other { content_differs: bool },
}

impl Header {
    /// How this header stands to the snapshot of `inode` and `serial` whose bytes
    /// `snapshot` reads (only asked when the inode differs).
    fn extends(
        &self,
        inode: Option<u64>,
        serial: u64,
        snapshot: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Extends {
        if inode == Some(self.snapshot_inode) && serial == self.snapshot_serial {
            return Extends::This;
        }
        if serial > self.snapshot_serial {
            return Extends::Folded;
        }
        if serial < self.snapshot_serial || inode.is_none() {
            return Extends::Other {
                content_differs: false,
            };
        }
        // The same serial in a file of another inode: a copy, when the content agrees
        // (a log from before the checksum was recorded is taken by its serial).
        match &self.snapshot_sum {
            None => Extends::This,
            Some(sum) if snapshot().is_some_and(|b| &checksum(&b) == sum) => Extends::This,
            Some(_) => Extends::Other {
                content_differs: true,
            },
        }
    }
}

/// What a handle has read of the store (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct Cursor {
    /// `state.json` as read (`None`: there was none).
    snap: Option<FileStamp>,
    snap_serial: u64,
    /// `state.log` as applied: its inode and the length of its valid lines (`None`:
    /// no log, or one that does not extend the snapshot).
    log: Option<(u64, u64)>,
    /// The serial of the state the snapshot and the log make.
    pub(super) serial: u64,
    /// The bytes of the snapshot and the log estimated to be superseded (see the module
    /// docs); `None` when a line was applied without the state at hand.
    dead: Option<u64>,
    /// That state (its `store_id` filled), unless a commit could not update it in place.
    pub(super) state: Option<Arc<StoreState>>,
}

/// The log's inode and length, `None` when there is none.
fn log_stat(path: &Path) -> Result<Option<(u64, u64)>, StoreError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some((m.ino(), m.len()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(io_err(path, source)),
    }
}

/// One line of the log: checksum, space, JSON, newline.
fn line<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, StoreError> {
    let json = serde_json::to_vec(value).map_err(|source| StoreError::Corrupt {
        path: path.display().to_string(),
        source,
    })?;
    let mut out = Vec::with_capacity(json.len() + 18);
    out.extend_from_slice(checksum(&json).as_bytes());
    out.push(b' ');
    out.extend_from_slice(&json);
    out.push(b'\n');
    Ok(out)
}

pub(super) fn checksum(json: &[u8]) -> String {
    hex::encode(&sha2::Sha256::digest(json)[..8])
}

/// The JSON of a complete line whose checksum holds, else `None`.
fn verified(line: &[u8]) -> Option<&[u8]> {
    let (sum, json) = (line.get(..16)?, line.get(17..)?);
    (line.get(16) == Some(&b' ') && sum == checksum(json).as_bytes()).then_some(json)
}

impl Cursor {
    /// Count the line of `changes` (`line_len` bytes) as appended to the log, before
    /// it is applied to the state.
    fn count(&mut self, changes: &ChangeSet, line_len: u64) {
        let dead = match self.state.as_deref() {
            _ if changes.is_empty() => Some(line_len),
            Some(st) => Some(changes.superseded_bytes(st)),
            None => None,
        };
        self.dead = self.dead.zip(dead).map(|(a, b)| a.saturating_add(b));
    }

    /// Whether a log `log_len` bytes long is to be folded into the snapshot.
    fn should_fold(&self, log_len: u64) -> bool {
        let snapshot_len = self.snap.as_ref().map_or(0, |s| s.len);
        log_len > FOLD_MIN
            && match self.dead {
                Some(dead) => dead.saturating_mul(2) >= snapshot_len.saturating_add(log_len),
                None => log_len > snapshot_len,
            }
    }

    /// Apply the log's lines in `bytes` (read from offset `from` of the log with inode
    /// `inode`); a torn last line is left out.
    fn apply_log(
        &mut self,
        path: &Path,
        inode: u64,
        from: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let bad = |reason: String| StoreError::Malformed {
            path: path.display().to_string(),
            reason,
        };
        let mut at = 0usize;
        let mut first = from == 0;
        while at < bytes.len() {
            let Some(n) = bytes[at..].iter().position(|b| *b == b'\n') else {
                break; // torn: never acknowledged
            };
            let Some(json) = verified(&bytes[at..at + n]) else {
                if at + n + 1 < bytes.len() {
                    return Err(bad(format!(
                        "line at byte {} fails its checksum and is not the last",
                        from + at as u64
                    )));
                }
                break; // a torn last line
            };
            if first {
                let h: Header =
                    serde_json::from_slice(json).map_err(|e| bad(format!("header: {e}")))?;
                let mine = self.snap.as_ref().map(|s| s.inode);
                let snapshot = || std::fs::read(path.with_file_name(STATE)).ok();
                match h.extends(mine, self.snap_serial, snapshot) {
                    Extends::This => {
                        if mine != Some(h.snapshot_inode) {
                            tracing::info!(path = %path.display(), "the log extends a copy of this snapshot (same serial and content, another inode): applied");
                        }
                    }
                    Extends::Folded => {
                        tracing::debug!(path = %path.display(), "the log was folded into the newer snapshot; not applied");
                        self.log = None;
                        return Ok(());
                    }
                    Extends::Other { content_differs } => {
                        return Err(StoreError::ForeignLog {
                            path: path.display().to_string(),
                            log_snapshot_serial: h.snapshot_serial,
                            snapshot_serial: self.snap_serial,
                            content_differs,
                        });
                    }
                }
                first = false;
            } else {
                let c: ChangeSet = serde_json::from_slice(json)
                    .map_err(|e| bad(format!("line at byte {}: {e}", from + at as u64)))?;
                if c.serial > self.serial {
                    if c.serial != self.serial + 1 {
                        return Err(bad(format!(
                            "serial {} follows serial {}",
                            c.serial, self.serial
                        )));
                    }
                    self.count(&c, n as u64 + 1);
                    self.serial = c.serial;
                    if let Some(st) = self.state.as_mut() {
                        c.apply_into(Arc::make_mut(st));
                    }
                }
            }
            at += n + 1;
        }
        self.log = Some((inode, from + at as u64));
        Ok(())
    }
}

impl FileStore {
    fn log_path(&self) -> std::path::PathBuf {
        self.dir.join(LOG)
    }

    /// Bring `cursor` up to date with the files (`want_state`: with the state too).
    pub(super) fn sync_cursor(
        &self,
        cursor: &mut Option<Cursor>,
        want_state: bool,
    ) -> Result<(), StoreError> {
        let snap = FileStamp::of(&self.dir.join(STATE));
        let log = log_stat(&self.log_path())?;
        if let Some(c) = cursor.as_mut() {
            if c.snap == snap && (!want_state || c.state.is_some()) {
                match (c.log, log) {
                    (None, None) => return Ok(()),
                    (Some((ino, at)), Some((now_ino, len))) if ino == now_ino && at <= len => {
                        if at < len {
                            self.read_log(c, ino, at)?;
                        }
                        return Ok(());
                    }
                    // A log begun since (by this handle's snapshot or another).
                    (None, Some((ino, _))) if c.serial == c.snap_serial => {
                        return self.read_log(c, ino, 0);
                    }
                    _ => {}
                }
            }
        }
        *cursor = Some(self.read_all(snap, log)?);
        Ok(())
    }

    /// Read the log of inode `inode` from `from` and apply it to `c`.
    fn read_log(&self, c: &mut Cursor, inode: u64, from: u64) -> Result<(), StoreError> {
        let path = self.log_path();
        let mut f = match std::fs::File::open(&path) {
            Ok(f) => f,
            // Compacted away since: the next sync reads the new snapshot.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(io_err(&path, source)),
        };
        let mut bytes = Vec::new();
        f.seek(SeekFrom::Start(from))
            .and_then(|_| f.read_to_end(&mut bytes))
            .map_err(|source| io_err(&path, source))?;
        c.apply_log(&path, inode, from, &bytes)
    }

    /// Read the snapshot and the whole log.
    fn read_all(
        &self,
        snap: Option<FileStamp>,
        log: Option<(u64, u64)>,
    ) -> Result<Cursor, StoreError> {
        let store_id = self.store_id();
        let mut state: StoreState = read_json(&self.dir.join(STATE))?.unwrap_or_default();
        if !state.store_id.is_empty() && state.store_id != store_id {
            tracing::warn!(recorded = %state.store_id, store_id = %store_id, store = %self.location(), "state.json names another store id than the store-id file; the file wins");
        }
        state.store_id = store_id;
        let mut c = Cursor {
            snap,
            snap_serial: state.serial,
            log: None,
            serial: state.serial,
            dead: Some(0),
            state: Some(Arc::new(state)),
        };
        if let (Some((ino, _)), Some(_)) = (log, &c.snap) {
            self.read_log(&mut c, ino, 0)?;
        }
        Ok(c)
    }

    /// Append `changes` to the log (beginning one when there is none that extends the
    /// snapshot), folding it into the snapshot when enough of it is superseded. The
    /// caller holds the commit lock and has checked the serial; `c` is in sync.
    pub(super) fn append(&self, c: &mut Cursor, changes: &ChangeSet) -> Result<(), StoreError> {
        let path = self.log_path();
        let record = line(&path, changes)?;
        let end = match c.log {
            Some((ino, at)) => {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|source| io_err(&path, source))?;
                use std::os::unix::fs::MetadataExt;
                let now = f.metadata().map_err(|source| io_err(&path, source))?.ino();
                if now != ino {
                    return Err(StoreError::Malformed {
                        path: path.display().to_string(),
                        reason: "replaced while the commit lock was held".into(),
                    });
                }
                // Cut off a torn line a crashed writer left, then append.
                f.set_len(at)
                    .and_then(|_| f.seek(SeekFrom::Start(at)))
                    .and_then(|_| f.write_all(&record))
                    .and_then(|_| f.sync_data())
                    .map_err(|source| io_err(&path, source))?;
                (ino, at + record.len() as u64)
            }
            None => {
                let snap = c.snap.as_ref().map_or(0, |s| s.inode);
                let snapshot_sum = match std::fs::read(self.dir.join(STATE)) {
                    Ok(bytes) => Some(checksum(&bytes)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(source) => return Err(io_err(&self.dir.join(STATE), source)),
                };
                let mut bytes = line(
                    &path,
                    &Header {
                        snapshot_inode: snap,
                        snapshot_serial: c.snap_serial,
                        snapshot_sum,
                    },
                )?;
                bytes.extend_from_slice(&record);
                fsutil::write_atomic(&path, &bytes).map_err(|source| io_err(&path, source))?;
                let ino = log_stat(&path)?.map_or(0, |(ino, _)| ino);
                (ino, bytes.len() as u64)
            }
        };
        c.log = Some(end);
        c.serial = changes.serial;
        c.count(changes, record.len() as u64);
        // Keep the state when no reader shares it (else it is read again when asked for).
        match c.state.as_mut().and_then(Arc::get_mut) {
            Some(st) => changes.apply_to(st),
            None => c.state = None,
        }
        if c.should_fold(end.1) {
            self.fold(c)?;
        }
        Ok(())
    }

    /// Write the state `c` makes as the new snapshot and remove the log.
    fn fold(&self, c: &mut Cursor) -> Result<(), StoreError> {
        let state = match &c.state {
            Some(st) => Arc::clone(st),
            None => {
                let snap = FileStamp::of(&self.dir.join(STATE));
                let log = log_stat(&self.log_path())?;
                let all = self.read_all(snap, log)?;
                all.state.ok_or_else(|| StoreError::Malformed {
                    path: self.log_path().display().to_string(),
                    reason: "no state after reading it whole".into(),
                })?
            }
        };
        let started = std::time::Instant::now();
        *c = self.write_snapshot(state)?;
        tracing::debug!(serial = c.serial, ms = started.elapsed().as_millis() as u64, store = %self.location(), "folded the state log into state.json");
        Ok(())
    }

    /// Write `state` as `state.json`, then remove the log (a crash in between leaves a
    /// log naming the old snapshot, never applied). Returns the cursor after it.
    pub(super) fn write_snapshot(&self, state: Arc<StoreState>) -> Result<Cursor, StoreError> {
        let path = self.dir.join(STATE);
        let bytes = super::json_bytes(&path, &*state)?;
        super::write_bytes(&path, &bytes)?;
        let log = self.log_path();
        fsutil::remove_durably(&log).map_err(|source| io_err(&log, source))?;
        Ok(Cursor {
            snap: FileStamp::of(&path),
            snap_serial: state.serial,
            log: None,
            serial: state.serial,
            dead: Some(0),
            state: Some(state),
        })
    }
}
