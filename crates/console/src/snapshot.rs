//! One observation of the fleet ([`Snapshot`]): what the pages are rendered from and
//! what the history records.

use gpushare_core::model::{Desired, HostReport, StoreState, Task};
use gpushare_core::plan::Plan;
use gpushare_core::render::{self, RenderOptions};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// One observation of the fleet, what the pages are rendered from.
pub struct Snapshot {
    pub state: StoreState,
    /// Seconds since the Unix epoch when observed.
    pub observed_at: u64,
    pub reports: Vec<HostReport>,
    /// The configuration, when it loaded.
    pub desired: Option<Desired>,
    /// The plan the next pass would carry out, or why there is none.
    pub plan: Result<Plan, String>,
    /// The configuration's commit, when reconciling from git.
    pub commit: Option<String>,
    /// The last reconcile pass's status record in the store, if any.
    pub status: Option<gpushare_engine::store::StatusRecord>,
    /// The services' target groups as the plan's observation read them (load
    /// balancers; empty without any).
    pub target_groups: std::collections::BTreeMap<String, gpushare_core::model::TargetGroupObs>,
    /// The ids of each host's tasks, made at the first [`Snapshot::tasks_on`] (leave
    /// it `Default::default()`).
    pub by_host: OnceLock<BTreeMap<String, Vec<String>>>,
}

impl Snapshot {
    /// The tasks placed on `host`, in id order, from an index of the state's tasks
    /// by host made once per snapshot (a page of one host never scans every task).
    pub fn tasks_on<'s>(&'s self, host: &str) -> impl Iterator<Item = &'s Task> + 's {
        let index = self.by_host.get_or_init(|| {
            let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for t in self.state.tasks.values() {
                out.entry(t.host.clone()).or_default().push(t.id.clone());
            }
            out
        });
        index
            .get(host)
            .into_iter()
            .flatten()
            .filter_map(|id| self.state.tasks.get(id))
    }

    /// Every task port with its host's reported address and the task's health.
    pub fn endpoints(&self) -> Vec<gpushare_core::model::Endpoint> {
        let status = gpushare_core::model::reported_task_status(&self.state, &self.reports);
        let addresses = gpushare_core::model::host_addresses(&self.reports, &self.state.hosts);
        let mut list = gpushare_core::model::endpoints(&self.state, &status, &addresses, None);
        if let Some(d) = &self.desired {
            gpushare_core::model::annotate_target_health(
                &mut list,
                &d.services,
                &self.state.hosts,
                &self.target_groups,
            );
        }
        list
    }

    /// Every applied service's tasks counted and its deployment, as `show --json`
    /// gives them (health judged from the agents' reports at the observation).
    pub fn services(&self) -> Vec<gpushare_core::model::ServiceStatus> {
        let status = gpushare_core::model::reported_task_status(&self.state, &self.reports);
        gpushare_core::model::service_status(&self.state, &status, self.observed_at)
    }

    /// What the live pages are refreshed on: the fleet, the reports (not their
    /// heartbeat times), the configuration's plan. Equal keys show equal pages,
    /// report ages aside.
    pub fn fingerprint(&self) -> String {
        let reports: Vec<_> = self
            .reports
            .iter()
            .map(|r| {
                (
                    &r.host_id,
                    r.mps_health,
                    &r.mps_error,
                    &r.task_details,
                    &r.unreadable,
                    &r.gpus,
                )
            })
            .collect();
        let plan = match &self.plan {
            Ok(p) => render::plan_text(p, &self.state, &RenderOptions::default()),
            Err(e) => e.clone(),
        };
        let pass = self
            .status
            .as_ref()
            .map(|s| (s.pass, &s.started_at, &s.holder, s.outcome));
        format!(
            "{}\n{}\n{plan}\n{:?}\n{pass:?}",
            render::show_json(&self.state),
            serde_json::to_string(&reports).unwrap_or_default(),
            self.commit
        )
    }
}
