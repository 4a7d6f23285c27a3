//! `gpushare reconcile`: the GitOps controller, a level-triggered loop in the style of
//! kube-runtime's controller. Every pass takes the configuration from its source (a
//! directory re-read, or one commit of a git repository fetched and checked out),
//! finishes any interrupted apply, observes, plans and applies, then writes a status
//! record to the store. A pass that fails on a transient error (store, cloud, fetch)
//! is retried with exponential backoff; a configuration error waits a full interval
//! for the source to change. `--once` runs a single pass and exits 1 if it failed;
//! `--drift-only` plans and reports without applying (with `--once`: exit 2 when the
//! fleet differs from the configuration).

use crate::cli::{GitGuardArgs, PlannerArgs, VarArgs};
use crate::setup;
use crate::ui::ProgressPrinter;
use anyhow::Context;
use gpushare_config::Diagnostics;
use gpushare_core::model::{Desired, Settings};
use gpushare_core::render;
use gpushare_engine::pass::{Prepare, Prepared, Whole};
use gpushare_engine::reconcile::{Reconciler, Run};
use gpushare_engine::store::{Leader, PassOutcomeKind, StatusRecord};
use gpushare_gitsource::GitSource;
use pass::{
    error_policy, loaded, log_changes, relative_to, Loaded, PassError, PassReport, Refusal, Source,
    SourceError,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wake::{cancel_on_signals, sleep_unless_cancelled};

/// Where the git cache lives by default, inside the state directory's parent.
pub const GIT_CACHE_DIR: &str = ".gpushare-git";

mod pins;
mod start;
mod status;
mod wake;

pub use status::status;

/// What `gpushare reconcile` was asked to do.
pub struct Options {
    /// The configuration directory; with a git source, the directory the state and
    /// the git cache are kept in (relative store paths are taken from it).
    pub dir: PathBuf,
    pub interval: u64,
    pub once: bool,
    pub git: Option<GitOptions>,
    pub drift_only: bool,
    /// Serve /metrics, /healthz and /readyz here.
    pub listen: Option<std::net::SocketAddr>,
    /// The web console's bearer token (required for the console off loopback).
    pub console_token_file: Option<PathBuf>,
    pub vars: VarArgs,
    pub planner: PlannerArgs,
    /// Serve the agent API on the store of the configuration (every replica).
    pub agent_api: crate::agent_api_cmd::AgentApiArgs,
}

pub struct GitOptions {
    pub url: String,
    pub reference: Option<String>,
    /// Subdirectory of the repository holding the configuration.
    pub path: Option<PathBuf>,
    pub cache: Option<PathBuf>,
    /// The pins (store, cloud, cluster) and the checkout's size limits.
    pub guard: GitGuardArgs,
}

mod pass;

/// The controller's memory across passes.
struct Controller {
    opts: Options,
    source: Source,
    /// The reconciler (backends, planner options), opened again only when the
    /// configuration's settings change.
    kept: Option<(Settings, Arc<Reconciler>)>,
    /// The last configuration that loaded and validated.
    last_good: Option<Loaded>,
    /// A commit whose configuration was refused, and why (not loaded again).
    refused: Option<(String, Refusal)>,
    /// The store, cloud and cluster held fixed (git source), once known.
    pins: Option<pins::Pins>,
    pin_flags: pins::PinFlags,
    /// Where the pins are kept (git source: `CACHE/pins.json`).
    pin_file: Option<PathBuf>,
    /// Whether the last good commit of the store's status record was looked for
    /// (once, at the first pass of a git source).
    restored: bool,
    /// The digest of the configuration last reconciled to completion.
    converged_digest: Option<String>,
    drift_corrections: u64,
    pass: u64,
    holder: String,
    status_read: bool,
    /// Whether this controller campaigns to lead the store's reconcilers (a
    /// continuous, applying loop does; `--once` and `--drift-only` do not).
    lead: bool,
    /// Held while this process leads (stores with leadership: etcd).
    leader: Option<Box<dyn Leader>>,
    /// The web console of a git source: fed the configuration each pass takes.
    console_feed: Option<crate::console::FeedSender>,
}

pub async fn run(opts: Options) -> anyhow::Result<u8> {
    let cancel = cancel_on_signals();
    let mut c = Controller::new(opts)?;
    let metrics = Arc::new(crate::ops::Metrics::new(Duration::from_secs(
        c.opts.interval.max(1),
    )));
    c.serve_ops(&metrics).await?;
    // A directory source is watched: a saved configuration file starts the next pass
    // at once (the interval stays the upper bound). Kept alive for the whole loop.
    let wake = Arc::new(tokio::sync::Notify::new());
    let _watcher = c.watch_source(&wake);
    let mut failures: u32 = 0;
    loop {
        c.pass += 1;
        let started = jiff::Timestamp::now();
        let clock = std::time::Instant::now();
        let result = c.reconcile_once(&cancel).await;
        let finished = jiff::Timestamp::now();
        let record = c.record(&result, started, finished);
        c.write_status(&record).await;
        c.measure(&metrics, &result, finished);
        metrics.pass(record.outcome.as_str(), clock.elapsed(), health(&result));
        let wait = match c.after_pass(result, &mut failures, &cancel).await? {
            After::Exit(code) => return Ok(code),
            After::Wait(wait) => wait,
        };
        if cancel.load(Ordering::SeqCst) || sleep_unless_cancelled(wait, &cancel, &wake).await {
            println!("reconcile: interrupted, stopping");
            c.resign().await;
            return Ok(0);
        }
    }
}

/// What the loop does after a pass.
enum After {
    /// Stop with this exit code.
    Exit(u8),
    /// Run the next pass after this long (or when the source changes).
    Wait(Duration),
}

/// How a pass leaves the controller's readiness.
fn health(result: &Result<PassReport, PassError>) -> crate::ops::PassHealth {
    match result {
        Ok(r) => match &r.source_error {
            None => crate::ops::PassHealth::Succeeded,
            Some(e) if e.unreachable => crate::ops::PassHealth::Failed,
            Some(_) => crate::ops::PassHealth::Broken,
        },
        Err(e) if e.broken() => crate::ops::PassHealth::Broken,
        Err(_) => crate::ops::PassHealth::Failed,
    }
}

/// The configuration of a directory source: its errors are the configuration's
/// ([`PassError::Config`]); warnings are printed.
fn load_dir(dir: &Path, vars: &VarArgs) -> Result<Desired, PassError> {
    let (desired, diags) = setup::load_all(dir, vars).map_err(PassError::other)?;
    match desired {
        Some(d) if !diags.iter().any(setup::is_error) => {
            if !diags.is_empty() {
                eprint!("{}", Diagnostics(diags));
            }
            Ok(d)
        }
        _ => Err(PassError::Config(Diagnostics(diags))),
    }
}

fn print_pass(pass: u64, r: &PassReport) {
    let at = r
        .commit
        .as_deref()
        .map(|c| format!(" (commit {})", short(c)))
        .unwrap_or_default();
    let summary = r.summary.as_deref().unwrap_or_default();
    match r.outcome {
        PassOutcomeKind::NoChanges => println!("reconcile pass {pass}{at}: no changes"),
        PassOutcomeKind::Applied => println!("reconcile pass {pass}{at}: applied: {summary}"),
        PassOutcomeKind::DriftCorrected => {
            println!("reconcile pass {pass}{at}: drift corrected: {summary}")
        }
        PassOutcomeKind::DriftDetected => {
            println!("reconcile pass {pass}{at}: drift detected (not applied): {summary}")
        }
        PassOutcomeKind::Failed => println!("reconcile pass {pass}{at}: failed"),
    }
    if let Some(e) = &r.source_error {
        eprintln!("reconcile pass {pass}: {}", e.message);
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

impl Controller {
    /// One pass: the configuration from the source, then the engine's pass (or, with
    /// `--drift-only`, observe and plan).
    async fn reconcile_once(&mut self, cancel: &Arc<AtomicBool>) -> Result<PassReport, PassError> {
        let (loaded, source_error) = self.load(cancel).await?;
        if let Some(feed) = &self.console_feed {
            feed.send_replace(Some((loaded.desired.clone(), loaded.commit.clone())));
        }
        let r = self
            .reconciler(&loaded.desired)
            .await
            .map_err(PassError::other)?;
        if self.lead {
            self.lead_or_wait(&r, cancel).await?;
        }
        if !self.status_read {
            // After a restart: the configuration the last run converged to, so a
            // change found now is told apart as drift or as a new configuration.
            self.status_read = true;
            match r.store().status().await {
                Ok(Some(s)) => {
                    self.converged_digest = s.converged_digest;
                    self.drift_corrections = s.drift_corrections;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "could not read the last status record"),
            }
        }
        let desired = &loaded.desired;
        let unchanged = self.converged_digest.as_deref() == Some(loaded.digest.as_str());
        let (outcome, plan, fleet, hourly_cost, usage) = if self.opts.drift_only {
            let prepared = r
                .prepare(desired, Prepare::to_show(&Whole))
                .await
                .map_err(PassError::pass)?;
            if r.store()
                .read_journal()
                .await
                .map_err(|e| {
                    PassError::other(anyhow::Error::new(e).context("reading the apply journal"))
                })?
                .is_some()
            {
                tracing::warn!(
                    "an interrupted apply left a journal; drift-only does not finish it"
                );
            }
            let Prepared { plan, live, .. } = prepared;
            let usage = gpushare_core::model::task_usage_rows(&live.state, &live.task_status);
            let fleet = live.state;
            let cost = plan.cost.now_per_hour;
            if plan.is_empty() || plan.records_only() {
                (PassOutcomeKind::NoChanges, plan, fleet, cost, usage)
            } else {
                log_changes(
                    "drift detected: the fleet differs from the configuration",
                    &plan,
                    &loaded,
                );
                (PassOutcomeKind::DriftDetected, plan, fleet, cost, usage)
            }
        } else {
            let outcome = self
                .pass_while_leading(&r, desired, cancel)
                .await
                .map_err(PassError::pass)?;
            let kind = if !outcome.changed() {
                PassOutcomeKind::NoChanges
            // A service's auto scaling changing its count is no drift: the
            // configuration asked for it.
            } else if unchanged
                && !outcome.plan.records_only()
                && !outcome.plan.scaling.iter().any(|u| u.change.is_some())
            {
                self.drift_corrections += 1;
                log_changes(
                    "drift corrected: the fleet had drifted from the configuration",
                    &outcome.plan,
                    &loaded,
                );
                PassOutcomeKind::DriftCorrected
            } else {
                PassOutcomeKind::Applied
            };
            self.converged_digest = Some(loaded.digest.clone());
            let cost = outcome.plan.cost.after_per_hour;
            let fleet = outcome.plan.after.clone();
            let usage = gpushare_core::model::task_usage_rows(&fleet, &outcome.live.task_status);
            (kind, outcome.plan, fleet, cost, usage)
        };
        Ok(PassReport {
            outcome,
            summary: Some(render::summary_line(&plan)),
            commit: loaded.commit,
            digest: Some(loaded.digest),
            source_error,
            fleet,
            hourly_cost,
            held_pools: plan.held_pools,
            usage,
        })
    }

    /// The configuration to reconcile, and the error of a newer one that could not
    /// be taken (a fetch failure, a missing reference, a refused commit) while the
    /// last good one is used.
    async fn load(
        &mut self,
        cancel: &Arc<AtomicBool>,
    ) -> Result<(Loaded, Option<SourceError>), PassError> {
        let (src, path) = match &self.source {
            Source::Dir(dir) => {
                let desired = load_dir(dir, &self.opts.vars)?;
                let loaded = loaded(desired, None).map_err(PassError::other)?;
                self.last_good = Some(loaded.clone());
                return Ok((loaded, None));
            }
            Source::Git { src, path } => (src.clone(), path.clone()),
        };
        // Fetch and resolve on a blocking thread (gix's client blocks).
        let interrupt = cancel.clone();
        let fetching = src.clone();
        let fetched = tokio::task::spawn_blocking(move || {
            fetching.fetch(&interrupt)?;
            fetching.resolve()
        })
        .await
        .context("the git fetch thread")
        .map_err(PassError::other)?;
        if !self.restored {
            self.restored = true;
            self.restore_last_good(&src, path.as_deref()).await;
        }
        let commit = match fetched {
            Ok(c) => c,
            Err(e) => {
                let err = PassError::Source(e);
                let unreachable = !err.broken();
                return match &self.last_good {
                    Some(good) => {
                        let message = format!(
                            "{}; reconciling the last good commit {}",
                            err.message(),
                            good.commit.as_deref().map(short).unwrap_or("?")
                        );
                        tracing::warn!(error = %err.message(), "no commit to take from the source; keeping the last good commit");
                        Ok((
                            good.clone(),
                            Some(SourceError {
                                message,
                                unreachable,
                            }),
                        ))
                    }
                    None => Err(err),
                };
            }
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
            .context("the git checkout thread")
            .map_err(PassError::other)?;
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
        let mut desired = match setup::load(&dir, &self.opts.vars) {
            Ok(d) => d,
            Err(err) => {
                let why = match err.downcast::<Diagnostics>() {
                    Ok(d) => format!(
                        "its configuration is invalid:\n{}",
                        relative_to(d, &checkout.dir)
                    ),
                    Err(err) => format!("{err:#}"),
                };
                return refused("invalid", why);
            }
        };
        let held = match &self.pins {
            Some(p) => p.hold(&mut desired.settings).map(|()| None),
            None => self.pin_flags.first(&mut desired.settings).map(Some),
        };
        match held {
            Err(mismatches) => {
                let lines: Vec<String> = mismatches.iter().map(|m| format!("  - {m}")).collect();
                return refused(
                    "pinned_setting",
                    format!(
                        "it changes what the controller is pinned to (a pin moves only by restarting the controller with --store, --cloud or --cluster):\n{}",
                        lines.join("\n")
                    ),
                );
            }
            Ok(Some(p)) => {
                if let Some(file) = &self.pin_file {
                    pins::write(file, &p).map_err(PassError::other)?;
                }
                tracing::info!(commit, pins = ?p, "the controller's store, cloud and cluster are pinned");
                self.pins = Some(p);
            }
            Ok(None) => {}
        }
        tracing::debug!(commit, subject = %checkout.subject, "configuration loaded");
        loaded(desired, Some(commit.to_string()))
            .map(Ok)
            .map_err(PassError::other)
    }

    /// After a restart: the commit the store's status record names (the last good
    /// one) is taken as the last good configuration, so a refused commit at the
    /// branch's head holds the fleet where it was instead of failing every pass.
    /// Only with a known store (pinned, or `--store`); problems are logged.
    async fn restore_last_good(&mut self, src: &GitSource, path: Option<&Path>) {
        let store_url = match (&self.pins, &self.pin_flags.store) {
            (Some(p), _) => p.store.clone(),
            (None, Some(s)) => Some(s.clone()),
            (None, None) => return,
        };
        let status = match gpushare_backends::open_store(store_url.as_deref(), &self.opts.dir).await
        {
            Ok((store, _)) => store.status().await,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "could not open the pinned store to read the last good commit");
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

    /// Returns once this process leads the store's reconcilers (at once when it
    /// already does, or when the store has no leadership); a standby waits here,
    /// saying who leads, until the leader resigns or its lease expires. Interrupted
    /// by a signal: an error (the caller sees the cancel flag).
    async fn lead_or_wait(&mut self, r: &Reconciler, cancel: &AtomicBool) -> Result<(), PassError> {
        if self.leader.as_ref().is_some_and(|l| l.is_leader()) {
            return Ok(());
        }
        if self.leader.take().is_some() {
            println!(
                "reconcile: lost the leadership of the store's reconcilers; campaigning again"
            );
            tracing::warn!("leadership lost");
        }
        let store = r.store();
        if let Ok(Some(current)) = store.leader().await {
            println!("reconcile: standby; {current} leads the store's reconcilers");
        }
        let campaign = store.campaign(&self.holder, None);
        tokio::pin!(campaign);
        let won = loop {
            tokio::select! {
                won = &mut campaign => break won,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if cancel.load(Ordering::SeqCst) {
                        return Err(PassError::other(anyhow::anyhow!("interrupted while waiting to lead")));
                    }
                }
            }
        };
        match won.context("campaigning to lead the store's reconcilers") {
            Ok(Some(l)) => {
                println!("reconcile: leading the store's reconcilers");
                self.leader = Some(l);
                Ok(())
            }
            // The store has no leadership: every pass takes the state lock instead.
            Ok(None) => {
                self.lead = false;
                Ok(())
            }
            Err(e) => Err(PassError::other(e)),
        }
    }

    /// The engine's pass, stopped after its current step when this controller loses
    /// the leadership meanwhile (its lease expired: the store was unreachable or
    /// frozen, so another controller may lead now) or a signal comes (issue 44).
    /// What it leaves is in the journal, finished by the next pass as after a crash.
    async fn pass_while_leading(
        &self,
        r: &Reconciler,
        desired: &Desired,
        cancel: &AtomicBool,
    ) -> Result<gpushare_engine::reconcile::PassOutcome, gpushare_engine::reconcile::ReconcileError>
    {
        let progress = ProgressPrinter::new(false);
        let progress_fn = progress.callback();
        let stop = AtomicBool::new(cancel.load(Ordering::SeqCst));
        let run = Run {
            cancel: Some(&stop),
            progress: Some(&progress_fn),
        };
        let pass = r.pass(desired, run);
        tokio::pin!(pass);
        let lost = async {
            match self.leader.as_deref() {
                Some(l) => l.lost().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(lost);
        let mut lost_seen = false;
        loop {
            tokio::select! {
                outcome = &mut pass => return outcome,
                () = &mut lost, if !lost_seen => {
                    lost_seen = true;
                    tracing::error!("leadership lost during the pass: stopping after the current step; the next leader finishes it from the journal");
                    stop.store(true, Ordering::SeqCst);
                }
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    if cancel.load(Ordering::SeqCst) {
                        stop.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
    }

    /// Steps down, so a standby takes over at once (on a clean stop).
    /// The fleet figures of a pass, and the refused commit, into the metrics.
    fn measure(
        &self,
        metrics: &crate::ops::Metrics,
        result: &Result<PassReport, PassError>,
        finished: jiff::Timestamp,
    ) {
        if let Ok(r) = result {
            // The options the pass planned with: the kept settings' with the flags.
            let overrides = self.opts.planner.overrides();
            let planner_options = match &self.kept {
                Some((settings, _)) => overrides.options(settings),
                None => overrides.options(&Settings::default()),
            };
            metrics.fleet(
                &r.fleet,
                r.hourly_cost,
                r.commit.as_deref(),
                u64::try_from(finished.as_second()).unwrap_or(0),
                &planner_options,
            );
            metrics.held(&r.held_pools);
            metrics.usage(&r.usage);
        }
        metrics.refused(
            self.refused
                .as_ref()
                .map(|(commit, r)| (commit.as_str(), r.reason)),
        );
    }

    /// Report a pass and choose what comes next: with `--once` the exit code (or the
    /// error), after a failure the error policy's wait, else the interval.
    async fn after_pass(
        &mut self,
        result: Result<PassReport, PassError>,
        failures: &mut u32,
        cancel: &AtomicBool,
    ) -> anyhow::Result<After> {
        let pass = self.pass;
        let e = match result {
            Ok(report) => {
                *failures = 0;
                print_pass(pass, &report);
                if !self.opts.once {
                    return Ok(After::Wait(Duration::from_secs(self.opts.interval)));
                }
                return Ok(After::Exit(match report.outcome {
                    _ if report.source_error.is_some() => 1,
                    PassOutcomeKind::DriftDetected => 2,
                    _ => 0,
                }));
            }
            Err(e) => e,
        };
        if cancel.load(Ordering::SeqCst) {
            println!("reconcile pass {pass}: interrupted");
            println!("reconcile: interrupted, stopping");
            self.resign().await;
            return Ok(After::Exit(0));
        }
        if self.opts.once {
            return Err(e.into_anyhow());
        }
        *failures += 1;
        if let PassError::Config(d) = &e {
            eprint!("{d}");
        }
        let wait = error_policy(&e, *failures, self.opts.interval);
        let message = e.message();
        eprintln!(
            "reconcile pass {pass} failed: {message}; next pass in {} s",
            wait.as_secs()
        );
        tracing::warn!(pass, failures = *failures, error = %message, "reconcile pass failed");
        Ok(After::Wait(wait))
    }

    async fn resign(&mut self) {
        if let Some(l) = self.leader.take() {
            if let Err(e) = l.resign().await {
                tracing::warn!(error = %e, "could not resign the leadership; it ends when its lease expires");
            }
        }
    }

    /// The reconciler for `desired`'s settings, opened once per settings; relative
    /// store paths are taken from the controller's directory (with a git source the
    /// checkout changes every commit, the state stays).
    async fn reconciler(&mut self, desired: &Desired) -> anyhow::Result<Arc<Reconciler>> {
        if let Some((s, r)) = &self.kept {
            if *s == desired.settings {
                return Ok(r.clone());
            }
        }
        let mut r = setup::reconciler(
            desired,
            &self.opts.dir,
            &self.opts.planner,
            "gpushare reconcile",
        )
        .await?;
        if self.opts.agent_api.agent_listen.is_some() {
            r = r.with_heard(Arc::clone(&crate::agent_api_cmd::HEARD));
        }
        let r = Arc::new(r);
        crate::agent_api_cmd::serve_for_reconcile(
            &self.opts.agent_api,
            &r.backends().store,
            &desired.settings.cluster,
        )
        .await?;
        self.kept = Some((desired.settings.clone(), r.clone()));
        Ok(r)
    }

    fn record(
        &self,
        result: &Result<PassReport, PassError>,
        started: jiff::Timestamp,
        finished: jiff::Timestamp,
    ) -> StatusRecord {
        let base = StatusRecord {
            pass: self.pass,
            started_at: started.to_string(),
            finished_at: finished.to_string(),
            source: self.source.describe(),
            commit: None,
            config_digest: None,
            converged_digest: self.converged_digest.clone(),
            outcome: PassOutcomeKind::Failed,
            summary: None,
            error: None,
            drift_corrections: self.drift_corrections,
            health: vec![],
            deployments: vec![],
            holder: self.holder.clone(),
        };
        match result {
            Ok(r) => StatusRecord {
                commit: r.commit.clone(),
                config_digest: r.digest.clone(),
                outcome: r.outcome,
                summary: r.summary.clone(),
                error: r.source_error.as_ref().map(|e| e.message.clone()),
                health: gpushare_core::render::health_lines(&r.fleet),
                deployments: gpushare_core::render::deployment_lines(&r.fleet),
                ..base
            },
            Err(e) => StatusRecord {
                commit: self.last_good.as_ref().and_then(|g| g.commit.clone()),
                error: Some(e.message()),
                ..base
            },
        }
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
