//! The CA: its two files, and the certificates it issues.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, CertificateSigningRequestParams,
    DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PublicKeyData, SanType, SerialNumber,
};
use rustls::pki_types::CertificateDer;
use time::OffsetDateTime;

use crate::{PkiError, SERVER_NAME, fingerprint_der, first_cert_der, hex, now_ms, random_bytes};

/// The authority's key and certificate, in the directory [`Authority::load_or_create`] keeps.
pub const CA_KEY_FILE: &str = "ca.key";
pub const CA_CERT_FILE: &str = "ca.crt";
const CA_COMMON_NAME: &str = "Studio worker CA";

const MINUTE_MS: i64 = 60 * 1000;
const DAY_MS: i64 = 24 * 60 * MINUTE_MS;
/// How far back a certificate's validity starts, so a peer whose clock lags a little accepts it.
const CLOCK_SKEW_MS: i64 = 5 * MINUTE_MS;
const CA_VALIDITY_MS: i64 = 3652 * DAY_MS;
const SERVER_VALIDITY_MS: i64 = 365 * DAY_MS;

/// The certificate authority of one studiod home: its self-signed certificate and its signing
/// key.
///
/// Made once by [`Authority::load_or_create`] and kept in `ca.key` / `ca.crt`; every worker
/// certificate and every listener certificate is signed by it, and workers trust nothing else.
pub struct Authority {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// A worker certificate, as [`Authority::sign_worker_csr`] issued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The certificate alone (not the chain), PEM.
    pub cert_pem: String,
    /// SHA-256 (lower-case hex) of the certificate's DER: what studiod recognises the worker by.
    pub fingerprint: String,
    /// The certificate's serial number, lower-case hex.
    pub serial: String,
    /// The end of the certificate's validity (unix ms, a whole second).
    pub not_after_ms: i64,
}

impl Authority {
    /// Loads `dir/ca.key` and `dir/ca.crt`, or creates them when `ca.crt` does not exist.
    ///
    /// The directory is made (or tightened to) 0700 and the key file is 0600. Each file is
    /// written to a temporary name, fsynced and renamed, the key first, then the directory is
    /// fsynced: a key without a certificate can only be the remnant of an interrupted creation
    /// and is replaced, whereas a certificate without its key is an error (workers may trust it).
    ///
    /// A new CA is valid for 10 years (from 5 minutes ago), has a random serial, CN
    /// "Studio worker CA", is a CA with path length 0 and may only sign certificates and CRLs.
    pub fn load_or_create(dir: &Path) -> Result<Self, PkiError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_error("create", dir))?;
        fs::set_permissions(dir, Permissions::from_mode(0o700))
            .map_err(io_error("set the permissions of", dir))?;
        let key_path = dir.join(CA_KEY_FILE);
        let cert_path = dir.join(CA_CERT_FILE);
        let exists = |path: &Path| path.try_exists().map_err(io_error("look for", path));
        match (exists(&cert_path)?, exists(&key_path)?) {
            (true, true) => Self::load(dir, &key_path, &cert_path),
            (true, false) => Err(PkiError::MissingCaKey {
                cert: cert_path,
                key: key_path,
            }),
            (false, _) => Self::create(dir),
        }
    }

    fn load(dir: &Path, key_path: &Path, cert_path: &Path) -> Result<Self, PkiError> {
        let bad = |reason: String| PkiError::BadCa {
            dir: dir.to_path_buf(),
            reason,
        };
        let key_pem = fs::read_to_string(key_path).map_err(io_error("read", key_path))?;
        let cert_pem = fs::read_to_string(cert_path).map_err(io_error("read", cert_path))?;
        let key = KeyPair::from_pem(&key_pem).map_err(|e| bad(format!("{CA_KEY_FILE}: {e}")))?;
        let cert_der = CertificateDer::from(
            first_cert_der(&cert_pem).map_err(|e| bad(format!("{CA_CERT_FILE}: {e}")))?,
        );
        let (_, cert) = x509_parser::parse_x509_certificate(&cert_der)
            .map_err(|e| bad(format!("{CA_CERT_FILE}: {e}")))?;
        if cert.public_key().raw != key.subject_public_key_info().as_slice() {
            return Err(bad(format!(
                "{CA_KEY_FILE} is not the key of {CA_CERT_FILE}"
            )));
        }
        if !cert.is_ca() {
            return Err(bad(format!("{CA_CERT_FILE} is not a CA certificate")));
        }
        let issuer = Issuer::from_ca_cert_der(&cert_der, key)
            .map_err(|e| bad(format!("{CA_CERT_FILE}: {e}")))?;
        Ok(Self {
            cert_pem,
            cert_der,
            issuer,
        })
    }

    fn create(dir: &Path) -> Result<Self, PkiError> {
        let key = KeyPair::generate()?;
        let now = now_ms();
        let mut params = CertificateParams::default();
        params.not_before = datetime(now - CLOCK_SKEW_MS)?;
        params.not_after = datetime(now + CA_VALIDITY_MS)?;
        params.serial_number = Some(random_serial()?.0);
        params.distinguished_name = common_name(CA_COMMON_NAME);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key)?;

        write_file(dir, CA_KEY_FILE, key.serialize_pem().as_bytes(), 0o600)?;
        write_file(dir, CA_CERT_FILE, cert.pem().as_bytes(), 0o644)?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error("fsync", dir))?;

        Ok(Self {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM: what an enrolled worker keeps as its only root.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// SHA-256 (lower-case hex) of the CA certificate's DER: what a join token pins.
    pub fn fingerprint(&self) -> String {
        fingerprint_der(&self.cert_der)
    }

    /// A fresh server certificate for the worker listener (SAN DNS = [`SERVER_NAME`], EKU
    /// serverAuth, valid 1 year): (chain PEM = leaf then CA, key PEM).
    ///
    /// Made at each studiod start, never written to disk.
    pub fn server_identity(&self) -> Result<(String, String), PkiError> {
        let (cert, key) = self.issue_server()?;
        Ok((chain_pem(&cert.pem(), &self.cert_pem), key.serialize_pem()))
    }

    /// The listener's certificate and its new key.
    pub(crate) fn issue_server(&self) -> Result<(Certificate, KeyPair), PkiError> {
        let key = KeyPair::generate()?;
        let now = now_ms();
        let (params, _) = leaf_params(
            SERVER_NAME,
            SERVER_NAME,
            ExtendedKeyUsagePurpose::ServerAuth,
            now - CLOCK_SKEW_MS,
            now + SERVER_VALIDITY_MS,
        )?;
        Ok((params.signed_by(&key, &self.issuer)?, key))
    }

    /// Signs a worker's CSR (PEM) for `valid_for` from now (backdated 5 minutes for clock skew).
    ///
    /// Only the CSR's public key is used, once its signature is checked: its names, extensions
    /// and CA flag are ignored. The certificate's subject CN is `worker_id`, its only name the
    /// DNS `worker.<worker_id>`, its only EKU clientAuth, and it is not a CA.
    pub fn sign_worker_csr(
        &self,
        csr_pem: &str,
        worker_id: &str,
        valid_for: Duration,
    ) -> Result<Issued, PkiError> {
        let (not_before, not_after) = validity_from_now(valid_for)?;
        self.sign_worker_csr_between(csr_pem, worker_id, not_before, not_after)
    }

    /// [`Authority::sign_worker_csr`] with explicit validity bounds (unix ms, rounded down to
    /// the second), e.g. to make an already expired certificate in a test.
    pub fn sign_worker_csr_between(
        &self,
        csr_pem: &str,
        worker_id: &str,
        not_before_ms: i64,
        not_after_ms: i64,
    ) -> Result<Issued, PkiError> {
        self.sign_client_csr(csr_pem, worker_id, "worker", not_before_ms, not_after_ms)
    }

    /// Signs a studio-app's CSR (PEM) for `valid_for` from now, as
    /// [`Authority::sign_worker_csr`] does a worker's: CN `app_id`, DNS `app.<app_id>`,
    /// clientAuth only, not a CA. What an app may do is decided by studiod's own record of
    /// the certificate, never by these names.
    pub fn sign_app_csr(
        &self,
        csr_pem: &str,
        app_id: &str,
        valid_for: Duration,
    ) -> Result<Issued, PkiError> {
        let (not_before, not_after) = validity_from_now(valid_for)?;
        self.sign_client_csr(csr_pem, app_id, "app", not_before, not_after)
    }

    /// A client certificate for `id` (a DNS label), named `<kind>.<id>`.
    fn sign_client_csr(
        &self,
        csr_pem: &str,
        id: &str,
        kind: &str,
        not_before_ms: i64,
        not_after_ms: i64,
    ) -> Result<Issued, PkiError> {
        check_worker_id(id)?;
        let csr = CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| match e {
            rcgen::Error::InvalidCertificationRequestSignature => PkiError::CsrSignature,
            e => PkiError::MalformedCsr(e.to_string()),
        })?;
        let (params, serial) = leaf_params(
            id,
            &format!("{kind}.{id}"),
            ExtendedKeyUsagePurpose::ClientAuth,
            not_before_ms,
            not_after_ms,
        )?;
        let cert = params.signed_by(&csr.public_key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            fingerprint: fingerprint_der(cert.der()),
            serial,
            not_after_ms: floor_to_second(not_after_ms),
        })
    }
}

impl fmt::Debug for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authority")
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

/// A worker's new key pair and its CSR: (key PEM, CSR PEM). The CSR's subject CN is `name`.
pub fn key_and_csr(name: &str) -> Result<(String, String), PkiError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = common_name(name);
    let csr = params.serialize_request(&key)?;
    Ok((key.serialize_pem(), csr.pem()?))
}

/// The parameters of a leaf (not a CA) certificate, with a random serial (returned as hex).
fn leaf_params(
    common: &str,
    dns_name: &str,
    usage: ExtendedKeyUsagePurpose,
    not_before_ms: i64,
    not_after_ms: i64,
) -> Result<(CertificateParams, String), PkiError> {
    if floor_to_second(not_after_ms) <= floor_to_second(not_before_ms) {
        return Err(PkiError::InvalidValidity);
    }
    let (serial, serial_hex) = random_serial()?;
    let mut params = CertificateParams::default();
    params.not_before = datetime(not_before_ms)?;
    params.not_after = datetime(not_after_ms)?;
    params.serial_number = Some(serial);
    params.distinguished_name = common_name(common);
    params.subject_alt_names = vec![SanType::DnsName(dns_name.try_into()?)];
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    Ok((params, serial_hex))
}

/// A random, positive 16-byte serial and its hex. The first byte is non-zero with its top bit
/// clear, so the DER integer is exactly these bytes and the hex is what the certificate shows.
fn random_serial() -> Result<(SerialNumber, String), PkiError> {
    let mut bytes = random_bytes::<16>()?;
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    Ok((SerialNumber::from_slice(&bytes), hex(&bytes)))
}

fn common_name(name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn
}

/// A worker id must be a DNS label, since it becomes the name `worker.<id>`.
fn check_worker_id(id: &str) -> Result<(), PkiError> {
    let label = (1..=63).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !id.starts_with('-')
        && !id.ends_with('-');
    if label {
        Ok(())
    } else {
        Err(PkiError::InvalidWorkerId(id.to_owned()))
    }
}

/// A leaf's validity (unix ms): from now, backdated for clock skew, for `valid_for`.
fn validity_from_now(valid_for: Duration) -> Result<(i64, i64), PkiError> {
    let now = now_ms();
    let not_after = i64::try_from(valid_for.as_millis())
        .ok()
        .and_then(|ms| now.checked_add(ms))
        .ok_or(PkiError::InvalidValidity)?;
    Ok((now - CLOCK_SKEW_MS, not_after))
}

fn floor_to_second(ms: i64) -> i64 {
    ms.div_euclid(1000) * 1000
}

fn datetime(ms: i64) -> Result<OffsetDateTime, PkiError> {
    OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000)).map_err(|_| PkiError::InvalidValidity)
}

/// The PEM of a chain: each certificate on its own lines, in order.
fn chain_pem(leaf: &str, ca: &str) -> String {
    let mut chain = leaf.to_owned();
    if !chain.ends_with('\n') {
        chain.push('\n');
    }
    chain.push_str(ca);
    chain
}

/// Writes `name` in `dir` through a temporary file (fsynced, then renamed), with `mode`.
fn write_file(dir: &Path, name: &str, contents: &[u8], mode: u32) -> Result<(), PkiError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_error("remove", &tmp)(e)),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io_error("create", &tmp))?;
    // The mode given at creation is narrowed by the umask; set it exactly.
    file.set_permissions(Permissions::from_mode(mode))
        .and_then(|()| file.write_all(contents))
        .and_then(|()| file.sync_all())
        .map_err(io_error("write", &tmp))?;
    fs::rename(&tmp, &path).map_err(io_error("rename into place", &path))
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PkiError {
    let path: PathBuf = path.to_path_buf();
    move |source| PkiError::Io {
        action,
        path,
        source,
    }
}
