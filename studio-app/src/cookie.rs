//! The admission cookie (`studio_admission`): reading it from requests and the exact
//! `Set-Cookie` forms that set and clear it.
//!
//! Invariants: the cookie is always `HttpOnly; SameSite=Strict; Path=/` (plus `Secure`
//! under HTTPS), so page script never sees the admission token; its `Max-Age` is the
//! token's remaining lifetime rounded down, so the browser keeps it across restarts but
//! never past the token.

use http::{HeaderMap, HeaderValue, header};
use studio_contract::ADMISSION_COOKIE;

/// The admission token from the request's `Cookie` header(s), if one is present.
pub(crate) fn admission_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == ADMISSION_COOKIE)
        .map(|(_, value)| value.trim().trim_matches('"').to_owned())
        .filter(|value| !value.is_empty())
}

/// Seconds from `now_ms` until the token expires at `expires_at_ms`, rounded down (0 once
/// past); `None` when the daemon named no expiry (one that predates it), which leaves a
/// session cookie: that never outlives the token either.
pub(crate) fn max_age(expires_at_ms: i64, now_ms: i64) -> Option<u64> {
    (expires_at_ms > 0)
        .then(|| u64::try_from((expires_at_ms - now_ms).div_euclid(1000)).unwrap_or(0))
}

/// `Set-Cookie` carrying the admission token for `max_age` seconds (see [`max_age`]);
/// `None` if the token is not a valid cookie value.
pub(crate) fn set_admission(
    token: &str,
    max_age: Option<u64>,
    secure: bool,
) -> Option<HeaderValue> {
    let valid = !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\'));
    if !valid {
        return None;
    }
    let lifetime = max_age
        .map(|s| format!("; Max-Age={s}"))
        .unwrap_or_default();
    HeaderValue::from_str(&format!(
        "{ADMISSION_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/{lifetime}{}",
        secure_suffix(secure)
    ))
    .ok()
}

/// `Set-Cookie` that makes the browser forget the admission token.
pub(crate) fn clear_admission(secure: bool) -> HeaderValue {
    let value = format!(
        "{ADMISSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
        secure_suffix(secure)
    );
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static(
        "studio_admission=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0",
    ))
}

fn secure_suffix(secure: bool) -> &'static str {
    if secure { "; Secure" } else { "" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(cookies: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for c in cookies {
            h.append(header::COOKIE, HeaderValue::from_str(c).expect("valid"));
        }
        h
    }

    #[test]
    fn finds_the_admission_cookie_among_others() {
        assert_eq!(
            admission_token(&headers(&["a=1; studio_admission=sta_abc; b=2"])).as_deref(),
            Some("sta_abc")
        );
        assert_eq!(
            admission_token(&headers(&["a=1", "studio_admission=sta_x"])).as_deref(),
            Some("sta_x")
        );
        assert_eq!(admission_token(&headers(&["studio_admission="])), None);
        assert_eq!(admission_token(&headers(&["xstudio_admission=sta"])), None);
        assert_eq!(admission_token(&headers(&[])), None);
    }

    #[test]
    fn set_and_clear_forms_are_exact() {
        assert_eq!(
            set_admission("sta_abc-_1", Some(2_592_000), false).expect("valid"),
            "studio_admission=sta_abc-_1; HttpOnly; SameSite=Strict; Path=/; Max-Age=2592000"
        );
        assert_eq!(
            set_admission("sta_abc", Some(59), true).expect("valid"),
            "studio_admission=sta_abc; HttpOnly; SameSite=Strict; Path=/; Max-Age=59; Secure"
        );
        assert_eq!(
            set_admission("sta_abc", None, false).expect("valid"),
            "studio_admission=sta_abc; HttpOnly; SameSite=Strict; Path=/"
        );
        assert!(set_admission("a;b", Some(1), false).is_none());
        assert!(set_admission("", Some(1), false).is_none());
        assert_eq!(
            clear_admission(false),
            "studio_admission=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
        );
        assert_eq!(
            clear_admission(true),
            "studio_admission=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0; Secure"
        );
    }

    #[test]
    fn the_cookie_never_outlives_the_token() {
        let ttl = studio_contract::ADMISSION_TTL_MS;
        assert_eq!(max_age(1_000 + ttl, 1_000), Some(2_592_000));
        // Rounded down: a part second left over would outlive the token.
        assert_eq!(max_age(10_999, 1_000), Some(9));
        assert_eq!(max_age(1_000, 1_000), Some(0));
        assert_eq!(max_age(1_000, 5_000), Some(0));
        assert_eq!(max_age(0, 5_000), None);
    }
}
