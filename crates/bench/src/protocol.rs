//! The FGD paper's evaluation protocol: sample pods with replacement until their
//! GPU request reaches 1.3 x the cluster, shuffle with a seed, place one at a time
//! (no departures, a pod that does not fit is skipped), and read the unallocated
//! GPU share when the arrived workload crosses 100 % (and the curve 80-130 %).

use crate::policy::Policy;
use crate::trace::{Node, Pod};
use gpushare_core::placement::{self, Cluster, Need, PlacementInput, Typical};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// Sampled GPU request as a multiple of the cluster's GPUs.
pub const OVERSUBSCRIPTION: f64 = 1.3;
/// Curve points: arrived workload in percent of the cluster.
pub const CURVE_FROM: u32 = 80;
pub const CURVE_TO: u32 = 130;

/// Indices of `gpu_requests` drawn uniformly with replacement until their sum
/// reaches `target`, then shuffled: the arrival order of one run.
pub fn sample(gpu_requests: &[u64], target: u64, seed: u64) -> Vec<usize> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    if gpu_requests.is_empty() || gpu_requests.iter().all(|&g| g == 0) {
        return out;
    }
    let mut sum = 0u64;
    while sum < target {
        let i = rng.gen_range(0..gpu_requests.len());
        sum += gpu_requests[i];
        out.push(i);
    }
    out.shuffle(&mut rng);
    out
}

/// How a run's arrival list is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arrival {
    /// The protocol: pods drawn with replacement until their GPU request
    /// reaches the target, then shuffled ([`sample`]).
    #[default]
    Sampled,
    /// The FGD simulator's (`TunePodsByNodeTotalResource` after `SortClusterPods`):
    /// every trace pod once in a seeded random order, then pods drawn with
    /// replacement appended, unshuffled, until the next would pass the target
    /// ([`trace_then_sampled`]). Its headline is read the simulator's way:
    /// [`Accounting::window_100`].
    TraceThenSampled,
}

impl Arrival {
    pub fn name(self) -> &'static str {
        match self {
            Arrival::Sampled => "sampled",
            Arrival::TraceThenSampled => "simulator",
        }
    }
    pub fn from_name(s: &str) -> Option<Arrival> {
        [Arrival::Sampled, Arrival::TraceThenSampled]
            .into_iter()
            .find(|a| a.name() == s)
    }
}

/// The simulator's arrival list: indices `0..n` shuffled with `seed`, then
/// indices drawn uniformly with replacement appended while the total GPU
/// request stays within `target`.
pub fn trace_then_sampled(gpu_requests: &[u64], target: u64, seed: u64) -> Vec<usize> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out: Vec<usize> = (0..gpu_requests.len()).collect();
    out.shuffle(&mut rng);
    if gpu_requests.iter().all(|&g| g == 0) {
        return out;
    }
    let mut sum: u64 = gpu_requests.iter().sum();
    loop {
        let i = rng.gen_range(0..gpu_requests.len());
        if sum + gpu_requests[i] > target {
            return out;
        }
        sum += gpu_requests[i];
        out.push(i);
    }
}

/// Arrival accounting: arrived and allocated GPU thousandths against capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct Accounting {
    capacity: u64,
    arrived: u64,
    allocated: u64,
    next: u32,
    /// (arrived %, unallocated %) at the first pod where arrived >= that percent.
    pub curve: Vec<(u32, f64)>,
    /// Sum and count of unallocated % after each pod whose arrived % rounds to 100.
    window: (f64, u32),
}

impl Accounting {
    pub fn new(capacity_milli: u64) -> Accounting {
        Accounting {
            capacity: capacity_milli.max(1),
            arrived: 0,
            allocated: 0,
            next: CURVE_FROM,
            curve: Vec::new(),
            window: (0.0, 0),
        }
    }

    /// One pod arrived with `gpu_milli`; `placed` says whether it got room.
    pub fn record(&mut self, gpu_milli: u64, placed: bool) {
        self.arrived += gpu_milli;
        if placed {
            self.allocated += gpu_milli;
        }
        while self.next <= CURVE_TO && self.arrived * 100 >= u64::from(self.next) * self.capacity {
            self.curve.push((self.next, self.unallocated_pct()));
            self.next += 1;
        }
        // arrived in [99.5 %, 100.5 %): the pods the simulator's analysis averages.
        if (995 * self.capacity..1005 * self.capacity).contains(&(self.arrived * 1000)) {
            self.window.0 += self.unallocated_pct();
            self.window.1 += 1;
        }
    }

    /// 100 - allocated GPU %, now.
    pub fn unallocated_pct(&self) -> f64 {
        100.0 - 100.0 * self.allocated as f64 / self.capacity as f64
    }

    /// The headline figure: unallocated % when arrived first reached 100 %.
    pub fn at_100(&self) -> Option<f64> {
        self.curve.iter().find(|(p, _)| *p == 100).map(|(_, v)| *v)
    }

    /// The FGD simulator's reading: the mean unallocated % over the pods after
    /// which the arrived workload rounds to 100 % (`merge_alloc_discrete.py`).
    pub fn window_100(&self) -> Option<f64> {
        (self.window.1 > 0).then(|| self.window.0 / f64::from(self.window.1))
    }

    /// Whether the whole curve has been read.
    pub fn done(&self) -> bool {
        self.next > CURVE_TO
    }
}

/// One seed's run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub seed: u64,
    pub unallocated_at_100: Option<f64>,
    pub curve: Vec<(u32, f64)>,
    pub pods: usize,
    pub placed: usize,
    /// Wall-clock seconds of the placement loop.
    pub secs: f64,
    /// CPU seconds of this thread in the placement loop (the machine may be shared).
    pub cpu_secs: f64,
}

/// CPU time of the calling thread, in seconds.
pub fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// A trace compiled for one cluster: the template (empty nodes, typical shapes
/// set), and each pod's need and GPU request.
pub struct Bench {
    pub template: Cluster,
    pub needs: Vec<Need>,
    pub gpu_requests: Vec<u64>,
    pub capacity_milli: u64,
    fgd_typical: Vec<Typical>,
    gpushare_typical: Vec<Typical>,
}

impl Bench {
    pub fn new(nodes: &[Node], pods: &[Pod]) -> Bench {
        let mut template = Cluster::new(0);
        for n in nodes {
            template.add_host(&n.host());
        }
        let needs: Vec<Need> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| template.compile(&p.request(format!("pod-{i}"))))
            .collect();
        let gpu_requests = pods.iter().map(Pod::gpu_request).collect();
        let capacity_milli = nodes.iter().map(|n| u64::from(n.gpus) * 1000).sum();
        let fgd_typical = typical_pods(&mut template, pods, &FGD_TYPICAL);
        let gpushare_typical = typical_pods(&mut template, pods, &GPUSHARE_TYPICAL);
        Bench {
            template,
            needs,
            gpu_requests,
            capacity_milli,
            fgd_typical,
            gpushare_typical,
        }
    }

    /// The typical shapes a policy is given (FGD: the simulator's; gpushare: its own).
    pub fn typical_for(&self, policy: Policy) -> Vec<Typical> {
        match policy {
            Policy::Gpushare => self.gpushare_typical.clone(),
            _ => self.fgd_typical.clone(),
        }
    }

    /// Replay one seed under `policy` with the arrival list of `arrival`.
    pub fn run(&self, policy: Policy, seed: u64, arrival: Arrival) -> RunResult {
        let target = (self.capacity_milli as f64 * OVERSUBSCRIPTION).ceil() as u64;
        let order = match arrival {
            Arrival::Sampled => sample(&self.gpu_requests, target, seed),
            Arrival::TraceThenSampled => trace_then_sampled(&self.gpu_requests, target, seed),
        };
        let mut cluster = self.template.clone();
        cluster.reseed(seed);
        cluster.set_typical(self.typical_for(policy));
        let mut acc = Accounting::new(self.capacity_milli);
        let start = Instant::now();
        let cpu0 = thread_cpu_secs();
        let mut placed = 0;
        for &i in &order {
            let ok = cluster.place_one(&self.needs[i], policy).is_some();
            placed += usize::from(ok);
            acc.record(self.gpu_requests[i], ok);
        }
        let cpu_secs = thread_cpu_secs() - cpu0;
        let secs = start.elapsed().as_secs_f64();
        RunResult {
            seed,
            unallocated_at_100: match arrival {
                Arrival::Sampled => acc.at_100(),
                Arrival::TraceThenSampled => acc.window_100(),
            },
            curve: acc.curve,
            pods: order.len(),
            placed,
            secs,
            cpu_secs,
        }
    }
}

/// How the typical shapes are drawn from a pod list.
#[derive(Debug, Clone, PartialEq)]
pub struct TypicalConfig {
    /// Tell shapes apart by host memory too.
    pub with_memory: bool,
    /// Count CPU-only pods (the simulator's `isInvolvedCpuPods`).
    pub with_cpu_pods: bool,
    /// Take shapes until they cover this share of the pods (`podPopularityThreshold`).
    pub threshold_pct: f64,
    /// Shapes taken at a time (`podIncreaseStep`).
    pub step: usize,
}

/// FGD as the paper's experiments ran it (the simulator's experiment
/// configuration: `isInvolvedCpuPods: true, podPopularityThreshold: 95,
/// podIncreaseStep: 1`, no GPU-count weight).
pub const FGD_TYPICAL: TypicalConfig = TypicalConfig {
    with_memory: false,
    with_cpu_pods: true,
    threshold_pct: 95.0,
    step: 1,
};

/// gpushare's expectation: every shape, host memory included.
pub const GPUSHARE_TYPICAL: TypicalConfig = TypicalConfig {
    with_memory: true,
    with_cpu_pods: true,
    threshold_pct: 100.0,
    step: 10,
};

/// A pod shape as the typical pods tell them apart.
type ShapeKey = (u32, u64, u32, u32, Vec<String>);

/// Typical pods (the simulator's `GetTypicalPods`): pods grouped by (CPU, GPU
/// share, GPU count, GPU models, and host memory if `with_memory`), most frequent
/// first, taken `step` shapes at a time until they cover `threshold_pct` of the
/// counted pods (CPU-only ones only if `with_cpu_pods`), weights by count.
pub fn typical_pods(cluster: &mut Cluster, pods: &[Pod], cfg: &TypicalConfig) -> Vec<Typical> {
    let TypicalConfig {
        with_memory,
        with_cpu_pods,
        threshold_pct,
        step,
    } = *cfg;
    let step = step.max(1);
    // (CPU, memory, GPU count, GPU share, models) -> (count, first pod index)
    let mut counts: HashMap<ShapeKey, (usize, usize)> = HashMap::new();
    let mut total = 0usize;
    for (i, p) in pods.iter().enumerate() {
        if p.gpu_request() == 0 && !with_cpu_pods {
            continue;
        }
        total += 1;
        let key = (
            p.cpu_milli,
            if with_memory { p.memory_mib } else { 0 },
            p.num_gpu,
            p.gpu_milli,
            p.gpu_spec.clone(),
        );
        counts.entry(key).or_insert((0, i)).0 += 1;
    }
    let mut shapes: Vec<_> = counts.into_iter().collect();
    // Most frequent first; first appearance breaks ties (deterministic).
    shapes.sort_by_key(|(_, (c, first))| (std::cmp::Reverse(*c), *first));
    let want = threshold_pct / 100.0 * total as f64;
    let mut taken = 0usize;
    let mut covered = 0usize;
    while (covered as f64) < want && taken < shapes.len() {
        for (_, (c, _)) in shapes.iter().skip(taken).take(step) {
            covered += c;
        }
        taken = (taken + step).min(shapes.len());
    }
    shapes
        .into_iter()
        .take(taken)
        .map(|((_, mem, _, _, _), (c, first))| {
            let mut r = pods[first].request(String::new());
            r.shape.memory_mib = mem;
            Typical {
                need: cluster.compile(&r),
                weight: c as f64,
            }
        })
        .collect()
}

/// Batch placement through the planner's own entry point ([`placement::place`]):
/// every pod of `pods` at once onto the empty nodes. Returns (GPUs used, unplaced).
pub fn batch(nodes: &[Node], pods: &[Pod], seed: u64) -> BatchResult {
    let input = PlacementInput {
        pools: Vec::new(),
        hosts: nodes.iter().map(Node::host).collect(),
        requests: pods
            .iter()
            .enumerate()
            .map(|(i, p)| p.request(format!("pod-{i}")))
            .collect(),
        seed,
    };
    let start = Instant::now();
    let out = placement::place(&input);
    let secs = start.elapsed().as_secs_f64();
    let mut used: BTreeSet<(String, u32)> = BTreeSet::new();
    for a in &out.assignments {
        let host = match &a.host {
            placement::HostRef::Existing { id } => id.clone(),
            placement::HostRef::New { pool, ordinal } => format!("{pool}#{ordinal}"),
        };
        for g in &a.gpus {
            used.insert((host.clone(), *g));
        }
    }
    BatchResult {
        gpus_used: used.len(),
        placed: out.assignments.len(),
        unplaced: out.unplaced.len(),
        secs,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct BatchResult {
    pub gpus_used: usize,
    pub placed: usize,
    pub unplaced: usize,
    pub secs: f64,
}

/// Lower bounds on the GPUs (bins of 1000) that items of `sizes` thousandths need:
/// (sum of sizes rounded up, Martello-Toth L2).
pub fn lower_bounds(sizes: &[u64]) -> (u64, u64) {
    const C: u64 = 1000;
    let l1 = sizes.iter().sum::<u64>().div_ceil(C);
    let mut l2 = l1;
    for k in 0..=C / 2 {
        let (mut n1, mut n2, mut s2, mut s3) = (0u64, 0u64, 0u64, 0u64);
        for &s in sizes {
            if s > C - k {
                n1 += 1;
            } else if s > C / 2 {
                n2 += 1;
                s2 += s;
            } else if s >= k {
                s3 += s;
            }
        }
        let room = n2 * C - s2;
        let extra = s3.saturating_sub(room).div_ceil(C);
        l2 = l2.max(n1 + n2 + extra);
    }
    (l1, l2)
}

/// The linear-programming (cutting-stock) lower bound on the GPUs that items
/// of `sizes` thousandths need, with its certificate: a weight per size such
/// that the items of any one GPU weigh at most 1 (so the GPUs number at least
/// the total weight). Found by cutting planes: maximise the total weight under
/// the GPU fills found so far, then look for a fill (bounded knapsack over the
/// item counts) that weighs more than 1 and add it; stop when none does.
/// `None` when an item does not fit a GPU or the LP solver fails.
pub fn lp_bound(sizes: &[u64]) -> Option<LpBound> {
    use microlp::{ComparisonOp, OptimizationDirection, Problem};
    const C: u64 = 1000;
    let mut counts: Vec<(u64, u64)> = Vec::new();
    for &s in sizes {
        if s > C {
            return None;
        }
        if s == 0 {
            continue;
        }
        match counts.iter_mut().find(|x| x.0 == s) {
            Some(x) => x.1 += 1,
            None => counts.push((s, 1)),
        }
    }
    counts.sort_unstable_by_key(|&(s, _)| std::cmp::Reverse(s));
    let mut fills: Vec<Vec<u64>> = Vec::new();
    for _round in 0..10_000 {
        let mut lp = Problem::new(OptimizationDirection::Maximize);
        let w: Vec<_> = counts
            .iter()
            .map(|&(_, c)| lp.add_var(c as f64, (0.0, 1.0)))
            .collect();
        for f in &fills {
            let terms: Vec<_> = w
                .iter()
                .zip(f)
                .filter(|(_, &a)| a > 0)
                .map(|(&v, &a)| (v, a as f64))
                .collect();
            lp.add_constraint(terms.as_slice(), ComparisonOp::Le, 1.0);
        }
        let sol = lp.solve().ok()?;
        let weights: Vec<f64> = w.iter().map(|&v| *sol.var_value(v)).collect();
        let (heaviest, fill) = heaviest_fill(&counts, &weights, C);
        if heaviest <= 1.0 + 1e-9 {
            // Valid whatever the solver's rounding: scale by the heaviest fill.
            let total: f64 = counts
                .iter()
                .zip(&weights)
                .map(|(&(_, c), w)| c as f64 * w)
                .sum();
            let value = total / heaviest.max(1.0);
            return Some(LpBound {
                gpus: (value - 1e-6).ceil().max(0.0) as u64,
                value,
                weights: counts.iter().map(|&(s, _)| s).zip(weights).collect(),
            });
        }
        fills.push(fill);
    }
    None
}

/// [`lp_bound`]'s result.
#[derive(Debug, Clone, PartialEq)]
pub struct LpBound {
    /// The bound, rounded up.
    pub gpus: u64,
    /// The LP optimum (total weight).
    pub value: f64,
    /// The certificate: (size in thousandths, weight), largest size first.
    pub weights: Vec<(u64, f64)>,
}

/// The heaviest multiset of items (at most `count` of each size) that fits
/// `cap`, under `weights`: (its weight, how many of each size).
fn heaviest_fill(counts: &[(u64, u64)], weights: &[f64], cap: u64) -> (f64, Vec<u64>) {
    let cap = cap as usize;
    // best[t]: heaviest weight with total size exactly... at most t; from[t]: (item, previous t).
    let mut best = vec![0.0f64; cap + 1];
    let mut from: Vec<Vec<Option<usize>>> = Vec::new();
    for (i, &(s, c)) in counts.iter().enumerate() {
        let s = s as usize;
        for _ in 0..c.min((cap / s.max(1)) as u64) {
            let mut took = vec![None; cap + 1];
            let mut any = false;
            for t in (s..=cap).rev() {
                let v = best[t - s] + weights[i];
                if v > best[t] + 1e-12 {
                    best[t] = v;
                    took[t] = Some(i);
                    any = true;
                }
            }
            from.push(took);
            if !any {
                break;
            }
        }
    }
    let (mut t, mut v) = (0, 0.0);
    for (i, &b) in best.iter().enumerate() {
        if b > v + 1e-12 {
            (t, v) = (i, b);
        }
    }
    let mut fill = vec![0u64; counts.len()];
    for took in from.iter().rev() {
        if let Some(i) = took[t] {
            fill[i] += 1;
            t -= counts[i].0 as usize;
        }
    }
    (v, fill)
}

/// The median of a non-empty list (mean of the middle two for even lengths).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len().is_multiple_of(2) {
        (s[m - 1] + s[m]) / 2.0
    } else {
        s[m]
    })
}

#[cfg(test)]
mod tests;
