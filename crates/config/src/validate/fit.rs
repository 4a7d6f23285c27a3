//! Whether a service's tasks fit where they may land: its references, the instance
//! types of its pool, and each container's and the whole task's GPU, CPU and memory
//! needs against the largest of them.

use super::Validator;
use crate::diag::Diagnostic;
use gpushare_core::catalog::{self, InstanceType};
use gpushare_core::model::{CapacityProvider, Service, TaskDefinition, TaskShape};
use gpushare_core::TaskGpu;
use std::collections::BTreeSet;

impl<'a> Validator<'a> {
    /// The service's task definition and pool, reported where missing, and its
    /// instance_types checked against the catalogue. `None` where either is
    /// missing, or the pool registers its own hosts (their GPUs are known once
    /// they join).
    pub(super) fn service_refs(&mut self, name: &str, svc: &'a Service) -> Option<Placed<'a>> {
        let addr = format!("service.{name}");
        let td = self.d.task_definitions.get(&svc.task_definition);
        if td.is_none() && !self.standalone {
            self.missing(
                &format!("{addr}.task_definition"),
                "task_definition",
                &svc.task_definition,
                &addr,
            );
        }
        let cp = self.d.capacity_providers.get(&svc.capacity_provider);
        if cp.is_none() && !self.standalone {
            self.missing(
                &format!("{addr}.capacity_provider"),
                "capacity_provider",
                &svc.capacity_provider,
                &addr,
            );
        }
        for t in &svc.instance_types {
            self.instance_type(&format!("{addr}.instance_types"), t);
        }
        let (td, cp) = (td?, cp?);
        if cp.is_registered() {
            return None;
        }
        Some(Placed {
            td_addr: format!("task_definition.{}", svc.task_definition),
            pool: format!("capacity_provider.{}", svc.capacity_provider),
            addr,
            svc,
            td,
            cp,
        })
    }

    /// The instance types the service's tasks may land on: the pool's own type and
    /// those of its pinned gpu_instances, narrowed by the service's instance_types;
    /// of those, the largest at each need. `None` where none is left (reported)
    /// or none is in the catalogue (reported before).
    pub(super) fn service_instance_types(&mut self, p: &Placed<'a>) -> Option<Largest> {
        let (svc, cp) = (p.svc, p.cp);
        let mut pool_types: BTreeSet<&str> = [cp.instance_type.as_str()].into();
        for gi in self
            .d
            .gpu_instances
            .values()
            .filter(|g| g.capacity_provider == svc.capacity_provider)
        {
            pool_types.insert(gi.instance_type.as_deref().unwrap_or(&cp.instance_type));
        }
        let allowed: Vec<&str> = if svc.instance_types.is_empty() {
            pool_types.iter().copied().collect()
        } else {
            pool_types
                .iter()
                .copied()
                .filter(|t| svc.instance_types.iter().any(|a| a == t))
                .collect()
        };
        if allowed.is_empty() {
            self.error(
                &format!("{}.instance_types", p.addr),
                format!(
                    "no host of {} matches the instance_types of {}",
                    p.pool, p.addr
                ),
                Some(format!(
                    "the pool has {}; the service allows {}",
                    pool_types.iter().copied().collect::<Vec<_>>().join(", "),
                    svc.instance_types.join(", ")
                )),
                Some(
                    "add the pool's instance type to instance_types, or remove the constraint"
                        .into(),
                ),
            );
            return None;
        }
        let types: Vec<&'static InstanceType> =
            allowed.iter().filter_map(|t| catalog::lookup(t)).collect();
        let by = |f: fn(&InstanceType) -> u64| types.iter().copied().max_by_key(|t| f(t));
        Some(Largest {
            gpu: by(|t| t.gpu_memory_mib)?,
            gpus: by(|t| u64::from(t.gpu_count))?,
            cpu: by(|t| u64::from(t.cpu_units()))?,
            memory: by(|t| t.memory_mib)?,
        })
    }

    /// Each container's GPU need against the largest candidate: an MPS share on
    /// one GPU, whole GPUs on one host.
    pub(super) fn containers_fit(&mut self, p: &Placed<'a>, largest: &Largest) {
        let (addr, td_addr, pool) = (&p.addr, &p.td_addr, &p.pool);
        let (big_gpu, many_gpus) = (largest.gpu, largest.gpus);
        let per_gpu = big_gpu.gpu_memory_mib;
        for c in &p.td.containers {
            let Some(g) = &c.gpu else { continue };
            let cpath = format!("{td_addr}.container.{}", c.name);
            if let Some(m) = &g.mps {
                if m.memory > per_gpu {
                    self.error(
                        &format!("{cpath}.gpu.mps.memory"),
                        format!(
                            "container {} of {td_addr} asks for {} MiB of GPU memory; one {} GPU of {} has {per_gpu} MiB",
                            c.name, m.memory, big_gpu.gpu_model, big_gpu.name
                        ),
                        Some(format!("{addr} runs it in {pool}; an MPS share must fit on one GPU")),
                        Some(format!("lower gpu.mps.memory to at most {per_gpu}, or use an instance type with larger GPUs")),
                    );
                }
            }
            if let Some(n) = g.count {
                if n > many_gpus.gpu_count {
                    self.error(
                        &format!("{cpath}.gpu.count"),
                        format!(
                            "container {} of {td_addr} asks for {n} whole GPUs; {} has {}",
                            c.name, many_gpus.name, many_gpus.gpu_count
                        ),
                        Some(format!(
                            "{addr} runs it in {pool}; a task's GPUs are on one host"
                        )),
                        Some(format!(
                            "lower gpu.count to at most {}, or use a larger instance type",
                            many_gpus.gpu_count
                        )),
                    );
                }
            }
        }
    }

    /// The task's GPU need as a whole: its MPS containers together on one GPU of
    /// a pool whose MPS is enabled, or its whole GPUs on one host (where no single
    /// container asked for too many already).
    pub(super) fn task_gpus_fit(&mut self, p: &Placed<'a>, largest: &Largest, shape: &TaskShape) {
        let (addr, td_addr, pool, td) = (&p.addr, &p.td_addr, &p.pool, p.td);
        let (big_gpu, many_gpus) = (largest.gpu, largest.gpus);
        let per_gpu = big_gpu.gpu_memory_mib;
        match shape.gpu {
            TaskGpu::Mps { memory_mib, .. } => {
                let mps_containers = td
                    .containers
                    .iter()
                    .filter(|c| c.gpu.as_ref().is_some_and(|g| g.mps.is_some()))
                    .count();
                if memory_mib > per_gpu && mps_containers > 1 {
                    self.error(
                        &format!("{td_addr}.container"),
                        format!(
                            "the MPS containers of {td_addr} ask for {memory_mib} MiB of GPU memory together; one {} GPU of {} has {per_gpu} MiB",
                            big_gpu.gpu_model, big_gpu.name
                        ),
                        Some("all MPS containers of a task share one GPU".into()),
                        Some("lower their gpu.mps.memory, or split the task".into()),
                    );
                }
                if !p.cp.mps.enabled {
                    self.error(
                        &format!("{addr}.capacity_provider"),
                        format!("{addr} runs MPS tasks ({td_addr}) in {pool}, whose MPS daemon is disabled"),
                        Some(format!("{pool} sets mps {{ enabled = false }}: its GPUs take only whole-GPU and CPU-only tasks")),
                        Some("enable MPS in the pool, or run the service in a pool with MPS".into()),
                    );
                }
            }
            TaskGpu::Whole { count }
                if count > many_gpus.gpu_count
                    && td.containers.iter().all(|c| {
                        c.gpu.as_ref().and_then(|g| g.count).unwrap_or(0) <= many_gpus.gpu_count
                    }) =>
            {
                self.error(
                    &format!("{td_addr}.container"),
                    format!(
                        "{td_addr} asks for {count} whole GPUs in all; {} has {}",
                        many_gpus.name, many_gpus.gpu_count
                    ),
                    Some(format!(
                        "{addr} runs it in {pool}; a task's GPUs are on one host"
                    )),
                    Some("lower the gpu.count values, or use a larger instance type".into()),
                )
            }
            _ => {}
        }
    }

    /// The task's CPU units and host memory against the largest candidate.
    pub(super) fn task_host_fits(&mut self, p: &Placed<'a>, largest: &Largest, shape: &TaskShape) {
        let td_addr = &p.td_addr;
        let (big_cpu, big_mem) = (largest.cpu, largest.memory);
        if shape.cpu_units > big_cpu.cpu_units() {
            self.error(
                &format!("{td_addr}.container"),
                format!(
                    "{td_addr} asks for {} CPU units; {} has {}",
                    shape.cpu_units,
                    big_cpu.name,
                    big_cpu.cpu_units()
                ),
                Some("1024 CPU units are one vCPU".into()),
                Some("lower the containers' cpu, or use a larger instance type".into()),
            );
        }
        if shape.memory_mib > big_mem.memory_mib {
            self.error(
                &format!("{td_addr}.container"),
                format!(
                    "{td_addr} asks for {} MiB of host memory; {} has {} MiB",
                    shape.memory_mib, big_mem.name, big_mem.memory_mib
                ),
                None,
                Some("lower the containers' memory, or use a larger instance type".into()),
            );
        }
    }

    /// `distinct_host`: a warning where the pool cannot hold as many hosts as
    /// the service wants tasks.
    pub(super) fn distinct_hosts_fit(&mut self, p: &Placed<'a>) {
        let (addr, pool, svc) = (&p.addr, &p.pool, p.svc);
        let pinned = self
            .d
            .gpu_instances
            .values()
            .filter(|g| g.capacity_provider == svc.capacity_provider)
            .count() as u32;
        let hosts = p.cp.max_size + pinned;
        if svc.desired_count > hosts {
            self.out.push(
                Diagnostic::warning(format!("{addr} wants {} tasks on distinct hosts; {pool} has at most {hosts} hosts", svc.desired_count))
                    .at(self.loc(&format!("{addr}.desired_count")))
                    .path(format!("{addr}.desired_count"))
                    .hint("raise the pool's max_size, lower desired_count, or drop distinct_host; the rest will be reported unplaced"),
            );
        }
    }
}

/// A service whose task definition and launched pool are both known.
pub(super) struct Placed<'d> {
    /// `service.NAME`, `task_definition.NAME`, `capacity_provider.NAME`.
    pub(super) addr: String,
    pub(super) td_addr: String,
    pub(super) pool: String,
    pub(super) svc: &'d Service,
    pub(super) td: &'d TaskDefinition,
    pub(super) cp: &'d CapacityProvider,
}

/// Of the instance types a service's tasks may land on, the one best at each
/// need: each need is checked against it, and errors name it.
pub(super) struct Largest {
    /// Largest GPU memory per GPU.
    pub(super) gpu: &'static InstanceType,
    /// Most GPUs.
    pub(super) gpus: &'static InstanceType,
    pub(super) cpu: &'static InstanceType,
    pub(super) memory: &'static InstanceType,
}
