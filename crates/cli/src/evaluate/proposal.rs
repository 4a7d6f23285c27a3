//! From samples to workloads, and per workload what gpushare would declare for it: an
//! MPS share (GPU memory from the observed peak with headroom, a compute cap from
//! the observed SM use) or a GPU of its own, with the reason.

use super::gpus::model_of;
use super::mapping::Mapping;
use super::samples::{Loc, Machine, ProcRow};
use super::EvalError;
use gpushare_core::catalog::{cheapest_with_model, InstanceType};
use std::collections::{BTreeMap, BTreeSet};

pub use gpushare_core::pool::MEMORY_STEP_MIB;
/// Compute caps are proposed in steps of this many percent.
pub const COMPUTE_STEP: u32 = 5;
/// SM use at or above this p95 counts as sustained: a GPU of its own.
pub const SUSTAINED_SM: u32 = 90;

/// Peak, 95th percentile (nearest rank) and count of some samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub peak: u64,
    pub p95: u64,
    pub n: usize,
}

impl Stats {
    pub fn of(mut v: Vec<u64>) -> Option<Stats> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let rank = (v.len() * 95).div_ceil(100).max(1);
        Some(Stats {
            peak: v[v.len() - 1],
            p95: v[rank - 1],
            n: v.len(),
        })
    }
}

/// What evaluate proposes for a workload.
#[derive(Debug, Clone, PartialEq)]
pub enum Proposal {
    Mps {
        memory_mib: u64,
        max_compute_percent: Option<u32>,
        /// Why that cap (or none).
        cap_reason: String,
    },
    /// A whole GPU of its own, and why.
    Dedicated { reason: String },
}

/// The processes of one workload, what they were seen to use, and the proposal.
#[derive(Debug, Clone)]
pub struct Workload {
    pub name: String,
    /// The catalogue GPU model it ran on (the most of its processes'), and the type
    /// of the pool it is proposed in (the cheapest per GPU of that model).
    pub model: &'static str,
    pub instance_type: &'static InstanceType,
    pub machines: BTreeSet<String>,
    /// The most processes of it seen at once, summed over the machines.
    pub processes: u32,
    /// Memory rows read (with a number or not).
    pub rows: usize,
    pub memory: Option<Stats>,
    pub sm: Option<Stats>,
    pub proposal: Proposal,
}

/// How the proposal is made.
#[derive(Debug, Clone)]
pub struct Rules {
    pub headroom: f64,
    /// The model of GPUs no file names (`--gpu-model`).
    pub gpu_model: Option<&'static str>,
}

/// What one workload's samples add up to, before the proposal.
#[derive(Default)]
struct Acc {
    models: BTreeMap<&'static str, usize>,
    machines: BTreeSet<String>,
    /// machine -> sample -> pids
    at_once: BTreeMap<String, BTreeMap<usize, BTreeSet<u32>>>,
    rows: usize,
    memory: Vec<u64>,
    sm: Vec<u64>,
}

/// The GPUs that run the processes today, per catalogue model: on each machine the
/// GPUs rows name by gpu_uuid, plus, for rows that name none, one GPU per process
/// (the most seen at once).
pub type Today = BTreeMap<&'static str, u32>;

/// One machine's GPUs in use today, per model.
#[derive(Default)]
struct InUse {
    uuids: BTreeMap<&'static str, BTreeSet<String>>,
    /// model -> sample -> pids, for rows without gpu_uuid
    unnamed: BTreeMap<&'static str, BTreeMap<usize, BTreeSet<u32>>>,
}

impl InUse {
    fn add(&mut self, model: &'static str, r: &ProcRow) {
        match &r.gpu_uuid {
            Some(u) => {
                self.uuids.entry(model).or_default().insert(u.clone());
            }
            None => {
                self.unnamed
                    .entry(model)
                    .or_default()
                    .entry(r.sample)
                    .or_default()
                    .insert(r.pid);
            }
        }
    }

    fn into_today(self, today: &mut Today) {
        for (model, set) in self.uuids {
            *today.entry(model).or_default() += u32::try_from(set.len()).unwrap_or(u32::MAX);
        }
        for (model, samples) in self.unnamed {
            let most = samples.values().map(BTreeSet::len).max().unwrap_or(0);
            *today.entry(model).or_default() += u32::try_from(most).unwrap_or(u32::MAX);
        }
    }
}

/// Group the processes of `machines` into workloads and propose each; and the GPUs
/// they run on today.
pub fn workloads(
    machines: &[Machine],
    mapping: &Mapping,
    rules: &Rules,
) -> Result<(Vec<Workload>, Today), EvalError> {
    let mut acc: BTreeMap<String, Acc> = BTreeMap::new();
    let mut today = Today::new();
    for m in machines {
        check_gpu_names(m)?;
        let mut by_pid: BTreeMap<u32, String> = BTreeMap::new();
        let mut in_use = InUse::default();
        for r in &m.procs {
            let model = row_model(m, r, rules.gpu_model)?;
            in_use.add(model, r);
            let name = mapping.workload(&m.name, &r.process_name);
            let a = acc.entry(name.clone()).or_default();
            *a.models.entry(model).or_default() += 1;
            a.machines.insert(m.name.clone());
            a.at_once
                .entry(m.name.clone())
                .or_default()
                .entry(r.sample)
                .or_default()
                .insert(r.pid);
            a.rows += 1;
            a.memory.extend(r.used_mib);
            by_pid.insert(r.pid, name);
        }
        in_use.into_today(&mut today);
        for p in &m.pmon {
            if let (Some(sm), Some(name)) = (p.sm, by_pid.get(&p.pid)) {
                if let Some(a) = acc.get_mut(name) {
                    a.sm.push(u64::from(sm));
                }
            }
        }
    }
    if acc.is_empty() {
        return Err(EvalError::NoProcesses);
    }
    let workloads = acc
        .into_iter()
        .map(|(name, a)| finish(name, a, rules))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((workloads, today))
}

fn finish(name: String, a: Acc, rules: &Rules) -> Result<Workload, EvalError> {
    // The most rows, then the first name: deterministic.
    let model = a
        .models
        .iter()
        .max_by(|x, y| x.1.cmp(y.1).then(y.0.cmp(x.0)))
        .map(|(m, _)| *m)
        .ok_or(EvalError::NoProcesses)?;
    let instance_type = cheapest_with_model(model).ok_or(EvalError::NoInstanceType(model))?;
    let processes = a
        .at_once
        .values()
        .map(|samples| samples.values().map(BTreeSet::len).max().unwrap_or(0))
        .sum::<usize>();
    let memory = Stats::of(a.memory);
    let sm = Stats::of(a.sm);
    let proposal = propose(memory, sm, instance_type, rules.headroom);
    Ok(Workload {
        name,
        model,
        instance_type,
        machines: a.machines,
        processes: u32::try_from(processes).unwrap_or(u32::MAX),
        rows: a.rows,
        memory,
        sm,
        proposal,
    })
}

/// The proposal for a workload seen to use `memory` and `sm` on GPUs of `t`.
pub fn propose(
    memory: Option<Stats>,
    sm: Option<Stats>,
    t: &InstanceType,
    headroom: f64,
) -> Proposal {
    let Some(memory) = memory else {
        return Proposal::Dedicated {
            reason: "no memory sample (nvidia-smi printed [N/A]): a GPU of its own until measured"
                .to_string(),
        };
    };
    let gpu = t.gpu_memory_mib;
    let want = gpushare_core::pool::memory_with_headroom(memory.peak, headroom);
    if let Some(s) = sm.filter(|s| s.p95 >= u64::from(SUSTAINED_SM)) {
        return Proposal::Dedicated {
            reason: format!(
                "SM use is sustained (p95 {}% >= {SUSTAINED_SM}%): sharing its GPU would slow it",
                s.p95
            ),
        };
    }
    if want > gpu {
        return Proposal::Dedicated {
            reason: format!(
                "peak {} MiB x {headroom} = {want} MiB does not fit the {gpu} MiB of one {} GPU as an MPS share",
                memory.peak, t.gpu_model
            ),
        };
    }
    let (max_compute_percent, cap_reason) = match sm {
        None => (None, "no pmon sample: uncapped".to_string()),
        Some(s) => {
            let cap = ((s.p95 as f64 * headroom).ceil() as u32)
                .div_ceil(COMPUTE_STEP)
                .saturating_mul(COMPUTE_STEP)
                .clamp(COMPUTE_STEP, 100);
            if cap >= 100 {
                (
                    None,
                    format!("SM p95 {}% x {headroom} reaches 100%: uncapped", s.p95),
                )
            } else {
                (
                    Some(cap),
                    format!(
                        "SM p95 {}% x {headroom}, rounded up to {COMPUTE_STEP}%",
                        s.p95
                    ),
                )
            }
        }
    };
    Proposal::Mps {
        memory_mib: want,
        max_compute_percent,
        cap_reason,
    }
}

/// Every GPU a machine lists must be one the catalogue knows.
fn check_gpu_names(m: &Machine) -> Result<(), EvalError> {
    for g in &m.gpus {
        model_of(&g.name).ok_or_else(|| unknown(&g.name, &g.at))?;
    }
    Ok(())
}

fn unknown(name: &str, at: &Loc) -> EvalError {
    EvalError::UnknownGpu {
        at: at.clone(),
        name: name.to_string(),
        known: super::gpus::catalogue_models().join(", "),
    }
}

/// The GPU model a process row ran on: its gpu_name column, else its gpu_uuid in the
/// machine's GPU list, else the machine's only model, else `--gpu-model`.
fn row_model(
    m: &Machine,
    r: &ProcRow,
    flag: Option<&'static str>,
) -> Result<&'static str, EvalError> {
    if let Some(name) = &r.gpu_name {
        return model_of(name).ok_or_else(|| unknown(name, &r.at));
    }
    if let Some(g) = r
        .gpu_uuid
        .as_ref()
        .and_then(|u| m.gpus.iter().find(|g| g.uuid.as_ref() == Some(u)))
    {
        return model_of(&g.name).ok_or_else(|| unknown(&g.name, &g.at));
    }
    let models: BTreeSet<&'static str> = m.gpus.iter().filter_map(|g| model_of(&g.name)).collect();
    match (models.len(), flag) {
        (1, _) => Ok(models.into_iter().next().unwrap_or_default()),
        (0, Some(f)) => Ok(f),
        (0, None) => Err(EvalError::NoGpuModel {
            machine: m.name.clone(),
        }),
        _ => Err(EvalError::SeveralModels {
            at: r.at.clone(),
            machine: m.name.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{propose, Proposal, Stats};
    use gpushare_core::catalog::lookup;

    fn stats(peak: u64, p95: u64) -> Option<Stats> {
        Some(Stats { peak, p95, n: 10 })
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let s = Stats::of((1..=100).collect()).expect("samples");
        assert_eq!((s.peak, s.p95, s.n), (100, 95, 100));
        let s = Stats::of(vec![7]).expect("one sample");
        assert_eq!((s.peak, s.p95), (7, 7));
        assert_eq!(Stats::of(vec![]), None);
    }

    #[test]
    fn memory_gets_headroom_rounded_up_and_caps_come_from_p95() {
        let l4 = lookup("g6.xlarge").expect("catalogue");
        let p = propose(stats(3000, 2900), stats(40, 31), l4, 1.2);
        assert_eq!(
            p,
            Proposal::Mps {
                memory_mib: 3840,              // 3600 rounded up to 256
                max_compute_percent: Some(40), // 37.2 rounded up to 5
                cap_reason: "SM p95 31% x 1.2, rounded up to 5%".to_string(),
            }
        );
        let Proposal::Mps {
            max_compute_percent,
            ..
        } = propose(stats(3000, 2900), None, l4, 1.2)
        else {
            panic!("an MPS share");
        };
        assert_eq!(max_compute_percent, None);
    }

    #[test]
    fn too_big_or_too_busy_gets_a_gpu_of_its_own() {
        let l4 = lookup("g6.xlarge").expect("catalogue");
        assert!(matches!(
            propose(stats(20000, 19000), stats(30, 20), l4, 1.2),
            Proposal::Dedicated { reason } if reason.contains("does not fit the 22888 MiB")
        ));
        assert!(matches!(
            propose(stats(2000, 1900), stats(100, 95), l4, 1.2),
            Proposal::Dedicated { reason } if reason.contains("sustained")
        ));
        assert!(matches!(
            propose(None, None, l4, 1.2),
            Proposal::Dedicated { .. }
        ));
    }
}
