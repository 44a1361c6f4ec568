//! The admission stack in front of every route, outermost first: request span → Host →
//! forwarded-origin check → CORS → JSON Content-Type → bearer. Each layer answers its
//! refusal itself with the shared error body; routes only ever see admitted requests.

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use studio_api::route::Access;
use studio_contract::{
    error::{ApiError, Code},
    forward,
    host::HostPolicy,
    secret::AppKey,
    time::now_ms,
};
use tracing::Instrument;

use super::ApiState;
use crate::{admission::Admitted, audit::Kind as AuditKind};

/// What the listener itself answers to and how the app's forwarded origin is checked.
pub(crate) struct FrontDoor {
    pub host: HostPolicy,
    pub app_key: AppKey,
}

/// The Origin the request is judged by (`None`: it carried none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EffectiveOrigin(pub Option<String>);

/// The principal a request was admitted as (absent on the exempt routes).
#[derive(Debug, Clone)]
pub(crate) struct Caller(pub Admitted);

// Never an origin, so it is never allowed: stands for an Origin header that is unreadable
// or repeated.
const UNREADABLE_ORIGIN: &str = "invalid";

pub(crate) fn is_api(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/")
}

pub(crate) async fn trace(req: Request, next: Next) -> Response {
    let span = tracing::info_span!(
        "request",
        method = %req.method(),
        // The path only: a query string could carry anything.
        path = req.uri().path(),
        status = tracing::field::Empty,
        principal = tracing::field::Empty,
    );
    async move {
        let response = next.run(req).await;
        tracing::Span::current().record("status", response.status().as_u16());
        tracing::debug!("answered");
        response
    }
    .instrument(span)
    .await
}

pub(crate) async fn host(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    if !state.front.host.accepts_request(req.headers(), req.uri()) {
        return ApiError::new(Code::InvalidHost, "host not allowed").into_response();
    }
    next.run(req).await
}

fn raw_origin(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all(header::ORIGIN).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return Some(UNREADABLE_ORIGIN.to_owned());
    }
    Some(first.to_str().unwrap_or(UNREADABLE_ORIGIN).to_owned())
}

pub(crate) async fn forwarded_origin(
    State(state): State<ApiState>,
    mut req: Request,
    next: Next,
) -> Response {
    let effective = match req.headers().get(forward::SIGNATURE_HEADER) {
        None => raw_origin(req.headers()),
        Some(sig) => {
            let claimed = match req.headers().get(forward::ORIGIN_HEADER) {
                None => Some(""),
                Some(v) => v.to_str().ok(),
            };
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            let valid = match (sig.to_str(), claimed) {
                (Ok(sig), Some(claimed)) => forward::verify(
                    &state.front.app_key,
                    sig,
                    now_ms(),
                    req.method().as_str(),
                    path,
                    claimed,
                ),
                _ => false,
            };
            if !valid {
                tracing::warn!("bad forwarded-origin signature");
                return ApiError::new(Code::Unauthorized, "bad forwarded-origin signature")
                    .into_response();
            }
            claimed.filter(|c| !c.is_empty()).map(str::to_owned)
        }
    };
    req.extensions_mut().insert(EffectiveOrigin(effective));
    next.run(req).await
}

const ALLOW_METHODS: &str = "GET, POST, PUT, PATCH, DELETE";
const ALLOW_HEADERS: &str = "authorization, content-type, x-studio-decision-token";

fn allow_origin(headers: &mut HeaderMap, origin: &str) {
    if let Ok(value) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
    }
}

pub(crate) async fn cors(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let origin = req
        .extensions()
        .get::<EffectiveOrigin>()
        .and_then(|o| o.0.clone());
    let Some(origin) = origin else {
        return next.run(req).await;
    };
    let api = is_api(req.uri().path());
    if !state.authority.origin_allowed(&origin) {
        if req.method() == Method::POST && req.uri().path() == "/api/studio/pair" {
            // Refused before the pairing route runs; the trail still shows the attempt.
            let detail = serde_json::json!({ "reason": "origin_not_allowed", "origin": origin });
            state
                .authority
                .audit()
                .record(AuditKind::PairingFailed, None, detail)
                .await;
        }
        if api {
            return ApiError::new(Code::OriginNotAllowed, "origin not allowed").into_response();
        }
        return next.run(req).await;
    }
    if api && req.method() == Method::OPTIONS {
        let mut response = StatusCode::NO_CONTENT.into_response();
        let headers = response.headers_mut();
        allow_origin(headers, &origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        return response;
    }
    let mut response = next.run(req).await;
    allow_origin(response.headers_mut(), &origin);
    response
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

pub(crate) async fn json_content_type(req: Request, next: Next) -> Response {
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe && is_api(req.uri().path()) && !is_json(req.headers()) {
        return ApiError::new(
            Code::UnsupportedMediaType,
            "request body must be application/json",
        )
        .into_response();
    }
    next.run(req).await
}

/// Whether the inventory lets this route be called without a bearer (liveness, pairing).
fn is_exempt(method: &Method, path: &str) -> bool {
    studio_api::routes::find(method, path)
        .is_some_and(|r| matches!(r.access, Access::Open | Access::PairingCode))
}

fn bearer_of(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

pub(crate) async fn bearer(
    State(state): State<ApiState>,
    mut req: Request,
    next: Next,
) -> Response {
    if is_exempt(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    let Some(token) = bearer_of(req.headers()) else {
        return ApiError::new(Code::Unauthorized, "missing bearer token").into_response();
    };
    match state.authority.admit(token, now_ms()).await {
        Ok(admitted) => {
            tracing::Span::current().record("principal", admitted.id.as_str());
            req.extensions_mut().insert(Caller(admitted));
            next.run(req).await
        }
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_type_rule() {
        let mut h = HeaderMap::new();
        assert!(!is_json(&h));
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            " application/json ;x=y",
        ] {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ok));
            assert!(is_json(&h), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/jsonx",
            "application/json-patch+json",
            "",
        ] {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(bad));
            assert!(!is_json(&h), "{bad}");
        }
    }

    #[test]
    fn bearer_parsing_and_exemptions() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer_of(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_of(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_of(&h), None);
        assert!(is_exempt(&Method::GET, "/health"));
        assert!(is_exempt(&Method::POST, "/api/studio/pair"));
        assert!(!is_exempt(&Method::POST, "/health"));
        assert!(!is_exempt(&Method::GET, "/api/studio/pair"));
        assert!(is_api("/api") && is_api("/api/x") && !is_api("/apix"));
    }
}
