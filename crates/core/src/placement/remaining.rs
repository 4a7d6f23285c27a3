//! The batch's index of the MPS tasks not placed yet that may complete a GPU
//! (`batch.rs`), so that completing a GPU looks at a few tasks per shape instead
//! of every task left (which made a large batch quadratic).

use super::fill::FILL_UNITS;
use super::need::{GpuNeed, Need};

/// The tasks of one shape (so every host test gives all of them one answer),
/// in placement order.
struct Group {
    memory_mib: u64,
    tasks: Vec<usize>,
    /// Tasks before this position are placed or passed (skipped from now on).
    start: usize,
}

/// The MPS tasks under `binpack` that may complete a GPU, per pool and shape.
pub(super) struct Remaining {
    /// Per request: its position in the placement order.
    rank: Vec<usize>,
    /// Per pool id: the groups of its shapes.
    pools: Vec<Vec<Group>>,
}

impl Remaining {
    /// `order`: the placement order of the requests; `fills(j)`: whether request
    /// `j` may complete a GPU.
    pub(super) fn new(needs: &[Need], order: &[usize], fills: impl Fn(usize) -> bool) -> Self {
        let mut rank = vec![0; needs.len()];
        let mut pools: Vec<Vec<Group>> = Vec::new();
        // (pool, shape) -> group position in its pool.
        let mut at: std::collections::HashMap<(u32, u32), usize> = Default::default();
        for (pos, &j) in order.iter().enumerate() {
            rank[j] = pos;
            let n = &needs[j];
            let GpuNeed::Mps { memory_mib, .. } = n.gpu else {
                continue;
            };
            if !fills(j) {
                continue;
            }
            let pool = n.pool as usize;
            if pools.len() <= pool {
                pools.resize_with(pool + 1, Vec::new);
            }
            let groups = &mut pools[pool];
            let g = *at.entry((n.pool, n.shape)).or_insert_with(|| {
                groups.push(Group {
                    memory_mib,
                    tasks: Vec::new(),
                    start: 0,
                });
                groups.len() - 1
            });
            groups[g].tasks.push(j);
        }
        Remaining { rank, pools }
    }

    /// The candidates to complete a GPU with `gap` MiB free on a host of `pool`,
    /// in placement order: the tasks after position `pos` not `done`, of at most
    /// `gap` MiB, that pass `test` (a function of the task's shape). Of each
    /// shape only as many as could fill the gap (what `fill::best_fill` may
    /// take of one size), so the best fill is the one of every such task.
    /// `pos` never decreases from one call to the next (tasks before it are
    /// passed for good).
    pub(super) fn candidates(
        &mut self,
        needs: &[Need],
        pool: u32,
        gap: u64,
        pos: usize,
        done: impl Fn(usize) -> bool,
        test: impl Fn(&Need) -> bool,
    ) -> Vec<usize> {
        let mut out = Vec::new();
        if gap == 0 {
            return out;
        }
        let unit = gap.div_ceil(FILL_UNITS).max(1);
        let cap = gap / unit;
        let rank = &self.rank;
        let left = |j: usize| rank[j] > pos && !done(j);
        let Some(groups) = self.pools.get_mut(pool as usize) else {
            return out;
        };
        for g in groups.iter_mut().filter(|g| g.memory_mib <= gap) {
            while g.start < g.tasks.len() && !left(g.tasks[g.start]) {
                g.start += 1;
            }
            let Some(&first) = g.tasks.get(g.start) else {
                continue;
            };
            let size = g.memory_mib.div_ceil(unit);
            if size == 0 || size > cap || !test(&needs[first]) {
                continue;
            }
            let most = (cap / size) as usize;
            out.extend(
                g.tasks[g.start..]
                    .iter()
                    .copied()
                    .filter(|&j| left(j))
                    .take(most),
            );
        }
        out.sort_by_key(|&j| rank[j]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PlacementStrategy, TaskGpu, TaskShape};
    use crate::placement::fill::best_fill;
    use crate::placement::input::Request;
    use crate::placement::need::Names;
    use proptest::prelude::*;

    /// MPS needs of (pool, service, GPU memory, CPU).
    fn needs(specs: &[(u8, u8, u64, u32)]) -> Vec<Need> {
        let mut names = Names::default();
        specs
            .iter()
            .map(|&(pool, service, memory_mib, cpu_units)| {
                names.compile(&Request {
                    host_ports: Vec::new(),
                    key: String::new(),
                    service: format!("s{service}"),
                    pool: format!("p{pool}"),
                    shape: TaskShape {
                        cpu_units,
                        memory_mib: 0,
                        gpu: TaskGpu::Mps {
                            clients: 1,
                            memory_mib,
                            compute_percent: 0,
                            capped: false,
                        },
                    },
                    strategy: PlacementStrategy::Binpack,
                    distinct_host: false,
                    instance_types: Vec::new(),
                    gpu_models: Vec::new(),
                    reserve_compute: false,
                })
            })
            .collect()
    }

    proptest! {
        /// The best fill of the index's candidates is the best fill of every task
        /// left that passes the test (what the batch scanned before the index), as
        /// tasks are placed and filled in order.
        #[test]
        fn the_best_fill_of_the_candidates_is_that_of_every_task_left(
            specs in prop::collection::vec((0u8..2, 0u8..4, 1u64..9, 0u32..3), 1..120),
            gaps in prop::collection::vec((1u64..40, 0u8..2, 0u32..3), 1..40),
        ) {
            let specs: Vec<(u8, u8, u64, u32)> =
                specs.into_iter().map(|(p, s, m, c)| (p, s, m * 1000 + u64::from(s) * 7, c)).collect();
            let n = needs(&specs);
            // Largest first, input order breaking ties (as the batch orders them).
            let mut order: Vec<usize> = (0..n.len()).collect();
            order.sort_by_key(|&i| (std::cmp::Reverse(specs[i].2), i));
            let fills = |j: usize| specs[j].1 != 3; // service 3 never fills
            let mut index = Remaining::new(&n, &order, fills);
            let mut done = vec![false; n.len()];
            for (step, &(gap, pool, max_cpu)) in gaps.iter().enumerate() {
                let pos = (step * 3).min(order.len() - 1);
                let gap = gap * 1000;
                let pool_id = n.iter().zip(&specs).find(|(_, s)| s.0 == pool).map(|(x, _)| x.pool);
                let Some(pool_id) = pool_id else { continue };
                let test = |x: &Need| x.cpu <= max_cpu;
                let all: Vec<usize> = order[pos + 1..]
                    .iter()
                    .copied()
                    .filter(|&j| {
                        !done[j] && fills(j) && n[j].pool == pool_id && test(&n[j])
                            && matches!(n[j].gpu, GpuNeed::Mps { memory_mib, .. } if memory_mib <= gap)
                    })
                    .collect();
                let got = index.candidates(&n, pool_id, gap, pos, |j| done[j], test);
                let want = best_fill(&n, &all, gap);
                prop_assert_eq!(best_fill(&n, &got, gap), want.clone());
                for j in want {
                    done[j] = true;
                }
            }
        }
    }
}
