//! studio-app's stage of the shared front door (`studio_frontdoor::door`): who may
//! address this listener (Host) and call it cross-origin (Origin), and admission through
//! the verifier. Host, CORS, the JSON rule and the request span are the door's.
//!
//! Invariant: a request reaches a route only if the door let it in and, unless the app's
//! inventory marks it open (or it reads a page), the verifier admitted its bearer.

use std::{fmt, net::SocketAddr, sync::Arc};

use axum::{extract::Request, response::IntoResponse};
use http::{HeaderMap, Method};
use studio_api::route::Access;
use studio_contract::{
    error::{ApiError, Code},
    host::{HostPolicy, parse_authority},
    origin::{AllowedOrigins, loopback_origins},
};
use studio_frontdoor::door::{self, Door, Stage, is_api, is_unsafe};

use crate::{
    config::Config,
    cookie,
    verifier::{Principal, Verdict, Verifier},
};

/// Who may address this listener (Host) and call it cross-origin (Origin).
#[derive(Debug, Clone)]
pub(crate) struct FrontDoor {
    hosts: HostPolicy,
    origins: AllowedOrigins,
}

impl FrontDoor {
    /// `bound` is the listener's actual address (the configured port may be 0).
    pub(crate) fn new(config: &Config, bound: SocketAddr) -> Self {
        let scheme = config.scheme();
        let public = config
            .public_origin
            .as_deref()
            .and_then(|o| o.split_once("://"))
            .and_then(|(scheme, rest)| Some((scheme, parse_authority(rest)?)));
        // A Host without a port means the port browsers use by default for our origin.
        let public_default = |s: &str| if s == "https" { 443 } else { 80 };
        let default_port = public
            .as_ref()
            .map_or(public_default(scheme), |(s, _)| public_default(s));
        let mut hosts = HostPolicy::new(bound.ip(), bound.port(), default_port);
        if let Some((s, auth)) = &public {
            hosts = hosts.allow(
                Some(auth.host.clone()),
                Some(auth.port.unwrap_or(public_default(s))),
            );
        }
        let mut origins = loopback_origins(scheme, bound.port());
        if !bound.ip().is_unspecified() && !bound.ip().is_loopback() {
            origins.push(format!("{scheme}://{bound}"));
        }
        origins.extend(config.public_origin.iter().cloned());
        origins.extend(config.allowed_origins.iter().cloned());
        Self {
            hosts,
            origins: AllowedOrigins::new(origins),
        }
    }

    /// The door in front of the app's router: admission through `verifier`.
    pub(crate) fn door(&self, verifier: Verifier) -> Door<Admission> {
        Door::new(
            self.hosts.clone(),
            Admission {
                origins: self.origins.clone(),
                verifier,
            },
        )
    }
}

/// Requests that pass without a credential: what the app's inventory marks open or paired
/// by code (health, the session probe, pairing itself), and page/asset GETs outside `/api`.
pub(crate) fn admission_exempt(method: &Method, path: &str) -> bool {
    let read = matches!(*method, Method::GET | Method::HEAD);
    (read && !is_api(path))
        || studio_api::app::APP_ROUTES.iter().any(|r| {
            r.method.answers(method)
                && r.matches(path)
                && matches!(r.access, Access::Open | Access::PairingCode)
        })
}

/// Where a bearer came from: an explicit header, or the ambient cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Header,
    Cookie,
}

/// The request's bearer: `Authorization: Bearer` wins over the cookie; a malformed
/// `Authorization` is refused rather than ignored.
pub(crate) fn bearer(headers: &HeaderMap) -> Result<Option<(String, Source)>, ApiError> {
    if let Some(token) = door::bearer(headers)? {
        return Ok(Some((token.to_owned(), Source::Header)));
    }
    Ok(cookie::admission_token(headers).map(|t| (t, Source::Cookie)))
}

/// The admitted caller of this request, for the routes behind the admission layer.
#[derive(Clone)]
pub(crate) struct Admitted {
    /// Held only for the request in flight (the proxy forwards it).
    pub(crate) bearer: String,
    pub(crate) principal: Arc<Principal>,
}

impl fmt::Debug for Admitted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admitted")
            .field("principal", &self.principal.id)
            .finish_non_exhaustive()
    }
}

/// The app's stage: its allowed origins, and admission through the verifier.
pub(crate) struct Admission {
    origins: AllowedOrigins,
    verifier: Verifier,
}

impl Stage for Admission {
    type Admitted = Admitted;

    fn origin_allowed(&self, origin: &str) -> bool {
        self.origins.allows(origin)
    }

    async fn admit(&self, req: Request, origin: Option<String>) -> door::Judged<Admitted> {
        if admission_exempt(req.method(), req.uri().path()) {
            return Ok((req, None));
        }
        let checked = self
            .check(
                req.method(),
                req.uri().path(),
                req.headers(),
                origin.as_deref(),
            )
            .await;
        match checked {
            Ok(admitted) => {
                tracing::Span::current().record("principal", admitted.principal.id.as_str());
                // The app's own routes need the role their inventory line names (a
                // viewer reads the attention queue and decides nothing); studiod judges
                // the routes forwarded to it.
                let own = studio_api::app::APP_ROUTES
                    .iter()
                    .find(|r| r.method.answers(req.method()) && r.matches(req.uri().path()));
                if let Some(refusal) = own.and_then(|r| admitted.principal.role.refusal(r.needs)) {
                    return Err((refusal.into_response(), req));
                }
                Ok((req, Some(admitted)))
            }
            Err(refusal) => Err((refusal.into_response(), req)),
        }
    }
}

impl Admission {
    async fn check(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        origin: Option<&str>,
    ) -> Result<Admitted, ApiError> {
        let not_allowed = || ApiError::new(Code::OriginNotAllowed, "origin not allowed");
        let Some((bearer, source)) = bearer(headers)? else {
            // Without a daemon nothing can be admitted; say so rather than "unauthorized".
            return Err(if self.verifier.reachable().await {
                ApiError::new(
                    Code::Unauthorized,
                    "not paired: run `studio pair` to get a link",
                )
            } else {
                ApiError::new(Code::DaemonUnavailable, "the daemon is unavailable")
            });
        };
        let allowed = origin.is_some_and(|o| self.origins.allows(o));
        // The cookie is ambient: a state change it authorises must come from one of our
        // origins.
        if source == Source::Cookie && is_unsafe(method) && !allowed {
            return Err(not_allowed());
        }
        if origin.is_some() && !allowed {
            return Err(not_allowed());
        }
        let verdict = self
            .verifier
            .admit(&bearer, origin.unwrap_or(""), method.as_str(), path)
            .await?;
        match verdict {
            Verdict::Admitted(principal) => Ok(Admitted { bearer, principal }),
            Verdict::Refused(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderValue, header};

    use super::*;

    #[test]
    fn exemptions() {
        assert!(admission_exempt(&Method::GET, "/health"));
        assert!(admission_exempt(&Method::GET, "/"));
        assert!(admission_exempt(&Method::GET, "/app.js"));
        assert!(admission_exempt(&Method::GET, "/api/app/session"));
        assert!(admission_exempt(&Method::POST, "/api/studio/pair"));
        assert!(!admission_exempt(&Method::GET, "/api/studio/pair"));
        assert!(!admission_exempt(&Method::GET, "/api/identity"));
        assert!(!admission_exempt(&Method::POST, "/"));
        assert!(!admission_exempt(&Method::POST, "/api/app/session"));
    }

    #[test]
    fn bearer_prefers_the_header_and_refuses_malformed_ones() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("studio_admission=sta_c"),
        );
        assert_eq!(
            bearer(&h).expect("ok"),
            Some(("sta_c".into(), Source::Cookie))
        );
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer sta_h"),
        );
        assert_eq!(
            bearer(&h).expect("ok"),
            Some(("sta_h".into(), Source::Header))
        );
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic xyz"));
        assert_eq!(bearer(&h).expect_err("refused").code, Code::Unauthorized);
        assert_eq!(bearer(&HeaderMap::new()).expect("ok"), None);
    }

    #[test]
    fn policy_covers_own_port_and_public_origin() {
        let mut config = Config::loopback(
            studio_contract::home::Home::new("/tmp/x"),
            studio_contract::secret::AppKey::generate(),
        );
        config.public_origin = Some("https://studio.example.com".into());
        config.allowed_origins = vec!["http://extra.example".into()];
        let door = FrontDoor::new(&config, SocketAddr::from(([127, 0, 0, 1], 4321)));
        assert!(door.hosts.accepts("127.0.0.1:4321"));
        assert!(door.hosts.accepts("localhost:4321"));
        assert!(door.hosts.accepts("studio.example.com"));
        assert!(door.hosts.accepts("studio.example.com:443"));
        assert!(!door.hosts.accepts("127.0.0.1:8765"));
        assert!(!door.hosts.accepts("evil.example.com"));
        assert!(door.origins.allows("http://127.0.0.1:4321"));
        assert!(door.origins.allows("http://localhost:4321"));
        assert!(door.origins.allows("https://studio.example.com"));
        assert!(door.origins.allows("http://extra.example"));
        assert!(!door.origins.allows("http://127.0.0.1:4322"));
        assert!(!door.origins.allows("null"));
        assert!(!door.origins.allows("*"));
    }
}
