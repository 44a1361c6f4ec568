//! The real verifier on a temporary socket, reached by a real tonic client.

use std::{path::Path, sync::Arc, time::Duration};
use studio_contract::lifecycle::Shutdown;

use studio_contract::{role::Role, secret::AppKey, time::now_ms};
use studio_proto::{
    APP_KEY_METADATA,
    v1::{
        AdmitRequest, HelloRequest, RedeemPairingRequest, ResolveDecisionRequest, RevokeRequest,
        WatchRequest, admit_reply::Verdict, redeem_pairing_reply::Outcome, revoke_request::Target,
        verifier_client::VerifierClient, watch_event::Event,
    },
};
use tokio_stream::StreamExt;
use tonic::{
    Code, Request, Status,
    service::interceptor::InterceptedService,
    transport::{Channel, Endpoint},
};

use super::*;
use crate::testing::{APP, DAEMON_TOKEN, TempDir, authority};

type AddKey = Box<dyn FnMut(Request<()>) -> Result<Request<()>, Status> + Send>;
type Client = VerifierClient<InterceptedService<Channel, AddKey>>;

struct Running {
    _dir: TempDir,
    authority: Arc<Authority>,
    key: AppKey,
    socket: std::path::PathBuf,
    stop: Shutdown,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

async fn start() -> Running {
    let dir = TempDir::new("vrf");
    let (_store, authority) = authority(&dir, "feedfacefeedfacefeedfacefeedface").await;
    let authority = Arc::new(authority);
    let socket = dir.path().join("verifier.sock");
    let listener = crate::socket::bind_private(&socket).expect("bind").listener;
    let key = AppKey::generate();
    let stop = Shutdown::new();
    let service = VerifierService::new(authority.clone(), stop.clone());
    let done = stop.clone();
    let server = tokio::spawn(serve(listener, service, key.clone(), async move {
        done.triggered().await;
    }));
    Running {
        _dir: dir,
        authority,
        key,
        socket,
        stop,
        server,
    }
}

async fn client(socket: &Path, key: Option<String>) -> Client {
    let channel = Endpoint::from_shared(format!("unix://{}", socket.display()))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let add_key: AddKey = Box::new(move |mut req: Request<()>| {
        if let Some(k) = &key {
            req.metadata_mut()
                .insert(APP_KEY_METADATA, k.parse().expect("ascii"));
        }
        Ok(req)
    });
    VerifierClient::with_interceptor(channel, add_key)
}

fn hello() -> HelloRequest {
    HelloRequest {
        protocol_version: studio_proto::PROTOCOL_VERSION,
        client: "test".into(),
    }
}

#[tokio::test]
async fn the_gate_refuses_missing_or_wrong_keys() {
    let v = start().await;
    let mut good = client(&v.socket, Some(v.key.to_hex())).await;
    let reply = good.hello(hello()).await.expect("hello").into_inner();
    assert_eq!(reply.epoch, v.authority.epoch());
    assert_eq!(reply.identity, "studio");

    let mut none = client(&v.socket, None).await;
    assert_eq!(
        none.hello(hello()).await.expect_err("refused").code(),
        Code::PermissionDenied
    );
    let mut wrong = client(&v.socket, Some(AppKey::generate().to_hex())).await;
    let err = wrong
        .admit(AdmitRequest {
            bearer: DAEMON_TOKEN.into(),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(err.code(), Code::PermissionDenied);
    let err = wrong.watch(WatchRequest {}).await.expect_err("refused");
    assert_eq!(err.code(), Code::PermissionDenied);

    v.stop.trigger();
    v.server.await.expect("join").expect("served");
}

#[test]
fn the_gate_needs_a_unix_peer() {
    let key = AppKey::generate();
    let mut g = gate(crate::socket::own_uid(), key.clone());
    let mut req = Request::new(());
    req.metadata_mut()
        .insert(APP_KEY_METADATA, key.to_hex().parse().expect("ascii"));
    // Without SO_PEERCRED information (not a Unix socket) even the right key is refused.
    assert_eq!(g(req).expect_err("refused").code(), Code::PermissionDenied);
}

#[tokio::test]
async fn admit_refuses_an_expired_session() {
    let v = start().await;
    let mut c = client(&v.socket, Some(v.key.to_hex())).await;
    let then = now_ms() - studio_contract::ADMISSION_TTL_MS - 1_000;
    let code = v
        .authority
        .mint_code("test", Role::Admin, then)
        .await
        .expect("mint")
        .code;
    let paired = v
        .authority
        .redeem(&code, Some(APP), None, then)
        .await
        .expect("paired");
    for _ in 0..2 {
        // Twice: first from memory, then from the durable record.
        let verdict = c
            .admit(AdmitRequest {
                bearer: paired.token.clone(),
                origin: APP.into(),
                method: "GET".into(),
                path: "/".into(),
            })
            .await
            .expect("admit")
            .into_inner()
            .verdict;
        assert!(
            matches!(verdict, Some(Verdict::Refusal(ref r)) if r.code == "session_expired"),
            "{verdict:?}"
        );
    }
}

#[tokio::test]
async fn admit_pair_resolve_and_revoke() {
    let v = start().await;
    let mut c = client(&v.socket, Some(v.key.to_hex())).await;
    let admit = |bearer: &str, origin: &str| AdmitRequest {
        bearer: bearer.into(),
        origin: origin.into(),
        method: "GET".into(),
        path: "/api/x".into(),
    };
    let verdict = c
        .admit(admit(DAEMON_TOKEN, ""))
        .await
        .expect("admit")
        .into_inner()
        .verdict;
    assert!(matches!(verdict, Some(Verdict::Principal(p)) if p.kind == "daemon"));
    let verdict = c
        .admit(admit(DAEMON_TOKEN, "http://evil.example"))
        .await
        .expect("admit");
    assert!(
        matches!(verdict.into_inner().verdict, Some(Verdict::Refusal(r)) if r.code == "origin_not_allowed")
    );

    let code = v
        .authority
        .mint_code("test", Role::Admin, now_ms())
        .await
        .expect("mint")
        .code;
    let refused = c
        .redeem_pairing(RedeemPairingRequest {
            code: code.clone(),
            origin: String::new(),
            user_agent: String::new(),
        })
        .await
        .expect("redeem")
        .into_inner();
    assert!(matches!(refused.outcome, Some(Outcome::Refusal(r)) if r.code == "origin_not_allowed"));
    let paired = c
        .redeem_pairing(RedeemPairingRequest {
            code,
            origin: APP.into(),
            user_agent: "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0 \
                         <script>"
                .into(),
        })
        .await
        .expect("redeem")
        .into_inner();
    let Some(Outcome::Pairing(p)) = paired.outcome else {
        panic!("expected a pairing, got {paired:?}");
    };
    assert_eq!(p.epoch, v.authority.epoch());
    assert!(p.expires_at_ms > now_ms() + studio_contract::ADMISSION_TTL_MS - 60_000);
    // The session keeps the device label made of the header, never the header.
    let sessions = v.authority.sessions().await.expect("sessions");
    let session = sessions.iter().find(|s| s.id == p.principal).expect("kept");
    assert_eq!(session.device.as_deref(), Some("Firefox 133 on Linux"));
    let verdict = c
        .admit(admit(&p.token, APP))
        .await
        .expect("admit")
        .into_inner()
        .verdict;
    assert!(
        matches!(verdict, Some(Verdict::Principal(ref pr)) if pr.id == p.principal
            && pr.kind == "browser" && pr.expires_at_ms == p.expires_at_ms)
    );
    let decision = c
        .resolve_decision(ResolveDecisionRequest {
            decision_token: p.decision_token.clone(),
            origin: APP.into(),
        })
        .await
        .expect("resolve")
        .into_inner();
    assert!(
        matches!(decision.verdict, Some(Verdict::Principal(ref pr)) if pr.expires_at_ms == p.decision_expires_at_ms)
    );

    let reply = c
        .revoke(RevokeRequest {
            target: Some(Target::Bearer(p.token.clone())),
        })
        .await
        .expect("revoke")
        .into_inner();
    assert!(reply.revoked);
    assert_eq!(reply.principal_id, p.principal);
    let verdict = c
        .admit(admit(&p.token, APP))
        .await
        .expect("admit")
        .into_inner()
        .verdict;
    assert!(matches!(verdict, Some(Verdict::Refusal(r)) if r.code == "revoked"));

    v.stop.trigger();
    v.server.await.expect("join").expect("served");
}

async fn next(
    events: &mut tonic::Streaming<studio_proto::v1::WatchEvent>,
) -> studio_proto::v1::WatchEvent {
    tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("an event in time")
        .expect("stream open")
        .expect("event")
}

#[tokio::test]
async fn watch_sends_the_epoch_then_revocations_and_heartbeats() {
    let v = start().await;
    let mut c = client(&v.socket, Some(v.key.to_hex())).await;
    let mut events = c.watch(WatchRequest {}).await.expect("watch").into_inner();
    let first = next(&mut events).await;
    assert_eq!(
        first.event,
        Some(Event::Epoch(v.authority.epoch().to_owned()))
    );

    let code = v
        .authority
        .mint_code("test", Role::Admin, now_ms())
        .await
        .expect("mint")
        .code;
    let p = v
        .authority
        .redeem(&code, Some(APP), None, now_ms())
        .await
        .expect("paired");
    let reply = c
        .revoke(RevokeRequest {
            target: Some(Target::PrincipalId(p.principal.clone())),
        })
        .await
        .expect("revoke")
        .into_inner();
    assert!(reply.revoked);

    let (mut saw_revocation, mut heartbeats) = (false, 0);
    while !saw_revocation || heartbeats < 2 {
        match next(&mut events).await.event {
            Some(Event::RevokedPrincipal(id)) => {
                assert_eq!(id, p.principal);
                saw_revocation = true;
            }
            Some(Event::HeartbeatMs(_)) => heartbeats += 1,
            other => panic!("unexpected event {other:?}"),
        }
    }

    // Stopping ends the stream, so the server's graceful shutdown is not held up by it.
    v.stop.trigger();
    tokio::time::timeout(Duration::from_secs(5), v.server)
        .await
        .expect("server stops in time")
        .expect("join")
        .expect("served");
}
