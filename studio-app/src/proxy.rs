//! The upstream client to studiod: a request rewritten with the caller's bearer as
//! `Authorization` and the browser's Origin asserted with the app key's signature, sent
//! with bodies streamed both ways (server-sent events pass through unbuffered). Upstream
//! is studiod's `run/api.sock` when it runs on this host (`studio up` says so), else its
//! TCP address, or with `--studiod` the apps listeners of studiod on other hosts (mutual
//! TLS: the certificate vouches for the Origin, no signature is sent), each over the
//! app's own pool of connections (`pool`). The forwarding route (`forward`) and the pages'
//! client (`daemon`) use it.
//!
//! Invariant: nothing the browser sent can pose as the app's assertion — its cookies and
//! any `x-studio-forwarded-*` headers are stripped before the signed ones are added. The
//! client imports no handler and not the app's state.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use axum::{extract::Request, response::Response};
use http::{HeaderMap, HeaderName, HeaderValue, Uri, Version, header, uri::PathAndQuery};
use http_body_util::LengthLimitError;
use studio_contract::{
    error::{ApiError, Code},
    forward,
    secret::AppKey,
};

use crate::{
    pool::{Dial, Pool},
    remote::Remote,
};

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes the hop-by-hop headers and those `Connection` names, in one pass over the
/// headers present (most messages carry none).
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    let drop: Vec<HeaderName> = headers
        .keys()
        .filter(|k| HOP_BY_HOP.contains(k) || named.contains(k))
        .cloned()
        .collect();
    for name in drop {
        headers.remove(name);
    }
}

/// The HTTP client to studiod and what it needs to assert an origin.
#[derive(Clone)]
pub(crate) struct Proxy {
    pool: Pool,
    /// studiod's name as every upstream `Host` gives it.
    host: HeaderValue,
    /// Signs the forwarded Origin on this host; `None` across hosts, where the
    /// connection's certificate vouches for it.
    key: Option<AppKey>,
    timeout: Duration,
}

impl Proxy {
    /// Over `socket` when given, else TCP to `daemon`.
    pub(crate) fn new(
        daemon: SocketAddr,
        socket: Option<PathBuf>,
        key: AppKey,
        timeout: Duration,
    ) -> Self {
        Self::pooled(daemon, socket, key, timeout, studio_contract::POOL_IDLE)
    }

    /// As [`Proxy::new`], reusing an idle connection only within `idle` of its last
    /// answer: studiod closes one idle for [`studio_contract::HEADER_TIMEOUT`].
    fn pooled(
        daemon: SocketAddr,
        socket: Option<PathBuf>,
        key: AppKey,
        timeout: Duration,
        idle: Duration,
    ) -> Self {
        let dial = match socket {
            Some(path) => Dial::Unix(Arc::new(path)),
            None => Dial::Tcp(daemon, timeout),
        };
        Self::named(
            Pool::new(dial, idle),
            &daemon.to_string(),
            Some(key),
            timeout,
        )
    }

    /// To studiod's apps listeners on other hosts through `remote` (which fails over
    /// between them), each naming itself `studiod` as its certificate does.
    pub(crate) fn remote(remote: &Remote, timeout: Duration) -> Self {
        let pool = Pool::new(
            Dial::Remote(remote.http_connector()),
            studio_contract::POOL_IDLE,
        );
        Self::named(pool, studio_pki::SERVER_NAME, None, timeout)
    }

    fn named(pool: Pool, name: &str, key: Option<AppKey>, timeout: Duration) -> Self {
        Self {
            pool,
            host: HeaderValue::try_from(name).expect("a host name is a header value"),
            key,
            timeout,
        }
    }

    /// The upstream timeout, which also bounds a page's read of an answer body.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The request studiod receives: same method, path, query and body; the credential
    /// and the signed origin in place of whatever the browser sent.
    pub(crate) fn rewrite(
        &self,
        req: Request,
        bearer: &str,
        now_ms: i64,
    ) -> Result<Request, ApiError> {
        let (mut parts, body) = req.into_parts();
        // Asserted as the browser sent it (admission refused any Origin not text).
        let origin = parts
            .headers
            .get(header::ORIGIN)
            .filter(|v| v.to_str().is_ok())
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static(""));
        let path_and_query = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        // In origin form: studiod is named by `Host` alone.
        parts.uri = Uri::from(path_and_query.clone());
        // The upstream connection is HTTP/1.1 whatever the browser spoke.
        parts.version = Version::HTTP_11;
        parts.extensions = http::Extensions::new();
        let headers = &mut parts.headers;
        strip_hop_by_hop(headers);
        headers.remove(header::COOKIE);
        let forwarded: Vec<HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("x-studio-forwarded-"))
            .cloned()
            .collect();
        for name in forwarded {
            headers.remove(name);
        }
        let value = |s: String| {
            HeaderValue::try_from(s)
                .map_err(|_| ApiError::new(Code::BadRequest, "header not representable"))
        };
        headers.insert(header::HOST, self.host.clone());
        headers.insert(header::AUTHORIZATION, value(["Bearer ", bearer].concat())?);
        if let Some(key) = &self.key {
            let signature = forward::sign(
                key,
                now_ms,
                parts.method.as_str(),
                path_and_query.as_str(),
                origin.to_str().unwrap_or(""),
            );
            headers.insert(forward::SIGNATURE, value(signature)?);
        }
        headers.insert(forward::ORIGIN, origin);
        Ok(Request::from_parts(parts, body))
    }

    /// Sends upstream; only the response *headers* are bounded by the upstream timeout,
    /// the body then streams for as long as the daemon keeps it open. When a request goes
    /// out a second time is the pool's rule ([`Pool::send`]).
    pub(crate) async fn send(&self, req: Request) -> Result<Response, ApiError> {
        match tokio::time::timeout(self.timeout, self.pool.send(req)).await {
            Ok(Ok(mut response)) => {
                strip_hop_by_hop(response.headers_mut());
                Ok(response)
            }
            // A streamed body that outgrew the limit on its way up is the client's error.
            Ok(Err(e)) if over_limit(&*e) => Err(too_large()),
            Ok(Err(error)) => {
                tracing::warn!(%error, "daemon request failed");
                Err(unavailable())
            }
            Err(_) => {
                tracing::warn!(timeout = ?self.timeout, "daemon sent no response headers in time");
                Err(unavailable())
            }
        }
    }
}

fn unavailable() -> ApiError {
    ApiError::new(Code::DaemonUnavailable, "the daemon is unavailable")
}

/// `413 payload_too_large`: what a body over [`studio_contract::API_BODY_LIMIT`] gets, before or on its
/// way upstream.
pub(crate) fn too_large() -> ApiError {
    ApiError::new(Code::PayloadTooLarge, "request body too large")
}

/// Whether an upstream failure was the request body exceeding [`studio_contract::API_BODY_LIMIT`].
fn over_limit(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<LengthLimitError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
pub(crate) mod tests;
