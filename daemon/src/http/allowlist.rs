//! `/api/admin/allowlist`: the command allow-list. Any admitted caller may read it (the
//! cockpit lists it); only the machine owner changes it: the daemon token, sent directly
//! (no browser Origin, not through the app), as `studio allow add|remove` does.

use axum::{Json, extract::State, http::HeaderMap};
use serde_json::json;
use studio_api::{AllowChange, AllowChanged, AllowEntry, AllowList};
use studio_contract::{
    error::{ApiError, Code},
    forward,
    time::rfc3339,
};
use studio_schedule::FieldError;

use super::{ApiState, front::Caller, routes::JsonBody, schedules::store_error};
use crate::{
    admission::PrincipalKind,
    audit::Kind,
    scheduling::allowlist::{Change, MAX_CHANGE, entry_problem},
};

#[tracing::instrument(skip_all)]
pub(crate) async fn list(State(state): State<ApiState>) -> Result<Json<AllowList>, ApiError> {
    Ok(Json(AllowList {
        entries: entries(&state).await?,
    }))
}

/// `POST {"add": [...], "remove": [...]}`: one transaction; answers what changed and the
/// whole list.
#[tracing::instrument(skip_all)]
pub(crate) async fn change(
    State(state): State<ApiState>,
    who: Option<axum::Extension<Caller>>,
    origin: Option<axum::Extension<studio_frontdoor::door::RequestOrigin>>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<AllowChange>,
) -> Result<Json<AllowChanged>, ApiError> {
    // A browser sends an Origin on every POST; the app signs what it forwards.
    let from_browser =
        origin.is_some_and(|o| o.0.0.is_some()) || headers.contains_key(forward::SIGNATURE_HEADER);
    let Some(axum::Extension(Caller(who))) = who else {
        return Err(ApiError::new(Code::Unauthorized, "missing bearer token"));
    };
    if who.kind != PrincipalKind::Daemon || from_browser {
        return Err(ApiError::new(
            Code::DaemonTokenRequired,
            "only the machine's owner changes the allow-list: run `studio allow add|remove` \
             in a terminal",
        ));
    }
    check(&body)?;
    let Change { added, removed } = state
        .scheduler
        .change_allowlist(&body.add, &body.remove, who.kind.as_str())
        .await
        .map_err(store_error)?;
    if !added.is_empty() || !removed.is_empty() {
        tracing::info!(?added, ?removed, "command allow-list changed");
        state
            .authority
            .audit()
            .record(
                Kind::AllowlistChanged,
                Some(&who.id),
                json!({ "added": added, "removed": removed }),
            )
            .await;
    }
    Ok(Json(AllowChanged {
        entries: entries(&state).await?,
        added,
        removed,
    }))
}

fn check(body: &AllowChange) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    if body.add.is_empty() && body.remove.is_empty() {
        errors.push(FieldError::new(
            "",
            "name at least one executable to add or remove",
        ));
    }
    for (field, list) in [("add", &body.add), ("remove", &body.remove)] {
        if list.len() > MAX_CHANGE {
            errors.push(FieldError::new(field, "names more than 256 executables"));
            continue;
        }
        for (i, entry) in list.iter().enumerate() {
            if let Some(why) = entry_problem(entry) {
                errors.push(FieldError::new(format!("{field}[{i}]"), why));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(errors))
    }
}

async fn entries(state: &ApiState) -> Result<Vec<AllowEntry>, ApiError> {
    let entries = state
        .scheduler
        .allowlist_entries()
        .await
        .map_err(store_error)?;
    Ok(entries
        .into_iter()
        .map(|(e, resolved)| AllowEntry {
            executable: e.executable,
            resolved: resolved.map(|p| p.display().to_string()),
            added_at: rfc3339(e.added_at_ms),
            added_by: e.added_by,
        })
        .collect())
}
