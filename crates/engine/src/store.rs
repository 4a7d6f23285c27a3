//! The `Store` trait: the system of record for specs, placements, host reports,
//! the apply journal and the lock.

use async_trait::async_trait;
use gpushare_core::model::{Host, HostReport, Revision, StoreState, Task};
use gpushare_core::plan::Plan;
use serde::{Deserialize, Serialize};
use std::time::Duration;

mod changes;
pub mod edit;
pub mod file;
pub use changes::{ChangeSet, ChangedKeys};
pub use file::{FileStore, LockInfo};

/// A fresh random store id: 16 lowercase hex characters (64 bits from the OS's
/// random source), for a store being created.
pub fn new_store_id() -> String {
    use rand::RngCore;
    format!("{:016x}", rand::rngs::OsRng.next_u64())
}

/// Whether `id` is acceptable as a store id (as written in a tag and a file).
pub fn valid_store_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {location} is unreachable")]
    Unreachable {
        location: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("I/O error on {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is corrupt: {reason}")]
    Malformed { path: String, reason: String },
    #[error("{path} extends another state.json than the one beside it (the log's snapshot is at serial {log_snapshot_serial}, state.json at serial {snapshot_serial}{}); nothing was read. Restore state.json and state.log from the same copy, or move state.log aside to use state.json alone (the commits the log holds are then lost)", content_differs_text(.content_differs))]
    ForeignLog {
        path: String,
        log_snapshot_serial: u64,
        snapshot_serial: u64,
        content_differs: bool,
    },
    #[error("{path} is corrupt")]
    Corrupt {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the state is locked by {holder} (since {since}); waited {waited_seconds} s")]
    Locked {
        holder: String,
        since: String,
        waited_seconds: u64,
    },
    #[error("the state moved on: expected serial {expected}, found {found}")]
    Conflict { expected: u64, found: u64 },
    #[error("a commit over serial {expected} must carry serial {}, not {given}", expected + 1)]
    BadSerial { expected: u64, given: u64 },
    #[error("{path} does not hold a valid store id (1 to 64 letters, digits, '-' or '_'; found {found:?})")]
    InvalidStoreId { path: String, found: String },
    #[error("{key:?} is not a valid {what} (letters, digits, '-', '_' and '.' only, not starting with '.')")]
    InvalidKey { what: &'static str, key: String },
    #[error("record {name:?} moved on: expected version {expected}, found {found}")]
    RecordConflict {
        name: String,
        expected: u64,
        found: u64,
    },
}

fn content_differs_text(differs: &bool) -> &'static str {
    if *differs {
        ", and its content differs"
    } else {
        ""
    }
}

/// A small record kept beside the state that only the controller reads and writes
/// (the agent API's cluster CA and join tokens: see docs/agent.md), with its version
/// for compare-and-swap ([`Store::put_record`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub value: String,
    /// Changes on every write; never 0 for a record that exists.
    pub version: u64,
}

/// An apply in progress, written before the first step and removed after the last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    pub plan: Plan,
    /// Number of steps of `plan.steps()` completed and committed.
    pub done: usize,
    pub holder: String,
}

/// What the last reconcile pass did, written by `gpushare reconcile` after every pass
/// (`gpushare status` prints it). Times are RFC 3339, UTC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusRecord {
    /// Counts the passes of the process that wrote it, from 1.
    pub pass: u64,
    pub started_at: String,
    pub finished_at: String,
    /// What the configuration came from: a directory, or `URL@REF`.
    pub source: String,
    /// The commit whose configuration the pass reconciled (git sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// SHA-256 of the configuration reconciled, as loaded (tells drift, where the
    /// fleet changed, from a new configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_digest: Option<String>,
    /// The digest of the configuration the fleet was last converged to (by this
    /// pass or an earlier one; `--drift-only` passes carry it on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub converged_digest: Option<String>,
    pub outcome: PassOutcomeKind,
    /// The plan's summary line (counts of changes and the cost), when a plan was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Why the pass failed (`outcome = failed`), or why a newer commit was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Drift corrected by this process so far (passes whose plan changed the fleet
    /// while the configuration had not changed).
    #[serde(default)]
    pub drift_corrections: u64,
    /// Each impaired host and GPU after the pass, one line each, with whether its
    /// pool repairs it (`auto_repair`) or only reports it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<String>,
    /// Each service's deployment that is not complete after the pass (IN_PROGRESS,
    /// FAILED, ROLLED_BACK), one line each (docs/deployments.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployments: Vec<String>,
    /// Who wrote it: the command, pid and host name.
    pub holder: String,
}

/// How a reconcile pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassOutcomeKind {
    /// The fleet matched the configuration.
    NoChanges,
    /// A new configuration (commit) was applied.
    Applied,
    /// The configuration had not changed but the fleet had: the difference was applied.
    DriftCorrected,
    /// `--drift-only`: the fleet differs from the configuration; nothing was applied.
    DriftDetected,
    Failed,
}

impl PassOutcomeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PassOutcomeKind::NoChanges => "no_changes",
            PassOutcomeKind::Applied => "applied",
            PassOutcomeKind::DriftCorrected => "drift_corrected",
            PassOutcomeKind::DriftDetected => "drift_detected",
            PassOutcomeKind::Failed => "failed",
        }
    }
}

/// What one commit changed of the parts of the state hosts are served from (hosts,
/// tasks, task-definition revisions: not the applied resources), as
/// [`Store::watch_state`] reports it. `None`: removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StateChange {
    /// The serial of the state after the change.
    pub serial: u64,
    pub cluster: String,
    pub hosts: Vec<(String, Option<Host>)>,
    pub tasks: Vec<(String, Option<Task>)>,
    pub revisions: Vec<(String, Option<Vec<Revision>>)>,
}

/// An item of [`Store::watch_state`].
#[derive(Debug, Clone)]
pub enum StateEvent {
    /// The whole state: first, and again whenever the watch had to read it again.
    Whole(std::sync::Arc<StoreState>),
    /// One commit's change, applied to the state last reported.
    Change(StateChange),
}

/// The receiving end of [`Store::watch_state`]; dropping it stops the watch.
pub type StateEvents = tokio::sync::mpsc::Receiver<Result<StateEvent, StoreError>>;

/// A commit's serial must be the next one: `expected + 1`, else [`StoreError::BadSerial`].
pub fn check_next_serial(expected: u64, given: u64) -> Result<(), StoreError> {
    if given == expected + 1 {
        Ok(())
    } else {
        Err(StoreError::BadSerial { expected, given })
    }
}

/// Held while a process changes the state; released on drop or explicitly.
#[async_trait]
pub trait LockGuard: Send + Sync {
    async fn release(self: Box<Self>) -> Result<(), StoreError>;
}

/// Leadership of the reconcilers that share a store: only the leader reconciles.
#[async_trait]
pub trait Leader: Send + Sync {
    /// Still the leader (its lease has not been lost).
    fn is_leader(&self) -> bool;
    /// Resolves when leadership is lost: stop planning and applying at once.
    async fn lost(&self);
    /// Step down now, so a standby takes over at once.
    async fn resign(self: Box<Self>) -> Result<(), StoreError>;
}

#[async_trait]
pub trait Store: Send + Sync {
    /// Human-readable location, e.g. `file:///srv/fleet/.gpushare`.
    fn location(&self) -> String;
    /// Read the whole state (an empty state with serial 0 when nothing was ever written).
    ///
    /// Every store must fill `StoreState::store_id` with its own identity: a random
    /// id made once, when the store is first created, and never changed (whatever
    /// `state.json` or its equivalent holds, so states written before store
    /// identity get it too). It keeps two stores of one cluster name from taking
    /// over each other's instances (see docs/security.md, "Store identity").
    async fn load(&self) -> Result<StoreState, StoreError>;
    /// What `load` reads, shared instead of copied, for readers that only look: a store
    /// that keeps the state it read last hands out that one while the stored state is
    /// unchanged (the Terraform provider reads the state once per resource of a plan).
    async fn load_shared(&self) -> Result<std::sync::Arc<StoreState>, StoreError> {
        Ok(std::sync::Arc::new(self.load().await?))
    }
    /// Take `id` as this store's identity from now on (`state push` moving a fleet's
    /// state here from another store: the fleet's instances carry that id). The
    /// caller holds the lock and has checked that this store records nothing yet;
    /// an `id` that is not a store id is refused.
    async fn adopt_identity(&self, id: &str) -> Result<(), StoreError>;
    /// Write `state` (whose serial must be `expected_serial + 1`) if the stored serial is still `expected_serial`.
    /// The stores write only what differs from the stored state (a comparison of
    /// every record); writers that know what they changed use [`Store::commit_changes`].
    async fn commit(&self, expected_serial: u64, state: &StoreState) -> Result<(), StoreError>;
    /// Apply `changes` (whose serial must be `expected_serial + 1`) if the stored
    /// serial is still `expected_serial`, else [`StoreError::Conflict`] and nothing is
    /// written: the compare-and-swap of [`Store::commit`], at the cost of what
    /// changed. The default (for stores that only write whole states) loads the
    /// state, applies the changes and commits it whole.
    async fn commit_changes(
        &self,
        expected_serial: u64,
        changes: &ChangeSet,
    ) -> Result<(), StoreError> {
        check_next_serial(expected_serial, changes.serial)?;
        let mut state = self.load().await?;
        if state.serial != expected_serial {
            return Err(StoreError::Conflict {
                expected: expected_serial,
                found: state.serial,
            });
        }
        changes.apply_to(&mut state);
        self.commit(expected_serial, &state).await
    }
    /// Take the exclusive lock, waiting up to `timeout`; the error names the holder.
    async fn lock(&self, holder: &str, timeout: Duration)
        -> Result<Box<dyn LockGuard>, StoreError>;
    async fn read_journal(&self) -> Result<Option<Journal>, StoreError>;
    async fn write_journal(&self, journal: &Journal) -> Result<(), StoreError>;
    async fn clear_journal(&self) -> Result<(), StoreError>;
    /// Record `journal.done` for the journal already written (its plan and holder are
    /// unchanged). Stores may write just the position; the default rewrites it all.
    async fn advance_journal(&self, journal: &Journal) -> Result<(), StoreError> {
        self.write_journal(journal).await
    }
    /// An agent's report about its host (heartbeat, MPS health, task states).
    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError>;
    /// Many hosts' reports at once (the local fleet's round, issue 52): stores write
    /// them in one batch; the default writes them one by one.
    async fn put_reports(&self, reports: &[HostReport]) -> Result<(), StoreError> {
        for r in reports {
            self.put_report(r).await?;
        }
        Ok(())
    }
    async fn reports(&self) -> Result<Vec<HostReport>, StoreError>;
    /// Forget a host's report (its host was retired). No error if there is none.
    async fn delete_report(&self, host_id: &str) -> Result<(), StoreError> {
        let _ = host_id;
        Ok(())
    }
    /// The controller's record `name` (a store key: letters, digits, '-', '_', '.'),
    /// `None` when it was never written. Agents' credentials cannot read these.
    async fn get_record(&self, name: &str) -> Result<Option<Record>, StoreError>;
    /// Write record `name` if its version is still `expected` (0: it must not exist
    /// yet), else [`StoreError::RecordConflict`] and nothing is written. Returns the
    /// new version.
    async fn put_record(&self, name: &str, value: &str, expected: u64) -> Result<u64, StoreError>;
    /// Replace the reconcile status record (one per store).
    async fn put_status(&self, status: &StatusRecord) -> Result<(), StoreError>;
    /// The last reconcile status record, if a reconciler ever wrote one.
    async fn status(&self) -> Result<Option<StatusRecord>, StoreError>;
    /// Campaign to lead the store's reconcilers as `candidate`: waits while another
    /// leads (up to `timeout`; then `StoreError::Locked` names the leader). `None`:
    /// the store has no leadership (the `file` store, on one machine, where the state
    /// lock alone serialises applies).
    async fn campaign(
        &self,
        candidate: &str,
        timeout: Option<Duration>,
    ) -> Result<Option<Box<dyn Leader>>, StoreError> {
        let _ = (candidate, timeout);
        Ok(None)
    }
    /// Follow the state as it changes, without reading it whole after each commit:
    /// the whole state first, then each commit's [`StateChange`] (an error is reported
    /// once per failed attempt; the watch keeps trying, then starts again with a
    /// whole state). `None`: the store has no such watch (the `file` store: poll
    /// [`Store::load_shared`]). The agent API's serving processes use it.
    async fn watch_state(&self) -> Result<Option<StateEvents>, StoreError> {
        Ok(None)
    }
    /// Who leads the store's reconcilers now, if the store has leadership and anyone does.
    async fn leader(&self) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
}
