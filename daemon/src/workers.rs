//! studiod's worker listener (`STUDIO_WORKER_ADDR`): gRPC (`studio.worker.v1`) over TCP
//! with mutual TLS, in front of the scheduler's side of remote workers
//! (`scheduling::workers`).
//!
//! The handshake verifies a client certificate against studiod's own authority when one
//! is presented (another authority's, or an expired one, never completes a handshake);
//! it is optional only so that `Join` can be reached without one. Every other call is
//! refused unless the connection's certificate belongs to an enrolled, unrevoked worker,
//! looked up again on every call: a revoked worker's next call is refused. Handshakes
//! are bounded in time and in number.

use std::{
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use studio_contract::lifecycle::Shutdown;
use studio_proto::{
    WORKER_PROTOCOL_VERSION,
    worker::v1::{
        self as wire, Assignment, AssignmentsRequest, HeartbeatReply, HeartbeatRequest, JoinReply,
        JoinRequest, LogChunk, LogsReply, RegisterReply, RegisterRequest, ReportReply,
        ReportRequest, assignment, report_request,
        worker_server::{Worker, WorkerServer},
    },
};
use studio_schedule::Action;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{Semaphore, mpsc},
};
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status, Streaming, transport::server::Connected};

use crate::{
    error::chain,
    scheduling::{
        Scheduler,
        store::{NewWorker, WorkerRow},
        workers::{Grant, Instruction, LogStream, Session},
    },
};

/// How long a TLS handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; more connections wait to be accepted.
const HANDSHAKES_AT_ONCE: usize = 64;
/// A worker's certificate lasts this long; a new join replaces it.
const CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// An assignment stream looks at the queue at least this often.
const LOOK_AGAIN: Duration = Duration::from_secs(30);

/// The SHA-256 of the client certificate a connection's handshake verified, if any.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerCert(Option<String>);

/// A connection after its handshake, with the certificate it presented.
struct Conn {
    tls: tokio_rustls::server::TlsStream<TcpStream>,
    peer: PeerCert,
}

impl Connected for Conn {
    type ConnectInfo = PeerCert;

    fn connect_info(&self) -> PeerCert {
        self.peer.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }
}

/// The worker listener's calls.
pub(crate) struct WorkerService {
    scheduler: Arc<Scheduler>,
    authority: Arc<studio_pki::Authority>,
    epoch: crate::epoch::EpochCell,
    stop: Shutdown,
}

impl WorkerService {
    pub(crate) fn new(
        scheduler: Arc<Scheduler>,
        authority: Arc<studio_pki::Authority>,
        epoch: crate::epoch::EpochCell,
        stop: Shutdown,
    ) -> Self {
        Self {
            scheduler,
            authority,
            epoch,
            stop,
        }
    }

    /// The certificate digest of the caller's connection, if it presented one.
    fn peer<T>(req: &Request<T>) -> Option<String> {
        req.extensions().get::<PeerCert>().and_then(|p| p.0.clone())
    }

    /// The enrolled, unrevoked worker the call's certificate belongs to.
    async fn admitted<T>(&self, req: &Request<T>) -> Result<WorkerRow, Status> {
        let sha = Self::peer(req)
            .ok_or_else(|| Status::unauthenticated("this call needs the worker's certificate"))?;
        match self.scheduler.admitted_worker(&sha).await {
            Ok(Some(worker)) => Ok(worker),
            Ok(None) => Err(Status::permission_denied(
                "this certificate admits no worker: it was revoked or never enrolled",
            )),
            Err(e) => Err(internal(&e)),
        }
    }
}

fn internal(e: &dyn std::error::Error) -> Status {
    tracing::error!(error = %chain(e), "worker call failed");
    Status::internal("studiod could not record this; try again")
}

fn superseded() -> Status {
    Status::failed_precondition(
        "superseded: this attempt's lease is not this worker's any more; kill its job",
    )
}

/// A name for listings (a worker's, an app's): printable, at most 64 characters.
pub(crate) fn clean_name(name: &str, fallback: &str) -> String {
    let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
    let name = name.trim();
    if name.is_empty() {
        fallback.to_owned()
    } else {
        name.to_owned()
    }
}

/// A lease as the wire carries it: the action and the job's own environment only.
fn lease_of(grant: &Grant, ttl_ms: i64, log_cap: u64) -> wire::Lease {
    let job = &grant.job;
    let action = match &job.action {
        Action::Command { executable, args } => wire::job::Action::Command(wire::Command {
            executable: executable.clone(),
            args: args.clone(),
        }),
        Action::Agent {
            prompt,
            model,
            profile,
        } => wire::job::Action::Agent(wire::Agent {
            prompt: prompt.clone(),
            model: model.clone().unwrap_or_default(),
            profile: profile.clone().unwrap_or_default(),
        }),
    };
    wire::Lease {
        run_id: grant.run.id.clone(),
        task_id: grant.task_id.clone().unwrap_or_default(),
        attempt: u32::try_from(grant.run.attempt).unwrap_or(u32::MAX),
        fence: grant.fence,
        ttl_ms: u64::try_from(ttl_ms).unwrap_or(0),
        job: Some(wire::Job {
            action: Some(action),
            cwd: job.cwd.clone().unwrap_or_default(),
            env: job.env.clone().into_iter().collect(),
            deadline_ms: job.deadline_s.saturating_mul(1000),
            log_cap,
            secrets: job
                .secrets
                .iter()
                .map(|(variable, secret)| wire::Secret {
                    variable: variable.clone(),
                    name: secret.name.clone(),
                    value: secret.value.clone(),
                })
                .collect(),
        }),
    }
}

#[tonic::async_trait]
impl Worker for WorkerService {
    async fn join(&self, req: Request<JoinRequest>) -> Result<Response<JoinReply>, Status> {
        let body = req.into_inner();
        let token = studio_pki::JoinToken::parse(body.token.trim())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        if token.ca_fingerprint != self.authority.fingerprint() {
            return Err(Status::permission_denied(
                "the join token was made by another studiod",
            ));
        }
        let refused = || {
            tracing::warn!("a join with an unknown, used or expired token was refused");
            Status::permission_denied("the join token is unknown, already used or expired")
        };
        // Nothing is signed for a token that cannot enrol anyone.
        let digest = token.digest();
        let usable = self.scheduler.join_token_usable(&digest).await;
        if !usable.map_err(|e| internal(&e))? {
            return Err(refused());
        }
        let id = uuid::Uuid::now_v7().to_string();
        let issued = self
            .authority
            .sign_worker_csr(&body.csr_pem, &id, CERT_VALIDITY)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let worker = NewWorker {
            id: id.clone(),
            name: clean_name(&body.name, &id),
            cert_sha256: issued.fingerprint.clone(),
            cert_serial: issued.serial.clone(),
            cert_not_after_ms: issued.not_after_ms,
        };
        let joined = self
            .scheduler
            .join_worker(&digest, &worker, &self.epoch.get())
            .await
            .map_err(|e| internal(&e))?;
        // Another join may have used it between the check and now.
        let Some(row) = joined else {
            return Err(refused());
        };
        tracing::info!(worker = %row.id, name = %row.name, labels = %row.labels, "a worker joined");
        Ok(Response::new(JoinReply {
            worker_id: row.id,
            cert_pem: issued.cert_pem,
            ca_pem: self.authority.cert_pem().to_owned(),
            labels: crate::scheduling::store::split(&row.labels),
            not_after_ms: issued.not_after_ms,
        }))
    }

    async fn register(
        &self,
        req: Request<RegisterRequest>,
    ) -> Result<Response<RegisterReply>, Status> {
        let worker = self.admitted(&req).await?;
        let body = req.into_inner();
        if body.protocol != WORKER_PROTOCOL_VERSION {
            return Err(Status::failed_precondition(format!(
                "this studiod speaks worker protocol {WORKER_PROTOCOL_VERSION}, the worker {}",
                body.protocol
            )));
        }
        let version: String = body.version.chars().take(64).collect();
        let row = self
            .scheduler
            .register_worker(&worker, &body.labels, body.capacity, &version)
            .await
            .map_err(|e| internal(&e))?
            .ok_or_else(|| Status::permission_denied("this worker was revoked"))?;
        let ttl = u64::try_from(self.scheduler.lease_ttl_ms()).unwrap_or(30_000);
        Ok(Response::new(RegisterReply {
            worker_id: row.id.clone(),
            labels: row.serving(),
            lease_ttl_ms: ttl,
            heartbeat_every_ms: (ttl / 3).max(100),
        }))
    }

    type AssignmentsStream = ReceiverStream<Result<Assignment, Status>>;

    async fn assignments(
        &self,
        req: Request<AssignmentsRequest>,
    ) -> Result<Response<Self::AssignmentsStream>, Status> {
        let worker = self.admitted(&req).await?;
        let sha = worker.cert_sha256.clone();
        let (tx, rx) = mpsc::channel(16);
        let scheduler = self.scheduler.clone();
        let stop = self.stop.clone();
        let log_cap = scheduler.log_cap();
        tokio::spawn(async move {
            let mut changes = scheduler.work_changes();
            let mut session = Session::default();
            scheduler.set_connected(&worker.id, true);
            loop {
                // Looked up again each time: a revocation ends the stream.
                let worker = match scheduler.admitted_worker(&sha).await {
                    Ok(Some(w)) => w,
                    Ok(None) => {
                        let refused = Status::permission_denied("this worker was revoked");
                        let _ = tx.send(Err(refused)).await;
                        break;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(internal(&e))).await;
                        break;
                    }
                };
                let ttl = scheduler.lease_ttl_ms();
                let instructions = match scheduler.next_instructions(&worker, &mut session).await {
                    Ok(list) => list,
                    Err(e) => {
                        tracing::error!(error = %chain(&e), "cannot assign work");
                        Vec::new()
                    }
                };
                for instruction in instructions {
                    let kind = match instruction {
                        Instruction::Lease(grant) => {
                            tracing::info!(worker = %worker.id, run = %grant.run.id, task = ?grant.task_id, "leased");
                            assignment::Kind::Lease(lease_of(&grant, ttl, log_cap))
                        }
                        Instruction::Cancel {
                            run_id,
                            fence,
                            reason,
                        } => assignment::Kind::Cancel(wire::Cancel {
                            run_id,
                            fence,
                            reason,
                        }),
                    };
                    // A lease the worker never got runs out and ends `worker_lost`.
                    if tx.send(Ok(Assignment { kind: Some(kind) })).await.is_err() {
                        break;
                    }
                }
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    () = tx.closed() => break,
                    () = stop.triggered() => break,
                    () = tokio::time::sleep(LOOK_AGAIN) => {}
                }
            }
            scheduler.set_connected(&worker.id, false);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn heartbeat(
        &self,
        req: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        let worker = self.admitted(&req).await?;
        let held: Vec<(String, i64)> = req
            .into_inner()
            .held
            .into_iter()
            .take(4096)
            .map(|h| (h.run_id, h.fence))
            .collect();
        let beat = self
            .scheduler
            .heartbeat(&worker, &held)
            .await
            .map_err(|e| internal(&e))?;
        Ok(Response::new(HeartbeatReply {
            renewed: beat.renewed,
            cancel: beat.cancel,
            kill: beat.kill,
            lease_ttl_ms: u64::try_from(self.scheduler.lease_ttl_ms()).unwrap_or(30_000),
        }))
    }

    async fn logs(&self, req: Request<Streaming<LogChunk>>) -> Result<Response<LogsReply>, Status> {
        let worker = self.admitted(&req).await?;
        let mut chunks = req.into_inner();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            let stream = match wire::Stream::try_from(chunk.stream) {
                Ok(wire::Stream::Stderr) => LogStream::Stderr,
                _ => LogStream::Stdout,
            };
            let kept = self
                .scheduler
                .attempt_log(
                    &worker,
                    &chunk.run_id,
                    chunk.fence,
                    (stream, chunk.offset),
                    &chunk.data,
                )
                .await
                .map_err(|e| internal(&e))?;
            if !kept {
                return Err(superseded());
            }
        }
        Ok(Response::new(LogsReply {}))
    }

    async fn report(&self, req: Request<ReportRequest>) -> Result<Response<ReportReply>, Status> {
        let worker = self.admitted(&req).await?;
        let body = req.into_inner();
        let recorded = match body.kind {
            Some(report_request::Kind::Started(started)) => self
                .scheduler
                .attempt_started(&worker, &body.run_id, body.fence, started.pid)
                .await
                .map_err(|e| internal(&e))?,
            Some(report_request::Kind::Finished(finished)) => match finished.refusal {
                Some(refusal) => {
                    let reason = match refusal.reason.as_str() {
                        "not_allowed" => "not_allowed",
                        _ => "spawn_failed",
                    };
                    let detail: String = refusal.detail.chars().take(4096).collect();
                    self.scheduler
                        .attempt_refused(&worker, &body.run_id, body.fence, reason, &detail)
                        .await
                        .map_err(|e| internal(&e))?
                }
                None => {
                    let outcome: studio_runner::Outcome =
                        serde_json::from_str(&finished.outcome_json).map_err(|e| {
                            Status::invalid_argument(format!("the outcome does not read: {e}"))
                        })?;
                    let ended = (&outcome, finished.lost);
                    self.scheduler
                        .attempt_finished(&worker, &body.run_id, body.fence, ended)
                        .await
                        .map_err(|e| internal(&e))?
                }
            },
            None => return Err(Status::invalid_argument("a report says what happened")),
        };
        if recorded {
            Ok(Response::new(ReportReply {}))
        } else {
            tracing::warn!(worker = %worker.id, run = %body.run_id, fence = body.fence, "a superseded report was refused");
            Err(superseded())
        }
    }
}

/// Serves the worker listener on `listener` until `shutdown` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    service: WorkerService,
    tls: rustls::ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let (conns, incoming) = mpsc::channel::<io::Result<Conn>>(64);
    let stop = service.stop.clone();
    tokio::spawn(accept(listener, acceptor, conns, stop));
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(20)))
        .add_service(WorkerServer::new(service))
        .serve_with_incoming_shutdown(ReceiverStream::new(incoming), shutdown)
        .await
}

/// Accepts connections and completes their handshakes (bounded in time and number),
/// handing each finished one to the server with the certificate it presented.
async fn accept(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    conns: mpsc::Sender<io::Result<Conn>>,
    stop: Shutdown,
) {
    let handshakes = Arc::new(Semaphore::new(HANDSHAKES_AT_ONCE));
    loop {
        let Ok(permit) = handshakes.clone().acquire_owned().await else {
            return;
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.triggered() => return,
        };
        let (tcp, from) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "worker listener accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, conns) = (acceptor.clone(), conns.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::warn!(%from, error = %e, "worker handshake refused");
                    return;
                }
                Err(_) => {
                    tracing::warn!(%from, "worker handshake timed out");
                    return;
                }
            };
            let peer = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|leaf| studio_pki::fingerprint_der(leaf.as_ref()));
            let _ = conns
                .send(Ok(Conn {
                    tls,
                    peer: PeerCert(peer),
                }))
                .await;
        });
    }
}

/// A mutual-TLS listener (workers' or apps') as join tokens describe it: where it listens and the
/// fingerprint of the authority they pin.
#[derive(Debug, Clone)]
pub(crate) struct JoinDoor {
    pub addr: std::net::SocketAddr,
    pub ca_fingerprint: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joining_workers_name_is_printable_and_bounded() {
        assert_eq!(clean_name("gpu-1\u{1b}[31m\n", "id"), "gpu-1[31m");
        assert_eq!(clean_name(&"x".repeat(500), "id").len(), 64);
        assert_eq!(clean_name(" \t\n", "id"), "id");
    }
}
