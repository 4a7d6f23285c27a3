//! Host ports (issue 47): a task's fixed host ports are a placement resource, and
//! its dynamic ones are assigned here, in the plan, lowest free first in its pool's
//! `host_port_range`, so every endpoint is known before apply and no agent chooses.

use super::{is_live_task, Planner};
use crate::model::{assign_ports, fixed_host_ports, HostPortKey, Task, TaskDefinition};
use std::collections::{BTreeMap, BTreeSet};

impl<'a> Planner<'a> {
    /// The task definition that revision `revision` of `family` registers: the
    /// declared one for the revision this plan targets, else the stored revision.
    pub(super) fn revision_spec(&self, family: &str, revision: u32) -> Option<&'a TaskDefinition> {
        let desired = self.desired.task_definitions.get(family);
        if self
            .targets
            .get(family)
            .is_some_and(|(r, _)| *r == revision)
            && desired.is_some()
        {
            return desired;
        }
        self.live
            .state
            .revisions
            .get(family)?
            .iter()
            .find(|r| r.revision == revision)
            .map(|r| &r.spec)
    }

    /// The host ports a task of `family` at `revision` needs on any host.
    pub(super) fn fixed_ports(&self, family: &str, revision: u32) -> Vec<HostPortKey> {
        self.revision_spec(family, revision)
            .map(|td| fixed_host_ports(td).into_iter().collect())
            .unwrap_or_default()
    }

    /// Give `task`, placed on its host, its host ports. `Err` names the pool's range
    /// when no dynamic port is left in it on that host.
    pub(super) fn give_ports(&mut self, task: &mut Task) -> Result<(), String> {
        let Some(td) = self.revision_spec(&task.family, task.revision) else {
            return Ok(());
        };
        if td.containers.iter().all(|c| c.port_mappings.is_empty()) {
            task.ports.clear();
            return Ok(());
        }
        let range = self
            .hosts
            .get(&task.host)
            .and_then(|h| self.desired.capacity_providers.get(&h.capacity_provider))
            .map(|p| p.port_range())
            .unwrap_or(crate::model::DEFAULT_HOST_PORT_RANGE);
        let in_use = self.ports_in_use();
        let used = in_use.entry(task.host.clone()).or_default();
        match assign_ports(td, range, used) {
            Some(ports) => {
                task.ports = ports;
                Ok(())
            }
            None => Err(format!(
                "host {} has no free host port left in {}-{}",
                task.host, range.0, range.1
            )),
        }
    }

    /// Host -> the ports its tasks hold: every live task's (those this plan stops
    /// keep theirs until apply stops them) and every task this plan places.
    fn ports_in_use(&mut self) -> &mut BTreeMap<String, BTreeSet<HostPortKey>> {
        if self.port_use.is_none() {
            let mut m: BTreeMap<String, BTreeSet<HostPortKey>> = BTreeMap::new();
            let live = self.live.state.tasks.values().filter(|t| is_live_task(t));
            for t in live.chain(self.tasks.values()) {
                if !t.ports.is_empty() {
                    m.entry(t.host.clone())
                        .or_default()
                        .extend(t.ports.iter().map(|p| (p.protocol, p.host_port)));
                }
            }
            self.port_use = Some(m);
        }
        self.port_use.get_or_insert_with(BTreeMap::new)
    }
}
