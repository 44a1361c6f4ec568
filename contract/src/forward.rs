//! How studio-app asserts, to studiod, the Origin a proxied request arrived with.
//!
//! The app signs `(timestamp, method, path and query, origin)` with the app key; the daemon
//! accepts the forwarded origin only with a valid, fresh signature. The key itself never
//! crosses the wire, and a captured signature is useless for another request or later.

use http::HeaderName;

use crate::secret::{AppKey, push_hex, unhex_array};

/// The Origin the browser sent to the app (empty when it sent none).
pub const ORIGIN_HEADER: &str = "x-studio-forwarded-origin";
/// `<unix ms>.<hex HMAC-SHA256>`.
pub const SIGNATURE_HEADER: &str = "x-studio-forwarded-sig";
/// [`ORIGIN_HEADER`] as a header name (inserting it costs no allocation).
pub const ORIGIN: HeaderName = HeaderName::from_static(ORIGIN_HEADER);
/// [`SIGNATURE_HEADER`] as a header name.
pub const SIGNATURE: HeaderName = HeaderName::from_static(SIGNATURE_HEADER);
/// How far a signature's timestamp may be from the daemon's clock.
pub const MAX_SKEW_MS: i64 = 30_000;

/// The signed bytes, `studio-forward-v1\n<ts>\n<method>\n<path and query>\n<origin>`, as
/// the parts the MAC reads in order (no copy of the request's target is made).
fn message<'a>(
    ts: &'a str,
    method: &'a str,
    path_and_query: &'a str,
    origin: &'a str,
) -> [&'a [u8]; 8] {
    [
        b"studio-forward-v1\n",
        ts.as_bytes(),
        b"\n",
        method.as_bytes(),
        b"\n",
        path_and_query.as_bytes(),
        b"\n",
        origin.as_bytes(),
    ]
}

/// The value of [`SIGNATURE_HEADER`] for one request, in one allocation of exactly its
/// length (a header value takes it without copying).
pub fn sign(key: &AppKey, ts_ms: i64, method: &str, path_and_query: &str, origin: &str) -> String {
    use std::fmt::Write as _;
    let digits = ts_ms
        .unsigned_abs()
        .checked_ilog10()
        .map_or(1, |d| d as usize + 1);
    let sign = usize::from(ts_ms < 0);
    let mut value = String::with_capacity(sign + digits + 1 + 2 * TAG_LEN);
    let _ = write!(value, "{ts_ms}");
    let tag = key.sign_parts(&message(&value, method, path_and_query, origin));
    value.push('.');
    push_hex(&mut value, tag.as_ref());
    value
}

/// HMAC-SHA256's tag length in bytes.
const TAG_LEN: usize = 32;

/// Whether `signature` asserts `origin` for this request at about `now_ms`.
pub fn verify(
    key: &AppKey,
    signature: &str,
    now_ms: i64,
    method: &str,
    path_and_query: &str,
    origin: &str,
) -> bool {
    let Some((ts, tag)) = signature.split_once('.') else {
        return false;
    };
    let (Ok(ts_ms), Some(tag)) = (ts.parse::<i64>(), unhex_array::<TAG_LEN>(tag)) else {
        return false;
    };
    now_ms.abs_diff(ts_ms) <= MAX_SKEW_MS.unsigned_abs()
        && key.verify_parts(&message(ts, method, path_and_query, origin), &tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signed bytes are a wire format between two builds: pinned.
    #[test]
    fn the_signed_message_is_the_documented_one() {
        assert_eq!(
            message("-5", "GET", "/api/x?y=1", "http://o").concat(),
            b"studio-forward-v1\n-5\nGET\n/api/x?y=1\nhttp://o"
        );
        assert_eq!(
            message("7", "PUT", "/", "").concat(),
            b"studio-forward-v1\n7\nPUT\n/\n"
        );
    }

    #[test]
    fn a_signature_binds_every_part() {
        let key = AppKey::generate();
        let sig = sign(&key, 1000, "POST", "/api/x?y=1", "http://127.0.0.1:8765");
        assert!(verify(
            &key,
            &sig,
            1500,
            "POST",
            "/api/x?y=1",
            "http://127.0.0.1:8765"
        ));
        assert!(!verify(
            &key,
            &sig,
            1500,
            "GET",
            "/api/x?y=1",
            "http://127.0.0.1:8765"
        ));
        assert!(!verify(
            &key,
            &sig,
            1500,
            "POST",
            "/api/x",
            "http://127.0.0.1:8765"
        ));
        assert!(!verify(
            &key,
            &sig,
            1500,
            "POST",
            "/api/x?y=1",
            "http://evil.example"
        ));
        assert!(!verify(
            &key,
            &sig,
            1000 + MAX_SKEW_MS + 1,
            "POST",
            "/api/x?y=1",
            "http://127.0.0.1:8765"
        ));
        assert!(!verify(
            &AppKey::generate(),
            &sig,
            1500,
            "POST",
            "/api/x?y=1",
            "http://127.0.0.1:8765"
        ));
        assert!(!verify(&key, "garbage", 1500, "POST", "/api/x?y=1", ""));
        // The clock check cannot overflow, whatever the timestamp claims.
        for ts in [i64::MIN, i64::MAX] {
            let sig = sign(&key, ts, "GET", "/", "");
            assert!(!verify(&key, &sig, 1500, "GET", "/", ""), "{ts}");
            assert!(verify(&key, &sig, ts, "GET", "/", ""), "{ts}");
        }
    }
}
