//! Retries of EC2 calls: how many attempts and how long between them, and which
//! failures are retried at all.
//!
//! How many attempts: what the user's AWS configuration says (`AWS_MAX_ATTEMPTS`, else
//! the selected profile's `max_attempts`, as the AWS SDKs and CLI read it), else
//! gpushare's default ([`Ec2Options`]: 8 attempts). Between attempts:
//! jittered exponential backoff (`backon`) from `initial_backoff` (500 ms) doubling up to
//! `max_backoff` (20 s). `AWS_RETRY_MODE` / `retry_mode` is checked (`standard` or
//! `adaptive`) but both retry alike: there is no client-side rate limiting.
//!
//! What is retried ([`is_retryable`]), as the SDKs' standard mode does: throttling codes
//! (RequestLimitExceeded, …), transient codes (RequestTimeout), HTTP 500/502/503/504, and
//! transport failures (connection refused or reset, timeouts). Never retried: capacity
//! and quota errors, although EC2 sends InsufficientInstanceCapacity as HTTP 500: they
//! are decisions for the planner (recorded, the next plan launches elsewhere, or stop);
//! and everything else (auth failures, NotFound, invalid parameters).

use crate::error::{ApiError, Ec2Error};
use crate::options::Ec2Options;
use aws_runtime::retries::classifiers::{THROTTLING_ERRORS, TRANSIENT_ERRORS};
use backon::ExponentialBuilder;
use std::time::Duration;

/// `AWS_RETRY_MODE` / the profile's `retry_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryMode {
    Standard,
    Adaptive,
}

impl std::str::FromStr for RetryMode {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.to_ascii_lowercase().as_str() {
            "standard" => Ok(RetryMode::Standard),
            "adaptive" => Ok(RetryMode::Adaptive),
            _ => Err(()),
        }
    }
}

/// The retry settings the user's AWS configuration makes; `None` where it makes none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserRetry {
    pub max_attempts: Option<u32>,
    pub mode: Option<RetryMode>,
}

impl UserRetry {
    /// From `AWS_MAX_ATTEMPTS` / `AWS_RETRY_MODE`, then the selected profile
    /// (`AWS_PROFILE`, `AWS_CONFIG_FILE`, `AWS_SHARED_CREDENTIALS_FILE`). A profile file
    /// that cannot be read or parsed gives no settings here: aws-config reports it when it
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
                Err(()) => {
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

/// How an EC2 call is retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (at least 1).
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub mode: RetryMode,
}

impl RetryPolicy {
    /// The waits between attempts: jittered exponential, `max_attempts - 1` of them.
    pub fn backoff(&self) -> ExponentialBuilder {
        gpushare_core::util::backoff(self.initial_backoff, self.max_backoff)
            .with_jitter()
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
    }
}

/// The retry policy of the EC2 client: the user's settings over gpushare's.
pub fn resolve(user: &UserRetry, opts: &Ec2Options) -> RetryPolicy {
    RetryPolicy {
        max_attempts: user.max_attempts.unwrap_or(opts.max_attempts).max(1),
        initial_backoff: opts.initial_backoff,
        max_backoff: opts.max_backoff,
        mode: user.mode.unwrap_or(RetryMode::Standard),
    }
}

/// HTTP statuses retried (unless the code says capacity or quota).
pub const TRANSIENT_STATUS: &[u16] = &[500, 502, 503, 504];

/// Whether a failed attempt is tried again (see the module's description).
pub fn is_retryable(err: &ApiError) -> bool {
    match err {
        ApiError::Service(e) => {
            let code = e.code.as_str();
            if is_decision(code) {
                return false;
            }
            THROTTLING_ERRORS.contains(&code)
                || TRANSIENT_ERRORS.contains(&code)
                || TRANSIENT_STATUS.contains(&e.status)
        }
        ApiError::Http { status, .. } => TRANSIENT_STATUS.contains(status),
        ApiError::Transport { source, .. } => source.is_io() || source.is_timeout(),
        ApiError::Timeout { .. } => true,
        ApiError::Credentials(_) | ApiError::Signing { .. } | ApiError::Decode { .. } => false,
    }
}

/// Capacity and quota codes: the launcher's decision, never retried in place.
fn is_decision(code: &str) -> bool {
    CAPACITY_CODES.contains(&code)
        || SPOT_CAPACITY_CODES.contains(&code)
        || QUOTA_CODES.contains(&code)
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
/// launch in `market`: recorded as a capacity refusal, so the next plan launches in
/// another subnet or instance type.
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
        assert_eq!((rc.max_attempts, rc.mode), (8, RetryMode::Standard));
        assert_eq!(rc.initial_backoff, opts.initial_backoff);

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
        assert_eq!((rc.max_attempts, rc.mode), (2, RetryMode::Adaptive));
        // A mode alone keeps gpushare's number of attempts.
        let mode_only =
            UserRetry::parse(None, kv("AWS_RETRY_MODE", "adaptive"), None, None).expect("valid");
        let rc = resolve(&mode_only, &opts);
        assert_eq!((rc.max_attempts, rc.mode), (8, RetryMode::Adaptive));
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

    fn service(code: &str, status: u16) -> ApiError {
        ApiError::Service(crate::api::ServiceError {
            code: code.into(),
            message: "m".into(),
            status,
            request_id: None,
        })
    }

    #[test]
    fn throttling_5xx_and_transport_failures_are_retried() {
        for (code, status) in [
            ("RequestLimitExceeded", 503),
            ("RequestLimitExceeded", 400),
            ("Throttling", 400),
            ("RequestTimeout", 400),
            ("InternalError", 500),
            ("Unavailable", 503),
            ("ServiceUnavailable", 502),
            ("GatewayTimeout", 504),
        ] {
            assert!(is_retryable(&service(code, status)), "{code} {status}");
        }
        assert!(is_retryable(&ApiError::Http {
            status: 502,
            excerpt: "Bad Gateway".into()
        }));
        let refused = aws_smithy_runtime_api::client::result::ConnectorError::io(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
        );
        assert!(is_retryable(&ApiError::Transport {
            endpoint: "http://127.0.0.1:1".into(),
            source: refused
        }));
        let timed_out = aws_smithy_runtime_api::client::result::ConnectorError::timeout(
            std::io::Error::from(std::io::ErrorKind::TimedOut).into(),
        );
        assert!(is_retryable(&ApiError::Transport {
            endpoint: "http://127.0.0.1:1".into(),
            source: timed_out
        }));
        assert!(is_retryable(&ApiError::Timeout {
            endpoint: "http://127.0.0.1:1".into(),
            timeout: std::time::Duration::from_secs(1)
        }));
    }

    #[test]
    fn capacity_quota_auth_and_client_errors_are_not_retried() {
        // EC2 sends InsufficientInstanceCapacity as HTTP 500: still not retried in place.
        for (code, status) in [
            ("InsufficientInstanceCapacity", 500),
            ("InsufficientCapacity", 500),
            ("InsufficientFreeAddressesInSubnet", 400),
            ("Unsupported", 400),
            ("SpotMaxPriceTooLow", 400),
            ("InstanceLimitExceeded", 400),
            ("VcpuLimitExceeded", 400),
            ("MaxSpotInstanceCountExceeded", 400),
            ("AuthFailure", 401),
            ("UnauthorizedOperation", 403),
            ("InvalidInstanceID.NotFound", 400),
            ("InvalidParameterValue", 400),
        ] {
            assert!(!is_retryable(&service(code, status)), "{code} {status}");
        }
        assert!(!is_retryable(&ApiError::Http {
            status: 403,
            excerpt: "Forbidden".into()
        }));
        let user =
            aws_smithy_runtime_api::client::result::ConnectorError::user("bad request".into());
        assert!(!is_retryable(&ApiError::Transport {
            endpoint: "http://127.0.0.1:1".into(),
            source: user
        }));
    }

    #[test]
    fn the_policy_allows_max_attempts_minus_one_waits_within_the_bounds() {
        use backon::BackoffBuilder;
        let policy = RetryPolicy {
            max_attempts: 4,
            initial_backoff: std::time::Duration::from_millis(100),
            max_backoff: std::time::Duration::from_millis(250),
            mode: RetryMode::Standard,
        };
        let waits: Vec<_> = policy.backoff().build().collect();
        assert_eq!(waits.len(), 3, "{waits:?}");
        // Jitter adds up to one more delay on top of the exponential one.
        for w in &waits {
            assert!(
                *w >= std::time::Duration::from_millis(100)
                    && *w <= std::time::Duration::from_millis(500),
                "{waits:?}"
            );
        }
        let single = RetryPolicy {
            max_attempts: 1,
            ..policy
        };
        assert_eq!(single.backoff().build().count(), 0);
    }
}
