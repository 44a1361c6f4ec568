//! The front door every browser request passes, outermost first: Host → CORS → JSON
//! Content-Type → admission. Each rule is an axum middleware here, with its decision in a
//! plain function the tests exercise directly.
//!
//! Invariant: a request reaches a route only if its Host is ours, its Origin (when present
//! on `/api`) is allowed, and — unless exempt — the verifier admitted its bearer.

use std::{fmt, net::SocketAddr};

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use studio_api::route::Access;
use studio_contract::{
    error::{ApiError, Code},
    host::{HostPolicy, parse_authority},
    origin::{AllowedOrigins, loopback_origins},
};

use crate::{
    config::Config,
    cookie,
    http::AppState,
    verifier::{Principal, Verdict},
};

/// The request headers a cross-origin caller may send (`DECISION_HEADER` among them).
const ALLOW_HEADERS: &str = "authorization, content-type, x-studio-decision-token";

/// Who may address this listener (Host) and call it cross-origin (Origin).
#[derive(Debug, Clone)]
pub(crate) struct FrontDoor {
    hosts: HostPolicy,
    origins: AllowedOrigins,
}

impl FrontDoor {
    /// `bound` is the listener's actual address (the configured port may be 0).
    pub(crate) fn new(config: &Config, bound: SocketAddr) -> Self {
        let scheme = config.scheme();
        let public = config
            .public_origin
            .as_deref()
            .and_then(|o| o.split_once("://"))
            .and_then(|(scheme, rest)| Some((scheme, parse_authority(rest)?)));
        // A Host without a port means the port browsers use by default for our origin.
        let public_default = |s: &str| if s == "https" { 443 } else { 80 };
        let default_port = public
            .as_ref()
            .map_or(public_default(scheme), |(s, _)| public_default(s));
        let mut hosts = HostPolicy::new(bound.ip(), bound.port(), default_port);
        if let Some((s, auth)) = &public {
            hosts = hosts.allow(
                Some(auth.host.clone()),
                Some(auth.port.unwrap_or(public_default(s))),
            );
        }
        let mut origins = loopback_origins(scheme, bound.port());
        if !bound.ip().is_unspecified() && !bound.ip().is_loopback() {
            origins.push(format!("{scheme}://{bound}"));
        }
        origins.extend(config.public_origin.iter().cloned());
        origins.extend(config.allowed_origins.iter().cloned());
        Self {
            hosts,
            origins: AllowedOrigins::new(origins),
        }
    }

    pub(crate) fn origin_allowed(&self, origin: &str) -> bool {
        self.origins.allows(origin)
    }
}

/// `/api` itself or anything under `/api/`.
pub(crate) fn is_api(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/")
}

/// Methods that may change state.
pub(crate) fn is_unsafe(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Media type `application/json`, parameters allowed, case-insensitive.
pub(crate) fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// Requests that pass without a credential: what the app's inventory marks open or paired
/// by code (health, the session probe, pairing itself), and page/asset GETs outside `/api`.
pub(crate) fn admission_exempt(method: &Method, path: &str) -> bool {
    let read = matches!(*method, Method::GET | Method::HEAD);
    (read && !is_api(path))
        || studio_api::app::APP_ROUTES.iter().any(|r| {
            r.method.answers(method)
                && r.matches(path)
                && matches!(r.access, Access::Open | Access::PairingCode)
        })
}

/// The Origin header: `Ok(None)` when absent, `Err` when repeated or not text (never allowed).
pub(crate) fn origin(headers: &HeaderMap) -> Result<Option<&str>, ()> {
    let mut all = headers.get_all(header::ORIGIN).iter();
    match (all.next(), all.next()) {
        (None, _) => Ok(None),
        (Some(v), None) => v.to_str().map(Some).map_err(|_| ()),
        (Some(_), Some(_)) => Err(()),
    }
}

/// Where a bearer came from: an explicit header, or the ambient cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Header,
    Cookie,
}

/// The request's bearer: `Authorization: Bearer` wins over the cookie; a malformed
/// `Authorization` is refused rather than ignored.
pub(crate) fn bearer(headers: &HeaderMap) -> Result<Option<(String, Source)>, ApiError> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError::new(Code::Unauthorized, "malformed authorization header"))?;
        return Ok(Some((token.to_owned(), Source::Header)));
    }
    Ok(cookie::admission_token(headers).map(|t| (t, Source::Cookie)))
}

/// The admitted caller of this request, for the routes behind the admission layer.
#[derive(Clone)]
pub(crate) struct Admitted {
    /// Held only for the request in flight (the proxy forwards it).
    pub(crate) bearer: String,
    pub(crate) principal: Principal,
}

impl fmt::Debug for Admitted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admitted")
            .field("principal", &self.principal.id)
            .finish_non_exhaustive()
    }
}

/// Host validation: the DNS-rebinding defence, before anything else looks at the request.
pub(crate) async fn host(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if !state.door.hosts.accepts_request(req.headers(), req.uri()) {
        return ApiError::new(Code::InvalidHost, "host not allowed").into_response();
    }
    next.run(req).await
}

/// CORS for `/api`: a present Origin must be allowed; allowed preflights are answered here.
pub(crate) async fn cors(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if !is_api(req.uri().path()) {
        return next.run(req).await;
    }
    let origin = match origin(req.headers()) {
        Ok(None) => return next.run(req).await,
        Ok(Some(o)) if state.door.origin_allowed(o) => o.to_owned(),
        _ => return ApiError::new(Code::OriginNotAllowed, "origin not allowed").into_response(),
    };
    let Ok(allow_origin) = HeaderValue::from_str(&origin) else {
        return ApiError::new(Code::OriginNotAllowed, "origin not allowed").into_response();
    };
    let mut response = if req.method() == Method::OPTIONS {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        r
    } else {
        next.run(req).await
    };
    let h = response.headers_mut();
    // Insert, not append: a proxied daemon response may carry its own CORS headers.
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    if !h.get_all(header::VARY).iter().any(|v| v == "Origin") {
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// Every unsafe `/api` method carries JSON, bodyless or not (no simple-request CSRF).
pub(crate) async fn json(req: Request, next: Next) -> Response {
    if is_api(req.uri().path())
        && is_unsafe(req.method())
        && !is_json(req.headers().get(header::CONTENT_TYPE))
    {
        return ApiError::new(
            Code::UnsupportedMediaType,
            "content-type must be application/json",
        )
        .into_response();
    }
    next.run(req).await
}

/// Admission through the verifier; the admitted caller rides on in the request extensions.
pub(crate) async fn admission(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    if admission_exempt(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    match admit(&state, req.method(), req.uri().path(), req.headers()).await {
        Ok(admitted) => {
            req.extensions_mut().insert(admitted);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

async fn admit(
    state: &AppState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<Admitted, ApiError> {
    let not_allowed = || ApiError::new(Code::OriginNotAllowed, "origin not allowed");
    let origin = origin(headers).map_err(|()| not_allowed())?;
    let Some((bearer, source)) = bearer(headers)? else {
        // Without a daemon nothing can be admitted; say so rather than "unauthorized".
        return Err(if state.verifier.reachable().await {
            ApiError::new(
                Code::Unauthorized,
                "not paired: run `studio pair` to get a link",
            )
        } else {
            ApiError::new(Code::DaemonUnavailable, "the daemon is unavailable")
        });
    };
    // The cookie is ambient: a state change it authorises must come from one of our origins.
    if source == Source::Cookie
        && is_unsafe(method)
        && !origin.is_some_and(|o| state.door.origin_allowed(o))
    {
        return Err(not_allowed());
    }
    if origin.is_some_and(|o| !state.door.origin_allowed(o)) {
        return Err(not_allowed());
    }
    let verdict = state
        .verifier
        .admit(&bearer, origin.unwrap_or(""), method.as_str(), path)
        .await?;
    match verdict {
        Verdict::Admitted(principal) => Ok(Admitted { bearer, principal }),
        Verdict::Refused(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_and_unsafe_methods() {
        assert!(is_api("/api"));
        assert!(is_api("/api/x"));
        assert!(!is_api("/apix"));
        assert!(!is_api("/"));
        assert!(is_unsafe(&Method::POST));
        assert!(is_unsafe(&Method::DELETE));
        assert!(!is_unsafe(&Method::HEAD));
    }

    #[test]
    fn json_media_type() {
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert!(is_json(Some(&v("application/json"))));
        assert!(is_json(Some(&v("Application/JSON; charset=utf-8"))));
        assert!(!is_json(Some(&v("text/plain"))));
        assert!(!is_json(Some(&v("application/jsonx"))));
        assert!(!is_json(Some(&v("application/x-www-form-urlencoded"))));
        assert!(!is_json(None));
    }

    #[test]
    fn exemptions() {
        assert!(admission_exempt(&Method::GET, "/health"));
        assert!(admission_exempt(&Method::GET, "/"));
        assert!(admission_exempt(&Method::GET, "/app.js"));
        assert!(admission_exempt(&Method::GET, "/api/app/session"));
        assert!(admission_exempt(&Method::POST, "/api/studio/pair"));
        assert!(!admission_exempt(&Method::GET, "/api/studio/pair"));
        assert!(!admission_exempt(&Method::GET, "/api/identity"));
        assert!(!admission_exempt(&Method::POST, "/"));
        assert!(!admission_exempt(&Method::POST, "/api/app/session"));
    }

    #[test]
    fn bearer_prefers_the_header_and_refuses_malformed_ones() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("studio_admission=sta_c"),
        );
        assert_eq!(
            bearer(&h).expect("ok"),
            Some(("sta_c".into(), Source::Cookie))
        );
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer sta_h"),
        );
        assert_eq!(
            bearer(&h).expect("ok"),
            Some(("sta_h".into(), Source::Header))
        );
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic xyz"));
        assert_eq!(bearer(&h).expect_err("refused").code, Code::Unauthorized);
        assert_eq!(bearer(&HeaderMap::new()).expect("ok"), None);
    }

    #[test]
    fn repeated_origins_are_refused() {
        let mut h = HeaderMap::new();
        assert_eq!(origin(&h), Ok(None));
        h.append(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:1"),
        );
        assert_eq!(origin(&h), Ok(Some("http://127.0.0.1:1")));
        h.append(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert_eq!(origin(&h), Err(()));
    }

    #[test]
    fn policy_covers_own_port_and_public_origin() {
        let mut config = Config::loopback(
            studio_contract::home::Home::new("/tmp/x"),
            studio_contract::secret::AppKey::generate(),
        );
        config.public_origin = Some("https://studio.example.com".into());
        config.allowed_origins = vec!["http://extra.example".into()];
        let door = FrontDoor::new(&config, SocketAddr::from(([127, 0, 0, 1], 4321)));
        assert!(door.hosts.accepts("127.0.0.1:4321"));
        assert!(door.hosts.accepts("localhost:4321"));
        assert!(door.hosts.accepts("studio.example.com"));
        assert!(door.hosts.accepts("studio.example.com:443"));
        assert!(!door.hosts.accepts("127.0.0.1:8765"));
        assert!(!door.hosts.accepts("evil.example.com"));
        assert!(door.origin_allowed("http://127.0.0.1:4321"));
        assert!(door.origin_allowed("http://localhost:4321"));
        assert!(door.origin_allowed("https://studio.example.com"));
        assert!(door.origin_allowed("http://extra.example"));
        assert!(!door.origin_allowed("http://127.0.0.1:4322"));
        assert!(!door.origin_allowed("null"));
        assert!(!door.origin_allowed("*"));
    }
}
