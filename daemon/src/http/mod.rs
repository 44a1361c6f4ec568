//! The loopback HTTP API: its state, its router and its graceful serving. Later routes
//! (schedules, runs, …) join `router` and read what they need from [`ApiState`].

mod allowlist;
mod cursor;
mod declarations;
mod events;
mod front;
mod routes;
mod runs;
mod schedules;
mod summary;

#[cfg(test)]
mod tests;

use std::{future::Future, sync::Arc};

use axum::{
    Router,
    extract::DefaultBodyLimit,
    middleware::{from_fn, from_fn_with_state},
    routing::{delete, get, post},
};
use tokio::net::TcpListener;

pub(crate) use front::FrontDoor;

use crate::{admission::Authority, scheduling::Scheduler};

/// Bodies beyond this are refused with `payload_too_large`.
pub(crate) const BODY_LIMIT: usize = studio_contract::API_BODY_LIMIT;

#[derive(Clone)]
pub(crate) struct ApiState {
    pub authority: Arc<Authority>,
    pub front: Arc<FrontDoor>,
    pub scheduler: Arc<Scheduler>,
    /// When this daemon (its epoch) started, in ms since the Unix epoch.
    pub started_at_ms: i64,
}

pub(crate) fn router(state: ApiState) -> Router {
    Router::new()
        .route("/health", get(routes::health))
        .route("/api/identity", get(routes::identity))
        .route("/api/studio/pair", post(routes::pair))
        .route("/api/studio/disconnect", post(routes::disconnect))
        .route("/api/studio/sessions", get(routes::sessions))
        .route("/api/studio/sessions/{id}", delete(routes::revoke_session))
        .route(
            "/api/schedules",
            get(schedules::list).post(schedules::create),
        )
        .route("/api/schedules/preview", post(schedules::preview))
        .route(
            "/api/schedules/{id}",
            get(schedules::get_one)
                .patch(schedules::patch)
                .delete(schedules::delete),
        )
        .route("/api/schedules/{id}/enable", post(schedules::enable))
        .route("/api/schedules/{id}/disable", post(schedules::disable))
        .route("/api/schedules/{id}/trigger", post(schedules::trigger))
        .route("/api/schedules/{id}/runs", get(runs::list_for_schedule))
        .route("/api/summary", get(summary::summary))
        .route("/api/runs", get(runs::list))
        .route("/api/runs/{id}", get(runs::get_one))
        .route("/api/runs/{id}/log", get(runs::log))
        .route("/api/runs/{id}/cancel", post(runs::cancel))
        .route("/api/events", get(events::stream))
        .route(
            "/api/admin/allowlist",
            get(allowlist::list).post(allowlist::change),
        )
        .route("/api/declarations/plan", post(declarations::plan))
        .route("/api/declarations/apply", post(declarations::apply))
        .route("/api/declarations/export", get(declarations::export))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        // Layers listed innermost first: the last one added sees the request first.
        .layer(from_fn_with_state(state.clone(), front::bearer))
        .layer(from_fn(front::json_content_type))
        .layer(from_fn_with_state(state.clone(), front::cors))
        .layer(from_fn_with_state(state.clone(), front::forwarded_origin))
        .layer(from_fn_with_state(state.clone(), front::host))
        .layer(from_fn(front::trace))
        .with_state(state)
}

/// Serves until `shutdown` resolves, then lets in-flight requests finish.
pub(crate) async fn serve(
    listener: TcpListener,
    state: ApiState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
