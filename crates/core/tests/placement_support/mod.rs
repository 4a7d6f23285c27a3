//! Hand-made hosts and requests for the placement tests.
#![allow(dead_code)] // each test file uses a part of it

use gpushare_core::model::{GpuMode, PlacementStrategy, TaskGpu, TaskShape};
use gpushare_core::placement::{GpuLoad, HostLoad, Request};

/// An accepting MPS-capable host of pool "p" with 64 CPUs, 1 TiB of memory and `gpus`.
pub fn host(id: &str, instance_type: &str, gpus: Vec<GpuLoad>) -> HostLoad {
    HostLoad {
        host_ports: Vec::new(),
        id: id.into(),
        pool: "p".into(),
        instance_type: instance_type.into(),
        zone: None,
        gpus,
        cpu_units: 64_000,
        used_cpu_units: 0,
        memory_mib: 1 << 20,
        used_memory_mib: 0,
        accepting: true,
        mps_ok: true,
        services: Vec::new(),
    }
}

/// An idle GPU.
pub fn idle_gpu(index: u32, model: &str, memory_mib: u64) -> GpuLoad {
    GpuLoad {
        clients: 1,
        max_clients: 48,
        index,
        model: model.into(),
        memory_mib,
        used_memory_mib: 0,
        used_compute_percent: 0,
        mode: GpuMode::Idle,
        tasks: 0,
    }
}

/// A binpack request of service "s" in pool "p" (1 CPU, 1 GiB) for `gpu`,
/// limited to `models` (empty: any).
pub fn request(gpu: TaskGpu, models: &[&str]) -> Request {
    Request {
        host_ports: Vec::new(),
        key: String::new(),
        service: "s".into(),
        pool: "p".into(),
        shape: TaskShape {
            cpu_units: 1000,
            memory_mib: 1024,
            gpu,
        },
        strategy: PlacementStrategy::Binpack,
        distinct_host: false,
        instance_types: Vec::new(),
        gpu_models: models.iter().map(|m| m.to_string()).collect(),
        reserve_compute: false,
    }
}
