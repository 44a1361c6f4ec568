//! The gRPC verifier on `run/verifier.sock`: the gate every call passes (peer uid and app
//! key, checked before any handler) and the handlers, which delegate to the same
//! [`Authority`] the HTTP API uses.

use std::{future::Future, sync::Arc, time::Duration};
use studio_contract::lifecycle::Shutdown;

use studio_contract::{
    IDENTITY, VERSION,
    error::{ApiError, Code},
    secret::AppKey,
    time::now_ms,
};
use studio_proto::{
    APP_KEY_METADATA, PROTOCOL_VERSION,
    v1::{
        AdmitReply, AdmitRequest, HelloReply, HelloRequest, Pairing, Principal, RedeemPairingReply,
        RedeemPairingRequest, Refusal, ResolveDecisionRequest, RevokeReply, RevokeRequest,
        WatchEvent, WatchRequest,
        admit_reply::Verdict,
        redeem_pairing_reply::Outcome,
        revoke_request::Target,
        verifier_server::{Verifier, VerifierServer},
        watch_event::Event,
    },
};
use tokio::{
    net::UnixListener,
    sync::{broadcast::error::RecvError, mpsc},
};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status, transport::server::UdsConnectInfo};

use crate::admission::{Admitted, Authority, PrincipalEvent};

pub(crate) const HEARTBEAT: Duration = Duration::from_millis(500);

/// Refuses a call unless it comes from our own uid and carries the launch's app key.
pub(crate) fn gate(
    uid: u32,
    key: AppKey,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |req: Request<()>| {
        let same_user = req
            .extensions()
            .get::<UdsConnectInfo>()
            .and_then(|info| info.peer_cred)
            .is_some_and(|cred| cred.uid() == uid);
        let key_ok = req
            .metadata()
            .get(APP_KEY_METADATA)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|presented| key.matches_hex(presented));
        if same_user && key_ok {
            Ok(req)
        } else {
            tracing::warn!(same_user, key_ok, "verifier call refused");
            Err(Status::permission_denied("not the app of this launch"))
        }
    }
}

pub(crate) struct VerifierService {
    authority: Arc<Authority>,
    stop: Shutdown,
    /// Where the admission calls' times go (`/metrics`).
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl VerifierService {
    pub(crate) fn new(authority: Arc<Authority>, stop: Shutdown) -> Self {
        Self {
            authority,
            stop,
            metrics: None,
        }
    }

    /// Times `admit` and `resolve_decision` into `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn timed<T>(&self, call: &str, began: std::time::Instant, reply: &Result<T, Status>) {
        if let Some(m) = &self.metrics {
            m.verified(call, reply.is_ok(), began.elapsed());
        }
    }

    fn principal(&self, a: Admitted) -> Principal {
        Principal {
            id: a.id,
            kind: a.kind.as_str().to_owned(),
            epoch: a.epoch,
            expires_at_ms: a.expires_at_ms,
            role: a.role.as_str().to_owned(),
        }
    }

    fn verdict(&self, result: Result<Admitted, ApiError>) -> Result<AdmitReply, Status> {
        let verdict = match result {
            Ok(a) => Verdict::Principal(self.principal(a)),
            Err(e) => Verdict::Refusal(refusal(e)?),
        };
        Ok(AdmitReply {
            verdict: Some(verdict),
        })
    }
}

/// A refusal the caller acts on; an internal failure is a gRPC error instead, so the app
/// treats it as "daemon unavailable" rather than as a verdict.
fn refusal(e: ApiError) -> Result<Refusal, Status> {
    if e.code == Code::Internal {
        return Err(Status::internal(e.message));
    }
    Ok(Refusal {
        code: e.code.as_str().to_owned(),
        message: e.message,
    })
}

#[tonic::async_trait]
impl Verifier for VerifierService {
    #[tracing::instrument(skip_all, fields(client))]
    async fn hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let req = req.into_inner();
        tracing::Span::current().record("client", req.client.as_str());
        if req.protocol_version != PROTOCOL_VERSION {
            tracing::warn!(theirs = req.protocol_version, "verifier protocol mismatch");
        }
        Ok(Response::new(HelloReply {
            protocol_version: PROTOCOL_VERSION,
            epoch: self.authority.epoch(),
            identity: IDENTITY.to_owned(),
            version: VERSION.to_owned(),
        }))
    }

    #[tracing::instrument(skip_all, fields(method, path))]
    async fn admit(&self, req: Request<AdmitRequest>) -> Result<Response<AdmitReply>, Status> {
        let began = std::time::Instant::now();
        let req = req.into_inner();
        let span = tracing::Span::current();
        span.record("method", req.method.as_str());
        span.record("path", req.path.as_str());
        let result = if !req.origin.is_empty() && !self.authority.origin_allowed(&req.origin) {
            Err(ApiError::new(Code::OriginNotAllowed, "origin not allowed"))
        } else {
            self.authority.admit(&req.bearer, now_ms()).await
        };
        let reply = self.verdict(result);
        self.timed("admit", began, &reply);
        Ok(Response::new(reply?))
    }

    #[tracing::instrument(skip_all)]
    async fn resolve_decision(
        &self,
        req: Request<ResolveDecisionRequest>,
    ) -> Result<Response<AdmitReply>, Status> {
        let began = std::time::Instant::now();
        let req = req.into_inner();
        let result = self
            .authority
            .resolve_decision(&req.decision_token, &req.origin, now_ms())
            .await;
        let reply = self.verdict(result);
        self.timed("resolve_decision", began, &reply);
        Ok(Response::new(reply?))
    }

    #[tracing::instrument(skip_all)]
    async fn redeem_pairing(
        &self,
        req: Request<RedeemPairingRequest>,
    ) -> Result<Response<RedeemPairingReply>, Status> {
        let req = req.into_inner();
        let origin = Some(req.origin.as_str()).filter(|o| !o.is_empty());
        let user_agent = Some(req.user_agent.as_str()).filter(|u| !u.is_empty());
        let outcome = match self
            .authority
            .redeem(&req.code, origin, user_agent, now_ms())
            .await
        {
            Ok(p) => Outcome::Pairing(Pairing {
                token: p.token,
                decision_token: p.decision_token,
                epoch: p.epoch,
                principal: p.principal,
                decision_expires_at_ms: p.decision_expires_at_ms,
                expires_at_ms: p.expires_at_ms,
            }),
            Err(e) => Outcome::Refusal(refusal(e)?),
        };
        Ok(Response::new(RedeemPairingReply {
            outcome: Some(outcome),
        }))
    }

    #[tracing::instrument(skip_all)]
    async fn revoke(&self, req: Request<RevokeRequest>) -> Result<Response<RevokeReply>, Status> {
        let now = now_ms();
        let reply = match req.into_inner().target {
            Some(Target::PrincipalId(id)) => {
                let revoked = self
                    .authority
                    .revoke(&id, "revoked_by_app", None, now)
                    .await;
                RevokeReply {
                    revoked: revoked.map_err(|e| Status::internal(e.message))?,
                    principal_id: id,
                }
            }
            Some(Target::Bearer(bearer)) => {
                let id = self
                    .authority
                    .revoke_bearer(&bearer, "disconnect", now)
                    .await;
                let id = id.map_err(|e| Status::internal(e.message))?;
                RevokeReply {
                    revoked: id.is_some(),
                    principal_id: id.unwrap_or_default(),
                }
            }
            None => return Err(Status::invalid_argument("revoke needs a target")),
        };
        Ok(Response::new(reply))
    }

    type WatchStream = ReceiverStream<Result<WatchEvent, Status>>;

    #[tracing::instrument(skip_all)]
    async fn watch(
        &self,
        _req: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        // Subscribe before the epoch event goes out, so no revocation falls between.
        let mut revoked = self.authority.subscribe();
        let epoch = self.authority.epoch();
        let stop = self.stop.clone();
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            let event = |e: Event| Ok(WatchEvent { event: Some(e) });
            if tx.send(event(Event::Epoch(epoch))).await.is_err() {
                return;
            }
            let mut beat = tokio::time::interval(HEARTBEAT);
            beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                let next = tokio::select! {
                    () = tx.closed() => break,
                    () = stop.triggered() => break,
                    r = revoked.recv() => match r {
                        Ok(PrincipalEvent::Revoked(id)) => event(Event::RevokedPrincipal(id)),
                        Ok(PrincipalEvent::RoleChanged(id)) => {
                            event(Event::ChangedPrincipal(id))
                        }
                        // The app drops every verdict of the old epoch.
                        Ok(PrincipalEvent::EpochChanged(epoch)) => event(Event::Epoch(epoch)),
                        // A watcher that missed a revocation must drop its cache: end the stream.
                        Err(RecvError::Lagged(_)) => Err(Status::data_loss("missed revocations")),
                        Err(RecvError::Closed) => break,
                    },
                    _ = beat.tick() => event(Event::HeartbeatMs(now_ms())),
                };
                let fatal = next.is_err();
                if tx.send(next).await.is_err() || fatal {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Serves the verifier on `listener` until `shutdown` resolves.
pub(crate) async fn serve(
    listener: UnixListener,
    service: VerifierService,
    key: AppKey,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let uid = crate::socket::own_uid();
    tonic::transport::Server::builder()
        .add_service(VerifierServer::with_interceptor(service, gate(uid, key)))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await
}

#[cfg(test)]
#[path = "verifier_tests.rs"]
mod tests;
