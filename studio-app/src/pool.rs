//! studio-app's connections to studiod, pooled: HTTP/1.1 over its Unix socket, over TCP,
//! or over mutual TLS to the apps listeners of studiod on other hosts. An exchange
//! borrows one connection and the answer's body gives it back when it ends, so one
//! keep-alive connection serves request after request with nothing between the request
//! and the connection but hyper's own dispatch (docs/PERFORMANCE.md, "The app hop").
//!
//! Invariant: a connection carries one exchange at a time; it is lent again only after
//! its answer's body ended whole, and only within `idle` of that (studiod closes one idle
//! for [`studio_contract::HEADER_TIMEOUT`]). A connection whose exchange failed, or whose
//! answer was abandoned part-way, is dropped, which closes it.

use std::{
    future::Future,
    io,
    net::SocketAddr,
    path::PathBuf,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll, ready},
    time::{Duration, Instant},
};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use hyper::{
    body::{Body as _, Frame, Incoming, SizeHint},
    client::conn::http1::{self, SendRequest},
};
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpStream, UnixStream},
};

use studio_frontdoor::lanes;

use crate::remote::Connector;

/// Idle connections kept at most; one coming back to a full pool is closed.
const MAX_IDLE: usize = 64;

/// Why an exchange gave no answer (the cause chain says whether it was the request's
/// body outgrowing its limit).
pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// How a new connection to studiod is made.
#[derive(Clone)]
pub(crate) enum Dial {
    /// studiod's `run/api.sock` on this host.
    Unix(Arc<PathBuf>),
    /// studiod's TCP listener, each attempt bounded.
    Tcp(SocketAddr, Duration),
    /// The apps listeners of studiod on other hosts, with failover between them.
    Remote(Connector),
}

impl Dial {
    /// A new connection. Boxed: a TLS handshake's state is kilobytes, and it would
    /// otherwise be carried (and moved) by every exchange's future, which rarely dials.
    fn connect(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<SendRequest<Body>, Error>> + Send + '_>> {
        Box::pin(self.dial_now())
    }

    async fn dial_now(&self) -> Result<SendRequest<Body>, Error> {
        match self {
            Dial::Unix(path) => handshake(UnixStream::connect(&**path).await?).await,
            Dial::Tcp(addr, within) => {
                let tcp = tokio::time::timeout(*within, TcpStream::connect(addr))
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
                // Requests are small and written whole: send them at once.
                tcp.set_nodelay(true)?;
                handshake(tcp).await
            }
            Dial::Remote(connector) => handshake(connector.dial().await?).await,
        }
    }
}

/// An HTTP/1.1 client connection over `io`, driven by a task of its own until it closes.
async fn handshake<T>(io: T) -> Result<SendRequest<Body>, Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "daemon connection ended with an error");
        }
    });
    Ok(sender)
}

/// Connections to one studiod (or one set of them), and the idle ones kept.
#[derive(Clone)]
pub(crate) struct Pool {
    dial: Dial,
    /// One idle list per lane ([`studio_frontdoor::lanes`]): a connection is driven by a
    /// task on the runtime that dialled it, so it is lent only to requests on that lane.
    idle: Arc<[Arc<Idle>]>,
}

struct Idle {
    /// Most recently given back last: lent first, its caches and buffers warm.
    held: Mutex<Vec<(SendRequest<Body>, Instant)>>,
    /// How long after its last answer a connection may be lent again.
    within: Duration,
}

impl Idle {
    fn held(&self) -> std::sync::MutexGuard<'_, Vec<(SendRequest<Body>, Instant)>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most recently given back connection that is open, within `within` and ready
    /// for a request. One still sending the body of a request studiod answered early is
    /// left for later rather than waited for.
    fn take(&self) -> Option<SendRequest<Body>> {
        let mut held = self.held();
        // Oldest first: the stale ones are a prefix.
        let stale = held.partition_point(|(_, since)| since.elapsed() >= self.within);
        held.drain(..stale);
        held.retain(|(sender, _)| !sender.is_closed());
        let ready = held.iter().rposition(|(sender, _)| sender.is_ready())?;
        Some(held.remove(ready).0)
    }

    fn give_back(&self, sender: SendRequest<Body>) {
        let mut held = self.held();
        if held.len() < MAX_IDLE {
            held.push((sender, Instant::now()));
        }
    }
}

impl Pool {
    /// Connections made by `dial`, an idle one lent again only within `idle` of its last
    /// answer.
    pub(crate) fn new(dial: Dial, idle: Duration) -> Self {
        let lane = || {
            Arc::new(Idle {
                held: Mutex::new(Vec::new()),
                within: idle,
            })
        };
        Self {
            dial,
            idle: (0..lanes::MAX_LANES).map(|_| lane()).collect(),
        }
    }

    /// The idle connections of the calling thread's lane.
    fn here(&self) -> &Arc<Idle> {
        &self.idle[lanes::current() % self.idle.len()]
    }

    /// Sends `req` (its target in origin form, its `Host` set) and gives the answer; its
    /// body streams from the connection, which comes back to the pool when it ends.
    ///
    /// A request goes out again, once, on a new connection when the one it was given
    /// failed before writing it; and a request without a body whose method may be
    /// repeated (GET, HEAD, DELETE) also when a *new* connection failed under it —
    /// studiod may close a connection it has not read a request from yet (its connection
    /// cap), never one that has served a request. Nothing else is sent twice.
    pub(crate) async fn send(&self, req: Request<Body>) -> Result<Response<Body>, Error> {
        let (sender, warm) = match self.here().take() {
            Some(sender) => (sender, true),
            None => (self.dial.connect().await?, false),
        };
        let copy = if warm { None } else { replayable(&req) };
        let (again, error) = match self.exchange(sender, req).await {
            Ok(answer) => return Ok(answer),
            Err(Failed::Unsent(req, error)) => (*req, error),
            Err(Failed::Sent(error)) => match copy {
                Some(copy) => (copy, error),
                None => return Err(error),
            },
        };
        tracing::info!(%error, "the daemon connection failed under a request: sent again on a new one");
        let sender = self.dial.connect().await?;
        match self.exchange(sender, again).await {
            Ok(answer) => Ok(answer),
            Err(Failed::Unsent(_, error) | Failed::Sent(error)) => Err(error),
        }
    }

    async fn exchange(
        &self,
        mut sender: SendRequest<Body>,
        req: Request<Body>,
    ) -> Result<Response<Body>, Failed> {
        if let Err(error) = sender.ready().await {
            // Closed while idle: nothing was written.
            return Err(Failed::Unsent(Box::new(req), error.into()));
        }
        match sender.try_send_request(req).await {
            Ok(answer) => {
                let idle = self.here().clone();
                Ok(answer.map(|body| Body::new(Returning::new(body, sender, idle))))
            }
            Err(mut failed) => Err(match failed.take_message() {
                Some(req) => Failed::Unsent(Box::new(req), failed.into_error().into()),
                None => Failed::Sent(failed.into_error().into()),
            }),
        }
    }
}

/// Why one exchange gave no answer.
enum Failed {
    /// The connection failed before the request was written: here it is back.
    Unsent(Box<Request<Body>>, Error),
    /// It failed once the request was (perhaps partly) written.
    Sent(Error),
}

/// A copy of `req` to send again, when it has no body and its method may be repeated.
fn replayable(req: &Request<Body>) -> Option<Request<Body>> {
    let repeatable = matches!(
        *req.method(),
        http::Method::GET | http::Method::HEAD | http::Method::DELETE
    );
    if !repeatable || req.body().size_hint().exact() != Some(0) {
        return None;
    }
    let mut copy = Request::new(Body::empty());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// An answer's body that gives its connection back to the pool when it ends whole.
/// Dropped before its end, it drops the connection instead (hyper then closes it: the
/// rest of the answer is still on it).
struct Returning {
    body: Incoming,
    home: Option<(SendRequest<Body>, Arc<Idle>)>,
}

impl Returning {
    fn new(body: Incoming, sender: SendRequest<Body>, idle: Arc<Idle>) -> Self {
        let mut returning = Self {
            body,
            home: Some((sender, idle)),
        };
        // An answer without a body (`204`, `304`, a `HEAD`'s) has ended already.
        if returning.body.is_end_stream() {
            returning.go_home();
        }
        returning
    }

    fn go_home(&mut self) {
        if let Some((sender, idle)) = self.home.take() {
            idle.give_back(sender);
        }
    }
}

impl hyper::body::Body for Returning {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        match &frame {
            Some(Err(_)) => self.home = None,
            None => self.go_home(),
            // A server stops polling a body that says it has ended: look after each frame.
            Some(Ok(_)) if self.body.is_end_stream() => self.go_home(),
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
