//! The planner's new hosts: their records (the catalogue's shape, or the cloud's
//! figures when gathered), where each launches (type, image, subnet, zone; see
//! [`crate::facts`]), and the pools as the placement engine sees them.

use super::reasons::StopReason;
use super::types::{Launch, LaunchBasis, Stop};
use super::{launch_token, Planner};
use crate::catalog;
use crate::model::{Host, HostState, Live};
use crate::placement::{self, HostRef, PoolSpec};
use std::collections::{BTreeMap, BTreeSet};

impl<'a> Planner<'a> {
    pub(super) fn host_record(
        &mut self,
        id: &str,
        pool: &str,
        it: &catalog::InstanceType,
        gpu_instance: Option<String>,
    ) -> Host {
        let token = launch_token(&self.cluster, &self.live.state.store_id, id);
        let mut host = Host::planned(
            id,
            pool,
            self.desired.capacity_providers.get(pool),
            it,
            token,
        );
        host.gpu_instance = gpu_instance;
        if let Some(f) = self.instance_facts(pool, &host.instance_type) {
            host.gpus = crate::model::gpus_of(it, f.gpu_count, f.gpu_memory_mib);
            host.cpu_units = f.vcpus * 1024;
            host.memory_mib = f.memory_mib;
        }
        self.fix_launch(&mut host);
        host
    }

    /// The cloud's own figures for `instance_type` as pool `pool` launches it, if gathered.
    pub(super) fn instance_facts(
        &self,
        pool: &str,
        instance_type: &str,
    ) -> Option<&'a crate::facts::InstanceFacts> {
        let live: &'a Live = self.live;
        live.facts
            .pools
            .get(pool)?
            .instance
            .as_ref()
            .filter(|f| f.instance_type == instance_type)
    }

    /// A note per pool whose instance type the cloud describes otherwise than the
    /// catalogue: new hosts are planned with the cloud's figures.
    pub(super) fn instance_facts_notes(&mut self) {
        for (name, cp) in &self.desired.capacity_providers {
            let (Some(f), Some(it)) = (
                self.instance_facts(name, &cp.instance_type),
                catalog::lookup(&cp.instance_type),
            ) else {
                continue;
            };
            if let Some(d) = f.differs_from(it) {
                self.out.notes.push(format!(
                    "capacity_provider.{name}: the cloud describes {} with {d}; new hosts are planned with the cloud's figures",
                    cp.instance_type
                ));
            }
        }
    }

    /// Fix where a new host launches (type, image, subnet, zone): from the cloud's
    /// facts for its pool, else from the pool's configuration alone (noted once per
    /// pool), always through [`crate::facts::choose_launch`], the one placement policy.
    pub(super) fn fix_launch(&mut self, host: &mut Host) {
        let desired = self.desired;
        let Some(pool) = desired.capacity_providers.get(&host.capacity_provider) else {
            return;
        };
        let mut facts = match self.live.facts.pools.get(&host.capacity_provider) {
            Some(f) => f.clone(),
            None => {
                let note = format!(
                    "capacity_provider.{}: the cloud gave no launch facts; its new hosts are planned from the configuration alone (image {}, subnets in order, zone unknown)",
                    host.capacity_provider,
                    pool.image.as_deref().unwrap_or("unset")
                );
                if !self.out.notes.contains(&note) {
                    self.out.notes.push(note);
                }
                crate::facts::PoolFacts::from_config(pool)
            }
        };
        let pinned_zone = host
            .gpu_instance
            .as_ref()
            .and_then(|g| desired.gpu_instances.get(g))
            .and_then(|g| g.availability_zone.as_deref());
        if let Some(zone) = pinned_zone {
            if facts.subnets.iter().any(|s| s.zone == zone) {
                facts.subnets.retain(|s| s.zone == zone);
            } else if facts.subnets.iter().any(|s| !s.zone.is_empty()) {
                self.out.notes.push(format!(
                    "host {} of {}: capacity_provider.{} has no subnet in availability_zone {zone}; planned in one of its subnets",
                    host.id,
                    host.gpu_instance.as_deref().map(|g| format!("gpu_instance.{g}")).unwrap_or_default(),
                    host.capacity_provider
                ));
            }
        }
        let types: Vec<String> = if host.gpu_instance.is_some() {
            vec![host.instance_type.clone()]
        } else {
            std::iter::once(&pool.instance_type)
                .chain(&pool.instance_types)
                .cloned()
                .collect()
        };
        let mut zone_load: BTreeMap<String, u32> = BTreeMap::new();
        for h in self.hosts.values() {
            if h.capacity_provider == host.capacity_provider && h.state != HostState::Terminated {
                if let Some(z) = h.zone.as_ref().or(h.subnet.as_ref()) {
                    *zone_load.entry(z.clone()).or_default() += 1;
                }
            }
        }
        let Some(choice) = crate::facts::choose_launch(
            &facts,
            &types,
            &self.live.state.capacity_refusals,
            &zone_load,
            self.live.observed_at,
            self.desired.settings.capacity_refusal_seconds,
        ) else {
            return;
        };
        if choice.all_refused {
            self.out.notes.push(format!(
                "host {} of capacity_provider.{}: every subnet refused its instance types for lack of capacity in the last {} s; planned in {} anyway",
                host.id,
                host.capacity_provider,
                self.desired.settings.capacity_refusal_seconds,
                choice.zone.as_deref().or(choice.subnet.as_deref()).unwrap_or("the default network")
            ));
        }
        if choice.instance_type != host.instance_type {
            if let Some(it) = catalog::lookup(&choice.instance_type) {
                host.cpu_units = it.cpu_units();
                host.memory_mib = it.memory_mib;
            }
            host.instance_type = choice.instance_type;
        }
        host.image_id = Some(choice.image_id).filter(|i| !i.is_empty());
        host.subnet = choice.subnet;
        host.zone = choice.zone.or(host.zone.take());
    }

    /// The launch step of `host` (fixed by [`Planner::fix_launch`]): with its pool's
    /// settings as planned and the image's root device, so that apply and the cloud
    /// look nothing up. `None` for a host of an undeclared pool (validated away).
    pub(super) fn launch_of(&self, host: &Host) -> Option<Launch> {
        let pool = self
            .desired
            .capacity_providers
            .get(&host.capacity_provider)?;
        let facts = self.live.facts.pools.get(&host.capacity_provider);
        Some(Launch {
            host: host.clone(),
            pool: pool.clone(),
            root_device: facts.and_then(|f| f.root_device.clone()),
            basis: if facts.is_some() {
                LaunchBasis::Facts
            } else {
                LaunchBasis::Configuration
            },
        })
    }

    /// Stop what is still recorded on each host the plan retires (not a refreshed
    /// host retired only once empty), so that apply never retires a host with tasks.
    pub(super) fn stop_tasks_of_retired(&mut self) {
        let stopped: BTreeSet<String> = self
            .out
            .stops
            .iter()
            .map(|s| s.task_id.clone())
            .chain(self.out.moves.iter().map(|m| m.from_task.clone()))
            .collect();
        let retired: BTreeSet<&str> = self
            .out
            .retirements
            .iter()
            .filter(|r| !r.if_empty)
            .map(|r| r.host_id.as_str())
            .collect();
        let left: Vec<Stop> = self
            .live
            .state
            .tasks
            .values()
            .filter(|t| retired.contains(t.host.as_str()) && !stopped.contains(&t.id))
            .map(|t| {
                Stop::now(
                    t.id.clone(),
                    StopReason::HostGone {
                        host: t.host.clone(),
                    }
                    .to_string(),
                )
            })
            .collect();
        self.out.stops.extend(left);
    }

    /// Launch the hosts the placement outcome opened; returns (pool, ordinal) -> host id.
    pub(super) fn open_new_hosts(
        &mut self,
        outcome: &placement::PlacementOutcome,
    ) -> BTreeMap<(String, u32), String> {
        let mut need: BTreeMap<String, u32> = outcome.new_hosts.clone();
        for a in &outcome.assignments {
            if let HostRef::New { pool, ordinal } = &a.host {
                let n = need.entry(pool.clone()).or_default();
                *n = (*n).max(ordinal + 1);
            }
        }
        let mut ids = BTreeMap::new();
        for (pool, n) in need {
            let Some(it) = self
                .desired
                .capacity_providers
                .get(&pool)
                .and_then(|p| catalog::lookup(&p.instance_type))
            else {
                continue;
            };
            for ordinal in 0..n {
                let id = self.new_host_id(&pool);
                let host = self.host_record(&id, &pool, it, None);
                self.out.launches.extend(self.launch_of(&host));
                self.hosts.insert(id.clone(), host);
                ids.insert((pool.clone(), ordinal), id);
            }
        }
        ids
    }

    /// Pool specs for the engine. `max_size` and `min_size` are raised by the pinned
    /// hosts among `hosts` (they count towards neither); with `frozen`, no pool may grow.
    pub(super) fn pool_specs(&self, hosts: &[String], frozen: bool) -> Vec<PoolSpec> {
        let mut pinned: BTreeMap<&str, u32> = BTreeMap::new();
        let mut all: BTreeMap<&str, u32> = BTreeMap::new();
        for id in hosts {
            if let Some(h) = self.hosts.get(id) {
                *all.entry(h.capacity_provider.as_str()).or_default() += 1;
                if h.gpu_instance.is_some() {
                    *pinned.entry(h.capacity_provider.as_str()).or_default() += 1;
                }
            }
        }
        self.desired
            .capacity_providers
            .iter()
            .filter(|(_, cp)| !cp.is_registered())
            .filter_map(|(name, cp)| {
                let it = catalog::lookup(&cp.instance_type)?;
                let mut shape = it.shape();
                if let Some(f) = self.instance_facts(name, &cp.instance_type) {
                    f.apply_to(&mut shape);
                }
                let extra = pinned.get(name.as_str()).copied().unwrap_or(0);
                let max_size = if frozen {
                    all.get(name.as_str()).copied().unwrap_or(0)
                } else {
                    cp.max_size + extra
                };
                Some(PoolSpec {
                    name: name.clone(),
                    shape,
                    min_size: (cp.min_size + extra).min(max_size),
                    max_size,
                    mps_enabled: cp.mps.enabled,
                    max_clients: cp.mps.max_clients,
                })
            })
            .collect()
    }
}
