//! The fallback route: a path studiod's route inventory serves goes upstream through the
//! client (`proxy`) with whatever method it came with; any other path is the same JSON 404
//! studiod gives. A successful request that revokes a credential empties the verdict
//! cache at once (and `/api/studio/disconnect` clears the cookie).
//!
//! Invariant: only an admitted request goes upstream; the admission layer runs before
//! every daemon-owned path, and this route fails closed regardless.

use axum::{
    body::{Body, HttpBody as _},
    extract::{Request, State},
    response::{IntoResponse, Response},
};
use http::{Method, header};
use http_body_util::Limited;
use studio_contract::{
    API_BODY_LIMIT,
    error::{ApiError, Code},
    time::now_ms,
};

use crate::{cookie, frontdoor::Admitted, proxy::too_large, state::AppState};

/// The fallback route: a path studiod serves (its route inventory says so) is proxied with
/// whatever method it came with; every other path is the same JSON 404 studiod gives.
pub(crate) async fn route(State(state): State<AppState>, mut req: Request) -> Response {
    if !studio_api::routes::proxied(req.uri().path()) {
        return ApiError::no_such_path().into_response();
    }
    let admitted = req.extensions_mut().remove::<Admitted>();
    forward(state, req, admitted).await
}

/// Sends a request for a path studiod serves upstream for its `admitted` caller, and
/// gives its answer.
pub(crate) async fn forward(state: AppState, req: Request, admitted: Option<Admitted>) -> Response {
    let Some(admitted) = admitted else {
        // The admission layer runs before every daemon-owned path; fail closed regardless.
        return ApiError::new(Code::Unauthorized, "not admitted").into_response();
    };
    let revoking = revokes(req.method(), req.uri().path());
    let disconnect = revoking && req.uri().path() == DISCONNECT;
    // studiod would refuse it anyway: answer it here, before a byte goes upstream, rather
    // than have a cut-off upload look like a daemon that went away.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > API_BODY_LIMIT as u64) {
        return too_large().into_response();
    }
    let req = req.map(|body| {
        if body.size_hint().exact() == Some(0) {
            body
        } else {
            Body::new(Limited::new(body, API_BODY_LIMIT))
        }
    });
    let upstream = match state.proxy.rewrite(req, &admitted.bearer, now_ms()) {
        Ok(upstream) => upstream,
        Err(e) => return e.into_response(),
    };
    let mut response = match state.proxy.send(upstream).await {
        Ok(response) => response,
        Err(e) => return e.into_response(),
    };
    if response.status().is_success() && revoking {
        // Don't wait for the Watch event: the next request must already be refused.
        state.verifier.invalidate();
        if disconnect {
            response.headers_mut().append(
                header::SET_COOKIE,
                cookie::clear_admission(state.secure_cookies),
            );
        }
    }
    response
}

const DISCONNECT: &str = "/api/studio/disconnect";

/// Requests that revoke a credential when they succeed.
fn revokes(method: &Method, path: &str) -> bool {
    (*method == Method::POST && path == DISCONNECT)
        || (*method == Method::DELETE && path.starts_with("/api/studio/sessions/"))
}
