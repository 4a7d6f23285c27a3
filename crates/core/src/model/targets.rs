//! Load balancers (issue 48): a service's ELBv2 target groups ([`LoadBalancer`]),
//! what the load balancer says of one ([`TargetGroupObs`]), and the target a task
//! stands for in it ([`task_target`]).

use super::live::{Host, Task};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `service { load_balancer { target_group_arn, container_name, container_port } }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadBalancer {
    pub target_group_arn: String,
    pub container_name: String,
    pub container_port: u16,
}

impl LoadBalancer {
    /// The target group's name, from its ARN (`...:targetgroup/NAME/ID`).
    pub fn group_name(&self) -> &str {
        group_name(&self.target_group_arn)
    }
}

/// The name in a target group's ARN (`...:targetgroup/NAME/ID`), else the ARN.
pub fn group_name(arn: &str) -> &str {
    arn.rsplit_once(":targetgroup/")
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap_or(arn)
}

/// How a target group names its targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TargetType {
    /// By EC2 instance id (launched pools).
    #[default]
    Instance,
    /// By address (registered pools: the address the host's agent joined with).
    Ip,
}

/// One target of a group: an instance id or an address, and a port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Target {
    pub id: String,
    pub port: u16,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.id.contains(':') {
            write!(f, "[{}]:{}", self.id, self.port)
        } else {
            write!(f, "{}:{}", self.id, self.port)
        }
    }
}

/// A target as DescribeTargetHealth gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedTarget {
    pub target: Target,
    /// ELBv2's `TargetHealth.State`: `initial`, `healthy`, `unhealthy`, `unused`,
    /// `draining`, `unavailable`.
    pub state: String,
    /// `TargetHealth.Reason` / `Description`, when the load balancer gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ObservedTarget {
    /// Registered and not on its way out.
    pub fn is_registered(&self) -> bool {
        self.state != "draining"
    }
}

/// A target group as observed: its type, its deregistration delay and its targets;
/// or why it could not be read (`error`: then nothing is registered in it, and every
/// stop of a task of its service is still preceded by a deregistration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TargetGroupObs {
    pub target_type: TargetType,
    /// `deregistration_delay.timeout_seconds` (ELBv2's default is 300).
    pub deregistration_delay_seconds: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<ObservedTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl TargetGroupObs {
    /// How the group reports `target` (`None`: not a target of it).
    pub fn find(&self, target: &Target) -> Option<&ObservedTarget> {
        self.targets.iter().find(|t| &t.target == target)
    }
}

/// The host port `task` publishes `lb`'s container port on.
pub fn task_port(lb: &LoadBalancer, task: &Task) -> Option<u16> {
    task.ports
        .iter()
        .find(|p| p.container == lb.container_name && p.container_port == lb.container_port)
        .map(|p| p.host_port)
}

/// The target `task` stands for behind `lb` in a group of `target_type`: its host's
/// instance id (or address, `addresses` by host id) and the host port of
/// `lb.container_port`; `Err` says why there is none (no such port, no instance id
/// or address yet).
pub fn task_target(
    lb: &LoadBalancer,
    target_type: TargetType,
    task: &Task,
    host: Option<&Host>,
    addresses: &BTreeMap<String, String>,
) -> Result<Target, String> {
    let port = task_port(lb, task).ok_or_else(|| {
        format!(
            "task {} publishes no port {} of container {:?}",
            task.id, lb.container_port, lb.container_name
        )
    })?;
    let id = match target_type {
        TargetType::Instance => host
            .and_then(|h| h.instance_id.clone())
            .ok_or_else(|| format!("host {} has no EC2 instance id (a target group of type instance takes only EC2 instances; use target type ip for registered hosts)", task.host))?,
        TargetType::Ip => addresses.get(&task.host).cloned().ok_or_else(|| {
            format!("host {} has not reported its address yet", task.host)
        })?,
    };
    Ok(Target { id, port })
}
