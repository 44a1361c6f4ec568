//! `/api/notify`: endpoints (made with a signing secret shown once), test deliveries, and
//! the deliveries with their attempts (docs/OPERATIONS.md, "Notifications").

use axum::{
    Json,
    extract::{Path, State},
    response::{IntoResponse, Response},
};
use http::StatusCode;
use serde::Deserialize;
use studio_api::{
    Delivery, DeliveryAttempt, DeliveryList, DeliveryStatus, Endpoint, EndpointCreated,
    EndpointFormat, EndpointList, NewEndpoint,
};
use studio_contract::{
    error::{ApiError, Code, FieldError},
    time::rfc3339,
};

use super::{
    ApiState,
    front::By,
    routes::{QueryParams, TextBody},
    schedules::{engine_error, store_error},
};
use crate::scheduling::{
    notify::is_own,
    store::{DeliveryFilter, DeliveryRow, EndpointRow},
};

/// The longest URL an endpoint may have.
const MAX_URL: usize = 2_048;

fn format_of(text: &str) -> EndpointFormat {
    if text == "slack" {
        EndpointFormat::Slack
    } else {
        EndpointFormat::Json
    }
}

/// `url` as listed: its scheme, host and port, and `/…` for the rest. A webhook's path is
/// often its credential (Slack's is), so no answer or audit row shows it.
pub(crate) fn shown_url(url: &str) -> String {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return "…".into();
    };
    let origin = parsed.origin().ascii_serialization();
    if parsed.path() == "/" && parsed.query().is_none() {
        format!("{origin}/")
    } else {
        format!("{origin}/…")
    }
}

fn view(row: &EndpointRow, used_by: Vec<String>) -> Endpoint {
    Endpoint {
        name: row.name.clone(),
        url: shown_url(&row.url),
        format: format_of(&row.format),
        created_at: rfc3339(row.created_at_ms),
        created_by: row.created_by.clone(),
        used_by,
    }
}

/// Why `url` cannot be an endpoint's, if it cannot: not `http(s)`, credentials in it, or
/// one of this machine's own Studio listeners (as written; delivery checks the resolved
/// addresses again).
fn url_problem(url: &str, own_ports: &[u16]) -> Option<String> {
    if url.len() > MAX_URL {
        return Some(format!("at most {MAX_URL} bytes"));
    }
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return Some("not a URL".into());
    };
    if !matches!(parsed.scheme(), "http" | "https") {
        return Some("must be http or https".into());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Some(
            "must not hold credentials (it is listed; the signature authenticates)".into(),
        );
    }
    let Some(host) = parsed.host_str() else {
        return Some("names no host".into());
    };
    let port = parsed.port_or_known_default().unwrap_or(0);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let local = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| is_own(&std::net::SocketAddr::new(ip, port), own_ports));
    (local && own_ports.contains(&port))
        .then(|| "points at one of this machine's own Studio listeners".into())
}

pub(crate) async fn list(State(state): State<ApiState>) -> Result<Json<EndpointList>, ApiError> {
    let store = state.scheduler.reads();
    let mut endpoints = Vec::new();
    for row in store.endpoints().await.map_err(store_error)? {
        let used_by = store.endpoint_users(&row.name).await.map_err(store_error)?;
        endpoints.push(view(&row, used_by));
    }
    Ok(Json(EndpointList { endpoints }))
}

pub(crate) async fn create(
    State(state): State<ApiState>,
    By(by): By,
    TextBody(body): TextBody,
) -> Result<Response, ApiError> {
    let req: NewEndpoint =
        studio_schedule::parse_json_as(&body).map_err(|e| ApiError::invalid(vec![e]))?;
    let s = &state.scheduler;
    let mut errors = Vec::new();
    if !studio_schedule::is_secret_name(&req.name) {
        errors.push(FieldError::new(
            "name",
            "an endpoint's name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit",
        ));
    }
    if let Some(why) = url_problem(&req.url, s.own_ports()) {
        errors.push(FieldError::new("url", why));
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid(errors));
    }
    let made = s
        .create_endpoint(&req.name, &req.url, req.format.as_str(), &by)
        .await
        .map_err(engine_error)?;
    let Some((row, signing_secret)) = made else {
        return Err(ApiError::new(
            Code::NameTaken,
            format!("an endpoint named {:?} exists", req.name),
        ));
    };
    let created = EndpointCreated {
        endpoint: view(&row, Vec::new()),
        signing_secret,
    };
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub(crate) async fn delete(
    State(state): State<ApiState>,
    By(by): By,
    Path(name): Path<String>,
) -> Result<Json<Endpoint>, ApiError> {
    let row = state
        .scheduler
        .delete_endpoint(&name, &by)
        .await
        .map_err(engine_error)?;
    Ok(Json(view(&row, Vec::new())))
}

pub(crate) async fn test(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let s = &state.scheduler;
    let id = s.test_endpoint(&name).await.map_err(engine_error)?;
    let filter = DeliveryFilter {
        endpoint: Some(name),
        limit: 50,
        ..DeliveryFilter::default()
    };
    let row = s
        .reads()
        .deliveries(&filter)
        .await
        .map_err(store_error)?
        .into_iter()
        .find(|d| d.id == id)
        .ok_or_else(|| ApiError::new(Code::Internal, "the test delivery was not queued"))?;
    let delivery = delivery(&state, row).await?;
    Ok((StatusCode::ACCEPTED, Json(delivery)).into_response())
}

#[derive(Deserialize)]
pub(crate) struct DeliveriesQuery {
    run: Option<String>,
    endpoint: Option<String>,
    status: Option<String>,
    limit: Option<i64>,
}

pub(crate) async fn deliveries(
    State(state): State<ApiState>,
    QueryParams(q): QueryParams<DeliveriesQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    let status = match q.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s @ ("pending" | "delivered" | "dead")) => Some(s.to_owned()),
        Some(_) => {
            return Err(ApiError::invalid(vec![FieldError::new(
                "status",
                "must be pending, delivered or dead",
            )]));
        }
    };
    let filter = DeliveryFilter {
        run_id: q.run.filter(|r| !r.is_empty()),
        endpoint: q.endpoint.filter(|e| !e.is_empty()),
        status,
        limit: q.limit.unwrap_or(50).clamp(1, 500),
    };
    let rows = state
        .scheduler
        .reads()
        .deliveries(&filter)
        .await
        .map_err(store_error)?;
    let mut deliveries = Vec::with_capacity(rows.len());
    for row in rows {
        deliveries.push(delivery(&state, row).await?);
    }
    Ok(Json(DeliveryList { deliveries }))
}

async fn delivery(state: &ApiState, row: DeliveryRow) -> Result<Delivery, ApiError> {
    let attempts = state
        .scheduler
        .reads()
        .attempts_of(&row.id)
        .await
        .map_err(store_error)?
        .into_iter()
        .map(|a| DeliveryAttempt {
            n: a.n,
            at: rfc3339(a.at_ms),
            took_ms: a.took_ms,
            status: a.status,
            detail: a.detail,
        })
        .collect();
    Ok(Delivery {
        id: row.id,
        endpoint: row.endpoint,
        event: row.event,
        run_id: row.run_id,
        schedule_id: row.schedule_id,
        task_id: row.task_id,
        status: match row.status.as_str() {
            "delivered" => DeliveryStatus::Delivered,
            "dead" => DeliveryStatus::Dead,
            _ => DeliveryStatus::Pending,
        },
        next_attempt_at: row.next_attempt_at_ms.map(rfc3339),
        created_at: rfc3339(row.created_at_ms),
        delivered_at: row.delivered_at_ms.map(rfc3339),
        attempts,
    })
}
