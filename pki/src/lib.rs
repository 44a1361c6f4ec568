//! The certificate authority and TLS configurations of studiod's worker listener.
//!
//! studiod and remote `studio worker` processes speak mutual TLS. This crate owns every piece
//! of that trust and nothing else (no sockets, no store):
//!
//! - [`Authority`]: a small, private CA kept in one studiod home (`run/ca/`). It signs a fresh
//!   listener certificate at each studiod start ([`Authority::server_identity`]) and one client
//!   certificate per enrolled worker ([`Authority::sign_worker_csr`]).
//! - [`JoinToken`]: the one-time secret a worker presents to enrol, carrying the CA fingerprint
//!   the worker pins before it trusts anything.
//! - [`listener_server_config`], [`joining_client_config`], [`worker_client_config`]: the
//!   `rustls` configurations of the three ends, built with the `ring` provider explicitly (no
//!   process-wide provider needs installing), ALPN `h2`.
//!
//! Invariants:
//!
//! - The CA key never leaves `ca.key` (mode 0600, in a 0700 directory) and the process holding
//!   the [`Authority`]; the listener's key is never written to disk.
//! - A worker certificate takes only the public key from the CSR (after checking the CSR's
//!   signature); its subject, names, key usages and CA flag are ours: CN = worker id,
//!   DNS `worker.<id>`, `clientAuth` only, not a CA. A CSR cannot ask for more.
//! - The listener certificate always names [`SERVER_NAME`], whatever address a worker dials.
//! - Certificates and the CA are identified by the SHA-256 of their DER, as lower-case hex
//!   ([`fingerprint_der`]); a join token is stored only as [`JoinToken::digest`].

mod authority;
mod tls;
mod token;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use ring::digest::{SHA256, digest};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

pub use authority::{Authority, CA_CERT_FILE, CA_KEY_FILE, Issued, key_and_csr};
pub use tls::{
    app_client_configs, apps_listener_server_config, joining_client_config, listener_server_config,
    worker_client_config,
};
pub use token::JoinToken;

/// The name every studiod worker-listener certificate carries and every worker checks,
/// whatever address it dials (the CA is private to one studiod home, so the name is unambiguous).
pub const SERVER_NAME: &str = "studiod";

/// What can go wrong issuing, loading or using the worker listener's certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A file or directory of the CA could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// `ca.crt` is present but `ca.key` is not: the CA cannot sign and must not be replaced
    /// silently (enrolled workers trust it).
    #[error("{} exists but its key {} is missing", cert.display(), key.display())]
    MissingCaKey { cert: PathBuf, key: PathBuf },
    /// The stored CA files do not form a usable CA.
    #[error("the CA in {} is unusable: {reason}", dir.display())]
    BadCa { dir: PathBuf, reason: String },
    /// The CSR is not a PKCS#10 request we can read (or asks for an extension we do not know).
    #[error("the CSR is malformed: {0}")]
    MalformedCsr(String),
    /// The CSR's self-signature does not match its content: it was altered, or the sender does
    /// not hold the key.
    #[error("the CSR's signature does not verify")]
    CsrSignature,
    /// A worker id must be usable as a DNS label (`worker.<id>`).
    #[error("the worker id {0:?} is not a DNS label (1 to 63 letters, digits or inner '-')")]
    InvalidWorkerId(String),
    /// The requested validity is empty or outside what a certificate can carry.
    #[error("the validity period is empty or out of range")]
    InvalidValidity,
    /// A PEM text held no certificate.
    #[error("no certificate found in the PEM text")]
    NoCertificate,
    /// A PEM text held no private key.
    #[error("no private key found in the PEM text")]
    NoPrivateKey,
    /// A PEM text could not be decoded.
    #[error("the {what} PEM is malformed: {detail}")]
    BadPem { what: &'static str, detail: String },
    /// A join token does not have the form `studio-join.<secret>.<fingerprint>`.
    #[error("the join token is malformed")]
    MalformedToken,
    /// A CA pin is not a SHA-256 fingerprint.
    #[error("the CA fingerprint pin is not 64 lower-case hex digits")]
    InvalidPin,
    /// Certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// A TLS configuration could not be built.
    #[error("TLS configuration failed: {0}")]
    Tls(#[from] rustls::Error),
    /// A certificate verifier could not be built.
    #[error("TLS verifier configuration failed: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// The operating system's random generator failed.
    #[error("the system random generator failed")]
    Random,
}

/// SHA-256 hex of a DER certificate (what studiod looks a worker up by).
pub fn fingerprint_der(der: &[u8]) -> String {
    sha256_hex(der)
}

/// The first certificate of a PEM text, as DER.
pub fn first_cert_der(pem: &str) -> Result<Vec<u8>, PkiError> {
    Ok(certs_from_pem(pem)?
        .into_iter()
        .next()
        .ok_or(PkiError::NoCertificate)?
        .to_vec())
}

/// How long before its certificate ends an enrolment is renewed rather than kept (`studio
/// worker join --unless-enrolled`, `studio app join --unless-enrolled`): 30 days.
pub const RENEW_WITHIN_MS: i64 = 30 * 24 * 60 * 60 * 1000;

/// Whether the first certificate of a PEM text is valid for longer than
/// [`RENEW_WITHIN_MS`] from now.
pub fn valid_beyond_renewal(pem: &str) -> Result<bool, PkiError> {
    let der = first_cert_der(pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| PkiError::BadPem {
        what: "certificate",
        detail: e.to_string(),
    })?;
    let not_after_ms = cert.validity().not_after.timestamp().saturating_mul(1000);
    Ok(not_after_ms - now_ms() > RENEW_WITHIN_MS)
}

/// Every certificate of a PEM text, in order; an error when there is none.
fn certs_from_pem(pem: &str) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PkiError::BadPem {
            what: "certificate",
            detail: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(PkiError::NoCertificate);
    }
    Ok(certs)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest(&SHA256, bytes).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0xf)]])
        .map(char::from)
        .collect()
}

/// Whether `s` has the shape of a [`fingerprint_der`] result.
fn is_fingerprint(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn random_bytes<const N: usize>() -> Result<[u8; N], PkiError> {
    let mut bytes = [0u8; N];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| PkiError::Random)?;
    Ok(bytes)
}

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
