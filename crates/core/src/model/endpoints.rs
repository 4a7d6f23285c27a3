//! Where the tasks of a service are reached (issue 47): each task's published
//! ports at its host's address, with its health; the same list in Prometheus'
//! HTTP service-discovery format, so Prometheus scrapes every model server and a
//! proxy with an HTTP provider routes to the ready ones.

use super::live::{task_healthy, Host, StoreState, TaskState, TaskStatus};
use super::serving::{HealthStatus, Protocol};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One published port of one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub service: String,
    pub task: String,
    pub host: String,
    /// The host's address (its agent's report); `None` when no agent said it yet.
    pub address: Option<String>,
    /// The port's name (`http`), else its container port.
    pub port: String,
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    pub state: TaskState,
    /// The task's health check verdict; `None` when it has none.
    pub health: Option<HealthStatus>,
    /// Running and (with a health check) HEALTHY, on a host with an address:
    /// where traffic may go.
    pub ready: bool,
    /// The port's state in each target group of its service's `load_balancer`s
    /// (group name -> ELBv2's `TargetHealth.State`, or `not registered`), beside
    /// the container's own health check.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub target_health: BTreeMap<String, String>,
}

impl Endpoint {
    /// `address:port` (`None` without an address).
    pub fn target(&self) -> Option<String> {
        let a = self.address.as_deref()?;
        Some(if a.contains(':') {
            format!("[{a}]:{}", self.host_port)
        } else {
            format!("{a}:{}", self.host_port)
        })
    }
}

/// The endpoints of every live task of `state` with ports (of `service` alone
/// when given), ordered by service, task and port. `status`: the agents' task
/// details; `addresses`: host id -> address as the agents report it.
pub fn endpoints(
    state: &StoreState,
    status: &BTreeMap<String, TaskStatus>,
    addresses: &BTreeMap<String, String>,
    service: Option<&str>,
) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for t in state.tasks.values() {
        if t.ports.is_empty()
            || service.is_some_and(|s| s != t.service)
            || !matches!(t.state, TaskState::Pending | TaskState::Running)
        {
            continue;
        }
        let st = status.get(&t.id);
        let health = st.and_then(|s| s.health);
        let address = addresses.get(&t.host).cloned();
        // No clock here: a task counts once running, or once HEALTHY with a check.
        let ready = address.is_some() && task_healthy(t.state, st, u64::MAX, 0);
        for p in &t.ports {
            out.push(Endpoint {
                service: t.service.clone(),
                task: t.id.clone(),
                host: t.host.clone(),
                address: address.clone(),
                port: p.label(),
                host_port: p.host_port,
                container_port: p.container_port,
                protocol: p.protocol,
                state: t.state,
                health,
                ready,
                target_health: BTreeMap::new(),
            });
        }
    }
    out.sort_by(|a, b| (&a.service, &a.task, &a.port).cmp(&(&b.service, &b.task, &b.port)));
    out
}

/// Fill each endpoint's `target_health` from the target groups as observed
/// (`groups`, ARN -> group) for the `load_balancer`s of its service (`services`).
pub fn annotate_target_health(
    list: &mut [Endpoint],
    services: &BTreeMap<String, super::Service>,
    hosts: &BTreeMap<String, Host>,
    groups: &BTreeMap<String, super::TargetGroupObs>,
) {
    for e in list.iter_mut() {
        let Some(svc) = services.get(&e.service) else {
            continue;
        };
        for lb in svc
            .load_balancers
            .iter()
            .filter(|lb| lb.container_port == e.container_port)
        {
            let Some(obs) = groups.get(&lb.target_group_arn) else {
                continue;
            };
            let state = match &obs.error {
                Some(_) => "unknown (group not readable)".to_string(),
                None => {
                    let id = match obs.target_type {
                        super::TargetType::Instance => {
                            hosts.get(&e.host).and_then(|h| h.instance_id.clone())
                        }
                        super::TargetType::Ip => e.address.clone(),
                    };
                    id.and_then(|id| {
                        obs.find(&super::Target {
                            id,
                            port: e.host_port,
                        })
                    })
                    .map_or_else(|| "not registered".to_string(), |t| t.state.clone())
                }
            };
            e.target_health.insert(lb.group_name().to_string(), state);
        }
    }
}

/// Each task's status as its own host's agent reports it (what the planner judges
/// health by): a report counts only for the tasks placed on its host, an unreadable
/// one for none; tasks with no detail are left out.
pub fn reported_task_status<'r>(
    state: &StoreState,
    reports: impl IntoIterator<Item = &'r super::HostReport>,
) -> BTreeMap<String, TaskStatus> {
    reports
        .into_iter()
        .filter(|r| r.unreadable.is_none())
        .flat_map(|r| {
            r.task_details
                .iter()
                .filter(|(id, _)| state.tasks.get(*id).is_some_and(|t| t.host == r.host_id))
                .map(|(id, s)| (id.clone(), s.clone()))
        })
        .collect()
}

/// Host id -> address, from the hosts' reports.
pub fn host_addresses<'r>(
    reports: impl IntoIterator<Item = &'r super::HostReport>,
    hosts: &BTreeMap<String, Host>,
) -> BTreeMap<String, String> {
    reports
        .into_iter()
        .filter(|r| r.unreadable.is_none() && hosts.contains_key(&r.host_id))
        .filter_map(|r| Some((r.host_id.clone(), r.address.clone()?)))
        .collect()
}

/// The ready endpoints as Prometheus' HTTP service discovery takes them: one
/// target group per service and port name, labelled `service`, `port`, and
/// `__meta_gpushare_*` per target group.
pub fn prometheus_sd(endpoints: &[Endpoint]) -> serde_json::Value {
    let mut groups: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for e in endpoints
        .iter()
        .filter(|e| e.ready && e.protocol == Protocol::Tcp)
    {
        if let Some(t) = e.target() {
            groups.entry((&e.service, &e.port)).or_default().push(t);
        }
    }
    serde_json::Value::Array(
        groups
            .into_iter()
            .map(|((service, port), targets)| {
                serde_json::json!({
                    "targets": targets,
                    "labels": {
                        "service": service,
                        "port": port,
                        "__meta_gpushare_service": service,
                        "__meta_gpushare_port_name": port,
                    }
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Task, TaskPort, TaskShape};

    fn task(id: &str, host: &str, port: u16) -> Task {
        Task {
            id: id.into(),
            service: "web".into(),
            family: "web".into(),
            revision: 1,
            host: host.into(),
            gpus: vec![],
            shape: TaskShape::default(),
            state: TaskState::Running,
            ports: vec![TaskPort {
                container: "c".into(),
                name: Some("http".into()),
                container_port: 8080,
                host_port: port,
                protocol: Protocol::Tcp,
            }],
            job: None,
            scrape: None,
        }
    }

    fn status(health: Option<HealthStatus>) -> TaskStatus {
        TaskStatus {
            last_output: None,
            usage: None,
            state: TaskState::Running,
            reason: None,
            exit_code: None,
            since: 0,
            restarts: 0,
            health,
            container_health: BTreeMap::new(),
            started_at: None,
        }
    }

    #[test]
    fn only_running_healthy_tasks_with_an_address_are_ready() {
        let mut st = StoreState::default();
        for (id, host, port) in [
            ("t1", "h1", 40000),
            ("t2", "h1", 40001),
            ("t3", "h2", 40000),
        ] {
            st.tasks.insert(id.into(), task(id, host, port));
        }
        let status = BTreeMap::from([
            ("t1".to_string(), status(Some(HealthStatus::Healthy))),
            ("t2".to_string(), status(Some(HealthStatus::Unknown))),
            ("t3".to_string(), status(None)),
        ]);
        let addresses = BTreeMap::from([("h1".to_string(), "127.0.0.2".to_string())]);
        let e = endpoints(&st, &status, &addresses, Some("web"));
        let ready: Vec<(&str, bool)> = e.iter().map(|e| (e.task.as_str(), e.ready)).collect();
        assert_eq!(ready, vec![("t1", true), ("t2", false), ("t3", false)]);
        assert_eq!(e[0].target().as_deref(), Some("127.0.0.2:40000"));
        let sd = prometheus_sd(&e);
        assert_eq!(sd[0]["targets"], serde_json::json!(["127.0.0.2:40000"]));
        assert_eq!(sd[0]["labels"]["service"], "web");
        assert!(endpoints(&st, &status, &addresses, Some("other")).is_empty());
    }
}
