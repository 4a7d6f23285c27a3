//! The FGD paper's evaluation protocol: sample pods with replacement until their
//! GPU request reaches 1.3 x the cluster, shuffle with a seed, place one at a time
//! (no departures, a pod that does not fit is skipped), and read the unallocated
//! GPU share when the arrived workload crosses 100 % (and the curve 80-130 %).

use crate::trace::{Node, Pod};
use gpushare_core::placement::{self, Cluster, Need, PlacementInput, Policy, Typical};
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

/// Arrival accounting: arrived and allocated GPU thousandths against capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct Accounting {
    capacity: u64,
    arrived: u64,
    allocated: u64,
    next: u32,
    /// (arrived %, unallocated %) at the first pod where arrived >= that percent.
    pub curve: Vec<(u32, f64)>,
}

impl Accounting {
    pub fn new(capacity_milli: u64) -> Accounting {
        Accounting {
            capacity: capacity_milli.max(1),
            arrived: 0,
            allocated: 0,
            next: CURVE_FROM,
            curve: Vec::new(),
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
    }

    /// 100 - allocated GPU %, now.
    pub fn unallocated_pct(&self) -> f64 {
        100.0 - 100.0 * self.allocated as f64 / self.capacity as f64
    }

    /// The headline figure: unallocated % when arrived first reached 100 %.
    pub fn at_100(&self) -> Option<f64> {
        self.curve.iter().find(|(p, _)| *p == 100).map(|(_, v)| *v)
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
        let fgd_typical = typical_pods(
            &mut template,
            pods,
            false,
            std::env::var("FGD_T")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(60.0),
        );
        let gpushare_typical = typical_pods(
            &mut template,
            pods,
            gpushare_core::placement::knob(0) > 0.5,
            std::env::var("GS_T")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(100.0),
        );
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

    /// Replay one seed under `policy`.
    pub fn run(&self, policy: Policy, seed: u64) -> RunResult {
        let target = (self.capacity_milli as f64 * OVERSUBSCRIPTION).ceil() as u64;
        let order = sample(&self.gpu_requests, target, seed);
        let mut cluster = self.template.clone();
        cluster.reseed(seed);
        cluster.set_typical(self.typical_for(policy));
        let mut acc = Accounting::new(self.capacity_milli);
        let start = Instant::now();
        let cpu0 = thread_cpu_secs();
        let mut placed = 0;
        let mut placed_sizes: Vec<u64> = Vec::new();
        let mut diag: std::collections::BTreeMap<String, u64> = Default::default();
        for &i in &order {
            let ok = cluster.place_one(&self.needs[i], policy).is_some();
            if !ok && std::env::var("DIAG").is_ok() && acc.at_100().is_none() {
                let k = match self.needs[i].gpu {
                    gpushare_core::placement::GpuNeed::Whole(k) => format!("whole{k}"),
                    gpushare_core::placement::GpuNeed::Mps { memory_mib, .. } => {
                        format!("mps{}", memory_mib / 100 * 100)
                    }
                    _ => "cpu".into(),
                };
                *diag.entry(k).or_insert(0u64) += self.gpu_requests[i];
            }
            placed += usize::from(ok);
            if ok {
                if let gpushare_core::placement::GpuNeed::Mps { memory_mib, .. } = self.needs[i].gpu
                {
                    placed_sizes.push(memory_mib);
                }
            }
            let before = acc.at_100().is_none();
            acc.record(self.gpu_requests[i], ok);
            if before && acc.at_100().is_some() && std::env::var("DIAG").is_ok() {
                let mut idle = 0;
                let mut idle_lowcpu = 0;
                let mut idle_lowmem = 0;
                let mut part = 0.0;
                let mut cpu_on_idle = 0i64;
                for h in cluster.hosts() {
                    let n = h
                        .gpus
                        .iter()
                        .filter(|g| g.mode == gpushare_core::model::GpuMode::Idle)
                        .count();
                    idle += n;
                    if n > 0 {
                        cpu_on_idle += h.cpu_free;
                    }
                    if h.cpu_free < 11000 {
                        idle_lowcpu += n;
                    } else if h.memory_free < 30000 {
                        idle_lowmem += n;
                    }
                    part += h
                        .gpus
                        .iter()
                        .filter(|g| g.mode == gpushare_core::model::GpuMode::Mps)
                        .map(|g| (g.memory_mib - g.used_memory_mib) as f64)
                        .sum::<f64>();
                }
                let mps_gpus = cluster
                    .hosts()
                    .iter()
                    .map(|h| {
                        h.gpus
                            .iter()
                            .filter(|g| g.mode == gpushare_core::model::GpuMode::Mps)
                            .count()
                    })
                    .sum::<usize>();
                eprintln!(
                    "mps gpus {mps_gpus}, bounds of placed sharing pods {:?}",
                    lower_bounds(&placed_sizes)
                );
                eprintln!("{} at 100%: idle GPUs {idle} (cpu<11000: {idle_lowcpu}, mem<30G: {idle_lowmem}), free on MPS GPUs {part:.0} milli, cpu free on hosts w/ idle {cpu_on_idle}", policy.name());
            }
        }
        let cpu_secs = thread_cpu_secs() - cpu0;
        if std::env::var("DIAG").is_ok() {
            let idle: usize = cluster
                .hosts()
                .iter()
                .map(|h| {
                    h.gpus
                        .iter()
                        .filter(|g| g.mode == gpushare_core::model::GpuMode::Idle)
                        .count()
                })
                .sum();
            let free: f64 = cluster.hosts().iter().map(|h| h.gpu_milli_free()).sum();
            eprintln!("{} seed {seed}: failed before 100%: {diag:?}; at end idle GPUs {idle}, free milli {free:.0}", policy.name());
        }
        let secs = start.elapsed().as_secs_f64();
        RunResult {
            seed,
            unallocated_at_100: acc.at_100(),
            curve: acc.curve,
            pods: order.len(),
            placed,
            secs,
            cpu_secs,
        }
    }
}

/// FGD's typical pods (the simulator's `GetTypicalPods`): GPU pods grouped by
/// (CPU, GPU share, GPU count, GPU models), most frequent first, taken ten shapes
/// at a time until they cover `threshold_pct` of the GPU pods, weights renormalised.
/// `with_memory` also tells shapes apart by host memory (gpushare's measure).
pub fn typical_pods(
    cluster: &mut Cluster,
    pods: &[Pod],
    with_memory: bool,
    threshold_pct: f64,
) -> Vec<Typical> {
    let mut counts: HashMap<(u32, u64, u32, u32, Vec<String>), (usize, usize)> = HashMap::new();
    let mut total = 0usize;
    for (i, p) in pods.iter().enumerate() {
        if p.gpu_request() == 0 {
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
        for (_, (c, _)) in shapes.iter().skip(taken).take(10) {
            covered += c;
        }
        taken = (taken + 10).min(shapes.len());
    }
    shapes
        .into_iter()
        .take(taken)
        .map(|((_, mem, _, _, _), (c, first))| {
            let mut r = pods[first].request(String::new());
            r.shape.memory_mib = mem;
            let g = (pods[first].gpu_request() as f64 / 1000.0).max(0.001);
            let wexp = if with_memory {
                gpushare_core::placement::knob(3)
            } else {
                0.0
            };
            Typical {
                need: cluster.compile(&r),
                weight: c as f64 * g.powf(wexp),
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

/// The median of a non-empty list (mean of the middle two for even lengths).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 0 {
        (s[m - 1] + s[m]) / 2.0
    } else {
        s[m]
    })
}
