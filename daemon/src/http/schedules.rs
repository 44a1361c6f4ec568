//! `/api/schedules`: create, read, patch (a JSON merge patch), delete, enable, disable,
//! trigger and preview. Every write is a scheduler command (`scheduling::commands`),
//! which publishes its event and re-arms the queue.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Map, Value};
use studio_api::{
    Deleted, Preview, PreviewRequest, Project, ProjectList, Run, Schedule, SchedulePage,
};
use studio_contract::{
    error::{ApiError, Code},
    time::{now_ms, rfc3339},
};
use studio_schedule::{Action, Context, FieldError, ScheduleSpec, Validated, validate, words};

use super::{
    ApiState, cursor,
    front::By,
    routes::{QueryParams, TextBody},
};
use crate::audit::Actor;
use crate::scheduling::{
    Scheduler,
    define::{new_row, revised_row},
    engine::EngineError,
    health::{HEALTHS, health},
    model::{RunMark, ScheduleRow},
    store::ScheduleFilter,
};

pub(crate) fn store_error(e: crate::store::StoreError) -> ApiError {
    if let crate::store::StoreError::Sqlx(inner) = &e
        && studio_store::is_disk_full(inner)
    {
        tracing::warn!("a write was refused: the home's disk is full");
        return disk_full();
    }
    tracing::error!(error = %crate::error::chain(&e), "store failure");
    ApiError::new(Code::Internal, "internal error")
}

/// `507 insufficient_storage`: nothing was written, nothing stored was lost, and the same
/// request succeeds once space returns.
pub(crate) fn disk_full() -> ApiError {
    ApiError::new(
        Code::InsufficientStorage,
        "the disk of Studio's home is full: nothing was written (reads still work); free some space and try again",
    )
}

pub(crate) fn engine_error(e: EngineError) -> ApiError {
    match e {
        EngineError::ScheduleNotFound => not_found(),
        EngineError::NameTaken(name) => {
            ApiError::new(Code::NameTaken, format!("a schedule named {name:?} exists"))
        }
        EngineError::Moved => ApiError::new(
            Code::Conflict,
            "the schedule changed meanwhile; read it and retry",
        ),
        EngineError::RunNotFound => ApiError::new(Code::RunNotFound, "no such run"),
        EngineError::RunNotActive => ApiError::new(Code::RunNotActive, "the run has already ended"),
        EngineError::MemberAway(member) => ApiError::new(
            Code::Conflict,
            format!(
                "the studiod that runs it (member {member}) does not answer; the run is settled \
                 when that studiod starts again"
            ),
        ),
        EngineError::MaxRunsReached => ApiError::new(
            Code::MaxRunsReached,
            "the schedule has reached its max_runs",
        ),
        EngineError::BudgetExhausted => {
            ApiError::new(Code::BudgetExhausted, "the schedule's budget is spent")
        }
        EngineError::ApprovalNotFound => {
            ApiError::new(Code::ApprovalNotFound, "no such approval request")
        }
        EngineError::ApprovalNotPending(status) => ApiError::new(
            Code::ApprovalNotPending,
            format!("the request is {status}: only a pending request can be decided"),
        ),
        EngineError::ApprovalExpired => ApiError::new(
            Code::ApprovalExpired,
            "the request expired before the decision; its run will not start",
        ),
        EngineError::ApprovalStale => ApiError::new(
            Code::ApprovalStale,
            "the request was voided because what it would run changed; decide the new request",
        ),
        EngineError::RequesterCannotApprove => ApiError::new(
            Code::RequesterCannotApprove,
            "the session that asked for this run cannot decide it: another person must",
        ),
        EngineError::IdempotencyConflict(id) => ApiError::new(
            Code::IdempotencyConflict,
            format!("task {id} was submitted with this idempotency key and another spec"),
        ),
        EngineError::QueueFull => ApiError::new(
            Code::QueueFull,
            "too many tasks wait for this concurrency key; submit again later",
        ),
        EngineError::TaskNotFound => ApiError::new(Code::TaskNotFound, "no such task"),
        EngineError::TaskNotActive => {
            ApiError::new(Code::TaskNotActive, "the task has already ended")
        }
        EngineError::TaskNotFinished => ApiError::new(
            Code::TaskNotFinished,
            "the task has not ended: only a failed, timed out or cancelled task (or one \
             waiting to retry) is retried",
        ),
        EngineError::WorkerNotFound => ApiError::new(Code::WorkerNotFound, "no such worker"),
        EngineError::SecretNotFound => ApiError::new(Code::SecretNotFound, "no such secret"),
        EngineError::EndpointNotFound => ApiError::new(Code::EndpointNotFound, "no such endpoint"),
        EngineError::EndpointInUse(users) => ApiError::new(
            Code::EndpointInUse,
            format!(
                "rules of {} send to the endpoint: change or delete them first",
                users.join(", ")
            ),
        ),
        EngineError::SecretInUse(users) => ApiError::new(
            Code::SecretInUse,
            format!(
                "the secret is named by {}: change or delete them first",
                users.join(", ")
            ),
        ),
        EngineError::Seal(e) => {
            tracing::error!(error = %e, "cannot seal a secret");
            ApiError::new(Code::Internal, "the secret cannot be sealed")
        }
        EngineError::BadSpec(why) => ApiError::new(
            Code::Internal,
            format!("the stored spec cannot be read: {why}"),
        ),
        EngineError::Store(e) => store_error(e),
    }
}

fn not_found() -> ApiError {
    ApiError::new(Code::ScheduleNotFound, "no such schedule")
}

fn scheduler(state: &ApiState) -> &Arc<Scheduler> {
    &state.scheduler
}

async fn check(state: &ApiState, spec: ScheduleSpec, now: i64) -> Result<Validated, ApiError> {
    let s = scheduler(state);
    let allowlist = s.allowlist_snapshot();
    // Read only when the spec names any.
    let secrets = if spec.secrets.is_empty() {
        Vec::new()
    } else {
        s.secret_names().await.map_err(store_error)?
    };
    let endpoints = if spec.notify.is_empty() {
        Vec::new()
    } else {
        s.reads().endpoint_names().await.map_err(store_error)?
    };
    let ctx = Context {
        default_zone: s.default_zone(),
        allowlist: Some(&allowlist),
        secrets: Some(&secrets),
        endpoints: Some(&endpoints),
        now_ms: Some(now),
        require_name: true,
    };
    validate(spec, &ctx).map_err(ApiError::invalid)
}

fn parse(text: &str) -> Result<ScheduleSpec, ApiError> {
    studio_schedule::parse_json(text).map_err(|e| ApiError::invalid(vec![e]))
}

/// The API's view of a schedule, with its derived health and its runs' rollups; reads
/// nothing beyond the row.
pub(crate) fn view(row: &ScheduleRow, now: i64) -> Result<Schedule, ApiError> {
    // Stored only after validation, so it always reads back; if not, say which one.
    let spec = serde_json::from_str(&row.spec).map_err(|e| {
        tracing::error!(schedule = %row.id, error = %e, "a stored spec does not read back");
        ApiError::new(
            Code::Internal,
            format!("the stored spec of {} cannot be read", row.id),
        )
    })?;
    let last = row.stats.last_outcome.as_ref();
    Ok(Schedule {
        id: row.id.clone(),
        name: row.name.clone(),
        spec,
        enabled: row.enabled,
        trigger_kind: row.trigger_kind.clone(),
        timezone: row.timezone.clone(),
        timezone_source: row.timezone_source.clone(),
        next_fire_at: row.next_fire_at_ms.map(rfc3339),
        last_fired_at: row.last_fired_at_ms.map(rfc3339),
        health: health(row, now).to_owned(),
        last_outcome: last.map(|o| o.status.clone()),
        last_outcome_at: last.map(|o| rfc3339(o.at_ms)),
        max_runs: row.max_runs,
        runs_counted: row.runs_counted,
        spend_usd: row.stats.spend_usd,
        created_at: rfc3339(row.created_at_ms),
        updated_at: rfc3339(row.updated_at_ms),
        revision: row.revision,
        managed_by: row.managed_by.clone(),
        owner_key: row.owner_key.clone(),
        source: row.source.clone(),
        recent_runs: row.stats.recent.iter().map(RunMark::view).collect(),
    })
}

/// The view of one schedule as of now.
fn view_one(row: &ScheduleRow) -> Result<Json<Schedule>, ApiError> {
    Ok(Json(view(row, now_ms())?))
}

async fn load(state: &ApiState, id: &str) -> Result<ScheduleRow, ApiError> {
    scheduler(state)
        .reads()
        .schedule(id)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)
}

pub(crate) async fn create(
    State(state): State<ApiState>,
    By(by): By,
    TextBody(body): TextBody,
) -> Result<Response, ApiError> {
    let now = now_ms();
    let validated = check(&state, parse(&body)?, now).await?;
    let row = new_row(&validated, uuid::Uuid::now_v7().to_string(), now);
    scheduler(&state)
        .create_schedule(&row, &by)
        .await
        .map_err(engine_error)?;
    Ok((StatusCode::CREATED, Json(view(&row, now_ms())?)).into_response())
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    enabled: Option<bool>,
    q: Option<String>,
    /// Comma-separated healths, e.g. `failing,overdue`.
    health: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

/// One page of schedules by name, optionally filtered by health.
pub(crate) async fn list(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<SchedulePage>, ApiError> {
    let limit = query.limit.unwrap_or(100).clamp(1, 500);
    let wanted = cursor::words(query.health.as_deref(), "health", HEALTHS, |word| {
        HEALTHS.iter().copied().find(|h| *h == word)
    })?;
    // The list a cursor belongs to: every filter.
    let list = format!(
        "schedules|enabled={}|q={}|health={}",
        query.enabled.map(|e| e.to_string()).unwrap_or_default(),
        query.q.as_deref().unwrap_or_default(),
        wanted.join(","),
    );
    let after = match &query.cursor {
        Some(c) => Some(cursor::decode(c, &list)?),
        None => None,
    };
    let now = now_ms();
    let filter = ScheduleFilter {
        enabled: query.enabled,
        query: query.q.as_deref(),
        after_name: after.as_deref(),
        health: &wanted,
        limit: limit + 1,
    };
    let rows = scheduler(&state)
        .reads()
        .list_schedules(&filter, now)
        .await
        .map_err(store_error)?;
    let more = rows.len() > usize::try_from(limit).unwrap_or(usize::MAX);
    let rows = &rows[..rows.len().min(usize::try_from(limit).unwrap_or(usize::MAX))];
    let schedules = rows
        .iter()
        .map(|row| view(row, now))
        .collect::<Result<_, _>>()?;
    let next = more
        .then(|| rows.last().map(|r| cursor::encode(&list, &r.name)))
        .flatten();
    Ok(Json(SchedulePage {
        schedules,
        next_cursor: next,
    }))
}

pub(crate) async fn get_one(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Schedule>, ApiError> {
    let row = load(&state, &id).await?;
    view_one(&row)
}

/// RFC 7396 merge, except that `trigger`, `action`, `on_success` and `on_fail` are replaced
/// whole: each is exactly one variant, so merging two would describe neither.
fn merge(target: &mut Value, patch: &Value, top: bool) {
    let (Value::Object(t), Value::Object(p)) = (&mut *target, patch) else {
        *target = patch.clone();
        return;
    };
    for (k, v) in p {
        let whole = top && matches!(k.as_str(), "trigger" | "action" | "on_success" | "on_fail");
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(_) if !whole => merge(
                t.entry(k.clone())
                    .or_insert_with(|| Value::Object(Map::new())),
                v,
                false,
            ),
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
}

pub(crate) async fn patch(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
    TextBody(body): TextBody,
) -> Result<Json<Schedule>, ApiError> {
    let patch: Value = serde_json::from_str(&body)
        .map_err(|e| ApiError::new(Code::BadRequest, format!("the body is not JSON: {e}")))?;
    if !patch.is_object() {
        return Err(ApiError::new(Code::BadRequest, "a patch is a JSON object"));
    }
    let current = load(&state, &id).await?;
    let mut merged: Value =
        serde_json::from_str(&current.spec).unwrap_or_else(|_| Value::Object(Map::new()));
    merge(&mut merged, &patch, true);
    let now = now_ms();
    let validated = check(&state, parse(&merged.to_string())?, now).await?;
    let row = revised_row(&current, &validated, now);
    if row.spec == current.spec {
        // Nothing to change: no write, no revision, no event (as declarations behave).
        return view_one(&current);
    }
    scheduler(&state)
        .update_schedule(&row, current.revision, &by)
        .await
        .map_err(engine_error)?;
    view_one(&row)
}

async fn set_enabled(
    state: &ApiState,
    id: &str,
    enabled: bool,
    by: &Actor,
) -> Result<Json<Schedule>, ApiError> {
    let row = scheduler(state)
        .set_enabled(id, enabled, by)
        .await
        .map_err(|e| match e {
            EngineError::Moved => {
                ApiError::new(Code::Conflict, "the schedule changed meanwhile; retry")
            }
            EngineError::NameTaken(_) => ApiError::new(Code::Conflict, "name collision"),
            other => engine_error(other),
        })?;
    view_one(&row)
}

pub(crate) async fn enable(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
) -> Result<Json<Schedule>, ApiError> {
    set_enabled(&state, &id, true, &by).await
}

pub(crate) async fn disable(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
) -> Result<Json<Schedule>, ApiError> {
    set_enabled(&state, &id, false, &by).await
}

pub(crate) async fn delete(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    scheduler(&state)
        .delete_schedule(&id, &by)
        .await
        .map_err(engine_error)?;
    Ok(Json(Deleted { deleted: true, id }))
}

pub(crate) async fn trigger(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let run: Run = scheduler(&state)
        .trigger(&id, &by)
        .await
        .map_err(engine_error)?
        .view();
    Ok((StatusCode::ACCEPTED, Json(run)).into_response())
}

pub(crate) async fn preview(
    State(state): State<ApiState>,
    TextBody(body): TextBody,
) -> Result<Json<Preview>, ApiError> {
    let req: PreviewRequest = {
        let de = &mut serde_json::Deserializer::from_str(&body);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            ApiError::invalid(vec![FieldError::new(path, e.into_inner().to_string())])
        })?
    };
    let from = match &req.from {
        Some(text) => text
            .parse::<jiff::Timestamp>()
            .map(|t| t.as_millisecond())
            .map_err(|_| {
                ApiError::invalid(vec![FieldError::new(
                    "from",
                    "must be an RFC 3339 instant with an offset",
                )])
            })?,
        None => now_ms(),
    };
    let count = req.count.unwrap_or(5).clamp(1, 100);
    let spec = ScheduleSpec {
        target: None,
        name: None,
        description: String::new(),
        enabled: true,
        trigger: req.trigger,
        action: Action::Command {
            executable: "preview".into(),
            args: Vec::new(),
        },
        cwd: None,
        env: Default::default(),
        secrets: Default::default(),
        notify: Vec::new(),
        policies: Default::default(),
        on_success: None,
        on_fail: None,
    };
    let s = scheduler(&state);
    let ctx = Context {
        default_zone: s.default_zone(),
        allowlist: None,
        secrets: None,
        endpoints: None,
        now_ms: None,
        require_name: false,
    };
    let v = validate(spec, &ctx).map_err(ApiError::invalid)?;
    let zone = v.armed.zone().map(|z| z.name.clone());
    let tz = v
        .armed
        .zone()
        .map(|z| z.tz.clone())
        .unwrap_or(jiff::tz::TimeZone::UTC);
    let fires: Vec<String> = v
        .armed
        .upcoming(from, from, count)
        .into_iter()
        .filter_map(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map(|t| {
            t.to_zoned(tz.clone())
                .strftime("%Y-%m-%dT%H:%M:%S%:z")
                .to_string()
        })
        .collect();
    let description = words::trigger(&v.spec.trigger, zone.as_deref());
    Ok(Json(Preview {
        fires,
        timezone: zone,
        description,
    }))
}

/// `GET /api/projects`.
pub(crate) async fn projects(State(state): State<ApiState>) -> Result<Json<ProjectList>, ApiError> {
    let projects = scheduler(&state)
        .reads()
        .projects()
        .await
        .map_err(store_error)?
        .into_iter()
        .map(|(name, schedules)| Project { name, schedules })
        .collect();
    Ok(Json(ProjectList { projects }))
}
