//! `GET /metrics` (Prometheus text, daemon token) and `GET /api/admin/readiness`
//! (docs/OPERATIONS.md, "Health and metrics").

use std::time::Instant;

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use http::{StatusCode, header};
use studio_api::{BackupFile, BackupRequest, Readiness};
use studio_contract::error::{ApiError, Code, FieldError};
use studio_contract::time::{now_ms, rfc3339};

use super::{ApiState, front::MachineOwner, routes::TextBody, schedules::store_error};
use crate::metrics::Queued;

/// Below this many free bytes on the home's filesystem, studiod is not ready.
const DISK_FLOOR: u64 = 100 * 1024 * 1024;
/// A scheduler further behind than this is not ready.
const LAG_CEILING_MS: i64 = 60_000;
/// A probe write slower than this is not ready.
const WRITE_CEILING_MS: f64 = 5_000.0;

/// The media type of the OpenMetrics text format prometheus-client writes.
const PROMETHEUS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub(crate) async fn metrics(
    State(state): State<ApiState>,
    _owner: MachineOwner,
) -> Result<Response, ApiError> {
    let s = &state.scheduler;
    let m = s.metrics();
    let (runs, tasks) = s.reads().queue_depth().await.map_err(store_error)?;
    for (kind, n) in [("runs", runs), ("tasks", tasks)] {
        m.queue_depth
            .get_or_create(&Queued { kind: kind.into() })
            .set(n);
    }
    m.workers_connected.set(s.connected_workers());
    Ok(([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], m.render()).into_response())
}

pub(crate) async fn readiness(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let s = &state.scheduler;
    let now = now_ms();
    let mut problems = Vec::new();
    let began = Instant::now();
    let written = s.reads().probe_write(now).await;
    let store_write_ms = began.elapsed().as_secs_f64() * 1e3;
    if let Err(e) = &written {
        problems.push(format!("state.db cannot be written: {e}"));
    } else if store_write_ms > WRITE_CEILING_MS {
        problems.push(format!("a write to state.db took {store_write_ms:.0} ms"));
    }
    let (queued_runs, queued_tasks) = s.reads().queue_depth().await.map_err(store_error)?;
    let scheduler_lag_ms = s
        .reads()
        .earliest_due()
        .await
        .map_err(store_error)?
        .map_or(0, |due| (now - due).max(0));
    if scheduler_lag_ms > LAG_CEILING_MS {
        problems.push(format!(
            "the scheduler is {} s behind its earliest due instant",
            scheduler_lag_ms / 1000
        ));
    }
    let enrolled = s.reads().workers().await.map_err(store_error)?;
    let workers_enrolled = enrolled
        .iter()
        .filter(|w| w.revoked_at_ms.is_none())
        .count();
    let disk_free_bytes = free_bytes(s.home_dir());
    match disk_free_bytes {
        Some(free) if free < DISK_FLOOR => problems.push(format!(
            "the home's filesystem has {} MiB free",
            free / (1024 * 1024)
        )),
        None => problems.push("the home's free space cannot be read".into()),
        Some(_) => {}
    }
    let (last_pass, last_checkpoint) = s.reads().retention_marks().await.map_err(store_error)?;
    let body = Readiness {
        ready: problems.is_empty(),
        problems,
        store_writable: written.is_ok(),
        store_write_ms,
        scheduler_lag_ms,
        queued_runs,
        queued_tasks,
        workers_connected: s.connected_workers(),
        workers_enrolled: i64::try_from(workers_enrolled).unwrap_or(i64::MAX),
        disk_free_bytes: disk_free_bytes.unwrap_or(0),
        last_retention_pass_at: last_pass.map(rfc3339),
        last_checkpoint_at: last_checkpoint.map(rfc3339),
        checked_at: rfc3339(now),
    };
    let status = if body.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Ok((status, Json(body)).into_response())
}

/// The bytes an unprivileged writer may still use on the filesystem of `dir`.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// `POST /api/admin/backup`: `state.db` copied into `dir` (made if missing, 0700) as one
/// consistent snapshot while studiod runs; never over an existing file.
pub(crate) async fn backup(
    State(state): State<ApiState>,
    _owner: MachineOwner,
    TextBody(body): TextBody,
) -> Result<Json<BackupFile>, ApiError> {
    let req: BackupRequest =
        studio_schedule::parse_json_as(&body).map_err(|e| ApiError::invalid(vec![e]))?;
    let dir = studio_store::backup_dir(&req.dir)
        .map_err(|why| ApiError::invalid(vec![FieldError::new("dir", why)]))?;
    let dest = dir.join("state.db");
    let began = Instant::now();
    let bytes = match state.scheduler.reads().backup_into(&dest).await {
        Ok(bytes) => bytes,
        Err(studio_store::BackupError::Exists(what)) => {
            return Err(ApiError::new(
                Code::Conflict,
                format!("{what} exists already: a backup never overwrites"),
            ));
        }
        Err(e @ studio_store::BackupError::NotAFile) => {
            return Err(ApiError::new(Code::Conflict, e.to_string()));
        }
        Err(e) => {
            tracing::error!(error = %e, dir = %dir.display(), "backup failed");
            return Err(ApiError::new(
                Code::Internal,
                format!("the backup failed: {e}"),
            ));
        }
    };
    let took_ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
    let path = dest.clone();
    let sha256 = tokio::task::spawn_blocking(move || studio_contract::secret::sha256_file(&path))
        .await
        .map_err(|e| ApiError::new(Code::Internal, e.to_string()))?
        .map_err(|e| ApiError::new(Code::Internal, format!("cannot read the copy: {e}")))?;
    tracing::info!(file = %dest.display(), bytes, took_ms, "state.db backed up");
    Ok(Json(BackupFile {
        file: "state.db".into(),
        bytes,
        sha256,
        took_ms,
    }))
}
