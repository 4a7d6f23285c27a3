//! What one pass works with: where the configuration comes from, what was taken from
//! it, why a pass failed or a commit was refused, and what the pass reports.

use super::wake::backoff;
use anyhow::Context;
use gpushare_config::Diagnostics;
use gpushare_core::model::Desired;
use gpushare_core::plan::Plan;
use gpushare_core::render;
use gpushare_engine::reconcile::ReconcileError;
use gpushare_engine::store::PassOutcomeKind;
use gpushare_gitsource::{GitError, GitSource};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the configuration comes from.
pub(super) enum Source {
    Dir(PathBuf),
    Git {
        src: GitSource,
        path: Option<PathBuf>,
    },
}

impl Source {
    pub(super) fn describe(&self) -> String {
        match self {
            Source::Dir(d) => d.display().to_string(),
            Source::Git { src, .. } => {
                format!("{}@{}", src.url(), src.reference().unwrap_or("HEAD"))
            }
        }
    }
}

/// A configuration taken from the source, ready to reconcile.
#[derive(Clone)]
pub(super) struct Loaded {
    pub(super) desired: Desired,
    pub(super) commit: Option<String>,
    pub(super) digest: String,
}

/// Why a pass failed. [`error_policy`] decides from it when the next pass runs, and
/// [`PassError::broken`] whether the controller is ready.
#[derive(Debug)]
pub(super) enum PassError {
    /// The configuration of a directory source does not load or validate: waits for
    /// it to change.
    Config(Diagnostics),
    /// A commit of the git source refused while no good one was taken before.
    Refused(String),
    /// The git source (fetch, resolve, checkout).
    Source(GitError),
    /// The engine's pass (resume, observe, gather, plan, apply).
    /// Boxed: the engine's error is large and a pass result is passed around.
    Engine(Box<ReconcileError>),
    /// Anything else on the way (opening the backends, the store's leadership, a
    /// worker thread): tried again.
    Other(anyhow::Error),
}

impl PassError {
    pub(super) fn pass(e: ReconcileError) -> PassError {
        PassError::Engine(Box::new(e))
    }

    pub(super) fn other(e: anyhow::Error) -> PassError {
        PassError::Other(e)
    }

    /// Whether running the pass again later may succeed with the source unchanged.
    pub(super) fn is_transient(&self) -> bool {
        match self {
            PassError::Config(_) | PassError::Refused(_) => false,
            PassError::Source(e) => e.is_transient(),
            PassError::Engine(e) => e.is_transient(),
            PassError::Other(_) => true,
        }
    }

    /// Whether the source itself is wrong (a refused commit, a reference gone): not
    /// ready until it is fixed.
    pub(super) fn broken(&self) -> bool {
        match self {
            PassError::Refused(_) => true,
            PassError::Source(e) => source_is_wrong(e),
            _ => false,
        }
    }

    /// The error with its causes, as `{:#}` prints an anyhow chain (a configuration's
    /// diagnostics as the loader formats them).
    pub(super) fn message(&self) -> String {
        match self {
            PassError::Config(d) => d.to_string(),
            PassError::Refused(why) => why.clone(),
            PassError::Source(e) => chain(e),
            PassError::Engine(e) => chain(e),
            PassError::Other(e) => format!("{e:#}"),
        }
    }

    /// For `--once`'s exit: the error as `main` prints it.
    pub(super) fn into_anyhow(self) -> anyhow::Error {
        match self {
            PassError::Config(d) => d.into(),
            PassError::Refused(why) => anyhow::anyhow!(why),
            PassError::Source(e) => e.into(),
            PassError::Engine(e) => (*e).into(),
            PassError::Other(e) => e,
        }
    }
}

/// `e` and its sources, separated by ": ".
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

/// When the next pass runs after a failed one (kube-runtime's `error_policy`): a
/// transient error (store, cloud, fetch, a lock held) backs off exponentially from
/// one second up to the interval (at least a minute), counted in failures in a row;
/// a permanent one (an invalid configuration, a refused commit, a plan error) waits
/// the full interval for the source to change.
pub(super) fn error_policy(e: &PassError, failures: u32, interval: u64) -> Duration {
    if e.is_transient() {
        backoff(failures, interval)
    } else {
        Duration::from_secs(interval)
    }
}

/// Whether a git error says the source is wrong (the reference is missing or
/// ambiguous, the commit's tree is refused) rather than away.
pub(super) fn source_is_wrong(e: &GitError) -> bool {
    matches!(
        e,
        GitError::UnknownRef { .. } | GitError::AmbiguousRef { .. }
    ) || e.refusal().is_some()
}

/// Why a commit is not taken: a short reason (a metrics label) and the message.
#[derive(Clone)]
pub(super) struct Refusal {
    pub(super) reason: &'static str,
    pub(super) why: String,
}

/// A newer configuration that could not be taken while the last good one was
/// reconciled.
pub(super) struct SourceError {
    pub(super) message: String,
    /// A fetch that failed (the remote away: readiness holds for two intervals), or
    /// the source is wrong (a refused commit, a missing reference: not ready now).
    pub(super) unreachable: bool,
}

/// What one pass did, for the status record, the exit code and the log.
pub(super) struct PassReport {
    pub(super) outcome: PassOutcomeKind,
    pub(super) summary: Option<String>,
    pub(super) commit: Option<String>,
    pub(super) digest: Option<String>,
    /// A newer commit refused (invalid), or a fetch that failed, while the last good
    /// configuration was reconciled.
    pub(super) source_error: Option<SourceError>,
    /// The fleet after the pass and its hourly cost (for the metrics).
    pub(super) fleet: gpushare_core::model::StoreState,
    pub(super) hourly_cost: f64,
    /// Pools whose silent hosts the disruption budget held back (for the metrics).
    pub(super) held_pools: Vec<gpushare_core::plan::HeldPool>,
    /// Each task's GPU use as its agent reported it (for the metrics).
    pub(super) usage: Vec<gpushare_core::model::TaskUsageRow>,
}

/// Log what a plan would change (drift), one line per step.
pub(super) fn log_changes(what: &str, plan: &Plan, loaded: &Loaded) {
    let steps: Vec<String> = plan
        .steps()
        .iter()
        .map(gpushare_engine::apply::describe)
        .collect();
    tracing::warn!(
        commit = loaded.commit.as_deref().unwrap_or(""),
        summary = %render::summary_line(plan),
        changes = %steps.join("; "),
        "{what}"
    );
    for s in &steps {
        eprintln!("  drift: {s}");
    }
}

/// `desired` with its digest (SHA-256 of its JSON form).
pub(super) fn loaded(desired: Desired, commit: Option<String>) -> anyhow::Result<Loaded> {
    let json = serde_json::to_vec(&desired).context("serialising the configuration")?;
    let digest = hex::encode(Sha256::digest(&json));
    Ok(Loaded {
        desired,
        commit,
        digest,
    })
}

/// The diagnostics with their file names relative to the checkout (so they read
/// `fleet/main.hcl:3:5`, as in the repository).
pub(super) fn relative_to(mut d: Diagnostics, root: &Path) -> Diagnostics {
    let prefix = format!("{}/", root.display());
    for diag in &mut d.0 {
        if let Some(loc) = &mut diag.loc {
            if let Some(rel) = loc.file.strip_prefix(&prefix) {
                loc.file = rel.to_string();
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One error policy: transient errors back off, permanent ones wait the interval;
    /// the decision comes from the typed error, not from its text.
    #[test]
    fn the_error_policy_backs_off_transient_errors_and_waits_on_permanent_ones() {
        let transient = PassError::pass(ReconcileError::Cancelled);
        assert!(transient.is_transient());
        assert_eq!(error_policy(&transient, 3, 300).as_secs(), 4);
        let plan = gpushare_core::plan::PlanError::Invalid {
            addr: "service.a".parse().expect("addr"),
            message: "bad".into(),
        };
        let permanent = PassError::pass(ReconcileError::Plan(plan));
        assert!(!permanent.is_transient() && !permanent.broken());
        assert_eq!(error_policy(&permanent, 3, 300).as_secs(), 300);
        let refused = PassError::Refused("commit abc is not applied".into());
        assert!(refused.broken() && !refused.is_transient());
        assert_eq!(error_policy(&refused, 1, 30).as_secs(), 30);
        let config = PassError::Config(Diagnostics(vec![]));
        assert_eq!(error_policy(&config, 1, 30).as_secs(), 30);
        assert_eq!(
            error_policy(&PassError::other(anyhow::anyhow!("store away")), 2, 30).as_secs(),
            2
        );
    }
}
