//! `/api/workers`: the workers (studiod's built-in one first), one-time join tokens,
//! and revocation (docs/TASKS.md, "Workers").

use axum::{
    Json,
    extract::{Path, State},
    response::{IntoResponse, Response},
};
use http::StatusCode;
use studio_api::{JoinTokenCreated, NewJoinToken, Worker, WorkerList};
use studio_contract::{
    error::{ApiError, Code, FieldError},
    time::{now_ms, rfc3339},
};

use super::{
    ApiState,
    front::By,
    routes::TextBody,
    schedules::{engine_error, store_error},
};
use crate::scheduling::store::{BUILTIN, WorkerRow, split};

/// The longest a join token may be valid.
const MAX_TOKEN_TTL_MS: i64 = 7 * 24 * 3_600_000;
/// A token's validity when the request names none.
const DEFAULT_TOKEN_TTL_MS: i64 = 3_600_000;
/// The most labels a token may grant.
const MAX_TOKEN_LABELS: usize = 32;

/// A join token's validity in ms: `text` (`30m`, `1h`, `2d`; at most 7 days) or 1 hour.
pub(crate) fn token_ttl_ms(text: Option<&str>) -> Result<i64, String> {
    match text {
        None => Ok(DEFAULT_TOKEN_TTL_MS),
        Some(text) => studio_schedule::duration::parse_interval(text).and_then(|ms| {
            (ms <= MAX_TOKEN_TTL_MS)
                .then_some(ms)
                .ok_or_else(|| "at most 7 days".to_owned())
        }),
    }
}

fn view(w: &WorkerRow, running: i64, connected: bool) -> Worker {
    Worker {
        id: w.id.clone(),
        name: w.name.clone(),
        builtin: false,
        labels: w.serving(),
        granted: split(&w.labels),
        capacity: w.capacity,
        running,
        connected: connected && w.revoked_at_ms.is_none(),
        version: w.version.clone(),
        enrolled_at: Some(rfc3339(w.enrolled_at_ms)),
        last_seen_at: w.last_seen_at_ms.map(rfc3339),
        certificate_expires_at: Some(rfc3339(w.cert_not_after_ms)),
        certificate_sha256: Some(w.cert_sha256.clone()),
        revoked_at: w.revoked_at_ms.map(rfc3339),
    }
}

pub(crate) async fn list(State(state): State<ApiState>) -> Result<Json<WorkerList>, ApiError> {
    let s = &state.scheduler;
    let running = s.reads().attempts_by_worker().await.map_err(store_error)?;
    let running_on = |id: &str| {
        running
            .iter()
            .find_map(|(w, n)| (w == id).then_some(*n))
            .unwrap_or(0)
    };
    let (_, slots) = s.slots_taken();
    let mut workers = vec![Worker {
        id: BUILTIN.to_owned(),
        name: "studiod".to_owned(),
        builtin: true,
        labels: s.local_labels().to_vec(),
        granted: s.local_labels().to_vec(),
        capacity: i64::try_from(slots).unwrap_or(i64::MAX),
        running: running_on(BUILTIN),
        connected: true,
        version: Some(studio_contract::VERSION.to_owned()),
        enrolled_at: None,
        last_seen_at: None,
        certificate_expires_at: None,
        certificate_sha256: None,
        revoked_at: None,
    }];
    for w in s.reads().workers().await.map_err(store_error)? {
        workers.push(view(&w, running_on(&w.id), s.is_connected(&w.id)));
    }
    Ok(Json(WorkerList { workers }))
}

pub(crate) async fn create_token(
    State(state): State<ApiState>,
    By(by): By,
    TextBody(body): TextBody,
) -> Result<Response, ApiError> {
    let door = state.workers.as_ref().ok_or_else(|| {
        ApiError::new(
            Code::Conflict,
            "studiod runs without a worker listener (STUDIO_WORKER_ADDR=off): no worker can join",
        )
    })?;
    let req: NewJoinToken =
        studio_schedule::parse_json_as(&body).map_err(|e| ApiError::invalid(vec![e]))?;
    let mut errors = Vec::new();
    if req.labels.len() > MAX_TOKEN_LABELS {
        errors.push(FieldError::new(
            "labels",
            format!("at most {MAX_TOKEN_LABELS} labels"),
        ));
    }
    for (i, label) in req.labels.iter().enumerate() {
        if !studio_schedule::task::is_label(label) {
            errors.push(FieldError::new(
                format!("labels[{i}]"),
                "a label is 1 to 64 letters, digits, '.', '_' or '-'",
            ));
        }
    }
    let ttl_ms = token_ttl_ms(req.ttl.as_deref()).map_err(|why| FieldError::new("ttl", why));
    let ttl_ms = match ttl_ms {
        Ok(ms) => ms,
        Err(e) => {
            errors.push(e);
            0
        }
    };
    if !errors.is_empty() {
        return Err(ApiError::invalid(errors));
    }
    let mut labels = req.labels;
    labels.sort_unstable();
    labels.dedup();
    let token = studio_pki::JoinToken::generate(&door.ca_fingerprint).map_err(|e| {
        tracing::error!(error = %e, "cannot make a join token");
        ApiError::new(Code::Internal, "cannot make a join token")
    })?;
    let expires_at_ms = now_ms().saturating_add(ttl_ms);
    state
        .scheduler
        .record_join_token(&token.digest(), &labels, expires_at_ms, &by)
        .await
        .map_err(engine_error)?;
    let created = JoinTokenCreated {
        token: token.to_string(),
        labels,
        expires_at: rfc3339(expires_at_ms),
        server: door.addr.to_string(),
    };
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub(crate) async fn revoke(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
) -> Result<Json<Worker>, ApiError> {
    let s = &state.scheduler;
    let row = s.revoke_worker(&id, &by).await.map_err(engine_error)?;
    Ok(Json(view(&row, 0, false)))
}
