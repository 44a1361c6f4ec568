//! `/api/approvals`: the requests for a person's decision, a grant or a denial (only a
//! paired browser with its decision token decides: the front door checks it), and
//! `/api/evidence`: the evidence log as a bundle for `studio evidence verify`.

use axum::{
    Json,
    extract::{Path, State},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use studio_api::{
    APPROVAL_STATUSES, Approval, ApprovalDetail, ApprovalPage, ApprovalStatus, Decided,
    DecisionRequest, EvidenceRow, MAX_REASON_CHARS,
};
use studio_contract::{
    error::{ApiError, Code, FieldError},
    role::Role,
    time::rfc3339,
};

use super::{
    ApiState, cursor,
    front::By,
    routes::{JsonBody, QueryParams},
    runs::instant,
    schedules::{engine_error, store_error},
};
use crate::scheduling::store::{ApprovalFilter, ApprovalRow};

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    /// Comma-separated statuses.
    status: Option<String>,
    schedule_id: Option<String>,
    run_id: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

pub(crate) async fn list(
    State(state): State<ApiState>,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<ApprovalPage>, ApiError> {
    let statuses = cursor::words(
        q.status.as_deref(),
        "status",
        &APPROVAL_STATUSES,
        ApprovalStatus::parse,
    )?;
    let schedule_id = q.schedule_id.filter(|s| !s.is_empty());
    let run_id = q.run_id.filter(|s| !s.is_empty());
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    let words: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
    // The list a cursor belongs to: every filter.
    let list = format!(
        "approvals|status={}|schedule={}|run={}",
        words.join(","),
        schedule_id.as_deref().unwrap_or_default(),
        run_id.as_deref().unwrap_or_default(),
    );
    let before = q
        .cursor
        .as_deref()
        .map(|c| cursor::decode_keyset(c, &list))
        .transpose()?;
    let rows = state
        .scheduler
        .reads()
        .approvals(&ApprovalFilter {
            statuses,
            schedule_id,
            run_id,
            before,
            limit: limit + 1,
        })
        .await
        .map_err(store_error)?;
    let keep = rows.len().min(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_cursor = (rows.len() > keep)
        .then(|| {
            rows.get(keep - 1)
                .map(|r| cursor::encode_keyset(&list, (r.requested_at_ms, &r.id)))
        })
        .flatten();
    Ok(Json(ApprovalPage {
        approvals: rows.iter().take(keep).map(view).collect(),
        next_cursor,
    }))
}

pub(crate) fn view(a: &ApprovalRow) -> Approval {
    Approval {
        id: a.id.clone(),
        run_id: a.run_id.clone(),
        schedule_id: a.schedule_id.clone(),
        schedule_name: a.schedule_name.clone(),
        status: a.status().unwrap_or(ApprovalStatus::Voided),
        action: serde_json::from_str(&a.action_json).unwrap_or(serde_json::Value::Null),
        action_sha256: a.action_sha256.clone(),
        requested_by: a.requested_by.clone(),
        requested_at: rfc3339(a.requested_at_ms),
        expires_at: rfc3339(a.expires_at_ms),
        distinct_from_requester: a.distinct_from_requester,
        decided_by: a.decided_by.clone(),
        decided_role: a.decided_role.as_deref().and_then(Role::parse),
        decided_origin: a.decided_origin.clone(),
        decided_at: a.decided_at_ms.map(rfc3339),
        reason: a.reason.clone(),
    }
}

pub(crate) fn evidence_view(s: studio_evidence::Sealed) -> EvidenceRow {
    EvidenceRow {
        seq: s.entry.seq,
        at_ms: s.entry.at_ms,
        kind: s.entry.kind,
        content: s.entry.content,
        content_sha256: s.content_sha256,
        chain_sha256: s.chain_sha256,
        mac: s.mac,
    }
}

fn not_found() -> ApiError {
    ApiError::new(Code::ApprovalNotFound, "no such approval request")
}

pub(crate) async fn get_one(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<ApprovalDetail>, ApiError> {
    let store = state.scheduler.reads();
    let a = store
        .approval(&id)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    let evidence = store
        .run_evidence(&a.run_id)
        .await
        .map_err(store_error)?
        .into_iter()
        .filter(|s| s.entry.content.get("approval").and_then(|v| v.as_str()) == Some(&a.id))
        .map(evidence_view)
        .collect();
    Ok(Json(ApprovalDetail {
        approval: view(&a),
        evidence,
    }))
}

/// A decision's reason: trimmed, empty as none, at most [`MAX_REASON_CHARS`].
fn reason(body: &DecisionRequest) -> Result<Option<&str>, ApiError> {
    let Some(text) = body
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    else {
        return Ok(None);
    };
    if text.chars().count() > MAX_REASON_CHARS || text.chars().any(char::is_control) {
        return Err(ApiError::invalid(vec![FieldError::new(
            "reason",
            format!("must be one line of at most {MAX_REASON_CHARS} characters"),
        )]));
    }
    Ok(Some(text))
}

async fn decide(
    state: &ApiState,
    id: &str,
    grant: bool,
    by: &crate::audit::Actor,
    body: &DecisionRequest,
) -> Result<Json<Decided>, ApiError> {
    let reason = reason(body)?;
    let (approval, run) = state
        .scheduler
        .decide(id, grant, by, reason)
        .await
        .map_err(engine_error)?;
    Ok(Json(Decided {
        approval: view(&approval),
        run: run.view(),
    }))
}

pub(crate) async fn grant(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<DecisionRequest>,
) -> Result<Json<Decided>, ApiError> {
    decide(&state, &id, true, &by, &body).await
}

pub(crate) async fn deny(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<DecisionRequest>,
) -> Result<Json<Decided>, ApiError> {
    decide(&state, &id, false, &by, &body).await
}

#[derive(Deserialize)]
pub(crate) struct EvidenceQuery {
    since: Option<String>,
}

/// The evidence log (from `since`) as a bundle: a header signed with the home's key,
/// then one sealed row per line.
pub(crate) async fn export(
    State(state): State<ApiState>,
    QueryParams(q): QueryParams<EvidenceQuery>,
) -> Result<Response, ApiError> {
    let since_ms = instant("since", q.since.as_deref())?;
    let store = state.scheduler.reads();
    let (previous, rows) = store.evidence_since(since_ms).await.map_err(store_error)?;
    let mut out = Vec::with_capacity(rows.len() * 512 + 256);
    studio_evidence::write_bundle(&mut out, previous, &rows, store.evidence_key()).map_err(
        |e| {
            tracing::error!(error = %e, "cannot write the evidence bundle");
            ApiError::new(Code::Internal, "internal error")
        },
    )?;
    Ok((
        [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        out,
    )
        .into_response())
}
