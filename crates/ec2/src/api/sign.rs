//! SigV4 signing of one EC2 request (aws-sigv4), with credentials from the standard
//! chain, cached until shortly before they expire.

use super::error::ApiError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use std::time::{Duration, SystemTime};

/// The service name EC2 requests are signed for.
pub const SIGNING_NAME: &str = "ec2";
pub const CONTENT_TYPE: &str = "application/x-www-form-urlencoded; charset=utf-8";
/// The content type of AWS JSON 1.1 requests.
pub const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.1";

/// Credentials from a provider (the standard chain, or fixed ones), fetched again
/// when they are within this long of expiring.
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);

pub struct CredentialsCache {
    provider: SharedCredentialsProvider,
    cached: tokio::sync::Mutex<Option<Credentials>>,
}

impl std::fmt::Debug for CredentialsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialsCache").finish_non_exhaustive()
    }
}

impl CredentialsCache {
    pub fn new(provider: SharedCredentialsProvider) -> CredentialsCache {
        CredentialsCache {
            provider,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    pub async fn get(&self) -> Result<Credentials, ApiError> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            let fresh = c
                .expiry()
                .is_none_or(|at| at > SystemTime::now() + REFRESH_BEFORE_EXPIRY);
            if fresh {
                return Ok(c.clone());
            }
        }
        let c = self
            .provider
            .provide_credentials()
            .await
            .map_err(ApiError::Credentials)?;
        *cached = Some(c.clone());
        Ok(c)
    }
}

/// How a service's requests are encoded and signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// EC2's Query API: a form POSTed, XML answers, signed for `ec2`.
    Ec2Query,
    /// Another AWS Query API (ELBv2): the same form and XML, signed for `service`.
    Query { service: &'static str },
    /// AWS JSON 1.1 (the Price List API): a JSON body POSTed with
    /// `X-Amz-Target: <target_prefix>.<action>`, JSON answers, signed for `service`.
    Json11 {
        service: &'static str,
        target_prefix: &'static str,
    },
}

/// The HTTP request of one EC2 call: `body` POSTed to `endpoint`, signed with SigV4 for
/// `region` at `time`. The payload's SHA-256 goes in `x-amz-content-sha256` (and so
/// into the signature).
pub fn signed_request(
    action: &str,
    endpoint: &http::Uri,
    region: &str,
    credentials: &Credentials,
    body: String,
    time: SystemTime,
) -> Result<http::Request<String>, ApiError> {
    signed_request_as(
        Protocol::Ec2Query,
        action,
        endpoint,
        region,
        credentials,
        body,
        time,
    )
}

/// [`signed_request`] for a service speaking `protocol`.
pub fn signed_request_as(
    protocol: Protocol,
    action: &str,
    endpoint: &http::Uri,
    region: &str,
    credentials: &Credentials,
    body: String,
    time: SystemTime,
) -> Result<http::Request<String>, ApiError> {
    let failed = |source: Box<dyn std::error::Error + Send + Sync>| ApiError::Signing {
        action: action.to_string(),
        source,
    };
    let host = endpoint
        .authority()
        .map(|a| a.as_str().to_string())
        .ok_or_else(|| failed(format!("endpoint {endpoint} has no host").into()))?;
    let (name, content_type) = match protocol {
        Protocol::Ec2Query => (SIGNING_NAME, CONTENT_TYPE),
        Protocol::Query { service } => (service, CONTENT_TYPE),
        Protocol::Json11 { service, .. } => (service, JSON_CONTENT_TYPE),
    };
    let mut builder = http::Request::builder()
        .method(http::Method::POST)
        .uri(endpoint.clone())
        .header(http::header::HOST, host)
        .header(http::header::CONTENT_TYPE, content_type);
    if let Protocol::Json11 { target_prefix, .. } = protocol {
        builder = builder.header("x-amz-target", format!("{target_prefix}.{action}"));
    }
    let mut request = builder.body(body).map_err(|e| failed(e.into()))?;
    let identity: Identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(name)
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| failed(e.into()))?
        .into();
    let headers: Vec<(&str, &str)> = request
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
        .collect();
    let uri = endpoint.to_string();
    let signable = SignableRequest::new(
        "POST",
        uri.as_str(),
        headers.into_iter(),
        SignableBody::Bytes(request.body().as_bytes()),
    )
    .map_err(|e| failed(e.into()))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| failed(e.into()))?
        .into_parts();
    let (headers, _query) = instructions.into_parts();
    for h in headers {
        let mut value = http::HeaderValue::from_str(h.value()).map_err(|e| failed(e.into()))?;
        value.set_sensitive(h.sensitive());
        request.headers_mut().insert(h.name(), value);
    }
    Ok(request)
}
