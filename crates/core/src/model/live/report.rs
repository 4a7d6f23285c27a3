//! What an agent reports about its host: its GPUs, health checks and each task's
//! state, health, usage and output ([`HostReport`]), cleaned of what no report may
//! carry, and how a task's status reads (healthy or why not).

use super::super::health::{
    clean_text, HostHealth, MAX_HOST_GPUS, MAX_REPORT_TASKS, MAX_REPORT_TEXT,
};
use super::{GpuInfo, MpsHealth, StoreState, TaskState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What an agent last reported about its host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct HostReport {
    pub host_id: String,
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub mps_health: MpsHealth,
    pub gpus: Vec<GpuInfo>,
    /// Task id -> state as the agent sees it.
    pub tasks: BTreeMap<String, TaskState>,
    /// The reporting agent's version (`CARGO_PKG_VERSION`); empty in reports written before agents.
    #[serde(default)]
    pub agent_version: String,
    /// The last failed MPS probe's error (`None` after a success or when never probed).
    #[serde(default)]
    pub mps_error: Option<String>,
    /// Failed MPS probes in a row (three make the host impaired; a success resets).
    #[serde(default)]
    pub mps_failures: u32,
    /// Task id -> state with its reason, exit code and restarts (the detail of `tasks`).
    #[serde(default)]
    pub task_details: BTreeMap<String, TaskStatus>,
    /// Every health check and GPU with status, reason and last change (absent in
    /// reports of agents from before the checks).
    #[serde(default, skip_serializing_if = "HostHealth::is_empty")]
    pub health: HostHealth,
    /// The time the agent itself wrote in the report, kept as information only: the
    /// controller stamps `at` with the time it received the report (issue 46).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_at: Option<u64>,
    /// The address clients reach the host's published ports at (the agent's
    /// `--address`, else the address it reaches the controller from): what
    /// `gpushare endpoints` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The answer to the host's standing log request (`Host::log_request`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<super::super::LogReply>,
    /// Set by the store, never read from a report: why what is stored as this host's
    /// report was not taken (it does not parse, or it names another host). Such a
    /// report gives no heartbeat, health, inventory or task states, so the host turns
    /// silent after the planner's grace, and `show` says why.
    #[serde(skip)]
    pub unreadable: Option<String>,
}

/// [`clean_text`] in place, only when needed.
fn clean_in_place(s: &mut String) {
    if s.len() > MAX_REPORT_TEXT || s.chars().any(char::is_control) {
        *s = clean_text(s);
    }
}

/// Make a GPU as a host reported it fit to store and show (its texts cleaned).
pub fn clean_gpu(g: &mut GpuInfo) {
    clean_in_place(&mut g.model);
    if let Some(u) = g.uuid.as_mut() {
        clean_in_place(u);
    }
    if let Some(m) = g.compute_mode.as_mut() {
        clean_in_place(m);
    }
}

impl HostReport {
    /// Take a report an agent sent at `now` (the controller's clock): refused when it
    /// names more GPUs or tasks than a host can have; its texts cleaned of control
    /// characters; `at` set to `now` (the agent's own time kept in `agent_at`), so a
    /// host cannot stay "heard from" by reporting a time ahead (issue 46).
    pub fn accept(&mut self, now: u64) -> Result<(), String> {
        if self.gpus.len() > MAX_HOST_GPUS {
            return Err(format!(
                "the report names {} GPUs; a host has at most {MAX_HOST_GPUS}",
                self.gpus.len()
            ));
        }
        let tasks = self.tasks.len().max(self.task_details.len());
        if tasks > MAX_REPORT_TASKS {
            return Err(format!(
                "the report names {tasks} tasks; a report may name at most {MAX_REPORT_TASKS}"
            ));
        }
        self.gpus.iter_mut().for_each(clean_gpu);
        clean_in_place(&mut self.agent_version);
        if let Some(e) = self.mps_error.as_mut() {
            clean_in_place(e);
        }
        for s in self.task_details.values_mut() {
            if let Some(r) = s.reason.as_mut() {
                clean_in_place(r);
            }
            if let Some(o) = s.last_output.as_mut() {
                *o = output_tail(o, MAX_LAST_OUTPUT);
            }
            if let Some(u) = s.usage.as_mut() {
                u.gpus.truncate(MAX_HOST_GPUS);
            }
        }
        self.health.clean();
        if let Some(a) = self.address.as_mut() {
            clean_in_place(a);
        }
        if let Some(l) = self.logs.as_mut() {
            l.bound();
        }
        self.agent_at = Some(self.at);
        self.at = now;
        Ok(())
    }

    /// What is stored under `key_host`'s report (a file `reports/<host>.json`, an etcd
    /// key `report/<host>`), as the planner may trust it: a report is taken only for the
    /// host it is stored under (a host can write only its own key, but could write any
    /// `host_id` into the value), and one that does not parse stands for that host alone
    /// instead of failing every read of the cluster's reports.
    pub fn from_stored(key_host: &str, bytes: &[u8]) -> HostReport {
        let refused = |why: String| HostReport {
            host_id: key_host.to_string(),
            unreadable: Some(why),
            ..HostReport::default()
        };
        match serde_json::from_slice::<HostReport>(bytes) {
            Ok(r) => HostReport::stored_under(key_host, r),
            Err(e) => refused(format!(
                "the report stored for host {key_host} does not parse: {e}"
            )),
        }
    }

    /// Report `r` as read from where host `key_host`'s report is kept: itself when it
    /// names that host, else refused (`unreadable` says why: a report counts only for
    /// the host it is stored under).
    pub fn stored_under(key_host: &str, r: HostReport) -> HostReport {
        if r.host_id == key_host {
            return r;
        }
        HostReport {
            host_id: key_host.to_string(),
            unreadable: Some(format!(
                "the report stored for host {key_host} names host {:?}; a report counts only for the host it is stored under",
                r.host_id
            )),
            ..HostReport::default()
        }
    }
}

/// Whether a task in `state` counts as healthy at `now`: running, and (when its
/// agent reports the detail, `status`) reported running without a restart for
/// `min_seconds` (a deployment's `min_healthy_seconds`; docs/deployments.md). A task
/// whose agent gives no detail counts once running. The one rule the planner, apply's
/// wait for successors and `show` judge health by.
/// A task with a health check counts once its check says HEALTHY, as in ECS
/// (and never while UNHEALTHY or UNKNOWN), whatever `min_seconds`.
pub fn task_healthy(
    state: TaskState,
    status: Option<&TaskStatus>,
    now: u64,
    min_seconds: u64,
) -> bool {
    state == TaskState::Running
        && status.is_none_or(|s| {
            s.state == TaskState::Running
                && match s.health {
                    Some(h) => h == super::super::HealthStatus::Healthy,
                    None => now.saturating_sub(s.since) >= min_seconds,
                }
        })
}

/// Why a running task counts as failed by its health check (its essential
/// container turned UNHEALTHY), for the planner that replaces it; `None` otherwise.
pub fn unhealthy_reason(status: Option<&TaskStatus>) -> Option<String> {
    let s = status?;
    if s.state != TaskState::Running || s.health != Some(super::super::HealthStatus::Unhealthy) {
        return None;
    }
    let which: Vec<&str> = s
        .container_health
        .iter()
        .filter(|(_, h)| **h == super::super::HealthStatus::Unhealthy)
        .map(|(c, _)| c.as_str())
        .collect();
    Some(if which.is_empty() {
        "the task failed its health checks (UNHEALTHY)".to_string()
    } else {
        format!(
            "container {} failed its health check (UNHEALTHY)",
            which.join(", ")
        )
    })
}

/// One task as its agent sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub state: TaskState,
    /// Why the task is in this state (e.g. "container main exited with code 1",
    /// "MPS daemon not answering: ..."); `None` when running normally.
    #[serde(default)]
    pub reason: Option<String>,
    /// Exit code of the essential container that stopped the task.
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// Seconds since the Unix epoch when the task entered this state.
    #[serde(default)]
    pub since: u64,
    /// How many times this agent (re)started the task.
    #[serde(default)]
    pub restarts: u32,
    /// The task's health by its essential containers' health checks (ECS's rule);
    /// `None` when none has a check (or the agent predates checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<super::super::HealthStatus>,
    /// Each container with a health check: its verdict.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub container_health: BTreeMap<String, super::super::HealthStatus>,
    /// The last lines the essential container that ended the task wrote (at most
    /// [`MAX_LAST_OUTPUT`] bytes): what `show` prints for a task that keeps failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_output: Option<String>,
    /// What the task uses of its GPUs, as its host's agent measured it this pass
    /// (NVML's compute processes mapped to the task; issue 49). `None`: not measured
    /// (no GPU process of the task, or an agent that predates it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TaskUsage>,
    /// Seconds since the epoch when the agent last started the task (a job's run:
    /// its attempt's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
}

/// A task's GPU use: what its processes hold and compute now, and the most memory
/// they held since the task started.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TaskUsage {
    /// GPU memory its processes hold now, MiB (all its GPUs).
    pub gpu_memory_mib: u64,
    /// The most they held at once since the task started (as this agent saw it).
    pub peak_gpu_memory_mib: u64,
    /// SM utilisation of its processes over the last sample, percent of one GPU
    /// (summed over its processes; `None` when the driver gave no sample).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_percent: Option<u32>,
    /// The GPU indexes its processes run on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<u32>,
    /// When it was measured (seconds since the epoch, the agent's clock).
    pub at: u64,
    /// The Prometheus metric of the task's own endpoint (its [`Task::scrape`]) as the
    /// agent scraped it this pass; `None`: not asked, or the scrape failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<EndpointSample>,
}

/// A Prometheus metric's value read from a task's endpoint: the sum of its samples.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndpointSample {
    pub metric: String,
    pub value: f64,
}

impl PartialEq for EndpointSample {
    fn eq(&self, other: &Self) -> bool {
        self.metric == other.metric && self.value.to_bits() == other.value.to_bits()
    }
}

impl Eq for EndpointSample {}

/// One task's GPU use with where it runs (`show`, the metrics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskUsageRow {
    pub service: String,
    pub task: String,
    pub host: String,
    /// The MPS memory it declared, MiB (0: a dedicated GPU or none).
    pub declared_gpu_memory_mib: u64,
    #[serde(flatten)]
    pub usage: TaskUsage,
}

/// Every task of `state` whose agent reported its GPU use (`status`, from the
/// reports), in task id order.
pub fn task_usage_rows(
    state: &StoreState,
    status: &BTreeMap<String, TaskStatus>,
) -> Vec<TaskUsageRow> {
    state
        .tasks
        .values()
        .filter_map(|t| {
            let usage = status.get(&t.id)?.usage.clone()?;
            Some(TaskUsageRow {
                service: t.service.clone(),
                task: t.id.clone(),
                host: t.host.clone(),
                declared_gpu_memory_mib: t.gpu_memory_mib(),
                usage,
            })
        })
        .collect()
}

/// The most of a failed task's last output a report keeps.
pub const MAX_LAST_OUTPUT: usize = 4096;

/// `text` fit for a report: its last `max` bytes (on a character boundary), its
/// control characters other than newline and tab replaced.
pub fn output_tail(text: &str, max: usize) -> String {
    let mut cut = text.len().saturating_sub(max);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..]
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}
