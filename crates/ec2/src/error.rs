//! The crate's errors: what one EC2 call can fail with ([`ApiError`], re-exported as
//! `api::ApiError`), and why the backend cannot be set up ([`Ec2Error`]). Kept apart
//! from `api` and `cloud` so that `retry` (below both) can name them.

use std::time::Duration;

/// An error EC2 answered with (`<Response><Errors><Error><Code>…`), as EC2 sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ServiceError {
    /// EC2's error code, e.g. `RequestLimitExceeded`, `InvalidInstanceID.NotFound`.
    pub code: String,
    pub message: String,
    /// The HTTP status of the answer.
    pub status: u16,
    /// EC2's request id (`<RequestID>`), for AWS support; `None` where the answer had none.
    pub request_id: Option<String>,
}

/// One EC2 call that failed, after the retries [`crate::retry`] allows.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// EC2 refused the call with an error code.
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error("no AWS credentials to call EC2 with")]
    Credentials(#[source] aws_credential_types::provider::error::CredentialsError),
    #[error("cannot sign the {action} request")]
    Signing {
        action: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot reach EC2 at {endpoint}")]
    Transport {
        endpoint: String,
        #[source]
        source: aws_smithy_runtime_api::client::result::ConnectorError,
    },
    #[error("EC2 at {endpoint} did not answer within {timeout:?}")]
    Timeout { endpoint: String, timeout: Duration },
    /// An answer that is neither a success nor an EC2 error document (a proxy's page, say).
    #[error("EC2 answered HTTP {status} without an EC2 error in it: {excerpt:?}")]
    Http { status: u16, excerpt: String },
    #[error("cannot read EC2's {action} answer")]
    Decode {
        action: String,
        #[source]
        source: quick_xml::DeError,
    },
}

impl ApiError {
    /// EC2's error code, when EC2 answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ApiError::Service(e) => Some(&e.code),
            _ => None,
        }
    }

    /// EC2's error message, when EC2 answered with one.
    pub fn message(&self) -> Option<&str> {
        match self {
            ApiError::Service(e) => Some(&e.message),
            _ => None,
        }
    }

    /// The HTTP status of EC2's answer, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Service(e) => Some(e.status),
            ApiError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// An endpoint that is not an `http://` or `https://` URL.
#[derive(Debug, thiserror::Error)]
#[error("invalid EC2 endpoint {endpoint:?}: expected an http:// or https:// URL")]
pub struct BadEndpoint {
    pub endpoint: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Ec2Error {
    #[error("no AWS region: set `region` in the gpushare block, or AWS_REGION / AWS_DEFAULT_REGION, or a profile region")]
    NoRegion,
    #[error(transparent)]
    BadEndpoint(#[from] BadEndpoint),
    #[error("no AWS credentials provider: the AWS configuration gave none")]
    NoCredentials,
    #[error("invalid retry setting {setting} = {value:?}: {expected}")]
    BadRetrySetting {
        /// `AWS_MAX_ATTEMPTS`, or `max_attempts in profile NAME`...
        setting: String,
        value: String,
        expected: &'static str,
    },
}
