//! The front door of both listeners: Host, CORS, JSON Content-Type, bearer, JSON 404s.

use studio_tests::{Studio, http, raw_http, raw_request};

use studio_api::{Code, Health, Identity, PairRequest, Paired, app::AppHealth};
use studio_tests::Reply;

use crate::paired_cookie;

const REFUSED_HOSTS: &[&str] = &[
    "127.0.0.1:{port}.evil.com",
    "[::1]evil.com",
    "localhost.:{port}",
    "localhost.",
    "sub.localhost:{port}",
    "[::ffff:127.0.0.1]:{port}",
    "127.0.0.2:{port}",
    "127.1:{port}",
    "2130706433:{port}",
    "0x7f.0.0.1:{port}",
    "127.0.0.1:{port}:evil",
    "localhost:badport",
    "localhost:123456",
    "evil.example.com",
    "0.0.0.0:{port}",
    "[::]:{port}",
    "user@localhost:{port}",
    "[fe80::1%eth0]:{port}",
    "127.0.0.1:+{port}",
    "127.0.0.1:99999",
    "127.0.0.1:{other}",
];

const ACCEPTED_HOSTS: &[&str] = &[
    "127.0.0.1:{port}",
    "localhost:{port}",
    "LOCALHOST:{port}",
    "[::1]:{port}",
    "[0:0:0:0:0:0:0:1]:{port}",
];

fn host_cases(addr: std::net::SocketAddr, other: u16) {
    let port = addr.port().to_string();
    let fill = |h: &str| {
        h.replace("{port}", &port)
            .replace("{other}", &other.to_string())
    };
    for host in ACCEPTED_HOSTS.iter().map(|h| fill(h)) {
        let (status, body) = raw_http(addr, &format!("GET /health HTTP/1.1\r\nHost: {host}"), "");
        assert_eq!(
            status, 200,
            "Host {host:?} should be accepted on {addr}: {body}"
        );
    }
    // Raw exchanges, for requests a client would refuse to send: the answer is read as
    // text, framing and all, so the refusal's code is looked for in it.
    for host in REFUSED_HOSTS.iter().map(|h| fill(h)) {
        let (status, body) = raw_http(addr, &format!("GET /health HTTP/1.1\r\nHost: {host}"), "");
        assert_eq!(status, 400, "Host {host:?} should be refused on {addr}");
        assert!(body.contains("invalid_host"), "{body}");
    }
    // Two Host headers are refused whatever the first says; an absolute-form request
    // line names its host too, and must name this listener.
    let me = fill("127.0.0.1:{port}");
    for head in [
        format!("GET /health HTTP/1.1\r\nHost: {me}\r\nHost: evil.example"),
        format!("GET /health HTTP/1.1\r\nHost: {me}\r\nHost: {me}"),
        format!("GET http://evil.example/health HTTP/1.1\r\nHost: {me}"),
    ] {
        let (status, body) = raw_http(addr, &head, "");
        assert_eq!(status, 400, "{head:?} on {addr}: {body}");
        assert!(body.contains("invalid_host"), "{head:?} on {addr}: {body}");
    }
    let (status, body) = raw_http(
        addr,
        &format!("GET http://{me}/health HTTP/1.1\r\nHost: {me}"),
        "",
    );
    assert_eq!(status, 200, "an absolute form naming this listener: {body}");
    // A preflight is checked for Host before CORS can answer it.
    let (status, _) = raw_http(
        addr,
        "OPTIONS /api/identity HTTP/1.1\r\nHost: 127.0.0.1:1.evil.com\r\nOrigin: http://evil.com\r\nAccess-Control-Request-Method: GET",
        "",
    );
    assert_eq!(status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_validation_refuses_rebinding_forms_on_both_listeners() {
    let studio = Studio::start();
    host_cases(studio.app_addr, studio.daemon_addr.port());
    host_cases(studio.daemon_addr, studio.app_addr.port());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_methods_need_json_and_unknown_api_paths_are_json_404s() {
    let studio = Studio::start();
    let token = studio.token();
    for base in [studio.app_url(""), studio.daemon_url("")] {
        for (method, path, content_type) in [
            ("POST", "/api/studio/disconnect", None),
            ("POST", "/api/studio/disconnect", Some("text/plain")),
            (
                "POST",
                "/api/studio/disconnect",
                Some("application/x-www-form-urlencoded"),
            ),
            ("DELETE", "/api/studio/sessions/x", None),
            ("POST", "/api/studio/pair", Some("text/plain;charset=utf-8")),
        ] {
            let mut req = http()
                .request(method.parse().expect("method"), format!("{base}{path}"))
                .bearer_auth(&token);
            if let Some(ct) = content_type {
                req = req.header("content-type", ct).body("{}");
            }
            let reply = Reply::of(req.send().await.expect("send")).await;
            assert_eq!(
                reply.code(),
                (415, Code::UnsupportedMediaType),
                "{method} {base}{path} {content_type:?}"
            );
        }
        for path in ["/api/nope", "/api/", "/api/identity/extra", "/api/app/nope"] {
            let reply = Reply::of(
                http()
                    .get(format!("{base}{path}"))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .expect("send"),
            )
            .await;
            assert_eq!(reply.code(), (404, Code::NotFound), "{base}{path}");
        }
        // `Application/JSON; charset=utf-8` is JSON.
        let resp = http()
            .get(format!("{base}/api/identity"))
            .bearer_auth(&token)
            .header("content-type", "Application/JSON; charset=utf-8")
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_needs_a_bearer_but_health_does_not() {
    let studio = Studio::start();
    for base in [studio.app_url(""), studio.daemon_url("")] {
        let reply = Reply::of(
            http()
                .get(format!("{base}/api/identity"))
                .send()
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(reply.code(), (401, Code::Unauthorized), "{base}");
        let reply = Reply::of(
            http()
                .get(format!("{base}/api/identity"))
                .bearer_auth("stk_wrong")
                .send()
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(reply.code(), (401, Code::Unauthorized), "{base}");
        let reply = Reply::of(
            http()
                .get(format!("{base}/api/identity"))
                .bearer_auth(studio.token())
                .send()
                .await
                .expect("send"),
        )
        .await;
        let body: Identity = reply.expect(200);
        assert_eq!(body.identity, "studio");
        let reply = Reply::of(
            http()
                .get(format!("{base}/health"))
                .send()
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(reply.expect::<Health>(200).status, "ok");
    }
    let reply = Reply::of(
        http()
            .get(studio.app_url("/health"))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(reply.json::<AppHealth>().daemon, "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_names_origins_explicitly_and_refuses_others() {
    let studio = Studio::start();
    let origin = studio.app_origin();
    for base in [studio.app_url(""), studio.daemon_url("")] {
        let resp = http()
            .request(reqwest::Method::OPTIONS, format!("{base}/api/identity"))
            .header("origin", "http://evil.example")
            .header("access-control-request-method", "GET")
            .send()
            .await
            .expect("send");
        assert!(resp.headers().get("access-control-allow-origin").is_none());
        let reply = Reply::of(resp).await;
        assert_eq!(reply.code(), (403, Code::OriginNotAllowed), "{base}");

        let resp = http()
            .request(reqwest::Method::OPTIONS, format!("{base}/api/identity"))
            .header("origin", &origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type, x-studio-decision-token",
            )
            .send()
            .await
            .expect("send");
        assert!(resp.status().is_success(), "{base}: {}", resp.status());
        let allow = resp.headers()["access-control-allow-origin"]
            .to_str()
            .expect("ascii");
        assert_eq!(allow, origin);
        let headers = resp.headers()["access-control-allow-headers"]
            .to_str()
            .expect("ascii")
            .to_ascii_lowercase();
        assert!(headers.contains("x-studio-decision-token"));

        let resp = http()
            .get(format!("{base}/api/identity"))
            .header("origin", "http://evil.example")
            .bearer_auth(studio.token())
            .send()
            .await
            .expect("send");
        assert_eq!(
            resp.status(),
            403,
            "{base}: a foreign origin is refused even with a token"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_authenticated_unsafe_requests_need_an_allowed_origin() {
    let studio = Studio::start();
    let cookie = paired_cookie(&studio).await;
    let resp = http()
        .post(studio.app_url("/api/studio/disconnect"))
        .header("cookie", &cookie)
        .header("content-type", "application/json")
        .send()
        .await
        .expect("send");
    let reply = Reply::of(resp).await;
    assert_eq!(reply.code(), (403, Code::OriginNotAllowed));
    let resp = crate::get_with_cookie(&studio, "/api/identity", &cookie).await;
    assert_eq!(resp.status(), 200, "the refused request changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_refuses_a_forged_forwarded_origin() {
    let studio = Studio::start();
    let resp = http()
        .post(studio.daemon_url("/api/studio/pair"))
        .header("x-studio-forwarded-origin", studio.app_origin())
        .header("x-studio-forwarded-sig", "1.deadbeef")
        .json(&PairRequest {
            code: studio.first_code(),
        })
        .send()
        .await
        .expect("send");
    let reply = Reply::of(resp).await;
    assert_eq!(reply.code(), (401, Code::Unauthorized));
    // Unsigned, the forwarded header is ignored: no Origin means no pairing.
    let resp = http()
        .post(studio.daemon_url("/api/studio/pair"))
        .header("x-studio-forwarded-origin", studio.app_origin())
        .json(&PairRequest {
            code: studio.first_code(),
        })
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 403);
    // Directly, from an allowed origin, the daemon pairs and hands back the token.
    let resp = http()
        .post(studio.daemon_url("/api/studio/pair"))
        .header("origin", studio.app_origin())
        .json(&PairRequest {
            code: studio.first_code(),
        })
        .send()
        .await
        .expect("send");
    let reply = Reply::of(resp).await;
    let token = reply.expect::<Paired>(200).token;
    assert_ne!(token, studio.token());
    let resp = http()
        .get(studio.app_url("/api/identity"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("send");
    assert_eq!(
        resp.status(),
        200,
        "a paired bearer works through the app too"
    );
}

/// A body over studiod's limit is `413 payload_too_large` in the JSON contract on both
/// listeners, whether it declares its length or streams in chunks: studio-app refuses it
/// itself instead of reporting the daemon unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_body_is_413_on_both_listeners() {
    let studio = Studio::start();
    let token = studio.token();
    let body = "a".repeat(studio_contract::API_BODY_LIMIT + 1);
    for addr in [studio.app_addr, studio.daemon_addr] {
        let head = format!(
            "POST /api/schedules HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json"
        );
        // Raw, to declare a length a client would not: the answer is read as text.
        let (status, answer) = raw_http(addr, &head, &body);
        assert_eq!(status, 413, "declared length on {addr}: {answer}");
        assert!(answer.contains("payload_too_large"), "{addr}: {answer}");

        let chunked = format!(
            "{head}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        );
        let (status, answer) = raw_request(addr, &chunked);
        assert_eq!(status, 413, "chunked on {addr}: {answer}");
        assert!(
            answer.contains("payload_too_large"),
            "chunked on {addr}: {answer}"
        );
    }
}

/// Another local process holds 2,000 idle connections to each listener while both run
/// under the usual desktop limit of 1,024 open files: a real request still gets through on
/// each, at once (the oldest connections that never sent a request make room), and the
/// idle ones are closed for not sending a request head in time.
#[test]
fn idle_connections_do_not_lock_a_real_request_out() {
    use std::{
        io::{ErrorKind, Read},
        net::TcpStream,
        time::{Duration, Instant},
    };
    // This test's own end needs 4,000 descriptors and more.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )
    .expect("raise this test's open-file limit");
    let studio = Studio::start_with_open_files(1024);
    let mut idle = Vec::new();
    for addr in [studio.daemon_addr, studio.app_addr] {
        for _ in 0..2000 {
            idle.push(TcpStream::connect(addr).expect("the kernel takes the connection"));
        }
    }
    for addr in [studio.daemon_addr, studio.app_addr] {
        let started = Instant::now();
        let (status, body) = raw_request(
            addr,
            &format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(status, 200, "{addr} answered {status}: {body}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{addr} took {:?}",
            started.elapsed()
        );
    }
    // Every idle connection is let go: evicted, or closed for sending no request head.
    let deadline = Instant::now() + Duration::from_secs(20);
    for mut conn in idle {
        conn.set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        ))
        .expect("timeout");
        let mut byte = [0u8; 1];
        match conn.read(&mut byte) {
            Ok(0) => {}
            Ok(_) => panic!("an idle connection got an answer"),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("an idle connection was held past the header timeout")
            }
            Err(_) => {} // reset: closed while unread bytes were pending
        }
    }
}
