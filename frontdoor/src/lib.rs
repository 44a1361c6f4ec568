//! What every Studio HTTP listener shares below the router: how connections are accepted,
//! held and let go. studiod and studio-app serve through [`serve`], each with its own
//! router and front-door layers.
//!
//! The threat is any local process: it can open connections and send nothing. Four
//! rules keep a real request getting through (docs/ARCHITECTURE.md, "Connections"):
//!
//! - [`raise_open_files`] lifts the soft open-file limit to the hard one at start, so the
//!   usual desktop soft limit of 1,024 is not the ceiling;
//! - a connection must send its first complete request head within
//!   [`Limits::header_timeout`] of being accepted, and each later one within as long of
//!   the previous answer (hyper's HTTP/1 header timeout), or it is closed;
//! - each listener holds at most [`Limits::max_connections`]; at the cap, a newly
//!   accepted connection evicts the oldest one that has not sent a request yet (a
//!   completed request head is never cut off), and only when every held connection is
//!   serving does accept wait for a slot;
//! - a small request body is read whole before any handler runs ([`SMALL_BODY`]), so a
//!   refusal answered before its body arrived does not cost the connection.

pub mod door;
pub mod lanes;
mod slots;

use std::{convert::Infallible, future::Future, io, time::Duration};

use axum::{
    Router, http,
    routing::{MethodFilter, MethodRouter},
};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, TcpStream, UnixListener, UnixStream},
};
use tokio_rustls::TlsAcceptor;

pub use lanes::{LaneThreads, Lanes};
pub use slots::Slots;

/// The certificate (DER) a TLS client presented and the handshake verified, put in the
/// extensions of every request of its connection; absent when it presented none. Only
/// [`serve`] sets it: nothing a client sends can.
#[derive(Debug, Clone)]
pub struct ClientCertificate(pub std::sync::Arc<[u8]>);

/// How long a TLS client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most a listener holds when the open-file limit would allow more.
const MAX_CONNECTIONS: usize = 4096;

/// A listener's connection rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections held at once (served or waiting for their first request).
    pub max_connections: usize,
    /// How long a connection may take to send a request head.
    pub header_timeout: Duration,
}

impl Limits {
    /// A quarter of the open-file limit per listener (at least 16, at most 4,096): the rest
    /// stays for the store, sockets to the other process, logs and jobs.
    pub fn for_open_files(open_files: u64) -> Self {
        let quarter = usize::try_from(open_files / 4).unwrap_or(MAX_CONNECTIONS);
        Self {
            max_connections: quarter.clamp(16, MAX_CONNECTIONS),
            header_timeout: studio_contract::HEADER_TIMEOUT,
        }
    }
}

/// Lifts this process's soft open-file limit to its hard limit; returns `(before, now)`
/// soft limits. Children that should not inherit the raise set `before` back.
pub fn raise_open_files() -> (u64, u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let before = limit.current.unwrap_or(u64::MAX);
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    if raised.current != limit.current && setrlimit(Resource::Nofile, raised).is_err() {
        return (before, before);
    }
    (before, limit.maximum.unwrap_or(u64::MAX))
}

/// The filter axum routes `method` by (the methods of our inventories all have one).
pub fn method_filter(method: http::Method) -> MethodFilter {
    MethodFilter::try_from(method).expect("a method axum routes by")
}

/// A router with one route per path, the methods of entries that share a path merged
/// (two entries with the same path and method panic: a wiring mistake).
pub fn router_of<S: Clone + Send + Sync + 'static>(
    entries: impl IntoIterator<Item = (&'static str, MethodRouter<S>)>,
) -> Router<S> {
    let mut by_path: Vec<(&'static str, MethodRouter<S>)> = Vec::new();
    for (path, served) in entries {
        match by_path.iter_mut().find(|(p, _)| *p == path) {
            Some((_, methods)) => *methods = std::mem::take(methods).merge(served),
            None => by_path.push((path, served)),
        }
    }
    by_path
        .into_iter()
        .fold(Router::new(), |router, (path, methods)| {
            router.route(path, methods)
        })
}

/// This process's soft open-file limit.
pub fn open_files() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
}

/// A listener [`serve`] takes connections from: TCP, or a Unix socket for a peer on the
/// same host.
pub trait Accept: Send + Sync + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// A connection between runtimes: registered with none.
    type Detached: Send + 'static;
    /// The next connection and who it is from (for the log).
    fn accept_one(&self) -> impl Future<Output = io::Result<(Self::Io, String)>> + Send;
    /// Takes `io` off the runtime that accepted it.
    fn detach(io: Self::Io) -> io::Result<Self::Detached>;
    /// Registers a detached connection with the calling runtime.
    fn attach(socket: Self::Detached) -> io::Result<Self::Io>;
}

impl Accept for TcpListener {
    type Io = TcpStream;
    type Detached = std::net::TcpStream;
    async fn accept_one(&self) -> io::Result<(TcpStream, String)> {
        let (stream, peer) = self.accept().await?;
        // Answers are small and written whole: send them at once.
        let _ = stream.set_nodelay(true);
        Ok((stream, peer.to_string()))
    }
    fn detach(io: TcpStream) -> io::Result<std::net::TcpStream> {
        io.into_std()
    }
    fn attach(socket: std::net::TcpStream) -> io::Result<TcpStream> {
        TcpStream::from_std(socket)
    }
}

impl Accept for UnixListener {
    type Io = UnixStream;
    type Detached = std::os::unix::net::UnixStream;
    async fn accept_one(&self) -> io::Result<(UnixStream, String)> {
        let (stream, _) = self.accept().await?;
        Ok((stream, "unix".to_owned()))
    }
    fn detach(io: UnixStream) -> io::Result<std::os::unix::net::UnixStream> {
        io.into_std()
    }
    fn attach(socket: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        UnixStream::from_std(socket)
    }
}

/// An accepted connection on its way to the lane that serves it.
enum Socket<L: Accept> {
    /// Served by the runtime that accepted it.
    Here(L::Io),
    /// Served by another lane, which registers it with its own runtime.
    Moved(L::Detached),
}

impl<L: Accept> Socket<L> {
    /// The connection, registered with the runtime that serves it.
    fn settle(self) -> io::Result<L::Io> {
        match self {
            Socket::Here(io) => Ok(io),
            Socket::Moved(socket) => L::attach(socket),
        }
    }
}

/// The largest request body read whole before any handler sees the request.
pub const SMALL_BODY: u64 = 64 * 1024;

/// Reads a request's body whole, within `within`, when it declares at most
/// [`SMALL_BODY`] bytes (the API's JSON bodies): a handler that answers without reading
/// it (a refusal, a 404) would leave the rest unread, hyper would close the connection
/// after the answer, and a client that pooled the connection (studio-app's proxy does)
/// would have its next request fail as unsendable. Larger and unsized bodies stream to
/// the handler as they come. A body that does not arrive in time or is cut off is
/// `400 bad_request`, and closes the connection.
async fn read_small_body(
    req: http::Request<hyper::body::Incoming>,
    within: Duration,
) -> Result<http::Request<axum::body::Body>, axum::response::Response> {
    use axum::response::IntoResponse;
    use http_body_util::BodyExt;
    let small = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|n| n <= SMALL_BODY);
    if !small {
        // A request without a body (most GETs) carries none on: no box to make.
        return Ok(req.map(|body| {
            if hyper::body::Body::is_end_stream(&body) {
                axum::body::Body::empty()
            } else {
                axum::body::Body::new(body)
            }
        }));
    }
    let (parts, body) = req.into_parts();
    let refused = |code, message: &str| {
        let mut answer = studio_contract::error::ApiError::new(code, message).into_response();
        answer.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
        answer
    };
    match tokio::time::timeout(within, body.collect()).await {
        Ok(Ok(collected)) => Ok(http::Request::from_parts(
            parts,
            axum::body::Body::from(collected.to_bytes()),
        )),
        Ok(Err(_)) => Err(refused(
            studio_contract::error::Code::BadRequest,
            "the request body was cut off",
        )),
        Err(_) => Err(refused(
            studio_contract::error::Code::BadRequest,
            "the request body did not arrive in time",
        )),
    }
}

/// Serves `router` (an axum router, or any service that answers every request) on
/// `listener` (over TLS when `tls` is set) until `shutdown` resolves, then stops
/// accepting and lets every connection finish what it is serving. Each connection is
/// served on one of `lanes` in turn ([`Lanes::here`]: all on the accepting runtime).
pub async fn serve<L: Accept, S>(
    lanes: Lanes,
    listener: L,
    tls: Option<TlsAcceptor>,
    router: S,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()>
where
    S: tower::Service<
            http::Request<axum::body::Body>,
            Response = axum::response::Response,
            Error = Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
{
    let graceful = GracefulShutdown::new();
    // Over TLS, HTTP/2 or HTTP/1.1 as the client's ALPN chose; in the clear, HTTP/1.1
    // alone (no client of ours speaks HTTP/2 without TLS, and sniffing for it costs every
    // request of the connection).
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut clear = hyper::server::conn::http1::Builder::new();
    clear
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let slots = Slots::new(limits.max_connections);
    // Connections accepted so far: each goes to the next lane in turn.
    let mut nth = 0usize;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = slots.room() => {}
            () = &mut shutdown => break,
        }
        let (io, peer) = tokio::select! {
            accepted = listener.accept_one() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of descriptors, say: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let slot = slots.take();
        let header_timeout = limits.header_timeout;
        let service = {
            let (router, marker) = (router.clone(), slot.marker());
            tower::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let admitted = marker.serving();
                let router = router.clone();
                async move {
                    if !admitted {
                        tracing::debug!("request on an evicted connection");
                    }
                    let req = match read_small_body(req, header_timeout).await {
                        Ok(req) => req,
                        Err(answer) => return Ok(answer),
                    };
                    tower::ServiceExt::oneshot(router, req).await
                }
            })
        };
        let (tls, builder, clear, watcher) = (
            tls.clone(),
            builder.clone(),
            clear.clone(),
            graceful.watcher(),
        );
        // Served on the next lane; a socket moving to another runtime leaves this one's.
        let lane = lanes.of(nth);
        nth = nth.wrapping_add(1);
        let (lane, io) = match lane {
            None => (None, Socket::<L>::Here(io)),
            Some(lane) => match L::detach(io) {
                Ok(socket) => (Some(lane.clone()), Socket::Moved(socket)),
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "cannot hand the connection to a lane");
                    continue;
                }
            },
        };
        let connection = async move {
            let io = match io.settle() {
                Ok(io) => io,
                Err(e) => return tracing::warn!(%peer, error = %e, "cannot take up the connection"),
            };
            let evicted = slot.evicted();
            // hyper times a request head out only once it knows the protocol; a connection
            // that sends nothing (or stops inside a TLS session) is timed here.
            let silent = slot.first_request_within(header_timeout);
            let serving = async {
                let result = match tls {
                    None => {
                        let service = TowerToHyperService::new(service);
                        let conn = clear.serve_connection(TokioIo::new(io), service);
                        watcher.watch(conn).await.map_err(|e| e.to_string())
                    }
                    Some(acceptor) => {
                        let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io))
                            .await
                        {
                            Ok(Ok(tls)) => tls,
                            Ok(Err(e)) => {
                                return tracing::debug!(%peer, error = %e, "tls handshake failed");
                            }
                            Err(_) => return tracing::debug!(%peer, "tls handshake timed out"),
                        };
                        let certificate = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|chain| chain.first())
                            .map(|der| ClientCertificate(der.as_ref().into()));
                        let service = tower::service_fn(move |mut req: http::Request<_>| {
                            if let Some(c) = &certificate {
                                req.extensions_mut().insert(c.clone());
                            }
                            tower::ServiceExt::oneshot(service.clone(), req)
                        });
                        let service = TowerToHyperService::new(service);
                        let conn =
                            builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
                        watcher
                            .watch(conn.into_owned())
                            .await
                            .map_err(|e| e.to_string())
                    }
                };
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            };
            tokio::select! {
                () = serving => {}
                () = evicted => tracing::debug!(%peer, "evicted: no request yet, and the listener is full"),
                () = silent => tracing::debug!(%peer, "closed: no request head in time"),
            }
            drop(slot);
        };
        match lane {
            None => tokio::spawn(connection),
            Some(lane) => lane.spawn(connection),
        };
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
