//! `/api/runs`: the filtered, cursor-paginated list, one run with its status history,
//! ranged reads of its full logs, and cancel.

use std::io::SeekFrom;

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use studio_api::{QueuePlace, Run, RunDetail, RunListItem, RunPage};
use studio_contract::error::{ApiError, Code};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::{
    ApiState, cursor,
    front::{By, Caller, require_decision},
    routes::QueryParams,
    schedules::{engine_error, store_error},
};
use crate::scheduling::{
    model::RunStatus,
    store::{ApprovalFilter, RunFilter},
};

/// The most a single log read returns.
const LOG_READ_MAX: u64 = 1024 * 1024;

fn run_not_found() -> ApiError {
    ApiError::new(Code::RunNotFound, "no such run")
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    schedule: Option<String>,
    /// The schedule by its name (an unknown name is `404 schedule_not_found`).
    schedule_name: Option<String>,
    /// Text the schedule name contains (any case).
    q: Option<String>,
    /// The part of a schedule name before its first `/`.
    project: Option<String>,
    /// Comma-separated statuses.
    status: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

pub(super) fn instant(name: &str, text: Option<&str>) -> Result<Option<i64>, ApiError> {
    text.map(|t| {
        t.parse::<jiff::Timestamp>()
            .map(|ts| ts.as_millisecond())
            .map_err(|_| {
                ApiError::new(
                    Code::BadRequest,
                    format!("{name} must be an RFC 3339 instant with an offset"),
                )
            })
    })
    .transpose()
}

pub(crate) async fn list(
    State(state): State<ApiState>,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<RunPage>, ApiError> {
    list_filtered(&state, q, None).await
}

pub(crate) async fn list_for_schedule(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<RunPage>, ApiError> {
    if state
        .scheduler
        .reads()
        .schedule(&id)
        .await
        .map_err(store_error)?
        .is_none()
    {
        return Err(ApiError::new(Code::ScheduleNotFound, "no such schedule"));
    }
    list_filtered(&state, q, Some(id)).await
}

async fn list_filtered(
    state: &ApiState,
    q: ListQuery,
    schedule: Option<String>,
) -> Result<Json<RunPage>, ApiError> {
    let statuses = cursor::words(
        q.status.as_deref(),
        "status",
        &RunStatus::WORDS,
        RunStatus::parse,
    )?;
    let text = |t: Option<String>| t.filter(|t| !t.is_empty());
    let (name_contains, project) = (text(q.q), text(q.project));
    let store = state.scheduler.reads();
    let named = match q.schedule_name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => Some(
            store
                .schedule_id_named(name)
                .await
                .map_err(store_error)?
                .ok_or_else(|| {
                    ApiError::new(
                        Code::ScheduleNotFound,
                        format!("no schedule named {name:?}"),
                    )
                })?,
        ),
        None => None,
    };
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    let schedule_id = schedule.or(named).or(q.schedule);
    let (since_ms, until_ms) = (
        instant("since", q.since.as_deref())?,
        instant("until", q.until.as_deref())?,
    );
    // The list a cursor belongs to: every filter, resolved (a name and its id are one).
    let list = format!(
        "runs|schedule={}|status={}|q={}|project={}|since={}|until={}",
        schedule_id.as_deref().unwrap_or_default(),
        statuses
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(","),
        name_contains.as_deref().unwrap_or_default(),
        project.as_deref().unwrap_or_default(),
        since_ms.map(|m| m.to_string()).unwrap_or_default(),
        until_ms.map(|m| m.to_string()).unwrap_or_default(),
    );
    let before = q
        .cursor
        .as_deref()
        .map(|c| cursor::decode_keyset(c, &list))
        .transpose()?;
    let filter = RunFilter {
        schedule_id,
        statuses,
        name_contains,
        project,
        since_ms,
        until_ms,
        before,
        limit: limit + 1,
    };
    let rows = store.list_runs(&filter).await.map_err(store_error)?;
    let keep = rows.len().min(usize::try_from(limit).unwrap_or(usize::MAX));
    let next = (rows.len() > keep)
        .then(|| {
            rows.get(keep - 1)
                .map(|r| cursor::encode_keyset(&list, (r.created_at_ms, &r.id)))
        })
        .flatten();
    // A list carries no log tails (up to 128 KiB a run): `GET /api/runs/{id}` has them.
    // Each run carries the name it ran under.
    let runs = rows[..keep]
        .iter()
        .map(|r| RunListItem { core: r.core() })
        .collect();
    Ok(Json(RunPage {
        runs,
        next_cursor: next,
    }))
}

pub(crate) async fn get_one(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<RunDetail>, ApiError> {
    let store = state.scheduler.reads();
    let run = store
        .run(&id)
        .await
        .map_err(store_error)?
        .ok_or_else(run_not_found)?;
    let transitions = store
        .transitions(&id)
        .await
        .map_err(store_error)?
        .iter()
        .map(|t| t.view())
        .collect();
    let queue = if run.status() == Some(RunStatus::Queued) {
        let ahead = store
            .queued_before(run.created_at_ms, &run.id)
            .await
            .map_err(store_error)?;
        let (running, slots) = state.scheduler.slots_taken();
        Some(QueuePlace {
            running: i64::try_from(running).unwrap_or(i64::MAX),
            slots: i64::try_from(slots).unwrap_or(i64::MAX),
            ahead,
        })
    } else {
        None
    };
    let (approvals, evidence) = if run.approval_id.is_some() {
        let filter = ApprovalFilter {
            run_id: Some(run.id.clone()),
            limit: 100,
            ..ApprovalFilter::default()
        };
        let mut approvals = store.approvals(&filter).await.map_err(store_error)?;
        approvals.reverse();
        let evidence = store.run_evidence(&id).await.map_err(store_error)?;
        (
            approvals.iter().map(super::approvals::view).collect(),
            evidence
                .into_iter()
                .map(super::approvals::evidence_view)
                .collect(),
        )
    } else {
        (Vec::new(), Vec::new())
    };
    Ok(Json(RunDetail {
        run: run.view(),
        transitions,
        queue,
        approvals,
        evidence,
    }))
}

#[derive(Deserialize)]
pub(crate) struct LogQuery {
    stream: Option<String>,
    offset: Option<u64>,
    limit: Option<u64>,
}

pub(crate) async fn log(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<LogQuery>,
) -> Result<Response, ApiError> {
    let stream = match q.stream.as_deref().unwrap_or("stdout") {
        s @ ("stdout" | "stderr") => s,
        other => {
            return Err(ApiError::new(
                Code::BadRequest,
                format!("stream must be stdout or stderr, not {other:?}"),
            ));
        }
    };
    let Some(run) = state
        .scheduler
        .reads()
        .run(&id)
        .await
        .map_err(store_error)?
    else {
        return Err(run_not_found());
    };
    // The id came from the store, so it names a folder of ours, not a path of the caller's.
    let path = state.scheduler.run_log(&id, stream);
    let offset = q.offset.unwrap_or(0);
    let limit = q.limit.unwrap_or(64 * 1024).clamp(1, LOG_READ_MAX);
    let (size, bytes) = match tokio::fs::File::open(&path).await {
        Ok(mut file) => {
            let size = file.metadata().await.map(|m| m.len()).unwrap_or(0);
            let mut buf = Vec::new();
            if offset < size {
                file.seek(SeekFrom::Start(offset)).await.map_err(|e| {
                    ApiError::new(Code::Internal, format!("cannot read the log: {e}"))
                })?;
                file.take(limit).read_to_end(&mut buf).await.map_err(|e| {
                    ApiError::new(Code::Internal, format!("cannot read the log: {e}"))
                })?;
            }
            (size, buf)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            output_elsewhere(&state, run.member_id.as_deref()).await?;
            (0, Vec::new())
        }
        Err(e) => {
            return Err(ApiError::new(
                Code::Internal,
                format!("cannot read the log: {e}"),
            ));
        }
    };
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-studio-log-size", HeaderValue::from(size));
    Ok(response)
}

/// On a shared database a run's output is kept in the home of the member that ran it
/// (for a worker's attempt, the member the worker streamed it to): asked through another
/// member, say which one holds it rather than answer an empty log.
async fn output_elsewhere(state: &ApiState, member: Option<&str>) -> Result<(), ApiError> {
    let reads = state.scheduler.reads();
    let Some(member) = member.filter(|m| *m != reads.member()) else {
        return Ok(());
    };
    if reads.shared_url().is_none() {
        return Ok(());
    }
    let cluster = reads.cluster().await.map_err(store_error)?;
    let host = cluster
        .members
        .iter()
        .find(|m| m.id == member)
        .map_or_else(|| "a host no longer listed".to_owned(), |m| m.host.clone());
    Err(ApiError::new(
        Code::OutputElsewhere,
        format!(
            "this run's output is kept by member {member} on {host}: read it through that \
             member's API or studio-app (`studio cluster` lists the members)"
        ),
    ))
}

/// Cancelling a run another session asked for is destructive: from a browser it needs
/// this browser's decision token (its own runs, and the clock's, need none).
pub(crate) async fn cancel(
    State(state): State<ApiState>,
    By(by): By,
    who: Option<axum::Extension<Caller>>,
    headers: http::HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    let Caller(who) = super::routes::caller(who)?;
    let requester = state
        .scheduler
        .reads()
        .run_requester(&id)
        .await
        .map_err(store_error)?;
    if requester.is_some_and(|r| r != who.id) {
        require_decision(&state.authority, &who, &headers, by.origin.as_deref()).await?;
    }
    let row = state
        .scheduler
        .cancel_run(&id, &by)
        .await
        .map_err(engine_error)?;
    Ok(Json(row.view()))
}
