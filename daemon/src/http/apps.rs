//! `/api/apps`: the studio-apps enrolled to reach the apps listener from other hosts,
//! their one-time join tokens and revocation (docs/FLEETS.md, "Split hosts"). Minting a
//! token and revoking an app are the machine owner's: an app answers for every browser.

use axum::{
    Json,
    extract::{Path, State},
    response::{IntoResponse, Response},
};
use http::StatusCode;
use serde_json::json;
use studio_api::{AppList, AppTokenCreated, EnrolledApp, NewAppToken};
use studio_contract::{
    error::{ApiError, Code, FieldError},
    time::{now_ms, rfc3339},
};

use super::{
    ApiState,
    front::{By, MachineOwner},
    routes::TextBody,
    schedules::store_error,
    workers::token_ttl_ms,
};
use crate::{audit::Kind as AuditKind, store::AppRow};

fn view(a: &AppRow) -> EnrolledApp {
    EnrolledApp {
        id: a.id.clone(),
        name: a.name.clone(),
        enrolled_at: rfc3339(a.enrolled_at_ms),
        certificate_expires_at: rfc3339(a.cert_not_after_ms),
        certificate_sha256: a.cert_sha256.clone(),
        revoked_at: a.revoked_at_ms.map(rfc3339),
    }
}

pub(crate) async fn list(State(state): State<ApiState>) -> Result<Json<AppList>, ApiError> {
    let rows = state.authority.store().apps().await.map_err(store_error)?;
    Ok(Json(AppList {
        apps: rows.iter().map(view).collect(),
    }))
}

pub(crate) async fn create_token(
    State(state): State<ApiState>,
    _owner: MachineOwner,
    By(by): By,
    TextBody(body): TextBody,
) -> Result<Response, ApiError> {
    let door = state.apps.as_ref().ok_or_else(|| {
        ApiError::new(
            Code::Conflict,
            "studiod runs without an apps listener (set STUDIO_APPS_ADDR): no app can join",
        )
    })?;
    let req: NewAppToken = if body.trim().is_empty() {
        NewAppToken::default()
    } else {
        studio_schedule::parse_json_as(&body).map_err(|e| ApiError::invalid(vec![e]))?
    };
    let ttl_ms = token_ttl_ms(req.ttl.as_deref())
        .map_err(|why| ApiError::invalid(vec![FieldError::new("ttl", why)]))?;
    let token = studio_pki::JoinToken::generate(&door.ca_fingerprint).map_err(|e| {
        tracing::error!(error = %e, "cannot make an app join token");
        ApiError::new(Code::Internal, "cannot make a join token")
    })?;
    let now = now_ms();
    let expires_at_ms = now.saturating_add(ttl_ms);
    let store = state.authority.store();
    store
        .create_app_token(&token.digest(), Some(&by.principal), (now, expires_at_ms))
        .await
        .map_err(store_error)?;
    let detail = json!({ "expires_at": rfc3339(expires_at_ms) });
    state
        .authority
        .audit()
        .record_change(AuditKind::AppTokenCreated, &by, "apps", detail)
        .await;
    let created = AppTokenCreated {
        token: token.to_string(),
        expires_at: rfc3339(expires_at_ms),
        server: door.addr.to_string(),
    };
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub(crate) async fn revoke(
    State(state): State<ApiState>,
    _owner: MachineOwner,
    By(by): By,
    Path(id): Path<String>,
) -> Result<Json<EnrolledApp>, ApiError> {
    let row = state
        .authority
        .store()
        .revoke_app(&id, now_ms())
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::new(Code::AppNotFound, format!("no app {id:?}")))?;
    let detail = json!({ "name": row.name });
    state
        .authority
        .audit()
        .record_change(
            AuditKind::AppRevoked,
            &by,
            &format!("app:{}", row.id),
            detail,
        )
        .await;
    tracing::info!(app = %row.id, name = %row.name, "an app was revoked");
    Ok(Json(view(&row)))
}
