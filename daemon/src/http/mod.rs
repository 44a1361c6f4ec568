//! The loopback HTTP API: its state, its router (built from the shared route inventory)
//! and its graceful serving.

mod allowlist;
mod approvals;
mod apps;
mod audit;
mod cluster;
mod cursor;
mod declarations;
mod events;
mod front;
mod health;
mod notify;
mod retention;
mod routes;
mod runs;
mod schedules;
mod secrets;
mod summary;
mod tasks;
mod workers;

#[cfg(test)]
mod tests;

use std::{future::Future, sync::Arc};
use studio_contract::lifecycle::Shutdown;

use axum::{
    Router,
    extract::DefaultBodyLimit,
    routing::{MethodFilter, MethodRouter, on},
};
use studio_api::routes::{Op, ROUTES};
use tokio::net::{TcpListener, UnixListener};

pub(crate) use front::FrontDoor;
pub(crate) use notify::shown_url;

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
    /// The worker listener, when there is one (join tokens name it and pin its authority).
    pub workers: Option<Arc<crate::workers::JoinDoor>>,
    /// The apps listener, when there is one (app join tokens name it and pin its
    /// authority).
    pub apps: Option<Arc<crate::workers::JoinDoor>>,
}

/// studiod's router: one route per line of the shared inventory
/// ([`studio_api::routes::ROUTES`]), each served by the handler of its operation.
pub(crate) fn router(state: ApiState) -> Router {
    let metrics = state.scheduler.metrics().clone();
    let router = studio_frontdoor::router_of(ROUTES.iter().map(|route| {
        let filter = studio_frontdoor::method_filter(route.method.http());
        let timed = axum::middleware::from_fn_with_state((metrics.clone(), route.id), timed);
        (route.path, handler(route.op, filter).layer(timed))
    }))
    .fallback(studio_frontdoor::door::not_found)
    .method_not_allowed_fallback(studio_frontdoor::door::method_not_allowed)
    .layer(DefaultBodyLimit::max(BODY_LIMIT));
    let door = Arc::new(state.front.door(state.authority.clone()));
    door.guard(router.with_state(state))
}

/// Times each answer of one operation (its id) into the metrics.
async fn timed(
    axum::extract::State((metrics, id)): axum::extract::State<(
        Arc<crate::metrics::Metrics>,
        &'static str,
    )>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let began = std::time::Instant::now();
    let method = req.method().clone();
    let answer = next.run(req).await;
    metrics.answered(
        id,
        method.as_str(),
        answer.status().as_u16(),
        began.elapsed(),
    );
    answer
}

/// The handler of each operation (a `GET` handler answers `HEAD` too).
fn handler(op: Op, m: MethodFilter) -> MethodRouter<ApiState> {
    match op {
        Op::Health => on(m, routes::health),
        Op::Metrics => on(m, health::metrics),
        Op::Readiness => on(m, health::readiness),
        Op::Backup => on(m, health::backup),
        Op::GetCluster => on(m, cluster::get),
        Op::RotateEpoch => on(m, cluster::rotate),
        Op::ListApps => on(m, apps::list),
        Op::CreateAppToken => on(m, apps::create_token),
        Op::RevokeApp => on(m, apps::revoke),
        Op::GetRetention => on(m, retention::get),
        Op::SetRetention => on(m, retention::set),
        Op::RunRetention => on(m, retention::run),
        Op::RestoreArchive => on(m, retention::restore),
        Op::Identity => on(m, routes::identity),
        Op::OpenApi => on(m, routes::openapi),
        Op::Pair => on(m, routes::pair),
        Op::Disconnect => on(m, routes::disconnect),
        Op::ListSessions => on(m, routes::sessions),
        Op::ChangeSession => on(m, routes::change_session),
        Op::RevokeSession => on(m, routes::revoke_session),
        Op::ListSchedules => on(m, schedules::list),
        Op::CreateSchedule => on(m, schedules::create),
        Op::PreviewSchedule => on(m, schedules::preview),
        Op::GetSchedule => on(m, schedules::get_one),
        Op::PatchSchedule => on(m, schedules::patch),
        Op::DeleteSchedule => on(m, schedules::delete),
        Op::EnableSchedule => on(m, schedules::enable),
        Op::DisableSchedule => on(m, schedules::disable),
        Op::TriggerSchedule => on(m, schedules::trigger),
        Op::ListScheduleRuns => on(m, runs::list_for_schedule),
        Op::ListProjects => on(m, schedules::projects),
        Op::Summary => on(m, summary::summary),
        Op::ListRuns => on(m, runs::list),
        Op::GetRun => on(m, runs::get_one),
        Op::RunLog => on(m, runs::log),
        Op::CancelRun => on(m, runs::cancel),
        Op::Events => on(m, events::stream),
        Op::ListAllowlist => on(m, allowlist::list),
        Op::ChangeAllowlist => on(m, allowlist::change),
        Op::ListAudit => on(m, audit::list),
        Op::ListApprovals => on(m, approvals::list),
        Op::GetApproval => on(m, approvals::get_one),
        Op::GrantApproval => on(m, approvals::grant),
        Op::DenyApproval => on(m, approvals::deny),
        Op::ExportEvidence => on(m, approvals::export),
        Op::SubmitTask => on(m, tasks::submit),
        Op::ListTasks => on(m, tasks::list),
        Op::GetTask => on(m, tasks::get_one),
        Op::CancelTask => on(m, tasks::cancel),
        Op::RetryTask => on(m, tasks::retry),
        Op::ListWorkers => on(m, workers::list),
        Op::CreateJoinToken => on(m, workers::create_token),
        Op::RevokeWorker => on(m, workers::revoke),
        Op::ListSecrets => on(m, secrets::list),
        Op::SetSecret => on(m, secrets::set),
        Op::DeleteSecret => on(m, secrets::delete),
        Op::ListEndpoints => on(m, notify::list),
        Op::CreateEndpoint => on(m, notify::create),
        Op::DeleteEndpoint => on(m, notify::delete),
        Op::TestEndpoint => on(m, notify::test),
        Op::ListDeliveries => on(m, notify::deliveries),
        Op::PlanDeclarations => on(m, declarations::plan),
        Op::ApplyDeclarations => on(m, declarations::apply),
        Op::ExportDeclarations => on(m, declarations::export),
    }
}

/// Serves the API on `tcp` and on `unix` (the same router behind the same door) until
/// `shutdown` resolves, then lets in-flight requests on both finish.
pub(crate) async fn serve(
    tcp: TcpListener,
    unix: UnixListener,
    state: ApiState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = studio_frontdoor::Limits::for_open_files(studio_frontdoor::open_files());
    let router = router(state);
    let stop = Shutdown::new();
    let on_tcp = studio_frontdoor::serve(
        studio_frontdoor::Lanes::here(),
        tcp,
        None,
        router.clone(),
        limits,
        stop.triggered(),
    );
    let on_unix = studio_frontdoor::serve(
        studio_frontdoor::Lanes::here(),
        unix,
        None,
        router,
        limits,
        stop.triggered(),
    );
    let stop_both = async move {
        shutdown.await;
        stop.trigger();
        Ok(())
    };
    tokio::try_join!(on_tcp, on_unix, stop_both).map(|_| ())
}
