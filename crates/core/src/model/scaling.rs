//! Service auto scaling by target tracking (ECS's Application Auto Scaling target
//! tracking; docs/autoscaling.md): the `auto_scaling` block of a service, and the
//! record the store keeps beside the service's attributes (its scaled count and the
//! times the planner decides by).

use serde::{Deserialize, Serialize};
use std::fmt;

/// `auto_scaling { min_count, max_count, target { metric, value }, ... }` of a service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoScaling {
    /// The fewest tasks scaling in leaves (>= 1: with no task there is no sample to
    /// scale out by).
    pub min_count: u32,
    /// The most tasks scaling out starts.
    pub max_count: u32,
    pub target: ScalingTarget,
    /// Seconds the metric must stay above its target, and must have passed since the
    /// last scale-out, before the service scales out (ECS's default: 300).
    #[serde(default = "default_cooldown")]
    pub scale_out_cooldown: u64,
    /// Seconds the metric must stay below its target, and must have passed since the
    /// last scale-in, before the service scales in (ECS's default: 300).
    #[serde(default = "default_cooldown")]
    pub scale_in_cooldown: u64,
}

/// `target { metric, value, port, path }`: the metric averaged over the service's
/// healthy tasks, and the value the scaling keeps it at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingTarget {
    /// `gpu_sm_percent`, `gpu_memory_percent`, or the name of a Prometheus metric the
    /// task's own endpoint exposes on `port` ([`ScalingMetric`]); kept as text so
    /// that the loader can refuse another name with a diagnostic of its own.
    pub metric: String,
    /// The target value, > 0 (percent for the GPU metrics; the metric's own unit for
    /// an endpoint's).
    pub value: u32,
    /// For a Prometheus metric: the name of the task's port mapping (serving's named
    /// ports) its agent scrapes, on the host port the planner assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// The HTTP path scraped on that port.
    #[serde(default = "default_metrics_path")]
    pub path: String,
}

/// The path a task's Prometheus metrics are scraped from unless `target.path` says.
pub const DEFAULT_METRICS_PATH: &str = "/metrics";

fn default_metrics_path() -> String {
    DEFAULT_METRICS_PATH.to_string()
}

/// What a task's agent scrapes from the task's own endpoint each pass (its service
/// auto scales on a Prometheus metric): set by the planner on the service's tasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricScrape {
    /// The metric's name; its samples (every label set) are summed.
    pub metric: String,
    /// The task's port mapping, by name ([`super::TaskPort::label`]).
    pub port: String,
    pub path: String,
}

/// Whether `name` is a Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub fn is_prometheus_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// ECS's default cooldowns, seconds.
pub const DEFAULT_SCALING_COOLDOWN: u64 = 300;

fn default_cooldown() -> u64 {
    DEFAULT_SCALING_COOLDOWN
}

/// The metrics a target may track.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalingMetric {
    /// SM utilisation of the task's processes, percent of one GPU (NVML's
    /// per-process samples, `TaskUsage::sm_percent`).
    GpuSmPercent,
    /// GPU memory the task's processes hold, percent of the MPS memory it declares.
    GpuMemoryPercent,
    /// A Prometheus metric the task's own endpoint exposes (`target.metric` names
    /// it, `target.port` and `target.path` say where), as its agent scraped it.
    Endpoint,
}

impl ScalingMetric {
    /// The metrics the agent measures through NVML, by name.
    pub const GPU: [ScalingMetric; 2] =
        [ScalingMetric::GpuSmPercent, ScalingMetric::GpuMemoryPercent];

    pub fn as_str(self) -> &'static str {
        match self {
            ScalingMetric::GpuSmPercent => "gpu_sm_percent",
            ScalingMetric::GpuMemoryPercent => "gpu_memory_percent",
            ScalingMetric::Endpoint => "endpoint",
        }
    }

    /// One of the GPU metrics, by name.
    pub fn parse(s: &str) -> Option<ScalingMetric> {
        Self::GPU.into_iter().find(|m| m.as_str() == s)
    }
}

impl fmt::Display for ScalingMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AutoScaling {
    /// The tracked metric; `None` for a target the loader refuses.
    pub fn metric(&self) -> Option<ScalingMetric> {
        match (ScalingMetric::parse(&self.target.metric), &self.target.port) {
            (Some(m), None) => Some(m),
            (None, Some(_)) if is_prometheus_name(&self.target.metric) => {
                Some(ScalingMetric::Endpoint)
            }
            _ => None,
        }
    }

    /// What the service's tasks' agents scrape: set for a Prometheus metric only.
    pub fn scrape(&self) -> Option<MetricScrape> {
        (self.metric()? == ScalingMetric::Endpoint).then(|| MetricScrape {
            metric: self.target.metric.clone(),
            port: self.target.port.clone().unwrap_or_default(),
            path: self.target.path.clone(),
        })
    }

    /// Why the target names no metric gpushare can track, with the attribute it is
    /// about (relative to the block).
    fn target_problem(&self) -> Option<(&'static str, String)> {
        let t = &self.target;
        let gpu = ScalingMetric::parse(&t.metric);
        if let (Some(m), Some(port)) = (gpu, &t.port) {
            return Some((
                "target.port",
                format!("port {port:?} names the endpoint of a Prometheus metric; {m} is measured by the agent through NVML"),
            ));
        }
        if gpu.is_none() && !is_prometheus_name(&t.metric) {
            return Some((
                "target.metric",
                format!(
                    "metric {:?} is neither gpu_sm_percent, gpu_memory_percent nor a Prometheus metric name",
                    t.metric
                ),
            ));
        }
        if gpu.is_none() && t.port.is_none() {
            return Some((
                "target.port",
                format!(
                    "metric {:?} is a Prometheus metric of the task's own endpoint: port must name the port mapping it is served on",
                    t.metric
                ),
            ));
        }
        if !t.path.starts_with('/') || t.path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Some((
                "target.path",
                format!("path {:?} must start with / and hold no space", t.path),
            ));
        }
        None
    }

    /// Why the block is not valid for a service of `desired_count` tasks, with the
    /// attribute it is about (relative to the block); `None` when it is valid.
    pub fn problem(&self, desired_count: u32) -> Option<(&'static str, String)> {
        if let Some(p) = self.target_problem() {
            return Some(p);
        }
        if self.target.value == 0 {
            return Some(("target.value", "the target value must be above 0".into()));
        }
        if self.min_count == 0 {
            return Some((
                "min_count",
                "min_count must be at least 1: a service scaled to no task has no sample to scale out by".into(),
            ));
        }
        if self.min_count > self.max_count {
            return Some((
                "min_count",
                format!(
                    "min_count {} is above max_count {}",
                    self.min_count, self.max_count
                ),
            ));
        }
        if desired_count < self.min_count || desired_count > self.max_count {
            let attr = if desired_count > self.max_count {
                "max_count"
            } else {
                "min_count"
            };
            return Some((
                attr,
                format!(
                    "desired_count {desired_count} (the starting count) is outside min_count {} .. max_count {}",
                    self.min_count, self.max_count
                ),
            ));
        }
        None
    }
}

/// A service's auto scaling as the store records it, beside its attributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingRecord {
    /// The tasks the service runs now, as scaled.
    pub count: u32,
    /// The `desired_count` it started from: when the declared count changes, the
    /// scaling starts again from the new one.
    pub desired_count: u32,
    /// Since when (seconds since the epoch, the planner's observation time) the
    /// metric is above its target, continuously; `None`: it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above_since: Option<u64>,
    /// Since when it is below its target, continuously.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below_since: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_out: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_in: Option<u64>,
    /// Why the count last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ScalingRecord {
    /// A service's first record: `desired_count` held to the bounds of `a`.
    pub fn start(desired_count: u32, a: &AutoScaling) -> ScalingRecord {
        ScalingRecord {
            count: desired_count.clamp(a.min_count, a.max_count.max(a.min_count)),
            desired_count,
            above_since: None,
            below_since: None,
            last_scale_out: None,
            last_scale_in: None,
            reason: None,
        }
    }
}

/// A change of a service's count the planner decided, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingChange {
    pub from: u32,
    pub to: u32,
    /// E.g. `gpu_sm_percent 91 > target 70 for 3 min, averaged over 6 tasks (auto_scaling)`.
    pub reason: String,
}

impl ScalingChange {
    /// `service.NAME: FROM -> TO tasks: REASON`, the line a plan shows.
    pub fn line(&self, service: &str) -> String {
        format!(
            "service.{service}: {} -> {} tasks: {}",
            self.from, self.to, self.reason
        )
    }
}

/// A plan step: write `record` as service `service`'s scaling record; `change`: the
/// count it changes, if any (its tasks are started or stopped by the same plan).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingUpdate {
    pub service: String,
    pub record: ScalingRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<ScalingChange>,
    /// The service's live tasks whose scrape this step sets (a Prometheus target
    /// added, changed or removed since they were placed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scrapes: Vec<ScrapeChange>,
}

/// Task `task`'s scrape becomes `scrape`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrapeChange {
    pub task: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrape: Option<MetricScrape>,
}
