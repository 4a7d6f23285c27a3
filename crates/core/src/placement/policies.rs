//! The engine's own placement policies: gpushare's (the planner's `binpack`),
//! spread (the planner's `spread`), and FGD, the paper gpushare is measured
//! against. FGD stays here, not with the benchmark's baselines: its score
//! reads each host's fragmentation under FGD's own expectation, which the
//! cluster keeps up to date at every commit, and core's tests pin it by hand.

use super::expect::Expect;
use super::fgd::frag_of;
use super::need::GpuNeed;
use super::score::{Candidate, Scorer};
use super::sharing::{self, share};
use super::state::GpuState;
use crate::model::{GpuMode, PlacementStrategy};
use serde::{Deserialize, Serialize};

/// Weight of the CPU-stranded GPU capacity in gpushare's score (per thousandth).
const STRAND_WEIGHT: f64 = 1.0;
/// Weight of the packing tie-break in gpushare's score (per thousandth).
const PACK_WEIGHT: f64 = 1e-3;
/// Cost in gpushare's score of taking a shared GPU off the planned patterns:
/// as much as a whole GPU (1000 thousandths) of fragmentation growth.
const PLAN_WEIGHT: f64 = 1000.0;
/// Weight of the GPU-model scarcity price in gpushare's score (per thousandth).
const SCARCITY_WEIGHT: f64 = 2.0;

/// A placement policy of the engine: how the host and GPUs of one task are
/// chosen among the feasible ones.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// gpushare's own policy (the engine default for `binpack`): the growth of
    /// fragmentation over the expected task shapes (weighted by the GPUs they
    /// bring, host memory in the fit test), plus the growth of GPU capacity
    /// stranded by the host's free CPU (at the expected CPU per GPU), plus the
    /// scarcity price of the host's GPU model (expected demand limited to that
    /// model against its free capacity), plus the cost of taking a shared GPU
    /// off the planned sharing patterns of the expected MPS sizes (one GPU's
    /// worth), plus a small packing tie-break; hardest-first order and GPU
    /// completion in batch mode.
    #[default]
    Gpushare,
    /// Fragmentation Gradient Descent (Weng et al., USENIX ATC'23) as its
    /// simulator scores it: the fragmentation growth turned into the integer
    /// `int(100 x sigmoid(-growth / 1000))`, highest wins, ties to the first host.
    Fgd,
    /// FGD with the exact (unquantised) fragmentation growth, ties to the first host.
    FgdExact,
    /// Spread: the host with the fewest tasks of the service, then the emptiest.
    Spread,
}

impl Policy {
    /// The policy the engine uses for a service's placement strategy.
    pub fn for_strategy(s: PlacementStrategy) -> Policy {
        match s {
            PlacementStrategy::Binpack => Policy::Gpushare,
            PlacementStrategy::Spread => Policy::Spread,
        }
    }
}

impl Scorer for Policy {
    fn name(&self) -> &'static str {
        match self {
            Policy::Gpushare => "gpushare",
            Policy::Fgd => "fgd",
            Policy::FgdExact => "fgd-exact",
            Policy::Spread => "spread",
        }
    }

    fn score(&self, c: &Candidate<'_>) -> f64 {
        match self {
            Policy::Gpushare => gpushare(c),
            Policy::Fgd => fgd(c, false),
            Policy::FgdExact => fgd(c, true),
            Policy::Spread => spread(c),
        }
    }

    fn scarcity_weight(&self) -> f64 {
        match self {
            Policy::Gpushare => SCARCITY_WEIGHT,
            _ => 0.0,
        }
    }
}

/// FGD's score: the growth of the host's fragmentation; CPU-only typical pods
/// count all free GPU capacity as fragmented (the simulator's XL/XR cases).
fn fgd(c: &Candidate<'_>, exact: bool) -> f64 {
    let (h, expect) = (c.host, c.expect);
    let growth = frag_of(
        &expect.groups_fgd,
        h.model,
        h.mps_ok,
        c.after,
        c.cpu_after,
        c.memory_after,
        false,
    ) - h.frag_fgd
        + expect.fgd_cpu_only * (c.gpu_free_after - h.gpu_milli_free());
    if exact {
        growth
    } else {
        // The simulator's integer node score (higher is better there).
        -(100.0 / (1.0 + (growth / 1000.0).exp())).floor()
    }
}

fn gpushare(c: &Candidate<'_>) -> f64 {
    let (h, n, expect) = (c.host, c.need, c.expect);
    let gpu_total = h.gpu_milli_total().max(1.0);
    // Fragmentation gradient (with host memory in the fit test) ...
    let frag = frag_of(
        &expect.groups,
        h.model,
        h.mps_ok,
        c.after,
        c.cpu_after,
        c.memory_after,
        true,
    );
    let delta = frag - h.frag;
    let cpu_per_milli = expect.cpu_per_milli;
    // ... plus the growth of GPU capacity stranded by the host's CPU: GPUs
    // whose share of the host's free CPU is below what the expected tasks
    // need per GPU can be used by nobody ...
    let strand = |gpu_free: f64, cpu_free: i64| {
        if cpu_per_milli > 0.0 {
            (gpu_free - cpu_free.max(0) as f64 / cpu_per_milli).max(0.0)
        } else {
            0.0
        }
    };
    let stranded = strand(c.gpu_free_after, c.cpu_after) - strand(h.gpu_milli_free(), h.cpu_free);
    // ... plus the plan: taking a shared GPU off its planned patterns ...
    let off_plan = match n.gpu {
        GpuNeed::Mps { memory_mib, .. } => c
            .set
            .iter()
            .map(|&g| off_plan(expect, &h.gpus[usize::from(g)], memory_mib))
            .sum(),
        _ => 0.0,
    };
    // ... and a small packing tie-break: the fuller GPU, then the fuller host.
    PLAN_WEIGHT * off_plan
        + delta
        + STRAND_WEIGHT * stranded
        + PACK_WEIGHT * (c.chosen_free_after + c.gpu_free_after / gpu_total)
}

/// 1 when putting a task of `memory_mib` on `g` takes it off the plan (its
/// tasks would no longer be part of any planned pattern), else 0. GPUs whose
/// tasks are unknown, and sizes the plan does not know, are never off plan.
fn off_plan(expect: &Expect, g: &GpuState, memory_mib: u64) -> f64 {
    let Some((_, plan)) = expect.plans.iter().find(|(m, _)| *m == g.memory_mib) else {
        return 0.0;
    };
    if plan.is_empty() || g.mode == GpuMode::Idle {
        return 0.0;
    }
    let size = share(memory_mib, g.memory_mib);
    match g.held {
        Some(h) if plan.knows(size) && plan.on_plan(&h) => match sharing::with(&h, size) {
            Some(next) if plan.on_plan(&next) => 0.0,
            _ => 1.0,
        },
        _ => 0.0,
    }
}

fn spread(c: &Candidate<'_>) -> f64 {
    let same = if c.host.services().contains(&c.need.service) {
        1.0
    } else {
        0.0
    };
    same * 1e9 + f64::from(c.host.tasks) * 1e6 - c.chosen_free_after
}
