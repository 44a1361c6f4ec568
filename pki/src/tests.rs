//! Real TLS handshakes, in memory, between the configurations this crate builds.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateSigningRequestDer, ServerName};
use rustls::{CertificateError, ClientConfig, ClientConnection, ServerConfig, ServerConnection};
use x509_parser::certificate::X509Certificate;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

use crate::*;

/// A directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("studio-pki-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        Self(path)
    }

    fn ca(&self) -> PathBuf {
        self.0.join("ca")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn authority(tag: &str) -> (TempDir, Authority) {
    let dir = TempDir::new(tag);
    let ca = Authority::load_or_create(&dir.ca()).expect("create the CA");
    (dir, ca)
}

fn listener(ca: &Authority) -> Arc<ServerConfig> {
    Arc::new(listener_server_config(ca).expect("listener config"))
}

/// An enrolled worker of `ca`: (client configuration trusting `trusted`, issued certificate).
fn enrolled(ca: &Authority, trusted: &Authority, id: &str) -> (ClientConfig, Issued) {
    let (key, csr) = key_and_csr(id).expect("key and CSR");
    let issued = ca
        .sign_worker_csr(&csr, id, Duration::from_secs(3600))
        .expect("sign");
    let config =
        worker_client_config(trusted.cert_pem(), &issued.cert_pem, &key).expect("worker config");
    (config, issued)
}

/// Runs a handshake over in-memory buffers; the server side on success, else the first error
/// either side raised.
fn handshake(
    client: ClientConfig,
    server: Arc<ServerConfig>,
) -> Result<ServerConnection, rustls::Error> {
    let name = ServerName::try_from(SERVER_NAME).expect("server name");
    let mut client = ClientConnection::new(Arc::new(client), name)?;
    let mut server = ServerConnection::new(server)?;
    for _ in 0..16 {
        if !client.is_handshaking() && !server.is_handshaking() {
            assert_eq!(client.alpn_protocol(), Some(&b"h2"[..]));
            return Ok(server);
        }
        let mut wire = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut wire).expect("client writes");
        }
        let mut slice = &wire[..];
        while !slice.is_empty() {
            server.read_tls(&mut slice).expect("server reads");
            server.process_new_packets()?;
        }
        let mut wire = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut wire).expect("server writes");
        }
        let mut slice = &wire[..];
        while !slice.is_empty() {
            client.read_tls(&mut slice).expect("client reads");
            client.process_new_packets()?;
        }
    }
    panic!("the handshake did not finish");
}

fn parse_cert(pem: &str) -> X509Certificate<'static> {
    let der = first_cert_der(pem).expect("a certificate");
    let (_, cert) = X509Certificate::from_der(der.leak()).expect("parse the certificate");
    cert
}

fn common_name(cert: &X509Certificate<'_>) -> String {
    let cn = cert.subject().iter_common_name().next().expect("a CN");
    cn.as_str().expect("a text CN").to_owned()
}

fn dns_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let san = cert
        .subject_alternative_name()
        .expect("SAN")
        .expect("a SAN");
    san.value
        .general_names
        .iter()
        .map(|name| match name {
            GeneralName::DNSName(dns) => (*dns).to_owned(),
            other => panic!("unexpected name {other:?}"),
        })
        .collect()
}

fn csr_der(csr_pem: &str) -> Vec<u8> {
    CertificateSigningRequestDer::from_pem_slice(csr_pem.as_bytes())
        .expect("CSR PEM")
        .to_vec()
}

fn csr_pem(der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
        .collect();
    format!(
        "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
        lines.join("\n")
    )
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn an_enrolled_worker_is_accepted_and_seen_by_its_certificate() {
    let (_dir, ca) = authority("enrolled");
    let (client, issued) = enrolled(&ca, &ca, "w-1");
    let server = handshake(client, listener(&ca)).expect("handshake");
    let peer = server.peer_certificates().expect("a client certificate");
    assert_eq!(fingerprint_der(&peer[0]), issued.fingerprint);
    assert_eq!(server.alpn_protocol(), Some(&b"h2"[..]));
}

#[test]
fn a_certificate_from_another_authority_is_refused() {
    let (_a, ca) = authority("ours");
    let (_b, other) = authority("theirs");
    let (client, _) = enrolled(&other, &ca, "w-1");
    let err = handshake(client, listener(&ca)).expect_err("refused");
    // Both CAs are named "Studio worker CA": the issuer name matches, its signature does not.
    assert!(
        matches!(
            err,
            rustls::Error::InvalidCertificate(
                CertificateError::BadSignature | CertificateError::UnknownIssuer
            )
        ),
        "{err:?}"
    );
}

#[test]
fn an_expired_certificate_is_refused() {
    let (_dir, ca) = authority("expired");
    let (key, csr) = key_and_csr("w-1").expect("key and CSR");
    let day = 24 * 3600 * 1000;
    let now = now_ms();
    let issued = ca
        .sign_worker_csr_between(&csr, "w-1", now - 2 * day, now - day)
        .expect("sign");
    let client = worker_client_config(ca.cert_pem(), &issued.cert_pem, &key).expect("config");
    let err = handshake(client, listener(&ca)).expect_err("refused");
    assert!(
        matches!(
            err,
            rustls::Error::InvalidCertificate(
                CertificateError::Expired | CertificateError::ExpiredContext { .. }
            )
        ),
        "{err:?}"
    );
}

#[test]
fn a_joining_worker_without_a_certificate_is_accepted_with_the_right_pin() {
    let (_dir, ca) = authority("join");
    let client = joining_client_config(&ca.fingerprint()).expect("config");
    let server = handshake(client, listener(&ca)).expect("handshake");
    assert!(server.peer_certificates().is_none());
    // A pin given in upper case is the same pin.
    let client = joining_client_config(&ca.fingerprint().to_uppercase()).expect("config");
    handshake(client, listener(&ca)).expect("handshake");
}

#[test]
fn a_joining_worker_refuses_a_server_of_another_authority() {
    let (_a, ca) = authority("pinned");
    let (_b, other) = authority("impostor");
    let client = joining_client_config(&ca.fingerprint()).expect("config");
    let err = handshake(client, listener(&other)).expect_err("refused");
    assert_eq!(
        err,
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
    );
    assert!(matches!(
        joining_client_config("not-a-fingerprint"),
        Err(PkiError::InvalidPin)
    ));
}

#[test]
fn a_hostile_csr_still_yields_a_client_only_certificate_named_by_its_worker_id() {
    let (_dir, ca) = authority("hostile");
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec![SERVER_NAME.to_owned(), "*.example".to_owned()])
        .expect("params");
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, SERVER_NAME);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::Any,
    ];
    let csr = params
        .serialize_request(&key)
        .expect("CSR")
        .pem()
        .expect("PEM");

    // The request really asks to be a CA.
    let der = csr_der(&csr);
    let (_, request) = X509CertificationRequest::from_der(&der).expect("parse the CSR");
    let asks_ca = request
        .requested_extensions()
        .expect("extensions")
        .any(|e| matches!(e, ParsedExtension::BasicConstraints(bc) if bc.ca));
    assert!(asks_ca);

    let issued = ca
        .sign_worker_csr(&csr, "w-7", Duration::from_secs(3600))
        .expect("sign");
    let cert = parse_cert(&issued.cert_pem);
    assert_eq!(common_name(&cert), "w-7");
    assert_eq!(dns_names(&cert), ["worker.w-7"]);
    assert!(!cert.is_ca());
    let eku = cert
        .extended_key_usage()
        .expect("EKU")
        .expect("an EKU")
        .value;
    assert!(eku.client_auth && !eku.server_auth && !eku.any && eku.other.is_empty());
    let usage = cert.key_usage().expect("KU").expect("a KU").value;
    assert!(usage.digital_signature() && !usage.key_cert_sign() && !usage.crl_sign());
    assert_eq!(
        cert.public_key().raw,
        request.certification_request_info.subject_pki.raw
    );
    assert_eq!(
        cert.tbs_certificate.raw_serial(),
        (0..issued.serial.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&issued.serial[i..i + 2], 16).expect("hex"))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        cert.validity().not_after.timestamp() * 1000,
        issued.not_after_ms
    );
}

#[test]
fn a_tampered_csr_is_refused() {
    let (_dir, ca) = authority("tampered");
    let (_, csr) = key_and_csr("worker-a").expect("key and CSR");
    let mut der = csr_der(&csr);
    let at = der
        .windows(8)
        .position(|w| w == b"worker-a")
        .expect("the subject");
    der[at + 7] = b'b';
    let err = ca
        .sign_worker_csr(&csr_pem(&der), "w-1", Duration::from_secs(60))
        .expect_err("refused");
    assert!(matches!(err, PkiError::CsrSignature), "{err:?}");
    assert_eq!(err.to_string(), "the CSR's signature does not verify");

    let err = ca
        .sign_worker_csr("not a CSR", "w-1", Duration::from_secs(60))
        .expect_err("refused");
    assert!(matches!(err, PkiError::MalformedCsr(_)), "{err:?}");
}

#[test]
fn a_worker_id_must_be_a_dns_label() {
    let (_dir, ca) = authority("ids");
    let (_, csr) = key_and_csr("w").expect("key and CSR");
    for id in ["", "-w", "w-", "w.x", "w x", "ü", &"w".repeat(64)] {
        let err = ca
            .sign_worker_csr(&csr, id, Duration::from_secs(60))
            .expect_err(id);
        assert!(
            matches!(err, PkiError::InvalidWorkerId(_)),
            "{id:?}: {err:?}"
        );
    }
    let now = now_ms();
    let err = ca
        .sign_worker_csr_between(&csr, "w", now, now)
        .expect_err("empty validity");
    assert!(matches!(err, PkiError::InvalidValidity));
}

#[test]
fn the_ca_is_made_once_and_loaded_after() {
    let dir = TempDir::new("reload");
    let first = Authority::load_or_create(&dir.ca()).expect("create");
    let again = Authority::load_or_create(&dir.ca()).expect("load");
    assert_eq!(first.fingerprint(), again.fingerprint());
    assert_eq!(first.cert_pem(), again.cert_pem());
    assert_eq!(mode(&dir.ca().join("ca.key")), 0o600);
    assert_eq!(mode(&dir.ca()), 0o700);

    let cert = parse_cert(first.cert_pem());
    assert_eq!(common_name(&cert), "Studio worker CA");
    let bc = cert.basic_constraints().expect("BC").expect("a BC").value;
    assert!(bc.ca && bc.path_len_constraint == Some(0));
    let usage = cert.key_usage().expect("KU").expect("a KU").value;
    assert!(usage.key_cert_sign() && usage.crl_sign() && !usage.digital_signature());

    // The reloaded CA issues certificates the first one's listener accepts, and the reverse.
    let (client, _) = enrolled(&again, &first, "w-1");
    handshake(client, listener(&first)).expect("handshake");
    let (client, _) = enrolled(&first, &again, "w-2");
    handshake(client, listener(&again)).expect("handshake");
}

#[test]
fn a_ca_certificate_without_its_key_is_an_error_and_a_lone_key_is_replaced() {
    let dir = TempDir::new("partial");
    let first = Authority::load_or_create(&dir.ca()).expect("create");
    std::fs::remove_file(dir.ca().join("ca.crt")).expect("remove the certificate");
    let second = Authority::load_or_create(&dir.ca()).expect("recreate");
    assert_ne!(first.fingerprint(), second.fingerprint());

    std::fs::remove_file(dir.ca().join("ca.key")).expect("remove the key");
    let err = Authority::load_or_create(&dir.ca()).expect_err("refused");
    assert!(matches!(err, PkiError::MissingCaKey { .. }), "{err:?}");
}

#[test]
fn a_ca_key_that_is_not_the_certificates_is_refused() {
    let dir = TempDir::new("mismatch");
    let other = TempDir::new("mismatch-other");
    Authority::load_or_create(&dir.ca()).expect("create");
    Authority::load_or_create(&other.ca()).expect("create");
    std::fs::copy(other.ca().join("ca.key"), dir.ca().join("ca.key")).expect("copy");
    let err = Authority::load_or_create(&dir.ca()).expect_err("refused");
    assert!(matches!(err, PkiError::BadCa { .. }), "{err:?}");
}

#[test]
fn the_server_identity_is_a_chain_for_the_fixed_name() {
    let (_dir, ca) = authority("server");
    let (chain, key) = ca.server_identity().expect("identity");
    let certs = certs_from_pem(&chain).expect("certificates");
    assert_eq!(certs.len(), 2);
    assert_eq!(certs[1].as_ref(), ca.cert_der());
    assert!(key.contains("PRIVATE KEY"));
    let leaf = parse_cert(&chain);
    assert_eq!(dns_names(&leaf), [SERVER_NAME]);
    let eku = leaf
        .extended_key_usage()
        .expect("EKU")
        .expect("an EKU")
        .value;
    assert!(eku.server_auth && !eku.client_auth);
    assert!(!leaf.is_ca());
}

#[test]
fn a_join_token_round_trips_and_malformed_text_is_refused() {
    let (_dir, ca) = authority("token");
    let token = JoinToken::generate(&ca.fingerprint()).expect("token");
    let text = token.to_string();
    assert!(text.starts_with("studio-join."));
    assert_eq!(token.secret.len(), 43);
    assert_eq!(JoinToken::parse(&text).expect("parse"), token);
    assert_eq!(
        JoinToken::parse(&format!(" {text}\n")).expect("parse"),
        token
    );
    assert_eq!(token.digest(), sha256_hex(token.secret.as_bytes()));
    assert_ne!(
        token.digest(),
        JoinToken::generate(&ca.fingerprint())
            .expect("token")
            .digest()
    );
    assert!(!format!("{token:?}").contains(&token.secret));

    let fp = ca.fingerprint();
    let secret = &token.secret;
    let malformed = [
        String::new(),
        format!("studio-joint.{secret}.{fp}"),
        format!("studio-join.{secret}"),
        format!("studio-join.{secret}.{fp}.x"),
        format!("studio-join.{secret}=.{fp}"),
        format!("studio-join.{}.{fp}", &secret[1..]),
        format!("studio-join.{secret}A.{fp}"),
        format!("studio-join.{secret}.{}", fp.to_uppercase()),
        format!("studio-join.{secret}.{}", &fp[1..]),
        format!("studio-join.{}.{fp}", secret.replace(|_| true, "+")),
    ];
    for text in malformed {
        assert!(
            matches!(JoinToken::parse(&text), Err(PkiError::MalformedToken)),
            "{text:?}"
        );
    }
    assert_eq!(
        PkiError::MalformedToken.to_string(),
        "the join token is malformed"
    );
}

#[test]
fn an_authority_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Authority>();
}
