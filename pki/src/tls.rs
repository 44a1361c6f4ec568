//! The `rustls` configurations of the worker listener and of the workers.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme,
};

use crate::{Authority, PkiError, certs_from_pem, fingerprint_der, first_cert_der, is_fingerprint};

/// The one application protocol spoken on the worker listener (gRPC).
const ALPN_H2: &[u8] = b"h2";
/// The apps listener also serves the HTTP API to studio-app's proxy.
const ALPN_HTTP1: &[u8] = b"http/1.1";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client configuration a joining worker uses: no client certificate; the server's chain
/// must contain a CA certificate whose SHA-256 is `pin` (hex, either case), and the leaf must
/// verify under that CA alone. ALPN `h2`.
///
/// Connect with the server name [`crate::SERVER_NAME`], whatever address is dialled.
pub fn joining_client_config(pin: &str) -> Result<ClientConfig, PkiError> {
    let pin = pin.to_ascii_lowercase();
    if !is_fingerprint(&pin) {
        return Err(PkiError::InvalidPin);
    }
    let provider = provider();
    let verifier = Arc::new(PinnedCaVerifier {
        pin,
        provider: provider.clone(),
    });
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// The client configuration of an enrolled worker: the CA (the first certificate of `ca_pem`)
/// is the only root; the worker authenticates with its certificate (chain PEM) and key.
/// ALPN `h2`.
///
/// Connect with the server name [`crate::SERVER_NAME`], whatever address is dialled.
pub fn worker_client_config(
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<ClientConfig, PkiError> {
    enrolled_client_config(ca_pem, cert_pem, key_pem, ALPN_H2)
}

/// The client configurations of an enrolled studio-app, as [`worker_client_config`]: the
/// first speaks gRPC (ALPN `h2`, the verifier), the second HTTP/1.1 (the API proxy).
pub fn app_client_configs(
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<(ClientConfig, ClientConfig), PkiError> {
    Ok((
        enrolled_client_config(ca_pem, cert_pem, key_pem, ALPN_H2)?,
        enrolled_client_config(ca_pem, cert_pem, key_pem, ALPN_HTTP1)?,
    ))
}

fn enrolled_client_config(
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
    alpn: &[u8],
) -> Result<ClientConfig, PkiError> {
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(first_cert_der(ca_pem)?))?;
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs_from_pem(cert_pem)?, private_key(key_pem)?)?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

/// The server configuration of the worker listener: a fresh server identity
/// ([`Authority::server_identity`]), and client certificates verified against the CA alone.
/// ALPN `h2`.
///
/// A client certificate is optional: a joining worker has none yet, so studiod decides per call
/// which calls need one (`ServerConnection::peer_certificates`).
pub fn listener_server_config(authority: &Authority) -> Result<ServerConfig, PkiError> {
    server_config(authority, &[ALPN_H2])
}

/// The server configuration of the apps listener: as [`listener_server_config`] (a
/// certificate is optional only so that an app can enrol), speaking gRPC (`h2`, the
/// verifier and enrolment) and HTTP/1.1 (the API, for studio-app's proxy).
pub fn apps_listener_server_config(authority: &Authority) -> Result<ServerConfig, PkiError> {
    server_config(authority, &[ALPN_H2, ALPN_HTTP1])
}

fn server_config(authority: &Authority, alpn: &[&[u8]]) -> Result<ServerConfig, PkiError> {
    let provider = provider();
    let ca = CertificateDer::from(authority.cert_der().to_vec());
    let (leaf, key) = authority.issue_server()?;
    let chain = vec![leaf.der().clone(), ca.clone()];

    let mut roots = RootCertStore::empty();
    roots.add(ca)?;
    let clients = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()?;

    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(clients)
        .with_single_cert(chain, PrivateKeyDer::from(key))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

fn private_key(pem: &str) -> Result<PrivateKeyDer<'static>, PkiError> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| match e {
        pem::Error::NoItemsFound => PkiError::NoPrivateKey,
        e => PkiError::BadPem {
            what: "private key",
            detail: e.to_string(),
        },
    })
}

/// Trusts a server whose presented chain holds the CA certificate of SHA-256 `pin`, and whose
/// leaf verifies under that CA (and only it) for the name dialled.
#[derive(Debug)]
struct PinnedCaVerifier {
    pin: String,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedCaVerifier {
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
            .find(|cert| fingerprint_der(cert) == self.pin)
            .ok_or(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            ))?;
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
