//! One HTTP exchange with EC2: sign, send over the SDK's own HTTPS connector
//! (hyper 1, rustls with aws-lc, the system's roots; no proxy, as the SDK's default),
//! read the answer. Retrying is the caller's ([`crate::retry`]).

use super::error::ApiError;
use super::sign::{signed_request_as, CredentialsCache, Protocol};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_http_client::Connector;
use aws_smithy_runtime_api::client::http::{HttpConnector, HttpConnectorSettings};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_types::body::SdkBody;
use http_body_util::BodyExt;
use std::time::{Duration, SystemTime};

/// A success answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

pub struct Transport {
    connector: Connector,
    pub endpoint: http::Uri,
    pub region: String,
    credentials: CredentialsCache,
    attempt_timeout: Duration,
    protocol: Protocol,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("attempt_timeout", &self.attempt_timeout)
            .finish_non_exhaustive()
    }
}

impl Transport {
    pub fn new(
        endpoint: http::Uri,
        region: String,
        credentials: CredentialsCache,
        connect_timeout: Duration,
        attempt_timeout: Duration,
    ) -> Transport {
        let settings = HttpConnectorSettings::builder()
            .connect_timeout(connect_timeout)
            .build();
        let connector = Connector::builder()
            .connector_settings(settings)
            .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
            .build();
        Transport {
            connector,
            endpoint,
            region,
            credentials,
            attempt_timeout,
            protocol: Protocol::Ec2Query,
        }
    }

    /// The same transport for a service speaking `protocol` (EC2's Query API unless set).
    pub fn with_protocol(mut self, protocol: Protocol) -> Transport {
        self.protocol = protocol;
        self
    }

    /// One attempt: `Ok` for a 2xx answer, else the error EC2 (or the network) gave.
    pub async fn send(&self, action: &str, body: &str) -> Result<Answer, ApiError> {
        let credentials = self.credentials.get().await?;
        let request = signed_request_as(
            self.protocol,
            action,
            &self.endpoint,
            &self.region,
            &credentials,
            body.to_string(),
            SystemTime::now(),
        )?;
        let request =
            HttpRequest::try_from(request.map(SdkBody::from)).map_err(|e| ApiError::Signing {
                action: action.to_string(),
                source: e.into(),
            })?;
        let endpoint = self.endpoint.to_string();
        let exchange = async {
            let response =
                self.connector
                    .call(request)
                    .await
                    .map_err(|source| ApiError::Transport {
                        endpoint: endpoint.clone(),
                        source,
                    })?;
            let status = response.status().as_u16();
            let request_id = response
                .headers()
                .get("x-amzn-requestid")
                .map(str::to_string);
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| ApiError::Transport {
                    endpoint: endpoint.clone(),
                    source: aws_smithy_runtime_api::client::result::ConnectorError::io(e),
                })?
                .to_bytes();
            Ok::<_, ApiError>((status, request_id, bytes))
        };
        let (status, request_id, bytes) = tokio::time::timeout(self.attempt_timeout, exchange)
            .await
            .map_err(|_| ApiError::Timeout {
                endpoint: endpoint.clone(),
                timeout: self.attempt_timeout,
            })??;
        let body = String::from_utf8_lossy(&bytes).into_owned();
        if (200..300).contains(&status) {
            Ok(Answer { status, body })
        } else {
            Err(match self.protocol {
                Protocol::Ec2Query | Protocol::Query { .. } => {
                    super::xml::error(status, &body, request_id.as_deref())
                }
                Protocol::Json11 { .. } => json_error(status, &body, request_id.as_deref()),
            })
        }
    }
}

/// The error of a non-success AWS JSON 1.1 answer: `{"__type": "...#Code", "message": ...}`
/// (or `Message`), else [`ApiError::Http`].
pub fn json_error(status: u16, body: &str, request_id: Option<&str>) -> ApiError {
    let doc: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let field = |k: &str| {
        doc.as_ref()
            .and_then(|d| d.get(k))
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let code = field("__type").map(|t| t.rsplit('#').next().unwrap_or_default().to_string());
    match code.filter(|c| !c.is_empty()) {
        Some(code) => ApiError::Service(super::error::ServiceError {
            code,
            message: field("message")
                .or_else(|| field("Message"))
                .unwrap_or_default(),
            status,
            request_id: request_id.map(str::to_string),
        }),
        None => ApiError::Http {
            status,
            excerpt: body.chars().take(200).collect(),
        },
    }
}
