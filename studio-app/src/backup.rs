//! `POST /api/app/backup`: `app.db` copied into a directory as one consistent snapshot
//! while the app runs, for `studio backup` (docs/OPERATIONS.md, "Backups"). Only the
//! machine's owner asks: the daemon token, sent directly (no browser Origin).

use std::time::Instant;

use axum::{Extension, Json, body::Bytes, extract::State, http::HeaderMap};
use studio_api::{BackupFile, BackupRequest};
use studio_contract::error::{ApiError, Code, FieldError};

use crate::{frontdoor::Admitted, state::AppState};

pub(crate) async fn backup(
    State(state): State<AppState>,
    verdict: Option<Extension<Admitted>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<BackupFile>, ApiError> {
    let owner = verdict.is_some_and(|Extension(a)| a.principal.kind == "daemon")
        && !headers.contains_key(axum::http::header::ORIGIN);
    if !owner {
        return Err(ApiError::new(
            Code::DaemonTokenRequired,
            "only the machine's owner may: use the daemon token from a terminal on this machine",
        ));
    }
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::new(Code::BadRequest, "the body is not UTF-8"))?;
    let req: BackupRequest = serde_json::from_str(text).map_err(|e| {
        ApiError::invalid(vec![FieldError::new(
            "dir",
            format!("the body is {{\"dir\": \"/absolute/directory\"}}: {e}"),
        )])
    })?;
    let dir = studio_store::backup_dir(&req.dir)
        .map_err(|why| ApiError::invalid(vec![FieldError::new("dir", why)]))?;
    let dest = dir.join("app.db");
    let began = Instant::now();
    let bytes = match state.attention.backup_into(&dest).await {
        Ok(bytes) => bytes,
        Err(studio_store::BackupError::Exists(what)) => {
            return Err(ApiError::new(
                Code::Conflict,
                format!("{what} exists already: a backup never overwrites"),
            ));
        }
        Err(e) => {
            tracing::error!(error = %e, "backup failed");
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
    tracing::info!(file = %dest.display(), bytes, took_ms, "app.db backed up");
    Ok(Json(BackupFile {
        file: "app.db".into(),
        bytes,
        sha256,
        took_ms,
    }))
}
