//! `/api/tasks`: submit a task (idempotent; `429 queue_full` with `Retry-After` when its
//! concurrency key's queue is full), list, show with its attempts, cancel.

use axum::{
    Json,
    extract::{Path, State},
    response::{IntoResponse, Response},
};
use http::{HeaderValue, StatusCode, header};
use serde::Deserialize;
use studio_api::{RunListItem, TASK_STATUSES, Task, TaskDetail, TaskPage, TaskStatus};
use studio_contract::{
    error::{ApiError, Code},
    time::rfc3339,
};
use studio_schedule::{Context, TaskSpec, validate_task};

use super::{
    ApiState, cursor,
    front::By,
    routes::{QueryParams, TextBody},
    schedules::{engine_error, store_error},
};
use crate::scheduling::{
    engine::EngineError,
    store::{TaskFilter, TaskRow, serves},
};

/// What `Retry-After` says to a submission refused `queue_full`, in seconds.
const QUEUE_FULL_RETRY_AFTER_S: u32 = 5;

/// The API's view of a task. `unmatched` when no worker (of the label sets `served`)
/// has its labels.
pub(crate) fn view(t: &TaskRow, served: &[Vec<String>]) -> Result<Task, ApiError> {
    let spec: TaskSpec = serde_json::from_str(&t.spec).map_err(|e| {
        tracing::error!(task = %t.id, error = %e, "a stored task spec does not read back");
        ApiError::new(
            Code::Internal,
            format!("the stored spec of task {} cannot be read", t.id),
        )
    })?;
    let status = t.status().unwrap_or(TaskStatus::Failed);
    Ok(Task {
        id: t.id.clone(),
        status,
        reason: t.reason.clone(),
        spec,
        spec_sha256: t.spec_sha256.clone(),
        unmatched: status == TaskStatus::Queued
            && !served.iter().any(|labels| serves(labels, &t.labels_key)),
        attempts: t.attempts,
        next_attempt_at: t.next_attempt_at_ms.map(rfc3339),
        last_run_id: t.last_run_id.clone(),
        submitted_by: t.submitted_by.clone(),
        created_at: rfc3339(t.created_at_ms),
        updated_at: rfc3339(t.updated_at_ms),
        finished_at: t.finished_at_ms.map(rfc3339),
    })
}

pub(crate) async fn submit(
    State(state): State<ApiState>,
    By(by): By,
    TextBody(body): TextBody,
) -> Result<Response, ApiError> {
    let spec: TaskSpec =
        studio_schedule::parse_json_as(&body).map_err(|e| ApiError::invalid(vec![e]))?;
    let s = &state.scheduler;
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
        now_ms: None,
        require_name: false,
    };
    let spec = validate_task(spec, &ctx).map_err(ApiError::invalid)?;
    match s.submit_task(&spec, &by).await {
        Ok((task, created)) => {
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok((status, Json(view(&task, &served(s).await?)?)).into_response())
        }
        Err(EngineError::QueueFull) => {
            let mut response = engine_error(EngineError::QueueFull).into_response();
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(QUEUE_FULL_RETRY_AFTER_S),
            );
            Ok(response)
        }
        Err(e) => Err(engine_error(e)),
    }
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    /// Comma-separated statuses.
    status: Option<String>,
    label: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

pub(crate) async fn list(
    State(state): State<ApiState>,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<TaskPage>, ApiError> {
    let statuses = cursor::words(
        q.status.as_deref(),
        "status",
        &TASK_STATUSES,
        TaskStatus::parse,
    )?;
    let label = q.label.filter(|l| !l.is_empty());
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    let words: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
    let list = format!(
        "tasks|status={}|label={}",
        words.join(","),
        label.as_deref().unwrap_or_default()
    );
    let before = q
        .cursor
        .as_deref()
        .map(|c| cursor::decode_keyset(c, &list))
        .transpose()?;
    let rows = state
        .scheduler
        .reads()
        .tasks(&TaskFilter {
            statuses,
            label,
            before,
            limit: limit + 1,
        })
        .await
        .map_err(store_error)?;
    let keep = rows.len().min(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_cursor = (rows.len() > keep)
        .then(|| {
            rows.get(keep - 1)
                .map(|r| cursor::encode_keyset(&list, (r.created_at_ms, &r.id)))
        })
        .flatten();
    let served = served(&state.scheduler).await?;
    let tasks = rows
        .iter()
        .take(keep)
        .map(|t| view(t, &served))
        .collect::<Result<_, _>>()?;
    Ok(Json(TaskPage { tasks, next_cursor }))
}

pub(crate) async fn get_one(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<TaskDetail>, ApiError> {
    let store = state.scheduler.reads();
    let task = store
        .task(&id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| engine_error(EngineError::TaskNotFound))?;
    let mut attempts = Vec::new();
    for run in store.task_attempts(&id).await.map_err(store_error)? {
        if let Some(run) = store.run(&run).await.map_err(store_error)? {
            attempts.push(RunListItem { core: run.core() });
        }
    }
    Ok(Json(TaskDetail {
        task: view(&task, &served(&state.scheduler).await?)?,
        attempts,
    }))
}

pub(crate) async fn retry(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
) -> Result<Json<Task>, ApiError> {
    let task = state
        .scheduler
        .retry_task(&id, &by)
        .await
        .map_err(engine_error)?;
    Ok(Json(view(&task, &served(&state.scheduler).await?)?))
}

pub(crate) async fn cancel(
    State(state): State<ApiState>,
    By(by): By,
    Path(id): Path<String>,
) -> Result<Json<Task>, ApiError> {
    let task = state
        .scheduler
        .cancel_task(&id, &by)
        .await
        .map_err(engine_error)?;
    Ok(Json(view(&task, &served(&state.scheduler).await?)?))
}

/// The label sets the queue is served by (the built-in worker's and each enrolled one's).
async fn served(s: &crate::scheduling::Scheduler) -> Result<Vec<Vec<String>>, ApiError> {
    s.served_label_sets().await.map_err(store_error)
}
