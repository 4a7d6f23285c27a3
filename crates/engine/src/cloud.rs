//! The `Cloud` trait: where hosts come from.

use async_trait::async_trait;
use gpushare_core::catalog::InstanceType;
use gpushare_core::facts::CloudFacts;
use gpushare_core::model::{CapacityProvider, CloudHost, Host, HostNotice};
use gpushare_core::plan::Launch;
use std::collections::BTreeMap;

pub mod local;
pub mod open;
pub use local::{catalogue_gpus, Fault, GpuFault, LocalCloud, LocalInstance};
pub use open::{open_cloud, OpenCloudError, OpenedCloud, NO_EC2};

#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    #[error("unknown instance type {instance_type:?}{hint}")]
    UnknownInstanceType { instance_type: String, hint: String },
    #[error("{operation} failed")]
    Api {
        operation: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The cloud had no capacity: where the plan put the launch (`place`, e.g.
    /// `subnet subnet-0ab (us-east-1b)`), or in any of the pool's subnets (`None`: a
    /// launch the cloud placed).
    #[error("no capacity for {instance_type} in {} of pool {pool}", place.as_deref().unwrap_or("any subnet"))]
    InsufficientCapacity {
        pool: String,
        instance_type: String,
        place: Option<String>,
    },
    #[error("instance quota reached launching {instance_type}: {message}")]
    Quota {
        instance_type: String,
        message: String,
    },
    #[error("invalid launch request for host {host_id}: {message}")]
    InvalidRequest { host_id: String, message: String },
    /// A pool that cannot launch (an image or subnet that does not exist...), found
    /// while gathering the launch facts; `message` names the pool and the attribute.
    #[error("{message}")]
    InvalidPool { pool: String, message: String },
    #[error("cloud state I/O on {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is corrupt")]
    Corrupt {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    /// The instance carries another store's `gpushare:store-id` (`owner`).
    #[error("instance {instance_id} belongs to another state store (store id {owner}): refusing to {action} it")]
    ForeignInstance {
        instance_id: String,
        owner: String,
        action: &'static str,
    },
    #[error("no host {host:?} in cluster {cluster:?} (give a gpushare host id or an instance id)")]
    UnknownHost { cluster: String, host: String },
    /// The instance is not this cluster's (its cluster tag is another, or missing):
    /// found by [`check_ownership`], never acted on.
    #[error("instance {instance_id} belongs to cluster {}, not this one: refusing to {action} it", found.as_deref().map_or_else(|| "none (no cluster tag)".to_string(), |c| format!("{c:?}")))]
    NotOurs {
        instance_id: String,
        /// The cluster the instance carries (`None`: no cluster tag).
        found: Option<String>,
        action: &'static str,
    },
}

impl CloudError {
    /// Whether trying the same call again later cannot succeed without someone
    /// changing something: the request or pool is wrong, or the instance is not this
    /// cluster's or store's. Capacity, quota, API and I/O errors may pass.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            CloudError::InvalidPool { .. }
                | CloudError::InvalidRequest { .. }
                | CloudError::UnknownInstanceType { .. }
                | CloudError::NotOurs { .. }
                | CloudError::ForeignInstance { .. }
        )
    }
}

/// Who an instance belongs to, by the ownership rule ([`check_ownership`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// It carries this store's id.
    Ours,
    /// This cluster's, launched before store identity (no store id): this store may
    /// adopt it (and tag it with its id).
    Unclaimed,
}

/// The one ownership rule both clouds apply before adopting or terminating an
/// instance: its cluster tag (`found_cluster`) must be `cluster`
/// ([`CloudError::NotOurs`] otherwise), then its store id (`found_store`), when it
/// has one, must be `store_id` ([`CloudError::ForeignInstance`] otherwise). An
/// empty `store_id` (a store without identity) owns instances without a store id.
pub fn check_ownership(
    instance_id: &str,
    (found_cluster, found_store): (Option<&str>, Option<&str>),
    (cluster, store_id): (&str, &str),
    action: &'static str,
) -> Result<Ownership, CloudError> {
    if found_cluster != Some(cluster) {
        return Err(CloudError::NotOurs {
            instance_id: instance_id.to_string(),
            found: found_cluster.map(str::to_string),
            action,
        });
    }
    match found_store {
        Some(owner) if owner == store_id => Ok(Ownership::Ours),
        Some(owner) => Err(CloudError::ForeignInstance {
            instance_id: instance_id.to_string(),
            owner: owner.to_string(),
            action,
        }),
        None if store_id.is_empty() => Ok(Ownership::Ours),
        None => Ok(Ownership::Unclaimed),
    }
}

/// Everything needed to launch one planned host, all of it from the plan's
/// [`Launch`] step: the cloud launches exactly this and chooses nothing.
#[derive(Debug, Clone)]
pub struct LaunchRequest<'a> {
    pub cluster: &'a str,
    /// The planned host record (id, pool, launch token, and where it launches:
    /// instance type, image, subnet, zone).
    pub host: &'a Host,
    /// The pool's settings as planned (the launch's configuration, user-data inputs).
    pub pool: &'a CapacityProvider,
    /// The image's root device name, as the plan fixed it from the cloud's facts.
    pub root_device: Option<&'a str>,
    /// How the host joins the controller's agent API (put in its user data); `None`
    /// when no `controller_address` is set (the local fleet's in-process agents, a
    /// preview). The ec2 cloud refuses a launch without it.
    pub join: Option<&'a crate::join::JoinGrant>,
    /// The launching store's identity (`StoreState::store_id`), tagged on the
    /// instance; a launch never adopts an instance tagged with another store id.
    pub store_id: &'a str,
}

impl<'a> LaunchRequest<'a> {
    /// The request of a planned launch.
    pub fn of(
        cluster: &'a str,
        launch: &'a Launch,
        join: Option<&'a crate::join::JoinGrant>,
        store_id: &'a str,
    ) -> Self {
        LaunchRequest {
            cluster,
            host: &launch.host,
            pool: &launch.pool,
            root_device: launch.root_device.as_deref(),
            join,
            store_id,
        }
    }
}

#[async_trait]
pub trait Cloud: Send + Sync {
    /// `local` or `ec2`.
    fn kind(&self) -> &'static str;
    /// Facts about an instance type (GPU model, count, memory...); `None` if unknown.
    async fn describe_instance_type(&self, name: &str) -> Result<Option<InstanceType>, CloudError> {
        Ok(gpushare_core::catalog::lookup(name).copied())
    }
    /// The launch facts of `pools` (the image each boots, its subnets and their zones),
    /// gathered beside observe so the planner fixes every launch. A pool that cannot
    /// launch (unknown image or subnet) is an error naming it. Default: no facts (the
    /// planner then fixes launches from the configuration alone, and says so).
    async fn gather(
        &self,
        _pools: &BTreeMap<String, CapacityProvider>,
    ) -> Result<CloudFacts, CloudError> {
        Ok(CloudFacts::default())
    }
    /// Every instance tagged with `cluster`, whatever its state.
    async fn list_hosts(&self, cluster: &str) -> Result<Vec<CloudHost>, CloudError>;
    /// Launch the host exactly as planned (its instance type, image, subnet, zone and
    /// the pool's settings in the request), or return the instance already launched
    /// with its launch token. A launch the cloud cannot do as planned fails (no
    /// capacity there: [`CloudError::InsufficientCapacity`]); it never substitutes.
    async fn launch(&self, req: &LaunchRequest<'_>) -> Result<CloudHost, CloudError>;
    /// Launch a wave of planned hosts as [`Cloud::launch`] does each, started in order:
    /// one result per request tried, in the requests' order (so the results are for a
    /// prefix of `reqs`). No request is started after one has failed; a cloud that
    /// launches side by side returns the results of those already started too, and
    /// `apply` records each that succeeded. `apply` commits a wave's launches together,
    /// so a cloud that can launch many at once for the cost of one (the local fleet
    /// rewrites its fleet file once) or side by side (EC2) does so here. Default: one
    /// launch after another, stopping at the first error.
    async fn launch_many(&self, reqs: &[LaunchRequest<'_>]) -> Vec<Result<CloudHost, CloudError>> {
        let mut out = Vec::with_capacity(reqs.len());
        for req in reqs {
            let got = self.launch(req).await;
            let failed = got.is_err();
            out.push(got);
            if failed {
                break;
            }
        }
        out
    }
    /// Terminate the instance (no error if already gone). Refused when the instance
    /// is not of `cluster`, or carries another store id than `store_id` (an instance
    /// without a store id, launched before store identity, may be terminated).
    async fn terminate(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError>;
    /// Adopt an instance launched before store identity: tag it (and its volumes)
    /// with `store_id`, so that from now on it is this store's and no other's. No
    /// error when it already carries `store_id` or is gone; refused when it is not
    /// of `cluster` or carries another store id. Default: nothing to tag.
    async fn claim(
        &self,
        _cluster: &str,
        _store_id: &str,
        _instance_id: &str,
    ) -> Result<(), CloudError> {
        Ok(())
    }
    /// Check every launch of a plan before any of them runs (instance types, images,
    /// subnets, bootstrap size), so a bad pool fails with nothing launched. `apply`
    /// calls it before writing its journal. Default: nothing to check.
    async fn preflight(&self, _requests: &[LaunchRequest<'_>]) -> Result<(), CloudError> {
        Ok(())
    }
    /// The cloud's scheduled events (retirement, reboot, maintenance) of
    /// `instance_ids`, the earliest per instance; observe asks for the hosts whose
    /// agent is silent (an agent reports its own). Default: none.
    async fn scheduled_events(
        &self,
        _instance_ids: &[String],
    ) -> Result<BTreeMap<String, HostNotice>, CloudError> {
        Ok(BTreeMap::new())
    }
}

#[cfg(test)]
mod ownership_tests {
    use super::*;

    #[test]
    fn the_cluster_tag_is_checked_before_the_store_id() {
        let ours = ("c", "s1");
        let check = |tags| check_ownership("i-1", tags, ours, "terminate");
        assert!(matches!(
            check((Some("other"), Some("s1"))),
            Err(CloudError::NotOurs { found: Some(f), action: "terminate", .. }) if f == "other"
        ));
        let e = check((None, None)).expect_err("no cluster tag");
        assert!(e.to_string().contains("no cluster tag"), "{e}");
        assert!(e.is_permanent());
        assert!(matches!(
            check((Some("c"), Some("s2"))),
            Err(CloudError::ForeignInstance { owner, .. }) if owner == "s2"
        ));
        assert_eq!(check((Some("c"), Some("s1"))).ok(), Some(Ownership::Ours));
        assert_eq!(check((Some("c"), None)).ok(), Some(Ownership::Unclaimed));
        // A store without identity owns the cluster's instances without a store id.
        let none = check_ownership("i-1", (Some("c"), None), ("c", ""), "adopt");
        assert_eq!(none.ok(), Some(Ownership::Ours));
    }
}
