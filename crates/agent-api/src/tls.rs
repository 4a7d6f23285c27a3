//! TLS for the agent API (rustls with aws-lc-rs, TLS 1.3): the server asks every
//! client for a certificate of the cluster CA but lets a client without one through
//! (only `Join` serves it); the agent trusts exactly the CA whose hash it pinned.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot build the TLS configuration")]
    Config(#[source] rustls::Error),
    #[error("cannot build the client certificate verifier")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    #[error("{0:?} is not a CA hash: expected sha256:<64 hex digits> (as `gpushare token create` prints it)")]
    BadCaHash(String),
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

const H2: &[u8] = b"h2";

/// The server's configuration: its certificate chain (its own, then the CA's), and
/// client certificates verified against the CA when presented.
pub fn server_config(
    ca: &CertificateDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    key_der: Vec<u8>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).map_err(TlsError::Config)?;
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .allow_unauthenticated()
            .build()
            .map_err(TlsError::Verifier)?;
    let mut cfg = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Config)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            chain,
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_der)),
        )
        .map_err(TlsError::Config)?;
    cfg.alpn_protocols = vec![H2.to_vec()];
    Ok(Arc::new(cfg))
}

/// Checks a `sha256:<hex>` CA hash and returns it in lower case.
pub fn parse_ca_hash(s: &str) -> Result<String, TlsError> {
    let hex_part = s
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| TlsError::BadCaHash(s.to_string()))?;
    Ok(format!("sha256:{}", hex_part.to_ascii_lowercase()))
}

/// The agent's configuration: the server is trusted when its chain holds the CA of
/// hash `ca_hash` and its certificate is valid under that CA for the name dialled;
/// `client`: the host's certificate and key (none for `Join`).
pub fn client_config(
    ca_hash: &str,
    client: Option<(CertificateDer<'static>, Vec<u8>)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let ca_hash = parse_ca_hash(ca_hash)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Config)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCa { ca_hash }));
    let mut cfg = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![cert],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
            )
            .map_err(TlsError::Config)?,
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![H2.to_vec()];
    Ok(Arc::new(cfg))
}

/// Trusts the one CA whose certificate hashes to the pinned hash.
#[derive(Debug)]
struct PinnedCa {
    ca_hash: String,
}

impl ServerCertVerifier for PinnedCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ca = intermediates
            .iter()
            .find(|c| crate::pki::ca_hash(c) == self.ca_hash)
            .ok_or_else(|| {
                rustls::Error::General(format!(
                    "the server's CA is not the pinned one ({})",
                    self.ca_hash
                ))
            })?;
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
        webpki.verify_server_cert(end_entity, &[], server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
