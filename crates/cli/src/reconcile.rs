//! `gpushare reconcile`: the GitOps controller of `gpushare-controller`, wired to the
//! command line: the flags become its source and policy, the reconciler it opens
//! carries the planner flags, the test hooks and the agent API, and what it reports
//! is printed and counted in /metrics. `--once` runs a single pass and exits 1 if it
//! failed; `--drift-only` plans and reports without applying (with `--once`: exit 2
//! when the fleet differs from the configuration).

use crate::cli::{GitGuardArgs, PlannerArgs, VarArgs};
use crate::ops::{Metrics, PassHealth};
use crate::setup;
use crate::ui::ProgressPrinter;
use gpushare_controller::error::BoxError;
use gpushare_controller::pins::PinFlags;
use gpushare_controller::{
    Controller, Event, Finished, Next, Observer, OpenReconciler, PassError, PassReport, Policy,
    Source, Stopped,
};
use gpushare_core::model::{Desired, Settings};
use gpushare_engine::apply::ProgressEvent;
use gpushare_engine::reconcile::{PlannerOverrides, Reconciler};
use gpushare_engine::store::PassOutcomeKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod status;

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

pub async fn run(opts: Options) -> anyhow::Result<u8> {
    let cancel = cancel_on_signals();
    let source = source(&opts)?;
    let policy = Policy {
        interval: Duration::from_secs(opts.interval),
        once: opts.once,
        drift_only: opts.drift_only,
    };
    let metrics = Arc::new(Metrics::new(Duration::from_secs(opts.interval.max(1))));
    let feed = serve_ops(&opts, &metrics).await?;
    let printer = Printer {
        metrics,
        feed,
        overrides: opts.planner.overrides(),
        progress: ProgressPrinter::new(false),
    };
    let open = Open {
        planner: opts.planner,
        agent_api: opts.agent_api,
    };
    let stopped = Controller::new(source, Arc::new(open), policy)
        .with_observer(Arc::new(printer))
        .run(cancel)
        .await;
    match stopped {
        Ok(Stopped::Interrupted) => Ok(0),
        Ok(Stopped::Once(report)) => Ok(match report.outcome {
            _ if report.source_error.is_some() => 1,
            PassOutcomeKind::DriftDetected => 2,
            _ => 0,
        }),
        // As `main` prints it: a configuration's diagnostics as the loader does.
        Err(PassError::Config(d)) => Err(d.into()),
        Err(PassError::Refused(why)) => Err(anyhow::anyhow!(why)),
        Err(e) => Err(e.into()),
    }
}

/// The controller's source as the flags name it.
fn source(opts: &Options) -> anyhow::Result<Source> {
    let load = setup::load_options(&opts.vars);
    let Some(g) = &opts.git else {
        return Ok(Source::dir(opts.dir.clone(), load));
    };
    let git = gpushare_controller::GitOptions {
        url: g.url.clone(),
        reference: g.reference.clone(),
        path: g.path.clone(),
        cache: g.cache.clone(),
        pins: PinFlags {
            store: g.guard.store.clone(),
            cloud: g.guard.cloud.map(Into::into),
            cluster: g.guard.cluster.clone(),
        },
        limits: gpushare_gitsource::Limits {
            max_file_bytes: g.guard.max_file_size,
            max_total_bytes: g.guard.max_checkout_size,
        },
        credentials: gpushare_gitsource::HttpCredentials::from_env(),
    };
    Ok(Source::git(opts.dir.clone(), load, git)?)
}

/// With `--listen`: serve /metrics, /healthz, /readyz and the web console; with a
/// git source the console is fed each pass's configuration through the returned
/// sender.
async fn serve_ops(
    opts: &Options,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Option<crate::console::FeedSender>> {
    let Some(addr) = opts.listen else {
        return Ok(None);
    };
    let mut sender = None;
    let source = match &opts.git {
        None => crate::console::ControllerSource::Dir(&opts.dir),
        Some(_) => {
            let (tx, feed) = tokio::sync::watch::channel(None);
            sender = Some(tx);
            crate::console::ControllerSource::Git {
                dir: &opts.dir,
                feed,
            }
        }
    };
    let console = crate::console::for_controller(
        addr,
        source,
        &opts.vars,
        opts.console_token_file.as_deref(),
    )
    .await;
    let bound = crate::ops::serve(addr, metrics.clone(), console.router.clone()).await?;
    println!("reconcile: serving /metrics, /healthz and /readyz on http://{bound}");
    println!("{}", console.line(bound));
    Ok(sender)
}

/// The reconciler of a configuration: its backends, the planner flags, the process's
/// test hooks, and with `--agent-listen` the agent API served on its store.
struct Open {
    planner: PlannerArgs,
    agent_api: crate::agent_api_cmd::AgentApiArgs,
}

#[async_trait::async_trait]
impl OpenReconciler for Open {
    async fn open(&self, desired: &Desired, base: &Path) -> Result<Reconciler, BoxError> {
        let mut r = setup::reconciler(desired, base, &self.planner, "gpushare reconcile").await?;
        if self.agent_api.agent_listen.is_some() {
            r = r.with_heard(Arc::clone(&crate::agent_api_cmd::HEARD));
        }
        crate::agent_api_cmd::serve_for_reconcile(
            &self.agent_api,
            &r.backends().store,
            &desired.settings.cluster,
        )
        .await?;
        Ok(r)
    }
}

/// Prints what the controller reports, counts it in /metrics, and feeds the console.
struct Printer {
    metrics: Arc<Metrics>,
    feed: Option<crate::console::FeedSender>,
    overrides: PlannerOverrides,
    progress: ProgressPrinter,
}

impl Observer for Printer {
    fn event(&self, event: Event<'_>) {
        match event {
            Event::Configuration { desired, commit } => {
                if let Some(feed) = &self.feed {
                    feed.send_replace(Some((desired.clone(), commit.map(str::to_string))));
                }
            }
            Event::Warnings(d) => eprint!("{d}"),
            Event::Standby { leader } => {
                println!("reconcile: standby; {leader} leads the store's reconcilers");
            }
            Event::Leading => println!("reconcile: leading the store's reconcilers"),
            Event::LeadershipLost => println!(
                "reconcile: lost the leadership of the store's reconcilers; campaigning again"
            ),
            Event::Drift { steps } => {
                for s in steps {
                    eprintln!("  drift: {s}");
                }
            }
            Event::Finished(f) => {
                self.measure(f);
                print_finished(f);
            }
            Event::Interrupted => println!("reconcile: interrupted, stopping"),
            _ => {}
        }
    }

    fn progress(&self, event: &ProgressEvent) {
        (self.progress.callback())(event);
    }
}

impl Printer {
    /// The pass, the fleet's figures and the refused commit into the metrics.
    fn measure(&self, f: &Finished<'_>) {
        if let Ok(r) = f.result {
            // The options the pass planned with: the kept settings' with the flags.
            let planner_options = self
                .overrides
                .options(f.settings.unwrap_or(&Settings::default()));
            self.metrics.fleet(
                &r.fleet,
                r.hourly_cost,
                r.commit.as_deref(),
                u64::try_from(f.finished.as_second()).unwrap_or(0),
                &planner_options,
            );
            self.metrics.held(&r.held_pools);
            self.metrics.usage(&r.usage);
        }
        self.metrics.refused(f.refused);
        self.metrics
            .pass(f.record.outcome.as_str(), f.took, health(f.result));
    }
}

/// How a pass leaves the controller's readiness.
fn health(result: &Result<PassReport, PassError>) -> PassHealth {
    match result {
        Ok(r) => match &r.source_error {
            None => PassHealth::Succeeded,
            Some(e) if e.unreachable => PassHealth::Failed,
            Some(_) => PassHealth::Broken,
        },
        Err(e) if e.broken() => PassHealth::Broken,
        Err(_) => PassHealth::Failed,
    }
}

/// A pass's line: what it did, or why it failed and when the next one runs (a
/// failure that ends `--once` is printed by `main`).
fn print_finished(f: &Finished<'_>) {
    let pass = f.pass;
    let e = match f.result {
        Ok(r) => return print_pass(pass, r),
        Err(e) => e,
    };
    match f.next {
        Next::Interrupted => println!("reconcile pass {pass}: interrupted"),
        Next::Once => {}
        Next::Wait(wait) => {
            if let PassError::Config(d) = e {
                eprint!("{d}");
            }
            eprintln!(
                "reconcile pass {pass} failed: {}; next pass in {} s",
                e.message(),
                wait.as_secs()
            );
        }
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

/// A flag set by the first SIGINT or SIGTERM: the pass stops after the current
/// apply step (the journal consistent, the lock released). A second SIGINT exits.
fn cancel_on_signals() -> Arc<AtomicBool> {
    let flag = setup::cancel_on_ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let f = flag.clone();
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::spawn(async move {
                    if term.recv().await.is_some() {
                        eprintln!("\nSIGTERM received: stopping after the current step.");
                        f.store(true, Ordering::SeqCst);
                    }
                });
            }
            Err(e) => tracing::warn!(error = %e, "cannot listen for SIGTERM"),
        }
    }
    flag
}
