//! Pools of hosts gpushare does not launch (`capacity_provider { hosts = "registered" }`):
//! servers that join with a pool token, like ECS on EC2 and ECS Anywhere, and the
//! operator's holds on any host (`gpushare host cordon|drain|remove`).

use super::CapacityProvider;
use serde::{Deserialize, Serialize};

/// Where a pool's hosts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HostSource {
    /// gpushare launches, replaces and terminates them (like ECS Managed Instances).
    #[default]
    Launched,
    /// They join by themselves with a pool token (`gpushare host setup`); gpushare
    /// never launches, retires or terminates one (like ECS on EC2 / ECS Anywhere).
    Registered,
}

impl HostSource {
    pub fn is_launched(&self) -> bool {
        *self == HostSource::Launched
    }
    pub fn as_str(self) -> &'static str {
        match self {
            HostSource::Launched => "launched",
            HostSource::Registered => "registered",
        }
    }
}

/// The instance type recorded for a registered host that gave none at join.
pub const REGISTERED_TYPE: &str = "registered";

/// What a registered host's record keeps of its joining.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRegistration {
    /// SHA-256 (hex) of the public key of the first host that joined under this id:
    /// only a host holding that key may join under it again (another machine claiming
    /// the id is refused until `gpushare host remove` forgets it).
    pub key_sha256: String,
    /// Seconds since the Unix epoch of its first join.
    pub joined_at: u64,
    /// The host's own name (hostname) as it gave it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
}

/// An operator's hold on a host, set by `gpushare host cordon|drain|remove` and
/// carried out by the next plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    /// Takes no new tasks; nothing running moves.
    Cordoned,
    /// Its tasks move elsewhere (start before stop); it stays, cordoned.
    Drain,
    /// Its tasks move elsewhere, then it leaves the fleet (a registered host is
    /// deregistered and its agent stops; a launched one is terminated).
    Remove,
}

impl Hold {
    pub fn as_str(self) -> &'static str {
        match self {
            Hold::Cordoned => "cordoned",
            Hold::Drain => "drained",
            Hold::Remove => "removing",
        }
    }
}

impl CapacityProvider {
    /// Whether the pool's hosts join by themselves (`hosts = "registered"`).
    pub fn is_registered(&self) -> bool {
        self.hosts == HostSource::Registered
    }

    /// What one of its registered hosts costs per hour (`host_hourly_cost`; unset: 0).
    pub fn registered_host_cost(&self) -> f64 {
        parse_cost(self.host_hourly_cost.as_deref())
    }
}

/// `host_hourly_cost` as a number: a decimal string (a number is taken too); anything
/// else, or unset, is 0 (the loader refuses other values).
pub(super) fn parse_cost(v: Option<&str>) -> f64 {
    v.and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|c| c.is_finite() && *c >= 0.0)
        .unwrap_or(0.0)
}
