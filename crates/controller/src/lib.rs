//! The GitOps controller as a library: a level-triggered loop in the style of
//! kube-runtime's controller. Every pass takes the configuration from its [`Source`]
//! (a directory re-read, or one commit of a git repository fetched and checked out),
//! finishes any interrupted apply, observes, plans and applies through the engine's
//! [`Reconciler`], then writes a status record to the store. A pass that fails on a
//! transient error (store, cloud, fetch) is retried with exponential backoff; a
//! configuration error waits a full interval for the source to change
//! ([`Policy`], [`policy::error_policy`]). A policy with `once` runs a single pass;
//! with `drift_only` the loop plans and reports without applying. A continuous,
//! applying loop campaigns to lead the store's reconcilers first (stores with
//! leadership: etcd).
//!
//! ```ignore
//! let source = Source::dir(dir, LoadOptions::default());
//! let open = Arc::new(OpenBackends { holder: "me".into() });
//! let stopped = Controller::new(source, open, Policy::every(interval))
//!     .with_observer(observer)
//!     .run(cancel)
//!     .await?;
//! ```

use gpushare_core::model::Settings;
use gpushare_engine::reconcile::Reconciler;
use gpushare_engine::store::{Leader, StatusRecord};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub mod error;
pub mod events;
mod git;
mod lead;
pub mod open;
mod pass;
pub mod pins;
pub mod policy;
pub mod report;
pub mod source;
pub mod wake;

pub use error::{PassError, PinError, Refusal, SourceError};
pub use events::{Event, Finished, Next, Observer, Quiet, Stopped};
pub use open::{OpenBackends, OpenReconciler};
pub use policy::Policy;
pub use report::PassReport;
pub use source::{GitOptions, Source, GIT_CACHE_DIR};

use report::RecordBase;
use source::Loaded;

/// The controller's memory across passes.
pub struct Controller {
    source: Source,
    open: Arc<dyn OpenReconciler>,
    policy: Policy,
    observer: Arc<dyn Observer>,
    /// The reconciler, opened again only when the configuration's settings change.
    kept: Option<(Settings, Arc<Reconciler>)>,
    /// The last configuration that loaded and validated.
    last_good: Option<Loaded>,
    /// A commit whose configuration was refused, and why (not loaded again).
    refused: Option<(String, Refusal)>,
    /// The store, cloud and cluster held fixed (git source), once known.
    pins: Option<pins::Pins>,
    /// Whether the last good commit of the store's status record was looked for
    /// (once, at the first pass of a git source).
    restored: bool,
    /// The digest of the configuration last reconciled to completion.
    converged_digest: Option<String>,
    drift_corrections: u64,
    pass: u64,
    holder: String,
    status_read: bool,
    /// Whether this controller campaigns to lead the store's reconcilers.
    lead: bool,
    /// Held while this process leads (stores with leadership: etcd).
    leader: Option<Box<dyn Leader>>,
}

impl Controller {
    /// A controller before its first pass.
    pub fn new(mut source: Source, open: Arc<dyn OpenReconciler>, policy: Policy) -> Controller {
        let pins = source.git.as_mut().and_then(|g| g.pins.take());
        let holder = format!(
            "gpushare reconcile (pid {} on {})",
            std::process::id(),
            gpushare_core::util::hostname()
        );
        Controller {
            source,
            open,
            policy,
            observer: Arc::new(Quiet),
            kept: None,
            last_good: None,
            refused: None,
            pins,
            restored: false,
            converged_digest: None,
            drift_corrections: 0,
            pass: 0,
            holder,
            status_read: false,
            lead: policy.leads(),
            leader: None,
        }
    }

    /// Tell `observer` what the controller does (it prints nothing itself).
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Controller {
        self.observer = observer;
        self
    }

    /// Name this controller in the status record and in the leadership.
    pub fn with_holder(mut self, holder: impl Into<String>) -> Controller {
        self.holder = holder.into();
        self
    }

    /// Run passes until the policy or `cancel` stops the loop: `Stopped::Once` with a
    /// `once` policy's pass, `Stopped::Interrupted` when `cancel` is set (the pass
    /// stops after its current apply step, the journal consistent); a failed pass of
    /// a policy that stops on it is the error.
    pub async fn run(mut self, cancel: Arc<AtomicBool>) -> Result<Stopped, PassError> {
        // A directory source is watched: a saved configuration file starts the next
        // pass at once (the interval stays the upper bound). Kept for the whole loop.
        let wake = Arc::new(tokio::sync::Notify::new());
        let _watcher = self.watch_source(&wake);
        let mut failures: u32 = 0;
        loop {
            self.pass += 1;
            let started = jiff::Timestamp::now();
            let clock = Instant::now();
            let result = self.reconcile_once(&cancel).await;
            let finished = jiff::Timestamp::now();
            let record = self.record(&result, started, finished);
            self.write_status(&record).await;
            let next = self.next(&result, &mut failures, &cancel);
            self.observer.event(Event::Finished(&Finished {
                pass: self.pass,
                result: &result,
                record: &record,
                took: clock.elapsed(),
                finished,
                settings: self.kept.as_ref().map(|(s, _)| s),
                refused: self.refused.as_ref().map(|(c, r)| (c.as_str(), r.reason)),
                next,
            }));
            let wait = match (result, next) {
                (_, Next::Wait(wait)) => wait,
                (Ok(report), Next::Once) => return Ok(Stopped::Once(Box::new(report))),
                (Err(e), Next::Once) => return Err(e),
                (_, Next::Interrupted) => return Ok(self.stop().await),
            };
            if cancel.load(Ordering::SeqCst)
                || wake::sleep_unless_cancelled(wait, &cancel, &wake).await
            {
                return Ok(self.stop().await);
            }
        }
    }

    /// What comes after a pass: with `once` the end, after a failure the error
    /// policy's wait (counted in failures in a row), else the interval.
    fn next(
        &self,
        result: &Result<PassReport, PassError>,
        failures: &mut u32,
        cancel: &AtomicBool,
    ) -> Next {
        let e = match result {
            Ok(_) => {
                *failures = 0;
                return if self.policy.once {
                    Next::Once
                } else {
                    Next::Wait(self.policy.interval)
                };
            }
            Err(e) => e,
        };
        if cancel.load(Ordering::SeqCst) {
            return Next::Interrupted;
        }
        if self.policy.stops_on(e) {
            return Next::Once;
        }
        *failures += 1;
        let wait = self.policy.after_failure(e, *failures);
        tracing::warn!(pass = self.pass, failures = *failures, error = %e.message(), "reconcile pass failed");
        Next::Wait(wait)
    }

    /// Stop on the cancel flag: step down, so a standby takes over at once.
    async fn stop(&mut self) -> Stopped {
        self.observer.event(Event::Interrupted);
        self.resign().await;
        Stopped::Interrupted
    }

    /// A watch on a directory source that notifies `wake` when a file changes (not
    /// with `once`; `None` when the directory cannot be watched: then the loop polls
    /// every interval).
    fn watch_source(&self, wake: &Arc<tokio::sync::Notify>) -> Option<notify::RecommendedWatcher> {
        if self.source.is_git() || self.policy.once {
            return None;
        }
        let dir = self.source.base();
        match wake::watch_config_dir(dir, wake.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the configuration directory; polling every interval only");
                None
            }
        }
    }

    /// The reconciler for `desired`'s settings, opened once per settings.
    async fn reconciler(
        &mut self,
        desired: &gpushare_core::model::Desired,
    ) -> Result<Arc<Reconciler>, PassError> {
        if let Some((s, r)) = &self.kept {
            if *s == desired.settings {
                return Ok(r.clone());
            }
        }
        let r = self
            .open
            .open(desired, self.source.base())
            .await
            .map_err(PassError::Open)?;
        let r = Arc::new(r);
        self.kept = Some((desired.settings.clone(), r.clone()));
        Ok(r)
    }

    fn record(
        &self,
        result: &Result<PassReport, PassError>,
        started: jiff::Timestamp,
        finished: jiff::Timestamp,
    ) -> StatusRecord {
        let base = RecordBase {
            pass: self.pass,
            started,
            finished,
            source: self.source.describe(),
            converged_digest: self.converged_digest.clone(),
            drift_corrections: self.drift_corrections,
            holder: &self.holder,
            last_good: self.last_good.as_ref().and_then(|g| g.commit.clone()),
        };
        report::record(base, result)
    }

    /// Write the status record (a store that cannot take it is logged, not fatal).
    async fn write_status(&self, record: &StatusRecord) {
        let Some((_, r)) = &self.kept else {
            tracing::warn!("no store is open; the status record of this pass is not written");
            return;
        };
        if let Err(e) = r.store().put_status(record).await {
            tracing::warn!(error = %e, "could not write the status record");
        }
    }
}
