//! The process runtime's health checks: Docker runs a container's check for the
//! docker runtime; here the runtime runs it itself, with Docker's (and ECS's)
//! rules. The first check runs `interval` after the start, then every `interval`;
//! a check that exits 0 within `timeout` passes; `retries` failures in a row make
//! the container UNHEALTHY, except failures during `start_period` before its
//! first pass. The verdict is written to `<record>/<container>/health`, so a
//! listing reads it without waiting; a restarted agent starts the loop again (the
//! container is UNKNOWN until its next check).

use gpushare_core::model::{CheckCommand, ContainerHealthCheck, HealthStatus};
use gpushare_core::util::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

const FILE: &str = "health";

/// The verdict last written for the container whose record directory is `cdir`.
pub(super) fn read(cdir: &Path) -> HealthStatus {
    match std::fs::read_to_string(cdir.join(FILE))
        .as_deref()
        .map(str::trim)
    {
        Ok("HEALTHY") => HealthStatus::Healthy,
        Ok("UNHEALTHY") => HealthStatus::Unhealthy,
        _ => HealthStatus::Unknown,
    }
}

fn write(cdir: &Path, status: HealthStatus) {
    let tmp = cdir.join("health.tmp");
    let done =
        std::fs::write(&tmp, status.as_str()).and_then(|()| std::fs::rename(&tmp, cdir.join(FILE)));
    if let Err(e) = done {
        tracing::warn!(dir = %cdir.display(), error = %e, "cannot write a health verdict");
    }
}

/// One container's check loop, as the runtime starts it.
pub(super) struct Checker {
    pub(super) key: String,
    pub(super) check: ContainerHealthCheck,
    pub(super) cdir: PathBuf,
    pub(super) wdir: PathBuf,
    pub(super) env: BTreeMap<String, String>,
}

impl Checker {
    /// Start the loop unless one runs for `key` already; it ends when `alive` says
    /// the container is gone.
    pub(super) fn spawn(
        self,
        running: &Arc<Mutex<BTreeSet<String>>>,
        alive: impl Fn() -> bool + Send + 'static,
    ) {
        if !lock(running).insert(self.key.clone()) {
            return;
        }
        let running = Arc::clone(running);
        tokio::spawn(async move {
            let key = self.key.clone();
            self.run(alive).await;
            lock(&running).remove(&key);
        });
    }

    async fn run(self, alive: impl Fn() -> bool) {
        let started = Instant::now();
        let start_period = Duration::from_secs(self.check.start_period.into());
        let mut failures = 0u32;
        let mut passed_once = false;
        loop {
            tokio::time::sleep(Duration::from_secs(self.check.interval.into())).await;
            if !alive() {
                return;
            }
            if self.once().await {
                failures = 0;
                passed_once = true;
                write(&self.cdir, HealthStatus::Healthy);
                continue;
            }
            if !passed_once && started.elapsed() < start_period {
                continue;
            }
            failures += 1;
            if failures >= self.check.retries {
                write(&self.cdir, HealthStatus::Unhealthy);
            }
        }
    }

    /// One check: true when it exits 0 within the timeout (killed otherwise).
    async fn once(&self) -> bool {
        let mut cmd = match self.check.parsed() {
            Some(CheckCommand::Exec(args)) => {
                let mut c = tokio::process::Command::new(&args[0]);
                c.args(&args[1..]);
                c
            }
            Some(CheckCommand::Shell(line)) => {
                let mut c = tokio::process::Command::new("/bin/sh");
                c.arg("-c").arg(line);
                c
            }
            None => return false,
        };
        cmd.current_dir(&self.wdir)
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
            )
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let limit = Duration::from_secs(self.check.timeout.into());
        match tokio::time::timeout(limit, cmd.status()).await {
            Ok(Ok(status)) => status.success(),
            _ => false,
        }
    }
}
