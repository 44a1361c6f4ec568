//! `/api/secrets`: names in, names out; a value only ever comes in (docs/OPERATIONS.md,
//! "Secrets").

use axum::{
    Json,
    extract::{Path, State},
    response::{IntoResponse, Response},
};
use http::StatusCode;
use studio_api::{Secret, SecretList, SecretValue};
use studio_contract::{
    error::{ApiError, FieldError},
    time::rfc3339,
};

use super::{
    ApiState,
    front::By,
    routes::TextBody,
    schedules::{engine_error, store_error},
};
use crate::{scheduling::store::SecretRow, secrets::value_problem};

fn view(row: &SecretRow, used_by: Vec<String>) -> Secret {
    Secret {
        name: row.name.clone(),
        created_at: rfc3339(row.created_at_ms),
        updated_at: rfc3339(row.updated_at_ms),
        updated_by: row.updated_by.clone(),
        used_by,
    }
}

pub(crate) async fn list(State(state): State<ApiState>) -> Result<Json<SecretList>, ApiError> {
    let store = state.scheduler.reads();
    let mut secrets = Vec::new();
    for row in store.secrets().await.map_err(store_error)? {
        let used_by = store.secret_users(&row.name).await.map_err(store_error)?;
        secrets.push(view(&row, used_by));
    }
    Ok(Json(SecretList { secrets }))
}

pub(crate) async fn set(
    State(state): State<ApiState>,
    By(by): By,
    Path(name): Path<String>,
    TextBody(body): TextBody,
) -> Result<Response, ApiError> {
    // The body is parsed here, not by a shared extractor, so no error message can
    // quote it.
    let req: SecretValue = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .filter(serde_json::Value::is_object)
        .and_then(|v| serde_json::from_value(v).ok())
        .ok_or_else(|| {
            ApiError::invalid(vec![FieldError::new(
                "value",
                "the body is {\"value\": \"…\"} and nothing else",
            )])
        })?;
    let mut errors = Vec::new();
    if !studio_schedule::is_secret_name(&name) {
        errors.push(FieldError::new(
            "name",
            "a secret's name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit",
        ));
    }
    if let Some(why) = value_problem(&req.value) {
        errors.push(FieldError::new("value", why));
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid(errors));
    }
    let s = &state.scheduler;
    let created = s
        .set_secret(&name, &req.value, &by)
        .await
        .map_err(engine_error)?;
    let row = s
        .reads()
        .secrets()
        .await
        .map_err(store_error)?
        .into_iter()
        .find(|r| r.name == name)
        .ok_or_else(|| engine_error(crate::scheduling::engine::EngineError::SecretNotFound))?;
    let used_by = s.reads().secret_users(&name).await.map_err(store_error)?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view(&row, used_by))).into_response())
}

pub(crate) async fn delete(
    State(state): State<ApiState>,
    By(by): By,
    Path(name): Path<String>,
) -> Result<Json<Secret>, ApiError> {
    let row = state
        .scheduler
        .delete_secret(&name, &by)
        .await
        .map_err(engine_error)?;
    Ok(Json(view(&row, Vec::new())))
}
