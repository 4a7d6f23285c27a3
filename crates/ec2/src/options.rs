//! How the backend talks to EC2 ([`Ec2Options`]): kept apart from `cloud` so that
//! [`crate::retry`] (below it) can read the retry defaults.

use gpushare_core::model::Settings;
use std::collections::BTreeMap;
use std::time::Duration;

/// How the backend talks to EC2.
#[derive(Debug, Clone)]
pub struct Ec2Options {
    /// Region; `None` = the standard chain (AWS_REGION, profile, IMDS).
    pub region: Option<String>,
    /// Endpoint override; `None` = AWS_ENDPOINT_URL_EC2 / AWS_ENDPOINT_URL / the real EC2.
    pub endpoint: Option<String>,
    /// Attempts per API call, first one included, when the AWS configuration sets
    /// none (`AWS_MAX_ATTEMPTS`, the profile's `max_attempts`): see [`crate::retry::resolve`].
    pub max_attempts: u32,
    /// Base of the jittered exponential backoff.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Concurrent EC2 calls at most.
    pub max_concurrency: usize,
    /// How long one attempt of an EC2 call may take (connecting included) before it is
    /// given up and, as a transport failure, tried again.
    pub attempt_timeout: Duration,
    /// How long to wait for a terminated instance to show as shutting-down/terminated,
    /// and for a just-launched instance to become visible.
    pub confirm_timeout: Duration,
    /// How long after a launch a missing instance is taken for eventual consistency.
    pub consistency_window: Duration,
    /// DescribeInstances page size when listing (5-1000); `None` = EC2's default.
    pub page_size: Option<i32>,
    /// Tags on every instance and volume, under the pool's own (`gpushare { default_tags }`).
    pub default_tags: BTreeMap<String, String>,
    /// The Price List API's endpoint; `None` = AWS_ENDPOINT_URL_PRICING, else the
    /// partition's own (none when the EC2 endpoint is overridden).
    pub pricing_endpoint: Option<String>,
}

impl Default for Ec2Options {
    fn default() -> Self {
        Self {
            region: None,
            endpoint: None,
            max_attempts: 8,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_concurrency: 8,
            attempt_timeout: Duration::from_secs(60),
            confirm_timeout: Duration::from_secs(120),
            consistency_window: Duration::from_secs(300),
            page_size: None,
            default_tags: BTreeMap::new(),
            pricing_endpoint: None,
        }
    }
}

impl Ec2Options {
    /// Options from the `gpushare { region, ec2_endpoint, default_tags,
    /// consistency_window_seconds }` settings, defaults elsewhere.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            region: settings.region.clone(),
            endpoint: settings.ec2_endpoint.clone(),
            default_tags: settings.default_tags.clone(),
            consistency_window: Duration::from_secs(settings.consistency_window_seconds),
            ..Self::default()
        }
    }
}
