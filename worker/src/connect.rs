//! A gRPC channel to one of studiod's TLS listeners (rustls): the worker listener, or the
//! apps listener that `studio app join` enrols through. The server is always checked as
//! [`studio_pki::SERVER_NAME`] under the authority the client trusts or pins, whatever
//! address it dials.

use std::{sync::Arc, time::Duration};

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint};

use crate::WorkerError;

/// How long connecting (TCP and the handshake) may take at most.
pub const CONNECT: Duration = Duration::from_secs(10);

/// A channel to `server` (`HOST:PORT`) with the TLS configuration `tls`, connected (TCP
/// and the handshake) `within` that long: a suspended studiod accepts the TCP
/// connection in its kernel and never answers the handshake.
pub async fn channel(
    server: &str,
    tls: rustls::ClientConfig,
    within: Duration,
) -> Result<Channel, WorkerError> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let target = server.to_owned();
    let name = ServerName::try_from(studio_pki::SERVER_NAME)
        .map_err(|e| WorkerError::Tls(e.to_string()))?;
    let endpoint = Endpoint::from_static("http://studiod")
        .connect_timeout(within)
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(10));
    endpoint
        .connect_with_connector(tower::service_fn(move |_| {
            let (connector, server, name) = (connector.clone(), target.clone(), name.clone());
            let connect = async move {
                let tcp = TcpStream::connect(&server).await?;
                tcp.set_nodelay(true)?;
                connector.connect(name, tcp).await
            };
            async move {
                let tls = tokio::time::timeout(within, connect).await.map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "no TLS handshake in time")
                })??;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        }))
        .await
        .map_err(|e| {
            WorkerError::Remote(format!("cannot reach studiod at {server}: {}", chain(&e)))
        })
}

/// An error with its causes, on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
