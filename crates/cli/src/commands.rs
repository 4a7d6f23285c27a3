//! One function per command. Each returns the process exit code (0 success or no
//! changes, 2 changes present with --detailed-exitcode, 3 fmt --check found
//! unformatted files); errors go back to `main` and exit 1.

use crate::cli::{
    Cli, Command, DebugCommand, FaultArg, LockArgs, PlannerArgs, ScopeArgs, StateCommand, VarArgs,
};
use crate::planfile::{self, SavedPlan};
use crate::scope;
use crate::state_cmd;
use crate::ui::{self, Progress};
use anyhow::{bail, Context};
use gpushare_config::{Diagnostic, Diagnostics, LoadOptions, Severity, Source};
use gpushare_core::model::{Desired, Live};
use gpushare_core::plan::Plan;
use gpushare_core::render::{self, RenderOptions};
use gpushare_core::FORMAT_VERSION;
use gpushare_engine::apply::{ApplyReport, Hooks, ProgressEvent};
use gpushare_engine::cloud::Fault;
use gpushare_engine::reconcile::{Reconciler, Run};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Test hooks (failpoints, step delays), read from the environment once by `main`.
static HOOKS: OnceLock<Hooks> = OnceLock::new();

/// Set the test hooks every reconciler of this process gets (called once by `main`).
pub fn set_hooks(hooks: Hooks) {
    let _ = HOOKS.set(hooks);
}

/// The reconciler for the configuration in `dir`: its backends opened once, the
/// planner options from the command line, the process's test hooks.
pub async fn reconciler(
    desired: &Desired,
    dir: &Path,
    planner: &PlannerArgs,
    holder: &str,
) -> anyhow::Result<Reconciler> {
    let backends = gpushare_backends::open(&desired.settings, dir).await?;
    Ok(Reconciler::new(backends, holder)
        .with_options(planner.options())
        .with_hooks(HOOKS.get().copied().unwrap_or_default()))
}

pub async fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Validate { dir, json, vars } => validate(&config_dir(dir)?, json, &vars),
        Command::Fmt { dir, check } => fmt(&config_dir(dir)?, check),
        Command::Plan {
            dir,
            out,
            detailed_exitcode,
            json,
            destroy,
            show_user_data,
            vars,
            planner,
            scope,
            lock,
        } => {
            let dir = config_dir(dir)?;
            plan_cmd(
                &dir,
                out.as_deref(),
                PlanOutput {
                    detailed: detailed_exitcode,
                    json,
                    show_user_data,
                },
                destroy,
                &vars,
                &planner,
                &scope,
                &lock,
            )
            .await
        }
        Command::Apply {
            target,
            auto_approve,
            json,
            vars,
            planner,
            scope,
            lock,
        } => {
            let target = config_dir(target)?;
            if target.is_file() {
                // A saved plan was reviewed when it was made: no question (as terraform apply PLANFILE).
                apply_saved(&target, json, &lock).await
            } else {
                let how = How {
                    destroy: false,
                    auto_approve,
                    json,
                    planner,
                    scope,
                    lock,
                };
                apply_dir(&target, &vars, &how).await
            }
        }
        Command::Destroy {
            dir,
            auto_approve,
            vars,
            lock,
        } => {
            let how = How {
                destroy: true,
                auto_approve,
                json: false,
                planner: PlannerArgs::default(),
                scope: ScopeArgs::default(),
                lock,
            };
            apply_dir(&config_dir(dir)?, &vars, &how).await
        }
        Command::Show {
            dir: Some(file),
            json,
        } if file.is_file() => show_plan(&file, json).await,
        Command::Show { dir, json } => show(&config_dir(dir)?, json).await,
        Command::State { command } => state(command).await,
        Command::Import {
            addr,
            id,
            dir,
            vars,
            lock,
        } => import(&config_dir(dir)?, &addr, &id, &vars, &lock).await,
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "gpushare", &mut std::io::stdout());
            Ok(0)
        }
        Command::Man => {
            use clap::CommandFactory;
            clap_mangen::Man::new(Cli::command())
                .render(&mut std::io::stdout())
                .context("writing the manual page")?;
            Ok(0)
        }
        Command::Reconcile {
            dir,
            interval,
            once,
            git,
            git_ref,
            path,
            cache,
            drift_only,
            listen,
            log_format: _,
            vars,
            planner,
        } => {
            let git = git.map(|url| crate::reconcile::GitOptions {
                url,
                reference: git_ref,
                path,
                cache,
            });
            crate::reconcile::run(crate::reconcile::Options {
                dir: config_dir(dir)?,
                interval,
                once,
                git,
                drift_only,
                listen,
                vars,
                planner,
            })
            .await
        }
        Command::Status { dir, json } => crate::reconcile::status(&config_dir(dir)?, json).await,
        Command::Debug {
            command: DebugCommand::Fault { host, fault, dir },
        } => debug_fault(&config_dir(dir)?, &host, fault).await,
        Command::Agent(args) => crate::agent_cmd::run(args).await,
        Command::IamPolicy { cluster, host } => crate::iam::print(&cluster, host),
    }
}

/// The configuration directory (or plan file): the argument, else the current directory.
fn config_dir(arg: Option<PathBuf>) -> anyhow::Result<PathBuf> {
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

// ---------------------------------------------------------------------------
// Loading and validating
// ---------------------------------------------------------------------------

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
fn load_all(dir: &Path, vars: &VarArgs) -> anyhow::Result<(Option<Desired>, Vec<Diagnostic>)> {
    if planfile::config_files(dir)?.is_empty() {
        bail!(
            "{} holds no configuration files (*.hcl or *.tf)",
            dir.display()
        );
    }
    let opts = LoadOptions {
        vars: vars.vars.clone(),
        read_env: true,
        var_files: vars.var_files.clone(),
        auto_var_files: true,
    };
    match gpushare_config::load_dir(dir, &opts) {
        Ok(loaded) => {
            let diags = gpushare_config::validate(&loaded.desired);
            Ok((Some(loaded.desired), diags))
        }
        Err(Diagnostics(diags)) => Ok((None, diags)),
    }
}

fn is_error(d: &Diagnostic) -> bool {
    matches!(d.severity, Severity::Error)
}

fn validate(dir: &Path, json: bool, vars: &VarArgs) -> anyhow::Result<u8> {
    let (desired, diags) = load_all(dir, vars)?;
    let errors = diags.iter().filter(|d| is_error(d)).count();
    let valid = desired.is_some() && errors == 0;
    if json {
        let out = json!({
            "format_version": FORMAT_VERSION,
            "valid": valid,
            "error_count": errors,
            "warning_count": diags.len() - errors,
            "diagnostics": diags.iter().map(diagnostic_json).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else if valid {
        if !diags.is_empty() {
            eprint!("{}", Diagnostics(diags));
        }
        println!("Success! The configuration is valid.");
    } else {
        eprint!("{}", Diagnostics(diags));
    }
    Ok(if valid { 0 } else { 1 })
}

fn diagnostic_json(d: &Diagnostic) -> serde_json::Value {
    json!({
        "severity": if is_error(d) { "error" } else { "warning" },
        "summary": d.summary,
        "detail": d.detail,
        "hint": d.hint,
        "path": d.path,
        "range": d.loc.as_ref().map(|l| json!({
            "filename": l.file,
            "start": { "line": l.line, "column": l.col },
        })),
    })
}

fn fmt(dir: &Path, check: bool) -> anyhow::Result<u8> {
    let mut unformatted = 0;
    let mut problems = Vec::new();
    for file in planfile::config_files(dir)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let name = file
            .strip_prefix(dir)
            .unwrap_or(&file)
            .display()
            .to_string();
        let formatted = match gpushare_config::format_source(&Source {
            name: name.clone(),
            text: text.clone(),
        }) {
            Ok(f) => f,
            Err(Diagnostics(d)) => {
                problems.extend(d);
                continue;
            }
        };
        if formatted != text {
            unformatted += 1;
            println!("{name}");
            if !check {
                write_atomically(&file, &formatted)?;
            }
        }
    }
    if !problems.is_empty() {
        return Err(Diagnostics(problems).into());
    }
    Ok(if check && unformatted > 0 { 3 } else { 0 })
}

/// Replaces a configuration file keeping its mode (a 0600 file stays 0600).
fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    gpushare_engine::fsutil::write_atomic_keeping_mode(path, text.as_bytes())
        .with_context(|| format!("replacing {}", path.display()))
}

// ---------------------------------------------------------------------------
// Observing and planning
// ---------------------------------------------------------------------------

fn render_opts() -> RenderOptions {
    RenderOptions {
        color: ui::use_color(),
    }
}

/// The human-readable plan: changes, the fleet picture after it, counts and cost.
fn print_plan(plan: &Plan, live: &Live) {
    print!("{}", render::plan_text(plan, &live.state, &render_opts()));
}

/// What `gpushare plan` prints and how it exits.
struct PlanOutput {
    detailed: bool,
    json: bool,
    show_user_data: bool,
}

/// `plan --show-user-data`: the cloud-init script each planned launch would boot with.
#[cfg(feature = "ec2")]
fn print_user_data(plan: &Plan, desired: &Desired, store_address: &str) -> anyhow::Result<()> {
    for launch in &plan.launches {
        let host = &launch.host;
        let pool = desired
            .capacity_providers
            .get(&host.capacity_provider)
            .with_context(|| {
                format!(
                    "host {} belongs to capacity_provider.{}, which the configuration lacks",
                    host.id, host.capacity_provider
                )
            })?;
        let script = gpushare_ec2::render_user_data(&gpushare_ec2::UserDataInput {
            cluster: &desired.settings.cluster,
            pool_name: &host.capacity_provider,
            pool,
            host_id: &host.id,
            store_address,
        })
        .with_context(|| format!("rendering the user data of host {}", host.id))?;
        println!(
            "\n# user data of host {} ({} bytes)\n{script}",
            host.id,
            script.len()
        );
    }
    Ok(())
}

#[cfg(not(feature = "ec2"))]
fn print_user_data(_: &Plan, _: &Desired, _: &str) -> anyhow::Result<()> {
    bail!("--show-user-data needs the EC2 backend, and this gpushare was built without the `ec2` feature")
}

/// The files a saved plan's staleness hash covers: the configuration, the variable
/// files read automatically and the -var-file files.
fn hashed_files(dir: &Path, var_files: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = planfile::config_files(dir)?;
    files.extend(
        gpushare_config::auto_var_files(dir)
            .with_context(|| format!("listing the variable files of {}", dir.display()))?,
    );
    files.extend(var_files.iter().cloned());
    Ok(files)
}

/// The configuration with `-lock-timeout` applied.
fn with_lock_timeout(mut desired: Desired, lock: &LockArgs) -> Desired {
    if let Some(d) = lock.lock_timeout {
        desired.settings.lock_timeout_seconds = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    }
    desired
}

/// Observe, then plan with the scoping flags: the desired state the plan was made
/// from (narrowed by -target), the world, and the plan with its notes.
async fn scoped_plan(
    r: &Reconciler,
    desired: &Desired,
    scope_args: &ScopeArgs,
    destroy: bool,
) -> anyhow::Result<(Desired, Live, Plan)> {
    let mut live = r.observe(&desired.settings.cluster).await?;
    let (planned, note) = scope::targeted(desired, &live.state, &scope_args.target)?;
    let replace_notes = scope::mark_replaced(&mut live, &scope_args.replace)?;
    let mut plan = r.plan(&planned, &live, destroy)?;
    plan.notes.extend(note);
    plan.notes.extend(replace_notes);
    Ok((planned, live, plan))
}

#[allow(clippy::too_many_arguments)]
async fn plan_cmd(
    dir: &Path,
    out: Option<&Path>,
    output: PlanOutput,
    destroy: bool,
    vars: &VarArgs,
    planner: &PlannerArgs,
    scope_args: &ScopeArgs,
    lock: &LockArgs,
) -> anyhow::Result<u8> {
    let PlanOutput {
        detailed,
        json,
        show_user_data,
    } = output;
    let desired = with_lock_timeout(load(dir, vars)?, lock);
    let r = reconciler(&desired, dir, planner, "gpushare plan").await?;
    if r.store()
        .read_journal()
        .await
        .context("reading the apply journal")?
        .is_some()
    {
        eprintln!("warning: an interrupted apply left a journal; the next apply finishes it before anything else");
    }
    if scope_args.refresh_only {
        if out.is_some() {
            bail!("-refresh-only plans cannot be saved: run gpushare apply -refresh-only");
        }
        let changes = refresh(&r, &desired, json).await?.0;
        return Ok(if detailed && !changes.is_empty() {
            2
        } else {
            0
        });
    }
    let (desired, live, plan) = scoped_plan(&r, &desired, scope_args, destroy).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&render::plan_json(&plan))?
        );
    } else {
        print_plan(&plan, &live);
        if show_user_data {
            print_user_data(&plan, &desired, &r.backends().store_address)?;
        }
    }
    if let Some(out) = out {
        let saved = SavedPlan {
            format_version: FORMAT_VERSION.to_string(),
            config_dir: dir.to_path_buf(),
            config_hash: planfile::config_hash(
                dir,
                &hashed_files(dir, &vars.var_files)?,
                &vars.vars,
            )?,
            vars: vars.vars.clone(),
            var_files: vars.var_files.clone(),
            desired,
            plan: plan.clone(),
            digest: String::new(),
        };
        planfile::save(out, &saved)?;
        if !json {
            println!(
                "\nSaved the plan to {}. To carry it out: gpushare apply {}",
                out.display(),
                out.display()
            );
        }
    }
    Ok(if detailed && !plan.is_empty() { 2 } else { 0 })
}

/// `-refresh-only`: print what the world says that the state does not record yet;
/// returns those changes and the state that records them.
async fn refresh(
    r: &Reconciler,
    desired: &Desired,
    json: bool,
) -> anyhow::Result<(Vec<String>, gpushare_core::model::StoreState)> {
    let recorded = r.store().load().await.context("reading the state")?;
    let live = r.observe(&desired.settings.cluster).await?;
    let changes = scope::refresh_changes(&recorded, &live);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "format_version": FORMAT_VERSION,
                "refresh_only": true,
                "changes_outside_gpushare": changes,
            }))?
        );
    } else if changes.is_empty() {
        println!("No changes. The state matches the fleet; refresh-only proposes nothing.");
    } else {
        println!("Objects have changed outside of gpushare:\n");
        for c in &changes {
            println!("  ~ {c}");
        }
        println!("\nThis is a refresh-only plan: it proposes no change to the fleet. gpushare apply -refresh-only records the above in the state.");
    }
    Ok((changes, scope::refreshed_state(&recorded, &live)))
}

// ---------------------------------------------------------------------------
// Applying
// ---------------------------------------------------------------------------

struct How {
    destroy: bool,
    auto_approve: bool,
    json: bool,
    planner: PlannerArgs,
    scope: ScopeArgs,
    lock: LockArgs,
}

async fn apply_dir(dir: &Path, vars: &VarArgs, how: &How) -> anyhow::Result<u8> {
    if how.json && !how.auto_approve {
        bail!("--json needs --auto-approve (there is no one to ask)");
    }
    let desired = with_lock_timeout(load(dir, vars)?, &how.lock);
    let holder = if how.destroy {
        "gpushare destroy"
    } else {
        "gpushare apply"
    };
    let r = reconciler(&desired, dir, &how.planner, holder).await?;
    let cancel = cancel_on_ctrl_c();
    // Finish an interrupted apply first, so this plan starts from where it left off.
    if let Some(done) = resume_interrupted(&r, &desired, &cancel, how.json).await? {
        if !how.json {
            println!(
                "Finished an interrupted apply ({} steps).\n",
                done.changed_steps + done.skipped_steps
            );
        }
    }
    if how.scope.refresh_only {
        return apply_refresh(&r, &desired, how).await;
    }
    let (desired, live, plan) = scoped_plan(&r, &desired, &how.scope, how.destroy).await?;
    if !how.json {
        print_plan(&plan, &live);
    }
    if plan.is_empty() {
        if how.json {
            print_apply_json(&plan, None, &live);
        } else {
            println!("\nNo changes. The fleet matches the configuration.");
        }
        return Ok(0);
    }
    if !how.auto_approve {
        let (question, detail) = if how.destroy {
            (
                "Do you really want to destroy every host and task?",
                "gpushare will destroy everything shown above.",
            )
        } else {
            (
                "Do you want to perform these actions?",
                "gpushare will perform the actions described above.",
            )
        };
        if !ui::confirm(question, detail)? {
            println!("\nApply cancelled.");
            return Ok(1);
        }
    }
    let report = run_apply(&r, &desired, &plan, &cancel, how.json).await?;
    finish(&r, &desired, &plan, &report, how.json, how.destroy).await
}

/// `apply -refresh-only`: record what observing found (after asking), no cloud call.
async fn apply_refresh(r: &Reconciler, desired: &Desired, how: &How) -> anyhow::Result<u8> {
    let (changes, next) = refresh(r, desired, how.json).await?;
    if changes.is_empty() {
        return Ok(0);
    }
    if !how.auto_approve
        && !ui::confirm(
            "Would you like to update the gpushare state to reflect these changes?",
            "gpushare will write these changes to the state without changing the fleet.",
        )?
    {
        println!("\nApply cancelled.");
        return Ok(1);
    }
    let lock_timeout = std::time::Duration::from_secs(desired.settings.lock_timeout_seconds);
    let serial = state_cmd::edit(
        r.backends(),
        "gpushare apply -refresh-only",
        lock_timeout,
        |s| {
            if s.serial + 1 != next.serial {
                bail!(
                    "the state moved on while refreshing (serial {}); run the command again",
                    s.serial
                );
            }
            *s = next.clone();
            Ok(next.serial)
        },
    )
    .await?;
    if !how.json {
        println!(
            "\nApply complete! Recorded {} changes (state serial {serial}).",
            changes.len()
        );
    }
    Ok(0)
}

async fn apply_saved(file: &Path, json: bool, lock: &LockArgs) -> anyhow::Result<u8> {
    let saved = planfile::load(file)?;
    let dir = &saved.config_dir;
    let hash = planfile::config_hash(dir, &hashed_files(dir, &saved.var_files)?, &saved.vars)?;
    if hash != saved.config_hash {
        bail!(
            "the saved plan {} is stale: the configuration in {} changed since it was made; run gpushare plan again",
            file.display(),
            dir.display()
        );
    }
    let desired = with_lock_timeout(saved.desired, lock);
    let r = reconciler(&desired, dir, &PlannerArgs::default(), "gpushare apply").await?;
    let state = r.store().load().await.context("reading the state")?;
    let journal = r
        .store()
        .read_journal()
        .await
        .context("reading the apply journal")?;
    let own_journal = journal.as_ref().is_some_and(|j| j.plan == saved.plan);
    if state.serial != saved.plan.base_serial && !own_journal {
        bail!(
            "the saved plan {} is stale: it was made from state serial {} but the state is now at serial {}; \
             run gpushare plan again",
            file.display(),
            saved.plan.base_serial,
            state.serial
        );
    }
    let live = r.observe(&desired.settings.cluster).await?;
    let cancel = cancel_on_ctrl_c();
    if saved.plan.is_empty() {
        if json {
            print_apply_json(&saved.plan, None, &live);
        } else {
            println!("No changes in the saved plan.");
        }
        return Ok(0);
    }
    let report = run_apply(&r, &desired, &saved.plan, &cancel, json).await?;
    finish(&r, &desired, &saved.plan, &report, json, saved.plan.destroy).await
}

/// Finish the journal of an interrupted apply, if there is one.
async fn resume_interrupted(
    r: &Reconciler,
    desired: &Desired,
    cancel: &AtomicBool,
    quiet: bool,
) -> anyhow::Result<Option<ApplyReport>> {
    let progress = ProgressPrinter::new(quiet);
    let progress_fn = progress.callback();
    let run = Run {
        cancel: Some(cancel),
        progress: Some(&progress_fn),
    };
    Ok(r.resume(desired, run).await?)
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

async fn run_apply(
    r: &Reconciler,
    desired: &Desired,
    plan: &Plan,
    cancel: &AtomicBool,
    quiet: bool,
) -> anyhow::Result<ApplyReport> {
    let progress = ProgressPrinter::new(quiet);
    let progress_fn = progress.callback();
    let run = Run {
        cancel: Some(cancel),
        progress: Some(&progress_fn),
    };
    if !quiet {
        eprintln!();
    }
    Ok(r.apply(desired, plan, run).await?)
}

/// After an apply: let the local agents start what was placed, then summarise.
async fn finish(
    r: &Reconciler,
    desired: &Desired,
    plan: &Plan,
    report: &ApplyReport,
    json: bool,
    destroy: bool,
) -> anyhow::Result<u8> {
    let live = r.observe(&desired.settings.cluster).await?;
    if json {
        print_apply_json(plan, Some(report), &live);
        return Ok(0);
    }
    let verb = if destroy { "Destroy" } else { "Apply" };
    println!("\n{verb} complete! {}", render::summary_line(plan));
    let running = live
        .state
        .tasks
        .values()
        .filter(|t| t.state == gpushare_core::model::TaskState::Running)
        .count();
    let hosts = live
        .state
        .hosts
        .values()
        .filter(|h| h.state.is_active())
        .count();
    println!(
        "Fleet now: {hosts} hosts, {running} of {} tasks running (state serial {}).",
        live.state.tasks.len(),
        report.serial
    );
    if !report.moves_timed_out.is_empty() {
        println!(
            "Warning: {} moved task(s) were not reported running within move_timeout_seconds; their old tasks were stopped anyway: {}",
            report.moves_timed_out.len(),
            report.moves_timed_out.join(", ")
        );
    }
    Ok(0)
}

fn print_apply_json(plan: &Plan, report: Option<&ApplyReport>, live: &Live) {
    let out = json!({
        "format_version": FORMAT_VERSION,
        "plan": render::plan_json(plan),
        "applied": report.map(|r| json!({
            "resumed_steps": r.resumed_steps,
            "changed_steps": r.changed_steps,
            "skipped_steps": r.skipped_steps,
            "launched": r.launched,
            "serial": r.serial,
            "moves_timed_out": r.moves_timed_out,
        })),
        "state": render::show_json(&live.state),
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
}

/// Draws apply's progress events on stderr (nothing when `quiet`).
pub(crate) struct ProgressPrinter {
    inner: Option<Mutex<Progress>>,
}

impl ProgressPrinter {
    pub(crate) fn new(quiet: bool) -> Self {
        Self {
            inner: (!quiet).then(|| Mutex::new(Progress::new())),
        }
    }

    pub(crate) fn callback(&self) -> impl Fn(&ProgressEvent) + Send + Sync + '_ {
        move |e: &ProgressEvent| {
            let Some(m) = &self.inner else { return };
            let Ok(mut p) = m.lock() else { return };
            match e {
                ProgressEvent::Resuming { done, total } => p.note(&format!(
                    "Resuming an interrupted apply: {done} of {total} steps were done."
                )),
                ProgressEvent::StepStarted {
                    index,
                    total,
                    description,
                } => p.begin(*index - 1, *total, description),
                ProgressEvent::StepDone {
                    index,
                    total,
                    description,
                    changed,
                } => {
                    let d = if *changed {
                        description.clone()
                    } else {
                        format!("{description} (already done)")
                    };
                    p.done(*index - 1, *total, &d)
                }
                ProgressEvent::Note(line) => p.note(line),
                ProgressEvent::Finished { .. } => p.finish(),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Inspecting
// ---------------------------------------------------------------------------

/// Settings of the configuration in `dir`, for commands that only need to find the state.
fn settings_of(dir: &Path) -> anyhow::Result<Desired> {
    load(dir, &VarArgs::default())
}

/// `show PLANFILE`: the saved plan as `plan` printed it, or with `json` in Terraform's
/// JSON plan representation (`gpushare_core::tfplan`).
async fn show_plan(file: &Path, json: bool) -> anyhow::Result<u8> {
    let saved = planfile::load(file)?;
    if json {
        let out = gpushare_core::tfplan::terraform_plan_json(&saved.plan, Some(&saved.desired));
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(0);
    }
    let r = reconciler(
        &saved.desired,
        &saved.config_dir,
        &PlannerArgs::default(),
        "gpushare show",
    )
    .await?;
    let state = r.store().load().await.context("reading the state")?;
    print!("{}", render::plan_text(&saved.plan, &state, &render_opts()));
    Ok(0)
}

async fn show(dir: &Path, json: bool) -> anyhow::Result<u8> {
    let desired = settings_of(dir)?;
    let r = reconciler(&desired, dir, &PlannerArgs::default(), "gpushare show").await?;
    let live = r.observe_only(&desired.settings.cluster).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&render::show_json(&live.state))?
        );
        return Ok(0);
    }
    if live.state.hosts.is_empty() {
        println!("No hosts. (state serial {})", live.state.serial);
    } else {
        print!("{}", render::fleet_picture(&live.state, &render_opts()));
    }
    let reports = r
        .store()
        .reports()
        .await
        .context("reading the agents' reports")?;
    print!(
        "{}",
        render::agent_status(&live.state, &reports, live.observed_at)
    );
    for s in &live.strays {
        println!("stray instance {} ({}, host id {}) is tagged for this cluster but unknown to the state", s.instance_id, s.instance_type, s.host_id);
    }
    for f in &live.foreign {
        println!("{}", render::foreign_line(f));
    }
    Ok(0)
}

async fn state(command: StateCommand) -> anyhow::Result<u8> {
    match command {
        StateCommand::List { dir } => state_list(&config_dir(dir)?).await,
        StateCommand::Show {
            addr,
            dir,
            json,
            vars,
        } => {
            let dir = config_dir(dir)?;
            let desired = load(&dir, &vars)?;
            let b = gpushare_backends::open(&desired.settings, &dir).await?;
            let state = b.store.load().await.context("reading the state")?;
            print!("{}", state_cmd::show(&state, &addr, json)?);
            Ok(0)
        }
        StateCommand::Pull { dir, vars } => {
            let dir = config_dir(dir)?;
            let desired = load(&dir, &vars)?;
            let b = gpushare_backends::open(&desired.settings, &dir).await?;
            let state = b.store.load().await.context("reading the state")?;
            println!("{}", serde_json::to_string_pretty(&state)?);
            Ok(0)
        }
        StateCommand::Push {
            file,
            dir,
            force,
            vars,
            lock,
        } => {
            let pushed = state_cmd::read_pushed(&file)?;
            let dir = config_dir(dir)?;
            let desired = with_lock_timeout(load(&dir, &vars)?, &lock);
            let b = gpushare_backends::open(&desired.settings, &dir).await?;
            let timeout = std::time::Duration::from_secs(desired.settings.lock_timeout_seconds);
            let serial =
                state_cmd::push(&b, &desired.settings.cluster, pushed, force, timeout).await?;
            println!(
                "Pushed {} into {} (state serial {serial}).",
                file.display(),
                b.store.location()
            );
            Ok(0)
        }
        StateCommand::Rm {
            addr,
            dir,
            vars,
            lock,
        } => {
            let (b, timeout) = open_for_edit(dir, &vars, &lock).await?;
            let removed = state_cmd::edit(&b, "gpushare state rm", timeout, |s| {
                state_cmd::remove(s, &addr)
            })
            .await?;
            for r in &removed {
                println!("Removed {r}");
            }
            println!(
                "Successfully removed {} object(s) from the state (the cloud was not touched).",
                removed.len()
            );
            Ok(0)
        }
        StateCommand::Mv {
            from,
            to,
            dir,
            vars,
            lock,
        } => {
            let (b, timeout) = open_for_edit(dir, &vars, &lock).await?;
            state_cmd::edit(&b, "gpushare state mv", timeout, |s| {
                state_cmd::rename(s, &from, &to)
            })
            .await?;
            println!("Move \"{from}\" to \"{to}\"\nSuccessfully moved 1 object.");
            Ok(0)
        }
    }
}

/// The backends of the configuration in `dir` and the lock timeout, for a state edit.
async fn open_for_edit(
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

/// `gpushare import capacity_provider.POOL INSTANCE_ID`.
async fn import(
    dir: &Path,
    addr: &str,
    id: &str,
    vars: &VarArgs,
    lock: &LockArgs,
) -> anyhow::Result<u8> {
    let desired = with_lock_timeout(load(dir, vars)?, lock);
    let b = gpushare_backends::open(&desired.settings, dir).await?;
    let cluster = desired.settings.cluster.clone();
    // Checked before taking the lock (a cloud call), and again under it.
    let state = b.store.load().await.context("reading the state")?;
    let inst = state_cmd::find_instance(&b, &cluster, &state, id).await?;
    let host = state_cmd::imported_host(&desired, addr, &inst)?;
    let timeout = std::time::Duration::from_secs(desired.settings.lock_timeout_seconds);
    let store_id = state_cmd::edit(&b, "gpushare import", timeout, |s| {
        if s.hosts.contains_key(&host.id) {
            bail!("host.{} is already in the state", host.id);
        }
        s.hosts.insert(host.id.clone(), host.clone());
        Ok(s.store_id.clone())
    })
    .await?;
    if inst.store_id.is_none() && !store_id.is_empty() {
        b.cloud
            .claim(&cluster, &store_id, id)
            .await
            .with_context(|| format!("tagging instance {id} with this store's id"))?;
    }
    println!(
        "Imported instance {id} as host.{} of {addr} ({}). The next plan places tasks on it.",
        host.id, host.instance_type
    );
    Ok(0)
}

async fn state_list(dir: &Path) -> anyhow::Result<u8> {
    let desired = settings_of(dir)?;
    let b = gpushare_backends::open(&desired.settings, dir).await?;
    let state = b.store.load().await.context("reading the state")?;
    for addr in state.resources.keys() {
        println!("{addr}");
    }
    for id in state.hosts.keys() {
        println!("host.{id}");
    }
    for id in state.tasks.keys() {
        println!("task.{id}");
    }
    Ok(0)
}

async fn debug_fault(dir: &Path, host: &str, fault: FaultArg) -> anyhow::Result<u8> {
    let desired = settings_of(dir)?;
    let b = gpushare_backends::open(&desired.settings, dir).await?;
    let Some(local) = &b.local else {
        bail!(
            "debug fault works on the local cloud only (this configuration uses cloud = {:?})",
            b.cloud.kind()
        );
    };
    let f = match fault {
        FaultArg::MpsDown => Fault::MpsDown,
        FaultArg::Silent => Fault::Silent,
        FaultArg::Clear => Fault::Clear,
    };
    let inst = local
        .inject_fault(&desired.settings.cluster, host, f)
        .context("injecting the fault")?;
    let what = match fault {
        FaultArg::MpsDown => {
            "the MPS daemon of host {h} is now down; its agent reports MPS impaired"
        }
        FaultArg::Silent => "the agent of host {h} has gone silent",
        FaultArg::Clear => "host {h} has no injected fault",
    };
    println!(
        "{} (instance {}).",
        what.replace("{h}", &inst.host_id),
        inst.instance_id
    );
    Ok(0)
}
