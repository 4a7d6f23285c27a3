//! `gpushare`: the command-line face of gpushare (validate, fmt, plan, apply, destroy,
//! show, state, reconcile, debug). The binary is glue: loading lives in
//! gpushare-config, planning and rendering in gpushare-core, observing and applying
//! in gpushare-engine.

mod agent_api_cmd;
mod agent_cmd;
mod args;
mod cli;
mod commands;
mod console;
mod evaluate;
mod host_cmd;
mod host_setup;
mod iam;
mod import_ecs;
mod job_metrics;
mod ops;
mod outfile;
mod planfile;
mod reconcile;
mod scope;
mod setup;
mod state_cmd;
mod ui;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Usage errors exit 1 (as in Terraform), not clap's 2: 2 means "changes present".
    let cli = match cli::Cli::try_parse_from(cli::normalise_args(std::env::args_os())) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            init_tracing(cli::LogFormat::Text);
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    ui::set_flags(cli.no_color, cli.input);
    init_tracing(cli.log_format());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    setup::set_hooks(gpushare_engine::apply::Hooks::from_env());
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            report_error(&err);
            ExitCode::from(1)
        }
    }
}

/// Logs go to stderr, as text or one JSON object per line; GPUSHARE_LOG wins over
/// RUST_LOG; default: warnings only.
fn init_tracing(format: cli::LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("GPUSHARE_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        cli::LogFormat::Text => builder.with_ansi(ui::stderr_color()).try_init(),
        cli::LogFormat::Json => builder.json().try_init(),
    };
}

/// Configuration diagnostics are printed as the loader formats them (with their
/// file:line:col); every other error as one `error: ...: cause` line.
fn report_error(err: &anyhow::Error) {
    match err.downcast_ref::<gpushare_config::Diagnostics>() {
        Some(d) => eprint!("{d}"),
        None => eprintln!("error: {err:#}"),
    }
}
