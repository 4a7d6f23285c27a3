//! The command tree (clap). Terraform-like: every command takes the configuration
//! directory as an optional positional argument that defaults to the current directory.

pub use crate::args::{LockArgs, PlannerArgs, StoreArgs, VarArgs};
use clap::{Args, Parser, Subcommand, ValueEnum};
pub use job_args::{JobCommand, OutputArgs, RunArgs};
use std::path::PathBuf;

mod job_args;

#[derive(Debug, Parser)]
#[command(
    name = "gpushare",
    version,
    about = "Declarative GPU sharing with NVIDIA MPS: plan and apply fleets of GPU hosts and the tasks packed on them",
    after_help = "Exit codes: 0 success (or no changes), 1 error, 2 changes present (plan --detailed-exitcode), \
3 files need formatting (fmt --check).\nLogs go to stderr; set GPUSHARE_LOG or RUST_LOG (e.g. GPUSHARE_LOG=debug).\n\
Flags may be spelled as Terraform spells them, with one dash: -auto-approve, -out=FILE, -var 'k=v', -var-file=FILE, \
-target=ADDR, -no-color, -input=false (a single-dash word that is a long flag of the command is read as --word)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// No colours in the output (as NO_COLOR=1).
    #[arg(long, global = true)]
    pub no_color: bool,
    /// -input=false: never ask a question (apply without -auto-approve then fails instead of prompting).
    #[arg(long, global = true, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub input: bool,
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
    Plan(PlanArgs),
    /// Make the fleet match the configuration (or carry out a saved plan).
    Apply(ApplyArgs),
    /// Stop every task, retire every host and forget every resource.
    Destroy {
        dir: Option<PathBuf>,
        #[arg(long)]
        auto_approve: bool,
        #[command(flatten)]
        vars: VarArgs,
        #[command(flatten)]
        lock: LockArgs,
    },
    /// Show the fleet as it is (hosts, GPUs, the tasks on them and a line per
    /// service), or a saved plan (`show PLANFILE`; with -json, Terraform's JSON plan
    /// representation).
    Show {
        /// The configuration directory (default: the current one), or a plan file saved by `plan -out`.
        #[arg(value_name = "DIR|PLANFILE")]
        dir: Option<PathBuf>,
        /// Print the fleet (or the saved plan) as one JSON document.
        #[arg(long)]
        json: bool,
        /// Also write the fleet picture as SVG to FILE (the web console's picture).
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
    /// Where the tasks are reached: each task's published ports at its host's
    /// address, its health, and whether it is ready for traffic (docs/serving.md).
    Endpoints {
        /// Only this service's tasks.
        service: Option<String>,
        /// The configuration directory (default: the current one).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Print the endpoints as one JSON document.
        #[arg(long)]
        json: bool,
        /// Print the ready TCP endpoints in Prometheus' HTTP service-discovery format.
        #[arg(long, conflicts_with = "json")]
        prometheus: bool,
    },
    /// A task's recent output (stdout and stderr), from the agent of the host it runs
    /// on: asked for through the task's host record and answered in the agent's
    /// report, so it works wherever the agent does (docs/serving.md).
    Logs {
        /// The task id (see `gpushare show` or `gpushare endpoints`).
        task: String,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        at: StoreArgs,
    },
    /// Serve the read-only web console of the fleet (docs/console.md): the fleet as a
    /// picture, services, hosts and the next plan, updated live in the browser.
    Console {
        /// The configuration directory (default: the current one).
        dir: Option<PathBuf>,
        /// Address to serve on. Off loopback, --console-token-file is required.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7480")]
        listen: std::net::SocketAddr,
        /// A file holding the bearer token readers must present (required off loopback).
        #[arg(long, value_name = "FILE")]
        console_token_file: Option<PathBuf>,
        /// How often the store is read for changes, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        poll_ms: u64,
        #[command(flatten)]
        vars: VarArgs,
    },
    /// Run a task definition to completion now, as a one-off job (ECS RunTask):
    /// recorded in the store, not in the configuration, so that plan, apply and
    /// reconcile plan it like a declared job and never stop it; its runs are placed
    /// at once by a pass targeted at its task definition and pool. `gpushare job rm
    /// NAME` removes it (docs/jobs.md).
    Run(RunArgs),
    /// Jobs' progress and reruns (docs/jobs.md).
    Job {
        #[command(subcommand)]
        command: JobCommand,
    },
    /// Inspect and edit the recorded state (list, show, rm, mv).
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Adopt an existing instance into the state: `import capacity_provider.POOL INSTANCE_ID`.
    ///
    /// Importable: a running instance of this cluster that the state does not know (a
    /// "stray" in `gpushare show`: launched by gpushare for this cluster, on the local
    /// fleet or EC2), into a pool of the configuration whose instance_type it has; it
    /// becomes a host of that pool. Not importable: instances gpushare did not launch
    /// for this cluster (they lack the MPS bootstrap and the agent), instances of
    /// another state store, and the resources themselves (capacity_provider,
    /// task_definition, service, gpu_instance live only in the configuration and the
    /// state: an apply creates them).
    Import {
        /// Where to import to: capacity_provider.POOL.
        addr: String,
        /// The instance id (e.g. i-0abc... on EC2; see `gpushare show` for strays).
        id: String,
        dir: Option<PathBuf>,
        #[command(flatten)]
        vars: VarArgs,
        #[command(flatten)]
        lock: LockArgs,
    },
    /// Turn an ECS task definition (and optionally its service) into gpushare
    /// configuration: HCL, or Terraform `gpushare_*` resources with `--format tf`.
    /// Every field that cannot be carried over is listed, with its reason, as comments
    /// at the top of the output and on stderr (docs/migrating-from-ecs.md).
    ImportEcs(crate::import_ecs::ImportEcsArgs),
    /// What gpushare would save on machines you run today: reads nvidia-smi samples
    /// (compute processes, GPUs, pmon), proposes an MPS share or a GPU of its own per
    /// workload, and prints the fleet the planner packs them onto and its cost beside
    /// one GPU per process; `--write DIR` writes that configuration (docs/evaluate.md).
    Evaluate(crate::evaluate::EvaluateArgs),
    /// Print a shell completion script: `gpushare completions bash > /etc/bash_completion.d/gpushare`.
    Completions { shell: clap_complete::Shell },
    /// Print the manual page (roff): `gpushare man > gpushare.1; man ./gpushare.1`.
    Man,
    /// Keep the fleet converged: observe, plan and apply every INTERVAL seconds (the GitOps controller).
    Reconcile(ReconcileArgs),
    /// Show the status record of the last reconcile pass (commit, outcome, plan summary, error).
    Status {
        /// Configuration directory, or the directory a git controller keeps its state in.
        dir: Option<PathBuf>,
        /// Print the status record as one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Debugging aids for the local simulated fleet.
    Debug {
        #[command(subcommand)]
        command: DebugCommand,
    },
    /// Run on a GPU host: start and stop the tasks placed there, report the host (through the controller's agent API, or to the store).
    Agent(gpushare_agent::Args),
    /// Serve the agent API for a fleet reconciled by hand: hosts join with tokens and read only their own assignment.
    Serve {
        /// Configuration directory (its store and cluster are served).
        dir: Option<PathBuf>,
        #[command(flatten)]
        agent_api: crate::agent_api_cmd::AgentApiArgs,
        #[command(flatten)]
        vars: VarArgs,
    },
    /// Hosts: set up a server of your own (`host setup`), cordon, uncordon, drain or
    /// remove a host (docs/own-hosts.md), revoke a host's agent API certificates.
    Host {
        #[command(subcommand)]
        command: crate::host_cmd::HostCommand,
    },
    /// Join tokens for hosts (`gpushare agent --join`): create, list, revoke.
    Token {
        #[command(subcommand)]
        command: crate::agent_api_cmd::TokenCommand,
    },
    /// Print the least-privilege IAM policy for the ec2 cloud (docs/ec2-iam.md).
    IamPolicy {
        /// The cluster whose instances the policy lets one launch, tag and terminate.
        #[arg(long, default_value = "default")]
        cluster: String,
        /// Print the hosts' instance profile policy instead of the operator's.
        #[arg(long)]
        host: bool,
        /// The fleet's region: its partition (aws, aws-us-gov for us-gov-*, aws-cn for
        /// cn-*) is the one every ARN of the policy names. Default: the commercial
        /// partition (aws).
        #[arg(long, value_name = "REGION")]
        region: Option<String>,
    },
}

// `gpushare plan`'s arguments (the variant's doc comment is the command's help).
#[derive(Debug, Args)]
pub struct PlanArgs {
    pub dir: Option<PathBuf>,
    /// Save the plan to FILE for a later `gpushare apply FILE`.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Exit 0 when there are no changes, 2 when there are, 1 on error. A plan that
    /// only records deployments (one COMPLETED) counts as no change.
    #[arg(long)]
    pub detailed_exitcode: bool,
    /// Print Terraform's machine-readable UI stream, one JSON message per line
    /// (gpushare's own plan document in the `gpushare_plan` message).
    #[arg(long)]
    pub json: bool,
    /// Plan the removal of everything.
    #[arg(long)]
    pub destroy: bool,
    /// Also print the cloud-init user data (MPS bootstrap and agent units) of every host to launch.
    #[arg(long, conflicts_with = "json")]
    pub show_user_data: bool,
    #[command(flatten)]
    pub pass: PassArgs,
}

// `gpushare apply`'s arguments (the variant's doc comment is the command's help).
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Configuration directory, or a plan file saved with `plan --out`.
    pub target: Option<PathBuf>,
    /// Apply without asking for confirmation.
    #[arg(long)]
    pub auto_approve: bool,
    /// Print the plan and the result as JSON documents (one per line); requires --auto-approve.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pass: PassArgs,
}

/// The flags `plan` and `apply` share: variables, planner overrides, scope and the lock.
#[derive(Debug, Args)]
pub struct PassArgs {
    /// Print the fleet picture after the plan whatever the fleet's size (a fleet of
    /// more than 100 hosts is otherwise summed up per pool).
    #[arg(long)]
    pub verbose: bool,
    #[command(flatten)]
    pub vars: VarArgs,
    #[command(flatten)]
    pub planner: PlannerArgs,
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub lock: LockArgs,
}

// `gpushare reconcile`'s arguments (the variant's doc comment is the command's help).
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Configuration directory; with --git, the directory the state (.gpushare/) and the git cache are kept in.
    pub dir: Option<PathBuf>,
    /// Seconds between passes.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub interval: u64,
    /// Run one pass and exit (exit 1 if it failed; with --drift-only, 2 if the fleet differs).
    #[arg(long)]
    pub once: bool,
    /// Follow a git repository instead of a directory (file://, ssh:// or user@host:path): each pass fetches it and reconciles one commit.
    #[arg(long, value_name = "URL")]
    pub git: Option<String>,
    /// Branch, tag or full commit id to follow (default: the remote's default branch).
    #[arg(long = "ref", value_name = "REF", requires = "git")]
    pub git_ref: Option<String>,
    /// Subdirectory of the repository holding the configuration.
    #[arg(long, value_name = "DIR", requires = "git")]
    pub path: Option<PathBuf>,
    /// Where to keep the clone and the checkouts (default: DIR/.gpushare-git).
    #[arg(long, value_name = "DIR", requires = "git")]
    pub cache: Option<PathBuf>,
    #[command(flatten)]
    pub guard: GitGuardArgs,
    /// Plan and report, never apply (with --once: exit 2 when the fleet differs from the configuration, 0 when it matches).
    #[arg(long)]
    pub drift_only: bool,
    /// Serve /metrics (Prometheus text), /healthz and /readyz on ADDR, e.g. 127.0.0.1:9090 (off by default).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// With --listen off loopback: the file holding the web console's bearer token
    /// (without it the console is served on loopback only; docs/console.md).
    #[arg(long, value_name = "FILE")]
    pub console_token_file: Option<PathBuf>,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub vars: VarArgs,
    #[command(flatten)]
    pub planner: PlannerArgs,
    #[command(flatten)]
    pub agent_api: crate::agent_api_cmd::AgentApiArgs,
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// List the resources, hosts and tasks in the state.
    List { dir: Option<PathBuf> },
    /// Show one recorded object: a resource (service.NAME ...), host.ID or task.ID.
    Show {
        addr: String,
        dir: Option<PathBuf>,
        /// Print the record as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        vars: VarArgs,
    },
    /// Forget an object without touching the cloud: a resource (a service with its
    /// tasks), or host.ID (with the tasks placed on it; its instance keeps running and
    /// shows as a stray that `gpushare import` can adopt again). A pool that still has
    /// hosts in the state is refused. The next plan sees what is missing.
    Rm {
        addr: String,
        dir: Option<PathBuf>,
        #[command(flatten)]
        vars: VarArgs,
        #[command(flatten)]
        lock: LockArgs,
    },
    /// Print the whole state as JSON (secrets included: it is what `state push` takes).
    Pull {
        dir: Option<PathBuf>,
        #[command(flatten)]
        vars: VarArgs,
    },
    /// Write a state printed by `state pull` into this configuration's store (moving a
    /// fleet from one store to another, e.g. from the file store to etcd). Refused
    /// unless the store records nothing yet, or --force on a store of the same
    /// identity. An empty store takes over the pushed state's identity, so the fleet's
    /// instances (tagged with it) stay this state's: stop using the old store after.
    Push {
        /// The JSON file `state pull` wrote.
        file: PathBuf,
        dir: Option<PathBuf>,
        /// Overwrite a store that already records something (same store identity only).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        vars: VarArgs,
        #[command(flatten)]
        lock: LockArgs,
    },
    /// Rename a resource in the state (same kind): `state mv service.a service.b`; its
    /// tasks, hosts and the references of other recorded resources follow.
    Mv {
        from: String,
        to: String,
        dir: Option<PathBuf>,
        #[command(flatten)]
        vars: VarArgs,
        #[command(flatten)]
        lock: LockArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum DebugCommand {
    /// Inject a fault into a host of the local cloud (for trying out host replacement).
    Fault {
        /// Host id (see `gpushare show`).
        host: String,
        fault: FaultArg,
        dir: Option<PathBuf>,
        /// The GPU index of a GPU fault (gpu-lost, xid, ecc, pending-retirement, row-remap-failure).
        #[arg(long, default_value_t = 0, value_name = "INDEX")]
        gpu: u32,
        /// The Xid code of an `xid` fault (79: the GPU has fallen off the bus).
        #[arg(long, default_value_t = 79, value_name = "CODE")]
        xid: u64,
    },
    /// Print the boot environment a local host was launched with, as a real host finds
    /// it in its user data: the controller's address, the host's single-use join token,
    /// the CA hash and its host id, as env-file lines (for `docker run --env-file` or a
    /// systemd unit starting `gpushare agent`). Needs `controller_address`.
    UserData {
        /// Host id (see `gpushare show`) or instance id.
        host: String,
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
            Command::Reconcile(r) => r.log_format,
            _ => LogFormat::Text,
        }
    }
}

/// What a git-following controller holds fixed, and how much of a commit it reads.
#[derive(Debug, Clone, Default, Args)]
pub struct GitGuardArgs {
    /// Pin the store (e.g. etcd://etcd.internal:2379): a commit naming another is refused. Default: the store of the first commit taken, kept in CACHE/pins.json.
    #[arg(long, value_name = "URL", requires = "git")]
    pub store: Option<String>,
    /// Pin the cloud: a commit naming another is refused. Default: the first commit's.
    #[arg(long, value_enum, value_name = "CLOUD", requires = "git")]
    pub cloud: Option<CloudArg>,
    /// Pin the cluster name: a commit naming another is refused. Default: the first commit's.
    #[arg(long, value_name = "NAME", requires = "git")]
    pub cluster: Option<String>,
    /// Refuse a commit holding a file over SIZE under --path (e.g. 10MiB, 512KiB, 1048576).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "10MiB", requires = "git")]
    pub max_file_size: u64,
    /// Refuse a commit whose files under --path add up to more than SIZE.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "100MiB", requires = "git")]
    pub max_checkout_size: u64,
}

/// The cloud a controller is pinned to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CloudArg {
    Local,
    Ec2,
}

impl From<CloudArg> for gpushare_core::model::CloudKind {
    fn from(c: CloudArg) -> Self {
        match c {
            CloudArg::Local => gpushare_core::model::CloudKind::Local,
            CloudArg::Ec2 => gpushare_core::model::CloudKind::Ec2,
        }
    }
}

/// A size in bytes: a number with an optional unit (B, KiB, MiB, GiB; KB, MB, GB
/// are decimal).
fn parse_size(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{s:?} is not a size (e.g. 10MiB, 512KiB, 1048576): {e}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FaultArg {
    /// The host's MPS control daemon stops answering: the host is impaired.
    MpsDown,
    /// The host's agent stops reporting.
    Silent,
    /// A GPU (`--gpu`) is lost (NVML: GPU_IS_LOST): the host's `gpus` check is impaired.
    GpuLost,
    /// A GPU (`--gpu`) had a critical Xid event (`--xid`, 79 by default).
    Xid,
    /// A GPU (`--gpu`) has an uncorrectable ECC error.
    Ecc,
    /// A GPU (`--gpu`) has pages pending retirement.
    PendingRetirement,
    /// A row remapping of a GPU (`--gpu`) failed.
    RowRemapFailure,
    /// The container runtime stops answering: `container_runtime` is impaired.
    RuntimeDown,
    /// Remove any fault.
    Clear,
}

/// Terraform's plan-scoping flags (plan and apply).
#[derive(Debug, Clone, Default, Args)]
pub struct ScopeArgs {
    /// Plan only ADDR (e.g. service.embedder) and the resources it depends on (its task
    /// definition and pool); every other resource is planned as it was last applied, so
    /// its configuration changes wait. Repeatable. The plan says it is partial.
    #[arg(long = "target", id = "targets", value_name = "ADDR")]
    pub target: Vec<String>,
    /// Replace ADDR: host.ID (that host is replaced start-before-stop, as a sick host
    /// is), capacity_provider.NAME or gpu_instance.NAME (all its hosts, at most the
    /// pool's max_draining_percent at once). Repeatable.
    #[arg(long, value_name = "ADDR")]
    pub replace: Vec<String>,
    /// Only bring the state up to date with the world (host states, instances gone,
    /// agents' reports): the plan lists what changed outside gpushare and proposes no
    /// change; apply records it (no cloud call).
    #[arg(long, conflicts_with_all = ["targets", "replace"])]
    pub refresh_only: bool,
    /// Launches in flight at once. gpushare launches a run of hosts as one wave,
    /// journalled and committed together, so N only has to be at least 1; accepted
    /// for Terraform scripts.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub parallelism: u32,
}

/// Terraform spells long flags with one dash (`-auto-approve`, `-out=FILE`,
/// `-var k=v`); clap wants two. The rule: after the subcommand words, an argument
/// `-WORD` or `-WORD=VALUE` whose WORD (two characters or more) is a long flag of that
/// subcommand (or a global one) is read as `--WORD...`; anything else (short flags
/// such as `-v`, values, positionals, everything after `--`) is left alone.
pub fn normalise_args(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let root = Cli::command();
    let mut cmd = &root;
    let mut longs: Vec<String> = vec![];
    let collect = |c: &clap::Command, longs: &mut Vec<String>| {
        longs.extend(
            c.get_arguments()
                .filter_map(|a| a.get_long())
                .map(str::to_string),
        )
    };
    collect(cmd, &mut longs);
    let mut out = Vec::with_capacity(args.len());
    let mut rest = false;
    for (i, a) in args.into_iter().enumerate() {
        let Some(s) = a.to_str().filter(|_| i > 0 && !rest) else {
            out.push(a);
            continue;
        };
        if s == "--" {
            rest = true;
        } else if let Some(sub) = cmd.find_subcommand(s).filter(|_| !s.starts_with('-')) {
            cmd = sub;
            collect(cmd, &mut longs);
        } else if let Some(word) = s.strip_prefix('-').filter(|w| !w.starts_with('-')) {
            let name = word.split_once('=').map_or(word, |(n, _)| n);
            if name.len() > 1 && longs.iter().any(|l| l == name) {
                out.push(format!("-{s}").into());
                continue;
            }
        }
        out.push(a);
    }
    out
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
        let Command::Plan(PlanArgs { pass, dir, .. }) = cli.command else {
            panic!("not plan")
        };
        let vars = pass.vars;
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
    fn single_dash_long_flags_of_the_command_become_double_dash() {
        let norm = |args: &[&str]| -> Vec<String> {
            normalise_args(args.iter().map(std::ffi::OsString::from))
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            norm(&[
                "gpushare",
                "plan",
                "-out=p",
                "-detailed-exitcode",
                "-no-color",
                "-input=false",
                "-v",
                "a=1",
                "-lock-timeout=2m",
                "d"
            ]),
            [
                "gpushare",
                "plan",
                "--out=p",
                "--detailed-exitcode",
                "--no-color",
                "--input=false",
                "-v",
                "a=1",
                "--lock-timeout=2m",
                "d"
            ]
        );
        // Not a flag of this command, a value, and everything after `--`: left alone.
        assert_eq!(
            norm(&["gpushare", "fmt", "-auto-approve", "-check", "--", "-check"]),
            [
                "gpushare",
                "fmt",
                "-auto-approve",
                "--check",
                "--",
                "-check"
            ]
        );
        assert_eq!(
            norm(&["gpushare", "state", "rm", "-lock-timeout=1s", "host.h-1"]),
            ["gpushare", "state", "rm", "--lock-timeout=1s", "host.h-1"]
        );
        let cli = parse(&[
            "gpushare",
            "apply",
            "-auto-approve",
            "-target=service.a",
            "-replace=host.h-1",
            "-parallelism=3",
            "-var-file=x.tfvars",
            "-no-color",
            "-input=false",
            "d",
        ])
        .expect("parses");
        assert!(!cli.input && cli.no_color);
        let Command::Apply(ApplyArgs {
            auto_approve,
            pass: PassArgs { scope, vars, .. },
            ..
        }) = cli.command
        else {
            panic!("not apply")
        };
        assert!(auto_approve);
        assert_eq!(scope.target, ["service.a"]);
        assert_eq!(scope.replace, ["host.h-1"]);
        assert_eq!(scope.parallelism, 3);
        assert_eq!(vars.var_files, [PathBuf::from("x.tfvars")]);
        assert!(parse(&["gpushare", "apply", "-parallelism=0"]).is_err());
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
            command: DebugCommand::Fault {
                host, fault, dir, ..
            },
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
