//! How studio-app asserts, to studiod, the Origin a proxied request arrived with.
//!
//! The app signs `(timestamp, method, path and query, origin)` with the app key; the daemon
//! accepts the forwarded origin only with a valid, fresh signature. The key itself never
//! crosses the wire, and a captured signature is useless for another request or later.

use crate::secret::{AppKey, hex, unhex};

/// The Origin the browser sent to the app (empty when it sent none).
pub const ORIGIN_HEADER: &str = "x-studio-forwarded-origin";
/// `<unix ms>.<hex HMAC-SHA256>`.
pub const SIGNATURE_HEADER: &str = "x-studio-forwarded-sig";
/// How far a signature's timestamp may be from the daemon's clock.
pub const MAX_SKEW_MS: i64 = 30_000;

/// `studio-forward-v1\n<ts>\n<method>\n<path and query>\n<origin>`, the signed bytes.
fn message(ts_ms: i64, method: &str, path_and_query: &str, origin: &str) -> Vec<u8> {
    const VERSION: &[u8] = b"studio-forward-v1\n";
    let ts = ts_ms.to_string();
    let mut m = Vec::with_capacity(
        VERSION.len() + ts.len() + method.len() + path_and_query.len() + origin.len() + 3,
    );
    for (part, end) in [
        (VERSION, &b""[..]),
        (ts.as_bytes(), b"\n"),
        (method.as_bytes(), b"\n"),
        (path_and_query.as_bytes(), b"\n"),
        (origin.as_bytes(), b""),
    ] {
        m.extend_from_slice(part);
        m.extend_from_slice(end);
    }
    m
}

/// The value of [`SIGNATURE_HEADER`] for one request.
pub fn sign(key: &AppKey, ts_ms: i64, method: &str, path_and_query: &str, origin: &str) -> String {
    let tag = key.sign(&message(ts_ms, method, path_and_query, origin));
    let mut value = ts_ms.to_string();
    value.push('.');
    value.push_str(&hex(tag.as_ref()));
    value
}

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
    let (Ok(ts_ms), Some(tag)) = (ts.parse::<i64>(), unhex(tag)) else {
        return false;
    };
    (now_ms - ts_ms).abs() <= MAX_SKEW_MS
        && key.verify(&message(ts_ms, method, path_and_query, origin), &tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signed bytes are a wire format between two builds: pinned.
    #[test]
    fn the_signed_message_is_the_documented_one() {
        assert_eq!(
            message(-5, "GET", "/api/x?y=1", "http://o"),
            b"studio-forward-v1\n-5\nGET\n/api/x?y=1\nhttp://o"
        );
        assert_eq!(
            message(7, "PUT", "/", ""),
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
    }
}
