//! The ECS documents `import-ecs` reads, as typed structs: a task definition (as
//! `aws ecs describe-task-definition` prints it, or `register-task-definition` input)
//! and a service (`describe-services` output or `create-service` input).
//!
//! Each struct reads only what gpushare carries over (or checks); every other key is
//! reported by [`super::report`] from the raw JSON, with a reason, so nothing is
//! dropped silently. The `*_KEYS` lists name the keys a struct reads.

use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// `null` reads as the empty value (ECS prints `null` for some unset lists).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A task-level `cpu` or `memory`: ECS prints them as strings ("1024"), and
/// register input may give a number.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum NumOrText {
    Num(u64),
    Text(String),
}

pub const TASK_KEYS: &[&str] = &[
    "family",
    "containerDefinitions",
    "networkMode",
    "volumes",
    "requiresCompatibilities",
    "cpu",
    "memory",
    "placementConstraints",
    "runtimePlatform",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskDef {
    pub family: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub container_definitions: Vec<ContainerDef>,
    pub network_mode: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub volumes: Vec<Volume>,
    #[serde(default, deserialize_with = "nullable")]
    pub requires_compatibilities: Vec<String>,
    pub cpu: Option<NumOrText>,
    pub memory: Option<NumOrText>,
    #[serde(default, deserialize_with = "nullable")]
    pub placement_constraints: Vec<PlacementConstraint>,
    pub runtime_platform: Option<RuntimePlatform>,
}

pub const RUNTIME_PLATFORM_KEYS: &[&str] = &["cpuArchitecture", "operatingSystemFamily"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimePlatform {
    pub cpu_architecture: Option<String>,
    pub operating_system_family: Option<String>,
}

pub const CONTAINER_KEYS: &[&str] = &[
    "name",
    "image",
    "essential",
    "command",
    "entryPoint",
    "environment",
    "secrets",
    "cpu",
    "memory",
    "memoryReservation",
    "portMappings",
    "healthCheck",
    "mountPoints",
    "linuxParameters",
    "ulimits",
    "user",
    "workingDirectory",
    "stopTimeout",
    "dockerLabels",
    "resourceRequirements",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerDef {
    pub name: Option<String>,
    pub image: Option<String>,
    pub essential: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    pub command: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub entry_point: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub environment: Vec<NameValue>,
    #[serde(default, deserialize_with = "nullable")]
    pub secrets: Vec<SecretRef>,
    pub cpu: Option<u32>,
    pub memory: Option<u64>,
    pub memory_reservation: Option<u64>,
    #[serde(default, deserialize_with = "nullable")]
    pub port_mappings: Vec<PortMapping>,
    pub health_check: Option<HealthCheck>,
    #[serde(default, deserialize_with = "nullable")]
    pub mount_points: Vec<MountPoint>,
    pub linux_parameters: Option<LinuxParameters>,
    #[serde(default, deserialize_with = "nullable")]
    pub ulimits: Vec<Ulimit>,
    pub user: Option<String>,
    pub working_directory: Option<String>,
    pub stop_timeout: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    pub docker_labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub resource_requirements: Vec<ResourceRequirement>,
}

pub const NAME_VALUE_KEYS: &[&str] = &["name", "value"];

#[derive(Debug, Deserialize)]
pub struct NameValue {
    pub name: Option<String>,
    pub value: Option<String>,
}

pub const SECRET_KEYS: &[&str] = &["name", "valueFrom"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    pub name: Option<String>,
    pub value_from: Option<String>,
}

pub const PORT_KEYS: &[&str] = &["containerPort", "hostPort", "protocol", "name"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    pub container_port: Option<u32>,
    pub host_port: Option<u32>,
    pub protocol: Option<String>,
    pub name: Option<String>,
}

pub const HEALTH_KEYS: &[&str] = &["command", "interval", "timeout", "retries", "startPeriod"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    #[serde(default, deserialize_with = "nullable")]
    pub command: Vec<String>,
    pub interval: Option<u32>,
    pub timeout: Option<u32>,
    pub retries: Option<u32>,
    pub start_period: Option<u32>,
}

pub const MOUNT_KEYS: &[&str] = &["sourceVolume", "containerPath", "readOnly"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MountPoint {
    pub source_volume: Option<String>,
    pub container_path: Option<String>,
    pub read_only: Option<bool>,
}

pub const LINUX_KEYS: &[&str] = &["initProcessEnabled", "sharedMemorySize"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinuxParameters {
    pub init_process_enabled: Option<bool>,
    pub shared_memory_size: Option<u32>,
}

pub const ULIMIT_KEYS: &[&str] = &["name", "softLimit", "hardLimit"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ulimit {
    pub name: Option<String>,
    pub soft_limit: Option<i64>,
    pub hard_limit: Option<i64>,
}

pub const REQUIREMENT_KEYS: &[&str] = &["type", "value", "sharingStrategy"];

/// `resourceRequirements[]`: `{"type": "GPU", "value": "1"}` for whole GPUs, or
/// `{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": MiB,
/// "maxComputePercent": P}}}` for a share of one GPU through MPS (ECS's GPU sharing:
/// API types SharingStrategy and NvidiaMpsAllocation).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirement {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub value: Option<String>,
    pub sharing_strategy: Option<SharingStrategy>,
}

pub const SHARING_KEYS: &[&str] = &["nvidiaMps"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SharingStrategy {
    pub nvidia_mps: Option<NvidiaMps>,
}

pub const MPS_KEYS: &[&str] = &["memory", "maxComputePercent"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NvidiaMps {
    pub memory: Option<u64>,
    pub max_compute_percent: Option<u32>,
}

pub const VOLUME_KEYS: &[&str] = &["name", "host", "dockerVolumeConfiguration"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub name: Option<String>,
    pub host: Option<HostVolume>,
    pub docker_volume_configuration: Option<DockerVolume>,
}

pub const HOST_VOLUME_KEYS: &[&str] = &["sourcePath"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostVolume {
    pub source_path: Option<String>,
}

pub const DOCKER_VOLUME_KEYS: &[&str] = &["scope", "driver", "driverOpts", "labels"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DockerVolume {
    pub scope: Option<String>,
    pub driver: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub driver_opts: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
}

pub const CONSTRAINT_KEYS: &[&str] = &["type", "expression"];

#[derive(Debug, Deserialize)]
pub struct PlacementConstraint {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub expression: Option<String>,
}

pub const SERVICE_KEYS: &[&str] = &[
    "serviceName",
    "taskDefinition",
    "desiredCount",
    "deploymentConfiguration",
    "loadBalancers",
    "placementStrategy",
    "placementConstraints",
    "capacityProviderStrategy",
    "launchType",
    "schedulingStrategy",
    "deploymentController",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    pub service_name: Option<String>,
    pub task_definition: Option<String>,
    pub desired_count: Option<u32>,
    pub deployment_configuration: Option<DeploymentConfig>,
    #[serde(default, deserialize_with = "nullable")]
    pub load_balancers: Vec<LoadBalancer>,
    #[serde(default, deserialize_with = "nullable")]
    pub placement_strategy: Vec<PlacementStrategy>,
    #[serde(default, deserialize_with = "nullable")]
    pub placement_constraints: Vec<PlacementConstraint>,
    #[serde(default, deserialize_with = "nullable")]
    pub capacity_provider_strategy: Vec<CapacityProviderItem>,
    pub launch_type: Option<String>,
    pub scheduling_strategy: Option<String>,
    pub deployment_controller: Option<DeploymentController>,
}

pub const DEPLOYMENT_KEYS: &[&str] = &[
    "maximumPercent",
    "minimumHealthyPercent",
    "deploymentCircuitBreaker",
    "strategy",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentConfig {
    pub maximum_percent: Option<u32>,
    pub minimum_healthy_percent: Option<u32>,
    pub deployment_circuit_breaker: Option<CircuitBreaker>,
    pub strategy: Option<String>,
}

pub const BREAKER_KEYS: &[&str] = &["enable", "rollback"];

#[derive(Debug, Deserialize)]
pub struct CircuitBreaker {
    pub enable: Option<bool>,
    pub rollback: Option<bool>,
}

pub const LOAD_BALANCER_KEYS: &[&str] = &["targetGroupArn", "containerName", "containerPort"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    pub target_group_arn: Option<String>,
    pub container_name: Option<String>,
    pub container_port: Option<u32>,
}

pub const STRATEGY_KEYS: &[&str] = &["type", "field"];

#[derive(Debug, Deserialize)]
pub struct PlacementStrategy {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub field: Option<String>,
}

pub const CAPACITY_ITEM_KEYS: &[&str] = &["capacityProvider", "weight", "base"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityProviderItem {
    pub capacity_provider: Option<String>,
}

pub const CONTROLLER_KEYS: &[&str] = &["type"];

#[derive(Debug, Deserialize)]
pub struct DeploymentController {
    #[serde(rename = "type")]
    pub kind: Option<String>,
}
