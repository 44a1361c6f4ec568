//! studiod's apps listener (`STUDIO_APPS_ADDR`, docs/FLEETS.md "Split hosts"): where a
//! studio-app on another host reaches studiod, over TCP with mutual TLS under the home's
//! authority (`run/ca/`, the workers' one). One port serves three things:
//!
//! - `studio.verifier.v1.Enrolment/Join` (gRPC): spends a one-time app join token and
//!   signs the app's CSR; the only call a connection without a certificate may make;
//! - `studio.verifier.v1.Verifier/*` (gRPC): the same verifier as `run/verifier.sock`;
//! - everything else: the same HTTP API as studiod's own listener, for the app's proxy.
//!
//! The handshake verifies a client certificate against the authority when one is
//! presented (another authority's, or an expired one, never completes a handshake). Then
//! [`gate`] runs before any handler: unless the request is the enrolment call, the
//! connection's certificate must be an enrolled, unrevoked app's, looked up on every
//! request, so a revoked app's next request is refused. What is already streaming (the
//! verifier's `Watch`, an event stream) is cut within [`RECHECK`] of the revocation
//! ([`Streams`]), so a revoked app cannot keep serving from a live verdict cache. An
//! admitted request carries [`AppPeer`]; the API's door then takes the app's forwarded
//! Origin as the signed assertion of `run/verifier.sock`'s app key would be taken, and
//! never treats the request as the machine owner's.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes, HttpBody},
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use http_body::Frame;
use studio_contract::{
    error::{ApiError, Code},
    lifecycle::Shutdown,
    time::now_ms,
};
use studio_frontdoor::ClientCertificate;
use studio_proto::v1::{
    AppJoinReply, AppJoinRequest,
    enrolment_server::{Enrolment, EnrolmentServer},
    verifier_server::VerifierServer,
};
use tokio::sync::watch;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

use crate::{
    audit::{Actor, Kind as AuditKind},
    error::chain,
    store::{NewApp, Store},
    verifier::VerifierService,
};

/// An app's certificate lasts this long; a new join replaces it.
const CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// The path prefix of the one call a connection without a certificate may make.
const ENROLMENT: &str = "/studio.verifier.v1.Enrolment/";
/// The path prefix of the verifier's calls.
const VERIFIER: &str = "/studio.verifier.v1.Verifier/";
/// How often the certificates of apps with open streams are looked up again.
const RECHECK: Duration = Duration::from_secs(1);

/// A request whose connection belongs to an enrolled app: set by [`gate`] alone (an
/// extension, so nothing on the wire can pose as it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AppPeer;

/// The listener's router: the enrolment and verifier services beside `api` (studiod's
/// API router, behind a door that names this listener), all behind [`gate`]; the
/// streams' re-check runs until `stop`.
pub(crate) fn router(
    api: Router,
    verifier: VerifierService,
    enrolment: EnrolmentService,
    store: Store,
    stop: Shutdown,
) -> Router {
    let gate_state = Gate {
        store,
        streams: Streams::default(),
    };
    tokio::spawn(gate_state.clone().recheck(stop));
    api.route_service(
        &format!("{VERIFIER}{{*call}}"),
        VerifierServer::new(verifier),
    )
    .route_service(
        &format!("{ENROLMENT}{{*call}}"),
        EnrolmentServer::new(enrolment),
    )
    .layer(axum::middleware::from_fn_with_state(gate_state, gate))
}

/// What [`gate`] needs: the store apps are looked up in, and the open streams.
#[derive(Clone)]
struct Gate {
    store: Store,
    streams: Streams,
}

/// For each certificate with answers still streaming, a flag its answers end on.
#[derive(Clone, Default)]
struct Streams(Arc<Mutex<HashMap<String, watch::Sender<bool>>>>);

impl Streams {
    /// A receiver that turns `true` when the certificate `sha` stops admitting its app.
    fn watch(&self, sha: &str) -> watch::Receiver<bool> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(sha.to_owned())
            .or_insert_with(|| watch::channel(false).0)
            .subscribe()
    }

    /// The certificates something still streams to (forgetting the others).
    fn open(&self) -> Vec<String> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, tx| tx.receiver_count() > 0);
        map.keys().cloned().collect()
    }

    /// Ends every answer streaming to `sha`.
    fn cut(&self, sha: &str) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = map.remove(sha) {
            tx.send_replace(true);
        }
    }
}

impl Gate {
    /// Every [`RECHECK`], looks up the certificates with open streams and cuts those that
    /// admit no app any more (revoked, here or by another member, or expired).
    async fn recheck(self, stop: Shutdown) {
        let mut tick = tokio::time::interval(RECHECK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.triggered() => return,
                _ = tick.tick() => {}
            }
            for sha in self.streams.open() {
                match self.store.admitted_app(&sha, now_ms()).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        tracing::warn!(certificate = %sha, "apps listener: a revoked app's streams were cut");
                        self.streams.cut(&sha);
                    }
                    Err(e) => {
                        tracing::warn!(error = %chain(&e), "apps listener: cannot re-check the apps");
                    }
                }
            }
        }
    }
}

/// An admitted answer's body, ended with an error once its app's certificate no longer
/// admits it (a finished answer is unaffected; a stream is cut mid-way).
struct CutOff {
    inner: Body,
    revoked: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl HttpBody for CutOff {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.revoked.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(axum::Error::new("the app was revoked"))));
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Refuses every request but enrolment unless its connection's certificate belongs to an
/// enrolled, unrevoked app; marks an admitted one with [`AppPeer`] and ties its answer to
/// the app staying admitted.
async fn gate(State(gate): State<Gate>, mut req: Request, next: Next) -> Response {
    let store = &gate.store;
    let path = req.uri().path();
    if path.starts_with(ENROLMENT) {
        return next.run(req).await;
    }
    let grpc = path.starts_with(VERIFIER);
    let Some(ClientCertificate(der)) = req.extensions().get::<ClientCertificate>().cloned() else {
        tracing::warn!(
            path,
            "apps listener: a request without a certificate was refused"
        );
        return refused(
            grpc,
            "this listener needs an enrolled studio-app's certificate",
        );
    };
    let sha = studio_pki::fingerprint_der(&der);
    match store.admitted_app(&sha, now_ms()).await {
        Ok(Some(id)) => {
            tracing::debug!(app = %id, path, "apps listener: an enrolled app's request");
            req.extensions_mut().insert(AppPeer);
            let mut revoked = gate.streams.watch(&sha);
            let answer = next.run(req).await;
            answer.map(|inner| {
                Body::new(CutOff {
                    inner,
                    revoked: Box::pin(async move {
                        // A dropped sender (the listener stopping) cuts too.
                        let _ = revoked.wait_for(|r| *r).await;
                    }),
                })
            })
        }
        Ok(None) => {
            tracing::warn!(
                certificate = %sha,
                "apps listener: a certificate that admits no app was refused"
            );
            refused(
                grpc,
                "this certificate admits no app: it was revoked or never enrolled",
            )
        }
        Err(e) => {
            tracing::error!(error = %chain(&e), "apps listener: cannot look an app up");
            // Fail closed: no answer is a refusal, never a pass.
            if grpc {
                Status::unavailable("studiod cannot check this app now").into_http()
            } else {
                ApiError::new(Code::DaemonUnavailable, "studiod cannot check this app now")
                    .into_response()
            }
        }
    }
}

/// A refusal in the caller's protocol: a gRPC status, or the API's error body (403).
fn refused(grpc: bool, why: &str) -> Response {
    if grpc {
        Status::permission_denied(why).into_http()
    } else {
        ApiError::new(Code::Forbidden, why).into_response()
    }
}

/// `Enrolment.Join`: a one-time token and a CSR in, a certificate of the authority out.
pub(crate) struct EnrolmentService {
    authority: Arc<studio_pki::Authority>,
    store: Store,
    audit: crate::audit::Audit,
    epoch: crate::epoch::EpochCell,
}

impl EnrolmentService {
    pub(crate) fn new(
        authority: Arc<studio_pki::Authority>,
        store: Store,
        audit: crate::audit::Audit,
        epoch: crate::epoch::EpochCell,
    ) -> Self {
        Self {
            authority,
            store,
            audit,
            epoch,
        }
    }
}

fn internal(e: &dyn std::error::Error) -> Status {
    tracing::error!(error = %chain(e), "app enrolment failed");
    Status::internal("studiod could not record this; try again")
}

#[tonic::async_trait]
impl Enrolment for EnrolmentService {
    async fn join(
        &self,
        req: GrpcRequest<AppJoinRequest>,
    ) -> Result<GrpcResponse<AppJoinReply>, Status> {
        let body = req.into_inner();
        let token = studio_pki::JoinToken::parse(body.token.trim())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if token.ca_fingerprint != self.authority.fingerprint() {
            return Err(Status::permission_denied(
                "the join token was made by another studiod",
            ));
        }
        let refused = || {
            tracing::warn!("an app join with an unknown, used or expired token was refused");
            Status::permission_denied("the join token is unknown, already used or expired")
        };
        let digest = token.digest();
        // Nothing is signed for a token that cannot enrol anyone.
        if !self
            .store
            .app_token_usable(&digest, now_ms())
            .await
            .map_err(|e| internal(&e))?
        {
            return Err(refused());
        }
        let id = uuid::Uuid::now_v7().to_string();
        let issued = self
            .authority
            .sign_app_csr(&body.csr_pem, &id, CERT_VALIDITY)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let app = NewApp {
            id: id.clone(),
            name: crate::workers::clean_name(&body.name, &id),
            cert_sha256: issued.fingerprint.clone(),
            cert_serial: issued.serial.clone(),
            cert_not_after_ms: issued.not_after_ms,
        };
        // Another join may have spent the token since the check.
        let Some(row) = self
            .store
            .join_app(&digest, &app, now_ms())
            .await
            .map_err(|e| internal(&e))?
        else {
            return Err(refused());
        };
        let detail = serde_json::json!({ "name": row.name });
        self.audit
            .record_change(
                AuditKind::AppJoined,
                &Actor::studiod(&self.epoch.get()),
                &format!("app:{}", row.id),
                detail,
            )
            .await;
        tracing::info!(app = %row.id, name = %row.name, "an app joined");
        Ok(GrpcResponse::new(AppJoinReply {
            app_id: row.id,
            cert_pem: issued.cert_pem,
            ca_pem: self.authority.cert_pem().to_owned(),
            not_after_ms: issued.not_after_ms,
        }))
    }
}

#[cfg(test)]
#[path = "apps_tests.rs"]
mod tests;
