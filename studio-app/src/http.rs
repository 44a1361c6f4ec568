//! The HTTP server: the shared state, the router with the front-door layers in their
//! order, per-request tracing, and serving over plain TCP or rustls with a bounded
//! graceful shutdown.

use std::{io, ops::Deref, sync::Arc, time::Duration};

use axum::{
    Router,
    extract::Request,
    middleware::{Next, from_fn, from_fn_with_state},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::{conn::auto, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use studio_contract::error::{ApiError, Code};
use tokio::{net::TcpListener, sync::watch};
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

use crate::{
    frontdoor, frontdoor::FrontDoor, page, pairing, proxy, proxy::Proxy, status, verifier::Verifier,
};

/// How long a TLS client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What every handler shares.
pub(crate) struct Shared {
    pub(crate) door: FrontDoor,
    pub(crate) verifier: Verifier,
    pub(crate) proxy: Proxy,
    /// `app.db`: the attention queue's dispositions and their history.
    pub(crate) attention: crate::attention::Store,
    /// `Secure` on the admission cookie (the browser reaches us over HTTPS).
    pub(crate) secure_cookies: bool,
}

#[derive(Clone)]
pub(crate) struct AppState(Arc<Shared>);

impl AppState {
    pub(crate) fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The whole app. Layers wrap outward, so the last added runs first: trace → Host →
/// CORS → JSON → admission → route (also for the fallback, which proxies or 404s).
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/app.js", get(page::script))
        .route("/app.css", get(page::style))
        .route("/health", get(status::health))
        .route("/api/app/session", get(status::session))
        .route("/api/studio/pair", post(pairing::pair))
        .merge(crate::attention::routes())
        .merge(crate::pages::routes())
        .fallback(proxy::route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), frontdoor::admission))
        .layer(from_fn(frontdoor::json))
        .layer(from_fn_with_state(state.clone(), frontdoor::cors))
        .layer(from_fn_with_state(state.clone(), frontdoor::host))
        .layer(from_fn(trace))
        .with_state(state)
}

async fn method_not_allowed() -> Response {
    ApiError::new(Code::MethodNotAllowed, "method not allowed").into_response()
}

/// One span per request; the query string is left out (it is the caller's business).
async fn trace(req: Request, next: Next) -> Response {
    let span = tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        status = tracing::field::Empty,
    );
    async move {
        let started = std::time::Instant::now();
        let response = next.run(req).await;
        tracing::Span::current().record("status", response.status().as_u16());
        tracing::debug!(elapsed_ms = started.elapsed().as_millis(), "served");
        response
    }
    .instrument(span)
    .await
}

/// Resolves once `stop` flips to true (or its sender is gone).
pub(crate) async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Plain HTTP: axum's own server, draining in-flight requests after `stop`.
pub(crate) async fn serve_plain(
    listener: TcpListener,
    router: Router,
    stop: watch::Receiver<bool>,
) -> io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(stopped(stop))
        .await
}

/// HTTPS: a rustls handshake per connection, then hyper's auto (HTTP/1.1 or h2) server.
pub(crate) async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    let mut stop_signal = std::pin::pin!(stopped(stop));
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop_signal => break,
        };
        let (acceptor, builder, watcher) = (acceptor.clone(), builder.clone(), graceful.watcher());
        let service = TowerToHyperService::new(router.clone());
        // The handshake runs in the connection's task so a slow client cannot stall accept.
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "tls handshake failed"),
                Err(_) => return tracing::debug!(%peer, "tls handshake timed out"),
            };
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
