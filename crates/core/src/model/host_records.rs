//! The records of new hosts, made in one place for each way a host comes to the
//! state: planned for a launch ([`Host::planned`]), imported from a running
//! instance ([`Host::imported`]), joined a registered pool ([`Host::registered`]).

use super::launch::LaunchRecord;
use super::registered::HostRegistration;
use super::{CapacityProvider, GpuInfo, Host, HostState, Market, MpsHealth};
use crate::catalog::InstanceType;

/// The GPUs a host of catalogue type `it` has: `gpu_count` of its model, each of
/// `memory_mib` (the catalogue's, or the cloud's own figure when gathered).
pub fn gpus_of(it: &InstanceType, count: u32, memory_mib: u64) -> Vec<GpuInfo> {
    (0..count)
        .map(|i| GpuInfo::new(i, it.gpu_model, memory_mib))
        .collect()
}

impl Host {
    /// A record with what every new host starts with: never reported, MPS health
    /// unknown, no launch settings, not bought on Spot, no hold.
    fn new_record(id: &str, pool: &str, instance_type: &str, state: HostState) -> Host {
        Host {
            id: id.to_string(),
            instance_id: None,
            capacity_provider: pool.to_string(),
            gpu_instance: None,
            instance_type: instance_type.to_string(),
            zone: None,
            subnet: None,
            image_id: None,
            state,
            mps_health: MpsHealth::Unknown,
            health: Default::default(),
            gpus: Vec::new(),
            cpu_units: 0,
            memory_mib: 0,
            launch_token: String::new(),
            last_heartbeat: None,
            launched_at: None,
            market: Market::OnDemand,
            max_price: None,
            launch: None,
            registration: None,
            hold: None,
            log_request: None,
        }
    }

    /// Sized as catalogue type `it` says: its GPUs, vCPUs and memory.
    fn sized_as(mut self, it: &InstanceType) -> Host {
        self.gpus = gpus_of(it, it.gpu_count, it.gpu_memory_mib);
        self.cpu_units = it.cpu_units();
        self.memory_mib = it.memory_mib;
        self
    }

    /// Bought as `pool` says: its market, and on Spot its `max_price`.
    fn bought_as(mut self, pool: &CapacityProvider) -> Host {
        self.market = pool.market;
        self.max_price = pool
            .max_price
            .as_deref()
            .filter(|_| pool.market == Market::Spot)
            .and_then(super::capacity::parse_price);
        self
    }

    /// A host the planner launches into pool `pool_name` (declared as `pool`) as a
    /// `it`, under `launch_token`: pending, bought and launched as its pool says.
    pub fn planned(
        id: &str,
        pool_name: &str,
        pool: Option<&CapacityProvider>,
        it: &InstanceType,
        launch_token: String,
    ) -> Host {
        let mut h = Host::new_record(id, pool_name, it.name, HostState::Pending).sized_as(it);
        h.launch_token = launch_token;
        match pool {
            Some(p) => {
                h.launch = Some(LaunchRecord::of(p));
                h.bought_as(p)
            }
            None => h,
        }
    }

    /// A running instance taken into pool `pool_name` (`gpushare import`): sized
    /// as its type, bought as its pool says (its lifecycle is not checked), no
    /// launch settings recorded (so it is not outdated against them).
    pub fn imported(
        id: &str,
        instance_id: &str,
        pool_name: &str,
        pool: &CapacityProvider,
        it: &InstanceType,
        state: HostState,
    ) -> Host {
        let mut h = Host::new_record(id, pool_name, it.name, state).sized_as(it);
        h.instance_id = Some(instance_id.to_string());
        h.bought_as(pool)
    }

    /// A host of registered pool `pool` joining at `now` with what its agent says
    /// it has: running, on-demand, never launched (so no launch settings), and
    /// given the boot grace from `now` to report.
    pub fn registered(
        id: &str,
        pool: &str,
        instance_type: &str,
        (gpus, cpu_units, memory_mib): (Vec<GpuInfo>, u32, u64),
        registration: HostRegistration,
        now: u64,
    ) -> Host {
        let mut h = Host::new_record(id, pool, instance_type, HostState::Running);
        h.gpus = gpus;
        h.cpu_units = cpu_units;
        h.memory_mib = memory_mib;
        h.launched_at = Some(now);
        h.registration = Some(registration);
        h
    }
}
