//! Fragmentation as Fragmentation Gradient Descent measures it (Weng et al.,
//! USENIX ATC'23): the GPU capacity of a host that the expected task shapes
//! could not use. FGD places a task where this grows least; gpushare's own
//! score starts from the same gradient (see `policies.rs`).

use super::need::{GpuNeed, Need, Typical};

/// A light copy of one GPU's free capacity, for scoring hypothetical states.
#[derive(Debug, Clone, Copy)]
pub struct GpuView {
    pub free_mem: u64,
    pub free_compute: u32,
    pub idle: bool,
    pub shareable: bool,
    /// Free capacity in thousandths of the GPU.
    pub milli: f64,
}

impl GpuView {
    pub const ZERO: GpuView = GpuView {
        free_mem: 0,
        free_compute: 0,
        idle: false,
        shareable: false,
        milli: 0.0,
    };
}

/// Typical shapes with the same GPU need and models, by CPU then memory.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Group {
    gpu: GpuNeed,
    models: Vec<u32>,
    /// (CPU, memory, weight), sorted by CPU.
    members: Vec<(u32, u64, f64)>,
    weight: f64,
}

impl Group {
    /// The GPU models the group's shapes are limited to (empty = any).
    pub(super) fn models(&self) -> &[u32] {
        &self.models
    }
    /// The group's share of the expectation (the groups' weights sum to 1).
    pub(super) fn weight(&self) -> f64 {
        self.weight
    }
}

/// Group shapes by GPU need and models, weights normalised to sum to 1.
pub(super) fn groups(typical: &[Typical], scale: impl Fn(&Need) -> f64) -> Vec<Group> {
    let total: f64 = typical.iter().map(|t| t.weight * scale(&t.need)).sum();
    let mut groups: Vec<Group> = Vec::new();
    for t in typical {
        let w = t.weight * scale(&t.need) / total.max(f64::MIN_POSITIVE);
        if t.need.gpu == GpuNeed::None || w <= 0.0 {
            continue;
        }
        let m = (t.need.cpu, t.need.memory_mib, w);
        match groups
            .iter_mut()
            .find(|g| g.gpu == t.need.gpu && g.models == t.need.models)
        {
            Some(g) => {
                g.members.push(m);
                g.weight += w;
            }
            None => groups.push(Group {
                gpu: t.need.gpu,
                models: t.need.models.clone(),
                members: vec![m],
                weight: w,
            }),
        }
    }
    for g in &mut groups {
        g.members.sort_by_key(|m| (m.0, m.1));
    }
    groups
}

/// FGD's fragmentation of a (hypothetical) host state: for each typical shape,
/// the GPU capacity (thousandths) it could not use, weighted by its frequency.
/// A shape that cannot be placed on the host at all (model, CPU, GPUs) sees
/// all free GPU capacity as fragmented; otherwise the GPUs too small for it.
/// `model` and `mps_ok` are the host's; `gv` its GPUs. `with_memory` adds host
/// memory to the fit test (gpushare; FGD checks CPU only).
pub(super) fn frag_of(
    groups: &[Group],
    model: u32,
    mps_ok: bool,
    gv: &[GpuView],
    cpu_free: i64,
    mem_free: i64,
    with_memory: bool,
) -> f64 {
    let total: f64 = gv.iter().map(|g| g.milli).sum();
    if total <= 0.0 {
        return 0.0;
    }
    let mut f = 0.0;
    for grp in groups {
        // Weight of the group's shapes that fit the host's CPU (and memory).
        let mut fit_w = 0.0;
        if grp.models.is_empty() || grp.models.contains(&model) {
            for &(cpu, mem, w) in &grp.members {
                if i64::from(cpu) > cpu_free {
                    break;
                }
                if !with_memory || mem as i64 <= mem_free {
                    fit_w += w;
                }
            }
        }
        f += grp.weight * total;
        if fit_w <= 0.0 {
            continue;
        }
        let unusable = match grp.gpu {
            GpuNeed::None => 0.0,
            GpuNeed::Whole(k) => {
                let idle = gv.iter().filter(|g| g.idle).count() as u32;
                if idle < k {
                    total
                } else {
                    gv.iter().filter(|g| !g.idle).map(|g| g.milli).sum()
                }
            }
            GpuNeed::Mps {
                memory_mib,
                compute,
                ..
            } => {
                let mut can = false;
                let mut s = 0.0;
                for g in gv {
                    if mps_ok
                        && g.shareable
                        && g.free_mem >= memory_mib
                        && g.free_compute >= compute
                    {
                        can = true;
                    } else {
                        s += g.milli;
                    }
                }
                if can {
                    s
                } else {
                    total
                }
            }
        };
        // Shapes that fit see only the unusable GPUs as fragmented.
        f -= fit_w * (total - unusable);
    }
    f
}
