//! Planned GPU-sharing patterns: how the expected MPS task sizes would share
//! GPUs in a good offline packing, used online to keep each shared GPU on a
//! path to one of those patterns.
//!
//! Sizes are thousandths of one GPU. The plan packs the expected multiset of
//! sizes largest first: each GPU starts with the largest size left and is
//! completed with the subset of the remaining sizes that fills it the most
//! (bounded subset-sum), and the same pattern is repeated while the counts
//! last. Online, a shared GPU whose tasks plus a new one still form part of
//! a planned pattern is "on plan"; gpushare's policy avoids taking a GPU off
//! plan while another choice exists (see `policies.rs`).

use super::fill::subset_sum;
use super::need::milli_of;
use std::collections::HashSet;

/// At most this many tasks per GPU are tracked (more: the GPU is off plan).
pub const MAX_HELD: usize = 8;

/// A multiset of sizes on one GPU, sorted largest first, zero-padded.
pub type Held = [u16; MAX_HELD];

/// An MPS task's share of a GPU as the sharing plan counts it (1..=999).
pub fn share(memory_mib: u64, gpu_memory_mib: u64) -> u16 {
    milli_of(memory_mib, gpu_memory_mib).clamp(1, 999) as u16
}

/// `held` with `size` added, or `None` when it is full.
pub fn with(held: &Held, size: u16) -> Option<Held> {
    let len = held.iter().take_while(|&&s| s > 0).count();
    if len >= MAX_HELD || size == 0 {
        return None;
    }
    let mut out = *held;
    out[len] = size;
    out[..=len].sort_unstable_by(|a, b| b.cmp(a));
    Some(out)
}

/// Every sub-multiset of the planned patterns (the GPU states that are on plan).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharingPlan {
    on_plan: HashSet<Held>,
    sizes: HashSet<u16>,
}

impl SharingPlan {
    /// Plan the expected sizes: `(size in thousandths, expected count)`.
    pub fn new(expected: &[(u16, u32)]) -> SharingPlan {
        let mut plan = SharingPlan::default();
        for (pattern, _) in patterns(expected) {
            plan.add_subsets(&pattern);
        }
        for &(s, c) in expected {
            if s > 0 && s < 1000 && c > 0 {
                plan.sizes.insert(s);
            }
        }
        plan
    }

    pub fn is_empty(&self) -> bool {
        self.on_plan.is_empty()
    }

    /// Whether `size` is one the plan knows.
    pub fn knows(&self, size: u16) -> bool {
        self.sizes.contains(&size)
    }

    /// Whether a GPU holding `held` is on plan.
    pub fn on_plan(&self, held: &Held) -> bool {
        self.on_plan.contains(held)
    }

    fn add_subsets(&mut self, pattern: &[u16]) {
        let n = pattern.len().min(MAX_HELD);
        for mask in 0u32..(1 << n) {
            let mut h: Held = [0; MAX_HELD];
            let mut k = 0;
            for (i, &s) in pattern.iter().take(n).enumerate() {
                if mask & (1 << i) != 0 {
                    h[k] = s;
                    k += 1;
                }
            }
            h[..k].sort_unstable_by(|a, b| b.cmp(a));
            self.on_plan.insert(h);
        }
    }
}

/// The offline packing of `expected` as (pattern, times used), largest first.
pub fn patterns(expected: &[(u16, u32)]) -> Vec<(Vec<u16>, u32)> {
    // Remaining count per size, largest size first.
    let mut left: Vec<(u16, u32)> = expected
        .iter()
        .copied()
        .filter(|&(s, c)| s > 0 && s < 1000 && c > 0)
        .collect();
    left.sort_unstable_by_key(|&(s, _)| std::cmp::Reverse(s));
    let mut merged: Vec<(u16, u32)> = Vec::new();
    for (s, c) in left {
        match merged.last_mut() {
            Some(m) if m.0 == s => m.1 += c,
            _ => merged.push((s, c)),
        }
    }
    let mut left = merged;
    let mut out = Vec::new();
    while let Some(first) = left.iter().position(|&(_, c)| c > 0) {
        let big = left[first].0;
        left[first].1 -= 1;
        let mut pattern = vec![big];
        pattern.extend(fill(&left, 1000 - usize::from(big)));
        left[first].1 += 1;
        // Repeat the pattern while every size in it lasts.
        let times = left
            .iter()
            .filter_map(|&(s, c)| {
                let need = pattern.iter().filter(|&&p| p == s).count() as u32;
                (need > 0).then(|| c / need)
            })
            .min()
            .unwrap_or(0)
            .max(1);
        for (s, c) in left.iter_mut() {
            let need = pattern.iter().filter(|&&p| p == *s).count() as u32;
            *c = c.saturating_sub(need * times);
        }
        out.push((pattern, times));
    }
    out
}

/// The multiset of sizes from `left` (size, count) with the largest total at
/// most `cap` (the batch's bounded subset-sum, [`subset_sum`]).
fn fill(left: &[(u16, u32)], cap: usize) -> Vec<u16> {
    let mut sizes: Vec<(usize, usize)> = left
        .iter()
        .filter(|&&(_, c)| c > 0)
        .map(|&(s, c)| (usize::from(s), c as usize))
        .collect();
    sizes.sort_unstable();
    let mut out = Vec::new();
    for (size, n) in subset_sum(&sizes, cap).into_iter().rev() {
        out.extend(std::iter::repeat_n(size as u16, n));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_first_completion_by_hand() {
        // 2 x 650, 2 x 320, 3 x 470, 1 x 160:
        // 650 + best of {650, 470 x3, 320 x2, 160} within 350 -> 320 (twice: 650+320 x2);
        // then 470 + best within 530 of {470 x2, 160} -> 470; then 470 + 160.
        let p = patterns(&[(650, 2), (320, 2), (470, 3), (160, 1)]);
        assert_eq!(
            p,
            vec![
                (vec![650, 320], 2),
                (vec![470, 470], 1),
                (vec![470, 160], 1)
            ]
        );
    }

    #[test]
    fn on_plan_states_are_the_sub_multisets() {
        let plan = SharingPlan::new(&[(650, 1), (320, 1)]);
        let h = |v: &[u16]| {
            let mut h = [0u16; MAX_HELD];
            h[..v.len()].copy_from_slice(v);
            h
        };
        assert!(plan.on_plan(&h(&[])));
        assert!(plan.on_plan(&h(&[650])));
        assert!(plan.on_plan(&h(&[650, 320])));
        assert!(
            !plan.on_plan(&h(&[320, 320])),
            "two 320s were never planned together"
        );
        assert_eq!(with(&h(&[320]), 650), Some(h(&[650, 320])));
        assert!(plan.knows(320) && !plan.knows(230));
    }
}
