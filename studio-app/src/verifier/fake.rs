//! A test double of studiod's verifier (unit tests only): serves the tonic `Verifier`
//! service on `<home>/run/verifier.sock` with scripted tokens, codes and watch events.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use studio_contract::secret::AppKey;
use studio_proto::{
    APP_KEY_METADATA, PROTOCOL_VERSION,
    v1::{
        AdmitReply, AdmitRequest, HelloReply, HelloRequest, Pairing, Principal, RedeemPairingReply,
        RedeemPairingRequest, Refusal, ResolveDecisionRequest, RevokeReply, RevokeRequest,
        WatchEvent, WatchRequest, admit_reply, redeem_pairing_reply,
        verifier_server::{Verifier, VerifierServer},
        watch_event::Event,
    },
};
use tokio::{
    net::UnixListener,
    sync::{broadcast, mpsc, watch},
    task::JoinHandle,
};
use tokio_stream::{
    Stream,
    wrappers::{ReceiverStream, UnixListenerStream},
};
use tonic::{Request, Response, Status};

/// What the fake knows and what it saw.
#[derive(Default)]
pub(crate) struct Script {
    /// bearer → principal id
    pub(crate) tokens: HashMap<String, String>,
    pub(crate) revoked: HashSet<String>,
    /// code → (admission token, principal id)
    pub(crate) codes: HashMap<String, (String, String)>,
    pub(crate) redeem_origins: Vec<String>,
}

pub(crate) struct FakeState {
    key: AppKey,
    pub(crate) epoch: String,
    pub(crate) script: Mutex<Script>,
    pub(crate) admit_calls: AtomicUsize,
    /// Stop heartbeats while keeping the stream open (a hung daemon).
    pub(crate) mute: AtomicBool,
    /// Answer `Admit` only after this long.
    pub(crate) admit_delay: Mutex<Duration>,
    events: broadcast::Sender<WatchEvent>,
    stop: watch::Sender<bool>,
}

impl FakeState {
    pub(crate) fn script(&self) -> MutexGuard<'_, Script> {
        self.script.lock().expect("script lock")
    }

    /// Revokes a principal's tokens and announces it on every watch stream.
    pub(crate) fn revoke(&self, principal: &str) {
        {
            let mut s = self.script();
            let bearers: Vec<String> = s
                .tokens
                .iter()
                .filter(|(_, p)| p.as_str() == principal)
                .map(|(b, _)| b.clone())
                .collect();
            s.revoked.extend(bearers);
        }
        let _ = self.events.send(WatchEvent {
            event: Some(Event::RevokedPrincipal(principal.to_owned())),
        });
    }

    fn check(&self, metadata: &tonic::metadata::MetadataMap) -> Result<(), Status> {
        let ok = metadata
            .get(APP_KEY_METADATA)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|k| self.key.matches_hex(k));
        if ok {
            Ok(())
        } else {
            Err(Status::permission_denied("bad app key"))
        }
    }
}

fn refusal(code: &str) -> Refusal {
    Refusal {
        code: code.into(),
        message: format!("fake: {code}"),
    }
}

#[derive(Clone)]
struct Service(Arc<FakeState>);

type EventStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Verifier for Service {
    async fn hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        self.0.check(req.metadata())?;
        Ok(Response::new(HelloReply {
            protocol_version: PROTOCOL_VERSION,
            epoch: self.0.epoch.clone(),
            identity: "studio".into(),
            version: "test".into(),
        }))
    }

    async fn admit(&self, req: Request<AdmitRequest>) -> Result<Response<AdmitReply>, Status> {
        self.0.check(req.metadata())?;
        self.0.admit_calls.fetch_add(1, Ordering::SeqCst);
        let delay = *self.0.admit_delay.lock().expect("delay lock");
        tokio::time::sleep(delay).await;
        let bearer = req.into_inner().bearer;
        let s = self.0.script();
        let verdict = if s.revoked.contains(&bearer) {
            admit_reply::Verdict::Refusal(refusal("revoked"))
        } else if let Some(id) = s.tokens.get(&bearer) {
            admit_reply::Verdict::Principal(Principal {
                id: id.clone(),
                kind: "browser".into(),
                epoch: self.0.epoch.clone(),
                expires_at_ms: 0,
                // A principal named `viewer…` is a viewer; every other an admin.
                role: if id.starts_with("viewer") {
                    "viewer"
                } else {
                    "admin"
                }
                .into(),
            })
        } else if bearer.starts_with("old_") {
            admit_reply::Verdict::Refusal(refusal("epoch_ended"))
        } else {
            admit_reply::Verdict::Refusal(refusal("unauthorized"))
        };
        Ok(Response::new(AdmitReply {
            verdict: Some(verdict),
        }))
    }

    async fn resolve_decision(
        &self,
        _req: Request<ResolveDecisionRequest>,
    ) -> Result<Response<AdmitReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn redeem_pairing(
        &self,
        req: Request<RedeemPairingRequest>,
    ) -> Result<Response<RedeemPairingReply>, Status> {
        self.0.check(req.metadata())?;
        let req = req.into_inner();
        let mut s = self.0.script();
        s.redeem_origins.push(req.origin);
        let outcome = match s.codes.remove(&req.code) {
            Some((token, principal)) => {
                s.tokens.insert(token.clone(), principal.clone());
                redeem_pairing_reply::Outcome::Pairing(Pairing {
                    token,
                    decision_token: "std_decision".into(),
                    epoch: self.0.epoch.clone(),
                    principal,
                    decision_expires_at_ms: 1_795_000_000_123,
                    // An hour from now, less than a second ago: a cookie of 3600 s.
                    expires_at_ms: studio_contract::time::now_ms() + 3_600_999,
                })
            }
            None => redeem_pairing_reply::Outcome::Refusal(refusal("pairing_code_invalid")),
        };
        Ok(Response::new(RedeemPairingReply {
            outcome: Some(outcome),
        }))
    }

    async fn revoke(&self, _req: Request<RevokeRequest>) -> Result<Response<RevokeReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    type WatchStream = EventStream;

    async fn watch(&self, req: Request<WatchRequest>) -> Result<Response<EventStream>, Status> {
        self.0.check(req.metadata())?;
        let (tx, rx) = mpsc::channel(16);
        let state = self.0.clone();
        tokio::spawn(async move {
            let first = WatchEvent {
                event: Some(Event::Epoch(state.epoch.clone())),
            };
            if tx.send(Ok(first)).await.is_err() {
                return;
            }
            let mut events = state.events.subscribe();
            let mut stop = state.stop.subscribe();
            let mut beat = tokio::time::interval(Duration::from_millis(100));
            loop {
                let event = tokio::select! {
                    _ = beat.tick() => {
                        if state.mute.load(Ordering::SeqCst) { continue; }
                        WatchEvent { event: Some(Event::HeartbeatMs(1)) }
                    }
                    Ok(event) = events.recv() => event,
                    _ = stop.wait_for(|s| *s) => return,
                };
                if tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// A running fake verifier; `stop` ends its streams and closes its connections.
pub(crate) struct FakeVerifier {
    pub(crate) state: Arc<FakeState>,
    server: JoinHandle<()>,
}

impl FakeVerifier {
    pub(crate) fn start(home: &Path, key: &AppKey, epoch: &str) -> Self {
        let run = home.join("run");
        std::fs::create_dir_all(&run).expect("run dir");
        let socket = run.join("verifier.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).expect("bind verifier socket");
        let (stop, _) = watch::channel(false);
        let state = Arc::new(FakeState {
            key: key.clone(),
            epoch: epoch.to_owned(),
            script: Mutex::default(),
            admit_calls: AtomicUsize::new(0),
            mute: AtomicBool::new(false),
            admit_delay: Mutex::new(Duration::ZERO),
            events: broadcast::channel(16).0,
            stop,
        });
        let mut stopped = state.stop.subscribe();
        let service = VerifierServer::new(Service(state.clone()));
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await;
        });
        Self { state, server }
    }

    /// Like a daemon exiting: streams end, connections close, the socket disappears.
    pub(crate) async fn stop(self, home: &Path) {
        let _ = self.state.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server).await;
        let _ = std::fs::remove_file(home.join("run/verifier.sock"));
    }
}
