//! Secrets: minting, digests, constant-time comparison, and the app key.
//!
//! Invariant: a secret's `Debug` never prints it; only SHA-256 digests are stored.

use std::fmt;

use ring::{digest, hmac, rand::SecureRandom, rand::SystemRandom};
use subtle::ConstantTimeEq;

/// A SHA-256 digest of a secret, the only form in which secrets are kept.
pub type Digest = [u8; 32];

/// `N` bytes from the operating system's CSPRNG.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    // The system RNG failing is unrecoverable: nothing secret can be minted without it.
    SystemRandom::new()
        .fill(&mut buf)
        .expect("the system random generator failed");
    buf
}

/// A URL-safe secret of `N` random bytes, with a readable prefix (`sta_`, `std_`, …).
pub fn mint<const N: usize>(prefix: &str) -> String {
    format!("{prefix}{}", base64url(&random_bytes::<N>()))
}

/// SHA-256 of a secret's UTF-8 bytes.
pub fn digest(secret: &str) -> Digest {
    let d = digest::digest(&digest::SHA256, secret.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// SHA-256 of the concatenation of `parts`, without making it.
pub fn digest_parts(parts: &[&[u8]]) -> Digest {
    let mut ctx = digest::Context::new(&digest::SHA256);
    for part in parts {
        ctx.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// Constant-time equality of two secrets (compared as digests, so lengths never leak).
pub fn secrets_equal(a: &str, b: &str) -> bool {
    digest(a).ct_eq(&digest(b)).into()
}

/// Constant-time equality of two digests.
pub fn digests_equal(a: &Digest, b: &Digest) -> bool {
    a.ct_eq(b).into()
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    push_hex(&mut s, bytes);
    s
}

/// Appends `bytes` to `out` in lowercase hex.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
}

/// Parses lowercase or uppercase hex.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes().chunks(2).map(hex_byte).collect()
}

/// Parses hex of exactly `N` bytes, without allocating (a MAC checked on every request).
pub fn unhex_array<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut bytes = [0u8; N];
    for (byte, pair) in bytes.iter_mut().zip(s.as_bytes().chunks(2)) {
        *byte = hex_byte(pair)?;
    }
    Some(bytes)
}

/// One byte from two hex digits, either case.
fn hex_byte(pair: &[u8]) -> Option<u8> {
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    Some(nibble(pair[0])? << 4 | nibble(pair[1])?)
}

/// Base64url without padding.
pub fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 0x3f) as usize] as char);
        }
    }
    out
}

/// The key a supervisor launch shares with both children: it authenticates studio-app
/// to the verifier and signs the origin the app forwards to the daemon.
#[derive(Clone)]
pub struct AppKey {
    bytes: [u8; 32],
    /// The HMAC key's padded states, made once: every forwarded request is signed.
    hmac: hmac::Key,
}

impl AppKey {
    pub fn generate() -> Self {
        Self::from_bytes(random_bytes())
    }

    fn from_bytes(bytes: [u8; 32]) -> Self {
        Self {
            hmac: hmac::Key::new(hmac::HMAC_SHA256, &bytes),
            bytes,
        }
    }

    /// Parses the 64-hex-digit form handed to the children.
    pub fn from_hex(s: &str) -> Option<Self> {
        let bytes = unhex(s.trim())?;
        Some(Self::from_bytes(bytes.try_into().ok()?))
    }

    pub fn to_hex(&self) -> String {
        hex(&self.bytes)
    }

    /// Constant-time check of a presented key (hex form).
    pub fn matches_hex(&self, presented: &str) -> bool {
        secrets_equal(&self.to_hex(), presented)
    }

    /// HMAC-SHA256 of `message` under this key.
    pub fn sign(&self, message: &[u8]) -> hmac::Tag {
        hmac::sign(&self.hmac, message)
    }

    /// Constant-time verification of an HMAC-SHA256 tag.
    pub fn verify(&self, message: &[u8], tag: &[u8]) -> bool {
        hmac::verify(&self.hmac, message, tag).is_ok()
    }

    /// [`AppKey::sign`] of the concatenation of `parts`, without making it.
    pub fn sign_parts(&self, parts: &[&[u8]]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.hmac);
        for part in parts {
            ctx.update(part);
        }
        ctx.sign()
    }

    /// [`AppKey::verify`] of the concatenation of `parts`, in constant time.
    pub fn verify_parts(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.sign_parts(parts).as_ref().ct_eq(tag).into()
    }
}

impl fmt::Debug for AppKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AppKey(<redacted>)")
    }
}

/// The SHA-256 of the file at `path` (hex), read in 64 KiB pieces.
pub fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(hex(ctx.finish().as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_known_vectors() {
        assert_eq!(base64url(b""), "");
        assert_eq!(base64url(b"f"), "Zg");
        assert_eq!(base64url(b"fo"), "Zm8");
        assert_eq!(base64url(b"foo"), "Zm9v");
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn minted_secrets_are_long_and_distinct() {
        let a = mint::<32>("sta_");
        let b = mint::<32>("sta_");
        assert_ne!(a, b);
        assert_eq!(a.len(), 4 + 43);
    }

    #[test]
    fn app_key_round_trips_and_redacts() {
        let k = AppKey::generate();
        let back = AppKey::from_hex(&k.to_hex()).expect("hex parses");
        assert!(back.matches_hex(&k.to_hex()));
        assert!(!back.matches_hex("00"));
        assert!(AppKey::from_hex("abc").is_none());
        assert_eq!(format!("{k:?}"), "AppKey(<redacted>)");
        let tag = k.sign(b"m");
        assert!(back.verify(b"m", tag.as_ref()));
        assert!(!back.verify(b"n", tag.as_ref()));
        assert_eq!(digest_parts(&[b"sta_", b"x"]), digest("sta_x"));
        let whole = k.sign(b"studio-app");
        let parts = k.sign_parts(&[b"studio", b"", b"-app"]);
        assert_eq!(parts.as_ref(), whole.as_ref());
        assert!(back.verify_parts(&[b"studio-", b"app"], whole.as_ref()));
        assert!(!back.verify_parts(&[b"studio-", b"app"], &whole.as_ref()[..31]));
        assert!(!back.verify_parts(&[b"studio-", b"ap"], whole.as_ref()));
    }

    #[test]
    fn equality_is_by_value() {
        assert!(secrets_equal("abc", "abc"));
        assert!(!secrets_equal("abc", "abd"));
        assert!(!secrets_equal("abc", "abcd"));
        assert_eq!(unhex(&hex(&[0, 255, 16])), Some(vec![0, 255, 16]));
        assert_eq!(unhex_array::<3>("00fF10"), Some([0, 255, 16]));
        for bad in ["00ff1", "00ff1000", "00fg10", ""] {
            assert_eq!(unhex_array::<3>(bad), None, "{bad}");
        }
    }
}
