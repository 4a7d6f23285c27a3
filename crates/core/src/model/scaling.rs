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

/// `target { metric, value }`: the metric averaged over the service's healthy tasks,
/// and the value the scaling keeps it at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingTarget {
    /// `gpu_sm_percent` or `gpu_memory_percent` ([`ScalingMetric`]); kept as text so
    /// that the loader can refuse another name with a diagnostic of its own.
    pub metric: String,
    /// The target value, > 0 (percent for both metrics).
    pub value: u32,
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
}

impl ScalingMetric {
    pub const ALL: [ScalingMetric; 2] =
        [ScalingMetric::GpuSmPercent, ScalingMetric::GpuMemoryPercent];

    pub fn as_str(self) -> &'static str {
        match self {
            ScalingMetric::GpuSmPercent => "gpu_sm_percent",
            ScalingMetric::GpuMemoryPercent => "gpu_memory_percent",
        }
    }

    pub fn parse(s: &str) -> Option<ScalingMetric> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

impl fmt::Display for ScalingMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AutoScaling {
    /// The tracked metric; `None` for a name the loader refuses.
    pub fn metric(&self) -> Option<ScalingMetric> {
        ScalingMetric::parse(&self.target.metric)
    }

    /// Why the block is not valid for a service of `desired_count` tasks, with the
    /// attribute it is about (relative to the block); `None` when it is valid.
    pub fn problem(&self, desired_count: u32) -> Option<(&'static str, String)> {
        if self.metric().is_none() {
            let prometheus = if self.target.metric.contains(':') {
                " (a Prometheus metric of the task's own endpoint is not supported yet)"
            } else {
                ""
            };
            return Some((
                "target.metric",
                format!(
                    "metric {:?} is not one gpushare tracks{prometheus}: use gpu_sm_percent or gpu_memory_percent",
                    self.target.metric
                ),
            ));
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
}
