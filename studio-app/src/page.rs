//! The pairing script and stylesheet at their historic unhashed URLs (`/app.js`,
//! `/app.css`), served with `no-store`; the pages use the hashed copies in `pages::assets`.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, header};

const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");

/// Only same-origin script, style and fetches; no inline code, no framing.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    harden(h, CSP);
    response
}

/// The headers every page carries: never cached (a page reflects live pairing state, a
/// cached copy would show a stale one), its content security policy, no sniffing, no
/// referrer, no framing.
pub(crate) fn harden(h: &mut http::HeaderMap, csp: &'static str) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_self_contained() {
        assert!(SCRIPT.contains("history.replaceState"));
        assert!(SCRIPT.contains("sessionStorage"));
        assert!(!SCRIPT.contains("localStorage"));
        assert!(STYLE.contains("prefers-color-scheme"));
    }
}
