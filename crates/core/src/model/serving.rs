//! What a task needs to serve (issue 47), with ECS's meaning: its network mode and
//! port mappings, its containers' health checks, volumes and mount points, and the
//! Linux settings an inference image needs (shared memory, ulimits, init, user).
//!
//! Every field is left out of the JSON form when it is at its default, so a task
//! definition written before these fields existed has the same form, and the same
//! revision, as before.

use super::is_false;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// How a task's containers are networked (ECS's `networkMode`, without awsvpc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Docker's bridge network: each port mapping publishes a container port on a
    /// host port, fixed or assigned by the planner from the pool's range.
    #[default]
    Bridge,
    /// The host's network: a container port is the host port (a placement resource).
    Host,
    /// No network: no port mapping is allowed.
    None,
}

impl NetworkMode {
    pub fn is_bridge(&self) -> bool {
        *self == NetworkMode::Bridge
    }
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Bridge => "bridge",
            NetworkMode::Host => "host",
            NetworkMode::None => "none",
        }
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// A port as the plan, `show` and `endpoints` name it: `http` or `8080`, with
/// `/udp` for UDP.
pub fn port_text(label: &str, protocol: Protocol) -> String {
    match protocol {
        Protocol::Tcp => label.to_string(),
        Protocol::Udp => format!("{label}/udp"),
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `port_mapping { name, container_port, host_port, protocol }` of a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    /// Names the port in endpoints (`http`, `metrics`); unset: the container port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub container_port: u16,
    /// 0 (or unset) in bridge mode: a dynamic port, assigned by the planner from the
    /// pool's `host_port_range`. In host mode it must be 0 or the container port.
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub host_port: u16,
    #[serde(default, skip_serializing_if = "is_tcp")]
    pub protocol: Protocol,
}

impl PortMapping {
    /// The name endpoints list the port under.
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.container_port.to_string())
    }
}

fn is_zero_u16(n: &u16) -> bool {
    *n == 0
}
fn is_tcp(p: &Protocol) -> bool {
    *p == Protocol::Tcp
}

/// ECS's health-check defaults and bounds (seconds; retries a count).
pub const HEALTH_INTERVAL: (u32, u32, u32) = (30, 5, 300);
pub const HEALTH_TIMEOUT: (u32, u32, u32) = (5, 2, 120);
pub const HEALTH_RETRIES: (u32, u32, u32) = (3, 1, 10);
pub const HEALTH_START_PERIOD: (u32, u32, u32) = (0, 0, 300);

fn health_interval() -> u32 {
    HEALTH_INTERVAL.0
}
fn health_timeout() -> u32 {
    HEALTH_TIMEOUT.0
}
fn health_retries() -> u32 {
    HEALTH_RETRIES.0
}

/// `health_check { command, interval, timeout, retries, start_period }`, as ECS's
/// `healthCheck`: `["CMD", "prog", "arg"...]` runs a program, `["CMD-SHELL", "..."]`
/// a shell line; exit 0 is healthy. `retries` failures in a row make the container
/// UNHEALTHY; failures during `start_period` do not count (a success ends it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerHealthCheck {
    pub command: Vec<String>,
    #[serde(default = "health_interval")]
    pub interval: u32,
    #[serde(default = "health_timeout")]
    pub timeout: u32,
    #[serde(default = "health_retries")]
    pub retries: u32,
    #[serde(default)]
    pub start_period: u32,
}

/// What a health-check command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckCommand<'a> {
    Exec(&'a [String]),
    Shell(&'a str),
}

impl ContainerHealthCheck {
    /// The command as a program or a shell line; `None` when it is neither (refused at validate).
    pub fn parsed(&self) -> Option<CheckCommand<'_>> {
        match self.command.split_first() {
            Some((k, rest)) if k == "CMD" && !rest.is_empty() => Some(CheckCommand::Exec(rest)),
            Some((k, rest)) if k == "CMD-SHELL" && rest.len() == 1 => {
                Some(CheckCommand::Shell(&rest[0]))
            }
            _ => None,
        }
    }
}

/// A health check's verdict on one container, or on a task (ECS's healthStatus).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HealthStatus {
    Healthy,
    Unhealthy,
    /// No health check, or none has decided yet (start period, first run).
    #[default]
    Unknown,
}

impl HealthStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Healthy => "HEALTHY",
            HealthStatus::Unhealthy => "UNHEALTHY",
            HealthStatus::Unknown => "UNKNOWN",
        }
    }

    /// ECS's rule for a task: UNHEALTHY when an essential container with a check is
    /// unhealthy; HEALTHY when every essential container with a check is healthy;
    /// otherwise UNKNOWN (and UNKNOWN when no essential container has a check).
    /// `containers`: (essential, has a check, status).
    pub fn of_task(containers: impl IntoIterator<Item = (bool, bool, HealthStatus)>) -> Self {
        let mut any = false;
        let mut all_healthy = true;
        for (essential, checked, status) in containers {
            if !essential || !checked {
                continue;
            }
            any = true;
            match status {
                HealthStatus::Unhealthy => return HealthStatus::Unhealthy,
                HealthStatus::Unknown => all_healthy = false,
                HealthStatus::Healthy => {}
            }
        }
        if any && all_healthy {
            HealthStatus::Healthy
        } else {
            HealthStatus::Unknown
        }
    }
}

impl std::fmt::Display for HealthStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `volume "NAME" { host_path | docker_volume { ... } }` of a task definition. With
/// neither, a scratch volume that lives as long as the task (ECS's bind mount
/// without a source path).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub name: String,
    /// An absolute directory or file on the host, bind-mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_volume: Option<DockerVolume>,
}

/// A Docker named volume (ECS's `dockerVolumeConfiguration`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DockerVolume {
    /// `task`: made for each task and removed with it; `shared`: kept on the host,
    /// made when first needed, shared by every task that names it.
    #[serde(default, skip_serializing_if = "VolumeScope::is_task")]
    pub scope: VolumeScope,
    /// The volume driver (`local` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub driver_opts: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeScope {
    #[default]
    Task,
    Shared,
}

impl VolumeScope {
    fn is_task(&self) -> bool {
        *self == VolumeScope::Task
    }
}

/// `mount_point { source_volume, container_path, read_only }` of a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountPoint {
    pub source_volume: String,
    pub container_path: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub read_only: bool,
}

/// `ulimit { name, soft, hard }` of a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ulimit {
    pub name: String,
    pub soft: i64,
    pub hard: i64,
}

/// The resource names a ulimit may set (ECS's list).
pub const ULIMIT_NAMES: &[&str] = &[
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

/// One host port a placed task holds: its container's port published there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPort {
    pub container: String,
    /// The mapping's name (endpoints list the port under it); unset: the container port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub container_port: u16,
    pub host_port: u16,
    #[serde(default, skip_serializing_if = "is_tcp")]
    pub protocol: Protocol,
}

impl TaskPort {
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.container_port.to_string())
    }
}

/// A host port as a placement resource: protocol and number.
pub type HostPortKey = (Protocol, u16);

/// The default range dynamic host ports are assigned from: the one ECS's agent
/// uses on Linux (`ECS_DYNAMIC_HOST_PORT_RANGE`'s default). A pool sets its own with
/// `host_port_range`.
pub const DEFAULT_HOST_PORT_RANGE: (u16, u16) = (49153, 65535);

/// The host ports a task definition needs whatever host it lands on: every port of
/// a host-mode task, and the fixed `host_port`s of a bridge-mode one.
pub fn fixed_host_ports(td: &super::TaskDefinition) -> BTreeSet<HostPortKey> {
    let mut out = BTreeSet::new();
    for c in &td.containers {
        for p in &c.port_mappings {
            match td.network_mode {
                NetworkMode::Host => {
                    out.insert((p.protocol, p.container_port));
                }
                NetworkMode::Bridge if p.host_port != 0 => {
                    out.insert((p.protocol, p.host_port));
                }
                _ => {}
            }
        }
    }
    out
}

/// The host ports of a task placed on a host where `used` are taken: fixed ports
/// as declared, each dynamic one the lowest free port of `range` (taken into
/// `used`). `None` when the range has no free port left.
pub fn assign_ports(
    td: &super::TaskDefinition,
    range: (u16, u16),
    used: &mut BTreeSet<HostPortKey>,
) -> Option<Vec<TaskPort>> {
    let mut out = Vec::new();
    for c in &td.containers {
        for p in &c.port_mappings {
            let host_port = match td.network_mode {
                NetworkMode::None => continue,
                NetworkMode::Host => p.container_port,
                NetworkMode::Bridge if p.host_port != 0 => p.host_port,
                NetworkMode::Bridge => {
                    (range.0..=range.1).find(|n| !used.contains(&(p.protocol, *n)))?
                }
            };
            used.insert((p.protocol, host_port));
            out.push(TaskPort {
                container: c.name.clone(),
                name: p.name.clone(),
                container_port: p.container_port,
                host_port,
                protocol: p.protocol,
            });
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_health_follows_the_essential_containers() {
        use HealthStatus::*;
        assert_eq!(HealthStatus::of_task([]), Unknown);
        assert_eq!(HealthStatus::of_task([(true, false, Unknown)]), Unknown);
        assert_eq!(HealthStatus::of_task([(true, true, Healthy)]), Healthy);
        assert_eq!(
            HealthStatus::of_task([(true, true, Healthy), (true, true, Unknown)]),
            Unknown
        );
        assert_eq!(
            HealthStatus::of_task([(true, true, Healthy), (false, true, Unhealthy)]),
            Healthy
        );
        assert_eq!(
            HealthStatus::of_task([(true, true, Healthy), (true, true, Unhealthy)]),
            Unhealthy
        );
    }

    #[test]
    fn check_commands_are_programs_or_shell_lines() {
        let hc = |cmd: &[&str]| ContainerHealthCheck {
            command: cmd.iter().map(|s| s.to_string()).collect(),
            interval: 30,
            timeout: 5,
            retries: 3,
            start_period: 0,
        };
        assert!(matches!(
            hc(&["CMD", "true"]).parsed(),
            Some(CheckCommand::Exec(a)) if a == ["true"]
        ));
        assert_eq!(
            hc(&["CMD-SHELL", "exit 0"]).parsed(),
            Some(CheckCommand::Shell("exit 0"))
        );
        assert_eq!(hc(&["CMD"]).parsed(), None);
        assert_eq!(hc(&["CMD-SHELL", "a", "b"]).parsed(), None);
        assert_eq!(hc(&["true"]).parsed(), None);
    }
}
