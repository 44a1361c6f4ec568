//! The app's service: its `/api` routes from the app's inventory, the pages and the
//! forwarding fallback in one router, and the forwarding hot path beside it, all behind
//! the shared front door. Connections are held and drained by
//! `studio_frontdoor::serve`.
//!
//! Invariant: the top of the app's imports; the router imports handlers and the state,
//! and nothing but the server (`lib.rs`) imports the router.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use axum::{
    Router,
    extract::Request,
    response::Response,
    routing::{MethodFilter, MethodRouter, get, on},
};
use studio_api::{
    app::{APP_ROUTES, AppOp},
    route::Template,
};
use studio_frontdoor::door::Door;

use crate::{
    attention::routes as attention, forward, frontdoor::Admission, page, pages, pairing,
    state::AppState, status,
};

/// The whole app behind its front door (`studio_frontdoor::door`: span → Host → CORS →
/// JSON → admission through the verifier → route).
///
/// A request for a path studiod serves, which no route of the app's own matches, is
/// forwarded straight from the door (the proxy's hot path: no router, no boxed layers);
/// every other one goes through the router behind the same door, whose fallback answers
/// a path nobody serves with the JSON 404.
///
/// The app's `/api` routes come from its inventory (`studio_api::app::APP_ROUTES`); pages
/// and assets are added beside them. Construction fails if any of them would shadow a
/// route studiod serves and the app should forward.
pub(crate) fn service(state: AppState) -> AppService {
    let mut own: Vec<(&'static str, MethodRouter<AppState>)> = vec![
        ("/app.js", get(page::script)),
        ("/app.css", get(page::style)),
    ];
    own.extend(pages::routes());
    own.extend(APP_ROUTES.iter().map(|route| {
        let filter = studio_frontdoor::method_filter(route.method.http());
        (route.path, handler(route.op, filter))
    }));
    let paths: Vec<&'static str> = own.iter().map(|(path, _)| *path).collect();
    if let Some(collision) = studio_api::app::shadowed(&paths) {
        panic!("studio-app's routes collide with studiod's: {collision}");
    }
    // The hot path matches the app's own templates segment by segment, as the router
    // does for every template without a catch-all: a catch-all would make them disagree.
    if let Some(catch_all) = paths.iter().find(|p| p.contains("{*")) {
        panic!(
            "studio-app's route {catch_all} is a catch-all, which the forwarding hot path cannot see"
        );
    }
    let router = studio_frontdoor::router_of(own)
        .fallback(forward::route)
        .method_not_allowed_fallback(studio_frontdoor::door::method_not_allowed);
    let door = Arc::new(state.door.door(state.verifier.clone()));
    AppService {
        router: door.clone().guard(router.with_state(state.clone())),
        door,
        state,
        own: paths.into_iter().map(Template::new).collect(),
    }
}

/// The app's service: the door and the forwarding hot path, else the router.
#[derive(Clone)]
pub(crate) struct AppService {
    router: Router,
    door: Arc<Door<Admission>>,
    state: AppState,
    /// The templates of the app's own routes, pages and assets.
    own: Arc<[Template]>,
}

impl AppService {
    /// Whether `path` goes upstream: studiod serves it and the app has no route of its
    /// own there (the router would fall back to forwarding it).
    fn forwards(&self, path: &str) -> bool {
        studio_api::routes::proxied(path) && !self.own.iter().any(|t| t.matches(path))
    }
}

impl tower::Service<Request> for AppService {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if self.forwards(req.uri().path()) {
            let (door, state) = (self.door.clone(), self.state.clone());
            Box::pin(async move {
                let forward = |req, admitted| forward::forward(state, req, admitted);
                Ok(door.enter(req, forward).await)
            })
        } else {
            Box::pin(tower::ServiceExt::oneshot(self.router.clone(), req))
        }
    }
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
