//! The proposed configuration (a capacity provider per GPU model, a task definition
//! and a service per workload), loaded and validated as `gpushare validate` does, and
//! planned by the planner of `gpushare plan` against an empty fleet: the packed fleet
//! and its cost are the engine's, not a second packer's.

use super::proposal::{Proposal, Workload, MEMORY_STEP_MIB};
use super::EvalError;
use crate::import_ecs::doc::{Block, Doc, Val};
use crate::import_ecs::Format;
use gpushare_config::{Diagnostics, LoadOptions, Severity, Source};
use gpushare_core::catalog::InstanceType;
use gpushare_core::model::Live;
use gpushare_core::plan::{plan, Options, Plan};
use std::collections::BTreeMap;

/// The name of the file `--write` writes.
pub const FILE_NAME: &str = "evaluate.hcl";

/// What the written configuration is for.
#[derive(Debug, Clone)]
pub struct Target {
    pub cluster: String,
    pub cloud: String,
    /// The header's first line: where the samples came from.
    pub source: String,
}

/// The proposed configuration, as text and loaded, and its plan on an empty fleet.
#[derive(Debug)]
pub struct Proposed {
    pub hcl: String,
    pub plan: Plan,
}

/// Write, load, validate and plan the configuration of `workloads`.
pub fn propose(workloads: &[Workload], target: &Target) -> Result<Proposed, EvalError> {
    let hcl = document(workloads, target).render(Format::Hcl, FILE_NAME);
    let source = Source {
        name: FILE_NAME.to_string(),
        text: hcl.clone(),
    };
    let desired = gpushare_config::load_sources(&[source], &LoadOptions::default())
        .map_err(EvalError::Generated)?;
    let errors: Vec<_> = gpushare_config::validate(&desired)
        .into_iter()
        .filter(|d| matches!(d.severity, Severity::Error))
        .collect();
    if !errors.is_empty() {
        return Err(EvalError::Generated(Diagnostics(errors)));
    }
    let mut live = Live::default();
    live.state.cluster = desired.settings.cluster.clone();
    let plan = plan(&desired, &live, &Options::from_settings(&desired.settings))
        .map_err(EvalError::Plan)?;
    Ok(Proposed { hcl, plan })
}

/// The pools: one per GPU model, with the workloads' instance type.
fn pools(workloads: &[Workload]) -> BTreeMap<&'static str, (&'static InstanceType, u32)> {
    let mut pools: BTreeMap<&'static str, (&'static InstanceType, u32)> = BTreeMap::new();
    for w in workloads {
        pools.entry(w.model).or_insert((w.instance_type, 0)).1 += w.processes;
    }
    pools
}

fn document(workloads: &[Workload], target: &Target) -> Doc {
    let mut doc = Doc {
        header: vec![
            target.source.clone(),
            "Container images, CPU and host memory are not in nvidia-smi's samples: set each".to_string(),
            "task's image (a placeholder below), cpu and memory before applying (docs/evaluate.md).".to_string(),
        ],
        blocks: vec![],
    };
    let mut settings = Block::new("gpushare", None);
    settings.attr("cluster", Val::Str(target.cluster.clone()));
    settings.attr("cloud", Val::Str(target.cloud.clone()));
    doc.blocks.push(settings);
    for (model, (t, tasks)) in pools(workloads) {
        let mut b = Block::new("capacity_provider", Some(model.to_string()));
        b.comment(format!(
            "{model}: {}, the catalogue's cheapest per {model} GPU ({} x {model}, {} MiB each).\n\
             max_size: room for one task per host; the planner packs them onto fewer.\n\
             reserve_compute: the tasks' compute caps on one GPU add up to at most 100.",
            t.name, t.gpu_count, t.gpu_memory_mib
        ));
        b.attr("instance_type", Val::Str(t.name.to_string()));
        b.attr("min_size", Val::Num(0));
        b.attr("max_size", Val::Num(i64::from(tasks.clamp(1, 1000))));
        b.attr("reserve_compute", Val::Bool(true));
        doc.blocks.push(b);
    }
    for w in workloads {
        doc.blocks.push(task_definition(w));
        let mut s = Block::new("service", Some(w.name.clone()));
        s.attr(
            "task_definition",
            Val::Ref("task_definition", w.name.clone()),
        );
        s.attr(
            "capacity_provider",
            Val::Ref("capacity_provider", w.model.to_string()),
        );
        s.attr("desired_count", Val::Num(i64::from(w.processes)));
        doc.blocks.push(s);
    }
    doc
}

fn task_definition(w: &Workload) -> Block {
    let mut td = Block::new("task_definition", Some(w.name.clone()));
    td.comment(observed(w));
    let mut c = Block::new("container", Some("app".to_string()));
    c.attr(
        "image",
        Val::Str(format!("replace-me/{}:latest", w.name.to_ascii_lowercase())),
    );
    let mut gpu = Block::new("gpu", None);
    match &w.proposal {
        Proposal::Mps {
            memory_mib,
            max_compute_percent,
            cap_reason,
        } => {
            let mut mps = Block::new("mps", None);
            mps.comment(format!(
                "memory: observed peak with headroom, rounded up to {MEMORY_STEP_MIB} MiB; compute: {cap_reason}."
            ));
            mps.attr(
                "memory",
                Val::Num(i64::try_from(*memory_mib).unwrap_or(i64::MAX)),
            );
            if let Some(p) = max_compute_percent {
                mps.attr("max_compute_percent", Val::Num(i64::from(*p)));
            }
            gpu.block(mps);
        }
        Proposal::Dedicated { reason } => {
            gpu.comment(format!("A GPU of its own: {reason}."));
            gpu.attr("count", Val::Num(1));
        }
    }
    c.block(gpu);
    td.block(c);
    td
}

/// The comment above a task definition: what was seen.
fn observed(w: &Workload) -> String {
    let machines: Vec<&str> = w.machines.iter().map(String::as_str).collect();
    let mut s = format!(
        "Seen: {} process(es) at once on {} ({} GPUs), {} sample row(s)",
        w.processes,
        machines.join(", "),
        w.model,
        w.rows
    );
    if let Some(m) = w.memory {
        s.push_str(&format!("; memory peak {} MiB, p95 {} MiB", m.peak, m.p95));
    }
    match w.sm {
        Some(sm) => s.push_str(&format!("; SM peak {}%, p95 {}%.", sm.peak, sm.p95)),
        None => s.push_str("; no SM samples (pmon)."),
    }
    s
}
