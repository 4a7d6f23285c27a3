//! The arguments of the job commands: `gpushare run` (a one-off job),
//! `gpushare job status|rerun|rm|logs`, and the output flags `logs` and `job logs`
//! share.

use super::{StoreArgs, VarArgs};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// A job's progress: its state, and each index with every attempt (host, exit
    /// code, reason, duration).
    Status {
        job: String,
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Print the progress as one JSON document.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        vars: VarArgs,
    },
    /// Give the indexes that used up their retries another `max_retries + 1`
    /// attempts; the next apply or reconcile pass starts them.
    Rerun {
        job: String,
        /// Run again the indexes that failed (the only kind of rerun there is).
        #[arg(long)]
        failed: bool,
        #[command(flatten)]
        at: StoreArgs,
    },
    /// Remove a one-off job (`gpushare run`): its record goes, and the next pass
    /// stops its runs. A declared job is removed from the configuration instead.
    Rm {
        job: String,
        #[command(flatten)]
        at: StoreArgs,
    },
    /// The output of one run of a job: the latest attempt of index I (or attempt N),
    /// from the agent of the host it ran on, through `gpushare logs` (an agent keeps
    /// the output of the last 32 runs that ended on its host until it restarts).
    Logs {
        job: String,
        /// The run's index (0..completions-1).
        #[arg(long, value_name = "I")]
        index: u32,
        /// Which attempt of the index (1 for the first; default: the latest).
        #[arg(long, value_name = "N")]
        attempt: Option<u32>,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        at: StoreArgs,
    },
}

/// `gpushare run TASK_DEFINITION`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The task definition to run (declared in the configuration).
    pub task_definition: String,
    /// How many runs must succeed (indexes 0..N-1, as GPUSHARE_JOB_INDEX).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
    /// At most this many runs at once (default: all of them).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub parallelism: Option<u32>,
    /// The capacity provider to run in (default: the configuration's only one).
    #[arg(long, value_name = "POOL")]
    pub pool: Option<String>,
    /// Failed attempts an index may have before the job fails.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_retries: u32,
    /// The job's name (default: run-TASK_DEFINITION-<seconds since the epoch>).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Run passes until the job finishes; exit 1 when it failed.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub at: StoreArgs,
}

/// Which output `gpushare logs` and `gpushare job logs` print, and how.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Only this container's output (default: every container of the task).
    #[arg(long, value_name = "NAME")]
    pub container: Option<String>,
    /// How many of the last lines of each container.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub tail: u32,
    /// Keep printing new output until the task stops (or Ctrl-C).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Seconds to wait for the host's agent to answer (it answers on its next pass).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub wait: u64,
}
