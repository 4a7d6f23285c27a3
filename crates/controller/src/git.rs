//! A git source's pass: fetch and resolve the reference, take a new commit (check it
//! out, load it, hold it to the pins) or refuse it and keep reconciling the last good
//! one, and after a restart hold the commit the status record names.

use crate::error::{PassError, Refusal, SourceError};
use crate::events::Event;
use crate::pins;
use crate::source::{load_config, loaded, relative_to, Loaded};
use crate::Controller;
use gpushare_gitsource::GitSource;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

impl Controller {
    /// The repository and the configuration's subdirectory (a git source only).
    fn repository(&self) -> Option<(GitSource, Option<PathBuf>)> {
        let g = self.source.git.as_ref()?;
        Some((g.src.clone(), g.path.clone()))
    }

    /// The configuration of the reference's commit, or the last good one with the
    /// error of a newer one that could not be taken (a fetch failure, a missing
    /// reference, a refused commit).
    pub(crate) async fn load_git(
        &mut self,
        cancel: &Arc<AtomicBool>,
    ) -> Result<(Loaded, Option<SourceError>), PassError> {
        let Some((src, path)) = self.repository() else {
            return Err(PassError::Refused("the source is no git repository".into()));
        };
        // Fetch and resolve on a blocking thread (gix's client blocks).
        let interrupt = cancel.clone();
        let fetching = src.clone();
        let fetched = tokio::task::spawn_blocking(move || {
            fetching.fetch(&interrupt)?;
            fetching.resolve()
        })
        .await
        .map_err(|source| PassError::Thread {
            what: "fetch",
            source,
        })?;
        if !self.restored {
            self.restored = true;
            self.restore_last_good(&src, path.as_deref()).await;
        }
        let commit = match fetched {
            Ok(c) => c,
            Err(e) => return self.keep_after_fetch(PassError::Source(e)),
        };
        if let Some(good) = &self.last_good {
            if good.commit.as_deref() == Some(commit.as_str()) {
                return Ok((good.clone(), None));
            }
        }
        if let Some((refused, why)) = &self.refused {
            if *refused == commit {
                return self.keep_last_good(why.clone());
            }
        }
        let keep = self.last_good.as_ref().and_then(|g| g.commit.clone());
        match self.take(&src, path.as_deref(), &commit, keep).await? {
            Ok(l) => {
                tracing::info!(commit = %commit, "configuration of a new commit loaded");
                self.refused = None;
                self.last_good = Some(l.clone());
                Ok((l, None))
            }
            Err(refusal) => {
                tracing::error!(commit = %commit, reason = refusal.reason, error = %refusal.why, "commit refused");
                self.refused = Some((commit, refusal.clone()));
                self.keep_last_good(refusal)
            }
        }
    }

    /// A fetch or resolve that failed: the last good commit, with the error, if any.
    fn keep_after_fetch(&self, err: PassError) -> Result<(Loaded, Option<SourceError>), PassError> {
        let Some(good) = &self.last_good else {
            return Err(err);
        };
        let message = format!(
            "{}; reconciling the last good commit {}",
            err.message(),
            good.commit.as_deref().map(short).unwrap_or("?")
        );
        tracing::warn!(error = %err.message(), "no commit to take from the source; keeping the last good commit");
        let unreachable = !err.broken();
        Ok((
            good.clone(),
            Some(SourceError {
                message,
                unreachable,
            }),
        ))
    }

    /// Check out `commit` (keeping `keep`'s checkout), load the configuration under
    /// `path` and hold it to the pins (the first commit taken sets them when no
    /// pin file or flag has). `Ok(Err(_))`: the commit is refused.
    async fn take(
        &mut self,
        src: &GitSource,
        path: Option<&Path>,
        commit: &str,
        keep: Option<String>,
    ) -> Result<Result<Loaded, Refusal>, PassError> {
        let refused = |reason, why: String| {
            Ok(Err(Refusal {
                reason,
                why: format!("commit {commit} is not applied: {why}"),
            }))
        };
        let (s, c) = (src.clone(), commit.to_string());
        let checkout = tokio::task::spawn_blocking(move || s.checkout(&c, keep.as_deref()))
            .await
            .map_err(|source| PassError::Thread {
                what: "checkout",
                source,
            })?;
        let checkout = match checkout {
            Ok(c) => c,
            Err(e) => {
                return match e.refusal() {
                    // The error names the commit; the refusal says it once.
                    Some(reason) => {
                        let msg = e.to_string();
                        let why = msg
                            .strip_prefix(&format!("commit {commit}: "))
                            .map_or_else(|| msg.clone(), str::to_string);
                        refused(reason, why)
                    }
                    None => Err(PassError::Source(e)),
                };
            }
        };
        let dir = match path {
            Some(p) => checkout.dir.join(p),
            None => checkout.dir.clone(),
        };
        let mut desired = match load_config(&dir, &self.source.load) {
            Ok((d, warnings)) => {
                if !warnings.0.is_empty() {
                    self.observer.event(Event::Warnings(&warnings));
                }
                d
            }
            Err(d) => {
                let why = format!(
                    "its configuration is invalid:\n{}",
                    relative_to(d, &checkout.dir)
                );
                return refused("invalid", why);
            }
        };
        if let Err(why) = self.hold_to_pins(&mut desired.settings, commit)? {
            return refused("pinned_setting", why);
        }
        tracing::debug!(commit, subject = %checkout.subject, "configuration loaded");
        loaded(desired, Some(commit.to_string())).map(Ok)
    }

    /// Hold `settings` to the pins, or pin them (the first commit taken, kept in the
    /// pin file). `Ok(Err(why))`: the commit changes a pin.
    fn hold_to_pins(
        &mut self,
        settings: &mut gpushare_core::model::Settings,
        commit: &str,
    ) -> Result<Result<(), String>, PassError> {
        let Some(git) = self.source.git.as_ref() else {
            return Ok(Ok(()));
        };
        let held = match &self.pins {
            Some(p) => p.hold(settings).map(|()| None),
            None => git.flags.first(settings).map(Some),
        };
        match held {
            Err(mismatches) => {
                let lines: Vec<String> = mismatches.iter().map(|m| format!("  - {m}")).collect();
                Ok(Err(format!(
                    "it changes what the controller is pinned to (a pin moves only by restarting the controller with --store, --cloud or --cluster):\n{}",
                    lines.join("\n")
                )))
            }
            Ok(Some(p)) => {
                pins::write(&git.pin_file, &p).map_err(PassError::Pins)?;
                tracing::info!(commit, pins = ?p, "the controller's store, cloud and cluster are pinned");
                self.pins = Some(p);
                Ok(Ok(()))
            }
            Ok(None) => Ok(Ok(())),
        }
    }

    /// After a restart: the commit the store's status record names (the last good
    /// one) is taken as the last good configuration, so a refused commit at the
    /// branch's head holds the fleet where it was instead of failing every pass.
    /// Only with a known store (pinned, or the store flag); problems are logged.
    async fn restore_last_good(&mut self, src: &GitSource, path: Option<&Path>) {
        let flag = self.source.git.as_ref().and_then(|g| g.flags.store.clone());
        let store_url = match (&self.pins, flag) {
            (Some(p), _) => p.store.clone(),
            (None, Some(s)) => Some(s),
            (None, None) => return,
        };
        let status = match gpushare_backends::open_store(store_url.as_deref(), self.source.base())
            .await
        {
            Ok((store, _)) => store.status().await,
            Err(e) => {
                tracing::warn!(error = %gpushare_core::util::error_chain(&e), "could not open the pinned store to read the last good commit");
                return;
            }
        };
        let s = match status {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the last status record");
                return;
            }
        };
        self.status_read = true;
        self.converged_digest = s.converged_digest;
        self.drift_corrections = s.drift_corrections;
        let Some(commit) = s.commit else { return };
        match self.take(src, path, &commit, None).await {
            Ok(Ok(l)) => {
                tracing::info!(commit = %commit, "holding the last good commit of the status record");
                self.last_good = Some(l);
            }
            Ok(Err(r)) => {
                tracing::warn!(commit = %commit, error = %r.why, "the last good commit of the status record is refused now")
            }
            Err(e) => {
                tracing::warn!(commit = %commit, error = %e.message(), "could not take the last good commit of the status record")
            }
        }
    }

    fn keep_last_good(&self, refusal: Refusal) -> Result<(Loaded, Option<SourceError>), PassError> {
        match &self.last_good {
            Some(good) => Ok((
                good.clone(),
                Some(SourceError {
                    message: refusal.why,
                    unreachable: false,
                }),
            )),
            None => Err(PassError::Refused(refusal.why)),
        }
    }
}
