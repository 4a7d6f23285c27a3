//! go-plugin AutoMTLS: a fresh self-signed server certificate per run, and a
//! client-certificate verifier that trusts exactly the certificate Terraform
//! handed us in `PLUGIN_CLIENT_CERT` (an ECDSA P-521 key in Terraform's case:
//! hence aws-lc-rs's signature verification, which accepts P-521, and pinning
//! by exact DER instead of a webpki chain check).
//!
//! Everything that needs randomness (our key, its signatures, key exchange) uses
//! ring: aws-lc's random generator takes ~140 ms to seed on first use, paid on
//! every one of the several provider starts of a `terraform plan`. Verification
//! (no randomness) uses aws-lc-rs.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{
    verify_tls12_signature, verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    DigitallySignedStruct, DistinguishedName, Error as TlsError, ServerConfig, SignatureScheme,
};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("PLUGIN_CLIENT_CERT holds no PEM certificate")]
    NoClientCert,
    #[error("PLUGIN_CLIENT_CERT is not valid PEM")]
    BadPem(#[source] std::io::Error),
    #[error("could not generate the server certificate")]
    CertGen(#[source] rcgen::Error),
    #[error("could not build the TLS configuration")]
    Config(#[source] TlsError),
}

/// The server's certificate and key, generated for this run.
pub struct ServerIdentity {
    pub cert_der: Vec<u8>,
    key_der: Vec<u8>,
}

impl ServerIdentity {
    /// A self-signed ECDSA P-256 certificate for `localhost` (the name go-plugin's
    /// client expects), usable for server and client auth, valid for 30 years.
    pub fn generate() -> Result<ServerIdentity, TlsSetupError> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .map_err(TlsSetupError::CertGen)?;
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "HashiCorp");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "localhost");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyEncipherment,
            rcgen::KeyUsagePurpose::KeyAgreement,
            rcgen::KeyUsagePurpose::KeyCertSign,
        ];
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2050, 1, 1);
        let (signer, key_der) = RingSigner::generate()?;
        let key = rcgen::KeyPair::from_remote(Box::new(signer)).map_err(TlsSetupError::CertGen)?;
        let cert = params.self_signed(&key).map_err(TlsSetupError::CertGen)?;
        Ok(ServerIdentity {
            cert_der: cert.der().to_vec(),
            key_der,
        })
    }

    /// The handshake line's last field: the DER certificate, standard base64 without padding.
    pub fn handshake_cert(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(&self.cert_der)
    }
}

/// An ECDSA P-256 key held by ring, signing our certificate for rcgen.
struct RingSigner {
    key: ring::signature::EcdsaKeyPair,
    rng: ring::rand::SystemRandom,
}

impl RingSigner {
    /// The signer and its PKCS#8 DER.
    fn generate() -> Result<(RingSigner, Vec<u8>), TlsSetupError> {
        use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .map_err(|_| TlsSetupError::CertGen(rcgen::Error::RingUnspecified))?;
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|_| {
            TlsSetupError::CertGen(rcgen::Error::RingKeyRejected("generated key".into()))
        })?;
        Ok((RingSigner { key, rng }, pkcs8.as_ref().to_vec()))
    }
}

impl rcgen::RemoteKeyPair for RingSigner {
    fn public_key(&self) -> &[u8] {
        use ring::signature::KeyPair;
        self.key.public_key().as_ref()
    }
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        self.key
            .sign(&self.rng, msg)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| rcgen::Error::RemoteKeyError)
    }
    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

/// Parses the first certificate of a PEM bundle (the `PLUGIN_CLIENT_CERT` value).
pub fn client_cert_from_pem(pem: &str) -> Result<CertificateDer<'static>, TlsSetupError> {
    let mut reader = std::io::BufReader::new(pem.as_bytes());
    let first = rustls_pemfile::certs(&mut reader).next();
    match first {
        Some(Ok(c)) => Ok(c),
        Some(Err(e)) => Err(TlsSetupError::BadPem(e)),
        None => Err(TlsSetupError::NoClientCert),
    }
}

/// Accepts exactly one client certificate, compared byte for byte.
#[derive(Debug)]
pub struct PinnedClientCert {
    pinned: CertificateDer<'static>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl PinnedClientCert {
    pub fn new(pinned: CertificateDer<'static>) -> Self {
        Self {
            pinned,
            algorithms: rustls::crypto::aws_lc_rs::default_provider()
                .signature_verification_algorithms,
        }
    }
}

impl ClientCertVerifier for PinnedClientCert {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, TlsError> {
        if end_entity.as_ref() == self.pinned.as_ref() {
            Ok(ClientCertVerified::assertion())
        } else {
            Err(TlsError::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The rustls server configuration: our identity, the pinned client certificate, ALPN `h2`
/// (grpc-go refuses a TLS server that does not negotiate it).
pub fn server_config(
    identity: &ServerIdentity,
    client_cert: CertificateDer<'static>,
) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let provider = Arc::new(crypto_provider());
    let mut config = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsSetupError::Config)?
        .with_client_cert_verifier(Arc::new(PinnedClientCert::new(client_cert)))
        .with_single_cert(
            vec![CertificateDer::from(identity.cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(identity.key_der.clone())),
        )
        .map_err(TlsSetupError::Config)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The crypto provider every rustls object here uses: ring's, with aws-lc-rs's
/// signature verification (P-521 included; see the module docs).
pub fn crypto_provider() -> CryptoProvider {
    CryptoProvider {
        signature_verification_algorithms: rustls::crypto::aws_lc_rs::default_provider()
            .signature_verification_algorithms,
        ..rustls::crypto::ring::default_provider()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client with a P-521 certificate (as Terraform's) completes mutual TLS; a
    /// different client certificate is refused.
    #[tokio::test]
    async fn pinned_p521_client_is_accepted_and_another_refused() {
        let server = ServerIdentity::generate().unwrap();
        let make_client = || {
            let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
            let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P521_SHA512).unwrap();
            let cert = params.self_signed(&key).unwrap();
            (cert.der().to_vec(), key.serialize_der())
        };
        let (good_cert, good_key) = make_client();
        let (bad_cert, bad_key) = make_client();
        let cfg = server_config(&server, CertificateDer::from(good_cert.clone())).unwrap();

        async fn attempt(
            cfg: Arc<ServerConfig>,
            server_cert: Vec<u8>,
            cert: Vec<u8>,
            key: Vec<u8>,
        ) -> bool {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
            let srv = tokio::spawn(async move {
                let (tcp, _) = listener.accept().await.unwrap();
                match acceptor.accept(tcp).await {
                    Ok(mut tls) => {
                        let mut b = [0u8; 4];
                        tls.read_exact(&mut b).await.is_ok()
                            && &b == b"ping"
                            && tls.get_ref().1.alpn_protocol() == Some(b"h2")
                    }
                    Err(_) => false,
                }
            });
            // Like go-plugin's client: trust exactly the server certificate from the handshake
            // line; its P-521 key needs aws-lc (ring cannot sign with P-521).
            let ccfg = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedServer(server_cert)))
            .with_client_auth_cert(
                vec![CertificateDer::from(cert)],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
            )
            .unwrap();
            let mut ccfg = ccfg;
            ccfg.alpn_protocols = vec![b"h2".to_vec()];
            let connector = tokio_rustls::TlsConnector::from(Arc::new(ccfg));
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            if let Ok(mut tls) = connector
                .connect(ServerName::try_from("localhost").unwrap(), tcp)
                .await
            {
                let _ = tls.write_all(b"ping").await;
                let _ = tls.flush().await;
            }
            srv.await.unwrap()
        }
        assert!(attempt(cfg.clone(), server.cert_der.clone(), good_cert, good_key).await);
        assert!(!attempt(cfg, server.cert_der.clone(), bad_cert, bad_key).await);
    }

    #[derive(Debug)]
    struct PinnedServer(Vec<u8>);

    impl rustls::client::danger::ServerCertVerifier for PinnedServer {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, TlsError> {
            assert_eq!(end_entity.as_ref(), &self.0[..]);
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, TlsError> {
            verify_tls12_signature(
                m,
                c,
                d,
                &crypto_provider().signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, TlsError> {
            verify_tls13_signature(
                m,
                c,
                d,
                &crypto_provider().signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            crypto_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    #[test]
    fn handshake_cert_is_unpadded_base64_of_der() {
        let id = ServerIdentity::generate().unwrap();
        let s = id.handshake_cert();
        assert!(!s.ends_with('='));
        use base64::Engine;
        assert_eq!(
            base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(&s)
                .unwrap(),
            id.cert_der
        );
    }

    #[test]
    fn client_cert_pem_errors_are_clear() {
        assert!(matches!(
            client_cert_from_pem("nothing here"),
            Err(TlsSetupError::NoClientCert)
        ));
    }
}
