//! Retry configuration and classification on top of the SDK's retry modes.
//!
//! How many attempts and which mode: what the user's AWS configuration says
//! (`AWS_MAX_ATTEMPTS` / `AWS_RETRY_MODE`, else the selected profile's `max_attempts`
//! / `retry_mode`, per setting, as the AWS SDKs and CLI read them), and gpushare's own
//! defaults ([`Ec2Options`](crate::Ec2Options): standard mode, 8 attempts, jittered
//! exponential backoff from 500 ms to 20 s) for whatever it leaves unset.
//!
//! EC2 answers InsufficientInstanceCapacity with HTTP 500, which the SDK's status-code
//! classifier would retry in the same subnet. Capacity and quota errors are decisions
//! for the launcher (next subnet, or stop), so they are never retried here.

use crate::cloud::{Ec2Error, Ec2Options};
use aws_config::retry::{RetryConfig, RetryMode};
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::operation::run_instances::RunInstancesError;
use aws_smithy_runtime_api::client::interceptors::context::InterceptorContext;
use aws_smithy_runtime_api::client::retries::classifiers::{
    ClassifyRetry, RetryAction, RetryClassifierPriority,
};

/// The retry settings the user's AWS configuration makes; `None` where it makes none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserRetry {
    pub max_attempts: Option<u32>,
    pub mode: Option<RetryMode>,
}

impl UserRetry {
    /// From `AWS_MAX_ATTEMPTS` / `AWS_RETRY_MODE`, then the selected profile
    /// (`AWS_PROFILE`, `AWS_CONFIG_FILE`, `AWS_SHARED_CREDENTIALS_FILE`). A profile file
    /// that cannot be read or parsed gives no settings here: the SDK reports it when it
    /// loads credentials from it.
    pub async fn from_environment() -> Result<UserRetry, Ec2Error> {
        let profile = match aws_config::profile::load(
            &aws_types::os_shim_internal::Fs::real(),
            &aws_types::os_shim_internal::Env::real(),
            &aws_runtime::env_config::file::EnvConfigFiles::default(),
            None,
        )
        .await
        {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::debug!(error = %e, "no AWS profile to read retry settings from");
                None
            }
        };
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let prof = |k: &str| profile.as_ref().and_then(|p| p.get(k)).map(str::to_string);
        UserRetry::parse(
            env("AWS_MAX_ATTEMPTS").map(|v| ("AWS_MAX_ATTEMPTS".to_string(), v)),
            env("AWS_RETRY_MODE").map(|v| ("AWS_RETRY_MODE".to_string(), v)),
            prof("max_attempts").map(|v| ("max_attempts (AWS profile)".to_string(), v)),
            prof("retry_mode").map(|v| ("retry_mode (AWS profile)".to_string(), v)),
        )
    }

    /// Each setting from the environment, else from the profile; `(setting name, value)`.
    pub fn parse(
        env_max: Option<(String, String)>,
        env_mode: Option<(String, String)>,
        profile_max: Option<(String, String)>,
        profile_mode: Option<(String, String)>,
    ) -> Result<UserRetry, Ec2Error> {
        let max_attempts = match env_max.or(profile_max) {
            None => None,
            Some((setting, value)) => match value.trim().parse::<u32>() {
                Ok(n) if n >= 1 => Some(n),
                _ => {
                    return Err(Ec2Error::BadRetrySetting {
                        setting,
                        value,
                        expected: "expected a whole number of attempts, at least 1",
                    })
                }
            },
        };
        let mode = match env_mode.or(profile_mode) {
            None => None,
            Some((setting, value)) => match value.trim().parse::<RetryMode>() {
                Ok(m) => Some(m),
                Err(_) => {
                    return Err(Ec2Error::BadRetrySetting {
                        setting,
                        value,
                        expected: "expected standard or adaptive",
                    })
                }
            },
        };
        Ok(UserRetry { max_attempts, mode })
    }
}

/// The retry configuration of the EC2 client: the user's settings over gpushare's.
pub fn resolve(user: &UserRetry, opts: &Ec2Options) -> RetryConfig {
    let mut rc = RetryConfig::standard()
        .with_max_attempts(user.max_attempts.unwrap_or(opts.max_attempts).max(1))
        .with_initial_backoff(opts.initial_backoff)
        .with_max_backoff(opts.max_backoff);
    if let Some(mode) = user.mode {
        rc = rc.with_retry_mode(mode);
    }
    rc
}

/// Codes meaning "this subnet or zone has no room for this type now": try the next one.
pub const CAPACITY_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientFreeAddressesInSubnet",
    "Unsupported",
];

/// More codes meaning "no capacity here" for a Spot launch: the Spot price of this
/// instance type in this zone is above the pool's `max_price`. Another zone or the
/// next instance type may be cheaper.
pub const SPOT_CAPACITY_CODES: &[&str] = &["SpotMaxPriceTooLow"];

/// Whether a RunInstances error code means "no capacity for this type here" for a
/// launch in `market`: move on to the next subnet, then the next instance type.
pub fn is_capacity_error(code: &str, market: gpushare_core::model::Market) -> bool {
    CAPACITY_CODES.contains(&code)
        || (market == gpushare_core::model::Market::Spot && SPOT_CAPACITY_CODES.contains(&code))
}

/// Codes meaning "the account may not run more": stop and tell the user.
pub const QUOTA_CODES: &[&str] = &[
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
];

#[derive(Debug, Default)]
pub struct NoRetryOnCapacity;

impl ClassifyRetry for NoRetryOnCapacity {
    fn classify_retry(&self, ctx: &InterceptorContext) -> RetryAction {
        let Some(Err(err)) = ctx.output_or_error() else {
            return RetryAction::NoActionIndicated;
        };
        let code = err
            .as_operation_error()
            .and_then(|e| e.downcast_ref::<RunInstancesError>())
            .and_then(|e| e.code());
        match code {
            Some(c)
                if CAPACITY_CODES.contains(&c)
                    || SPOT_CAPACITY_CODES.contains(&c)
                    || QUOTA_CODES.contains(&c) =>
            {
                RetryAction::RetryForbidden
            }
            _ => RetryAction::NoActionIndicated,
        }
    }

    fn name(&self) -> &'static str {
        "gpushare: no retry on capacity or quota errors"
    }

    fn priority(&self) -> RetryClassifierPriority {
        RetryClassifierPriority::run_after(RetryClassifierPriority::transient_error_classifier())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: &str) -> Option<(String, String)> {
        Some((k.to_string(), v.to_string()))
    }

    #[test]
    fn gpushare_defaults_apply_only_where_the_user_sets_nothing() {
        let opts = Ec2Options::default();
        let none = UserRetry::parse(None, None, None, None).expect("nothing set");
        assert_eq!(none, UserRetry::default());
        let rc = resolve(&none, &opts);
        assert_eq!((rc.max_attempts(), rc.mode()), (8, RetryMode::Standard));
        assert_eq!(rc.initial_backoff(), opts.initial_backoff);

        // The environment wins over the profile, per setting.
        let user = UserRetry::parse(
            kv("AWS_MAX_ATTEMPTS", "2"),
            None,
            kv("max_attempts (AWS profile)", "5"),
            kv("retry_mode (AWS profile)", "adaptive"),
        )
        .expect("valid");
        assert_eq!(
            user,
            UserRetry {
                max_attempts: Some(2),
                mode: Some(RetryMode::Adaptive)
            }
        );
        let rc = resolve(&user, &opts);
        assert_eq!((rc.max_attempts(), rc.mode()), (2, RetryMode::Adaptive));
        // A mode alone keeps gpushare's number of attempts.
        let mode_only =
            UserRetry::parse(None, kv("AWS_RETRY_MODE", "adaptive"), None, None).expect("valid");
        let rc = resolve(&mode_only, &opts);
        assert_eq!((rc.max_attempts(), rc.mode()), (8, RetryMode::Adaptive));
    }

    #[test]
    fn bad_retry_settings_name_the_setting() {
        for (max, mode, what) in [
            (kv("AWS_MAX_ATTEMPTS", "0"), None, "AWS_MAX_ATTEMPTS"),
            (kv("AWS_MAX_ATTEMPTS", "many"), None, "AWS_MAX_ATTEMPTS"),
            (None, kv("AWS_RETRY_MODE", "legacy"), "AWS_RETRY_MODE"),
        ] {
            let e = UserRetry::parse(max, mode, None, None).expect_err("invalid");
            assert!(e.to_string().contains(what), "{e}");
        }
        let e = UserRetry::parse(None, None, kv("max_attempts (AWS profile)", "-1"), None)
            .expect_err("invalid");
        assert!(e.to_string().contains("max_attempts (AWS profile)"), "{e}");
    }
}
