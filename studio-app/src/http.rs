//! The app's router: its `/api` routes from the app's inventory, the pages and the
//! forwarding fallback, behind the shared front door. Connections are held and drained by
//! `studio_frontdoor::serve`.
//!
//! Invariant: the top of the app's imports; the router imports handlers and the state,
//! and nothing but the server (`lib.rs`) imports the router.

use std::sync::Arc;

use axum::{
    Router,
    routing::{MethodFilter, MethodRouter, get, on},
};
use studio_api::app::{APP_ROUTES, AppOp};

use crate::{
    attention::routes as attention, forward, page, pages, pairing, state::AppState, status,
};

/// The whole app behind its front door (`studio_frontdoor::door`: span → Host → CORS →
/// JSON → admission through the verifier → route, also for the fallback, which proxies
/// or 404s).
///
/// The app's `/api` routes come from its inventory (`studio_api::app::APP_ROUTES`); pages
/// and assets are added beside them. Construction fails if any of them would shadow a
/// route studiod serves and the app should forward.
pub(crate) fn router(state: AppState) -> Router {
    let mut own: Vec<(&'static str, MethodRouter<AppState>)> = vec![
        ("/app.js", get(page::script)),
        ("/app.css", get(page::style)),
    ];
    own.extend(pages::routes());
    own.extend(APP_ROUTES.iter().map(|route| {
        let filter = studio_frontdoor::method_filter(route.method.http());
        (route.path, handler(route.op, filter))
    }));
    let paths: Vec<&str> = own.iter().map(|(path, _)| *path).collect();
    if let Some(collision) = studio_api::app::shadowed(&paths) {
        panic!("studio-app's routes collide with studiod's: {collision}");
    }
    let router = studio_frontdoor::router_of(own)
        .fallback(forward::route)
        .method_not_allowed_fallback(studio_frontdoor::door::method_not_allowed);
    let door = Arc::new(state.door.door(state.verifier.clone()));
    door.guard(router.with_state(state))
}

/// The handler of each operation of the app's inventory.
fn handler(op: AppOp, m: MethodFilter) -> MethodRouter<AppState> {
    match op {
        AppOp::Health => on(m, status::health),
        AppOp::Session => on(m, status::session),
        AppOp::OpenApi => on(m, status::openapi),
        AppOp::Pair => on(m, pairing::pair),
        AppOp::Attention => on(m, attention::list),
        AppOp::SetDisposition => on(m, attention::set),
        AppOp::ClearDisposition => on(m, attention::clear),
        AppOp::History => on(m, attention::history),
        AppOp::Backup => on(m, crate::backup::backup),
    }
}
