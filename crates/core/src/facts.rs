//! The cloud's facts the planner fixes launches from, and the pure choice of where a
//! new host launches.
//!
//! A gather step (beside observe, in the engine) asks the cloud, per capacity
//! provider, for the image a launch boots (the pool's `image`, or the newest default
//! image resolved once) and the subnets with their availability zones. Capacity
//! refusals (a zone that answered "insufficient capacity" for an instance type) are
//! recorded in the store with a time ([`CapacityRefusal`]), so every process skips them
//! for a while. From these the planner fixes, for each host it launches, the instance
//! type, image, subnet and zone ([`choose_launch`]); apply launches exactly that.
//! Where the cloud reports its own figures for a pool's instance type (EC2's
//! DescribeInstanceTypes: GPUs, GPU memory, vCPUs, memory), new hosts are planned with
//! them rather than the built-in catalogue's ([`InstanceFacts`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the cloud says about the pools of one plan.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CloudFacts {
    /// By capacity provider name. A pool without facts (a cloud that gathers none) is
    /// planned from its configuration alone ([`PoolFacts::from_config`]); the plan
    /// says so.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, PoolFacts>,
    /// The fleet's region's prices (EC2: the Price List API and the current Spot
    /// prices, else the built-in table for that region); `None`: the built-in table
    /// (a cloud without regions, such as the local fleet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<crate::catalog::PriceBook>,
}

impl CloudFacts {
    pub fn is_empty(&self) -> bool {
        self.pools.is_empty() && self.prices.is_none()
    }
}

/// One pool's launch facts.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PoolFacts {
    /// The image every launch of the pool boots (an AMI id on EC2).
    pub image_id: String,
    /// The pool's subnets with their zones, in the pool's order. Empty: the cloud's
    /// default network (EC2's default VPC), zone chosen by the cloud.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<SubnetFact>,
    /// The cloud's own figures for the pool's `instance_type`, when it has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<InstanceFacts>,
    /// The device name of the image's root volume (EC2: from DescribeImages), which
    /// the launch's root volume mapping names; `None` where the cloud has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device: Option<String>,
}

/// What the cloud says one instance type has (EC2: DescribeInstanceTypes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceFacts {
    pub instance_type: String,
    pub gpu_count: u32,
    pub gpu_memory_mib: u64,
    pub vcpus: u32,
    pub memory_mib: u64,
}

impl InstanceFacts {
    /// How the cloud's figures differ from the catalogue entry `it` (`None`: they agree).
    pub fn differs_from(&self, it: &crate::catalog::InstanceType) -> Option<String> {
        let mut d = Vec::new();
        if self.gpu_count != it.gpu_count {
            d.push(format!(
                "{} GPUs (catalogue: {})",
                self.gpu_count, it.gpu_count
            ));
        }
        if self.gpu_memory_mib != it.gpu_memory_mib {
            d.push(format!(
                "{} MiB per GPU (catalogue: {})",
                self.gpu_memory_mib, it.gpu_memory_mib
            ));
        }
        if self.vcpus != it.vcpus {
            d.push(format!("{} vCPUs (catalogue: {})", self.vcpus, it.vcpus));
        }
        if self.memory_mib != it.memory_mib {
            d.push(format!(
                "{} MiB of memory (catalogue: {})",
                self.memory_mib, it.memory_mib
            ));
        }
        (!d.is_empty()).then(|| d.join(", "))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubnetFact {
    pub id: String,
    /// Empty: unknown (a subnet from the configuration, no facts).
    pub zone: String,
}

/// A launch the cloud refused for lack of capacity, kept in the store's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityRefusal {
    pub instance_type: String,
    /// The subnet launched into (`None`: the default network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Seconds since the Unix epoch.
    pub at: u64,
}

impl CapacityRefusal {
    /// Whether the refusal still counts at `now` (`window` seconds after it).
    pub fn is_recent(&self, now: u64, window: u64) -> bool {
        now < self.at.saturating_add(window)
    }

    fn refuses(&self, instance_type: &str, subnet: Option<&str>, zone: Option<&str>) -> bool {
        self.instance_type == instance_type
            && (self.subnet.as_deref() == subnet
                || (zone.is_some() && self.zone.as_deref() == zone))
    }
}

/// Where one host launches, fixed by the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchChoice {
    pub instance_type: String,
    pub image_id: String,
    pub subnet: Option<String>,
    pub zone: Option<String>,
    /// Every candidate was refused recently: this one is the least bad (the plan notes it).
    pub all_refused: bool,
}

/// Choose the instance type, subnet and zone of one new host of a pool. Pure and
/// deterministic:
///
/// - `instance_types` in priority order (the pool's type, then its fallbacks); the
///   first type with a subnet not refused within `window` seconds of `now` wins;
/// - among that type's subnets not refused, the one whose zone holds fewest of the
///   pool's hosts (`zone_load`, live and planned, keyed by zone, or by subnet where
///   the zone is unknown), ties broken by the pool's order, so a pool spreads over
///   its zones;
/// - when every (type, subnet) was refused recently, the first type in the least
///   loaded zone (refusals age out; apply fails again rather than launching elsewhere
///   than planned), flagged `all_refused`.
pub fn choose_launch(
    facts: &PoolFacts,
    instance_types: &[String],
    refusals: &[CapacityRefusal],
    zone_load: &BTreeMap<String, u32>,
    now: u64,
    window: u64,
) -> Option<LaunchChoice> {
    let first = instance_types.first()?;
    let recent: Vec<&CapacityRefusal> = refusals
        .iter()
        .filter(|r| r.is_recent(now, window))
        .collect();
    let candidates: Vec<Candidate<'_>> = if facts.subnets.is_empty() {
        vec![(None, None)]
    } else {
        facts
            .subnets
            .iter()
            .map(|s| {
                (
                    Some(s.id.as_str()),
                    Some(s.zone.as_str()).filter(|z| !z.is_empty()),
                )
            })
            .collect()
    };
    let pick = |t: &String, (subnet, zone): Candidate<'_>, all_refused| LaunchChoice {
        instance_type: t.clone(),
        image_id: facts.image_id.clone(),
        subnet: subnet.map(str::to_string),
        zone: zone.map(str::to_string),
        all_refused,
    };
    for t in instance_types {
        let allowed: Vec<Candidate<'_>> = candidates
            .iter()
            .copied()
            .filter(|(s, z)| !recent.iter().any(|r| r.refuses(t, *s, *z)))
            .collect();
        if let Some(c) = least_loaded(&allowed, zone_load) {
            return Some(pick(t, c, false));
        }
    }
    least_loaded(&candidates, zone_load).map(|c| pick(first, c, true))
}

/// A launch candidate: (subnet, zone).
type Candidate<'a> = (Option<&'a str>, Option<&'a str>);

/// The candidate whose zone (its subnet, when the zone is unknown) holds fewest
/// hosts, the first of those in order.
fn least_loaded<'a>(
    candidates: &[Candidate<'a>],
    zone_load: &BTreeMap<String, u32>,
) -> Option<Candidate<'a>> {
    candidates
        .iter()
        .enumerate()
        .min_by_key(|(i, (subnet, zone))| {
            (
                zone.or(*subnet)
                    .and_then(|z| zone_load.get(z))
                    .copied()
                    .unwrap_or(0),
                *i,
            )
        })
        .map(|(_, c)| *c)
}

/// Keep only the refusals still recent at `now`, and add `new` (replacing an older
/// refusal of the same type and subnet).
pub fn record_refusal(
    refusals: &mut Vec<CapacityRefusal>,
    new: CapacityRefusal,
    now: u64,
    window: u64,
) {
    refusals.retain(|r| {
        r.is_recent(now, window)
            && !(r.instance_type == new.instance_type && r.subnet == new.subnet)
    });
    refusals.push(new);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> PoolFacts {
        PoolFacts {
            instance: None,
            root_device: None,
            image_id: "ami-1".into(),
            subnets: ["a", "b", "c"]
                .iter()
                .map(|z| SubnetFact {
                    id: format!("subnet-{z}"),
                    zone: format!("us-east-1{z}"),
                })
                .collect(),
        }
    }

    fn types(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    fn refusal(t: &str, z: &str, at: u64) -> CapacityRefusal {
        CapacityRefusal {
            instance_type: t.into(),
            subnet: Some(format!("subnet-{z}")),
            zone: Some(format!("us-east-1{z}")),
            at,
        }
    }

    #[test]
    fn spreads_over_zones_in_the_pools_order() {
        let f = facts();
        let mut load = BTreeMap::new();
        let mut zones = Vec::new();
        for _ in 0..4 {
            let c =
                choose_launch(&f, &types(&["g6.xlarge"]), &[], &load, 1000, 600).expect("a choice");
            assert_eq!(c.image_id, "ami-1");
            let z = c.zone.clone().expect("zone");
            *load.entry(z.clone()).or_default() += 1;
            zones.push(z);
        }
        assert_eq!(
            zones,
            ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1a"]
        );
        // The same inputs give the same choice.
        assert_eq!(
            choose_launch(&f, &types(&["g6.xlarge"]), &[], &load, 1000, 600),
            choose_launch(&f, &types(&["g6.xlarge"]), &[], &load, 1000, 600)
        );
    }

    #[test]
    fn a_recent_refusal_is_skipped_and_an_old_one_is_not() {
        let f = facts();
        let load = BTreeMap::new();
        let refused = [refusal("g6.xlarge", "a", 900)];
        let c = choose_launch(&f, &types(&["g6.xlarge"]), &refused, &load, 1000, 600)
            .expect("a choice");
        assert_eq!(c.subnet.as_deref(), Some("subnet-b"));
        assert!(!c.all_refused);
        // Another type is not refused there.
        let c = choose_launch(&f, &types(&["g6.2xlarge"]), &refused, &load, 1000, 600)
            .expect("a choice");
        assert_eq!(c.subnet.as_deref(), Some("subnet-a"));
        // After the window, zone a is tried again.
        let c = choose_launch(&f, &types(&["g6.xlarge"]), &refused, &load, 1500, 600)
            .expect("a choice");
        assert_eq!(c.subnet.as_deref(), Some("subnet-a"));
    }

    #[test]
    fn every_zone_refused_falls_back_to_the_next_type_then_flags_it() {
        let f = facts();
        let both = types(&["g6.xlarge", "g6.2xlarge"]);
        let choose = |refused: &[CapacityRefusal]| {
            let c =
                choose_launch(&f, &both, refused, &BTreeMap::new(), 1000, 600).expect("a choice");
            (c.instance_type, c.all_refused)
        };
        let all = |t: &str| -> Vec<CapacityRefusal> {
            ["a", "b", "c"].iter().map(|z| refusal(t, z, 990)).collect()
        };
        let mut refused = all("g6.xlarge");
        assert_eq!(choose(&refused), ("g6.2xlarge".to_string(), false));
        refused.extend(all("g6.2xlarge"));
        assert_eq!(choose(&refused), ("g6.xlarge".to_string(), true));
    }

    #[test]
    fn the_default_network_has_no_subnet_and_no_zone() {
        let f = PoolFacts {
            image_id: "ami-1".into(),
            subnets: vec![],
            instance: None,
            root_device: None,
        };
        let c = choose_launch(&f, &types(&["g6.xlarge"]), &[], &BTreeMap::new(), 0, 600)
            .expect("a choice");
        assert_eq!((c.subnet, c.zone), (None, None));
        assert_eq!(choose_launch(&f, &[], &[], &BTreeMap::new(), 0, 600), None);
    }

    #[test]
    fn recording_drops_old_refusals_and_replaces_the_same_pair() {
        let mut r = vec![
            refusal("g6.xlarge", "a", 100),
            refusal("g6.xlarge", "b", 950),
        ];
        record_refusal(&mut r, refusal("g6.xlarge", "b", 1000), 1000, 600);
        assert_eq!(r, vec![refusal("g6.xlarge", "b", 1000)]);
    }
}
