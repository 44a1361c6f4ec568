//! The daemon's HTTP routes and their JSON shapes (docs/ARCHITECTURE.md, "Routes"),
//! plus the JSON answers for unknown paths, wrong methods and unreadable bodies.

use axum::{
    Json,
    extract::{FromRequest, Path, Request, State},
    response::{IntoResponse, Response},
};
use http::StatusCode;
use serde::de::DeserializeOwned;
use studio_api::{
    Disconnected, Health, Identity, PairRequest, Paired, Session, SessionChange, SessionRevoked,
    Sessions,
};
use studio_contract::{
    IDENTITY, VERSION,
    error::{ApiError, Code},
    time::{now_ms, rfc3339},
};

use super::{
    ApiState,
    front::{By, Caller},
};
use crate::{admission::PrincipalKind, store::PrincipalRow};

/// `axum::Json` whose refusals are the shared error body.
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(Self(value)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(too_large())
            }
            Err(rejection) => Err(ApiError::new(Code::BadRequest, rejection.body_text())),
        }
    }
}

/// `axum::extract::Query` whose refusals are the shared error body (`400 bad_request`
/// naming the parameter), never axum's plain text.
pub(crate) struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Self(value))
            .map_err(|rejection| ApiError::new(Code::BadRequest, rejection.body_text()))
    }
}

/// A body as UTF-8 text, for handlers that parse it themselves (to name the path of a bad
/// field); its refusals are the shared error body, never axum's plain text.
pub(crate) struct TextBody(pub String);

impl<S: Send + Sync> FromRequest<S> for TextBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = match axum::body::Bytes::from_request(req, state).await {
            Ok(bytes) => bytes,
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(too_large());
            }
            Err(rejection) => return Err(ApiError::new(Code::BadRequest, rejection.body_text())),
        };
        String::from_utf8(bytes.into())
            .map(Self)
            .map_err(|e| ApiError::new(Code::BadRequest, format!("the body is not UTF-8: {e}")))
    }
}

fn too_large() -> ApiError {
    ApiError::new(Code::PayloadTooLarge, "request body too large")
}

pub(crate) async fn health() -> Json<Health> {
    Json(Health::ok())
}

pub(crate) async fn identity(State(state): State<ApiState>) -> Json<Identity> {
    Json(Identity {
        identity: IDENTITY.into(),
        version: VERSION.into(),
        epoch: state.authority.epoch(),
    })
}

/// `GET /api/openapi.json`: the document, written once per process.
pub(crate) async fn openapi() -> Response {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = TEXT.get_or_init(|| studio_api::openapi::to_text(&studio_api::daemon_document()));
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        text.as_str(),
    )
        .into_response()
}

pub(crate) async fn pair(
    State(state): State<ApiState>,
    origin: Option<axum::Extension<studio_frontdoor::door::RequestOrigin>>,
    headers: http::HeaderMap,
    JsonBody(body): JsonBody<PairRequest>,
) -> Result<Json<Paired>, ApiError> {
    let origin = origin.and_then(|o| o.0.0);
    let user_agent = headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let paired = state
        .authority
        .redeem(&body.code, origin.as_deref(), user_agent, now_ms())
        .await?;
    Ok(Json(Paired {
        token: paired.token,
        decision_token: paired.decision_token,
        epoch: paired.epoch,
        principal: paired.principal,
        decision_expires_at: rfc3339(paired.decision_expires_at_ms),
        expires_at: rfc3339(paired.expires_at_ms),
    }))
}

pub(super) fn caller(caller: Option<axum::Extension<Caller>>) -> Result<Caller, ApiError> {
    // The bearer layer admits every non-exempt route; a missing caller is a wiring bug.
    caller
        .map(|c| c.0)
        .ok_or_else(|| ApiError::new(Code::Unauthorized, "missing bearer token"))
}

pub(crate) async fn disconnect(
    State(state): State<ApiState>,
    who: Option<axum::Extension<Caller>>,
    By(by): By,
) -> Result<Json<Disconnected>, ApiError> {
    let Caller(who) = caller(who)?;
    if who.kind == PrincipalKind::Daemon {
        return Err(ApiError::new(
            Code::BadRequest,
            "the daemon token is not a session and cannot disconnect",
        ));
    }
    state
        .authority
        .revoke(&who.id, "disconnect", Some(&by), now_ms())
        .await?;
    Ok(Json(Disconnected {
        revoked: true,
        principal: who.id,
    }))
}

pub(crate) async fn sessions(
    State(state): State<ApiState>,
    who: Option<axum::Extension<Caller>>,
) -> Result<Json<Sessions>, ApiError> {
    let Caller(who) = caller(who)?;
    let sessions = state
        .authority
        .sessions()
        .await?
        .into_iter()
        .map(|s| session_view(s, &who.id))
        .collect();
    Ok(Json(Sessions { sessions }))
}

/// A session as the API shows it to the principal `caller`.
fn session_view(s: PrincipalRow, caller: &str) -> Session {
    Session {
        current: s.id == caller,
        role: s.role,
        device: s.device,
        created_at: rfc3339(s.created_at_ms),
        last_seen_at: rfc3339(s.last_seen_at_ms),
        expires_at: rfc3339(s.expires_at_ms),
        revoked_at: s.revoked_at_ms.map(rfc3339),
        origin: s.origin,
        id: s.id,
    }
}

pub(crate) async fn change_session(
    State(state): State<ApiState>,
    who: Option<axum::Extension<Caller>>,
    By(by): By,
    Path(id): Path<String>,
    TextBody(body): TextBody,
) -> Result<Json<Session>, ApiError> {
    let Caller(who) = caller(who)?;
    let change: SessionChange = {
        let de = &mut serde_json::Deserializer::from_str(&body);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            ApiError::invalid(vec![studio_contract::error::FieldError::new(
                path,
                e.into_inner().to_string(),
            )])
        })?
    };
    if !state
        .authority
        .set_role(&id, change.role, &by, now_ms())
        .await?
    {
        return Err(ApiError::new(
            Code::SessionNotFound,
            "no such session in this epoch (or it was revoked or has expired)",
        ));
    }
    let row = state
        .authority
        .session(&id)
        .await?
        .ok_or_else(|| ApiError::new(Code::SessionNotFound, "no such session"))?;
    Ok(Json(session_view(row, &who.id)))
}

pub(crate) async fn revoke_session(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if state.authority.session(&id).await?.is_none() {
        return Err(ApiError::new(Code::SessionNotFound, "no such session"));
    }
    state
        .authority
        .revoke(&id, "revoked_by_user", Some(&by), now_ms())
        .await?;
    Ok(Json(SessionRevoked { revoked: true, id }).into_response())
}
