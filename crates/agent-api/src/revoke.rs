//! Certificate revocation: `gpushare host revoke HOST` records, in one controller's
//! record, that host HOST's certificates issued so far are refused. Every call but
//! `Join` checks it: a revoked certificate's assignment stream gets "host removed"
//! (its agent stops every task), its reports and renewals are refused. A certificate
//! issued later (the host joined again with a new token) works.
//!
//! No clock decides it (issue 46: a revocation cut off by the clock of the machine
//! running `host revoke` let a certificate renewed during a skew survive): each host
//! has a revocation *generation*, which every revocation advances; the server writes
//! the generation into every host certificate it issues (the subject's
//! organizational unit, [`crate::pki::generation_of_cert`]) and refuses a certificate
//! of an older one, whatever the clocks say. Certificates issued before generations
//! (none in the subject) are judged by their issue time against `before`, as then,
//! and by any revocation since.

use gpushare_engine::store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The store record holding the revocations.
pub const REVOCATIONS_RECORD: &str = "agent-revocations";

/// One host's revocation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    /// Before generations: certificates of the host issued at or before this time
    /// (seconds since the epoch) are refused. Kept for records written then.
    #[serde(default)]
    pub before: u64,
    /// Certificates of the host of a lower generation are refused; the host's next
    /// certificate carries this one.
    #[serde(default)]
    pub generation: u64,
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

/// What a certificate says of its revocation standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertStanding {
    /// It carries this generation.
    Generation(u64),
    /// It carries none (issued before generations), issued at this time if known.
    Issued(Option<u64>),
}

impl Revocations {
    /// Whether a certificate of `host` with `standing` is revoked.
    pub fn revoked(&self, host: &str, standing: CertStanding) -> bool {
        let Some(r) = self.hosts.get(host) else {
            return false;
        };
        match standing {
            CertStanding::Generation(g) => g < r.generation,
            CertStanding::Issued(at) => r.generation > 0 || at.is_none_or(|at| at <= r.before),
        }
    }

    /// The generation `host`'s next certificate carries.
    pub fn generation(&self, host: &str) -> u64 {
        self.hosts.get(host).map_or(0, |r| r.generation)
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

/// Revoke every certificate of `host` issued so far: advance its generation (no
/// clock is read). Returns the new generation.
pub async fn revoke(store: &dyn Store, host: &str) -> Result<u64, RevokeError> {
    if !gpushare_core::ids::valid_id(host) {
        return Err(RevokeError::BadHost {
            host: host.to_string(),
        });
    }
    loop {
        let (mut r, version) = read(store).await?;
        let entry = r.hosts.entry(host.to_string()).or_default();
        entry.generation = entry.generation.saturating_add(1);
        let generation = entry.generation;
        let value = serde_json::to_string(&r).map_err(|source| RevokeError::Corrupt { source })?;
        match store.put_record(REVOCATIONS_RECORD, &value, version).await {
            Ok(_) => return Ok(generation),
            Err(StoreError::RecordConflict { .. }) => continue,
            Err(source) => return Err(RevokeError::Store { source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use CertStanding::{Generation, Issued};

    #[test]
    fn certificates_of_an_older_generation_are_refused_and_later_ones_work() {
        let mut r = Revocations::default();
        r.hosts.insert(
            "h-a".into(),
            Revoked {
                before: 0,
                generation: 2,
            },
        );
        assert!(r.revoked("h-a", Generation(0)) && r.revoked("h-a", Generation(1)));
        assert!(!r.revoked("h-a", Generation(2)));
        assert!(
            !r.revoked("h-b", Generation(0)),
            "another host is not touched"
        );
        assert_eq!((r.generation("h-a"), r.generation("h-b")), (2, 0));
        // A certificate from before generations is refused by any revocation since.
        assert!(r.revoked("h-a", Issued(Some(u64::MAX))));
    }

    /// A record written before generations still refuses what it refused, and
    /// nothing else.
    #[test]
    fn a_record_from_before_generations_judges_old_certificates_by_time() {
        let r: Revocations =
            serde_json::from_str(r#"{"hosts":{"h-a":{"before":100}}}"#).expect("old record");
        assert!(r.revoked("h-a", Issued(Some(100))) && r.revoked("h-a", Issued(None)));
        assert!(!r.revoked("h-a", Issued(Some(101))));
        assert!(!r.revoked("h-a", Generation(0)));
    }
}
