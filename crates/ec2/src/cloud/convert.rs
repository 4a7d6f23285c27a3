//! Between EC2's types and gpushare's: API errors with EC2's code, the endpoint the
//! AWS configuration names, the idempotency token of a launch, the instance types and
//! market of a launch, an instance's state, tags and host.

use crate::api::{self, ApiError, Instance, InstanceStateName};
use crate::tags;
use gpushare_core::model::{CapacityProvider, CloudHost, HostState, Market};
use gpushare_engine::cloud::CloudError;
use sha2::{Digest, Sha256};

pub(crate) fn api_err(operation: &str, err: ApiError) -> CloudError {
    CloudError::Api {
        operation: operation.to_string(),
        source: Box::new(err),
    }
}

/// The EC2 endpoint the AWS configuration names, as the SDKs read it:
/// `AWS_ENDPOINT_URL_EC2` (or the profile's `services` section for EC2), else
/// `AWS_ENDPOINT_URL` (or the profile's `endpoint_url`).
pub(crate) fn configured_endpoint(sdk: &aws_types::SdkConfig) -> Option<String> {
    configured_endpoint_of(sdk, "EC2")
}

/// The endpoint the AWS configuration sets for the service `service_id` (e.g.
/// `Elastic Load Balancing v2`: AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING_V2), else
/// the global AWS_ENDPOINT_URL / `endpoint_url`.
pub(crate) fn configured_endpoint_of(
    sdk: &aws_types::SdkConfig,
    service_id: &str,
) -> Option<String> {
    let key = aws_types::service_config::ServiceConfigKey::builder()
        .service_id(service_id)
        .env("AWS_ENDPOINT_URL")
        .profile("endpoint_url")
        .build()
        .ok()?;
    sdk.service_config()
        .and_then(|c| c.load_config(key))
        .or_else(|| sdk.endpoint_url().map(str::to_string))
}

/// Deterministic RunInstances client token (at most 64 ASCII characters) for a launch
/// token in one subnet: a resumed apply sends the same token, so real EC2 returns the
/// first launch instead of making a second instance. A non-empty store id is mixed in
/// (besides being in the launch token), so two stores never share a client token.
/// A fallback instance type (one of the pool's `instance_types` the plan chose) is
/// mixed in too: EC2 refuses a client token reused with other parameters
/// (IdempotentParameterMismatch).
pub fn client_token(
    cluster: &str,
    store_id: &str,
    launch_token: &str,
    subnet: Option<&str>,
    fallback_type: Option<&str>,
) -> String {
    let mut h = Sha256::new();
    let mut text = if store_id.is_empty() {
        format!(
            "gpushare\0{cluster}\0{launch_token}\0{}",
            subnet.unwrap_or("")
        )
    } else {
        format!(
            "gpushare\0{cluster}\0{store_id}\0{launch_token}\0{}",
            subnet.unwrap_or("")
        )
    };
    if let Some(t) = fallback_type {
        text.push('\0');
        text.push_str(t);
    }
    h.update(text.as_bytes());
    hex::encode(h.finalize())
}

/// The `InstanceMarketOptions` of a launch: `None` for On-Demand; for Spot a one-time
/// request whose instance is terminated on interruption (gpushare replaces it), with
/// the pool's `max_price` when set (else EC2's default, the On-Demand price).
pub fn market_options(pool: &CapacityProvider) -> Option<api::query::SpotMarketOptions> {
    match pool.market {
        Market::OnDemand => None,
        Market::Spot => Some(api::query::SpotMarketOptions {
            spot_instance_type: "one-time".into(),
            instance_interruption_behavior: "terminate".into(),
            max_price: pool.max_price.as_ref().map(|p| p.trim().to_string()),
        }),
    }
}

/// EC2 instance state onto gpushare's host state. A stopped (or stopping) instance
/// serves nothing and is on its way out of the fleet: `ShuttingDown`.
pub fn host_state(state: &InstanceStateName) -> HostState {
    match state {
        InstanceStateName::Pending => HostState::Pending,
        InstanceStateName::Running => HostState::Running,
        InstanceStateName::ShuttingDown
        | InstanceStateName::Stopping
        | InstanceStateName::Stopped => HostState::ShuttingDown,
        InstanceStateName::Terminated => HostState::Terminated,
        InstanceStateName::Unknown => HostState::Pending,
    }
}

/// The cloud's view of one instance. An instance with our cluster tag but no host-id
/// tag (tagged by hand) is keyed by its instance id, so it surfaces as a stray.
pub(crate) fn cloud_host(instance: &Instance) -> Option<CloudHost> {
    let instance_id = instance.instance_id.clone()?;
    Some(CloudHost {
        host_id: instance
            .tag(tags::HOST_ID)
            .map(str::to_string)
            .unwrap_or_else(|| instance_id.clone()),
        capacity_provider: instance.tag(tags::POOL).unwrap_or_default().to_string(),
        instance_type: instance.instance_type.clone().unwrap_or_default(),
        zone: instance.availability_zone().map(str::to_string),
        state: instance
            .state_name()
            .as_ref()
            .map(host_state)
            .unwrap_or(HostState::Pending),
        launch_token: instance
            .tag(tags::LAUNCH_TOKEN)
            .unwrap_or_default()
            .to_string(),
        store_id: instance.tag(tags::STORE_ID).map(str::to_string),
        instance_id,
    })
}
