//! A small client of the EC2 Query API, for the eight actions gpushare calls
//! (RunInstances, DescribeInstances, TerminateInstances, CreateTags, DescribeImages,
//! DescribeInstanceTypes, DescribeSubnets, DescribeSpotPriceHistory), in place of aws-sdk-ec2 (whose one crate
//! takes minutes and 7 GB of memory to compile).
//!
//! - [`query`]: request encoding (a form POSTed to the endpoint).
//! - [`model`]: the fields gpushare reads of the answers (XML, decoded with quick-xml).
//! - [`xml`]: decoding answers and EC2's error documents.
//! - [`sign`]: SigV4 (aws-sigv4) with credentials from the standard AWS chain.
//! - [`transport`]: one HTTP exchange over the AWS SDK's own HTTPS connector.
//! - [`error`]: what a call can fail with.
//!
//! Retries ([`crate::retry`]) wrap each call: throttling, 5xx and transport failures are
//! tried again with jittered exponential backoff; capacity and quota errors never are.

pub mod error;
pub mod model;
pub mod query;
pub mod sign;
pub mod transport;
pub mod xml;

pub use crate::error::BadEndpoint;
/// The credentials a [`Client`] signs with (fixed ones, or any provider).
pub use aws_credential_types::{provider::SharedCredentialsProvider, Credentials};
pub use error::{ApiError, ServiceError};
pub use model::{
    DescribeInstancesPage, Image, Instance, InstanceStateName, InstanceStatus, InstanceStatusEvent,
    InstanceTypeInfo, SpotPrice, Subnet, Tag,
};
pub use query::{DescribeImages, DescribeInstances, Filter, Params, RunInstances};
pub use sign::Protocol;

use crate::retry::{self, RetryPolicy};
use backon::Retryable;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;

/// How long to wait for a TCP (and TLS) connection, as the AWS SDK's default.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(3100);

/// The EC2 endpoint of `region` when none is configured: `https://ec2.REGION.amazonaws.com`
/// (`.amazonaws.com.cn` in China), `ec2-fips.` with FIPS, `REGION.api.aws` dual-stack.
pub fn default_endpoint(region: &str, fips: bool, dual_stack: bool) -> String {
    let host = if fips { "ec2-fips" } else { "ec2" };
    if region.starts_with("cn-") {
        let domain = if dual_stack {
            "api.amazonwebservices.com.cn"
        } else {
            "amazonaws.com.cn"
        };
        format!("https://{host}.{region}.{domain}")
    } else if dual_stack {
        format!("https://{host}.{region}.api.aws")
    } else {
        format!("https://{host}.{region}.amazonaws.com")
    }
}

/// An EC2 client: one endpoint and region, signed with one credentials provider,
/// retried by one policy. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    transport: transport::Transport,
    retry: RetryPolicy,
}

/// An endpoint as `http(s)://host[:port][/path]`.
pub fn parse_endpoint(endpoint: &str) -> Result<http::Uri, BadEndpoint> {
    let bad = || BadEndpoint {
        endpoint: endpoint.to_string(),
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(bad());
    }
    let uri: http::Uri = endpoint.parse().map_err(|_| bad())?;
    if uri.host().is_none_or(str::is_empty) || uri.query().is_some() {
        return Err(bad());
    }
    Ok(uri)
}

impl Client {
    /// A client of `endpoint` (`http(s)://host[:port][/path]`) in `region`.
    pub fn new(
        endpoint: &str,
        region: &str,
        credentials: SharedCredentialsProvider,
        retry: RetryPolicy,
        attempt_timeout: Duration,
    ) -> Result<Client, BadEndpoint> {
        Client::speaking(
            Protocol::Ec2Query,
            endpoint,
            region,
            credentials,
            retry,
            attempt_timeout,
        )
    }

    /// [`Client::new`] for a service speaking `protocol` (ELBv2's Query API).
    pub fn speaking(
        protocol: Protocol,
        endpoint: &str,
        region: &str,
        credentials: SharedCredentialsProvider,
        retry: RetryPolicy,
        attempt_timeout: Duration,
    ) -> Result<Client, BadEndpoint> {
        let uri = parse_endpoint(endpoint)?;
        Ok(Client {
            inner: Arc::new(Inner {
                transport: transport::Transport::new(
                    uri,
                    region.to_string(),
                    sign::CredentialsCache::new(credentials),
                    CONNECT_TIMEOUT,
                    attempt_timeout,
                )
                .with_protocol(protocol),
                retry,
            }),
        })
    }

    pub fn endpoint(&self) -> &http::Uri {
        &self.inner.transport.endpoint
    }

    pub fn region(&self) -> &str {
        &self.inner.transport.region
    }

    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.inner.retry
    }

    /// Call `params`' action, retried per the policy; its answer decoded as `T`.
    pub async fn call<T: DeserializeOwned>(&self, params: &Params) -> Result<T, ApiError> {
        let action = params.action();
        let body = params.encode();
        let transport = &self.inner.transport;
        let answer = (|| transport.send(action, &body))
            .retry(self.inner.retry.backoff())
            .when(retry::is_retryable)
            .notify(|err, wait| {
                tracing::debug!(%action, error = %err, ?wait, "EC2 call failed; trying again");
            })
            .await?;
        tracing::trace!(%action, status = answer.status, "EC2 answered");
        xml::decode(action, &answer.body)
    }

    /// RunInstances of one instance; the instances EC2 reports launched.
    pub async fn run_instances(&self, req: &RunInstances) -> Result<Vec<Instance>, ApiError> {
        let out: model::RunInstancesAnswer = self.call(&req.params()).await?;
        Ok(out.instances)
    }

    /// One page of DescribeInstances.
    pub async fn describe_instances(
        &self,
        req: &DescribeInstances,
    ) -> Result<DescribeInstancesPage, ApiError> {
        self.call(&req.params()).await
    }

    pub async fn terminate_instances(&self, instance_ids: &[String]) -> Result<(), ApiError> {
        let mut p = Params::new("TerminateInstances");
        p.list("InstanceId", instance_ids);
        self.call::<model::Ignored>(&p).await.map(|_| ())
    }

    /// Put `tags` on every resource of `resource_ids` (instances, volumes…).
    pub async fn create_tags(&self, resource_ids: &[String], tags: &[Tag]) -> Result<(), ApiError> {
        let mut p = Params::new("CreateTags");
        p.list("ResourceId", resource_ids).tags("Tag", tags);
        self.call::<model::Ignored>(&p).await.map(|_| ())
    }

    pub async fn describe_images(&self, req: &DescribeImages) -> Result<Vec<Image>, ApiError> {
        let out: model::DescribeImagesAnswer = self.call(&req.params()).await?;
        Ok(out.images)
    }

    pub async fn describe_instance_types(
        &self,
        instance_types: &[String],
    ) -> Result<Vec<InstanceTypeInfo>, ApiError> {
        let mut p = Params::new("DescribeInstanceTypes");
        p.list("InstanceType", instance_types);
        let out: model::DescribeInstanceTypesAnswer = self.call(&p).await?;
        Ok(out.instance_types)
    }

    pub async fn describe_subnets(&self, subnet_ids: &[String]) -> Result<Vec<Subnet>, ApiError> {
        let mut p = Params::new("DescribeSubnets");
        p.list("SubnetId", subnet_ids);
        let out: model::DescribeSubnetsAnswer = self.call(&p).await?;
        Ok(out.subnets)
    }

    /// The status of `instance_ids` (those not running too), every page: each with
    /// its scheduled events.
    pub async fn describe_instance_status(
        &self,
        instance_ids: &[String],
    ) -> Result<Vec<InstanceStatus>, ApiError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut p = Params::new("DescribeInstanceStatus");
            p.list("InstanceId", instance_ids)
                .set("IncludeAllInstances", "true")
                .set_opt("NextToken", token.as_deref());
            let page: model::DescribeInstanceStatusAnswer = self.call(&p).await?;
            out.extend(page.instance_status_set);
            match page.next_token.filter(|t| !t.is_empty()) {
                Some(t) if Some(&t) != token.as_ref() => token = Some(t),
                _ => return Ok(out),
            }
        }
    }

    /// The current Spot prices of `instance_types` (Linux/UNIX), every zone: one
    /// DescribeSpotPriceHistory from `start_time` (ISO 8601; "now" gives each
    /// zone's price in effect), all pages.
    pub async fn describe_spot_price_history(
        &self,
        instance_types: &[String],
        start_time: &str,
    ) -> Result<Vec<SpotPrice>, ApiError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut p = Params::new("DescribeSpotPriceHistory");
            p.list("InstanceType", instance_types)
                .list("ProductDescription", &["Linux/UNIX"])
                .set("StartTime", start_time)
                .set_opt("NextToken", token.as_deref());
            let page: model::DescribeSpotPriceHistoryAnswer = self.call(&p).await?;
            out.extend(page.spot_price_history_set);
            match page.next_token.filter(|t| !t.is_empty()) {
                Some(t) if Some(&t) != token.as_ref() => token = Some(t),
                _ => return Ok(out),
            }
        }
    }
}

#[cfg(test)]
mod tests;
