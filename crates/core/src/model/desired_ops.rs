//! One resource of [`Desired`] by its address: what it references, putting it in
//! (from its attributes, or from another desired set), removing it. Every face (the
//! CLI's `-target`, the provider's plan-time checks and its view of the store) works
//! on resources through these, so a new kind is added here once.

use super::{Desired, ResourceAddr, ResourceKind, StoreState};

/// A resource record of the store's state that does not read as its kind (a record
/// written by another version, or edited by hand).
/// The reason is the JSON error's text, so that plan errors stay comparable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{addr} as recorded in the state does not read: {reason}")]
pub struct UnreadableRecord {
    pub addr: ResourceAddr,
    pub reason: String,
}

impl UnreadableRecord {
    pub fn new(addr: &ResourceAddr, source: serde_json::Error) -> UnreadableRecord {
        UnreadableRecord {
            addr: addr.clone(),
            reason: source.to_string(),
        }
    }
}

impl Desired {
    /// The resources `addr` references: a service's and a job's task definition and
    /// pool, a gpu_instance's pool. Empty for the kinds that reference nothing and for
    /// a resource not declared.
    pub fn dependencies(&self, addr: &ResourceAddr) -> Vec<ResourceAddr> {
        let (td, pool) = match addr.kind {
            ResourceKind::Service => match self.services.get(&addr.name) {
                Some(s) => (Some(&s.task_definition), Some(&s.capacity_provider)),
                None => (None, None),
            },
            ResourceKind::Job => match self.jobs.get(&addr.name) {
                Some(j) => (Some(&j.task_definition), Some(&j.capacity_provider)),
                None => (None, None),
            },
            ResourceKind::GpuInstance => (
                None,
                self.gpu_instances
                    .get(&addr.name)
                    .map(|g| &g.capacity_provider),
            ),
            ResourceKind::CapacityProvider | ResourceKind::TaskDefinition => (None, None),
        };
        td.map(|n| ResourceAddr::new(ResourceKind::TaskDefinition, n.clone()))
            .into_iter()
            .chain(pool.map(|n| ResourceAddr::new(ResourceKind::CapacityProvider, n.clone())))
            .collect()
    }

    /// Whether `addr` is declared.
    pub fn contains(&self, addr: &ResourceAddr) -> bool {
        let n = &addr.name;
        match addr.kind {
            ResourceKind::CapacityProvider => self.capacity_providers.contains_key(n),
            ResourceKind::GpuInstance => self.gpu_instances.contains_key(n),
            ResourceKind::TaskDefinition => self.task_definitions.contains_key(n),
            ResourceKind::Service => self.services.contains_key(n),
            ResourceKind::Job => self.jobs.contains_key(n),
        }
    }

    /// Whether every resource `addr` references is declared.
    pub fn references_resolve(&self, addr: &ResourceAddr) -> bool {
        self.dependencies(addr).iter().all(|d| self.contains(d))
    }

    /// Put `addr` in, read from its attributes (a JSON object keyed by schema
    /// attribute name, as [`Desired::resources`] and the store's records give them),
    /// replacing what was there.
    pub fn put(
        &mut self,
        addr: &ResourceAddr,
        attrs: &serde_json::Value,
    ) -> Result<(), serde_json::Error> {
        use serde::Deserialize;
        let n = addr.name.clone();
        match addr.kind {
            ResourceKind::CapacityProvider => {
                self.capacity_providers
                    .insert(n, Deserialize::deserialize(attrs)?);
            }
            ResourceKind::GpuInstance => {
                self.gpu_instances
                    .insert(n, Deserialize::deserialize(attrs)?);
            }
            ResourceKind::TaskDefinition => {
                self.task_definitions
                    .insert(n, Deserialize::deserialize(attrs)?);
            }
            ResourceKind::Service => {
                self.services.insert(n, Deserialize::deserialize(attrs)?);
            }
            ResourceKind::Job => {
                self.jobs.insert(n, Deserialize::deserialize(attrs)?);
            }
        }
        Ok(())
    }

    /// Put `addr` in as `from` declares it; false (nothing changed) when `from` does
    /// not declare it.
    pub fn put_from(&mut self, from: &Desired, addr: &ResourceAddr) -> bool {
        fn copy<T: Clone>(
            to: &mut std::collections::BTreeMap<String, T>,
            from: &std::collections::BTreeMap<String, T>,
            name: &str,
        ) -> bool {
            from.get(name)
                .map(|r| to.insert(name.to_string(), r.clone()))
                .is_some()
        }
        let n = addr.name.as_str();
        match addr.kind {
            ResourceKind::CapacityProvider => {
                copy(&mut self.capacity_providers, &from.capacity_providers, n)
            }
            ResourceKind::GpuInstance => copy(&mut self.gpu_instances, &from.gpu_instances, n),
            ResourceKind::TaskDefinition => {
                copy(&mut self.task_definitions, &from.task_definitions, n)
            }
            ResourceKind::Service => copy(&mut self.services, &from.services, n),
            ResourceKind::Job => copy(&mut self.jobs, &from.jobs, n),
        }
    }

    /// Take `addr` out; whether it was declared.
    pub fn remove(&mut self, addr: &ResourceAddr) -> bool {
        let n = &addr.name;
        match addr.kind {
            ResourceKind::CapacityProvider => self.capacity_providers.remove(n).is_some(),
            ResourceKind::GpuInstance => self.gpu_instances.remove(n).is_some(),
            ResourceKind::TaskDefinition => self.task_definitions.remove(n).is_some(),
            ResourceKind::Service => self.services.remove(n).is_some(),
            ResourceKind::Job => self.jobs.remove(n).is_some(),
        }
    }

    /// The resources that plan pools `pools`: those pools, the services, jobs and
    /// gpu_instances in them, the task definitions those use, and `also` (a pool or
    /// task definition a change names); settings and locations kept. Placement
    /// interacts only within a pool, so planning this plans those pools as the
    /// whole set would.
    pub fn restrict_to_pools(
        &self,
        pools: &std::collections::BTreeSet<String>,
        also: Option<&ResourceAddr>,
    ) -> Desired {
        let mut d = self.empty_like();
        for p in pools {
            d.put_from(
                self,
                &ResourceAddr::new(ResourceKind::CapacityProvider, p.clone()),
            );
        }
        let in_pools = |kind: ResourceKind, name: &String, pool: &String| {
            pools
                .contains(pool)
                .then(|| ResourceAddr::new(kind, name.clone()))
        };
        let users: Vec<ResourceAddr> =
            (self.services.iter())
                .filter_map(|(n, s)| in_pools(ResourceKind::Service, n, &s.capacity_provider))
                .chain(
                    (self.jobs.iter())
                        .filter_map(|(n, j)| in_pools(ResourceKind::Job, n, &j.capacity_provider)),
                )
                .chain(self.gpu_instances.iter().filter_map(|(n, g)| {
                    in_pools(ResourceKind::GpuInstance, n, &g.capacity_provider)
                }))
                .collect();
        for a in users.iter().chain(also) {
            d.put_from(self, a);
            for dep in self.dependencies(a) {
                if dep.kind == ResourceKind::TaskDefinition {
                    d.put_from(self, &dep);
                }
            }
        }
        d
    }

    /// The addresses of every declared resource, in address order (what
    /// [`Desired::resources`] keys, without turning the resources into JSON).
    pub fn addresses(&self) -> Vec<ResourceAddr> {
        fn of<T>(
            kind: ResourceKind,
            m: &std::collections::BTreeMap<String, T>,
        ) -> impl Iterator<Item = ResourceAddr> + '_ {
            m.keys().map(move |n| ResourceAddr::new(kind, n.clone()))
        }
        let mut out: Vec<ResourceAddr> =
            of(ResourceKind::CapacityProvider, &self.capacity_providers)
                .chain(of(ResourceKind::GpuInstance, &self.gpu_instances))
                .chain(of(ResourceKind::TaskDefinition, &self.task_definitions))
                .chain(of(ResourceKind::Service, &self.services))
                .chain(of(ResourceKind::Job, &self.jobs))
                .collect();
        out.sort();
        out
    }

    /// Every resource as `state` last recorded it applied (not the one-off jobs,
    /// which the planner adds itself), with these settings and source locations:
    /// a pass that plans only what was applied, whatever the configuration says now.
    pub fn as_applied(&self, state: &StoreState) -> Result<Desired, UnreadableRecord> {
        let mut out = self.empty_like();
        for (addr, r) in state.resources.iter().filter(|(_, r)| !r.one_off) {
            out.put(addr, &r.attrs)
                .map_err(|source| UnreadableRecord::new(addr, source))?;
        }
        Ok(out)
    }

    /// The same settings and source locations, no resources.
    pub fn empty_like(&self) -> Desired {
        Desired {
            settings: self.settings.clone(),
            locations: self.locations.clone(),
            ..Desired::default()
        }
    }
}
