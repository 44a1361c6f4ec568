//! `/api/declarations`: plan, apply and export of ScheduleSet documents
//! (docs/DECLARATIONS.md). The rules live in `scheduling::declare` and
//! `scheduling::export`; this module reads the rows and answers, and an apply is the
//! scheduler's command (`Scheduler::apply_plan`).

use axum::{Json, extract::State};
use serde::Deserialize;
use studio_api::ChangeKind;
use studio_contract::{
    error::{ApiError, Code, Detail},
    role::Role,
    time::now_ms,
};
use studio_schedule::FieldError;

use super::{
    ApiState,
    front::{By, Caller, require_decision},
    routes::{self, QueryParams, TextBody},
    schedules::store_error,
};
use crate::scheduling::{
    declare::{self, Env, Plan, Request},
    export,
    model::ScheduleRow,
    store::PlanError,
};

/// `409 plan_has_errors`: the error body with the plan beside it, so the caller can
/// show every problem.
/// `409 plan_has_errors`, carrying the plan that was refused.
fn plan_refused(plan: &Plan) -> ApiError {
    let errors = plan
        .changes
        .iter()
        .filter(|c| c.action.kind() == ChangeKind::Error)
        .count();
    ApiError::new(
        Code::PlanHasErrors,
        format!("the plan has {errors} error(s); nothing was written"),
    )
    .with_detail(Detail {
        plan: serde_json::to_value(plan.view()).ok(),
        ..Detail::default()
    })
}

/// `409 conflict`: `name` moved since the plan the client saw.
fn moved(name: String, message: String) -> ApiError {
    ApiError::new(Code::Conflict, message).with_detail(Detail {
        name: Some(name),
        ..Detail::default()
    })
}

fn parse(body: &str) -> Result<Request, ApiError> {
    let de = &mut serde_json::Deserializer::from_str(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let reason = e.into_inner().to_string();
        // serde_json appends " at line L column C"; the path already says where.
        let reason = reason
            .split(" at line ")
            .next()
            .unwrap_or(&reason)
            .to_owned();
        ApiError::invalid(vec![FieldError::new(path, reason)])
    })
}

/// The current rows and the plan of `req` against them.
async fn planned(state: &ApiState, req: &Request) -> Result<(Vec<ScheduleRow>, Plan), ApiError> {
    let s = &state.scheduler;
    let rows = s.reads().all_schedules().await.map_err(store_error)?;
    let allowlist = s.allowlist_snapshot();
    let secrets = s.secret_names().await.map_err(store_error)?;
    let endpoints = s.reads().endpoint_names().await.map_err(store_error)?;
    let env = Env {
        default_zone: s.default_zone(),
        allowlist: &allowlist,
        secrets: Some(&secrets),
        endpoints: Some(&endpoints),
        now_ms: now_ms(),
    };
    let plan = declare::plan(&rows, req, env);
    Ok((rows, plan))
}

#[tracing::instrument(skip_all)]
pub(crate) async fn plan(
    State(state): State<ApiState>,
    TextBody(body): TextBody,
) -> Result<Json<studio_api::Plan>, ApiError> {
    let req = parse(&body)?;
    let (_, plan) = planned(&state, &req).await?;
    Ok(Json(plan.view()))
}

#[tracing::instrument(skip_all)]
pub(crate) async fn apply(
    State(state): State<ApiState>,
    By(by): By,
    who: Option<axum::Extension<Caller>>,
    headers: http::HeaderMap,
    TextBody(body): TextBody,
) -> Result<Json<studio_api::Plan>, ApiError> {
    let req = parse(&body)?;
    let (rows, plan) = planned(&state, &req).await?;
    // Applying is an operator's; removing schedules (`--prune`) an admin's, as deleting.
    let removes = plan
        .changes
        .iter()
        .any(|c| matches!(c.action, declare::Action::Delete(_)));
    if removes && !by.role.covers(Role::Admin) {
        return Err(ApiError::new(
            Code::Forbidden,
            "removing schedules (prune) needs the admin role; apply without prune, or ask an admin",
        ));
    }
    if removes {
        // Removing schedules is destructive: from a browser, its decision token too.
        let Caller(who) = routes::caller(who)?;
        require_decision(&state.authority, &who, &headers, by.origin.as_deref()).await?;
    }
    if let Some((name, message)) = declare::stale_expected(&rows, &req.expected) {
        return Err(moved(name, message));
    }
    if plan.has_errors() {
        return Err(plan_refused(&plan));
    }
    match state.scheduler.apply_plan(&plan.writes(), &by).await {
        Ok(()) => {}
        Err(PlanError::Conflict(name)) => {
            let message = format!("{name} changed meanwhile; nothing was written, plan again");
            return Err(moved(name, message));
        }
        Err(PlanError::Store(e)) => return Err(store_error(e)),
    }
    Ok(Json(plan.view()))
}

#[derive(Deserialize)]
pub(crate) struct ExportQuery {
    project: Option<String>,
}

#[tracing::instrument(skip_all)]
pub(crate) async fn export(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<ExportQuery>,
) -> Result<Json<studio_api::Export>, ApiError> {
    let rows = state
        .scheduler
        .reads()
        .all_schedules()
        .await
        .map_err(store_error)?;
    Ok(Json(export::export(&rows, query.project.as_deref()).view()))
}
