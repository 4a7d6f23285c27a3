//! Provisional first-fit placement (to be replaced by the scored engine).

use super::*;
use crate::model::{GpuMode, TaskGpu};

struct Slot {
    host: HostRef,
    pool: String,
    instance_type: String,
    gpus: Vec<GpuLoad>,
    cpu_free: i64,
    mem_free: i64,
    accepting: bool,
    mps_ok: bool,
    services: Vec<String>,
}

fn try_fit(slot: &Slot, r: &Request) -> Option<Vec<u32>> {
    if !slot.accepting || slot.pool != r.pool {
        return None;
    }
    if !r.instance_types.is_empty() && !r.instance_types.contains(&slot.instance_type) {
        return None;
    }
    if r.distinct_host && slot.services.contains(&r.service) {
        return None;
    }
    if i64::from(r.shape.cpu_units) > slot.cpu_free || r.shape.memory_mib as i64 > slot.mem_free {
        return None;
    }
    match r.shape.gpu {
        TaskGpu::None => Some(vec![]),
        TaskGpu::Whole { count } => {
            let free: Vec<u32> = slot.gpus.iter().filter(|g| g.mode == GpuMode::Idle).map(|g| g.index).collect();
            (free.len() as u32 >= count).then(|| free[..count as usize].to_vec())
        }
        TaskGpu::Mps { memory_mib, compute_percent, .. } => {
            if !slot.mps_ok {
                return None;
            }
            slot.gpus
                .iter()
                .filter(|g| g.mode != GpuMode::Dedicated)
                .find(|g| g.memory_mib - g.used_memory_mib >= memory_mib && g.used_compute_percent + u32::from(compute_percent) <= 100)
                .map(|g| vec![g.index])
        }
    }
}

fn commit(slot: &mut Slot, r: &Request, gpus: &[u32]) {
    slot.cpu_free -= i64::from(r.shape.cpu_units);
    slot.mem_free -= r.shape.memory_mib as i64;
    slot.services.push(r.service.clone());
    for g in slot.gpus.iter_mut().filter(|g| gpus.contains(&g.index)) {
        g.tasks += 1;
        match r.shape.gpu {
            TaskGpu::Whole { .. } => g.mode = GpuMode::Dedicated,
            TaskGpu::Mps { memory_mib, compute_percent, .. } => {
                g.mode = GpuMode::Mps;
                g.used_memory_mib += memory_mib;
                g.used_compute_percent += u32::from(compute_percent);
            }
            TaskGpu::None => {}
        }
    }
}

pub(super) fn place(input: &PlacementInput) -> PlacementOutcome {
    let mut slots: Vec<Slot> = input
        .hosts
        .iter()
        .map(|h| Slot {
            host: HostRef::Existing { id: h.id.clone() },
            pool: h.pool.clone(),
            instance_type: h.instance_type.clone(),
            gpus: h.gpus.clone(),
            cpu_free: i64::from(h.cpu_units) - i64::from(h.used_cpu_units),
            mem_free: h.memory_mib as i64 - h.used_memory_mib as i64,
            accepting: h.accepting,
            mps_ok: h.mps_ok,
            services: h.services.clone(),
        })
        .collect();
    let mut out = PlacementOutcome::default();
    let existing_in_pool = |pool: &str| input.hosts.iter().filter(|h| h.pool == pool).count() as u32;
    for r in &input.requests {
        if let Some((i, gpus)) = slots.iter().enumerate().find_map(|(i, s)| try_fit(s, r).map(|g| (i, g))) {
            commit(&mut slots[i], r, &gpus);
            out.assignments.push(Assignment { key: r.key.clone(), host: slots[i].host.clone(), gpus });
            continue;
        }
        let Some(pool) = input.pools.iter().find(|p| p.name == r.pool) else {
            out.unplaced.push(Unplaced { key: r.key.clone(), service: r.service.clone(), reason: format!("no capacity provider {:?}", r.pool) });
            continue;
        };
        let opened = out.new_hosts.get(&pool.name).copied().unwrap_or(0);
        if existing_in_pool(&pool.name) + opened >= pool.max_size {
            out.unplaced.push(Unplaced { key: r.key.clone(), service: r.service.clone(), reason: format!("no host in pool {} has room and the pool is at max_size {}", pool.name, pool.max_size) });
            continue;
        }
        let mut slot = Slot {
            host: HostRef::New { pool: pool.name.clone(), ordinal: opened },
            pool: pool.name.clone(),
            instance_type: pool.shape.instance_type.clone(),
            gpus: (0..pool.shape.gpu_count)
                .map(|i| GpuLoad { index: i, model: pool.shape.gpu_model.clone(), memory_mib: pool.shape.gpu_memory_mib, used_memory_mib: 0, used_compute_percent: 0, mode: GpuMode::Idle, tasks: 0 })
                .collect(),
            cpu_free: i64::from(pool.shape.cpu_units),
            mem_free: pool.shape.memory_mib as i64,
            accepting: true,
            mps_ok: pool.mps_enabled,
            services: vec![],
        };
        match try_fit(&slot, r) {
            Some(gpus) => {
                commit(&mut slot, r, &gpus);
                out.assignments.push(Assignment { key: r.key.clone(), host: slot.host.clone(), gpus });
                out.new_hosts.insert(pool.name.clone(), opened + 1);
                slots.push(slot);
            }
            None => out.unplaced.push(Unplaced { key: r.key.clone(), service: r.service.clone(), reason: format!("does not fit on an empty {} host", pool.shape.instance_type) }),
        }
    }
    out
}
