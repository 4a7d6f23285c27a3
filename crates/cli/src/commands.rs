//! One function per command. Each returns the process exit code (0 success or no
//! changes, 2 changes present with --detailed-exitcode, 3 fmt --check found
//! unformatted files); errors go back to `main` and exit 1.

use apply::{apply_dir, apply_saved, How};
use inspect::{debug_fault, debug_user_data, import, show, show_plan, state};
use load::{fmt, validate};
use plan::{plan_cmd, PlanOutput};

use crate::cli::{
    ApplyArgs, Cli, Command, DebugCommand, LockArgs, PlanArgs, PlannerArgs, ReconcileArgs,
    ScopeArgs, VarArgs,
};
use crate::setup::config_dir;
use anyhow::Context;
use clap::CommandFactory;
use std::path::PathBuf;

pub async fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Validate { dir, json, vars } => validate(&config_dir(dir)?, json, &vars),
        Command::Fmt { dir, check } => fmt(&config_dir(dir)?, check),
        Command::Plan(args) => plan(args).await,
        Command::Apply(args) => apply(args).await,
        Command::Destroy {
            dir,
            auto_approve,
            vars,
            lock,
        } => destroy(config_dir(dir)?, auto_approve, &vars, lock).await,
        Command::Show {
            dir: Some(file),
            json,
            svg: None,
        } if file.is_file() => show_plan(&file, json).await,
        Command::Show { dir, json, svg } => show(&config_dir(dir)?, json, svg.as_deref()).await,
        Command::Logs { task, output, at } => {
            let args = serving::LogsArgs::new(task, None, output);
            serving::logs_cmd(&at, args).await
        }
        Command::Endpoints {
            service,
            dir,
            json,
            prometheus,
        } => {
            let format = match (json, prometheus) {
                (true, _) => serving::EndpointsFormat::Json,
                (_, true) => serving::EndpointsFormat::Prometheus,
                _ => serving::EndpointsFormat::Text,
            };
            serving::endpoints_cmd(&config_dir(dir)?, service.as_deref(), format).await
        }
        Command::Console {
            dir,
            listen,
            console_token_file,
            poll_ms,
            vars,
        } => {
            let options = crate::console::Options {
                dir: config_dir(dir)?,
                listen,
                token_file: console_token_file,
                poll: std::time::Duration::from_millis(poll_ms.max(100)),
                vars,
            };
            crate::console::command(options).await
        }
        Command::State { command } => state(command).await,
        Command::Job { command } => jobs::job(command).await,
        Command::Run(args) => run_job::run(args).await,
        Command::Import {
            addr,
            id,
            dir,
            vars,
            lock,
        } => import(&config_dir(dir)?, &addr, &id, &vars, &lock).await,
        Command::ImportEcs(args) => crate::import_ecs::run(&args),
        Command::Evaluate(args) => crate::evaluate::run(&args),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "gpushare", &mut std::io::stdout());
            Ok(0)
        }
        Command::Man => {
            clap_mangen::Man::new(Cli::command())
                .render(&mut std::io::stdout())
                .context("writing the manual page")?;
            Ok(0)
        }
        Command::Reconcile(args) => reconcile(args).await,
        Command::Status { dir, json } => crate::reconcile::status(&config_dir(dir)?, json).await,
        Command::Debug {
            command:
                DebugCommand::Fault {
                    host,
                    fault,
                    dir,
                    gpu,
                    xid,
                },
        } => debug_fault(&config_dir(dir)?, &host, fault, gpu, xid).await,
        Command::Debug {
            command: DebugCommand::UserData { host, dir },
        } => debug_user_data(&config_dir(dir)?, &host).await,
        Command::Agent(args) => crate::agent_cmd::run(args).await,
        Command::Serve {
            dir,
            agent_api,
            vars,
        } => crate::agent_api_cmd::serve(&config_dir(dir)?, &agent_api, &vars).await,
        Command::Token { command } => crate::agent_api_cmd::token(command).await,
        Command::Host { command } => crate::host_cmd::run(command).await,
        Command::IamPolicy {
            cluster,
            host,
            region,
        } => crate::iam::print(&cluster, host, region.as_deref()),
    }
}

async fn plan(args: PlanArgs) -> anyhow::Result<u8> {
    let dir = config_dir(args.dir)?;
    let output = PlanOutput {
        detailed: args.detailed_exitcode,
        json: args.json,
        show_user_data: args.show_user_data,
        verbose: args.pass.verbose,
    };
    plan_cmd(
        &dir,
        args.out.as_deref(),
        output,
        args.destroy,
        &args.pass.vars,
        &args.pass.planner,
        &args.pass.scope,
        &args.pass.lock,
    )
    .await
}

async fn apply(args: ApplyArgs) -> anyhow::Result<u8> {
    let target = config_dir(args.target)?;
    if target.is_file() {
        // A saved plan was reviewed when it was made: no question (as terraform apply PLANFILE).
        return apply_saved(&target, args.json, &args.pass.lock).await;
    }
    let how = How {
        destroy: false,
        auto_approve: args.auto_approve,
        json: args.json,
        verbose: args.pass.verbose,
        planner: args.pass.planner,
        scope: args.pass.scope,
        as_applied: false,
        lock: args.pass.lock,
    };
    apply_dir(&target, &args.pass.vars, &how).await
}

async fn destroy(
    dir: PathBuf,
    auto_approve: bool,
    vars: &VarArgs,
    lock: LockArgs,
) -> anyhow::Result<u8> {
    let how = How {
        destroy: true,
        auto_approve,
        json: false,
        verbose: false,
        planner: PlannerArgs::default(),
        scope: ScopeArgs::default(),
        as_applied: false,
        lock,
    };
    apply_dir(&dir, vars, &how).await
}

async fn reconcile(args: ReconcileArgs) -> anyhow::Result<u8> {
    let git = args.git.map(|url| crate::reconcile::GitOptions {
        url,
        reference: args.git_ref,
        path: args.path,
        cache: args.cache,
        guard: args.guard,
    });
    crate::reconcile::run(crate::reconcile::Options {
        dir: config_dir(args.dir)?,
        interval: args.interval,
        once: args.once,
        git,
        drift_only: args.drift_only,
        listen: args.listen,
        console_token_file: args.console_token_file,
        vars: args.vars,
        planner: args.planner,
        agent_api: args.agent_api,
    })
    .await
}

mod apply;
mod inspect;
mod jobs;
mod load;
mod plan;
mod run_job;
mod serving;
