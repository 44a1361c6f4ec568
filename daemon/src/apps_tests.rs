//! The apps listener from outside, in-process but over real TLS and TCP: enrolment with a
//! one-time token, and the gate in front of the verifier and the API (no certificate,
//! another authority's, a revoked one), and what an enrolled app's requests may claim.

use std::{error::Error as _, net::SocketAddr, sync::Arc, time::Duration};

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use studio_api::{AppTokenCreated, EnrolledApp};
use studio_proto::v1::{
    AppJoinRequest, HelloRequest, WatchRequest, enrolment_client::EnrolmentClient,
    verifier_client::VerifierClient,
};
use tokio::{net::TcpStream, sync::oneshot};
use tonic::{
    Code as GrpcCode,
    transport::{Channel, Endpoint},
};

use crate::{Config, Daemon, testing::TempDir};

const TOKEN: &str = "apps-test-daemon-token";

struct Running {
    _dir: TempDir,
    api: SocketAddr,
    apps: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), crate::DaemonError>>,
}

impl Running {
    async fn start() -> Self {
        // reqwest's TLS needs a process-wide provider (studiod installs one at start).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = TempDir::new("apps");
        let mut config = Config::for_home(dir.path());
        config.token = Some(TOKEN.to_owned());
        config.apps_addr = Some("127.0.0.1:0".parse().expect("addr"));
        let daemon = Daemon::build(config).await.expect("build");
        let (api, apps) = (daemon.addr(), daemon.apps_addr().expect("apps listener"));
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let task = tokio::spawn(daemon.run_until(
            async move {
                let _ = stopped.await;
            },
            move |_| {
                let _ = ready_tx.send(());
            },
        ));
        ready_rx.await.expect("ready");
        Self {
            _dir: dir,
            api,
            apps,
            stop: Some(stop),
            task,
        }
    }

    /// studiod's own API with the daemon token.
    async fn owner(&self, method: reqwest::Method, path: &str) -> reqwest::Response {
        reqwest::Client::new()
            .request(method, format!("http://{}{path}", self.api))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .expect("studiod answers")
    }

    async fn stop(mut self) {
        let _ = self.stop.take().expect("running").send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("stops in time")
            .expect("join")
            .expect("clean stop");
    }
}

/// A gRPC channel to the apps listener with `tls` (its server checked as `studiod`).
async fn channel(
    at: SocketAddr,
    tls: rustls::ClientConfig,
) -> Result<Channel, tonic::transport::Error> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    Endpoint::from_static("http://studiod")
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            async move {
                let tcp = TcpStream::connect(at).await?;
                let name = ServerName::try_from(studio_pki::SERVER_NAME).expect("a name");
                Ok::<_, std::io::Error>(TokioIo::new(connector.connect(name, tcp).await?))
            }
        }))
        .await
}

/// HTTPS to the apps listener with `tls` (HTTP/1.1), as studio-app's proxy speaks it.
fn https(at: SocketAddr, tls: rustls::ClientConfig) -> (reqwest::Client, String) {
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .resolve(studio_pki::SERVER_NAME, at)
        .build()
        .expect("a client");
    (
        client,
        format!("https://{}:{}", studio_pki::SERVER_NAME, at.port()),
    )
}

/// An enrolled app's three PEMs: its authority, its certificate and its key.
struct Enrolled {
    id: String,
    ca: String,
    cert: String,
    key: String,
}

impl Enrolled {
    fn grpc(&self) -> rustls::ClientConfig {
        studio_pki::app_client_configs(&self.ca, &self.cert, &self.key)
            .expect("configs")
            .0
    }

    fn http(&self) -> rustls::ClientConfig {
        studio_pki::app_client_configs(&self.ca, &self.cert, &self.key)
            .expect("configs")
            .1
    }
}

/// Joins with `token` over a connection pinning the authority it names.
async fn join(at: SocketAddr, token: &str) -> Result<Enrolled, tonic::Status> {
    let parsed = studio_pki::JoinToken::parse(token).expect("a token");
    let tls = studio_pki::joining_client_config(&parsed.ca_fingerprint).expect("tls");
    let (key, csr_pem) = studio_pki::key_and_csr("laptop").expect("csr");
    let reply = EnrolmentClient::new(channel(at, tls).await.expect("reach the listener"))
        .join(AppJoinRequest {
            token: token.to_owned(),
            csr_pem,
            name: "front-1".into(),
        })
        .await?
        .into_inner();
    Ok(Enrolled {
        id: reply.app_id,
        ca: reply.ca_pem,
        cert: reply.cert_pem,
        key,
    })
}

async fn hello(tls: rustls::ClientConfig, at: SocketAddr) -> Result<String, tonic::Status> {
    let channel = channel(at, tls)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    Ok(VerifierClient::new(channel)
        .hello(HelloRequest {
            protocol_version: studio_proto::PROTOCOL_VERSION,
            client: "apps-test".into(),
        })
        .await?
        .into_inner()
        .epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_enrols_once_and_only_its_certificate_passes_the_gate() {
    let studio = Running::start().await;
    let created = studio
        .owner(reqwest::Method::POST, "/api/apps/tokens")
        .await;
    assert_eq!(created.status(), 201);
    let created: AppTokenCreated = created.json().await.expect("a token");
    assert_eq!(created.server, studio.apps.to_string());

    let app = join(studio.apps, &created.token).await.expect("joins");
    let again = join(studio.apps, &created.token)
        .await
        .err()
        .expect("spent");
    assert_eq!(again.code(), GrpcCode::PermissionDenied, "{again:?}");

    // The enrolled app reaches the verifier and the API.
    let epoch = hello(app.grpc(), studio.apps).await.expect("admitted");
    assert_eq!(epoch.len(), 32);
    let (client, base) = https(studio.apps, app.http());
    let reply = client
        .get(format!("{base}/api/schedules"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answers");
    assert_eq!(reply.status(), 200);
    // An app's request is never the machine owner's, whatever bearer it forwards.
    let reply = client
        .post(format!("{base}/api/admin/epoch/rotate"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .send()
        .await
        .expect("answers");
    assert_eq!(reply.status(), 403);
    // The Origin it forwards is judged like a browser's.
    let reply = client
        .get(format!("{base}/api/schedules"))
        .bearer_auth(TOKEN)
        .header(
            studio_contract::forward::ORIGIN_HEADER,
            "http://evil.example",
        )
        .send()
        .await
        .expect("answers");
    assert_eq!(reply.status(), 403);

    // No certificate: only enrolment, nothing else.
    let anonymous =
        || studio_pki::joining_client_config(&created.token[created.token.len() - 64..]);
    let refused = hello(anonymous().expect("tls"), studio.apps)
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), GrpcCode::PermissionDenied, "{refused:?}");
    let (client, base) = https(studio.apps, anonymous().expect("tls"));
    let reply = client
        .get(format!("{base}/api/health"))
        .send()
        .await
        .expect("answers");
    assert_eq!(reply.status(), 403);

    // Another authority's certificate never completes a handshake.
    let other_dir = TempDir::new("apps-other-ca");
    let other = studio_pki::Authority::load_or_create(other_dir.path()).expect("a CA");
    let (key, csr) = studio_pki::key_and_csr("intruder").expect("csr");
    let cert = other
        .sign_app_csr(&csr, "intruder", Duration::from_secs(3600))
        .expect("signed");
    let forged = studio_pki::app_client_configs(&app.ca, &cert.cert_pem, &key).expect("tls");
    // (TLS 1.3: the client learns of it at its first request, as a broken connection,
    // never as an answer of the gate.)
    let refused = hello(forged.0, studio.apps).await.expect_err("refused");
    assert!(
        refused.code() != GrpcCode::PermissionDenied && refused.source().is_some(),
        "{refused:?}"
    );

    // A stream open before the revocation (the verifier's watch, which keeps the app's
    // verdict cache live) is cut soon after it.
    let mut watch = VerifierClient::new(channel(studio.apps, app.grpc()).await.expect("channel"))
        .watch(WatchRequest {})
        .await
        .expect("watch")
        .into_inner();
    assert!(watch.message().await.expect("first event").is_some());

    // Revoked: its next call is refused, on both protocols.
    let revoked = studio
        .owner(reqwest::Method::DELETE, &format!("/api/apps/{}", app.id))
        .await;
    assert_eq!(revoked.status(), 200);
    let revoked: EnrolledApp = revoked.json().await.expect("the app");
    assert!(revoked.revoked_at.is_some());
    let refused = hello(app.grpc(), studio.apps).await.expect_err("refused");
    assert_eq!(refused.code(), GrpcCode::PermissionDenied, "{refused:?}");
    let (client, base) = https(studio.apps, app.http());
    let reply = client
        .get(format!("{base}/api/schedules"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answers");
    assert_eq!(reply.status(), 403);
    let cut = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match watch.message().await {
                Ok(Some(_)) => {}
                ended => return ended.map(|_| ()),
            }
        }
    })
    .await
    .expect("the watch stream was cut");
    assert!(cut.is_err(), "it ended with an error, not as finished");
    let unknown = studio
        .owner(reqwest::Method::DELETE, "/api/apps/nobody")
        .await;
    assert_eq!(unknown.status(), 404);

    studio.stop().await;
}
