//! The crate's error types and how etcd's errors map onto the engine's `StoreError`:
//! refused permissions, an unreachable store (with the failed operation), corrupt
//! values, and the etcd answers callers act on (transient, compacted, lease gone).

use crate::client::ClientError;
use crate::url::UrlError;
use crate::EtcdStore;
use gpushare_engine::store::StoreError;

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("cannot read the {what} {path} for {url}")]
    TlsFile {
        url: String,
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{url}: {problem}")]
    Config { url: String, problem: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An etcd operation that failed, for [`StoreError::Unreachable`]'s source.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct EtcdOpError {
    pub what: String,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

#[derive(Debug, thiserror::Error)]
#[error("no answer within {seconds} s")]
pub(crate) struct TimedOut {
    pub(crate) seconds: f64,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Message(pub(crate) String);

impl EtcdStore {
    pub(crate) fn unreachable(
        &self,
        what: String,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Unreachable {
            location: self.inner.location.clone(),
            source: Box::new(EtcdOpError {
                what,
                source: Box::new(source),
            }),
        }
    }

    pub(crate) fn corrupt(&self, rel: &str, source: serde_json::Error) -> StoreError {
        StoreError::Corrupt {
            path: format!("{}/{}", self.inner.location, rel),
            source,
        }
    }

    pub(crate) fn corrupt_msg(&self, rel: &str, msg: String) -> StoreError {
        self.corrupt(rel, <serde_json::Error as serde::de::Error>::custom(msg))
    }
}

/// Map an etcd error: refused permissions are I/O errors (permission denied) naming
/// what was refused; everything else means the store could not be reached.
pub(crate) fn classify(location: &str, what: String, e: ClientError) -> StoreError {
    if let Some(s) = e.status() {
        let refused = matches!(
            s.code(),
            tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
        ) || s.message().contains("authentication failed");
        if refused {
            return StoreError::Io {
                path: format!("{location} ({what})"),
                source: std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("etcd refused: {}", s.message()),
                ),
            };
        }
    }
    StoreError::Unreachable {
        location: location.to_string(),
        source: Box::new(EtcdOpError {
            what,
            source: Box::new(e),
        }),
    }
}

/// Errors after which the same call may succeed on another member or a moment later:
/// the member or the connection to it went away (tonic answers `Unavailable` when it
/// cannot connect), the cluster has no leader yet, a stream broke.
pub(crate) fn is_transient(e: &ClientError) -> bool {
    match e {
        ClientError::Status(s) => {
            let m = s.message();
            s.code() == tonic::Code::Unavailable
                || (matches!(
                    s.code(),
                    tonic::Code::Unknown | tonic::Code::Internal | tonic::Code::Cancelled
                ) && [
                    "leader",
                    "timed out",
                    "transport",
                    "connection",
                    "broken pipe",
                    "h2 protocol",
                ]
                .iter()
                .any(|w| m.contains(w)))
        }
        ClientError::Closed(_) => true,
        _ => false,
    }
}

pub(crate) fn etcd_status(e: &StoreError) -> Option<&tonic::Status> {
    let StoreError::Unreachable { source, .. } = e else {
        return None;
    };
    let op = source.downcast_ref::<EtcdOpError>()?;
    op.source.downcast_ref::<ClientError>()?.status()
}

pub(crate) fn is_compacted(e: &StoreError) -> bool {
    etcd_status(e).is_some_and(|s| s.message().contains("compacted"))
}

/// etcd's "requested lease not found" (a put or keep-alive on an expired lease).
pub(crate) fn is_lease_not_found(e: &StoreError) -> bool {
    etcd_status(e).is_some_and(|s| s.message().contains("lease not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable(status: tonic::Status) -> StoreError {
        classify("etcd://x/p", "doing it".into(), ClientError::Status(status))
    }

    #[test]
    fn etcd_answers_are_classified() {
        let denied = unreachable(tonic::Status::permission_denied(
            "etcdserver: permission denied",
        ));
        assert!(
            matches!(&denied, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied),
            "{denied:?}"
        );
        let compacted = unreachable(tonic::Status::out_of_range(
            "etcdserver: mvcc: required revision has been compacted",
        ));
        assert!(is_compacted(&compacted) && !is_lease_not_found(&compacted));
        let gone = unreachable(tonic::Status::not_found(
            "etcdserver: requested lease not found",
        ));
        assert!(is_lease_not_found(&gone) && !is_compacted(&gone));
        assert!(is_transient(&ClientError::Status(
            tonic::Status::unavailable("tcp connect error")
        )));
        assert!(is_transient(&ClientError::Status(tonic::Status::unknown(
            "etcdserver: no leader"
        ))));
        assert!(!is_transient(&ClientError::Status(
            tonic::Status::invalid_argument("etcdserver: too many operations in txn request")
        )));
    }
}
