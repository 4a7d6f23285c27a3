//! Load balancers: the ELBv2 target groups services' tasks are registered with
//! ([`TargetGroups`]). The EC2 backend's crate implements it over its own Query
//! client; the engine reads the groups beside observe ([`observe_groups`]) and
//! carries out the plan's target steps in apply.

use async_trait::async_trait;
use gpushare_core::model::{Target, TargetGroupObs};
use gpushare_core::util::error_chain;
use std::collections::BTreeMap;
use std::time::Duration;

/// Why a target group call failed.
#[derive(Debug, thiserror::Error)]
pub enum BalancerError {
    #[error("{operation} of target group {group} failed")]
    Api {
        operation: &'static str,
        group: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No ELBv2 client could be made (no region, a bad endpoint, a build without it).
    #[error("load balancers are not available: {why}")]
    Unavailable { why: String },
}

/// The ELBv2 calls gpushare makes on target groups.
#[async_trait]
pub trait TargetGroups: Send + Sync {
    /// The group's type, deregistration delay and targets with their health
    /// (DescribeTargetGroups, DescribeTargetGroupAttributes, DescribeTargetHealth).
    async fn describe(&self, arn: &str) -> Result<TargetGroupObs, BalancerError>;
    /// RegisterTargets (registering a target that is registered changes nothing).
    async fn register(&self, arn: &str, targets: &[Target]) -> Result<(), BalancerError>;
    /// DeregisterTargets (deregistering a target that is not registered changes nothing).
    async fn deregister(&self, arn: &str, targets: &[Target]) -> Result<(), BalancerError>;
}

/// Read every group of `arns` (at most 8 at once): a group that cannot be read is
/// recorded with its error, which the planner notes (it registers nothing there).
pub async fn observe_groups(
    balancer: Option<&dyn TargetGroups>,
    arns: &[String],
) -> BTreeMap<String, TargetGroupObs> {
    use futures_util::stream::{self, StreamExt};
    let read = |arn: String| async move {
        let obs = match balancer {
            Some(b) => b.describe(&arn).await.unwrap_or_else(|e| failed(&e)),
            None => TargetGroupObs {
                error: Some("this gpushare has no ELBv2 client (set gpushare { region })".into()),
                ..TargetGroupObs::default()
            },
        };
        (arn, obs)
    };
    stream::iter(arns.iter().cloned())
        .map(read)
        .buffer_unordered(8)
        .collect()
        .await
}

fn failed(e: &BalancerError) -> TargetGroupObs {
    tracing::warn!(error = %error_chain(e), "reading a target group failed");
    TargetGroupObs {
        error: Some(error_chain(e)),
        ..TargetGroupObs::default()
    }
}

/// How long apply waits for a deregistered target to drain: the group's delay and
/// a margin for the load balancer to report it gone.
pub fn drain_wait(drain_seconds: u64) -> Duration {
    Duration::from_secs(drain_seconds.saturating_add(30))
}
