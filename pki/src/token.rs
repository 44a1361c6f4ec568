//! One-time join tokens.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::{PkiError, is_fingerprint, random_bytes, sha256_hex};

const PREFIX: &str = "studio-join";
const SECRET_BYTES: usize = 32;

/// A one-time join token: `studio-join.<secret>.<CA fingerprint>`.
///
/// The secret is 32 random bytes, base64url without padding; the fingerprint is the CA's
/// ([`crate::Authority::fingerprint`]), which the joining worker pins before trusting the
/// listener. studiod stores only [`JoinToken::digest`]. `Debug` never shows the secret; the
/// token text is its `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// The secret, base64url without padding (43 characters).
    pub secret: String,
    /// SHA-256 (lower-case hex) of the CA certificate's DER.
    pub ca_fingerprint: String,
}

impl JoinToken {
    /// A new token with a fresh secret, for the CA of fingerprint `ca_fingerprint`.
    ///
    /// Fails only if the system random generator does.
    pub fn generate(ca_fingerprint: &str) -> Result<Self, PkiError> {
        Ok(Self {
            secret: URL_SAFE_NO_PAD.encode(random_bytes::<SECRET_BYTES>()?),
            ca_fingerprint: ca_fingerprint.to_owned(),
        })
    }

    /// Reads a token's text (surrounding whitespace ignored): the prefix, a secret that decodes
    /// (canonically) to 32 bytes and a lower-case SHA-256 fingerprint, separated by dots.
    pub fn parse(s: &str) -> Result<Self, PkiError> {
        let mut parts = s.trim().split('.');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(PREFIX), Some(secret), Some(fingerprint), None)
                if is_secret(secret) && is_fingerprint(fingerprint) =>
            {
                Ok(Self {
                    secret: secret.to_owned(),
                    ca_fingerprint: fingerprint.to_owned(),
                })
            }
            _ => Err(PkiError::MalformedToken),
        }
    }

    /// SHA-256 (lower-case hex) of the secret's text: the only form studiod stores.
    pub fn digest(&self) -> String {
        sha256_hex(self.secret.as_bytes())
    }
}

fn is_secret(text: &str) -> bool {
    URL_SAFE_NO_PAD
        .decode(text)
        .is_ok_and(|bytes| bytes.len() == SECRET_BYTES)
}

impl fmt::Display for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}.{}.{}", self.secret, self.ca_fingerprint)
    }
}

impl fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinToken")
            .field("secret", &"<redacted>")
            .field("ca_fingerprint", &self.ca_fingerprint)
            .finish()
    }
}

impl FromStr for JoinToken {
    type Err = PkiError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}
