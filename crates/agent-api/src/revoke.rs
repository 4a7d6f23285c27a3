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
    /// A launched host's key (SHA-256 of its public key, hex), bound at its first
    /// join: a certificate with another key is refused on every call (issue 46 item
    /// 2; a registered host's key is in its registration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_sha256: Option<String>,
}

/// What [`bind_key`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// The host had no key bound: this one is now.
    New,
    /// The host has this key already.
    Same,
    /// Another key was bound; this one replaced it (a token minted for the host id).
    Replaced,
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
    #[error("host {host:?} already joined with another key; a token minted for its id (gpushare token create --host-id {host}) joins it again with a new one")]
    KeyTaken { host: String },
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

    /// The key bound to launched host `host`, if any.
    pub fn key(&self, host: &str) -> Option<&str> {
        self.hosts.get(host)?.key_sha256.as_deref()
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

/// Bind launched host `host` to `key` at its join: a first join binds it; a join
/// with another key is refused unless `replace` (a token minted for the host id).
pub async fn bind_key(
    store: &dyn Store,
    host: &str,
    key: &str,
    replace: bool,
) -> Result<Binding, RevokeError> {
    update(store, host, |entry| match entry.key_sha256.as_deref() {
        Some(k) if k == key => Ok((Binding::Same, false)),
        Some(_) if !replace => Err(RevokeError::KeyTaken {
            host: host.to_string(),
        }),
        bound => {
            let how = if bound.is_some() {
                Binding::Replaced
            } else {
                Binding::New
            };
            entry.key_sha256 = Some(key.to_string());
            Ok((how, true))
        }
    })
    .await
}

/// Change `host`'s entry with `f` (which says whether to write), compare-and-swap
/// (again on a concurrent change).
async fn update<T>(
    store: &dyn Store,
    host: &str,
    mut f: impl FnMut(&mut Revoked) -> Result<(T, bool), RevokeError>,
) -> Result<T, RevokeError> {
    if !gpushare_core::ids::valid_id(host) {
        return Err(RevokeError::BadHost {
            host: host.to_string(),
        });
    }
    loop {
        let (mut r, version) = read(store).await?;
        let (out, write) = f(r.hosts.entry(host.to_string()).or_default())?;
        if !write {
            return Ok(out);
        }
        let value = serde_json::to_string(&r).map_err(|source| RevokeError::Corrupt { source })?;
        match store.put_record(REVOCATIONS_RECORD, &value, version).await {
            Ok(_) => return Ok(out),
            Err(StoreError::RecordConflict { .. }) => continue,
            Err(source) => return Err(RevokeError::Store { source }),
        }
    }
}

/// Revoke every certificate of `host` issued so far: advance its generation (no
/// clock is read). Returns the new generation.
pub async fn revoke(store: &dyn Store, host: &str) -> Result<u64, RevokeError> {
    update(store, host, |entry| {
        entry.generation = entry.generation.saturating_add(1);
        Ok((entry.generation, true))
    })
    .await
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
                generation: 2,
                ..Revoked::default()
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
