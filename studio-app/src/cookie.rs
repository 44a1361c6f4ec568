//! The admission cookie (`studio_admission`): reading it from requests and the exact
//! `Set-Cookie` forms that set and clear it.
//!
//! Invariant: the cookie is always `HttpOnly; SameSite=Strict; Path=/` (plus `Secure`
//! under HTTPS), so page script never sees the admission token.

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

/// `Set-Cookie` carrying the admission token; `None` if the token is not a valid cookie value.
pub(crate) fn set_admission(token: &str, secure: bool) -> Option<HeaderValue> {
    let valid = !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\'));
    if !valid {
        return None;
    }
    HeaderValue::from_str(&format!(
        "{ADMISSION_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/{}",
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
            set_admission("sta_abc-_1", false).expect("valid"),
            "studio_admission=sta_abc-_1; HttpOnly; SameSite=Strict; Path=/"
        );
        assert_eq!(
            set_admission("sta_abc", true).expect("valid"),
            "studio_admission=sta_abc; HttpOnly; SameSite=Strict; Path=/; Secure"
        );
        assert!(set_admission("a;b", false).is_none());
        assert!(set_admission("", false).is_none());
        assert_eq!(
            clear_admission(false),
            "studio_admission=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
        );
        assert_eq!(
            clear_admission(true),
            "studio_admission=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0; Secure"
        );
    }
}
