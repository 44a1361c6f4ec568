//! Secrets at rest (docs/OPERATIONS.md, "Secrets"): a value is sealed with AES-256-GCM
//! under the home's key (`run/secrets.key`, never in the database), with a random
//! 96-bit nonce per value and the secret's name as associated data, so a row copied
//! under another name does not open. The value only ever leaves a [`Sealer`] as the
//! plaintext a job's environment receives.

use ring::{
    aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey},
    rand::{SecureRandom, SystemRandom},
};

/// What the associated data starts with: a format version, so a later scheme can be
/// told apart.
const AAD_PREFIX: &str = "studio-secret:v1:";
/// The most bytes a value may hold.
pub(crate) const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The fewest bytes a value may hold: a shorter one could not be redacted from output
/// without masking ordinary text.
pub(crate) const MIN_VALUE_BYTES: usize = 6;

/// A sealed value: its nonce and its ciphertext (with the tag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sealed {
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

/// Seals and opens values under one key.
pub(crate) struct Sealer {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SealError {
    #[error("the key is not 32 bytes")]
    Key,
    #[error("no random nonce could be drawn")]
    Random,
    #[error("the value does not open with this home's key (was run/secrets.key replaced?)")]
    Open,
}

impl Sealer {
    /// A sealer under the 32-byte `key`.
    pub(crate) fn new(key: &[u8]) -> Result<Self, SealError> {
        let key = UnboundKey::new(&AES_256_GCM, key).map_err(|_| SealError::Key)?;
        Ok(Self {
            key: LessSafeKey::new(key),
            rng: SystemRandom::new(),
        })
    }

    /// Seals `value` as the secret `name`, under a fresh random nonce.
    pub(crate) fn seal(&self, name: &str, value: &str) -> Result<Sealed, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| SealError::Random)?;
        let mut ciphertext = value.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                aad(name),
                &mut ciphertext,
            )
            .map_err(|_| SealError::Key)?;
        Ok(Sealed {
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    /// Opens the secret `name`'s sealed value.
    pub(crate) fn open(&self, name: &str, sealed: &Sealed) -> Result<String, SealError> {
        let nonce = Nonce::try_assume_unique_for_key(&sealed.nonce).map_err(|_| SealError::Open)?;
        let mut bytes = sealed.ciphertext.clone();
        let plain = self
            .key
            .open_in_place(nonce, aad(name), &mut bytes)
            .map_err(|_| SealError::Open)?;
        String::from_utf8(plain.to_vec()).map_err(|_| SealError::Open)
    }
}

fn aad(name: &str) -> Aad<Vec<u8>> {
    Aad::from(format!("{AAD_PREFIX}{name}").into_bytes())
}

/// Why `value` cannot be a secret's value, if it cannot.
pub(crate) fn value_problem(value: &str) -> Option<String> {
    if value.len() < MIN_VALUE_BYTES {
        Some(format!(
            "a value is at least {MIN_VALUE_BYTES} bytes (a shorter one could not be redacted from job output)"
        ))
    } else if value.len() > MAX_VALUE_BYTES {
        Some(format!("a value is at most {MAX_VALUE_BYTES} bytes"))
    } else if value.contains('\0') {
        Some("a value cannot hold a NUL byte (it goes into an environment variable)".into())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_opens_only_under_its_key_its_name_and_intact() {
        let sealer = Sealer::new(&[7u8; 32]).expect("key");
        let sealed = sealer.seal("github", "ghp_value-1").expect("seal");
        assert!(
            !sealed
                .ciphertext
                .windows(5)
                .any(|w| w == b"ghp_v" || w == b"value"),
            "no plaintext at rest"
        );
        assert_eq!(sealer.open("github", &sealed).expect("open"), "ghp_value-1");
        // The same value twice: two nonces, two ciphertexts.
        let again = sealer.seal("github", "ghp_value-1").expect("seal");
        assert_ne!(again.nonce, sealed.nonce);
        assert_ne!(again.ciphertext, sealed.ciphertext);

        assert!(matches!(
            sealer.open("gitlab", &sealed),
            Err(SealError::Open)
        ));
        let other = Sealer::new(&[8u8; 32]).expect("key");
        assert!(matches!(
            other.open("github", &sealed),
            Err(SealError::Open)
        ));
        let mut flipped = sealed.clone();
        flipped.ciphertext[0] ^= 1;
        assert!(matches!(
            sealer.open("github", &flipped),
            Err(SealError::Open)
        ));
        let short = Sealed {
            nonce: vec![0; 3],
            ciphertext: sealed.ciphertext,
        };
        assert!(matches!(
            sealer.open("github", &short),
            Err(SealError::Open)
        ));
        assert!(matches!(Sealer::new(&[0u8; 16]), Err(SealError::Key)));
    }

    #[test]
    fn names_and_values_are_checked() {
        for ok in ["github", "a", "GH_TOKEN.prod-2", &"x".repeat(64)] {
            assert!(studio_schedule::is_secret_name(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "a b", "a/b", "é", &"x".repeat(65)] {
            assert!(!studio_schedule::is_secret_name(bad), "{bad}");
        }
        assert!(value_problem("s3cret").is_none());
        assert!(value_problem("short").is_some());
        assert!(value_problem("with\0nul").is_some());
        assert!(value_problem(&"x".repeat(MAX_VALUE_BYTES + 1)).is_some());
    }
}
