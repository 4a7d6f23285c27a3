//! Choosing the host and GPUs of one task ([`Cluster::choose`]): every feasible
//! candidate is scored by a [`Scorer`]. Feasibility is the cluster's and the
//! same for every scorer, so policies differ in their preferences alone; the
//! planner's policies are [`super::Policy`], and the benchmark's baselines
//! implement [`Scorer`] in `gpushare-bench`.

use super::expect::Expect;
use super::fgd::GpuView;
use super::need::{GpuNeed, Need};
use super::sharing::Held;
use super::state::{host_ok, mps_fits, views, Cluster, ClusterHost, Memo, Set, MAX_SET};
use crate::model::GpuMode;
use rand::Rng;

/// A placement policy's preference among the feasible candidates.
pub trait Scorer {
    /// Tells scorers apart in the cluster's memo of per-host scores: two
    /// scorers of one name must score alike.
    fn name(&self) -> &'static str;

    /// The score of placing the task on the candidate; lower is better. It
    /// must depend on the candidate alone: the cluster keeps it until the
    /// host changes.
    fn score(&self, c: &Candidate<'_>) -> f64;

    /// How the host is picked among the feasible ones.
    fn pick(&self) -> Pick {
        Pick::Lowest
    }

    /// Weight of the scarcity price of a host's GPU model, added to its score
    /// per GPU thousandth taken (0: none). The price moves with the load of
    /// every other host of the model, so it cannot be part of [`Scorer::score`].
    fn scarcity_weight(&self) -> f64 {
        0.0
    }
}

/// How [`Cluster::choose`] picks a host among the feasible ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The lowest score; ties to the first host in order, and on a host to
    /// the first GPU.
    Lowest,
    /// The first feasible host and its first candidate GPUs; nothing is scored.
    First,
    /// A uniformly random feasible host, drawn from the cluster's seeded rng,
    /// and its first candidate GPUs; nothing is scored.
    Random,
}

/// One way to place a task: a host and the GPUs it would take there, with the
/// host's state after placing, as every score reads it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub host: &'a ClusterHost,
    pub need: &'a Need,
    /// Positions in `host.gpus` of the GPUs the task would take.
    pub set: &'a [u8],
    /// The host's GPUs after placing, at the positions of `host.gpus`.
    pub after: &'a [GpuView],
    pub cpu_after: i64,
    pub memory_after: i64,
    /// Free GPU thousandths after placing: on the host, and on the GPUs taken.
    pub gpu_free_after: f64,
    pub chosen_free_after: f64,
    pub(super) expect: &'a Expect,
}

/// Where [`Cluster::choose`] put a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Index of the host in the cluster.
    pub host: usize,
    /// GPU indices (as the host reports them).
    pub gpus: Vec<u32>,
}

impl Cluster {
    /// Choose where `n` goes under `scorer` without changing anything (a
    /// random pick draws from the cluster's seeded rng). Ties go to the
    /// first host in order, and on a host to the first GPU.
    pub fn choose<S: Scorer>(&mut self, n: &Need, scorer: S) -> Option<Placed> {
        let mut best: Option<(f64, usize, Set)> = None;
        let mut seen_feasible = 0u32;
        let pick = scorer.pick();
        let weight = scorer.scarcity_weight();
        let prices = if weight > 0.0 && n.gpu != GpuNeed::None {
            self.model_prices()
        } else {
            Vec::new()
        };
        let id = self.scorer_id(scorer.name());
        let expect = &self.expect;
        let shape = n.shape as usize;
        if self.memo.len() <= shape {
            self.memo.resize(shape + 1, Vec::new());
        }
        let pool_hosts = self
            .by_pool
            .get(n.pool as usize)
            .map_or(&[][..], Vec::as_slice);
        let memo = &mut self.memo[shape];
        if memo.len() < pool_hosts.len() {
            memo.resize(
                pool_hosts.len(),
                Memo {
                    version: 0,
                    scorer: id,
                    score: f64::NAN,
                    set: Set::EMPTY,
                },
            );
        }
        for (&hi, m) in pool_hosts.iter().zip(memo.iter_mut()) {
            let h = &self.hosts[hi];
            let (score, set) =
                if m.version == self.versions[hi] && m.scorer == id && pick != Pick::Random {
                    (m.score, m.set)
                } else {
                    let (score, set) = if host_ok(h, n) {
                        best_on_host(expect, h, n, &scorer).unwrap_or((f64::NAN, Set::EMPTY))
                    } else {
                        (f64::NAN, Set::EMPTY)
                    };
                    *m = Memo {
                        version: self.versions[hi],
                        scorer: id,
                        score,
                        set,
                    };
                    (score, set)
                };
            if score.is_nan() {
                continue;
            }
            let score = match prices.get(h.model as usize) {
                Some(&p) if p > 0.0 => {
                    let mib = h.gpus.first().map_or(1, |g| g.memory_mib);
                    score + weight * p * n.gpu_milli(mib) as f64
                }
                _ => score,
            };
            match pick {
                Pick::First => {
                    best = Some((score, hi, set));
                    break;
                }
                Pick::Random => {
                    seen_feasible += 1;
                    if self.rng.gen_range(0..seen_feasible) == 0 {
                        best = Some((score, hi, set));
                    }
                }
                Pick::Lowest => {
                    if best.as_ref().is_none_or(|(b, _, _)| score < *b - 1e-9) {
                        best = Some((score, hi, set));
                    }
                }
            }
        }
        best.map(|(_, hi, set)| Placed {
            host: hi,
            gpus: set
                .as_slice()
                .iter()
                .map(|&g| self.hosts[hi].gpus[usize::from(g)].index)
                .collect(),
        })
    }

    /// The scarcity price per GPU model id: for each set of models that some
    /// expected demand is limited to, that demand's share divided by the set's
    /// share of the free GPU capacity, summed over the sets holding the model.
    /// Free capacity on a model others depend on is worth keeping for them.
    /// Empty when no expected demand is limited to models.
    fn model_prices(&self) -> Vec<f64> {
        if self.expect.model_sets.is_empty() {
            return Vec::new();
        }
        let total: f64 = self.model_free.iter().sum();
        let mut prices = vec![0.0; self.model_free.len()];
        if total <= 0.0 {
            return prices;
        }
        for (ms, w) in &self.expect.model_sets {
            let free: f64 = ms
                .iter()
                .filter_map(|&m| self.model_free.get(m as usize))
                .sum();
            let p = w * total / free.max(1.0);
            for &m in ms {
                if let Some(x) = prices.get_mut(m as usize) {
                    *x += p;
                }
            }
        }
        prices
    }

    /// Choose and commit. `None` when nothing fits (nothing changes).
    pub fn place_one<S: Scorer>(&mut self, n: &Need, scorer: S) -> Option<Placed> {
        let p = self.choose(n, scorer)?;
        self.commit(p.host, n, &p.gpus);
        Some(p)
    }
}

/// The best candidate GPU set on one host (`None`: none fits).
fn best_on_host<S: Scorer>(
    expect: &Expect,
    h: &ClusterHost,
    n: &Need,
    scorer: &S,
) -> Option<(f64, Set)> {
    let mut sets: [Set; MAX_SET] = [Set::EMPTY; MAX_SET];
    let mut nsets = 0;
    match n.gpu {
        GpuNeed::None => nsets = 1,
        GpuNeed::Whole(k) => {
            let mut s = Set::EMPTY;
            for (gi, g) in h.gpus.iter().enumerate() {
                if s.len as u32 == k {
                    break;
                }
                if g.mode == GpuMode::Idle {
                    s.push(gi);
                }
            }
            if s.len as u32 == k {
                sets[0] = s;
                nsets = 1;
            }
        }
        GpuNeed::Mps {
            memory_mib,
            compute,
            clients,
        } => {
            // One candidate per distinct GPU load.
            let mut seen: [(u64, u32, Option<Held>, u32); MAX_SET] = [(0, 0, None, 0); MAX_SET];
            for (gi, g) in h.gpus.iter().enumerate() {
                if nsets < MAX_SET && mps_fits(g, memory_mib, compute, clients) {
                    let key = (g.used_memory_mib, g.used_compute, g.held, g.clients);
                    if !seen[..nsets].contains(&key) {
                        seen[nsets] = key;
                        sets[nsets].push(gi);
                        nsets += 1;
                    }
                }
            }
        }
    }
    if nsets == 0 {
        return None;
    }
    if scorer.pick() != Pick::Lowest {
        return Some((0.0, sets[0]));
    }
    let mut best: Option<(f64, Set)> = None;
    for set in &sets[..nsets] {
        let s = score(expect, h, n, set.as_slice(), scorer);
        if best.as_ref().is_none_or(|(b, _)| s < *b - 1e-9) {
            best = Some((s, *set));
        }
    }
    best
}

/// `scorer`'s score of placing `n` on GPUs `set` of `h`.
fn score<S: Scorer>(expect: &Expect, h: &ClusterHost, n: &Need, set: &[u8], scorer: &S) -> f64 {
    let mut buf = [GpuView::ZERO; MAX_SET];
    let mut heap: Vec<GpuView>;
    let gv: &mut [GpuView] = if h.gpus.len() <= MAX_SET {
        for (b, g) in buf.iter_mut().zip(&h.gpus) {
            *b = g.view();
        }
        &mut buf[..h.gpus.len()]
    } else {
        heap = views(&h.gpus);
        &mut heap[..]
    };
    for &g in set {
        match n.gpu {
            GpuNeed::Whole(_) => gv[usize::from(g)] = GpuView::ZERO,
            GpuNeed::Mps {
                memory_mib,
                compute,
                ..
            } => {
                let total = h.gpus[usize::from(g)].memory_mib.max(1);
                let v = &mut gv[usize::from(g)];
                v.free_mem -= memory_mib;
                v.free_compute -= compute;
                v.idle = false;
                v.milli = 1000.0 * v.free_mem as f64 / total as f64;
            }
            GpuNeed::None => {}
        }
    }
    let gv: &[GpuView] = gv;
    let c = Candidate {
        host: h,
        need: n,
        set,
        after: gv,
        cpu_after: h.cpu_free - i64::from(n.cpu),
        memory_after: h.memory_free - n.memory_mib as i64,
        gpu_free_after: gv.iter().map(|g| g.milli).sum(),
        chosen_free_after: set.iter().map(|&g| gv[usize::from(g)].milli).sum(),
        expect,
    };
    scorer.score(&c)
}
