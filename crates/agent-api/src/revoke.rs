//! Certificate revocation: `gpushare host revoke HOST` records, in one controller's
//! record, that host HOST's certificates issued until now are refused. Every call
//! but `Join` checks it: a revoked certificate's assignment stream gets "host
//! removed" (its agent stops every task), its reports and renewals are refused. A
//! certificate issued later (the host joined again with a new token) works.
//!
//! A certificate's issue time is its `notBefore` plus [`crate::pki::BACKDATE`]; the server
//! issues a host's next certificate after the second of its revocation, so one
//! second never holds both a revoked certificate and a good one.

use gpushare_engine::store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The store record holding the revocations.
pub const REVOCATIONS_RECORD: &str = "agent-revocations";

/// One host's revocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    /// Certificates of the host issued at or before this time (seconds since the
    /// epoch) are refused.
    pub before: u64,
}

/// Every revocation, by host id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocations {
    #[serde(default)]
    pub hosts: BTreeMap<String, Revoked>,
}

#[derive(Debug, thiserror::Error)]
pub enum RevokeError {
    #[error("cannot read or write the certificate revocations in the store")]
    Store {
        #[source]
        source: StoreError,
    },
    #[error("the certificate revocations record in the store is corrupt")]
    Corrupt {
        #[source]
        source: serde_json::Error,
    },
    #[error("{host:?} is not a valid host id")]
    BadHost { host: String },
}

impl Revocations {
    /// Whether a certificate of `host` issued at `issued_at` is revoked.
    pub fn revoked(&self, host: &str, issued_at: u64) -> bool {
        self.hosts.get(host).is_some_and(|r| issued_at <= r.before)
    }

    /// The time after which `host`'s next certificate must be issued (0: any).
    pub fn issue_after(&self, host: &str) -> u64 {
        self.hosts.get(host).map_or(0, |r| r.before)
    }
}

async fn read(store: &dyn Store) -> Result<(Revocations, u64), RevokeError> {
    match store
        .get_record(REVOCATIONS_RECORD)
        .await
        .map_err(|source| RevokeError::Store { source })?
    {
        None => Ok((Revocations::default(), 0)),
        Some(r) => Ok((
            serde_json::from_str(&r.value).map_err(|source| RevokeError::Corrupt { source })?,
            r.version,
        )),
    }
}

/// The revocations recorded in `store`.
pub async fn load(store: &dyn Store) -> Result<Revocations, RevokeError> {
    Ok(read(store).await?.0)
}

/// Revoke every certificate of `host` issued until `now` (seconds since the epoch).
pub async fn revoke(store: &dyn Store, host: &str, now: u64) -> Result<(), RevokeError> {
    if !gpushare_core::ids::valid_id(host) {
        return Err(RevokeError::BadHost {
            host: host.to_string(),
        });
    }
    loop {
        let (mut r, version) = read(store).await?;
        let before = r.hosts.get(host).map_or(now, |old| old.before.max(now));
        r.hosts.insert(host.to_string(), Revoked { before });
        let value = serde_json::to_string(&r).map_err(|source| RevokeError::Corrupt { source })?;
        match store.put_record(REVOCATIONS_RECORD, &value, version).await {
            Ok(_) => return Ok(()),
            Err(StoreError::RecordConflict { .. }) => continue,
            Err(source) => return Err(RevokeError::Store { source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_issued_until_the_revocation_are_refused_and_later_ones_work() {
        let mut r = Revocations::default();
        r.hosts.insert("h-a".into(), Revoked { before: 100 });
        assert!(r.revoked("h-a", 99) && r.revoked("h-a", 100));
        assert!(!r.revoked("h-a", 101));
        assert!(!r.revoked("h-b", 50), "another host is not touched");
        assert_eq!((r.issue_after("h-a"), r.issue_after("h-b")), (100, 0));
    }
}
