//! `/api/app/attention`: the derived queue, an operator's disposition of one item (set,
//! clear) and the item's history. These routes sit behind the front door like every other
//! `/api` route; the admission verdict names who decided.

use std::collections::HashMap;

use axum::{
    Extension, Json,
    body::Bytes,
    extract::{Path, RawQuery, State},
    http::{HeaderMap, header},
};
use studio_api::app::{
    AttentionItem, AttentionList, DispositionClear, DispositionCleared, DispositionPut,
    DispositionRecord, DispositionView, History, ItemKind, ItemSchedule, LedgerEntryView,
};
use studio_contract::{
    error::{ApiError, Code, FieldError},
    time::{now_ms, rfc3339},
};

use super::{
    derive::{Disposition, Item, Kind, State as Decision, derive, parse_item_id},
    source::{self, Caller},
    store::{DispositionRow, LedgerEntry, Put, PutError, StoreError},
};
use crate::{frontdoor::Admitted, state::AppState};

/// The longest reason kept (a sentence or two, not a document).
const MAX_REASON_CHARS: usize = 2000;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        store_error(&e)
    }
}

/// `400 validation_failed` naming each bad field.
fn invalid(errors: Vec<(&'static str, String)>) -> ApiError {
    ApiError::invalid(
        errors
            .into_iter()
            .map(|(path, reason)| FieldError::new(path, reason))
            .collect(),
    )
}

fn store_error(e: &StoreError) -> ApiError {
    if let StoreError::Sqlx(inner) = e
        && studio_store::is_disk_full(inner)
    {
        tracing::warn!("a write to app.db was refused: the disk is full");
        return ApiError::new(
            Code::InsufficientStorage,
            "the disk of Studio's home is full: nothing was written; free some space and try again",
        );
    }
    tracing::error!(error = %e.chain(), "app.db failure");
    ApiError::new(Code::Internal, "internal error")
}

/// The admitted caller; the admission layer runs before these routes, so a missing verdict
/// means a wiring mistake, and it fails closed.
fn admitted(verdict: Option<Extension<Admitted>>) -> Result<Admitted, ApiError> {
    verdict
        .map(|Extension(a)| a)
        .ok_or_else(|| ApiError::new(Code::Unauthorized, "not admitted"))
}

fn caller<'a>(admitted: &'a Admitted, headers: &'a HeaderMap) -> Caller<'a> {
    Caller {
        bearer: &admitted.bearer,
        origin: headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
    }
}

fn item_id(id: &str) -> Result<(Kind, &str), ApiError> {
    parse_item_id(id).ok_or_else(|| {
        ApiError::new(
            Code::NotFound,
            "no such attention item (ids are run:<id> or sched:<id>)",
        )
    })
}

/// `?all=true` also lists the items a disposition hides.
fn wants_all(query: Option<&str>) -> Result<bool, ApiError> {
    let mut all = false;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("all", "true" | "1") => all = true,
            ("all", "false" | "0") => all = false,
            ("all", _) => return Err(ApiError::new(Code::BadRequest, "all must be true or false")),
            _ => {}
        }
    }
    Ok(all)
}

fn disposition_view(d: &Disposition, effective: bool) -> DispositionView {
    DispositionView {
        state: d.state.wire(),
        reason: d.reason.clone(),
        revision: d.revision,
        until: d.until_ms.map(rfc3339),
        at: rfc3339(d.at_ms),
        by: d.principal_id.clone(),
        covers: rfc3339(d.covers_ms),
        effective,
    }
}

fn item_view(item: &Item, revision: Option<i64>) -> AttentionItem {
    AttentionItem {
        id: item.id.clone(),
        kind: match item.kind {
            Kind::Run => ItemKind::Run,
            Kind::Sched => ItemKind::Sched,
        },
        title: item.title.clone(),
        detail: item.detail.clone(),
        since: rfc3339(item.since_ms),
        link: item.link.clone(),
        disposition: item
            .disposition
            .as_ref()
            .map(|d| disposition_view(d, item.hidden)),
        hidden: item.hidden,
        revision,
        schedule: (item.schedule_id.is_some() || item.schedule_name.is_some()).then(|| {
            ItemSchedule {
                id: item.schedule_id.clone(),
                name: item.schedule_name.clone(),
            }
        }),
    }
}

fn row_view(row: &DispositionRow) -> DispositionRecord {
    DispositionRecord {
        id: row.item_id.clone(),
        state: row.state.map(Decision::wire),
        reason: row.reason.clone(),
        until: row.until_ms.map(rfc3339),
        covers: rfc3339(row.covers_ms),
        revision: row.revision,
        by: row.principal_id.clone(),
        at: rfc3339(row.at_ms),
    }
}

fn ledger_view(e: &LedgerEntry) -> LedgerEntryView {
    LedgerEntryView {
        op: e.op.clone(),
        state: e
            .state
            .as_deref()
            .and_then(Decision::parse)
            .map(Decision::wire),
        reason: e.reason.clone(),
        until: e.until_ms.map(rfc3339),
        covers: e.covers_ms.map(rfc3339),
        revision: e.revision,
        by: e.principal_id.clone(),
        at: rfc3339(e.at_ms),
    }
}

#[tracing::instrument(skip_all)]
pub(crate) async fn list(
    State(state): State<AppState>,
    verdict: Option<Extension<Admitted>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Json<AttentionList>, ApiError> {
    let admitted = admitted(verdict)?;
    let all = wants_all(query.as_deref())?;
    let caller = caller(&admitted, &headers);
    let runs = source::failing_runs(&state.proxy, &caller).await?;
    let schedules = source::schedules(&state.proxy, &caller).await?;
    let approvals = source::pending_approvals(&state.proxy, &caller).await?;
    let rows = state.attention.rows().await?;
    let revisions: HashMap<&str, i64> = rows
        .iter()
        .map(|r| (r.item_id.as_str(), r.revision))
        .collect();
    let active: HashMap<String, Disposition> = rows
        .iter()
        .filter_map(|r| Some((r.item_id.clone(), r.active()?)))
        .collect();
    let items = derive(&runs, &schedules, &approvals, &active, now_ms());
    let hidden = items.iter().filter(|i| i.hidden).count();
    let shown = items
        .iter()
        .filter(|i| all || !i.hidden)
        .map(|i| item_view(i, revisions.get(i.id.as_str()).copied()))
        .collect();
    Ok(Json(AttentionList {
        items: shown,
        hidden,
    }))
}

/// A PUT body, checked: every bad field is reported at once.
struct Checked {
    state: Decision,
    reason: String,
    until_ms: Option<i64>,
    revision: Option<i64>,
}

fn check(body: DispositionPut, now_ms: i64) -> Result<Checked, ApiError> {
    let mut errors: Vec<(&'static str, String)> = Vec::new();
    let state = match body.state.as_deref() {
        None => {
            errors.push(("state", "required".into()));
            None
        }
        Some(s) => Decision::parse(s).or_else(|| {
            errors.push((
                "state",
                format!("unknown state {s:?} (acknowledged, resolved, expected, snoozed)"),
            ));
            None
        }),
    };
    let reason = body.reason.unwrap_or_default().trim().to_owned();
    if reason.is_empty() {
        errors.push(("reason", "required: say why".into()));
    } else if reason.chars().count() > MAX_REASON_CHARS {
        errors.push(("reason", format!("at most {MAX_REASON_CHARS} characters")));
    }
    let until_ms = match body.until.as_deref().map(str::parse::<jiff::Timestamp>) {
        None => None,
        Some(Ok(t)) => Some(t.as_millisecond()),
        Some(Err(_)) => {
            errors.push(("until", "must be an RFC 3339 instant with an offset".into()));
            None
        }
    };
    match (state, until_ms, body.until.is_some()) {
        (Some(Decision::Snoozed), None, false) => {
            errors.push(("until", "required for a snooze".into()));
        }
        (Some(Decision::Snoozed), Some(u), _) if u <= now_ms => {
            errors.push(("until", "must be in the future".into()));
        }
        (Some(s), _, true) if s != Decision::Snoozed => {
            errors.push(("until", "only a snooze has an until".into()));
        }
        _ => {}
    }
    if body.revision.is_some_and(|r| r < 0) {
        errors.push(("revision", "must not be negative".into()));
    }
    match state {
        Some(state) if errors.is_empty() => Ok(Checked {
            state,
            reason,
            until_ms,
            revision: body.revision,
        }),
        _ => Err(invalid(errors)),
    }
}

#[tracing::instrument(skip_all, fields(item = %id))]
pub(crate) async fn set(
    State(state): State<AppState>,
    verdict: Option<Extension<Admitted>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<DispositionRecord>, ApiError> {
    let admitted = admitted(verdict)?;
    let (kind, subject) = item_id(&id)?;
    let body: DispositionPut = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(Code::BadRequest, format!("invalid body: {e}")))?;
    let now = now_ms();
    let checked = check(body, now)?;
    // What the decision covers: the item's newest evidence as the daemon reports it now;
    // when the daemon cannot say, everything up to this instant.
    let covers_ms = source::evidence(
        &state.proxy,
        &caller(&admitted, &headers),
        kind,
        subject,
        now,
    )
    .await
    .unwrap_or(now);
    let put = Put {
        item_id: &id,
        state: checked.state,
        reason: &checked.reason,
        until_ms: checked.until_ms,
        covers_ms,
        revision: checked.revision,
        principal_id: &admitted.principal.id,
        now_ms: now,
    };
    match state.attention.put(&put).await {
        Ok(row) => Ok(Json(row_view(&row))),
        Err(PutError::Stale { tombstone }) => Err(ApiError::new(
            Code::Conflict,
            format!(
                "the disposition was deleted at revision {tombstone}; \
                 send revision {tombstone} or later to set it again"
            ),
        )),
        Err(PutError::Store(e)) => Err(store_error(&e)),
    }
}

#[tracing::instrument(skip_all, fields(item = %id))]
pub(crate) async fn clear(
    State(state): State<AppState>,
    verdict: Option<Extension<Admitted>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<DispositionCleared>, ApiError> {
    let admitted = admitted(verdict)?;
    item_id(&id)?;
    // The body is optional: a bare DELETE is an undo without a stated reason.
    let body: DispositionClear = if body.iter().all(u8::is_ascii_whitespace) {
        DispositionClear::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(Code::BadRequest, format!("invalid body: {e}")))?
    };
    let reason = body.reason.unwrap_or_default().trim().to_owned();
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(invalid(vec![(
            "reason",
            format!("at most {MAX_REASON_CHARS} characters"),
        )]));
    }
    let row = state
        .attention
        .delete(&id, &reason, &admitted.principal.id, now_ms())
        .await?
        .ok_or_else(|| ApiError::new(Code::NotFound, "the item has no disposition"))?;
    Ok(Json(DispositionCleared {
        deleted: true,
        id: row.item_id,
        revision: row.revision,
    }))
}

#[tracing::instrument(skip_all, fields(item = %id))]
pub(crate) async fn history(
    State(state): State<AppState>,
    verdict: Option<Extension<Admitted>>,
    Path(id): Path<String>,
) -> Result<Json<History>, ApiError> {
    admitted(verdict)?;
    item_id(&id)?;
    let entries = state.attention.history(&id).await?;
    let history = entries.iter().map(ledger_view).collect();
    Ok(Json(History { id, history }))
}

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
