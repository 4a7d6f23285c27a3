//! Builders of model values for tests, so that a test names only what it cares about
//! and a new field of the model is added here once, not in every test's literal.
//!
//! ```
//! use gpushare_core::model::HostState;
//! let h = gpushare_testkit::model::host("h1")
//!     .pool("l4")
//!     .instance_type("g6.12xlarge")
//!     .zone("local-1a")
//!     .state(HostState::Running)
//!     .build();
//! assert_eq!(h.gpus.len(), 4);
//! ```

use gpushare_core::catalog;
use gpushare_core::model::{GpuInfo, Host, HostState, MpsHealth};

/// A host with id `id`: planned (pending, no instance id, never reported) in the pool
/// `pool`, a `g6.xlarge` with the catalogue's GPUs, vCPUs and memory, no zone, and the
/// launch token `token-<id>`. Change what the test is about with the builder's methods.
pub fn host(id: &str) -> HostBuilder {
    HostBuilder(Host {
        log_request: None,
        id: id.into(),
        instance_id: None,
        capacity_provider: "pool".into(),
        gpu_instance: None,
        instance_type: String::new(),
        zone: None,
        subnet: None,
        image_id: None,
        state: HostState::Pending,
        mps_health: MpsHealth::Unknown,
        health: Default::default(),
        gpus: Vec::new(),
        cpu_units: 0,
        memory_mib: 0,
        launch_token: format!("token-{id}"),
        last_heartbeat: None,
        launched_at: None,
        market: Default::default(),
        max_price: None,
        launch: None,
        registration: None,
        hold: None,
    })
    .instance_type("g6.xlarge")
}

/// A [`Host`] being built: see [`host`].
#[derive(Debug, Clone)]
pub struct HostBuilder(Host);

impl HostBuilder {
    /// Its capacity provider.
    pub fn pool(mut self, pool: &str) -> Self {
        self.0.capacity_provider = pool.into();
        self
    }

    /// Its instance type, with the catalogue's GPUs, CPU units and memory for it
    /// (none when the catalogue does not know the type).
    pub fn instance_type(mut self, instance_type: &str) -> Self {
        let t = catalog::lookup(instance_type);
        self.0.instance_type = instance_type.into();
        self.0.gpus = t
            .map(|t| {
                (0..t.gpu_count)
                    .map(|index| GpuInfo::new(index, t.gpu_model, t.gpu_memory_mib))
                    .collect()
            })
            .unwrap_or_default();
        self.0.cpu_units = t.map_or(0, |t| t.cpu_units());
        self.0.memory_mib = t.map_or(0, |t| t.memory_mib);
        self
    }

    /// Its GPUs, instead of the catalogue's.
    pub fn gpus(mut self, gpus: Vec<GpuInfo>) -> Self {
        self.0.gpus = gpus;
        self
    }

    /// Its CPU units and memory, instead of the catalogue's.
    pub fn resources(mut self, cpu_units: u32, memory_mib: u64) -> Self {
        self.0.cpu_units = cpu_units;
        self.0.memory_mib = memory_mib;
        self
    }

    /// The cloud's id of it (launched).
    pub fn instance_id(mut self, instance_id: &str) -> Self {
        self.0.instance_id = Some(instance_id.into());
        self
    }

    pub fn zone(mut self, zone: &str) -> Self {
        self.0.zone = Some(zone.into());
        self
    }

    pub fn state(mut self, state: HostState) -> Self {
        self.0.state = state;
        self
    }

    pub fn mps_health(mut self, health: MpsHealth) -> Self {
        self.0.mps_health = health;
        self
    }

    /// Its launch's idempotency token, instead of `token-<id>`.
    pub fn launch_token(mut self, token: &str) -> Self {
        self.0.launch_token = token.into();
        self
    }

    /// When its agent last reported (seconds since the Unix epoch).
    pub fn last_heartbeat(mut self, at: u64) -> Self {
        self.0.last_heartbeat = Some(at);
        self
    }

    pub fn build(self) -> Host {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::host;
    use gpushare_core::model::{GpuInfo, HostState, MpsHealth};

    #[test]
    fn a_planned_host_with_the_catalogues_shape() {
        let h = host("h1").build();
        assert_eq!(
            (
                h.id.as_str(),
                h.capacity_provider.as_str(),
                h.instance_type.as_str()
            ),
            ("h1", "pool", "g6.xlarge")
        );
        assert_eq!(
            (h.state, h.instance_id.as_deref()),
            (HostState::Pending, None)
        );
        assert_eq!(h.launch_token, "token-h1");
        assert_eq!(h.gpus.len(), 1);
        assert_eq!((h.cpu_units, h.memory_mib), (4096, 16384));
    }

    #[test]
    fn each_setter_changes_its_field_only() {
        let h = host("h2")
            .pool("l4")
            .instance_type("g6.12xlarge")
            .instance_id("i-2")
            .zone("z")
            .state(HostState::Running)
            .mps_health(MpsHealth::Healthy)
            .launch_token("tok")
            .last_heartbeat(7)
            .build();
        assert_eq!(h.gpus.len(), 4);
        assert_eq!(h.cpu_units, 48 * 1024);
        assert_eq!(
            (
                h.instance_id.as_deref(),
                h.zone.as_deref(),
                h.launch_token.as_str()
            ),
            (Some("i-2"), Some("z"), "tok")
        );
        assert_eq!(
            (h.mps_health, h.last_heartbeat),
            (MpsHealth::Healthy, Some(7))
        );

        let unknown = host("h3").instance_type("x9.huge").build();
        assert!(unknown.gpus.is_empty());
        let own = host("h4")
            .gpus(vec![GpuInfo::new(0, "L4", 1)])
            .resources(1, 2)
            .build();
        assert_eq!(
            (own.gpus[0].memory_mib, own.cpu_units, own.memory_mib),
            (1, 1, 2)
        );
    }
}
