//! studio-app: Studio's browser-facing listener — the pairing page, the front door
//! (Host, CORS, JSON, admission through studiod's verifier) and the proxy to studiod.
//!
//! Invariant: never depends on `studio-daemon`; holds no secret beyond the request in
//! flight; when the daemon cannot answer, it refuses (`503 daemon_unavailable`).

mod approval;
mod attention;
mod backup;
mod config;
mod cookie;
mod daemon;
pub mod entry;
mod forward;
mod frontdoor;
mod http;
mod page;
mod pages;
mod pairing;
mod pool;
mod proxy;
mod remote;
mod state;
mod status;
mod tls;
mod verifier;

#[cfg(test)]
mod app_tests;

use std::{net::SocketAddr, time::Duration};

use anyhow::Context;
use studio_contract::ready::Ready;
use studio_frontdoor::Lanes;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub use config::{Cli, Config, ConfigError, Daemons, Enrolment, MAX_VERIFIER_TIMEOUT_MS, TlsFiles};

/// How long in-flight requests may take to finish once shutdown begins (below the
/// supervisor's TERM-to-KILL grace, so an open event stream cannot earn us a KILL).
pub const SHUTDOWN_GRACE: Duration = studio_contract::lifecycle::APP_DRAIN;

/// Why the app could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("verifier client: {0}")]
    Verifier(String),
    #[error("cannot open app.db: {0}")]
    AppDb(String),
}

/// A bound, not yet serving app: `build` reports the address before anything is served.
pub struct Application {
    listener: TcpListener,
    local_addr: SocketAddr,
    origin: String,
    tls: Option<TlsAcceptor>,
    state: state::AppState,
}

impl Application {
    /// Loads TLS material, prepares the verifier client (it connects lazily, so a daemon
    /// that is down does not stop the app from starting) and binds the listener.
    pub async fn build(config: Config) -> Result<Self, StartError> {
        let tls = config.tls.as_ref().map(tls::acceptor).transpose()?;
        let (verifier, proxy) = match &config.daemons {
            None => (
                verifier::Verifier::new(
                    &config.home.verifier_socket(),
                    &config.app_key,
                    config.verifier_timeout,
                )
                .map_err(|e| StartError::Verifier(e.to_string()))?,
                proxy::Proxy::new(
                    config.daemon_addr,
                    config.daemon_socket.clone(),
                    config.app_key.clone(),
                    config.upstream_timeout,
                ),
            ),
            Some(daemons) => {
                // One attempt at one studiod is bounded by the verifier's timeout, so the
                // next is tried while a verdict can still be given in time.
                let remote = remote::Remote::new(daemons, config.verifier_timeout)
                    .map_err(StartError::Verifier)?;
                (
                    verifier::Verifier::remote(&remote, config.verifier_timeout),
                    proxy::Proxy::remote(&remote, config.upstream_timeout),
                )
            }
        };
        let listener = TcpListener::bind(config.addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: config.addr,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.addr,
            source,
        })?;
        let origin = config
            .public_origin
            .clone()
            .unwrap_or_else(|| format!("{}://{local_addr}", config.scheme()));
        let attention = attention::store::Store::open(&config.home.app_db())
            .await
            .map_err(|e| StartError::AppDb(e.chain()))?;
        let state = state::AppState::new(state::Shared {
            door: frontdoor::FrontDoor::new(&config, local_addr),
            verifier,
            proxy,
            secure_cookies: tls.is_some() || origin.starts_with("https://"),
            attention,
        });
        Ok(Self {
            listener,
            local_addr,
            origin,
            tls,
            state,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The origin browsers use: the public origin, else this listener's own.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The readiness line to announce once serving.
    pub fn ready(&self) -> Ready {
        Ready {
            pid: std::process::id(),
            addr: self.local_addr.to_string(),
            epoch: None,
            origin: Some(self.origin.clone()),
        }
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish for at most
    /// [`SHUTDOWN_GRACE`] (server-sent event streams would otherwise hold it open forever).
    /// Every connection is served on the calling runtime.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.serve_in(Lanes::here(), shutdown).await
    }

    /// As [`Application::serve`], with connections spread over `lanes`.
    pub async fn serve_in(
        self,
        lanes: Lanes,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let watch_task = self.state.verifier.spawn_watch();
        let attention = self.state.attention.clone();
        let service = http::service(self.state);
        let stop = studio_contract::lifecycle::Shutdown::new();
        let limits = studio_frontdoor::Limits::for_open_files(studio_frontdoor::open_files());
        let mut server = tokio::spawn(studio_frontdoor::serve(
            lanes,
            self.listener,
            self.tls,
            service,
            limits,
            stop.triggered(),
        ));
        let result = tokio::select! {
            ended = &mut server => Some(ended),
            () = shutdown => None,
        };
        let result = match result {
            Some(ended) => ended,
            None => {
                tracing::info!("shutting down");
                stop.trigger();
                match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
                    Ok(ended) => ended,
                    Err(_) => {
                        tracing::warn!(grace = ?SHUTDOWN_GRACE, "in-flight requests cut off");
                        server.abort();
                        Ok(Ok(()))
                    }
                }
            }
        };
        watch_task.abort();
        attention.close().await;
        result.map_err(std::io::Error::other)?
    }
}

/// Builds, announces readiness on stdout, and serves on `lanes` until `shutdown`.
pub async fn run(
    config: Config,
    lanes: Lanes,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let notify_socket = config.notify_socket.clone();
    let app = Application::build(config).await?;
    app.ready()
        .announce()
        .context("cannot print the readiness line")?;
    if let Some(socket) = &notify_socket {
        // systemd's `Type=notify`: the unit is started once this arrives.
        match studio_contract::service::notify(socket, "READY=1") {
            Ok(()) => tracing::info!("told the service manager studio-app is ready"),
            Err(error) => tracing::error!(%error, socket, "cannot tell the service manager"),
        }
    }
    tracing::info!(addr = %app.local_addr(), origin = %app.origin(), "studio-app serving");
    app.serve_in(lanes, shutdown).await.context("server failed")
}
