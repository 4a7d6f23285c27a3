//! Starting the GitOps controller: its configuration source (a directory, or a git
//! repository with its pins), the endpoints it serves, and the watch on a directory.

use super::pass::Source;
use super::wake::watch_config_dir;
use super::{pins, Controller, Options, GIT_CACHE_DIR};
use gpushare_gitsource::GitSource;
use std::path::PathBuf;
use std::sync::Arc;

/// A git source's pins as kept, and where they are kept.
struct Pinned {
    pins: Option<pins::Pins>,
    flags: pins::PinFlags,
    file: Option<PathBuf>,
}

impl Controller {
    /// The controller before its first pass: the source opened, a git source's pins
    /// read (and moved where the flags say so).
    pub(super) fn new(opts: Options) -> anyhow::Result<Controller> {
        let (source, pinned) = open_source(&opts)?;
        let holder = format!(
            "gpushare reconcile (pid {} on {})",
            std::process::id(),
            gpushare_core::util::hostname()
        );
        let lead = !opts.once && !opts.drift_only;
        Ok(Controller {
            opts,
            source,
            kept: None,
            last_good: None,
            refused: None,
            pins: pinned.pins,
            pin_flags: pinned.flags,
            pin_file: pinned.file,
            restored: false,
            converged_digest: None,
            drift_corrections: 0,
            pass: 0,
            holder,
            status_read: false,
            lead,
            leader: None,
            console_feed: None,
        })
    }

    /// With `--listen`: serve /metrics, /healthz, /readyz and the web console (fed
    /// each pass's configuration when the source is git).
    pub(super) async fn serve_ops(
        &mut self,
        metrics: &Arc<crate::ops::Metrics>,
    ) -> anyhow::Result<()> {
        let Some(addr) = self.opts.listen else {
            return Ok(());
        };
        let source = match &self.source {
            Source::Dir(dir) => crate::console::ControllerSource::Dir(dir),
            Source::Git { .. } => {
                let (tx, feed) = tokio::sync::watch::channel(None);
                self.console_feed = Some(tx);
                crate::console::ControllerSource::Git {
                    dir: &self.opts.dir,
                    feed,
                }
            }
        };
        let console = crate::console::for_controller(
            addr,
            source,
            &self.opts.vars,
            self.opts.console_token_file.as_deref(),
        )
        .await;
        let bound = crate::ops::serve(addr, metrics.clone(), console.router.clone()).await?;
        println!("reconcile: serving /metrics, /healthz and /readyz on http://{bound}");
        println!("{}", console.line(bound));
        Ok(())
    }

    /// A watch on a directory source that notifies `wake` when a file changes (not
    /// with `--once`; `None` when the directory cannot be watched: then the loop
    /// polls every interval).
    pub(super) fn watch_source(
        &self,
        wake: &Arc<tokio::sync::Notify>,
    ) -> Option<notify::RecommendedWatcher> {
        match &self.source {
            Source::Dir(dir) if !self.opts.once => match watch_config_dir(dir, wake.clone()) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the configuration directory; polling every interval only");
                    None
                }
            },
            _ => None,
        }
    }
}

/// The source `opts` name, and a git source's pins.
fn open_source(opts: &Options) -> anyhow::Result<(Source, Pinned)> {
    let Some(g) = &opts.git else {
        let pinned = Pinned {
            pins: None,
            flags: pins::PinFlags::default(),
            file: None,
        };
        return Ok((Source::Dir(opts.dir.clone()), pinned));
    };
    let cache = g
        .cache
        .clone()
        .unwrap_or_else(|| opts.dir.join(GIT_CACHE_DIR));
    let flags = pins::PinFlags::from_args(&g.guard);
    let file = cache.join(pins::PIN_FILE);
    let pins = match pins::read(&file)? {
        Some(kept) => {
            let moved = flags.over(kept.clone());
            if moved != kept {
                pins::write(&file, &moved)?;
            }
            Some(moved)
        }
        None => None,
    };
    let limits = gpushare_gitsource::Limits {
        max_file_bytes: g.guard.max_file_size,
        max_total_bytes: g.guard.max_checkout_size,
    };
    let source = Source::Git {
        src: GitSource::new(g.url.clone(), g.reference.clone(), cache)
            .with_credentials(gpushare_gitsource::HttpCredentials::from_env())
            .with_path(g.path.clone())
            .with_limits(limits),
        path: g.path.clone(),
    };
    let pinned = Pinned {
        pins,
        flags,
        file: Some(file),
    };
    Ok((source, pinned))
}
