//! Why a pass failed, why a commit was refused, and what the error policy reads from
//! them: whether running again may succeed, and whether the source itself is wrong.

use gpushare_config::Diagnostics;
use gpushare_engine::reconcile::ReconcileError;
use gpushare_engine::store::StoreError;
use gpushare_gitsource::GitError;
use std::path::PathBuf;

/// An error from a part the caller supplies (opening the reconciler: the backends,
/// the agent API it serves).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a pass failed. [`crate::policy::error_policy`] decides from it when the next
/// pass runs, and [`PassError::broken`] whether the controller is ready.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The configuration of a directory source does not load or validate: waits for
    /// it to change.
    #[error("{0}")]
    Config(Diagnostics),
    /// A commit of the git source refused while no good one was taken before.
    #[error("{0}")]
    Refused(String),
    /// The git source (fetch, resolve, checkout).
    #[error(transparent)]
    Source(GitError),
    /// The engine's pass (resume, observe, gather, plan, apply).
    /// Boxed: the engine's error is large and a pass result is passed around.
    #[error(transparent)]
    Engine(Box<ReconcileError>),
    /// Opening the reconciler for the configuration's settings (the caller's
    /// [`crate::OpenReconciler`]).
    #[error(transparent)]
    Open(BoxError),
    /// Reading or writing the store outside the engine's pass.
    #[error("{what}")]
    Store {
        what: &'static str,
        #[source]
        source: StoreError,
    },
    /// Interrupted while waiting to lead the store's reconcilers.
    #[error("interrupted while waiting to lead")]
    Interrupted,
    /// The configuration could not be serialised for its digest.
    #[error("serialising the configuration")]
    Digest(#[source] serde_json::Error),
    /// The pins of a git source could not be kept.
    #[error(transparent)]
    Pins(PinError),
    /// A worker thread (git's blocking client) failed.
    #[error("the git {what} thread")]
    Thread {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

impl PassError {
    pub fn pass(e: ReconcileError) -> PassError {
        PassError::Engine(Box::new(e))
    }

    /// Whether running the pass again later may succeed with the source unchanged.
    pub fn is_transient(&self) -> bool {
        match self {
            PassError::Config(_) | PassError::Refused(_) => false,
            PassError::Source(e) => e.is_transient(),
            PassError::Engine(e) => e.is_transient(),
            PassError::Open(_)
            | PassError::Store { .. }
            | PassError::Interrupted
            | PassError::Digest(_)
            | PassError::Pins(_)
            | PassError::Thread { .. } => true,
        }
    }

    /// Whether the source itself is wrong (a refused commit, a reference gone): not
    /// ready until it is fixed.
    pub fn broken(&self) -> bool {
        match self {
            PassError::Refused(_) => true,
            PassError::Source(e) => source_is_wrong(e),
            _ => false,
        }
    }

    /// The error with its causes, separated by ": " (a configuration's diagnostics
    /// as the loader formats them).
    pub fn message(&self) -> String {
        match self {
            PassError::Config(d) => d.to_string(),
            PassError::Refused(why) => why.clone(),
            other => gpushare_core::util::error_chain(other),
        }
    }
}

/// Whether a git error says the source is wrong (the reference is missing or
/// ambiguous, the commit's tree is refused) rather than away.
pub fn source_is_wrong(e: &GitError) -> bool {
    matches!(
        e,
        GitError::UnknownRef { .. } | GitError::AmbiguousRef { .. }
    ) || e.refusal().is_some()
}

/// Why the pins of a git source could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("reading the controller's pins from {} (remove it to pin the next commit's store, cloud and cluster)", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("serialising the pins")]
    Serialise(#[source] serde_json::Error),
    #[error("writing the controller's pins to {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why a commit is not taken: a short reason (a metrics label) and the message.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub reason: &'static str,
    pub why: String,
}

/// A newer configuration that could not be taken while the last good one was
/// reconciled.
#[derive(Debug, Clone)]
pub struct SourceError {
    pub message: String,
    /// A fetch that failed (the remote away: readiness holds for two intervals), or
    /// the source is wrong (a refused commit, a missing reference: not ready now).
    pub unreachable: bool,
}
