//! The client side of studiod's verifier (`run/verifier.sock`, or the apps listeners of
//! studiod on other hosts): every admission and pairing decision the app makes is asked
//! of the daemon here, with the app key in call metadata on this host.
//!
//! Invariant: no answer within the verifier timeout, or any transport error, is
//! `daemon_unavailable` — never a pass.

mod cache;
mod watch;

use std::{
    future::Future,
    path::Path,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use studio_contract::{
    error::{ApiError, Code},
    role::Role,
    secret::AppKey,
    time::now_ms,
};
use studio_proto::{
    APP_KEY_METADATA,
    v1::{
        AdmitRequest, RedeemPairingRequest, Refusal, admit_reply, redeem_pairing_reply,
        verifier_client::VerifierClient,
    },
};
use tokio::task::JoinHandle;
use tonic::{
    Request, Status,
    metadata::AsciiMetadataValue,
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Channel, Endpoint},
};

pub(crate) use cache::{LIVE_WINDOW, Principal, VerdictKey, Verdicts};

use crate::remote::Remote;
pub(crate) use studio_proto::v1::Pairing;

type Client = VerifierClient<InterceptedService<Channel, AppKeyInterceptor>>;

/// Attaches the launch's app key to every call on this host's socket; across hosts the
/// connection's certificate proves the app and no key is sent (no `Debug`: it holds the
/// key).
#[derive(Clone)]
pub(crate) struct AppKeyInterceptor(Option<AsciiMetadataValue>);

impl Interceptor for AppKeyInterceptor {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(key) = &self.0 {
            req.metadata_mut().insert(APP_KEY_METADATA, key.clone());
        }
        Ok(req)
    }
}

/// Why the verifier gave no verdict.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VerifierError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("call failed: {}: {}", .0.code(), .0.message())]
    Call(#[from] Status),
    #[error("reply carried no verdict")]
    Empty,
    #[error("could not set up the client: {0}")]
    Setup(String),
}

impl From<VerifierError> for ApiError {
    fn from(e: VerifierError) -> Self {
        tracing::warn!(error = %e, "verifier unavailable");
        ApiError::new(Code::DaemonUnavailable, "the daemon is unavailable")
    }
}

/// The verifier's answer to `Admit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Admitted(Arc<Principal>),
    Refused(ApiError),
}

/// A shared handle on the verifier: a lazily (re)connecting channel plus the watch state.
#[derive(Clone)]
pub(crate) struct Verifier {
    client: Client,
    timeout: Duration,
    verdicts: Arc<Mutex<Verdicts>>,
}

impl Verifier {
    /// Does not connect: the channel connects on first use and again after every break,
    /// so a restarted daemon is picked up without restarting the app.
    pub(crate) fn new(
        socket: &Path,
        key: &AppKey,
        timeout: Duration,
    ) -> Result<Self, VerifierError> {
        let endpoint = Endpoint::from_shared(format!("unix://{}", socket.display()))
            .map_err(|e| VerifierError::Setup(e.to_string()))?
            .connect_timeout(timeout);
        let value = AsciiMetadataValue::try_from(key.to_hex())
            .map_err(|e| VerifierError::Setup(e.to_string()))?;
        let client = VerifierClient::with_interceptor(
            endpoint.connect_lazy(),
            AppKeyInterceptor(Some(value)),
        );
        Ok(Self {
            client,
            timeout,
            verdicts: Arc::default(),
        })
    }

    /// The verifier of studiod's apps listeners on other hosts, reached through `remote`
    /// (which fails over between them); connects lazily as [`Verifier::new`] does.
    pub(crate) fn remote(remote: &Remote, timeout: Duration) -> Self {
        // A studiod that froze or was cut off keeps its connection open and answers
        // nothing: a ping unanswered within the verifier's timeout ends it, and the next
        // connection goes to another.
        let channel = Endpoint::from_static("http://studiod")
            .connect_timeout(remote.dial_bound())
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(timeout)
            .keep_alive_while_idle(true)
            .connect_with_connector_lazy(remote.grpc_connector());
        Self {
            client: VerifierClient::with_interceptor(channel, AppKeyInterceptor(None)),
            timeout,
            verdicts: Arc::default(),
        }
    }

    fn verdicts(&self) -> MutexGuard<'_, Verdicts> {
        // The state is a cache: a panic while holding it leaves nothing half-trusted that
        // the next invalidation would not clear, so recover rather than poison every call.
        self.verdicts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the `Watch` stream is live.
    pub(crate) fn daemon_ok(&self) -> bool {
        self.verdicts().is_live(Instant::now())
    }

    /// The current epoch, while the stream is live.
    pub(crate) fn epoch(&self) -> Option<String> {
        self.verdicts().epoch(Instant::now()).map(str::to_owned)
    }

    /// Whether the daemon answers: the live stream says so, else one bounded `Hello`
    /// (the stream may simply not have connected yet, e.g. right after start).
    pub(crate) async fn reachable(&self) -> bool {
        if self.daemon_ok() {
            return true;
        }
        let mut client = self.client.clone();
        self.bounded(client.hello(watch::hello()))
            .await
            .is_ok_and(|reply| reply.protocol_version == studio_proto::PROTOCOL_VERSION)
    }

    /// Forget every verdict, e.g. after this app relayed a revocation.
    pub(crate) fn invalidate(&self) {
        self.verdicts().invalidate();
    }

    /// Starts the background `Watch` task.
    pub(crate) fn spawn_watch(&self) -> JoinHandle<()> {
        tokio::spawn(watch::run(self.clone()))
    }

    /// One call, bounded by the timeout. Boxed: a call's state is kilobytes, which every
    /// request's future would otherwise carry (and move) although the cache answers most.
    fn bounded<'a, T: Send + 'a>(
        &'a self,
        call: impl Future<Output = Result<tonic::Response<T>, Status>> + Send + 'a,
    ) -> Pin<Box<dyn Future<Output = Result<T, VerifierError>> + Send + 'a>> {
        Box::pin(async move {
            match tokio::time::timeout(self.timeout, call).await {
                Ok(Ok(reply)) => Ok(reply.into_inner()),
                Ok(Err(status)) => Err(VerifierError::Call(status)),
                Err(_) => Err(VerifierError::Timeout(self.timeout)),
            }
        })
    }

    /// Is `bearer` admitted for this request? Served from the cache while the stream is live.
    #[tracing::instrument(skip_all, fields(method = %method, path = %path))]
    pub(crate) async fn admit(
        &self,
        bearer: &str,
        origin: &str,
        method: &str,
        path: &str,
    ) -> Result<Verdict, VerifierError> {
        let key = VerdictKey::new(bearer, origin);
        let generation = {
            let verdicts = self.verdicts();
            if let Some(p) = verdicts.get(&key, Instant::now(), now_ms()) {
                return Ok(Verdict::Admitted(p.clone()));
            }
            verdicts.generation()
        };
        let request = AdmitRequest {
            bearer: bearer.to_owned(),
            origin: origin.to_owned(),
            method: method.to_owned(),
            path: path.to_owned(),
        };
        let mut client = self.client.clone();
        let reply = self.bounded(client.admit(request)).await?;
        match reply.verdict.ok_or(VerifierError::Empty)? {
            admit_reply::Verdict::Principal(p) => {
                let principal = Arc::new(Principal {
                    id: p.id,
                    kind: p.kind,
                    epoch: p.epoch,
                    expires_at_ms: p.expires_at_ms,
                    // A role this app does not know shows the least (studiod decides).
                    role: Role::parse(&p.role).unwrap_or(Role::Viewer),
                });
                self.verdicts().insert(key, principal.clone(), generation);
                Ok(Verdict::Admitted(principal))
            }
            admit_reply::Verdict::Refusal(r) => Ok(Verdict::Refused(refusal(r))),
        }
    }

    /// Redeems a pairing code presented from `origin` by a browser that sent
    /// `user_agent` (its first KiB goes to studiod, which keeps a device label made of
    /// it); the outer error is "no answer".
    #[tracing::instrument(skip_all)]
    pub(crate) async fn redeem_pairing(
        &self,
        code: &str,
        origin: &str,
        user_agent: &str,
    ) -> Result<Result<Pairing, ApiError>, VerifierError> {
        let request = RedeemPairingRequest {
            code: code.to_owned(),
            origin: origin.to_owned(),
            user_agent: studio_contract::device::clip(user_agent).to_owned(),
        };
        let mut client = self.client.clone();
        let reply = self.bounded(client.redeem_pairing(request)).await?;
        match reply.outcome.ok_or(VerifierError::Empty)? {
            redeem_pairing_reply::Outcome::Pairing(p) => Ok(Ok(p)),
            redeem_pairing_reply::Outcome::Refusal(r) => Ok(Err(refusal(r))),
        }
    }
}

/// A refusal's stable code becomes the API error with that code's HTTP status; an unknown
/// code is still a refusal, never a pass.
fn refusal(r: Refusal) -> ApiError {
    let code = Code::parse(&r.code).unwrap_or(Code::Unauthorized);
    let message = if r.message.is_empty() {
        String::from("refused by the daemon")
    } else {
        r.message
    };
    ApiError::new(code, message)
}

#[cfg(test)]
pub(crate) mod fake;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_their_code_and_unknown_codes_refuse() {
        let e = refusal(Refusal {
            code: "epoch_ended".into(),
            message: String::new(),
        });
        assert_eq!(e.code, Code::EpochEnded);
        assert_eq!(e.code.status(), http::StatusCode::UNAUTHORIZED);
        let e = refusal(Refusal {
            code: "something_new".into(),
            message: "m".into(),
        });
        assert_eq!(e.code, Code::Unauthorized);
    }
}
