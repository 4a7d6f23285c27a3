//! One function per command. Each returns the process exit code (0 success or no
//! changes, 2 changes present with --detailed-exitcode, 3 fmt --check found
//! unformatted files); errors go back to `main` and exit 1.

use apply::{apply_dir, apply_saved, How};
use inspect::{debug_fault, debug_user_data, import, show, show_plan, state};
use load::{fmt, validate};
use plan::{plan_cmd, PlanOutput};

use crate::cli::{Cli, Command, DebugCommand, PlannerArgs, ScopeArgs};
use crate::setup::config_dir;
use anyhow::Context;

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
            svg: None,
        } if file.is_file() => show_plan(&file, json).await,
        Command::Show { dir, json, svg } => show(&config_dir(dir)?, json, svg.as_deref()).await,
        Command::Console {
            dir,
            listen,
            console_token_file,
            poll_ms,
            vars,
        } => {
            crate::console::command(crate::console::Options {
                dir: config_dir(dir)?,
                listen,
                token_file: console_token_file,
                poll: std::time::Duration::from_millis(poll_ms.max(100)),
                vars,
            })
            .await
        }
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
            guard,
            drift_only,
            listen,
            console_token_file,
            log_format: _,
            vars,
            planner,
            agent_api,
        } => {
            let git = git.map(|url| crate::reconcile::GitOptions {
                url,
                reference: git_ref,
                path,
                cache,
                guard,
            });
            crate::reconcile::run(crate::reconcile::Options {
                dir: config_dir(dir)?,
                interval,
                once,
                git,
                drift_only,
                listen,
                console_token_file,
                vars,
                planner,
                agent_api,
            })
            .await
        }
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

mod apply;
mod inspect;
mod load;
mod plan;
