//! The command tree (clap). Terraform-like: every command takes the configuration
//! directory as an optional positional argument that defaults to the current directory.

use clap::{Args, Parser, Subcommand, ValueEnum};
use gpushare_core::plan;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "gpushare",
    version,
    about = "Declarative GPU sharing with NVIDIA MPS: plan and apply fleets of GPU hosts and the tasks packed on them",
    after_help = "Exit codes: 0 success (or no changes), 1 error, 2 changes present (plan --detailed-exitcode), \
3 files need formatting (fmt --check).\nLogs go to stderr; set GPUSHARE_LOG or RUST_LOG (e.g. GPUSHARE_LOG=debug)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the configuration (syntax, references, sizes against the GPU catalogue); changes nothing.
    Validate {
        /// Configuration directory (*.hcl, *.tf).
        dir: Option<PathBuf>,
        /// Print the diagnostics as one JSON document.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        vars: VarArgs,
    },
    /// Rewrite configuration files in the canonical format.
    Fmt {
        dir: Option<PathBuf>,
        /// Change nothing; list the files that need formatting and exit 3 if any do.
        #[arg(long)]
        check: bool,
    },
    /// Show what apply would change: resources, hosts to launch or retire, tasks to place, the cost.
    Plan {
        dir: Option<PathBuf>,
        /// Save the plan to FILE for a later `gpushare apply FILE`.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Exit 0 when there are no changes, 2 when there are, 1 on error.
        #[arg(long)]
        detailed_exitcode: bool,
        /// Print the plan as one JSON document.
        #[arg(long)]
        json: bool,
        /// Plan the removal of everything.
        #[arg(long)]
        destroy: bool,
        /// Also print the cloud-init user data (MPS bootstrap and agent units) of every host to launch.
        #[arg(long, conflicts_with = "json")]
        show_user_data: bool,
        #[command(flatten)]
        vars: VarArgs,
        #[command(flatten)]
        planner: PlannerArgs,
    },
    /// Make the fleet match the configuration (or carry out a saved plan).
    Apply {
        /// Configuration directory, or a plan file saved with `plan --out`.
        target: Option<PathBuf>,
        /// Apply without asking for confirmation.
        #[arg(long)]
        auto_approve: bool,
        /// Print the plan and the result as JSON documents (one per line); requires --auto-approve.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        vars: VarArgs,
        #[command(flatten)]
        planner: PlannerArgs,
    },
    /// Stop every task, retire every host and forget every resource.
    Destroy {
        dir: Option<PathBuf>,
        #[arg(long)]
        auto_approve: bool,
        #[command(flatten)]
        vars: VarArgs,
    },
    /// Show the fleet as it is: hosts, GPUs and the tasks on them.
    Show {
        dir: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Inspect the recorded state.
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Keep the fleet converged: observe, plan and apply every INTERVAL seconds (the GitOps controller).
    Reconcile {
        /// Configuration directory; with --git, the directory the state (.gpushare/) and the git cache are kept in.
        dir: Option<PathBuf>,
        /// Seconds between passes.
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        interval: u64,
        /// Run one pass and exit (exit 1 if it failed; with --drift-only, 2 if the fleet differs).
        #[arg(long)]
        once: bool,
        /// Follow a git repository instead of a directory (file://, ssh:// or user@host:path): each pass fetches it and reconciles one commit.
        #[arg(long, value_name = "URL")]
        git: Option<String>,
        /// Branch, tag or full commit id to follow (default: the remote's default branch).
        #[arg(long = "ref", value_name = "REF", requires = "git")]
        git_ref: Option<String>,
        /// Subdirectory of the repository holding the configuration.
        #[arg(long, value_name = "DIR", requires = "git")]
        path: Option<PathBuf>,
        /// Where to keep the clone and the checkouts (default: DIR/.gpushare-git).
        #[arg(long, value_name = "DIR", requires = "git")]
        cache: Option<PathBuf>,
        /// Plan and report, never apply (with --once: exit 2 when the fleet differs from the configuration, 0 when it matches).
        #[arg(long)]
        drift_only: bool,
        /// Serve /metrics (Prometheus text), /healthz and /readyz on ADDR, e.g. 127.0.0.1:9090 (off by default).
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// Log format on stderr.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        #[command(flatten)]
        vars: VarArgs,
        #[command(flatten)]
        planner: PlannerArgs,
    },
    /// Show the status record of the last reconcile pass (commit, outcome, plan summary, error).
    Status {
        /// Configuration directory, or the directory a git controller keeps its state in.
        dir: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Debugging aids for the local simulated fleet.
    Debug {
        #[command(subcommand)]
        command: DebugCommand,
    },
    /// Run on a GPU host: start and stop the tasks placed there, report the host to the store.
    Agent(gpushare_agent::Args),
    /// Print the least-privilege IAM policy for the ec2 cloud (docs/ec2-iam.md).
    IamPolicy {
        /// The cluster whose instances the policy lets one launch, tag and terminate.
        #[arg(long, default_value = "default")]
        cluster: String,
        /// Print the hosts' instance profile policy instead of the operator's.
        #[arg(long)]
        host: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// List the resources, hosts and tasks in the state.
    List { dir: Option<PathBuf> },
}

#[derive(Debug, Subcommand)]
pub enum DebugCommand {
    /// Inject a fault into a host of the local cloud (for trying out host replacement).
    Fault {
        /// Host id (see `gpushare show`).
        host: String,
        fault: FaultArg,
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (tracing-subscriber's JSON format).
    Json,
}

impl Cli {
    /// The log format the command asks for (only `reconcile` has a choice).
    pub fn log_format(&self) -> LogFormat {
        match &self.command {
            Command::Reconcile { log_format, .. } => *log_format,
            _ => LogFormat::Text,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FaultArg {
    /// The host's MPS control daemon stops answering: the host is impaired.
    MpsDown,
    /// The host's agent stops reporting.
    Silent,
    /// Remove any fault.
    Clear,
}

#[derive(Debug, Clone, Default, Args)]
pub struct VarArgs {
    /// Set a variable: -var name=value (repeatable; overrides GPUSHARE_VAR_name and the default).
    #[arg(long = "var", short = 'v', value_name = "NAME=VALUE", value_parser = parse_var)]
    pub vars: Vec<(String, String)>,
}

#[derive(Debug, Clone, Args)]
pub struct PlannerArgs {
    /// Move running tasks to free hosts (at most --max-moves moves).
    #[arg(long)]
    pub consolidate: bool,
    #[arg(long, default_value_t = plan::DEFAULT_MAX_MOVES, value_name = "N")]
    pub max_moves: u32,
    /// Seconds without an agent report after which a host counts as silent and is replaced (0 = never).
    #[arg(long, default_value_t = plan::DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, value_name = "SECS")]
    pub heartbeat_timeout: u64,
    /// Seconds after launch within which a host's agent must first report, or the host counts as silent and is replaced (0 = never).
    #[arg(long, default_value_t = plan::DEFAULT_BOOT_GRACE_SECONDS, value_name = "SECS")]
    pub boot_grace: u64,
}

impl Default for PlannerArgs {
    /// The planner's own defaults (what the Terraform provider plans with too).
    fn default() -> PlannerArgs {
        let o = plan::Options::default();
        PlannerArgs {
            consolidate: o.consolidate,
            max_moves: o.max_moves,
            heartbeat_timeout: o.heartbeat_timeout_seconds,
            boot_grace: o.boot_grace_seconds,
        }
    }
}

impl PlannerArgs {
    /// The planner options these flags give (`destroy` is set per command).
    pub fn options(&self) -> plan::Options {
        plan::Options {
            consolidate: self.consolidate,
            max_moves: self.max_moves,
            heartbeat_timeout_seconds: self.heartbeat_timeout,
            boot_grace_seconds: self.boot_grace,
            ..plan::Options::default()
        }
    }
}

fn parse_var(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    let k = k.trim();
    if k.is_empty() {
        return Err(format!("{s:?} has an empty variable name"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// Terraform spells variables `-var k=v` with one dash; clap wants `--var` or `-v`.
/// Rewrite `-var` / `-var=k=v` so both spellings work.
pub fn normalise_args(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    args.into_iter()
        .map(|a| match a.to_str() {
            Some("-var") => "--var".into(),
            Some(s) if s.starts_with("-var=") => format!("-{s}").into(),
            _ => a,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(normalise_args(args.iter().map(std::ffi::OsString::from)))
    }

    #[test]
    fn terraform_style_var_flags_are_accepted() {
        let cli = parse(&[
            "gpushare",
            "plan",
            "dir",
            "-var",
            "a=1",
            "-var=b=x=y",
            "--var",
            "c=",
        ])
        .expect("parses");
        let Command::Plan { vars, dir, .. } = cli.command else {
            panic!("not plan")
        };
        assert_eq!(dir, Some(PathBuf::from("dir")));
        assert_eq!(
            vars.vars,
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x=y".into()),
                ("c".into(), String::new())
            ]
        );
    }

    #[test]
    fn a_var_without_equals_is_rejected() {
        let err = parse(&["gpushare", "plan", "-var", "novalue"]).expect_err("must fail");
        assert!(err.to_string().contains("NAME=VALUE"), "{err}");
    }

    #[test]
    fn debug_fault_parses_fault_names() {
        let cli = parse(&["gpushare", "debug", "fault", "h-1", "mps-down", "d"]).expect("parses");
        let Command::Debug {
            command: DebugCommand::Fault { host, fault, dir },
        } = cli.command
        else {
            panic!()
        };
        assert_eq!(
            (host.as_str(), fault, dir),
            ("h-1", FaultArg::MpsDown, Some(PathBuf::from("d")))
        );
        assert!(parse(&["gpushare", "debug", "fault", "h-1", "melt"]).is_err());
    }
}
