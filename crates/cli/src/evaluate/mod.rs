//! `gpushare evaluate`: what gpushare would save on machines run today without it
//! (docs/evaluate.md). It reads what nvidia-smi prints there ([`samples`]), groups
//! the processes into workloads ([`mapping`]), proposes an MPS share or a GPU of its
//! own for each ([`proposal`]), writes that as configuration and plans it with the
//! planner of `gpushare plan` on an empty fleet ([`fleet`]), and prints the packed
//! fleet and its cost beside today's ([`report`]). Nothing is written unless all of
//! it succeeds.

mod fleet;
mod gpus;
mod mapping;
mod proposal;
mod report;
mod samples;
#[cfg(test)]
mod tests;

use crate::outfile::write_new;
use samples::Loc;
use std::path::PathBuf;

/// `gpushare evaluate`'s arguments.
#[derive(Debug, clap::Args)]
pub struct EvaluateArgs {
    /// Directories of nvidia-smi samples: one per machine, or one holding a
    /// directory per machine (docs/evaluate.md says what to collect).
    #[arg(value_name = "DIR", required = true)]
    pub paths: Vec<PathBuf>,
    /// A file of `PATTERN = WORKLOAD` lines grouping process names into workloads
    /// (globs; `MACHINE:GLOB` for one machine). Default: one workload per process name.
    #[arg(long, value_name = "FILE")]
    pub mapping: Option<PathBuf>,
    /// The GPU of machines whose files do not say (no --query-gpu file, no gpu_name
    /// column): an nvidia-smi name ("NVIDIA L4") or a catalogue model (l4).
    #[arg(long, value_name = "MODEL")]
    pub gpu_model: Option<String>,
    /// Headroom over the observed peak memory and p95 SM use (1.2 = 20% more).
    #[arg(long, value_name = "FACTOR", default_value_t = 1.2)]
    pub headroom: f64,
    /// Write the proposed configuration into DIR (created if missing) as evaluate.hcl.
    #[arg(long, value_name = "DIR")]
    pub write: Option<PathBuf>,
    /// The cluster name of the written configuration.
    #[arg(long, value_name = "NAME", default_value = "evaluated")]
    pub cluster: String,
    /// The cloud of the written configuration.
    #[arg(long, value_parser = ["local", "ec2"], default_value = "local")]
    pub cloud: String,
    /// With --write: replace an evaluate.hcl that exists.
    #[arg(long, requires = "write")]
    pub force: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{file}: cannot read it")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{at}: {message}")]
    Parse { at: Loc, message: String },
    #[error("{at}: unknown GPU {name:?}: the catalogue has {known} (pass --gpu-model for machines whose files do not name a GPU)")]
    UnknownGpu {
        at: Loc,
        name: String,
        known: String,
    },
    #[error("--gpu-model {0:?}: not a GPU of the catalogue (an nvidia-smi name such as \"NVIDIA L4\", or a model: {1})")]
    UnknownGpuFlag(String, String),
    #[error("machine {machine}: no GPU model: add the output of `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv` to its directory, or pass --gpu-model")]
    NoGpuModel { machine: String },
    #[error("{at}: machine {machine} has GPUs of several models and the row does not say which ran it: collect gpu_uuid (--query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory)")]
    SeveralModels { at: Loc, machine: String },
    #[error("the catalogue has no priced instance type with {0} GPUs")]
    NoInstanceType(&'static str),
    #[error("no sample files in {}", .0.join(", "))]
    NoSamples(Vec<String>),
    #[error("two machines are named {0}: give each machine's directory its own name")]
    SameMachine(String),
    #[error("no GPU process in the samples: nothing to evaluate")]
    NoProcesses,
    #[error("--headroom {0}: expected a factor from 1 to 10 (1.2 = 20% over the observed peak)")]
    Headroom(f64),
    #[error("--cluster {0:?} is not a gpushare name (letters, digits, `_`, `-`)")]
    Cluster(String),
    #[error("the proposed configuration does not load (a bug in evaluate):\n{0}")]
    Generated(gpushare_config::Diagnostics),
    #[error("planning the proposed configuration")]
    Plan(#[source] gpushare_core::plan::PlanError),
}

/// What an evaluation found: the text to print and the configuration to write.
#[derive(Debug)]
pub struct Evaluation {
    pub text: String,
    pub hcl: String,
}

/// Run the command: exit 0, or an error (exit 1) with nothing written.
pub fn run(args: &EvaluateArgs) -> anyhow::Result<u8> {
    let e = evaluate(args)?;
    print!("{}", e.text);
    if let Some(dir) = &args.write {
        let path = dir.join(fleet::FILE_NAME);
        write_new(dir, &path, &e.hcl, args.force)?;
        tracing::info!(path = %path.display(), "evaluate wrote the configuration");
        println!(
            "\nWrote {}: check it with `gpushare validate {}` and `gpushare plan {}`.",
            path.display(),
            dir.display(),
            dir.display()
        );
    }
    Ok(0)
}

/// Read, propose and plan; nothing printed or written yet.
pub fn evaluate(args: &EvaluateArgs) -> Result<Evaluation, EvalError> {
    if !(1.0..=10.0).contains(&args.headroom) {
        return Err(EvalError::Headroom(args.headroom));
    }
    if !mapping::valid_name(&args.cluster) {
        return Err(EvalError::Cluster(args.cluster.clone()));
    }
    let gpu_model = match &args.gpu_model {
        Some(name) => Some(gpus::model_of(name).ok_or_else(|| {
            EvalError::UnknownGpuFlag(name.clone(), gpus::catalogue_models().join(", "))
        })?),
        None => None,
    };
    let map = match &args.mapping {
        Some(p) => mapping::Mapping::read(p)?,
        None => mapping::Mapping::default(),
    };
    let machines = samples::read_machines(&args.paths)?;
    let rules = proposal::Rules {
        headroom: args.headroom,
        gpu_model,
    };
    let (workloads, today) = proposal::workloads(&machines, &map, &rules)?;
    let samples: usize = machines.iter().map(|m| m.samples).sum();
    let target = fleet::Target {
        cluster: args.cluster.clone(),
        cloud: args.cloud.clone(),
        source: format!(
            "Proposed by `gpushare evaluate` from {samples} nvidia-smi sample(s) of {} machine(s): {}.",
            machines.len(),
            machines
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let proposed = fleet::propose(&workloads, &target)?;
    Ok(Evaluation {
        text: report::text(&machines, &workloads, &today, &proposed, args.headroom),
        hcl: proposed.hcl,
    })
}
