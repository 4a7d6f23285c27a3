//! ELBv2 target groups ([`Elbv2`]): the engine's [`TargetGroups`] over the same
//! small Query client as EC2 (API version 2015-12-01, signed for
//! `elasticloadbalancing`), for the five actions gpushare calls:
//! DescribeTargetGroups, DescribeTargetGroupAttributes, DescribeTargetHealth,
//! RegisterTargets and DeregisterTargets. aws-sdk-elasticloadbalancingv2 would
//! bring a second generated SDK crate for five calls (docs/building.md).
//!
//! The client is made on first use (from the settings' `region` and
//! `elbv2_endpoint`, else the standard AWS chain and
//! AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING_V2 / AWS_ENDPOINT_URL), so a fleet
//! without load balancers never needs an AWS region.

use crate::api::{self, ApiError, Params, Protocol};
use crate::cloud::AwsSetup;
use crate::Ec2Options;
use async_trait::async_trait;
use gpushare_core::model::{ObservedTarget, Settings, Target, TargetGroupObs, TargetType};
use gpushare_engine::balancer::{BalancerError, TargetGroups};
use serde::Deserialize;
use tokio::sync::OnceCell;

/// The ELBv2 API version every request names.
pub const API_VERSION: &str = "2015-12-01";
/// How ELBv2 requests are encoded and signed.
pub const PROTOCOL: Protocol = Protocol::Query {
    service: "elasticloadbalancing",
};
/// ELBv2's service id in the AWS configuration (its endpoint variable).
const SERVICE_ID: &str = "Elastic Load Balancing v2";
/// ELBv2's default deregistration delay, when a group's attributes do not say.
pub const DEFAULT_DEREGISTRATION_DELAY: u64 = 300;

/// The ELBv2 endpoint of `region` when none is configured.
pub fn default_endpoint(region: &str) -> String {
    let domain = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://elasticloadbalancing.{region}.{domain}")
}

/// Target groups through ELBv2, connected on first use.
pub struct Elbv2 {
    opts: Ec2Options,
    client: OnceCell<Result<api::Client, String>>,
}

impl Elbv2 {
    /// From the settings' `region` and `elbv2_endpoint`.
    pub fn from_settings(settings: &Settings) -> Elbv2 {
        let opts = Ec2Options {
            endpoint: settings.elbv2_endpoint.clone(),
            ..Ec2Options::from_settings(settings)
        };
        Elbv2 {
            opts,
            client: OnceCell::new(),
        }
    }

    /// Over a client made elsewhere (tests).
    pub fn from_client(client: api::Client) -> Elbv2 {
        Elbv2 {
            opts: Ec2Options::default(),
            client: OnceCell::new_with(Some(Ok(client))),
        }
    }

    async fn client(&self) -> Result<&api::Client, BalancerError> {
        let made = self
            .client
            .get_or_init(|| async {
                let setup = AwsSetup::load(&self.opts)
                    .await
                    .map_err(|e| gpushare_core::util::error_chain(&e))?;
                let endpoint = match &self.opts.endpoint {
                    Some(e) => e.clone(),
                    None => crate::cloud::configured_endpoint_of(&setup.sdk, SERVICE_ID)
                        .unwrap_or_else(|| default_endpoint(setup.region.as_ref())),
                };
                tracing::debug!(%endpoint, region = %setup.region, "ELBv2 endpoint");
                api::Client::speaking(
                    PROTOCOL,
                    &endpoint,
                    setup.region.as_ref(),
                    setup.credentials,
                    setup.retry,
                    self.opts.attempt_timeout,
                )
                .map_err(|e| e.to_string())
            })
            .await;
        made.as_ref()
            .map_err(|why| BalancerError::Unavailable { why: why.clone() })
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        operation: &'static str,
        arn: &str,
        params: &Params,
    ) -> Result<T, BalancerError> {
        let failed = |source: ApiError| BalancerError::Api {
            operation,
            group: arn.to_string(),
            source: Box::new(source),
        };
        self.client().await?.call(params).await.map_err(failed)
    }
}

/// `Targets.member.N.Id` / `.Port`.
fn targets_params(action: &str, arn: &str, targets: &[Target]) -> Params {
    let mut p = Params::of_version(action, API_VERSION);
    p.set("TargetGroupArn", arn);
    for (i, t) in targets.iter().enumerate() {
        p.set(format!("Targets.member.{}.Id", i + 1), &t.id);
        p.set(format!("Targets.member.{}.Port", i + 1), t.port.to_string());
    }
    p
}

#[async_trait]
impl TargetGroups for Elbv2 {
    async fn describe(&self, arn: &str) -> Result<TargetGroupObs, BalancerError> {
        let mut p = Params::of_version("DescribeTargetGroups", API_VERSION);
        p.set("TargetGroupArns.member.1", arn);
        let groups: DescribeTargetGroupsAnswer = self.call("DescribeTargetGroups", arn, &p).await?;
        let target_type = match groups.result.groups.member.first() {
            Some(g) if g.target_type.as_deref() == Some("ip") => TargetType::Ip,
            Some(g) if matches!(g.target_type.as_deref(), None | Some("instance")) => {
                TargetType::Instance
            }
            Some(g) => {
                return Err(BalancerError::Api {
                    operation: "DescribeTargetGroups",
                    group: arn.to_string(),
                    source: format!(
                        "target type {:?} is not supported (gpushare registers instances or ip addresses)",
                        g.target_type.as_deref().unwrap_or_default()
                    )
                    .into(),
                })
            }
            None => {
                return Err(BalancerError::Api {
                    operation: "DescribeTargetGroups",
                    group: arn.to_string(),
                    source: "no such target group".into(),
                })
            }
        };
        let mut p = Params::of_version("DescribeTargetGroupAttributes", API_VERSION);
        p.set("TargetGroupArn", arn);
        let attrs: DescribeTargetGroupAttributesAnswer =
            self.call("DescribeTargetGroupAttributes", arn, &p).await?;
        let deregistration_delay_seconds = attrs
            .result
            .attributes
            .member
            .iter()
            .find(|a| a.key == "deregistration_delay.timeout_seconds")
            .and_then(|a| a.value.trim().parse().ok())
            .unwrap_or(DEFAULT_DEREGISTRATION_DELAY);
        let mut p = Params::of_version("DescribeTargetHealth", API_VERSION);
        p.set("TargetGroupArn", arn);
        let health: DescribeTargetHealthAnswer = self.call("DescribeTargetHealth", arn, &p).await?;
        let targets = health
            .result
            .descriptions
            .member
            .into_iter()
            .filter_map(|d| {
                Some(ObservedTarget {
                    target: Target {
                        id: d.target.id,
                        port: d.target.port?.trim().parse().ok()?,
                    },
                    state: d.health.state,
                    reason: d
                        .health
                        .description
                        .or(d.health.reason)
                        .filter(|r| !r.is_empty()),
                })
            })
            .collect();
        Ok(TargetGroupObs {
            target_type,
            deregistration_delay_seconds,
            targets,
            error: None,
        })
    }

    async fn register(&self, arn: &str, targets: &[Target]) -> Result<(), BalancerError> {
        if targets.is_empty() {
            return Ok(());
        }
        let p = targets_params("RegisterTargets", arn, targets);
        self.call::<Ignored>("RegisterTargets", arn, &p)
            .await
            .map(|_| ())
    }

    async fn deregister(&self, arn: &str, targets: &[Target]) -> Result<(), BalancerError> {
        if targets.is_empty() {
            return Ok(());
        }
        let p = targets_params("DeregisterTargets", arn, targets);
        self.call::<Ignored>("DeregisterTargets", arn, &p)
            .await
            .map(|_| ())
    }
}

// The answers' fields gpushare reads (`<XResponse><XResult>...`).

#[derive(Deserialize)]
struct Ignored {}

#[derive(Deserialize)]
struct Members<T> {
    #[serde(rename = "member", default = "Vec::new")]
    member: Vec<T>,
}

impl<T> Default for Members<T> {
    fn default() -> Self {
        Members { member: Vec::new() }
    }
}

#[derive(Deserialize)]
struct DescribeTargetGroupsAnswer {
    #[serde(rename = "DescribeTargetGroupsResult")]
    result: TargetGroupsResult,
}

#[derive(Deserialize)]
struct TargetGroupsResult {
    #[serde(rename = "TargetGroups", default)]
    groups: Members<TargetGroupInfo>,
}

#[derive(Deserialize)]
struct TargetGroupInfo {
    #[serde(rename = "TargetType", default)]
    target_type: Option<String>,
}

#[derive(Deserialize)]
struct DescribeTargetGroupAttributesAnswer {
    #[serde(rename = "DescribeTargetGroupAttributesResult")]
    result: AttributesResult,
}

#[derive(Deserialize)]
struct AttributesResult {
    #[serde(rename = "Attributes", default)]
    attributes: Members<Attribute>,
}

#[derive(Deserialize)]
struct Attribute {
    #[serde(rename = "Key")]
    key: String,
    #[serde(rename = "Value", default)]
    value: String,
}

#[derive(Deserialize)]
struct DescribeTargetHealthAnswer {
    #[serde(rename = "DescribeTargetHealthResult")]
    result: TargetHealthResult,
}

#[derive(Deserialize)]
struct TargetHealthResult {
    #[serde(rename = "TargetHealthDescriptions", default)]
    descriptions: Members<TargetHealthDescription>,
}

#[derive(Deserialize)]
struct TargetHealthDescription {
    #[serde(rename = "Target")]
    target: TargetField,
    #[serde(rename = "TargetHealth")]
    health: TargetHealthField,
}

#[derive(Deserialize)]
struct TargetField {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Port", default)]
    port: Option<String>,
}

#[derive(Deserialize)]
struct TargetHealthField {
    #[serde(rename = "State", default)]
    state: String,
    #[serde(rename = "Reason", default)]
    reason: Option<String>,
    #[serde(rename = "Description", default)]
    description: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_decode_as_elbv2_sends_them() {
        let health = r#"<DescribeTargetHealthResponse xmlns="http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/">
  <DescribeTargetHealthResult>
    <TargetHealthDescriptions>
      <member>
        <HealthCheckPort>32768</HealthCheckPort>
        <TargetHealth><State>healthy</State></TargetHealth>
        <Target><Port>32768</Port><Id>i-0123456789abcdef0</Id></Target>
      </member>
      <member>
        <TargetHealth><State>draining</State><Reason>Target.DeregistrationInProgress</Reason><Description>Target deregistration is in progress</Description></TargetHealth>
        <Target><Port>32769</Port><Id>127.0.0.5</Id></Target>
      </member>
    </TargetHealthDescriptions>
  </DescribeTargetHealthResult>
  <ResponseMetadata><RequestId>r</RequestId></ResponseMetadata>
</DescribeTargetHealthResponse>"#;
        let a: DescribeTargetHealthAnswer =
            api::xml::decode("DescribeTargetHealth", health).expect("decodes");
        let d = &a.result.descriptions.member;
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].target.id, "i-0123456789abcdef0");
        assert_eq!(d[0].target.port.as_deref(), Some("32768"));
        assert_eq!(d[1].health.state, "draining");
        let empty = r#"<DescribeTargetHealthResponse><DescribeTargetHealthResult><TargetHealthDescriptions/></DescribeTargetHealthResult></DescribeTargetHealthResponse>"#;
        let a: DescribeTargetHealthAnswer =
            api::xml::decode("DescribeTargetHealth", empty).expect("decodes");
        assert!(a.result.descriptions.member.is_empty());
        let attrs = r#"<DescribeTargetGroupAttributesResponse><DescribeTargetGroupAttributesResult><Attributes>
<member><Key>stickiness.enabled</Key><Value>false</Value></member>
<member><Key>deregistration_delay.timeout_seconds</Key><Value>45</Value></member>
</Attributes></DescribeTargetGroupAttributesResult></DescribeTargetGroupAttributesResponse>"#;
        let a: DescribeTargetGroupAttributesAnswer =
            api::xml::decode("DescribeTargetGroupAttributes", attrs).expect("decodes");
        assert_eq!(a.result.attributes.member[1].value, "45");
    }

    #[test]
    fn targets_are_numbered_members() {
        let p = targets_params(
            "RegisterTargets",
            "arn:tg",
            &[
                Target {
                    id: "i-1".into(),
                    port: 80,
                },
                Target {
                    id: "i-2".into(),
                    port: 81,
                },
            ],
        );
        assert_eq!(p.get("Version"), Some(API_VERSION));
        assert_eq!(p.get("Targets.member.2.Id"), Some("i-2"));
        assert_eq!(p.get("Targets.member.2.Port"), Some("81"));
        assert_eq!(p.get("TargetGroupArn"), Some("arn:tg"));
    }
}
