//! Bin completion for batch placement: which of the remaining MPS tasks fill
//! what is left of a GPU best (a bounded subset-sum over their GPU memory).

use super::need::{GpuNeed, Need};
use std::collections::BTreeMap;

/// Largest bitset (in units) of the subset-sum that completes an opened GPU.
pub(super) const FILL_UNITS: u64 = 4096;

/// The tasks among `candidates` whose GPU memory sums closest to `gap` without
/// going over. Sizes are rounded up to units of `gap / 4096` (so a chosen set
/// always fits); among sets of the best sum, one that leaves the smallest sizes
/// out (small, flexible tasks are kept for later gaps), and among tasks of one
/// size those first in `candidates`. Returns the chosen tasks, smallest first.
pub(super) fn best_fill(needs: &[Need], candidates: &[usize], gap: u64) -> Vec<usize> {
    if gap == 0 {
        return Vec::new();
    }
    let unit = gap.div_ceil(FILL_UNITS).max(1);
    let cap = (gap / unit) as usize;
    // Candidates grouped by size in units.
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &j in candidates {
        let GpuNeed::Mps { memory_mib, .. } = needs[j].gpu else {
            continue;
        };
        let size = memory_mib.div_ceil(unit) as usize;
        if size == 0 || size > cap {
            continue;
        }
        groups.entry(size).or_default().push(j);
    }
    let sizes: Vec<(usize, usize)> = groups.iter().map(|(&s, js)| (s, js.len())).collect();
    let take = subset_sum(&sizes, cap);
    let mut out = Vec::new();
    for (size, count) in take {
        if let Some(js) = groups.get(&size) {
            out.extend(js.iter().take(count));
        }
    }
    out
}

/// Bounded subset-sum: how many of each `(size, count)` (sizes ascending) to
/// take for the largest total at most `cap`. Among sets of that total, one
/// that leaves the smallest sizes out (they are kept for later gaps).
/// Returns size -> how many.
pub(super) fn subset_sum(sizes: &[(usize, usize)], cap: usize) -> BTreeMap<usize, usize> {
    if sizes.is_empty() || cap == 0 {
        return BTreeMap::new();
    }
    // Bounded subset-sum by binary splitting, keeping each layer for backtracking.
    let words = cap / 64 + 1;
    let mut layers: Vec<(usize, usize, Vec<u64>)> = Vec::new(); // (size, copies, reach after)
    let mut reach = vec![0u64; words];
    reach[0] = 1;
    // Largest sizes in the first layers: backtracking skips a layer whenever its
    // sum is reachable without it, so small, flexible items are kept for later gaps.
    for &(size, count) in sizes.iter().rev() {
        if size == 0 {
            continue;
        }
        let mut left = count.min(cap / size);
        let mut k = 1;
        while left > 0 {
            let c = k.min(left);
            left -= c;
            k *= 2;
            let shift = size * c;
            if shift > cap {
                break;
            }
            let mut next = reach.clone();
            or_shifted(&mut next, &reach, shift);
            mask(&mut next, cap);
            layers.push((size, c, next.clone()));
            reach = next;
        }
    }
    let Some(mut s) = (0..=cap).rev().find(|&s| bit(&reach, s)) else {
        return BTreeMap::new();
    };
    let mut take: BTreeMap<usize, usize> = BTreeMap::new();
    for li in (0..layers.len()).rev() {
        if s == 0 {
            break;
        }
        let prev_has = li > 0 && bit(&layers[li - 1].2, s);
        if !prev_has {
            let (size, c, _) = layers[li];
            *take.entry(size).or_default() += c;
            s -= size * c;
        }
    }
    take
}

fn bit(v: &[u64], i: usize) -> bool {
    v[i / 64] >> (i % 64) & 1 == 1
}

fn or_shifted(dst: &mut [u64], src: &[u64], shift: usize) {
    let (w, b) = (shift / 64, shift % 64);
    for i in (w..dst.len()).rev() {
        let lo = src[i - w] << b;
        let hi = if b > 0 && i > w {
            src[i - w - 1] >> (64 - b)
        } else {
            0
        };
        dst[i] |= lo | hi;
    }
}

fn mask(v: &mut [u64], cap: usize) {
    let last = cap / 64;
    let keep = cap % 64;
    if keep < 63 {
        v[last] &= (1u64 << (keep + 1)) - 1;
    }
    for w in v.iter_mut().skip(last + 1) {
        *w = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PlacementStrategy, TaskGpu, TaskShape};
    use crate::placement::input::Request;
    use crate::placement::need::Names;

    fn needs(sizes: &[u64]) -> Vec<Need> {
        let mut names = Names::default();
        sizes
            .iter()
            .map(|&m| {
                names.compile(&Request {
                    host_ports: Vec::new(),
                    key: String::new(),
                    service: "s".into(),
                    pool: "p".into(),
                    shape: TaskShape {
                        cpu_units: 0,
                        memory_mib: 0,
                        gpu: TaskGpu::Mps {
                            clients: 1,
                            memory_mib: m,
                            compute_percent: 0,
                            capped: true,
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

    #[test]
    fn fills_the_gap_exactly_and_keeps_the_small_sizes() {
        // Gap 500 from 300, 250, 250, 200, 100: 300 + 200 and 250 + 250 both fill
        // it; the latter leaves the smaller sizes (200, 100) for later gaps.
        let n = needs(&[300, 250, 250, 200, 100]);
        assert_eq!(best_fill(&n, &[0, 1, 2, 3, 4], 500), vec![1, 2]);
        // Without the second 250: 300 + 200.
        assert_eq!(best_fill(&n, &[0, 1, 3, 4], 500), vec![3, 0]);
        // Nothing sums to 500 from 300 and 250: the closest below is 300.
        assert_eq!(best_fill(&n, &[0, 1], 500), vec![0]);
        // Tasks of one size are taken in candidate order; none fits a gap of 99.
        assert_eq!(best_fill(&n, &[2, 1, 0], 250), vec![2]);
        assert!(best_fill(&n, &[0, 1, 2, 3, 4], 99).is_empty());
    }

    #[test]
    fn large_gaps_round_sizes_up_so_a_chosen_set_always_fits() {
        // Gap 8193 MiB: units of 3 MiB, 2731 of them. 4097 and 4096 MiB both round
        // up to 1366 units, 4000 to 1334. Two of 1366 make 2732 > 2731, so 4096 +
        // 4097 (exactly 8193) is lost to rounding; the best is 1366 + 1334 = 2700
        // units: the first 1366-unit task (0) and 4000 (3), 8097 MiB.
        let n = needs(&[4097, 4097, 4096, 4000]);
        let got = best_fill(&n, &[0, 1, 2, 3], 8193);
        let sum: u64 = got.iter().map(|&j| [4097, 4097, 4096, 4000][j]).sum();
        assert!(sum <= 8193, "{got:?}");
        assert_eq!(got, vec![3, 0]);
    }
}
