//! Decoding EC2's XML answers: a success into the action's answer type, anything
//! else into the error EC2 sent (`<Response><Errors><Error><Code>…</Code>
//! <Message>…</Message></Error></Errors><RequestID>…</RequestID></Response>`).

use super::error::{ApiError, ServiceError};
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// A success answer of `action` as `T` (the root element's children are `T`'s fields).
pub fn decode<T: DeserializeOwned>(action: &str, body: &str) -> Result<T, ApiError> {
    quick_xml::de::from_str(body).map_err(|source| ApiError::Decode {
        action: action.to_string(),
        source,
    })
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "Code")]
    code: String,
    #[serde(rename = "Message", default)]
    message: String,
}

#[derive(Deserialize)]
struct ErrorList {
    #[serde(rename = "Error", default)]
    error: Vec<ErrorBody>,
}

/// EC2's `<Response><Errors>…`; also the `<ErrorResponse><Error>…` other AWS Query
/// services (and some front ends) send.
#[derive(Deserialize)]
struct ErrorDocument {
    #[serde(rename = "Errors")]
    errors: Option<ErrorList>,
    #[serde(rename = "Error")]
    error: Option<ErrorBody>,
    #[serde(rename = "RequestID", alias = "RequestId")]
    request_id: Option<String>,
}

/// The error of a non-success answer with HTTP `status`. `header_request_id` is the
/// `x-amzn-requestid` header, used where the document names none.
pub fn error(status: u16, body: &str, header_request_id: Option<&str>) -> ApiError {
    let doc = quick_xml::de::from_str::<ErrorDocument>(body).ok();
    let first = doc.as_ref().and_then(|d| {
        d.errors
            .as_ref()
            .and_then(|l| l.error.first())
            .or(d.error.as_ref())
    });
    match first {
        Some(e) if !e.code.is_empty() => ApiError::Service(ServiceError {
            code: e.code.clone(),
            message: e.message.clone(),
            status,
            request_id: doc
                .as_ref()
                .and_then(|d| d.request_id.clone())
                .or_else(|| header_request_id.map(str::to_string)),
        }),
        _ => ApiError::Http {
            status,
            excerpt: body.chars().take(200).collect(),
        },
    }
}
