//! What a plan-time check plans: the neighbourhood of a service or gpu_instance (for
//! the cross-resource checks), the pools a change can touch and the desired set and
//! live world narrowed to them (placement interacts only within a pool), and the
//! fleet-change warning of the result.

use crate::diag::Diag;
use gpushare_core::model::{Desired, Live, ResourceAddr, ResourceKind, StoreState};
use std::collections::BTreeMap;

/// A service, job or gpu_instance of `desired` with the resources it references, and
/// the same without it (settings kept); `None` for the kinds that reference nothing.
pub(crate) fn neighbourhood(desired: &Desired, addr: &ResourceAddr) -> Option<(Desired, Desired)> {
    if matches!(
        addr.kind,
        ResourceKind::CapacityProvider | ResourceKind::TaskDefinition
    ) {
        return None;
    }
    let mut without = Desired {
        settings: desired.settings.clone(),
        ..Desired::default()
    };
    for dep in desired.dependencies(addr) {
        without.put_from(desired, &dep);
    }
    let mut with = without.clone();
    if !with.put_from(desired, addr) {
        return None;
    }
    with.locations = desired.locations.clone();
    Some((with, without))
}

/// The pools a change of `addr` can affect: a service's or gpu_instance's pool, a pool
/// itself, the pools of the services and jobs using a task definition.
pub(crate) fn scope_pools(
    desired: &Desired,
    addr: &ResourceAddr,
) -> std::collections::BTreeSet<String> {
    let mut pools = std::collections::BTreeSet::new();
    match addr.kind {
        ResourceKind::Service => {
            if let Some(s) = desired.services.get(&addr.name) {
                pools.insert(s.capacity_provider.clone());
            }
        }
        ResourceKind::GpuInstance => {
            if let Some(g) = desired.gpu_instances.get(&addr.name) {
                pools.insert(g.capacity_provider.clone());
            }
        }
        ResourceKind::Job => {
            if let Some(j) = desired.jobs.get(&addr.name) {
                pools.insert(j.capacity_provider.clone());
            }
        }
        ResourceKind::CapacityProvider => {
            pools.insert(addr.name.clone());
        }
        ResourceKind::TaskDefinition => {
            let services = desired
                .services
                .values()
                .map(|s| (&s.task_definition, &s.capacity_provider));
            let jobs = desired
                .jobs
                .values()
                .map(|j| (&j.task_definition, &j.capacity_provider));
            pools.extend(
                services
                    .chain(jobs)
                    .filter(|(td, _)| **td == addr.name)
                    .map(|(_, pool)| pool.clone()),
            );
        }
    }
    pools
}

/// `desired` and `live` narrowed to `pools` ([`Desired::restrict_to_pools`], with
/// `addr` itself); the pools' hosts, their tasks, and the applied records of what is
/// kept. Planning this is planning those pools as the whole set would, without the
/// rest of the fleet.
pub(crate) fn narrowed(
    desired: &Desired,
    live: &Live,
    addr: &ResourceAddr,
    pools: &std::collections::BTreeSet<String>,
) -> (Desired, Live) {
    let also = matches!(
        addr.kind,
        ResourceKind::CapacityProvider | ResourceKind::TaskDefinition
    )
    .then_some(addr);
    let d = desired.restrict_to_pools(pools, also);
    let kept = |a: &ResourceAddr| d.contains(a);
    let st = &live.state;
    let hosts: BTreeMap<String, gpushare_core::model::Host> = st
        .hosts
        .iter()
        .filter(|(_, h)| pools.contains(&h.capacity_provider))
        .map(|(k, h)| (k.clone(), h.clone()))
        .collect();
    let state = StoreState {
        serial: st.serial,
        cluster: st.cluster.clone(),
        store_id: st.store_id.clone(),
        resources: st
            .resources
            .iter()
            .filter(|(a, _)| kept(a))
            .map(|(a, r)| (a.clone(), r.clone()))
            .collect(),
        revisions: st
            .revisions
            .iter()
            .filter(|(f, _)| d.task_definitions.contains_key(*f))
            .map(|(f, r)| (f.clone(), r.clone()))
            .collect(),
        tasks: st
            .tasks
            .iter()
            .filter(|(_, t)| hosts.contains_key(&t.host))
            .map(|(k, t)| (k.clone(), t.clone()))
            .collect(),
        hosts,
        capacity_refusals: st.capacity_refusals.clone(),
    };
    let in_scope = |c: &gpushare_core::model::CloudHost| pools.contains(&c.capacity_provider);
    let live = Live {
        state,
        strays: live
            .strays
            .iter()
            .filter(|c| in_scope(c))
            .cloned()
            .collect(),
        foreign: live
            .foreign
            .iter()
            .filter(|c| in_scope(c))
            .cloned()
            .collect(),
        adopted: live
            .adopted
            .iter()
            .filter(|c| in_scope(c))
            .cloned()
            .collect(),
        observed_at: live.observed_at,
        facts: live.facts.clone(),
        task_status: live.task_status.clone(),
        host_addresses: live.host_addresses.clone(),
        target_groups: live.target_groups.clone(),
    };
    (d, live)
}

/// How many lines of hosts and tasks a fleet-change warning lists.
const PLACEMENT_LINES: usize = 40;

/// What a fleet-change warning said about its pools: hosts to launch and retire,
/// tasks to move and stop, and its cost text (cost, saving and right-sizing hints,
/// the same lines `gpushare plan` prints).
#[derive(Clone, PartialEq, Eq, Debug)]
struct FleetMark {
    launch: usize,
    retire: usize,
    moves: usize,
    stop: usize,
    cost: String,
}

/// The fleet-change warnings of one provider process (one `terraform plan` or
/// `apply`). Terraform plans independent resources in parallel, so each warning counts
/// its resource's change with what the run had planned before it. A warning is given
/// the first time a run changes a set of pools, and again only when a later change
/// launches or retires hosts, moves or stops tasks, or changes the cost text (cost,
/// saving, right-sizing hints);
/// a task placed on capacity the run had planned anyway adds none (Terraform renders
/// every warning with its source, about 5 ms each: 60 near-identical warnings
/// doubled the time of a `terraform plan` of 100 resources).
#[derive(Default)]
pub(crate) struct FleetWarnings {
    said: std::sync::Mutex<BTreeMap<std::collections::BTreeSet<String>, FleetMark>>,
}

impl FleetWarnings {
    /// The plan-time summary of what a change does to the fleet: hosts to launch and
    /// retire, tasks to place, move and stop, the cost per hour before and after, and
    /// where the hosts and tasks land. `None` when the fleet stays as it is, or when
    /// it adds nothing to what this run's last warning about these pools said.
    pub(crate) fn warning(
        &self,
        addr: &ResourceAddr,
        pools: &std::collections::BTreeSet<String>,
        plan: &gpushare_core::plan::Plan,
        live: &StoreState,
    ) -> Option<Diag> {
        let c = gpushare_core::render::counts(plan);
        if c.launch + c.retire + c.place + c.moves + c.stop == 0 {
            return None;
        }
        let cost = gpushare_core::render::cost_text(plan);
        let mark = FleetMark {
            launch: c.launch,
            retire: c.retire,
            moves: c.moves,
            stop: c.stop,
            cost: cost.clone(),
        };
        {
            let mut said = gpushare_core::util::lock(&self.said);
            if said.get(pools) == Some(&mark) {
                return None;
            }
            said.insert(pools.clone(), mark);
        }
        let n =
            |k: usize, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
        Some(Diag::warning(
            format!("Fleet change after {addr}"),
            format!(
                "In {}: {} to launch, {} to retire; {} to place, {} to move, {} to stop.\n{}\n{}\nCounted with what this run planned before {addr}, so the run's last warning about these pools counts the whole run; a later change that adds tasks to these hosts without changing the cost or the saving gets no warning of its own; where tasks land is fixed when the run applies (docs: What terraform plan shows).",
                pools
                    .iter()
                    .map(|p| format!("capacity_provider.{p}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                n(c.launch, "host", "hosts"),
                c.retire,
                n(c.place, "task", "tasks"),
                c.moves,
                c.stop,
                cost,
                gpushare_core::render::placement_text(plan, live, PLACEMENT_LINES),
            ),
        ))
    }
}
