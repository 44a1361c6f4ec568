//! `POST /api/studio/pair`: redeems a pairing code through the verifier and hands the
//! browser its admission token as an `HttpOnly` cookie that lasts as long as the token.
//!
//! Invariant: the admission token goes only into `Set-Cookie`, never into the body, so
//! page script cannot read or leak it.

use axum::{
    Json,
    body::Bytes,
    extract::State,
    response::{IntoResponse, Response},
};
use http::{HeaderMap, header};
use studio_api::{PairRequest, app::BrowserPaired};
use studio_contract::{
    error::{ApiError, Code},
    time::{now_ms, rfc3339},
};

use crate::{cookie, state::AppState};

#[tracing::instrument(skip_all)]
pub(crate) async fn pair(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match redeem(&state, &headers, &body).await {
        Ok(response) => response,
        Err(e) => {
            tracing::info!(code = e.code.as_str(), "pairing refused");
            e.into_response()
        }
    }
}

async fn redeem(state: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<Response, ApiError> {
    // Only a browser on one of our origins pairs (CORS already refused foreign ones): a
    // request without an Origin is no browser's, and the code is left unspent.
    let origin = studio_frontdoor::door::header_origin(headers)
        .ok()
        .flatten()
        .ok_or_else(|| ApiError::new(Code::OriginNotAllowed, "pairing needs an allowed origin"))?;
    let PairRequest { code } = serde_json::from_slice(body)
        .map_err(|_| ApiError::new(Code::BadRequest, "expected {\"code\": \"...\"}"))?;
    // The daemon checks the origin against its own list too and decides.
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let pairing = state
        .verifier
        .redeem_pairing(code.trim(), origin, user_agent)
        .await??;
    let max_age = cookie::max_age(pairing.expires_at_ms, now_ms());
    let set_cookie = cookie::set_admission(&pairing.token, max_age, state.secure_cookies)
        .ok_or_else(|| ApiError::new(Code::Internal, "the daemon minted an unusable token"))?;
    tracing::info!(principal = %pairing.principal, "browser paired");
    let body = BrowserPaired {
        paired: true,
        decision_token: pairing.decision_token,
        epoch: pairing.epoch,
        principal: pairing.principal,
        decision_expires_at: rfc3339(pairing.decision_expires_at_ms),
        expires_at: (pairing.expires_at_ms > 0).then(|| rfc3339(pairing.expires_at_ms)),
    };
    Ok(([(header::SET_COOKIE, set_cookie)], Json(body)).into_response())
}
