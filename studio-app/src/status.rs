//! The app's own status routes: `GET /health` for the supervisor and
//! `GET /api/app/session` for the page (is this browser paired, is the daemon there).

use axum::{Json, extract::State};
use http::HeaderMap;
use serde::Serialize;
use serde_json::{Value, json};
use studio_contract::error::Code;

use crate::{frontdoor, http::AppState, verifier::Verdict};

fn daemon(ok: bool) -> &'static str {
    if ok { "ok" } else { "unavailable" }
}

pub(crate) async fn health(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"status": "ok", "daemon": daemon(state.verifier.daemon_ok())}))
}

/// The body of `GET /api/app/session`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Session {
    pub(crate) paired: bool,
    pub(crate) daemon: &'static str,
    pub(crate) epoch: Option<String>,
    pub(crate) principal: Option<String>,
    /// Why not paired: a stable error code.
    pub(crate) reason: Option<&'static str>,
}

/// Always answers 200: the body says what the page should show.
#[tracing::instrument(skip_all)]
pub(crate) async fn session(State(state): State<AppState>, headers: HeaderMap) -> Json<Session> {
    let refused = |ok: bool, code: Code| Session {
        paired: false,
        daemon: daemon(ok),
        epoch: if ok { state.verifier.epoch() } else { None },
        principal: None,
        reason: Some(code.as_str()),
    };
    let origin = match frontdoor::origin(&headers) {
        Ok(origin) => origin.unwrap_or(""),
        Err(()) => return Json(refused(state.verifier.daemon_ok(), Code::OriginNotAllowed)),
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
        Ok(Verdict::Admitted(p)) => Session {
            paired: true,
            daemon: daemon(true),
            epoch: Some(p.epoch),
            principal: Some(p.id),
            reason: None,
        },
        Ok(Verdict::Refused(e)) => refused(true, e.code),
        Err(e) => {
            tracing::warn!(error = %e, "verifier unavailable");
            refused(false, Code::DaemonUnavailable)
        }
    })
}
