//! The policies the benchmark compares: the engine's own (gpushare, FGD as its
//! simulator scores it, spread) and the baselines, which exist for the
//! comparison alone and so live here, behind the engine's [`Scorer`]: every
//! policy is measured through the engine's feasibility rules.

use gpushare_core::model::GpuMode;
use gpushare_core::placement::{self, Candidate, GpuNeed, Pick, Scorer};

/// A placement policy of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Policy {
    /// The engine's default for `binpack` ([`placement::Policy::Gpushare`]).
    Gpushare,
    /// FGD as its simulator scores it ([`placement::Policy::Fgd`]).
    Fgd,
    /// FGD with the exact fragmentation growth ([`placement::Policy::FgdExact`]).
    FgdExact,
    /// Least free CPU + GPU left on the host after placing; best-fit GPU inside.
    BestFit,
    /// Partly used GPU first (least free first), then a free GPU on a used host, then an empty host.
    GpuPacking,
    /// Smallest dot product of the host's free (CPU, GPU) vector with the request.
    DotProduct,
    /// ECS-style binpack on GPU memory: the host with the least GPU memory left.
    EcsBinpack,
    /// A uniformly random feasible host (seeded).
    Random,
    /// The first feasible host in order.
    FirstFit,
    /// The engine's `spread` ([`placement::Policy::Spread`]).
    Spread,
}

impl Policy {
    /// Every policy the benchmark compares, in table order.
    pub const BENCHMARKED: [Policy; 8] = [
        Policy::Random,
        Policy::DotProduct,
        Policy::GpuPacking,
        Policy::BestFit,
        Policy::EcsBinpack,
        Policy::Fgd,
        Policy::FgdExact,
        Policy::Gpushare,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Gpushare => "gpushare",
            Policy::Fgd => "fgd",
            Policy::FgdExact => "fgd-exact",
            Policy::BestFit => "bestfit",
            Policy::GpuPacking => "packing",
            Policy::DotProduct => "dotprod",
            Policy::EcsBinpack => "ecs-binpack",
            Policy::Random => "random",
            Policy::FirstFit => "firstfit",
            Policy::Spread => "spread",
        }
    }

    pub fn from_name(s: &str) -> Option<Policy> {
        [
            Policy::Gpushare,
            Policy::Fgd,
            Policy::FgdExact,
            Policy::BestFit,
            Policy::GpuPacking,
            Policy::DotProduct,
            Policy::EcsBinpack,
            Policy::Random,
            Policy::FirstFit,
            Policy::Spread,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }

    /// The engine's policy, when this is one of them.
    fn engine(self) -> Option<placement::Policy> {
        match self {
            Policy::Gpushare => Some(placement::Policy::Gpushare),
            Policy::Fgd => Some(placement::Policy::Fgd),
            Policy::FgdExact => Some(placement::Policy::FgdExact),
            Policy::Spread => Some(placement::Policy::Spread),
            _ => None,
        }
    }
}

impl Scorer for Policy {
    fn name(&self) -> &'static str {
        Policy::name(*self)
    }

    fn score(&self, c: &Candidate<'_>) -> f64 {
        if let Some(p) = self.engine() {
            return p.score(c);
        }
        match self {
            Policy::BestFit => best_fit(c),
            Policy::GpuPacking => gpu_packing(c),
            Policy::DotProduct => dot_product(c),
            Policy::EcsBinpack => ecs_binpack(c),
            _ => 0.0,
        }
    }

    fn pick(&self) -> Pick {
        match self {
            Policy::Random => Pick::Random,
            Policy::FirstFit => Pick::First,
            p => p.engine().map_or(Pick::Lowest, |e| e.pick()),
        }
    }

    fn scarcity_weight(&self) -> f64 {
        self.engine().map_or(0.0, |e| e.scarcity_weight())
    }
}

fn best_fit(c: &Candidate<'_>) -> f64 {
    let h = c.host;
    let gpu_total = h.gpu_milli_total().max(1.0);
    c.cpu_after as f64 / f64::from(h.cpu_total.max(1))
        + c.gpu_free_after / gpu_total
        + 1e-6 * c.chosen_free_after
}

fn gpu_packing(c: &Candidate<'_>) -> f64 {
    let h = c.host;
    let used_host = !h.is_empty();
    let tier = match c.need.gpu {
        GpuNeed::Mps { .. } => {
            if c.set
                .iter()
                .any(|&g| h.gpus[usize::from(g)].mode == GpuMode::Mps)
            {
                0.0
            } else if used_host {
                1.0
            } else {
                2.0
            }
        }
        _ => {
            if used_host {
                1.0
            } else {
                2.0
            }
        }
    };
    tier * 1e7 + c.chosen_free_after * 1e3 + c.gpu_free_after
}

fn dot_product(c: &Candidate<'_>) -> f64 {
    let h = c.host;
    let gpu_total = h.gpu_milli_total().max(1.0);
    let cpu_t = f64::from(h.cpu_total.max(1));
    let req_gpu = match c.need.gpu {
        GpuNeed::None => 0.0,
        _ => h.gpu_milli_free() - c.gpu_free_after,
    };
    (h.cpu_free as f64 / cpu_t) * (f64::from(c.need.cpu) / cpu_t)
        + (h.gpu_milli_free() / gpu_total) * (req_gpu / gpu_total)
        + 1e-6 * c.chosen_free_after
}

fn ecs_binpack(c: &Candidate<'_>) -> f64 {
    let mem_left: u64 = c.after.iter().map(|g| g.free_mem).sum();
    mem_left as f64 + 1e-3 * c.chosen_free_after + 1e-9 * c.cpu_after as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_has_its_own_name_and_the_engines_keep_theirs() {
        // The cluster's memo tells scorers apart by name: a name shared by two
        // policies would hand one the other's cached scores.
        let all: Vec<Policy> = [Policy::FirstFit, Policy::Spread]
            .into_iter()
            .chain(Policy::BENCHMARKED)
            .collect();
        for (i, p) in all.iter().enumerate() {
            assert_eq!(Policy::from_name(p.name()), Some(*p));
            assert!(all[..i].iter().all(|q| q.name() != p.name()), "{p:?}");
            if let Some(e) = p.engine() {
                assert_eq!(Scorer::name(&e), p.name());
            }
        }
    }
}
