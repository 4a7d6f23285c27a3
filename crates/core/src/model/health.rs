//! A host's health as its agent judges it, ECS-style: a few named checks, each with
//! a status, a reason and the time of its last change, and the same per GPU. The
//! overall status is the most severe of the checks. The agent decides the statuses
//! (`gpushare_agent::health`); the planner only reads them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The status of one check (ECS's container instance health statuses, in snake case:
/// `OK`, `IMPAIRED`, `INSUFFICIENT_DATA`, `INITIALIZING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Ok,
    /// The check failed: the host (or GPU) is replaced (or its tasks moved) unless the
    /// pool has `auto_repair = false`.
    Impaired,
    /// The check could not run (NVML missing, no answer to read).
    InsufficientData,
    /// The check has not run yet.
    #[default]
    Initializing,
}

impl CheckStatus {
    /// How bad: the overall status of several checks is the most severe.
    pub fn severity(self) -> u8 {
        match self {
            CheckStatus::Ok => 0,
            CheckStatus::Initializing => 1,
            CheckStatus::InsufficientData => 2,
            CheckStatus::Impaired => 3,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Impaired => "impaired",
            CheckStatus::InsufficientData => "insufficient_data",
            CheckStatus::Initializing => "initializing",
        }
    }

    /// Every status, least severe first (for metrics that list them all).
    pub const ALL: [CheckStatus; 4] = [
        CheckStatus::Ok,
        CheckStatus::Initializing,
        CheckStatus::InsufficientData,
        CheckStatus::Impaired,
    ];
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a check looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// The MPS control daemon answers its probe (three failures in a row: impaired).
    MpsDaemon,
    /// The GPUs: the expected count present, none lost (NVML).
    Gpus,
    /// The container runtime answers (Docker Engine ping; the process runtime's state
    /// directory is writable).
    ContainerRuntime,
    /// The first-boot deep check (`dcgmi diag -r 1`), when the pool asks for it.
    DeepDiagnostic,
}

impl CheckKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckKind::MpsDaemon => "mps_daemon",
            CheckKind::Gpus => "gpus",
            CheckKind::ContainerRuntime => "container_runtime",
            CheckKind::DeepDiagnostic => "deep_diagnostic",
        }
    }
}

impl fmt::Display for CheckKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One check of a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    pub check: CheckKind,
    pub status: CheckStatus,
    /// Why (set for every status but `ok`, and for `ok` when there is something to say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Seconds since the Unix epoch when the status last changed.
    #[serde(default)]
    pub since: u64,
}

/// One GPU of a host: impaired by a lost GPU, a critical Xid event, uncorrectable ECC
/// errors, pending page retirement or a failed row remapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuHealth {
    pub index: u32,
    pub status: CheckStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Seconds since the Unix epoch when the status last changed.
    #[serde(default)]
    pub since: u64,
}

/// Every check of a host and every GPU's health. Empty in reports of agents that
/// predate the checks (and for hosts that never reported): nothing is judged then.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostHealth {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<HealthCheck>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuHealth>,
    /// EC2 is about to end or disturb the host (a Spot interruption notice or a
    /// scheduled event): the planner drains it at once and starts its tasks elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<HostNotice>,
}

/// What kind of notice EC2 gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// `spot/instance-action` in the instance metadata: the Spot instance is
    /// stopped, hibernated or terminated at `at` (two minutes after the notice).
    SpotInterruption,
    /// A scheduled instance event (retirement, reboot, maintenance), from the
    /// instance metadata's `events/maintenance/scheduled` or DescribeInstanceStatus.
    ScheduledEvent,
}

/// A notice that EC2 will end or disturb a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostNotice {
    pub kind: NoticeKind,
    /// When EC2 acts (UTC, RFC 3339), as EC2 said it.
    pub at: String,
    /// The action (`terminate`, `stop`, `hibernate`) or the event's code and
    /// description (`instance-retirement: The instance is running on degraded hardware`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Who said it: `imds` (the host's agent) or `ec2` (DescribeInstanceStatus, read
    /// by the controller for a host whose agent is silent).
    pub source: String,
}

impl HostNotice {
    /// A scheduled event's notice from `source`: EC2 acts at `at`; the detail is
    /// `code: description` (the code alone without a description).
    pub fn scheduled(at: String, code: String, description: &str, source: &str) -> HostNotice {
        let detail = if description.is_empty() {
            code
        } else {
            format!("{code}: {description}")
        };
        HostNotice {
            kind: NoticeKind::ScheduledEvent,
            at,
            detail: Some(detail),
            source: source.to_string(),
        }
    }
}

impl fmt::Display for HostNotice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            NoticeKind::SpotInterruption => write!(f, "Spot interruption notice at {}", self.at)?,
            NoticeKind::ScheduledEvent => write!(f, "scheduled instance event at {}", self.at)?,
        }
        match &self.detail {
            Some(d) => write!(f, " ({d}; from {})", self.source),
            None => write!(f, " (from {})", self.source),
        }
    }
}

/// The most GPUs a host may report or join with (the largest instance has 16).
pub const MAX_HOST_GPUS: usize = 64;
/// The most tasks one report may name.
pub const MAX_REPORT_TASKS: usize = 4096;
/// The longest text one field of a report may hold (longer is cut).
pub const MAX_REPORT_TEXT: usize = 1024;

/// `s` as it may be shown: control characters (escape sequences, line breaks that
/// would forge lines) replaced by U+FFFD, and cut at [`MAX_REPORT_TEXT`] characters.
pub fn clean_text(s: &str) -> String {
    s.chars()
        .take(MAX_REPORT_TEXT)
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect()
}

impl HostHealth {
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty() && self.gpus.is_empty() && self.notice.is_none()
    }

    /// The reasons as an agent sent them, cleaned of control characters and cut
    /// ([`super::clean_text`]); at most one entry per GPU a host can have.
    pub fn clean(&mut self) {
        self.gpus.truncate(MAX_HOST_GPUS);
        self.checks.truncate(16);
        let reasons = self
            .checks
            .iter_mut()
            .map(|c| &mut c.reason)
            .chain(self.gpus.iter_mut().map(|g| &mut g.reason));
        for r in reasons.flatten() {
            *r = clean_text(r);
        }
        if let Some(n) = self.notice.as_mut() {
            n.at = clean_text(&n.at);
            n.source = clean_text(&n.source);
            if let Some(d) = n.detail.as_mut() {
                *d = clean_text(d);
            }
        }
    }

    /// The most severe status of the checks (`None`: no check reported).
    pub fn overall(&self) -> Option<CheckStatus> {
        self.checks
            .iter()
            .map(|c| c.status)
            .max_by_key(|s| s.severity())
    }

    pub fn check(&self, kind: CheckKind) -> Option<&HealthCheck> {
        self.checks.iter().find(|c| c.check == kind)
    }

    pub fn gpu(&self, index: u32) -> Option<&GpuHealth> {
        self.gpus.iter().find(|g| g.index == index)
    }

    /// The checks that failed, in check order.
    pub fn impaired_checks(&self) -> impl Iterator<Item = &HealthCheck> {
        self.checks
            .iter()
            .filter(|c| c.status == CheckStatus::Impaired)
    }

    /// The GPUs that failed, by index.
    pub fn impaired_gpus(&self) -> impl Iterator<Item = &GpuHealth> {
        self.gpus
            .iter()
            .filter(|g| g.status == CheckStatus::Impaired)
    }

    pub fn gpu_impaired(&self, index: u32) -> bool {
        self.gpu(index)
            .is_some_and(|g| g.status == CheckStatus::Impaired)
    }

    /// Set `kind` to `status` with `reason` at `now`; `since` moves only when the
    /// status changes. The checks stay sorted by kind.
    pub fn set(&mut self, kind: CheckKind, status: CheckStatus, reason: Option<String>, now: u64) {
        match self.checks.iter_mut().find(|c| c.check == kind) {
            Some(c) => {
                if c.status != status {
                    c.since = now;
                }
                c.status = status;
                c.reason = reason;
            }
            None => {
                self.checks.push(HealthCheck {
                    check: kind,
                    status,
                    reason,
                    since: now,
                });
                self.checks.sort_by_key(|c| c.check);
            }
        }
    }

    /// Set GPU `index` to `status` with `reason` at `now` (as [`HostHealth::set`]).
    pub fn set_gpu(&mut self, index: u32, status: CheckStatus, reason: Option<String>, now: u64) {
        match self.gpus.iter_mut().find(|g| g.index == index) {
            Some(g) => {
                if g.status != status {
                    g.since = now;
                }
                g.status = status;
                g.reason = reason;
            }
            None => {
                self.gpus.push(GpuHealth {
                    index,
                    status,
                    reason,
                    since: now,
                });
                self.gpus.sort_by_key(|g| g.index);
            }
        }
    }

    /// One line naming each failed check and GPU with its reason, e.g.
    /// `gpus impaired (GPU 1 lost); GPU 1 impaired (Xid 79)`; empty when none failed.
    pub fn impaired_summary(&self) -> String {
        let mut parts: Vec<String> = self
            .impaired_checks()
            .map(|c| match &c.reason {
                Some(r) => format!("{} impaired: {r}", c.check),
                None => format!("{} impaired", c.check),
            })
            .collect();
        parts.extend(self.impaired_gpus().map(|g| match &g.reason {
            Some(r) => format!("GPU {} impaired: {r}", g.index),
            None => format!("GPU {} impaired", g.index),
        }));
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overall_is_the_most_severe_and_since_moves_on_change_only() {
        let mut h = HostHealth::default();
        assert_eq!(h.overall(), None);
        h.set(CheckKind::Gpus, CheckStatus::Initializing, None, 10);
        h.set(CheckKind::MpsDaemon, CheckStatus::Ok, None, 10);
        assert_eq!(h.overall(), Some(CheckStatus::Initializing));
        h.set(CheckKind::Gpus, CheckStatus::Ok, None, 20);
        assert_eq!(h.overall(), Some(CheckStatus::Ok));
        h.set(
            CheckKind::ContainerRuntime,
            CheckStatus::InsufficientData,
            Some("x".into()),
            30,
        );
        assert_eq!(h.overall(), Some(CheckStatus::InsufficientData));
        h.set(
            CheckKind::MpsDaemon,
            CheckStatus::Impaired,
            Some("down".into()),
            40,
        );
        h.set(
            CheckKind::MpsDaemon,
            CheckStatus::Impaired,
            Some("still down".into()),
            50,
        );
        assert_eq!(h.overall(), Some(CheckStatus::Impaired));
        let mps = h.check(CheckKind::MpsDaemon).expect("set");
        assert_eq!((mps.since, mps.reason.as_deref()), (40, Some("still down")));
        assert_eq!(h.check(CheckKind::Gpus).map(|c| c.since), Some(20));
        // Sorted by kind whatever the order they were set in.
        let kinds: Vec<CheckKind> = h.checks.iter().map(|c| c.check).collect();
        assert_eq!(
            kinds,
            [
                CheckKind::MpsDaemon,
                CheckKind::Gpus,
                CheckKind::ContainerRuntime
            ]
        );
        assert_eq!(h.impaired_summary(), "mps_daemon impaired: still down");
    }

    #[test]
    fn an_old_report_without_health_parses_and_serialises_without_it() {
        let h: HostHealth = serde_json::from_str("{}").expect("parses");
        assert!(h.is_empty());
        assert_eq!(serde_json::to_string(&h).expect("json"), "{}");
        let g: GpuHealth =
            serde_json::from_str(r#"{"index":1,"status":"impaired"}"#).expect("parses");
        assert_eq!((g.status, g.since), (CheckStatus::Impaired, 0));
    }
}
