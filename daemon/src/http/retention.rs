//! `/api/admin/retention` (the policy and the latest passes; a pass on request) and
//! `/api/admin/archives/restore` (docs/OPERATIONS.md, "Retention and archives"). A pass
//! on request and a restore name paths on this machine: only its owner asks, with the
//! daemon token from a terminal.

use axum::{Json, extract::State};
use studio_api::types::{
    ArchiveRestoreRequest, ArchiveRestored, RetentionPass, RetentionPolicy, RetentionRunRequest,
    RetentionState,
};
use studio_contract::{
    error::{ApiError, Code, FieldError},
    time::rfc3339,
};

use super::{
    ApiState,
    front::{By, MachineOwner},
    routes::TextBody,
    schedules::{engine_error, store_error},
};
use crate::scheduling::{
    retention::{RetentionError, check_policy},
    store::PassRow,
};

/// How many passes `GET /api/admin/retention` shows.
const PASSES_SHOWN: i64 = 10;

pub(crate) fn pass_view(p: PassRow) -> RetentionPass {
    RetentionPass {
        id: p.id,
        trigger: p.trigger,
        started_at: rfc3339(p.started_at_ms),
        finished_at: p.finished_at_ms.map(rfc3339),
        outcome: p.outcome,
        error: p.error,
        archive_dir: p.archive_dir,
        pruned: p.pruned,
        archives: p.archives,
        chunks: p.chunks,
        longest_chunk_ms: p.longest_chunk_ms,
        checkpoint: p.checkpoint,
    }
}

fn retention_error(e: RetentionError) -> ApiError {
    match e {
        RetentionError::Busy => ApiError::new(
            Code::Busy,
            "a retention pass is running; try again when it has ended",
        ),
        RetentionError::Invalid(why) => ApiError::new(Code::ValidationFailed, why),
        RetentionError::Exists(why) => ApiError::new(Code::Conflict, why),
        RetentionError::Engine(e) => engine_error(e),
    }
}

async fn state_of(state: &ApiState) -> Result<RetentionState, ApiError> {
    let s = &state.scheduler;
    let (policy, row) = s.retention_policy().await.map_err(engine_error)?;
    let passes = s
        .reads()
        .retention_passes(PASSES_SHOWN)
        .await
        .map_err(store_error)?;
    Ok(RetentionState {
        policy,
        source: row
            .as_ref()
            .map_or_else(|| "default".to_owned(), |r| r.source.clone()),
        updated_at: row.as_ref().map(|r| rfc3339(r.updated_at_ms)),
        updated_by: row.and_then(|r| r.updated_by),
        next_pass_at: s.next_retention_pass_ms().map(rfc3339),
        passes: passes.into_iter().map(pass_view).collect(),
    })
}

pub(crate) async fn get(State(state): State<ApiState>) -> Result<Json<RetentionState>, ApiError> {
    Ok(Json(state_of(&state).await?))
}

pub(crate) async fn set(
    State(state): State<ApiState>,
    owner: Result<MachineOwner, ApiError>,
    By(by): By,
    TextBody(body): TextBody,
) -> Result<Json<RetentionState>, ApiError> {
    let policy: RetentionPolicy =
        studio_schedule::parse_json_as(&body).map_err(|e| ApiError::invalid(vec![e]))?;
    let errors = check_policy(&policy);
    if !errors.is_empty() {
        return Err(ApiError::invalid(errors));
    }
    // Where studiod writes files is a path on this machine: its owner's to name, not a
    // browser's (which may keep the one set).
    let (current, _) = state
        .scheduler
        .retention_policy()
        .await
        .map_err(engine_error)?;
    if let Err(refused) = owner
        && policy.archive_dir != current.archive_dir
    {
        return Err(refused);
    }
    match state.scheduler.set_retention_policy(&policy, &by).await {
        Ok(()) => {}
        Err(RetentionError::Invalid(why)) => return Err(ApiError::new(Code::Conflict, why)),
        Err(e) => return Err(retention_error(e)),
    }
    Ok(Json(state_of(&state).await?))
}

pub(crate) async fn run(
    State(state): State<ApiState>,
    _owner: MachineOwner,
    TextBody(body): TextBody,
) -> Result<Json<RetentionPass>, ApiError> {
    let req: RetentionRunRequest = if body.trim().is_empty() {
        RetentionRunRequest::default()
    } else {
        studio_schedule::parse_json_as(&body).map_err(|e| ApiError::invalid(vec![e]))?
    };
    if let Some(dir) = &req.archive_dir
        && (!std::path::Path::new(dir).is_absolute() || dir.contains('\0'))
    {
        return Err(ApiError::invalid(vec![FieldError::new(
            "archive_dir",
            "must be an absolute directory",
        )]));
    }
    // Its own task: a client that goes away (Ctrl-C) does not cut a pass short between
    // a chunk's archive and its delete.
    let scheduler = state.scheduler.clone();
    let pass = tokio::spawn(async move {
        scheduler
            .retention_pass("request", req.archive_dir.as_deref())
            .await
    })
    .await
    .map_err(|e| ApiError::new(Code::Internal, format!("the pass stopped: {e}")))?
    .map_err(retention_error)?;
    Ok(Json(pass_view(pass)))
}

pub(crate) async fn restore(
    State(state): State<ApiState>,
    _owner: MachineOwner,
    By(by): By,
    TextBody(body): TextBody,
) -> Result<Json<ArchiveRestored>, ApiError> {
    let req: ArchiveRestoreRequest =
        studio_schedule::parse_json_as(&body).map_err(|e| ApiError::invalid(vec![e]))?;
    let file = std::path::Path::new(&req.file);
    if !file.is_absolute() || req.file.contains('\0') {
        return Err(ApiError::invalid(vec![FieldError::new(
            "file",
            "must be an absolute path to an archive",
        )]));
    }
    let (scheduler, file) = (state.scheduler.clone(), file.to_path_buf());
    let restored = tokio::spawn(async move { scheduler.restore_archive(&file, &by).await })
        .await
        .map_err(|e| ApiError::new(Code::Internal, format!("the restore stopped: {e}")))?
        .map_err(retention_error)?;
    tracing::info!(archive = %restored.archive_id, kind = %restored.kind, "archive restored");
    Ok(Json(restored))
}
