//! The proxy against a small axum upstream on 127.0.0.1:0.

use std::{collections::BTreeMap, convert::Infallible, net::SocketAddr, time::Instant};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    response::IntoResponse,
    routing::any,
};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use studio_contract::time::now_ms;

use super::*;

/// Echoes method, target, headers (all values of each) and body.
async fn echo(req: Request) -> Json<Value> {
    let (parts, body) = req.into_parts();
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in &parts.headers {
        headers
            .entry(k.as_str().to_owned())
            .or_default()
            .push(v.to_str().unwrap_or("<bin>").to_owned());
    }
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Json(json!({
        "method": parts.method.as_str(),
        "target": parts.uri.to_string(),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    }))
}

/// An event stream that sends one event and then stays open.
async fn events() -> Response {
    let first = futures_util::stream::once(async {
        Ok::<_, Infallible>(Bytes::from_static(b"data: one\n\n"))
    });
    let stream = futures_util::StreamExt::chain(first, futures_util::stream::pending());
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

pub(crate) async fn upstream() -> SocketAddr {
    let app = Router::new()
        .route("/api/events", any(events))
        .route(
            "/api/slow",
            any(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        )
        .fallback(echo);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn browser_request() -> Request {
    Request::builder()
        .method(Method::POST)
        .uri("/api/runs?limit=5")
        .header(header::HOST, "127.0.0.1:8765")
        .header(header::ORIGIN, "http://127.0.0.1:8765")
        .header(header::COOKIE, "studio_admission=sta_cookie; other=1")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONNECTION, "x-private")
        .header("x-private", "drop me")
        .header(forward::ORIGIN_HEADER, "http://evil.example")
        .header(forward::SIGNATURE_HEADER, "1.deadbeef")
        .header("x-studio-forwarded-other", "x")
        .header(studio_contract::DECISION_HEADER, "std_d")
        .body(Body::from(r#"{"a":1}"#))
        .expect("request")
}

/// What the echo upstream saw of [`browser_request`] sent through `proxy` with the
/// cookie's bearer.
async fn echoed(proxy: &Proxy) -> Value {
    let upstream_req = proxy
        .rewrite(browser_request(), "sta_cookie", now_ms())
        .expect("rewrite");
    let response = proxy.send(upstream_req).await.expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    serde_json::from_slice(&body).expect("json")
}

#[tokio::test]
async fn rewrites_headers_and_signs_the_origin() {
    let key = AppKey::generate();
    let addr = upstream().await;
    let proxy = Proxy::new(addr, None, key.clone(), Duration::from_secs(5));
    let seen = echoed(&proxy).await;
    let h = &seen["headers"];
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["target"], "/api/runs?limit=5");
    assert_eq!(seen["body"], r#"{"a":1}"#);
    assert_eq!(h["host"], json!([addr.to_string()]));
    assert_eq!(h["authorization"], json!(["Bearer sta_cookie"]));
    assert_eq!(h["x-studio-decision-token"], json!(["std_d"]));
    assert_eq!(h["content-type"], json!(["application/json"]));
    assert!(
        h.get("cookie").is_none(),
        "cookies must not reach the daemon"
    );
    assert!(
        h.get("x-private").is_none(),
        "connection-named headers are hop-by-hop"
    );
    assert!(h.get("x-studio-forwarded-other").is_none());
    assert_eq!(h[forward::ORIGIN_HEADER], json!(["http://127.0.0.1:8765"]));
    let sig = h[forward::SIGNATURE_HEADER][0]
        .as_str()
        .expect("one signature");
    assert!(forward::verify(
        &key,
        sig,
        now_ms(),
        "POST",
        "/api/runs?limit=5",
        "http://127.0.0.1:8765"
    ));
}

#[tokio::test]
async fn no_origin_is_forwarded_as_empty_and_signed() {
    let key = AppKey::generate();
    let addr = upstream().await;
    let proxy = Proxy::new(addr, None, key.clone(), Duration::from_secs(5));
    let req = Request::builder()
        .uri("/api/identity")
        .header(header::AUTHORIZATION, "Bearer client-token")
        .body(Body::empty())
        .expect("request");
    let response = proxy
        .send(
            proxy
                .rewrite(req, "client-token", now_ms())
                .expect("rewrite"),
        )
        .await
        .expect("response");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let seen: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(seen["headers"][forward::ORIGIN_HEADER], json!([""]));
    let sig = seen["headers"][forward::SIGNATURE_HEADER][0]
        .as_str()
        .expect("signature");
    assert!(forward::verify(
        &key,
        sig,
        now_ms(),
        "GET",
        "/api/identity",
        ""
    ));
}

#[tokio::test]
async fn event_streams_pass_through_unbuffered() {
    let addr = upstream().await;
    let proxy = Proxy::new(addr, None, AppKey::generate(), Duration::from_secs(5));
    let req = Request::builder()
        .uri("/api/events")
        .body(Body::empty())
        .expect("request");
    let response = proxy
        .send(proxy.rewrite(req, "t", now_ms()).expect("rewrite"))
        .await
        .expect("headers arrive while the stream stays open");
    let mut body = response.into_body();
    let frame = tokio::time::timeout(Duration::from_secs(2), body.frame())
        .await
        .expect("the first event arrives before the stream ends")
        .expect("a frame")
        .expect("no error");
    assert_eq!(frame.into_data().expect("data"), "data: one\n\n");
}

/// The code `proxy` refuses a bodiless GET of `path` with (it must refuse it).
async fn refusal(proxy: &Proxy, path: &str) -> Code {
    let req = Request::builder()
        .uri(path)
        .body(Body::empty())
        .expect("request");
    let upstream = proxy.rewrite(req, "t", now_ms()).expect("rewrite");
    proxy.send(upstream).await.expect_err("refused").code
}

#[tokio::test]
async fn a_silent_or_absent_daemon_is_unavailable() {
    let addr = upstream().await;
    let proxy = Proxy::new(addr, None, AppKey::generate(), Duration::from_millis(300));
    let started = Instant::now();
    assert_eq!(refusal(&proxy, "/api/slow").await, Code::DaemonUnavailable);
    assert!(started.elapsed() < Duration::from_secs(2));

    // Nothing listens on a port we just released.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let proxy = Proxy::new(closed, None, AppKey::generate(), Duration::from_millis(300));
    assert_eq!(
        refusal(&proxy, "/api/identity").await,
        Code::DaemonUnavailable
    );
}

#[test]
fn only_what_studiod_serves_is_forwarded() {
    use studio_api::routes::proxied;
    for owned in [
        "/api/identity",
        "/api/studio/disconnect",
        "/api/studio/sessions/abc",
        "/api/schedules",
        "/api/schedules/x/runs",
        "/api/runs",
        "/api/events",
        "/api/declarations/plan",
        "/api/openapi.json",
    ] {
        assert!(proxied(owned), "{owned}");
    }
    for not in [
        "/api/studio/pair",
        "/api/studio",
        "/api/app/session",
        "/api/identityx",
        "/api/runsx",
        "/api/runs/",
        "/api/tasks/1/attempts",
        "/api/approvals/a1/consume",
        "/api/admin/checkpoint",
        "/api",
        "/",
        "/health",
    ] {
        assert!(!proxied(not), "{not}");
    }
}

#[tokio::test]
async fn over_the_daemons_socket_the_same_request_arrives() {
    let dir = std::env::temp_dir().join(format!("studio-app-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("api.sock");
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    tokio::spawn(async move { axum::serve(listener, Router::new().fallback(echo)).await });
    // The TCP address still names studiod in the URI and `Host`; nothing listens there.
    let named: SocketAddr = "127.0.0.1:9".parse().expect("addr");
    let key = AppKey::generate();
    let proxy = Proxy::new(
        named,
        Some(path.clone()),
        key.clone(),
        Duration::from_secs(5),
    );
    for _ in 0..2 {
        let seen = echoed(&proxy).await;
        assert_eq!(seen["target"], "/api/runs?limit=5");
        assert_eq!(seen["headers"]["host"], json!(["127.0.0.1:9"]));
        assert_eq!(
            seen["headers"]["authorization"],
            json!(["Bearer sta_cookie"])
        );
        assert_eq!(seen["body"], r#"{"a":1}"#);
    }

    // A daemon that is gone (no socket file) is unavailable, not an error of the caller.
    std::fs::remove_file(&path).expect("remove");
    let proxy = Proxy::new(named, Some(path), key, Duration::from_millis(300));
    assert_eq!(
        refusal(&proxy, "/api/identity").await,
        Code::DaemonUnavailable
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// studiod closes a keep-alive connection idle for its header timeout; the pool lets one
/// go sooner, so a request sent just as studiod closes the old one still goes through.
#[tokio::test]
async fn a_connection_the_daemon_is_closing_for_idleness_is_never_reused() {
    let header_timeout = Duration::from_millis(300);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let limits = studio_frontdoor::Limits {
        max_connections: 16,
        header_timeout,
    };
    let router = Router::new().fallback(echo);
    tokio::spawn(studio_frontdoor::serve(
        studio_frontdoor::Lanes::here(),
        listener,
        None,
        router,
        limits,
        std::future::pending(),
    ));
    let proxy = Proxy::pooled(
        addr,
        None,
        AppKey::generate(),
        Duration::from_secs(5),
        header_timeout / 2,
    );
    // Pauses around the moment studiod closes the connection the last request used.
    for pause_ms in (270..=330).step_by(5) {
        let seen = echoed(&proxy).await;
        assert_eq!(seen["target"], "/api/runs?limit=5");
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    }
    echoed(&proxy).await;
}

/// An upstream whose first connection reads a request and closes without answering, as
/// studiod does with a connection its cap evicts; later ones answer `{}`. Counts the
/// connections it accepted.
async fn drops_the_first_connection() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let n = count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => seen.extend_from_slice(&buf[..k]),
                    }
                }
                if n > 0 {
                    let _ = stream
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                              content-length: 2\r\nconnection: close\r\n\r\n{}",
                        )
                        .await;
                }
            });
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn a_repeatable_request_is_sent_again_when_its_connection_fails() {
    use std::sync::atomic::Ordering;
    let (addr, accepted) = drops_the_first_connection().await;
    let proxy = Proxy::new(addr, None, AppKey::generate(), Duration::from_secs(5));
    let delete = Request::builder()
        .method(Method::DELETE)
        .uri("/api/schedules/x")
        .body(Body::empty())
        .expect("request");
    let upstream = proxy.rewrite(delete, "t", now_ms()).expect("rewrite");
    let response = proxy
        .send(upstream)
        .await
        .expect("answered the second time");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);

    // A request with a body is never sent twice: the caller hears the daemon failed.
    let (addr, accepted) = drops_the_first_connection().await;
    let proxy = Proxy::new(addr, None, AppKey::generate(), Duration::from_secs(5));
    let post = Request::builder()
        .method(Method::POST)
        .uri("/api/schedules/x/trigger")
        .body(Body::from("{}"))
        .expect("request");
    let upstream = proxy.rewrite(post, "t", now_ms()).expect("rewrite");
    let refused = proxy.send(upstream).await.expect_err("not repeated");
    assert_eq!(refused.code, Code::DaemonUnavailable);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}
