//! What every command starts from: the configuration directory, the loaded and
//! validated configuration, the reconciler over its backends (with the process's
//! test hooks), and Ctrl-C handling. Below the commands, the GitOps loop, the console
//! and the host and agent API commands, which all call it; it calls none of them.

use crate::args::{LockArgs, PlannerArgs, VarArgs};
use crate::planfile;
use anyhow::{bail, Context};
use gpushare_config::{Diagnostic, Diagnostics, LoadOptions, Severity};
use gpushare_core::model::Desired;
use gpushare_engine::apply::Hooks;
use gpushare_engine::reconcile::Reconciler;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Test hooks (failpoints, step delays), read from the environment once by `main`.
static HOOKS: OnceLock<Hooks> = OnceLock::new();

/// Set the test hooks every reconciler of this process gets (called once by `main`).
pub fn set_hooks(hooks: Hooks) {
    let _ = HOOKS.set(hooks);
}

/// The reconciler for the configuration in `dir`: its backends opened once, the
/// planner options of its settings with the command line's overrides, the process's
/// test hooks.
pub async fn reconciler(
    desired: &Desired,
    dir: &Path,
    planner: &PlannerArgs,
    holder: &str,
) -> anyhow::Result<Reconciler> {
    let backends = gpushare_backends::open(&desired.settings, dir).await?;
    Ok(Reconciler::new(backends, holder)
        .with_overrides(planner.overrides())
        .with_hooks(HOOKS.get().copied().unwrap_or_default()))
}

/// The configuration directory (or plan file): the argument, else the current directory.
pub(crate) fn config_dir(arg: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let p = match arg {
        Some(p) => p,
        None => std::env::current_dir().context("reading the current directory")?,
    };
    if !p.exists() {
        bail!("{} does not exist", p.display());
    }
    p.canonicalize()
        .with_context(|| format!("resolving {}", p.display()))
}

/// The configuration in `dir`, loaded and validated. Warnings are printed on stderr;
/// errors come back as [`Diagnostics`] (printed by `main` as the loader formats them).
pub fn load(dir: &Path, vars: &VarArgs) -> anyhow::Result<Desired> {
    let (desired, diags) = load_all(dir, vars)?;
    let desired = match desired {
        Some(d) if !diags.iter().any(is_error) => d,
        _ => return Err(Diagnostics(diags).into()),
    };
    if !diags.is_empty() {
        eprint!("{}", Diagnostics(diags));
    }
    Ok(desired)
}

/// Load and validate, keeping every diagnostic (errors and warnings).
pub(crate) fn load_all(
    dir: &Path,
    vars: &VarArgs,
) -> anyhow::Result<(Option<Desired>, Vec<Diagnostic>)> {
    if planfile::config_files(dir)?.is_empty() {
        bail!(
            "{} holds no configuration files (*.hcl or *.tf)",
            dir.display()
        );
    }
    match gpushare_config::load_dir(dir, &load_options(vars)) {
        Ok(loaded) => {
            let diags = gpushare_config::validate(&loaded.desired);
            Ok((Some(loaded.desired), diags))
        }
        Err(Diagnostics(diags)) => Ok((None, diags)),
    }
}

/// How the configuration is loaded: the `-var` and `-var-file` flags, the
/// environment's variables and the directory's variable files.
pub(crate) fn load_options(vars: &VarArgs) -> LoadOptions {
    LoadOptions {
        vars: vars.vars.clone(),
        read_env: true,
        var_files: vars.var_files.clone(),
        auto_var_files: true,
    }
}

pub(crate) fn is_error(d: &Diagnostic) -> bool {
    matches!(d.severity, Severity::Error)
}

/// The configuration with `-lock-timeout` applied.
pub(crate) fn with_lock_timeout(mut desired: Desired, lock: &LockArgs) -> Desired {
    if let Some(d) = lock.lock_timeout {
        desired.settings.lock_timeout_seconds = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    }
    desired
}

/// The backends of the configuration in `dir` and the lock timeout, for a state edit.
pub(crate) async fn open_for_edit(
    dir: Option<PathBuf>,
    vars: &VarArgs,
    lock: &LockArgs,
) -> anyhow::Result<(gpushare_engine::reconcile::Backends, std::time::Duration)> {
    let dir = config_dir(dir)?;
    let desired = with_lock_timeout(load(&dir, vars)?, lock);
    let b = gpushare_backends::open(&desired.settings, &dir).await?;
    Ok((
        b,
        std::time::Duration::from_secs(desired.settings.lock_timeout_seconds),
    ))
}

/// A flag set by the first Ctrl-C (apply stops after the current step); a second one exits.
pub fn cancel_on_ctrl_c() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\nInterrupt received: stopping after the current step (run apply again to finish).");
            f.store(true, Ordering::SeqCst);
            // A second interrupt ends the process at once; the journal makes that safe.
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
    flag
}
