//! studiod on other hosts (docs/FLEETS.md, "Split hosts"): with `--studiod HOST:PORT,…`
//! the app reaches studiod's apps listeners over TCP with mutual TLS instead of this
//! host's sockets, proving itself with the client certificate `studio app join` left in
//! the home (`run/app/`), where the app key proves it on one host.
//!
//! The verifier and the proxy dial through one [`Remote`]: each new connection tries the
//! address that answered last first, then the others in order, each attempt bounded, so
//! when a studiod dies the next connection goes to another member. While none answers,
//! every verdict is `daemon_unavailable`: the app fails closed.
//!
//! Invariant: the server is always checked as [`studio_pki::SERVER_NAME`] under the one
//! authority the enrolment stored, whatever address is dialled; the key is never shown.

use std::{
    fmt, io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use http::Uri;
use hyper_util::{
    client::legacy::connect::{Connected, Connection},
    rt::TokioIo,
};
use rustls::pki_types::ServerName;
use studio_contract::home::Home;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};
use tokio_rustls::{TlsConnector, client::TlsStream};

/// The enrolment `studio app join` stored: studiod's authority, the app's certificate
/// and its key (PEM). `Debug` never shows the key.
#[derive(Clone)]
pub struct Enrolment {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for Enrolment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Enrolment").finish_non_exhaustive()
    }
}

impl Enrolment {
    /// Reads `run/app/` of `home` (the key must be private to its owner).
    pub fn load(home: &Home) -> io::Result<Self> {
        let read = |path: std::path::PathBuf| {
            std::fs::read_to_string(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        };
        Ok(Self {
            ca_pem: read(home.app_ca_file())?,
            cert_pem: read(home.app_cert_file())?,
            key_pem: Home::read_secret(&home.app_key_file())?,
        })
    }
}

/// Where studiod's apps listeners are, and how to reach them.
#[derive(Debug, Clone)]
pub struct Daemons {
    /// `HOST:PORT` of each, in the order given.
    pub addrs: Vec<String>,
    pub enrolment: Enrolment,
}

/// Dials studiod's apps listeners with failover (see the module's doc).
#[derive(Clone)]
pub(crate) struct Remote {
    addrs: Arc<[String]>,
    /// The address that answered last: the first one tried.
    preferred: Arc<AtomicUsize>,
    /// The bound on one attempt (TCP and the handshake).
    attempt: Duration,
    grpc: TlsConnector,
    http: TlsConnector,
}

impl Remote {
    pub(crate) fn new(daemons: &Daemons, attempt: Duration) -> Result<Self, String> {
        let e = &daemons.enrolment;
        let (grpc, http) = studio_pki::app_client_configs(&e.ca_pem, &e.cert_pem, &e.key_pem)
            .map_err(|e| format!("the enrolment in run/app/ is unusable: {e}"))?;
        Ok(Self {
            addrs: daemons.addrs.clone().into(),
            preferred: Arc::default(),
            attempt,
            grpc: TlsConnector::from(Arc::new(grpc)),
            http: TlsConnector::from(Arc::new(http)),
        })
    }

    /// A connection to the first studiod that completes a handshake, starting with the
    /// one that answered last.
    async fn dial(&self, tls: &TlsConnector) -> io::Result<TlsStream<TcpStream>> {
        let name = ServerName::try_from(studio_pki::SERVER_NAME)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let first = self.preferred.load(Ordering::Relaxed);
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no studiod address");
        for i in 0..self.addrs.len() {
            let at = (first + i) % self.addrs.len();
            let addr = &self.addrs[at];
            let attempt = async {
                let tcp = TcpStream::connect(addr.as_str()).await?;
                tcp.set_nodelay(true)?;
                tls.connect(name.clone(), tcp).await
            };
            match tokio::time::timeout(self.attempt, attempt).await {
                Ok(Ok(stream)) => {
                    if at != first {
                        tracing::info!(studiod = %addr, "connected to another studiod");
                    }
                    self.preferred.store(at, Ordering::Relaxed);
                    return Ok(stream);
                }
                Ok(Err(e)) => {
                    tracing::warn!(studiod = %addr, error = %e, "cannot reach studiod");
                    last = e;
                }
                Err(_) => {
                    tracing::warn!(studiod = %addr, "studiod did not answer in time");
                    last = io::Error::new(io::ErrorKind::TimedOut, format!("{addr}: no answer"));
                }
            }
            // The next dial starts past it, even if this one is cut short by its caller's
            // deadline: a studiod that accepts and then hangs (frozen, cut off) must not
            // hold every later connection.
            let _ = self.preferred.compare_exchange(
                at,
                (at + 1) % self.addrs.len(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        Err(last)
    }

    /// How long one dial may take when every studiod is tried.
    pub(crate) fn dial_bound(&self) -> Duration {
        self.attempt
            .saturating_mul(u32::try_from(self.addrs.len()).unwrap_or(u32::MAX))
    }

    /// The verifier channel's connector (gRPC over HTTP/2).
    pub(crate) fn grpc_connector(&self) -> Connector {
        Connector {
            remote: self.clone(),
            tls: self.grpc.clone(),
        }
    }

    /// The proxy's connector (HTTP/1.1).
    pub(crate) fn http_connector(&self) -> Connector {
        Connector {
            remote: self.clone(),
            tls: self.http.clone(),
        }
    }
}

/// Dials a studiod for one protocol: every request URI names the same one (`studiod`).
#[derive(Clone)]
pub(crate) struct Connector {
    remote: Remote,
    tls: TlsConnector,
}

impl tower::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let connector = self.clone();
        Box::pin(async move { Ok(TokioIo::new(connector.dial().await?)) })
    }
}

impl Connector {
    /// A connection to the first studiod that completes a handshake ([`Remote`]'s order).
    pub(crate) async fn dial(&self) -> io::Result<Stream> {
        self.remote.dial(&self.tls).await.map(Stream)
    }
}

/// One TLS connection to studiod.
pub(crate) struct Stream(TlsStream<TcpStream>);

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
