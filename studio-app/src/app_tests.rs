//! The whole app in-process on 127.0.0.1:0, against the fake verifier and a small
//! upstream, spoken to over HTTP like a browser would.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use serde_json::Value;
use studio_contract::{home::Home, secret::AppKey};
use tokio::{sync::oneshot, task::JoinHandle};

use crate::{Application, Config, verifier::fake::FakeVerifier};

struct TestApp {
    addr: SocketAddr,
    home: PathBuf,
    key: AppKey,
    client: Client<HttpConnector, Full<Bytes>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    json: Value,
}

fn temp_home() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "studio-app-t{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp home");
    dir
}

impl TestApp {
    async fn start(configure: impl FnOnce(&mut Config)) -> Self {
        let home = temp_home();
        let key = AppKey::generate();
        let mut config = Config::loopback(Home::new(&home), key.clone());
        config.verifier_timeout = Duration::from_millis(500);
        config.upstream_timeout = Duration::from_millis(1000);
        configure(&mut config);
        let app = Application::build(config).await.expect("build");
        let addr = app.local_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(app.serve(async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            home,
            key,
            client: Client::builder(TokioExecutor::new()).build_http(),
            stop: Some(stop),
            task,
        }
    }

    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn fake(&self, epoch: &str) -> FakeVerifier {
        FakeVerifier::start(&self.home, &self.key, epoch)
    }

    /// A verifier of epoch `e1` that admits `token` as principal `p1`.
    fn admitting(&self, token: &str) -> FakeVerifier {
        let fake = self.fake("e1");
        fake.state.script().tokens.insert(token.into(), "p1".into());
        fake
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("request");
        let response = self.client.request(req).await.expect("app answers");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            json,
        }
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(Method::GET, path, headers, "").await
    }

    /// Polls `/health` until the daemon reads as `want`, with a deadline.
    async fn wait_daemon(&self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(8);
        loop {
            if self.get("/health", &[]).await.json["daemon"] == want {
                return;
            }
            assert!(Instant::now() < deadline, "daemon never became {want}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let ended = tokio::time::timeout(Duration::from_secs(8), &mut self.task).await;
        assert!(
            matches!(ended, Ok(Ok(Ok(())))),
            "graceful shutdown: {ended:?}"
        );
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn code(reply: &Reply) -> &str {
    reply.json["code"].as_str().unwrap_or("<no code>")
}

#[tokio::test]
async fn without_a_verifier_every_api_request_is_unavailable() {
    let app = TestApp::start(|_| {}).await;
    let started = Instant::now();
    let r = app
        .get("/api/identity", &[("authorization", "Bearer sta_x")])
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code(&r), "daemon_unavailable");
    assert!(started.elapsed() < Duration::from_millis(1500));
    let r = app.get("/api/runs", &[]).await;
    assert_eq!(code(&r), "daemon_unavailable", "no credential, no daemon");

    let health = app.get("/health", &[]).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(
        health.json,
        serde_json::json!({"status":"ok","daemon":"unavailable"})
    );
    let session = app
        .get("/api/app/session", &[("cookie", "studio_admission=sta_x")])
        .await;
    assert_eq!(session.json["paired"], false);
    assert_eq!(session.json["daemon"], "unavailable");
    assert_eq!(session.json["reason"], "daemon_unavailable");

    // The page is still served, with its protective headers.
    let page = app.get("/", &[]).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.headers[header::CACHE_CONTROL], "no-store");
    assert!(page.headers.contains_key(header::CONTENT_SECURITY_POLICY));
    app.stop().await;
}

#[tokio::test]
async fn the_front_door_refuses_in_order() {
    let app = TestApp::start(|_| {}).await;
    let origin = app.origin();
    let r = app.get("/health", &[("host", "evil.example")]).await;
    assert_eq!(
        (r.status, code(&r)),
        (StatusCode::BAD_REQUEST, "invalid_host")
    );
    let r = app.get("/", &[("host", "127.0.0.1:1")]).await;
    assert_eq!(code(&r), "invalid_host");
    let r = app
        .get("/api/identity", &[("origin", "http://evil.example")])
        .await;
    assert_eq!(
        (r.status, code(&r)),
        (StatusCode::FORBIDDEN, "origin_not_allowed")
    );
    let r = app
        .send(
            Method::OPTIONS,
            "/api/runs",
            &[("origin", "http://evil.example")],
            "",
        )
        .await;
    assert_eq!(code(&r), "origin_not_allowed");

    let r = app
        .send(Method::OPTIONS, "/api/runs", &[("origin", &origin)], "")
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.headers["access-control-allow-origin"], origin.as_str());
    assert_eq!(r.headers["access-control-allow-credentials"], "true");
    assert_eq!(
        r.headers["access-control-allow-methods"],
        "GET, POST, PUT, PATCH, DELETE"
    );
    assert_eq!(
        r.headers["access-control-allow-headers"],
        "authorization, content-type, x-studio-decision-token"
    );
    assert_eq!(r.headers["access-control-max-age"], "600");
    assert_eq!(r.headers["vary"], "Origin");

    let r = app
        .send(
            Method::POST,
            "/api/studio/pair",
            &[("content-type", "text/plain")],
            "{}",
        )
        .await;
    assert_eq!(
        (r.status, code(&r)),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
    );
    let r = app
        .send(Method::DELETE, "/api/studio/sessions/x", &[], "")
        .await;
    assert_eq!(
        code(&r),
        "unsupported_media_type",
        "bodyless unsafe methods too"
    );

    // A cookie alone may not authorise a state change without one of our origins.
    let r = app
        .send(
            Method::POST,
            "/api/studio/disconnect",
            &[
                ("cookie", "studio_admission=sta_x"),
                ("content-type", "application/json"),
            ],
            "{}",
        )
        .await;
    assert_eq!(code(&r), "origin_not_allowed");
    let r = app
        .get("/api/identity", &[("authorization", "Basic abc")])
        .await;
    assert_eq!(code(&r), "unauthorized");

    let r = app.get("/nothing-here", &[]).await;
    assert_eq!((r.status, code(&r)), (StatusCode::NOT_FOUND, "not_found"));
    let r = app.get("/api/studio/pair", &[]).await;
    assert_eq!(
        code(&r),
        "daemon_unavailable",
        "GET pair is not exempt from admission"
    );
    app.stop().await;
}

#[tokio::test]
async fn pairing_sets_the_cookie_and_keeps_the_token_out_of_the_body() {
    let app = TestApp::start(|_| {}).await;
    let fake = app.fake("e1");
    fake.state
        .script()
        .codes
        .insert("code1".into(), ("sta_secret".into(), "p1".into()));
    let origin = app.origin();
    let json = [
        ("content-type", "application/json"),
        ("origin", origin.as_str()),
    ];
    let r = app
        .send(
            Method::POST,
            "/api/studio/pair",
            &json,
            r#"{"code":"code1"}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    // The token's remaining hour, rounded down (3599 if a second passed on the way).
    let set_cookie = r.headers[header::SET_COOKIE].to_str().expect("ascii");
    assert!(
        [3600, 3599].iter().any(|s| set_cookie
            == format!(
                "studio_admission=sta_secret; HttpOnly; SameSite=Strict; Path=/; Max-Age={s}"
            )),
        "{set_cookie}"
    );
    assert!(
        r.json["expires_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert!(!r.json.to_string().contains("sta_secret"));
    assert_eq!(r.json["paired"], true);
    assert_eq!(r.json["decision_token"], "std_decision");
    assert_eq!(r.json["epoch"], "e1");
    assert_eq!(r.json["principal"], "p1");
    assert_eq!(r.json["decision_expires_at"], "2026-11-18T11:06:40.123Z");
    assert_eq!(fake.state.script().redeem_origins, vec![origin.clone()]);

    let r = app
        .send(
            Method::POST,
            "/api/studio/pair",
            &json,
            r#"{"code":"code1"}"#,
        )
        .await;
    assert_eq!(
        (r.status, code(&r)),
        (StatusCode::UNAUTHORIZED, "pairing_code_invalid")
    );
    let r = app
        .send(Method::POST, "/api/studio/pair", &json, "not json")
        .await;
    assert_eq!(code(&r), "bad_request");
    fake.state
        .script()
        .codes
        .insert("code2".into(), ("sta_2".into(), "p2".into()));
    let body = r#"{"code":"code2"}"#;
    let r = app
        .send(Method::POST, "/api/studio/pair", &json[..1], body)
        .await;
    assert_eq!(
        (r.status, code(&r)),
        (StatusCode::FORBIDDEN, "origin_not_allowed")
    );
    assert!(fake.state.script().codes.contains_key("code2"), "not spent");
    // No credential while the daemon answers (the stream may not be live yet): 401.
    let r = app.get("/api/identity", &[]).await;
    assert_eq!(
        (r.status, code(&r)),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );

    let s = app
        .get(
            "/api/app/session",
            &[("cookie", "studio_admission=sta_secret")],
        )
        .await;
    assert_eq!(s.json["paired"], true);
    assert_eq!(s.json["principal"], "p1");
    assert_eq!(s.json["epoch"], "e1");
    let s = app
        .get("/api/app/session", &[("cookie", "studio_admission=old_x")])
        .await;
    assert_eq!(s.json["reason"], "epoch_ended");

    let r = app
        .get("/api/nope", &[("authorization", "Bearer sta_secret")])
        .await;
    assert_eq!((r.status, code(&r)), (StatusCode::NOT_FOUND, "not_found"));
    fake.stop(&app.home).await;
    app.stop().await;
}

#[tokio::test]
async fn cached_verdicts_serve_only_a_live_stream_and_revocation_refuses_at_once() {
    let app = TestApp::start(|_| {}).await;
    let fake = app.fake("e1");
    fake.state
        .script()
        .tokens
        .insert("sta_t".into(), "p1".into());
    app.wait_daemon("ok").await;
    let bearer = [("authorization", "Bearer sta_t")];
    assert_eq!(
        app.get("/api/app/session", &bearer).await.json["paired"],
        true
    );
    let calls = fake.state.admit_calls.load(Ordering::SeqCst);
    assert_eq!(
        app.get("/api/app/session", &bearer).await.json["paired"],
        true
    );
    assert_eq!(
        fake.state.admit_calls.load(Ordering::SeqCst),
        calls,
        "served from cache"
    );

    fake.state.revoke("p1");
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let s = app.get("/api/app/session", &bearer).await;
        if s.json["paired"] == false {
            assert_eq!(s.json["reason"], "revoked");
            break;
        }
        assert!(Instant::now() < deadline, "revocation never took effect");
    }

    // A stream that stops beating is stale: verdicts are asked for again.
    fake.state
        .script()
        .tokens
        .insert("sta_u".into(), "p2".into());
    let other = [("authorization", "Bearer sta_u")];
    assert_eq!(
        app.get("/api/app/session", &other).await.json["paired"],
        true
    );
    fake.state.mute.store(true, Ordering::SeqCst);
    app.wait_daemon("unavailable").await;
    let calls = fake.state.admit_calls.load(Ordering::SeqCst);
    assert_eq!(
        app.get("/api/app/session", &other).await.json["paired"],
        true
    );
    assert_eq!(fake.state.admit_calls.load(Ordering::SeqCst), calls + 1);
    fake.stop(&app.home).await;
    app.stop().await;
}

#[tokio::test]
async fn a_restarted_daemon_is_picked_up_without_restarting_the_app() {
    let app = TestApp::start(|_| {}).await;
    let first = app.fake("e1");
    app.wait_daemon("ok").await;
    first.stop(&app.home).await;
    app.wait_daemon("unavailable").await;
    let second = app.fake("e2");
    second
        .state
        .script()
        .tokens
        .insert("sta_n".into(), "p9".into());
    app.wait_daemon("ok").await;
    let s = app
        .get("/api/app/session", &[("authorization", "Bearer sta_n")])
        .await;
    assert_eq!(
        (s.json["paired"].clone(), s.json["epoch"].clone()),
        (true.into(), "e2".into())
    );
    second.stop(&app.home).await;
    app.stop().await;
}

#[tokio::test]
async fn a_verifier_that_does_not_answer_is_unavailable_not_a_pass() {
    let app = TestApp::start(|_| {}).await;
    let fake = app.fake("e1");
    fake.state
        .script()
        .tokens
        .insert("sta_t".into(), "p1".into());
    *fake.state.admit_delay.lock().expect("lock") = Duration::from_secs(5);
    let started = Instant::now();
    let r = app
        .get("/api/identity", &[("authorization", "Bearer sta_t")])
        .await;
    assert_eq!(code(&r), "daemon_unavailable");
    assert!(started.elapsed() < Duration::from_millis(1500));
    fake.stop(&app.home).await;
    app.stop().await;
}

#[tokio::test]
async fn proxied_requests_carry_the_bearer_and_disconnect_clears_the_cookie() {
    let upstream = crate::proxy::tests::upstream().await;
    let app = TestApp::start(|c| c.daemon_addr = upstream).await;
    let fake = app.fake("e1");
    fake.state
        .script()
        .tokens
        .insert("sta_t".into(), "p1".into());
    let origin = app.origin();
    let headers = [
        ("cookie", "studio_admission=sta_t"),
        ("origin", origin.as_str()),
        ("content-type", "application/json"),
    ];
    let r = app.get("/api/identity", &headers).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["headers"]["authorization"][0], "Bearer sta_t");
    assert!(r.json["headers"].get("cookie").is_none());
    assert_eq!(
        r.json["headers"]["x-studio-forwarded-origin"][0],
        origin.as_str()
    );
    assert_eq!(r.headers["access-control-allow-origin"], origin.as_str());

    let r = app
        .send(Method::POST, "/api/studio/disconnect", &headers, "{}")
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers[header::SET_COOKIE],
        "studio_admission=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
    );
    fake.stop(&app.home).await;
    app.stop().await;
}

#[tokio::test]
async fn readiness_names_the_bound_address_and_origin() {
    let home = temp_home();
    let app = Application::build(Config::loopback(Home::new(&home), AppKey::generate()))
        .await
        .expect("build");
    let ready = app.ready();
    assert_eq!(ready.addr, app.local_addr().to_string());
    assert_eq!(ready.origin, Some(format!("http://{}", app.local_addr())));
    assert_eq!(ready.epoch, None);
    assert_ne!(app.local_addr().port(), 0);
    let _ = std::fs::remove_dir_all(&home);
}

#[tokio::test]
async fn serves_https_with_the_configured_certificate() {
    use std::{fs::File, io::BufReader, sync::Arc};

    use http_body_util::Empty;
    use tokio_rustls::rustls::{self, pki_types::ServerName};

    // A self-signed certificate for localhost/127.0.0.1, made for these tests only.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let app = TestApp::start(|c| {
        c.tls = Some(crate::TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        });
    })
    .await;
    let mut roots = rustls::RootCertStore::empty();
    let pem = File::open(dir.join("cert.pem")).expect("cert");
    for cert in rustls_pemfile::certs(&mut BufReader::new(pem)) {
        roots.add(cert.expect("pem")).expect("root");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("handshake");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .expect("http/1.1");
    tokio::spawn(conn);
    let req = Request::get("/health")
        .header(header::HOST, format!("localhost:{}", app.addr.port()))
        .body(Empty::<Bytes>::new())
        .expect("request");
    let response = sender.send_request(req).await.expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let json: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(json["status"], "ok");
    app.stop().await;
}

#[tokio::test]
async fn the_apps_document_is_served_as_checked_in_and_admitted_like_any_api_route() {
    let app = TestApp::start(|_| {}).await;
    let fake = app.admitting("sta_t");
    let r = app.get("/api/app/openapi.json", &[]).await;
    assert_eq!(
        (r.status, code(&r)),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let r = app
        .get(
            "/api/app/openapi.json",
            &[("cookie", "studio_admission=sta_t")],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let checked_in: Value =
        serde_json::from_str(include_str!("../../docs/openapi-app.json")).expect("checked in");
    assert_eq!(r.json, checked_in);
    fake.stop(&app.home).await;
    app.stop().await;
}

#[tokio::test]
async fn unknown_paths_wrong_methods_and_trailing_slashes_answer_as_studiod_does() {
    let upstream = crate::proxy::tests::upstream().await;
    let app = TestApp::start(|c| c.daemon_addr = upstream).await;
    let fake = app.admitting("sta_t");
    let cookie = [("cookie", "studio_admission=sta_t")];
    for path in [
        "/api/tasks/",
        "/api/approvals/",
        "/api/admin",
        "/api/runs/",
        "/api/nope",
    ] {
        let r = app.get(path, &cookie).await;
        assert_eq!(
            (r.status, code(&r), r.json["message"].as_str()),
            (StatusCode::NOT_FOUND, "not_found", Some("no such path")),
            "{path} is neither the app's nor forwarded"
        );
    }
    let origin = app.origin();
    let r = app
        .send(
            Method::PATCH,
            "/api/app/attention",
            &[
                cookie[0],
                ("content-type", "application/json"),
                ("origin", origin.as_str()),
            ],
            "{}",
        )
        .await;
    assert_eq!(
        (r.status, code(&r), r.json["message"].as_str()),
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            Some("method not allowed on this path")
        )
    );
    fake.stop(&app.home).await;
    app.stop().await;
}
