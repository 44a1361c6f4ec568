//! studiod's stage of the shared front door (`studio_frontdoor::door`): the Origin a
//! request is judged by is the app's signed assertion when it carries one (on the apps
//! listener, an enrolled app's forwarded one), the allowed
//! origins are the authority's, and admission is the bearer. Host, CORS, the JSON rule
//! and the request span are the door's.

use std::sync::Arc;

use axum::{extract::Request, response::IntoResponse};
use studio_api::{
    route::{Access, Decides, Route},
    routes::Op,
};
use studio_contract::{
    error::{ApiError, Code},
    forward,
    host::HostPolicy,
    secret::AppKey,
    time::now_ms,
};
use studio_frontdoor::door::{self, Door, Stage};

use crate::{
    admission::{Admitted, Authority, PrincipalKind},
    apps::AppPeer,
    audit::{Actor, Kind as AuditKind},
};

/// What the listener itself answers to and how the app's forwarded origin is checked.
pub(crate) struct FrontDoor {
    pub host: HostPolicy,
    pub app_key: AppKey,
}

impl FrontDoor {
    /// The door in front of studiod's router.
    pub(crate) fn door(&self, authority: Arc<Authority>) -> Door<Daemon> {
        Door::new(
            self.host.clone(),
            Daemon {
                authority,
                app_key: self.app_key.clone(),
            },
        )
    }
}

/// The principal a request was admitted as (absent on the exempt routes).
#[derive(Debug, Clone)]
pub(crate) struct Caller(pub Admitted);

/// Who asks for a change, for its audit row: the admitted caller, the origin the request
/// was judged by, and this epoch. A handler that changes anything takes one.
pub(crate) struct By(pub Actor);

impl axum::extract::FromRequestParts<super::ApiState> for By {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &super::ApiState,
    ) -> Result<Self, ApiError> {
        // Every route that changes something is admitted first: no caller is a wiring bug.
        let Caller(who) = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::new(Code::Unauthorized, "missing bearer token"))?;
        let origin = parts
            .extensions
            .get::<door::RequestOrigin>()
            .and_then(|o| o.0.clone());
        Ok(Self(Actor::new(&who, origin)))
    }
}

/// The machine's owner at a terminal: the daemon token sent directly to studiod (no
/// browser Origin, not forwarded by the app). Routes marked `Access::DaemonToken` take
/// one; anyone else is refused `403 daemon_token_required`.
pub(crate) struct MachineOwner;

impl axum::extract::FromRequestParts<super::ApiState> for MachineOwner {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &super::ApiState,
    ) -> Result<Self, ApiError> {
        let Caller(who) = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::new(Code::Unauthorized, "missing bearer token"))?;
        let from_browser = parts
            .extensions
            .get::<door::RequestOrigin>()
            .is_some_and(|o| o.0.is_some())
            || parts
                .headers
                .contains_key(studio_contract::forward::SIGNATURE_HEADER)
            || parts.extensions.get::<AppPeer>().is_some();
        if who.kind != crate::admission::PrincipalKind::Daemon || from_browser {
            return Err(ApiError::new(
                Code::DaemonTokenRequired,
                "only the machine's owner may: use the daemon token from a terminal on this machine",
            ));
        }
        Ok(Self)
    }
}

pub(crate) struct Daemon {
    authority: Arc<Authority>,
    app_key: AppKey,
}

impl Stage for Daemon {
    type Admitted = Caller;

    /// The app's assertion when it signed one (a bad signature is refused), else the
    /// request's own Origin header.
    fn origin(&self, req: &Request) -> Result<Option<String>, ApiError> {
        let headers = req.headers();
        // On the apps listener the connection's certificate is the app's proof, as the
        // signature is on this host: its forwarded Origin stands (empty or absent: none).
        if req.extensions().get::<AppPeer>().is_some() {
            return match headers.get(forward::ORIGIN_HEADER).map(|v| v.to_str()) {
                None => Ok(None),
                Some(Ok(claimed)) => Ok(Some(claimed.to_owned()).filter(|c| !c.is_empty())),
                Some(Err(_)) => Err(ApiError::new(
                    Code::Unauthorized,
                    "a forwarded origin that is not text",
                )),
            };
        }
        let Some(signature) = headers.get(forward::SIGNATURE_HEADER) else {
            return door::header_origin(headers).map(|o| o.map(str::to_owned));
        };
        let claimed = match headers.get(forward::ORIGIN_HEADER) {
            None => Some(""),
            Some(v) => v.to_str().ok(),
        };
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let valid = match (signature.to_str(), claimed) {
            (Ok(signature), Some(claimed)) => forward::verify(
                &self.app_key,
                signature,
                now_ms(),
                req.method().as_str(),
                path,
                claimed,
            ),
            _ => false,
        };
        if !valid {
            tracing::warn!("bad forwarded-origin signature");
            return Err(ApiError::new(
                Code::Unauthorized,
                "bad forwarded-origin signature",
            ));
        }
        Ok(claimed.filter(|c| !c.is_empty()).map(str::to_owned))
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        self.authority.origin_allowed(origin)
    }

    /// A pairing refused for its origin is still in the trail.
    async fn origin_refused(&self, method: &http::Method, path: &str, origin: &str) {
        if method == http::Method::POST && path == "/api/studio/pair" {
            let detail = serde_json::json!({ "reason": "origin_not_allowed", "origin": origin });
            self.authority
                .audit()
                .record(AuditKind::PairingFailed, None, detail)
                .await;
        }
    }

    /// The Origin rides on in the request extensions, for the routes.
    async fn admit(&self, mut req: Request, origin: Option<String>) -> door::Judged<Caller> {
        let judged = self
            .judge(
                req.method(),
                req.uri().path(),
                req.headers(),
                origin.as_deref(),
            )
            .await;
        req.extensions_mut().insert(door::RequestOrigin(origin));
        match judged {
            Ok(admitted) => Ok((req, admitted.map(Caller))),
            Err(refusal) => Err((refusal.into_response(), req)),
        }
    }
}

impl Daemon {
    /// Who the request is admitted as (`None` for a route that needs no bearer), or why
    /// it is refused: its bearer, the role its route needs, and for a destructive route
    /// from a browser the decision token.
    async fn judge(
        &self,
        method: &http::Method,
        path: &str,
        headers: &http::HeaderMap,
        origin: Option<&str>,
    ) -> Result<Option<Admitted>, ApiError> {
        // One lookup in the inventory answers both: whether a bearer is needed, and
        // which role.
        let route = studio_api::routes::find(method, path);
        if exempt(route) {
            return Ok(None);
        }
        let token = match door::bearer(headers) {
            Ok(Some(token)) => token,
            Ok(None) | Err(_) => {
                return Err(ApiError::new(Code::Unauthorized, "missing bearer token"));
            }
        };
        let admitted = self.authority.admit(token, now_ms()).await?;
        tracing::Span::current().record("principal", admitted.id.as_str());
        if let Some(refusal) = route.and_then(|r| admitted.role.refusal(r.needs)) {
            return Err(refusal);
        }
        match route.map(|r| r.decides) {
            None | Some(Decides::No) => {}
            Some(Decides::Destructive) => {
                require_decision(&self.authority, &admitted, headers, origin).await?;
            }
            Some(Decides::Human) => {
                require_person(&self.authority, &admitted, headers, origin).await?;
            }
        }
        Ok(Some(admitted))
    }
}

/// The header a browser's page sends its decision token in.
pub(crate) const DECISION_HEADER: &str = "x-studio-decision-token";

/// A destructive change from a browser needs that browser's own decision token, resolved
/// against the origin the request was judged by (`403 decision_required` otherwise, with
/// the resolver's reason); the daemon token, the machine owner's, needs none.
pub(crate) async fn require_decision(
    authority: &Authority,
    who: &Admitted,
    headers: &http::HeaderMap,
    origin: Option<&str>,
) -> Result<(), ApiError> {
    if who.kind == PrincipalKind::Daemon {
        return Ok(());
    }
    own_decision_token(authority, who, headers, origin)
        .await
        .map_err(|why| {
            ApiError::new(
                Code::DecisionRequired,
                format!(
                    "{why}: this change needs this browser's decision token, which the \
                     cockpit keeps for the tab it paired in (pair again with `studio pair` to \
                     get a new one), or the daemon token from a terminal"
                ),
            )
        })
}

/// Only a person decides an approval: a paired browser's admission and its own decision
/// token, resolved with its origin and epoch. The daemon token, admission alone, or a
/// token another session, origin or epoch holds, or one expired, is refused `403
/// human_decision_required`, with the reason.
pub(crate) async fn require_person(
    authority: &Authority,
    who: &Admitted,
    headers: &http::HeaderMap,
    origin: Option<&str>,
) -> Result<(), ApiError> {
    let why = if who.kind == PrincipalKind::Daemon {
        "the daemon token cannot decide an approval".to_owned()
    } else {
        match own_decision_token(authority, who, headers, origin).await {
            Ok(()) => return Ok(()),
            Err(why) => why,
        }
    };
    Err(ApiError::new(
        Code::HumanDecisionRequired,
        format!(
            "{why}: only a person decides, from a paired browser's cockpit, which sends its \
             decision token"
        ),
    ))
}

/// Whether the request carries `who`'s own decision token, valid for `origin`; why not.
async fn own_decision_token(
    authority: &Authority,
    who: &Admitted,
    headers: &http::HeaderMap,
    origin: Option<&str>,
) -> Result<(), String> {
    let Some(token) = headers.get(DECISION_HEADER) else {
        return Err("no decision token was sent".into());
    };
    let token = token
        .to_str()
        .map_err(|_| "the decision token is not text".to_owned())?;
    match authority
        .resolve_decision(token, origin.unwrap_or_default(), now_ms())
        .await
    {
        Ok(decider) if decider.id == who.id => Ok(()),
        Ok(_) => Err("the decision token is another session's".into()),
        Err(e) => Err(e.message),
    }
}

/// Whether the inventory lets this route be called without a bearer (liveness, pairing).
fn exempt(route: Option<&Route<Op>>) -> bool {
    route.is_some_and(|r| matches!(r.access, Access::Open | Access::PairingCode))
}

#[cfg(test)]
fn is_exempt(method: &http::Method, path: &str) -> bool {
    exempt(studio_api::routes::find(method, path))
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    #[test]
    fn exemptions_come_from_the_inventory() {
        assert!(is_exempt(&Method::GET, "/health"));
        assert!(is_exempt(&Method::POST, "/api/studio/pair"));
        assert!(!is_exempt(&Method::POST, "/health"));
        assert!(!is_exempt(&Method::GET, "/api/studio/pair"));
        assert!(!is_exempt(&Method::GET, "/api/identity"));
    }
}
