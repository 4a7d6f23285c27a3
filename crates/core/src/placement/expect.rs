//! The expected task shapes as the scores use them, drawn once from the
//! typical shapes so that scoring a candidate reads them without regrouping.

use super::fgd::{groups, Group};
use super::need::{GpuNeed, Need, Typical};
use super::sharing::{share, SharingPlan};

#[derive(Debug, Clone, Default)]
pub(super) struct Expect {
    /// gpushare's groups (weights: count x GPUs).
    pub(super) groups: Vec<Group>,
    /// FGD's groups (weights: count).
    pub(super) groups_fgd: Vec<Group>,
    /// The expected MPS task sizes: (GPU memory MiB, expected count).
    mps_sizes: Vec<(u64, u32)>,
    /// gpushare's planned sharing patterns of those sizes, per GPU memory size
    /// (shares differ between GPUs of different memory).
    pub(super) plans: Vec<(u64, SharingPlan)>,
    /// FGD's weight of CPU-only shapes: they see every free GPU as fragmented.
    pub(super) fgd_cpu_only: f64,
    /// CPU the expected GPU tasks need per thousandth of a GPU (0: unknown).
    pub(super) cpu_per_milli: f64,
    /// gpushare's expected demand constrained to GPU models: (allowed models,
    /// share of the expected GPU demand), one entry per distinct model set.
    pub(super) model_sets: Vec<(Vec<u32>, f64)>,
}

impl Expect {
    /// The expectation of `typical` (weights need not sum to 1); MPS shares are
    /// relative to GPUs of `gpu_ref` MiB. No GPU memory size is planned yet
    /// ([`Expect::plan_for`]).
    pub(super) fn new(typical: &[Typical], gpu_ref: f64) -> Expect {
        let units = |n: &Need| match n.gpu {
            GpuNeed::None => 0.0,
            GpuNeed::Whole(k) => f64::from(k),
            GpuNeed::Mps { memory_mib, .. } => memory_mib as f64 / gpu_ref,
        };
        // CPU per GPU thousandth that the expected tasks bring (CPU-only ones included:
        // they take CPU from GPU hosts too).
        let (cpu, milli) = typical.iter().fold((0.0, 0.0), |(c, m), t| {
            (
                c + t.weight * f64::from(t.need.cpu),
                m + t.weight * 1000.0 * units(&t.need),
            )
        });
        let cpu_per_milli = if milli > 0.0 { cpu / milli } else { 0.0 };
        // FGD weighs shapes by count; gpushare by the GPU capacity they bring
        // (count x GPUs), so rare many-GPU shapes count as much as the GPUs they want.
        let groups_fgd = groups(typical, |_| 1.0);
        let all: f64 = typical.iter().map(|t| t.weight).sum();
        let cpu_only: f64 = typical
            .iter()
            .filter(|t| t.need.gpu == GpuNeed::None)
            .map(|t| t.weight)
            .sum();
        let fgd_cpu_only = if all > 0.0 { cpu_only / all } else { 0.0 };
        let groups = groups(typical, units);
        // Demand that only some GPU models can take, by model set.
        let mut model_sets: Vec<(Vec<u32>, f64)> = Vec::new();
        for g in &groups {
            if g.models().is_empty() {
                continue;
            }
            let mut ms = g.models().to_vec();
            ms.sort_unstable();
            ms.dedup();
            match model_sets.iter_mut().find(|s| s.0 == ms) {
                Some(s) => s.1 += g.weight(),
                None => model_sets.push((ms, g.weight())),
            }
        }
        // The expected MPS sizes, planned for the GPUs of every memory size present.
        let mps_sizes = typical
            .iter()
            .filter_map(|t| match t.need.gpu {
                GpuNeed::Mps { memory_mib, .. } => {
                    Some((memory_mib, t.weight.round().max(1.0) as u32))
                }
                _ => None,
            })
            .collect();
        Expect {
            groups,
            groups_fgd,
            mps_sizes,
            plans: Vec::new(),
            fgd_cpu_only,
            cpu_per_milli,
            model_sets,
        }
    }

    /// Plan the expected MPS sizes for GPUs of `mib` MiB, unless planned already.
    pub(super) fn plan_for(&mut self, mib: u64) {
        if self.mps_sizes.is_empty() || self.plans.iter().any(|(m, _)| *m == mib) {
            return;
        }
        // Equal shares are merged by the plan.
        let shares: Vec<(u16, u32)> = (self.mps_sizes.iter())
            .filter(|&&(mem, _)| mem <= mib)
            .map(|&(mem, c)| (share(mem, mib), c))
            .collect();
        self.plans.push((mib, SharingPlan::new(&shares)));
    }
}
