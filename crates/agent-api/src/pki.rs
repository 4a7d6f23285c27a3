//! The cluster's certificates: a CA made on first use and kept in the store (a
//! controller's record; agents never read it), the server certificate it signs for
//! each serving process, and the short-lived host certificates whose subject CN is
//! the host id. Agents pin the CA by [`ca_hash`].

use gpushare_engine::store::{Store, StoreError};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::{CertificateDer, CertificateSigningRequestDer};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime};

/// The store record holding the CA (certificate and key, PEM).
pub const CA_RECORD: &str = "agent-ca";
/// How long a host certificate is valid; agents renew after two thirds of it.
pub const HOST_CERT_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// How long the CA is valid.
const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long a serving process's certificate is valid (a new one every start).
const SERVER_CERT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// Clock skew allowed between the controller and its hosts.
pub const BACKDATE: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot read or write the cluster CA in the store")]
    Store {
        #[source]
        source: StoreError,
    },
    #[error("the cluster CA record in the store is corrupt")]
    CorruptCa {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot make {what}")]
    Make {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("the certificate signing request is invalid")]
    BadCsr {
        #[source]
        source: rcgen::Error,
    },
    #[error("{what} is not a valid certificate")]
    BadCert { what: &'static str },
}

/// `sha256:<hex of the CA certificate's DER>`, as `gpushare token create` prints it
/// and `gpushare agent --ca-hash` takes it (kubeadm's discovery hash, over the whole
/// certificate).
pub fn ca_hash(ca_der: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(ca_der)))
}

/// The stored CA.
#[derive(Serialize, Deserialize)]
struct StoredCa {
    cert_pem: String,
    key_pem: String,
}

/// The cluster CA, with its key: only the controller holds one.
pub struct ClusterCa {
    cert_der: CertificateDer<'static>,
    /// The CA as an issuer (re-made from the stored certificate and key).
    issuer: rcgen::Certificate,
    key: KeyPair,
}

/// `t` as a certificate's validity bound: UTC, in whole seconds.
fn offset(t: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from(t).truncate_to_second()
}

fn random_serial() -> SerialNumber {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut b);
    // Positive, as DER integers for serials must be.
    b[0] &= 0x7f;
    SerialNumber::from_slice(&b)
}

fn corrupt(e: impl std::error::Error + Send + Sync + 'static) -> PkiError {
    PkiError::CorruptCa {
        source: Box::new(e),
    }
}

impl ClusterCa {
    /// The cluster's CA from the store, made and stored first if there is none (two
    /// controllers making one at once agree on the first written).
    pub async fn load_or_create(store: &dyn Store, cluster: &str) -> Result<ClusterCa, PkiError> {
        loop {
            if let Some(r) = store
                .get_record(CA_RECORD)
                .await
                .map_err(|source| PkiError::Store { source })?
            {
                return ClusterCa::from_record(&r.value);
            }
            let (record, _) = ClusterCa::generate(cluster)?;
            match store.put_record(CA_RECORD, &record, 0).await {
                Ok(_) => {
                    let ca = ClusterCa::from_record(&record)?;
                    tracing::info!(store = %store.location(), ca_hash = %ca.hash(), "created the cluster CA for the agent API");
                    return Ok(ca);
                }
                // Another controller made one first: use it.
                Err(StoreError::RecordConflict { .. }) => continue,
                Err(source) => return Err(PkiError::Store { source }),
            }
        }
    }

    /// A new CA as the record stores it.
    fn generate(cluster: &str) -> Result<(String, KeyPair), PkiError> {
        let key = KeyPair::generate().map_err(|source| PkiError::Make {
            what: "the CA key",
            source,
        })?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "gpushare");
        dn.push(DnType::CommonName, format!("gpushare cluster {cluster} CA"));
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = SystemTime::now();
        params.not_before = offset(now - BACKDATE);
        params.not_after = offset(now + CA_LIFETIME);
        params.serial_number = Some(random_serial());
        let cert = params.self_signed(&key).map_err(|source| PkiError::Make {
            what: "the CA certificate",
            source,
        })?;
        let stored = StoredCa {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        let record = serde_json::to_string(&stored).map_err(corrupt)?;
        Ok((record, key))
    }

    fn from_record(record: &str) -> Result<ClusterCa, PkiError> {
        let stored: StoredCa = serde_json::from_str(record).map_err(corrupt)?;
        let key = KeyPair::from_pem(&stored.key_pem).map_err(corrupt)?;
        let params = CertificateParams::from_ca_cert_pem(&stored.cert_pem).map_err(corrupt)?;
        let issuer = params.self_signed(&key).map_err(corrupt)?;
        let cert_der = pem_der(&stored.cert_pem).ok_or(PkiError::BadCert {
            what: "the stored CA certificate",
        })?;
        Ok(ClusterCa {
            cert_der,
            issuer,
            key,
        })
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// [`ca_hash`] of this CA.
    pub fn hash(&self) -> String {
        ca_hash(&self.cert_der)
    }

    /// A certificate for host `host_id` (its CN), for client authentication only,
    /// valid for `lifetime`, for the key of the signing request `csr_der` (whatever
    /// else the request asks for is ignored). Returns the DER and its expiry
    /// (seconds since the epoch).
    ///
    /// `generation` is the host's revocation generation, written into the subject's
    /// organizational unit (see [`crate::revoke`], [`generation_of_cert`]).
    pub fn issue_host_cert(
        &self,
        host_id: &str,
        csr_der: &[u8],
        lifetime: Duration,
        generation: u64,
    ) -> Result<(Vec<u8>, u64), PkiError> {
        let csr =
            CertificateSigningRequestParams::from_der(&CertificateSigningRequestDer::from(csr_der))
                .map_err(|source| PkiError::BadCsr { source })?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host_id);
        dn.push(
            DnType::OrganizationalUnitName,
            format!("{GENERATION_PREFIX}{generation}"),
        );
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let now = SystemTime::now();
        let not_after = offset(now + lifetime);
        params.not_before = offset(now - BACKDATE);
        params.not_after = not_after;
        params.serial_number = Some(random_serial());
        let cert = params
            .signed_by(&csr.public_key, &self.issuer, &self.key)
            .map_err(|source| PkiError::Make {
                what: "the host certificate",
                source,
            })?;
        let not_after = u64::try_from(not_after.unix_timestamp()).unwrap_or(0);
        Ok((cert.der().to_vec(), not_after))
    }

    /// A fresh key and certificate for a serving process, for server authentication
    /// under `names` (DNS names or IP addresses).
    pub fn issue_server_cert(&self, names: &[String]) -> Result<(Vec<u8>, KeyPair), PkiError> {
        let key = KeyPair::generate().map_err(|source| PkiError::Make {
            what: "the server key",
            source,
        })?;
        let mut params =
            CertificateParams::new(names.to_vec()).map_err(|source| PkiError::Make {
                what: "the server certificate's names",
                source,
            })?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "gpushare agent API");
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = SystemTime::now();
        params.not_before = offset(now - BACKDATE);
        params.not_after = offset(now + SERVER_CERT_LIFETIME);
        params.serial_number = Some(random_serial());
        let cert = params
            .signed_by(&key, &self.issuer, &self.key)
            .map_err(|source| PkiError::Make {
                what: "the server certificate",
                source,
            })?;
        Ok((cert.der().to_vec(), key))
    }
}

/// The DER of the first certificate in `pem`.
fn pem_der(pem: &str) -> Option<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes()).ok()
}

/// The host id a (verified) host certificate names: its subject's CN.
pub fn host_of_cert(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// SHA-256 (hex) of a certificate's public key: as [`crate::registration::key_sha256`]
/// gives it for a signing request, so a caller's key can be compared with the key a
/// registered host joined with.
pub fn key_of_cert(der: &[u8]) -> Option<String> {
    use sha2::Digest;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(hex::encode(sha2::Sha256::digest(
        &cert.public_key().subject_public_key.data,
    )))
}

/// The expiry of a certificate, seconds since the epoch.
pub fn not_after(der: &[u8]) -> Option<u64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    u64::try_from(cert.validity().not_after.timestamp()).ok()
}

/// How a host certificate's organizational unit names its revocation generation.
const GENERATION_PREFIX: &str = "revocation-generation-";

/// The revocation generation a host certificate carries (`None`: issued before
/// generations, or not one of ours).
pub fn generation_of_cert(der: &[u8]) -> Option<u64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let ou = cert.subject().iter_organizational_unit().next()?;
    ou.as_str()
        .ok()?
        .strip_prefix(GENERATION_PREFIX)?
        .parse()
        .ok()
}

/// When a certificate this CA issued was issued (its `notBefore` is backdated by
/// [`BACKDATE`]), seconds since the epoch.
pub fn issued_at(der: &[u8]) -> Option<u64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let nb = u64::try_from(cert.validity().not_before.timestamp()).ok()?;
    Some(nb.saturating_add(BACKDATE.as_secs()))
}

/// A host's new key and its signing request (DER): the key never leaves the host.
pub fn new_key_and_csr() -> Result<(KeyPair, Vec<u8>), PkiError> {
    let key = KeyPair::generate().map_err(|source| PkiError::Make {
        what: "the host key",
        source,
    })?;
    let csr = CertificateParams::default()
        .serialize_request(&key)
        .map_err(|source| PkiError::Make {
            what: "the certificate signing request",
            source,
        })?;
    Ok((key, csr.der().to_vec()))
}
