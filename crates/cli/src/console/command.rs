//! `gpushare console DIR`: the console of a configuration reconciled by hand (file or
//! etcd store), and `show --svg`. Read-only: the store and the cloud are read (no
//! agents' round, no apply), the plan is made and never carried out.

use crate::cli::{PlannerArgs, VarArgs};
use anyhow::{bail, Context};
use gpushare_console::{router, Auth, Console, Snapshot};
use gpushare_core::facts::CloudFacts;
use gpushare_core::model::{Desired, HostReport, Live, StoreState};
use gpushare_core::plan::Plan;
use gpushare_engine::pass::{Prepare, Prepared, Scope, ScopeError, Scoped, Whole};
use gpushare_engine::reconcile::Reconciler;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Options {
    pub dir: PathBuf,
    pub listen: SocketAddr,
    pub token_file: Option<PathBuf>,
    pub poll: Duration,
    pub vars: VarArgs,
}

/// The cloud's launch facts are gathered again after this long (or when the pools
/// change): on EC2 a gather is a few API calls, not something to do every second.
const FACTS_TTL: Duration = Duration::from_secs(60);

/// The configuration a controller with a git source last took, and its commit: what
/// its console shows (the checkout is the controller's own).
pub(crate) type Feed = tokio::sync::watch::Receiver<Fed>;
/// What the controller's loop sends its console: the configuration and its commit.
pub(crate) type Fed = Option<(Desired, Option<String>)>;
/// The loop's end of the [`Feed`].
pub(crate) type FeedSender = tokio::sync::watch::Sender<Fed>;

/// Reads a configuration's fleet into snapshots, never writing anything.
pub(crate) struct DirObserver {
    dir: PathBuf,
    vars: VarArgs,
    /// A git controller's configuration, instead of the directory's.
    feed: Option<Feed>,
    cluster: String,
    reconciler: Reconciler,
    /// The last facts gathered, for which pools (as JSON), and when.
    facts: Mutex<Option<(String, Instant, CloudFacts)>>,
}

impl DirObserver {
    pub(crate) async fn open(dir: &Path, vars: &VarArgs) -> anyhow::Result<DirObserver> {
        let desired = crate::setup::load(dir, vars)?;
        Self::with(dir, vars, &desired, None).await
    }

    /// The observer of a git controller: its stores are those of the configuration it
    /// took (`dir` is the controller's directory, where relative store paths start).
    async fn for_feed(dir: &Path, feed: Feed) -> anyhow::Result<DirObserver> {
        let desired = feed
            .borrow()
            .as_ref()
            .map(|(d, _)| d.clone())
            .context("the controller has not taken a configuration from git yet")?;
        Self::with(dir, &VarArgs::default(), &desired, Some(feed)).await
    }

    async fn with(
        dir: &Path,
        vars: &VarArgs,
        desired: &Desired,
        feed: Option<Feed>,
    ) -> anyhow::Result<DirObserver> {
        let reconciler =
            crate::setup::reconciler(desired, dir, &PlannerArgs::default(), "gpushare console")
                .await?;
        Ok(DirObserver {
            dir: dir.to_path_buf(),
            vars: vars.clone(),
            feed,
            cluster: desired.settings.cluster.clone(),
            reconciler,
            facts: Mutex::new(None),
        })
    }

    pub(crate) fn cluster(&self) -> &str {
        &self.cluster
    }

    /// One observation: the store and the cloud as they are, the configuration as it
    /// is now, and the plan from them.
    pub(crate) async fn observe(&self) -> anyhow::Result<Snapshot> {
        let r = &self.reconciler;
        let mut commit = None;
        let desired = match &self.feed {
            Some(feed) => match feed.borrow().clone() {
                Some((d, c)) => {
                    commit = c;
                    Ok(d)
                }
                None => Err("the controller has not taken a configuration yet".to_string()),
            },
            None => match crate::setup::load_all(&self.dir, &self.vars) {
                Ok((Some(d), diags)) if !diags.iter().any(crate::setup::is_error) => Ok(d),
                Ok((_, diags)) => Err(format!(
                    "the configuration does not load:\n{}",
                    gpushare_config::Diagnostics(diags)
                )),
                Err(e) => Err(format!("{e:#}")),
            },
        };
        let (live, plan) = match &desired {
            Ok(d) => match self.plan(d).await {
                Ok((live, plan)) => (live, Ok(plan)),
                Err(e) => (r.observe_only(&self.cluster).await?, Err(e)),
            },
            Err(e) => (r.observe_only(&self.cluster).await?, Err(e.clone())),
        };
        let reports = r
            .store()
            .reports()
            .await
            .context("reading the agents' reports")?;
        // A reconcile loop's last pass (and, from git, its commit): read, not needed.
        let status = match r.store().status().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "the console could not read the status record");
                None
            }
        };
        Ok(Snapshot {
            observed_at: live.observed_at,
            target_groups: live.target_groups,
            by_host: Default::default(),
            state: live.state,
            reports,
            desired: desired.ok(),
            plan,
            commit: commit.or_else(|| status.as_ref().and_then(|s| s.commit.clone())),
            status,
        })
    }

    /// The world and the plan towards `desired`, prepared as a check (no agents'
    /// round, nothing finished or changed); the cloud's launch facts are gathered at
    /// most once a [`FACTS_TTL`] for the same pools.
    async fn plan(&self, desired: &Desired) -> Result<(Live, Plan), String> {
        if desired.settings.cluster != self.cluster {
            return Err(format!(
                "the configuration now names cluster {:?}; restart the console to follow it",
                desired.settings.cluster
            ));
        }
        let pools = serde_json::to_string(&desired.capacity_providers).unwrap_or_default();
        let kept = self
            .facts
            .lock()
            .ok()
            .and_then(|f| f.clone())
            .filter(|(p, at, _)| *p == pools && at.elapsed() < FACTS_TTL)
            .map(|(_, _, facts)| facts);
        let with_kept = |d: &Desired, live: &mut Live| -> Result<Scoped, ScopeError> {
            if let Some(facts) = &kept {
                live.facts = facts.clone();
            }
            Whole.scope(d, live)
        };
        let how = Prepare {
            gather: kept.is_none(),
            ..Prepare::to_check(&with_kept)
        };
        let Prepared { live, plan, .. } = self
            .reconciler
            .prepare(desired, how)
            .await
            .map_err(|e| format!("{:#}", anyhow::Error::new(e)))?;
        if kept.is_none() {
            if let Ok(mut f) = self.facts.lock() {
                *f = Some((pools, Instant::now(), live.facts.clone()));
            }
        }
        Ok((live, plan))
    }
}

/// Read the token file: one line, not empty.
pub(crate) fn read_token(file: &Path) -> anyhow::Result<Auth> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the console token file {}", file.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!("{}: the console token file is empty", file.display());
    }
    if token.len() < 16 {
        bail!(
            "{}: the console token is {} characters; use at least 16 (e.g. `openssl rand -hex 32`)",
            file.display(),
            token.len()
        );
    }
    Ok(Auth::token(token))
}

/// Who may read a console on `addr`: anyone on loopback, a token holder elsewhere
/// (and then a token file is required).
pub(crate) fn auth_for(addr: SocketAddr, token_file: Option<&Path>) -> anyhow::Result<Auth> {
    match token_file {
        Some(f) => read_token(f),
        None if addr.ip().is_loopback() => Ok(Auth::Open),
        None => bail!(
            "the console would listen on {addr}, off loopback: give --console-token-file FILE (a bearer token readers must present), or listen on 127.0.0.1"
        ),
    }
}

/// What the console says at start about who may read it.
pub(crate) fn auth_words(auth: &Auth, token_file: Option<&Path>) -> String {
    match (auth, token_file) {
        (Auth::Open, _) => "loopback only, no token".to_string(),
        (Auth::Token(_), Some(f)) => {
            format!("a bearer token is required (the one in {})", f.display())
        }
        (Auth::Token(_), None) => "a bearer token is required".to_string(),
    }
}

/// `gpushare console`.
pub async fn command(opts: Options) -> anyhow::Result<u8> {
    let auth = auth_for(opts.listen, opts.token_file.as_deref())?;
    let observer = Arc::new(DirObserver::open(&opts.dir, &opts.vars).await?);
    let cluster = observer.cluster().to_string();
    let words = auth_words(&auth, opts.token_file.as_deref());
    let o = observer.clone();
    let console = Console::start(auth, opts.poll, move || {
        let o = o.clone();
        async move { o.observe().await }
    });
    let bound = crate::ops::serve_app(opts.listen, router(console)).await?;
    println!("console: serving cluster {cluster:?} on http://{bound}/ (read-only; {words})");
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = terminated() => {}
    }
    Ok(0)
}

/// SIGTERM (never, where there is no such signal).
async fn terminated() {
    #[cfg(unix)]
    if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        s.recv().await;
        return;
    }
    std::future::pending::<()>().await
}

/// `show --svg FILE`: the fleet picture written to FILE (replaced atomically).
pub(crate) fn write_svg(
    file: &Path,
    state: &StoreState,
    reports: &[HostReport],
    now: u64,
) -> anyhow::Result<()> {
    let svg = gpushare_console::svg::fleet_svg(state, reports, now)
        .context("rendering the fleet picture")?;
    std::fs::write(file, svg).with_context(|| format!("writing {}", file.display()))
}

/// The console of the controller's operations listener: its routes, when it is
/// served, and the line that says so (or why not), printed after the listener's own.
pub(crate) struct ControllerConsole {
    pub router: Option<axum::Router>,
    /// "read-only; ..." when served, else why it is not.
    note: String,
}

impl ControllerConsole {
    /// The line to print once the listener is bound on `bound`.
    pub(crate) fn line(&self, bound: SocketAddr) -> String {
        match &self.router {
            Some(_) => format!(
                "reconcile: serving the web console on http://{bound}/ ({})",
                self.note
            ),
            None => format!("reconcile: the web console is not served: {}", self.note),
        }
    }
}

/// Where the controller's console takes its configuration from.
pub(crate) enum ControllerSource<'a> {
    /// A directory source: the configuration in it, loaded at each observation.
    Dir(&'a Path),
    /// A git source: the configuration (and commit) the controller last took, fed by
    /// its loop; the stores are opened from it, relative to the controller's `dir`.
    Git { dir: &'a Path, feed: Feed },
}

/// The console for the controller's operations listener on `addr`: not served off
/// loopback without a token file, or when a directory's configuration does not load
/// at start.
pub(crate) async fn for_controller(
    addr: SocketAddr,
    source: ControllerSource<'_>,
    vars: &VarArgs,
    token_file: Option<&Path>,
) -> ControllerConsole {
    let not = |note: String| ControllerConsole { router: None, note };
    let auth = match auth_for(addr, token_file) {
        Ok(a) => a,
        Err(e) => return not(format!("{e:#}")),
    };
    let dir = match source {
        ControllerSource::Dir(dir) => dir,
        ControllerSource::Git { dir, feed } => {
            // Opened at the first observation after the loop took a commit.
            let note = format!(
                "read-only; {}; the configuration of the commit the loop took",
                auth_words(&auth, token_file)
            );
            let dir = dir.to_path_buf();
            let opened: Arc<tokio::sync::OnceCell<DirObserver>> = Arc::default();
            let console = Console::start(auth, Duration::from_secs(1), move || {
                let (dir, feed, opened) = (dir.clone(), feed.clone(), opened.clone());
                async move {
                    let o = opened
                        .get_or_try_init(|| DirObserver::for_feed(&dir, feed))
                        .await?;
                    o.observe().await
                }
            });
            return ControllerConsole {
                router: Some(router(console)),
                note,
            };
        }
    };
    let observer = match DirObserver::open(dir, vars).await {
        Ok(o) => Arc::new(o),
        Err(e) => return not(format!("{e:#}")),
    };
    let note = format!("read-only; {}", auth_words(&auth, token_file));
    let console = Console::start(auth, Duration::from_secs(1), move || {
        let o = observer.clone();
        async move { o.observe().await }
    });
    ControllerConsole {
        router: Some(router(console)),
        note,
    }
}
