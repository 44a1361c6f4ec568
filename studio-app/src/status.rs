//! The app's own status routes: `GET /health` for the supervisor and
//! `GET /api/app/session` for the page (is this browser paired, is the daemon there).

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use http::{HeaderMap, header};
use studio_api::app::{AppHealth, AppSession};
use studio_contract::error::Code;

use crate::{frontdoor, state::AppState, verifier::Verdict};

fn daemon(ok: bool) -> &'static str {
    if ok { "ok" } else { "unavailable" }
}

pub(crate) async fn health(State(state): State<AppState>) -> Json<AppHealth> {
    Json(AppHealth {
        status: "ok".into(),
        daemon: daemon(state.verifier.daemon_ok()).into(),
    })
}

/// `GET /api/app/openapi.json`: the app's own document, written once per process.
pub(crate) async fn openapi() -> Response {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = TEXT.get_or_init(|| studio_api::openapi::to_text(&studio_api::app::app_document()));
    ([(header::CONTENT_TYPE, "application/json")], text.as_str()).into_response()
}

/// Always answers 200: the body says what the page should show.
#[tracing::instrument(skip_all)]
pub(crate) async fn session(State(state): State<AppState>, headers: HeaderMap) -> Json<AppSession> {
    let refused = |ok: bool, code: Code| AppSession {
        paired: false,
        daemon: daemon(ok).into(),
        epoch: if ok { state.verifier.epoch() } else { None },
        principal: None,
        reason: Some(code),
    };
    let origin = match studio_frontdoor::door::header_origin(&headers) {
        Ok(origin) => origin.unwrap_or(""),
        Err(_) => return Json(refused(state.verifier.daemon_ok(), Code::OriginNotAllowed)),
    };
    let bearer = match frontdoor::bearer(&headers) {
        Ok(Some((bearer, _))) => bearer,
        Ok(None) => {
            let ok = state.verifier.reachable().await;
            let code = if ok {
                Code::Unauthorized
            } else {
                Code::DaemonUnavailable
            };
            return Json(refused(ok, code));
        }
        Err(e) => return Json(refused(state.verifier.daemon_ok(), e.code)),
    };
    let verdict = state
        .verifier
        .admit(&bearer, origin, "GET", "/api/app/session")
        .await;
    Json(match verdict {
        Ok(Verdict::Admitted(p)) => AppSession {
            paired: true,
            daemon: daemon(true).into(),
            epoch: Some(p.epoch.clone()),
            principal: Some(p.id.clone()),
            reason: None,
        },
        Ok(Verdict::Refused(e)) => refused(true, e.code),
        Err(e) => {
            tracing::warn!(error = %e, "verifier unavailable");
            refused(false, Code::DaemonUnavailable)
        }
    })
}
