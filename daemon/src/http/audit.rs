//! `GET /api/audit`: one page of the audit trail, newest first, filtered by schedule,
//! object, principal, kind and time.

use axum::{Json, extract::State};
use serde::Deserialize;
use studio_api::{AUDIT_KINDS, AuditEntry, AuditPage};
use studio_contract::{
    error::{ApiError, Code},
    role::Role,
    time::rfc3339,
};

use super::{ApiState, cursor, routes::QueryParams, runs::instant, schedules::store_error};
use crate::scheduling::store::{AuditFilter, AuditRow};

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    schedule: Option<String>,
    object: Option<String>,
    principal: Option<String>,
    /// Comma-separated kinds.
    kind: Option<String>,
    since: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

/// A filter's text, if given and not empty (the API treats absent and empty alike).
fn given(t: &Option<String>) -> Option<&str> {
    t.as_deref().filter(|t| !t.is_empty())
}

pub(crate) async fn list(
    State(state): State<ApiState>,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let kinds = cursor::words(q.kind.as_deref(), "kind", &AUDIT_KINDS, |word| {
        AUDIT_KINDS.iter().copied().find(|k| *k == word)
    })?;
    let (schedule, object, principal) = (given(&q.schedule), given(&q.object), given(&q.principal));
    let since_ms = instant("since", q.since.as_deref())?;
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    // The list a cursor belongs to: every filter.
    let list = format!(
        "audit|schedule={}|object={}|principal={}|kind={}|since={}",
        schedule.unwrap_or_default(),
        object.unwrap_or_default(),
        principal.unwrap_or_default(),
        kinds.join(","),
        since_ms.map(|m| m.to_string()).unwrap_or_default(),
    );
    let before_id = match &q.cursor {
        Some(c) => Some(cursor::decode(c, &list)?.parse::<i64>().map_err(|_| {
            ApiError::new(
                Code::InvalidCursor,
                "the cursor is not one this server issued",
            )
        })?),
        None => None,
    };
    let rows = state
        .scheduler
        .reads()
        .audit(&AuditFilter {
            schedule_id: schedule,
            object,
            principal,
            kinds: &kinds,
            since_ms,
            before_id,
            limit: limit + 1,
        })
        .await
        .map_err(store_error)?;
    let keep = rows.len().min(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_cursor = (rows.len() > keep)
        .then(|| {
            rows.get(keep - 1)
                .map(|r| cursor::encode(&list, &r.id.to_string()))
        })
        .flatten();
    let entries = rows.into_iter().take(keep).map(entry).collect();
    Ok(Json(AuditPage {
        entries,
        next_cursor,
    }))
}

fn entry(r: AuditRow) -> AuditEntry {
    AuditEntry {
        id: r.id,
        at: rfc3339(r.at_ms),
        kind: r.kind,
        epoch: r.epoch,
        principal: r.principal_id,
        role: r.role.as_deref().and_then(Role::parse),
        origin: r.origin,
        object: r.object,
        schedule_id: r.schedule_id,
        // Every row's detail is written as a JSON object; an unreadable one shows empty.
        detail: serde_json::from_str(&r.detail)
            .unwrap_or_else(|_| serde_json::Value::Object(serde_json::Map::new())),
    }
}
